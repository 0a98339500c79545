# SPDX-License-Identifier: GPL-2.0
# dm-lbs: build the module for the guest kernel, the emulator, and run things.

TOP := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
# Headers of the kernel the module is for: the running one when it has
# them, else the newest Debian linux-headers-*-amd64 installed.
KDIR ?= $(firstword $(wildcard /lib/modules/$(shell uname -r)/build) \
	  $(lastword $(sort $(wildcard /usr/src/linux-headers-*-amd64))))
MODULE := drivers/md/dm-lbs.ko
SOURCES := $(filter-out %.mod.c,$(wildcard drivers/md/*.c drivers/md/*.h include/*.h))
CHECKPATCH_DIR := $(TOP)/build/checkpatch

DEB_PACKAGES := qemu-system-x86 qemu-utils linux-image-amd64 linux-headers-amd64 \
	busybox-static cpio kmod dmsetup nbdkit nbdkit-plugin-dev nbd-client \
	libnbd-bin fio sg3-utils e2fsprogs xfsprogs udftools xorriso gnuplot-nox \
	linux-source sparse gcc make perl xz-utils python3-libnbd libpod-markdown-perl
MISSING = $(shell dpkg-query -W -f='$${Package} $${Status}\n' $(DEB_PACKAGES) 2>/dev/null | \
	awk '$$NF != "installed" {print $$1}'; for p in $(DEB_PACKAGES); do \
	dpkg-query -W $$p >/dev/null 2>&1 || echo $$p; done)

.PHONY: all module emulator deps sparse checkpatch style check demo clean

all: module emulator

module: $(MODULE)

$(MODULE): $(SOURCES) Kbuild drivers/md/Kbuild
	@test -d "$(KDIR)" || { echo "no kernel headers: run 'make deps'"; exit 1; }
	$(MAKE) -C $(KDIR) M=$(TOP)/drivers/md modules

emulator:
	$(MAKE) -C emulator

# Idempotent: installs only what is missing.
deps:
	@missing="$(strip $(MISSING))"; \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q --no-install-recommends $$missing; \
	fi

sparse:
	$(MAKE) -C $(KDIR) M=$(TOP)/drivers/md C=2 CF="-D__CHECK_ENDIAN__" modules 2>&1 | \
		tee build/sparse.log; ! grep -E 'warning|error' build/sparse.log

$(CHECKPATCH_DIR)/scripts/checkpatch.pl:
	mkdir -p $(CHECKPATCH_DIR)
	tar xJf $$(ls /usr/src/linux-source-*.tar.xz | tail -1) -C $(CHECKPATCH_DIR) \
		--strip-components=1 --wildcards '*/scripts/checkpatch.pl' \
		'*/scripts/spelling.txt' '*/scripts/const_structs.checkpatch'

checkpatch: $(CHECKPATCH_DIR)/scripts/checkpatch.pl
	$(CHECKPATCH_DIR)/scripts/checkpatch.pl --no-tree --strict --terse \
		--ignore FILE_PATH_CHANGES -f $(filter-out include/%,$(SOURCES))
	@# The compat header exists to test kernel versions.
	$(CHECKPATCH_DIR)/scripts/checkpatch.pl --no-tree --strict --terse \
		--ignore LINUX_VERSION_CODE,CONSTANT_COMPARISON -f $(filter include/%,$(SOURCES))

style: checkpatch sparse

# make check [T=group/NNN]: the guest test suite (each scenario in a fresh VM).
check: deps all
	$(MAKE) -C emulator check
	tests/run $(T)

demo: deps all
	tests/demo

clean:
	$(MAKE) -C $(KDIR) M=$(TOP)/drivers/md clean
	$(MAKE) -C emulator clean
	rm -rf build results

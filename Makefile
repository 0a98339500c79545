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
# What the debug kernel's build needs beyond DEB_PACKAGES (make debug-kernel).
KBUILD_PACKAGES := flex bison bc libelf-dev libssl-dev
missing = $(shell dpkg-query -W -f='$${Package} $${Status}\n' $(1) 2>/dev/null | \
	awk '$$NF != "installed" {print $$1}'; for p in $(1); do \
	dpkg-query -W $$p >/dev/null 2>&1 || echo $$p; done)
# $(call apt_install,PACKAGES): apt-get only those not yet installed.
apt_install = @missing="$(strip $(call missing,$(1)))"; \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q --no-install-recommends $$missing; \
	fi

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
	$(call apt_install,$(DEB_PACKAGES))

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
# KERNEL=debug: on the debug kernel (make debug-kernel), see below.
check: deps all
	$(MAKE) -C emulator check
	$(CHECK_ENV) tests/run $(CHECK_ARGS) $(T)
	@# The small benchmark run keeps its harness working (not with T= or KERNEL=).
	$(if $(T)$(KERNEL),,bench/run --quick)

# The debug kernel: Debian's linux-source with KASAN, lockdep and fault
# injection (debug/debug.config), built in build/debug-kernel/ and rebuilt
# only when the fragment, debug/build-kernel or the source package change.
# The module is built against it in build/debug-module/ (the production
# drivers/md/dm-lbs.ko is left alone).  docs/testing.md has the numbers.
DEBUG_KDIR := $(TOP)/build/debug-kernel
DEBUG_MDIR := $(TOP)/build/debug-module
DEBUG_KO := $(DEBUG_MDIR)/drivers/md/dm-lbs.ko
# Under TCG the debug kernel runs several times slower: scenario timeouts
# are stretched by this factor.  It boots from its bzImage: the PVH entry
# dies silently before the console with KASAN.  No 5-level paging: with
# LA57 (which -cpu max offers) this kernel's KASAN reports a wild access in
# every early interrupt, tens of thousands of reports before init.
DEBUG_TIMEOUT_SCALE ?= 4
DEBUG_ENV = MODULES_DIR=$(DEBUG_KDIR)/mod/lib/modules/$$(cat $(DEBUG_KDIR)/version) \
	VM_NO_PVH=1 VM_CPU=max,la57=off LBS_KO=$(DEBUG_KO) \
	TIMEOUT_SCALE=$(DEBUG_TIMEOUT_SCALE) \
	VM_APPEND="nbd.nbds_max=16 nbd.max_part=0 kasan_multi_shot $(DEBUG_APPEND)"

.PHONY: debug-kernel debug-module check-debug
debug-kernel: deps
	$(call apt_install,$(KBUILD_PACKAGES))
	debug/build-kernel

debug-module: debug-kernel
	mkdir -p $(DEBUG_MDIR)/drivers/md $(DEBUG_MDIR)/include
	cp -p Kbuild $(DEBUG_MDIR)/
	cp -p drivers/md/Kbuild $(filter drivers/md/%,$(SOURCES)) $(DEBUG_MDIR)/drivers/md/
	cp -p $(filter include/%,$(SOURCES)) $(DEBUG_MDIR)/include/
	$(MAKE) -C $(DEBUG_KDIR)/obj M=$(DEBUG_MDIR)/drivers/md modules

ifeq ($(KERNEL),debug)
check: debug-module
CHECK_ENV = $(DEBUG_ENV)
CHECK_ARGS = -k $(DEBUG_KDIR)/bzImage
endif

# The fault-injection scenarios (tests/debug, not in the default suite) on
# the debug kernel, with kmemleak on.
check-debug: DEBUG_APPEND = kmemleak=on
check-debug: deps all debug-module
	$(DEBUG_ENV) tests/run -k $(DEBUG_KDIR)/bzImage $(or $(T),debug)

demo: deps all
	tests/demo

# make bench [QUICK=1]: lbs against dm-ebs, nbdkit's blocksize filter and the
# drive's own RMW in one guest boot; rewrites docs/benchmarks.md and
# docs/bench/ (QUICK=1: small, under build/bench/quick/, docs untouched).
.PHONY: bench
bench: deps all
	KDIR=$(KDIR) bench/run $(if $(QUICK),--quick)

clean:
	$(MAKE) -C $(KDIR) M=$(TOP)/drivers/md clean
	$(MAKE) -C emulator clean
	rm -rf build results

# make soak [LBS_SOAK_MINUTES=N]: 30+ minutes of mixed load with periodic
# verification in one guest (tests/soak, not part of `make check`).
.PHONY: soak
soak: deps all
	tests/run soak

# The unit-discovery helper for optical and other big-block devices
# (docs/optical.md): make install-tools [PREFIX=/usr/local] [DESTDIR=...]
PREFIX ?= /usr/local
.PHONY: install-tools
install-tools:
	install -D -m 0755 tools/lbs-setup $(DESTDIR)$(PREFIX)/sbin/lbs-setup

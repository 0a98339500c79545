# SPDX-License-Identifier: GPL-2.0
# dm-lbs: build the module for the guest kernel, the emulator, and run things.

TOP := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
# The kernel the module is built and tested for: a series (6.1, 6.12, 7) or
# a full Debian kernel version.  The default is 6.12, what Debian stable
# runs, whatever other headers the host has; kernels/get resolves a series
# to its newest Debian kernel and unpacks it into build/kernels/<version>/.
# The module for kernel V lands at build/V/dm-lbs.ko.
KVER ?= 6.12
export KVER
# The kernels `make kernels`, `make style` and `make check-kernels` cover.
KVERS ?= 6.1 6.12 7
# What `make check-kernels` runs on each kernel but the default one: the
# basic, lbs, fs, powercut and native groups less what does not depend on
# the kernel (table parsing, lbs/004) or repeats another scenario's path
# at length (xfs in lbs/003, the segment limits of lbs/006 and lbs/008,
# fs/002's mmap, the host-side cuts of powercut/003 and log replays of
# powercut/004), so that CI's run fits its time; powercut/001 cuts at 6
# points instead of 16.  `make check KVER=...` runs everything.
CORE_TESTS ?= basic lbs/001 lbs/002 lbs/005 lbs/007 lbs/009 fs/001 \
	powercut/001 powercut/002 native
CORE_ENV ?= LBS_POWERCUT_CUTS=6
# Kernels of KVERS on which `make check-kernels` runs the whole default
# suite instead (e.g. FULL_KVERS=7); none by default, so that CI fits.
FULL_KVERS ?=
GET := $(TOP)/kernels/get
SOURCES := $(filter-out %.mod.c,$(wildcard drivers/md/*.c drivers/md/*.h include/*.h))
CHECKPATCH_DIR := $(TOP)/build/checkpatch

# Guest kernels, their headers and the gcc-14 build root come from
# kernels/get and kernels/buildroot, not from this list.
DEB_PACKAGES := qemu-system-x86 qemu-utils \
	busybox-static cpio kmod dmsetup fdisk nbdkit nbdkit-plugin-dev nbd-client \
	libnbd-bin fio sg3-utils e2fsprogs xfsprogs udftools xorriso gnuplot-nox \
	linux-source-6.1 linux-source-6.12 sparse gcc make perl xz-utils zstd \
	python3-libnbd libpod-markdown-perl mmdebstrap dosfstools systemd udev
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
# $(call each_kernel,COMMAND): COMMAND with $$v set to each of KVERS's versions.
each_kernel = set -e; for s in $(KVERS); do v=$$($(GET) version $$s); $(1); done

.PHONY: all module kernels modules emulator deps sparse checkpatch style \
	check check-kernels demo clean

all: module emulator

# Unpack KVER's kernel, get its headers, build dm-lbs.ko for it.
module: deps
	@v=$$($(GET) version $(KVER)) && $(GET) fetch $$v && \
		$(TOP)/kernels/module $$v && echo "built build/$$v/dm-lbs.ko"

kernels: deps
	$(call each_kernel,$(GET) fetch $$v)

modules: kernels
	$(call each_kernel,$(TOP)/kernels/module $$v)

emulator:
	$(MAKE) -C emulator

# Idempotent: installs only what is missing.
deps:
	$(call apt_install,$(DEB_PACKAGES))

# sparse and a W=1 build from clean, for each of KVERS: any warning fails.
sparse: kernels
	$(call each_kernel,$(TOP)/kernels/module $$v --check)

$(CHECKPATCH_DIR)/scripts/checkpatch.pl:
	mkdir -p $(CHECKPATCH_DIR)
	tar xJf $$(ls /usr/src/linux-source-*.tar.xz | sort -V | tail -1) -C $(CHECKPATCH_DIR) \
		--strip-components=1 --wildcards '*/scripts/checkpatch.pl' \
		'*/scripts/spelling.txt' '*/scripts/const_structs.checkpatch'

checkpatch: $(CHECKPATCH_DIR)/scripts/checkpatch.pl
	$(CHECKPATCH_DIR)/scripts/checkpatch.pl --no-tree --strict --terse \
		--ignore FILE_PATH_CHANGES -f $(filter-out include/%,$(SOURCES))
	@# The compat header exists to test kernel versions.
	$(CHECKPATCH_DIR)/scripts/checkpatch.pl --no-tree --strict --terse \
		--ignore LINUX_VERSION_CODE,CONSTANT_COMPARISON -f $(filter include/%,$(SOURCES))

style: checkpatch sparse

# make check [T=group/NNN] [KVER=...]: the guest test suite (each scenario
# in a fresh VM) on one kernel.  KERNEL=debug: on the debug kernel (make
# debug-kernel), see below.
check: deps all
	$(MAKE) -C emulator check
	$(CHECK_ENV) tests/run $(CHECK_ARGS) $(T)
	@# The small benchmark run keeps its harness working (not with T= or KERNEL=).
	$(if $(T)$(KERNEL),,bench/run --quick)

# On every kernel of KVERS but KVER (CI runs the whole suite on KVER with
# `make check`): the whole suite on FULL_KVERS, the core scenarios on the
# others.
check-kernels: deps emulator modules
	@set -e; def=$$($(GET) version $(KVER)); fail=; \
	full=$$(for s in $(FULL_KVERS); do $(GET) version $$s; done); \
	for s in $(KVERS); do v=$$($(GET) version $$s); \
		[ "$$v" = "$$def" ] && continue; \
		if echo "$$full" | grep -qxF "$$v"; then \
			echo "== $$v: the whole suite"; \
			KVER=$$v tests/run -o results/kernels/$$v || fail="$$fail $$v"; \
		else \
			echo "== $$v: $(CORE_TESTS)"; \
			KVER=$$v $(CORE_ENV) tests/run -o results/kernels/$$v \
				$(CORE_TESTS) || fail="$$fail $$v"; \
		fi; \
	done; [ -z "$$fail" ] || { echo "check-kernels failed on:$$fail"; exit 1; }

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
	bench/run $(if $(QUICK),--quick)

# Keeps the unpacked kernels and the build root (build/kernels, build/trixie-root).
clean:
	$(MAKE) -C emulator clean
	rm -rf results $(filter-out $(TOP)/build/kernels $(TOP)/build/trixie-root,$(wildcard $(TOP)/build/*))

# make soak [LBS_SOAK_MINUTES=N]: 30+ minutes of mixed load with periodic
# verification in one guest (tests/soak, not part of `make check`).
.PHONY: soak
soak: deps all
	tests/run soak

# lbs-setup, the lbstab generator, the udev rule and their man pages
# (docs/optical.md, lbstab(5)): make install-tools [PREFIX=/usr/local]
# [DESTDIR=...].  With PREFIX=/usr (the lbs-tools package) the generator
# and the rule go where systemd and udev keep their own; below /usr/local,
# where they look for the administrator's.
PREFIX ?= /usr/local
VERSION := $(shell sed -n 's/.*\.version.*{\([0-9]*\), *\([0-9]*\), *\([0-9]*\)}.*/\1.\2.\3/p' drivers/md/dm-lbs-target.c)
ifeq ($(PREFIX),/usr)
GENERATORDIR ?= $(or $(shell pkg-config --variable=systemdsystemgeneratordir systemd 2>/dev/null),/lib/systemd/system-generators)
UDEVRULESDIR ?= $(or $(shell pkg-config --variable=udevdir udev 2>/dev/null),/lib/udev)/rules.d
else
GENERATORDIR ?= $(PREFIX)/lib/systemd/system-generators
UDEVRULESDIR ?= /etc/udev/rules.d
endif
MANDIR ?= $(PREFIX)/share/man
# The pages' date: dpkg-buildpackage's SOURCE_DATE_EPOCH (the changelog's),
# else the last commit's, so that a rebuild gives the same pages.
DOC_DATE := $(shell if [ -n "$$SOURCE_DATE_EPOCH" ]; then date -u -d @$$SOURCE_DATE_EPOCH +%F; \
	else git log -1 --format=%cs 2>/dev/null || date -u +%F; fi)
POD2MAN = pod2man --center=dm-lbs --release=$(VERSION) --date=$(DOC_DATE)
.PHONY: install-tools
install-tools:
	install -D -m 0755 tools/lbs-setup $(DESTDIR)$(PREFIX)/sbin/lbs-setup
	install -d $(DESTDIR)$(GENERATORDIR) $(DESTDIR)$(UDEVRULESDIR) \
		$(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8
	sed 's|/usr/sbin/lbs-setup|$(PREFIX)/sbin/lbs-setup|' tools/lbs-generator \
		>$(DESTDIR)$(GENERATORDIR)/lbs-generator
	chmod 0755 $(DESTDIR)$(GENERATORDIR)/lbs-generator
	sed 's|/usr/sbin/lbs-setup|$(PREFIX)/sbin/lbs-setup|' tools/udev/69-lbs.rules \
		>$(DESTDIR)$(UDEVRULESDIR)/69-lbs.rules
	chmod 0644 $(DESTDIR)$(UDEVRULESDIR)/69-lbs.rules
	$(POD2MAN) --section=8 --name=LBS-SETUP tools/lbs-setup.8.pod \
		>$(DESTDIR)$(MANDIR)/man8/lbs-setup.8
	$(POD2MAN) --section=8 --name=LBS-GENERATOR tools/lbs-generator.8.pod \
		>$(DESTDIR)$(MANDIR)/man8/lbs-generator.8
	$(POD2MAN) --section=5 --name=LBSTAB tools/lbstab.5.pod \
		>$(DESTDIR)$(MANDIR)/man5/lbstab.5

# DKMS (dkms.conf): the module's sources in /usr/src/dm-lbs-VERSION/, as
# the dm-lbs-dkms package installs them (make dkms-sources DESTDIR=...);
# dkms-install registers them and builds and installs the module for every
# kernel with headers in /lib/modules/*/build, dkms-remove undoes it.
DKMS_SRC = $(DESTDIR)/usr/src/dm-lbs-$(VERSION)
.PHONY: dkms-sources dkms-install dkms-remove
dkms-sources:
	@v=$$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' dkms.conf); [ "$$v" = "$(VERSION)" ] || \
		{ echo "dkms.conf says $$v, dm-lbs-target.c $(VERSION)"; exit 1; }
	install -d $(DKMS_SRC)/drivers/md $(DKMS_SRC)/include
	install -m 0644 dkms.conf Kbuild $(DKMS_SRC)/
	install -m 0644 drivers/md/Kbuild $(filter drivers/md/%,$(SOURCES)) $(DKMS_SRC)/drivers/md/
	install -m 0644 $(filter include/%,$(SOURCES)) $(DKMS_SRC)/include/

dkms-install: dkms-sources
	$(call apt_install,dkms)
	dkms status -m dm-lbs -v $(VERSION) | grep -q . || dkms add -m dm-lbs -v $(VERSION)
	@set -e; for b in /lib/modules/*/build; do k=$${b#/lib/modules/}; k=$${k%/build}; \
		[ -e $$b/Makefile ] || continue; \
		r=0; dkms install -m dm-lbs -v $(VERSION) -k $$k || r=$$?; \
		case $$r in 0) ;; 77) echo "dm-lbs: $$k is not a supported kernel, skipped";; *) exit $$r;; esac; \
	done
	dkms status -m dm-lbs

dkms-remove:
	dkms status -m dm-lbs -v $(VERSION) | grep -q . && dkms remove -m dm-lbs -v $(VERSION) --all || true
	rm -rf $(DKMS_SRC)

# make deb: the Debian packages (debian/): dm-lbs-dkms, lbs-tools and
# nbdkit-bigsector-filter, built from a copy of the tracked files in
# build/deb/ (the .debs land there), then checked with lintian.
# make check-packages: builds them, installs them on this machine, checks
# what DKMS built for each kernel, the filter found by name and the man
# pages, boots the default kernel with the DKMS-built module (modprobe, and
# dm's own on-demand loading), then purges them.  docs/packaging.md.
DEB_BUILD_PACKAGES := debhelper dh-dkms dkms dpkg-dev lintian pkg-config \
	nbdkit-plugin-dev fakeroot
.PHONY: deb check-packages
deb:
	$(call apt_install,$(DEB_BUILD_PACKAGES))
	rm -rf build/deb && mkdir -p build/deb/dm-lbs-$(VERSION)
	if git rev-parse --git-dir >/dev/null 2>&1; then \
		git ls-files -z | xargs -0 cp -a --parents -t build/deb/dm-lbs-$(VERSION); \
	else \
		tar -c --exclude=./build --exclude=./results . | tar -x -C build/deb/dm-lbs-$(VERSION); \
	fi
	cd build/deb/dm-lbs-$(VERSION) && dpkg-buildpackage -us -uc -b
	lintian --info --display-info --fail-on error build/deb/dm-lbs_$(VERSION)_*.changes \
		| tee build/deb/lintian.log
	@ls build/deb/*.deb

check-packages: deps all deb
	tests/check-packages build/deb

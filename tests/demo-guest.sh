#!/bin/bash
# The demo, run inside the guest by tests/demo.
set -eu
trap 'echo "demo: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/tests/lib/guest.sh"
filter=$top/emulator/nbdkit-bigsector-filter.so
stats=/tmp/bigsector.stats

lbs_load
if [[ -f $filter ]]; then
	echo "== device: nbdkit memory disk behind the bigsector filter, profile disk64k (strict 64 KiB units)"
	dev=$(nbd_start disk 512M "--filter=$filter" bigsector-profile=disk64k "bigsector-stats=$stats")
else
	echo "== device: nbdkit memory disk behind blocksize-policy (strict 64 KiB units)"
	dev=$(nbd_start disk 512M)
fi
sectors=$(blockdev --getsz "$dev")
table="0 $sectors lbs $dev 0 65536"
echo "== dmsetup create demo --table \"$table\""
dmsetup create demo --table "$table"
dmsetup mknodes >/dev/null 2>&1 || true
echo "== /dev/mapper/demo: logical $(blockdev --getss /dev/mapper/demo) B, physical $(blockdev --getpbsz /dev/mapper/demo) B, io_opt $(blockdev --getioopt /dev/mapper/demo) B"
mkfs.ext4 -q -F /dev/mapper/demo
mkdir -p /tmp/mnt
mount /dev/mapper/demo /tmp/mnt
echo "== copying /usr/include/linux into the file system"
cp -a /usr/include/linux /tmp/mnt/
head -c 20M /dev/urandom >/tmp/mnt/random.bin
sync
umount /tmp/mnt
fsck.ext4 -fn /dev/mapper/demo >/dev/null && echo "== fsck: clean"
dmsetup message demo 0 drop_cache
mount /dev/mapper/demo /tmp/mnt
diff -r /usr/include/linux /tmp/mnt/linux && echo "== tree: byte-identical after remount"
umount /tmp/mnt
echo "== dmsetup status demo"
dmsetup status demo
echo "   fields: blocks_cached blocks_dirty passthrough_reads passthrough_writes cache_hits"
echo "           cache_misses partial_writes gathered_writes rmw_reads lower_read_bytes"
echo "           lower_write_bytes alloc_fallbacks lower_errors cache_writes writeback_errors"
echo "           passthrough_bounced map_deferred tail_writes"
dmsetup remove demo
nbd_stop disk
if [[ -f $stats ]]; then
	echo "== the device's own counts ($stats)"
	cat "$stats"
fi
lbs_unload

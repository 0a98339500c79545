#!/bin/bash
# native-guest.sh - in a 7.x guest (bench/native): file systems directly on
# native big-sector devices against the same file systems through lbs, on
# the emulator's strict devices.  Each contender gets a fresh device and
# unpacks the benchmark's tree, then syncs; the device's own counters give
# the bytes, the wall clock the time.  Writes $RESULTS/native.csv.
set -uo pipefail
cd "$REPO" || exit 1
. tests/lib/guest.sh
FILTER=$REPO/emulator/nbdkit-bigsector-filter.so
TREE=${LBS_BENCH_TREE:?LBS_BENCH_TREE: the tree tarball}
REPS=${LBS_BENCH_REPS:-3}
modprobe nbd nbds_max=16 max_part=0
modprobe dm-mod
insmod "$LBS_KO" || exit 1
out=$RESULTS/native.csv
echo "unit,contender,rep,seconds,write_bytes,read_bytes,user_bytes" >"$out"
user=$(tar tvf "$TREE" | awk '{s += $3} END {print s}')

# run UNIT NAME HOW(direct|lbs) REP MKFS...: one contender, one repetition.
# A failure is recorded as a row with seconds "failed" and cleaned up, so
# the others still run.
run() {
	local unit=$1 name=$2 how=$3 rep=$4 dev target t0 t1 w r secs
	shift 4
	# 512 MiB: mkfs.xfs wants more than 300 MB.
	dev=$(NBD_BLOCK_SIZE=$unit nbd_start nb 512M "--filter=$FILTER" bigsector-unit="$unit" \
		bigsector-mode=strict bigsector-stats=/tmp/nb.stats) || return 1
	target=$dev
	if [[ $how == lbs ]]; then
		dmsetup create nb --table "0 $(blockdev --getsz "$dev") lbs $dev 0 $unit" || return 1
		target=/dev/mapper/nb
	fi
	secs=failed
	if ! "$@" "$target" >/tmp/mkfs.log 2>&1; then
		echo "$name: $* failed: $(head -n 1 /tmp/mkfs.log)" | tee -a "$RESULTS/failures" >&2
	elif ! { mkdir -p /tmp/m && mount "$target" /tmp/m; }; then
		echo "$name: mount failed: $(dmesg | tail -n 1)" | tee -a "$RESULTS/failures" >&2
	else
		sync
		kill -USR1 "$(cat "$LBS_STATE/nbd/nb.pid")"; sleep 1
		w=$(bigsector_stat /tmp/nb.stats write.bytes) r=$(bigsector_stat /tmp/nb.stats read.bytes)
		t0=$(date +%s.%N)
		tar xf "$TREE" -C /tmp/m && sync
		t1=$(date +%s.%N)
		secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
		umount /tmp/m
	fi
	[[ $how == lbs ]] && dmsetup remove nb
	nbd_stop nb
	if [[ $secs == failed ]]; then
		echo "$unit,$name,$rep,failed,0,0,$user" >>"$out"
	else
		echo "$unit,$name,$rep,$secs,$(($(bigsector_stat /tmp/nb.stats write.bytes) - w)),$(($(bigsector_stat /tmp/nb.stats read.bytes) - r)),$user" >>"$out"
	fi
}

# Names without commas: they are CSV fields.
for rep in $(seq 1 "$REPS"); do
	run 65536 "ext4 64 KiB blocks directly" direct "$rep" mkfs.ext4 -q -F -b 65536
	run 65536 "xfs 64 KiB sectors directly" direct "$rep" mkfs.xfs -q -f -b size=65536 -s size=65536
	run 65536 "ext4 4 KiB blocks through lbs" lbs "$rep" mkfs.ext4 -q -F -b 4096
	run 65536 "xfs 4 KiB blocks through lbs" lbs "$rep" mkfs.xfs -q -f -s size=4096
	run 32768 "xfs 64 KiB blocks directly" direct "$rep" mkfs.xfs -q -f -b size=65536 -s size=32768
	run 32768 "xfs 32 KiB blocks directly" direct "$rep" mkfs.xfs -q -f -b size=32768 -s size=32768
	run 32768 "xfs 4 KiB blocks through lbs" lbs "$rep" mkfs.xfs -q -f -s size=4096
	run 32768 "ext4 4 KiB blocks through lbs" lbs "$rep" mkfs.ext4 -q -F -b 4096
done
cat "$out"

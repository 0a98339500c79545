# tests/integrity/fio-matrix.sh - sourced by tests/integrity/NNN (guest side).
#
# integrity_one UNIT LBS: on a strict emulated device of UNIT-byte blocks, an
# lbs mapping exposing LBS-byte sectors runs fio crc32c verify with four
# concurrent jobs at queue depth 32: two direct read/write mixes of random
# sizes LBS..2 MiB at random LBS-aligned offsets (mostly not block aligned),
# one direct writer of whole aligned blocks (UNIT..2 MiB) and one buffered
# read/write mix of arbitrary byte sizes 512 B..2 MiB.  Then the cache is
# dropped and everything is verified again from the device, and lbs's byte
# counters are compared with what the device saw.

integrity_one() {
	local unit=$1 lbs=$2 dev n tag="$1/$2" job=/tmp/job-$1-$2.fio st
	local wbytes rbytes
	dev=$(nbd_start "d$unit" 40M "--filter=$LBS_BIGSECTOR_FILTER" bigsector-unit="$unit" \
		bigsector-sector=4096 bigsector-mode=strict bigsector-stats="/tmp/d$unit.stats") ||
		return 1
	n=$(blockdev --getsz "$dev")
	# nbd takes 128 KiB requests by default; lbs needs whole blocks.
	echo $((unit / 1024 > 128 ? unit / 1024 : 128)) >"/sys/block/${dev#/dev/}/queue/max_sectors_kb"
	check "$tag: create" dmsetup create t \
		--table "0 $n lbs $dev 0 $unit 2 logical_block_size $lbs" || return 1
	check_eq "$tag: exposed sector size" "$lbs" "$(blockdev --getss /dev/mapper/t)"
	cat >"$job" <<-JOB
	[global]
	filename=/dev/mapper/t
	verify=crc32c
	randrepeat=1
	size=8M
	[mixed]
	rw=randrw
	rwmixwrite=60
	bsrange=$lbs-2m
	blockalign=$lbs
	direct=1
	ioengine=libaio
	iodepth=32
	numjobs=2
	offset_increment=8M
	[aligned]
	rw=randwrite
	bsrange=$unit-2m
	blockalign=$unit
	direct=1
	ioengine=libaio
	iodepth=32
	offset=16M
	[buffered]
	rw=randrw
	bsrange=512-2m
	bs_unaligned=1
	ioengine=psync
	offset=24M
	end_fsync=1
	JOB
	check "$tag: fio crc32c verify, 4 jobs (random sizes direct qd 32 x2, aligned qd 32, buffered)" \
		fio "$job" --output="/tmp/fio-$unit-$lbs.out" || diag "$(grep -iE 'verify|err' "/tmp/fio-$unit-$lbs.out" | head -n 8)"
	check "$tag: drop_cache" dmsetup message t 0 drop_cache
	check "$tag: drop the page cache" blockdev --flushbufs /dev/mapper/t
	check "$tag: fio verify_only from the device" \
		fio "$job" --verify_only --output="/tmp/fio-$unit-$lbs.v.out" ||
		diag "$(grep -iE 'verify|err' "/tmp/fio-$unit-$lbs.v.out" | head -n 8)"
	check "$tag: flush" dmsetup message t 0 flush
	st=$(dmsetup status t)
	diag "$tag: $st"
	wbytes=$(lbs_field t lower_write_bytes)
	rbytes=$(lbs_field t lower_read_bytes)
	check_eq "$tag: no lower errors" 0 "$(lbs_field t lower_errors)"
	check "$tag: remove" dmsetup remove t
	nbd_stop "d$unit"
	check_eq "$tag: device refused nothing" 0 \
		"$(awk '$1 ~ /refused$/ {s += $2} END {print s + 0}' "/tmp/d$unit.stats")"
	check_eq "$tag: device bytes written = lbs lower_write_bytes" "$wbytes" \
		"$(bigsector_stat "/tmp/d$unit.stats" write.bytes)"
	check_eq "$tag: device bytes read = lbs lower_read_bytes" "$rbytes" \
		"$(bigsector_stat "/tmp/d$unit.stats" read.bytes)"
}

#!/bin/bash
# guest-bench.sh - runs inside the QEMU guest (started by bench/run through
# tests/vm/boot): every contender on the same emulated big-sector device, in
# this one boot, alternating contenders within each workload, so that ratios
# between contenders are same-boot ratios.
#
# Usage: bench/guest-bench.sh [--quick] [--reps N] [--only UNIT:WORKLOAD,...]
#
# Per unit (64 KiB, 32 KiB, 1 MiB), every contender gets its own nbdkit
# (memory plugin + bigsector emulator) and nbd device for all of that unit's
# workloads; each run starts from a freshly loaded mapping.  fio workloads
# run every contender as one job of a single fio run (one fio start-up per
# workload: it costs seconds under TCG).
#
# Each run leaves a directory under $RESULTS/runs/ with the emulator's
# statistics file, /proc/stat and the time right before (A.*) and right
# after (B.*) the timed phase, the target's `dmsetup status` and a `meta`
# file (key=value, naming the fio JSON file that holds its job, if any).
# bench/report.py turns them into tables and plots.  Any contender that
# fails to run (set-up, workload, a request refused by the strict device,
# an I/O error, a kernel warning) ends the benchmark with a non-zero status.
#
# Also: guest-bench.sh --snap DIR TAG and --pre CONTENDER DIR, the commands
# fio runs before and after each job.
set -u

REPO=${REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)}
BIGSECTOR=$REPO/emulator/nbdkit-bigsector-filter.so
LBS_KO=${LBS_KO:-$REPO/drivers/md/dm-lbs.ko}
EBS_KO=${LBS_EBS_KO:-$REPO/build/bench/ebs/dm-ebs.ko}
TREE_DIR=${LBS_BENCH_TREES:-$REPO/build/bench}
STATE=/tmp/bench
MNT=/tmp/bench-mnt
OUT=${RESULTS:-/tmp}/runs

# ------------------------------------------------------------- snapshot ----
# snap DIR TAG: time, /proc/stat, the emulator's counters and the target's
# status, as they are now.  Also run by fio (--exec_prerun/--exec_postrun)
# so that fio's own start-up is outside the timed phase.  Builtins where
# possible: every fork costs under TCG.
snap() {
	local dir=$1 tag=$2 pid stats dm old=-1 now=-1 i line k v
	echo "$EPOCHREALTIME" >"$dir/$tag.time"
	read -r line </proc/stat
	echo "$line" >"$dir/$tag.cpu"
	# The device under test now: nbdkit's pid, its statistics file, the
	# dm mapping (or "-").
	read -r pid stats dm <"$STATE/current"
	while read -r k v; do [[ $k == stats.dumps ]] && old=$v; done <"$stats"
	kill -USR1 "$pid" || return 1
	for ((i = 0; i < 4000; i++)); do
		while read -r k v; do [[ $k == stats.dumps ]] && now=$v; done <"$stats"
		((now > old)) && break
		sleep 0.005
	done
	((now > old)) || { echo "snap: emulator statistics not rewritten" >&2; return 1; }
	while read -r line; do echo "$line"; done <"$stats" >"$dir/$tag.stats"
	if [[ $dm != - ]]; then
		dmsetup status "$dm" >"$dir/$tag.status"
	fi
	return 0
}

log() { printf 'bench: %s\n' "$*" >&2; }
die() {
	log "FAILED: $*"
	echo "FAILED: $*" >>"$RESULTS/failed"
	exit 1
}

# fresh C: a new instance of contender C's mapping (empty caches: whatever
# the old one held is written back by the suspend) and no cached pages of
# its devices; makes C the device `snap` reads.  Sets RAW, TGT, TABLE.
# Also run by fio (--pre) right before a job.
fresh() {
	local c=$1 pid dm
	read -r pid RAW TGT dm <"$STATE/$c.dev"
	TABLE=$(<"$STATE/$c.table")
	if [[ $dm != - ]]; then
		{ dmsetup reload "$dm" --table "$TABLE" && dmsetup resume "$dm"; } >"$STATE/dm.log" 2>&1 ||
			die "$c: reload: $(cat "$STATE/dm.log")"
	fi
	sync
	if [[ $TGT != "$RAW" ]]; then
		blockdev --flushbufs "$RAW" "$TGT" || die "flushbufs $TGT"
	else
		blockdev --flushbufs "$RAW" || die "flushbufs $RAW"
	fi
	echo "$pid $STATE/$c.stats $dm" >"$STATE/current"
}

case ${1:-} in
--snap) snap "$2" "$3"; exit ;;
--pre) fresh "$2" && snap "$3" A; exit ;;
esac

# ------------------------------------------------------------ arguments ----
QUICK=0
REPS=
ONLY=
while (($#)); do
	case $1 in
	--quick) QUICK=1; shift ;;
	--reps) REPS=$2; shift 2 ;;
	--only) ONLY=$2; shift 2 ;;
	*) echo "usage: $0 [--quick] [--reps N] [--only UNIT:WORKLOAD,...]" >&2; exit 2 ;;
	esac
done

# shellcheck source=../tests/lib/guest.sh
. "$REPO/tests/lib/guest.sh"
# nbd_start's own TAP lines go to the results directory, out of the way.
# shellcheck disable=SC2034 # used by guest.sh
TAP_FILE=$RESULTS/nbd.tap

# ---------------------------------------------------------------- sizes ----
MiB=1048576
if ((QUICK)); then
	: "${REPS:=1}"
	DEV_SIZE=128M
	SEQ4K_BYTES=$((8 * MiB))	# dd, 4 KiB buffered
	SEQ1M_BYTES=$((16 * MiB))	# fio, 1 MiB direct
	RAND_AREA=$((32 * MiB))		# random I/O spread over this
	RAND_IOS_W1=32 RAND_IOS_W16=64 RAND_IOS_R1=64 RAND_IOS_R16=64 RAND_IOS_MIX=64
	SMALL_FILES=20
	IMAGE_BYTES=$((4 * MiB))
	TREE=$TREE_DIR/tree-quick.tar
else
	# Three repetitions, each timed phase a few seconds long: under TCG a
	# sub-second phase measures the host's scheduler more than the target.
	: "${REPS:=3}"
	DEV_SIZE=512M
	SEQ4K_BYTES=$((64 * MiB))
	SEQ1M_BYTES=$((96 * MiB))
	RAND_AREA=$((64 * MiB))
	RAND_IOS_W1=512 RAND_IOS_W16=1024 RAND_IOS_R1=1024 RAND_IOS_R16=2048 RAND_IOS_MIX=1024
	SMALL_FILES=300
	IMAGE_BYTES=$((48 * MiB))
	TREE=$TREE_DIR/tree-full.tar
fi

# ------------------------------------------------------------- devices ----
# Per unit: the strict and the RMW emulator profile, the sector size the
# guest sees, and the dm-ebs/lbs logical block size.
unit_setup() {
	UNIT=$1
	case $UNIT in
	65536)
		STRICT=(bigsector-profile=disk64k)
		RMW=(bigsector-profile=disk64k-rmw)
		LBSZ=4096 ;;
	32768)
		STRICT=(bigsector-profile=dvd+rw)
		RMW=(bigsector-profile=dvd-ram)
		LBSZ=2048 ;;
	1048576)
		STRICT=(bigsector-profile=disk64k bigsector-unit=1M)
		RMW=(bigsector-profile=disk64k-rmw bigsector-unit=1M)
		LBSZ=4096 ;;
	*) die "unknown unit $UNIT" ;;
	esac
}

# The devices of one unit live while its workloads run: one nbdkit (memory
# plugin + emulator) and one nbd device per contender, named after it.
# Each run gets a fresh dm mapping (reloaded: empty caches) on it.
declare -A RAWS TGTS TABLES PIDS

# dev_up NAME PARAMS...: nbdkit (memory plugin, emulator, statistics) + nbd.
dev_up() {
	local name=$1 dev pid
	shift
	rm -f "$STATE/$name.stats"
	dev=$(NBD_BLOCK_SIZE=$LBSZ nbd_start "$name" "$DEV_SIZE" "$@" \
		"bigsector-stats=$STATE/$name.stats") ||
		die "nbd_start $name $*: $(cat "$LBS_STATE/nbd/$name.log" 2>/dev/null)"
	# The default 128 KiB maximum request is smaller than a 1 MiB unit.
	if ((UNIT > 131072)); then
		echo $((UNIT / 1024)) >"/sys/block/${dev#/dev/}/queue/max_sectors_kb" ||
			die "max_sectors_kb on $dev"
	fi
	RAWS[$name]=$dev
	read -r pid <"$LBS_STATE/nbd/$name.pid"
	PIDS[$name]=$pid
}

# contender_up NAME: its device, and the table of its mapping (if any).
contender_up() {
	local c=$1 sz table raw
	case $c in
	lbs | lbs-wt | ebs) dev_up "$c" "--filter=$BIGSECTOR" "${STRICT[@]}" ;;
	nbdkit-blocksize)
		# nbdkit's blocksize filter in front of the strict device: the
		# guest uses the nbd device directly.
		dev_up "$c" --filter=blocksize "--filter=$BIGSECTOR" "minblock=$UNIT" "${STRICT[@]}" ;;
	drive-rmw | linear) dev_up "$c" "--filter=$BIGSECTOR" "${RMW[@]}" ;;
	*) die "unknown contender $c" ;;
	esac
	raw=${RAWS[$c]}
	sz=$(blockdev --getsz "$raw") || die "blockdev --getsz $raw"
	case $c in
	lbs) table="0 $sz lbs $raw 0 $UNIT"
		((LBSZ != 4096)) && table+=" 2 logical_block_size $LBSZ" ;;
	lbs-wt) table="0 $sz lbs $raw 0 $UNIT"
		if ((LBSZ != 4096)); then
			table+=" 3 logical_block_size $LBSZ write_through"
		else
			table+=" 1 write_through"
		fi ;;
	ebs) table="0 $sz ebs $raw 0 $((LBSZ / 512)) $((UNIT / 512))" ;;
	linear) table="0 $sz linear $raw 0" ;;
	*) table= ;;
	esac
	TABLES[$c]=$table
	TGTS[$c]=$raw
	if [[ -n $table ]]; then
		TGTS[$c]=/dev/mapper/bench-$c
		dmsetup create "bench-$c" --table "$table" >"$STATE/dm.log" 2>&1 ||
			die "$c: dmsetup create --table '$table': $(cat "$STATE/dm.log")"
		echo "${PIDS[$c]} $raw ${TGTS[$c]} bench-$c" >"$STATE/$c.dev"
	else
		echo "${PIDS[$c]} $raw $raw -" >"$STATE/$c.dev"
	fi
	echo "$table" >"$STATE/$c.table"
}

contender_down() {
	local c=$1
	if [[ -n ${TABLES[$c]} ]]; then
		dmsetup remove "bench-$c" >"$STATE/dm.log" 2>&1 ||
			die "dmsetup remove bench-$c: $(cat "$STATE/dm.log")"
	fi
	nbd_stop "$c" || die "nbd_stop $c"
}

# prefill C BYTES: write the area that read workloads read, in whole units
# on the raw device, before the mapping exists (not measured).
prefill() {
	dd if=/tmp/bench-fill of="${RAWS[$1]}" bs=1M count=$(($2 / MiB)) oflag=direct status=none ||
		die "prefill ${RAWS[$1]}"
}

# ----------------------------------------------------------- workloads ----
# Each workload function runs with RUN (result dir), TGT, UNIT, LBSZ and
# WHOLE (1 for the upper-bound contender: the same requests, each rounded
# up to one whole aligned unit).  It sets USER_BYTES (what the user asked
# for) and ISSUED_BYTES (what was sent to TGT), calls `snap "$RUN" A` right
# before and `snap "$RUN" B` right after its timed phase, and returns
# non-zero on failure.

# fio workloads: all contenders of one repetition are jobs of one fio run
# (one after the other: stonewall), which saves a fio start-up per run.
# fio_spec WORKLOAD WHOLE: the job's options in JOB, and USER_BYTES,
# ISSUED_BYTES, NIOS.  Random 4 KiB I/O is NIOS requests over RAND_AREA
# (4 KiB each, or one whole unit each for the upper bound).
fio_spec() {
	local wl=$1 whole=$2 bs=4096 nios rw qd
	local -a extra=()
	case $wl in
	seq1m_write | seq1m_read)
		USER_BYTES=$SEQ1M_BYTES ISSUED_BYTES=$SEQ1M_BYTES NIOS=0
		JOB=(rw=write bs=1M direct=1 ioengine=libaio iodepth=1 "size=$SEQ1M_BYTES" end_fsync=1)
		[[ $wl == seq1m_read ]] && JOB=(rw=read bs=1M direct=1 ioengine=libaio iodepth=1 "size=$SEQ1M_BYTES")
		return 0 ;;
	rand4k_write_qd1) rw=randwrite qd=1 nios=$RAND_IOS_W1 extra=(end_fsync=1) ;;
	rand4k_write_qd16) rw=randwrite qd=16 nios=$RAND_IOS_W16 extra=(end_fsync=1) ;;
	rand4k_read_qd1) rw=randread qd=1 nios=$RAND_IOS_R1 ;;
	rand4k_read_qd16) rw=randread qd=16 nios=$RAND_IOS_R16 ;;
	mix70_qd16) rw=randrw qd=16 nios=$RAND_IOS_MIX extra=(rwmixread=70 end_fsync=1) ;;
	*) return 1 ;;
	esac
	((whole)) && bs=$UNIT
	# Each 4 KiB request costs a whole unit somewhere: fewer of them on
	# 1 MiB units.
	((UNIT > 65536)) && nios=$((nios / 8))
	USER_BYTES=$((nios * 4096)) ISSUED_BYTES=$((nios * bs)) NIOS=$nios
	JOB=("rw=$rw" "bs=$bs" direct=1 ioengine=libaio "iodepth=$qd" "size=$RAND_AREA"
		"io_size=$((nios * bs))" "${extra[@]}")
}

wl_seq4k_buf() {
	local bs=4096
	((WHOLE)) && bs=$UNIT
	USER_BYTES=$SEQ4K_BYTES
	ISSUED_BYTES=$SEQ4K_BYTES
	snap "$RUN" A || return 1
	dd if=/tmp/bench-data of="$TGT" bs="$bs" count=$((SEQ4K_BYTES / bs)) conv=fsync \
		status=none 2>"$RUN/dd.log" || return 1
	snap "$RUN" B
}

mkfs_mount() {
	mkfs.ext4 -q -F -E nodiscard "$TGT" >"$RUN/mkfs.log" 2>&1 || return 1
	mkdir -p "$MNT"
	mount -o noinit_itable "$TGT" "$MNT" 2>>"$RUN/mkfs.log" || return 1
	sync
}

# Unpack a tree of kernel sources (fs/), then sync.
wl_ext4_untar() {
	mkfs_mount || return 1
	USER_BYTES=$(stat -c %s /tmp/bench-tree.tar)
	ISSUED_BYTES=$USER_BYTES
	snap "$RUN" A || return 1
	tar xf /tmp/bench-tree.tar -C "$MNT" 2>"$RUN/tar.log" && sync || return 1
	snap "$RUN" B || return 1
	umount "$MNT"
}

# Many small files (4-16 KiB), each written, fsync'd and closed.
wl_ext4_fsync() {
	mkfs_mount || return 1
	mkdir "$MNT/d"
	snap "$RUN" A || return 1
	/usr/bin/python3 - "$MNT/d" "$SMALL_FILES" "$RUN/lat.txt" "$RUN/bytes.txt" <<-'EOF' || return 1
		import os, sys, time
		d, n, latf, bytesf = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
		buf = os.urandom(16384)
		lat, total = [], 0
		for i in range(n):
		    size = 4096 * (1 + (i * 7) % 4)
		    t = time.monotonic()
		    fd = os.open(f"{d}/f{i:05d}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
		    os.write(fd, buf[:size])
		    os.fsync(fd)
		    os.close(fd)
		    lat.append(time.monotonic() - t)
		    total += size
		with open(latf, "w") as f:
		    f.write("\n".join(f"{x:.6f}" for x in lat) + "\n")
		with open(bytesf, "w") as f:
		    f.write(f"{total}\n")
	EOF
	snap "$RUN" B || return 1
	USER_BYTES=$(<"$RUN/bytes.txt")
	ISSUED_BYTES=$USER_BYTES
	umount "$MNT"
}

# A disc image written with 2 KiB writes (dd's default for optical media:
# buffered, then fsync), or in whole units for the upper bound.
wl_image2k() {
	local bs=2048
	((WHOLE)) && bs=$UNIT
	USER_BYTES=$IMAGE_BYTES ISSUED_BYTES=$IMAGE_BYTES
	snap "$RUN" A || return 1
	dd if=/tmp/bench-data of="$TGT" bs="$bs" count=$((IMAGE_BYTES / bs)) conv=fsync \
		status=none 2>"$RUN/dd.log" || return 1
	snap "$RUN" B
}

# Workloads that read need the area written first.
prefill_bytes() {
	case $1 in
	seq1m_read) echo "$SEQ1M_BYTES" ;;
	rand4k_read_qd1 | rand4k_read_qd16 | mix70_qd16) echo "$RAND_AREA" ;;
	*) echo 0 ;;
	esac
}

# ----------------------------------------------------------------- plan ----
# unit workload contenders...  The upper bound (linear) has no whole-unit
# form of a file system workload: it is left out there.
ALL6=(lbs lbs-wt ebs nbdkit-blocksize drive-rmw linear)
FS5=(lbs lbs-wt ebs nbdkit-blocksize drive-rmw)
DVD=(lbs ebs nbdkit-blocksize drive-rmw linear)
# nbdkit's blocksize filter takes minblock up to 64k only.
BIG=(lbs ebs drive-rmw linear)
PLAN=()
plan() {
	[[ -z $ONLY || ,$ONLY, == *",$1:$2,"* ]] && PLAN+=("$*")
	return 0
}
if ((QUICK)); then
	# Every contender, every workload function, every unit: once.
	plan 65536 seq4k_buf lbs ebs nbdkit-blocksize drive-rmw linear
	plan 65536 rand4k_write_qd16 lbs lbs-wt ebs linear
	plan 65536 rand4k_read_qd1 lbs nbdkit-blocksize
	plan 65536 mix70_qd16 lbs
	plan 65536 ext4_untar lbs
	plan 65536 ext4_fsync lbs
	plan 32768 image2k lbs linear
	plan 1048576 seq1m_write lbs ebs
else
	for w in seq4k_buf seq1m_write seq1m_read rand4k_write_qd1 rand4k_write_qd16 \
		rand4k_read_qd1 rand4k_read_qd16 mix70_qd16; do
		plan 65536 "$w" "${ALL6[@]}"
	done
	# Last on these devices: mkfs overwrites what the others wrote.
	plan 65536 ext4_untar "${FS5[@]}"
	plan 65536 ext4_fsync "${FS5[@]}"
	plan 32768 image2k "${DVD[@]}"
	plan 32768 rand4k_write_qd16 "${DVD[@]}"
	plan 1048576 seq4k_buf "${BIG[@]}"
	plan 1048576 seq1m_write "${BIG[@]}"
	plan 1048576 rand4k_write_qd16 "${BIG[@]}"
fi

# ------------------------------------------------------------------ run ----
# stat_sum FILE KEY...: sum of those counters (builtins only).
stat_sum() {
	local f=$1 k v sum=0
	shift
	local -A want=()
	for k; do want[$k]=1; done
	while read -r k v; do
		[[ -n ${want[$k]:-} ]] && sum=$((sum + v))
	done <"$f"
	echo "$sum"
}

usecs() { local t=${1/./}; echo $((10#$t)); }

# run_dir UNIT WORKLOAD CONTENDER REP: the next run's directory in RUN.
run_dir() {
	SEQ=$((SEQ + 1))
	RUN=$OUT/$(printf '%03d' "$SEQ")-$1-$2-$3-r$4
	mkdir -p "$RUN"
}

# run_done UNIT WORKLOAD CONTENDER REP T0: check and record the run in RUN.
run_done() {
	local unit=$1 wl=$2 c=$3 rep=$4 t0=$5 refused errs ta tb
	[[ -s $RUN/A.stats && -s $RUN/B.stats ]] || die "$unit $wl $c: no statistics snapshot"
	# Counters since the device started: nothing may have been refused
	# (a partial request reached the strict device) or failed.
	refused=$(stat_sum "$RUN/B.stats" read.refused write.refused trim.refused zero.refused)
	errs=$(stat_sum "$RUN/B.stats" lower.errors read.errors write.errors)
	((refused == 0)) || die "$unit $wl $c: the device refused $refused requests"
	((errs == 0)) || die "$unit $wl $c: $errs I/O errors on the device"
	printf '%s\n' "seq=$SEQ" "unit=$unit" "workload=$wl" "contender=$c" "rep=$rep" \
		"lbsz=$LBSZ" "table=$(<"$STATE/$c.table")" "user_bytes=$USER_BYTES" \
		"issued_bytes=$ISSUED_BYTES" "nios=$NIOS" "fio_json=$FIO_JSON" >"$RUN/meta"
	read -r ta <"$RUN/A.time"
	read -r tb <"$RUN/B.time"
	ta=$(usecs "$ta") tb=$(usecs "$tb") t0=$(usecs "$t0")
	log "$(printf '%-8s %-18s %-17s r%s %6d ms (run %d s)' "$unit" "$wl" "$c" "$rep" \
		$(((tb - ta) / 1000)) $(((${EPOCHREALTIME/./} - t0) / 1000000)))"
}

# One run of a workload that is not fio's.
run_one() {
	local unit=$1 wl=$2 c=$3 rep=$4 rc t0=$EPOCHREALTIME
	run_dir "$unit" "$wl" "$c" "$rep"
	WHOLE=0
	[[ $c == linear ]] && WHOLE=1
	fresh "$c"
	USER_BYTES=0 ISSUED_BYTES=0 NIOS=0 FIO_JSON=
	"wl_$wl" >"$RUN/out.log" 2>&1
	rc=$?
	if mountpoint -q "$MNT"; then
		umount "$MNT" || die "cannot unmount $MNT"
	fi
	if ((rc != 0)); then
		log "$wl on $c ($unit) failed with status $rc"
		tail -n 20 "$RUN"/*.log >&2
		die "$unit $wl $c: workload failed (status $rc)"
	fi
	run_done "$unit" "$wl" "$c" "$rep" "$t0"
}

# run_fio UNIT WORKLOAD REP CONTENDERS...: one fio run, one job per
# contender in this order, each job's device made fresh and snapshotted by
# the job's pre-run command, snapshotted again by its post-run command.
run_fio() {
	local unit=$1 wl=$2 rep=$3 c i pid raw tgt dm t0=$EPOCHREALTIME
	local job=$STATE/job.fio
	local -a runs=() users=() issued=() nios=()
	shift 3
	FIO_JSON=$OUT/fio-$(printf '%03d' $((SEQ + 1)))-$unit-$wl-r$rep.json
	{
		echo "[global]"
		echo "randrepeat=1"
		echo "randseed=1234"
		for c; do
			run_dir "$unit" "$wl" "$c" "$rep"
			fio_spec "$wl" "$([[ $c == linear ]] && echo 1 || echo 0)" || die "fio_spec $wl"
			runs+=("$RUN") users+=("$USER_BYTES") issued+=("$ISSUED_BYTES") nios+=("$NIOS")
			read -r pid raw tgt dm <"$STATE/$c.dev"
			echo "[$c]"
			echo "filename=$tgt"
			echo "stonewall"
			printf '%s\n' "${JOB[@]}"
			echo "exec_prerun=bash $REPO/bench/guest-bench.sh --pre $c $RUN"
			echo "exec_postrun=bash $REPO/bench/guest-bench.sh --snap $RUN B"
		done
	} >"$job"
	cp "$job" "${FIO_JSON%.json}.fio"
	# fio writes the pre/post-run commands' output into the current
	# directory: a writable one.
	if ! (cd "$STATE" && fio --output-format=json --output="$FIO_JSON" "$job" >"$STATE/fio.log" 2>&1); then
		tail -n 20 "$STATE/fio.log" "$STATE"/*.prerun.txt "$STATE"/*.postrun.txt >&2
		die "$unit $wl: fio failed ($*)"
	fi
	i=0
	for c; do
		RUN=${runs[i]} USER_BYTES=${users[i]} ISSUED_BYTES=${issued[i]} NIOS=${nios[i]}
		SEQ=${RUN##*/} SEQ=$((10#${SEQ%%-*}))
		run_done "$unit" "$wl" "$c" "$rep" "$t0"
		i=$((i + 1))
	done
}

# The workloads of one unit, with its devices up.
run_unit() {
	local unit=$1 line u wl rep i n cs_str c fill=0
	local -a cs all=() order
	local -A seen=()
	unit_setup "$unit"
	for line in "${PLAN[@]}"; do
		read -r u wl cs_str <<<"$line"
		((u == unit)) || continue
		read -r -a cs <<<"$cs_str"
		for c in "${cs[@]}"; do
			[[ -n ${seen[$c]:-} ]] || all+=("$c")
			seen[$c]=1
		done
		(($(prefill_bytes "$wl") > fill)) && fill=$(prefill_bytes "$wl")
	done
	((${#all[@]})) || return 0
	log "unit $unit: setting up ${all[*]}"
	for c in "${all[@]}"; do
		contender_up "$c"
		if ((fill > 0)); then
			[[ -n ${TABLES[$c]} ]] && { dmsetup remove "bench-$c" || die "remove before prefill"; }
			prefill "$c" "$fill"
			[[ -n ${TABLES[$c]} ]] && { dmsetup create "bench-$c" --table "${TABLES[$c]}" ||
				die "re-create after prefill"; }
		fi
	done
	for line in "${PLAN[@]}"; do
		read -r u wl cs_str <<<"$line"
		((u == unit)) || continue
		read -r -a cs <<<"$cs_str"
		n=${#cs[@]}
		# Alternate: each repetition runs every contender once, the
		# order rotated so that no contender always goes first.
		for ((rep = 1; rep <= REPS; rep++)); do
			order=()
			for ((i = 0; i < n; i++)); do
				order+=("${cs[(i + rep - 1) % n]}")
			done
			if fio_spec "$wl" 0; then
				run_fio "$unit" "$wl" "$rep" "${order[@]}"
			else
				for c in "${order[@]}"; do
					run_one "$unit" "$wl" "$c" "$rep"
				done
			fi
		done
	done
	for c in "${all[@]}"; do
		contender_down "$c"
	done
}

main() {
	local start unit
	mkdir -p "$STATE" "$OUT" || exit 1
	rm -f "$RESULTS/failed"
	start=$EPOCHREALTIME
	{ modprobe dm-mod && modprobe dm-bufio; } || die "modprobe dm-mod dm-bufio"
	[[ -f $LBS_KO ]] || die "$LBS_KO missing (make module)"
	[[ -f $EBS_KO ]] || die "$EBS_KO missing (bench/run builds it)"
	[[ -f $BIGSECTOR ]] || die "$BIGSECTOR missing (make emulator)"
	insmod "$LBS_KO" || die "insmod $LBS_KO"
	insmod "$EBS_KO" || die "insmod $EBS_KO"
	modprobe nbd nbds_max=8 max_part=0 || die "modprobe nbd"
	# Data: random, generated once (not measured).
	head -c $((16 * MiB)) /dev/urandom >/tmp/bench-rand || die "random data"
	: >/tmp/bench-data
	while (($(stat -c %s /tmp/bench-data) < 64 * MiB)); do
		cat /tmp/bench-rand >>/tmp/bench-data
	done
	cp /tmp/bench-data /tmp/bench-fill
	while ((($(stat -c %s /tmp/bench-fill) < RAND_AREA) || ($(stat -c %s /tmp/bench-fill) < SEQ1M_BYTES))); do
		cat /tmp/bench-data >>/tmp/bench-fill
	done
	cp "$TREE" /tmp/bench-tree.tar || die "copy $TREE"
	{
		echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
		echo "kernel=$(uname -r)"
		echo "cpus=$(nproc)"
		echo "mem_mib=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024))"
		echo "cpu_model=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
		echo "nbdkit=$(nbdkit --version | head -n1)"
		echo "fio=$(fio --version)"
		echo "quick=$QUICK"
		echo "reps=$REPS"
		echo "lbs_srcversion=$(modinfo -F srcversion "$LBS_KO")"
		echo "tree_bytes=$(stat -c %s /tmp/bench-tree.tar)"
		echo "tree_files=$(tar tf /tmp/bench-tree.tar | grep -vc '/$')"
		echo "small_files=$SMALL_FILES"
		echo "rand_area=$RAND_AREA"
		echo "dev_size=$DEV_SIZE"
		echo "loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)"
	} >"$RESULTS/env"
	SEQ=0
	for unit in 65536 32768 1048576; do
		run_unit "$unit"
	done
	echo "total_seconds=$(( (${EPOCHREALTIME/./} - $(usecs "$start")) / 1000000 ))" >>"$RESULTS/env"
	dmesg | grep -E "$DMESG_BAD" >"$RESULTS/dmesg-bad" && die "kernel reported problems: $(head -n 5 "$RESULTS/dmesg-bad")"
	log "done: $SEQ runs"
}

main

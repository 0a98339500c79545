#!/bin/bash
# cpu-profile-guest.sh - runs inside the guest started by bench/cpu-profile:
# random 4 KiB O_DIRECT writes at queue depth 16 (fio, a fixed count of
# I/Os, fsync at the end) on lbs and dm-ebs over a strict 64 KiB device and
# on dm-linear over a device that accepts 4 KiB writes (the emulator's
# drive-RMW profile), alternating contenders, each run on a fresh mapping.
# Per run: CPU time of the whole guest and of the nbdkit serving the device
# (/proc/stat, /proc/PID/stat), into $RESULTS/runs.csv; then one run each
# under `perf record` (cpu-clock, all CPUs), reported by symbol and by
# command into $RESULTS/perf-CONTENDER.txt.
set -u
. tests/lib/guest.sh

REPS=${LBS_PROFILE_REPS:-3}
IOS=${LBS_PROFILE_IOS:-4096}
SPAN=448M
FILTER=$REPO/emulator/nbdkit-bigsector-filter.so
HZ=$(getconf CLK_TCK)
die() { echo "cpu-profile: FAILED: $*" >&2; exit 1; }

modprobe nbd nbds_max=4 max_part=0 || die "modprobe nbd"
modprobe dm-mod && modprobe dm-bufio || die "modprobe dm-bufio"
insmod "$LBS_KO" || die "insmod $LBS_KO"
insmod "$LBS_EBS_KO" || die "insmod $LBS_EBS_KO"

declare -A RAW PID TABLE
for c in lbs ebs linear; do
	profile=disk64k
	[[ $c == linear ]] && profile=disk64k-rmw
	RAW[$c]=$(NBD_BLOCK_SIZE=4096 nbd_start "$c" 512M "--filter=$FILTER" \
		"bigsector-profile=$profile") || die "nbd_start $c"
	read -r PID[$c] <"$LBS_STATE/nbd/$c.pid"
	sz=$(blockdev --getsz "${RAW[$c]}")
	case $c in
	lbs) TABLE[$c]="0 $sz lbs ${RAW[$c]} 0 65536" ;;
	ebs) TABLE[$c]="0 $sz ebs ${RAW[$c]} 0 8 128" ;;
	linear) TABLE[$c]="0 $sz linear ${RAW[$c]} 0" ;;
	esac
done

STATE=/tmp/cpu-profile
mkdir -p "$STATE"
PERF=$(command -v perf) || die "no perf"

# fio runs these right before and right after the job, so that its own
# start-up (seconds of CPU under TCG) is outside what is measured.
cat >"$STATE/snap" <<'SH'
#!/bin/bash
# snap TAG NBDKIT_PID [PERF_OUT]: time, the guest's CPU (/proc/stat), the
# nbdkit's; starts perf (A) or stops it (B) when PERF_OUT is given.
tag=$1 pid=$2 out=${3:-}
if [[ $tag == B && -n $out ]]; then
	kill -INT "$(cat /tmp/cpu-profile/perf.pid)"
	while kill -0 "$(cat /tmp/cpu-profile/perf.pid)" 2>/dev/null; do sleep 0.1; done
fi
{ echo "$EPOCHREALTIME"; head -n1 /proc/stat; cat "/proc/$pid/stat"; } >"/tmp/cpu-profile/$tag"
if [[ $tag == A && -n $out ]]; then
	perf record -q -N -a -e cpu-clock -F 997 -o "$out" >/dev/null 2>&1 </dev/null &
	echo $! >/tmp/cpu-profile/perf.pid
	# perf needs a moment under TCG before it records.
	for ((i = 0; i < 100; i++)); do [[ -s $out ]] && break; sleep 0.1; done
	sleep 1
	{ echo "$EPOCHREALTIME"; head -n1 /proc/stat; cat "/proc/$pid/stat"; } >/tmp/cpu-profile/A
fi
SH
chmod +x "$STATE/snap"

# fio_run CONTENDER [PERF_OUT]: one fio run on a fresh mapping.
fio_run() {
	local c=$1 out=${2:-}
	dmsetup create "p-$c" --table "${TABLE[$c]}" || die "dmsetup create p-$c"
	(cd "$STATE" && fio --name=qd16 --filename="/dev/mapper/p-$c" --rw=randwrite --bs=4k \
		--iodepth=16 --ioengine=libaio --direct=1 --size=$SPAN \
		--number_ios="$IOS" --norandommap --randseed=42 --end_fsync=1 \
		--exec_prerun="$STATE/snap A ${PID[$c]} $out" \
		--exec_postrun="$STATE/snap B ${PID[$c]} $out" \
		--output-format=json --output="$STATE/fio.json") >"$STATE/fio.log" 2>&1 ||
		die "fio on $c: $(tail -n 5 "$STATE/fio.log")"
	dmsetup remove "p-$c" || die "dmsetup remove p-$c"
	# seconds, guest CPU seconds (user + system + irq + softirq, all
	# CPUs), the nbdkit's CPU seconds
	awk -v hz="$HZ" 'FNR == 1 { t[FILENAME] = $1 }
		$1 == "cpu" { c[FILENAME] = $2 + $3 + $4 + $7 + $8 + $9 }
		FNR == 3 { n[FILENAME] = $14 + $15 }
		END { a = ARGV[1]; b = ARGV[2]
			printf "%.3f,%.3f,%.3f\n", t[b] - t[a], (c[b] - c[a]) / hz, (n[b] - n[a]) / hz }' \
		"$STATE/A" "$STATE/B"
}

ios() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][0]["write"]["total_ios"])' "$STATE/fio.json"; }

echo "contender,rep,ios,seconds,guest_cpu_s,nbdkit_cpu_s" >"$RESULTS/runs.csv"
for ((rep = 1; rep <= REPS; rep++)); do
	for c in lbs ebs linear; do
		m=$(fio_run "$c") || exit 1
		echo "$c,$rep,$(ios),$m" | tee -a "$RESULTS/runs.csv"
	done
done

echo "contender,ios,seconds,guest_cpu_s,nbdkit_cpu_s" >"$RESULTS/perf-runs.csv"
for c in lbs ebs linear; do
	m=$(fio_run "$c" "$STATE/perf.$c") || exit 1
	echo "$c,$(ios),$m" | tee -a "$RESULTS/perf-runs.csv"
	{
		echo "## $c: by command"
		"$PERF" report -i "$STATE/perf.$c" --stdio --sort comm 2>/dev/null | grep -v '^$'
		echo "## $c: by symbol"
		"$PERF" report -i "$STATE/perf.$c" --stdio --sort dso,sym --percent-limit 0.4 2>/dev/null | grep -v '^$'
	} >"$RESULTS/perf-$c.txt"
done
uname -r >"$RESULTS/kernel"
nproc >"$RESULTS/cpus"
nbd_stop

# tests/lib/guest.sh - helpers for test scenarios.  Sourced (bash) inside
# the guest by tests/vm/guest-run; never run on the host.
#
# TAP:     ok, not_ok, skip, check, check_fail, check_eq, diag
# Devices: lbs_load, lbs_unload, nbd_start, nbd_stop
# Cleanup: on_cleanup CMD... (LIFO), run_cleanups (run by guest-run)
# dmesg:   dmesg_mark, dmesg_since_mark, dmesg_check
#
# TAP lines go to $RESULTS/tap (what the host counts) and to fd $TAP_FD
# (the console), so they are never swallowed by a $(...) capture.

REPO=${REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)}
RESULTS=${RESULTS:?RESULTS must be set (tests/vm/guest-exec sets it)}
TAP_FILE=$RESULTS/tap
TAP_FD=${TAP_FD:-1}
LBS_KO=${LBS_KO:-$REPO/drivers/md/dm-lbs.ko}
LBS_MODULE=dm_lbs
# Not written yet: the nbdkit filter emulating a device with big atomic
# sectors.  Scenarios pass it to nbd_start as --filter=$LBS_BIGSECTOR_FILTER.
LBS_BIGSECTOR_FILTER=${LBS_BIGSECTOR_FILTER:-$REPO/emulator/nbdkit-bigsector-filter.so}
# The default backing device: 4 KiB logical blocks towards the kernel, but
# the server rejects (EINVAL) any request not 64 KiB aligned and sized.
NBD_STRICT_64K=(--filter=blocksize-policy blocksize-minimum=64K
	blocksize-preferred=64K blocksize-error-policy=error)
NBD_BLOCK_SIZE=${NBD_BLOCK_SIZE:-4096}
LBS_STATE=${LBS_STATE:-/tmp/lbs-test}
mkdir -p "$LBS_STATE/nbd"
# First use in this guest: start a fresh TAP file.
if [[ ! -e $LBS_STATE/tap-count ]]; then
	: >"$TAP_FILE"
	# A guest phase of a host-side scenario continues its numbering.
	echo "${LBS_TAP_START:-0}" >"$LBS_STATE/tap-count"
fi

# ---------------------------------------------------------------- TAP ----

# _tap LINE: append one line to the TAP file and show it on the console.
_tap() {
	printf '%s\n' "$1" >>"$TAP_FILE"
	printf '%s\n' "$1" >&"$TAP_FD"
}

# Next test number, kept in a file rather than a variable so that checks
# made in subshells number correctly.  Builtins only: every fork costs
# tens of milliseconds under TCG.
_tap_next() {
	local n=0
	[[ -e $LBS_STATE/tap-count ]] && read -r n <"$LBS_STATE/tap-count"
	echo $((n + 1)) >"$LBS_STATE/tap-count"
	_TAP_N=$((n + 1))
}

# diag LINE...: TAP diagnostic lines ("# ...").
diag() {
	local l line
	for l in "$@"; do
		while IFS= read -r line; do _tap "# $line"; done <<<"$l"
	done
}

ok() { _tap_next; _tap "ok $_TAP_N - $1"; }

# not_ok DESC [DETAIL...]: failed check, details shown as diagnostics.
not_ok() {
	_tap_next
	_tap "not ok $_TAP_N - $1"
	shift
	(($#)) && diag "$@"
	return 0
}

# skip DESC REASON
skip() { _tap_next; _tap "ok $_TAP_N - $1 # SKIP ${2:-}"; }

# _run CMD...: run CMD, status returned; its output (stdout+stderr, last
# 30 lines) in $_OUT only when it failed (saves forks on success).
_run() {
	local f=$LBS_STATE/out.$BASHPID rc
	"$@" >"$f" 2>&1
	rc=$?
	_OUT=
	((rc != 0)) && _OUT=$(tail -n 30 "$f")
	return $rc
}

# check DESC CMD...: ok if CMD succeeds; else not ok with its output.
# Returns CMD's success/failure so scenarios can `check ... || return 1`.
check() {
	local desc=$1 rc
	shift
	_run "$@"
	rc=$?
	if ((rc == 0)); then
		ok "$desc"
		return 0
	fi
	not_ok "$desc" "command: $*" "exit status: $rc" ${_OUT:+"$_OUT"}
	return 1
}

# check_fail DESC CMD...: ok if CMD fails (non-zero exit).
check_fail() {
	local desc=$1
	shift
	if _run "$@"; then
		not_ok "$desc" "command: $*" "expected failure, but it succeeded"
		return 1
	fi
	ok "$desc"
}

# check_eq DESC EXPECTED ACTUAL
check_eq() {
	if [[ "$2" == "$3" ]]; then
		ok "$1"
		return 0
	fi
	not_ok "$1" "expected: '$2'" "actual:   '$3'"
	return 1
}

# ------------------------------------------------------------ cleanup ----

_CLEANUPS=()

# on_cleanup CMD...: run CMD at the end of the scenario (last in, first out),
# even if test_main fails or exits.
on_cleanup() {
	local q
	printf -v q ' %q' "$@"
	_CLEANUPS+=("${q# }")
}

# run_cleanups: registered commands, then the harness teardown (unmount
# anything on dm/nbd devices, remove every dm mapping, stop every nbd
# device).  A mapping that cannot be removed is a failure: it usually
# means a leaked reference in the target.
run_cleanups() {
	local i m dev
	for ((i = ${#_CLEANUPS[@]} - 1; i >= 0; i--)); do
		eval "${_CLEANUPS[i]}" || diag "cleanup command failed: ${_CLEANUPS[i]}"
	done
	_CLEANUPS=()
	# A phase of a guest booted by systemd may leave its mounts and
	# mappings for the shutdown to take down (LEAVE_TO_SHUTDOWN=1).
	[[ -n ${LEAVE_TO_SHUTDOWN:-} ]] && return 0
	# Unmount deepest mounts first.
	while read -r dev m _; do
		case $dev in
		/dev/mapper/* | /dev/dm-* | /dev/nbd*) umount -l "$m" ;;
		esac
	done < <(tac /proc/mounts)
	if [[ -e /dev/mapper/control ]] && dmsetup ls 2>/dev/null | grep -qv '^No devices found'; then
		if ! _run dmsetup remove_all; then
			not_ok "cleanup: remove all dm devices" "$_OUT" "$(dmsetup ls 2>&1)"
			dmsetup remove_all --force >/dev/null 2>&1
		fi
	fi
	nbd_stop
}

# ------------------------------------------------------------ modules ----

# lbs_load: load dm-mod and the module under test ($LBS_KO), as a check.
lbs_load() {
	local vm
	modprobe dm-mod || { not_ok "load dm-mod"; return 1; }
	if [[ -d /sys/module/$LBS_MODULE ]]; then
		ok "load dm-lbs (already loaded)"
		return 0
	fi
	# LBS_MODPROBE=1: the installed module (DKMS's), found by modprobe.
	if [[ ${LBS_MODPROBE:-} == 1 ]]; then
		check "load dm-lbs with modprobe ($(modinfo -n dm-lbs 2>&1))" modprobe dm-lbs
		return
	fi
	if [[ ! -f $LBS_KO ]]; then
		not_ok "load dm-lbs" "$LBS_KO does not exist: run 'make' at the repo root first"
		return 1
	fi
	# A module built for another kernel fails with a cryptic
	# "Invalid module format": say what is wrong instead.
	vm=$(modinfo -F vermagic "$LBS_KO" 2>/dev/null)
	if [[ ${vm%% *} != "$(uname -r)" ]]; then
		not_ok "load dm-lbs" "$LBS_KO is built for '${vm%% *}', guest runs $(uname -r)"
		return 1
	fi
	check "load dm-lbs ($LBS_KO)" insmod "$LBS_KO"
}

# lbs_unload: rmmod the module under test, as a check.
lbs_unload() {
	check "unload dm-lbs" rmmod "$LBS_MODULE"
}

# ---------------------------------------------------------------- nbd ----

# nbd_start NAME SIZE [NBDKIT ARGS...]
#
# Starts nbdkit on a unix socket and attaches it to a free /dev/nbdN, whose
# path is printed on stdout: dev=$(nbd_start a 64M) || return 1
#
# Without extra args the device is the strict 64 KiB one (NBD_STRICT_64K)
# over the memory plugin.  With extra args, they replace the default filter:
# args starting with "-" are nbdkit options and go before the plugin (use the
# --opt=value form), --plugin=NAME picks the plugin (default memory), the
# rest are plugin/filter parameters.  SIZE is passed as size=SIZE unless it
# is "-" (for plugins without a size parameter).  Example:
#   nbd_start big 1G --filter="$LBS_BIGSECTOR_FILTER" bigsector-size=64K
# The kernel sees NBD_BLOCK_SIZE (default 4096) byte logical blocks.
nbd_start() {
	local name=$1 size=$2 plugin=memory dir=$LBS_STATE/nbd a i dev
	local -a opts=() params=()
	shift 2 || { echo "usage: nbd_start NAME SIZE [ARGS...]" >&2; return 2; }
	(($#)) || set -- "${NBD_STRICT_64K[@]}"
	for a in "$@"; do
		case $a in
		--plugin=*) plugin=${a#--plugin=} ;;
		-*) opts+=("$a") ;;
		*) params+=("$a") ;;
		esac
	done
	[[ $size != - ]] && params=("size=$size" "${params[@]}")
	if [[ -e $dir/$name.pid ]]; then
		not_ok "nbd_start $name" "an nbd device named $name is already running"
		return 1
	fi
	# nbds_max: enough devices for any scenario; max_part=0: no partition
	# scan, which on a strict 64 KiB device only floods dmesg with I/O
	# errors (the kernel reads 4 KiB blocks).
	[[ -d /sys/module/nbd ]] || modprobe nbd nbds_max=16 max_part=0 || {
		not_ok "nbd_start $name" "modprobe nbd failed"
		return 1
	}

	# nbdkit forks into the background once the socket is listening.
	if ! nbdkit -U "$dir/$name.sock" -P "$dir/$name.pid" "${opts[@]}" \
		"$plugin" "${params[@]}" </dev/null >/dev/null 2>"$dir/$name.log"; then
		not_ok "nbd_start $name: nbdkit" "nbdkit ${opts[*]} $plugin ${params[*]}" "$(cat "$dir/$name.log")"
		rm -f "$dir/$name".*
		return 1
	fi

	# First free device: not connected (no pid), not taken by us.
	dev=
	for ((i = 0; i < 256; i++)); do
		[[ -e /sys/block/nbd$i ]] || break
		[[ -e /sys/block/nbd$i/pid ]] && continue
		grep -qx "/dev/nbd$i" "$dir"/*.dev 2>/dev/null && continue
		dev=/dev/nbd$i
		break
	done
	if [[ -z $dev ]]; then
		not_ok "nbd_start $name" "no free /dev/nbdN"
		_nbd_kill "$name"
		return 1
	fi
	echo "$dev" >"$dir/$name.dev"

	# netlink is the modern interface; fall back to the ioctl one (which
	# keeps an nbd-client process per device) if it is refused.
	if ! nbd-client -unix "$dir/$name.sock" "$dev" -b "$NBD_BLOCK_SIZE" \
		>>"$dir/$name.log" 2>&1 &&
		! nbd-client -unix "$dir/$name.sock" "$dev" -b "$NBD_BLOCK_SIZE" -nonetlink \
			>>"$dir/$name.log" 2>&1; then
		not_ok "nbd_start $name: nbd-client" "$(cat "$dir/$name.log")"
		_nbd_kill "$name"
		return 1
	fi
	for ((i = 0; i < 50; i++)); do
		[[ $(cat "/sys/block/${dev#/dev/}/size" 2>/dev/null) -gt 0 ]] && break
		sleep 0.1
	done
	echo "$dev"
}

# virtio_disk NAME: the /dev/vdX QEMU attached with serial NAME (host-side
# scenarios: qemu_nbd_disk in tests/lib/host.sh).
virtio_disk() {
	local f i
	[[ -d /sys/module/virtio_blk ]] || modprobe virtio_blk || return 1
	for ((i = 0; i < 50; i++)); do
		for f in /sys/block/vd*/serial; do
			[[ -e $f && $(<"$f") == "$1" ]] || continue
			f=${f%/serial}
			echo "/dev/${f##*/}"
			return 0
		done
		sleep 0.1
	done
	not_ok "virtio disk $1" "no /sys/block/vd*/serial says $1"
	return 1
}

# _nbd_kill NAME: stop nbdkit NAME, wait for it, forget its state.
_nbd_kill() {
	local f=$LBS_STATE/nbd/$1 pid i
	pid=$(cat "$f.pid" 2>/dev/null)
	if [[ -n $pid ]] && kill "$pid" 2>/dev/null; then
		for ((i = 0; i < 50; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$f".*
}

# nbd_stop [NAME...]: detach and stop the named devices (default: all).
nbd_stop() {
	local dir=$LBS_STATE/nbd name dev rc=0 f
	if (($# == 0)); then
		for f in "$dir"/*.pid; do
			[[ -e $f ]] && set -- "$@" "$(basename "$f" .pid)"
		done
	fi
	for name; do
		dev=$(cat "$dir/$name.dev" 2>/dev/null)
		if [[ -n $dev ]] && [[ -e /sys/block/${dev#/dev/}/pid ]]; then
			nbd-client -d "$dev" >/dev/null 2>&1 || rc=1
		fi
		_nbd_kill "$name"
	done
	return $rc
}

# -------------------------------------------------------------- dmesg ----

# Kernel log lines that mean a kernel bug, whatever the test checks.
DMESG_BAD='WARNING:|BUG:|kernel BUG at|Oops|general protection fault|Call Trace'
DMESG_BAD+='|INFO: task .* blocked for more than|hung_task|possible circular locking'
DMESG_BAD+='|possible recursive locking|KASAN|UBSAN|KFENCE'
DMESG_BAD+='|sleeping function called from invalid context|soft lockup|hard LOCKUP'
DMESG_BAD+='|rcu.*(stall|detected stalls)|refcount_t:|list_(add|del) corruption'
DMESG_BAD+='|segfault at|Kernel panic'
# Scenarios may set DMESG_IGNORE (an ERE) for reports they provoke on
# purpose; a "Call Trace" following an ignored line is ignored with it.
DMESG_IGNORE=${DMESG_IGNORE:-}

dmesg_mark() { _DMESG_MARK=$(dmesg | wc -l); }
dmesg_since_mark() { dmesg | tail -n +$((${_DMESG_MARK:-0} + 1)); }

# dmesg_check: "ok - dmesg clean" or "not ok" with the offending lines.
# (I/O errors are not policed here: on the raw strict nbd device they are
# expected; scenarios check I/O errors on their own devices themselves.)
dmesg_check() {
	local bad
	bad=$(dmesg | awk -v bad="$DMESG_BAD" -v ign="$DMESG_IGNORE" '
		ign != "" && $0 ~ ign { inreport = 1; next }
		inreport && /Call Trace/ { next }
		/---\[ end trace|<\/TASK>/ { inreport = 0 }
		$0 ~ bad { print }')
	if [[ -z $bad ]]; then
		ok "dmesg clean"
	else
		not_ok "dmesg clean" "$(head -n 20 <<<"$bad")" "(full log: $RESULTS/dmesg.log)"
	fi
}

# ------------------------------------------------------- lbs counters ----

# Names of the "dmsetup status" fields after "<start> <len> lbs", in order
# (docs/dm-lbs.rst, "Status").
LBS_FIELDS=(blocks_cached blocks_dirty passthrough_reads passthrough_writes
	cache_hits cache_misses partial_writes gathered_writes rmw_reads
	lower_read_bytes lower_write_bytes alloc_fallbacks lower_errors
	cache_writes writeback_errors passthrough_bounced map_deferred
	tail_writes)

# lbs_field MAPPING NAME: one status field of an lbs mapping, by name.
lbs_field() {
	local i st
	st=$(dmsetup status "$1" 2>/dev/null) || return 1
	for i in "${!LBS_FIELDS[@]}"; do
		if [[ ${LBS_FIELDS[i]} == "$2" ]]; then
			awk -v f=$((i + 4)) '{print $f}' <<<"$st"
			return 0
		fi
	done
	echo "lbs_field: no field $2" >&2
	return 1
}

# bigsector_stat FILE KEY: one counter from the emulator's statistics file.
bigsector_stat() {
	awk -v k="$2" '$1 == k {print $2; f = 1} END {if (!f) print "missing"}' "$1"
}

# dmesg_count_since_mark ERE: kernel log lines since dmesg_mark matching ERE.
dmesg_count_since_mark() {
	dmesg_since_mark | grep -cE "$1"
}

# oom_check DESC: ok if the kernel log has no OOM-killer report.
oom_check() {
	local l
	l=$(dmesg | grep -E 'invoked oom-killer|Out of memory|oom-kill:|Killed process' | head -n 5)
	if [[ -z $l ]]; then
		ok "$1"
	else
		not_ok "$1" "$l"
	fi
}

# mem_fragment LEAVE_MIB: pin guest memory in unmovable one-page pieces
# (pipe buffers, which compaction cannot move) until about LEAVE_MIB MiB
# are still available, then free every other piece: free memory is left as
# isolated 4 KiB holes, so high-order allocations that may not wait (and
# GFP_NOIO ones, which cannot compact) fail.  The holder runs until the
# scenario ends (a cleanup kills it); its pid is printed.  Prints nothing
# and fails if it did not get ready.
mem_fragment() {
	local leave=${1:-32} f=$LBS_STATE/fragment pid i
	rm -f "$f.ready"
	/usr/bin/python3 - "$leave" "$f.ready" >"$f.log" 2>&1 <<'PY' &
import fcntl, os, resource, sys, time
leave_kib = int(sys.argv[1]) * 1024
resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20))
F_SETPIPE_SZ = 1031
page = b"\x5a" * 4096
def avail():
    with open("/proc/meminfo") as m:
        for line in m:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
keep, drop = [], []
while avail() > leave_kib + 2048:
    a, b = os.pipe(), os.pipe()
    for p in (a, b):
        fcntl.fcntl(p[1], F_SETPIPE_SZ, 1 << 20)
    # Interleaved one-page allocations: a gets even pages, b odd ones.
    for _ in range(256):
        os.write(a[1], page)
        os.write(b[1], page)
    keep.append(a)
    drop.append(b)
for r, w in drop:
    os.close(r)
    os.close(w)
print("pinned %d MiB, freed %d MiB in 4 KiB holes" % (len(keep), len(drop)), flush=True)
open(sys.argv[2], "w").close()
while True:
    time.sleep(3600)
PY
	pid=$!
	on_cleanup kill "$pid"
	for ((i = 0; i < 600; i++)); do
		[[ -e $f.ready ]] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.5
	done
	if [[ ! -e $f.ready ]]; then
		diag "mem_fragment: $(cat "$f.log")"
		return 1
	fi
	diag "mem_fragment: $(cat "$f.log")"
	echo "$pid"
}

# high_order_free ORDER: free blocks of at least ORDER pages-order, all zones
# (from /proc/buddyinfo).
high_order_free() {
	awk -v o="$1" '{for (i = 5 + o; i <= NF; i++) s += $i} END {print s + 0}' /proc/buddyinfo
}

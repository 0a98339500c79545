# tests/lib/host.sh - helpers for host-side scenarios (HOST=1).  Sourced
# on the host by tests/vm/host-run after tests/lib/guest.sh, whose TAP
# helpers (ok, not_ok, check, check_eq, diag, skip, on_cleanup) work the
# same here.  Never call the guest's device helpers (lbs_load, nbd_start,
# run_cleanups) on the host.
#
# guest_phase FUNC [--mem MiB] [--timeout SEC] [--qemu-extra "..."]
#     Boot a fresh guest that runs the scenario's function FUNC (with
#     tests/lib/guest.sh, teardown and dmesg policing, like test_main).
#     Its TAP lines join the scenario's; its console, dmesg and rc are
#     kept in $RESULTS/FUNC[.N]/.  Returns the guest's status: 0, 1 (a
#     check failed), 124 (timed out), 125 (died without reporting: what a
#     crashed or power-cut guest does).
# host_nbdkit NAME NBDKIT-ARGS...
#     Start nbdkit on the host, serving a unix socket, stopped at the end
#     of the scenario (or by host_nbdkit_stop NAME).  Prints the socket.
# qemu_nbd_disk NAME SOCKET [LOGICAL [PHYSICAL]]
#     --qemu-extra words attaching SOCKET's export as a virtio-blk disk
#     with serial NAME (the guest finds it with virtio_disk NAME).

HOST_STATE=$RESULTS/.host
mkdir -p "$HOST_STATE"

_phase_tap_merge() {
	local tap=$1 line n
	[[ -e $tap ]] || return 0
	while IFS= read -r line; do
		printf '%s\n' "$line" >>"$TAP_FILE"
		if [[ $line =~ ^(not\ )?ok\ ([0-9]+) ]]; then
			n=${BASH_REMATCH[2]}
			echo "$n" >"$LBS_STATE/tap-count"
		fi
	done <"$tap"
}

guest_phase() {
	local func=$1 dir i=1 rc timeout=${TIMEOUT:-300}
	local -a args=()
	shift
	while (($#)); do
		case $1 in
		--timeout) timeout=$2; shift 2 ;;
		--mem | --qemu-extra) args+=("$1" "$2"); shift 2 ;;
		*) not_ok "guest_phase $func: unknown option $1"; return 2 ;;
		esac
	done
	[[ -n ${MEM:-} ]] && args=(--mem "$MEM" "${args[@]}")
	[[ -n ${KERNEL:-} ]] && args+=(--kernel "$KERNEL")
	dir=$RESULTS/$func
	while [[ -e $dir ]]; do dir=$RESULTS/$func.$((++i)); done
	mkdir -p "$dir"
	read -r LBS_TAP_START <"$LBS_STATE/tap-count"
	LBS_TAP_START=$LBS_TAP_START LBS_PHASE_TIMEOUT=$timeout \
		"$REPO/tests/vm/boot" --quiet --results "$dir" \
		--timeout $((timeout + 60)) "${args[@]}" \
		-- tests/vm/guest-run "$SCENARIO" "$func" 2>"$dir/boot.err"
	rc=$?
	_phase_tap_merge "$dir/tap"
	[[ -s $dir/boot.err ]] || rm -f "$dir/boot.err"
	return $rc
}

host_nbdkit() {
	local name=$1 sock=$HOST_STATE/$1.sock
	shift
	if ! nbdkit -U "$sock" -P "$HOST_STATE/$name.pid" "$@" \
		</dev/null >/dev/null 2>"$HOST_STATE/$name.log"; then
		not_ok "host nbdkit $name" "nbdkit $*" "$(cat "$HOST_STATE/$name.log")"
		return 1
	fi
	echo "$sock"
}

host_nbdkit_stop() {
	local pid i
	pid=$(cat "$HOST_STATE/$1.pid" 2>/dev/null) || return 0
	if kill "$pid" 2>/dev/null; then
		for ((i = 0; i < 50; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null
	fi
	rm -f "$HOST_STATE/$1.pid" "$HOST_STATE/$1.sock"
}

qemu_nbd_disk() {
	local name=$1 sock=$2 lbs=${3:-4096} pbs=${4:-${3:-4096}}
	printf -- '-drive file=nbd:unix:%s,format=raw,if=none,id=%s,cache=none ' \
		"$sock" "$name"
	printf -- '-device virtio-blk-pci,drive=%s,serial=%s,' "$name" "$name"
	printf -- 'logical_block_size=%s,physical_block_size=%s\n' "$lbs" "$pbs"
}

# Only the scenario's own cleanups and nbdkits: the host's devices are not
# ours.  (host_nbdkit runs in $(...): the stop it registers is lost, so
# every nbdkit it started is stopped here by its pid file.)
host_cleanups() {
	local i f
	for ((i = ${#_CLEANUPS[@]} - 1; i >= 0; i--)); do
		eval "${_CLEANUPS[i]}" || diag "cleanup command failed: ${_CLEANUPS[i]}"
	done
	_CLEANUPS=()
	for f in "$HOST_STATE"/*.pid; do
		[[ -e $f ]] && host_nbdkit_stop "$(basename "$f" .pid)"
	done
}

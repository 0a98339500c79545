# tests/native/lib.sh - helpers for the native big-sector scenarios: devices
# whose logical block is the unit itself (16-64 KiB), which Linux 6.15 and
# later attach as they are (bs > PAGE_SIZE, with transparent huge pages),
# and which 6.1 and 6.12 refuse.  Sourced by tests/native/NNN in the guest.

# Does this kernel take logical blocks larger than a page?  From its
# version, so that a kernel that does the other thing fails the test.
native_expected() {
	local v
	v=$(uname -r)
	v=${v%%-*}
	v=${v%%+*}
	[[ $(printf '%s\n6.15\n' "$v" | sort -V | head -n1) == 6.15 ]]
}

# native_nbd NAME SIZE UNIT [FILTER ARGS...]: a strict emulated device
# whose logical block is UNIT bytes (nbd -b UNIT), counted in
# /tmp/NAME.stats.  Prints the device; fails when the kernel refuses it.
native_nbd() {
	local name=$1 size=$2 unit=$3
	shift 3
	NBD_BLOCK_SIZE=$unit nbd_start "$name" "$size" "--filter=$LBS_BIGSECTOR_FILTER" \
		bigsector-unit="$unit" bigsector-mode=strict \
		bigsector-stats="/tmp/$name.stats" "$@"
}

# native_refused_check UNIT: on a kernel that cannot take UNIT-byte logical
# blocks, check that attaching such a device is refused (the last nbd
# device, which no scenario takes before it).
native_refused_check() {
	local unit=$1 sock=$LBS_STATE/refused-$1.sock dev=/dev/nbd15 out pid
	[[ -d /sys/module/nbd ]] || modprobe nbd nbds_max=16 max_part=0
	nbdkit -U "$sock" -P "$sock.pid" memory size=16M </dev/null >/dev/null 2>&1 || {
		not_ok "nbdkit for the refusal check"
		return 1
	}
	if out=$(nbd-client -unix "$sock" "$dev" -b "$unit" 2>&1); then
		not_ok "$(uname -r) refuses a $unit-byte logical block" \
			"it attached $dev: logical block $(cat /sys/block/nbd15/queue/logical_block_size)"
		nbd-client -d "$dev" >/dev/null 2>&1
	else
		ok "$(uname -r) refuses a $unit-byte logical block"
		diag "nbd-client: $(grep -iv '^warning\|^this method\|^negotiation\|^exiting' <<<"$out" | head -n 2)"
	fi
	pid=$(cat "$sock.pid")
	kill "$pid" 2>/dev/null
	while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}

# st MAPPING NAME: a named status field (tests/lib/guest.sh LBS_FIELDS)
st() { lbs_field "$1" "$2"; }

# dev_stat NAME KEY: the emulator's counter for device NAME
dev_stat() { bigsector_stat "/tmp/$1.stats" "$2"; }

# shellcheck shell=bash
# tests/debug/lib.sh - sourced by tests/debug/NNN (guest side): the kernel's
# fault injection (Documentation/fault-injection/fault-injection.rst) and
# kmemleak, both only in the debug kernel (make debug-kernel).

FI_DIR=/sys/kernel/debug
KMEMLEAK=$FI_DIR/kmemleak

# fi_requires CAP...: for requires(): the debug kernel with these
# capabilities (fail_page_alloc, failslab, fail_make_request).
fi_requires() {
	local c
	for c; do
		[[ -d $FI_DIR/$c ]] || {
			echo "no $FI_DIR/$c: needs the debug kernel (make check-debug)"
			return 1
		}
	done
	[[ -f $LBS_BIGSECTOR_FILTER ]] || { echo "emulator not built"; return 1; }
}

# fi_set CAP KEY=VALUE...: write fault attributes, in order.
fi_set() {
	local cap=$1 kv
	shift
	for kv; do
		echo "${kv#*=}" >"$FI_DIR/$cap/${kv%%=*}" || {
			echo "fi_set: cannot write $kv to $FI_DIR/$cap" >&2
			return 1
		}
	done
}

# fi_off CAP: no more injection from CAP (the other attributes are reset
# too, so a later scenario step starts from the defaults).
fi_off() {
	fi_set "$1" probability=0 interval=1 times=1 space=0 verbose=2 task-filter=N
}

# fi_injected CAP START: failures injected since "times" was set to START.
fi_injected() {
	echo $(($2 - $(cat "$FI_DIR/$1/times")))
}

# kmemleak_clear: forget every object allocated so far (a later
# kmemleak_check only reports what this scenario leaked).
kmemleak_clear() {
	[[ -w $KMEMLEAK ]] && echo clear >"$KMEMLEAK"
	return 0
}

# kmemleak_check DESC: scan for leaks (kmemleak needs objects to be a few
# seconds old and two scans to be sure); fail if any leaked object was
# allocated by the target.  Must run before the module is unloaded: the
# backtraces are resolved when they are printed.  A skip without kmemleak
# (the debug kernel boots with it off unless given kmemleak=on).
kmemleak_check() {
	local desc=$1 rep ours
	if [[ ! -w $KMEMLEAK ]]; then
		skip "$desc" "kmemleak is off (boot with kmemleak=on: make check-debug)"
		return 0
	fi
	sleep 6
	echo scan >"$KMEMLEAK"
	sleep 1
	echo scan >"$KMEMLEAK"
	rep=$(cat "$KMEMLEAK")
	echo "$rep" >"$RESULTS/kmemleak.log"
	# One report per object: a blank-line-free block starting with
	# "unreferenced object"; ours if its backtrace names the target.
	ours=$(awk '/^unreferenced object/ { if (blk ~ /lbs/) print blk; blk = "" }
		{ blk = blk $0 "\n" } END { if (blk ~ /lbs/) print blk }' <<<"$rep")
	if [[ -z $ours ]]; then
		ok "$desc ($(grep -c '^unreferenced object' <<<"$rep") unrelated objects)"
	else
		not_ok "$desc" "$(head -n 40 <<<"$ours")" "(all: $RESULTS/kmemleak.log)"
	fi
}

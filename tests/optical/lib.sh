# shellcheck shell=bash
# tests/optical/lib.sh - shared by the optical scenarios (sourced by each,
# in the guest and, for host-side scenarios, on the host).  Not a scenario.

OPT_SETUP=$REPO/tools/lbs-setup
OPT_FILTER=$LBS_BIGSECTOR_FILTER

# opt_requires TOOL...: the emulator and the tools, else the skip reason.
opt_requires() {
	local t
	[[ -f $OPT_FILTER ]] || { echo "bigsector filter not built (make emulator)"; return 1; }
	for t in "$@"; do
		command -v "$t" >/dev/null || { echo "$t not installed (make deps)"; return 1; }
	done
}

# opt_stat FILE KEY: one counter of the emulator's statistics file.
opt_stat() {
	awk -v k="$2" '$1 == k {print $2; f = 1} END {if (!f) print "missing"}' "$1"
}

# opt_nbd_sock NAME: the unix socket of nbd_start NAME.
opt_nbd_sock() { echo "$LBS_STATE/nbd/$1.sock"; }

# opt_stats_now NAME FILE: make nbdkit NAME rewrite its statistics FILE
# now (SIGUSR1) and wait until it has.
opt_stats_now() {
	local pid before i
	pid=$(cat "$LBS_STATE/nbd/$1.pid") || return 1
	before=$(stat -c %y "$2" 2>/dev/null)
	kill -USR1 "$pid" || return 1
	for ((i = 0; i < 100; i++)); do
		[[ $(stat -c %y "$2" 2>/dev/null) != "$before" ]] && return 0
		sleep 0.1
	done
	return 1
}

# opt_make_tree DIR: a tree of about 20 MiB of random files whose sizes
# straddle the 2 KiB sector and the 32/64 KiB units (empty, 1 byte, 2047,
# 2049, 32767, 65537, ... up to several MiB), in nested directories.
opt_make_tree() {
	local d=$1 i s
	mkdir -p "$d/a/b/c" "$d/empty-dir" "$d/docs"
	: >"$d/empty"
	i=0
	for s in 1 511 2047 2048 2049 4095 32767 32768 32769 65535 65537 \
		100000 131072 250001 1048575 1048577 3000001 5242880 9437185; do
		head -c "$s" /dev/urandom >"$d/f$i-$s" || return 1
		i=$((i + 1))
	done
	for i in 1 2 3 4 5 6 7 8; do
		head -c $((i * 7919)) /dev/urandom >"$d/a/b/c/n$i" || return 1
		head -c $((i * 40961)) /dev/urandom >"$d/a/m$i" || return 1
	done
	printf 'optical media through dm-lbs\n' >"$d/docs/README"
}

# opt_make_iso SRC OUT: an ISO 9660 image (Rock Ridge, Joliet) of SRC.
opt_make_iso() {
	xorriso -as mkisofs -quiet -R -J -V LBS_DISC -o "$2" "$1"
}

# opt_no_partial DESC STATS: the device saw no partial, misaligned or
# refused request of any kind and did no internal read-modify-write.
opt_no_partial() {
	local desc=$1 f=$2 k bad=
	for k in write.partial write.misaligned write.refused read.partial \
		read.misaligned read.refused trim.partial trim.refused \
		zero.partial zero.refused rmw.cycles lower.misaligned; do
		[[ $(opt_stat "$f" "$k") == 0 ]] || bad+=" $k=$(opt_stat "$f" "$k")"
	done
	if [[ -z $bad ]]; then
		ok "$desc"
	else
		not_ok "$desc" "counters:$bad"
	fi
}

# opt_table_unit TABLE: the block size field of an lbs table line.
opt_table_unit() { awk '{print $6}' <<<"$1"; }

# opt_delta OLD NEW KEY: NEW's counter minus OLD's.
opt_delta() { echo $(($(opt_stat "$2" "$3") - $(opt_stat "$1" "$3"))); }

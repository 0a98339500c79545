#!/bin/bash
# Injected errors: byte ranges (bigsector-error-read/-write), seeded
# per-request probability (reproducible for the same seed), and the
# "dead device" file (bigsector-error-file).  All counted.
source "$(dirname "$0")/functions.sh"
requires_nbdpy

export STATS=$tmpdir/stats

# --- ranges ---
cat > "$tmpdir/ranges.py" <<'PY'
import errno
from bs import *
K = 1024
h = connect()
s0 = stats()
check(succeeds(h.pread, 64 * K, 0), "read before range")
check(fails_with(errno.EIO, h.pread, 64 * K, 64 * K), "read in range")
check(fails_with(errno.EIO, h.pread, 4 * K, 124 * K), "read touching end")
check(succeeds(h.pread, 64 * K, 128 * K), "read after range (end exclusive)")
check(succeeds(h.pwrite, b"w" * 64 * K, 64 * K), "write in read range")
# write range: a single byte at 1M, and 2M-3M
check(fails_with(errno.EIO, h.pwrite, b"w" * 64 * K, 1024 * K), "write 1M")
check(succeeds(h.pwrite, b"w" * 64 * K, 1024 * K + 64 * K), "write 1M+64K")
check(fails_with(errno.EIO, h.zero, 64 * K, 2048 * K), "zero in range")
check(fails_with(errno.EIO, h.trim, 64 * K, 3072 * K - 64 * K), "trim in range")
check(succeeds(h.pread, 64 * K, 1024 * K), "read write-range")
# refusal comes before injection: a misaligned request is EINVAL
check(fails_with(errno.EINVAL, h.pread, 100, 64 * K), "misaligned in range")
d = delta(s0, stats())
expect(d, read__injected=2, read__errors=2, write__injected=1,
       write__errors=1, zero__injected=1, trim__injected=1,
       faults__injected=5, read__refused=1, lower__write__requests=2)
done()
PY
run_nbdkit memory 4M bigsector-unit=64K bigsector-stats=$STATS \
  bigsector-stats-interval=1 bigsector-error-read=64K-128K \
  bigsector-error-write=1M-1048577,2M-3M \
  --run "export uri; $PY $tmpdir/ranges.py"
echo "ranges ok"

# --- error file: the device dies and comes back ---
cat > "$tmpdir/file.py" <<'PY'
import errno, os
from bs import *
K = 1024
dead = os.environ["DEAD"]
h = connect()
check(succeeds(h.pwrite, b"a" * 64 * K, 0), "write while alive")
open(dead, "w").close()
s0 = stats()
check(fails_with(errno.EIO, h.pread, 64 * K, 0), "read while dead")
check(fails_with(errno.EIO, h.pwrite, b"b" * 64 * K, 0), "write while dead")
check(fails_with(errno.EIO, h.flush), "flush while dead")
expect(delta(s0, stats()), read__injected=1, write__injected=1,
       flush__injected=1, faults__injected=3, lower__write__requests=0)
os.unlink(dead)
check(succeeds(h.flush), "flush alive again")
check(h.pread(64 * K, 0) == b"a" * 64 * K, "data survived")
done()
PY
DEAD=$tmpdir/dead run_nbdkit memory 1M bigsector-unit=64K \
  bigsector-stats=$STATS bigsector-stats-interval=1 \
  bigsector-error-file=$tmpdir/dead --run "export uri; $PY $tmpdir/file.py"
echo "error file ok"

# --- rate + seed: reproducible ---
cat > "$tmpdir/rate.py" <<'PY'
import errno, os
from bs import *
h = connect()
out = []
for i in range(200):
    try:
        h.pread(4096, (i % 16) * 4096)
        out.append(".")
    except nbd.Error:
        out.append("X")
    try:
        h.pwrite(b"q" * 4096, (i % 16) * 4096)
        out.append(".")
    except nbd.Error:
        out.append("W")
open(os.environ["OUT"], "w").write("".join(out) + "\n")
PY
rate () {
  local out=$1
  shift
  OUT=$out run_nbdkit memory 1M bigsector-unit=4K bigsector-stats=$STATS \
    "$@" --run "export uri; $PY $tmpdir/rate.py"
}
rate "$tmpdir/a" bigsector-error-rate=0.25 bigsector-error-seed=42
rate "$tmpdir/b" bigsector-error-rate=25% bigsector-error-seed=42
rate "$tmpdir/c" bigsector-error-rate=0.25 bigsector-error-seed=43
cmp "$tmpdir/a" "$tmpdir/b" || fail "same seed, different failures"
cmp -s "$tmpdir/a" "$tmpdir/c" && fail "different seeds, same failures"
nx=$(tr -cd 'X' < "$tmpdir/a" | wc -c)
nw=$(tr -cd 'W' < "$tmpdir/a" | wc -c)
echo "seed 42: $nx read and $nw write failures of 200 each"
[ $nx -ge 25 ] && [ $nx -le 75 ] || fail "read failures $nx not near 50"
[ $nw -ge 25 ] && [ $nw -le 75 ] || fail "write failures $nw not near 50"
# run c's stats are in $STATS; run c again to compare with its counters
rate "$tmpdir/c2" bigsector-error-rate=0.25 bigsector-error-seed=43
expect_stat "$STATS" \
  read.injected "$(tr -cd 'X' < "$tmpdir/c2" | wc -c)" \
  write.injected "$(tr -cd 'W' < "$tmpdir/c2" | wc -c)" \
  faults.injected "$(tr -cd 'XW' < "$tmpdir/c2" | wc -c)"

# Split rates: reads always fail, writes never.
rate "$tmpdir/d" bigsector-error-read-rate=1 bigsector-error-write-rate=0
[ "$(tr -cd 'X' < "$tmpdir/d" | wc -c)" = 200 ] || fail "read rate 1"
[ "$(tr -cd 'W' < "$tmpdir/d" | wc -c)" = 0 ] || fail "write rate 0"
echo ok

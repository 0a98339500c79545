#!/bin/bash
# bigsector-volatile-partial=on: at a power cut a seeded random subset
# of the cached units reaches the medium, each unit whole or not at
# all.  Start from an "old" image, write a "new" version of 48 units
# (whole-unit and partial writes, the latter RMW'd), cut, restart:
# every unit must be exactly old or exactly new (never torn below a
# unit), the number of new units must match powercut.units_persisted,
# and the same seed must persist the same units.
source "$(dirname "$0")/functions.sh"
requires_nbdpy

export STATS=$tmpdir/stats
export CUT=$tmpdir/cut
disk=$tmpdir/disk
N=48

cat > "$tmpdir/mkold.py" <<'PY'
import os, sys
from bs import pattern
U = 32 * 1024
with open(sys.argv[1], "wb") as f:
    for i in range(64):
        f.write(pattern(100 + i, U))
PY

cat > "$tmpdir/write.py" <<'PY'
import errno, os
from bs import *
K = 1024
U = 32 * K
N = int(os.environ["N"])
h = connect()
for i in range(N):
    if i % 3 == 0:
        h.pwrite(pattern(200 + i, U), i * U)             # whole unit
    else:
        h.pwrite(pattern(200 + i, 6 * K), i * U + (i % 5) * 2 * K)  # RMW
expect(stats(), cache__units=N, lower__write__requests=0)
open(os.environ["CUT"], "w").close()
check(fails_with(errno.EIO, h.pread, U, 0), "read after cut")
st = stats()
check(st["powercut"] == 1, "powercut")
check(st["powercut.units_persisted"] + st["powercut.units_lost"] == N,
      "persisted + lost != %d" % N)
done()
PY

cat > "$tmpdir/verify.py" <<'PY'
import os
from bs import *
K = 1024
U = 32 * K
N = int(os.environ["N"])
h = connect()
state = []
for i in range(64):
    got = h.pread(U, i * U)
    old = pattern(100 + i, U)
    if i % 3 == 0:
        new = pattern(200 + i, U)
    else:
        b = bytearray(old)
        o = (i % 5) * 2 * K
        b[o:o + 6 * K] = pattern(200 + i, 6 * K)
        new = bytes(b)
    if i >= N:
        check(got == old, "unit %d was never written but changed" % i)
        continue
    if got == new:
        state.append("N")
    elif got == old:
        state.append("o")
    else:
        check(False, "unit %d is torn: neither old nor new" % i)
        state.append("?")
open(os.environ["OUT"], "w").write("".join(state) + "\n")
done()
PY

cut_run () {   # cut_run SEED OUTFILE
  rm -f "$CUT"
  $PY "$tmpdir/mkold.py" "$disk"
  N=$N run_nbdkit file "$disk" bigsector-profile=dvd-ram \
    bigsector-volatile=on bigsector-volatile-partial=on \
    bigsector-powercut-seed=$1 bigsector-powercut-file="$CUT" \
    bigsector-stats=$STATS bigsector-stats-interval=1 \
    --run "export uri; $PY $tmpdir/write.py"
  rm -f "$CUT"
  N=$N OUT=$2 run_nbdkit file "$disk" bigsector-profile=dvd-ram \
    --run "export uri; $PY $tmpdir/verify.py"
  persisted=$(tr -cd N < "$2" | wc -c)
  echo "seed $1: $(cat "$2") ($persisted of $N persisted)"
  expect_stat "$STATS" powercut.units_persisted "$persisted" \
    powercut.units_lost $((N - persisted))
  [ "$persisted" -gt 0 ] && [ "$persisted" -lt $N ] ||
    fail "seed $1: expected some but not all units to persist"
}

cut_run 7 "$tmpdir/a"
cut_run 7 "$tmpdir/b"
cut_run 8 "$tmpdir/c"
cmp "$tmpdir/a" "$tmpdir/b" || fail "same seed persisted different units"
cmp -s "$tmpdir/a" "$tmpdir/c" && fail "different seeds, same units"
echo ok

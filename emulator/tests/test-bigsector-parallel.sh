#!/bin/bash
# Concurrency: the filter runs in nbdkit's PARALLEL thread model, so
# many partial writes into the same units are in flight at once, over
# several connections.  Each is an internal read-modify-write of its
# unit; without per-unit serialisation updates would be lost.  After
# every round, each sector must hold exactly what was last written.
source "$(dirname "$0")/functions.sh"
requires_nbdpy

export STATS=$tmpdir/stats
cat > "$tmpdir/t.py" <<'PY'
import os, random
from bs import *
K = 1024
S = 2 * K                   # dvd-ram sector
U = 32 * K                  # ECC block
UNITS = 8
NSECT = UNITS * U // S      # 128 sectors in 8 units
CONNS = 4
hs = [connect() for _ in range(CONNS)]
check(hs[0].get_block_size(nbd.SIZE_PREFERRED) == U, "preferred size")
model = bytearray(UNITS * U)
rng = random.Random(1)
for rnd in range(6):
    order = list(range(NSECT))
    rng.shuffle(order)
    for n, s in enumerate(order):           # neighbours on other conns
        h = hs[n % CONNS]
        buf = pattern(rnd * 1000 + s, S)
        model[s * S:(s + 1) * S] = buf
        h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(buf)), s * S)
    for h in hs:
        while h.aio_in_flight() > 0:
            h.poll(-1)
    got = hs[0].pread(UNITS * U, 0)
    bad = [s for s in range(NSECT)
           if got[s * S:(s + 1) * S] != model[s * S:(s + 1) * S]]
    check(not bad, "round %d: %d sectors lost their update" % (rnd, len(bad)))
done()
PY
for vol in off on; do
  run_nbdkit --threads=16 memory 1M bigsector-profile=dvd-ram \
    bigsector-volatile=$vol bigsector-stats=$STATS \
    --run "export uri; $PY $tmpdir/t.py"
  # 6 rounds x 128 sector writes, each one RMW cycle
  expect_stat "$STATS" write.rmw_cycles 768 write.errors 0 lower.misaligned 0
  echo "volatile=$vol ok"
done
echo ok

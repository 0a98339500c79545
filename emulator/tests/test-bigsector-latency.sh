#!/bin/bash
# The latency model: per request, per byte moved on the medium
# (bigsector-bandwidth / bigsector-latency-byte) and per internal RMW
# cycle, so a benchmark can show what RMW costs.  Off by default.
source "$(dirname "$0")/functions.sh"
requires_nbdpy

export STATS=$tmpdir/stats
cat > "$tmpdir/t.py" <<'PY'
import os, time
from bs import *
K = 1024
U = 32 * K
h = connect()

def timed(f, *a):
    t = time.monotonic()
    f(*a)
    return time.monotonic() - t

mode = os.environ["MODE"]
if mode == "rmw":           # latency-rmw=50ms
    t_aligned = timed(h.pwrite, b"a" * U, 0)
    t_partial = timed(h.pwrite, b"b" * 2 * K, U + 4 * K)
    t_two = timed(h.pwrite, b"c" * 4 * K, 3 * U - 2 * K)
    print("aligned %.3fs, 1 RMW %.3fs, 2 RMW %.3fs" % (t_aligned, t_partial, t_two))
    check(t_aligned < 0.04, "aligned write slowed down")
    check(t_partial >= 0.05, "partial write not delayed by one RMW")
    check(t_two >= 0.10, "two RMW cycles not delayed twice")
    check(stats()["latency.ns"] == 150_000_000, "latency.ns")
elif mode == "bandwidth":   # bandwidth=10M, latency-request=20ms
    t_read = timed(h.pread, 1024 * K, 0)
    t_flush = timed(h.flush)
    print("1M read %.3fs, flush %.3fs" % (t_read, t_flush))
    check(t_read >= 0.12, "1M at 10M/s + 20ms should take >= 0.12s")
    check(t_flush >= 0.02, "flush should take >= latency-request")
    # 1M at 10M/s is 100ms; per-byte cost is kept in picoseconds, so
    # allow for rounding.
    ns = stats()["latency.ns"]
    check(abs(ns - (20_000_000 + 100_000_000 + 20_000_000)) < 10_000,
          "latency.ns %d" % ns)
else:                       # no latency options: nothing slept
    for i in range(20):
        h.pwrite(b"d" * 2 * K, i * U + 2 * K)
    check(stats()["latency.ns"] == 0, "latency without options")
done()
PY
MODE=rmw run_nbdkit memory 1M bigsector-profile=dvd-ram \
  bigsector-latency-rmw=50ms bigsector-stats=$STATS bigsector-stats-interval=1 \
  --run "export uri; $PY $tmpdir/t.py"
MODE=bandwidth run_nbdkit memory 1M bigsector-profile=dvd-ram \
  bigsector-bandwidth=10M bigsector-latency-request=20ms \
  bigsector-stats=$STATS bigsector-stats-interval=1 \
  --run "export uri; $PY $tmpdir/t.py"
MODE=none run_nbdkit memory 1M bigsector-profile=dvd-ram \
  bigsector-stats=$STATS bigsector-stats-interval=1 \
  --run "export uri; $PY $tmpdir/t.py"
echo ok

#!/bin/bash
# The stats file on demand while nbdkit runs: SIGUSR1 (handled by the
# filter's signal thread, checked against the installed nbdkit),
# bigsector-stats-interval=N, and at each client disconnect; always
# replaced atomically (no temporary files left behind).
source "$(dirname "$0")/functions.sh"
requires_nbdpy

export STATS=$tmpdir/stats
cat > "$tmpdir/usr1.py" <<'PY'
import glob, os, signal, time
from bs import *
U = 64 * 1024
pid = int(open(os.environ["PIDFILE"]).read())

def usr1():
    n = stats()["stats.dumps"]
    os.kill(pid, signal.SIGUSR1)
    for _ in range(100):
        if stats()["stats.dumps"] > n:
            return stats()
        time.sleep(0.02)
    check(False, "SIGUSR1 did not rewrite the stats file")
    return stats()

h = connect()
check(stats()["write.requests"] == 0, "initial file (written at startup)")
for i in range(3):
    h.pwrite(pattern(i, U), i * U)
check(stats()["write.requests"] == 0, "file changed without a trigger")
st = usr1()
expect(st, write__requests=3, lower__write__bytes=3 * U, connections=1)
h.pread(U, 0)
h.pread(U, U)
st = usr1()
expect(st, write__requests=3, read__requests=2, requests=5)
check(not glob.glob(os.environ["STATS"] + ".tmp*"), "temporary file left")

# A second connection: the file is rewritten when the first one goes.
h.shutdown()
del h
for _ in range(100):
    if stats()["connections"] == 1 and stats()["stats.dumps"] >= 4:
        break
    time.sleep(0.02)
check(stats()["stats.dumps"] >= 4, "not rewritten at disconnect")
h2 = connect()
h2.pread(U, 0)
st = usr1()
expect(st, connections=2, read__requests=3)
done()
PY
PIDFILE=$tmpdir/pid run_nbdkit -P "$tmpdir/pid" memory 1M \
  bigsector-unit=64K bigsector-stats=$STATS \
  --run "export uri; $PY $tmpdir/usr1.py"
echo "SIGUSR1 ok"

cat > "$tmpdir/interval.py" <<'PY'
from bs import *
U = 64 * 1024
h = connect()
for i in range(3):
    h.pwrite(pattern(i, U), i * U)
check(stats()["requests"] == 0, "written before the interval")
h.flush()                                # 4th request
expect(stats(), requests=4, write__requests=3, flush__requests=1)
for i in range(4):
    h.pread(U, 0)
expect(stats(), requests=8, read__requests=4)
done()
PY
run_nbdkit memory 1M bigsector-unit=64K bigsector-stats=$STATS \
  bigsector-stats-interval=4 --run "export uri; $PY $tmpdir/interval.py"
ls "$tmpdir" | grep -q 'stats.tmp' && fail "temporary file left"
echo ok

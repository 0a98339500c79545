#!/bin/bash
# Power cut triggers other than the file: bigsector-powercut-after-writes=N
# (deterministic: the Nth accepted write completes, everything after
# fails) and SIGUSR2 (from outside, with no request in flight; with
# bigsector-volatile-partial=on the filter persists units through its
# own plugin context).
source "$(dirname "$0")/functions.sh"
requires_nbdpy

export STATS=$tmpdir/stats
disk=$tmpdir/disk
truncate -s 2M "$disk"

# --- after N writes ---
cat > "$tmpdir/after.py" <<'PY'
import errno
from bs import *
U = 64 * 1024
h = connect()
check(succeeds(h.pwrite, pattern(1, U), 0), "write 1")
check(fails_with(errno.EINVAL, h.pwrite, b"x" * 4096, 0), "refused write")
check(succeeds(h.pread, U, 0), "read between")
check(succeeds(h.pwrite, pattern(2, U), U), "write 2")
check(stats()["powercut"] == 0, "cut too early")
check(succeeds(h.pwrite, pattern(3, U), 2 * U), "write 3 (the Nth)")
check(stats()["powercut"] == 1, "no cut after write N")
check(fails_with(errno.EIO, h.pwrite, pattern(4, U), 3 * U), "write 4")
check(fails_with(errno.EIO, h.pread, U, 0), "read after cut")
expect(stats(), write__requests=5, write__refused=1, write__errors=1,
       powercut__units_lost=0, lower__write__requests=3)
done()
PY
run_nbdkit file "$disk" bigsector-profile=disk64k \
  bigsector-powercut-after-writes=3 \
  bigsector-stats=$STATS bigsector-stats-interval=1 \
  --run "export uri; $PY $tmpdir/after.py"
echo "after-writes ok"

# With a volatile cache the three acknowledged writes are lost.
truncate -s 0 "$disk"; truncate -s 2M "$disk"
cat > "$tmpdir/after-vol.py" <<'PY'
import errno
from bs import *
U = 64 * 1024
h = connect()
for i in range(3):
    check(succeeds(h.pwrite, pattern(1 + i, U), i * U), "write %d" % i)
check(fails_with(errno.EIO, h.pwrite, pattern(4, U), 3 * U), "write 4")
expect(stats(), powercut=1, powercut__units_lost=3, lower__write__requests=0)
done()
PY
run_nbdkit file "$disk" bigsector-profile=disk64k bigsector-volatile=on \
  bigsector-powercut-after-writes=3 \
  bigsector-stats=$STATS bigsector-stats-interval=1 \
  --run "export uri; $PY $tmpdir/after-vol.py"
cmp "$disk" <(head -c 2M /dev/zero) || fail "unflushed writes reached the disk"
echo "after-writes volatile ok"

# --- SIGUSR2 ---
truncate -s 0 "$disk"; truncate -s 2M "$disk"
cat > "$tmpdir/usr2.py" <<'PY'
import errno, os, signal, time
from bs import *
U = 64 * 1024
h = connect()
for i in range(32):
    h.pwrite(pattern(50 + i, U), i * U)
expect(stats(), cache__units=32, powercut=0)
os.kill(int(open(os.environ["PIDFILE"]).read()), signal.SIGUSR2)
for _ in range(100):                 # the signal thread does the cut
    if stats()["powercut"] == 1:
        break
    time.sleep(0.05)
st = stats()
check(st["powercut"] == 1, "SIGUSR2 did not cut the power")
check(0 < st["powercut.units_persisted"] < 32,
      "partial persistence: %d of 32" % st["powercut.units_persisted"])
check(fails_with(errno.EIO, h.pread, U, 0), "read after SIGUSR2 cut")
open(os.environ["OUT"], "w").write("%d\n" % st["powercut.units_persisted"])
done()
PY
PIDFILE=$tmpdir/pid OUT=$tmpdir/persisted \
  run_nbdkit -P "$tmpdir/pid" file "$disk" bigsector-unit=64K \
  bigsector-volatile=on bigsector-volatile-partial=on \
  bigsector-stats=$STATS bigsector-stats-interval=1 \
  --run "export uri; $PY $tmpdir/usr2.py"

cat > "$tmpdir/usr2-after.py" <<'PY'
import os
from bs import *
U = 64 * 1024
h = connect()
n = 0
for i in range(32):
    got = h.pread(U, i * U)
    if got == pattern(50 + i, U):
        n += 1
    else:
        check(got == bytes(U), "unit %d torn" % i)
check(n == int(open(os.environ["OUT"]).read()),
      "%d units on disk, stats said %s" % (n, open(os.environ["OUT"]).read()))
done()
PY
OUT=$tmpdir/persisted run_nbdkit file "$disk" bigsector-unit=64K \
  --run "export uri; $PY $tmpdir/usr2-after.py"
echo "SIGUSR2 ok ($(cat "$tmpdir/persisted") of 32 units persisted)"
echo ok

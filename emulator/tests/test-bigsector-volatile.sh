#!/bin/bash
# Volatile write cache + power cut, on a real file so persistence can
# be checked by restarting nbdkit: flushed data, FUA writes and zeroes
# survive the cut; unflushed writes do not; after the cut the device
# is dead (EIO) until restarted.  Also: reads see cached data, the
# plugin sees nothing until flush, a full cache destages its oldest
# unit, and without a volatile cache a cut loses nothing.
source "$(dirname "$0")/functions.sh"
requires_nbdpy
requires truncate

export STATS=$tmpdir/stats
disk=$tmpdir/disk
export CUT=$tmpdir/cut
truncate -s 1M "$disk"

cat > "$tmpdir/before.py" <<'PY'
import errno, os
from bs import *
K = 1024
U = 64 * K
h = connect()

s0 = stats()
h.pwrite(pattern(1, U), 0)                 # unit 0: A
h.pwrite(pattern(2, 4 * K), U + 8 * K)     # unit 1: partial (RMW)
d = delta(s0, stats())
expect(d, lower__write__requests=0, cache__inserts=2, write__rmw_cycles=1,
       lower__read__requests=1)           # RMW read of unit 1 only
check(stats()["cache.units"] == 2, "2 units cached")
check(h.pread(U, 0) == pattern(1, U), "read sees cached unit 0")

s0 = stats()
h.flush()
d = delta(s0, stats())
expect(d, lower__write__requests=2, lower__write__bytes=2 * U,
       cache__writeback_units=2, flush__bytes=2 * U, lower__flush__requests=1)
check(stats()["cache.units"] == 0, "cache empty after flush")

s0 = stats()
h.pwrite(pattern(3, U), 2 * U)             # unit 2: unflushed
h.pwrite(pattern(4, U), 0)                 # unit 0: overwritten, unflushed
h.pwrite(pattern(5, U), 3 * U, nbd.CMD_FLAG_FUA)   # unit 3: FUA
h.zero(U, 4 * U)                           # unit 4 had data? zero goes through
h.pwrite(pattern(6, 4 * K), 5 * U)         # unit 5: partial, unflushed
d = delta(s0, stats())
expect(d, lower__write__requests=1, lower__write__fua=1,
       lower__zero__requests=1, cache__inserts=3)
check(h.pread(U, 0) == pattern(4, U), "read sees newer cached unit 0")
check(h.pread(U, 2 * U) == pattern(3, U), "read sees cached unit 2")

open(os.environ["CUT"], "w").close()       # pull the plug
check(fails_with(errno.EIO, h.pread, U, 0), "read after cut")
check(fails_with(errno.EIO, h.pwrite, pattern(7, U), 6 * U), "write after cut")
check(fails_with(errno.EIO, h.flush), "flush after cut")
os.unlink(os.environ["CUT"])
check(fails_with(errno.EIO, h.pread, U, 0), "still dead without the file")
st = stats()
expect(st, powercut=1, powercut__units_lost=3, powercut__units_persisted=0,
       cache__units=0)
done()
PY
run_nbdkit file "$disk" bigsector-unit=64K bigsector-sector=4096 \
  bigsector-volatile=on bigsector-powercut-file="$CUT" \
  bigsector-stats=$STATS bigsector-stats-interval=1 \
  --run "export uri; $PY $tmpdir/before.py"
echo "before cut ok"

# "Power on": a fresh nbdkit on the same file.
cat > "$tmpdir/after.py" <<'PY'
from bs import *
K = 1024
U = 64 * K
h = connect()
check(h.pread(U, 0) == pattern(1, U), "flushed unit 0 (old A) not present")
u1 = bytearray(U); u1[8 * K:12 * K] = pattern(2, 4 * K)
check(h.pread(U, U) == bytes(u1), "flushed partial unit 1 wrong")
check(h.pread(U, 2 * U) == bytes(U), "unflushed unit 2 survived")
check(h.pread(U, 3 * U) == pattern(5, U), "FUA unit 3 lost")
check(h.pread(U, 4 * U) == bytes(U), "zeroed unit 4")
check(h.pread(U, 5 * U) == bytes(U), "unflushed partial unit 5 survived")
done()
PY
run_nbdkit file "$disk" bigsector-unit=64K --run "export uri; $PY $tmpdir/after.py"
echo "after cut ok"

# Cache full: bigsector-volatile-size=128K holds two 64K units, the
# third write destages the oldest; the cut then loses only two.
truncate -s 0 "$disk"; truncate -s 1M "$disk"
cat > "$tmpdir/evict.py" <<'PY'
import errno, os
from bs import *
U = 64 * 1024
h = connect()
for i in range(3):
    h.pwrite(pattern(10 + i, U), i * U)
st = stats()
expect(st, cache__evictions=1, cache__units=2, cache__peak_units=2,
       lower__write__requests=1)
h.pwrite(pattern(20, U), 1 * U)            # rewrite a cached unit: no evict
expect(stats(), cache__evictions=1, cache__units=2)
open(os.environ["CUT"], "w").close()
check(fails_with(errno.EIO, h.pread, U, 0), "read after cut")
expect(stats(), powercut__units_lost=2, powercut=1)
done()
PY
run_nbdkit file "$disk" bigsector-unit=64K bigsector-volatile=on \
  bigsector-volatile-size=128K bigsector-powercut-file="$CUT" \
  bigsector-stats=$STATS bigsector-stats-interval=1 \
  --run "export uri; $PY $tmpdir/evict.py"
rm -f "$CUT"
cat > "$tmpdir/evict-after.py" <<'PY'
from bs import *
U = 64 * 1024
h = connect()
check(h.pread(U, 0) == pattern(10, U), "destaged unit 0 lost")
check(h.pread(2 * U, U) == bytes(2 * U), "cached units 1, 2 survived")
done()
PY
run_nbdkit file "$disk" bigsector-unit=64K \
  --run "export uri; $PY $tmpdir/evict-after.py"
echo "eviction ok"

# No volatile cache: a cut kills the device but loses nothing.
truncate -s 0 "$disk"; truncate -s 1M "$disk"
cat > "$tmpdir/novol.py" <<'PY'
import errno, os
from bs import *
U = 64 * 1024
h = connect()
h.pwrite(pattern(30, U), 0)
open(os.environ["CUT"], "w").close()
check(fails_with(errno.EIO, h.pread, U, 0), "read after cut")
expect(stats(), powercut=1, powercut__units_lost=0, write__errors=0,
       read__errors=1)
done()
PY
run_nbdkit file "$disk" bigsector-unit=64K bigsector-powercut-file="$CUT" \
  bigsector-stats=$STATS bigsector-stats-interval=1 \
  --run "export uri; $PY $tmpdir/novol.py"
rm -f "$CUT"
cat > "$tmpdir/novol-after.py" <<'PY'
from bs import *
h = connect()
check(h.pread(65536, 0) == pattern(30, 65536), "write-through data lost")
done()
PY
run_nbdkit file "$disk" bigsector-unit=64K \
  --run "export uri; $PY $tmpdir/novol-after.py"
echo ok

#!/bin/bash
# Strict mode (bigsector-profile=disk64k: 4K sectors, 64K units): only
# whole aligned units are accepted; partial units and unaligned
# sectors are refused with EINVAL and counted; flush is always
# accepted; the plugin only ever sees whole units.
source "$(dirname "$0")/functions.sh"
requires_nbdpy

export STATS=$tmpdir/stats
cat > "$tmpdir/t.py" <<'PY'
import errno
from bs import *

h = connect()
K = 1024
s0 = stats()

# The brief's headline case: a 4 KiB write is refused and counted.
check(fails_with(errno.EINVAL, h.pwrite, b"x" * 4096, 0), "4K write accepted")
d = delta(s0, stats())
expect(d, write__requests=1, write__bytes=4096, write__partial=1,
       write__refused=1, write__aligned=0, lower__write__requests=0)

# Not even sector aligned: refused too, counted as misaligned.
s0 = stats()
check(fails_with(errno.EINVAL, h.pwrite, b"x" * 512, 0), "512 write accepted")
check(fails_with(errno.EINVAL, h.pwrite, b"x" * 64 * K, 512), "unaligned off")
d = delta(s0, stats())
expect(d, write__requests=2, write__misaligned=2, write__refused=2,
       write__partial=0)

# Whole units go through, one or several at a time.
s0 = stats()
check(succeeds(h.pwrite, pattern(1, 64 * K), 64 * K), "64K write refused")
check(succeeds(h.pwrite, pattern(2, 256 * K), 256 * K), "256K write refused")
d = delta(s0, stats())
expect(d, write__requests=2, write__aligned=2, write__refused=0,
       write__bytes=320 * K, lower__write__requests=2,
       lower__write__bytes=320 * K, write__rmw_cycles=0)

# Reads: whole units fine, partial refused (no internal RMW in strict).
s0 = stats()
check(h.pread(64 * K, 64 * K) == pattern(1, 64 * K), "read back unit 1")
check(fails_with(errno.EINVAL, h.pread, 4 * K, 64 * K), "4K read accepted")
check(fails_with(errno.EINVAL, h.pread, 64 * K, 4 * K), "offset read accepted")
d = delta(s0, stats())
expect(d, read__requests=3, read__aligned=1, read__partial=2,
       read__refused=2, lower__read__requests=1, lower__read__bytes=64 * K,
       read__extra_read_bytes=0)

# Trim and zero follow the same rules.
s0 = stats()
check(fails_with(errno.EINVAL, h.trim, 8 * K, 0), "partial trim accepted")
check(fails_with(errno.EINVAL, h.zero, 8 * K, 0), "partial zero accepted")
check(succeeds(h.trim, 64 * K, 0), "unit trim refused")
check(succeeds(h.zero, 128 * K, 128 * K), "unit zero refused")
d = delta(s0, stats())
expect(d, trim__requests=2, trim__refused=1, trim__aligned=1,
       zero__requests=2, zero__refused=1, zero__aligned=1,
       lower__trim__requests=1, lower__zero__requests=1)
check(h.pread(128 * K, 128 * K) == bytes(128 * K), "zeroed units not zero")

# Flush: always accepted.
s0 = stats()
check(succeeds(h.flush), "flush refused")
expect(delta(s0, stats()), flush__requests=1, flush__errors=0)

st = stats()
expect(st, lower__misaligned=0, write__rmw_cycles=0, rmw__cycles=0)
for k in ("lower.read.bytes", "lower.write.bytes", "lower.trim.bytes",
          "lower.zero.bytes"):
    check(st[k] % (64 * K) == 0, "%s not whole units" % k)
done()
PY

run_nbdkit memory 16M bigsector-profile=disk64k bigsector-stats=$STATS \
  bigsector-stats-interval=1 --run "export uri; $PY $tmpdir/t.py"

# After the client has gone the file is rewritten (at disconnect and
# again at unload) and still says what happened.
cat "$STATS"
expect_stat "$STATS" bigsector.mode strict bigsector.unit 65536 \
  write.refused 3 write.requests 5 lower.misaligned 0 connections 1
echo ok

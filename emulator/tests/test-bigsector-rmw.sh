#!/bin/bash
# rmw mode (bigsector-profile=dvd-ram: 2K sectors, 32K ECC blocks):
# partial writes/zeroes/trims are accepted and each partially covered
# unit costs one internal read-modify-write of the whole unit; partial
# reads read the covering units; data is right; the plugin only sees
# whole units.  A shadow copy of the device checks every byte.
source "$(dirname "$0")/functions.sh"
requires_nbdpy

export STATS=$tmpdir/stats
cat > "$tmpdir/t.py" <<'PY'
import errno
from bs import *

K = 1024
U = 32 * K
SIZE = 1024 * K
h = connect()
model = bytearray(SIZE)

def write(buf, off, flags=0):
    h.pwrite(buf, off, flags)
    model[off:off + len(buf)] = buf

def zero(n, off):
    h.zero(n, off)
    model[off:off + n] = bytes(n)

def trim(n, off):
    h.trim(n, off)
    model[off:off + n] = bytes(n)   # partial units: trimmed sectors read 0

write(pattern(9, 8 * U), 0)         # fill units 0..7

# The brief's case: one 2 KiB write = one internal RMW of 32 KiB.
s0 = stats()
write(pattern(1, 2 * K), 6 * K)
d = delta(s0, stats())
expect(d, write__requests=1, write__partial=1, write__refused=0,
       write__rmw_cycles=1, write__rmw_read_bytes=32768,
       write__rmw_extra_write_bytes=30720,
       lower__read__requests=1, lower__read__bytes=32768,
       lower__write__requests=1, lower__write__bytes=32768,
       rmw__cycles=1, rmw__read_bytes=32768)
check(h.pread(U, 0) == bytes(model[0:U]), "unit 0 wrong after 2K write")

# Partial head + whole unit + partial tail: two RMW cycles.
s0 = stats()
write(pattern(2, 36 * K), 30 * K)
d = delta(s0, stats())
expect(d, write__rmw_cycles=2, write__rmw_read_bytes=2 * U,
       write__rmw_extra_write_bytes=2 * U - 4 * K,
       lower__read__requests=2, lower__write__requests=3,
       lower__write__bytes=3 * U)

# Partial reads read the covering units.
s0 = stats()
check(h.pread(2 * K, 6 * K) == bytes(model[6 * K:8 * K]), "2K read")
check(h.pread(36 * K, 30 * K) == bytes(model[30 * K:66 * K]), "36K read")
d = delta(s0, stats())
expect(d, read__requests=2, read__partial=2, read__aligned=0,
       read__extra_read_bytes=(U - 2 * K) + (3 * U - 36 * K),
       lower__read__requests=4, lower__read__bytes=4 * U,
       write__rmw_cycles=0)

# Zero and trim inside units are RMW'd too (zero-filled).
s0 = stats()
zero(4 * K, 8 * K)
trim(2 * K, U + 16 * K)
d = delta(s0, stats())
expect(d, zero__partial=1, zero__rmw_cycles=1, zero__rmw_read_bytes=U,
       zero__rmw_extra_write_bytes=U - 4 * K,
       trim__partial=1, trim__rmw_cycles=1, trim__rmw_extra_write_bytes=U - 2 * K,
       lower__zero__requests=0, lower__trim__requests=0,
       lower__write__requests=2, rmw__cycles=2)

# Zero over [30K, 98K): RMW head and tail, one lower zero of 2 units.
s0 = stats()
zero(68 * K, 30 * K)
d = delta(s0, stats())
expect(d, zero__rmw_cycles=2, lower__zero__requests=1,
       lower__zero__bytes=2 * U, lower__write__requests=2)

# Trim of whole units goes down as a trim.
s0 = stats()
trim(2 * U, 4 * U)
expect(delta(s0, stats()), trim__aligned=1, lower__trim__requests=1,
       lower__trim__bytes=2 * U, trim__rmw_cycles=0)

# FUA on a partial write: counted, and passed to the plugin.
s0 = stats()
write(pattern(3, 2 * K), 10 * U + 4 * K, nbd.CMD_FLAG_FUA)
expect(delta(s0, stats()), write__fua=1, lower__write__fua=1,
       write__rmw_cycles=1)

# Not sector aligned: refused in rmw mode too.
s0 = stats()
check(fails_with(errno.EINVAL, h.pwrite, b"z" * 512, 0), "512B accepted")
check(fails_with(errno.EINVAL, h.pread, 2048, 1024), "unaligned read")
expect(delta(s0, stats()), write__misaligned=1, write__refused=1,
       read__misaligned=1, read__refused=1)

# Every byte of the device is what the shadow copy says.
check(h.pread(SIZE, 0) == bytes(model), "device content differs from model")

st = stats()
expect(st, lower__misaligned=0)
for k in ("lower.read.bytes", "lower.write.bytes", "lower.trim.bytes",
          "lower.zero.bytes"):
    check(st[k] % U == 0, "%s not whole units" % k)
done()
PY

run_nbdkit memory 1M bigsector-profile=dvd-ram bigsector-stats=$STATS \
  bigsector-stats-interval=1 --run "export uri; $PY $tmpdir/t.py"
expect_stat "$STATS" bigsector.mode rmw bigsector.sector 2048 \
  bigsector.unit 32768 lower.misaligned 0
echo ok

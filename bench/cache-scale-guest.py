#!/usr/bin/python3
"""cache-scale-guest.py DEVICE MAPPING OUT.csv: in a guest (bench/cache-scale).

The cost of a FLUSH and of a cache miss with the cache empty and with
it full of clean blocks.  DEVICE is the lbs mapping's path, MAPPING its
dm name; the block size is 64 KiB and the mapping is at least twice the
cache.  Each measurement: N operations, O_DIRECT, one 4 KiB piece each.
  flush: write 4 KiB into a block (one dirty block), then fsync the
         device (a FLUSH: write-back of that block, then the device's)
  miss:  read 4 KiB of a block that is not cached (a fill)
"""
import mmap
import os
import subprocess
import sys
import time

dev, name, out = sys.argv[1:4]
BLK = 65536
N = int(os.environ.get("LBS_BENCH_OPS", "300"))
fd = os.open(dev, os.O_RDWR | os.O_DIRECT)
size = os.lseek(fd, 0, os.SEEK_END)
blocks = size // BLK
buf = mmap.mmap(-1, 4096)
buf.write(os.urandom(4096))


def status(field):
    st = subprocess.run(["dmsetup", "status", name], capture_output=True,
                        text=True, check=True).stdout.split()
    return int(st[3 + field])


def flushes(first):
    t = time.perf_counter()
    for i in range(N):
        os.pwrite(fd, buf, (first + i) * BLK + 8192)
        os.fsync(fd)
    return time.perf_counter() - t


def misses(first):
    t = time.perf_counter()
    for i in range(N):
        os.preadv(fd, [buf], (first + i) * BLK + 4096)
    return time.perf_counter() - t


rows = []


def measure(phase, base):
    rows.append((phase, status(0), "flush", N, flushes(base)))
    rows.append((phase, status(0), "miss", N, misses(base + N)))


subprocess.run(["dmsetup", "message", name, "0", "drop_cache"], check=True)
# Empty: the operations touch the far half, which the fill never reads.
measure("empty", blocks - 4 * N)
subprocess.run(["dmsetup", "message", name, "0", "drop_cache"], check=True)
# Fill: one 4 KiB read of every block of the near half makes each a
# clean cached block, until the cache is full.
t = time.perf_counter()
for b in range(blocks // 2):
    os.preadv(fd, [buf], b * BLK)
fill = time.perf_counter() - t
measure("full", blocks - 2 * N)
# Empty again, so that warm-up or drift between the phases shows.
subprocess.run(["dmsetup", "message", name, "0", "drop_cache"], check=True)
measure("empty", blocks - 6 * N)
with open(out, "w") as f:
    f.write("phase,cached_blocks,op,ops,seconds\n")
    for r in rows:
        f.write("%s,%d,%s,%d,%.3f\n" % r)
    f.write("fill,%d,read,%d,%.3f\n" % (status(0), blocks // 2, fill))
print(open(out).read())

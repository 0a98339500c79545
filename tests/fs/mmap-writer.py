#!/usr/bin/python3
"""mmap-writer.py FILE REFERENCE SEED COUNT [SIZE]: tests/fs helper.

Apply COUNT writes of random sizes (1 byte to 192 KiB) at random offsets
to FILE through a shared writable mmap, and the same bytes to REFERENCE
with write(); msync, munmap.  With SIZE, FILE and REFERENCE are first
created empty (sparse) of SIZE bytes, so that the page faults allocate
blocks.  Exit status 0 when done.
"""
import mmap
import os
import random
import sys

path, ref, seed, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if len(sys.argv) > 5:
    for p in (path, ref):
        with open(p, "wb") as f:
            f.truncate(int(sys.argv[5]))
rng = random.Random(seed)
fd = os.open(path, os.O_RDWR)
rfd = os.open(ref, os.O_RDWR)
size = os.fstat(fd).st_size
m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
for i in range(count):
    n = rng.choice((1, 17, 511, 4096, 4097, 65536, rng.randint(1, 196608)))
    off = rng.randrange(0, size - n)
    data = rng.randbytes(n)
    m[off:off + n] = data
    os.pwrite(rfd, data, off)
    if i % 64 == 63:
        m.flush()
m.flush()
m.close()
os.fsync(fd)
os.close(fd)
os.close(rfd)

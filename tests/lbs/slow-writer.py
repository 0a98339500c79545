#!/usr/bin/python3
"""slow-writer.py MODE PATH OFFSET BYTES RATE [SEED]: tests/lbs helper.

Write BYTES of random data to PATH from byte OFFSET at RATE bytes a
second, paced against the clock (not sleeps added up), so the writer is
as slow as asked however loaded the host is.  The data also goes to
$REF (default PATH.ref), a plain file, for comparison.  Then fsync.

MODE buffered: 4 KiB write()s through the page cache.
MODE direct:   O_DIRECT pieces of 4-60 KiB (multiples of 4 KiB, from
               SEED), the last one cut so the run ends at OFFSET + BYTES.
Prints the bytes written and the seconds taken.
"""
import mmap
import os
import random
import sys
import time

mode, path, off, total, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(int(sys.argv[6]) if len(sys.argv) > 6 else 1)
flags = os.O_WRONLY | (os.O_DIRECT if mode == "direct" else 0)
fd = os.open(path, flags)
ref = open(os.environ.get("REF", path + ".ref"), "wb")
buf = mmap.mmap(-1, 65536)
start = time.monotonic()
done = 0
while done < total:
    n = 4096 if mode == "buffered" else 4096 * rng.randint(1, 15)
    n = min(n, total - done)
    data = os.urandom(n)
    buf.seek(0)
    buf.write(data)
    os.pwrite(fd, memoryview(buf)[:n], off + done)
    ref.write(data)
    done += n
    ahead = done / rate - (time.monotonic() - start)
    if ahead > 0:
        time.sleep(ahead)
os.fsync(fd)
os.close(fd)
ref.close()
print(done, round(time.monotonic() - start, 1))

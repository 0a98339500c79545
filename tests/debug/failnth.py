#!/usr/bin/python3
"""failnth.py - walk every fault point of a device-mapper operation with
/proc/thread-self/fail-nth (Documentation/fault-injection): run the
operation with its 1st, 2nd, 3rd... fault-injectable call failing, until
a run reaches no n-th call.  Runs in the test guest (tests/debug/003).

  failnth.py lifecycle NAME TABLE
      create NAME, load TABLE, resume, message "flush", remove: each run
      must either succeed or fail with an errno, and the device must then
      be removable without injection, and gone.
  failnth.py io DEV OFFSET LEN
      one O_DIRECT write then read of LEN bytes at OFFSET of DEV: a run
      must either succeed (the data reads back) or fail with an errno.
  failnth.py load DEV OFFSET LEN OPS
      not fail-nth: OPS random O_DIRECT writes and reads (4 KiB-256 KiB,
      4 KiB aligned) within LEN bytes at OFFSET, in this task only, marked
      make-it-fail for the kernel's random failslab/fail_page_alloc: each
      call succeeds or fails with an errno, and every read of data whose
      write succeeded returns it.  Prints "ops=.. errors=.. (errno xN...)".

Prints one line per run ("n=<n> ok" or "n=<n> <step>: <errno>") and a
summary "points=<n> failed=<n> ok=<n> (<step>: <errno> x<count>...)"; exit
status 1 if any check failed or no fault point was reached.
"""
import ctypes
import errno
import fcntl
import mmap
import os
import random
import struct
import sys

DM_NAME_LEN, DM_UUID_LEN = 128, 129
HDR = struct.Struct("<3I I I I i I I I Q 128s 129s 7s")	# struct dm_ioctl
SPEC = struct.Struct("<Q Q i I 16s")				# struct dm_target_spec
assert HDR.size == 312 and SPEC.size == 40


def _iowr(nr):
    return (3 << 30) | (HDR.size << 16) | (0xFD << 8) | nr


DEV_CREATE, DEV_REMOVE, DEV_SUSPEND, DEV_STATUS, TABLE_LOAD, TARGET_MSG = (
    _iowr(3), _iowr(4), _iowr(6), _iowr(7), _iowr(9), _iowr(14))
# struct dm_target_msg: __u64 sector, then the message.
MSG = struct.Struct("<Q")


def dm_ioctl(fd, cmd, name, payload=b"", target_count=0, flags=0):
    size = HDR.size + len(payload)
    buf = bytearray(HDR.pack(4, 0, 0, size, HDR.size, target_count, 0, flags,
                             0, 0, 0, name.encode(), b"", b"") + payload)
    fcntl.ioctl(fd, cmd, buf, True)


def table_payload(table):
    start, length, ttype, params = table.split(None, 3)
    p = params.encode() + b"\0"
    p += b"\0" * (-len(p) % 8)
    return SPEC.pack(int(start), int(length), 0, 0, ttype.encode()) + p


class FailNth:
    def __init__(self):
        self.fd = os.open("/proc/thread-self/fail-nth", os.O_RDWR)

    def arm(self, n):
        os.pwrite(self.fd, str(n).encode(), 0)

    def walked_past(self, n, what):
        """Disarms; true when the steps made fewer than n calls, so that
        nothing was injected and the walk is over.  A failure then is not
        one we caused: it is reported."""
        left = int(os.pread(self.fd, 32, 0))
        os.pwrite(self.fd, b"0", 0)
        if left and what != "ok":
            print("n=%d %s without an injected fault" % (n, what))
        return left != 0


def lifecycle(name, table):
    ctl = os.open("/dev/mapper/control", os.O_RDWR)
    payload = table_payload(table)
    flush = MSG.pack(0) + b"flush\0"
    steps = [
        ("create", lambda: dm_ioctl(ctl, DEV_CREATE, name)),
        ("load", lambda: dm_ioctl(ctl, TABLE_LOAD, name, payload, 1)),
        ("resume", lambda: dm_ioctl(ctl, DEV_SUSPEND, name)),
        ("message", lambda: dm_ioctl(ctl, TARGET_MSG, name, flush)),
        ("remove", lambda: dm_ioctl(ctl, DEV_REMOVE, name)),
    ]
    fn = FailNth()
    bad = failed = okruns = 0
    errnos = {}
    n = 0
    # Warm up once without injection: first-use allocations (page tables,
    # caches) would otherwise move around between runs.
    for _, f in steps:
        f()
    while True:
        n += 1
        what = "ok"
        fn.arm(n)
        try:
            for step, f in steps:
                f()
        except OSError as e:
            what = "%s: %s" % (step, errno.errorcode.get(e.errno, e.errno))
        if fn.walked_past(n, what):
            bad += what != "ok"
            break
        if what == "ok":
            okruns += 1
        else:
            failed += 1
            errnos[what] = errnos.get(what, 0) + 1
        print("n=%d %s" % (n, what))
        # Whatever failed, the device must be removable, and then gone.
        try:
            dm_ioctl(ctl, DEV_REMOVE, name)
        except OSError as e:
            if e.errno != errno.ENXIO:
                print("n=%d cleanup remove: %s" % (n, os.strerror(e.errno)))
                bad += 1
        try:
            dm_ioctl(ctl, DEV_STATUS, name)
            print("n=%d %s left behind" % (n, name))
            bad += 1
        except OSError as e:
            if e.errno != errno.ENXIO:
                print("n=%d status: %s" % (n, os.strerror(e.errno)))
                bad += 1
    print("points=%d failed=%d ok=%d (%s)" % (n - 1, failed, okruns, " ".join(
        "%s x%d" % kv for kv in sorted(errnos.items()))))
    return 1 if bad or n < 2 else 0


def io(dev, off, length):
    buf = mmap.mmap(-1, length)
    rbuf = mmap.mmap(-1, length)
    fd = os.open(dev, os.O_RDWR | os.O_DIRECT)
    fn = FailNth()
    bad = failed = okruns = 0
    n = 0
    os.preadv(fd, [rbuf], off)	# warm up
    while True:
        n += 1
        buf.seek(0)
        buf.write(os.urandom(length))
        what = "ok"
        fn.arm(n)
        try:
            step = "write"
            if os.pwritev(fd, [buf], off) != length:
                what = "write: short"
            step = "read"
            if os.preadv(fd, [rbuf], off) != length:
                what = "read: short"
        except OSError as e:
            what = "%s: %s" % (step, errno.errorcode.get(e.errno, e.errno))
        if fn.walked_past(n, what):
            bad += what != "ok"
            break
        print("n=%d %s" % (n, what))
        if what == "ok":
            okruns += 1
            if rbuf[:] != buf[:]:
                print("n=%d read back differs" % n)
                bad += 1
        else:
            failed += 1
        # Without injection the range works, whatever happened above.
        try:
            os.pwritev(fd, [buf], off)
            os.preadv(fd, [rbuf], off)
            if rbuf[:] != buf[:]:
                print("n=%d after the fault: read back differs" % n)
                bad += 1
        except OSError as e:
            print("n=%d after the fault: %s" % (n, os.strerror(e.errno)))
            bad += 1
    print("points=%d failed=%d ok=%d" % (n - 1, failed, okruns))
    return 1 if bad or n < 2 else 0


def lock_memory():
    """Fault in and lock our pages, so that no page fault of ours reads
    from the guest's 9p root while a failure is armed."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mlockall(1 | 2) != 0:	# MCL_CURRENT | MCL_FUTURE
        print("mlockall: %s" % os.strerror(ctypes.get_errno()), file=sys.stderr)


def load(dev, off, length, ops):
    rnd = random.Random(1)
    page = 4096
    known = {}		# 4 KiB page index -> bytes written there, if sure
    wbuf = mmap.mmap(-1, 256 * 1024)
    rbuf = mmap.mmap(-1, 256 * 1024)
    fd = os.open(dev, os.O_RDWR | os.O_DIRECT)
    data = os.urandom(512 * 1024)
    errnos = {}
    bad = errors = 0
    # Only now: whatever this task allocates from here on may fail.
    with open("/proc/thread-self/make-it-fail", "w") as f:
        f.write("1")
    for _ in range(ops):
        n = rnd.randint(1, 64) * page
        at = rnd.randrange(0, (length - n) // page + 1) * page
        pages = range((off + at) // page, (off + at + n) // page)
        try:
            if rnd.random() < 0.6:
                src = rnd.randrange(0, len(data) - n)
                wbuf.seek(0)
                wbuf.write(data[src:src + n])
                for p in pages:
                    known.pop(p, None)	# unknown until the write succeeds
                if os.pwritev(fd, [memoryview(wbuf)[:n]], off + at) != n:
                    raise OSError(errno.EIO, "short write")
                for j, p in enumerate(pages):
                    known[p] = data[src + j * page:src + (j + 1) * page]
            else:
                if os.preadv(fd, [memoryview(rbuf)[:n]], off + at) != n:
                    raise OSError(errno.EIO, "short read")
                for j, p in enumerate(pages):
                    if p in known and rbuf[j * page:(j + 1) * page] != known[p]:
                        bad += 1
        except OSError as e:
            errors += 1
            name = errno.errorcode.get(e.errno, str(e.errno))
            errnos[name] = errnos.get(name, 0) + 1
        except MemoryError:	# the interpreter's own memory: not the target
            errnos["python"] = errnos.get("python", 0) + 1
    for _ in range(1000):	# opening the file may fail too
        try:
            with open("/proc/thread-self/make-it-fail", "w") as f:
                f.write("0")
            break
        except (OSError, MemoryError):
            pass
    print("ops=%d errors=%d mismatches=%d (%s)" % (ops, errors, bad, " ".join(
        "%s x%d" % kv for kv in sorted(errnos.items()))))
    return 1 if bad else 0


def main():
    lock_memory()
    if len(sys.argv) == 6 and sys.argv[1] == "load":
        return load(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    if len(sys.argv) == 4 and sys.argv[1] == "lifecycle":
        return lifecycle(sys.argv[2], sys.argv[3])
    if len(sys.argv) == 5 and sys.argv[1] == "io":
        return io(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""logreplay.py - replay a dm-log-writes log onto an image, checking as it goes.

  logreplay.py LOG TARGET [--unit BYTES] [--after-mark NAME] [--each CMD]
               [--limit N]

LOG is the log device (or a copy of it); TARGET a file or device the
replay writes to (it should start as the logged device started).  Entries
are applied in log order: writes, discards (written as zeroes), marks.

--unit BYTES    every write and discard must cover whole, aligned units of
                BYTES; each one that does not is reported (and fails).
--each CMD      after every entry flagged FLUSH or FUA (once the mark given
                by --after-mark has been seen, if any), run `sh -c CMD` with
                LR_ENTRY (entry number), LR_FLAGS and LR_MARK (the last mark
                seen) in the environment; TARGET is fsync'ed first.  A
                failing CMD is reported (and fails); the replay goes on.
--limit N       at most N check points (spread evenly over all of them).

The log format (drivers/md/dm-log-writes.c): a super block in the first
sector (magic, version, nr_entries, sectorsize), then per entry one sector
holding struct log_write_entry {sector, nr_sectors, flags, data_len} (a
mark's name follows it) and, for writes, nr_sectors sectors of data.
Sector numbers and counts are in units of sectorsize.

Prints a summary line ("entries=... writes=... checks=... failed=...
misaligned=...") and exits 1 if anything failed.
"""
import os
import struct
import subprocess
import sys

MAGIC = 0x6a736677736872
FLUSH, FUA, DISCARD, MARK, METADATA = 1, 2, 4, 8, 16


def flag_names(f):
    return ",".join(n for b, n in ((FLUSH, "flush"), (FUA, "fua"),
                                   (DISCARD, "discard"), (MARK, "mark"),
                                   (METADATA, "meta")) if f & b) or "-"


def main(argv):
    args = {"--unit": None, "--after-mark": None, "--each": None,
            "--limit": None}
    pos = []
    i = 1
    while i < len(argv):
        if argv[i] in args:
            args[argv[i]] = argv[i + 1]
            i += 2
        else:
            pos.append(argv[i])
            i += 1
    if len(pos) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    logpath, target = pos
    unit = int(args["--unit"]) if args["--unit"] else None

    log = open(logpath, "rb")
    magic, version, nr, ss = struct.unpack("<QQQI", log.read(28))
    if magic != MAGIC or version != 1:
        print("not a dm-log-writes log (magic %#x version %d)" % (magic, version))
        return 1
    # First pass: entry headers only, to know the check points.
    entries = []
    off = ss
    for n in range(nr):
        log.seek(off)
        hdr = log.read(ss)
        sector, nsect, flags, dlen = struct.unpack("<QQQQ", hdr[:32])
        name = hdr[32:32 + dlen].decode(errors="replace") if flags & MARK else ""
        entries.append((off + ss, sector, nsect, flags, name))
        off += ss
        if not (flags & DISCARD) and not (flags & MARK):
            off += nsect * ss

    started = args["--after-mark"] is None
    points = []
    for n, (_, _, _, flags, name) in enumerate(entries):
        if flags & MARK and name == args["--after-mark"]:
            started = True
        elif started and flags & (FLUSH | FUA):
            points.append(n)
    if args["--limit"] and len(points) > int(args["--limit"]):
        k = int(args["--limit"])
        points = [points[(j * len(points)) // k] for j in range(k)]
    points = set(points)

    fd = os.open(target, os.O_WRONLY)
    counts = {"writes": 0, "discards": 0, "marks": 0, "flush": 0, "fua": 0,
              "checks": 0, "failed": 0, "misaligned": 0}
    mark = ""
    for n, (doff, sector, nsect, flags, name) in enumerate(entries):
        if flags & MARK:
            counts["marks"] += 1
            mark = name
            continue
        if flags & FLUSH:
            counts["flush"] += 1
        if flags & FUA:
            counts["fua"] += 1
        if nsect:
            if unit and ((sector * ss) % unit or (nsect * ss) % unit):
                counts["misaligned"] += 1
                print("entry %d: %s of %d bytes at byte %d is not whole %d-byte units"
                      % (n, "discard" if flags & DISCARD else "write",
                         nsect * ss, sector * ss, unit))
            if flags & DISCARD:
                counts["discards"] += 1
                zero = bytes(min(nsect * ss, 1 << 20))
                done = 0
                while done < nsect * ss:
                    k = min(len(zero), nsect * ss - done)
                    os.pwrite(fd, zero[:k], sector * ss + done)
                    done += k
            else:
                counts["writes"] += 1
                log.seek(doff)
                os.pwrite(fd, log.read(nsect * ss), sector * ss)
        if n in points:
            os.fsync(fd)
            env = dict(os.environ, LR_ENTRY=str(n), LR_FLAGS=flag_names(flags),
                       LR_MARK=mark)
            r = subprocess.run(["sh", "-c", args["--each"] or "true"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            counts["checks"] += 1
            if r.returncode:
                counts["failed"] += 1
                print("entry %d (%s, after mark %r): check failed (%d):"
                      % (n, flag_names(flags), mark, r.returncode))
                print(r.stdout.decode(errors="replace").rstrip()[-3000:])
    os.fsync(fd)
    os.close(fd)
    print("entries=%d sectorsize=%d " % (len(entries), ss) +
          " ".join("%s=%d" % kv for kv in counts.items()))
    return 1 if counts["failed"] or counts["misaligned"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

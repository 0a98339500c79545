#!/usr/bin/python3
"""fscut.py - file-system workload that records what fsync acknowledged,
and the check of what survived a power cut.

  fscut.py run DIR ACKLOG SEED STEPS   play STEPS seeded steps in DIR
  fscut.py verify DIR ACKLOG SEED [N]  every acknowledged file is intact
                                       (only the first N log lines: N)

Steps: new files written in random-sized pieces then fsynced (file and
directory), appends, atomic replaces (write, fsync, rename, fsync the
directory), unlinks, and unsynced writes (new files up to 1 MiB, appends):
noise whose fate is free.  Before a step that touches an acknowledged file
its possible outcome is logged as "pending"; once fsync returns, "ack".  The
log is appended one line per write(2), so on a results share it survives a
crash of the writer.  `run` stops at the first error (exit 1): after a
power cut of the device nothing more can be acknowledged.

`verify` wants, for every file whose last word in the log is "ack" or
"gone": its acknowledged content, or one of the outcomes of the steps
pending on it (an append may have reached any length in between, its new
bytes right or, page by page, still zero: never foreign data).  Files never
acknowledged are not checked.  One summary line, then one line per
failure; exit 1 on any failure.

With FSCUT_MARK=MAPPING in the environment, `run` follows each log line
with `dmsetup message MAPPING 0 mark log-N` (N: lines written so far), so
a dm-log-writes log below says which acknowledgements precede each entry.
"""
import os
import random
import subprocess
import sys

CHUNK = 4096


def content(seed, key, size):
    out = bytearray()
    j = 0
    while len(out) < size:
        out += random.Random("%d-%s-%d" % (seed, key, j)).randbytes(CHUNK)
        j += 1
    return bytes(out[:size])


def pick_size(rng):
    r = rng.random()
    if r < 0.35:
        return rng.randrange(1, 4096)
    if r < 0.70:
        return rng.randrange(4096, 70000)
    return rng.randrange(70000, 300000)


class Log:
    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.lines = 0
        self.mark = os.environ.get("FSCUT_MARK")

    def __call__(self, *words):
        os.write(self.fd, (" ".join(str(w) for w in words) + "\n").encode())
        self.lines += 1
        if self.mark:
            subprocess.run(["dmsetup", "message", self.mark, "0", "mark",
                            "log-%d" % self.lines], check=True)


def write_pieces(path, data, rng, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                 sync=True):
    fd = os.open(path, flags, 0o644)
    try:
        pos = 0
        while pos < len(data):
            n = min(len(data) - pos, rng.choice([512, 3000, 4096, 10000, 65536]))
            os.write(fd, data[pos:pos + n])
            pos += n
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(d):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def cmd_run(d, ackpath, seed, steps):
    seed, steps = int(seed), int(steps)
    rng = random.Random(seed)
    log = Log(ackpath)
    files = {}              # acknowledged and present: name -> (key, size)
    for step in range(steps):
        r = rng.random()
        names = sorted(files)
        try:
            if r < 0.35 or not names:
                name, key, size = "f%03d" % step, "k%d" % step, pick_size(rng)
                write_pieces(os.path.join(d, name), content(seed, key, size), rng)
                fsync_dir(d)
                files[name] = (key, size)
                log("ack", step, name, key, size)
            elif r < 0.50:
                name, size = "u%03d" % step, rng.randrange(1, 1 << 20)
                write_pieces(os.path.join(d, name),
                             content(seed, "u%d" % step, size), rng, sync=False)
            elif r < 0.65:
                name = rng.choice(names)
                key, old = files[name]
                new = old + pick_size(rng)
                log("pending", step, name, "append", key, old, new)
                write_pieces(os.path.join(d, name),
                             content(seed, key, new)[old:], rng,
                             flags=os.O_WRONLY | os.O_APPEND)
                files[name] = (key, new)
                log("ack", step, name, key, new)
            elif r < 0.80:
                name = rng.choice(names)
                key, size = "k%d" % step, pick_size(rng)
                tmp = os.path.join(d, "t%03d" % step)
                write_pieces(tmp, content(seed, key, size), rng)
                log("pending", step, name, "replace", key, size)
                os.rename(tmp, os.path.join(d, name))
                fsync_dir(d)
                files[name] = (key, size)
                log("ack", step, name, key, size)
            elif r < 0.87:
                name = rng.choice(names)
                log("pending", step, name, "unlink")
                os.unlink(os.path.join(d, name))
                fsync_dir(d)
                del files[name]
                log("gone", step, name)
            else:
                # Unsynced append: acknowledged by write(2) only.
                name = rng.choice(names)
                key, old = files[name]
                new = old + pick_size(rng)
                log("pending", step, name, "append", key, old, new)
                write_pieces(os.path.join(d, name),
                             content(seed, key, new)[old:], rng,
                             flags=os.O_WRONLY | os.O_APPEND, sync=False)
                # Not acknowledged: later steps must not rely on it.
                del files[name]
        except OSError as e:
            log("error", step, e.errno or 0)
            print("step %d: %s" % (step, e), file=sys.stderr)
            return 1
    log("done", steps)
    return 0


def appended(data, new, lo, hi):
    """An unacknowledged append from lo to hi bytes: the acknowledged lo
    bytes exact, the size anywhere from lo to hi, and past lo each piece
    up to the next page boundary either the appended bytes or zeroes (the
    file system may commit a larger size before the data: a hole, never
    foreign data)."""
    if not lo <= len(data) <= hi or data[:lo] != new[:lo]:
        return False
    pos = lo
    while pos < len(data):
        end = min(len(data), (pos // 4096 + 1) * 4096)
        piece = data[pos:end]
        if piece != new[pos:end] and piece.count(0) != len(piece):
            return False
        pos = end
    return True


def cmd_verify(d, ackpath, seed, maxlines=None):
    seed = int(seed)
    maxlines = int(maxlines) if maxlines else None
    want = {}               # name -> [acked state, pending alternatives...]
    with open(ackpath) as f:
        for n, line in enumerate(f):
            if maxlines is not None and n >= maxlines:
                break
            w = line.split()
            if not w or w[0] in ("done", "error"):
                continue
            if len(w) < 3 or w[0] not in ("ack", "gone", "pending"):
                print("bad log line: %r" % line)
                return 1
            name = w[2]
            if w[0] == "ack":
                want[name] = [("file", w[3], int(w[4]))]
            elif w[0] == "gone":
                want[name] = [("absent",)]
            elif name in want:
                if w[3] == "append":
                    want[name].append(("append", w[4], int(w[5]), int(w[6])))
                elif w[3] == "replace":
                    want[name].append(("file", w[4], int(w[5])))
                elif w[3] == "unlink":
                    want[name].append(("absent",))
    bad = []
    checked = intact = pending_seen = 0
    for name in sorted(want):
        path = os.path.join(d, name)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = None
        checked += 1
        match = None
        for i, alt in enumerate(want[name]):
            if alt[0] == "absent":
                good = data is None
            elif data is None:
                good = False
            elif alt[0] == "file":
                good = len(data) == alt[2] and data == content(seed, alt[1], alt[2])
            else:
                good = appended(data, content(seed, alt[1], alt[3]), alt[2],
                                alt[3])
            if good:
                match = i
                break
        if match is None:
            what = "absent" if data is None else "%d bytes" % len(data)
            bad.append("%s: %s, wanted one of %s" % (name, what, want[name]))
        elif match == 0:
            intact += 1
        else:
            pending_seen += 1
    print("files=%d intact=%d pending_outcome=%d bad=%d" %
          (checked, intact, pending_seen, len(bad)))
    for line in bad:
        print(line)
    return 1 if bad else 0


def main(argv):
    cmds = {"run": cmd_run, "verify": cmd_verify}
    if len(argv) < 2 or argv[1] not in cmds:
        print(__doc__, file=sys.stderr)
        return 2
    return cmds[argv[1]](*argv[2:]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/python3
"""rawcut.py - power-cut workload and checker for a raw lbs mapping.

  rawcut.py init  IMAGE SIZE SEED            fill IMAGE with the initial data
  rawcut.py plan  PLAN SIZE BLOCK SEED NOPS  write a deterministic op plan
  rawcut.py run   PLAN DEV LOG               play the plan on DEV (O_DIRECT,
                                             one request at a time), logging
                                             each op; stops at the first error
  rawcut.py tear  IMAGE BASE BLOCK OUT       OUT: IMAGE with the second half
                                             of the first block whose both
                                             halves differ from BASE taken
                                             from BASE (checker self-test);
                                             prints the block number
  rawcut.py check PLAN LOG IMAGE STATS [final]
                                             what survived a power cut
                                             (final: no cut, everything
                                             must be the newest)

The plan is a list of writes (partial, whole-block, spanning, FUA), flushes
(fsync of the block device: an empty REQ_PREFLUSH) and cache drops.  Every
write is split into per-block pieces; since the workload is serial, each
write the device ever saw for a block is a snapshot of that block after some
prefix of its pieces.  After a power cut, `check` requires of every block:

  - its content is exactly one snapshot: never a mix of two (torn);
  - not older than the last piece acknowledged before the last completed
    flush (flush contract);
  - not older than any FUA write the device received (the emulator's
    lower.write.fua counts them: the first F FUA ops reached the medium);
  - not newer than anything issued.

Exit status 0 if every block passes.  One summary line on stdout, then one
line per failing block.
"""
import hashlib
import json
import mmap
import os
import random
import subprocess
import sys

SECTOR = 512


def data_for(seed, op, length):
    return random.Random("%d-%d" % (seed, op)).randbytes(length)


def initial(seed, size):
    return random.Random("%d-init" % seed).randbytes(size)


def cmd_init(image, size, seed):
    size = int(size)
    with open(image, "wb") as f:
        f.write(initial(int(seed), size))


def cmd_plan(path, size, block, seed, nops):
    size, block, seed, nops = int(size), int(block), int(seed), int(nops)
    rng = random.Random(seed)
    nblocks = size // block
    spb = block // SECTOR
    ops = []
    for _ in range(nops):
        r = rng.random()
        if r < 0.40:
            # Partial: 512 B to 16 KiB anywhere, may straddle two blocks.
            ln = rng.choice([1, 2, 7, 8, 16, 24, 32]) * SECTOR
            off = rng.randrange((size - ln) // SECTOR) * SECTOR
            ops.append({"k": "w", "off": off, "len": ln, "fua": False})
        elif r < 0.52:
            nb = rng.randint(1, 3)
            b = rng.randrange(nblocks - nb + 1)
            ops.append({"k": "w", "off": b * block, "len": nb * block,
                        "fua": False})
        elif r < 0.62:
            # Spanning: partial head, whole middle, partial tail.
            b = rng.randrange(nblocks - 3)
            head = rng.randrange(1, spb)
            ln = (spb - head + block // SECTOR + rng.randrange(1, spb)) * SECTOR
            ops.append({"k": "w", "off": b * block + head * SECTOR,
                        "len": ln, "fua": False})
        elif r < 0.76:
            ops.append({"k": "f"})
        elif r < 0.90:
            # FUA inside one block (one lower FUA write per op).
            b = rng.randrange(nblocks)
            if rng.random() < 0.8:
                s = rng.randrange(spb - 1)
                n = rng.randint(1, min(16, spb - s - 1))
                ops.append({"k": "w", "off": b * block + s * SECTOR,
                            "len": n * SECTOR, "fua": True})
            else:
                ops.append({"k": "w", "off": b * block, "len": block,
                            "fua": True})
        else:
            ops.append({"k": "d"})
    with open(path, "w") as f:
        json.dump({"size": size, "block": block, "seed": seed, "ops": ops}, f)


def load_plan(path):
    with open(path) as f:
        return json.load(f)


def cmd_run(planpath, dev, logpath):
    plan = load_plan(planpath)
    seed = plan["seed"]
    fd = os.open(dev, os.O_RDWR | os.O_DIRECT)
    fd_fua = os.open(dev, os.O_RDWR | os.O_DIRECT | os.O_DSYNC)
    log = open(logpath, "w", buffering=1)
    buf = mmap.mmap(-1, 4 << 20)
    status = 0
    for i, op in enumerate(plan["ops"]):
        log.write("start %d\n" % i)
        try:
            if op["k"] == "w":
                data = data_for(seed, i, op["len"])
                buf[:len(data)] = data
                n = os.pwrite(fd_fua if op["fua"] else fd,
                              memoryview(buf)[:len(data)], op["off"])
                if n != len(data):
                    raise OSError(5, "short write %d of %d" % (n, len(data)))
            elif op["k"] == "f":
                os.fsync(fd)
            elif op["k"] == "d":
                r = subprocess.run(["dmsetup", "message", os.environ["RAWCUT_MAP"],
                                    "0", "drop_cache"], capture_output=True)
                if r.returncode:
                    raise OSError(5, "drop_cache failed")
        except OSError as e:
            log.write("err %d %d\n" % (i, e.errno or 0))
            status = 1
            break
        log.write("ok %d\n" % i)
    log.close()
    return status


def pieces(plan):
    """Per-block pieces: list of (op index, block, offset in block, bytes
    offset in op data, length), in op order."""
    block = plan["block"]
    out = []
    for i, op in enumerate(plan["ops"]):
        if op["k"] != "w":
            continue
        off, end = op["off"], op["off"] + op["len"]
        while off < end:
            b = off // block
            n = min(end, (b + 1) * block) - off
            out.append((i, b, off - b * block, off - op["off"], n))
            off += n
    return out


def read_stats(path):
    st = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.strip().partition(" ")
            st[k] = v
    return st


def cmd_check(planpath, logpath, image, statspath, mode=""):
    plan = load_plan(planpath)
    seed, block, size = plan["seed"], plan["block"], plan["size"]
    ops = plan["ops"]
    state = {}              # op index -> "ok" | "err" | "start"
    with open(logpath) as f:
        for line in f:
            w = line.split()
            if len(w) >= 2:
                state[int(w[1])] = w[0]
    stats = read_stats(statspath)
    fua_persisted = int(stats.get("lower.write.fua", "0"))

    init = initial(seed, size)
    nblocks = size // block
    # snapshots[b]: list of sha256 of the block after 0, 1, 2... pieces.
    cur = [bytearray(init[b * block:(b + 1) * block]) for b in range(nblocks)]
    snaps = [[hashlib.sha256(cur[b]).digest()] for b in range(nblocks)]
    lo = [0] * nblocks      # lowest snapshot allowed
    hi = [0] * nblocks      # highest snapshot issued
    acked = [0] * nblocks   # newest snapshot acknowledged so far
    by_op = {}
    for (i, b, boff, doff, n) in pieces(plan):
        by_op.setdefault(i, []).append((b, boff, doff, n))
    fua_seen = 0
    for i, op in enumerate(ops):
        st = state.get(i)
        if st is None:
            break           # never issued
        if op["k"] == "w":
            data = data_for(seed, i, op["len"])
            for (b, boff, doff, n) in by_op[i]:
                cur[b][boff:boff + n] = data[doff:doff + n]
                snaps[b].append(hashlib.sha256(cur[b]).digest())
                j = len(snaps[b]) - 1
                hi[b] = j
                if st == "ok":
                    acked[b] = j
            if op["fua"]:
                fua_seen += 1
                if fua_seen <= fua_persisted:
                    for (b, _, _, _) in by_op[i]:
                        lo[b] = max(lo[b], len(snaps[b]) - 1)
            if op["fua"] and st == "ok":
                # O_DSYNC on a block device: FUA write, then a flush.
                lo = [max(lo[b], acked[b]) for b in range(nblocks)]
        elif op["k"] == "f" and st == "ok":
            lo = [max(lo[b], acked[b]) for b in range(nblocks)]
        if st != "ok":
            break

    if mode == "final":
        lo = list(hi)
    with open(image, "rb") as f:
        img = f.read()
    bad = []
    counts = {"newest": 0, "lost": 0}
    for b in range(nblocks):
        h = hashlib.sha256(img[b * block:(b + 1) * block]).digest()
        found = [j for j in range(len(snaps[b])) if snaps[b][j] == h]
        ok_js = [j for j in found if lo[b] <= j <= hi[b]]
        if not ok_js:
            if not found:
                why = "torn or foreign: matches no snapshot of its %d" % len(snaps[b])
            else:
                why = "holds snapshot %s, allowed %d..%d" % (found, lo[b], hi[b])
            bad.append("block %d: %s (acked %d)" % (b, why, acked[b]))
            continue
        j = max(ok_js)
        if j >= acked[b]:
            counts["newest"] += 1
        else:
            counts["lost"] += 1     # acknowledged, unflushed, lost: allowed
    unflushed = sum(1 for b in range(nblocks) if lo[b] < acked[b])
    print("blocks=%d newest=%d lost_unflushed=%d unflushed=%d fua_persisted=%d "
          "ops_issued=%d bad=%d" % (nblocks, counts["newest"], counts["lost"],
                                    unflushed, fua_persisted, len(state),
                                    len(bad)))
    for line in bad:
        print(line)
    return 1 if bad else 0


def cmd_tear(image, base, block, out):
    block, half = int(block), int(block) // 2
    with open(image, "rb") as f:
        img = bytearray(f.read())
    with open(base, "rb") as f:
        ini = f.read()
    for b in range(len(img) // block):
        a, m, e = b * block, b * block + half, (b + 1) * block
        if img[a:m] != ini[a:m] and img[m:e] != ini[m:e]:
            img[m:e] = ini[m:e]
            with open(out, "wb") as f:
                f.write(img)
            print(b)
            return 0
    print("no block written in both halves")
    return 1


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[1], argv[2:]
    fn = {"init": cmd_init, "plan": cmd_plan, "run": cmd_run,
          "tear": cmd_tear, "check": cmd_check}.get(cmd)
    if fn is None:
        print(__doc__, file=sys.stderr)
        return 2
    return fn(*args) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

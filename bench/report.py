#!/usr/bin/python3
"""report.py RESULTS OUTDIR - turn a guest benchmark run into tables and plots.

RESULTS is the directory bench/guest-bench.sh wrote (env, runs/*/).  Writes
OUTDIR/benchmarks.md, OUTDIR/bench/results.csv (one row per run, raw),
OUTDIR/bench/summary.csv (median per unit, workload and contender) and
OUTDIR/bench/*.png (gnuplot).  Standard library only.
"""

import csv
import json
import math
import os
import shutil
import statistics
import subprocess
import sys

MiB = 1048576
USER_HZ = os.sysconf("SC_CLK_TCK")

CONTENDERS = ["lbs", "lbs-wt", "ebs", "nbdkit-blocksize", "drive-rmw", "linear"]
CONTENDER_DOC = {
    "lbs": "dm-lbs, default options (write-back), on the strict device",
    "lbs-wt": "dm-lbs with `write_through`, on the strict device",
    "ebs": "dm-ebs (`ebs <dev> 0 8 128` at 64 KiB), built from the linux-source package, on the strict device",
    "nbdkit-blocksize": "nbdkit's `blocksize` filter (`minblock=` the unit: userspace read-modify-write) in front of the strict device; the guest uses the nbd device directly",
    "drive-rmw": "the device's own read-modify-write (emulator `rmw` mode: `disk64k-rmw`, `dvd-ram`), used directly, as a 512e disk or a DVD-RAM drive does it",
    "linear": "upper bound: dm-linear on the `rmw`-mode device, every request rounded up to one whole aligned unit (same count, same pattern)",
}
WORKLOADS = [
    "seq4k_buf", "seq1m_write", "seq1m_read", "rand4k_write_qd1", "rand4k_write_qd16",
    "rand4k_read_qd1", "rand4k_read_qd16", "mix70_qd16", "ext4_untar", "ext4_fsync", "image2k",
]
WL_TITLE = {
    "seq4k_buf": "seq 4K buffered write (dd)",
    "seq1m_write": "seq 1M direct write",
    "seq1m_read": "seq 1M direct read",
    "rand4k_write_qd1": "rand 4K direct write QD1",
    "rand4k_write_qd16": "rand 4K direct write QD16",
    "rand4k_read_qd1": "rand 4K direct read QD1",
    "rand4k_read_qd16": "rand 4K direct read QD16",
    "mix70_qd16": "rand 4K 70/30 read/write QD16",
    "ext4_untar": "ext4: unpack a tree + sync",
    "ext4_fsync": "ext4: small files, fsync each",
    "image2k": "image written with 2K writes (dd)",
}
WL_SHORT = {
    "seq4k_buf": "seq4k-buf", "seq1m_write": "seq1M-w", "seq1m_read": "seq1M-r",
    "rand4k_write_qd1": "rnd4k-w-1", "rand4k_write_qd16": "rnd4k-w-16",
    "rand4k_read_qd1": "rnd4k-r-1", "rand4k_read_qd16": "rnd4k-r-16",
    "mix70_qd16": "mix70-16", "ext4_untar": "ext4-untar", "ext4_fsync": "ext4-fsync",
    "image2k": "image-2k",
}
UNIT_NAME = {65536: "64 KiB", 32768: "32 KiB (DVD)", 1048576: "1 MiB"}
UNIT_TAG = {65536: "64k", 32768: "32k", 1048576: "1m"}


def read_kv(path, sep=None):
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            if sep:
                k, _, v = line.partition(sep)
            else:
                k, _, v = line.partition(" ")
            out[k.strip()] = v.strip()
    return out


def num(s):
    try:
        return int(s)
    except ValueError:
        return float(s)


def load_run(d):
    meta = read_kv(os.path.join(d, "meta"), "=")
    a = {k: num(v) for k, v in read_kv(os.path.join(d, "A.stats")).items() if v.lstrip("-").isdigit()}
    b = {k: num(v) for k, v in read_kv(os.path.join(d, "B.stats")).items() if v.lstrip("-").isdigit()}
    delta = {k: b[k] - a.get(k, 0) for k in b}
    with open(os.path.join(d, "A.time")) as f:
        ta = float(f.read())
    with open(os.path.join(d, "B.time")) as f:
        tb = float(f.read())
    with open(os.path.join(d, "A.cpu")) as f:
        ca = [int(x) for x in f.read().split()[1:]]
    with open(os.path.join(d, "B.cpu")) as f:
        cb = [int(x) for x in f.read().split()[1:]]
    cpu = [y - x for x, y in zip(ca, cb)]
    unit = int(meta["unit"])
    user = int(meta["user_bytes"])
    wall = tb - ta
    r = {
        "unit": unit,
        "workload": meta["workload"],
        "contender": meta["contender"],
        "rep": int(meta["rep"]),
        "seq": int(meta["seq"]),
        "user_bytes": user,
        "issued_bytes": int(meta["issued_bytes"]),
        "nios": int(meta["nios"]),
        "wall_s": wall,
        "mib_s": user / MiB / wall,
        "iops": int(meta["nios"]) / wall if int(meta["nios"]) else None,
        "lower_read_bytes": delta.get("lower.read.bytes", 0),
        "lower_write_bytes": delta.get("lower.write.bytes", 0),
        "requests": delta.get("requests", 0),
        "read_requests": delta.get("read.requests", 0),
        "write_requests": delta.get("write.requests", 0),
        "flush_requests": delta.get("flush.requests", 0),
        "partial_requests": sum(delta.get(k + ".partial", 0) for k in ("read", "write", "trim", "zero")),
        "refused_requests": sum(delta.get(k + ".refused", 0) for k in ("read", "write", "trim", "zero")),
        "rmw_cycles": delta.get("rmw.cycles", 0),
        "device_read_bytes": delta.get("read.bytes", 0),
        "device_write_bytes": delta.get("write.bytes", 0),
        # user nice system idle iowait irq softirq steal
        "cpu_user_s": (cpu[0] + cpu[1]) / USER_HZ,
        "cpu_sys_s": (cpu[2] + cpu[5] + cpu[6]) / USER_HZ,
        "cpu_iowait_s": cpu[4] / USER_HZ,
        "cpu_idle_s": cpu[3] / USER_HZ,
        "table": meta.get("table", ""),
    }
    r["wa"] = r["lower_write_bytes"] / user
    r["ra"] = r["lower_read_bytes"] / user
    r["req_per_mib"] = r["requests"] / (user / MiB)
    r["sys_ms_per_mib"] = r["cpu_sys_s"] * 1000 / (user / MiB)
    r["user_ms_per_mib"] = r["cpu_user_s"] * 1000 / (user / MiB)
    r["p99_read_ms"] = r["p99_write_ms"] = r["p99_ms"] = None
    r["time_s"] = wall
    fj = meta.get("fio_json", "")
    if fj:
        # One fio run holds the jobs of every contender: this run's is
        # the one named after it.
        fj = os.path.join(os.path.dirname(d), os.path.basename(fj))
        with open(fj) as f:
            txt = f.read()
        jobs = json.loads(txt[txt.index("{"):])["jobs"]
        job = [j for j in jobs if j["jobname"] == meta["contender"]][0]
        # fio's own job runtime (from its first I/O to the end of the
        # final fsync): process start-up and exit are not the device's.
        if job.get("job_runtime"):
            r["time_s"] = job["job_runtime"] / 1000.0
            r["mib_s"] = user / MiB / r["time_s"]
            if r["iops"]:
                r["iops"] = r["nios"] / r["time_s"]
        for dd in ("read", "write"):
            if job[dd]["total_ios"] > 0:
                p = job[dd]["clat_ns"].get("percentile", {}).get("99.000000")
                if p is not None:
                    r["p99_%s_ms" % dd] = p / 1e6
        r["p99_ms"] = max(x for x in (r["p99_read_ms"], r["p99_write_ms"], 0) if x is not None) or None
    lat = os.path.join(d, "lat.txt")
    if os.path.exists(lat):
        with open(lat) as f:
            xs = sorted(float(x) for x in f if x.strip())
        if xs:
            r["p99_ms"] = r["p99_write_ms"] = xs[min(len(xs) - 1, int(0.99 * len(xs)))] * 1000
    status = os.path.join(d, "B.status")
    r["lbs_status"] = open(status).read().strip() if os.path.exists(status) else ""
    return r


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def gmean(xs):
    xs = [x for x in xs if x]
    if not xs:
        return None
    p = 1.0
    for x in xs:
        p *= x
    return p ** (1.0 / len(xs))


def summarise(runs):
    groups = {}
    for r in runs:
        groups.setdefault((r["unit"], r["workload"], r["contender"]), []).append(r)
    summ = {}
    for key, rs in groups.items():
        s = {"unit": key[0], "workload": key[1], "contender": key[2], "reps": len(rs)}
        for k in ("mib_s", "iops", "wall_s", "time_s", "p99_ms", "p99_read_ms", "p99_write_ms",
                  "sys_ms_per_mib", "user_ms_per_mib", "wa", "ra", "req_per_mib",
                  "partial_requests", "rmw_cycles", "lower_read_bytes", "lower_write_bytes",
                  "requests", "refused_requests", "user_bytes"):
            s[k] = median([r[k] for r in rs])
        # Counters: did every repetition see the same?
        # Counter targets hold for every repetition, not just the median.
        s["wa_max"] = max((r["wa"] for r in rs if r["wa"] is not None), default=None)
        s["read_bytes_all"] = [r["lower_read_bytes"] for r in rs]
        mibs = [r["mib_s"] for r in rs if r["mib_s"]]
        s["spread"] = max(mibs) / min(mibs) if len(mibs) > 1 else None
        s["counters_vary"] = len({(r["lower_read_bytes"], r["lower_write_bytes"], r["requests"],
                                   r["partial_requests"], r["rmw_cycles"]) for r in rs}) > 1
        summ[key] = s
    # Ratio to lbs: per repetition (same boot, adjacent runs), then the
    # geometric mean over repetitions.
    for key, s in summ.items():
        unit, wl, c = key
        ratios = []
        for r in groups[key]:
            mine = [x for x in groups.get((unit, wl, "lbs"), []) if x["rep"] == r["rep"]]
            if mine:
                ratios.append(r["mib_s"] / mine[0]["mib_s"])
        s["ratio_to_lbs"] = gmean(ratios)
    return summ


def fmt(x, digits=2):
    if x is None:
        return "-"
    if isinstance(x, int):
        return f"{x:,}"
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    if abs(x) >= 0.01:
        return f"{x:.{digits}f}"
    return f"{x:.2g}"


def units_in(summ):
    return sorted({k[0] for k in summ}, key=lambda u: (u != 65536, u))


def contenders_for(summ, unit, wl):
    return [c for c in CONTENDERS if (unit, wl, c) in summ]


def workloads_for(summ, unit):
    return [w for w in WORKLOADS if any((unit, w, c) in summ for c in CONTENDERS)]


# ------------------------------------------------------------------ plots --

def gnuplot_terminal():
    try:
        out = subprocess.run(["gnuplot", "-e", "set terminal"], capture_output=True, text=True).stderr
    except FileNotFoundError:
        return None
    if "pngcairo" in out:
        return "pngcairo size 1000,460 font 'DejaVu Sans,10'"
    return "png size 1000,460"


def plot(summ, unit, field, title, ylabel, png, datadir, logy=True, skip_zero=True):
    term = gnuplot_terminal()
    if term is None:
        return False
    wls = workloads_for(summ, unit)

    def ok(v):
        return not (v is None or (skip_zero and v == 0) or (logy and v <= 0))
    cs = [c for c in CONTENDERS if any(ok(summ.get((unit, w, c), {}).get(field)) for w in wls)]
    if not cs:
        return False
    dat = os.path.join(datadir, os.path.basename(png).replace(".png", ".dat"))
    rows = 0
    vals_all = [summ[(unit, w, c)][field] for w in wls for c in cs
                if (unit, w, c) in summ and ok(summ[(unit, w, c)][field])]
    ymin = 10 ** math.floor(math.log10(min(vals_all) / 2)) if logy else 0
    with open(dat, "w") as f:
        f.write("workload " + " ".join(cs) + "\n")
        for w in wls:
            vals = []
            for c in cs:
                v = summ.get((unit, w, c), {}).get(field)
                if not ok(v):
                    vals.append("-")
                else:
                    vals.append(repr(float(v)))
            if all(v == "-" for v in vals):
                continue
            rows += 1
            f.write(WL_SHORT[w] + " " + " ".join(vals) + "\n")
    if rows == 0:
        os.unlink(dat)
        return False
    colors = ["#1f77b4", "#aec7e8", "#d62728", "#ff7f0e", "#2ca02c", "#7f7f7f"]
    script = f"""
set terminal {term}
set output '{png}'
set datafile missing '-'
set title "{title}"
set ylabel "{ylabel}"
set style data histogram
set style histogram cluster gap 1
set style fill solid 0.9 border -1
set boxwidth 0.9
set key outside right top
set grid ytics
set xtics rotate by -25 nomirror
{"set logscale y" if logy else ""}
set yrange [{ymin}:*]
plot for [i=2:{len(cs) + 1}] '{dat}' using i:xtic(1) title columnheader(i) lc rgb word("{' '.join(colors[CONTENDERS.index(c)] for c in cs)}", i-1)
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    os.unlink(dat)
    return True


# ------------------------------------------------------------------ targets --

def noise(summ, keys=()):
    """With repetitions: the largest spread (max/min MiB/s) between the
    repetitions of the runs compared.  With one repetition, whole 1 MiB
    requests stand in: every contender passes them to the device whole,
    with the same device counters, and the spread of their times is a lower
    bound on this run's timing noise."""
    spreads = [summ[k]["spread"] for k in keys if summ.get(k, {}).get("spread")]
    if spreads:
        return max(spreads)
    xs = []
    for w in ("seq1m_write", "seq1m_read"):
        same = {}
        for c in contenders_for(summ, 65536, w):
            s = summ[(65536, w, c)]
            same.setdefault((s["lower_read_bytes"], s["lower_write_bytes"], s["rmw_cycles"]), []).append(s["mib_s"])
        for v in same.values():
            if len(v) > 1:
                xs.append(max(v) / min(v))
    return max(xs) if xs else None


def target_checks(summ, env):
    """The specification's targets: (title, met, measured, why)."""
    out = []
    g = lambda u, w, c, k: summ.get((u, w, c), {}).get(k)  # noqa: E731
    nz = noise(summ)

    def between(*keys):
        """Judge the next target on the noise of the runs it compares."""
        nonlocal nz
        nz = noise(summ, keys)

    def met_note(margin):
        """margin: how many times better than needed."""
        if nz and margin <= nz:
            return (f"met by {margin:.2f}x, within this run's timing noise ({nz:.1f}x): "
                    "not conclusive")
        return ""

    def timing_why(shortfall):
        """shortfall: how many times too slow."""
        if nz and shortfall <= nz:
            return (f"time {shortfall:.2f}x short, within this run's timing noise "
                    f"({nz:.1f}x, see the notes): not conclusive")
        return f"time {shortfall:.2f}x short" + (f", beyond this run's noise ({nz:.1f}x)" if nz else "")

    wa, reads = g(65536, "seq4k_buf", "lbs", "wa_max"), g(65536, "seq4k_buf", "lbs", "read_bytes_all")
    if wa is not None:
        met = wa <= 1.02 and not any(reads)
        bad = [x for x in reads if x]
        why = ""
        if bad:
            why = (f"{len(bad)} of {len(reads)} repetitions read {', '.join(str(int(x) // 65536) for x in bad)} "
                   "block(s): a block still partly written when write-back took it (idle for "
                   "writeback_delay while the page cache's flusher had stopped mid-block, or pushed "
                   "out for room) is completed with a read")
        elif not met:
            why = "the page cache's 4 KiB write-back bios were not all gathered into whole blocks"
        out.append(("Sequential 4 KiB buffered writes: lower bytes written within 2% of user bytes, zero lower reads",
                    met, f"written/user = {wa:.4f} at most, lower bytes read per repetition = "
                    + ", ".join(str(int(x)) for x in reads), why))

    for w in ("seq1m_write", "seq1m_read"):
        r_l = g(65536, w, "lbs", "mib_s")
        r_u = g(65536, w, "linear", "mib_s")
        if r_l and r_u:
            between((65536, w, "lbs"), (65536, w, "linear"))
            ratio = 1 / summ[(65536, w, "linear")]["ratio_to_lbs"]
            met = ratio >= 0.95
            out.append((f"{WL_TITLE[w]}: at least 0.95 of the upper bound", met,
                        f"lbs {r_l:.1f} MiB/s, dm-linear {r_u:.1f} MiB/s: {ratio:.2f} (pairwise)",
                        timing_why(0.95 / ratio) if not met else met_note(ratio / 0.95)))

    l_thr, e_thr = g(65536, "rand4k_write_qd16", "lbs", "mib_s"), g(65536, "rand4k_write_qd16", "ebs", "mib_s")
    if l_thr and e_thr:
        between((65536, "rand4k_write_qd16", "lbs"), (65536, "rand4k_write_qd16", "ebs"))
        q1 = summ.get((65536, "rand4k_write_qd1", "ebs"), {}).get("ratio_to_lbs")
        ratio = 1 / summ[(65536, "rand4k_write_qd16", "ebs")]["ratio_to_lbs"]
        lb = g(65536, "rand4k_write_qd16", "lbs", "lower_read_bytes") + g(65536, "rand4k_write_qd16", "lbs", "lower_write_bytes")
        eb = g(65536, "rand4k_write_qd16", "ebs", "lower_read_bytes") + g(65536, "rand4k_write_qd16", "ebs", "lower_write_bytes")
        met = ratio >= 2 and lb <= eb
        why = [] if not met else [met_note(ratio / 2)]
        if ratio < 2:
            why.append(timing_why(2 / ratio))
            why.append(f"lbs moved {lb / eb:.2f}x dm-ebs's lower bytes.  At QD 16 dm-ebs reads the "
                       "blocks of a whole batch of bios at once (dm-bufio prefetch), so it is not "
                       "held to one read-modify-write at a time; what is left between the two is "
                       "the bytes moved and the CPU per request"
                       + (f" (at QD 1 that latency shows: lbs {1 / q1:.2f}x dm-ebs)" if q1 else ""))
        if lb > eb:
            why.append("more lower bytes than dm-ebs")
        out.append(("Random 4 KiB direct writes at QD 16: at least 2x dm-ebs throughput, no more lower bytes than dm-ebs",
                    met, f"{ratio:.2f}x dm-ebs; lower bytes (read + written) lbs {lb / MiB:.1f} MiB, dm-ebs {eb / MiB:.1f} MiB",
                    "; ".join(why)))

    for w in ("ext4_untar", "ext4_fsync"):
        if (65536, w, "lbs") not in summ:
            continue
        lb = g(65536, w, "lbs", "lower_read_bytes") + g(65536, w, "lbs", "lower_write_bytes")
        others = [c for c in contenders_for(summ, 65536, w) if c not in ("lbs", "linear")]
        if not others:
            continue
        between((65536, w, "lbs"), *((65536, w, c) for c in others))
        worse_bytes = [c for c in others if g(65536, w, c, "lower_read_bytes") + g(65536, w, c, "lower_write_bytes") <= lb]
        worse_thr = [c for c in others if g(65536, w, c, "mib_s") >= g(65536, w, "lbs", "mib_s")]
        met = not worse_bytes and not worse_thr
        why = []
        if met:
            why.append(met_note(g(65536, w, "lbs", "mib_s") / max(g(65536, w, c, "mib_s") for c in others)))
        if worse_bytes:
            why.append("no more lower bytes than lbs: " + ", ".join(worse_bytes))
        if worse_thr:
            why.append("at least lbs's throughput: " + ", ".join(worse_thr) + "; "
                       + timing_why(max(g(65536, w, c, "mib_s") for c in worse_thr) / g(65536, w, "lbs", "mib_s")))
        best_other = max(others, key=lambda c: g(65536, w, c, "mib_s")) if others else None
        meas = f"lbs {lb / MiB:.1f} MiB lower, {g(65536, w, 'lbs', 'mib_s'):.2f} MiB/s"
        if best_other:
            meas += f"; fastest other: {best_other} {g(65536, w, best_other, 'mib_s'):.2f} MiB/s"
        out.append((f"{WL_TITLE[w]}: fewer lower bytes and higher throughput than every other contender",
                    met, meas, "; ".join(x for x in why if x)))

    if (32768, "image2k", "lbs") in summ and (32768, "image2k", "linear") in summ:
        cyc = g(32768, "image2k", "lbs", "rmw_cycles")
        t_l = g(32768, "image2k", "lbs", "time_s")
        t_u = g(32768, "image2k", "linear", "time_s")
        t_e = g(32768, "image2k", "ebs", "time_s")
        ratio = None
        between((32768, "image2k", "lbs"), (32768, "image2k", "linear"))
        if t_u:
            ratio = 1 / summ[(32768, "image2k", "linear")]["ratio_to_lbs"]
        met = cyc == 0 and ratio is not None and 1 / ratio <= 1.1
        why = [met_note(1.1 * ratio)] if met else []
        if cyc:
            why.append(f"{int(cyc)} internal RMW cycles")
        if ratio is not None and 1 / ratio > 1.1:
            if g(32768, "image2k", "lbs", "ra"):
                why.append(f"{1 / ratio:.1f}x the whole-unit write's time: lbs had to read "
                           f"{g(32768, 'image2k', 'lbs', 'ra'):.2f} bytes per user byte for the page "
                           "cache's read-before-write of 2 KiB writes (see the notes), the "
                           "whole-unit write reads nothing, and makes 16 times the write calls"
                           + (f"; dm-ebs, reading the same, took {t_e / t_u:.1f}x" if t_e else ""))
            else:
                why.append("slower than 1.1x the whole-unit write: " + timing_why((1 / ratio) / 1.1))
        out.append(("2 KiB image writes (32 KiB units): zero internal RMW cycles, time within 1.1x of writing the image in whole 32 KiB units",
                    met, f"{int(cyc)} RMW cycles; {t_l:.2f} s vs {t_u:.2f} s whole units: {1 / ratio:.2f}x" if ratio else f"{int(cyc)} RMW cycles",
                    "; ".join(x for x in why if x)))
    return out


def notes(summ, env):
    """What the numbers mean: mechanisms, read from the counters."""
    g = lambda u, w, c, k: summ.get((u, w, c), {}).get(k)  # noqa: E731
    out = []
    # Noise: with repetitions, how far the same run's times spread; with
    # one, whole 1 MiB requests cost every contender the same device work
    # (identical counters), so the spread of their times is mostly noise.
    spreads = sorted(s["spread"] for s in summ.values() if s.get("spread"))
    nz = None if spreads else noise(summ)
    if spreads:
        out.append("**Timing noise.** Each contender ran each workload "
                   f"{env.get('reps', '?')} times, alternating with the others.  The same run's "
                   f"throughput spread (fastest/slowest repetition) by a median of "
                   f"{statistics.median(spreads):.2f}x and at most {spreads[-1]:.2f}x: the guest "
                   "runs under TCG, sharing the host's CPUs.  The tables show medians; each "
                   "target below is judged against the spread of the runs it compares.  "
                   "The counters do not vary with timing and are the firmer findings.")
    if nz:
        out.append("**Timing noise.** On whole 1 MiB requests every contender does the same "
                   "device work (identical counters: whole units passed down, nothing read "
                   "back), yet their times spread by up to "
                   f"{nz:.1f}x in this run: the guest runs under TCG on a shared, loaded host, "
                   "and one repetition was made.  Differences in MiB/s, p99 or CPU smaller than "
                   "that are not findings; the counters are.")
    wa, ra = g(65536, "seq4k_buf", "lbs", "wa"), g(65536, "seq4k_buf", "ebs", "ra")
    if wa is not None and ra is not None:
        out.append("**4 KiB buffered writes.** Page-cache write-back reaches a dm target as one "
                   "4 KiB bio per page, unmerged.  lbs gathers them into whole blocks "
                   f"(written/user {wa:.3f}, no reads); dm-ebs reads every block once before "
                   f"writing it (read/user {ra:.3f})"
                   + (f"; lbs with `write_through` writes each block once per page (written/user "
                      f"{g(65536, 'seq4k_buf', 'lbs-wt', 'wa'):.1f})" if g(65536, "seq4k_buf", "lbs-wt", "wa") else "")
                   + ".  The nbd devices used directly (nbdkit-blocksize, drive-rmw) are "
                   "request-based: the block layer merges the same pages into large requests "
                   "before the device sees them, so they too write whole units without reading.")
    if g(65536, "rand4k_write_qd16", "lbs", "wa") is not None:
        out.append("**Random 4 KiB writes.** Each one costs a whole-unit read and a whole-unit "
                   "write wherever the read-modify-write happens (about 16 bytes each way per "
                   "user byte at 64 KiB units); lbs and dm-ebs save the blocks hit twice.  lbs "
                   "in write-back mode acknowledges the writes from its cache (hence its low p99) "
                   "and pays the read-modify-write at the final fsync, which its time includes.  "
                   "The emulator's internal RMW (drive-rmw) costs only a memory copy inside nbdkit "
                   "(its latency model is off), whereas every shim above it moves both units "
                   "through the nbd socket: drive-rmw's times here are far better than a real "
                   "drive's, where an RMW costs at least one extra revolution or program cycle.")
    if g(65536, "ext4_untar", "lbs", "wa") is not None:
        parts = []
        for w in ("ext4_untar", "ext4_fsync"):
            cs = contenders_for(summ, 65536, w)
            if len(cs) < 2:
                continue
            tot = {c: g(65536, w, c, "lower_read_bytes") + g(65536, w, c, "lower_write_bytes") for c in cs}
            best = min(tot, key=tot.get)
            parts.append(f"`{w}`: the fewest lower bytes are {best}'s ({tot[best] / MiB:.1f} MiB; "
                         + ", ".join(f"{c} {tot[c] / MiB:.1f}" for c in cs if c != best) + ")")
        out.append("**ext4.** File-system metadata and journal writes are 4 KiB.  lbs gathers "
                   "neighbouring ones and writes back a partial block once, after the "
                   "`writeback_delay` or at the journal's flushes; the shims read-modify-write "
                   "a partial block on every write, and `write_through` does too.  Each fsync of "
                   "a small file is a journal commit with FLUSH/FUA, so every contender writes "
                   "several whole blocks per small file.  " + "; ".join(parts) + ".")
    ra2 = g(32768, "image2k", "lbs", "ra")
    if ra2:
        out.append("**2 KiB image writes.** A 2 KiB buffered write into a 4 KiB page cache page "
                   "on a 2 KiB-sector device makes the kernel read the page's other 2 KiB first "
                   "(buffer-head read-before-write).  lbs serves each such read by reading the "
                   f"whole 32 KiB block (read/user {ra2:.3f}); the whole-unit reference writes "
                   "whole pages and reads nothing.  Writing the image with `bs=4k` or larger, "
                   "or with O_DIRECT, avoids these reads.  No contender made the device do an "
                   "internal RMW except drive-rmw itself.")
    if any(k[0] == 1048576 for k in summ):
        out.append("**1 MiB units.** nbdkit's blocksize filter accepts `minblock` up to 64 KiB "
                   "only: it has no 1 MiB row.  The nbd device's `max_sectors_kb` is raised to "
                   "1024 for lbs and the others (lbs needs a whole block per request).")
    out.append("**Upper bound.** dm-linear on the `rmw`-mode device with every request one "
               "whole aligned unit has no file-system row: ext4 cannot be fed whole units.")
    return out


# -------------------------------------------------------------- markdown --

def counter_table(summ, unit, wl):
    cs = contenders_for(summ, unit, wl)
    lines = ["| contender | lower written / user | lower read / user | requests / user MiB | partial-unit requests | internal RMW cycles |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for c in cs:
        s = summ[(unit, wl, c)]
        vary = " ~" if s["counters_vary"] else ""
        lines.append(f"| {c}{vary} | {fmt(s['wa'], 3)} | {fmt(s['ra'], 3)} | {fmt(s['req_per_mib'], 1)} | "
                     f"{fmt(int(s['partial_requests']))} | {fmt(int(s['rmw_cycles']))} |")
    return lines


def time_table(summ, unit, wl):
    cs = contenders_for(summ, unit, wl)
    rnd = any(summ[(unit, wl, c)]["iops"] for c in cs)
    head = "| contender | MiB/s | " + ("IOPS | " if rnd else "") + "ratio to lbs | p99 latency (ms) | sys CPU ms / MiB |"
    lines = [head, "| --- | ---: | " + ("---: | " if rnd else "") + "---: | ---: | ---: |"]
    for c in cs:
        s = summ[(unit, wl, c)]
        if s["p99_read_ms"] is not None and s["p99_write_ms"] is not None:
            p99 = f"r {fmt(s['p99_read_ms'])} / w {fmt(s['p99_write_ms'])}"
        else:
            p99 = fmt(s["p99_ms"])
        lines.append(f"| {c} | {fmt(s['mib_s'])} | " + (f"{fmt(s['iops'])} | " if rnd else "")
                     + f"{fmt(s['ratio_to_lbs'])} | {p99} | {fmt(s['sys_ms_per_mib'])} |")
    return lines


def headline(summ):
    """workload x contender: ratio to lbs and write amplification (64 KiB)."""
    unit = 65536
    cs = [c for c in CONTENDERS if c != "lbs-wt" and any((unit, w, c) in summ for w in WORKLOADS)]
    lines = ["| workload (64 KiB units) | " + " | ".join(cs) + " |",
             "| --- | " + " | ".join("---:" for _ in cs) + " |"]
    for w in workloads_for(summ, unit):
        cells = []
        for c in cs:
            s = summ.get((unit, w, c))
            if not s:
                cells.append("n/a")
                continue
            amp = s["wa"] if s["wa"] else s["ra"]
            cells.append(f"{fmt(s['mib_s'])} MiB/s ({fmt(s['ratio_to_lbs'])}x), {'WA' if s['wa'] else 'RA'} {fmt(amp, 2)}")
        lines.append(f"| {WL_TITLE[w]} | " + " | ".join(cells) + " |")
    return lines


def write_markdown(path, summ, env, runs, plots, targets, quick, pngrel):
    L = []
    A = L.append
    A("# Benchmarks")
    A("")
    A("dm-lbs side by side with the shims that exist today, on the same emulated "
      "big-sector device, in one guest boot.  Generated by `make bench` "
      "(`bench/run`); do not edit by hand.")
    A("")
    if quick:
        A("**QUICK run: tiny sizes, one repetition; for checking the harness, not for reading.**")
        A("")
    A(f"Run: {env.get('date', '?')}, guest kernel {env.get('kernel', '?')}, "
      f"{env.get('cpus', '?')} vCPUs, {env.get('mem_mib', '?')} MiB, {env.get('nbdkit', '?')}, "
      f"{env.get('fio', '?')}, {len(runs)} runs in {env.get('total_seconds', '?')} s in the guest"
      + (f" ({env['host_seconds']} s with boot and set-up)" if env.get("host_seconds") else "")
      + f", {env.get('reps', '?')} repetition(s) per contender and workload"
      + (" (medians shown)" if env.get("reps") not in (None, "1") else "") + ".")
    if env.get("hostload"):
        A("")
        A(f"Host load average during the run (sampled every 30 s): {env['hostload']} "
          "on 2 cores; the guest's share of the CPUs, and so every absolute time "
          "below, depends on it.")
    A("")
    A("**The guest runs under QEMU TCG (software emulation) on a shared 2-core host, "
      "and the device is nbdkit's memory plugin inside that guest. Absolute times "
      "and MiB/s are not hardware numbers; ratios between contenders, measured in "
      "the same boot with the contenders alternating, are what to read. The "
      "device's counters do not depend on speed: they come first.**")
    A("")
    A("## How")
    A("")
    A("Every contender has its own instance of the same emulated device "
      "(`emulator/nbdkit-bigsector-filter.so` over nbdkit's memory plugin, attached "
      "with `nbd-client`), all in one guest boot; each sees the same sequence of "
      "workloads.  For each workload every contender runs once per repetition, the "
      "order rotated between repetitions.  Each run gets a freshly loaded mapping "
      "(empty target caches) and no cached pages of the devices.  The emulator's "
      "statistics file is read right before and right after the timed phase (fio's "
      "start-up is outside it; a final fsync or sync is inside it, so write-back "
      "caches pay their debt).  The area that read workloads read is written once, in "
      "whole units, on the raw device before any mapping exists.")
    A("")
    A("| contender | what |")
    A("| --- | --- |")
    for c in CONTENDERS:
        A(f"| `{c}` | {CONTENDER_DOC[c]} |")
    A("")
    A(f"| workload | what |")
    A("| --- | --- |")
    wl_doc = {
        "seq4k_buf": "`dd bs=4k conv=fsync` to the raw device (page cache, buffered)",
        "seq1m_write": "fio, sequential 1 MiB O_DIRECT writes, QD 1, fsync at the end",
        "seq1m_read": "fio, sequential 1 MiB O_DIRECT reads, QD 1",
        "rand4k_write_qd1": "fio, random 4 KiB O_DIRECT writes (libaio, QD 1) over "
                            f"{int(env.get('rand_area', 0)) // MiB} MiB, fsync at the end",
        "rand4k_write_qd16": "the same at QD 16",
        "rand4k_read_qd1": "fio, random 4 KiB O_DIRECT reads, QD 1",
        "rand4k_read_qd16": "the same at QD 16",
        "mix70_qd16": "fio, random 4 KiB O_DIRECT, 70% reads / 30% writes, QD 16, fsync at the end",
        "ext4_untar": f"mkfs.ext4, mount, then (timed) `tar xf` of {int(env.get('tree_files', 0))} files "
                      f"({int(env.get('tree_bytes', 0)) / MiB:.1f} MiB: kernel sources of six file systems, "
                      "`fs/{btrfs,ext4,nfs,ocfs2,smb,xfs}` from the linux-source package) and `sync`",
        "ext4_fsync": f"mkfs.ext4, mount, then (timed) {env.get('small_files', '?')} files of 4-16 KiB, "
                      "each created, written, fsync'd and closed (p99 is per file)",
        "image2k": "a disc image written with `dd bs=2k conv=fsync` (32 KiB units, 2 KiB sectors: the DVD case)",
    }
    for w in WORKLOADS:
        if any(k[1] == w for k in summ):
            A(f"| `{w}` | {WL_TITLE[w]}: {wl_doc[w]} |")
    A("")
    A("Throughput is user bytes (what the workload asked for) per second of the timed "
      "phase: fio's own job runtime for fio workloads (first I/O to the end of the "
      "final fsync), the wall time between the two snapshots otherwise.  For the upper bound the requests were whole units, but the user bytes "
      "are the workload's own, so its amplification shows what one whole unit per "
      "request costs.  Counters are the device's (`lower.*`: what reached the medium, "
      "including internal read-modify-write), per user byte or per user MiB.  "
      "`requests` counts every request the device received, flushes included.  "
      "sys CPU is the whole guest's (system + irq + softirq, nbdkit included) per user "
      "MiB.  A `~` after a contender means its counters differed between "
      "repetitions (timing-dependent gathering or write-back).")
    A("")
    A("## Targets")
    A("")
    A("Targets on counters are firm.  Targets on time are judged on this run's "
      "numbers, with the noise described under *What the numbers say*.")
    A("")
    A("| target | result | measured | why missed, or how sure |")
    A("| --- | --- | --- | --- |")
    for title, met, meas, why in targets:
        A(f"| {title} | {'met' if met else '**missed**'} | {meas} | {why} |")
    A("")
    A("## What the numbers say")
    A("")
    for n in notes(summ, env):
        A("- " + n)
    A("")
    A("## Headline")
    A("")
    A("Throughput (ratio to lbs, same boot) and write amplification (WA: lower "
      "bytes written per user byte; RA, read amplification, for read workloads).")
    A("")
    L.extend(headline(summ))
    A("")
    for unit in units_in(summ):
        A(f"## {UNIT_NAME.get(unit, unit)} units")
        A("")
        tag = UNIT_TAG.get(unit, str(unit))
        for p in plots.get(unit, []):
            A(f"![{p[1]}]({pngrel}/{p[0]})")
            A("")
        for w in workloads_for(summ, unit):
            A(f"### {WL_TITLE[w]} (`{w}`, {tag})")
            A("")
            L.extend(counter_table(summ, unit, w))
            A("")
            L.extend(time_table(summ, unit, w))
            A("")
    if not quick:
        A("## Other measurements")
        A("")
        A("- [cache-scale.md](cache-scale.md) (`bench/cache-scale`): FLUSH and cache-miss "
          "cost with a 1 GiB cache full of clean blocks against an empty one.")
        A("- [cpu-profile.md](cpu-profile.md) (`bench/cpu-profile`): where the CPU goes on "
          "random 4 KiB writes at QD 16, lbs, dm-ebs and dm-linear side by side, with perf "
          "profiles.  It found eviction walking the dirty blocks of a full cache, "
          "once per parked block and per wake-up; eviction now walks the clean blocks "
          "only (an xarray mark) and only an idle block wakes the parked ones.")
        A("- [bench-kernels.md](bench-kernels.md) (`bench/kernels`): the quick benchmark "
          "on 6.1, 6.12 and 7.x, and which counters or ratios differ between the kernels.")
        A("- [native.md](native.md) (`bench/native`, 7.x): file systems directly on native "
          "32 and 64 KiB-logical devices against the same work through lbs.")
        A("")
    A("## Raw data")
    A("")
    A(f"[`{pngrel}/results.csv`]({pngrel}/results.csv): one row per run (every "
      f"repetition, the device's counter deltas, CPU, times). "
      f"[`{pngrel}/summary.csv`]({pngrel}/summary.csv): the values above"
      + (" (medians)" if env.get("reps") not in (None, "1") else "") + ".  "
      "Regenerate everything with `make bench`"
      + (f" (this run: {int(env['host_seconds']) // 60} minutes on the host described above)"
         if env.get("host_seconds") else "")
      + "; `make bench QUICK=1` is the small run `make check` does (build/bench/quick/, "
      "docs untouched).  The guest's raw results (emulator statistics before and after "
      "each run, fio JSON, `dmsetup status`) are kept in build/bench/full/.")
    A("")
    with open(path, "w") as f:
        f.write("\n".join(L))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    res, outdir = sys.argv[1], sys.argv[2]
    env = read_kv(os.path.join(res, "env"), "=")
    hl = os.path.join(res, "hostload")
    if os.path.exists(hl):
        with open(hl) as f:
            loads = [float(x) for x in f.read().split() if x.replace(".", "", 1).isdigit()]
        if loads:
            env["hostload"] = (f"median {statistics.median(loads):.1f} "
                               f"(min {min(loads):.1f}, max {max(loads):.1f})")
    rundir = os.path.join(res, "runs")
    runs = []
    for d in sorted(os.listdir(rundir)):
        p = os.path.join(rundir, d)
        if os.path.exists(os.path.join(p, "meta")):
            runs.append(load_run(p))
    if not runs:
        sys.exit("report.py: no runs in " + rundir)
    bad = [r for r in runs if r["refused_requests"]]
    if bad:
        sys.exit("report.py: requests refused in " + ", ".join(f"{r['seq']}" for r in bad))
    summ = summarise(runs)
    benchdir = os.path.join(outdir, "bench")
    os.makedirs(benchdir, exist_ok=True)
    for f in os.listdir(benchdir):
        if f.endswith((".png", ".csv", ".dat")):
            os.unlink(os.path.join(benchdir, f))
    cols = ["seq", "unit", "workload", "contender", "rep", "user_bytes", "issued_bytes", "nios",
            "wall_s", "time_s", "mib_s", "iops", "p99_ms", "p99_read_ms", "p99_write_ms",
            "lower_read_bytes", "lower_write_bytes", "wa", "ra", "requests", "req_per_mib",
            "read_requests", "write_requests", "flush_requests", "partial_requests",
            "refused_requests", "rmw_cycles", "device_read_bytes", "device_write_bytes",
            "cpu_user_s", "cpu_sys_s", "cpu_iowait_s", "cpu_idle_s", "sys_ms_per_mib",
            "user_ms_per_mib", "table", "lbs_status"]
    with open(os.path.join(benchdir, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in runs:
            w.writerow(["" if r[c] is None else (f"{r[c]:.6g}" if isinstance(r[c], float) else r[c]) for c in cols])
    scols = ["unit", "workload", "contender", "reps", "mib_s", "ratio_to_lbs", "iops", "wall_s", "time_s",
             "p99_ms", "p99_read_ms", "p99_write_ms", "sys_ms_per_mib", "user_ms_per_mib", "wa", "ra",
             "req_per_mib", "partial_requests", "rmw_cycles", "lower_read_bytes", "lower_write_bytes",
             "requests", "user_bytes", "counters_vary"]
    with open(os.path.join(benchdir, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(scols)
        for key in sorted(summ, key=lambda k: (k[0], WORKLOADS.index(k[1]), CONTENDERS.index(k[2]))):
            s = summ[key]
            w.writerow(["" if s[c] is None else (f"{s[c]:.6g}" if isinstance(s[c], float) else s[c]) for c in scols])
    plots = {}
    for unit in units_in(summ):
        tag = UNIT_TAG.get(unit, str(unit))
        un = UNIT_NAME.get(unit, str(unit))
        specs = [
            ("wa", f"Lower bytes written per user byte ({un} units; lower is better)", "bytes / user byte", f"write-amp-{tag}.png"),
            ("ra", f"Lower bytes read per user byte ({un} units; lower is better)", "bytes / user byte", f"read-amp-{tag}.png"),
            ("ratio_to_lbs", f"Throughput relative to lbs, same boot ({un} units; above 1: faster than lbs)", "ratio", f"ratio-{tag}.png"),
            ("mib_s", f"Throughput under TCG ({un} units)", "user MiB/s", f"throughput-{tag}.png"),
            ("p99_ms", f"p99 latency under TCG ({un} units; lower is better)", "ms", f"p99-{tag}.png"),
            ("sys_ms_per_mib", f"Guest sys CPU per user MiB ({un} units; lower is better)", "ms / MiB", f"cpu-{tag}.png"),
        ]
        for field, title, ylabel, png in specs:
            if plot(summ, unit, field, title, ylabel, os.path.join(benchdir, png), benchdir):
                plots.setdefault(unit, []).append((png, title))
    targets = target_checks(summ, env)
    quick = env.get("quick") == "1"
    write_markdown(os.path.join(outdir, "benchmarks.md"), summ, env, runs, plots, targets, quick, "bench")
    # The headline table, alone, for the README.
    with open(os.path.join(benchdir, "headline.md"), "w") as f:
        f.write("\n".join(headline(summ)) + "\n")
    for t in targets:
        print(("met     " if t[1] else "MISSED  ") + t[0] + ": " + t[2])


if __name__ == "__main__":
    main()

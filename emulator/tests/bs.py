# Helpers for the nbdkit-bigsector-filter tests (python3-libnbd).
#
# Tests run under "nbdkit -U - ... --run 'export uri; python3 t.py'"
# (nbdkit sets $uri in the --run shell but does not export it).  libnbd's
# default strict mode refuses unaligned requests on the client side;
# the whole point here is to send them, so connect() turns that off.

import errno
import os
import sys

import nbd

failures = []


def connect(uri=None):
    h = nbd.NBD()
    h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
    h.connect_uri(uri or os.environ.get("uri") or sys.argv[1])
    return h


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, file=sys.stderr)


def fails_with(err, fn, *args, **kw):
    """Call fn, return True if it failed with errno err."""
    try:
        fn(*args, **kw)
    except nbd.Error as e:
        if e.errnum != err:
            print("  expected %s, got %s" % (errno.errorcode[err], e),
                  file=sys.stderr)
            return False
        return True
    print("  expected %s, call succeeded" % errno.errorcode[err],
          file=sys.stderr)
    return False


def succeeds(fn, *args, **kw):
    try:
        fn(*args, **kw)
        return True
    except nbd.Error as e:
        print("  unexpected error:", e, file=sys.stderr)
        return False


def stats(path=None):
    """Parse a stats file into {key: int or str}."""
    d = {}
    with open(path or os.environ["STATS"]) as f:
        for line in f:
            k, v = line.split(None, 1)
            v = v.strip()
            try:
                d[k] = int(v)
            except ValueError:
                d[k] = v
    return d


def delta(before, after):
    return {k: after[k] - before.get(k, 0)
            for k in after if isinstance(after[k], int)}


def expect(d, **kw):
    """expect(delta, write__refused=1): '__' stands for '.'."""
    for k, v in kw.items():
        key = k.replace("__", ".")
        check(d.get(key) == v,
              "%s = %r, expected %r" % (key, d.get(key), v))


def pattern(seed, n):
    """n bytes of a recognisable pattern."""
    b = bytes((seed * 31 + i * 7) & 0xff for i in range(256))
    return (b * (n // 256 + 1))[:n]


def done():
    if failures:
        print("%d check(s) failed" % len(failures), file=sys.stderr)
        sys.exit(1)
    sys.exit(0)

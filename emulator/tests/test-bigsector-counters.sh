#!/bin/bash
# Every counter, exactly: a fixed sequence of requests against a
# dvd-ram device (2K sectors, 32K units, rmw) with a two-unit volatile
# cache, error ranges and a latency model, then the whole stats file
# written at unload is compared with the expected one, key by key.
# The expected values are worked out by hand in the comments below.
source "$(dirname "$0")/functions.sh"
requires_nbdpy

STATS=$tmpdir/stats
cat > "$tmpdir/t.py" <<'PY'
import errno
from bs import *
K = 1024
U = 32 * K
h = connect()
ok = lambda f, *a: check(succeeds(f, *a), "%s%r" % (f.__name__, a[1:]))
h.pwrite(pattern(1, U), 0)          # 1 aligned -> cache {0}
h.pwrite(pattern(2, 2 * K), 34 * K) # 2 RMW unit 1: lower read -> cache {0,1}
h.pwrite(pattern(3, 4 * K), 62 * K) # 3 RMW units 1 (cache hit), 2 (lower
                                    #   read); cache full: evict unit 0
check(h.pread(2 * K, 0) == pattern(1, 2 * K), "4 partial read unit 0")
h.pread(3 * U, 0)                   # 5 unit 0 from plugin, 1 and 2 hits
h.flush()                           # 6 destage units 1, 2; lower flush
h.pwrite(pattern(4, U), 4 * U, nbd.CMD_FLAG_FUA)  # 7 FUA: to the plugin
h.zero(2 * U, 6 * U)                # 8 aligned zero: lower zero
h.zero(2 * K, 8 * U)                # 9 RMW unit 8: lower read -> cache {8}
h.trim(U, 8 * U)                    # 10 aligned trim: drops cached unit 8
h.trim(2 * K, 10 * U)               # 11 RMW unit 10 -> cache {10}
check(fails_with(errno.EINVAL, h.pwrite, b"x" * 1024, 0), "12")
check(fails_with(errno.EINVAL, h.pread, 512, 0), "13")
check(fails_with(errno.EINVAL, h.zero, 1024, 0), "14a")
check(fails_with(errno.EINVAL, h.trim, 1024, 0), "14b")
check(fails_with(errno.EIO, h.pread, U, 992 * K), "15 error-read range")
check(fails_with(errno.EIO, h.pwrite, b"y" * U, 960 * K), "16 error-write")
h.pwrite(pattern(5, U), 928 * K)    # 17 -> cache {10, 29}
done()
PY
run_nbdkit memory 1M bigsector-profile=dvd-ram bigsector-stats=$STATS \
  bigsector-volatile=on bigsector-volatile-size=64K \
  bigsector-error-read=992K-1M bigsector-error-write=960K-961K \
  bigsector-latency-request=1us bigsector-latency-byte=1ns \
  bigsector-latency-rmw=10us \
  --run "export uri; $PY $tmpdir/t.py"

# latency.ns = 1000/request that reached the medium + 1/byte moved on
# the medium + 10000/RMW cycle:
#   1:1000 2:43768 3:86536 4:33768 5:33768 6:66536 7:33768 8:66536
#   9:43768 10:33768 11:43768 17:1000 (refused/injected: none) = 487984
cat > "$tmpdir/expected" <<'EOF2'
bigsector.format 1
bigsector.profile dvd-ram
bigsector.sector 2048
bigsector.unit 32768
bigsector.mode rmw
bigsector.volatile 1
size 1048576
requests 18
read.requests 4
read.bytes 133632
read.aligned 2
read.partial 1
read.misaligned 1
read.refused 1
read.errors 1
read.injected 1
read.extra_read_bytes 30720
write.requests 7
write.bytes 138240
write.aligned 4
write.partial 2
write.misaligned 1
write.refused 1
write.errors 1
write.injected 1
write.fua 1
write.rmw_cycles 3
write.rmw_read_bytes 98304
write.rmw_extra_write_bytes 92160
trim.requests 3
trim.bytes 35840
trim.aligned 1
trim.partial 1
trim.misaligned 1
trim.refused 1
trim.errors 0
trim.injected 0
trim.fua 0
trim.rmw_cycles 1
trim.rmw_read_bytes 32768
trim.rmw_extra_write_bytes 30720
zero.requests 3
zero.bytes 68608
zero.aligned 1
zero.partial 1
zero.misaligned 1
zero.refused 1
zero.errors 0
zero.injected 0
zero.fua 0
zero.rmw_cycles 1
zero.rmw_read_bytes 32768
zero.rmw_extra_write_bytes 30720
flush.requests 1
flush.bytes 65536
flush.errors 0
flush.injected 0
rmw.cycles 5
rmw.read_bytes 163840
rmw.extra_write_bytes 153600
connections 1
lower.read.requests 6
lower.read.bytes 196608
lower.write.requests 4
lower.write.bytes 131072
lower.write.fua 1
lower.trim.requests 1
lower.trim.bytes 32768
lower.zero.requests 1
lower.zero.bytes 65536
lower.flush.requests 1
lower.misaligned 0
lower.errors 0
cache.units 2
cache.peak_units 2
cache.inserts 7
cache.read_hits 3
cache.writeback_units 3
cache.evictions 1
cache.dropped_units 1
faults.injected 2
powercut 0
powercut.units_persisted 0
powercut.units_lost 0
latency.ns 487984
stats.dumps 3
EOF2
diff -u "$tmpdir/expected" "$STATS" || fail "stats differ from expected"
echo ok

#!/bin/bash
# A real NBD client: qemu-io (qemu's NBD block driver honours the
# advertised minimum block size and does its own RMW below it).  On a
# strict disk64k a 4K write is refused, a 64K one works; on dvd-ram a
# 512-byte write is accepted (qemu: 2K RMW, filter: 32K RMW) and reads
# back; FUA writes (write -f), flush and zeroes (write -z) are counted.
# (-t none: qemu-io defaults to writethrough, which sets FUA on every write.)
source "$(dirname "$0")/functions.sh"
requires qemu-io

STATS=$tmpdir/stats

# strict: 4K refused, 64K accepted
run_nbdkit memory 1M bigsector-profile=disk64k bigsector-stats=$STATS \
  --run '
    qemu-io -f raw -t none "$uri" -c "write -P 0x11 0 4k" && exit 1
    qemu-io -f raw -t none "$uri" -c "write -P 0x22 64k 64k" -c "read -P 0x22 64k 64k" \
      -c "write -f -P 0x33 128k 64k" -c "flush" -c "read -P 0x33 128k 64k" \
      -c "write -z 192k 64k" -c "read -P 0 192k 64k" || exit 1
  ' > "$tmpdir/out" 2>&1 || { cat "$tmpdir/out"; fail "strict qemu-io"; }
grep -q "Invalid argument" "$tmpdir/out" || fail "4K write not refused"
expect_stat "$STATS" write.refused 1 write.aligned 2 write.fua 1 \
  zero.aligned 1 lower.misaligned 0
[ "$(stat_get flush.requests "$STATS")" -ge 1 ] || fail "no flush counted"
echo "strict ok"

# rmw: sub-sector write via qemu's RMW and ours
run_nbdkit memory 1M bigsector-profile=dvd-ram bigsector-stats=$STATS \
  --run '
    qemu-io -f raw -t none "$uri" -c "write -P 0x44 0 64k" -c "write -P 0x55 100 512" \
      -c "read -P 0x44 0 100" -c "read -P 0x55 100 512" \
      -c "read -P 0x44 612 64924" || exit 1
  ' > "$tmpdir/out" 2>&1 || { cat "$tmpdir/out"; fail "rmw qemu-io"; }
cat "$tmpdir/out"
grep -q "Pattern verification failed" "$tmpdir/out" && fail "data mismatch"
expect_stat "$STATS" write.refused 0 read.refused 0 write.rmw_cycles 1 \
  write.rmw_read_bytes 32768 lower.misaligned 0
echo ok

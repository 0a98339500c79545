#!/bin/bash
# Each profile (and the default) advertises minimum = sector,
# preferred = unit, maximum = 32M through NBD block size constraints,
# as nbdinfo shows them; the export size is rounded down to whole units.
source "$(dirname "$0")/functions.sh"
requires nbdinfo

check_bs () {
  local min=$1 pref=$2 out
  shift 2
  out=$(run_nbdkit memory 32M "$@" --run 'nbdinfo "$uri"')
  echo "$out" | grep -q "block_size_minimum: $min\$" ||
    fail "$*: minimum not $min: $out"
  echo "$out" | grep -q "block_size_preferred: $pref\$" ||
    fail "$*: preferred not $pref: $out"
  echo "$out" | grep -q "block_size_maximum: 33554432\$" ||
    fail "$*: maximum not 32M: $out"
  echo "$out" | grep -q "can_flush: true" || fail "$*: no flush"
  echo "$out" | grep -q "can_fua: true" || fail "$*: no fua"
  echo "$*: min=$min preferred=$pref ok"
}

check_bs  512  65536                                  # defaults
check_bs 4096  65536 bigsector-profile=disk64k
check_bs 4096  65536 bigsector-profile=disk64k-rmw
check_bs 2048  32768 bigsector-profile=dvd-ram
check_bs 2048  32768 bigsector-profile=dvd+rw
check_bs 2048  65536 bigsector-profile=bd-re
check_bs 4096 131072 bigsector-profile=flash
check_bs  512   4096 bigsector-unit=4K
check_bs 4096 16777216 bigsector-unit=16M bigsector-sector=4096

# Size is rounded down to whole units (1M + 48K on 64K units -> 1M).
size=$(nbdkit -U - --filter="$FILTER" memory $((1024*1024 + 48*1024)) \
         bigsector-unit=64K --run 'nbdinfo --size "$uri"')
[ "$size" = 1048576 ] || fail "size not rounded down: $size"

# Smaller than one unit: the export cannot be opened.
if nbdkit -U - --filter="$FILTER" memory 32K bigsector-unit=64K \
     --run 'nbdinfo --size "$uri"' >"$tmpdir/out" 2>&1; then
  fail "export smaller than a unit was served"
fi
grep -q "smaller than one unit" "$tmpdir/out" || fail "no error message"
echo ok

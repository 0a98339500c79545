#!/bin/bash
# Profiles set sector/unit/mode; explicit bigsector-sector/-unit/-mode
# override them wherever they appear on the command line; bad
# parameters are refused at startup.
source "$(dirname "$0")/functions.sh"
requires nbdinfo

# geometry EXPECTED_SECTOR EXPECTED_UNIT EXPECTED_MODE PARAMS...
geometry () {
  local sector=$1 unit=$2 mode=$3 out
  shift 3
  rm -f "$tmpdir/st"
  out=$(run_nbdkit memory 32M bigsector-stats="$tmpdir/st" "$@" \
          --run 'nbdinfo "$uri"')
  expect_stat "$tmpdir/st" bigsector.sector "$sector" \
    bigsector.unit "$unit" bigsector.mode "$mode"
  echo "$out" | grep -q "block_size_minimum: $sector\$" || fail "$*: min"
  echo "$out" | grep -q "block_size_preferred: $unit\$" || fail "$*: pref"
  echo "$*: $sector/$unit/$mode ok"
}

geometry 4096  65536 strict bigsector-profile=disk64k
geometry 4096  65536 rmw    bigsector-profile=disk64k-rmw
geometry 2048  32768 rmw    bigsector-profile=dvd-ram
geometry 2048  32768 strict bigsector-profile=dvd+rw
geometry 2048  65536 rmw    bigsector-profile=bd-re
geometry 4096 131072 strict bigsector-profile=flash
geometry  512  65536 rmw                                  # no profile

# Overrides win before or after the profile.
geometry 2048 131072 rmw    bigsector-unit=128K bigsector-profile=dvd-ram
geometry 2048 131072 rmw    bigsector-profile=dvd-ram bigsector-unit=128K
geometry 2048  65536 strict bigsector-mode=strict bigsector-profile=bd-re
geometry 2048  65536 strict bigsector-profile=bd-re bigsector-mode=strict
geometry  512  65536 strict bigsector-sector=512 bigsector-profile=disk64k
geometry 4096  65536 rmw    bigsector-profile=dvd+rw bigsector-sector=4096 \
                            bigsector-unit=64K bigsector-mode=rmw
geometry 2048  32768 rmw    bigsector-profile=flash bigsector-profile=dvd-ram

# The override changes behaviour, not just what is advertised: dvd+rw
# is strict, but with bigsector-mode=rmw it accepts a 2K write.
requires_nbdpy
cat > "$tmpdir/t.py" <<'PY'
import errno, os
from bs import *
h = connect()
if os.environ["EXPECT"] == "refuse":
    check(fails_with(errno.EINVAL, h.pwrite, b"a" * 2048, 0), "accepted")
else:
    check(succeeds(h.pwrite, b"a" * 2048, 0), "refused")
    check(h.pread(2048, 0) == b"a" * 2048, "data")
done()
PY
EXPECT=refuse run_nbdkit memory 1M bigsector-profile=dvd+rw \
  --run "export uri; $PY $tmpdir/t.py"
EXPECT=accept run_nbdkit memory 1M bigsector-mode=rmw bigsector-profile=dvd+rw \
  --run "export uri; $PY $tmpdir/t.py"

# Bad parameters: nbdkit must refuse to start.
# (A socket of our own: nbdkit -U - leaves its socket directory behind
# in /tmp when it refuses its parameters.)
bad () {
  rm -f "$tmpdir/sock"
  if nbdkit -U "$tmpdir/sock" --filter="$FILTER" memory 1M "$@" --run true \
       >"$tmpdir/out" 2>&1; then
    fail "accepted bad parameters: $*"
  fi
  grep -q "error" "$tmpdir/out" || fail "no error message for: $*"
  echo "refused: $* ($(grep -m1 error "$tmpdir/out" | sed 's/.*error: //'))"
}
bad bigsector-unit=3000
bad bigsector-unit=256
bad bigsector-unit=32M
bad bigsector-sector=1024
bad bigsector-sector=4096 bigsector-unit=2K
bad bigsector-profile=floppy
bad bigsector-mode=lazy
bad bigsector-bogus=1
bad bigsector-error-rate=1.5
bad bigsector-error-read=5M-1M
bad bigsector-error-write=1M
bad bigsector-latency-rmw=8parsecs
bad bigsector-latency-byte=1ns bigsector-bandwidth=100M
bad bigsector-volatile=maybe
bad bigsector-powercut-after-writes=-3
echo ok

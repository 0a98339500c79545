# Common code for the nbdkit-bigsector-filter tests.  Source it.
#
# Each test exits 0 on success, 1 on failure, 77 to skip (a tool it
# needs is missing).  Everything runs under "nbdkit -U - ... --run" so
# that nbdkit's lifetime is bounded by the client command.

set -e
set -u

srcdir=$(cd "$(dirname "$0")" && pwd)
FILTER=${FILTER:-$(cd "$srcdir/.." && pwd)/nbdkit-bigsector-filter.so}
TEST=$(basename "$0" .sh)

skip () { echo "$TEST: SKIP: $*"; exit 77; }
fail () { echo "$TEST: FAIL: $*"; exit 1; }

requires () {
  command -v "$1" >/dev/null 2>&1 || skip "$1 not found"
}

requires nbdkit
test -f "$FILTER" || skip "$FILTER not built"
nbdkit --filter="$FILTER" null --dump-plugin >/dev/null 2>&1 ||
  skip "installed nbdkit cannot load $FILTER"

# Python with the libnbd bindings (python3-libnbd).  Debian installs
# them for /usr/bin/python3, which may not be the python3 on PATH.
requires_nbdpy () {
  local p
  for p in /usr/bin/python3 python3; do
    if "$p" -c 'import nbd' >/dev/null 2>&1; then
      PY=$p
      export PYTHONPATH="$srcdir${PYTHONPATH:+:$PYTHONPATH}"
      return 0
    fi
  done
  skip "python3 libnbd bindings (python3-libnbd) not found"
}

tmpdir=$(mktemp -d "/tmp/$TEST.XXXXXX")
cleanup_fns=""
on_exit () {
  local f
  for f in $cleanup_fns; do $f || :; done
  rm -rf "$tmpdir"
}
trap on_exit EXIT

# nbdkit with the filter, output to the test log.  Usage:
#   run_nbdkit [nbdkit args...] PLUGIN [args...] --run 'CMD'
run_nbdkit () {
  nbdkit -U - --filter="$FILTER" "$@"
}

# stat_get KEY FILE: value of KEY in a stats file.
stat_get () {
  awk -v k="$1" '$1 == k { print $2; found=1 } END { if (!found) exit 1 }' "$2"
}

# expect_stat FILE KEY VALUE ...: check several keys at once.
expect_stat () {
  local file=$1 k v got bad=0
  shift
  while [ $# -ge 2 ]; do
    k=$1 v=$2
    shift 2
    got=$(stat_get "$k" "$file") || got="(missing)"
    if [ "$got" != "$v" ]; then
      echo "$TEST: $file: $k = $got, expected $v"
      bad=1
    fi
  done
  [ $bad = 0 ] || fail "unexpected counters"
}

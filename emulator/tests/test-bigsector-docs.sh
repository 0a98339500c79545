#!/bin/bash
# The man page documents everything: every key of a real stats file,
# every bigsector-* parameter the filter accepts, every profile; the
# POD is well formed; docs/nbdkit-bigsector-filter.md is up to date.
source "$(dirname "$0")/functions.sh"

pod=$srcdir/../nbdkit-bigsector-filter.pod
md=$srcdir/../../docs/nbdkit-bigsector-filter.md
test -f "$pod" || fail "$pod missing"

if command -v podchecker >/dev/null 2>&1; then
  podchecker "$pod" || fail "podchecker found errors"
fi

# Every stats key.
run_nbdkit memory 1M bigsector-stats="$tmpdir/stats" bigsector-volatile=on \
  --run true
missing=0
while read -r key _; do
  grep -qF "=item B<$key>" "$pod" || { echo "undocumented stat: $key"; missing=1; }
done < "$tmpdir/stats"
echo "$(wc -l < "$tmpdir/stats") stats keys checked"

# Every parameter the code accepts (IS ("name") in config.c).
for k in $(grep -o 'IS ("[a-z-]*")' "$srcdir/../config.c" | sed 's/IS ("\(.*\)")/\1/'); do
  grep -qE "=item B<bigsector-$k=>" "$pod" ||
    { echo "undocumented parameter: bigsector-$k"; missing=1; }
  # and the filter really accepts it (an invalid value is an error
  # about the value, not an unknown key)
  # (in $tmpdir: for path parameters such as bigsector-stats the value
  # is a file name, and a stats file would be created)
  if (cd "$tmpdir" &&
      nbdkit --filter="$FILTER" null "bigsector-$k=@@" --run true 2>&1) |
       grep -q "unknown parameter"; then
    echo "parameter not accepted: bigsector-$k"; missing=1
  fi
done

# Every profile, in the PROFILES table.
for p in $(sed -n 's/^  { "\([a-z0-9+-]*\)",.*/\1/p' "$srcdir/../config.c"); do
  re=$(printf '%s' "$p" | sed 's/[+]/\\+/g')
  grep -qE "^ $re +[0-9]+ +[0-9]+K +(strict|rmw) " "$pod" ||
    { echo "profile not in table: $p"; missing=1; }
done
[ $missing = 0 ] || fail "documentation incomplete"

# Rendered markdown matches the POD.
if command -v pod2markdown >/dev/null 2>&1; then
  test -f "$md" || fail "$md missing: run make -C emulator man"
  pod2markdown "$pod" > "$tmpdir/md"
  diff -u "$md" "$tmpdir/md" >/dev/null ||
    fail "$md is stale: run make -C emulator man"
else
  echo "pod2markdown not installed: rendered page not checked"
fi
echo ok

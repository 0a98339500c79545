#!/bin/bash
# Run the bigsector tests given as arguments, TAP-ish:
#   ok N - name / not ok N - name / ok N - name # SKIP
# then one summary line "N passed, N failed[, N skipped]".
# Each test's output goes to tests/NAME.log (shown on failure).

n=0 pass=0 failed=0 skipped=0
for t in "$@"; do
  n=$((n + 1))
  name=$(basename "$t" .sh)
  log=${t%.sh}.log
  start=$(date +%s)
  bash "$t" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  case $rc in
    0)  pass=$((pass + 1)); echo "ok $n - $name (${secs}s)" ;;
    77) skipped=$((skipped + 1))
        echo "ok $n - $name # SKIP $(grep -m1 SKIP "$log" | sed 's/.*SKIP: //')" ;;
    *)  failed=$((failed + 1)); echo "not ok $n - $name (exit $rc)"
        sed 's/^/#   /' "$log" | tail -40 ;;
  esac
done
summary="$pass passed, $failed failed"
[ $skipped -gt 0 ] && summary="$summary, $skipped skipped"
echo "$summary"
[ $failed -eq 0 ]

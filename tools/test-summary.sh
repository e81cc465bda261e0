#!/usr/bin/env bash
# Prints the suite's result over every build directory given, from meson's
# test logs, and exits non-zero when anything failed.  The last line is
# "N passed, N failed" (and skipped) for CI.
set -u
pass=0 fail=0 skip=0
for b in "$@"; do
  log="$b/meson-logs/testlog.json"
  [ -f "$log" ] || { echo "test-summary: no test log in $b"; fail=$((fail + 1)); continue; }
  p=$(grep -c '"result": "OK"' "$log")
  f=$(grep -Ec '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)"' "$log")
  s=$(grep -c '"result": "SKIP"' "$log")
  echo "$b: $p passed, $f failed, $s skipped"
  grep -E '"result": "(FAIL|TIMEOUT|ERROR)"' "$log" | sed -E 's/.*"name": "([^"]*)".*/  failed: \1/'
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
done
if [ -f build-fuzz/fuzz-result ]; then
  cat build-fuzz/fuzz-result
  grep -q '^fuzz: ok' build-fuzz/fuzz-result || fail=$((fail + 1))
fi
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]

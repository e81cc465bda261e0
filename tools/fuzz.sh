#!/usr/bin/env bash
# tools/fuzz.sh BUILD_DIR [SECONDS]: runs the libFuzzer schedule target
# (BUILD_DIR/tests/fuzz/fuzz_sched, built by `make fuzz`) on a copy of the
# seed corpus for about SECONDS (default 60), and writes one line to
# BUILD_DIR/fuzz-result, read by tools/test-summary.sh:
#   fuzz: ok (N runs)        nothing found
#   fuzz: FAILED ...         a crash, leak, sanitizer report or timeout
# Exits non-zero on failure.  Crash inputs are left in BUILD_DIR/fuzz-artifacts/.
set -u
B=${1:?usage: tools/fuzz.sh BUILD_DIR [SECONDS]}
SECS=${2:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$B/tests/fuzz/fuzz_sched"
RESULT="$B/fuzz-result"
if [ ! -x "$BIN" ]; then
  echo "fuzz: FAILED (no $BIN; build it with: ninja -C $B tests/fuzz/fuzz_sched)" | tee "$RESULT"
  exit 1
fi
WORK="$B/fuzz-corpus"
ART="$B/fuzz-artifacts"
mkdir -p "$WORK" "$ART"
cp -n "$ROOT"/tests/fuzz/corpus/* "$WORK"/ 2>/dev/null || true
LOG="$B/fuzz.log"
# One worker: the CI machine has two cores shared with other jobs.
ASAN_OPTIONS=detect_leaks=1:${ASAN_OPTIONS:-} \
"$BIN" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -artifact_prefix="$ART/" -print_final_stats=1 "$WORK" >"$LOG" 2>&1
rc=$?
runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$LOG" | grep -Eo '[0-9]+$' | tail -1)
if [ "$rc" -eq 0 ]; then
  echo "fuzz: ok (${runs:-0} runs)" | tee "$RESULT"
  exit 0
fi
what=$(grep -Eo 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer)[^(]*' "$LOG" | head -1)
[ -n "$what" ] || what=$(grep -E 'runtime error|SUMMARY' "$LOG" | head -1)
echo "fuzz: FAILED (exit $rc: ${what:-see $LOG}; inputs in $ART)" | tee "$RESULT"
exit 1

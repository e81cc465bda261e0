#!/bin/bash
# tests/outer/test_islands_ckpt.sh: `zbsched run --replicas K --checkpoint
# DIR` (runtime/outer/islands_ckpt.c).  For DiLoCo, EDiT and the sync
# baseline, a run stopped with --stop-at (before and after an outer step)
# and resumed gives the uninterrupted run's losses, final validation loss,
# outer steps and bytes sent, bit for bit.  A resume with other replicas or
# another outer optimizer is refused with one line and leaves the
# checkpoint as it was; --leave and a-edit, which cannot resume bit for
# bit, are refused with --checkpoint; a run that diverges keeps no
# checkpoint from inside its skip streak (none here: it diverges at once).
set -u
ZB=${ZBSCHED:?ZBSCHED is the built program}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }

# a narrow 4-layer model: a step takes milliseconds
cat > "$T/model.json" <<'JSON'
{"name":"isl-test","n_layers":4,"d_model":32,"n_heads":4,"n_kv_heads":2,"d_ff":64,"vocab":65,
 "seq_len":32,"micro_batch":2,"swiglu":true,"rope_theta":10000,"dtype":"fp32"}
JSON
"$ZB" gen 1f1b -p 2 -m 4 -o "$T/s.json" || { echo "FAIL: gen"; exit 1; }
RUN=("$ZB" run "$T/s.json" --model "$T/model.json" --steps 10 --replicas 2 --inner-steps 3
     --eval-every 5 --json -q)

# same FULL A B: B's run continues A's into FULL's, bit for bit
same() {
    python3 - "$@" <<'PY'
import json, sys
f, a, b = (json.load(open(p)) for p in sys.argv[1:4])
import os
keys = ("val_loss", "outer_steps") if os.environ.get("SAME_NO_BYTES") else ("val_loss", "outer_steps", "bytes_sent")
for k in keys:
    if f[k] != b[k]:
        print("%s %r, resumed %r" % (k, f[k], b[k]))
if f["losses"] != a["losses"] + b["losses"]:
    print("losses %r, stopped and resumed %r" % (f["losses"], a["losses"] + b["losses"]))
PY
}

for outer in diloco edit sync; do
    "${RUN[@]}" --outer "$outer" > "$T/full.json" 2> "$T/err" || fail "$outer: $(cat "$T/err")"
    stops="4" # one step after an outer step (H=3); DiLoCo at the outer step too
    [ $outer = diloco ] && stops="3 4"
    for stop in $stops; do
        rm -rf "$T/ck"
        "${RUN[@]}" --outer "$outer" --checkpoint "$T/ck" --stop-at $stop > "$T/a.json" \
            2> "$T/err" || fail "$outer --stop-at $stop: $(cat "$T/err")"
        "${RUN[@]}" --outer "$outer" --checkpoint "$T/ck" --resume > "$T/b.json" 2> "$T/err" \
            || fail "$outer resume from $stop: $(cat "$T/err")"
        out=$(same "$T/full.json" "$T/a.json" "$T/b.json")
        [ -z "$out" ] && pass "$outer: stopped at $stop and resumed, bit for bit" \
            || fail "$outer: stopped at $stop: $out"
    done
done

# ZeRO-1 (sync, sharded AdamW state): the checkpoint holds the whole state,
# so a sharded run resumes into the sharded and the unsharded run alike
"${RUN[@]}" --outer sync > "$T/full.json" 2> "$T/err" || fail "sync: $(cat "$T/err")"
for resume in "--zero1" ""; do
    rm -rf "$T/ck"
    "${RUN[@]}" --outer sync --zero1 --checkpoint "$T/ck" --stop-at 4 > "$T/a.json" 2> "$T/err" \
        || fail "zero1 --stop-at 4: $(cat "$T/err")"
    # shellcheck disable=SC2086
    "${RUN[@]}" --outer sync $resume --checkpoint "$T/ck" --resume > "$T/b.json" 2> "$T/err" \
        || fail "zero1 resumed ${resume:-unsharded}: $(cat "$T/err")"
    # bytes: ZeRO-1's chain of norms is not an outer figure the checkpoint keeps
    out=$(SAME_NO_BYTES=1 same "$T/full.json" "$T/a.json" "$T/b.json")
    [ -z "$out" ] && pass "zero1: stopped at 4, resumed ${resume:-unsharded}, bit for bit" \
        || fail "zero1 resumed ${resume:-unsharded}: $out"
done
rm -rf "$T/ck"
"${RUN[@]}" --outer sync --checkpoint "$T/ck" --stop-at 4 > /dev/null 2>&1

# the checkpoint's files: a manifest and one tag's parts, nothing else
parts=$(cd "$T/ck" && ls | grep -v '^lock$' | sed 's/islands\.[0-9a-f]*\./islands.TAG./' | tr '\n' ' ')
[ "$parts" = "islands.TAG.outer.bin islands.TAG.replica-0.bin islands.TAG.replica-1.bin islands.json " ] \
    && pass "the directory holds one tag's parts and the manifest" || fail "files: $parts"

# refusals leave the checkpoint as it was
rm -rf "$T/ck"
"${RUN[@]}" --checkpoint "$T/ck" --stop-at 4 > /dev/null 2>&1
cp -r "$T/ck" "$T/ck.before"
for bad in "--replicas 3" "--outer edit" "--inner-steps 4" "--seed 2 --outer-lr 0.5"; do
    # shellcheck disable=SC2086
    "${RUN[@]}" $bad --checkpoint "$T/ck" --resume > /dev/null 2> "$T/err"
    rc=$?
    [ $rc = 1 ] && [ "$(wc -l < "$T/err")" = 1 ] && diff -r -x lock "$T/ck" "$T/ck.before" > /dev/null \
        && pass "resume with $bad: refused ($(cat "$T/err"))" \
        || fail "resume with $bad: rc $rc, $(cat "$T/err")"
done
rm -rf "$T/empty"
"${RUN[@]}" --checkpoint "$T/empty" --resume > /dev/null 2> "$T/err"
[ $? = 1 ] && grep -q "no islands checkpoint" "$T/err" && pass "resume from nothing: one line" \
    || fail "resume from nothing: $(cat "$T/err")"

for bad in "--leave 1:3" "--outer a-edit"; do
    # shellcheck disable=SC2086
    "${RUN[@]}" $bad --checkpoint "$T/ck2" > /dev/null 2> "$T/err"
    [ $? = 2 ] && [ "$(wc -l < "$T/err")" = 1 ] && [ ! -e "$T/ck2" ] \
        && pass "$bad with --checkpoint: a usage line" || fail "$bad: $(cat "$T/err")"
done

# divergence: exit 1 with one line, no checkpoint from the skip streak
rm -rf "$T/ck3"
"$ZB" run "$T/s.json" --model "$T/model.json" --steps 12 --replicas 2 --lr 1e6 \
    --checkpoint "$T/ck3" -q > /dev/null 2> "$T/err"
rc=$?
[ $rc = 1 ] && [ "$(wc -l < "$T/err")" = 1 ] && grep -q "no checkpoint was written" "$T/err" \
    && [ ! -e "$T/ck3/islands.json" ] && pass "diverged islands: one line, no checkpoint" \
    || fail "diverged islands: rc $rc, $(cat "$T/err"), $(ls "$T/ck3")"

[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
[ $fails = 0 ]

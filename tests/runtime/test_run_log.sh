#!/bin/bash
# tests/runtime/test_run_log.sh: `zbsched run --log FILE` (runtime/job_log.h)
# as a user reads it: every line parses as JSON, one line per step and per
# evaluation, the fields named in the docs, the losses the same bits as the
# run's own --json summary; for one process, islands, and (when this build
# has MPI and mpirun is here) pipeline ranks and islands under mpirun, where
# rank 0 writes.  Then the output rules: the log may not be an input, a
# directory is refused, `--log -` cannot share stdout with --json, and a
# resumed run appends.  A run that diverges logs the step that diverged.
# The summary line says what its rollbacks count.
set -u
ZB=${ZBSCHED:?ZBSCHED is the built program}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

# a narrow 4-layer model: a step takes milliseconds
cat > "$T/model.json" <<'JSON'
{"name":"log-test","n_layers":4,"d_model":32,"n_heads":4,"n_kv_heads":2,"d_ff":64,"vocab":65,
 "seq_len":32,"micro_batch":2,"swiglu":true,"rope_theta":10000,"dtype":"fp32"}
JSON
"$ZB" gen 1f1b -p 2 -m 4 -o "$T/s.json" || { echo "FAIL: gen"; exit 1; }

# check LOG SUMMARY STEPS EVALS [islands|pipeline]: the log's lines against
# the --json summary; prints what is wrong, nothing when all is right.
check() {
    python3 - "$@" <<'PY'
import json, sys
log, summary, steps, evals, kind = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
lines = open(log).read().split("\n")
if lines[-1] != "":
    print("the last line has no newline"); sys.exit(0)
rows = []
for i, l in enumerate(lines[:-1]):
    try:
        rows.append(json.loads(l))
    except ValueError as e:
        print("line %d is not JSON: %s: %r" % (i + 1, e, l)); sys.exit(0)
step_rows = [r for r in rows if "loss" in r]
eval_rows = [r for r in rows if "eval_loss" in r]
if len(step_rows) != steps or len(eval_rows) != evals or len(rows) != steps + evals:
    print("%d step lines, %d evaluation lines, %d in all; expected %d and %d"
          % (len(step_rows), len(eval_rows), len(rows), steps, evals)); sys.exit(0)
want = {"step", "loss", "lr", "grad_norm", "tokens_per_s", "tokens", "seconds", "skipped",
        "rollbacks", "memory"}
if kind in ("islands", "mpi_islands"):
    want.add("replicas")
if kind == "islands": # --inner-steps 2: outer steps after steps 2 and 4
    outer = [(r["step"], r["outer_step"]) for r in step_rows if "outer_step" in r]
    if outer != [(2, 1), (4, 2)]:
        print("outer steps %r, expected after steps 2 and 4" % outer); sys.exit(0)
for r in step_rows:
    if set(r) - {"outer_step"} != want:
        print("step line keys %s, expected %s" % (sorted(r), sorted(want))); sys.exit(0)
    if not isinstance(r["skipped"], bool) or r["tokens_per_s"] <= 0 or r["lr"] <= 0:
        print("implausible step line %r" % r); sys.exit(0)
    if kind != "mpi_islands": # the islands over MPI keep no counters for the log
        if not isinstance(r["rollbacks"], int) or r["rollbacks"] < 0:
            print("rollbacks %r" % r["rollbacks"]); sys.exit(0)
        if not r["memory"] or r["memory"]["static_bytes"] <= 0:
            print("memory missing: %r" % r); sys.exit(0)
    if kind in ("one", "pipeline") and not r["grad_norm"] > 0:
        print("grad_norm missing: %r" % r); sys.exit(0)
if [r["step"] for r in step_rows] != list(range(1, steps + 1)):
    print("steps %r" % [r["step"] for r in step_rows]); sys.exit(0)
s = json.load(open(summary))
if [r["loss"] for r in step_rows] != s["losses"]:
    print("losses differ from the summary: %r vs %r" % ([r["loss"] for r in step_rows], s["losses"]))
    sys.exit(0)
if eval_rows[-1]["eval_loss"] != s["val_loss"]:
    print("last eval_loss %r, summary val_loss %r" % (eval_rows[-1]["eval_loss"], s["val_loss"]))
if kind in ("islands", "mpi_islands") and not eval_rows[-1].get("synchronized"):
    print("the islands' final evaluation is not marked synchronized")
PY
}

# one process: 6 steps, evaluations at 3 and 6
"$ZB" run "$T/s.json" --model "$T/model.json" --steps 6 --eval-every 3 --log "$T/one.jsonl" \
    --json -q > "$T/one.json" 2> "$T/err" || fail "one process: $(cat "$T/err")"
out=$(check "$T/one.jsonl" "$T/one.json" 6 2 one)
[ -z "$out" ] && pass "one process: 6 step lines, 2 evaluations, losses as the summary" \
    || fail "one process: $out"

# islands in one process: 2 replicas, 4 steps, the synchronized evaluation
"$ZB" run "$T/s.json" --model "$T/model.json" --steps 4 --replicas 2 --inner-steps 2 \
    --log "$T/isl.jsonl" --json -q > "$T/isl.json" 2> "$T/err" || fail "islands: $(cat "$T/err")"
out=$(check "$T/isl.jsonl" "$T/isl.json" 4 1 islands)
[ -z "$out" ] && pass "islands: 4 step lines with replicas, the synchronized evaluation" \
    || fail "islands: $out"

# the progress lines tell the final evaluation of the synchronized replicas
# from the listed one at the same step
"$ZB" run "$T/s.json" --model "$T/model.json" --steps 4 --replicas 2 --inner-steps 3 \
    --eval-every 2 > /dev/null 2> "$T/err"
grep -q '^step 3/4: .* (2 replicas, then an outer step)$' "$T/err" \
    && grep -q '^step 2/4: .* (2 replicas)$' "$T/err" \
    && grep -q '^step 4: val loss [0-9.]*$' "$T/err" \
    && grep -q '^step 4: val loss [0-9.]* (the replicas synchronized)$' "$T/err" \
    && pass "islands: the outer step's line and the synchronized evaluation's say so" \
    || fail "islands progress: $(cat "$T/err")"

# under mpirun: rank 0 writes, the same lines as one process
if command -v mpirun > /dev/null; then
    MPIRUN=(env "LSAN_OPTIONS=${LSAN_OPTIONS:-}:detect_leaks=0" timeout 120 mpirun
            --oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo)
    if "${MPIRUN[@]}" -np 2 "$ZB" run "$T/s.json" --model "$T/model.json" --steps 6 \
           --eval-every 3 --log "$T/mpi.jsonl" --json -q > "$T/mpi.json" 2> "$T/err"; then
        out=$(check "$T/mpi.jsonl" "$T/mpi.json" 6 2 pipeline)
        [ -z "$out" ] && pass "mpirun -np 2: rank 0's log, 6 step lines, 2 evaluations" \
            || fail "mpirun -np 2: $out"
        cmp -s <(grep -o '"loss":[^,]*' "$T/one.jsonl") <(grep -o '"loss":[^,]*' "$T/mpi.jsonl") \
            && pass "mpirun -np 2: the losses of one process" \
            || fail "mpirun -np 2: the losses differ from one process's"
        "${MPIRUN[@]}" -np 2 "$ZB" run "$T/s.json" --model "$T/model.json" --steps 4 \
            --replicas 2 --inner-steps 2 --log "$T/mpi_isl.jsonl" --json -q \
            > "$T/mpi_isl.json" 2> "$T/err" || fail "mpirun islands: $(cat "$T/err")"
        out=$(check "$T/mpi_isl.jsonl" "$T/mpi_isl.json" 4 1 mpi_islands)
        [ -z "$out" ] && pass "mpirun islands: 4 step lines, the synchronized evaluation" \
            || fail "mpirun islands: $out"
    elif grep -q "built without MPI" "$T/err"; then
        echo "skip: this zbsched has no MPI"
    else
        fail "mpirun -np 2: $(cat "$T/err")"
    fi
fi

# the output rules: an input, a directory, stdout twice
cp "$T/s.json" "$T/keep.json"
"$ZB" run "$T/s.json" --model "$T/model.json" --steps 2 --log "$T/s.json" -q 2> "$T/err" \
    && fail "--log naming the plan file ran"
[ "$(wc -l < "$T/err")" = 1 ] && cmp -s "$T/s.json" "$T/keep.json" \
    && pass "--log naming the plan: one line ($(cat "$T/err")), the plan untouched" \
    || fail "--log naming the plan: $(cat "$T/err")"
"$ZB" run "$T/s.json" --model "$T/model.json" --steps 2 --log "$T" -q 2> "$T/err" \
    && fail "--log naming a directory ran"
[ "$(wc -l < "$T/err")" = 1 ] && pass "--log naming a directory: one line" \
    || fail "--log naming a directory: $(cat "$T/err")"
mkdir -p "$T/ckl"
"$ZB" run "$T/s.json" --model "$T/model.json" --steps 2 --replicas 2 --checkpoint "$T/ckl" \
    --log "$T/ckl/islands.json" -q 2> "$T/err" && fail "--log naming a checkpoint file ran"
[ "$(wc -l < "$T/err")" = 1 ] && [ -z "$(ls "$T/ckl")" ] \
    && pass "--log naming a checkpoint directory's file: one line, nothing created" \
    || fail "--log in the checkpoint directory: $(cat "$T/err"), $(ls "$T/ckl")"
"$ZB" run "$T/s.json" --model "$T/model.json" --steps 2 --log - --json 2> "$T/err"
[ $? = 2 ] && [ "$(wc -l < "$T/err")" = 1 ] && pass "--log - with --json: a usage error" \
    || fail "--log - with --json: $(cat "$T/err")"

# --log - writes the lines to stdout
"$ZB" run "$T/s.json" --model "$T/model.json" --steps 3 --log - -q > "$T/stdout" 2> /dev/null
[ "$(grep -c '^{"step":' "$T/stdout")" = 4 ] && pass "--log -: the lines on stdout" \
    || fail "--log -: $(cat "$T/stdout")"
# the summary line after them says what its rollbacks are
tail -n 1 "$T/stdout" | grep -Eq "[0-9]+ of 3 steps rolled back \(post-validation found the gradient norm clipped or not finite and redid the optimistic step, as designed; [0-9]+ stage steps redone\)$" \
    && pass "the summary says what a rollback is" || fail "summary: $(tail -n 1 "$T/stdout")"

# a resumed run appends: 2 steps, stop, resume to 4
"$ZB" run "$T/s.json" --model "$T/model.json" --steps 4 --stop-at 2 --checkpoint "$T/ck" \
    --log "$T/res.jsonl" -q > /dev/null 2> "$T/err" || fail "stop-at: $(cat "$T/err")"
"$ZB" run "$T/s.json" --model "$T/model.json" --steps 4 --checkpoint "$T/ck" --resume \
    --log "$T/res.jsonl" -q > /dev/null 2> "$T/err" || fail "resume: $(cat "$T/err")"
steps=$(grep -o '^{"step":[0-9]*,"loss"' "$T/res.jsonl" | grep -o '[0-9]*' | tr '\n' ' ')
[ "$steps" = "1 2 3 4 " ] && pass "--resume appends: steps $steps" \
    || fail "--resume appends: steps '$steps'"

# a diverging run: the step that diverged is in the log, then exit 1
"$ZB" run "$T/s.json" --model "$T/model.json" --steps 12 --lr 1e6 --log "$T/div.jsonl" -q \
    2> "$T/err"
rc=$?
last=$(tail -n 1 "$T/div.jsonl")
[ $rc = 1 ] && grep -q "diverged" "$T/err" && grep -q "\"step\":$(grep -o 'step [0-9]*' "$T/err" \
    | head -n 1 | grep -o '[0-9]*')," <<< "$last" \
    && pass "diverged: the log ends with the step that diverged ($last)" \
    || fail "diverged: rc $rc, $(cat "$T/err"), last line $last"

[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
[ $fails = 0 ]

#!/bin/bash
# bench/job_divergence.sh: how far above its first step's loss a healthy
# run's training loss goes, so that divergence rule 4 of runtime/job.h
# (the loss averaged over 5 steps above --max-loss-factor times the first
# step's, default 2) is known not to fire on it.  For each model and
# learning rate: the run's steps with the rule off, then the largest
# 5-step running mean divided by the first loss (the rule fires above 2).
#
#   bench/job_divergence.sh [ZBSCHED] [STEPS_TINY] [STEPS_SC] [BATCH_SC]
#
# shakespeare-char runs with --batch-size BATCH_SC (default 4, the
# preset's 64 takes about a minute a step on a shared 2-core machine).
set -eu
ZB=${1:-build/zbsched}
STEPS_TINY=${2:-200}
STEPS_SC=${3:-40}
BATCH_SC=${4:-4}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$ZB" gen 1f1b -p 2 -m 4 -o "$T/s.json" >/dev/null
ratio() { # json
    python3 - "$1" <<'PY'
import json, sys
l = json.load(open(sys.argv[1]))["losses"]
worst = max(sum(l[max(0, i - 4):i + 1]) / len(l[max(0, i - 4):i + 1]) for i in range(len(l)))
print(f"first {l[0]:.4f}  largest 5-step mean {worst:.4f}  ratio {worst / l[0]:.3f}  final {l[-1]:.4f}")
PY
}
for model in tiny shakespeare-char; do
    steps=$STEPS_TINY
    batch=()
    [ "$model" = shakespeare-char ] && steps=$STEPS_SC && batch=(--batch-size "$BATCH_SC")
    for lr in 1e-3 1e-2; do
        "$ZB" run "$T/s.json" --model "$model" "${batch[@]}" --steps "$steps" --lr "$lr" \
            --max-loss-factor 0 --eval-windows 4 --json -q > "$T/r.json"
        echo "$model ${batch[*]} --lr $lr, $steps steps: $(ratio "$T/r.json")"
    done
done

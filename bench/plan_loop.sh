#!/bin/sh
# plan_loop.sh: the loop profile -> plan -> run -> compare on this machine
# (bench/README.md, "plan loop"): how far a plan made from measured costs is
# from what training it then measures.
#
#   1. `zbsched profile` measures MODEL's ops here at micro-batch B;
#   2. `zbsched search --profile` plans for P CPU devices with micro-batches
#      of at most B (so the profile is used at its own size, not scaled);
#   3. `zbsched run` trains the plan (its model, micro-batch and layer split)
#      for STEPS steps with --trace;
#   4. `zbsched render --compare` prints predicted against measured for the
#      last step; a second line gives the run's mean step (train_seconds /
#      steps from `run --json`) against the same prediction.
# Repeated REPS times; each repetition profiles and plans afresh.
#
# The header prints the load average and this shell's scheduler autogroup.
# With autogroups on (Debian's default), every login session or job is one
# group and the CPU is shared between groups first: `nice` orders
# processes only within a group, so on a machine where other sessions
# compile and test, the two device threads get a fraction of the cores and
# wait milliseconds for every message.  To measure the loop rather than
# the neighbours, run it in a group of its own at raised weight (root):
#   setsid -w sh -c 'echo -20 > /proc/self/autogroup; exec bench/plan_loop.sh ...'
#
# usage: bench/plan_loop.sh [BUILD] [MODEL] [B] [P] [GLOBAL_BATCH] [STEPS] [REPS]
# Run from the repository root.
set -eu
build=${1:-build}
model=${2:-bench/runtime/wide.json}
b=${3:-4}
p=${4:-2}
gb=${5:-32}
steps=${6:-10}
reps=${7:-3}
zb="$build/zbsched"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
group=$(cat /proc/self/autogroup 2>/dev/null || echo "no autogroup")
echo "plan loop: model $model, micro-batch <= $b, $p devices, global batch $gb, $steps steps; load: $(cut -d' ' -f1-3 /proc/loadavg); $group"
i=0
while [ $i -lt "$reps" ]; do
  i=$((i + 1))
  "$zb" profile --model "$model" --batch-size "$b" --reps 20 -o "$out/prof.json" -q
  "$zb" search --model "$model" --profile "$out/prof.json" --gpu tools/cpu-device.json \
      --gpus "$p" --stages "$p" --global-batch "$gb" \
      --max-micro-batch "$b" --mem 8G -o "$out/plan.json" -q > "$out/search.txt"
  best=$(grep '^best:' "$out/search.txt")
  "$zb" run "$out/plan.json" --steps "$steps" --eval-windows 1 --trace "$out/trace.json" -q --json > "$out/run.json"
  cmp=$("$zb" render "$out/trace.json" --compare "$out/plan.json" -o "$out/c.svg")
  # the steadier figure beside the last step's: the mean step of the whole
  # run (train_seconds / steps, the first step and optimizer steps included)
  mean=$(sed -n 's/.*"train_seconds":\([0-9.e+-]*\).*/\1/p' "$out/run.json")
  pred=$(printf '%s\n' "$cmp" | sed -n 's/^iteration: predicted \([0-9.]*\) ms.*/\1/p')
  printf '%d: %s\n   %s\n' "$i" "$best" "$cmp"
  if [ -n "$mean" ] && [ -n "$pred" ]; then
    awk -v t="$mean" -v n="$steps" -v p="$pred" \
      'BEGIN { printf "   mean step over the run: %.1f ms, %.2f x predicted\n", 1e3 * t / n, 1e3 * t / n / p }'
  fi
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/bin/sh
# run_runtime_bench.sh: the runtime's two benchmarks (bench/README.md, "runtime").
#
#   1. ZB-H2 over 1F1B on two devices (threads): measured iteration-time ratio
#      against the simulator's prediction from profiled costs (bench_runtime).
#   2. shakespeare-char trained for a fixed number of steps through
#      `zbsched run`: loss curve, validation loss and tokens/s.
#
# usage: bench/run_runtime_bench.sh [BUILD_DIR] [SHAKESPEARE_STEPS] [OUT_DIR]
# Run from the repository root (the data lives at ../shared/data/).
set -eu
build=${1:-build}
steps=${2:-100}
out=${3:-/tmp/zb-runtime-bench}
mkdir -p "$out"
zb="$build/zbsched"
data=../shared/data/tinyshakespeare.txt

# bench/runtime/wide.json: 4 layers of width 256, context 64.  Its W is about
# half of F, as in the zero-bubble paper's profiles; the `tiny` preset's W is
# so small that ZB-H2 can gain almost nothing over 1F1B.
echo "== 1. ZB-H2 vs 1F1B, p=2 (bench/runtime/wide.json, m=8, 20 steps each) =="
"$build/bench/bench_runtime" --model bench/runtime/wide.json --m 8 --steps 20 --data "$data"

echo
echo "== 2. shakespeare-char, 1F1B p=2 m=4, batch 4 x 256, $steps steps =="
"$zb" gen 1f1b -p 2 -m 4 -o "$out/sc-1f1b.json"
"$zb" run "$out/sc-1f1b.json" --model shakespeare-char --batch-size 4 --steps "$steps" \
    --eval-every 20 --eval-windows 64 --data "$data" --json --quiet \
    --trace "$out/sc-trace.json" > "$out/sc-run.json"
python3 - "$out/sc-run.json" <<'PY' 2>/dev/null || cat "$out/sc-run.json"
import json, sys
r = json.load(open(sys.argv[1]))
l = r["losses"]
print("steps %d, tokens/s %.0f, train seconds %.1f" % (r["steps"], r["tokens_per_s"], r["train_seconds"]))
print("train loss: first %.4f, last %.4f" % (l[0], l[-1]))
print("loss every 10 steps:", " ".join("%.3f" % l[i] for i in range(0, len(l), 10)))
print("val loss:", ", ".join("step %d: %.4f" % (e["step"], e["val_loss"]) for e in r["evals"]))
PY
"$zb" simulate "$out/sc-trace.json" | tail -3

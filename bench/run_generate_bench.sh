#!/bin/sh
# run_generate_bench.sh: the memory-layer and generation benchmarks
# (bench/README.md, "memory layers and generation").
#
#   1. `zbsched generate` tokens/s with and without the KV cache, 100 new
#      characters (greedy) after a 20-character prompt, on a shakespeare-char
#      checkpoint (6 x 384, context 256) written by `zbsched run
#      --checkpoint` after a few steps (speed does not depend on how well
#      the weights are trained).  Median of REPS runs each.
#   2. Step time of tiny against tiny-mem (a product-key memory layer in
#      place of layer 2's FFN), ZB-H2 p=2 m=4, batch 4 x 64, STEPS steps each,
#      three alternating rounds (the best round counts: the machine is shared).
#   3. Layer 2 alone, plain and as a memory layer: F, B, W (bench_memory).
#
# usage: bench/run_generate_bench.sh [BUILD_DIR] [REPS] [STEPS] [OUT_DIR]
# Run from the repository root (the data lives at ../shared/data/).
set -eu
build=${1:-build}
reps=${2:-5}
steps=${3:-30}
out=${4:-/tmp/zb-generate-bench}
mkdir -p "$out"
zb="$build/zbsched"
data=../shared/data/tinyshakespeare.txt

echo "== 1. generation, shakespeare-char checkpoint, 100 tokens, greedy =="
"$zb" gen 1f1b -p 1 -m 1 -o "$out/p1.json"
"$zb" run "$out/p1.json" --model shakespeare-char --batch-size 2 --steps 3 --data "$data" \
    --checkpoint "$out/sc-ckpt" --quiet > /dev/null
for mode in cache no-cache; do
    flag=""
    [ "$mode" = no-cache ] && flag="--no-cache"
    i=0
    : > "$out/gen-$mode.txt"
    while [ $i -lt "$reps" ]; do
        "$zb" generate --checkpoint "$out/sc-ckpt" --prompt "ROMEO:
What light is " --tokens 100 --temperature 0 --json --quiet $flag >> "$out/gen-$mode.txt"
        i=$((i + 1))
    done
done
python3 - "$out/gen-cache.txt" "$out/gen-no-cache.txt" <<'PY'
import json, statistics, sys
res = {}
for name, path in (("cache", sys.argv[1]), ("no cache", sys.argv[2])):
    runs = [json.loads(l) for l in open(path)]
    tps = [r["tokens_per_s"] for r in runs]
    res[name] = (statistics.median(tps), runs[0]["text"], runs[0]["tokens"])
    print("%-8s tokens/s median %.1f (runs: %s), %d tokens" % (name, res[name][0],
          ", ".join("%.1f" % t for t in tps), res[name][2]))
print("speed-up with the cache: %.1fx" % (res["cache"][0] / res["no cache"][0]))
print("greedy texts identical:", res["cache"][1] == res["no cache"][1])
PY

echo
echo "== 2. step time, tiny vs tiny-mem, ZB-H2 p=2 m=4, $steps steps, 3 alternating rounds =="
"$zb" gen zb-h2 -p 2 -m 4 -o "$out/zbh2.json"
for round in 1 2 3; do
    for model in tiny tiny-mem; do
        "$zb" run "$out/zbh2.json" --model "$model" --steps "$steps" --data "$data" --json --quiet \
            > "$out/run-$model-$round.json"
    done
done
python3 - "$out" <<'PY'
import json, sys
for model in ("tiny", "tiny-mem"):
    rs = [json.load(open("%s/run-%s-%d.json" % (sys.argv[1], model, i))) for i in (1, 2, 3)]
    ms = [1e3 * r["train_seconds"] / r["steps"] for r in rs]
    print("%-9s %7d parameters, ms/step best %.1f (rounds: %s), loss %.3f -> %.3f" % (
        model, rs[0]["parameters"], min(ms), ", ".join("%.1f" % m for m in ms),
        rs[0]["losses"][0], rs[0]["losses"][-1]))
PY

echo
echo "== 3. one layer, F / B / W, fastest of 50 (bench_memory) =="
"$build/bench/bench_memory" 50 4

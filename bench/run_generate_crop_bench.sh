#!/bin/sh
# run_generate_crop_bench.sh: what generation past the context costs
# (bench/README.md, "generation past the context").
#
# On a shakespeare-char checkpoint (6 x 384, context 256) written by
# `zbsched run --checkpoint` after a few steps, alternating REPS times:
#   inside   100 greedy tokens after a 20-character prompt (the KV cache
#            serves every token);
#   cropped  20 greedy tokens after a 256-character prompt: every token is
#            drawn from a cropped context, one training forward of the
#            256-token window each (docs/generate.md).
# Prints the median tokens/s of each and their ratio.
#
# usage: bench/run_generate_crop_bench.sh [BUILD_DIR] [REPS] [OUT_DIR]
# Run from the repository root (the data lives at ../shared/data/).
set -eu
build=${1:-build}
reps=${2:-5}
out=${3:-/tmp/zb-generate-crop-bench}
mkdir -p "$out"
zb="$build/zbsched"
data=../shared/data/tinyshakespeare.txt

"$zb" gen 1f1b -p 1 -m 1 -o "$out/p1.json"
"$zb" run "$out/p1.json" --model shakespeare-char --batch-size 2 --steps 3 --data "$data" \
    --checkpoint "$out/sc-ckpt" --quiet > /dev/null
head -c 256 "$data" > "$out/long-prompt.txt"
: > "$out/inside.txt"
: > "$out/cropped.txt"
i=0
while [ $i -lt "$reps" ]; do
    "$zb" generate --checkpoint "$out/sc-ckpt" --prompt "ROMEO:
What light is " --tokens 100 --temperature 0 --json --quiet >> "$out/inside.txt"
    "$zb" generate --checkpoint "$out/sc-ckpt" --prompt-file "$out/long-prompt.txt" \
        --tokens 20 --temperature 0 --json --quiet >> "$out/cropped.txt"
    i=$((i + 1))
done
python3 - "$out/inside.txt" "$out/cropped.txt" <<'PY'
import json, statistics, sys
med = {}
for name, path in (("inside", sys.argv[1]), ("cropped", sys.argv[2])):
    runs = [json.loads(l) for l in open(path)]
    tps = [r["tokens_per_s"] for r in runs]
    med[name] = statistics.median(tps)
    print("%-8s tokens/s median %.2f (runs: %s), %d tokens, %d of them cropped" % (
        name, med[name], ", ".join("%.2f" % t for t in tps), runs[0]["tokens"],
        runs[0]["cropped_tokens"]))
print("inside / cropped: %.1fx" % (med["inside"] / med["cropped"]))
PY

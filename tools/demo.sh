#!/usr/bin/env bash
# make demo: the main job end to end on an embedded default, outputs in out/.
#
#   1. search: the fastest schedule for the default model (Llama-3 8B, 8 x
#      H100-80G, global batch 64) under 40 GB per GPU, drawn as SVG;
#   2. the paper's comparison: 1F1B against ZB-H2 at p=4, m=8, simulated
#      and drawn;
#   3. the runtime: a few steps of the `tiny` model on tinyshakespeare with
#      the ZB-H1 schedule on two CPU threads, its measured timeline drawn
#      against the prediction.
set -euo pipefail
B=${1:-build}
Z="$B/zbsched"
O=out
mkdir -p "$O"
DATA=../shared/data/tinyshakespeare.txt

echo "== 1. zbsched search --mem 40G (Llama-3 8B on 8 x H100-80G, global batch 64)"
"$Z" search --mem 40G -o "$O/best.json" --svg "$O/best.svg" --top 8

echo
echo "== 2. 1F1B against ZB-H2, p=4, m=8, unit costs (the paper's Figure 3 setting)"
"$Z" gen 1f1b -p 4 -m 8 -o "$O/1f1b.json"
"$Z" gen zb-h2 -p 4 -m 8 -o "$O/zb-h2.json"
"$Z" simulate "$O/1f1b.json"
"$Z" simulate "$O/zb-h2.json"
"$Z" render "$O/1f1b.json" -o "$O/1f1b.svg"
"$Z" render "$O/zb-h2.json" -o "$O/zb-h2.svg"

if [ -f "$DATA" ]; then
  echo
  echo "== 3. training the tiny model with ZB-H1 on 2 devices (CPU threads), 20 steps"
  "$Z" gen zb-h1 -p 2 -m 4 -o "$O/tiny-zb-h1.json"
  "$Z" run "$O/tiny-zb-h1.json" --data "$DATA" --model tiny --steps 20 --eval-every 10 \
       --trace "$O/tiny-trace.json" -q
  "$Z" render "$O/tiny-trace.json" --compare "$O/tiny-zb-h1.json" -o "$O/tiny-compare.svg"
else
  echo "(skipping the training step: $DATA not found)"
fi

echo
echo "demo outputs are in $O/:"
ls -1 "$O" | sed 's/^/  /'

#!/usr/bin/env bash
# make demo: the main job end to end on an embedded default, outputs in out/.
#
#   1. search: the fastest schedule for the default model (Llama-3 8B, 8 x
#      H100-80G, global batch 64) under 40 GB per GPU, drawn as SVG;
#   2. the paper's comparison: 1F1B against ZB-H2 at p=4, m=8, simulated
#      and drawn;
#   3. the loop on this machine: profile the `tiny` model's ops on this CPU,
#      plan with those measured costs (search --profile, 2 CPU devices),
#      train the plan for 20 steps on tinyshakespeare, then draw predicted
#      against measured on one time scale (ms) and print both iteration
#      times, their ratio and the activation peaks, and the memory ledger's
#      worst device: its measured peak over the runtime's prediction.  The ratio is whatever
#      this machine measures: when other work shares the cores, the profile
#      and the run meet it at different moments (bench/README.md, "plan
#      loop", has figures and the load they were taken at).
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
  echo "== 3. the loop: profile the tiny model here, plan with the measured costs, train the plan, compare"
  # Profiled at micro-batch 1 and planned at micro-batch 1: the profile is
  # then used at its own size, not scaled (small GEMMs do not scale linearly).
  "$Z" profile --model tiny --batch-size 1 --reps 20 --data "$DATA" -o "$O/tiny-profile.json" -q
  # tools/cpu-device.json describes one CPU core as a pipeline device (the
  # fp32 GEMM peak of one core of the development VM, bench/README.md); with
  # --profile it only sets the MFU column, the times come from the profile.
  "$Z" search --model tiny --profile "$O/tiny-profile.json" --gpu tools/cpu-device.json \
       --gpus 2 --stages 2 --global-batch 16 --max-micro-batch 1 --mem 4G -o "$O/tiny-plan.json" --top 3
  "$Z" run "$O/tiny-plan.json" --data "$DATA" --steps 20 --eval-every 10 \
       --trace "$O/tiny-trace.json" -q --json > "$O/tiny-run.json"
  # The memory ledger: each device's measured peak against the runtime's
  # prediction for this plan (docs/cost-model.md, "Buffer classes").
  python3 - "$O/tiny-run.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
mem = run.get("memory") or []
if mem:
    worst = max(mem, key=lambda e: abs(e["measured_bytes"] / e["predicted_bytes"] - 1))
    print("memory: worst device %d measured %.0f of predicted %.0f bytes, ratio %.4f"
          % (worst["device"], worst["measured_bytes"], worst["predicted_bytes"],
             worst["measured_bytes"] / worst["predicted_bytes"]))
print("final loss %.4f, val loss %.4f, %.0f tokens/s"
      % (run["losses"][-1], run["val_loss"], run["tokens_per_s"]))
PY
  "$Z" render "$O/tiny-trace.json" --compare "$O/tiny-plan.json" -o "$O/tiny-compare.svg"
  # Other work on the machine stretches the measured step (its threads wait
  # for the cores), so say how busy the machine was.
  echo "(load average during the loop: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown))"
else
  echo "(skipping the training step: $DATA not found)"
fi

echo
echo "demo outputs are in $O/:"
ls -1 "$O" | sed 's/^/  /'

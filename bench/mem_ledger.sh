#!/usr/bin/env bash
# bench/mem_ledger.sh: the memory ledger against the runtime's prediction
# (issue 25; docs/cost-model.md, "Buffer classes").  For each plan, trains a
# few steps with `zbsched run --json` and prints every device's predicted
# and measured peak and their ratio, any class whose two figures differ,
# and for a searched plan the search's own price of the device.
#
#   bench/mem_ledger.sh [--vocab | --vocab-only] [BUILD_DIR] [DATA]
#                       (default build, ../shared/data/tinyshakespeare.txt)
#
# Plans: 1f1b, zb-h2, zb-v, interleaved (2 chunks) at p=2, m=4 on tiny; two
# `search --profile` plans on tiny (per-stage recompute of the first two of
# four devices; the mlp level on two); zb-v on tiny-mem; 1f1b and zb-v on a
# wider model (8 layers, d_model 256, d_ff 1024).  Then, with --vocab
# (or alone with --vocab-only), the vocabulary-parallel plans: 1f1b and zb-v
# at p=2, m=4 with Vocab-1 and Vocab-2, on tiny, on the wide model, and on
# the wide model over a synthetic text of all 256 byte values (the largest
# vocabulary `run` reads: its tokens are the text's distinct bytes).
set -euo pipefail
VOCAB=0
case "${1:-}" in
--vocab) VOCAB=1; shift ;;
--vocab-only) VOCAB=2; shift ;;
esac
B=${1:-build}
DATA=${2:-../shared/data/tinyshakespeare.txt}
Z="$B/zbsched"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

show() { # NAME PLAN RUN-ARGS...
  local name=$1 plan=$2
  shift 2
  "$Z" run "$plan" --data "$DATA" --json -q "$@" > "$W/run.json"
  python3 - "$name" "$W/run.json" "$plan" <<'PY'
import json, sys
name, run, plan = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
# the search's own price of each device (a plan file's predicted peaks), if any
searched = (plan.get("predicted") or {}).get("device_peak_bytes")
for e in run["memory"]:
    diff = ["%s %d/%d" % (k, v["measured"], v["predicted"])
            for k, v in e["classes"].items() if v["predicted"] != v["measured"]]
    s = "%d (%.4f)" % (searched[e["device"]], e["measured_bytes"] / searched[e["device"]]) \
        if searched else "-"
    print("| %s | %d | %d | %d | %.4f | %s | %s |" % (name, e["device"], e["predicted_bytes"],
          e["measured_bytes"], e["measured_bytes"] / e["predicted_bytes"], ", ".join(diff) or "-", s))
PY
}

vocab_plans() {
  echo '{"base": "tiny", "name": "wide", "n_layers": 8, "d_model": 256, "n_heads": 8, "n_kv_heads": 8, "d_ff": 1024}' > "$W/wide.json"
  # 256 distinct bytes, each 1,024 times, in a fixed shuffled order
  python3 -c 'import random, sys; b = bytearray(range(256)) * 1024; random.Random(1).shuffle(b); sys.stdout.buffer.write(b)' > "$W/bytes.txt"
  local k v
  for k in 1f1b zb-v; do
    for v in 1 2; do
      "$Z" gen "$k" -p 2 -m 4 --vocab parallel --vocab-variant "$v" -o "$W/$k-v$v.json" > /dev/null
    done
  done
  for k in 1f1b zb-v; do
    for v in 1 2; do
      show "tiny $k+vocab-$v p=2 m=4" "$W/$k-v$v.json" --model tiny --steps 4
    done
  done
  for k in 1f1b zb-v; do
    for v in 1 2; do
      show "wide (8 x 256) $k+vocab-$v p=2 m=4" "$W/$k-v$v.json" --model "$W/wide.json" --steps 3
    done
  done
  for k in 1f1b zb-v; do
    for v in 1 2; do
      DATA="$W/bytes.txt" show "wide, vocab 256 (synthetic bytes) $k+vocab-$v p=2 m=4" "$W/$k-v$v.json" \
        --model "$W/wide.json" --steps 3
    done
  done
}

echo "| plan | device | predicted bytes | measured bytes | measured/predicted | classes that differ (measured/predicted) | search's price (measured/it) |"
echo "|---|---|---|---|---|---|---|"
if [ "$VOCAB" = 2 ]; then
  vocab_plans
  exit 0
fi
for k in 1f1b zb-h2 zb-v interleaved; do
  "$Z" gen "$k" -p 2 -m 4 -o "$W/$k.json" > /dev/null
  show "tiny $k p=2 m=4" "$W/$k.json" --model tiny --steps 4
done
"$Z" profile --model tiny --batch-size 1 --reps 5 --data "$DATA" -o "$W/profile.json" -q
# the search's answer moves with the measured profile: lower --mem until it
# picks the recompute wanted (per-stage "recompute 0-k", or "recompute mlp")
find_plan() { # GPUS WANT OUT
  local gpus=$1 want=$2 out=$3 kb
  for kb in $(seq 6000 -100 1500); do
    "$Z" search --model tiny --profile "$W/profile.json" --gpu tools/cpu-device.json --gpus "$gpus" \
         --stages "$gpus" --global-batch 16 --max-micro-batch 1 --mem "${kb}K" --vocab plain \
         -o "$out" --top 1 > "$W/search.txt" 2>&1 || continue
    if grep -q "^best: .*recompute $want" "$W/search.txt"; then
      grep -o 'best: [^>]*' "$W/search.txt" | sed "s/best: //; s/ -\$//; s/\$/, --mem ${kb}K/"
      return 0
    fi
  done
  echo "no plan with recompute $want" >&2
  return 1
}
what=$(find_plan 4 "0-" "$W/rc.json")
show "tiny search --profile ($what)" "$W/rc.json" --steps 4
what=$(find_plan 2 "mlp" "$W/mlp.json")
show "tiny search --profile ($what)" "$W/mlp.json" --steps 4
"$Z" gen zb-v -p 2 -m 4 -o "$W/zbv.json" > /dev/null
show "tiny-mem zb-v p=2 m=4" "$W/zbv.json" --model tiny-mem --steps 4
echo '{"base": "tiny", "name": "wide", "n_layers": 8, "d_model": 256, "n_heads": 8, "n_kv_heads": 8, "d_ff": 1024}' > "$W/wide.json"
show "wide (8 x 256) 1f1b p=2 m=4" "$W/1f1b.json" --model "$W/wide.json" --steps 3
show "wide (8 x 256) zb-v p=2 m=4" "$W/zbv.json" --model "$W/wide.json" --steps 3
if [ "$VOCAB" = 1 ]; then
  vocab_plans
fi

#!/usr/bin/env bash
# train_plan.sh ZBSCHED SOURCE_ROOT: examples/pytorch/train_plan.py against
# `zbsched run` on the same plans (issue 26, "Done when"):
#
#   zb-v           2 ranks, 4 virtual stages (V placement), one layer each
#   interleaved    4 ranks, 8 virtual stages, a 10-layer model split
#                  [2,1,1,1,1,1,1,2], stages 0-2 recompute fully, 3-4 their
#                  MLP blocks, 5-7 nothing
#
# Each plan is a generated schedule with the plan a search writes (model,
# micro-batch 2, split, recompute); zbsched exports it (--format pytorch),
# writes its step-0 weights (checkpoint init, checkpoint export), and both
# runtimes train 10 steps from them on the same windows.  Passes when every
# loss agrees within 1e-5 relative (fp32: the two runtimes sum in different
# orders; measured differences are about 1e-7, docs/pytorch.md) and the
# example wrapped exactly the plan's recomputing layers.  Skips (exit 77)
# when PyTorch cannot be imported: the project never installs it.
# $ZB_PYTHON picks the interpreter (default python3).
set -u
zb=$1 root=$2
py=${ZB_PYTHON:-python3}
if ! command -v "$py" >/dev/null 2>&1; then
  echo "skipped: no $py"; exit 77
fi
if ! "$py" -c "import torch, torch.distributed.pipelining.schedules" >/dev/null 2>&1; then
  echo "skipped: $py cannot import torch (set ZB_PYTHON to an interpreter that can)"; exit 77
fi
data=$root/../shared/data/tinyshakespeare.txt
[ -r "$data" ] || { echo "skipped: no $data"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fail() { echo "FAIL: $*"; exit 1; }

# add_plan IN OUT LAYERS LEVELS: the meta a search writes, on a generated file.
add_plan() {
  "$py" - "$@" <<'EOF'
import json, sys
src, dst, layers, levels = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
d = json.load(open(src))
d["model"] = {"name": "tiny", "n_layers": sum(layers), "d_model": 64, "n_heads": 4, "n_kv_heads": 4,
              "d_ff": 256, "vocab": 65, "seq_len": 64, "micro_batch": 2, "swiglu": 1,
              "tied_embedding": 0, "rope_theta": 10000, "dtype": "fp32"}
d["plan"] = {"schedule": d["name"], "family": d["name"], "micro_batch": 2,
             "n_micro": d["microbatches"], "global_batch": 2 * d["microbatches"],
             "pipeline_parallel": d["devices"], "data_parallel": 1, "layers_per_stage": layers,
             "recompute_stages": [l != "none" for l in levels], "recompute_levels": levels}
json.dump(d, open(dst, "w"))
EOF
}

# compare NAME PLAN LEVELS: both runtimes, 10 steps, from the same weights.
compare() {
  local name=$1 plan=$2 levels=$3
  "$zb" export "$plan" --format pytorch -o "$name-job.json" 2>/dev/null || fail "export $plan"
  "$zb" checkpoint init "$plan" -o "$name-ck0" --data "$data" 2>/dev/null || fail "checkpoint init"
  "$zb" checkpoint export "$name-ck0" -o "$name-hf0" 2>/dev/null || fail "checkpoint export"
  "$zb" run "$plan" --steps 10 --data "$data" --json -q >"$name-zb.json" || fail "zbsched run"
  "$py" "$root/examples/pytorch/train_plan.py" "$name-job.json" --weights "$name-hf0" \
    --steps 10 --data "$data" >"$name-torch.json" || fail "train_plan.py on $name"
  "$py" - "$name" "$name-zb.json" "$name-torch.json" "$levels" "$plan" <<'EOF' || exit 1
import json, sys
name, zb, pt, levels = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), json.loads(sys.argv[4])
layers = json.load(open(sys.argv[5]))["plan"]["layers_per_stage"]
a, b = zb["losses"], pt["losses"]
assert len(a) == len(b) == 10, (len(a), len(b))
rel = max(abs(x - y) / abs(x) for x, y in zip(a, b))
want = [{"full": k if l == "full" else 0, "mlp": k if l == "mlp" else 0} for l, k in zip(levels, layers)]
ok = rel <= 1e-5 and pt["checkpointed_layers"] == want
print(f"{name}: {pt['ranks']} ranks, {pt['stages']} stages (torch {pt['torch']}): zbsched "
      f"{a[0]:.7f} .. {a[-1]:.7f}, torch {b[0]:.7f} .. {b[-1]:.7f}, largest relative difference "
      f"{rel:.1e}; checkpointed layers per stage {pt['checkpointed_layers']}: "
      f"{'match' if ok else 'MISMATCH (want ' + str(want) + ')'}")
sys.exit(0 if ok else 1)
EOF
}

"$zb" gen zb-v -p 2 -m 4 -o zbv-gen.json || fail "gen zb-v"
add_plan zbv-gen.json zbv.json '[1,1,1,1]' '["none","none","none","none"]' || fail "plan"
compare zbv zbv.json '["none","none","none","none"]'

levels='["full","full","full","mlp","mlp","none","none","none"]'
"$zb" gen interleaved -p 4 -m 8 -o il-gen.json || fail "gen interleaved"
add_plan il-gen.json il.json '[2,1,1,1,1,1,1,2]' "$levels" || fail "plan"
compare interleaved il.json "$levels"

#!/usr/bin/env bash
# export_search.sh ZBSCHED MODE: `zbsched search --mem 40G` and then
# `zbsched export`, as README's Typical use runs them (issue 26's "Done when").
#
#   default   the default target's plan (vocabulary-parallel today) exports
#             with the default format (the plan itself, zbsched's input),
#             and --format torch-csv on it is refused naming --target torch
#   toml      a plan torchtitan can run (--vocab plain --recompute on):
#             its TOML parses with Python's tomllib, the module lists cover
#             every layer once in order matching layers_per_stage, and the
#             CSV it names is the one beside it (skips, 77, without
#             python3 >= 3.11)
#   targets   for each of --target torch, torchtitan, megatron: search, then
#             export with the matching format; the TOML as above, the
#             Megatron layout with one t per layer and one | between stages
#             (skips, 77, while search has no --target)
set -u
zb=$1 mode=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fail() { echo "FAIL: $*"; exit 1; }

have_tomllib() {
  command -v python3 >/dev/null 2>&1 && python3 -c 'import tomllib' 2>/dev/null
}

# check_toml PLAN TOML: tomllib parses TOML; its modules cover the plan's layers.
check_toml() {
  python3 - "$1" "$2" <<'EOF' || fail "TOML check of $2"
import json, os, sys, tomllib
plan = json.load(open(sys.argv[1]))
job = tomllib.load(open(sys.argv[2], "rb"))
par = job["parallelism"]
layers = plan["plan"]["layers_per_stage"]
parts = par["module_fqns_per_model_part"]
assert len(parts) == len(layers), (len(parts), len(layers))
flat = [m for part in parts for m in part]
n = plan["model"]["n_layers"]
assert flat == ["tok_embeddings"] + [f"layers.{i}" for i in range(n)] + ["norm", "output"], flat
for part, k in zip(parts, layers):
    assert sum(m.startswith("layers.") for m in part) == k, (part, k)
assert os.path.isfile(par["pipeline_parallel_schedule_csv"]), par["pipeline_parallel_schedule_csv"]
assert par["pipeline_parallel_degree"] == plan["devices"]
assert par["pipeline_parallel_microbatch_size"] == plan["plan"]["micro_batch"]
assert job["training"]["local_batch_size"] == plan["plan"]["micro_batch"] * plan["microbatches"]
print(f"{sys.argv[2]}: {len(parts)} model parts, {n} layers, schedule "
      f"{par['pipeline_parallel_schedule']}, activation checkpoint {job['activation_checkpoint']['mode']}")
EOF
}

# check_layout PLAN ARGS: one t per layer, one | between stages, E first, L last.
check_layout() {
  local layout layers stages ts bars
  layout=$(sed -n 's/^--pipeline-model-parallel-layout //p' "$2")
  layers=$(grep -o '"n_layers": *[0-9]*' "$1" | head -1 | grep -o '[0-9]*$')
  stages=$(grep -o '"stages": *[0-9]*' "$1" | head -1 | grep -o '[0-9]*$')
  ts=$(printf '%s' "$layout" | tr -cd 't' | wc -c)
  bars=$(printf '%s' "$layout" | tr -cd '|' | wc -c)
  [ "$ts" -eq "$layers" ] || fail "layout $layout has $ts t, the model $layers layers"
  [ "$bars" -eq $((stages - 1)) ] || fail "layout $layout has $bars |, the plan $stages stages"
  case $layout in E*L) ;; *) fail "layout $layout does not run from E to L" ;; esac
  echo "$2: $layout"
}

case $mode in
default)
  "$zb" search --mem 40G -q -o best.json >/dev/null || fail "search"
  "$zb" export best.json >exported.json 2>note.txt || fail "export best.json: $(cat note.txt)"
  "$zb" simulate exported.json >/dev/null || fail "the export is not a schedule file"
  grep -q "zbsched run best.json" note.txt || fail "no run hint: $(cat note.txt)"
  if "$zb" export best.json --format torch-csv -o best.csv 2>err.txt; then
    grep -q '"vocab": "parallel"' best.json && fail "torch-csv of a vocabulary-parallel plan succeeded"
  else
    grep -q -- "--target torch" err.txt || fail "the refusal names no target: $(cat err.txt)"
    [ -e best.csv ] && fail "a refused export left best.csv"
  fi
  # -o NAME.csv without --format asks for the CSV: a plain plan writes it,
  # the vocabulary-parallel one is refused naming --target torch
  if "$zb" export best.json -o asked.csv 2>err2.txt; then
    grep -q '"vocab": "parallel"' best.json && fail "-o asked.csv of a vocabulary-parallel plan succeeded"
  else
    grep -q -- "--target torch" err2.txt || fail "-o asked.csv: the refusal names no target: $(cat err2.txt)"
    [ -e asked.csv ] && fail "a refused export left asked.csv"
  fi
  "$zb" search --mem 40G --vocab plain -q -o plain.json >/dev/null || fail "search --vocab plain"
  "$zb" export plain.json -o plain.csv 2>/dev/null || fail "export plain.json -o plain.csv"
  head -c 4 plain.csv | grep -q '^0F0' || fail "plain.csv is not a torch CSV: $(head -c 40 plain.csv)"
  echo "default target: export best.json ok; $(cat err.txt 2>/dev/null)"
  ;;
toml)
  have_tomllib || { echo "skipped: no python3 with tomllib (3.11+)"; exit 77; }
  "$zb" search --mem 40G --vocab plain --recompute on -q -o plain.json >/dev/null || fail "search"
  "$zb" export plain.json --format torchtitan -o job.toml 2>note.txt || fail "export: $(cat note.txt)"
  check_toml plain.json job.toml
  ;;
targets)
  "$zb" search --help 2>&1 | grep -q -- '--target' ||
    { echo "skipped: zbsched search has no --target yet"; exit 77; }
  for t in torch torchtitan megatron; do
    "$zb" search --mem 40G --target $t -q -o $t.json >/dev/null || fail "search --target $t"
    case $t in
    torch) "$zb" export $t.json -o $t.csv || fail "export $t.json" ;;
    torchtitan)
      "$zb" export $t.json --format torchtitan -o $t.toml || fail "export $t.json"
      if have_tomllib; then check_toml $t.json $t.toml; fi ;;
    megatron)
      "$zb" export $t.json --format megatron -o $t.txt || fail "export $t.json"
      check_layout $t.json $t.txt ;;
    esac
  done
  ;;
*) fail "unknown mode $mode" ;;
esac

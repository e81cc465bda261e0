#!/usr/bin/env bash
# test_golden.sh: the pictures, drawn by the zbsched program in processes
# of their own, against the files committed in the repository: the docs'
# pictures (docs/img) and views of a big plan (tests/viz/golden).  A
# renderer that is not byte-stable across processes (an address, a
# timestamp, an uninitialised byte) or that changed its output without the
# docs following fails here.
#
#   tests/viz/test_golden.sh ZBSCHED ROOT            check (exit 1 on a difference)
#   tests/viz/test_golden.sh ZBSCHED ROOT --update   rewrite the files
#
# Each entry is a file and the shell command, run in a fresh directory with
# zbsched on PATH and $ROOT the repository, whose stdout is that file.
# tests/viz/golden/llama3-8b-plan.json is a committed input: the plan of
# `zbsched search --mem 40G -o best.json` (llama3-8b, 8 H100s, 5,120 ops)
# when the views were added, kept as it was so that a later change in the
# search does not move these pictures.  The Graphviz picture
# (docs/img/zb-h1-p4-m8-dag.svg) is rewritten by --update but not
# compared: its bytes depend on the Graphviz version.
set -u
zb=${1:?usage: $0 ZBSCHED ROOT [--update]}
ROOT=$(cd "${2:?usage: $0 ZBSCHED ROOT [--update]}" && pwd)
update=0
[ "${3:-}" = --update ] && update=1
zb=$(cd "$(dirname "$zb")" && pwd)/$(basename "$zb")
export ROOT
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"
ln -s "$zb" "$work/bin/zbsched"

plan='$ROOT/tests/viz/golden/llama3-8b-plan.json'
entries=(
  "docs/img/zb-h1-p4-m8.svg|zbsched gen zb-h1 -p 4 -m 8 --mem-limit 8 -o s.json && zbsched render s.json"
  "docs/img/zb-v-p4-m8.svg|zbsched gen zb-v -p 4 -m 8 -o s.json && zbsched render s.json"
  "docs/img/vocab-1f1b-p4-m8.svg|zbsched gen 1f1b -p 4 -m 8 --vocab parallel --ts 0.3 --tt 0.15 --tc0 0.1 -o s.json && zbsched render s.json"
  "docs/img/vocab2-zb-v-p4-m8.svg|zbsched gen zb-v -p 4 -m 8 --vocab parallel --vocab-variant 2 --ts 0.15 --tt 0.3 --tc0 0.05 --tc1 0.1 -o s.json && zbsched render s.json"
  "docs/img/zb-h1-p4-m8.trace.json|zbsched gen zb-h1 -p 4 -m 8 --mem-limit 8 -o s.json && zbsched render s.json --format trace"
  "docs/img/llama3-8b-window.svg|zbsched render $plan --from 1000 --to 1600"
  "docs/img/llama3-8b-mb0-7.svg|zbsched render $plan --micro-batches 0-7"
  "tests/viz/golden/llama3-8b-devices.svg|zbsched render $plan --from 2000 --to 2300 --micro-batches 20-27 --devices 2-5"
  "tests/viz/golden/llama3-8b-window.trace.json|zbsched render $plan --format trace --from 1000 --to 1100 --devices 0-1"
  "docs/img/eplb-example.svg|printf '[[90,132,40,61,104,165,39,4,73,56,183,86],[20,107,104,64,19,197,187,157,172,86,16,27]]' > w.json && zbsched eplb w.json --replicas 16 --groups 4 --nodes 2 --gpus 8 --svg e.svg > /dev/null && cat e.svg"
  "tests/viz/golden/eplb-uneven-nodes.svg|printf '[[90,132,40,61,104,165,39,4,73,56,183,86],[20,107,104,64,19,197,187,157,172,86,16,27]]' > w.json && zbsched eplb w.json --replicas 16 --groups 4 --nodes 3 --gpus 4 --svg e.svg > /dev/null && cat e.svg"
  "!docs/img/zb-h1-p4-m8-dag.svg|zbsched gen zb-h1 -p 4 -m 8 --mem-limit 8 -o s.json && zbsched render s.json --format dag"
  "!docs/img/llama3-8b-window-dag.svg|zbsched render $plan --format dag --from 0 --to 300"
)

checked=0 differ=0
for e in "${entries[@]}"; do
  file=${e%%|*} cmd=${e#*|} compare=1
  if [ "${file:0:1}" = "!" ]; then file=${file:1}; compare=0; fi
  rm -rf "$work/run"; mkdir "$work/run"
  if ! (cd "$work/run" && PATH="$work/bin:$PATH" LC_ALL=C bash -c "$cmd" >"$work/out" 2>"$work/err"); then
    echo "golden: $file: \`$cmd\` failed: $(head -c 400 "$work/err")" >&2
    exit 1
  fi
  if [ $update -eq 1 ]; then
    cmp -s "$work/out" "$ROOT/$file" || { cp "$work/out" "$ROOT/$file"; echo "golden: updated $file"; }
  elif [ $compare -eq 1 ]; then
    checked=$((checked + 1))
    if ! cmp -s "$work/out" "$ROOT/$file"; then
      differ=$((differ + 1))
      echo "golden: $file differs from what \`$cmd\` draws now (first lines that differ):" >&2
      diff "$ROOT/$file" "$work/out" | head -8 >&2
    fi
  fi
done
[ $update -eq 1 ] && { echo "golden: review with git diff, then commit"; exit 0; }
echo "golden: $((checked - differ)) passed, $differ failed"
[ $differ -eq 0 ] || { echo "golden: if the change is meant, run $0 ZBSCHED ROOT --update and review the diff" >&2; exit 1; }

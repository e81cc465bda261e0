#!/usr/bin/env bash
# run_example.sh ZBSCHED SOURCE_ROOT: runs examples/pytorch/run_schedule.py
# on a zbsched ZB-V export (2 ranks, gloo, CPU) and passes when PyTorch's
# pipeline runtime gives the unpipelined loss and gradients.  Skips (exit
# 77, meson's SKIP) when PyTorch cannot be imported: the project never
# installs it.  $ZB_PYTHON picks the interpreter (default python3).
set -u
zb=$1 root=$2
py=${ZB_PYTHON:-python3}
if ! command -v "$py" >/dev/null 2>&1; then
  echo "skipped: no $py"; exit 77
fi
if ! "$py" -c "import torch, torch.distributed.pipelining.schedules" >/dev/null 2>&1; then
  echo "skipped: $py cannot import torch (set ZB_PYTHON to an interpreter that can)"; exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$zb" gen zb-v -p 2 -m 4 -o "$tmp/zbv.json" || exit 1
"$zb" export "$tmp/zbv.json" -o "$tmp/zbv.csv" || exit 1
out=$("$py" "$root/examples/pytorch/run_schedule.py" "$tmp/zbv.csv" 2>&1)
rc=$?
echo "$out" | tail -5
[ $rc -eq 0 ] && echo "$out" | tail -1 | grep -q ': match$'

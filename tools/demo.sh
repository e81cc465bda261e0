#!/usr/bin/env bash
# make demo: the main job on an embedded default.  Filled in as features land.
set -euo pipefail
B=${1:-build}
mkdir -p out
"$B/zbsched" gen 1f1b -p 4 -m 8 -o out/1f1b.json
"$B/zbsched" gen zb-h2 -p 4 -m 8 -o out/zb-h2.json
"$B/zbsched" simulate out/1f1b.json
"$B/zbsched" simulate out/zb-h2.json
echo "demo outputs are in out/"

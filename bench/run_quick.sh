#!/usr/bin/env bash
# run_quick.sh: the figures the issues name, in one run on a quiet machine
# (about five minutes on 2 cores).  Results go to bench/README.md, "Summary".
#
#   1. validate + simulate 1F1B at p=64, m=1024 (~200k ops)     bench_sim
#   2. zb-auto at p=32, m=256 against the authors' ~0.4 s        bench_heuristic
#   3. the ILP on every p <= 4, m <= 8 case                      bench_ilp
#   4. GEMM GFLOP/s against this machine's peak                  bench_gemm
#   5. ZB-H2 over 1F1B on two CPU devices, measured vs predicted bench_runtime
#   6. zbsched search --mem 40G (the default job)                wall time
#
# usage: bench/run_quick.sh [BUILD_DIR]   (from the repository root)
set -euo pipefail
B=${1:-build}
ninja -C "$B" >/dev/null
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== 1. bench_sim 10";        "$B/bench/bench_sim" 10
echo "== 2. bench_heuristic 30";  "$B/bench/bench_heuristic" 30
echo "== 3. bench_ilp 60 4 8";    "$B/bench/bench_ilp" 60 4 8
echo "== 4. bench_gemm";          "$B/bench/bench_gemm"
echo "== 5. bench_runtime";       "$B/bench/bench_runtime" --model bench/runtime/wide.json --m 8 --steps 20 \
                                      --data ../shared/data/tinyshakespeare.txt
echo "== 6. search --mem 40G"
for i in 1 2 3; do /usr/bin/time -f "%e s wall, %U s user" "$B/zbsched" search --mem 40G -o /tmp/zb-quick-best.json >/dev/null; done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

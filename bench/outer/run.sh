#!/bin/sh
# bench/outer/run.sh [BUILD_DIR]: reruns the "train across islands"
# experiment of bench/README.md (## outer) and the ring micro-benchmark.
# About 10 minutes on a quiet 2-core machine; losses and bytes are
# deterministic (A-EDiT's depend on wall time).  Run from the repository root.
set -eu
B=${1:-build}
T="$B/bench/bench_outer train --model bench/outer/islands-small.json --replicas 4 --steps 1000 --micro 2"
$T --inner-steps 50 --modes sync-fp32,sync-int8,diloco-fp32,diloco-int8,edit-fp32,edit-int8,single
$T --inner-steps 50 --modes a-edit-fp32 --sync-interval 5
$T --inner-steps 10 --modes diloco-fp32,diloco-int8
$T --inner-steps 50 --modes diloco-fp32 --outer-lr 1 --outer-momentum 0
"$B/bench/bench_outer" ring --n 4000000 --replicas 4 --reps 5
"$B/bench/bench_outer" ring --n 4000000 --replicas 8 --reps 3

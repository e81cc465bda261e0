#!/bin/sh
# bench_module_load.sh: what the CUDA module (runtime/cuda_module.h) buys a
# command that never touches a GPU.  Runs whole-process `zbsched simulate`
# of a 96-op file (zb-h1, p=4, m=8) and `zbsched gen zb-auto -p 32 -m 256 --mem-limit 64`
# REPS times with each given build's zbsched and prints the median wall
# time and the largest peak RSS (/usr/bin/time -v), plus whether the
# program links any CUDA library (ldd).  bench/README.md, "cuda module".
#
# usage: bench/bench_module_load.sh [REPS] BUILD_DIR...
#        e.g. bench/bench_module_load.sh 20 build build-cuda
set -eu
reps=20
case "${1:-}" in
    ''|*[!0-9]*) ;;
    *) reps=$1; shift ;;
esac
[ $# -gt 0 ] || set -- build
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$1/zbsched" gen zb-h1 -p 4 -m 8 -o "$tmp/s.json"

# measure LABEL CMD...: median wall ms (date +%s%N around the process) and
# the largest peak RSS in MB (/usr/bin/time -f %M) over $reps runs
measure() {
    label=$1
    shift
    : > "$tmp/t"
    i=0
    while [ $i -lt "$reps" ]; do
        t0=$(date +%s%N)
        /usr/bin/time -f %M -o "$tmp/rss" "$@" > /dev/null 2> "$tmp/err" || { cat "$tmp/err"; exit 1; }
        t1=$(date +%s%N)
        echo "$(( (t1 - t0) / 1000 )) $(cat "$tmp/rss")" >> "$tmp/t"
        i=$((i + 1))
    done
    sort -n "$tmp/t" | awk -v label="$label" '{ w[NR] = $1 / 1000; if ($2 > r) r = $2 }
        END { printf "  %-34s median %7.1f ms  peak RSS %6.1f MB  (%d runs)\n",
              label, w[int((NR + 1) / 2)], r / 1024, NR }'
}

for b in "$@"; do
    cuda_libs=$(ldd "$b/zbsched" | grep -c -i -E 'cuda|cublas|nccl' || true)
    module="no"
    [ -e "$b/zbsched_cuda.so" ] && module="yes"
    echo "$b: CUDA libraries linked into zbsched: $cuda_libs; zbsched_cuda.so beside it: $module"
    measure "simulate (96 ops)" "$b/zbsched" simulate "$tmp/s.json"
    measure "gen zb-auto -p 32 -m 256" "$b/zbsched" gen zb-auto -p 32 -m 256 --mem-limit 64 -o "$tmp/a.json"
done

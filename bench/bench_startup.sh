#!/bin/sh
# bench_startup.sh: what a whole-process `zbsched gen` or `simulate` costs
# beyond its work (issue 28).  For each given build: the instructions of
# the whole process (valgrind --tool=callgrind: repeatable on a noisy
# machine) of `zbsched --version` (loading the program and its libraries),
# `gen zb-auto -p 32 -m 256 --mem-limit 128 -o FILE` and `simulate FILE`;
# the median task-clock of REPS runs of that gen (perf stat), the builds
# taking turns; and the shared libraries the program maps (ldd), with the
# BLAS and MPI ones named.  bench/README.md, "issue 28".
#
# usage: bench/bench_startup.sh [REPS] BUILD_DIR...
#        e.g. bench/bench_startup.sh 9 build /tmp/main-build
set -eu
reps=9
case "${1:-}" in
    ''|*[!0-9]*) ;;
    *) reps=$1; shift ;;
esac
[ $# -gt 0 ] || set -- build
command -v valgrind >/dev/null || { echo "bench_startup: needs valgrind" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$1/zbsched" gen zb-auto -p 32 -m 256 --mem-limit 128 -o "$tmp/s.json"
gen="gen zb-auto -p 32 -m 256 --mem-limit 128 -o $tmp/out.json"

# instructions BUILD ARGS...: callgrind's total of one run
instructions() {
    b=$1
    shift
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$b/zbsched" "$@" 2>&1 >/dev/null |
        sed -n 's/.*refs: *//p' | tr -d ,
}

echo "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for b in "$@"; do
    libs=$(ldd "$b/zbsched" | grep -c '=>')
    named=$(ldd "$b/zbsched" | awk '{print $1}' | grep -o -E 'lib(openblas|blis|mpi|open-rte|open-pal|hwloc)[^ ]*' | tr '\n' ' ')
    echo "$b: $libs shared libraries; BLAS/MPI among them: ${named:-none}"
    printf '  instructions: --version %s, gen %s, simulate %s\n' \
        "$(instructions "$b" --version)" "$(instructions "$b" $gen)" \
        "$(instructions "$b" simulate "$tmp/s.json")"
done
i=0
while [ $i -lt "$reps" ]; do
    for b in "$@"; do
        perf stat -x, -e task-clock "$b/zbsched" $gen 2>&1 >/dev/null | cut -d, -f1 >> "$tmp/t.$(echo "$b" | tr / _)"
    done
    i=$((i + 1))
done
for b in "$@"; do
    sort -n "$tmp/t.$(echo "$b" | tr / _)" |
        awk -v b="$b" '{v[NR]=$1} END {printf "%s: gen task-clock median %.2f ms (min %.2f, max %.2f, %d runs)\n", b, v[int((NR+1)/2)], v[1], v[NR], NR}'
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"

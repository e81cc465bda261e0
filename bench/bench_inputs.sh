#!/bin/sh
# bench_inputs.sh: wall time and peak memory (max RSS) of the hostile
# inputs of issue 14, each under `timeout` so that an unfixed build shows
# as a timeout instead of hanging the machine.
#
#   bench/bench_inputs.sh [BUILD_DIR] [TIMEOUT_S]   (defaults: build, 60)
#
# Prints one line per case: exit status, wall seconds, max RSS in MB, and
# the case.  Needs GNU time (/usr/bin/time) and tinyshakespeare in
# ../shared/data.  Writes only into a temporary directory.
set -u
build=${1:-build}
limit=${2:-60}
zb=$(cd "$build" && pwd)/zbsched
data=$(cd "$(dirname "$0")/.." && pwd)/../shared/data/tinyshakespeare.txt
dir=$(mktemp -d /tmp/zb_bench_inputs_XXXXXX)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
"$zb" gen zb-h1 -p 2 -m 4 -o s.json
printf '{"base": "tiny", "n_layers": 10000}' > deep.json

one() {
    # $1: description; rest: the command line after zbsched
    what=$1
    shift
    /usr/bin/time -f '%e %M' -o t.txt timeout "$limit" "$zb" "$@" >/dev/null 2>err.txt
    rc=$?
    read -r secs kb <<EOT
$(tail -n 1 t.txt)
EOT
    printf '%-4s %8s s %8.1f MB  %s\n' "$rc" "$secs" "$(echo "$kb / 1024" | bc -l)" "$what"
}

one "ilp -p 64 -m 1024 --mem-limit 8 --time-limit 5" gen ilp -p 64 -m 1024 --mem-limit 8 --time-limit 5 -o i.json
one "ilp -p 32 -m 55 (T 5,6,4,1) --mem-limit 32 --time-limit 1" gen ilp -p 32 -m 55 --mem-limit 32 --tf 5 --tb 6 --tw 4 --tcomm 1 --time-limit 1 -o i.json
one "simulate /dev/zero" simulate /dev/zero
one "run --data /dev/zero" run s.json --steps 1 --data /dev/zero -q
one "run --batch-size 65536" run s.json --steps 1 --data "$data" --batch-size 65536 -q
one "search, tiny with 10,000 layers, 8 GPUs" search --mem 40G --stages 8 --model deep.json -o best.json
one "run --lr 1e6 (20 steps)" run s.json --steps 20 --data "$data" --lr 1e6 -q

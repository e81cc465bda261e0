#!/bin/bash
# bench_backend_ab.sh: CPU time of the executor, one zbsched build against
# another (e.g. before and after the backend interface, issue 12), on the
# same schedule, model, data and thread count, runs alternated so that a
# busy machine slows both alike.  CPU seconds (user + sys) rather than wall
# time, because on a shared machine the wall clock measures the neighbours.
#
#   bench/bench_backend_ab.sh OLD_ZBSCHED NEW_ZBSCHED [RUNS] [STEPS]
#
# Prints each run's CPU seconds and the median of each build.  Also checks
# that both builds print the same losses (the refactor must not change a bit).
set -euo pipefail
OLD=$1 NEW=$2 RUNS=${3:-5} STEPS=${4:-30}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DATA=$ROOT/../shared/data/tinyshakespeare.txt
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$NEW" gen 1f1b -p 2 -m 8 -o "$WORK/s.json"
ARGS=("$WORK/s.json" --model tiny --data "$DATA" --steps "$STEPS" --threads 1 --eval-windows 4 -q --json)
for b in OLD NEW; do
    "${!b}" run "${ARGS[@]}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["losses"])' > "$WORK/$b.losses"
done
cmp -s "$WORK/OLD.losses" "$WORK/NEW.losses" && echo "losses: identical" || echo "losses: DIFFER"
for i in $(seq "$RUNS"); do
    for b in OLD NEW; do
        /usr/bin/time -f "%U %S" -o "$WORK/t" "${!b}" run "${ARGS[@]}" > /dev/null
        awk -v b=$b '{printf "%s %.2f\n", b, $1 + $2}' "$WORK/t" | tee -a "$WORK/all"
    done
done
for b in OLD NEW; do
    grep "^$b " "$WORK/all" | sort -k2 -n | awk -v b=$b '{v[NR]=$2} END {printf "median %s %.2f s CPU\n", b, v[int((NR+1)/2)]}'
done

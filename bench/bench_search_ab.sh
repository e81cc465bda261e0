#!/bin/bash
# bench_search_ab.sh: issue 27's search-time table, before and after, at
# the same load: every preset x {8, 64, 512, 1024} GPUs (global batch 2 x
# GPUs, --mem 80G) is searched by OLD and then at once by NEW, so that
# both see the machine as it is at that moment.  Prints user+sys CPU
# seconds of each ("over N" past the CPU limit, ulimit -t) and whether
# the two plan files are byte-identical (same: the same winner with the
# same figures; both-none: nothing fits for either, and the two
# nothing-fits lines are compared instead; DIFF otherwise).
# With JSON=1 in the environment each job is also searched once more by
# both with --json (not timed) and the candidate lists compared, the
# "n_reused" count (how many took a twin's figures) left out: the column
# "list" says same, "pruned N over-limit" (NEW lists OLD's candidates but
# N plans over the limit that lose to their label's best, and counts them
# as pruned: bench/search_list_diff.py) or DIFF (needs python3).
# Usage: bench/bench_search_ab.sh OLD NEW [TARGET] [TIMEOUT_S] [KEEP_DIR]
# With KEEP_DIR, each job's plans and tables stay there
# (old|new-MODEL-GPUS.json/.out).  With RUNS=N in the environment each
# job is searched N times by OLD and N times by NEW, alternating, and the
# least of each one's times is printed: single runs on a shared VM move by
# a third from one minute to the next, the least of five by far less.
# Run from the repository root.
set -u
old=$1
new=$2
target=${3:-zbsched}
limit=${4:-30}
keep=${5:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -n "$keep" ] && mkdir -p "$keep"
# run NAME ZBSCHED MODEL GPUS: one search; leaves NAME.{t,json,out,err} in $tmp
run() {
    rm -f "$tmp/$1.json"
    (ulimit -t "$limit"; /usr/bin/time -f '%U %S' -o "$tmp/$1.t" "$2" search --mem 80G --model "$3" \
        --gpus "$4" --global-batch $(($4 * 2)) --target "$target" -q -o "$tmp/$1.json" \
        > "$tmp/$1.out" 2> "$tmp/$1.err")
}
# list NAME ZBSCHED MODEL GPUS: the job's --json, n_reused dropped, in NAME.list
list() {
    (ulimit -t "$limit"; "$2" search --mem 80G --model "$3" --gpus "$4" --global-batch $(($4 * 2)) \
        --target "$target" -q -o "$tmp/$1.listplan.json" --json 2>/dev/null) |
        python3 -c 'import json,sys; d=json.load(sys.stdin); d.pop("n_reused",None); print(json.dumps(d,sort_keys=True))' \
        > "$tmp/$1.list" 2>/dev/null
}
cpu() {
    if grep -q 'Command terminated by signal' "$tmp/$1.t" 2>/dev/null; then echo "over $limit"; return; fi
    awk 'END { printf "%.2f", $1 + $2 }' "$tmp/$1.t"
}
runs=${RUNS:-1}
# timed NAME ZBSCHED MODEL GPUS: run, RUNS times in all; NAME.best gets the least CPU time
timed() {
    run "$@"
    cpu "$1" > "$tmp/$1.best"
}
# again NAME ZBSCHED MODEL GPUS: one more run; NAME.best keeps the least
again() {
    run "$@"
    local t
    t=$(cpu "$1")
    case "$t" in over*) return ;; esac
    awk -v a="$t" -v b="$(cat "$tmp/$1.best")" 'BEGIN { print (b ~ /over/ || a + 0 < b + 0) ? a : b }' \
        > "$tmp/$1.best.new" && mv "$tmp/$1.best.new" "$tmp/$1.best"
}
[ "$runs" -gt 1 ] && echo "CPU seconds: the least of $runs runs each, OLD and NEW alternating"
printf '%-16s %5s %9s %9s  %s\n' model gpus old_cpu_s new_cpu_s plan
for model in 1.5B 6.2B 14.6B 28.3B llama3-8b llama3-70b intellect-1-10b llama3-405b; do
    for gpus in 8 64 512 1024; do
        timed old "$old" "$model" "$gpus"
        timed new "$new" "$model" "$gpus"
        for ((k = 1; k < runs; k++)); do
            again old "$old" "$model" "$gpus"
            again new "$new" "$model" "$gpus"
        done
        if [ -f "$tmp/old.json" ] && [ -f "$tmp/new.json" ]; then
            cmp -s "$tmp/old.json" "$tmp/new.json" && same=same || same=DIFF
        elif [ ! -f "$tmp/old.json" ] && [ ! -f "$tmp/new.json" ]; then
            if grep -q 'nothing fits' "$tmp/old.err" && cmp -s "$tmp/old.err" "$tmp/new.err"; then
                same="both-none (same line)"
            else
                same="no plan from either"
            fi
        else
            same="DIFF (one has no plan)"
        fi
        if [ "${JSON:-0}" = 1 ]; then
            list old "$old" "$model" "$gpus"
            list new "$new" "$model" "$gpus"
            same="$same, list $(python3 "$(dirname "$0")/search_list_diff.py" "$tmp/old.list" "$tmp/new.list" 2>/dev/null || echo DIFF)"
        fi
        printf '%-16s %5d %9s %9s  %s\n' "$model" "$gpus" "$(cat "$tmp/old.best")" "$(cat "$tmp/new.best")" "$same"
        if [ -n "$keep" ]; then
            for k in old new; do
                cp "$tmp/$k.out" "$keep/$k-$model-$gpus.out"
                [ -f "$tmp/$k.json" ] && cp "$tmp/$k.json" "$keep/$k-$model-$gpus.json"
            done
        fi
    done
done

#!/bin/bash
# bench_search_layouts.sh: CPU seconds of `zbsched search` per preset and
# GPU count (issue 27's speed goal: under 1 s each), for a target.
# Usage: bench/bench_search_layouts.sh [ZBSCHED] [TARGET] [TIMEOUT_S] [KEEP_DIR]
# Prints one line per job: model, GPUs, user+sys CPU seconds (or
# "over N" when it ran out of its CPU limit, ulimit -t), and the winner's
# line.  CPU time, not wall time: the machine may be shared.  Run from the
# repository root.  With KEEP_DIR, each job's plan file and table are
# kept there (MODEL-GPUS.json, MODEL-GPUS.out) so that two builds' winners
# can be compared file by file (cmp, diff).
set -u
zb=${1:-build/zbsched}
target=${2:-zbsched}
limit=${3:-60}
keep=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-16s %5s %9s  %s\n' model gpus cpu_s best
for model in 1.5B 6.2B 14.6B 28.3B llama3-8b llama3-70b intellect-1-10b llama3-405b; do
    for gpus in 8 64 512 1024; do
        batch=$((gpus * 2))
        (ulimit -t "$limit"; /usr/bin/time -f '%U %S' -o "$tmp/t" "$zb" search --mem 80G --model "$model" \
            --gpus "$gpus" --global-batch "$batch" --target "$target" -q -o "$tmp/p.json" \
            > "$tmp/out" 2> "$tmp/err")
        cpu=$(awk 'END { printf "%.2f", $1 + $2 }' "$tmp/t" 2>/dev/null)
        grep -q 'Command terminated by signal' "$tmp/t" 2>/dev/null && cpu="over $limit"
        best=$(grep '^best' "$tmp/out" | cut -c1-70)
        [ -z "$best" ] && best=$(tail -1 "$tmp/err" | cut -c1-70)
        printf '%-16s %5d %9s  %s\n' "$model" "$gpus" "$cpu" "$best"
        if [ -n "$keep" ]; then
            mkdir -p "$keep"
            cp "$tmp/out" "$keep/$model-$gpus.out"
            [ -f "$tmp/p.json" ] && mv "$tmp/p.json" "$keep/$model-$gpus.json"
        fi
        rm -f "$tmp/p.json"
    done
done

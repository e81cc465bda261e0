#!/bin/bash
# bench/zero1.sh: ZeRO-1 against the unsharded `--outer sync` in one
# process (issue 25): AdamW bytes per replica and wall seconds per step,
# for the tiny preset and a wider model, K = 2 replicas of a 2-stage zb-v
# schedule.  Runs alternate (sync, zero1, sync, zero1, ...) so that load
# on a shared machine hits both alike; prints the median of REPS runs.
#   bench/zero1.sh [build/zbsched] [REPS] [STEPS]
set -eu
ZB=${1:-build/zbsched}
REPS=${2:-3}
STEPS=${3:-20}
DATA=${ZBSCHED_DATA:-$(dirname "$0")/../../shared/data/tinyshakespeare.txt}
[ -r "$DATA" ] || DATA=/work/shared/data/tinyshakespeare.txt
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$ZB" gen zb-v -p 2 -m 4 -o "$T/zbv.json"
cat > "$T/wide.json" <<'JSON'
{"name":"wide-512","n_layers":4,"d_model":512,"n_heads":8,"n_kv_heads":4,"d_ff":1376,"vocab":65,
 "seq_len":64,"micro_batch":2,"swiglu":true,"rope_theta":10000,"dtype":"fp32"}
JSON
num() { grep -o "\"$2\":[0-9.e+-]*" "$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf "%-9s %-6s %14s %12s %14s  %s\n" model mode opt_bytes/rep s/step bytes_sent losses
for model in tiny "$T/wide.json"; do
    for mode in sync zero1; do : > "$T/$mode.times"; done
    for ((i = 0; i < REPS; i++)); do
        for mode in sync zero1; do
            extra=; [ $mode = zero1 ] && extra=--zero1
            "$ZB" run "$T/zbv.json" --data "$DATA" --model "$model" --steps "$STEPS" --replicas 2 \
                --outer sync --json -q $extra > "$T/$mode.json"
            awk -v s="$(num "$T/$mode.json" train_seconds)" -v n="$STEPS" \
                'BEGIN {printf "%.5f\n", s / n}' >> "$T/$mode.times"
        done
    done
    same=$([ "$(grep -o '"losses":[^]]*]' "$T/sync.json")" = "$(grep -o '"losses":[^]]*]' "$T/zero1.json")" ] \
           && echo "bit-identical" || echo "DIFFER")
    for mode in sync zero1; do
        printf "%-9s %-6s %14s %12s %14s  %s\n" "$(basename "$model" .json)" $mode \
            "$(num "$T/$mode.json" optimizer_bytes_per_replica)" "$(median < "$T/$mode.times")" \
            "$(num "$T/$mode.json" bytes_sent)" "$same"
    done
done

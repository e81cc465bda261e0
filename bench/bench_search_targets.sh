#!/usr/bin/env bash
# bench_search_targets.sh: each target's best plan for the default job
# (`zbsched search --mem 40G --target T`: Llama-3 8B, 8 x H100-80G, global
# batch 64) with its predicted time and its ratio to the zbsched target's,
# then the CPU time of each target's search, alternating with an older
# program when one is given (the machine is shared: compare side by side).
# Results go to bench/README.md, "search --target".
#
# usage: bench/bench_search_targets.sh ZBSCHED [OLD_ZBSCHED] [RUNS]
set -euo pipefail
new=${1:?usage: $0 ZBSCHED [OLD_ZBSCHED] [RUNS]}
old=${2:-}
runs=${3:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== each target's best (search --mem 40G --target T --json)"
printf '%-11s %-28s %-6s %-2s %-9s %-9s %-10s %s\n' target schedule "pp*dp" b rc peak "time ms" "x zbsched"
zb_ms=
for t in zbsched torch torchtitan megatron; do
  "$new" search --mem 40G --target "$t" --json -o "$tmp/$t-plan.json" -q > "$tmp/$t.json"
  python3 - "$tmp/$t.json" "$t" "${zb_ms:-0}" <<'EOF' > "$tmp/$t.row"
import json, sys
d = json.load(open(sys.argv[1]))
t = sys.argv[2]
best = next(x for x in d["targets"] if x["target"] == t)
zb = float(sys.argv[3]) or best["time_ms"]
print("%-11s %-28s %-6s %-2d %-9s %-9s %-10.1f %.3f" % (
    t, best["schedule"], "%dx%d" % (best["pipeline_parallel"], best["data_parallel"]), best["micro_batch"],
    best["recompute"], "%.2f GB" % (best["peak_bytes"] / 1e9), best["time_ms"], best["time_ms"] / zb))
EOF
  cat "$tmp/$t.row"
  [ -n "$zb_ms" ] || zb_ms=$(python3 -c "import json;d=json.load(open('$tmp/$t.json'));print(d['why']['winner_ms'])")
done

echo "== CPU time of each target's search, $runs runs each (user s; min, median, max)"
stats() { sort -n | awk '{v[NR]=$1} END {printf "%.2f, %.2f, %.2f", v[1], v[int((NR+1)/2)], v[NR]}'; }
for t in zbsched torch torchtitan megatron; do
  : > "$tmp/new.t"; : > "$tmp/old.t"
  for i in $(seq "$runs"); do
    /usr/bin/time -f "%U" -o "$tmp/one" "$new" search --mem 40G --target "$t" -o "$tmp/p.json" -q > /dev/null
    cat "$tmp/one" >> "$tmp/new.t"
    if [ -n "$old" ] && [ "$t" = zbsched ]; then
      /usr/bin/time -f "%U" -o "$tmp/one" "$old" search --mem 40G -o "$tmp/p.json" -q > /dev/null
      cat "$tmp/one" >> "$tmp/old.t"
    fi
  done
  printf '%-11s new %s' "$t" "$(stats < "$tmp/new.t")"
  if [ -s "$tmp/old.t" ]; then printf '   old (search --mem 40G) %s' "$(stats < "$tmp/old.t")"; fi
  printf '\n'
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/bin/bash
# tests/mpi/test_mpi_gpu_ranks.sh: `mpirun -np 2 zbsched run FILE --device
# cuda`, the GPU ranks (src/cli/run_gpu.c), end to end without a GPU: the
# stand-in module tests/mpi/fake_cuda_ranks.c gives every rank a rank
# backend over the mirrored CPU backend and carries the ranks' messages
# and collectives over MPI, so what runs is the CLI's GPU-rank path and
# the job loop (runtime/job.h) with the module's collectives:
#   - the losses are the one-process CPU run's, bit for bit;
#   - a stop at 3 of 6 with a checkpoint, resumed, continues exactly;
#   - a diverged run (--lr 1e6) exits 1 with one line and writes no
#     checkpoint (before, it trained on to exit 0 and saved that state);
#   - SIGTERM to one rank: every rank stops at the same step, the
#     checkpoint of that step is written, exit 143.
# Every mpirun is bounded by `timeout`.
set -u
ZB=${ZBSCHED:?ZBSCHED is the built program}
ROOT=${ZB_SOURCE_ROOT:?}
FAKE=${ZB_FAKE_CUDA_RANKS:?the stand-in module of GPU ranks}
DATA=$ROOT/../shared/data/tinyshakespeare.txt
[ -r "$DATA" ] || DATA=/work/shared/data/tinyshakespeare.txt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
NOLEAK=(env "LSAN_OPTIONS=${LSAN_OPTIONS:-}:detect_leaks=0")
MPIRUN=("${NOLEAK[@]}" timeout 120 mpirun -q --oversubscribe --mca btl self,tcp
        --mca btl_tcp_if_include lo -x ZBSCHED_CUDA_MODULE="$FAKE")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
losses() { grep -o '"losses":[^]]*]' "$1"; }

cat > "$T/narrow.json" <<'JSON'
{"name":"mpi-test","n_layers":4,"d_model":32,"n_heads":4,"n_kv_heads":2,"d_ff":64,"vocab":65,
 "seq_len":32,"micro_batch":2,"swiglu":true,"rope_theta":10000,"dtype":"fp32"}
JSON
# the same shape as the GPU computes it (the check of --device cuda wants
# bf16; the stand-in's backend is the CPU's, in fp32, whatever the label)
sed 's/"fp32"/"bf16"/' "$T/narrow.json" > "$T/narrow-bf16.json"
"$ZB" gen 1f1b -p 2 -m 4 -o "$T/s.json" || exit 1
run=(run "$T/s.json" --data "$DATA" --model "$T/narrow-bf16.json")

"$ZB" run "$T/s.json" --data "$DATA" --model "$T/narrow.json" --steps 6 --json -q > "$T/cpu.json" \
    || { fail "one-process CPU run"; exit 1; }
"${MPIRUN[@]}" -np 2 "$ZB" "${run[@]}" --steps 6 --device cuda --json -q > "$T/gpu.json" 2> "$T/gpu.err"
rc=$?
if [ $rc -eq 0 ] && [ -n "$(losses "$T/cpu.json")" ] && [ "$(losses "$T/cpu.json")" = "$(losses "$T/gpu.json")" ] \
   && grep -q '"transport":"nccl"' "$T/gpu.json" && grep -q '"val_loss":null' "$T/gpu.json"
then pass "GPU ranks: the losses of the one-process run, bit for bit"
else fail "GPU ranks: exit $rc, $(cat "$T/gpu.err") cpu $(losses "$T/cpu.json") gpu $(losses "$T/gpu.json")"; fi

"${MPIRUN[@]}" -np 2 "$ZB" "${run[@]}" --steps 6 --stop-at 3 --device cuda --checkpoint "$T/ck" -q \
    > /dev/null 2> "$T/ck1.err" \
  && "${MPIRUN[@]}" -np 2 "$ZB" "${run[@]}" --steps 6 --device cuda --checkpoint "$T/ck" --resume --json -q \
    > "$T/ck2.json" 2> "$T/ck2.err"
rc=$?
tail3() { losses "$1" | tr -d '[]"a-z:' | tr ',' '\n' | grep . | tail -3 | tr '\n' ' '; }
if [ $rc -eq 0 ] && grep -q '"first_step":3' "$T/ck2.json" && [ "$(tail3 "$T/cpu.json")" = "$(tail3 "$T/ck2.json")" ] \
   && [ "$(ls "$T/ck" | grep -c 'rank-[01].bin$')" = 2 ]
then pass "GPU ranks: checkpoint in parts at 3 of 6, resumed: the same losses"
else fail "GPU ranks resume: exit $rc, $(cat "$T/ck1.err" "$T/ck2.err") $(tail3 "$T/cpu.json") / $(tail3 "$T/ck2.json")"; fi

# the issue's done-when, on GPU ranks
"${MPIRUN[@]}" -np 2 "$ZB" "${run[@]}" --lr 1e6 --steps 12 --device cuda --checkpoint "$T/ckd" -q \
    > "$T/d.out" 2> "$T/d.err"
rc=$?
if [ $rc -eq 1 ] && [ "$(grep -c . "$T/d.err")" = 1 ] && grep -q "diverged" "$T/d.err" && [ ! -s "$T/d.out" ] \
   && [ ! -e "$T/ckd/checkpoint.parts.json" ]
then pass "GPU ranks, --lr 1e6: exit 1 with one line, no checkpoint ($(cat "$T/d.err"))"
else fail "GPU ranks diverged: exit $rc, $(cat "$T/d.err"), $(ls "$T/ckd" 2>&1)"; fi

# SIGTERM to rank 1 only: the ranks agree at a step boundary
"${MPIRUN[@]}" -np 2 "$ZB" "${run[@]}" --steps 100000 --device cuda --checkpoint "$T/cks" \
    > "$T/s.out" 2> "$T/s.err" &
job=$!
for i in $(seq 1 600); do grep -q "^step 3/" "$T/s.err" 2>/dev/null && break; sleep 0.1; done
# $job is timeout (env execs it); its child is mpirun, whose children are the ranks
mp=$(ps -o pid= --ppid "$job" | head -1 | tr -d ' ')
victim=$(ps -o pid= --ppid "${mp:-$job}" --sort=start_time | sed -n 2p | tr -d ' ')
[ -n "$victim" ] && kill -TERM "$victim"
wait "$job"
rc=$?
at=$(grep -o 'stopped by SIGTERM after step [0-9]*' "$T/s.err" | grep -o '[0-9]*$')
if [ -n "$victim" ] && [ $rc -eq 143 ] && [ -n "$at" ] \
   && grep -q "\"step\":[[:space:]]*$at," "$T/cks/checkpoint.parts.json"
then pass "GPU ranks, SIGTERM to rank 1: every rank stopped after step $at, its checkpoint written, exit 143"
else fail "GPU ranks SIGTERM: exit $rc, $(tail -3 "$T/s.err")"; fi

echo "$fails failed"
[ $fails -eq 0 ]

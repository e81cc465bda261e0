#!/bin/bash
# tests/mpi/test_mpi_pipeline.sh: pipeline ranks, `mpirun -np P zbsched run
# FILE`, one schedule device per rank over the MPI transport
# (runtime/mpi/transport_mpi.h), against the one-process run: the losses
# of every step and the final validation loss (a function of every
# parameter) must be the same bits, for every generator kind.
#
# Every mpirun is bounded by `timeout` (a hang fails); Open MPI runs as
# root with its allow-run-as-root variables, oversubscribed, over loopback.
set -u
ZB=${ZBSCHED:?ZBSCHED is the built program}
ROOT=${ZB_SOURCE_ROOT:?}
DATA=$ROOT/../shared/data/tinyshakespeare.txt
[ -r "$DATA" ] || DATA=/work/shared/data/tinyshakespeare.txt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Sanitizer builds: Open MPI keeps thousands of allocations of its
# dlopen'd components to process exit, where LeakSanitizer sees them under
# unloaded ("unknown") modules that no suppression can name.  The ranks
# therefore run without leak detection (AddressSanitizer's memory checks
# stay on); the in-process runs of the same tests keep it.
NOLEAK=(env "LSAN_OPTIONS=${LSAN_OPTIONS:-}:detect_leaks=0")
MPIRUN=("${NOLEAK[@]}" timeout 120 mpirun -q --oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
fields() { grep -o '"losses":[^]]*]\|"evals":[^]]*]\|"val_loss":[^,]*\|"rollbacks":[0-9]*' "$1" | tr '\n' ' '; }

cat > "$T/narrow.json" <<'JSON'
{"name":"mpi-test","n_layers":4,"d_model":32,"n_heads":4,"n_kv_heads":2,"d_ff":64,"vocab":65,
 "seq_len":32,"micro_batch":2,"swiglu":true,"rope_theta":10000,"dtype":"fp32"}
JSON
sed 's/"n_layers":4/"n_layers":8/' "$T/narrow.json" > "$T/narrow8.json"

same_as_one_process() { # name P model steps gen-args...
    local name=$1 p=$2 model=$3 steps=$4
    shift 4
    "$ZB" gen "$@" -p "$p" -o "$T/$name.json" || { fail "$name: gen $*"; return; }
    local args=(run "$T/$name.json" --data "$DATA" --model "$model" --steps "$steps" --json -q)
    "$ZB" "${args[@]}" > "$T/$name.one.json" || { fail "$name: one-process run"; return; }
    "${MPIRUN[@]}" -np "$p" "$ZB" "${args[@]}" > "$T/$name.mpi.json" 2> "$T/$name.err"
    local rc=$?
    if [ $rc -ne 0 ]; then fail "$name: mpirun exit $rc: $(head -3 "$T/$name.err")"; return; fi
    local a b
    a=$(fields "$T/$name.one.json"); b=$(fields "$T/$name.mpi.json")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "$name: bit-identical to the one-process run"
    else fail "$name: differs"; echo "  one process: $a"; echo "  mpi:         $b"; fi
    grep -q '"transport":"mpi"' "$T/$name.mpi.json" || fail "$name: not the MPI transport"
}
# the done-when runs: tiny, 8 steps, two ranks
same_as_one_process 1f1b 2 tiny 8 1f1b -m 4
same_as_one_process interleaved 2 tiny 8 interleaved --chunks 2 -m 4
same_as_one_process zb-h2 2 tiny 8 zb-h2 -m 4
same_as_one_process zb-v 2 tiny 8 zb-v -m 4
# four ranks, narrow model: V-shape (self links), interleaved, gpipe, zb-h1
same_as_one_process zb-v-p4 4 "$T/narrow8.json" 3 zb-v -m 8
same_as_one_process interleaved-p4 4 "$T/narrow8.json" 3 interleaved --chunks 2 -m 8
same_as_one_process gpipe-p2 2 "$T/narrow.json" 3 gpipe -m 4
same_as_one_process zb-h1-p2 2 "$T/narrow.json" 3 zb-h1 -m 4

# bytes per step: 2 (m per boundary) activations and gradients of
# batch x context x d floats, plus the post-validation norms (8 bytes each)
b=$(grep -o '"bytes_per_step":[0-9]*' "$T/1f1b.mpi.json" | cut -d: -f2)
# tiny: batch 4, context 64, d 64: 65536 bytes a message, 4 micro-batches
# each way over one boundary, and one norm each way
if [ "$b" = "$((2 * 4 * 65536 + 2 * 8))" ]; then pass "1f1b p=2: $b bytes per step"
else fail "1f1b p=2: bytes per step $b"; fi

# checkpoints: stop at 4 of 8 under mpirun (each rank writes its part,
# rank 0 the manifest), then resume under mpirun (each rank reads its own
# part) and, from a copy of the directory, in one process (the parts
# assembled); both must continue exactly as the uninterrupted one-process
# run.
"$ZB" gen zb-v -p 2 -m 4 -o "$T/v.json"
ck=(run "$T/v.json" --data "$DATA" --model "$T/narrow.json" --steps 8 --json -q)
"$ZB" "${ck[@]}" > "$T/ref.json"
"${MPIRUN[@]}" -np 2 "$ZB" "${ck[@]}" --stop-at 4 --checkpoint "$T/ckA" > "$T/ck1.json" 2> "$T/ck1.err" \
    && cp -r "$T/ckA" "$T/ckB" && cp -r "$T/ckA" "$T/ckC" && cp -r "$T/ckA" "$T/ckD" \
    && "${MPIRUN[@]}" -np 2 "$ZB" "${ck[@]}" --checkpoint "$T/ckA" --resume > "$T/ck2.json" 2> "$T/ck2.err" \
    && "$ZB" "${ck[@]}" --checkpoint "$T/ckB" --resume > "$T/ck3.json"
rc=$?
tail4() { grep -o '"losses":[^]]*]' "$1" | tr -d '[]"a-z:' | tr ',' '\n' | grep . | tail -4 | tr '\n' ' '; }
vl() { grep -o '"val_loss":[^,]*' "$1" | tail -1; }
rb() { grep -o '"rollbacks":[0-9]*' "$1"; }
# what a checkpoint directory may hold: the checkpoint (the manifest and
# the parts it names; checkpoint.bin, model.json and run.json of the
# older layout), and the writer's lock (runtime/ckpt_set.h)
stray() { ls "$1" | grep -Ev '^(checkpoint\.bin|checkpoint\.parts\.json|checkpoint\.[0-9a-f]{16}\.rank-[0-9]+\.bin|model\.json|run\.json|lock)$'; }
nparts() { ls "$1" | grep -Ec '^checkpoint\.[0-9a-f]{16}\.rank-[0-9]+\.bin$'; }
[ -n "$(stray "$T/ckA")" ] && fail "checkpoint: stray files in the directory: $(stray "$T/ckA")"
if [ $rc -eq 0 ] && [ "$(tail4 "$T/ref.json")" = "$(tail4 "$T/ck2.json")" ] \
   && [ "$(tail4 "$T/ref.json")" = "$(tail4 "$T/ck3.json")" ] \
   && [ "$(vl "$T/ref.json")" = "$(vl "$T/ck2.json")" ] && [ "$(vl "$T/ref.json")" = "$(vl "$T/ck3.json")" ] \
   && grep -q '"first_step":4' "$T/ck2.json" \
   && [ "$(rb "$T/ref.json")" = "$(rb "$T/ck2.json")" ] && [ "$(rb "$T/ref.json")" = "$(rb "$T/ck3.json")" ]
then pass "checkpoint at 4 of 8: resumed under mpirun and in one process, same bits and $(rb "$T/ck2.json")"
else fail "checkpoint resume: rc $rc; ref $(tail4 "$T/ref.json") mpi $(tail4 "$T/ck2.json") one $(tail4 "$T/ck3.json") $(cat "$T/ck1.err" "$T/ck2.err")"; fi
# the layout on disk: a part per rank, written by that rank, and the
# manifest; no checkpoint.bin.  After the resumed run's save, only the new
# set (the old one is pruned); after the one-process run's save, only its
# one part (every stage) and the manifest.
if [ "$(nparts "$T/ckC")" = 2 ] && [ -f "$T/ckC/checkpoint.parts.json" ] && [ ! -e "$T/ckC/checkpoint.bin" ] \
   && grep -q '"step":[[:space:]]*4' "$T/ckC/checkpoint.parts.json" \
   && [ "$(nparts "$T/ckA")" = 2 ] && grep -q '"step":[[:space:]]*8' "$T/ckA/checkpoint.parts.json" \
   && [ "$(nparts "$T/ckB")" = 1 ] && grep -q '"ranks":[[:space:]]*1,' "$T/ckB/checkpoint.parts.json" \
   && grep -q '"step":[[:space:]]*8' "$T/ckB/checkpoint.parts.json" && [ ! -e "$T/ckB/checkpoint.bin" ]
then pass "checkpoint files: 2 parts + manifest; the superseded set pruned; one process writes one part"
else fail "checkpoint files: $(ls "$T/ckC") / $(ls "$T/ckA") / $(ls "$T/ckB")"; fi

# `zbsched generate` reads the parts of a multi-process checkpoint (ckC,
# step 4) as it reads the one-process checkpoint.bin of the same step
# (ckE): the same text.
gen=(generate --prompt "ROMEO:" -n 20 --seed 3 -q)
"$ZB" "${ck[@]}" --stop-at 4 --checkpoint "$T/ckE" > /dev/null \
    && "$ZB" "${gen[@]}" --checkpoint "$T/ckC" > "$T/genC.txt" 2> "$T/genC.err" \
    && "$ZB" "${gen[@]}" --checkpoint "$T/ckE" > "$T/genE.txt"
rc=$?
if [ $rc -eq 0 ] && [ -s "$T/genC.txt" ] && cmp -s "$T/genC.txt" "$T/genE.txt"
then pass "generate from the parts: the same text as from the one-process checkpoint"
else fail "generate from parts: exit $rc, $(cat "$T/genC.err")"; fi

# A one-process checkpoint.bin resumes under mpirun (every rank reads it),
# with the same bits and the same rollback total as the uninterrupted run.
"${MPIRUN[@]}" -np 2 "$ZB" "${ck[@]}" --checkpoint "$T/ckE" --resume > "$T/ck9.json" 2> "$T/ck9.err"
rc=$?
if [ $rc -eq 0 ] && [ "$(tail4 "$T/ref.json")" = "$(tail4 "$T/ck9.json")" ] \
   && [ "$(vl "$T/ref.json")" = "$(vl "$T/ck9.json")" ] && [ "$(rb "$T/ref.json")" = "$(rb "$T/ck9.json")" ]
then pass "a one-process checkpoint resumed under mpirun: same bits, $(rb "$T/ck9.json")"
else fail "one-process checkpoint under mpirun: exit $rc, $(tail4 "$T/ck9.json") $(rb "$T/ck9.json") $(cat "$T/ck9.err")"; fi

# A rank that died between the parts of a later save leaves a part of a
# tag the manifest does not name: the checkpoint stays the previous one
# (resumes with the same bits), and the next save removes the orphan.
tagC=$(grep -o '"tag":[[:space:]]*"[0-9a-f]*"' "$T/ckC/checkpoint.parts.json" | grep -o '[0-9a-f]\{16\}')
cp "$T/ckC/checkpoint.$tagC.rank-1.bin" "$T/ckC/checkpoint.00000000deadbeef.rank-1.bin"
"${MPIRUN[@]}" -np 2 "$ZB" "${ck[@]}" --checkpoint "$T/ckC" --resume > "$T/ck4.json" 2> "$T/ck4.err"
rc=$?
if [ $rc -eq 0 ] && [ "$(tail4 "$T/ref.json")" = "$(tail4 "$T/ck4.json")" ] && [ "$(nparts "$T/ckC")" = 2 ] \
   && [ ! -e "$T/ckC/checkpoint.00000000deadbeef.rank-1.bin" ]
then pass "an orphan part of an unfinished save: ignored on resume, pruned by the next save"
else fail "orphan part: exit $rc, $(ls "$T/ckC"), $(cat "$T/ck4.err")"; fi

# A part the manifest names is missing: one line, naming it, from rank 0
# (every rank checks the whole set before loading its own part); every
# rank exits 1 (no hang), under mpirun and in one process.
rm "$T/ckD/checkpoint.$tagC.rank-1.bin"
"${MPIRUN[@]}" -np 2 "$ZB" "${ck[@]}" --checkpoint "$T/ckD" --resume > "$T/ck5.out" 2> "$T/ck5.err"
rc=$?
"$ZB" "${ck[@]}" --checkpoint "$T/ckD" --resume > "$T/ck6.out" 2> "$T/ck6.err"
rc6=$?
if [ $rc -eq 1 ] && [ "$(grep -c . "$T/ck5.err")" = 1 ] && grep -q "rank-1.bin: .*is missing" "$T/ck5.err" \
   && [ $rc6 -eq 1 ] && [ "$(grep -c . "$T/ck6.err")" = 1 ] && grep -q "rank-1.bin" "$T/ck6.err"
then pass "a missing part: one line naming it ($(cat "$T/ck5.err"))"
else fail "missing part: exit $rc / $rc6: $(cat "$T/ck5.err" "$T/ck6.err")"; fi

# A rank that cannot write its part (MPMD: rank 1 is given a directory
# that does not exist): every rank stops with one line naming it, and no
# manifest is committed.
"${MPIRUN[@]}" -np 1 "$ZB" "${ck[@]}" --checkpoint "$T/ckF" : -np 1 "$ZB" "${ck[@]}" \
    --checkpoint "$T/no/such/dir" > "$T/ckF.out" 2> "$T/ckF.err"
rc=$?
if [ $rc -eq 1 ] && [ "$(grep -c . "$T/ckF.err")" = 1 ] && grep -q "^zbsched: rank 1: .*no/such/dir" "$T/ckF.err" \
   && [ ! -e "$T/ckF/checkpoint.parts.json" ]
then pass "a part that cannot be written: one line naming the rank, nothing committed"
else fail "unwritable part: exit $rc, $(ls "$T/ckF"), $(cat "$T/ckF.err")"; fi

# run.json's resume checks apply under mpirun: rank 0 reads it, every
# rank exits 1 with its one line (another batch size); a different seed
# only gives a note.
"${MPIRUN[@]}" -np 2 "$ZB" "${ck[@]}" --checkpoint "$T/ckA" --resume --steps 12 --batch-size 1 \
    > "$T/ck7.out" 2> "$T/ck7.err"
rc=$?
if [ $rc -eq 1 ] && [ "$(grep -c . "$T/ck7.err")" = 1 ] && grep -q "batch size 2, this run has 1" "$T/ck7.err"
then pass "resume checks under mpirun: $(cat "$T/ck7.err")"
else fail "resume checks under mpirun: exit $rc: $(cat "$T/ck7.err")"; fi
"${MPIRUN[@]}" -np 2 "$ZB" run "$T/v.json" --data "$DATA" --model "$T/narrow.json" --steps 10 --checkpoint "$T/ckA" \
    --resume --seed 7 > "$T/ck8.out" 2> "$T/ck8.err"
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c 'resuming: --seed 7 differs' "$T/ck8.err")" = 1 ]
then pass "resume under mpirun with another seed: one note"
else fail "resume with another seed: exit $rc: $(cat "$T/ck8.err")"; fi

# one rank fails on its own (MPMD: rank 1 is given another batch size, so
# rank 0 receives a longer message than it expects): one line naming the
# rank, every rank ends, no hang.
"${MPIRUN[@]}" -np 1 "$ZB" run "$T/1f1b.json" --data "$DATA" --model "$T/narrow.json" --steps 3 \
    --batch-size 2 : -np 1 "$ZB" run "$T/1f1b.json" --data "$DATA" --model "$T/narrow.json" \
    --steps 3 --batch-size 4 > "$T/f.out" 2> "$T/f.err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -vc '^zbsched run:' "$T/f.err")" = 1 ] \
   && grep -q "^zbsched: rank 0 of 2: " "$T/f.err"
then pass "a failing rank: one line naming it, the job ends (exit $rc)"
else fail "a failing rank: exit $rc: $(cat "$T/f.err")"; fi

# SIGKILL of a rank while checkpoints are being written every 2 steps: the
# job ends (non-zero, no hang) and the last checkpoint is whole: the
# one-process run resumes from it.
"${MPIRUN[@]}" -np 2 "$ZB" run "$T/v.json" --data "$DATA" --model "$T/narrow.json" --steps 2000 \
    --eval-every 2 --eval-windows 4 --checkpoint "$T/ckK" > "$T/k.out" 2> "$T/k.err" &
job=$!
for i in $(seq 1 600); do grep -q "^step 9/" "$T/k.err" 2>/dev/null && break; sleep 0.1; done
mp=$(ps -o pid= --ppid "$job" | head -1 | tr -d ' ')
victim=$(ps -o pid= --ppid "${mp:-$job}" --sort=start_time | sed -n 2p | tr -d ' ')
[ -n "$victim" ] && kill -KILL "$victim"
wait "$job"
rc=$?
# --stop-at 1 behind the checkpoint: the run loads it (a torn or corrupt
# file would fail the checksum) and then says there is nothing to do.
"$ZB" run "$T/v.json" --data "$DATA" --model "$T/narrow.json" --steps 2000 --stop-at 1 \
    --checkpoint "$T/ckK" --resume -q > "$T/k2.out" 2> "$T/k2.err"
if [ -n "$victim" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ -f "$T/ckK/checkpoint.parts.json" ] \
   && [ -z "$(stray "$T/ckK")" ] \
   && grep -q "the checkpoint is already at step [1-9]" "$T/k2.err"
then pass "SIGKILL of rank 1: job ends (exit $rc), checkpoint intact: $(cat "$T/k2.err")"
else fail "SIGKILL with checkpoints: exit $rc, $(ls "$T/ckK"), $(cat "$T/k2.err")"; fi

# a schedule of 2 devices on 3 ranks: one line, non-zero
"${MPIRUN[@]}" -np 3 "$ZB" run "$T/1f1b.json" --data "$DATA" --steps 1 > "$T/e.out" 2> "$T/e.err"
rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c . "$T/e.err")" = 1 ] && grep -q "2 devices but the run has 3" "$T/e.err"
then pass "devices != ranks: one line"; else fail "devices != ranks: exit $rc: $(cat "$T/e.err")"; fi
"${MPIRUN[@]}" -np 2 "$ZB" run "$T/1f1b.json" --data "$DATA" --steps 1 --sync-optimizer \
    > "$T/e2.out" 2> "$T/e2.err"
rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c . "$T/e2.err")" = 1 ]; then pass "--sync-optimizer refused: one line"
else fail "--sync-optimizer: exit $rc: $(cat "$T/e2.err")"; fi

# The issue's done-when: a diverged run under mpirun exits 1 with one line
# and writes no checkpoint of the diverged state (before: exit 0 after 12
# steps at loss 1.5e13, and a checkpoint of that).  With evaluations every
# step, the checkpoint of step 1 (before the skips) is the one kept.
"${MPIRUN[@]}" -np 2 "$ZB" run "$T/1f1b.json" --data "$DATA" --model tiny --lr 1e6 --steps 12 \
    --checkpoint "$T/ckd" > "$T/d.out" 2> "$T/d.err"
rc=$?
if [ $rc -eq 1 ] && [ "$(grep -vc '^\(zbsched run:\|step \)' "$T/d.err")" = 1 ] \
   && grep -q "^zbsched: step 2: diverged" "$T/d.err" && [ ! -s "$T/d.out" ] \
   && [ ! -e "$T/ckd/checkpoint.parts.json" ]
then pass "--lr 1e6 under mpirun: exit 1, one line, no checkpoint"
else fail "--lr 1e6 under mpirun: exit $rc, $(ls "$T/ckd" 2>&1) $(cat "$T/d.err")"; fi
"${MPIRUN[@]}" -np 2 "$ZB" run "$T/1f1b.json" --data "$DATA" --model tiny --lr 1e6 --steps 12 \
    --eval-every 1 --eval-windows 2 --checkpoint "$T/ckd2" -q > "$T/d2.out" 2> "$T/d2.err"
rc=$?
if [ $rc -eq 1 ] && [ "$(grep -c . "$T/d2.err")" = 1 ] && grep -q "last checkpoint is kept (step 1)" "$T/d2.err" \
   && grep -q '"step":[[:space:]]*1,' "$T/ckd2/checkpoint.parts.json"
then pass "--lr 1e6 with evaluations every step: the checkpoint of step 1 kept"
else fail "--lr 1e6 eval-every 1: exit $rc, $(cat "$T/d2.err")"; fi

# The skip rules hear every rank's verdict: with the loss rule off, two
# steps in a row skipped for a non-finite gradient stop the ranks at the
# step, and with the line, of the one-process run.
"$ZB" run "$T/1f1b.json" --data "$DATA" --model tiny --lr 1e6 --steps 8 --max-loss-factor 0 \
    --max-skipped 2 --eval-windows 2 -q > /dev/null 2> "$T/k1.err"
"${MPIRUN[@]}" -np 2 "$ZB" run "$T/1f1b.json" --data "$DATA" --model tiny --lr 1e6 --steps 8 \
    --max-loss-factor 0 --max-skipped 2 --eval-windows 2 -q > "$T/k2.out" 2> "$T/k2.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "^zbsched: step [0-9]*: diverged: 2 steps in a row were skipped" "$T/k1.err" \
   && [ "$(grep '^zbsched' "$T/k2.err")" = "$(cat "$T/k1.err")" ] && [ ! -s "$T/k2.out" ]
then pass "skips under mpirun: $(cat "$T/k2.err" | grep '^zbsched' | cut -c1-60)"
else fail "skips under mpirun: exit $rc, one process: $(cat "$T/k1.err"), mpirun: $(cat "$T/k2.err")"; fi

# SIGTERM to rank 1 only: the ranks agree at the next step boundary, the
# checkpoint of that step is written, exit 143; the resumed run continues
# with the losses of the run never stopped.
"${MPIRUN[@]}" -np 2 "$ZB" run "$T/v.json" --data "$DATA" --model "$T/narrow.json" --steps 100000 \
    --eval-windows 4 --checkpoint "$T/ckS" -q > "$T/st.out" 2> "$T/st.err" &
job=$!
for i in $(seq 1 600); do [ -s "$T/ckS/lock" ] && break; sleep 0.1; done
sleep 2
mp=$(ps -o pid= --ppid "$job" | head -1 | tr -d ' ')
victim=$(ps -o pid= --ppid "${mp:-$job}" --sort=start_time | sed -n 2p | tr -d ' ')
[ -n "$victim" ] && kill -TERM "$victim"
wait "$job"
rc=$?
at=$(grep -o 'stopped by SIGTERM after step [0-9]*' "$T/st.err" | grep -o '[0-9]*$')
if [ -n "$victim" ] && [ $rc -eq 143 ] && [ "$(grep -c . "$T/st.err")" = 1 ] && [ -n "$at" ] \
   && grep -q "\"step\":[[:space:]]*$at," "$T/ckS/checkpoint.parts.json" && [ "$(nparts "$T/ckS")" = 2 ]
then
    "$ZB" run "$T/v.json" --data "$DATA" --model "$T/narrow.json" --steps 100000 --stop-at $((at + 2)) \
        --eval-windows 4 --json -q > "$T/st.ref"
    "${MPIRUN[@]}" -np 2 "$ZB" run "$T/v.json" --data "$DATA" --model "$T/narrow.json" --steps 100000 \
        --stop-at $((at + 2)) --eval-windows 4 --checkpoint "$T/ckS" --resume --json -q > "$T/st.res"
    last2() { grep -o '"losses":[^]]*]' "$1" | tr -d '[]"a-z:' | tr ',' '\n' | grep . | tail -2 | tr '\n' ' '; }
    if [ -n "$(last2 "$T/st.res")" ] && [ "$(last2 "$T/st.ref")" = "$(last2 "$T/st.res")" ]
    then pass "SIGTERM to rank 1: both ranks stopped after step $at with its checkpoint (exit 143); resumed, the same losses"
    else fail "SIGTERM resume: $(last2 "$T/st.ref") / $(last2 "$T/st.res")"; fi
else fail "SIGTERM to rank 1: exit $rc, $(cat "$T/st.err"), $(ls "$T/ckS")"; fi

# pipeline ranks whose backend holds only their own stages (backend_rank.h,
# what a GPU rank uses over the CUDA backend), over the CPU backend
if [ -n "${MPI_RANK_BACKEND_CHECK:-}" ]; then
    out=$(ZB_SOURCE_ROOT=$ROOT "${MPIRUN[@]}" -np 2 "$MPI_RANK_BACKEND_CHECK" 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q "^ok:"; then pass "rank backend: $(echo "$out" | grep '^ok:')"
    else fail "rank backend: exit $rc: $(echo "$out" | head -5)"; fi
fi

echo "$fails failed"
[ $fails -eq 0 ]

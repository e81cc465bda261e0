#!/bin/bash
# tests/mpi/test_mpi_vocab.sh: vocabulary-parallel plans ("+vocab-1",
# "+vocab-2") as pipeline ranks, `mpirun -np P zbsched run FILE`: the
# passes' messages go over MPI (runtime/mpi/vocab_link_mpi.h), and the
# losses of every step and the final validation loss (a function of every
# parameter, the head's included) must be the same bits as one process's.
# Islands over MPI (2 replicas of a 2-rank pipeline; a replica per rank)
# equal the islands in one process.  Then a checkpoint written by the
# ranks resumes in one process to the same bits, and `generate` reads it.
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
NOLEAK=(env "LSAN_OPTIONS=${LSAN_OPTIONS:-}:detect_leaks=0") # as test_mpi_pipeline.sh
MPIRUN=("${NOLEAK[@]}" timeout 120 mpirun -q --oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
fields() { grep -o '"losses":[^]]*]\|"evals":[^]]*]\|"val_loss":[^,]*\|"rollbacks":[0-9]*' "$1" | tr '\n' ' '; }

same_as_one_process() { # name P steps gen-args...
    local name=$1 p=$2 steps=$3
    shift 3
    "$ZB" gen "$@" -p "$p" --vocab parallel -o "$T/$name.json" || { fail "$name: gen $*"; return; }
    local args=(run "$T/$name.json" --data "$DATA" --model tiny --steps "$steps" --json -q)
    "$ZB" "${args[@]}" > "$T/$name.one.json" || { fail "$name: one-process run"; return; }
    "${MPIRUN[@]}" -np "$p" "$ZB" "${args[@]}" > "$T/$name.mpi.json" 2> "$T/$name.err"
    local rc=$?
    if [ $rc -ne 0 ]; then fail "$name: mpirun exit $rc: $(head -3 "$T/$name.err")"; return; fi
    local a b
    a=$(fields "$T/$name.one.json"); b=$(fields "$T/$name.mpi.json")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "$name: bit-identical to the one-process run"
    else fail "$name: differs"; echo "  one process: $a"; echo "  mpi:         $b"; fi
}
# the done-when run: a +vocab-1 zb-v plan on two ranks
same_as_one_process zb-v-vocab1 2 10 zb-v -m 4
same_as_one_process zb-v-vocab2 2 6 zb-v -m 4 --vocab-variant 2
same_as_one_process 1f1b-vocab2-p3 3 4 1f1b -m 6 --vocab-variant 2

# islands over MPI: 2 replicas of a 2-rank pipeline (4 ranks), and a
# replica per rank, against the islands in one process
islands() { # name NP sched outer wire
    local name=$1 np=$2 sched=$3 outer=$4 wire=$5
    local args=(run "$T/$sched.json" --data "$DATA" --model tiny --steps 6 --replicas 2
                --outer "$outer" --allreduce "$wire" --inner-steps 2 --eval-every 3 --json -q)
    "$ZB" "${args[@]}" > "$T/$name.in.json" || { fail "$name: in-process islands"; return; }
    "${MPIRUN[@]}" -np "$np" "$ZB" "${args[@]}" > "$T/$name.mpi.json" 2> "$T/$name.err" \
        || { fail "$name: mpirun: $(head -3 "$T/$name.err")"; return; }
    local a b
    a=$(fields "$T/$name.in.json"); b=$(fields "$T/$name.mpi.json")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "$name: bit-identical to the in-process islands"
    else fail "$name: differs"; echo "  in-process: $a"; echo "  mpi:        $b"; fi
}
islands islands-sync-k2p2 4 zb-v-vocab1 sync int8
islands islands-diloco-k2 2 zb-v-vocab2 diloco fp32

# a checkpoint of the ranks (stopped after step 3 of 5): the whole model,
# resumed in one process to the one-process run's steps 4 and 5
"$ZB" gen 1f1b -p 2 -m 4 --vocab parallel -o "$T/ck.json" || fail "ck: gen"
args=(run "$T/ck.json" --data "$DATA" --model tiny --json -q --steps 5)
"${MPIRUN[@]}" -np 2 "$ZB" "${args[@]}" --stop-at 3 --checkpoint "$T/ck" > /dev/null \
    2> "$T/ck.err" || fail "ck: mpirun with --checkpoint: $(head -3 "$T/ck.err")"
"$ZB" "${args[@]}" > "$T/ck.full.json" || fail "ck: one process, 5 steps"
"$ZB" "${args[@]}" --checkpoint "$T/ck" --resume > "$T/ck.resumed.json" 2> "$T/ck.rerr" \
    || fail "ck: resume in one process: $(head -3 "$T/ck.rerr")"
full=$(grep -o '"losses":[^]]*]' "$T/ck.full.json" | sed 's/.*\[//; s/\]//' | cut -d, -f4-5)
res=$(grep -o '"losses":[^]]*]' "$T/ck.resumed.json" | sed 's/.*\[//; s/\]//')
if [ -n "$full" ] && [ "$full" = "$res" ]; then
    pass "ck: resumed in one process, steps 4-5 the same bits"
else
    fail "ck: resumed losses differ: full run's steps 4-5 [$full], resumed [$res]"
fi
"$ZB" generate --checkpoint "$T/ck" --prompt "ROMEO:" --tokens 8 > "$T/gen.txt" 2> "$T/gen.err" \
    && [ -s "$T/gen.txt" ] && pass "ck: generate reads it" \
    || fail "ck: generate: $(head -3 "$T/gen.err")"

if [ $fails -ne 0 ]; then echo "$fails failed"; exit 1; fi
echo "all passed"

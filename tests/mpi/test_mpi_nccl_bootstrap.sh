#!/bin/bash
# tests/mpi/test_mpi_nccl_bootstrap.sh: `mpirun -np 2 zbsched run FILE
# --device cuda`'s NCCL bootstrap (src/cli/cmd_run_mpi.c,
# cli_mpi_nccl_comm) on a machine without a GPU, through the stand-in CUDA
# module (tests/runtime/fake_cuda_module.c, FAKE_CUDA_MODE=mpi*), which
# sees 8 GPUs and stops at the communicator:
#   - rank 0 alone makes the id, MPI_Bcast carries it, and every rank
#     hands the same 128 bytes to comm_create_from_id;
#   - rank 0 failing to make the id: every rank ends with one line (rank 0
#     its own reason, the others "rank 0 could not make the NCCL id"),
#     no hang;
#   - a module without the id functions (interface version 1): one line
#     per rank, before MPI is started.
# What this cannot test is NCCL itself: ncclCommInitRank with that id
# needs two GPUs (docs/mpi.md, "NCCL under mpirun").
set -u
ZB=${ZBSCHED:?ZBSCHED is the built program}
ROOT=${ZB_SOURCE_ROOT:?}
FAKE=${ZB_FAKE_CUDA_MODULE:?the stand-in CUDA module}
DATA=$ROOT/../shared/data/tinyshakespeare.txt
[ -r "$DATA" ] || DATA=/work/shared/data/tinyshakespeare.txt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
NOLEAK=(env "LSAN_OPTIONS=${LSAN_OPTIONS:-}:detect_leaks=0")
MPIRUN=("${NOLEAK[@]}" timeout 60 mpirun -q --oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }

"$ZB" gen 1f1b -p 2 -m 4 -o "$T/s.json" || exit 1
run_cuda() { # mode name
    "${MPIRUN[@]}" -np 2 -x ZBSCHED_CUDA_MODULE="$FAKE" -x FAKE_CUDA_MODE="$1" -x FAKE_NCCL_LOG="$T/$2" \
        "$ZB" run "$T/s.json" --data "$DATA" --model tiny --steps 1 --device cuda -q \
        > "$T/$2.out" 2> "$T/$2.err"
}

run_cuda mpi id
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ -f "$T/id.made" ] && [ -s "$T/id.0" ] \
   && cmp -s "$T/id.0" "$T/id.1" && grep -q "^fake-nccl-id of pid [0-9]" "$T/id.0" \
   && [ "$(grep -c "no NCCL here" "$T/id.err")" = 2 ]
then pass "the NCCL id: made by rank 0 once, the same bytes on both ranks ($(cat "$T/id.1"))"
else fail "NCCL id over MPI: exit $rc, $(ls "$T"), $(cat "$T/id.err")"; fi

run_cuda mpi-noid noid
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c . "$T/noid.err")" = 2 ] \
   && grep -q "^zbsched: rank 0 of 2: fake module: ncclGetUniqueId failed" "$T/noid.err" \
   && grep -q "^zbsched: rank 1 of 2: rank 0 could not make the NCCL id" "$T/noid.err" \
   && [ ! -e "$T/noid.0" ] && [ ! -e "$T/noid.1" ]
then pass "rank 0 cannot make the id: every rank ends with one line"
else fail "id failure: exit $rc, $(cat "$T/noid.err")"; fi

run_cuda mpi-v1 v1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c "cannot bootstrap NCCL from an id" "$T/v1.err")" = 2 ] \
   && [ "$(grep -c . "$T/v1.err")" = 2 ]
then pass "a module without the id functions: one line per rank"
else fail "version-1 module: exit $rc, $(cat "$T/v1.err")"; fi

echo "$fails failed"
[ $fails -eq 0 ]

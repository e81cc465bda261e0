#!/bin/bash
# tests/mpi/test_nompi_refusal.sh: a build without MPI, started as if by
# mpirun (Open MPI's rank variables), refuses to train with one line from
# rank 0 and none from the others, instead of every rank training alone.
set -u
ZB=${ZBSCHED:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$ZB" gen 1f1b -p 2 -m 2 -o "$T/s.json" || exit 1
OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 "$ZB" run "$T/s.json" --steps 1 2> "$T/r0.err"
rc0=$?
OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 "$ZB" run "$T/s.json" --steps 1 2> "$T/r1.err"
rc1=$?
if [ $rc0 -ne 0 ] && [ $rc1 -ne 0 ] && [ "$(grep -c . "$T/r0.err")" = 1 ] \
   && grep -q "built without MPI" "$T/r0.err" && [ ! -s "$T/r1.err" ]; then
    echo "ok: refused, one line from rank 0"
else
    echo "FAIL: rc $rc0/$rc1: $(cat "$T/r0.err") | $(cat "$T/r1.err")"
    exit 1
fi

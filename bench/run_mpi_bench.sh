#!/bin/bash
# bench/run_mpi_bench.sh BUILD [STEPS]: the cost of the MPI transport
# against the in-process one for the same schedule (bench/README.md, "mpi").
#
# For each schedule: `zbsched run` in one process (device threads, pointer
# hand-off) and `mpirun -np P zbsched run` (one device per rank, messages
# copied through Open MPI over loopback TCP), both with one kernel thread
# per device, same seed and steps.  Prints the mean step time of each and
# the bytes per step the MPI run put on the wire; then the same for the
# islands (2 replicas, DiLoCo H=5, int8, then EDiT H=5, int8) in one
# process, on 2 ranks and on 2 x 2 ranks.  The losses are checked to be the same bits first.
set -eu
B=${1:-build}
STEPS=${2:-20}
ZB=$B/zbsched
DATA=${DATA:-../shared/data/tinyshakespeare.txt}
MODEL=${MODEL:-tiny}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(timeout 600 mpirun -q --oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
num() { grep -o "\"$2\":[0-9.e+-]*" "$1" | head -1 | cut -d: -f2; }
losses() { grep -o '"losses":[^]]*]' "$1"; }

echo "model $MODEL, $STEPS steps, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
printf '%-22s %12s %12s %8s %14s\n' schedule "in-proc ms" "mpi ms" ratio "bytes/step"
for g in "1f1b -p 2 -m 8" "zb-h2 -p 2 -m 8" "zb-v -p 2 -m 8" "interleaved -p 2 -m 8 --chunks 2"; do
    set -- $g
    "$ZB" gen $g -o "$T/s.json"
    args=(run "$T/s.json" --data "$DATA" --model "$MODEL" --steps "$STEPS" --threads 1 --json -q)
    "$ZB" "${args[@]}" > "$T/one.json"
    "${MPIRUN[@]}" -np 2 "$ZB" "${args[@]}" > "$T/mpi.json"
    [ "$(losses "$T/one.json")" = "$(losses "$T/mpi.json")" ] || { echo "$1: losses differ"; exit 1; }
    a=$(num "$T/one.json" train_seconds); b=$(num "$T/mpi.json" train_seconds)
    printf '%-22s %12.1f %12.1f %8.2f %14s\n' "$1 p=2 m=8" "$(echo "$a*1000/$STEPS" | bc -l)" \
        "$(echo "$b*1000/$STEPS" | bc -l)" "$(echo "$b/$a" | bc -l)" "$(num "$T/mpi.json" bytes_per_step)"
done

echo
printf '%-34s %12s %14s\n' "islands: 2 replicas of 1f1b p=2" "ms/step" "outer bytes"
"$ZB" gen 1f1b -p 2 -m 8 -o "$T/s.json"
iargs=(run "$T/s.json" --data "$DATA" --model "$MODEL" --steps "$STEPS" --threads 1 --replicas 2
       --outer diloco --inner-steps 5 --allreduce int8 --json -q)
"$ZB" "${iargs[@]}" > "$T/i1.json"
"${MPIRUN[@]}" -np 2 "$ZB" "${iargs[@]}" > "$T/i2.json"
"${MPIRUN[@]}" -np 4 "$ZB" "${iargs[@]}" > "$T/i4.json"
for f in i2 i4; do
    [ "$(losses "$T/i1.json")" = "$(losses "$T/$f.json")" ] || { echo "islands $f: losses differ"; exit 1; }
done
for f in "i1 one process" "i2 2 ranks (replica per rank)" "i4 4 ranks (2 x 2 pipeline)"; do
    set -- $f
    printf '%-34s %12.1f %14s\n' "${f#* }" "$(echo "$(num "$T/$1.json" train_seconds)*1000/$STEPS" | bc -l)" \
        "$(num "$T/$1.json" bytes_sent)"
done

# the same islands with EDiT (norms all-gathered, weighted all-reduce)
echo
printf '%-34s %12s %14s\n' "EDiT: 2 replicas of 1f1b p=2" "ms/step" "outer bytes"
eargs=("${iargs[@]/diloco/edit}")
"$ZB" "${eargs[@]}" > "$T/e1.json"
"${MPIRUN[@]}" -np 2 "$ZB" "${eargs[@]}" > "$T/e2.json"
"${MPIRUN[@]}" -np 4 "$ZB" "${eargs[@]}" > "$T/e4.json"
for f in e2 e4; do
    [ "$(losses "$T/e1.json")" = "$(losses "$T/$f.json")" ] || { echo "EDiT $f: losses differ"; exit 1; }
done
for f in "e1 one process" "e2 2 ranks (replica per rank)" "e4 4 ranks (2 x 2 pipeline)"; do
    set -- $f
    printf '%-34s %12.1f %14s\n' "${f#* }" "$(echo "$(num "$T/$1.json" train_seconds)*1000/$STEPS" | bc -l)" \
        "$(num "$T/$1.json" bytes_sent)"
done

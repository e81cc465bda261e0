#!/bin/bash
# tests/mpi/test_mpi_zero1.sh: `run --replicas K --outer sync --zero1`
# under mpirun (runtime/mpi/mpi_zero1.h) against one process, bit for bit:
#
#   - 2 replicas x 2 pipeline ranks (-np 4) with ZeRO-1 equal the in-process
#     ZeRO-1 run and the in-process unsharded sync run (losses, val loss,
#     and the bytes of the two ZeRO-1 runs), with a clip the norm crosses
#     so that post-validation rolls back;
#   - 3 replicas (-np 3) equal the unsharded in-process run too, which the
#     unsharded fp32 sync across processes does not promise (MPI_Allreduce
#     orders its sums its own way for K >= 3; the ZeRO-1 ring keeps ours);
#   - each replica's optimizer bytes are half (K = 2) of the unsharded run's.
#
# Every mpirun runs under `timeout` (a hang fails the test).
set -u
ZB=${ZBSCHED:?ZBSCHED is the built program}
ROOT=${ZB_SOURCE_ROOT:?}
DATA=$ROOT/../shared/data/tinyshakespeare.txt
[ -r "$DATA" ] || DATA=/work/shared/data/tinyshakespeare.txt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
NOLEAK=(env "LSAN_OPTIONS=${LSAN_OPTIONS:-}:detect_leaks=0")
MPIRUN=("${NOLEAK[@]}" timeout 300 mpirun --allow-run-as-root --oversubscribe
        --mca btl self,tcp --mca btl_tcp_if_include lo -q)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }

# the bits that must match (cJSON prints a double's shortest round trip)
losses() { grep -o '"losses":[^]]*]\|"val_loss":[^,}]*' "$1" | tr '\n' ' '; }
field() { grep -o "\"$2\":[0-9]*" "$1" | head -1 | cut -d: -f2; }

cat > "$T/model.json" <<'JSON'
{"name":"mpi-test","n_layers":4,"d_model":32,"n_heads":4,"n_kv_heads":2,"d_ff":64,"vocab":65,
 "seq_len":32,"micro_batch":2,"swiglu":true,"rope_theta":10000,"dtype":"fp32"}
JSON
"$ZB" gen zb-v -p 2 -m 4 -o "$T/zbv.json" || exit 1
"$ZB" gen 1f1b -p 2 -m 4 -o "$T/1f1b.json" || exit 1

check() { # name sched K NP
    local name=$1 sched=$2 k=$3 np=$4
    local args=(run "$T/$sched" --data "$DATA" --model "$T/model.json" --steps 10 --replicas "$k"
                --outer sync --clip 0.5 --eval-every 5 --json -q)
    "$ZB" "${args[@]}" > "$T/$name.sync.json" || { fail "$name: in-process sync run"; return; }
    "$ZB" "${args[@]}" --zero1 > "$T/$name.in.json" || { fail "$name: in-process ZeRO-1 run"; return; }
    "${MPIRUN[@]}" -np "$np" "$ZB" "${args[@]}" --zero1 > "$T/$name.mpi.json" 2> "$T/$name.err"
    local rc=$?
    if [ $rc -ne 0 ]; then fail "$name: mpirun exit $rc: $(head -3 "$T/$name.err")"; return; fi
    local a b c
    a=$(losses "$T/$name.sync.json"); b=$(losses "$T/$name.in.json"); c=$(losses "$T/$name.mpi.json")
    if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$b" = "$c" ]; then
        pass "$name: ZeRO-1 under mpirun -np $np = in process = unsharded sync, bit for bit"
    else
        fail "$name: losses differ"; echo "  sync:        $a"; echo "  zero1:       $b"; echo "  zero1 mpi:   $c"
    fi
    [ "$(field "$T/$name.in.json" bytes_sent)" = "$(field "$T/$name.mpi.json" bytes_sent)" ] \
        || fail "$name: bytes_sent differ between the in-process and the MPI ZeRO-1 runs"
    local whole half
    whole=$(field "$T/$name.sync.json" optimizer_bytes_per_replica)
    half=$(field "$T/$name.mpi.json" optimizer_bytes_per_replica)
    if [ -n "$whole" ] && [ -n "$half" ] && [ $((half * k)) -le $((whole + 1024)) ] \
        && [ $((half * k)) -ge $((whole - 1024)) ]; then
        pass "$name: optimizer bytes per replica $half of $whole (1/$k)"
    else
        fail "$name: optimizer bytes per replica '$half' is not 1/$k of '$whole'"
    fi
}
check zbv-k2p2 zbv.json 2 4
check 1f1b-k3 1f1b.json 3 3

# a bad combination is one line and a non-zero exit on every rank, no hang
"${MPIRUN[@]}" -np 2 "$ZB" run "$T/1f1b.json" --data "$DATA" --model "$T/model.json" --steps 2 \
    --replicas 2 --outer diloco --zero1 > "$T/bad.out" 2> "$T/bad.err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q -- "--zero1" "$T/bad.err"; then
    pass "--zero1 with diloco refused"
else
    fail "--zero1 with diloco: exit $rc: $(head -2 "$T/bad.err")"
fi

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"

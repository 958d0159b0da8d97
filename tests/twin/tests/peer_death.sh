#!/bin/bash
# peer_death.sh - kill -9 of one of 4 ranks training on twin GPUs through the NCCL twin
# (suite twin): the 3 survivors exit 5 within 10 s, each naming rank 3, none left hanging in a
# CUDA or NCCL call. Four one-rank launchers (--nnodes 4) on twin GPUs 0-3 of this host, so
# that each survivor's own exit code is seen (one launcher for all would stop the others).
set -u
DDPTRAIN=${DDPTRAIN:?} DDPTRAIN_TWIN=${DDPTRAIN_TWIN:?}
work=$(mktemp -d)
pids=()
# shellcheck disable=SC2317 # called by the trap
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT
cd "$work" || exit 1
"$DDPTRAIN" data synth -o d.h5 --shape 64 --classes 4 --train 4000 --test 10 >/dev/null || exit 1
cat > j.ini <<INI
[data]
file = d.h5
test =
batch_size = 4
[model]
layers = linear(32), relu, linear(4)
[train]
epochs = 1000
log_every = 5
[dist]
timeout_s = 60
INI
# shellcheck source=tests/hold_port.sh
. "${DDP_SRC:?}/tests/hold_port.sh"
hold_ports 1 || { echo "FAIL: cannot hold a port"; exit 1; }
port=$HELD_PORTS
for r in 0 1 2 3; do
    CUDA_VISIBLE_DEVICES=$r "$DDPTRAIN_TWIN" launch --nnodes 4 --node-rank $r --nproc-per-node 1 \
        --master-addr 127.0.0.1 --master-port "$port" j.ini --set job.output=out \
        > r$r.txt 2>&1 &
    pids+=($!)
done
deadline=$((SECONDS + 120))
while [ ! -s out/metrics.jsonl ] && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
[ -s out/metrics.jsonl ] || { echo "FAIL: training did not start"; tail -3 r*.txt; exit 1; }
victim=$(pgrep -P "${pids[3]}" | head -1)
[ -n "$victim" ] || { echo "FAIL: rank 3's process not found"; exit 1; }
t0=$(date +%s.%N)
kill -9 "$victim"
fail=0
for r in 0 1 2; do
    wait "${pids[$r]}"
    rc=$?
    took=$(echo "$(date +%s.%N) - $t0" | awk '{printf "%.1f", $1 - $3}' )
    line=$(grep -m1 "rank 3" r$r.txt)
    if [ $rc = 5 ] && [ -n "$line" ] && awk "BEGIN{exit !($took <= 10)}"; then
        echo "ok   rank $r exit 5 within ${took}s: $line"
    else
        echo "FAIL rank $r: exit $rc after ${took}s:"; tail -3 r$r.txt; fail=1
    fi
done
exit $fail

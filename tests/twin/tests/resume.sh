#!/bin/bash
# resume.sh - SIGUSR1 on 4 twin GPUs (suite twin): `ddptrain-twin launch` forwards it, every
# rank agrees at a step boundary (with the device step: a log step; also checked with
# log_every = 5 on 2 GPUs), rank 0 saves a checkpoint, exit 75; the checkpoint resumes
#  - on 4 twin GPUs: parameters bit-identical to the uninterrupted 4-GPU run (the NCCL twin
#    sums in rank order, so the arithmetic is the same);
#  - on the CPU backend with one rank and the same global batch: within 1e-5 relative of the
#    uninterrupted CPU run (the sums of 4 ranks and of one are rounded differently).
set -u
DDPTRAIN=${DDPTRAIN:?} DDPTRAIN_TWIN=${DDPTRAIN_TWIN:?} DDP_SRC=${DDP_SRC:?}
PY=/usr/bin/python3
$PY -c 'import h5py, numpy' 2>/dev/null || { echo "python3-h5py needed"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fail=0
"$DDPTRAIN" data synth -o d.h5 --shape 1,8,8 --classes 10 --train 2400 --test 10 --seed 3 \
    >/dev/null || exit 1
cat > j.ini <<INI
[job]
seed = 5
[data]
file = d.h5
test =
batch_size = 12
[model]
layers = flatten, linear(32), relu, linear(16), relu, linear(10)
[optim]
name = sgd
lr = 0.05
momentum = 0.9
[train]
epochs = 1
log_every = 1
INI
cmp_h5() { $PY "$DDP_SRC/tests/compare_h5.py" "$@"; }

timeout 300 "$DDPTRAIN_TWIN" launch --nproc-per-node 4 j.ini --set job.output=full4 \
    > full4.log 2>&1 || { echo "FAIL: uninterrupted 4-GPU run"; tail -5 full4.log; exit 1; }
"$DDPTRAIN" j.ini --set data.batch_size=48 --set job.output=fullcpu > fullcpu.log 2>&1 ||
    { echo "FAIL: uninterrupted CPU run"; exit 1; }

# SIGUSR1 to the launcher once 15 steps are logged (deadline 120 s; no `timeout` in between:
# it would not forward SIGUSR1)
"$DDPTRAIN_TWIN" launch --nproc-per-node 4 j.ini --set job.output=int \
    > int.log 2>&1 &
pid=$!
deadline=$((SECONDS + 120))
while [ "$(cat int/metrics.jsonl 2>/dev/null | wc -l)" -lt 15 ] && kill -0 $pid 2>/dev/null &&
      [ $SECONDS -lt $deadline ]; do
    sleep 0.05
done
kill -USR1 $pid
wait $pid
rc=$?
at=$(sed -n 's/.*stopped by signal .* at step \([0-9]*\).*/\1/p' int.log | head -1)
if [ $rc != 75 ] || [ -z "$at" ] || [ "$at" -ge 50 ]; then
    echo "FAIL: SIGUSR1 did not stop the 4-GPU run with 75 before the end (rc $rc)"
    tail -5 int.log; exit 1
fi
echo "ok   SIGUSR1 stopped 4 twin GPUs at step $at, exit 75"
cp -r int intcpu

timeout 300 "$DDPTRAIN_TWIN" launch --nproc-per-node 4 j.ini --set job.output=int \
    > res4.log 2>&1 || { echo "FAIL: resume on 4 twin GPUs"; tail -5 res4.log; fail=1; }
grep -q "resuming from" res4.log || { echo "FAIL: 4 GPUs did not resume"; fail=1; }
if r=$(cmp_h5 int/model.h5 full4/model.h5 0); then
    echo "ok   resumed on 4 twin GPUs = uninterrupted 4-GPU run, bitwise: $r"
else
    echo "FAIL resumed on 4 twin GPUs vs uninterrupted: $r"; fail=1
fi
"$DDPTRAIN" j.ini --set data.batch_size=48 --set job.output=intcpu > rescpu.log 2>&1 ||
    { echo "FAIL: resume on the CPU"; tail -5 rescpu.log; fail=1; }
grep -q "resuming from" rescpu.log || { echo "FAIL: the CPU run did not resume"; fail=1; }
if r=$(cmp_h5 intcpu/model.h5 fullcpu/model.h5 1e-5); then
    echo "ok   resumed on 1 CPU rank vs uninterrupted CPU run (1e-5 relative): $r"
else
    echo "FAIL resumed on the CPU vs uninterrupted CPU run: $r"; fail=1
fi

# log_every = 5: with the host out of the step the ranks agree on a stop only at log steps;
# SIGUSR1 must still stop both ranks at one step (a multiple of 5; ranks that disagreed would
# hang in the agreement and exit 5, not 75) and the checkpoint must resume
"$DDPTRAIN_TWIN" launch --nproc-per-node 2 j.ini --set train.log_every=5 --set job.output=k5 \
    > k5.log 2>&1 &
pid=$!
deadline=$((SECONDS + 120))
while [ "$(cat k5/metrics.jsonl 2>/dev/null | wc -l)" -lt 4 ] && kill -0 $pid 2>/dev/null &&
      [ $SECONDS -lt $deadline ]; do
    sleep 0.05
done
kill -USR1 $pid
wait $pid
rc=$?
at=$(sed -n 's/.*stopped by signal .* at step \([0-9]*\).*/\1/p' k5.log | head -1)
if [ $rc = 75 ] && [ -n "$at" ] && [ $((at % 5)) = 0 ]; then
    echo "ok   log_every 5: SIGUSR1 stopped both twin GPUs at log step $at, exit 75"
    if timeout 300 "$DDPTRAIN_TWIN" launch --nproc-per-node 2 j.ini --set train.log_every=5 \
            --set job.output=k5 > k5res.log 2>&1 && grep -q "resuming from" k5res.log; then
        echo "ok   log_every 5: resumed and finished"
    else
        echo "FAIL log_every 5: resume"; tail -5 k5res.log; fail=1
    fi
else
    echo "FAIL log_every 5: rc $rc, stopped at step '$at' (want 75 at a multiple of 5)"
    tail -5 k5.log; fail=1
fi
exit $fail

#!/bin/bash
# replica.sh - [dist] check_every = K: a bit flipped on purpose in one rank's parameters (test
# hook DDP_TEST_FLIP_BIT=RANK:STEP) is reported within K steps, naming that rank, the job stops
# with exit 1 and no checkpoint is written after the corruption; without the flip the same run
# passes its checks.
set -u
DDPTRAIN=${DDPTRAIN:?}
command -v mpirun >/dev/null || { echo "mpirun not installed"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
"$DDPTRAIN" data synth -o d.h5 --shape 64 --classes 4 --train 2000 --test 0 >/dev/null 2>&1 ||
    "$DDPTRAIN" data synth -o d.h5 --shape 64 --classes 4 --train 2000 --test 10 >/dev/null || exit 1
printf '[data]\nfile = d.h5\ntest =\nbatch_size = 8\n[model]\nlayers = linear(32), relu, linear(4)\n[train]\nepochs = 2\nlog_every = 1\n[dist]\ncheck_every = 5\n[checkpoint]\nevery_steps = 5\n' > j.ini
fail=0
timeout 120 mpirun -n 3 "$DDPTRAIN" j.ini --set job.output=clean > clean.log 2>&1 ||
    { echo "FAIL: the run without corruption failed"; tail -3 clean.log; fail=1; }
DDP_TEST_FLIP_BIT=1:13 timeout 120 mpirun -n 3 "$DDPTRAIN" j.ini --set job.output=flip > flip.log 2>&1
rc=$?
line=$(grep "replica check failed" flip.log | head -1)
last=$(grep -o '"step":[0-9]*' flip/metrics.jsonl | tail -1 | cut -d: -f2)
newest=$(ls flip/checkpoints | sort | tail -1)
if [ $rc -eq 1 ] && echo "$line" | grep -q "rank 1 on " && [ "${last:-99}" -le 15 ] &&
   [ "$newest" = "ckpt-00000010.h5" ]; then
    echo "ok   flipped bit on rank 1 after step 13 found at step $last: $line"
else
    echo "FAIL: rc $rc, last step ${last:-?}, newest checkpoint $newest: $line"; fail=1
fi
exit $fail

#!/usr/bin/env bash
# shellcheck disable=SC2016  # expanded by the inner shell
# slurm/preemptible.sbatch end to end: a run interrupted with `scancel --signal=USR1 JOB`
# saves a checkpoint, exits 75, requeues itself (`scontrol requeue`; released at once here with
# `scontrol update jobid=J StartTime=now` instead of Slurm's two-minute hold), resumes from the
# checkpoint on its second start (SLURM_RESTART_COUNT=1) and ends with exit 0 and the same
# parameters as the same run left alone (submitted at the same time, on the other node).
# Slurm's own record of the interrupted job must say COMPLETED, exit 0:0, one restart.
# Skipped (77) where ddptrain writes no checkpoints.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

need_ddptrain
need_h5py
sr srun --mpi=list 2>&1 | grep -qw pmix || skip "this Slurm has no pmix plugin"
data=$(fashion_h5)
job=$DDP_SRC/configs/fashion-mlp.ini
set=(--set "data.file=$data" --set data.test= --set data.batch_size=64 --set train.log_every=10)

# Checkpoint support: a short run with every_steps=5 must leave OUTPUT/checkpoints/*.h5.
timeout 60 "$DDPTRAIN" "$job" "${set[@]}" --set train.max_steps=10 --set checkpoint.every_steps=5 \
    --set "job.output=$CASE_DIR/probe" >probe.log 2>&1 || true
compgen -G "probe/checkpoints/*.h5" >/dev/null ||
    skip "ddptrain wrote no checkpoints (checkpoint.every_steps=5 left probe/checkpoints empty)"

steps=200
set+=(--set "train.max_steps=$steps")
T=$DDP_SRC/slurm/preemptible.sbatch
# The run left alone: sbatch --wait in the background, exit code in ref.rc.
(
    rc=0
    SR_TIMEOUT=200 sr sbatch --wait -J p-ref "$T" "$job" "${set[@]}" \
        --set "job.output=$CASE_DIR/ref" >ref.sbatch.txt 2>&1 || rc=$?
    echo "$rc" >ref.rc
) &
# The run to interrupt: followed through its requeue with scontrol (below), which also shows
# Slurm's own view of it (state, exit code, restarts).
J=$(sr sbatch --parsable -J p-pre "$T" "$job" "${set[@]}" --set "job.output=$CASE_DIR/pre")
J=${J%%;*}
[[ $J =~ ^[0-9]+$ ]] || fail "sbatch --parsable gave '$J'"

# wait_for SECONDS WHAT COMMAND...: poll until COMMAND succeeds
wait_for() {
    local end=$((SECONDS + $1)) what=$2
    shift 2
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < end)) || fail "timed out waiting for $what"
        sleep 0.2
    done
}
# mid-run: after step 20 of 200 is logged
wait_for 90 "step 20 of job $J" grep -q '"kind":"train".*"step":[2-9][0-9],' pre/metrics.jsonl
! grep -q '"kind":"summary"' pre/metrics.jsonl || fail "job $J finished before it could be stopped"
sr scancel --signal=USR1 "$J"
echo "sent USR1 to job $J after: $(tail -n 1 pre/metrics.jsonl)"
wait_for 60 "job $J to be requeued (PENDING)" \
    bash -c '[[ $("$0" run squeue -h -j "$1" -o %T) == PENDING ]]' "$CLUSTER" "$J"
# Not at once: slurmd refuses to start a job again in the same second as its previous run was
# killed ("already killed, do not launch batch job": credential revoked up to that second, and
# the job fails); Slurm's own two-minute hold exists partly for this.
sleep 2
sr scontrol update jobid="$J" StartTime=now
echo "job $J pending again: released"
# until it has ended for good (its record stays MinJobAge = 10 s after that)
end=$((SECONDS + 120))
while :; do
    info=$(sr scontrol show job -o "$J" 2>/dev/null) || info=
    state=$(sed -n 's/.* JobState=\([A-Z_]*\) .*/\1/p' <<<"$info")
    case $state in
    "" | PENDING | CONFIGURING | RUNNING | COMPLETING | REQUEUED | REQUEUE_FED | SUSPENDED) ;;
    *) break ;;
    esac
    ((SECONDS < end)) || fail "job $J did not end within 120 s after the release ($state)"
    sleep 0.3
done
wait

out=$(untime <./p-pre-"$J".out)
echo "=== interrupted run (p-pre-$J.out)"
grep -v '^  \[' <<<"$out"
echo "=== uninterrupted run"
grep -E '^(job|done|ddptrain exited)' ./p-ref-*.out
expect_eq "$(cat ref.rc)" 0 "uninterrupted: sbatch --wait exit code"
echo "job $J at the end: $(grep -oE '(JobState|Restarts|ExitCode)=[^ ]*' <<<"$info" | tr '\n' ' ')"
expect_eq "$state" COMPLETED "interrupted: final state of job $J"
grep -q ' Restarts=1 ' <<<"$info" || fail "interrupted: job $J does not show Restarts=1"
grep -q ' ExitCode=0:0 ' <<<"$info" || fail "interrupted: job $J does not show ExitCode=0:0"
grep -q "^job $J start 1 (restart count 0)" <<<"$out" || fail "no first start"
grep -q '^stopped by signal 10 (SIGUSR1) at step' <<<"$out" || fail "ddptrain did not stop on USR1"
grep -q '^ddptrain exited 75;' <<<"$out" || fail "first start: srun did not exit 75"
grep -qx "checkpoint saved: requeueing job $J" <<<"$out" || fail "no requeue"
grep -q "^job $J start 2 (restart count 1)" <<<"$out" || fail "no second start with restart count 1"
stop=$(sed -n 's/^stopped by signal 10 (SIGUSR1) at step \([0-9]*\).*/\1/p' <<<"$out")
grep -q "^resuming from .*/ckpt-0*$stop.h5: epoch 1, step $stop," <<<"$out" ||
    fail "second start did not resume from the step-$stop checkpoint"
((stop > 0 && stop < steps)) || fail "stopped at step $stop"
grep -q "^done: $steps steps" <<<"$out" || fail "second start did not finish $steps steps"
expect_eq "$(grep -c '^ddptrain exited 0;' <<<"$out")" 1 "'ddptrain exited 0' lines"
# the second start went on from the checkpoint: its first progress line is past the stop
first=$(awk '/^resuming from/ {r = 1}
    r && /^epoch [0-9]+\/[0-9]+ step / {split($4, a, "/"); print a[1]; exit}' <<<"$out")
echo "stopped at step $stop; first progress line after the resume: step $first"
[[ -n $first && $first -gt $stop ]] || fail "the resumed run did not go on from step $stop"

compare_h5 pre/model.h5 ref/model.h5 1e-6 || fail "resumed run differs from the uninterrupted run"
# the comparison can fail: the checkpoint at the stop is not the final model
ckpt=$(printf '%s/ckpt-%08d.h5' pre/checkpoints "$stop")
if [[ -e $ckpt ]] && compare_h5 "$ckpt" ref/model.h5 1e-6 >/dev/null; then
    fail "the step-$stop checkpoint compares equal to the final model"
fi

#!/usr/bin/env bash
# shellcheck disable=SC2016  # expanded by the inner shell
# slurm/preemptible.sbatch stopped with plain `scancel` (SIGTERM: checkpoint, exit 75, no
# requeue) and submitted again, which gives a new job id, with two kinds of [job] output side
# by side (one per node): with %j the new job starts from scratch in a new directory and rank 0
# warns in one line naming the first job's directory; with %x (stable across submissions) it
# resumes from the first job's checkpoint and finishes. A third submission of the finished %x
# run says "already finished", exits 0 and changes no file of its directory.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

need_ddptrain
sr srun --mpi=list 2>&1 | grep -qw pmix || skip "this Slurm has no pmix plugin"
data=$(fashion_h5)
job=$DDP_SRC/configs/fashion-mlp.ini
steps=120
set=(--set "data.file=$data" --set data.test= --set data.batch_size=64 --set train.log_every=10
    --set "train.max_steps=$steps")
T=$DDP_SRC/slurm/preemptible.sbatch
export DDPTRAIN

# wait_for SECONDS WHAT COMMAND...: poll until COMMAND succeeds
wait_for() {
    local end=$((SECONDS + $1)) what=$2
    shift 2
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < end)) || fail "timed out waiting for $what"
        sleep 0.2
    done
}
gone() { [[ -z $(sr squeue -h -j "$1" -o %T 2>/dev/null) ]]; }
# submit NAME OUTPUT: the job id of preemptible.sbatch with [job] output = OUTPUT
submit() {
    local j
    j=$(sr sbatch --parsable -J "$1" "$T" "$job" "${set[@]}" --set "job.output=$2")
    j=${j%%;*}
    [[ $j =~ ^[0-9]+$ ]] || fail "sbatch --parsable gave '$j'"
    echo "$j"
}

# ---- first submission of each, stopped with plain scancel after step 20 -------------------
J1=$(submit p-rsj "$CASE_DIR/runs/%x-%j")
X1=$(submit p-rsx "$CASE_DIR/stable/%x")
echo "first jobs: %j run $J1, %x run $X1"
step20='"kind":"train".*"step":[2-9][0-9],'
wait_for 90 "step 20 of job $J1" grep -q "$step20" "runs/p-rsj-$J1/metrics.jsonl"
wait_for 90 "step 20 of job $X1" grep -q "$step20" stable/p-rsx/metrics.jsonl
sr scancel "$J1" "$X1"
wait_for 60 "job $J1 to end" gone "$J1"
wait_for 60 "job $X1 to end" gone "$X1"
for j in "$J1" "$X1"; do
    out=$(untime <./p-rs?-"$j".out)
    grep -q '^stopped by signal 15 (SIGTERM) at step' <<<"$out" ||
        fail "job $j: no stop on TERM: $out"
    grep -q '^batch shell: got TERM, no requeue' <<<"$out" || fail "job $j: requeued after TERM"
done
compgen -G "runs/p-rsj-$J1/checkpoints/*.h5" >/dev/null || fail "job $J1 left no checkpoint"
stopx=$(untime <"p-rsx-$X1.out" |
    sed -n 's/^stopped by signal 15 (SIGTERM) at step \([0-9]*\).*/\1/p')

# ---- the same commands submitted again: new job ids -------------------------------------------
J2=$(submit p-rsj "$CASE_DIR/runs/%x-%j")
X2=$(submit p-rsx "$CASE_DIR/stable/%x")
echo "resubmitted: %j run $J2, %x run $X2"
wait_for 100 "job $J2 to end" gone "$J2"
wait_for 100 "job $X2 to end" gone "$X2"
outj=$(untime <"p-rsj-$J2.out")
outx=$(untime <"p-rsx-$X2.out")
echo "=== %j, resubmitted (p-rsj-$J2.out)"
grep -E 'warning:|^(resuming|done|ddptrain exited)' <<<"$outj" || true
echo "=== %x, resubmitted (p-rsx-$X2.out)"
grep -E 'warning:|^(resuming|done|ddptrain exited)' <<<"$outx" || true

want="this job starts afresh in $CASE_DIR/runs/p-rsj-$J2 while"
want+=" $CASE_DIR/runs/p-rsj-$J1 holds checkpoints"
expect_eq "$(grep -c "warning: .*job.output = $CASE_DIR/runs/%x-%j: $want" <<<"$outj")" 1 \
    "%j resubmitted: warning lines naming both directories"
grep -q '^resuming from' <<<"$outj" && fail "%j resubmitted: it resumed (from where?)"
grep -q "^done: $steps steps" <<<"$outj" || fail "%j resubmitted: did not train $steps steps"
grep -q "^ddptrain exited 0;" <<<"$outj" || fail "%j resubmitted: exit code not 0"

grep -q 'warning: .*job.output' <<<"$outx" && fail "%x resubmitted: warned: $outx"
grep -q "^resuming from $CASE_DIR/stable/p-rsx/checkpoints/ckpt-0*$stopx.h5" <<<"$outx" ||
    fail "%x resubmitted: did not resume from the step-$stopx checkpoint"
grep -q "^done: $steps steps" <<<"$outx" || fail "%x resubmitted: did not finish $steps steps"
grep -q "^ddptrain exited 0;" <<<"$outx" || fail "%x resubmitted: exit code not 0"

# ---- the finished %x run submitted once more: nothing to do, nothing written -------------------
sums() { (cd "$1" && find . -type f ! -name .ddptrain.lock | sort | xargs sha256sum | sha256sum); }
before=$(sums stable/p-rsx)
X3=$(submit p-rsx "$CASE_DIR/stable/%x")
wait_for 60 "job $X3 to end" gone "$X3"
out3=$(untime <"p-rsx-$X3.out")
grep -q "^already finished: $CASE_DIR/stable/p-rsx holds this job's finished run" <<<"$out3" ||
    fail "%x third submission: no 'already finished': $out3"
grep -q "^ddptrain exited 0;" <<<"$out3" || fail "%x third submission: exit code not 0"
expect_eq "$(sums stable/p-rsx)" "$before" "%x third submission: files of stable/p-rsx"
expect_eq "$(grep -c '"kind":"summary"' stable/p-rsx/metrics.jsonl)" 1 "summaries in metrics.jsonl"
echo "stopped at step $stopx; %x resumed there and finished; %j started afresh, with the warning"

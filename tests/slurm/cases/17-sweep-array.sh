#!/usr/bin/env bash
# slurm/sweep-array.sbatch as a real job array: `sbatch --wait --array=0-2` over optim.lr =
# 0.01, 0.05, 0.1 with tiny training (2 ranks per task). Each task trains its own value into its
# own directory (sweep-%x-%A/%a-optim.lr-VALUE, expanded by ddptrain from the Slurm job's
# environment): job.ini and every train record carry that task's lr, and the log of each task
# names it. Then one directory, two jobs: a long run holds it, and a second job into the same
# directory exits 2 naming the holder's host, pid and Slurm job id (array job_task); the first
# run goes on and stops with a checkpoint on USR1. Outside the array the template refuses.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

need_ddptrain
sr srun --mpi=list 2>&1 | grep -qw pmix || skip "this Slurm has no pmix plugin"
data=$(fashion_h5)
T=$DDP_SRC/slurm/sweep-array.sbatch
job=$DDP_SRC/configs/fashion-mlp.ini
short=(--set "data.file=$data" --set data.test= --set train.max_steps=10 --set data.batch_size=32
    --set train.log_every=5 --set optim.schedule=constant)
export DDPTRAIN

# ---- the sweep ------------------------------------------------------------------------------
rc=0
SR_TIMEOUT=150 sr sbatch --wait --array=0-2 "$T" "$job" optim.lr=0.01,0.05,0.1 "${short[@]}" \
    >sweep.sbatch.txt 2>&1 || rc=$?
cat sweep.sbatch.txt
A=$(sed -n 's/^Submitted batch job \([0-9]*\).*/\1/p' sweep.sbatch.txt)
[[ $A =~ ^[0-9]+$ ]] || fail "no array job id in: $(cat sweep.sbatch.txt)"
expect_eq "$rc" 0 "sbatch --wait --array=0-2 exit code"
i=0
for lr in 0.01 0.05 0.1; do
    log=ddp-sweep-${A}_$i.out
    dir=sweep-ddp-sweep-$A/$i-optim.lr-$lr
    echo "=== task $i ($log)"
    [[ -f $log ]] || fail "task $i: no log $log"
    grep -v '^  \[' "$log"
    grep -q "^sweep task $i of 3 (optim.lr=$lr): job [0-9]* (array ${A}_$i," "$log" ||
        fail "task $i: no sweep line for lr $lr"
    grep -q "2 ranks, launcher slurm" "$log" || fail "task $i: not 2 Slurm ranks"
    grep -q '^ddptrain exited 0;' "$log" || fail "task $i: ddptrain did not exit 0"
    [[ -s $dir/model.h5 ]] || fail "task $i: no $dir/model.h5 (dirs: $(ls -d sweep-*/* 2>&1))"
    grep -qx "lr = $lr" "$dir/job.ini" || fail "task $i: $dir/job.ini lacks lr = $lr"
    grep -qx "output = $dir" "$dir/job.ini" || fail "task $i: $dir/job.ini lacks output = $dir"
    lrs=$(sed -n 's/.*"kind":"train".*"lr":\([0-9.e-]*\),.*/\1/p' "$dir/metrics.jsonl" | sort -u)
    expect_eq "$lrs" "$lr" "task $i: lr of its train records"
    i=$((i + 1))
done
expect_eq "$(ls -d sweep-ddp-sweep-"$A"/* | wc -l)" 3 "run directories of the sweep"

# ---- a directory in use: the second job is refused, naming the first -----------------------
J=$(sr sbatch --parsable --array=0 -J ddp-hold "$T" "$job" optim.lr=0.05 "${short[@]}" \
    --set train.max_steps=1000000 --set train.epochs=1000 --set train.log_every=1 \
    --set checkpoint.every_epochs=0)
J=${J%%;*}
[[ $J =~ ^[0-9]+$ ]] || fail "sbatch --parsable gave '$J'"
shared=sweep-ddp-hold-$J/0-optim.lr-0.05
end=$((SECONDS + 90))
until [[ -s $shared/metrics.jsonl ]]; do # its first step: it holds the lock
    ((SECONDS < end)) || fail "job $J wrote no metrics within 90 s: $(cat ddp-hold-*.out)"
    sleep 0.2
done
rc=0
DDP_SWEEP_OUTPUT="sweep-ddp-hold-$J" SR_TIMEOUT=100 sr sbatch --wait --array=0 -J ddp-second \
    "$T" "$job" optim.lr=0.05 "${short[@]}" >second.sbatch.txt 2>&1 || rc=$?
sr scancel --signal=USR1 "$J"
second=$(cat ddp-second-*.out)
echo "=== second job"
echo "$second"
[[ $rc != 0 ]] || fail "the second job into $shared succeeded"
grep -q '^ddptrain exited 2;' <<<"$second" || fail "the second job did not exit 2"
grep -qF "$shared is in use by another ddptrain run (host " <<<"$second" ||
    fail "the refusal does not name the directory"
grep -qE "pid [0-9]+, Slurm job [0-9]+ \\(array ${J}_0\\)" <<<"$second" ||
    fail "the refusal does not name the holder's pid and Slurm job ${J}_0"
end=$((SECONDS + 60))
until grep -q '^ddptrain exited' ddp-hold-"$J"_0.out 2>/dev/null; do
    ((SECONDS < end)) || fail "job $J did not stop on USR1"
    sleep 0.2
done
grep -q '^ddptrain exited 75;' ddp-hold-"$J"_0.out || fail "job $J did not stop with 75"
grep -q '"kind":"summary"' "$shared/metrics.jsonl" && fail "the second job wrote $shared"

# ---- outside an array the template refuses ---------------------------------------------------
rc=0
SR_TIMEOUT=60 sr sbatch --wait -J ddp-noarray "$T" "$job" optim.lr=0.1 >noarray.txt 2>&1 || rc=$?
grep -q "not an array task; submit with sbatch --array=0-0" ddp-noarray-*.out ||
    fail "no advice without --array: $(cat ddp-noarray-*.out)"
[[ $rc != 0 ]] || fail "the template ran outside an array"
echo "sweep of 3 values, lock holder named, no array refused"

#!/usr/bin/env bash
# ddptrain run directly in a batch script (no srun) of a 2-node, 4-task allocation: it must not
# wait for the three peers that were never started. It runs as ONE process, warns about it
# (naming the 4 tasks and pointing at srun), and finishes the training.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

need_ddptrain
data=$(fashion_h5)
cat >job.sbatch <<JOB
#!/bin/bash
#SBATCH -N 2
#SBATCH -n 4
#SBATCH -J ddp-no-srun
timeout 60 "$DDPTRAIN" "$DDP_SRC/configs/fashion-mlp.ini" --set "data.file=$data" --set data.test= \
    --set train.max_steps=20 --set data.batch_size=64 --set "job.output=$CASE_DIR/out"
echo "ddptrain exit \$?"
JOB
SR_TIMEOUT=90 sr sbatch --wait -o "$CASE_DIR/job-%j.out" job.sbatch ||
    fail "sbatch --wait exited $?"
out=$(cat "$CASE_DIR"/job-*.out)
echo "$out"
grep -qx 'ddptrain exit 0' <<<"$out" || fail "ddptrain did not exit 0 (124: it hung)"
grep -q 'running as ONE process: this Slurm job has 4 task(s) on 2 node(s)' <<<"$out" ||
    fail "no warning about running as one process"
grep -q 'use `srun ddptrain' <<<"$out" || fail "the warning does not point at srun"
grep -q '1 rank, launcher single' <<<"$out" || fail "not a single-rank run"
[[ -s out/model.h5 ]] || fail "no model.h5"

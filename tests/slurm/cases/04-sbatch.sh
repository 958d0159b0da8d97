#!/usr/bin/env bash
# shellcheck disable=SC2016  # single-quoted commands are expanded by the tasks
# sbatch --wait runs a batch script to completion; its output file is readable here and shows
# the allocation (SLURM_NTASKS, no SLURM_STEP_ID in the batch shell) and an srun inside it.
# A failing batch script makes sbatch --wait fail.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

cat >job.sh <<'JOB'
#!/bin/sh
#SBATCH -N 2
#SBATCH -n 2
#SBATCH -J ddp-sbatch-test
echo "batch job=$SLURM_JOB_ID ntasks=$SLURM_NTASKS nodelist=$SLURM_JOB_NODELIST step=${SLURM_STEP_ID:-none}"
srun sh -c 'echo "task $SLURM_PROCID on $SLURMD_NODENAME"' | sort
JOB
printf '#!/bin/sh\nexit 3\n' >bad.sh
sr sbatch --wait -o /dev/null bad.sh &   # in parallel: sbatch --wait polls slowly
bad=$!
sr sbatch --wait -o "$CASE_DIR/out-%j.txt" job.sh || fail "sbatch --wait exited $?"
out=$(cat "$CASE_DIR"/out-*.txt) || fail "no output file"
echo "$out"
grep -Eq '^batch job=[0-9]+ ntasks=2 nodelist=n\[1-2\] step=none$' <<<"$out" || fail "batch line"
grep -qx 'task 0 on n1' <<<"$out" || fail "task 0 line"
grep -qx 'task 1 on n2' <<<"$out" || fail "task 1 line"

if wait "$bad"; then fail "sbatch --wait of a failing script succeeded"; fi
echo "failing script: sbatch --wait exited non-zero, as it should"

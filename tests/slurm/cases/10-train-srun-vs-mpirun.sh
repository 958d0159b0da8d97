#!/usr/bin/env bash
# Training under Slurm gives what mpirun gives: configs/fashion-mlp.ini (shortened: 40 steps,
# batch 64 per rank, no test split) under `srun -N 2 -n 4 --ntasks-per-node=2 --mpi=pmix`
# (two ranks on each node, talking across the namespace network) and under
# `mpirun -n 4 --oversubscribe` on this machine end with the same parameters, within 1e-5
# relative (tests/compare_h5.py). A run with another seed must not compare equal.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

need_ddptrain
need_h5py
command -v mpirun >/dev/null || skip "mpirun not installed"
sr srun --mpi=list 2>&1 | grep -qw pmix || skip "this Slurm has no pmix plugin"
data=$(fashion_h5)
job=$DDP_SRC/configs/fashion-mlp.ini
set=(--set "data.file=$data" --set data.test= --set train.max_steps=40 --set data.batch_size=64
    --set train.log_every=10)

SR_TIMEOUT=120 sr srun -N 2 -n 4 --ntasks-per-node=2 --mpi=pmix \
    "$DDPTRAIN" "$job" "${set[@]}" --set "job.output=$CASE_DIR/srun" >srun.log 2>&1 ||
    { cat srun.log; fail "srun --mpi=pmix run exited non-zero"; }
tail -n 3 srun.log
grep -q '4 ranks, launcher slurm, comm mpi' srun.log ||
    { head srun.log; fail "srun: not 4 Slurm ranks over MPI"; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
timeout 120 mpirun -n 4 --oversubscribe "$DDPTRAIN" "$job" "${set[@]}" \
    --set "job.output=$CASE_DIR/mpirun" >mpirun.log 2>&1 ||
    { cat mpirun.log; fail "mpirun run exited non-zero"; }
tail -n 3 mpirun.log
grep -q '4 ranks, launcher ompi, comm mpi' mpirun.log ||
    { head mpirun.log; fail "mpirun: not 4 OpenMPI ranks"; }

compare_h5 srun/model.h5 mpirun/model.h5 1e-5 || fail "srun and mpirun runs differ"

# the comparison can fail: another seed gives other parameters
timeout 60 mpirun -n 4 --oversubscribe "$DDPTRAIN" "$job" "${set[@]}" --set job.seed=4321 \
    --set "job.output=$CASE_DIR/other" >other.log 2>&1 ||
    { cat other.log; fail "seed 4321 run failed"; }
if compare_h5 srun/model.h5 other/model.h5 1e-5 >/dev/null; then
    fail "runs with different seeds compared equal"
fi
echo "another seed differs, as it should"

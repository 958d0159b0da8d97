#!/usr/bin/env bash
# A CPU job under plain `srun -N 2 -n 4` (no --mpi: OpenMPI cannot start there) stops within
# seconds on every rank, rank 0 printing the advice to use `srun --mpi=pmix` once (the other
# ranks reach the same verdict and exit silently), and srun exits 4 (the highest task exit
# code): no hang, no crash inside MPI_Init. Under `srun --mpi=pmi2` the advice names that
# plugin instead of claiming there was none.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

need_ddptrain
data=$(fashion_h5)
cat >cpu-job.ini <<INI
[job]
name = cpu-job
output = $CASE_DIR/out
[data]
file = $data
test =
batch_size = 64
[model]
layers = flatten, linear(64), relu, linear(10)
[train]
max_steps = 20
INI

s=$SECONDS
rc=0
SR_TIMEOUT=60 sr srun -N 2 -n 4 "$DDPTRAIN" cpu-job.ini >out.log 2>&1 || rc=$?
dt=$((SECONDS - s))
cat out.log
expect_eq "$rc" 4 "srun exit code"
((dt <= 20)) || fail "took ${dt} s to stop"
n=$(grep -c 'srun --mpi=pmix' out.log || true)
expect_eq "$n" 1 "lines with the --mpi=pmix advice (rank 0's only)"
grep -q 'rank 0:' out.log || fail "the advice names no host and rank"
[[ ! -e out/model.h5 ]] || fail "a model was written"
echo "stopped after ${dt} s with exit 4"

# srun --mpi=pmi2 is an MPI plugin, but not one OpenMPI can start from: say which one it was
rc=0
SR_TIMEOUT=60 sr srun -N 1 -n 2 --mpi=pmi2 "$DDPTRAIN" cpu-job.ini >pmi2.log 2>&1 || rc=$?
cat pmi2.log
expect_eq "$rc" 4 "srun --mpi=pmi2: exit code"
n=$(grep -c 'started by srun --mpi=pmi2, which this OpenMPI cannot use for CPU ranks: run CPU jobs with `srun --mpi=pmix' pmi2.log || true)
expect_eq "$n" 1 "lines naming --mpi=pmi2 in the advice (rank 0's only)"
! grep -q 'without an MPI plugin' pmi2.log || fail "srun --mpi=pmi2 called 'without an MPI plugin'"

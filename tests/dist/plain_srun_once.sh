#!/bin/sh
# plain_srun_once.sh DDPTRAIN - a CPU job started as `srun -n 8` without --mpi=pmix would start
# it: 8 processes with the Slurm step variables of one node and SLURM_MPI_TYPE=none (no Slurm
# needed). Each exits 4 (the launch is wrong, MPI cannot start), and the advice to use
# `srun --mpi=pmix` is printed once, by rank 0, not once per rank. The same for 8 ranks of a
# torchrun-style launch (RANK, WORLD_SIZE), whose advice names mpirun.
set -u
BIN=${1:?usage: plain_srun_once.sh DDPTRAIN}
T=$(mktemp -d "${TMPDIR:-/tmp}/ddp-once-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
N=8

"$BIN" data synth -o "$T/d.h5" --shape 1,4,4 --classes 3 --train 64 --test 8 --seed 1 >/dev/null ||
    { echo "FAIL: data synth"; exit 1; }
cat >"$T/job.ini" <<INI
[job]
output = $T/out
[data]
file = $T/d.h5
test =
batch_size = 8
[model]
layers = flatten, linear(3)
[train]
max_steps = 2
INI

# check WHAT ADVICE: every rank exited 4, ADVICE once in all stderr, from rank 0
check() {
    for r in $(seq 0 $((N - 1))); do
        rc=$(cat "$T/rc.$r")
        [ "$rc" = 4 ] || fail "$1: rank $r exited $rc, want 4 ($(cat "$T/err.$r"))"
    done
    n=$(cat "$T"/err.* | grep -c "$2")
    [ "$n" = 1 ] || fail "$1: the advice '$2' printed $n times, want once"
    grep -q "$2" "$T/err.0" || fail "$1: rank 0 did not print the advice"
    grep -q "rank 0" "$T/err.0" || fail "$1: the advice names no rank: $(cat "$T/err.0")"
    for r in $(seq 1 $((N - 1))); do
        [ -s "$T/err.$r" ] && fail "$1: rank $r printed: $(cat "$T/err.$r")"
    done
    [ -e "$T/out/model.h5" ] && fail "$1: a model was written"
    rm -f "$T"/err.* "$T"/rc.*
}

for r in $(seq 0 $((N - 1))); do
    (env -i PATH="$PATH" SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_PROCID="$r" SLURM_LOCALID="$r" \
        SLURM_NODEID=0 SLURM_NTASKS=$N SLURM_STEP_NUM_NODES=1 SLURM_STEP_NODELIST=localhost \
        SLURM_STEP_TASKS_PER_NODE=$N SLURM_MPI_TYPE=none SLURM_CPUS_PER_TASK=1 \
        timeout 30 "$BIN" "$T/job.ini" >/dev/null 2>"$T/err.$r"
     echo $? >"$T/rc.$r") &
done
wait
check "srun -n $N" 'srun --mpi=pmix'

for r in $(seq 0 $((N - 1))); do
    (env -i PATH="$PATH" RANK="$r" WORLD_SIZE=$N LOCAL_RANK="$r" LOCAL_WORLD_SIZE=$N \
        MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 OMP_NUM_THREADS=1 \
        timeout 30 "$BIN" "$T/job.ini" >/dev/null 2>"$T/err.$r"
     echo $? >"$T/rc.$r") &
done
wait
check "torchrun style, $N ranks" "mpirun -n $N"

[ $fails = 0 ] && echo "ok: plain srun and torchrun style, $N ranks: exit 4 on each, the advice once"
exit $((fails > 0))

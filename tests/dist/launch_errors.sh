#!/bin/bash
# launch_errors.sh - bad launch environments stop ddptrain at once with one line naming the
# variable and exit 4, never a hang: malformed SLURM_* values, PROCID >= NTASKS, an
# unresolvable master, mixed launchers, and several Slurm tasks started without --mpi=pmix.
set -u
DDPTRAIN=${DDPTRAIN:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
"$DDPTRAIN" data synth -o d.h5 --shape 16 --classes 2 --train 64 --test 8 >/dev/null || exit 1
printf '[data]\nfile = d.h5\nbatch_size = 8\n[model]\nlayers = linear(2)\n[train]\nepochs = 1\n[job]\noutput = out\n' > j.ini

clean_env() { env -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u RANK -u WORLD_SIZE \
    -u MASTER_ADDR -u MASTER_PORT $(env | sed -n 's/^\(SLURM_[A-Z_]*\)=.*/-u \1/p') "$@"; }
slurm=(SLURM_JOB_ID=100 SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NTASKS=4
       SLURM_NODEID=0 SLURM_STEP_NODELIST=localhost SLURM_STEP_NUM_NODES=1
       SLURM_STEP_TASKS_PER_NODE=4 SLURM_STEP_NUM_TASKS=4)
pass=0 fail=0
check() { # NAME PATTERN VAR=VALUE...
    local name=$1 pattern=$2
    shift 2
    local t0=$SECONDS
    clean_env "$@" timeout 30 "$DDPTRAIN" j.ini > out.txt 2> err.txt
    local rc=$? lines
    lines=$(grep -c . err.txt)
    if [ $rc -eq 4 ] && [ "$lines" -eq 1 ] && grep -q -- "$pattern" err.txt && [ $((SECONDS - t0)) -lt 10 ]; then
        pass=$((pass + 1)); printf 'ok   %-30s %s\n' "$name" "$(head -c 150 err.txt)"
    else
        fail=$((fail + 1)); printf 'FAIL %-30s exit %d, %d lines:\n' "$name" $rc "$lines"; head -3 err.txt
    fi
}
check "plain srun, 4 CPU tasks" "srun --mpi=pmix" "${slurm[@]}"
check "PROCID >= NTASKS" "SLURM_PROCID" "${slurm[@]}" SLURM_PROCID=4 SLURM_MPI_TYPE=pmix
check "non-numeric NTASKS" "SLURM_NTASKS" "${slurm[@]}" SLURM_NTASKS=four SLURM_MPI_TYPE=pmix
check "negative LOCALID" "SLURM_LOCALID" "${slurm[@]}" SLURM_LOCALID=-1 SLURM_MPI_TYPE=pmix
check "malformed nodelist" "SLURM_STEP_NODELIST" "${slurm[@]}" 'SLURM_STEP_NODELIST=n[1-' SLURM_MPI_TYPE=pmix
check "tasks-per-node sum" "SLURM_STEP_TASKS_PER_NODE" "${slurm[@]}" 'SLURM_STEP_TASKS_PER_NODE=3' SLURM_MPI_TYPE=pmix
check "unresolvable master" "no-such-host.invalid" RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=no-such-host.invalid MASTER_PORT=29500
check "mixed launchers" "RANK" "${slurm[@]}" SLURM_MPI_TYPE=pmix RANK=2 WORLD_SIZE=8
check "bad MASTER_PORT" "MASTER_PORT=.*99999" RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=99999
echo "launch-errors: $pass passed, $fail failed"
[ $fail -eq 0 ]

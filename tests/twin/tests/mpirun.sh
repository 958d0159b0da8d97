#!/bin/bash
# mpirun.sh - `mpirun -n 2 ddptrain-twin job.ini` with only `[dist] backend = nccl` set
# (bootstrap auto, no MASTER_ADDR): the NCCL id goes over MPI (rank 0's log says so and why),
# and the final parameters are within 1e-5 relative of the 1-rank CPU run, as in train.sh; a
# CPU run of another seed differs. Exit 77 without mpirun or without MPI in ddptrain-twin.
set -u
DDPTRAIN=${DDPTRAIN:?} DDPTRAIN_TWIN=${DDPTRAIN_TWIN:?} DDP_SRC=${DDP_SRC:?}
# shellcheck source=tests/lib.sh
. "$DDP_SRC/tests/lib.sh"
PY=/usr/bin/python3
need_h5py
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: no mpirun"; exit 77; }
"$DDPTRAIN_TWIN" --version | grep -q 'comm backends:.* mpi (' ||
    { echo "SKIP: ddptrain-twin built without MPI"; exit 77; }
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_mpi_yield_when_idle=1
unset MASTER_ADDR MASTER_PORT RANK WORLD_SIZE DDP_BOOTSTRAP_TOKEN PMI_FD
enter_workdir
synth_small d.h5
mlp_job job.ini
sed -i '/^weight_decay/d; s/^max_steps = .*/max_steps = 20/' job.ini
printf '[dist]\nbackend = nccl\n' >> job.ini
fail=0
"$DDPTRAIN" job.ini --set dist.backend=auto --set data.batch_size=48 --set job.output=cpu \
    >/dev/null || { echo "FAIL: CPU run"; exit 1; }
out=twin
if ! timeout 300 mpirun -n 2 --oversubscribe "$DDPTRAIN_TWIN" job.ini --set data.batch_size=24 \
        --set job.output=$out > $out.log 2>&1; then
    echo "FAIL: mpirun -n 2 ddptrain-twin (backend = nccl, bootstrap auto):"
    tail -5 $out.log
    exit 1
fi
grep '^[^ ]* \(ddptrain\|bootstrap\)' $out.log | sed 's/^[^ ]* //'
want="bootstrap: the NCCL id through mpi (auto: mpirun (OMPI_COMM_WORLD_SIZE is set) started"
grep -qF "$want" $out.log || { echo "FAIL: no line '$want'"; fail=1; }
want="2 ranks, launcher ompi, comm nccl, device cuda:0 (ddptrain GPU twin 0"
grep -qF "$want" $out.log || { echo "FAIL: no line '$want'"; fail=1; }
n=$(grep -c ' bootstrap: ' $out.log)
[ "$n" = 1 ] || { echo "FAIL: $n bootstrap lines, expected 1 (rank 0's)"; fail=1; }
if $PY "$DDP_SRC/tests/compare_h5.py" $out/model.h5 cpu/model.h5 1e-5 > cmp.txt; then
    echo "ok   mpirun -n 2, 2 twin GPUs vs CPU: $(head -1 cmp.txt)"
else
    echo "FAIL: mpirun -n 2, 2 twin GPUs vs CPU:"; cat cmp.txt; fail=1
fi
# the comparison can fail: another seed does not agree
"$DDPTRAIN" job.ini --set dist.backend=auto --set data.batch_size=48 --set job.seed=78 \
    --set job.output=other >/dev/null || { echo "FAIL: CPU run, seed 78"; exit 1; }
if $PY "$DDP_SRC/tests/compare_h5.py" other/model.h5 cpu/model.h5 1e-5 >/dev/null; then
    echo "FAIL: runs with different seeds compared equal"; fail=1
fi
exit $fail

#!/usr/bin/env bash
# The GPU path under Slurm with gres, on the GPU twin (build/ddptrain-twin, docs/gpu.md):
# srun -N 2 -n 8 --gres=gpu:4 binds every rank to cuda:SLURM_LOCALID (`ddptrain env`), and
# training through the NCCL twin with [dist] bootstrap left at auto, its id carried by the TCP
# rendezvous (plain srun), by the PMI2 KVS (--mpi=pmi2) and over MPI (--mpi=pmix), as rank 0's
# log says, ends with the parameters of the 1-rank CPU run (1e-5 relative).
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"
need_ddptrain
TWIN=${DDPTRAIN_TWIN:-$(dirname "$DDPTRAIN")/ddptrain-twin}
[[ -x $TWIN ]] || skip "no ddptrain-twin (built where a C++20 compiler is; -Dtwin)"
/usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null || skip "python3-h5py needed"
[[ $DDP_SLURM_MODE == netns ]] || export MASTER_ADDR=$DDP_SLURM_MASTER_ADDR
field() { tr ' \t' '\n\n' <<<"$2" | sed -n "s/^$1=//p" | head -1; }

echo "# srun -N 2 -n 8 --ntasks-per-node=4 --gres=gpu:4 ddptrain-twin env"
out=$(sr srun -N 2 -n 8 --ntasks-per-node=4 --gres=gpu:4 "$TWIN" env) || fail "env: exit non-zero"
echo "$out"
expect_eq "$(grep -c '^rank=' <<<"$out")" 8 "env lines"
while read -r line; do
    expect_eq "$(field device "$line")" "cuda:$(field local_rank "$line")" \
        "rank $(field rank "$line") device"
done <<<"$out"

"$DDPTRAIN" data synth -o "$CASE_DIR/d.h5" --shape 1,8,8 --classes 10 --train 2003 --test 101 \
    --seed 5 >/dev/null
cat > "$CASE_DIR/j.ini" <<INI
[job]
seed = 77
[data]
file = $CASE_DIR/d.h5
test =
[model]
layers = flatten, linear(32), relu, linear(16), relu, linear(10)
[optim]
name = sgd
lr = 0.05
momentum = 0.9
[train]
epochs = 1
max_steps = 20
log_every = 10
INI
"$DDPTRAIN" "$CASE_DIR/j.ini" --set data.batch_size=48 --set job.output="$CASE_DIR/cpu" \
    >/dev/null || fail "CPU run"
declare -A way=([none]=tcp [pmi2]=pmi2 [pmix]=mpi)
for mpi in none pmi2 pmix; do
    flag=()
    want=${way[$mpi]}
    if [[ $mpi != none ]]; then
        sr srun --mpi=list 2>&1 | grep -qw "$mpi" || { echo "no $mpi plugin: skipped"; continue; }
        flag=(--mpi="$mpi")
    fi
    if [[ $mpi == pmix ]] && ! "$TWIN" --version | grep -q 'comm backends:.* mpi ('; then
        echo "ddptrain-twin has no MPI: --mpi=pmix skipped"
        continue
    fi
    echo "# srun -N 2 -n 8 --gres=gpu:4 ${flag[*]} ddptrain-twin j.ini (bootstrap auto: $want)"
    SR_TIMEOUT=150 sr srun -N 2 -n 8 --ntasks-per-node=4 --gres=gpu:4 "${flag[@]}" "$TWIN" \
        "$CASE_DIR/j.ini" --set data.batch_size=6 --set job.output="$CASE_DIR/$mpi" \
        > "$CASE_DIR/$mpi.log" 2>&1 || { cat "$CASE_DIR/$mpi.log"; fail "$mpi: run failed"; }
    untime <"$CASE_DIR/$mpi.log" | grep '^\(ddptrain\|bootstrap\)' || true
    grep -q "bootstrap: the NCCL id through $want (auto: " "$CASE_DIR/$mpi.log" ||
        fail "$mpi: rank 0 does not log the NCCL id through $want"
    expect_eq "$(grep -c 'bootstrap: the NCCL id' "$CASE_DIR/$mpi.log")" 1 "$mpi: bootstrap lines"
    grep -q "8 ranks, launcher slurm, comm nccl, device cuda:0 (ddptrain GPU twin 0" \
        "$CASE_DIR/$mpi.log" || fail "$mpi: not 8 ranks on twin GPUs through NCCL"
    /usr/bin/python3 "$DDP_SRC/tests/compare_h5.py" "$CASE_DIR/$mpi/model.h5" \
        "$CASE_DIR/cpu/model.h5" 1e-5 || fail "$mpi: 8 twin GPUs differ from the CPU run"
done

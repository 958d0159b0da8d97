#!/usr/bin/env bash
# `ddptrain launch` inside Slurm steps: one launcher per node (srun --ntasks-per-node=1)
# starting 2 ranks each with --nnodes 2 --node-rank $SLURM_NODEID --master-addr n1 makes a
# 4-rank torchrun-style world across the namespace nodes whose TCP bootstrap succeeds; the
# children see only the launch, not the outer step. On one node, 3 CPU ranks go through
# mpirun (auto) and stay on that node even inside the allocation.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

[[ -n ${DDPTRAIN:-} && -x $DDPTRAIN ]] || skip "no ddptrain binary (DDPTRAIN=${DDPTRAIN:-unset})"
"$DDPTRAIN" launch --help >/dev/null 2>&1 || skip "ddptrain has no launch yet"

field() { tr ' \t' '\n\n' <<<"$2" | sed -n "s/^$1=//p"; }

echo "# srun -N 2 --ntasks-per-node=1 ddptrain launch --nproc-per-node 2 --nnodes 2 ... bootstrap-test"
out=$(SR_TIMEOUT=90 sr srun -N 2 --ntasks-per-node=1 sh -c "exec '$DDPTRAIN' launch --nproc-per-node 2 \
    --nnodes 2 --node-rank \$SLURM_NODEID --master-addr $DDP_SLURM_MASTER_ADDR --master-port 23456 \
    --spawn env bootstrap-test --via tcp --timeout 30") || fail "two launchers: exit non-zero"
echo "$out"
expect_eq "$(field rank "$out" | sort -n | tr '\n' ' ')" "0 1 2 3 " "two launchers: ranks"
expect_eq "$(field world_size "$out" | sort -u)" 4 "two launchers: world size"
expect_eq "$(field hash "$out" | sort -u | wc -l)" 1 "two launchers: one hash"
expect_eq "$(field master "$out" | sort -u)" "$DDP_SLURM_MASTER_ADDR:23456" "two launchers: master"
[[ $DDP_SLURM_MODE != netns ]] || expect_eq "$(field host "$out" | sort | tr '\n' ' ')" "n1 n1 n2 n2 " "two launchers: hosts"

echo "# srun -N 2 --ntasks-per-node=1 ddptrain launch ... env (the children's world)"
out=$(SR_TIMEOUT=90 sr srun -N 2 --ntasks-per-node=1 sh -c "exec '$DDPTRAIN' launch --nproc-per-node 2 \
    --nnodes 2 --node-rank \$SLURM_NODEID --master-addr $DDP_SLURM_MASTER_ADDR --spawn env env") ||
    fail "launch env: exit non-zero"
echo "$out"
expect_eq "$(field launcher "$out" | sort -u)" torchrun "children's launcher"
expect_eq "$(grep -c 'rank=2 local_rank=0 world_size=4 local_size=2 node_id=1 num_nodes=2' <<<"$out")" 1 \
    "rank 2 is local rank 0 of node 1"

if command -v mpirun >/dev/null; then
    echo "# srun -N 1 -n 1 ddptrain launch --nproc-per-node 3 bootstrap-test (auto: mpirun)"
    out=$(SR_TIMEOUT=90 sr srun -N 1 -n 1 -w n2 env DDP_TEST_FAKE_GPUS=0 "$DDPTRAIN" launch --nproc-per-node 3 \
        bootstrap-test --timeout 30) ||
        fail "mpirun in a step: exit non-zero"
    echo "$out"
    expect_eq "$(field via "$out" | sort -u)" mpi "mpirun in a step: way"
    expect_eq "$(field rank "$out" | sort -n | tr '\n' ' ')" "0 1 2 " "mpirun in a step: ranks"
    expect_eq "$(field hash "$out" | sort -u | wc -l)" 1 "mpirun in a step: one hash"
    [[ $DDP_SLURM_MODE != netns ]] || expect_eq "$(field host "$out" | sort -u)" n2 "mpirun in a step: stays on n2"
fi

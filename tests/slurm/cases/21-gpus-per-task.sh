#!/usr/bin/env bash
# srun --gpus-per-task=1: each task sees only its own device (CUDA_VISIBLE_DEVICES=i, while
# SLURM_GPUS_ON_NODE counts the step's GPUs on the node), so every rank binds cuda:0, the only
# device it has, and no two ranks of a node share one. Two tasks given one GPU between them
# (--gres=gpu:1) both stop with exit 4 and the advice to use --gpus-per-task=1.
# DDP_TEST_FAKE_GPUS=4: a stand-in for a driver with four devices on each node.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

[[ -n ${DDPTRAIN:-} && -x $DDPTRAIN ]] || skip "no ddptrain binary (DDPTRAIN=${DDPTRAIN:-unset})"
"$DDPTRAIN" env 2>/dev/null | grep -q ' gpus_visible=' || skip "ddptrain env has no GPU binding yet"
[[ $DDP_SLURM_MODE == netns ]] || export MASTER_ADDR=$DDP_SLURM_MASTER_ADDR

field() { tr ' \t' '\n\n' <<<"$2" | sed -n "s/^$1=//p" | head -1; }

echo "# srun -N 2 -n 4 --gpus-per-task=1 env DDP_TEST_FAKE_GPUS=4 ddptrain env"
out=$(sr srun -N 2 -n 4 --gpus-per-task=1 env DDP_TEST_FAKE_GPUS=4 "$DDPTRAIN" env) ||
    fail "--gpus-per-task=1: ddptrain env exited non-zero"
echo "$out"
expect_eq "$(grep -c '^rank=' <<<"$out")" 4 "lines"
pairs=()
while read -r line; do
    r=$(field rank "$line")
    expect_eq "$(field device "$line")" "cuda:0" "rank $r device (its only one)"
    [[ $(field gpus_visible "$line") =~ ^[0-3]$ ]] || fail "rank $r sees more than one GPU: $line"
    pairs+=("$(field node_id "$line"):$(field gpus_visible "$line")")
done <<<"$out"
expect_eq "$(printf '%s\n' "${pairs[@]}" | sort -u | wc -l)" 4 "distinct (node, GPU) pairs"

echo "# srun -N 1 -n 2 --gres=gpu:1 env DDP_TEST_FAKE_GPUS=4 ddptrain env (two ranks, one GPU)"
set +e
out=$(sr srun -N 1 -n 2 --gres=gpu:1 env DDP_TEST_FAKE_GPUS=4 "$DDPTRAIN" env 2>err)
rc=$?
set -e
cat err
expect_eq "$rc" 4 "exit code"
[[ -z $out ]] || fail "printed a binding anyway: $out"
expect_eq "$(grep -c 'would share device 0.*srun --gpus-per-task=1' err)" 2 "advice lines (one per rank)"

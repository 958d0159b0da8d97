#!/usr/bin/env bash
# shellcheck disable=SC2016  # single-quoted commands are expanded by the tasks
# Fake GPUs through gres: --gres=gpu:4 shows all four devices to every task on a node;
# --gpus-per-task=1 gives each task its own single device.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

out=$(sr srun -N 2 -n 8 --gres=gpu:4 sh -c "$node_of_task"'; echo "$SLURM_PROCID $h CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"' | sort -n)
echo "$out"
expect_eq "$(wc -l <<<"$out")" 8 "tasks"
expect_eq "$(awk '{print $3}' <<<"$out" | sort -u)" "CUDA_VISIBLE_DEVICES=0,1,2,3" "--gres=gpu:4 devices"
expect_eq "$(awk '{print $2}' <<<"$out" | sort -u | tr '\n' ' ')" "n1 n2 " "nodes used"

out=$(sr srun -N 2 -n 4 --gpus-per-task=1 sh -c "$node_of_task"'; echo "$SLURM_PROCID $h $CUDA_VISIBLE_DEVICES"' | sort -n)
echo "$out"
expect_eq "$(wc -l <<<"$out")" 4 "tasks"
awk '$3 !~ /^[0-3]$/ {exit 1}' <<<"$out" || fail "--gpus-per-task=1: not one device per task"
expect_eq "$(awk '{print $2, $3}' <<<"$out" | sort -u | wc -l)" 4 "distinct (node, device) pairs"

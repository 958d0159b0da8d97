#!/usr/bin/env bash
# shellcheck disable=SC2016  # single-quoted commands are expanded by the tasks
# Every task sees the step's layout: SLURM_STEP_NODELIST=n[1-2], SLURM_STEP_TASKS_PER_NODE in
# Slurm's compressed form, SLURM_PROCID 0..3 placed as that layout says (block: n1 fills first),
# SLURM_NODEID / SLURM_LOCALID consistent with the node each task really runs on.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

fields='echo "$SLURM_PROCID $SLURM_NODEID $SLURM_LOCALID $h $SLURM_STEP_NODELIST $SLURM_STEP_TASKS_PER_NODE $SLURM_STEP_NUM_TASKS $SLURM_STEP_NUM_NODES"'

# check LAYOUT_NAME EXPECTED_LINES srun-options...
check() {
    local what=$1 want=$2 out
    shift 2
    out=$(sr srun -N 2 -n 4 "$@" sh -c "$node_of_task; $fields" | sort -n)
    echo "# srun -N 2 -n 4${*:+ $*}"
    echo "$out"
    expect_eq "$out" "$want" "$what layout (procid nodeid localid node nodelist tasks_per_node ntasks nnodes)"
}

# Default block distribution with CPUs=8 per node: three tasks on n1, one on n2.
check block "0 0 0 n1 n[1-2] 3,1 4 2
1 0 1 n1 n[1-2] 3,1 4 2
2 0 2 n1 n[1-2] 3,1 4 2
3 1 0 n2 n[1-2] 3,1 4 2"

check ntasks-per-node "0 0 0 n1 n[1-2] 2(x2) 4 2
1 0 1 n1 n[1-2] 2(x2) 4 2
2 1 0 n2 n[1-2] 2(x2) 4 2
3 1 1 n2 n[1-2] 2(x2) 4 2" --ntasks-per-node=2

# Cyclic: same counts per node, ranks dealt round-robin while a node has slots left.
check cyclic "0 0 0 n1 n[1-2] 3,1 4 2
1 1 0 n2 n[1-2] 3,1 4 2
2 0 1 n1 n[1-2] 3,1 4 2
3 0 2 n1 n[1-2] 3,1 4 2" --distribution=cyclic

# shellcheck shell=bash
# tests/slurm/lib.sh: helpers sourced by every case in cases/ (run by run-suite.sh).
# Environment from the suite: CLUSTER (tools/slurm-cluster), DDP_SLURM_BASE, DDP_SLURM_MODE
# (netns | loopback), DDP_SLURM_MASTER_ADDR (address of n1), CASE_DIR (empty, private to the
# case, also its working directory), DDPTRAIN, DDP_SRC.
# A case exits 0 (pass), 77 (skip, with a reason) or anything else (fail, with a reason).
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }

# Run a Slurm client (srun, sbatch, ...) in the controller's namespaces, bounded in time:
# a request Slurm cannot meet pends forever.
sr() { timeout "${SR_TIMEOUT:-60}" "$CLUSTER" run "$@"; }

# expect_eq ACTUAL EXPECTED WHAT
expect_eq() {
    [[ $1 == "$2" ]] || fail "$3: expected '$2', got '$1'"
}

# untime: stdin to stdout without the ISO 8601 time that starts every line of rank 0's log
# ("2026-12-03T10:15:02+01:00 done: ..." -> "done: ...").
untime() { sed -E 's/^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[+-][0-9]{2}:[0-9]{2} //'; }

# The name of the node a task runs on: its real hostname in netns mode (which must agree with
# slurmd's node name), SLURMD_NODENAME on loopback where all nodes share one hostname.
# shellcheck disable=SC2034,SC2016  # used by the cases, expanded by the task's shell
node_of_task='if [ "$DDP_SLURM_MODE" = netns ]; then h=$(hostname); else h=$SLURMD_NODENAME; fi'

# addr_of NODE: the address a node's name resolves to, seen from that node.
addr_of() { sr srun -N 1 -n 1 -w "$1" getent ahostsv4 "$1" | awk 'NR==1 {print $1}'; }

# --- for the training cases (10-19) -------------------------------------------------------

# Skip unless $DDPTRAIN is an executable.
need_ddptrain() {
    [[ -n ${DDPTRAIN:-} && -x $DDPTRAIN ]] || skip "no ddptrain binary (DDPTRAIN=${DDPTRAIN:-unset})"
}

# compare_h5 A.h5 B.h5 TOL: tests/compare_h5.py with the system python3 (it has h5py).
compare_h5() { /usr/bin/python3 "$DDP_SRC/tests/compare_h5.py" "$@"; }
need_h5py() { /usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null || skip "/usr/bin/python3 has no h5py"; }

# fashion_h5: print the path of Fashion-MNIST in ddptrain's HDF5 layout, imported once per suite
# run into the suite's work directory (a parent of every CASE_DIR, visible from every node).
# Use as data=$(fashion_h5): a skip or failure inside still ends the case (set -e).
fashion_h5() {
    local src=${DDP_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
    local dst=${DDP_SLURM_SHARED:-$(dirname "$CASE_DIR")}/fashion-mnist.h5
    [[ -d $src ]] || skip "no Fashion-MNIST in $src (DDP_FASHION_DIR)" >&2   # called in $(...)
    (
        flock 8
        [[ -s $dst ]] || "$DDPTRAIN" data idx --dir "$src" -o "$dst" --force >&2
    ) 8>"$dst.lock" || fail "could not import Fashion-MNIST from $src"
    echo "$dst"
}

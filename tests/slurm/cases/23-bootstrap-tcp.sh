#!/usr/bin/env bash
# The TCP rendezvous across the two namespace nodes: rank 0 on n1 serves 128 random bytes at
# n1's address and the derived port, ranks on n1 and n2 receive them. The MPI way (srun
# --mpi=pmix) gives the same. A master address that is not rank 0's host makes rank 0 warn
# and the others stop within the timeout, naming the address they could not reach (exit 4).
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

[[ -n ${DDPTRAIN:-} && -x $DDPTRAIN ]] || skip "no ddptrain binary (DDPTRAIN=${DDPTRAIN:-unset})"
"$DDPTRAIN" bootstrap-test --help >/dev/null 2>&1 || skip "ddptrain has no bootstrap-test yet"
[[ $DDP_SLURM_MODE == netns ]] || export MASTER_ADDR=$DDP_SLURM_MASTER_ADDR

field() { tr ' \t' '\n\n' <<<"$2" | sed -n "s/^$1=//p"; }

echo "# srun -N 2 --ntasks-per-node=2 ddptrain bootstrap-test --via tcp"
out=$(SR_TIMEOUT=90 sr srun -N 2 --ntasks-per-node=2 "$DDPTRAIN" bootstrap-test --via tcp --timeout 30) ||
    fail "tcp: exit non-zero"
echo "$out"
expect_eq "$(field rank "$out" | sort -n | tr '\n' ' ')" "0 1 2 3 " "tcp: ranks"
expect_eq "$(field via "$out" | sort -u)" tcp "tcp: way"
expect_eq "$(field hash "$out" | sort -u | wc -l)" 1 "tcp: one hash on every rank"
master=$(field master "$out" | sort -u)
expect_eq "$(wc -l <<<"$master")" 1 "tcp: one master for all"
expect_eq "${master%:*}" "$DDP_SLURM_MASTER_ADDR" "tcp: master address (n1)"
[[ $DDP_SLURM_MODE != netns ]] || expect_eq "$(field host "$out" | sort | tr '\n' ' ')" "n1 n1 n2 n2 " "tcp: hosts"

if command -v mpirun >/dev/null && sr srun --mpi=list 2>&1 | grep -qw pmix; then
    echo "# srun -N 2 -n 4 --mpi=pmix ddptrain bootstrap-test (auto: mpi)"
    out=$(SR_TIMEOUT=90 sr srun -N 2 -n 4 --mpi=pmix "$DDPTRAIN" bootstrap-test --timeout 30) ||
        fail "mpi: exit non-zero"
    echo "$out"
    expect_eq "$(field via "$out" | sort -u)" mpi "mpi: way"
    expect_eq "$(field hash "$out" | sort -u | wc -l)" 1 "mpi: one hash on every rank"
    expect_eq "$(field rank "$out" | sort -n | tr '\n' ' ')" "0 1 2 3 " "mpi: ranks"
else
    echo "no pmix plugin or mpirun: the MPI way is not checked here"
fi

if [[ $DDP_SLURM_MODE == netns ]]; then
    n2=$(addr_of n2)
    echo "# MASTER_ADDR=$n2 (n2) but rank 0 runs on n1"
    set +e
    MASTER_ADDR=$n2 sr srun -N 2 -n 2 "$DDPTRAIN" bootstrap-test --via tcp --timeout 3 >out 2>err
    rc=$?
    set -e
    cat out err
    expect_eq "$rc" 4 "wrong master: exit code"
    grep -q "^ddptrain: n1 rank 0: warning: master address $n2 is not an address of this host (n1)" err ||
        fail "wrong master: rank 0 did not warn"
    grep -q "^ddptrain: n2 rank 1: could not reach rank 0's rendezvous at $n2:[0-9]* .* within 3 s" err ||
        fail "wrong master: rank 1 did not name the address"
fi

#!/usr/bin/env bash
# The bootstrap through Slurm's PMI2 key-value store: under srun --mpi=pmi2 rank 0 publishes
# 128 random bytes (an NCCL id) and all four ranks on two nodes receive the same bytes, with
# --via pmi2 and with auto; 4000 bytes (8 chunks of one PMI2 value each) as well. Without
# --mpi=pmi2 (no PMI_FD) asking for pmi2 stops at once with exit 4.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

[[ -n ${DDPTRAIN:-} && -x $DDPTRAIN ]] || skip "no ddptrain binary (DDPTRAIN=${DDPTRAIN:-unset})"
"$DDPTRAIN" bootstrap-test --help >/dev/null 2>&1 || skip "ddptrain has no bootstrap-test yet"
"$DDPTRAIN" --version 2>/dev/null | grep -q 'bootstrap: pmi2' || skip "ddptrain built without libpmi2"
sr srun --mpi=list 2>&1 | grep -qw pmi2 || skip "this Slurm has no pmi2 plugin"
[[ $DDP_SLURM_MODE == netns ]] || export MASTER_ADDR=$DDP_SLURM_MASTER_ADDR

field() { tr ' \t' '\n\n' <<<"$2" | sed -n "s/^$1=//p"; }

# check TITLE VIA LEN OUTPUT: 4 ranks, one hash, the given way and length
check() {
    echo "$4"
    expect_eq "$(field rank "$4" | sort -n | tr '\n' ' ')" "0 1 2 3 " "$1: ranks"
    expect_eq "$(field via "$4" | sort -u)" "$2" "$1: way"
    expect_eq "$(field len "$4" | sort -u)" "$3" "$1: length"
    expect_eq "$(field hash "$4" | sort -u | wc -l)" 1 "$1: one hash on every rank"
    [[ $DDP_SLURM_MODE != netns ]] || expect_eq "$(field host "$4" | sort -u | tr '\n' ' ')" "n1 n2 " "$1: hosts"
}

echo "# srun --mpi=pmi2 -N 2 -n 4 ddptrain bootstrap-test --via pmi2"
out=$(sr srun --mpi=pmi2 -N 2 -n 4 "$DDPTRAIN" bootstrap-test --via pmi2 --timeout 30) ||
    fail "pmi2: exit non-zero"
check pmi2 pmi2 128 "$out"
first=$(field hash "$out" | head -1)

echo "# srun --mpi=pmi2 -N 2 -n 4 ddptrain bootstrap-test (auto) --len 4000"
out=$(sr srun --mpi=pmi2 -N 2 -n 4 "$DDPTRAIN" bootstrap-test --len 4000 --timeout 30) ||
    fail "auto under pmi2: exit non-zero"
check "auto, 4000 bytes" pmi2 4000 "$out"

out=$(sr srun --mpi=pmi2 -N 2 -n 4 "$DDPTRAIN" bootstrap-test --via pmi2 --timeout 30) ||
    fail "pmi2 again: exit non-zero"
check "pmi2 again" pmi2 128 "$out"
[[ $(field hash "$out" | head -1) != "$first" ]] || fail "two jobs received the same bytes: not random"

echo "# srun -N 2 -n 2 ddptrain bootstrap-test --via pmi2 (no --mpi=pmi2)"
set +e
sr srun -N 2 -n 2 "$DDPTRAIN" bootstrap-test --via pmi2 --timeout 30 >out 2>err
rc=$?
set -e
cat err
expect_eq "$rc" 4 "pmi2 without --mpi=pmi2: exit code"
expect_eq "$(grep -c 'PMI_FD is not set.*srun --mpi=pmi2' err)" 2 "pmi2 without --mpi=pmi2: one line per rank"

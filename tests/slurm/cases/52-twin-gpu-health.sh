#!/usr/bin/env bash
# `ddptrain validate --slurm-health --drain` on 2 nodes x 4 twin GPUs (build/ddptrain-twin and
# the twin's NVML, build/tests/twin/libnvidia-ml.so.1, docs/gpu.md): one process per node reads
# the health of every GPU of its node. DDP_EMU_NVML_FAULT=ecc:2@n2/3 puts 2 uncorrected ECC
# errors on GPU 3 of n2 only: n2's check fails naming that GPU and drains n2 with the reason;
# n1 passes and is not drained. Without the fault neither node fails.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"
need_ddptrain
TWIN=${DDPTRAIN_TWIN:-$(dirname "$DDPTRAIN")/ddptrain-twin}
[[ -x $TWIN ]] || skip "no ddptrain-twin (built where a C++20 compiler is; -Dtwin)"
[[ $DDP_SLURM_MODE == netns ]] || skip "needs the netns cluster (node names n1, n2)"
NVML_DIR=$(dirname "$TWIN")/tests/twin
[[ -e $NVML_DIR/libnvidia-ml.so.1 ]] || skip "no twin NVML in $NVML_DIR"
restore() { sr scontrol update nodename=n1,n2 state=resume >/dev/null 2>&1 || true; }
trap restore EXIT
run=(srun -N 2 -n 2 --ntasks-per-node=1 --gres=gpu:4 "$TWIN" validate --slurm-health --drain
    --budget-s 100 --config "$DDP_SRC/tests/validate/fast.ini")
node_state() { sr scontrol show node "$1" | grep -oE 'State=[A-Z+_]+|Reason=.*' | tr '\n' ' '; }

rc=0
LD_LIBRARY_PATH=$NVML_DIR SR_TIMEOUT=140 sr "${run[@]}" >ok.log 2>&1 || rc=$?
grep -E '^(validate|FAIL)|gpu health read' ok.log
expect_eq "$rc" 0 "healthy: exit code"
[[ $(node_state n1) != *DRAIN* && $(node_state n2) != *DRAIN* ]] || fail "healthy: a node drained"

rc=0
LD_LIBRARY_PATH=$NVML_DIR DDP_EMU_NVML_FAULT=ecc:2@n2/3 SR_TIMEOUT=140 sr "${run[@]}" >bad.log 2>&1 ||
    rc=$?
grep -E '^(validate|FAIL)|drained' bad.log || tail -n 20 bad.log
expect_eq "$rc" 1 "ECC fault on n2 GPU 3: exit code"
grep -q '^FAIL gpu health: ecc: 2 uncorrected volatile errors on GPU 3 (00000000:03:00.0) of n2$' \
    bad.log || fail "n2's GPU 3 not named"
expect_eq "$(grep -c '^FAIL ' bad.log)" 1 "failures"
s1=$(node_state n1) s2=$(node_state n2)
echo "n1: $s1"
echo "n2: $s2"
[[ $s2 == *DRAIN* && $s2 == *"Reason=ddptrain validate: gpu health: ecc: 2 uncorrected"* ]] ||
    fail "n2 not drained for its GPU: $s2"
[[ $s1 != *DRAIN* ]] || fail "healthy n1 drained: $s1"

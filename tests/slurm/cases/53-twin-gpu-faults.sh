#!/usr/bin/env bash
# Every GPU fault of `ddptrain validate` on 2 nodes x 2 twin GPUs (build/ddptrain-twin and the
# twin's NVML, docs/gpu.md), as a cluster sees it: under srun -N 2 -n 4 --gres=gpu:2 (ranks 0-1
# on n1, 2-3 on n2, each bound to its GPU) the measurement faults slow_hbm, slow_tensor and
# bad_devmem (DDP_TEST_VALIDATE_FAULT) and the NVML faults remap_pending, xid:79 and thermal
# (DDP_EMU_NVML_FAULT) each fail exactly the rank and GPU they were planted on, with their
# reason, and no other; then `--slurm-health --drain` (one process per node) with each fault
# planted on one node (KIND:0@NODE, KIND@NODE/GPU) drains that node with the reason and leaves
# the other alone; the node is resumed before the next fault. Floors for the one-GPU health
# runs (no other GPU to compare with) come from the clean srun run: a tenth of its slowest GPU,
# ten times the rate of a faulty one. Small sizes (q.ini below) keep the case fast.
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
export DDP_EMU_GPUS=2 LD_LIBRARY_PATH=$NVML_DIR

# Tiny sizes. A faulty GPU reports a hundredth of its rate, an outlier below min_fraction; a
# healthy one whose stream threads share a core with a bound rank is not, since a twin GPU's
# events count the CPU time its threads ran (docs/gpu.md, the twin's clock).
cat >q.ini <<'INI'
[validate]
min_fraction = 0.05
timeout_s = 60
rounds = 2
[gemm]
n_quick = 64
reps_quick = 2
seconds_quick = 0.02
[triad]
mib_quick = 2
reps_quick = 2
seconds_quick = 0.02
[allreduce]
max_bytes_quick = 4096
blocks_quick = 1
block_ms = 1
[golden]
steps_quick = 4
INI
ranks=(srun -N 2 -n 4 --ntasks-per-node=2 --gres=gpu:2 "$TWIN" validate --quick
    --config "$CASE_DIR/q.ini")
health=(srun -N 2 -n 2 --ntasks-per-node=1 --gres=gpu:2 "$TWIN" validate --slurm-health --drain
    --budget-s 100 --config "$CASE_DIR/q.ini" --expect "$CASE_DIR/floors.ini")
node_state() { sr scontrol show node "$1" | grep -oE 'State=[A-Z+_]+|Reason=.*' | tr '\n' ' '; }

# --- srun, 4 ranks: clean, then the faults on ranks 1-3 (rank 0 stays clean) ------------------
rc=0
SR_TIMEOUT=100 sr "${ranks[@]}" --json "$CASE_DIR/ok.json" >ok.log 2>&1 || rc=$?
grep -E '^(validate|FAIL)' ok.log || tail -n 20 ok.log
# 6: retest, a CPU rate short only while other processes loaded the machine (never a FAIL)
[[ $rc == 0 || ($rc == 6 && $(grep -c '^FAIL ' ok.log) == 0) ]] || fail "clean: exit code $rc"
/usr/bin/python3 - ok.json >floors.ini <<'PY' || fail "clean: no GPU rates in the JSON"
import json, sys
g = json.load(open(sys.argv[1]))["gpus"]
assert len(g) == 4 and all(x["verdict"] == "PASS" for x in g), g
low = lambda *k: min(x[y] for x in g for y in k) / 10
print("[gpu]\nhbm_min_gbs = %.4g\ntf32_min_tflops = %.4g\nbf16_min_tflops = %.4g"
      % (low("hbm_copy_gbs", "hbm_triad_gbs"), low("tf32_gemm_tflops"), low("bf16_gemm_tflops")))
PY
cat floors.ini

# JSON failures of a faulty run, as "check rank" lines, sorted
failures() {
    /usr/bin/python3 -c 'import json, sys
for f in json.load(open(sys.argv[1]))["failures"]: print(f["check"], f["rank"])' "$1" |
        LC_ALL=C sort -u
}
rc=0
DDP_TEST_VALIDATE_FAULT=slow_hbm:1,slow_tensor:2,bad_devmem:3 SR_TIMEOUT=100 \
    sr "${ranks[@]}" --json "$CASE_DIR/meas.json" >meas.log 2>&1 || rc=$?
grep -E '^(validate|FAIL)' meas.log || tail -n 20 meas.log
expect_eq "$rc" 1 "measurement faults: exit code"
for want in 'gpu_hbm: rank 1 on n1 GPU 1 (PCI 00000000:01:00.0): HBM copy [0-9.e-]+ GB/s is 0.0' \
    'gpu_hbm: rank 1 on n1 GPU 1 (PCI 00000000:01:00.0): HBM triad [0-9.e-]+ GB/s is 0.0' \
    'gpu_gemm: rank 2 on n2 GPU 0 (PCI 00000000:00:00.0): TF32 GEMM [0-9.e-]+ TFLOP/s is 0.0' \
    'gpu_gemm: rank 2 on n2 GPU 0 (PCI 00000000:00:00.0): BF16 GEMM [0-9.e-]+ TFLOP/s is 0.0' \
    'gpu_mem: rank 3 on n2 GPU 1 (PCI 00000000:01:00.0): the device-memory pattern test found 3 wrong words'; do
    grep -Eq "^FAIL ${want//[()]/.}" meas.log || fail "measurement faults: no 'FAIL $want'"
done
expect_eq "$(grep -c '^FAIL ' meas.log)" 5 "measurement faults: FAIL lines"
expect_eq "$(failures meas.json | tr '\n' ,)" "gpu_gemm 2,gpu_hbm 1,gpu_mem 3," \
    "measurement faults: JSON failures"

rc=0
DDP_EMU_NVML_FAULT=remap_pending@n1/1,xid:79@n2/0,thermal@n2/1 SR_TIMEOUT=100 \
    sr "${ranks[@]}" --json "$CASE_DIR/nvml.json" >nvml.log 2>&1 || rc=$?
grep -E '^(validate|FAIL)' nvml.log || tail -n 20 nvml.log
expect_eq "$rc" 1 "NVML faults: exit code"
for want in 'remap: a row remapping is pending on GPU 1 (00000000:01:00.0) of n1: reset the GPU' \
    'xid: 1 XID event during the run on GPU 0 (00000000:00:00.0) of n2: XID 79' \
    'clocks: held down by hw thermal slowdown during the run on GPU 1 (00000000:01:00.0) of n2'; do
    grep -Fxq "FAIL gpu health: $want" nvml.log || fail "NVML faults: no 'FAIL gpu health: $want'"
done
expect_eq "$(grep -c '^FAIL ' nvml.log)" 3 "NVML faults: FAIL lines"
expect_eq "$(failures nvml.json | tr '\n' ,)" "gpu health 1,gpu health 2,gpu health 3," \
    "NVML faults: JSON failures (by rank)"
/usr/bin/python3 - nvml.json <<'PY' || fail "NVML faults: gpu_health rows"
import json, sys
rows = {(h["rank"], h["host"], h["gpu"]): h["verdict"] for h in json.load(open(sys.argv[1]))["gpu_health"]}
assert rows == {(0, "n1", 0): "PASS", (1, "n1", 1): "FAIL", (2, "n2", 0): "FAIL",
                (3, "n2", 1): "FAIL"}, rows
PY

# --- --slurm-health --drain: each fault on one node drains that node alone --------------------
# NODE VALIDATE-FAULT NVML-FAULT REASON (the start of the node's drain reason, a grep -E)
cases=(
    "n2|slow_hbm:0@n2||gpu_hbm: rank 0 on n2 GPU 0 \(PCI 00000000:00:00.0\): HBM (copy|triad) [0-9.e-]+ GB/s is below the floor"
    "n1|slow_tensor:0@n1||gpu_gemm: rank 0 on n1 GPU 0 \(PCI 00000000:00:00.0\): (TF32|BF16) GEMM [0-9.e-]+ TFLOP/s is below the floor"
    "n2|bad_devmem:0@n2||gpu_mem: rank 0 on n2 GPU 0 \(PCI 00000000:00:00.0\): the device-memory pattern test found 3 wrong words"
    "n1||remap_pending@n1/1|gpu health: remap: a row remapping is pending on GPU 1 \(00000000:01:00.0\) of n1"
    "n2||xid:79@n2/0|gpu health: xid: 1 XID event during the run on GPU 0 \(00000000:00:00.0\) of n2: XID 79"
    "n1||thermal@n1/1|gpu health: clocks: held down by hw thermal slowdown during the run on GPU 1 \(00000000:01:00.0\) of n1"
)
for c in "${cases[@]}"; do
    IFS='|' read -r node vfault nfault reason <<<"$c"
    other=n1
    [[ $node == n1 ]] && other=n2
    what="${vfault:-$nfault} on $node"
    rc=0
    DDP_TEST_VALIDATE_FAULT=$vfault DDP_EMU_NVML_FAULT=$nfault SR_TIMEOUT=60 sr "${health[@]}" \
        >health.log 2>&1 || rc=$?
    grep -E '^FAIL|drained' health.log || tail -n 20 health.log
    expect_eq "$rc" 1 "--slurm-health, $what: exit code"
    grep -Eq "^FAIL $reason" health.log || fail "--slurm-health, $what: no FAIL line"
    grep '^FAIL ' health.log | grep -Eq "rank 0 on $other |of $other\$|of $other:" &&
        fail "--slurm-health, $what: $other failed too"
    s=$(node_state "$node") o=$(node_state "$other")
    if [[ $s != *DRAIN* ]] || ! grep -Eq "Reason=ddptrain validate: $reason" <<<"$s"; then
        fail "--slurm-health, $what: $node not drained for it: $s"
    fi
    [[ $o != *DRAIN* ]] || fail "--slurm-health, $what: $other drained too: $o"
    sr scontrol update nodename="$node" state=resume
    [[ $(node_state "$node") != *DRAIN* ]] || fail "$node not resumed"
done

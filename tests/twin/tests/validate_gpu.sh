#!/bin/bash
# validate_gpu.sh - `ddptrain validate --quick` on 1 and 2 twin GPUs (suite twin): the GPU rows
# (HBM copy and triad, SGEMM, TF32 and BF16 GEMMs, H2D and D2H copies, the pattern test) appear
# in the table and in the JSON "gpus" member for every rank with its GPU and PCI bus id, and
# a clean run passes (or is "retest", exit 6, when the machine is loaded: timing never decides
# a test). Each GPU fault (DDP_TEST_VALIDATE_FAULT) fails the run with exit 1 and a FAIL line
# for its check naming the rank that injected it, and no GPU failure of the other rank:
#   slow_hbm:R     gpu_hbm   (copy and triad at a hundredth of the rate, as on a GPU)
#   slow_tensor:R  gpu_gemm  (TF32 and BF16 GEMMs at a hundredth)
#   bad_devmem:R   gpu_mem   (the pattern test finds wrong words)
# An expectation file's [gpu] floor above any twin's rate fails every rank for it.
set -u
DDPTRAIN_TWIN=${DDPTRAIN_TWIN:?}
SRC=${DDP_SRC:?}
PY=${PYTHON:-python3}
CFG=$SRC/tests/validate/fast.ini
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# run NAME W [ARGS...]: validate --quick on W twin GPUs (W ranks), output NAME.log, JSON
# NAME.json, exit code in $rc
run() {
    local name=$1 W=$2
    shift 2
    local cmd=("$DDPTRAIN_TWIN" validate --quick --config "$CFG" --json "$name.json" "$@")
    ((W > 1)) && cmd=("$DDPTRAIN_TWIN" launch --nproc-per-node "$W" --spawn env "${cmd[@]:1}")
    local t0=$SECONDS
    DDP_EMU_GPUS=$W timeout 300 "${cmd[@]}" >"$name.log" 2>&1
    rc=$?
    echo "--- $name: $W twin GPU(s), exit $rc, $((SECONDS - t0)) s"
}

# rows NAME W: the table has the GPU header and one row per rank; the JSON names every rank's
# GPU with positive rates and a checked pattern
rows() {
    local name=$1 W=$2
    grep -q "^GPUs: HBM copy and triad" "$name.log" || bad "$name: no GPU table"
    grep -q "sgemm *tf32 *bf16 *h2d *d2h *pattern" "$name.log" || bad "$name: no GPU header"
    $PY - "$name.json" "$W" <<'EOF' || bad "$name: JSON gpus"
import json, sys
d = json.load(open(sys.argv[1]))
W = int(sys.argv[2])
g = d["gpus"]
assert [x["rank"] for x in g] == list(range(W)), g
for x in g:
    assert x["device"] == x["rank"] and x["twin"] and x["pci_bus_id"].count(":") == 2, x
    for k in ("hbm_copy_gbs", "hbm_triad_gbs", "sgemm_tflops", "tf32_gemm_tflops",
              "bf16_gemm_tflops", "h2d_gbs", "d2h_gbs"):
        assert x[k] > 0, (k, x)
    assert x["pattern_words"] > 0 and x["pattern_wrong_words"] >= 0, x
EOF
}

for W in 1 2; do
    run clean$W $W
    if [ $rc = 0 ] || { [ $rc = 6 ] && ! grep -q "^FAIL" clean$W.log; }; then
        rows clean$W $W
        grep -q "^FAIL gpu_" clean$W.log && bad "clean$W: a GPU check failed"
    else
        bad "clean$W: exit $rc"
        tail -20 clean$W.log
    fi
done

# fault KIND RANK CHECK: exit 1, a FAIL line for CHECK naming RANK and its GPU, no GPU failure
# of the other rank, the JSON failure and verdicts to match
fault() {
    local kind=$1 rank=$2 check=$3 other=$((1 - $2))
    DDP_TEST_VALIDATE_FAULT=$kind:$rank run $kind 2
    [ $rc = 1 ] || bad "$kind:$rank: exit $rc, want 1"
    grep -q "^FAIL $check: rank $rank on .* GPU $rank (PCI " $kind.log ||
        bad "$kind:$rank: no FAIL $check line naming rank $rank and its GPU"
    grep -q "^FAIL gpu_[a-z]*: rank $other " $kind.log && bad "$kind:$rank: rank $other failed"
    grep "^FAIL $check" $kind.log | head -2
    $PY - "$kind.json" "$rank" "$check" <<'EOF' || bad "$kind:$rank: JSON"
import json, sys
d = json.load(open(sys.argv[1]))
r, check = int(sys.argv[2]), sys.argv[3]
f = [x for x in d["failures"] if x["check"].startswith("gpu_")]
assert f and all(x["rank"] == r and x["check"] == check for x in f), f
v = {x["rank"]: x["verdict"] for x in d["gpus"]}
assert v[r] == "FAIL" and v[1 - r] == "PASS", v
EOF
}
fault slow_hbm 1 gpu_hbm
fault slow_tensor 0 gpu_gemm
fault bad_devmem 1 gpu_mem
grep -q "pattern test found 3 wrong words" bad_devmem.log || bad "bad_devmem: count not named"

# a floor no twin reaches: every rank fails it, naming the key and the file
printf '[node]\ntype = twin\n[gpu]\nbf16_min_tflops = 5000\n' >floor.ini
run floor 2 --expect floor.ini
[ $rc = 1 ] || bad "floor: exit $rc, want 1"
for r in 0 1; do
    grep -q "^FAIL gpu_gemm: rank $r .*below the floor \[gpu\] bf16_min_tflops = 5000 of floor.ini" \
        floor.log || bad "floor: rank $r not failed for bf16_min_tflops"
done

if [ $fails -ne 0 ]; then
    echo "validate_gpu: $fails failure(s)"
    exit 1
fi
echo "validate_gpu: all passed"

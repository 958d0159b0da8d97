#!/bin/bash
# bf16_twin.sh - [train] precision = bf16 trains as well as fp32: the
# shipped fashion-mlp and fashion-cnn configs on the real Fashion-MNIST, on the GPU twin
# (build/ddptrain-twin, device = cuda, 2 twin GPUs under `launch`, batch 128 each: the configs'
# global batch of 256), once in fp32 and once in bf16 with the same seeds; each trained model.h5
# is then evaluated on the whole test split by the CPU backend (checkpoints are fp32 and load on
# any device), and |acc_bf16 - acc_fp32| must be <= MAX_DIFF (0.005) for the MLP.
# The twin runs GPU kernels on the CPU, slower than the CPU backend, so in CI both runs of a
# config are shortened identically: max_steps (MLP_STEPS, CNN_STEPS) with the cosine schedule
# annealed over them; the steps, times and accuracies are printed. The CNN is far from trained
# after 60 steps (72 %), where bf16's rounding moves the trajectory by more than 0.5 points
# either way (+0.6 at 60 steps, -1.2 at 120): its bound there is CNN_MAX_DIFF (0.015), a check
# that bf16 trains the CNN. The issue's 0.5 points on trained models is the full run (both
# configs' whole schedules, about 70 min on 2 cores; STEPS=0 means the config's schedule):
#   DDPTRAIN=build/ddptrain DDPTRAIN_TWIN=build/ddptrain-twin DDP_SRC=. DDP_BUILD=build \
#       MLP_STEPS=0 CNN_STEPS=0 CNN_MAX_DIFF=0.005 RUN_TIMEOUT=5400 tests/slow/bf16_twin.sh
# (docs/gpu.md gives its figures). RUN_TIMEOUT bounds each training run (seconds). Each twin
# rank runs its cuBLAS GEMMs on its own stream thread: one OpenBLAS thread each, as 2 ranks
# share 2 cores (more only spin against each other).
set -u
DDPTRAIN=${DDPTRAIN:?} DDPTRAIN_TWIN=${DDPTRAIN_TWIN:?} DDP_SRC=${DDP_SRC:?}
MLP_STEPS=${MLP_STEPS:-235} CNN_STEPS=${CNN_STEPS:-60} MAX_DIFF=${MAX_DIFF:-0.005}
CNN_MAX_DIFF=${CNN_MAX_DIFF:-0.015} RUN_TIMEOUT=${RUN_TIMEOUT:-1500}
data=${DDP_DATASET:-${DDP_BUILD:?}/fashion-mnist.h5}
if [ ! -f "$data" ]; then
    [ -d /usr/share/datasets/fashion-mnist ] || { echo "dataset-fashion-mnist not installed"; exit 77; }
    "$DDPTRAIN" data idx --dir /usr/share/datasets/fashion-mnist -o "$data" || exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# acc CONFIG PRECISION STEPS: train on 2 twin GPUs, print the CPU's test accuracy of model.h5
acc() {
    local cfg=$DDP_SRC/configs/$1.ini out=$work/$1-$2 t0
    t0=$(date +%s)
    local -a steps=(--set train.max_steps="$3")
    [ "$3" = 0 ] && steps=() # the config's whole schedule
    if ! OPENBLAS_NUM_THREADS=1 timeout "$RUN_TIMEOUT" "$DDPTRAIN_TWIN" launch --nproc-per-node 2 \
            "$cfg" --set data.file="$data" --set job.output="$out" --set train.device=cuda \
            --set train.precision="$2" --set data.batch_size=128 "${steps[@]}" \
            --set train.log_every=1000 --set data.test= --set checkpoint.every_epochs=0 \
            > "$out.log" 2>&1; then
        echo "FAIL $1 $2: twin run failed" >&2; tail -5 "$out.log" >&2; return 1
    fi
    grep -q "device cuda:0 (ddptrain GPU twin" "$out.log" ||
        { echo "FAIL $1 $2: not on the twin GPU" >&2; grep '^ddptrain' "$out.log" >&2; return 1; }
    local t1 line
    t1=$(date +%s)
    line=$("$DDPTRAIN" eval "$cfg" --checkpoint "$out/model.h5" --set data.file="$data" \
        --set train.device=cpu --set train.precision=fp32 2>&1 | grep "test loss") ||
        { echo "FAIL $1 $2: evaluation failed" >&2; return 1; }
    echo "$1 $2: $(sed -n 's/.*done: \([0-9]* steps\) in.*/\1/p' "$out.log" | head -1) on 2 twin" \
        "GPUs in $((t1 - t0)) s; $line" >&2
    sed -n 's/.* accuracy \([0-9.]*\) .*/\1/p' <<<"$line"
}

fail=0
for spec in "fashion-mlp $MLP_STEPS" "fashion-cnn $CNN_STEPS"; do
    read -r cfg steps <<<"$spec"
    if ! a32=$(acc "$cfg" fp32 "$steps") || ! a16=$(acc "$cfg" bf16 "$steps") ||
            [ -z "$a32" ] || [ -z "$a16" ]; then
        fail=1; continue
    fi
    max=$MAX_DIFF
    [ "$cfg" = fashion-cnn ] && max=$CNN_MAX_DIFF
    if awk -v a="$a16" -v b="$a32" -v m="$max" 'BEGIN { d = a - b; exit !(d <= m && -d <= m) }'; then
        echo "ok   $cfg: test accuracy fp32 $a32, bf16 $a16 (|diff| <= $max)"
    else
        echo "FAIL $cfg: test accuracy fp32 $a32, bf16 $a16 (|diff| > $max)"; fail=1
    fi
done
exit $fail

#!/bin/bash
# limits.sh - the GPU's limits are found before anything runs (suite twin): each case must give
# exit 2 and the same one line from `ddptrain-twin check` and from the run (which fails at model
# build, before the first step), naming the layer, the batch size, the limit and the fix.
#   a convolution whose output at the job's batch size passes cuDNN's 2^31 - 1 values per
#     tensor (the twin's cuDNN refuses such a descriptor, as cuDNN does);
#   a model whose activations, or whose parameters, pass the twin GPU's memory
#     (DDP_EMU_MEM_MIB);
#   [train] device = auto where CUDA_VISIBLE_DEVICES hides every twin GPU or names one that
#     does not exist: refused, not trained on the CPU.
# And the controls: the same jobs within the limits pass `check`.
set -u
DDPTRAIN_TWIN=${DDPTRAIN_TWIN:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fail=0

"$DDPTRAIN_TWIN" data synth -o c.h5 --shape 3,32,32 --classes 4 --train 64 --test 16 \
    --seed 1 >/dev/null || { echo "FAIL: cannot make the synthetic dataset"; exit 1; }
cat > job.ini <<'INI'
[job]
output = out
[data]
file = c.h5
batch_size = 8
[model]
layers = conv2d(64, 3, pad=1), relu, flatten, linear(4)
[train]
epochs = 1
device = auto
INI

# expect NAME CODE PATTERN [env VAR=VALUE ...] -- [--set ...]: check and the run (which must
# stop at build: nothing written) exit CODE with the same one line matching PATTERN
expect() {
    local name=$1 code=$2 pat=$3 ok=1 why=""
    shift 3
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    rm -rf out
    env "${envs[@]}" timeout -k 5 120 "$DDPTRAIN_TWIN" check job.ini "$@" >check-out.txt \
        2>check-err.txt
    local crc=$?
    if [ "$code" -eq 0 ]; then
        [ $crc -eq 0 ] || { ok=0; why="check exit $crc: $(head -c 300 check-err.txt)"; }
    else
        env "${envs[@]}" timeout -k 5 120 "$DDPTRAIN_TWIN" job.ini "$@" >run-out.txt \
            2>run-err.txt
        local rc=$?
        [ $crc -eq "$code" ] || { ok=0; why="check exit $crc, want $code"; }
        [ $rc -eq "$code" ] || { ok=0; why="$why; run exit $rc, want $code"; }
        [ "$(grep -c . run-err.txt)" -eq 1 ] || { ok=0; why="$why; run stderr not one line"; }
        grep -q -- "$pat" run-err.txt || { ok=0; why="$why; run stderr lacks '$pat'"; }
        # the free memory moves between the two runs; everything else is the same
        [ "$(sed 's/has [0-9.]* [KMGTi]*B available/has N available/' check-err.txt)" = \
          "$(sed 's/has [0-9.]* [KMGTi]*B available/has N available/' run-err.txt)" ] ||
            { ok=0; why="$why; check and run differ"; }
        [ ! -e out/metrics.jsonl ] || { ok=0; why="$why; the run started"; }
    fi
    if [ $ok -eq 1 ]; then
        printf 'ok   %-40s %s\n' "$name" "$(head -c 220 run-err.txt 2>/dev/null)"
    else
        printf 'FAIL %-40s %s\n' "$name" "$why"
        sed 's/^/     | /' check-err.txt run-err.txt 2>/dev/null | head -6
        fail=1
    fi
    rm -f run-err.txt
}

# 64 x 32 x 32 values per sample: 32768 samples are 2^31, one more than cuDNN takes
expect "cuDNN: tensor over 2^31 - 1 values" 2 \
    "\[model\] layers: layer 1 conv2d(64, 3): its output for a batch of 32768 has 2147483648 values (65536 per sample), more than cuDNN's limit of 2147483647 (2^31 - 1) per tensor; lower \[data\] batch_size to at most 32767" \
    -- --set data.batch_size=32768
# within cuDNN's limit, but 64 MiB of twin GPU cannot hold a batch of 256 (4 x 64 MiB)
expect "activations beyond the GPU's memory" 2 \
    "\[model\] layers: layer 1 conv2d(64, 3): its outputs for a batch of 256 need .* but the GPU has .* available (its free memory now); lower \[data\] batch_size (at most about [0-9]* fits)" \
    DDP_EMU_MEM_MIB=64 -- --set data.batch_size=256
expect "parameters beyond the GPU's memory" 2 \
    "\-\-set model.layers: the model's [0-9]* parameters need .* but the GPU has .* available (its free memory now); make the layers narrower" \
    DDP_EMU_MEM_MIB=64 -- --set "model.layers=flatten, linear(262144), relu, linear(4)" \
    --set data.batch_size=1
expect "control: within both limits" 0 "" DDP_EMU_MEM_MIB=64 -- --set data.batch_size=16

# device = auto on a node with (twin) GPUs all hidden: refused, naming the variable
expect "CUDA_VISIBLE_DEVICES names no GPU" 2 \
    "CUDA_VISIBLE_DEVICES=\"7\" leaves no GPU visible .*unset CUDA_VISIBLE_DEVICES .*\[train\] device = cpu" \
    DDP_EMU_GPUS=4 CUDA_VISIBLE_DEVICES=7 --
expect "CUDA_VISIBLE_DEVICES empty" 2 "CUDA_VISIBLE_DEVICES=\"\" leaves no GPU visible" \
    DDP_EMU_GPUS=4 CUDA_VISIBLE_DEVICES= --
expect "control: CUDA_VISIBLE_DEVICES=2" 0 "" DDP_EMU_GPUS=4 CUDA_VISIBLE_DEVICES=2 --
expect "control: device = cpu, GPUs hidden" 0 "" DDP_EMU_GPUS=4 CUDA_VISIBLE_DEVICES=7 -- \
    --set train.device=cpu
expect "control: no driver (no twin GPU)" 0 "" DDP_EMU_GPUS=0 CUDA_VISIBLE_DEVICES=7 --
exit $fail

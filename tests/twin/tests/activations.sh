#!/bin/bash
# activations.sh - [train] activations on one twin GPU (suite twin), by `ddptrain check` (the
# choice, the log's line, the memory estimate; no step runs):
#  - auto under bf16 stores the activations as bf16 and says so; the estimate of the
#    activations' memory is about half of fp32 storage's; under tf32 nothing changes;
#  - bf16 where the convolutions use im2col (no cuDNN, or [train] conv = im2col) exits 2
#    naming the key; auto there stores fp32 and says why;
#  - training (conv, batchnorm, maxpool, dropout, linear; 20 SGD steps): bf16 storage ends no
#    further from the CPU's fp32 run than bf16 math on fp32 storage does (within 1.5 x its
#    worst relative difference; measured 0.096 against 0.092: bf16's rounding, not the
#    storage, sets the distance) and differs from it (the storage took effect); its
#    checkpoint resumes under activations = fp32 within the same bound.
set -u
DDPTRAIN=${DDPTRAIN:?} DDPTRAIN_TWIN=${DDPTRAIN_TWIN:?} DDP_SRC=${DDP_SRC:?}
PY=/usr/bin/python3
. "$DDP_SRC/tests/lib.sh"
need_h5py
enter_workdir
fail=0
"$DDPTRAIN" data synth -o d.h5 --shape 3,16,16 --classes 4 --train 64 --test 16 --seed 3 \
    >/dev/null || exit 1
cat > j.ini <<INI
[data]
file = d.h5
batch_size = 64
[model]
layers = conv2d(16, 3, pad=1), batchnorm, relu, maxpool(2), conv2d(16, 3, pad=1), relu,
  flatten, linear(32), relu, linear(4)
[optim]
name = sgd
lr = 0.05
[train]
epochs = 1
precision = bf16
INI
check() { # check OUT [ENV=V ...] [-- --set ...]: `ddptrain check` on one twin GPU
    local out=$1; shift
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift
    env "${envs[@]}" timeout 120 "$DDPTRAIN_TWIN" check j.ini "$@" > "$out.txt" 2>&1
}
expect() { # expect WHAT FILE PATTERN
    if grep -q -- "$3" "$2"; then
        echo "ok   $1"
    else
        echo "FAIL $1: no '$3' in $2:"; grep -e convolutions -e memory "$2"; fail=1
    fi
}
act_kib() { # the activations' estimate of a check's memory line, in KiB
    sed -n 's/.*memory .* activations \([0-9.]*\) \([KMG]\)iB.*/\1 \2/p' "$1" |
        awk '{ print $1 * ($2 == "K" ? 1 : $2 == "M" ? 1024 : 1048576) }'
}

check bf16 || { echo "FAIL: check under bf16"; cat bf16.txt; exit 1; }
expect "auto under bf16 stores bf16" bf16.txt \
    "convolutions  cuDNN .*; activations channels-last (NHWC.*), stored as bf16 (\[train\] activations = auto under bf16)"
check fp32 -- --set train.activations=fp32 || { echo "FAIL: fp32 storage"; cat fp32.txt; exit 1; }
if grep -q "stored as" fp32.txt; then echo "FAIL: activations = fp32 names a storage"; fail=1
else echo "ok   activations = fp32 keeps today's line"; fi
a16=$(act_kib bf16.txt) a32=$(act_kib fp32.txt)
if [ -n "$a16" ] && [ -n "$a32" ] &&
    awk -v a="$a16" -v b="$a32" 'BEGIN { exit !(a > 0.45 * b && a < 0.6 * b) }'; then
    echo "ok   activations $a16 KiB in bf16, $a32 KiB in fp32"
else
    echo "FAIL activations '$a16' KiB in bf16, '$a32' KiB in fp32: not about half"; fail=1
fi
check tf32 -- --set train.precision=tf32 || { echo "FAIL: check under tf32"; cat tf32.txt; exit 1; }
if grep -q "stored as" tf32.txt; then echo "FAIL: tf32 under auto names a storage"; fail=1
else echo "ok   tf32 under auto stores fp32, as before"; fi
check im2col -- --set train.conv=im2col || { echo "FAIL: check on im2col"; cat im2col.txt; exit 1; }
expect "auto on im2col stores fp32 and says why" im2col.txt \
    "stored as fp32 (bf16 storage needs cuDNN's convolutions)"
for how in "DDP_EMU_NO_CUDNN=1 --" "DDP_EMU_NO_CUDNN=0 -- --set train.conv=im2col"; do
    rc=0
    # shellcheck disable=SC2086
    check refused $how --set train.activations=bf16 || rc=$?
    if [ $rc = 2 ] && [ "$(grep -c . refused.txt)" = 1 ] &&
        grep -q "train.activations: bf16 stores .* use im2col .*; set \[train\] activations = auto" \
            refused.txt; then
        echo "ok   bf16 on im2col refused (exit 2): $how"
    else
        echo "FAIL bf16 on im2col ($how): exit $rc"; cat refused.txt; fail=1
    fi
done

# training: bf16 storage against bf16 math on fp32 storage, both against the CPU's fp32 run
"$DDPTRAIN" data synth -o t.h5 --shape 3,12,12 --classes 4 --train 320 --test 32 --seed 3 \
    >/dev/null || exit 1
cat > t.ini <<INI
[job]
seed = 5
[data]
file = t.h5
batch_size = 16
[model]
layers = conv2d(6, 3, pad=1), batchnorm, relu, maxpool(2), conv2d(8, 3, stride=2),
  relu, flatten, dropout(0.2), linear(16), relu, linear(4)
[optim]
name = sgd
lr = 0.05
momentum = 0.9
[train]
epochs = 1
precision = bf16
[checkpoint]
every_steps = 10
keep = 10
INI
train() { # train OUT ARGS...: t.ini on one twin GPU
    local out=$1; shift
    timeout 300 "$DDPTRAIN_TWIN" t.ini --set job.output="$out" "$@" > "$out.log" 2>&1 ||
        { echo "FAIL: run $out"; tail -5 "$out.log"; exit 1; }
}
worst() { # worst A B: compare_h5's worst relative difference of A's tensors against B's
    $PY "$DDP_SRC/tests/compare_h5.py" "$1/model.h5" "$2/model.h5" 1e9 |
        sed -n 's/.*worst relative difference \([^ ]*\).*/\1/p'
}
"$DDPTRAIN" t.ini --set job.output=cpu --set train.precision=fp32 > cpu.log 2>&1 ||
    { echo "FAIL: CPU run"; tail -5 cpu.log; exit 1; }
train b16
train f32a --set train.activations=fp32
expect "the bf16 run stores bf16" b16.log "stored as bf16"
ck=$(ls b16/checkpoints/ | sort | head -1)
train back --set train.activations=fp32 --set checkpoint.resume="$PWD/b16/checkpoints/$ck"
expect "the fp32-storage run resumed $ck" back.log "resuming from"
ref=$(worst f32a cpu)
for run in b16 back; do
    w=$(worst $run cpu)
    if [ -n "$w" ] && [ -n "$ref" ] && awk -v w="$w" -v r="$ref" 'BEGIN { exit !(w <= 1.5 * r) }'; then
        echo "ok   $run: worst relative difference to the CPU $w (fp32 storage: $ref)"
    else
        echo "FAIL $run: worst relative difference to the CPU '$w', fp32 storage's '$ref' (> 1.5 x)"
        fail=1
    fi
done
d=$(worst b16 f32a)
if [ -n "$d" ] && awk -v d="$d" 'BEGIN { exit !(d > 0) }'; then
    echo "ok   bf16 storage changed the result ($d against fp32 storage)"
else
    echo "FAIL bf16 and fp32 storage gave the same model ('$d'): the storage did not take effect"
    fail=1
fi
exit $fail

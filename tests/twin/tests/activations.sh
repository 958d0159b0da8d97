#!/bin/bash
# activations.sh - [train] activations on one twin GPU (suite twin), by `ddptrain check` (the
# choice, the log's line, the memory estimate; no step runs):
#  - auto under bf16 stores the activations as bf16 and says so; the estimate of the
#    activations' memory is about half of fp32 storage's; under tf32 nothing changes;
#  - bf16 where the convolutions use im2col (no cuDNN, or [train] conv = im2col) exits 2
#    naming the key; auto there stores fp32 and says why.
set -u
DDPTRAIN=${DDPTRAIN:?} DDPTRAIN_TWIN=${DDPTRAIN_TWIN:?} DDP_SRC=${DDP_SRC:?}
. "$DDP_SRC/tests/lib.sh"
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
exit $fail

#!/bin/bash
# layout.sh - [train] layout on one twin GPU and on the CPU (suite twin):
#  - auto under tf32 keeps the activations channels-last and says so in the log and in check;
#    under fp32 they stay NCHW; the CPU ignores the key;
#  - nhwc where the convolutions use im2col (no cuDNN, or [train] conv = im2col) exits 2 naming
#    the key; auto there logs NCHW and why;
#  - a model trained channels-last (3 input channels: the input copy; a flatten of 8x3x3 turned
#    back) ends within 1e-5 of the same run in NCHW, its checkpoint resumes under the other
#    layout and ends within 1e-5 of the uninterrupted run.
set -u
DDPTRAIN=${DDPTRAIN:?} DDPTRAIN_TWIN=${DDPTRAIN_TWIN:?} DDP_SRC=${DDP_SRC:?}
PY=/usr/bin/python3
. "$DDP_SRC/tests/lib.sh"
need_h5py
enter_workdir
fail=0
"$DDPTRAIN" data synth -o d.h5 --shape 3,12,12 --classes 4 --train 320 --test 32 --seed 3 \
    >/dev/null || exit 1
cat > j.ini <<INI
[job]
seed = 5
[data]
file = d.h5
batch_size = 16
[model]
layers = conv2d(6, 3, pad=1), batchnorm, relu, maxpool(2), conv2d(8, 3, stride=2),
  relu, flatten, linear(16), relu, linear(4)
[optim]
name = sgd
lr = 0.05
momentum = 0.9
[train]
epochs = 1
log_every = 5
[checkpoint]
every_steps = 10
keep = 10
INI
cmp_h5() { $PY "$DDP_SRC/tests/compare_h5.py" "$@"; }
twin() { # twin OUT [ENV=V ...] [-- --set ...]: one twin GPU
    local out=$1; shift
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift
    env "${envs[@]}" timeout 300 "$DDPTRAIN_TWIN" j.ini --set job.output="$out" "$@" \
        > "$out.log" 2>&1
}
expect() { # expect WHAT FILE PATTERN
    if grep -q -- "$3" "$2"; then
        echo "ok   $1"
    else
        echo "FAIL $1: no '$3' in $2:"; grep -i -e convolutions -e layout "$2"; fail=1
    fi
}

# the choice, in check and in the run's log
"$DDPTRAIN_TWIN" check j.ini --set train.precision=tf32 > check.txt 2>&1 ||
    { echo "FAIL: check"; cat check.txt; exit 1; }
expect "check under tf32 names channels-last" check.txt \
    "convolutions  cuDNN .*; activations channels-last (NHWC: \[train\] layout = auto"
twin fp32 || { echo "FAIL: fp32 run"; tail -5 fp32.log; exit 1; }
if grep -q "channels-last" fp32.log; then echo "FAIL: fp32 under auto went channels-last"; fail=1
else echo "ok   fp32 under auto stays NCHW"; fi
twin nocudnn DDP_EMU_NO_CUDNN=1 -- --set train.precision=tf32 --set train.max_steps=2 ||
    { echo "FAIL: tf32 run without cuDNN"; tail -5 nocudnn.log; exit 1; }
expect "auto without cuDNN logs NCHW and why" nocudnn.log \
    "activations NCHW: channels-last needs cuDNN, and .*im2col"
for how in "DDP_EMU_NO_CUDNN=1 --" "DDP_EMU_NO_CUDNN=0 -- --set train.conv=im2col"; do
    rc=0
    # shellcheck disable=SC2086
    twin refused $how --set train.layout=nhwc || rc=$?
    if [ $rc = 2 ] && grep -q "train.layout: nhwc keeps .* use im2col .*; set \[train\] layout = auto" \
            refused.log; then
        echo "ok   nhwc on im2col refused (exit 2): $how"
    else
        echo "FAIL nhwc on im2col ($how): exit $rc"; cat refused.log; fail=1
    fi
done
"$DDPTRAIN" j.ini --set train.layout=nhwc --set job.output=cpu > cpu.log 2>&1 ||
    { echo "FAIL: the CPU refused layout = nhwc"; tail -3 cpu.log; fail=1; }

# channels-last against NCHW, and resumed across layouts
twin nchw -- --set train.layout=nchw || { echo "FAIL: nchw run"; tail -5 nchw.log; exit 1; }
twin nhwc -- --set train.layout=nhwc || { echo "FAIL: nhwc run"; tail -5 nhwc.log; exit 1; }
expect "nhwc run logs channels-last" nhwc.log "activations channels-last (NHWC)"
if r=$(cmp_h5 nhwc/model.h5 nchw/model.h5 1e-5); then
    echo "ok   channels-last ends within 1e-5 of NCHW: $r"
else
    echo "FAIL channels-last differs from NCHW: $r"; fail=1
fi
ck=$(ls nhwc/checkpoints/ | sort | head -1)
twin back -- --set train.layout=nchw --set checkpoint.resume="$PWD/nhwc/checkpoints/$ck" ||
    { echo "FAIL: resuming a channels-last checkpoint in NCHW"; tail -5 back.log; fail=1; }
expect "the NCHW run resumed $ck" back.log "resuming from"
if r=$(cmp_h5 back/model.h5 nhwc/model.h5 1e-5); then
    echo "ok   a channels-last checkpoint resumed in NCHW ends within 1e-5: $r"
else
    echo "FAIL resumed across layouts: $r"; fail=1
fi
exit $fail

#!/bin/bash
# residual_input.sh - a residual block as the first layer reads the model's input on its
# shortcut: x + body(x), as PyTorch computes it. Training, eval, predict and export of such a
# model must run (exit 0), and train exactly as the same block placed after an identity layer
# (dropout(0): a copy of its input), whose blocks read a layer's output: the same losses, bit
# for bit, step by step, and the same test figures from eval.
set -u
DDPTRAIN=${DDPTRAIN:?set by meson}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

$DDPTRAIN data synth -o d.h5 --shape 2,6,6 --classes 4 --train 48 --test 16 --seed 5 \
    >/dev/null || { echo "cannot make the synthetic dataset"; exit 1; }
cat > job.ini <<'INI'
[job]
output = out
[data]
file = d.h5
batch_size = 8
[model]
layers = flatten, linear(4)
[train]
epochs = 2
log_every = 1
INI

pass=0 fail=0
# ok NAME COMMAND...: COMMAND exits 0 within a minute
ok() {
    local name=$1
    shift
    timeout -k 5 60 "$@" >stdout.txt 2>stderr.txt
    local rc=$?
    if [ $rc -eq 0 ]; then
        pass=$((pass + 1))
        printf 'ok   %s\n' "$name"
    else
        fail=$((fail + 1))
        printf 'FAIL %s: exit %d\n' "$name" $rc
        sed 's/^/     | /' stderr.txt | head -5
    fi
}
# same NAME A B: files A and B hold the same text
same() {
    if [ -s "$2" ] && cmp -s "$2" "$3"; then
        pass=$((pass + 1))
        printf 'ok   %s\n' "$1"
    else
        fail=$((fail + 1))
        printf 'FAIL %s\n' "$1"
        diff "$2" "$3" | head -6 | sed 's/^/     | /'
    fi
}
# losses OUT: every train and eval loss and accuracy of OUT/metrics.jsonl, one a line
losses() { grep -o '"\(loss\|acc\|test_loss\|test_acc\)":[^,}]*' "$1/metrics.jsonl"; }

# name LAYERS: the block at the input; the same after dropout(0)
try() {
    local name=$1 layers=$2
    ok "$name: check" "$DDPTRAIN" check job.ini --set "model.layers=$layers"
    ok "$name: train" "$DDPTRAIN" job.ini --set "model.layers=$layers" --set job.output=a
    ok "$name: train after dropout(0)" "$DDPTRAIN" job.ini \
        --set "model.layers=dropout(0), $layers" --set job.output=b
    losses a > a.txt
    losses b > b.txt
    same "$name: the same losses as after dropout(0)" a.txt b.txt
    ok "$name: eval" "$DDPTRAIN" eval job.ini --set "model.layers=$layers" --checkpoint a/model.h5
    sed -n 's/.*: \(test loss .*\)/\1/p' stdout.txt > ea.txt
    ok "$name: eval after dropout(0)" "$DDPTRAIN" eval job.ini \
        --set "model.layers=dropout(0), $layers" --checkpoint b/model.h5
    sed -n 's/.*: \(test loss .*\)/\1/p' stdout.txt > eb.txt
    same "$name: the same test figures as after dropout(0)" ea.txt eb.txt
    ok "$name: predict" "$DDPTRAIN" predict job.ini --set "model.layers=$layers" \
        --checkpoint a/model.h5 --input d.h5 --output p.h5
    ok "$name: export" "$DDPTRAIN" export job.ini --set "model.layers=$layers" \
        --checkpoint a/model.h5 --onnx m.onnx
    rm -rf a b p.h5 m.onnx
}
try "identity shortcut" "residual(relu), flatten, linear(4)"
try "nested at the input" "residual(residual(relu), conv2d(2, 3, pad=1)), flatten, linear(4)"
try "batchnorm body" "residual(batchnorm, relu), relu, flatten, linear(4)"
try "projection shortcut" "residual(conv2d(4, 3, pad=1, stride=2)), flatten, linear(4)"

echo "residual-input: $pass passed, $fail failed"
[ $fail -eq 0 ]

#!/bin/bash
# accuracy.sh CONFIG MIN_ACC - trains a shipped config on the real Fashion-MNIST and checks the
# test accuracy it prints against the floor the project promises (README).
set -u
DDPTRAIN=${DDPTRAIN:?} DDP_SRC=${DDP_SRC:?}
cfg=$1 floor=$2
data=${DDP_DATASET:-$DDP_BUILD/fashion-mnist.h5}
if [ ! -f "$data" ]; then
    [ -d /usr/share/datasets/fashion-mnist ] || { echo "dataset-fashion-mnist not installed"; exit 77; }
    "$DDPTRAIN" data idx --dir /usr/share/datasets/fashion-mnist -o "$data" || exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$DDPTRAIN" "$DDP_SRC/$cfg" --set data.file="$data" --set job.output="$out" \
    --set train.log_every=1000 || exit 1
acc=$(sed -n 's/.*"kind":"summary".*"test_acc":\([0-9.]*\).*/\1/p' "$out/metrics.jsonl")
echo "$cfg: test accuracy $acc (floor $floor)"
awk -v a="$acc" -v f="$floor" 'BEGIN { exit !(a >= f) }'

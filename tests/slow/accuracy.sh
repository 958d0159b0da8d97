#!/bin/bash
# accuracy.sh CONFIG MIN_ACC [RANKS [--set ...]] - trains a shipped config on the real
# Fashion-MNIST and checks the test accuracy it prints against the floor the project promises
# (README). RANKS > 1: as many local ranks under `ddptrain launch` (one thread each), with the
# --set arguments that follow (e.g. the per-rank batch that keeps the global batch).
set -u
DDPTRAIN=${DDPTRAIN:?} DDP_SRC=${DDP_SRC:?}
cfg=$1 floor=$2 ranks=${3:-1}
shift $(($# < 3 ? $# : 3))
data=${DDP_DATASET:-$DDP_BUILD/fashion-mnist.h5}
if [ ! -f "$data" ]; then
    [ -d /usr/share/datasets/fashion-mnist ] || { echo "dataset-fashion-mnist not installed"; exit 77; }
    "$DDPTRAIN" data idx --dir /usr/share/datasets/fashion-mnist -o "$data" || exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
launch=()
[ "$ranks" -gt 1 ] && launch=(launch --nproc-per-node "$ranks")
t0=$(date +%s)
"$DDPTRAIN" "${launch[@]}" "$DDP_SRC/$cfg" --set data.file="$data" --set job.output="$out" \
    --set train.log_every=1000 "$@" || exit 1
echo "$cfg: $ranks rank(s), $(($(date +%s) - t0)) s from start to end"
acc=$(sed -n 's/.*"kind":"summary".*"test_acc":\([0-9.]*\).*/\1/p' "$out/metrics.jsonl")
echo "$cfg: test accuracy $acc (floor $floor)"
awk -v a="$acc" -v f="$floor" 'BEGIN { exit !(a >= f) }'

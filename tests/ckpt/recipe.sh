#!/bin/bash
# recipe.sh - training recipes on real runs, 1 rank and 3 OpenMPI ranks:
#  1. bitwise resume with augmentation, normalisation, accumulation and a held-out validation
#     share: a run stopped mid-epoch (max_steps with a checkpoint at that step) and resumed
#     ends with the same parameter bytes, the same best.h5 bytes and the same validation
#     records as the uninterrupted run;
#  2. val_fraction: the held-out samples are the same on 1 and 3 ranks, never trained on,
#     floor(N x F) of them, and every other sample is trained on once per epoch;
#  3. keep_best: best.h5 holds the weights of the epoch with the best val_acc (its epoch
#     checkpoint, bit for bit; an earlier epoch than the last), written atomically;
#  4. early_stop: with lr = 0 the validation value never improves after the first evaluation,
#     so early_stop = 2 ends a 10-epoch run after epoch 3 with exit 0, saying why, and the test
#     split is evaluated at the end; a rerun resumes the stopped run and trains no more;
#  5. [data] normalize applies to evaluation too: `ddptrain eval` and `ddptrain predict` of the
#     final weights give the run's own final test accuracy.
set -u
DDPTRAIN=${DDPTRAIN:?}
PY=/usr/bin/python3
$PY -c 'import h5py, numpy' 2>/dev/null || { echo "python3-h5py needed"; exit 1; }
command -v mpirun >/dev/null || { echo "mpirun not installed"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

# 1203 samples: val_fraction 0.1 holds out 120; 1083 train, 3 steps of 3 x 24 ... per epoch
"$DDPTRAIN" data synth -o d.h5 --shape 1,10,10 --classes 5 --train 1203 --test 97 --seed 4 \
    >/dev/null || exit 1
cat > j.ini <<INI
[job]
seed = 31
[data]
file = d.h5
batch_size = 24
val_fraction = 0.1
augment = random_crop(pad=2), hflip
normalize = 0.5, 0.29
[model]
layers = conv2d(4, 3), batchnorm, relu, maxpool(2), flatten, linear(16), relu, linear(5)
[optim]
name = sgd
lr = 0.5
momentum = 0.9
schedule = onecycle
clip_grad_norm = 2
[train]
epochs = 6
accumulate = 2
label_smoothing = 0.1
log_every = 5
threads = 1
[checkpoint]
every_epochs = 1
keep = 100
keep_best = val_acc
INI

same_params() { $PY - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1])["model"], h5py.File(sys.argv[2])["model"]
same = sorted(a) == sorted(b) and all(np.array_equal(a[k][()], b[k][()]) for k in a)
print(f"{len(a)} tensors {'bit-identical' if same else 'DIFFER'}")
sys.exit(0 if same else 1)
PY
}
# the kind=val records of a metrics.jsonl, one per line (epoch, step, values, best)
val_records() { grep '"kind":"val"' "$1"; }

# ---- 1. bitwise resume mid-epoch ------------------------------------------------------------
for W in 1 3; do
    launch=()
    [ $W -gt 1 ] && launch=(mpirun -n $W)
    B=$((24 / W))
    set_=(--set data.batch_size=$B)
    "${launch[@]}" "$DDPTRAIN" j.ini "${set_[@]}" --set job.output=full$W > full$W.log 2>&1 ||
        { bad "W=$W uninterrupted run"; tail -3 full$W.log; continue; }
    # 23 steps per epoch (1083 / 24 = 45.1 batches, 2 a step): step 50 is inside epoch 3, after
    # epoch 2's validation; the resumed run must know the best so far to flag epoch 3's
    "${launch[@]}" "$DDPTRAIN" j.ini "${set_[@]}" --set job.output=int$W --set train.max_steps=50 \
        --set checkpoint.every_steps=50 > int$W.log1 2>&1 || { bad "W=$W first part"; continue; }
    "${launch[@]}" "$DDPTRAIN" j.ini "${set_[@]}" --set job.output=int$W > int$W.log2 2>&1 ||
        { bad "W=$W resumed run failed"; tail -3 int$W.log2; continue; }
    grep -q "resuming from .*ckpt-00000050.h5: epoch 3, step 50, [1-9][0-9]* samples into" int$W.log2 ||
        { bad "W=$W: did not resume mid-epoch at step 50"; grep resum int$W.log2; }
    if r=$(same_params full$W/model.h5 int$W/model.h5) && rb=$(same_params full$W/best.h5 int$W/best.h5); then
        ok "bitwise resume, $W rank(s), stopped mid-epoch at step 50: model.h5 $r, best.h5 $rb"
    else
        bad "W=$W resume: model.h5 $r, best.h5 ${rb:-}"
    fi
    if cmp -s <(val_records full$W/metrics.jsonl) <(val_records int$W/metrics.jsonl) &&
        [ "$(val_records full$W/metrics.jsonl | wc -l)" -eq 6 ]; then
        ok "W=$W: the 6 validation records agree: $(val_records int$W/metrics.jsonl | tail -1)"
    else
        bad "W=$W: validation records differ"; diff <(val_records full$W/metrics.jsonl) <(val_records int$W/metrics.jsonl)
    fi
done
# ---- 2. the held-out samples, 1 and 3 ranks ---------------------------------------------------
DDP_TEST_SAMPLE_LOG=$work/samp1 "$DDPTRAIN" j.ini --set train.epochs=1 --set job.output=s1 \
    > s1.log 2>&1 || bad "sample log run, 1 rank"
DDP_TEST_SAMPLE_LOG=$work/samp3 mpirun -n 3 "$DDPTRAIN" j.ini --set train.epochs=1 \
    --set data.batch_size=8 --set job.output=s3 > s3.log 2>&1 || bad "sample log run, 3 ranks"
if r=$($PY - <<'PY'
import glob, sys
def trained(prefix):
    s = []
    for p in glob.glob(prefix + ".*"):
        s += [int(l.split()[1]) for l in open(p)]
    return s
one, three = trained("samp1"), trained("samp3")
held1, held3 = set(range(1203)) - set(one), set(range(1203)) - set(three)
if held1 != held3:
    print(f"held-out sets differ: {len(held1)} on 1 rank, {len(held3)} on 3 ranks"); sys.exit(1)
if len(held1) != 120:
    print(f"{len(held1)} samples held out, expected floor(1203 x 0.1) = 120"); sys.exit(1)
if sorted(one) != sorted(set(one)) or len(one) != 1083:
    print(f"1 rank trained {len(one)} samples ({len(set(one))} distinct), expected 1083 once"); sys.exit(1)
if set(three) != set(one):
    print("3 ranks trained other samples"); sys.exit(1)
print(f"120 held out, the same on 1 and 3 ranks; 1083 trained once ({sorted(held1)[:4]}...)")
PY
); then ok "val_fraction: $r"; else bad "val_fraction: $r"; fi
grep -q "validation: 120 samples of /train held out" s3.log || bad "the log does not name the held-out share"

# ---- 3. best.h5 is the best epoch's model ------------------------------------------------------
if [ -s full1/best.h5 ]; then
    best=$($PY -c '
import json
v = [json.loads(l) for l in open("full1/metrics.jsonl") if "\"kind\":\"val\"" in l]
b = max(v, key=lambda r: r["val_acc"])   # the first of equals, as ddptrain (strictly higher)
assert [r["best"] for r in v].count(True) >= 1
print(b["epoch"], b["step"], b["val_acc"])')
    read -r be bs bacc <<<"$best"
    # the best epoch must not be the last, or best.h5 could be the final model by accident
    [ "$be" -lt 6 ] || bad "keep_best: the best epoch is the last ($be): choose a job whose best comes earlier"
    ck=$(printf 'full1/checkpoints/ckpt-%08d.h5' "$bs")
    if r=$(same_params full1/best.h5 "$ck"); then
        ok "keep_best: best.h5 is epoch $be's model (val_acc $bacc, $ck): $r"
    else
        bad "keep_best: best.h5 is not epoch $be's checkpoint $ck: $r"
    fi
    [ -e full1/best.h5.tmp ] && bad "best.h5.tmp left behind"
    grep -q "\"best_epoch\":$be," full1/metrics.jsonl || bad "summary does not name best epoch $be"
else
    bad "no best.h5"
fi

# ---- 4. early stop -----------------------------------------------------------------------------
"$DDPTRAIN" j.ini --set optim.lr=0 --set optim.schedule=constant --set train.epochs=10 \
    --set train.early_stop=2 --set data.val_fraction=0 --set data.val=/test \
    --set job.output=es > es.log 2>&1
rc=$?
nval=$(grep -c '"kind":"val"' es/metrics.jsonl 2>/dev/null)
if [ $rc -eq 0 ] && [ "$nval" = 3 ] &&
    grep -q "early stop: val_acc has not improved for 2 evaluations (best .* at epoch 1)" es.log &&
    grep -q '"early_stopped":true' es/metrics.jsonl && grep -q '"kind":"eval"' es/metrics.jsonl; then
    ok "early_stop = 2: exit 0 after epoch 3 of 10: $(grep -o 'early stop: .*' es.log | head -c 120)"
else
    bad "early stop: exit $rc, $nval validation records"; tail -4 es.log
fi
"$DDPTRAIN" j.ini --set optim.lr=0 --set optim.schedule=constant --set train.epochs=10 \
    --set train.early_stop=2 --set data.val_fraction=0 --set data.val=/test \
    --set job.output=es > es2.log 2>&1
if [ $? -eq 0 ] && grep -q "already finished: es holds this job's finished run" es2.log &&
    [ "$(grep -c '"kind":"val"' es/metrics.jsonl)" = 3 ] &&
    [ "$(grep -c '"kind":"summary"' es/metrics.jsonl)" = 1 ]; then
    ok "a rerun of the early-stopped run trains no more and writes no second summary"
else
    bad "rerun of the early-stopped run"; tail -3 es2.log
fi
# ---- 5. normalize in eval and predict ---------------------------------------------------------
if [ -s full1/model.h5 ]; then
    acc_run=$($PY -c 'import json; print("%.4f" % [json.loads(l) for l in open("full1/metrics.jsonl")][-1]["test_acc"])')
    acc_eval=$("$DDPTRAIN" eval j.ini --checkpoint full1/model.h5 2>&1 | sed -n 's/.* accuracy \([0-9.]*\) .*/\1/p')
    acc_pred=$("$DDPTRAIN" predict j.ini --checkpoint full1/model.h5 --input d.h5 --output p.h5 2>&1 |
        sed -n 's/.*accuracy against its labels \([0-9.]*\).*/\1/p')
    if [ -n "$acc_eval" ] && [ "$acc_run" = "$acc_eval" ] && [ "$acc_run" = "$acc_pred" ]; then
        ok "normalize in eval and predict: test accuracy $acc_run (run), $acc_eval (eval), $acc_pred (predict)"
    else
        bad "normalize in eval and predict: run $acc_run, eval '$acc_eval', predict '$acc_pred'"
    fi
fi
exit $fail

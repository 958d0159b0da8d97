#!/bin/bash
# equivalence.sh - W = 2, 3, 4 ranks at per-rank batch G/W end within 1e-5 (relative) of 1 rank
# at batch G (same seed, 2003 samples, 30 steps): plain layers, SyncBatchNorm (running stats too),
# residual blocks holding SyncBatchNorm, and a recipe (crop, flip, normalize, 3 micro-batches,
# label smoothing, clipping, val_fraction) over 2 whole epochs of 1800 samples.
set -u
DDPTRAIN=${DDPTRAIN:?} DDP_SRC=${DDP_SRC:?}
# shellcheck source=tests/lib.sh
. "$DDP_SRC/tests/lib.sh"
command -v mpirun >/dev/null || { echo "mpirun not installed"; exit 77; }
need_h5py
mpirun_as_root
enter_workdir
synth_small d.h5
G=48
mlp_job plain.ini
sed 's/^layers = .*/layers = conv2d(4, 3, pad=1), batchnorm, relu, maxpool(2), flatten, linear(16), batchnorm, relu, linear(10)/' plain.ini > syncbn.ini
printf '[dist]\nsync_bn = true\n' >> syncbn.ini
# residual blocks with SyncBN inside: projection and identity shortcuts, a nested block
sed '/^layers = /d' syncbn.ini > resnet.ini
printf '%s\n' '[model]' 'layers = conv2d(4, 3, pad=1, bias=false), batchnorm, relu,' \
    '  residual(conv2d(8, 3, stride=2, pad=1, bias=false), batchnorm, relu,' \
    '           residual(conv2d(8, 3, pad=1, bias=false), batchnorm, relu)),' \
    '  residual(conv2d(8, 3, pad=1), batchnorm), globalavgpool, flatten, linear(10)' >> resnet.ini

# floor(2003 x 0.1014) = 203 held out: 1800 train
sed 's/^max_steps = .*/max_steps = 0/; s/^epochs = .*/epochs = 2\naccumulate = 3\nlabel_smoothing = 0.1/;
     s/^test =/test =\nval_fraction = 0.1014\naugment = random_crop(pad=2), hflip\nnormalize = 0.45, 0.3/;
     s/^weight_decay = .*/&\nclip_grad_norm = 0.5/' plain.ini > recipe.ini

fail=0
for model in plain syncbn resnet recipe; do
    "$DDPTRAIN" $model.ini --set data.batch_size=$G --set job.output=$model-w1 >/dev/null ||
        { echo "FAIL $model: 1-rank run"; fail=1; continue; }
    for W in 2 3 4; do
        if ! timeout 300 mpirun -n $W "$DDPTRAIN" $model.ini --set data.batch_size=$((G / W)) \
                --set job.output=$model-w$W --set train.threads=1 > $model-w$W.log 2>&1; then
            echo "FAIL $model W=$W: run failed"; tail -5 $model-w$W.log; fail=1; continue
        fi
        if /usr/bin/python3 "$DDP_SRC/tests/compare_h5.py" $model-w$W/model.h5 \
                $model-w1/model.h5 1e-5 > cmp.txt; then
            echo "ok   $model W=$W vs W=1: $(head -1 cmp.txt)"
        else
            echo "FAIL $model W=$W vs W=1:"; cat cmp.txt; fail=1
        fi
    done
done
# the check can fail: a different seed must not agree
"$DDPTRAIN" plain.ini --set data.batch_size=$G --set job.seed=78 --set job.output=other >/dev/null
if /usr/bin/python3 "$DDP_SRC/tests/compare_h5.py" other/model.h5 plain-w1/model.h5 1e-5 >/dev/null; then
    echo "FAIL: runs with different seeds compared equal"; fail=1
fi
# the recipe check can fail: the same run without augmentation must not agree
"$DDPTRAIN" recipe.ini --set data.batch_size=$G --set data.augment= --set job.output=noaug >/dev/null
if /usr/bin/python3 "$DDP_SRC/tests/compare_h5.py" noaug/model.h5 recipe-w1/model.h5 1e-5 >/dev/null; then
    echo "FAIL: the recipe run without augmentation compared equal"; fail=1
fi
exit $fail

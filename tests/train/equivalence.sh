#!/bin/bash
# equivalence.sh - W ranks with per-rank batch G/W train exactly what 1 rank with batch G
# trains: same seed and initial weights, a dataset size not divisible by W, 30 steps; final
# parameters agree within 1e-5 (relative to each tensor's scale). For W = 2, 3, 4, with plain
# layers, with SyncBatchNorm (running statistics compared too), with residual blocks that hold
# SyncBatchNorm (projection and identity shortcuts, a nested block), and with a recipe (issue
# 17): random_crop + hflip + normalize, 3 micro-batches per step, label smoothing, clipping and
# a validation share held out by val_fraction, over 2 whole epochs (1800 training samples: a
# multiple of every W, so the padding agrees; the epochs' last batch is half a batch and their
# last step 2 micro-batches).
set -u
DDPTRAIN=${DDPTRAIN:?} DDP_SRC=${DDP_SRC:?}
command -v mpirun >/dev/null || { echo "mpirun not installed"; exit 77; }
/usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null || { echo "python3-h5py needed"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
# 2003 samples: not divisible by 2, 3 or 4; 30 steps of 48 stay inside the first epoch
"$DDPTRAIN" data synth -o d.h5 --shape 1,8,8 --classes 10 --train 2003 --test 101 --seed 5 \
    >/dev/null || exit 1
G=48
cat > plain.ini <<INI
[job]
seed = 77
[data]
file = d.h5
test =
[model]
layers = flatten, linear(32), relu, linear(16), relu, linear(10)
[optim]
name = sgd
lr = 0.05
momentum = 0.9
weight_decay = 0.0001
[train]
epochs = 1
max_steps = 30
log_every = 10
INI
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

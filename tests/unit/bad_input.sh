#!/bin/bash
# bad_input.sh - bad job files, datasets and weights given to `ddptrain JOB.ini`: each must give
# ONE line on stderr naming the culprit, the documented exit code (2 job, 3 data/weights),
# no crash, and nothing written outside the output directory. `ddptrain check` with the same
# arguments must give the same exit code and the same line (CHECK=0 marks the cases that fail
# only once training runs, where check passes), and write nothing at all.
set -u
DDPTRAIN=${DDPTRAIN:?set by meson}
PY=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

$DDPTRAIN data synth -o good.h5 --shape 1,8,8 --classes 4 --train 64 --test 16 --seed 3 \
    >/dev/null || { echo "cannot make the synthetic dataset"; exit 1; }
$DDPTRAIN data synth -o flat.h5 --shape 64 --classes 4 --train 32 --test 8 >/dev/null
have_h5py=0
$PY -c 'import h5py, numpy' 2>/dev/null && have_h5py=1

# job FILE with [data] file = good.h5 unless overridden
base_job() {
    cat <<INI
[job]
output = out
[data]
file = ${1:-good.h5}
batch_size = 8
[model]
layers = flatten, linear(4)
[train]
epochs = 1
INI
}

pass=0 fail=0
# no_source_path FILE: FILE names no source file ("(../src/train/train.c:615)"), which means
# nothing to a user; debug builds (DDP_DEBUG_BUILD=1) add them on purpose
no_source_path() {
    [ "${DDP_DEBUG_BUILD:-0}" = 1 ] || ! grep -q '[a-z_]\.\(c\|cu\|cc\|h\):[0-9][0-9]*' "$1"
}
# avail_free FILE: FILE with the free memory it names ("has 23.0 GiB available") blanked
avail_free() { sed 's/has [0-9.]* \([KMGTP]iB\|bytes\) available/has N available/' "$1"; }

# case NAME CODE PATTERN JOBFILE [args...]
case_() {
    local name=$1 code=$2 pattern=$3 job=$4
    shift 4
    rm -rf out
    touch marker
    sleep 0.01
    # a hang (a FIFO opened for reading, /dev/zero read to its end) fails at this deadline
    timeout -k 5 "${DEADLINE:-60}" "$DDPTRAIN" "$job" "$@" >stdout.txt 2>stderr.txt
    local rc=$?
    local lines
    lines=$(grep -c . stderr.txt)
    local stray
    stray=$(find . -newer marker -type f ! -path './out/*' ! -name stdout.txt ! -name stderr.txt \
            ! -name 'bad*' ! -name '*.ini' | head -3)
    local ok=1 why=""
    [ "$rc" -eq "$code" ] || { ok=0; why="exit $rc, want $code"; }
    [ "$lines" -eq 1 ] || { ok=0; why="$why; stderr has $lines lines"; }
    grep -q -- "$pattern" stderr.txt || { ok=0; why="$why; stderr lacks '$pattern'"; }
    [ -z "$stray" ] || { ok=0; why="$why; wrote outside out/: $stray"; }
    ! grep -q "$(printf '\033')" stderr.txt || { ok=0; why="$why; raw ESC on stderr"; }
    no_source_path stderr.txt || { ok=0; why="$why; a source path on stderr"; }
    # the same verdict from `ddptrain check`, writing nothing (eval, predict and export have
    # options that check does not take; data is no job)
    if [ "$job" != eval ] && [ "$job" != predict ] && [ "$job" != export ] &&
        [ "$job" != report ] && [ "$job" != data ]; then
        rm -rf out
        touch marker
        timeout -k 5 "${DEADLINE:-60}" "$DDPTRAIN" check "$job" "$@" >check-out.txt 2>check-err.txt
        local crc=$? want=${CHECK:-$code}
        stray=$(find . -newer marker ! -name 'check-*.txt' ! -name . | head -3)
        [ "$crc" -eq "$want" ] || { ok=0; why="$why; check exit $crc, want $want"; }
        # the same line, but for the free memory, which moves between the two runs
        [ "$want" -eq 0 ] || [ "$(avail_free stderr.txt)" = "$(avail_free check-err.txt)" ] ||
            { ok=0; why="$why; check says: $(head -c 200 check-err.txt)"; }
        [ -z "$stray" ] || { ok=0; why="$why; check wrote $stray"; }
    fi
    if [ $ok -eq 1 ]; then
        pass=$((pass + 1))
        printf 'ok   %-34s %s\n' "$name" "$(head -c 160 stderr.txt)"
    else
        fail=$((fail + 1))
        printf 'FAIL %-34s %s\n' "$name" "$why"
        sed 's/^/     | /' stderr.txt | head -5
    fi
}

# ---- job files ---------------------------------------------------------------------------
base_job > good.ini
printf '[jobs]\nname = x\n' > bad-section.ini
case_ "unknown section" 2 "bad-section.ini:1: \[jobs\]" bad-section.ini
{ base_job; printf '[optim]\nlearning_rate = 0.1\n'; } > bad-key.ini
case_ "unknown key" 2 "bad-key.ini:11: \[optim\] learning_rate: unknown key" bad-key.ini
{ base_job; printf '[optim]\nlr = fast\n'; } > bad-type.ini
case_ "bad type" 2 "bad-type.ini:11: \[optim\] lr: 'fast' is not a number" bad-type.ini
{ base_job; printf '[optim]\nmomentum = 1.5\n'; } > bad-range.ini
case_ "out of range" 2 "\[optim\] momentum: 1.5 is out of range" bad-range.ini
base_job | sed 's/^\[data\]/[data]\nshuffle = maybe/' > bad-bool.ini
case_ "bad boolean" 2 "shuffle: 'maybe' is not a boolean" bad-bool.ini
base_job | sed 's/^layers = .*/layers = flatten, linaer(4)/' > bad-layer.ini
case_ "unknown layer" 2 "bad-layer.ini:7:19: \[model\] layers: layer 2 'linaer(4)': unknown layer" bad-layer.ini
base_job | sed 's/^layers = .*/layers = flatten, linear(4/' > bad-paren.ini
# the message and the location name the '(' left open
case_ "unbalanced parenthesis" 2 \
    "bad-paren.ini:7:25: \[model\] layers: layer 2 'linear(4': unbalanced parentheses: the '(' at character 16 has no ')'" \
    bad-paren.ini
# residual blocks and layer keyword arguments (docs/job-file.md)
bad_layers() { # bad_layers FILE LAYERS: the base job with [model] layers = LAYERS
    base_job | awk -v l="$2" '/^layers = /{print "layers = " l; next} {print}' > "$1"
}
bad_layers bad-res-paren.ini 'residual(conv2d(2, 3, pad=1), relu, flatten, linear(4)'
case_ "residual unbalanced" 2 \
    "bad-res-paren.ini:7:18: \[model\] layers: layer 1 'residual(.*': unbalanced parentheses: the '(' at character 9 has no ')'; close every" \
    bad-res-paren.ini
bad_layers bad-kwarg.ini 'conv2d(2, 3, dilation=2), flatten, linear(4)'
case_ "unknown keyword argument" 2 \
    "\[model\] layers: layer 1 'conv2d(2, 3, dilation=2)': unknown argument 'dilation'" bad-kwarg.ini
bad_layers bad-bias.ini 'flatten, linear(4, bias=no)'
case_ "bias neither true nor false" 2 "layer 2 'linear(4, bias=no)': bias must be true or false" \
    bad-bias.ini
bad_layers bad-bias-kind.ini 'flatten, relu(bias=false), linear(4)'
case_ "bias on a layer without one" 2 "unknown argument 'bias'; relu takes no name=value arguments" \
    bad-bias-kind.ini
bad_layers bad-res-empty.ini 'residual( ), flatten, linear(4)'
case_ "residual empty body" 2 "layer 1 'residual( )': residual block with an empty body" \
    bad-res-empty.ini
bad_layers bad-res-shape.ini 'residual(conv2d(2, 3)), flatten, linear(4)'
case_ "residual shapes do not fit" 2 \
    "layer 1 residual: its body turns (1, 8, 8) into (2, 6, 6), which a 1x1 convolution" \
    bad-res-shape.ini
bad_layers bad-res-flat.ini 'flatten, residual(linear(5)), linear(4)'
case_ "residual flat shape change" 2 "layer 2 residual: its body turns (64) into (5); only an image" \
    bad-res-flat.ini
bad_layers bad-res-deep.ini \
    'residual(residual(residual(residual(residual(relu))))), flatten, linear(4)'
case_ "residual nested too deep" 2 "layer 1.1.1.1.1: residual blocks nested more than 4 deep" \
    bad-res-deep.ini
bad_layers bad-res-flatten.ini 'flatten, residual(flatten, relu), linear(4)'
case_ "flatten inside residual" 2 "layer 2.1: flatten inside residual(...)" bad-res-flatten.ini
bad_layers bad-res-after.ini 'residual(relu) relu, flatten, linear(4)'
case_ "text after a residual block" 2 \
    "bad-res-after.ini:7:25: \[model\] layers: layer 1 'residual(relu) relu': missing comma before 'relu'" \
    bad-res-after.ini
bad_layers bad-res-inner.ini 'residual(relu, conv2d(0, 3)), flatten, linear(4)'
case_ "bad layer inside residual" 2 "layer 1.2 'conv2d(0, 3)': argument 1 must be" \
    bad-res-inner.ini
# each argument once: twice by name, or by position and by name, is refused
bad_layers bad-kw-twice.ini 'flatten, linear(4, bias=false, bias=true)'
case_ "argument given twice" 2 \
    "layer 2 'linear(4, bias=false, bias=true)': bias= given twice; give each argument once" \
    bad-kw-twice.ini
bad_layers bad-stride-twice.ini 'conv2d(2, 3, stride=1, Stride=2), flatten, linear(4)'
case_ "stride given twice" 2 "layer 1 'conv2d(2, 3, stride=1, Stride=2)': stride= given twice" \
    bad-stride-twice.ini
bad_layers bad-stride-pos.ini 'conv2d(2, 3, 1, stride=2), flatten, linear(4)'
case_ "stride by position and by name" 2 \
    "stride given twice: as argument 3 and as stride=; give it once" bad-stride-pos.ini
bad_layers bad-trailing.ini 'flatten, linear(4, bias=false x)'
case_ "text after an argument" 2 "layer 2 'linear(4, bias=false x)': missing comma before 'x'" \
    bad-trailing.ini
bad_layers bad-gap.ini 'flatten, globalavgpool, linear(4)'
case_ "globalavgpool on flat input" 2 "layer 2 globalavgpool: input (64) is not (C, H, W)" \
    bad-gap.ini
# argument names: a near miss gets "did you mean"; names are matched in any case
bad_layers bad-kw-stide.ini 'conv2d(2, 3, stide=2), flatten, linear(4)'
case_ "argument typo: did you mean" 2 \
    "bad-kw-stide.ini:7:23: \[model\] layers: layer 1 'conv2d(2, 3, stide=2)': unknown argument 'stide'; did you mean 'stride'? conv2d takes" \
    bad-kw-stide.ini
bad_layers bad-kw-bais.ini 'flatten, linear(4, bais=false)'
case_ "argument typo bais: did you mean" 2 \
    "layer 2 'linear(4, bais=false)': unknown argument 'bais'; did you mean 'bias'?" bad-kw-bais.ini
bad_layers bad-kw-case.ini 'conv2d(2, 3, Stride=1, PAD=1, Bias=False), linear(4)'
case_ "argument names in any case" 2 "layer 2 linear(4): input (2, 8, 8) is not flat" bad-kw-case.ini
# a missing comma is named where it is missing, not taken for a bad value
bad_layers bad-comma.ini 'conv2d(2, 3) relu, flatten, linear(4)'
case_ "missing comma between layers" 2 \
    "bad-comma.ini:7:23: \[model\] layers: layer 1 'conv2d(2, 3) relu': missing comma before 'relu'" \
    bad-comma.ini
bad_layers bad-comma2.ini 'conv2d(2, 3 pad=1), flatten, linear(4)'
case_ "missing comma between arguments" 2 \
    "bad-comma2.ini:7:22: \[model\] layers: layer 1 'conv2d(2, 3 pad=1)': missing comma before 'pad'" \
    bad-comma2.ini
# an error on a continuation line of layers names that line and column
base_job | sed 's/^layers = .*/layers = conv2d(2, 3, pad=1),\n    relu,\n      conv2d(2, 3,\n   stide=2), flatten, linear(4)/' > bad-cont.ini
case_ "continuation line: its line and column" 2 \
    "bad-cont.ini:10:4: \[model\] layers: layer 3 'conv2d(2, 3, stide=2)': unknown argument 'stide'" \
    bad-cont.ini
base_job | sed 's/^layers = .*/layers = conv2d(2, 3, pad=1),\n    relu,\n  linear(4)/' > bad-cont2.ini
case_ "continuation line: a shape error" 2 \
    "bad-cont2.ini:9:3: \[model\] layers: layer 3 linear(4): input (2, 8, 8) is not flat" bad-cont2.ini
# one layer may be longer than 128 characters (blanks inside its parentheses)
bad_layers bad-long-item.ini "linear($(printf '%140s' '')4)"
case_ "a layer of 150 characters" 2 "layer 1 linear(4): input (1, 8, 8) is not flat" bad-long-item.ini
base_job | sed 's/^layers = .*/layers = flatten, linear(0)/' > bad-arg.ini
case_ "layer argument" 2 "layer 2 'linear(0)'" bad-arg.ini
base_job | sed 's/^layers = .*/layers = linear(4)/' > bad-flat.ini
case_ "layer needs flatten" 2 "linear(4): input (1, 8, 8) is not flat" bad-flat.ini
base_job | sed 's/^layers = .*/layers = conv2d(4, 9), flatten, linear(4)/' > bad-kernel.ini
case_ "kernel larger than input" 2 "kernel larger than its input" bad-kernel.ini
{ base_job; printf '[optim]\nname = rmsprop\n'; } > bad-enum.ini
case_ "bad choice" 2 "\[optim\] name: 'rmsprop' is not a choice; expected one of sgd/adam/adamw" bad-enum.ini
{ base_job; printf '[optim]\nnesterov = true\n'; } > bad-combo.ini
case_ "nesterov without momentum" 2 "nesterov: Nesterov momentum needs momentum > 0" bad-combo.ini
{ base_job; printf '[train]\nepochs = 2\n'; } | awk '/^\[train\]/{c++} c==2&&/^\[train\]/{next} {print}' > bad-dup.ini
case_ "key given twice" 2 "epochs: given twice (first on line" bad-dup.ini
printf '[trian]\nepochs = 1\n' > bad-near-section.ini
case_ "near section: did you mean" 2 "\[trian\]: unknown section; did you mean \[train\]?" \
    bad-near-section.ini
{ base_job; printf 'epoch = 2\n'; } > bad-near-key.ini
case_ "near key: did you mean" 2 "\[train\] epoch: unknown key; did you mean 'epochs'?" \
    bad-near-key.ini
{ base_job; printf 'lr = 0.2\n'; } > bad-other-section.ini
case_ "key of another section" 2 "\[train\] lr: unknown key; did you mean \[optim\] lr?" \
    bad-other-section.ini
case_ "near --set key" 2 "\-\-set optim.momentun: unknown key; did you mean 'momentum'?" \
    good.ini --set optim.momentun=0.5
base_job | sed 's/^layers = .*/layers = flatten, lineer(4)/' > bad-near-layer.ini
case_ "near layer name" 2 "'lineer(4)': unknown layer; did you mean 'linear'?" bad-near-layer.ini
printf 'just some words\n' > bad-syntax.ini
case_ "not INI syntax" 2 "bad-syntax.ini:1: not INI syntax" bad-syntax.ini
case_ "missing job file" 2 "nope.ini: cannot open job file" nope.ini
case_ "bad --set" 2 "\-\-set train.epochs: 'many' is not an integer" good.ini --set train.epochs=many
case_ "unknown --set key" 2 "\-\-set train.epoch: unknown key" good.ini --set train.epoch=3
# bf16 asks for autocast GEMMs, which the CPU does not have: refused, not silently fp32
case_ "precision bf16 on a CPU" 2 \
    "\-\-set train.precision: bf16 needs a GPU .*set \[train\] precision = fp32" \
    good.ini --set train.precision=bf16 --set train.device=cpu
# bf16 activations come with bf16 math: refused with fp32 or tf32, on any device
case_ "activations bf16 under precision tf32" 2 \
    "\-\-set train.activations: bf16 activations come with bf16 math, but \[train\] precision = tf32; set \[train\] activations = auto" \
    good.ini --set train.activations=bf16 --set train.precision=tf32
case_ "activations: bad choice" 2 \
    "\-\-set train.activations: 'fp16' is not a choice; expected one of auto/fp32/bf16" \
    good.ini --set train.activations=fp16
{ base_job | sed 's/^layers = .*/layers = flatten, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4)/'; } > bad-long.ini
case_ "line too long" 2 "bad-long.ini:7: line longer than" bad-long.ini

# ---- recipe keys -------------------------------------------------------------------------------
case_ "augment: unknown, did you mean" 2 \
    "\-\-set data.augment: 'hflp': unknown augmentation; did you mean 'hflip'?" \
    good.ini --set data.augment=hflp
case_ "augment: pad out of range" 2 "\-\-set data.augment: 'random_crop(pad=0)': pad must be" \
    good.ini --set "data.augment=random_crop(pad=0)"
case_ "augment: given twice" 2 "\-\-set data.augment: hflip given twice" \
    good.ini --set "data.augment=hflip, hflip"
case_ "augment on flat samples" 2 "\-\-set data.augment: random_crop and hflip need images" \
    good.ini --set data.augment=hflip --set data.file=flat.h5
case_ "augment: unknown argument" 2 \
    "\-\-set data.augment: 'random_crop(padding=2)': unknown argument 'padding'; did you mean random_crop(pad=2)?" \
    good.ini --set "data.augment=random_crop(padding=2)"
case_ "augment: hflip with an argument" 2 \
    "\-\-set data.augment: 'hflip(p=0.5)': hflip takes no arguments" \
    good.ini --set "data.augment=hflip(p=0.5)"
case_ "normalize: odd count" 2 "\-\-set data.normalize: 3 numbers; expected as many means" \
    good.ini --set "data.normalize=0.5, 0.2, 0.1"
case_ "normalize: std 0" 2 "\-\-set data.normalize: standard deviation 0 of channel 0" \
    good.ini --set "data.normalize=0.5, 0"
# a std that float32 makes 0 or subnormal, or a mean beyond float32, turns every input to inf
case_ "normalize: std 0 in float32" 2 \
    "\-\-set data.normalize: standard deviation 1e-300 of channel 0; expected a normal float32" \
    good.ini --set "data.normalize=0.5, 1e-300"
case_ "normalize: std subnormal in float32" 2 \
    "\-\-set data.normalize: standard deviation 1e-45 of channel 0; expected a normal float32" \
    good.ini --set "data.normalize=0.5, 1e-45"
case_ "normalize: mean beyond float32" 2 \
    "\-\-set data.normalize: mean 1e+300 of channel 0; expected a finite float32" \
    good.ini --set "data.normalize=1e300, 0.5"
case_ "normalize: not a number" 2 "\-\-set data.normalize: 'x' is not a number" \
    good.ini --set "data.normalize=x, 1"
case_ "normalize: channels of the data" 2 \
    "\-\-set data.normalize: 2 mean/std pairs for samples of 1 channel" \
    good.ini --set "data.normalize=0.5, 0.5, 0.2, 0.2"
case_ "val_fraction out of range" 2 "\-\-set data.val_fraction: 1.5 is out of range" \
    good.ini --set data.val_fraction=1.5
case_ "val and val_fraction" 2 "\-\-set data.val_fraction: set together with \[data\] val" \
    good.ini --set data.val=/test --set data.val_fraction=0.1
# the training part that val_fraction leaves (7 of 64) is what gives no batch, and is counted
case_ "val_fraction leaves no batch" 2 \
    "good.h5: 7 training samples (of 64 in /train, \[data\] val_fraction = 0.9 holds out 57) give no whole batch of 8 per rank on 1 rank with drop_last.*lower \[data\] val_fraction" \
    good.ini --set data.val_fraction=0.9 --set data.drop_last=true
case_ "val group missing" 3 "no group /validation.* (from --set data.val)" good.ini \
    --set data.val=/validation
case_ "keep_best without val" 2 "\-\-set checkpoint.keep_best: needs a validation split" \
    good.ini --set checkpoint.keep_best=val_acc
case_ "keep_best: did you mean" 2 "keep_best: 'val_accuracy' is not a choice; expected one of" \
    good.ini --set checkpoint.keep_best=val_accuracy
case_ "early_stop without val" 2 "\-\-set train.early_stop: needs a validation split" \
    good.ini --set train.early_stop=2
case_ "early_stop negative" 2 "\-\-set train.early_stop: -1 is out of range" \
    good.ini --set train.early_stop=-1
case_ "accumulate 0" 2 "\-\-set train.accumulate: 0 is out of range; expected 1 to" \
    good.ini --set train.accumulate=0
case_ "label_smoothing above 1" 2 "\-\-set train.label_smoothing: 2 is out of range" \
    good.ini --set train.label_smoothing=2
case_ "label_smoothing: did you mean" 2 \
    "\-\-set train.label_smooting: unknown key; did you mean 'label_smoothing'?" \
    good.ini --set train.label_smooting=0.1
case_ "clip_grad_norm negative" 2 "\-\-set optim.clip_grad_norm: -1 is out of range" \
    good.ini --set optim.clip_grad_norm=-1
case_ "schedule: unknown choice" 2 \
    "schedule: 'one_cycle' is not a choice; expected one of constant/step/cosine/multistep/onecycle" \
    good.ini --set optim.schedule=one_cycle
{ base_job; printf '[optim]\nschedule = multistep\n'; } > bad-multistep.ini
case_ "multistep without milestones" 2 "\[optim\] milestones (default): empty; schedule = multistep" \
    bad-multistep.ini
{ base_job; printf '[optim]\nschedule = multistep\nmilestones = 5, 3\n'; } > bad-milestones.ini
case_ "milestones not increasing" 2 "bad-milestones.ini:12: \[optim\] milestones: 3 after 5" \
    bad-milestones.ini
case_ "milestones without multistep" 2 "\-\-set optim.milestones: applies to schedule = multistep" \
    good.ini --set optim.milestones=3
case_ "milestones not epochs" 2 "\-\-set optim.milestones: 'two' is not an epoch" \
    good.ini --set optim.schedule=multistep --set optim.milestones=two
case_ "onecycle with warmup" 2 "\-\-set optim.warmup_epochs: onecycle has its own warmup" \
    good.ini --set optim.schedule=onecycle --set optim.warmup_epochs=1
# 64 samples in batches of 8: 8 steps; pct_start x 8 = 1 ends the warmup at step 0, where
# OneCycleLR divides by zero (lr NaN from the first step); 0.1 and 0.05 are as torch has them
case_ "onecycle warmup ending at step 0" 2 \
    "\-\-set optim.pct_start: 0.125 of 8 steps ends onecycle's warmup at step 0 .*above 0.125" \
    good.ini --set optim.schedule=onecycle --set optim.pct_start=0.125
case_ "pct_start 0" 2 "\-\-set optim.pct_start: 0 is out of range" good.ini --set optim.pct_start=0
case_ "div_factor below 1" 2 "\-\-set optim.div_factor: 0.5 is out of range" \
    good.ini --set optim.div_factor=0.5
case_ "final_div_factor not a number" 2 "\-\-set optim.final_div_factor: 'big' is not a number" \
    good.ini --set optim.final_div_factor=big

# ---- datasets ------------------------------------------------------------------------------
base_job missing.h5 > bad-nodata.ini
case_ "missing dataset file" 3 "missing.h5" bad-nodata.ini
case_ "missing dataset, relative path" 3 \
    "missing.h5: cannot open: .*relative paths are taken from the working directory ($work)" \
    bad-nodata.ini
echo "not hdf5" > bad-text.h5
base_job bad-text.h5 > bad-nothdf5.ini
case_ "not HDF5" 3 "bad-text.h5" bad-nothdf5.ini
base_job | sed 's|^\[data\]|[data]\ntrain = /validation|' > bad-group.ini
case_ "missing group" 3 "/validation" bad-group.ini
base_job | sed 's/^layers = .*/layers = flatten, linear(3)/' > bad-classes.ini
case_ "labels beyond the model's classes" 3 "3 outputs" bad-classes.ini
base_job | sed 's/^layers = .*/layers = conv2d(4, 3), flatten, linear(4)/; s/^file = .*/file = flat.h5/' > bad-shape.ini
case_ "shape does not fit the model" 2 "conv2d: input (64) is not (C, H, W)" bad-shape.ini
if [ $have_h5py -eq 1 ]; then
    $PY - <<'PY'
import h5py, numpy as np
def make(path, images, labels, group="train"):
    with h5py.File(path, "w") as f:
        g = f.create_group(group)
        if images is not None: g["images"] = images
        if labels is not None: g["labels"] = labels
make("bad-rank.h5", np.zeros((4, 8, 8, 1, 1), np.uint8), np.zeros(4, np.int64))
make("bad-empty.h5", np.zeros((0, 1, 8, 8), np.uint8), np.zeros(0, np.int64))
make("bad-label.h5", np.zeros((4, 1, 8, 8), np.uint8), np.array([0, 1, 7, 2]))
make("bad-nolabels.h5", np.zeros((4, 1, 8, 8), np.uint8), None)
make("bad-dtype.h5", np.zeros((4, 1, 8, 8), np.int16), np.zeros(4, np.int64))
PY
    base_job bad-rank.h5 | sed 's/^test = .*//' > bad-rank.ini; echo "test =" >> bad-rank.ini
    sed -i 's/^\[data\]/[data]\ntest =/' bad-rank.ini; sed -i '$d' bad-rank.ini
    case_ "images of wrong rank" 3 "bad-rank.h5" bad-rank.ini
    base_job bad-empty.h5 | sed 's/^\[data\]/[data]\ntest =/' > bad-empty.ini
    case_ "empty split" 3 "bad-empty.h5" bad-empty.ini
    base_job bad-label.h5 | sed 's/^\[data\]/[data]\ntest =/' > bad-label.ini
    case_ "label out of range" 3 "bad-label.h5" bad-label.ini
    base_job bad-nolabels.h5 | sed 's/^\[data\]/[data]\ntest =/' > bad-nolabels.ini
    case_ "missing labels" 3 "labels" bad-nolabels.ini
    base_job bad-dtype.h5 | sed 's/^\[data\]/[data]\ntest =/' > bad-dtype.ini
    case_ "unsupported image type" 3 "bad-dtype.h5" bad-dtype.ini
    # init weights of the wrong shape
    $PY -c '
import h5py, numpy as np
with h5py.File("bad-init.h5", "w") as f:
    f["model/1.weight"] = np.zeros((4, 63), np.float32)
    f["model/1.bias"] = np.zeros(4, np.float32)
'
    { base_job; printf '\n'; } | sed 's|^layers = .*|&\ninit = bad-init.h5|' > bad-init.ini
    case_ "init weights of wrong shape" 3 "/model/1.weight has shape (4, 63)" bad-init.ini
    { base_job; } | sed 's|^layers = .*|&\ninit = good.h5|' > bad-init2.ini
    case_ "init file without /model" 3 "no /model group" bad-init2.ini
else
    echo "h5py missing: HDF5 layout cases not run"
    fail=$((fail + 1))
fi

# ---- hostile inputs --------------------------------------------------------------------
mkfifo fifo.in || { echo "cannot make a FIFO"; exit 1; }
DEADLINE=10 case_ "job file is a directory" 2 "is a directory, not a job file" "$work"
DEADLINE=10 case_ "job file is a FIFO" 2 "fifo.in: is a FIFO, not a job file" fifo.in
DEADLINE=10 case_ "job file is /dev/zero" 2 "/dev/zero: is a character device" /dev/zero
printf '[train]\nepochs = 1\0000000\n' > bad-nul.ini
case_ "NUL byte in the job file" 2 "bad-nul.ini:2: NUL byte 0x00 at column 11" bad-nul.ini
printf '[train]\n\033]0;pwned\007 = 1\n' > bad-esc.ini
case_ "control bytes in the job file" 2 "bad-esc.ini:2: control byte 0x1b at column 1" bad-esc.ini
case_ "control bytes echoed escaped" 3 'x\\x1b\]0;pwn\\x07.h5: cannot open' good.ini \
    --set "data.file=x$(printf '\033')]0;pwn$(printf '\007').h5"
DEADLINE=10 case_ "resume from a FIFO" 3 "fifo.in: is a FIFO; expected an HDF5 checkpoint" \
    good.ini --set "checkpoint.resume=$work/fifo.in"
DEADLINE=10 case_ "init weights from a FIFO" 3 "fifo.in: is a FIFO; expected an HDF5 weights" \
    good.ini --set model.init=fifo.in
DEADLINE=10 case_ "eval checkpoint is a FIFO" 3 "fifo.in: is a FIFO" eval good.ini \
    --checkpoint fifo.in
# `ddptrain report RUN_DIR` reads RUN_DIR/metrics.jsonl: only a regular file, bounded
mkdir -p run-fifo run-zero run-dir/metrics.jsonl run-long run-nul run-sparse run-torn
mkfifo run-fifo/metrics.jsonl
ln -s /dev/zero run-zero/metrics.jsonl
DEADLINE=10 case_ "report: metrics.jsonl a FIFO" 3 \
    "run-fifo/metrics.jsonl: is a FIFO, not a metrics file" report run-fifo
DEADLINE=10 case_ "report: metrics.jsonl is /dev/zero" 3 \
    "run-zero/metrics.jsonl: is a character device, not a metrics file" report run-zero
DEADLINE=10 case_ "report: metrics.jsonl a directory" 3 \
    "run-dir/metrics.jsonl: is a directory, not a metrics file" report run-dir
rec='{"kind":"train","step":1,"loss":1.5}'
{ echo "$rec"; printf '{"kind":"train","pad":"'; head -c 2000000 /dev/zero | tr '\0' a
  echo '"}'; } > run-long/metrics.jsonl
DEADLINE=10 case_ "report: a line over 1 MiB" 3 \
    "run-long/metrics.jsonl:2: line longer than 1 MiB" report run-long
# a NUL would end the text that the JSON parser sees and hide what follows it
{ echo "$rec"; printf '%s\0{"x\n' "$rec"; echo "$rec"; } > run-nul/metrics.jsonl
DEADLINE=10 case_ "report: NUL byte in a line" 3 \
    "run-nul/metrics.jsonl:2: NUL byte at column 37" report run-nul
truncate -s 64G run-sparse/metrics.jsonl
DEADLINE=10 case_ "report: 64 GiB of zeros" 3 \
    "run-sparse/metrics.jsonl:1: line longer than 1 MiB" report run-sparse
# the zeros a crash can leave at the end of an appended file are a torn last line: skipped
{ echo "$rec"; head -c 4096 /dev/zero; } > run-torn/metrics.jsonl
if timeout -k 5 10 "$DDPTRAIN" report run-torn >/dev/null 2>&1 && [ -s run-torn/report.html ]
then
    pass=$((pass + 1)); echo "ok   report: zeros at the end skipped"
else
    fail=$((fail + 1)); echo "FAIL report: zeros at the end of metrics.jsonl not skipped"
fi
base_job | sed 's/^layers = .*/layers = flatten, linear(100000000)/' > bad-wide.ini
case_ "layer beyond its limit" 2 "linear: width 100000000 exceeds the limit 1048576 (2^20)" \
    bad-wide.ini
$DDPTRAIN data synth -o img28.h5 --shape 1,28,28 --classes 4 --train 64 --test 16 >/dev/null
# half a TiB of activations: more than any test machine has (not ulimit -v: ASan cannot run
# under it); the largest layer is named
base_job img28.h5 | sed 's/^layers = .*/layers = conv2d(300000, 1), relu, dropout(0.5), relu, flatten, linear(4)/;
    s/^batch_size = .*/batch_size = 64/' > bad-mem.ini
case_ "model larger than memory" 2 \
    "layer 3 dropout(0.5): its outputs for a batch of 64 need 168.2 GiB (the model .* in all) but" \
    bad-mem.ini
if [ $have_h5py -eq 1 ]; then
    $PY - <<'PY'
import h5py, numpy as np
def make(path, images, labels, classes=None):
    with h5py.File(path, "w") as f:
        g = f.create_group("train")
        g["images"] = images
        g["labels"] = labels
        if classes is not None:
            g.attrs["classes"] = classes
x = np.random.RandomState(1).rand(64, 1, 8, 8).astype(np.float32)
y = np.arange(64) % 4
a = x.copy(); a[17, 0, 3, 5] = np.nan; make("bad-nan.h5", a, y)
a = x.copy(); a[40, 0, 0, 1] = np.inf; make("bad-inf.h5", a, y)
make("bad-classes.h5", x, y, classes=np.int64(-3))
make("bad-huge-values.h5", np.full((64, 1, 8, 8), 3.3e38, np.float32), y)
with h5py.File("bad-sparse.h5", "w") as f:  # 2^28 samples declared, one chunk written
    g = f.create_group("train")
    g.create_dataset("images", shape=(2**28, 1, 1, 1), dtype=np.uint8, chunks=(4096, 1, 1, 1))
    g.create_dataset("labels", shape=(2**28,), dtype=np.uint8, chunks=(4096,))
    g["images"][0:10] = 1
PY
    for f in nan inf classes huge-values sparse; do
        base_job bad-$f.h5 | sed 's/^\[data\]/[data]\ntest =/' > bad-$f.ini
    done
    case_ "NaN in float images (cached)" 3 \
        "bad-nan.h5: /train/images: sample 17 holds NaN at element 29" bad-nan.ini
    # streamed: found when training reads the batch, which check does not (CHECK=0)
    CHECK=0 case_ "NaN in float images (streamed)" 3 \
        "bad-nan.h5: /train/images: sample 17 holds NaN at element 29" bad-nan.ini \
        --set data.cache_mb=0
    case_ "inf in float images" 3 "bad-inf.h5: /train/images: sample 40 holds +inf" bad-inf.ini
    case_ "negative classes attribute" 3 "bad-classes.h5: /train attribute .classes. is -3" \
        bad-classes.ini
    DEADLINE=20 case_ "samples declared, never written" 3 \
        "bad-sparse.h5: /train/images declares 268435456 samples but only 1 of its 65536" \
        bad-sparse.ini
    CHECK=0 case_ "non-finite loss names the layer" 3 \
        "layer 2 linear(4) is the first whose output is non-finite.*scale the dataset" \
        bad-huge-values.ini
    # a checkpoint with one weight changed after it was written
    "$DDPTRAIN" good.ini --set job.output=ckrun >/dev/null 2>&1
    ck=$(ls ckrun/checkpoints/*.h5 2>/dev/null | head -1)
    if [ -n "$ck" ]; then
        $PY -c '
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    d = f["model/1.weight"]; a = d[()]; a[0, 0] += 1; d[...] = a
' "$ck"
        case_ "eval of a damaged checkpoint" 3 "checksum mismatch" eval good.ini --checkpoint "$ck"
    else
        echo "FAIL cannot make a checkpoint"; fail=$((fail + 1))
    fi
    rm -rf ckrun
fi

# ---- sizes whose arithmetic would overflow: refused before use, never a crash or a wrap -------
bad_layers bad-stride-product.ini \
    'residual(conv2d(4, 1, stride=65536), conv2d(4, 1, stride=65536)), flatten, linear(4)'
case_ "residual strides multiply past int" 2 \
    "layer 1 residual: its body's strides and pool windows multiply to 4294967296 (65536 x 65536 at layer 1.2), more than 16777216" \
    bad-stride-product.ini
bad_layers bad-stride-product2.ini \
    'residual(conv2d(4, 1, stride=65536), conv2d(4, 1, stride=32768)), flatten, linear(4)'
case_ "residual strides multiply to 2^31" 2 \
    "layer 1 residual: its body's strides and pool windows multiply to 2147483648" \
    bad-stride-product2.ini
$DDPTRAIN data synth -o img1.h5 --shape 1,1,1 --classes 4 --train 16 --test 8 >/dev/null
# out * in * k * k = 2^20 * 2^20 * 2^40 floats: 2^80, which wraps to 0 in 64 bits
bad_layers bad-conv-weights.ini \
    'conv2d(1048576, 1), conv2d(1048576, 1048576, pad=524288), flatten, linear(4)'
case_ "conv weights past 64 bits" 2 \
    "layer 2 conv2d(1048576, 1048576): its weights .* need 1048576 x 1048576 x 1048576 x 1048576 values" \
    bad-conv-weights.ini --set data.file=img1.h5

# ---- outputs that would replace the command's own inputs (same device and inode) ---------
"$DDPTRAIN" good.ini --set job.output=run1 >/dev/null 2>&1
ck=$(ls run1/checkpoints/*.h5 2>/dev/null | head -1)
if [ -f run1/model.h5 ] && [ -n "$ck" ]; then
    cp good.h5 bad-in.h5
    ln -s bad-in.h5 bad-in-link.h5
    ln -s good.ini bad-job-link.ini
    sums() { cksum good.ini good.h5 bad-in.h5 run1/model.h5 "$ck"; }
    before=$(sums)
    pred() { case_ "$1" 2 "$2" predict good.ini --checkpoint run1/model.h5 --input bad-in.h5 \
                   --output "$3"; }
    pred "predict over its --input" \
        "predict: --output bad-in.h5 is the same file as --input bad-in.h5.*give another --output" \
        bad-in.h5
    pred "predict over its --input (./)" \
        "\-\-output ./bad-in.h5 is the same file as --input bad-in.h5" ./bad-in.h5
    pred "predict over its --input (link)" \
        "\-\-output bad-in-link.h5 is the same file as --input bad-in.h5" bad-in-link.h5
    case_ "predict from a link over its target" 2 \
        "\-\-output bad-in.h5 is the same file as --input bad-in-link.h5" \
        predict good.ini --checkpoint run1/model.h5 --input bad-in-link.h5 --output bad-in.h5
    pred "predict over the model" \
        "\-\-output run1/model.h5 is the same file as --checkpoint run1/model.h5" run1/model.h5
    pred "predict over the job file" "\-\-output bad-job-link.ini is the same file as the job file good.ini" \
        bad-job-link.ini
    pred "predict over the dataset" \
        "\-\-output good.h5 is the same file as \[data\] file good.h5" good.h5
    ln -s bad-in.h5 bad-in.tmp # predict writes bad-in.tmp first, then renames it
    pred "predict over an input via .tmp" \
        "\-\-output bad-in is written first as bad-in.tmp, the same file as --input bad-in.h5" \
        bad-in
    rm -f bad-in.tmp
    exp() { case_ "$1" 2 "$2" export good.ini --checkpoint "$3" --onnx "$4"; }
    exp "export over the model" \
        "export: --onnx run1/model.h5 is the same file as --checkpoint run1/model.h5" \
        run1/model.h5 run1/model.h5
    exp "export over the checkpoint" "\-\-onnx ./$ck is the same file as --checkpoint $ck" \
        "$ck" "./$ck"
    exp "export over the job file" "\-\-onnx good.ini is the same file as the job file good.ini" \
        run1/model.h5 good.ini
    [ "$before" = "$(sums)" ] && pass=$((pass + 1)) ||
        { fail=$((fail + 1)); echo "FAIL an input changed: $before / $(sums)"; }

    # ---- weights of another model: refused by name, not as a damaged file -------------------
    "$DDPTRAIN" good.ini --set job.output=run2 \
        --set "model.layers=flatten, linear(4), relu, linear(4)" >/dev/null 2>&1
    ck2=$(ls run2/checkpoints/*.h5 2>/dev/null | head -1)
    extra="/model/3.bias (4,) is not a tensor of this job's model: .* a different model"
    case_ "eval of a larger model's weights" 3 "run2/model.h5: $extra" \
        eval good.ini --checkpoint run2/model.h5
    case_ "predict with a larger model's weights" 3 "run2/model.h5: $extra" \
        predict good.ini --checkpoint run2/model.h5 --input good.h5 --output bad-pred.h5
    case_ "export of a larger model's weights" 3 "run2/model.h5: $extra" \
        export good.ini --checkpoint run2/model.h5 --onnx bad-x.onnx
    case_ "init from a larger model's weights" 3 "run2/model.h5: $extra" good.ini \
        --set model.init=run2/model.h5
    case_ "eval of another model's checkpoint" 3 "$ck2: $extra" eval good.ini --checkpoint "$ck2"
    case_ "export of another model's checkpoint" 3 "$ck2: $extra" \
        export good.ini --checkpoint "$ck2" --onnx bad-x.onnx
    rm -rf run2
else
    echo "FAIL cannot make a model to predict with"; fail=$((fail + 1))
fi
rm -rf run1

# ---- an empty path where a path or a word is expected: a job error naming the key ------------
case_ "empty model.init" 2 "\-\-set model.init: empty; expected pytorch (the default) or the path" \
    good.ini --set model.init=
case_ "empty checkpoint.resume" 2 \
    "\-\-set checkpoint.resume: empty; expected auto (the default), never, or a checkpoint" \
    good.ini --set checkpoint.resume=

# ---- an empty output path is refused by every command, before any work, writing nothing ----
case_ "data synth -o ''" 2 "data: synth: -o '': an empty path; give a file name" \
    data synth -o "" --shape 1,8,8 --train 8 --test 8
case_ "report -o ''" 2 "report: -o '': an empty path" report . -o ""
mkdir -p bad-outdir
case_ "data synth -o a directory" 2 "synth: -o bad-outdir: is a directory" \
    data synth -o bad-outdir --shape 1,8,8 --train 8 --test 8
case_ "data synth -o in a missing directory" 2 "synth: -o nodir/x.h5: its directory nodir" \
    data synth -o nodir/x.h5 --shape 1,8,8 --train 8 --test 8
"$DDPTRAIN" good.ini --set job.output=run3 >/dev/null 2>&1
if [ -f run3/model.h5 ]; then
    case_ "predict --output ''" 2 "predict: --output '': an empty path" \
        predict good.ini --checkpoint run3/model.h5 --input good.h5 --output ""
    case_ "export --onnx ''" 2 "export: --onnx '': an empty path" \
        export good.ini --checkpoint run3/model.h5 --onnx ""
    case_ "export --onnx a directory" 2 "export: --onnx bad-outdir: is a directory" \
        export good.ini --checkpoint run3/model.h5 --onnx bad-outdir
else
    echo "FAIL cannot make a model to export"; fail=$((fail + 1))
fi
rm -rf run3

# ---- output paths that mkdir cannot make: check finds them too, creating nothing -------------
touch bad-outfile
case_ "output is a file" 2 \
    "\-\-set job.output: cannot create directory bad-outfile: bad-outfile exists and is a regular file, not a directory" \
    good.ini --set job.output=bad-outfile
case_ "output under a file" 2 \
    "cannot create directory bad-outfile/run: bad-outfile exists and is a regular file" \
    good.ini --set job.output=bad-outfile/run
case_ "output is /dev/null" 2 \
    "cannot create directory /dev/null: /dev/null exists and is a character device, not a directory" \
    good.ini --set job.output=/dev/null
long=$(printf 'n%.0s' $(seq 300))
case_ "output name over 255 bytes" 2 \
    "cannot create directory runs/nnn.*: its name 'nnn.*' has 300 bytes, more than the 255 a name may have" \
    good.ini --set "job.output=runs/$long"
# resuming appends to tb/ and metrics.jsonl: a file tb/ fails check as it fails the run
"$DDPTRAIN" good.ini --set job.output=bad-tbrun >/dev/null 2>&1
touch bad-tbrun/tb
for m in check train; do
    c=""; [ $m = check ] && c=check
    timeout -k 5 60 "$DDPTRAIN" $c good.ini --set job.output=bad-tbrun --set train.epochs=2 \
        --set job.tensorboard=true >stdout.txt 2>"tb-$m.txt"
    eval "rc_$m=$?"
done
if [ "$rc_check" -eq 2 ] && [ "$rc_train" -eq 2 ] && cmp -s tb-check.txt tb-train.txt &&
    [ "$(grep -c . tb-train.txt)" -eq 1 ] &&
    grep -q "bad-tbrun/tb is a regular file, not a directory.*\[job\] tensorboard" tb-train.txt; then
    pass=$((pass + 1))
    printf 'ok   %-34s %s\n' "resumed run: tb/ is a file" "$(head -c 160 tb-train.txt)"
else
    fail=$((fail + 1))
    printf 'FAIL %-34s check %s, run %s: %s | %s\n' "resumed run: tb/ is a file" "$rc_check" \
        "$rc_train" "$(head -c 200 tb-check.txt)" "$(head -c 200 tb-train.txt)"
fi
rm -rf bad-tbrun
# the final weights a resumed run replaces at its end: a directory there fails check, not the
# run after all its training
"$DDPTRAIN" good.ini --set job.output=bad-mrun >/dev/null 2>&1
rm -f bad-mrun/model.h5 && mkdir -p bad-mrun/model.h5/x
for m in check train; do
    c=""; [ $m = check ] && c=check
    timeout -k 5 60 "$DDPTRAIN" $c good.ini --set job.output=bad-mrun --set train.epochs=2 \
        >stdout.txt 2>"m-$m.txt"
    eval "rc_$m=$?"
done
if [ "$rc_check" -eq 2 ] && [ "$rc_train" -eq 2 ] && cmp -s m-check.txt m-train.txt &&
    [ "$(grep -c . m-train.txt)" -eq 1 ] &&
    grep -q "bad-mrun/model.h5 is a directory, not a regular file, and a resumed run replaces it" \
        m-train.txt; then
    pass=$((pass + 1))
    printf 'ok   %-34s %s\n' "resumed run: model.h5 a directory" "$(head -c 160 m-train.txt)"
else
    fail=$((fail + 1))
    printf 'FAIL %-34s check %s, run %s: %s | %s\n' "resumed run: model.h5 a directory" \
        "$rc_check" "$rc_train" "$(head -c 200 m-check.txt)" "$(head -c 200 m-train.txt)"
fi
rm -rf bad-mrun

# ---- a full disk: a private tmpfs with every page but FREE taken, files written into it fail ---
# enospc NAME CODE PATTERN FREE [--set ...]: the run starts with FREE one-page pieces of free
# space: the lock file takes one, job.ini the next, metrics.jsonl the next, so FREE chooses the
# first write that finds the disk full; it must exit CODE with one line naming the file and why.
enospc() {
    local name=$1 code=$2 pattern=$3 free=$4
    shift 4
    local args="" a
    for a in "$@"; do args="$args '$a'"; done
    unshare -m sh -c "
        mkdir -p mnt && mount -t tmpfs -o size=64k tmpfs mnt || exit 99
        mkdir -p mnt/out/checkpoints mnt/spare
        i=0; while [ \$i -lt $free ]; do head -c 4096 /dev/zero > mnt/spare/\$i; i=\$((i + 1)); done
        dd if=/dev/zero of=mnt/filler bs=4096 2>/dev/null
        rm -rf mnt/spare
        timeout -k 5 60 '$DDPTRAIN' good.ini --set job.output=mnt/out $args" >stdout.txt 2>stderr.txt
    local rc=$? ok=1 why=""
    [ "$rc" -eq "$code" ] || { ok=0; why="exit $rc, want $code"; }
    [ "$(grep -c . stderr.txt)" -eq 1 ] || { ok=0; why="$why; stderr has several lines"; }
    grep -q -- "$pattern" stderr.txt || { ok=0; why="$why; stderr lacks '$pattern'"; }
    no_source_path stderr.txt || { ok=0; why="$why; a source path on stderr"; }
    if [ $ok -eq 1 ]; then
        pass=$((pass + 1))
        printf 'ok   %-34s %s\n' "$name" "$(head -c 160 stderr.txt)"
    else
        fail=$((fail + 1))
        printf 'FAIL %-34s %s\n' "$name" "$why"
        sed 's/^/     | /' stderr.txt | head -5
    fi
}
nospace="No space left on device"
enospc "full disk: lock file" 2 "mnt/out/.ddptrain.lock: $nospace" 0
enospc "full disk: job.ini" 1 "mnt/out/job.ini.*: $nospace" 1
enospc "full disk: metrics" 1 "metrics.jsonl: cannot write metrics: $nospace" 2
enospc "full disk: checkpoint" 1 "ckpt-00000008.h5.tmp: cannot .*checkpoint: $nospace" 3
enospc "full disk: final weights" 1 "model.h5.tmp: cannot .*: $nospace" 3 \
    --set checkpoint.every_epochs=0

# full_out NAME PATTERN ARGS...: ddptrain ARGS writing its output (mnt/o) into a full tmpfs
# must exit 1, as every subcommand does for an output it cannot write, with one line, and
# leave no mnt/o.tmp behind
full_out() {
    local name=$1 pattern=$2
    shift 2
    local args="" a
    for a in "$@"; do args="$args '$a'"; done
    unshare -m sh -c "
        mkdir -p mnt && mount -t tmpfs -o size=64k tmpfs mnt || exit 99
        dd if=/dev/zero of=mnt/filler bs=4096 2>/dev/null
        timeout -k 5 60 '$DDPTRAIN' $args; rc=\$?
        ls mnt/o.tmp 2>/dev/null && exit 98
        exit \$rc" >stdout.txt 2>stderr.txt
    local rc=$? why=""
    [ "$rc" -eq 1 ] || why="exit $rc, want 1 (98: mnt/o.tmp left behind)"
    [ "$(grep -c . stderr.txt)" -eq 1 ] || why="$why; stderr has several lines"
    grep -q -- "$pattern" stderr.txt || why="$why; stderr lacks '$pattern'"
    if [ -z "$why" ]; then
        pass=$((pass + 1)); printf 'ok   %-34s %s\n' "$name" "$(head -c 160 stderr.txt)"
    else
        fail=$((fail + 1)); printf 'FAIL %-34s %s\n' "$name" "$why"; sed 's/^/     | /' stderr.txt
    fi
}
"$DDPTRAIN" good.ini --set job.output=run4 >/dev/null 2>&1
full_out "full disk: data synth" "mnt/o" data synth -o mnt/o --shape 1,8,8 --train 64 --test 8
full_out "full disk: report" "mnt/o" report run4 -o mnt/o
full_out "full disk: export" "mnt/o" export good.ini --checkpoint run4/model.h5 --onnx mnt/o
full_out "full disk: predict" "mnt/o" predict good.ini --checkpoint run4/model.h5 \
    --input good.h5 --output mnt/o
rm -rf run4
mkdir -p idx # a tiny IDX set (as tests/data/test_cli.sh writes it)
printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x03\x01\x02\x03\x04\x05\x06\xfa\xfb\xfc\xfd\xfe\xff' >idx/train-images-idx3-ubyte
printf '\x00\x00\x08\x01\x00\x00\x00\x02\x04\x01' >idx/train-labels-idx1-ubyte
printf '\x00\x00\x08\x03\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x10\x20\x30\x40\x50' >idx/t10k-images-idx3-ubyte
printf '\x00\x00\x08\x01\x00\x00\x00\x01\x02' >idx/t10k-labels-idx1-ubyte
full_out "full disk: data idx" "mnt/o" data idx --dir idx -o mnt/o
rm -rf idx
printf 'a,b,y\n1,2,0\n3,4,1\n' > t.csv
full_out "full disk: data csv" "mnt/o" data csv t.csv --label-column y -o mnt/o
case_ "data csv -o ''" 2 "data: csv: -o '': an empty path" data csv t.csv --label-column y -o ""
rm -f t.csv

# ---- an output never replaces an input (same device and inode, links too) --------------------
printf 'a,b,y\n1,2,0\n3,4,1\n' > keep.csv
cp keep.csv keep.orig
ln -s keep.csv keep-link.csv
case_ "data csv -o its input" 2 \
    "data: csv: -o keep.csv is the input keep.csv: an import never writes over its input" \
    data csv keep.csv --label-column y -o keep.csv --force
case_ "data csv -o a link to its input" 2 "-o keep-link.csv is the input keep.csv" \
    data csv keep.csv --label-column y -o keep-link.csv --force
mkdir -p keeprun
printf '{"kind":"start","step":0}\n' > keeprun/metrics.jsonl
cp keeprun/metrics.jsonl keep.jsonl
case_ "report -o its metrics.jsonl" 2 \
    "report: -o keeprun/metrics.jsonl is the report's input keeprun/metrics.jsonl" \
    report keeprun -o keeprun/metrics.jsonl
if cmp -s keep.csv keep.orig && cmp -s keeprun/metrics.jsonl keep.jsonl; then
    pass=$((pass + 1))
    echo "ok   inputs intact after the refusals"
else
    fail=$((fail + 1))
    echo "FAIL inputs changed: keep.csv or keeprun/metrics.jsonl"
fi
rm -rf keep.csv keep.orig keep-link.csv keeprun keep.jsonl

echo "bad-input: $pass passed, $fail failed"
[ $fail -eq 0 ]

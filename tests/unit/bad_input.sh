#!/bin/bash
# bad_input.sh - bad job files, datasets and weights given to `ddptrain JOB.ini`: each must give
# ONE line on stderr naming the culprit, the documented exit code (2 job, 3 data/weights),
# no crash, and nothing written outside the output directory.
set -u
DDPTRAIN=${DDPTRAIN:?set by meson}
PY=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

$DDPTRAIN data synth -o good.h5 --shape 1,8,8 --classes 4 --train 64 --test 16 --seed 3 \
    >/dev/null || { echo "cannot make the synthetic dataset"; exit 1; }
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
# case NAME CODE PATTERN JOBFILE [args...]
case_() {
    local name=$1 code=$2 pattern=$3 job=$4
    shift 4
    rm -rf out
    touch marker
    sleep 0.01
    timeout 60 "$DDPTRAIN" "$job" "$@" >stdout.txt 2>stderr.txt
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
case_ "unknown section" 2 "bad-section.ini:2: \[jobs\]" bad-section.ini
{ base_job; printf '[optim]\nlearning_rate = 0.1\n'; } > bad-key.ini
case_ "unknown key" 2 "bad-key.ini:11: \[optim\] learning_rate: unknown key" bad-key.ini
{ base_job; printf '[optim]\nlr = fast\n'; } > bad-type.ini
case_ "bad type" 2 "bad-type.ini:11: \[optim\] lr: 'fast' is not a number" bad-type.ini
{ base_job; printf '[optim]\nmomentum = 1.5\n'; } > bad-range.ini
case_ "out of range" 2 "\[optim\] momentum: 1.5 is out of range" bad-range.ini
base_job | sed 's/^\[data\]/[data]\nshuffle = maybe/' > bad-bool.ini
case_ "bad boolean" 2 "shuffle: 'maybe' is not a boolean" bad-bool.ini
base_job | sed 's/^layers = .*/layers = flatten, linaer(4)/' > bad-layer.ini
case_ "unknown layer" 2 "bad-layer.ini:7: \[model\] layers: layer 2 'linaer(4)': unknown layer" bad-layer.ini
base_job | sed 's/^layers = .*/layers = flatten, linear(4/' > bad-paren.ini
case_ "unbalanced parenthesis" 2 "\[model\] layers: .*parenthes" bad-paren.ini
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
printf 'just some words\n' > bad-syntax.ini
case_ "not INI syntax" 2 "bad-syntax.ini:1: not INI syntax" bad-syntax.ini
case_ "missing job file" 2 "nope.ini: cannot open job file" nope.ini
case_ "bad --set" 2 "\-\-set train.epochs: 'many' is not an integer" good.ini --set train.epochs=many
case_ "unknown --set key" 2 "\-\-set train.epoch: unknown key" good.ini --set train.epoch=3
{ base_job | sed 's/^layers = .*/layers = flatten, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4), relu, linear(4)/'; } > bad-long.ini
case_ "line too long" 2 "bad-long.ini:7: line longer than" bad-long.ini

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
$DDPTRAIN data synth -o flat.h5 --shape 64 --classes 4 --train 32 --test 8 >/dev/null
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

echo "bad-input: $pass passed, $fail failed"
[ $fail -eq 0 ]

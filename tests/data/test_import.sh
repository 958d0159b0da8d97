#!/bin/bash
# test_import.sh DDPTRAIN IMPORT_PY - `ddptrain data npy|npz|csv`: files written by numpy
# import exactly (h5py compares every value; --test-fraction's rows against numpy, --classes
# names as class_names, which predict writes beside its predictions), hostile files (and
# hostile class_names, for `data info` and predict) exit 3 with one line naming the
# file (and the line for CSV), an existing OUT without --force exits 2, and each imported
# file trains one epoch. Exit 77 when /usr/bin/python3 lacks numpy or h5py.
set -u
HERE=$(dirname "$(realpath "$0")")
CLI=$(realpath "$1")
HELPER=$(realpath "$2")
PY=/usr/bin/python3
if ! [ -x "$PY" ] || ! "$PY" -c 'import h5py, numpy' 2>/dev/null; then
    echo "SKIP: $PY with h5py and numpy is not installed"
    exit 77
fi
T=$(mktemp -d /tmp/ddp_import.XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
# shellcheck source=tests/data/import_lib.sh
. "$HERE/import_lib.sh"
"$PY" "$HELPER" make "$T" || { echo "FAIL: making the inputs"; exit 1; }

# imported CASE LAYERS TEST -- ARGS...: import, compare with numpy, train one epoch.
imported() {
    local case=$1 layers=$2 test=$3
    shift 4
    expect 0 "" -- "$@"
    [ -e out.h5 ] || return
    "$PY" "$HELPER" check out.h5 "$case" "$T" || fail "$case: contents differ"
    cat >job.ini <<JOB
[job]
name = import
output = run-$case
[data]
file = out.h5
test = $test
batch_size = 8
[model]
layers = $layers
[optim]
name = sgd
lr = 0.05
[train]
epochs = 3
JOB
    if "$CLI" job.ini --set train.epochs=1 >train.log 2>&1; then
        echo "ok   $case: trained one epoch"
    else
        fail "$case: training failed: $(tail -3 train.log)"
    fi
}

imported npy "flatten, linear(4)" /test -- npy --images x.npy --labels y.npy \
    --test-images xt.npy --test-labels yt.npy
imported npz-stored "flatten, linear(4)" /test -- npz stored.npz
imported npz-deflated "flatten, linear(3)" "" -- npz deflated.npz --images-key imgs \
    --labels-key labs
imported npy-flat "linear(5)" "" -- npy --images xd.npy --labels yd.npy
imported csv-header "linear(5)" /test -- csv h.csv --label-column label --test ht.csv
imported csv-noheader "linear(5)" "" -- csv n.csv --label-column 0
expect 0 "" -- npy --images x_v3.npy --labels y.npy
# --test-fraction: /test held out per class as docs/data.md says (numpy computes the rows);
# --classes NAME,...: stored as class_names, and predict names its predictions
imported npy-held "flatten, linear(4)" /test -- npy --images x.npy --labels y.npy \
    --test-fraction 0.3 --classes cat,dog,bird,fish
if "$CLI" predict job.ini --checkpoint run-npy-held/model.h5 --input out.h5 \
    --output pred.h5 >predict.log 2>&1; then
    "$PY" "$HELPER" predicted pred.h5 cat dog bird fish || fail "predict: names"
    grep -q "predicted classes: 0 cat: [0-9]*, 1 dog: " predict.log ||
        fail "predict does not log the classes by name: $(cat predict.log)"
else
    fail "predict with class names: $(tail -3 predict.log)"
fi
imported npz-held "flatten, linear(3)" /test -- npz deflated.npz --images-key imgs \
    --labels-key labs --test-fraction 0.25
imported csv-held "linear(5)" /test -- csv h.csv --label-column label --test-fraction 0.5 \
    --classes "a b,ç,d,e,f"
"$CLI" data info out.h5 | grep -q "class_names: 0 a b, 1 ç, 2 d, 3 e, 4 f" ||
    fail "data info does not list the class names: $("$CLI" data info out.h5)"

# an existing OUT without --force: exit 2, and the file is untouched
"$CLI" data npy --images x.npy --labels y.npy -o keep.h5 >/dev/null || fail "keep.h5"
sum=$(cksum <keep.h5)
for sub in "npy --images x.npy --labels y.npy" "npz stored.npz" "csv n.csv --label-column 0"; do
    # shellcheck disable=SC2086
    "$CLI" data $sub -o keep.h5 >/dev/null 2>stderr
    rc=$?
    if [ "$rc" != 2 ] || ! grep -q "keep.h5 already exists; add --force" stderr; then
        fail "data $sub onto keep.h5: exit $rc, $(cat stderr)"
    else
        echo "ok   exit 2  $(cat stderr)"
    fi
done
[ "$(cksum <keep.h5)" = "$sum" ] || fail "keep.h5 changed"
"$CLI" data npz stored.npz -o keep.h5 --force >/dev/null || fail "--force did not replace"

# usage errors
expect 2 "--images and --labels are required" -- npy --images x.npy
expect 2 "both --test-images and --test-labels" -- npy --images x.npy --labels y.npy \
    --test-images xt.npy
expect 2 "FILE.npz is required" -- npz
expect 2 "label-column NAME|INDEX is required" -- csv n.csv
expect 2 "unknown option .--bogus." -- csv n.csv --bogus

expect 2 "--test-fraction .1.: expected a number in \[0, 1)" -- npy --images x.npy \
    --labels y.npy --test-fraction 1
expect 2 "--test-fraction .-0.1.: expected a number in \[0, 1)" -- csv n.csv \
    --label-column 0 --test-fraction -0.1
expect 2 "--test-fraction .*does not apply with --test-images" -- npy --images x.npy \
    --labels y.npy --test-images xt.npy --test-labels yt.npy --test-fraction 0.2
expect 2 "--test-fraction .*does not apply with --test;" -- csv h.csv --label-column label \
    --test ht.csv --test-fraction 0.2
expect 3 "stored.npz: holds test arrays (x_test), so --test-fraction does not apply" -- \
    npz stored.npz --test-fraction 0.2
expect 2 "--classes names 2 classes, but the labels of y.npy hold 4 (0..3)" -- \
    npy --images x.npy --labels y.npy --classes cat,dog
expect 2 "--classes: name 1 .. is empty" -- npy --images x.npy --labels y.npy \
    --classes cat,,dog,fish

# hostile class_names in a user's file: `data info` and predict refuse them (exit 3)
for c in "count:holds 2 names but the group has 3 classes" "utf8:name 1 is not valid UTF-8" \
    "long:name 1 is longer than 255 bytes" "wide:holds strings of 300 bytes" \
    "int:holds integers" "group:is not a dataset" "empty:name 1 is empty" \
    "ctrl:name 1 holds a control character"; do
    f=names-${c%%:*}.h5
    "$CLI" data info "$f" >/dev/null 2>stderr
    rc=$?
    if [ "$rc" != 3 ] || [ "$(wc -l <stderr)" != 1 ] ||
        ! grep -q "$f: /train/class_names.*${c#*:}" stderr; then
        fail "data info $f: exit $rc, $(cat stderr)"
    else
        echo "ok   exit 3  $(cat stderr)"
    fi
done
"$CLI" data csv h.csv --label-column label --test-fraction 0.5 -o out.h5 >/dev/null # job.ini's
"$CLI" predict job.ini --checkpoint run-csv-held/model.h5 --input names-utf8.h5 \
    --group /train --output pred2.h5 >stdout 2>stderr
rc=$?
if [ "$rc" != 3 ] || ! grep -q "names-utf8.h5: /train/class_names: name 1 is not valid" stderr ||
    [ -e pred2.h5 ]; then
    fail "predict on names-utf8.h5: exit $rc, $(cat stderr)"
else
    echo "ok   predict exit 3  $(tail -1 stderr)"
fi

# hostile .npy
L="--labels y.npy"
expect 3 "trunc.npy: the shape promises 4096 data bytes but the file holds 3996" -- \
    npy --images trunc.npy $L
expect 3 "trail.npy: .*trailing data" -- npy --images trail.npy $L
expect 3 "magic.npy: not a .npy file" -- npy --images magic.npy $L
expect 3 "version.npy: .npy format version 9.0" -- npy --images version.npy $L
expect 3 "huge.npy: the shape promises 862017116176384 data bytes but the file holds 784" -- \
    npy --images huge.npy $L
expect 3 "extra.npy: header key 'x' is unknown" -- npy --images extra.npy $L
expect 3 "nokey.npy: header lacks 'fortran_order'" -- npy --images nokey.npy $L
expect 3 "bigend.npy: dtype '>f4' is big-endian" -- npy --images bigend.npy $L
expect 3 "object.npy: dtype '|O' is not a plain number type" -- npy --images object.npy $L
expect 3 "hlen.npy: header length 60000 is beyond the file" -- npy --images hlen.npy $L
expect 3 "fortran.npy: array is in Fortran order" -- npy --images fortran.npy $L
expect 3 "f64.npy: images have dtype '<f8'; expected uint8 or float32" -- \
    npy --images f64.npy $L
expect 3 "flab.npy: labels have dtype '<f4'; expected integers" -- \
    npy --images x.npy --labels flab.npy
expect 3 "neglab.npy: label -1 at index 0 is negative" -- npy --images x.npy --labels neglab.npy
expect 3 "shortlab.npy: labels have shape (63,); expected (64,)" -- \
    npy --images x.npy --labels shortlab.npy
expect 3 "nan.npy: sample 5 holds NaN at element 19" -- npy --images nan.npy $L
expect 3 "y.npy: label 2 of sample 0 is outside \[0, 2)" -- npy --images x.npy $L --classes 2
expect 3 "missing.npy: cannot open" -- npy --images missing.npy $L
expect 3 "/: cannot open: directory" -- npy --images / $L
# hostile .npz
expect 3 "corrupt.npz: member x_train.npy: \(corrupt deflate data\|CRC-32 mismatch\|data ends early\)" \
    -- npz corrupt.npz
expect 3 "crc.npz: member x_train.npy: CRC-32 mismatch" -- npz crc.npz
expect 3 "trunc.npz: not a complete zip archive" -- npz trunc.npz
expect 3 "notzip.npz: not a complete zip archive" -- npz notzip.npz
expect 3 "deflated.npz: no array .x_train. (it holds: imgs, labs)" -- npz deflated.npz
expect 3 "deflated.npz: no array .imgs_test. (it holds: imgs, labs)" -- npz deflated.npz \
    --images-key imgs --labels-key labs --test-images-key imgs_test --test-labels-key labs
# hostile CSV: the line is named
expect 3 "cell.csv:4: column 1 .x7. is not a finite number" -- csv cell.csv --label-column label
expect 3 "label.csv:3: label .1.5. (column 2) is not an integer" -- csv label.csv \
    --label-column label
expect 3 "ragged.csv:2: 2 cells, expected 3" -- csv ragged.csv --label-column 2
expect 3 "quote.csv:2: unterminated or misplaced double quote" -- csv quote.csv --label-column 2
expect 3 "n.csv:1: no column .species." -- csv n.csv --label-column species
expect 3 "h3.csv:1: 3 columns, but h.csv has 4" -- csv h.csv --label-column label --test h3.csv

if [ "$fails" != 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "all import checks passed"

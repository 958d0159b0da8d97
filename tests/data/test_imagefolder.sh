#!/bin/bash
# test_imagefolder.sh DDPTRAIN IMAGE_PY - `ddptrain data imagefolder`: trees of PNG and JPEG
# files written by Pillow import as Pillow decodes them (PNG pixel for pixel, JPEG within 2
# levels; grey/RGB conversion, --test-fraction, --resize) with the folders' names as
# class_names, hostile trees (a folder name that is not UTF-8) exit 3 with one
# line naming the file, an existing OUT without --force exits 2, and each import trains one
# epoch. Exit 77 when /usr/bin/python3 lacks Pillow, numpy or h5py, or the build lacks
# libpng or libjpeg.
set -u
HERE=$(dirname "$(realpath "$0")")
CLI=$(realpath "$1")
HELPER=$(realpath "$2")
PY=/usr/bin/python3
if ! [ -x "$PY" ] || ! "$PY" -c 'import h5py, numpy, PIL' 2>/dev/null; then
    echo "SKIP: $PY with h5py, numpy and Pillow (python3-pil) is not installed"
    exit 77
fi
T=$(mktemp -d /tmp/ddp_imagefolder.XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
# shellcheck source=tests/data/import_lib.sh
. "$HERE/import_lib.sh"
"$PY" "$HELPER" make "$T" || { echo "FAIL: making the trees"; exit 1; }
"$CLI" data imagefolder png -o probe.h5 >/dev/null 2>probe.err
"$CLI" data imagefolder jpg -o probe2.h5 >/dev/null 2>>probe.err
if grep -q "built without" probe.err; then
    echo "SKIP: $(head -1 probe.err)"
    exit 77
fi

# imported CASE TEST -- ARGS...: import, compare with Pillow, train one epoch.
imported() {
    local case=$1 test=$2
    shift 3
    expect 0 "" -- imagefolder "$@"
    [ -e out.h5 ] || return
    "$PY" "$HELPER" check out.h5 "$case" "$T" || fail "$case: contents differ"
    printf '[job]\nname = i\noutput = run-%s\n[data]\nfile = out.h5\ntest = %s\nbatch_size = 4\n[model]\nlayers = flatten, linear(3)\n[optim]\nname = sgd\nlr = 0.05\n[train]\nepochs = 3\n' \
        "$case" "$test" >job.ini
    if "$CLI" job.ini --set train.epochs=1 >train.log 2>&1; then
        echo "ok   $case: trained one epoch"
    else
        fail "$case: training failed: $(tail -3 train.log)"
    fi
}

imported png /test -- png
imported gray /test -- gray --test-fraction 0.4
imported gray-rgb "" -- gray --channels 3
imported jpg /test -- jpg
imported jpg-gray /test -- jpg --channels 1
imported mixed "" -- mixed --resize 6x5

# class names: the folders' names, sorted bytewise, stored as UTF-8; a name that is not
# UTF-8 is refused naming the folder
expect 0 "" -- imagefolder utf8
"$PY" "$HELPER" names out.h5 "ant b" zebra "Émeu" || fail "utf8: class_names"
"$CLI" data info out.h5 | grep -q "class_names: 0 ant b, 1 zebra, 2 Émeu" ||
    fail "data info does not list the class names: $("$CLI" data info out.h5)"
expect 3 "badname/caf.*: the class folder's name is not valid UTF-8; .*rename the folder" -- \
    imagefolder badname

"$CLI" data imagefolder png -o keep.h5 >/dev/null || fail "keep.h5"
"$CLI" data imagefolder png -o keep.h5 >/dev/null 2>stderr
rc=$?
if [ "$rc" != 2 ] || ! grep -q "keep.h5 already exists; add --force" stderr; then
    fail "imagefolder onto keep.h5: exit $rc, $(cat stderr)"
else
    echo "ok   exit 2  $(cat stderr)"
fi
"$CLI" data imagefolder png -o keep.h5 --force >/dev/null || fail "--force did not replace"

expect 2 "DIR is required" -- imagefolder
expect 2 "--resize .3y3.: expected HxW" -- imagefolder png --resize 3y3
expect 2 "--channels .2.: expected 1" -- imagefolder png --channels 2
expect 2 "--test-fraction .1.: expected a number in \[0, 1)" -- imagefolder gray --test-fraction 1
expect 2 "--classes does not apply" -- imagefolder png --classes 3
expect 3 "junk/cat/notes.txt: not a PNG or JPEG image" -- imagefolder junk
expect 3 "trunc/cat/a.png: PNG data is corrupt or truncated" -- imagefolder trunc
expect 3 "jtrunc/cat/a.jpg: JPEG data is corrupt or truncated" -- imagefolder jtrunc
expect 3 "sizes/dog/b.png: 5 x 4 pixels, but the first image has 4 x 4; give --resize" -- \
    imagefolder sizes
expect 3 "huge/cat/a.png: image of 100000 x 100000 pixels" -- imagefolder huge
expect 3 "badtest/test/cow: class .cow. is not among the training classes" -- \
    imagefolder badtest
expect 3 "empty/cat: an empty class folder" -- imagefolder empty
expect 3 "nope: not a folder" -- imagefolder nope
expect 3 "png: has train/ (and test/) folders, so --test-fraction does not apply" -- \
    imagefolder png --test-fraction 0.2

if [ "$fails" != 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "all imagefolder checks passed"

#!/bin/bash
# test_cli.sh - `ddptrain data` end to end: exit codes (0 done, 2 usage, 3 bad input or
# unwritable output), exactly one error line naming the culprit, and no OUT or OUT.tmp
# left behind by a failure.
# usage: test_cli.sh DATA_CLI TEST_H5READ TEST_IDX
#   DATA_CLI is `ddptrain` with `data` dispatched (or the data_cli driver);
#   TEST_H5READ / TEST_IDX write the bad HDF5 files and IDX sets (--make-bad DIR).
set -u
CLI=$1
MAKE_BAD_H5=$2
MAKE_BAD_IDX=$3
T=$(mktemp -d /tmp/ddp_data_cli.XXXXXX)
fails=0

fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

# expect CODE PATTERN OUTFILE -- ARGS...: run `CLI data ARGS`, check the exit code, that
# stderr is one line matching PATTERN (when CODE != 0), and that OUTFILE (if not "-")
# and OUTFILE.tmp do not exist after a failure.
expect() {
    local code=$1 pat=$2 out=$3
    shift 4
    "$CLI" data "$@" >"$T/stdout" 2>"$T/stderr"
    local rc=$?
    local lines
    lines=$(wc -l <"$T/stderr")
    if [ "$rc" != "$code" ]; then
        fail "data $* exited $rc, expected $code; stderr: $(cat "$T/stderr")"
        return
    fi
    if [ "$code" != 0 ]; then
        if [ "$lines" != 1 ]; then
            fail "data $*: $lines stderr lines, expected 1: $(cat "$T/stderr")"
        elif ! grep -q -- "$pat" "$T/stderr"; then
            fail "data $*: stderr lacks '$pat': $(cat "$T/stderr")"
        else
            echo "ok   exit $rc  $(cat "$T/stderr")"
        fi
        if [ "$out" != - ] && { [ -e "$out" ] || [ -e "$out.tmp" ]; }; then
            fail "data $*: left $out or $out.tmp behind"
        fi
    fi
}

# --- usage errors: exit 2 -------------------------------------------------------------
O=$T/out.h5
expect 2 "subcommand is required" - --
expect 2 "unknown subcommand .frobnicate." - -- frobnicate
expect 2 "-o OUT.h5 is required" - -- idx --dir "$T"
expect 2 "either --dir or the four" "$O" -- idx --dir "$T" --train-images a -o "$O"
expect 2 "--test-labels is missing" "$O" -- idx --train-images a --train-labels b --test-images c -o "$O"
expect 2 "--classes .0." "$O" -- idx --dir "$T" --classes 0 -o "$O"
expect 2 "unknown argument .--bogus." "$O" -- idx --bogus -o "$O"
expect 2 "-o OUT.h5 is required" - -- synth --train 10
expect 2 "--shape .1,2." "$O" -- synth -o "$O" --shape 1,2
expect 2 "--shape .a,b,c." "$O" -- synth -o "$O" --shape a,b,c
expect 2 "--shape .0." "$O" -- synth -o "$O" --shape 0
# an empty field is refused, not skipped (",1" is not "1", "1,,28,28" not "1,28,28")
expect 2 "--shape .,1." "$O" -- synth -o "$O" --shape ,1
expect 2 "--shape .1,,28,28." "$O" -- synth -o "$O" --shape 1,,28,28
expect 2 "--shape .1,28,28,." "$O" -- synth -o "$O" --shape 1,28,28,
expect 2 "--classes .1." "$O" -- synth -o "$O" --classes 1
expect 2 "--train .0." "$O" -- synth -o "$O" --train 0
expect 2 "--test .-3." "$O" -- synth -o "$O" --test -3
expect 2 "--dtype .int8." "$O" -- synth -o "$O" --dtype int8
expect 2 "--noise .x." "$O" -- synth -o "$O" --noise x
expect 2 "--noise -1" "$O" -- synth -o "$O" --noise -1
expect 2 "--seed needs a value" "$O" -- synth -o "$O" --seed
expect 2 "prototypes" "$O" -- synth -o "$O" --shape 3,2000,2000 --classes 100
expect 2 "unknown argument .--bogus." "$O" -- synth -o "$O" --bogus
expect 2 "FILE.h5 is required" - -- info
expect 2 "one file at a time" - -- info a.h5 b.h5

# --- bad HDF5 files through `info`: exit 3 ----------------------------------------------
mkdir -p "$T/h5"
"$MAKE_BAD_H5" --make-bad "$T/h5" || fail "could not make the bad HDF5 files"
expect 3 "missing.h5: cannot open" - -- info "$T/h5/missing.h5"
expect 3 "text.h5: not an HDF5 file" - -- info "$T/h5/text.h5"
expect 3 "nogroup.h5: /test has no dataset .images." - -- info "$T/h5/nogroup.h5"
expect 3 "noimages.h5: /train has no dataset .images." - -- info "$T/h5/noimages.h5"
expect 3 "nolabels.h5: /train has no dataset .labels." - -- info "$T/h5/nolabels.h5"
expect 3 "rank3.h5: /train/images has rank 3" - -- info "$T/h5/rank3.h5"
expect 3 "int16.h5: /train/images has dtype int16" - -- info "$T/h5/int16.h5"
expect 3 "floatlabels.h5: /train/labels has dtype float32" - -- info "$T/h5/floatlabels.h5"
expect 3 "mismatch.h5: /train: images has 10 samples but labels has 9" - -- info "$T/h5/mismatch.h5"
expect 3 "empty.h5: /train/images is empty" - -- info "$T/h5/empty.h5"
expect 3 "labelrange.h5: /train/labels: label 7 at index 6 is outside .0, 5)" - -- info "$T/h5/labelrange.h5"

# --- bad IDX sets through `idx --dir`: exit 3, nothing left behind ----------------------
mkdir -p "$T/idx"
"$MAKE_BAD_IDX" --make-bad "$T/idx" || fail "could not make the bad IDX sets"
expect 3 "train-images-idx3-ubyte: bad magic" "$O" -- idx --dir "$T/idx/bad_magic" -o "$O"
expect 3 "train-labels-idx1-ubyte.gz: IDX element type 0x0d (float32)" "$O" -- idx --dir "$T/idx/float_type" -o "$O"
expect 3 "train-images-idx3-ubyte: truncated" "$O" -- idx --dir "$T/idx/truncated_raw" -o "$O"
expect 3 "train-images-idx3-ubyte.gz: truncated" "$O" -- idx --dir "$T/idx/truncated_gz" -o "$O"
expect 3 "t10k-images-idx3-ubyte.gz: truncated" "$O" -- idx --dir "$T/idx/cut_gz" -o "$O"
expect 3 "train-images-idx3-ubyte.gz: corrupt gzip" "$O" -- idx --dir "$T/idx/corrupt_gz" -o "$O"
expect 3 "train-labels-idx1-ubyte.gz: corrupt gzip" "$O" -- idx --dir "$T/idx/crc_gz" -o "$O"
expect 3 "train-labels-idx1-ubyte.gz: 49 labels but .*train-images-idx3-ubyte.gz holds 50" "$O" -- idx --dir "$T/idx/count_mismatch" -o "$O"
expect 3 "t10k-labels-idx1-ubyte: 5 bytes of trailing data" "$O" -- idx --dir "$T/idx/trailing_raw" -o "$O"
expect 3 "a labels file?" "$O" -- idx --dir "$T/idx/swapped" -o "$O"
expect 3 "no t10k-labels-idx1-ubyte\[.gz\]" "$O" -- idx --dir "$T/idx/missing_file" -o "$O"
expect 3 "no-such-dir: cannot open" "$O" -- idx --dir "$T/no-such-dir" -o "$O"
expect 3 "nope: cannot open" "$O" -- idx --train-images "$T/nope" --train-labels "$T/nope" \
    --test-images "$T/nope" --test-labels "$T/nope" -o "$O"

# --- an output path that cannot work: refused before any work, exit 2 ----------------------
expect 2 "synth: -o .*no/such/dir/x.h5: its directory .*no/such/dir: No such file or directory" "$T/no/such/dir/x.h5" -- synth -o "$T/no/such/dir/x.h5" --train 10 --test 10
expect 2 "idx: -o .*no/such/dir/x.h5: its directory" "$T/no/such/dir/x.h5" -- idx --dir "$T/no-such-dir" -o "$T/no/such/dir/x.h5"
expect 2 "synth: -o '': an empty path" "" -- synth -o "" --train 10 --test 10

# --- things that work: exit 0 -----------------------------------------------------------
expect 0 "" - -- --help
grep -q "ddptrain data synth" "$T/stdout" || fail "--help does not show the usage"
expect 0 "" - -- synth --help
expect 0 "" - -- synth -o "$T/s.h5" --shape 784 --classes 3 --train 30 --test 12 --seed 5 --dtype float32
[ -e "$T/s.h5" ] && [ ! -e "$T/s.h5.tmp" ] || fail "synth did not leave exactly s.h5"
expect 0 "" - -- info "$T/s.h5"
grep -q "^/train: 30 samples, images (30, 784) float32, labels (30,) uint8, classes 3" "$T/stdout" ||
    fail "info output: $(cat "$T/stdout")"
grep -q "^/test: 12 samples" "$T/stdout" || fail "info lacks /test: $(cat "$T/stdout")"
grep -q 'source "ddptrain data synth --shape 784 --classes 3 --seed 5' "$T/stdout" ||
    fail "info lacks the source: $(cat "$T/stdout")"
# the same seed gives the same data (compared with h5dump where it is installed)
expect 0 "" - -- synth -o "$T/s2.h5" --shape 784 --classes 3 --train 30 --test 12 --seed 5 --dtype float32
if command -v h5dump >/dev/null; then
    cmp -s <(h5dump -d /train/images "$T/s.h5" | tail -n +3) <(h5dump -d /train/images "$T/s2.h5" | tail -n +3) ||
        fail "same seed, different /train/images"
fi

# a good IDX set: four tiny files written here, two raw and two gzip; an existing OUT is
# refused (exit 2, naming it, left as it was) and replaced only with --force
echo stale >"$T/imported.h5"
G=$T/goodidx
mkdir -p "$G"
printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x03\x01\x02\x03\x04\x05\x06\xfa\xfb\xfc\xfd\xfe\xff' >"$G/train-images-idx3-ubyte"
printf '\x00\x00\x08\x01\x00\x00\x00\x02\x04\x01' >"$G/train-labels-idx1-ubyte"
printf '\x00\x00\x08\x03\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x10\x20\x30\x40\x50' | gzip >"$G/t10k-images-idx3-ubyte.gz"
printf '\x00\x00\x08\x01\x00\x00\x00\x01\x02' | gzip >"$G/t10k-labels-idx1-ubyte.gz"
expect 2 "imported.h5 already exists; add --force to replace it" - -- idx --dir "$G" -o "$T/imported.h5"
[ "$(cat "$T/imported.h5")" = stale ] || fail "a refused idx changed the existing $T/imported.h5"
[ ! -e "$T/imported.h5.tmp" ] || fail "a refused idx left $T/imported.h5.tmp"
expect 0 "" - -- idx --dir "$G" -o "$T/imported.h5" --force
grep -q "/train 2 x 1x2x3 uint8 (labels 1..4), /test 1 x 1x2x3 uint8 (labels 2..2), classes 5" "$T/stdout" ||
    fail "idx summary: $(cat "$T/stdout")"
expect 0 "" - -- info "$T/imported.h5"
grep -q "^  0:0 1:1 2:0 3:0 4:1$" "$T/stdout" || fail "train histogram: $(cat "$T/stdout")"
expect 0 "" - -- idx --train-images "$G/train-images-idx3-ubyte" --train-labels "$G/train-labels-idx1-ubyte" \
    --test-images "$G/t10k-images-idx3-ubyte.gz" --test-labels "$G/t10k-labels-idx1-ubyte.gz" \
    --classes 10 --source "tiny set" -o "$T/imported2.h5"
expect 0 "" - -- info "$T/imported2.h5"
grep -q 'source "tiny set"' "$T/stdout" && grep -q "classes 10" "$T/stdout" ||
    fail "--source/--classes: $(cat "$T/stdout")"
expect 3 "train-labels-idx1-ubyte: label 4 at index 0 is not below --classes 4" "$O" -- idx --dir "$G" --classes 4 -o "$O"
# --classes NAME,...: written as class_names (data info lists them); another count is exit 2
expect 0 "" - -- idx --dir "$G" --classes "T-shirt/top,Trouser,Pull over,Dress,Coat" -o "$T/named.h5"
expect 0 "" - -- info "$T/named.h5"
grep -q "^  class_names: 0 T-shirt/top, 1 Trouser, 2 Pull over, 3 Dress, 4 Coat$" "$T/stdout" ||
    fail "idx --classes names: $(cat "$T/stdout")"
expect 2 "idx: --classes names 4 classes, but the labels of .* hold 5 (0..4)" "$O" -- \
    idx --dir "$G" --classes a,b,c,d -o "$O"

if [ "$fails" = 0 ]; then
    rm -rf "$T"
    echo "PASS"
    exit 0
fi
echo "FAIL: $fails failure(s); files kept in $T" >&2
exit 1

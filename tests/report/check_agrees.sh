#!/bin/bash
# check_agrees.sh - `ddptrain check` gives a real run's verdict on every shipped config (on the
# real Fashion-MNIST): the same exit code and error line (configs/validate.ini is not a job:
# both refuse it), a summary naming parameters, FLOPs, memory, steps and the resume point,
# and nothing written. Then the output guard: a directory whose lock another process holds is
# refused by both with the same line; a finished run's directory shows its resume point.
# (The bad inputs of tests/unit/bad_input.sh are compared there, case by case.)
set -u
DDPTRAIN=${DDPTRAIN:?set by meson}
DDP_SRC=${DDP_SRC:?set by meson}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
data=$DDP_SRC/datasets/fashion-mnist.h5
if [ ! -f "$data" ]; then
    data=$work/fashion-mnist.h5
    "$DDPTRAIN" data idx --dir /usr/share/datasets/fashion-mnist -o "$data" >/dev/null ||
        { echo "FAIL: cannot import Fashion-MNIST"; exit 1; }
fi
fail=0
# agree NAME ARGS...: run and check with the same arguments (a real run of one step)
agree() {
    local name=$1
    shift
    rm -rf out
    touch marker
    timeout -k 5 120 "$DDPTRAIN" check "$@" >check-out.txt 2>check-err.txt
    local crc=$?
    local stray
    stray=$(find . -newer marker ! -name 'check-*.txt' ! -name . | head -3)
    timeout -k 5 300 "$DDPTRAIN" "$@" --set train.max_steps=1 >run-out.txt 2>run-err.txt
    local rc=$?
    local why=""
    [ "$crc" -eq "$rc" ] || why="check exit $crc, run exit $rc"
    [ "$rc" -eq 0 ] || cmp -s <(grep -v max_steps run-err.txt) check-err.txt ||
        why="$why; run says '$(head -c 200 run-err.txt)', check '$(head -c 200 check-err.txt)'"
    [ -z "$stray" ] || why="$why; check wrote $stray"
    if [ "$crc" -eq 0 ]; then
        for w in parameters FLOPs memory steps resume output; do
            grep -q "^  $w " check-out.txt || why="$why; summary lacks '$w'"
        done
    fi
    if [ -z "$why" ]; then
        printf 'ok   %-30s exit %d %s\n' "$name" "$crc" "$(grep -h 'setup took\|ddptrain:' \
            check-out.txt check-err.txt | head -1)"
    else
        printf 'FAIL %-30s %s\n' "$name" "$why"
        fail=$((fail + 1))
    fi
}
for cfg in "$DDP_SRC"/configs/*.ini; do
    # cifar-resnet18.ini is a GPU job: on a CPU one step at its batch of 256, or its final
    # evaluation of the test split, takes minutes; the verdicts compared depend on neither
    small=()
    [ "$(basename "$cfg")" = cifar-resnet18.ini ] && small=(--set data.batch_size=8 --set data.test=)
    agree "$(basename "$cfg")" "$cfg" --set data.file="$data" --set job.output=out \
        --set train.threads=1 "${small[@]}"
done

# the output guard: this shell holds the lock of out/
cfg=$DDP_SRC/configs/seed-simple.ini
mkdir -p held && exec 8>held/.ddptrain.lock && flock -n 8 || { echo "FAIL: flock"; exit 1; }
"$DDPTRAIN" check "$cfg" --set data.file="$data" --set job.output=held >/dev/null 2>check-err.txt
crc=$?
"$DDPTRAIN" "$cfg" --set data.file="$data" --set job.output=held >/dev/null 2>run-err.txt
rc=$?
exec 8>&-
if [ $crc -eq 2 ] && [ $rc -eq 2 ] && cmp -s check-err.txt run-err.txt &&
    grep -q "is in use by another ddptrain run" check-err.txt; then
    echo "ok   lock held elsewhere             $(head -c 120 check-err.txt)"
else
    echo "FAIL lock held elsewhere: check $crc '$(cat check-err.txt)', run $rc '$(cat run-err.txt)'"
    fail=$((fail + 1))
fi

# a run stopped part-way: check shows where the next run resumes
"$DDPTRAIN" "$cfg" --set data.file="$data" --set job.output=part --set train.max_steps=5 \
    --set checkpoint.every_steps=5 --set train.threads=1 >/dev/null 2>&1
"$DDPTRAIN" check "$cfg" --set data.file="$data" --set job.output=part >check-out.txt 2>&1
if grep -q "resume        from step 5 (epoch 1, 160 samples into it)" check-out.txt; then
    echo "ok   resume point shown"
else
    echo "FAIL resume point: $(cat check-out.txt)"
    fail=$((fail + 1))
fi
# check loads that checkpoint to vet it but resumes nothing, and says so
if grep -q "a run would resume from part/checkpoints/ckpt-0*5.h5: epoch 1, step 5" check-out.txt &&
    ! grep -q "resuming from" check-out.txt; then
    echo "ok   check says a run would resume"
else
    echo "FAIL check's resume line: $(grep resum check-out.txt | head -2)"
    fail=$((fail + 1))
fi
# output shapes are not written as layer arguments: linear -> 10, not linear(10)
if grep -q "^  model         flatten, linear -> 10$" check-out.txt; then
    echo "ok   model line with output shapes"
else
    echo "FAIL model line: $(grep '^  model ' check-out.txt)"
    fail=$((fail + 1))
fi
echo "check-agrees: $fail failed"
[ $fail -eq 0 ]

#!/bin/bash
# crash.sh - crash consistency: kill -9 the writer at 50 random moments while it writes a
# checkpoint at every step; after each kill a restart must resume from a checkpoint that
# verifies (no damaged file is ever picked up, none is reported).
set -u
DDPTRAIN=${DDPTRAIN:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
"$DDPTRAIN" data synth -o d.h5 --shape 784 --classes 10 --train 4000 --test 100 --seed 4 >/dev/null || exit 1
cat > j.ini <<INI
[job]
output = run
[data]
file = d.h5
test =
batch_size = 32
[model]
layers = linear(1024), relu, linear(1024), relu, linear(10)
[optim]
momentum = 0.9
[train]
epochs = 1000
log_every = 1000
threads = 1
[checkpoint]
every_steps = 1
keep = 2
INI
fail=0 resumed=0 kills=0
for i in $(seq 1 50); do
    "$DDPTRAIN" j.ini > run.out 2> run.err &
    pid=$!
    # a random moment 50..450 ms in: the run writes a ~10 MB checkpoint at every step
    sleep "0.$(printf '%03d' $((50 + RANDOM % 400)))"
    kill -9 $pid 2>/dev/null && kills=$((kills + 1))
    wait $pid 2>/dev/null
    if grep -q "skipping checkpoint" run.err; then
        echo "FAIL kill $i: a damaged checkpoint was found:"; grep skipping run.err; fail=1
    fi
    ls run/checkpoints/*.h5 >/dev/null 2>&1 || continue
    # verify: a restart resumes from the newest complete checkpoint (and trains no step)
    step=$(ls run/checkpoints/ckpt-*.h5 | sort | tail -1 | sed 's/.*ckpt-0*\([0-9]*\)\.h5/\1/')
    "$DDPTRAIN" j.ini --set train.max_steps="$step" > v.out 2> v.err
    if grep -q "resuming from" v.out && ! grep -q "skipping" v.err; then
        resumed=$((resumed + 1))
    else
        echo "FAIL kill $i: restart did not resume cleanly"; cat v.err | head -3; fail=1
    fi
done
echo "crash: $kills kills -9, $resumed restarts resumed from a verified checkpoint"
[ $kills -ge 45 ] || { echo "FAIL: too few kills landed"; fail=1; }
exit $fail

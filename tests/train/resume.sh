#!/bin/bash
# resume.sh - checkpoints and resume on real runs:
#  1. bitwise: a run of 3 epochs, and the same run stopped by SIGUSR1 mid-epoch (exit 75) and
#     resumed, end with identical parameter bytes; for 1 rank and for 3 MPI ranks;
#  2. resume on another world size mid-epoch (4 ranks -> 2 ranks): the samples of that epoch are
#     exactly the uninterrupted epoch's samples (per-sample log, DDP_TEST_SAMPLE_LOG);
#  3. damaged checkpoints (truncated, flipped byte, wrong model shape, wrong format version,
#     missing dataset): resume = auto skips them with a message, resume = PATH stops with one
#     line and exit 3, never a crash;
#  4. `ddptrain eval` of a checkpoint on 1 and 2 ranks gives the run's own test accuracy;
#  1c. a residual job (SyncBN and dropout inside blocks) resumed mid-epoch is bitwise too.
set -u
DDPTRAIN=${DDPTRAIN:?} DDP_SRC=${DDP_SRC:?}
PY=/usr/bin/python3
$PY -c 'import h5py, numpy' 2>/dev/null || { echo "python3-h5py needed"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

"$DDPTRAIN" data synth -o d.h5 --shape 1,12,12 --classes 10 --train 12000 --test 300 --seed 2 \
    >/dev/null || exit 1
cat > j.ini <<INI
[data]
file = d.h5
batch_size = 24
[model]
layers = conv2d(4, 3), batchnorm, relu, maxpool(2), flatten, linear(32), relu, dropout(0.2), linear(10)
[optim]
name = sgd
lr = 0.05
momentum = 0.9
schedule = cosine
[train]
epochs = 3
log_every = 1
threads = 1
[checkpoint]
every_epochs = 1
INI

same_params() { $PY - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1])["model"], h5py.File(sys.argv[2])["model"]
same = sorted(a) == sorted(b) and all(np.array_equal(a[k][()], b[k][()]) for k in a)
print(f"{len(a)} tensors {'bit-identical' if same else 'DIFFER'}")
sys.exit(0 if same else 1)
PY
}

# run_until_signal OUT MIN_LINES CMD... : start CMD, send SIGUSR1 once metrics has MIN_LINES
run_until_signal() {
    local out=$1 lines=$2
    shift 2
    "$@" > "$out.log1" 2>&1 &
    local pid=$! t=0
    while [ "$(cat "$out/metrics.jsonl" 2>/dev/null | wc -l)" -lt "$lines" ] && kill -0 $pid 2>/dev/null; do
        sleep 0.02; t=$((t + 1)); [ $t -gt 3000 ] && break
    done
    kill -USR1 $pid 2>/dev/null
    wait $pid
}

# ---- 1. bitwise resume, 1 rank and 3 ranks ------------------------------------------------
for W in 1 3; do
    launch=()
    [ $W -gt 1 ] && launch=(mpirun -n $W)
    B=$((24 / W))
    "${launch[@]}" "$DDPTRAIN" j.ini --set data.batch_size=$B --set job.output=full$W > full$W.log 2>&1 ||
        { bad "W=$W uninterrupted run"; continue; }
    run_until_signal int$W 600 "${launch[@]}" "$DDPTRAIN" j.ini --set data.batch_size=$B --set job.output=int$W
    rc=$?
    grep -q "stopped by signal" int$W.log1 && [ $rc -eq 75 ] ||
        { bad "W=$W: signal did not stop the run with 75 (rc $rc)"; tail -3 int$W.log1; continue; }
    at=$(sed -n 's/.*stopped by signal .* at step \([0-9]*\).*/\1/p' int$W.log1)
    # training time of the first start, as its stop checkpoint records it (ms)
    [ $W = 1 ] && t1_ms=$($PY -c 'import h5py, sys; print(int(h5py.File(sys.argv[1]).attrs["train_ms"]))' \
        int1/checkpoints/ckpt-*"$at".h5 2>/dev/null)
    "${launch[@]}" "$DDPTRAIN" j.ini --set data.batch_size=$B --set job.output=int$W > int$W.log2 2>&1 ||
        { bad "W=$W resumed run failed"; tail -3 int$W.log2; continue; }
    grep -q "resuming from" int$W.log2 || bad "W=$W: did not resume"
    if r=$(same_params full$W/model.h5 int$W/model.h5); then
        ok "bitwise resume, $W rank(s), stopped at step $at of 1500 by SIGUSR1: $r"
    else
        bad "W=$W resume: $r"
    fi
done

# ---- 1b. what the 1-rank runs logged: timestamps, checkpoint and stop lines, total time -----
ts='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[+-][0-9]{2}:[0-9]{2} '
if [ -s int1.log1 ] && [ -s int1.log2 ]; then
    # stdout is rank 0's log, every line stamped; stderr lines start with "ddptrain:"
    if grep -vqE "$ts|^ddptrain: " full1.log int1.log1 int1.log2; then
        bad "log lines without an ISO 8601 time:"; grep -vE "$ts|^ddptrain: " int1.log1 | head -3
    else
        ok "every log line starts with an ISO 8601 time: $(head -c 26 full1.log)"
    fi
    last=$(grep 'checkpoint .*ckpt-' full1.log | tail -1)
    if grep -q '(after epoch 3; ' <<<"$last" && ! grep -q 'before epoch' full1.log; then
        ok "last checkpoint of a 3-epoch run: ${last#* checkpoint }"
    else
        bad "last checkpoint line: $last"
    fi
    stopline=$(grep 'stopped by signal' int1.log1)
    if grep -q 'stopped by signal 10 (SIGUSR1) at step [0-9]* after saving a checkpoint; exit 75: ' \
        <<<"$stopline" && ! grep -q 'requeue the job to resume' <<<"$stopline"; then
        ok "stop line: ${stopline#* stopped}"
    else
        bad "stop line: $stopline"
    fi
    # the resumed run's time counts both starts: "in 3.1s (1.9s in this start)"
    fin=$(grep -E 'final test accuracy .* in [0-9.]+s \([0-9.]+s in this start\)' int1.log2)
    tot=$(sed -nE 's/.* in ([0-9.]+)s \(([0-9.]+)s in this start\).*/\1/p' <<<"$fin")
    this=$(sed -nE 's/.* in ([0-9.]+)s \(([0-9.]+)s in this start\).*/\2/p' <<<"$fin")
    jtot=$($PY -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["train_s"])' \
        int1/metrics.jsonl)
    # the first start's time is in the checkpoint; the summary (ms) is that plus this start's
    if [ -n "$tot" ] && [ "${t1_ms:-0}" -gt 0 ] &&
        awk -v a="$tot" -v b="$this" -v j="$jtot" -v t1="$t1_ms" \
            'BEGIN {exit !(a >= b && j * 1000 >= t1 + (b - 0.05) * 1000 - 1)}'; then
        ok "resumed run's time counts both starts: ${fin#* after }; first start ${t1_ms} ms; summary train_s $jtot"
    else
        bad "resumed run's time: '$fin', first start ${t1_ms:-?} ms, summary train_s $jtot"
    fi
fi

# ---- 1c. a residual job (projection and identity shortcuts, nested block, batchnorm in
# blocks, dropout): stopped mid-epoch at a checkpoint (max_steps, no race), resumed, bitwise
# equal to the uninterrupted run; 1 rank, and 2 ranks with SyncBN; eval of the checkpoint -----
res_layers='conv2d(4, 3, pad=1, bias=false), batchnorm, relu,
    residual(conv2d(8, 3, stride=2, pad=1, bias=false), batchnorm, relu,
             residual(conv2d(8, 3, pad=1), relu, dropout(0.1)), conv2d(8, 3, pad=1, bias=false),
             batchnorm), relu,
    residual(conv2d(8, 3, pad=1, bias=false), batchnorm), globalavgpool, flatten, linear(10)'
for W in 1 2; do
    launch=() sets=(--set "model.layers=$res_layers" --set train.epochs=2 --set data.test=
                    --set checkpoint.every_epochs=0 --set data.batch_size=$((24 / W)))
    [ $W -gt 1 ] && launch=(mpirun -n $W) && sets+=(--set dist.sync_bn=true)
    "${launch[@]}" "$DDPTRAIN" j.ini "${sets[@]}" --set job.output=resfull$W > resfull$W.log 2>&1 ||
        { bad "residual W=$W uninterrupted run"; tail -3 resfull$W.log; continue; }
    "${launch[@]}" "$DDPTRAIN" j.ini "${sets[@]}" --set job.output=resint$W --set train.max_steps=700 \
        --set checkpoint.every_steps=700 > resint$W.log1 2>&1 ||
        { bad "residual W=$W run to step 700"; tail -3 resint$W.log1; continue; }
    "${launch[@]}" "$DDPTRAIN" j.ini "${sets[@]}" --set job.output=resint$W > resint$W.log2 2>&1 ||
        { bad "residual W=$W resumed run"; tail -3 resint$W.log2; continue; }
    if ! grep -q "resuming from .*ckpt-0*700" resint$W.log2; then
        bad "residual W=$W: did not resume from step 700"; grep -i resum resint$W.log2 | head -2
    elif r=$(same_params resfull$W/model.h5 resint$W/model.h5); then
        ok "residual job, $W rank(s), resumed at step 700 of 1000 (mid-epoch 2): $r"
    else
        bad "residual W=$W resume: $r"
    fi
done
res_ck=$(ls resint1/checkpoints/ckpt-*.h5 2>/dev/null | sort | tail -1)
if [ -n "$res_ck" ]; then
    e1=$("$DDPTRAIN" eval j.ini --set "model.layers=$res_layers" --checkpoint "$res_ck" 2>&1 |
        sed -n 's/.*accuracy \([0-9.]*\).*/\1/p')
    e2=$(mpirun -n 2 "$DDPTRAIN" eval j.ini --set "model.layers=$res_layers" --checkpoint "$res_ck" \
        2>&1 | sed -n 's/.*accuracy \([0-9.]*\).*/\1/p')
    if [ -n "$e1" ] && [ "$e1" = "$e2" ]; then
        ok "eval of a residual checkpoint: accuracy $e1 on 1 and 2 ranks"
    else
        bad "eval of a residual checkpoint: 1 rank '$e1', 2 ranks '$e2'"
    fi
fi

# ---- 2. 4 ranks -> 2 ranks mid-epoch: the epoch's samples --------------------------------
"$DDPTRAIN" j.ini --set data.batch_size=32 --set train.epochs=1 --set data.test= \
    --set job.output=ref > /dev/null 2>&1
DDP_TEST_SAMPLE_LOG=$work/ref.samples "$DDPTRAIN" j.ini --set data.batch_size=32 --set train.epochs=1 \
    --set data.test= --set job.output=ref2 > /dev/null 2>&1
DDP_TEST_SAMPLE_LOG=$work/w4.samples mpirun -n 4 "$DDPTRAIN" j.ini --set data.batch_size=8 \
    --set train.epochs=1 --set data.test= --set train.max_steps=137 --set checkpoint.every_steps=137 \
    --set job.output=ws > ws.log1 2>&1
DDP_TEST_SAMPLE_LOG=$work/w2.samples mpirun -n 2 "$DDPTRAIN" j.ini --set data.batch_size=16 \
    --set train.epochs=1 --set data.test= --set job.output=ws > ws.log2 2>&1
if grep -q "137 \* 32\|4384 samples into the epoch" ws.log2 || grep -q "resuming from" ws.log2; then
    if cmp -s <(cat ref.samples.* | awk '{print $2}' | sort -n) \
              <(cat w4.samples.* w2.samples.* | awk '{print $2}' | sort -n); then
        ok "resume 4 -> 2 ranks at step 137 (4384 samples in): the epoch's 12000 samples, each once"
    else
        bad "resume 4 -> 2 ranks: sample multiset differs from the uninterrupted epoch"
    fi
else
    bad "resume 4 -> 2 ranks did not resume"; tail -3 ws.log2
fi

# ---- 2b. all-reduce figures in metrics.jsonl and the log (several ranks only) ---------------
if /usr/bin/python3 - ws/metrics.jsonl ref/metrics.jsonl <<'PY'
import json, sys
multi = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"train"' in l]
single = [json.loads(l) for l in open(sys.argv[2]) if '"kind":"train"' in l]
assert multi and single
for r in multi:
    assert 0 < r["allreduce_frac"] < 1 and r["busbw_gbs"] > 0, r
for r in single:
    assert "allreduce_frac" not in r and "busbw_gbs" not in r, r
PY
then
    if grep -Eq "samples/s [0-9]+ allreduce [0-9]+% busbw [0-9.]+ GB/s" ws.log2; then
        ok "2 ranks report allreduce share and busbw in metrics.jsonl and the log; 1 rank does not"
    else
        bad "the 2-rank log lines lack 'allreduce N% busbw X GB/s'"; grep step ws.log2 | head -2
    fi
else
    bad "metrics.jsonl all-reduce fields wrong (see above)"
fi

# ---- 3. damaged checkpoints ----------------------------------------------------------------
ck=full1/checkpoints
newest=$(ls $ck/ckpt-*.h5 | sort | tail -1)
mkdir -p dmg
damage() { # NAME how
    rm -rf dmg/$1; mkdir -p dmg/$1/checkpoints
    cp $ck/*.h5 dmg/$1/checkpoints/
    local f=dmg/$1/checkpoints/$(basename "$newest")
    case $2 in
    truncate) truncate -s $(( $(stat -c %s "$f") / 2 )) "$f" ;;
    flip) $PY - "$f" <<'PY'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
ds = f["model/1.weight"]; off = ds.id.get_offset(); f.close()
with open(sys.argv[1], "r+b") as g:
    g.seek(off + 5); b = g.read(1); g.seek(off + 5); g.write(bytes([b[0] ^ 0x10]))
PY
    ;;
    shape) $PY -c "
import h5py, numpy as np
f = h5py.File('$f', 'r+'); del f['model/5.weight']; f['model/5.weight'] = np.zeros((32, 99), np.float32)" ;;
    version) $PY -c "
import h5py; f = h5py.File('$f', 'r+'); f.attrs['version'] = 99" ;;
    missing) $PY -c "
import h5py; f = h5py.File('$f', 'r+'); del f['optim/state1']" ;;
    esac
    echo "$f"
}
for kind in truncate:"not an HDF5 file\|cannot open\|damaged" flip:"checksum mismatch" \
            shape:"5.weight has shape (32, 99)" version:"format version 99" missing:"optim/state1"; do
    name=${kind%%:*} pat=${kind#*:}
    f=$(damage $name $name)
    "$DDPTRAIN" j.ini --set job.output=dmg/$name --set train.epochs=4 --set data.test= > d.out 2> d.err
    rc=$?
    if [ $rc -eq 0 ] && grep -q "skipping checkpoint: .*$(basename "$f")" d.err && grep -q -- "$pat" d.err &&
       grep -q "resuming from .*ckpt" d.out; then
        ok "auto skips a $name checkpoint: $(grep skipping d.err | head -c 150)"
    else
        bad "auto with a $name checkpoint: rc $rc"; cat d.err | head -3
    fi
    f=$(damage $name $name)
    "$DDPTRAIN" j.ini --set job.output=dmg/$name --set checkpoint.resume="$f" > d.out 2> d.err
    rc=$?
    if [ $rc -eq 3 ] && [ "$(grep -c . d.err)" -eq 1 ] && grep -q -- "$pat" d.err; then
        ok "resume = PATH of a $name checkpoint: exit 3, one line"
    else
        bad "resume = PATH of a $name checkpoint: rc $rc"; head -3 d.err
    fi
done

# ---- 4. eval of a checkpoint on any world size -----------------------------------------------
acc=$(sed -n 's/.*"kind":"summary".*"test_acc":\([0-9.]*\).*/\1/p' full1/metrics.jsonl)
e1=$("$DDPTRAIN" eval j.ini --checkpoint "$newest" 2>&1 | sed -n 's/.*accuracy \([0-9.]*\).*/\1/p')
e2=$(mpirun -n 2 "$DDPTRAIN" eval j.ini --checkpoint "$newest" 2>&1 | sed -n 's/.*accuracy \([0-9.]*\).*/\1/p')
if [ -n "$acc" ] && awk -v a="$acc" -v b="$e1" -v c="$e2" 'BEGIN{exit !(a-b<0.00006 && b-a<0.00006 && b==c)}'; then
    ok "eval of the final checkpoint: 1 rank $e1, 2 ranks $e2, the run reported $acc"
else
    bad "eval: run $acc, 1 rank '$e1', 2 ranks '$e2'"
fi
echo
[ $fail -eq 0 ] && echo "resume: all passed" || echo "resume: failures"
exit $fail

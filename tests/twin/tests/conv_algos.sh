#!/bin/bash
# conv_algos.sh - cuDNN algorithms timed under [train] deterministic = true, on 2 twin GPUs
# (suite twin; [train] cudnn_api = legacy). check names each choice and the faster
# non-deterministic algorithm left out (and what deterministic = false would gain). The twin's two forward algorithms round
# differently, and DDP_EMU_CUDNN_MS changes which one "measures" fastest, on one rank or on all:
#  - rank 1 timing the other algorithm fastest still runs rank 0's: the model is bit-identical
#    to the run where both ranks time alike;
#  - a run resumed from a checkpoint where every rank now times the other algorithm fastest
#    adopts the checkpoint's algorithms: bit-identical to the uninterrupted run;
#  - without those algorithms in the checkpoint (the attribute removed) the resumed run differs,
#    so the comparison above can fail.
set -u
DDPTRAIN=${DDPTRAIN:?} DDPTRAIN_TWIN=${DDPTRAIN_TWIN:?} DDP_SRC=${DDP_SRC:?}
PY=/usr/bin/python3
. "$DDP_SRC/tests/lib.sh"
need_h5py
enter_workdir
fail=0
"$DDPTRAIN" data synth -o d.h5 --shape 1,12,12 --classes 4 --train 480 --test 16 --seed 3 \
    >/dev/null || exit 1
cat > j.ini <<INI
[job]
seed = 5
[data]
file = d.h5
batch_size = 16
[model]
layers = conv2d(6, 3, pad=1), relu, maxpool(2), conv2d(8, 3), relu, flatten, linear(4)
[optim]
name = sgd
lr = 0.05
momentum = 0.9
[train]
epochs = 1
log_every = 5
# the legacy API's algorithms (cudnn_graph.sh checks the graph API's engines the same way)
cudnn_api = legacy
[checkpoint]
every_steps = 5
keep = 10
INI
cmp_h5() { $PY "$DDP_SRC/tests/compare_h5.py" "$@"; }
run() { # run OUT [ENV=V ...] [-- --set ...]: 2 twin GPUs
    local out=$1; shift
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift
    env "${envs[@]}" timeout 300 "$DDPTRAIN_TWIN" launch --nproc-per-node 2 j.ini \
        --set job.output="$out" "$@" > "$out.log" 2>&1
}

# check names each convolution's algorithms, math and workspace as the run log does
"$DDPTRAIN_TWIN" check j.ini > check.txt 2>&1 || { echo "FAIL: check"; cat check.txt; exit 1; }
grep -q "^  convolutions  cuDNN .*fastest measured deterministic" check.txt &&
    grep -q "C6 6x6 -> 8 k3 s1 p0, batch 16: forward IMPLICIT_GEMM fma .*; workspace " check.txt ||
    { echo "FAIL: check does not name the convolution algorithms"; cat check.txt; fail=1; }
# the twin's non-deterministic backward algorithms time faster: named beside the kept ones, and
# what deterministic = false would gain in one line; nothing of it under false
grep -q "backward filter ALGO_1 fma 0.600 ms (non-deterministic ALGO_0 0.300 ms)" check.txt &&
    grep -q "non-deterministic algorithms measured 2.000 ms against 3.200 ms .*(38% less): \[train\] deterministic = false" check.txt ||
    { echo "FAIL: check does not name the faster non-deterministic algorithms"; cat check.txt; fail=1; }
"$DDPTRAIN_TWIN" check j.ini --set train.deterministic=false > check-nd.txt 2>&1 ||
    { echo "FAIL: check, deterministic = false"; cat check-nd.txt; exit 1; }
if grep -q "non-deterministic" check-nd.txt; then
    echo "FAIL: deterministic = false still offers the non-deterministic algorithms"; fail=1
else
    echo "ok   deterministic = true names the faster non-deterministic algorithms; false does not"
fi
run full || { echo "FAIL: the 2-GPU run"; tail -5 full.log; exit 1; }
grep -q "fastest measured deterministic algorithms" full.log ||
    { echo "FAIL: the log does not say the deterministic algorithms were timed"; fail=1; }
grep -q "conv C1 12x12 -> 6 k3 s1 p1, batch 16: forward IMPLICIT_GEMM" full.log ||
    { echo "FAIL: forward IMPLICIT_GEMM (the twin's fastest) not chosen"; grep "conv C" full.log; fail=1; }

# rank 1 finds the other forward algorithm fastest: it runs rank 0's all the same
run rank1 DDP_EMU_CUDNN_MS=fwd:1=0.1 DDP_EMU_CUDNN_MS_RANK=1 ||
    { echo "FAIL: run with rank 1 timing differently"; tail -5 rank1.log; exit 1; }
if r=$(cmp_h5 rank1/model.h5 full/model.h5 0); then
    echo "ok   rank 1 timing another algorithm fastest runs rank 0's: bitwise $r"
else
    echo "FAIL rank 1 did not run rank 0's algorithms: $r"; fail=1
fi
# every rank finds it fastest: a different algorithm, different bits (the twin can tell)
run other DDP_EMU_CUDNN_MS=fwd:1=0.1 || { echo "FAIL: run timing differently"; exit 1; }
grep -q "forward IMPLICIT_PRECOMP_GEMM" other.log ||
    { echo "FAIL: DDP_EMU_CUDNN_MS did not change the choice"; fail=1; }
if cmp_h5 other/model.h5 full/model.h5 0 >/dev/null; then
    echo "FAIL: the two forward algorithms gave the same bits: the checks here cannot fail"
    fail=1
fi

# resume from step 10 of the full run where every rank times the other algorithm fastest
ck=$(ls full/checkpoints/ckpt-*10.h5 2>/dev/null | head -1)
[ -n "$ck" ] || { echo "FAIL: no checkpoint at step 10"; ls full/checkpoints; exit 1; }
$PY -c 'import h5py, sys; print(h5py.File(sys.argv[1], "r").attrs["conv_algorithms"].decode())' \
    "$ck" > algos.txt 2>&1 && grep -q "ddptrain-conv-algorithms 1; cuDNN" algos.txt ||
    { echo "FAIL: $ck has no conv_algorithms attribute"; cat algos.txt; fail=1; }
run res DDP_EMU_CUDNN_MS=fwd:1=0.1 -- --set checkpoint.resume="$PWD/$ck" ||
    { echo "FAIL: resumed run"; tail -5 res.log; exit 1; }
grep -q "algorithm choices taken from the checkpoint" res.log ||
    { echo "FAIL: the resumed run does not say it took the checkpoint's algorithms"; fail=1; }
if r=$(cmp_h5 res/model.h5 full/model.h5 0); then
    echo "ok   resumed where another algorithm times fastest = uninterrupted run, bitwise: $r"
else
    echo "FAIL resumed run vs uninterrupted: $r"; fail=1
fi
# the same checkpoint without the attribute: the resumed run times its own and differs
cp "$ck" bare.h5
$PY -c 'import h5py, sys; del h5py.File(sys.argv[1], "r+").attrs["conv_algorithms"]' bare.h5
run bare DDP_EMU_CUDNN_MS=fwd:1=0.1 -- --set checkpoint.resume="$PWD/bare.h5" ||
    { echo "FAIL: resumed run without the attribute"; tail -5 bare.log; exit 1; }
if cmp_h5 bare/model.h5 full/model.h5 0 >/dev/null; then
    echo "FAIL: resuming without the checkpoint's algorithms gave the same bits"; fail=1
else
    echo "ok   without the checkpoint's algorithms the resumed run differs (the check can fail)"
fi
# a checkpoint whose algorithms were chosen on another device: a warning, its own choices
$PY - "$ck" other.h5 <<'PY'
import h5py, shutil, sys
shutil.copy(sys.argv[1], sys.argv[2])
f = h5py.File(sys.argv[2], "r+")
t = f.attrs["conv_algorithms"].decode().split("\n", 1)
del f.attrs["conv_algorithms"]
f.attrs["conv_algorithms"] = (t[0].split(";")[0] + "; cuDNN 9.0.0; Other GPU\n" + t[1]).encode()
PY
run dev -- --set checkpoint.resume="$PWD/other.h5" || { echo "FAIL: resume"; tail -5 dev.log; exit 1; }
grep -q "convolution algorithms are not taken (chosen with cuDNN 9.0.0; Other GPU" dev.log ||
    { echo "FAIL: no warning for another device's algorithms"; grep -i warn dev.log; fail=1; }
# hostile text in the attribute: not taken or skipped line by line, never a crash
$PY - "$ck" bad1.h5 bad2.h5 <<'PY'
import h5py, shutil, sys
for out, text in ((sys.argv[2], b"garbage\n1 2 3"),
                  (sys.argv[3], None)):
    shutil.copy(sys.argv[1], out)
    f = h5py.File(out, "r+")
    head = f.attrs["conv_algorithms"].decode().split("\n", 1)[0]
    if text is None:
        text = (head + "\n1 12 12 6 3 1 1 16 0 1 99 0 -5 7 1 0\n"
                "1 12 12 6 3 1 1 99999999999 0 1 0 0 0 0 0 0\n"
                "1 12 12 6 3 1 1 -16 0 1 0 0 0 0 0 0\n1 12 12 6 3 1 1 16 0 1 0 0\n"
                "1 12 12 6 3 1 1 16 0 1 1 0 1 0 1 0 trailing\n" + "9" * 5000 + "\n").encode()
    del f.attrs["conv_algorithms"]
    f.attrs["conv_algorithms"] = text
PY
run bad1 -- --set checkpoint.resume="$PWD/bad1.h5" || { echo "FAIL: resume bad1"; tail -5 bad1.log; fail=1; }
grep -q "not taken (not a list of convolution algorithms)" bad1.log ||
    { echo "FAIL: garbage attribute not named"; fail=1; }
run bad2 -- --set checkpoint.resume="$PWD/bad2.h5" || { echo "FAIL: resume bad2"; tail -5 bad2.log; fail=1; }
if r=$(cmp_h5 bad2/model.h5 full/model.h5 0); then
    echo "ok   hostile algorithm lines skipped, the run's own choices kept: bitwise $r"
else
    echo "FAIL resumed with hostile lines vs uninterrupted: $r"; fail=1
fi
[ $fail = 0 ] && echo "ok   conv algorithms: shared by rank 0, kept across resume"
exit $fail

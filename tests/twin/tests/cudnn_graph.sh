#!/bin/bash
# cudnn_graph.sh - convolutions through cuDNN's graph API ([train] cudnn_api = auto, the
# default; conv_graph.cu) on twin GPUs (suite twin). The twin's graph engines time faster than
# its legacy algorithms (tests/twin/cudnn_graph.cc), and DDP_EMU_CUDNN_ENGINE_MS changes which
# config "measures" fastest, on one rank or on all; knob 2 computes other bits than knob 1:
#  - auto names "graph API" engines in the log, each with the legacy algorithm it beat and that
#    one's time; legacy names none; a bad value exits 2;
#  - deterministic = true never keeps a non-deterministic engine, fp32 never a tensor-core one,
#    even where they time fastest (deterministic = false with tf32 keeps them: the check can
#    fail);
#  - rank 1 timing another config fastest runs rank 0's: bitwise the run where both agree;
#  - a run resumed where every rank times another config fastest adopts the checkpoint's
#    engines and knobs: bitwise the uninterrupted run (and without them it differs);
#  - the runtime-compiled forward engine 3 (the twin's cheapest) is never chosen: not in the
#    run logs' conv lines nor in the choices' text, and a checkpoint whose text names it
#    for forward has its forward choices left out (the run's own taken: other bits than the
#    engine 3 = engine 1 knob 1 of the uninterrupted run);
#  - an engine that cuDNN lists but that refuses to execute (DDP_EMU_CUDNN_ENGINE_REFUSE) is
#    dropped while timing: the next fastest is kept, the run goes on;
#  - a weight tensor misaligned in the flat parameter buffer runs graph plans (on a copy);
#  - DDP_EMU_CUDNN_NO_GRAPH=1: the legacy API only, the log says the graph API is unavailable.
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
[checkpoint]
every_steps = 5
keep = 10
INI
cmp_h5() { $PY "$DDP_SRC/tests/compare_h5.py" "$@"; }
# fwd_engines FILE [SET]: the forward graph engines of FILE's conv_algorithms text, one per
# line; SET=E rewrites them to engine E in place
fwd_engines() {
    $PY - "$@" <<'PY'
import h5py, sys
f = h5py.File(sys.argv[1], "r+" if len(sys.argv) > 2 else "r")
t = f.attrs["conv_algorithms"]
t = t.decode() if isinstance(t, bytes) else t
out = []
for line in t.split("\n"):
    v = line.split(" ")
    if len(v) > 19 and all(x.lstrip("-").isdigit() for x in v):
        i = 19
        for _ in range(int(v[18])):
            if v[i] == "0":
                print(v[i + 1])
                if len(sys.argv) > 2:
                    v[i + 1] = sys.argv[2]
            i += 3 + 2 * int(v[i + 2])
    out.append(" ".join(v))
if len(sys.argv) > 2:
    f.attrs["conv_algorithms"] = "\n".join(out)
PY
}
run() { # run OUT [ENV=V ...] [-- --set ...]: 2 twin GPUs
    local out=$1; shift
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift
    env "${envs[@]}" timeout 300 "$DDPTRAIN_TWIN" launch --nproc-per-node 2 j.ini \
        --set job.output="$out" "$@" > "$out.log" 2>&1
}
check() { # check OUT [ENV=V ...] [-- --set ...]: `ddptrain check` on one twin GPU
    local out=$1; shift
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift
    env "${envs[@]}" "$DDPTRAIN_TWIN" check j.ini "$@" > "$out" 2>&1
}

# auto: graph engines, and the log says so; legacy: none
run full || { echo "FAIL: the 2-GPU run"; tail -5 full.log; exit 1; }
grep -q "convolutions: cuDNN .*; graph and legacy APIs)" full.log &&
    grep -q "conv C1 12x12 -> 6 k3 s1 p1, batch 16: forward engine 1 knobs 17=1 graph API" full.log ||
    { echo "FAIL: cudnn_api = auto does not name graph engines"; grep "conv" full.log; fail=1; }
run leg -- --set train.cudnn_api=legacy || { echo "FAIL: legacy run"; tail -5 leg.log; exit 1; }
if grep -q "graph API" leg.log || ! grep -q "legacy API (\[train\] cudnn_api = legacy)" leg.log; then
    echo "FAIL: cudnn_api = legacy ran graph engines or did not say so"; grep conv leg.log; fail=1
else
    echo "ok   auto runs graph engines, legacy none"
fi
if cmp_h5 leg/model.h5 full/model.h5 0 >/dev/null; then
    echo "FAIL: the graph and legacy runs gave the same bits: the checks below cannot fail"; fail=1
fi

# the runtime-compiled forward engine 3 (the cheapest) is never kept nor written
ck=$(ls full/checkpoints/ckpt-*10.h5 2>/dev/null | head -1)
[ -n "$ck" ] || { echo "FAIL: no checkpoint at step 10"; ls full/checkpoints; exit 1; }
fe=$(fwd_engines "$ck") || { echo "FAIL: reading the choices' text of $ck"; exit 1; }
if grep -q "forward engine 3 " full.log || [ -z "$fe" ] || echo "$fe" | grep -qx 3; then
    echo "FAIL: the runtime-compiled forward engine 3 was kept (forward engines: $fe)"
    grep "conv C" full.log; fail=1
else
    echo "ok   the runtime-compiled forward engine 3 is not kept (log, choices' text)"
fi

# the filters: engine 0 backward (non-deterministic) and forward 2 (tensor cores) fastest
fast="fwd:2.1=0.01,data:0.1=0.01,filter:0.1=0.01"
check det.txt DDP_EMU_CUDNN_ENGINE_MS=$fast || { echo "FAIL: check"; cat det.txt; exit 1; }
if grep -q "forward engine [23] \|backward data engine 0\|backward filter engine 0" det.txt; then
    echo "FAIL: deterministic fp32 kept a non-deterministic or tensor-core engine"
    grep "C1 12" det.txt; fail=1
fi
grep -q "backward data engine 1 knobs 17=2 graph API 0.16[0-9] ms (legacy ALGO_1 0.600 ms) (non-deterministic engine 0 graph API 0.01[0-9] ms)" det.txt ||
    { echo "FAIL: the faster non-deterministic engine or the legacy algorithm beaten is not named"; grep "C1 12" det.txt; fail=1; }
check any.txt DDP_EMU_CUDNN_ENGINE_MS=$fast -- --set train.deterministic=false \
    --set train.precision=tf32 || { echo "FAIL: check"; cat any.txt; exit 1; }
! grep -q "forward engine 3 " any.txt &&
    grep -q "forward engine 2 knobs 17=1 graph API .*backward data engine 0 knobs 17=1 graph API .*backward filter engine 0 knobs" any.txt &&
    echo "ok   deterministic and fp32 keep out what deterministic = false with tf32 keeps" ||
    { echo "FAIL: deterministic = false, tf32 does not keep the fastest engines"; grep "C1 12" any.txt; fail=1; }

# an engine that finalizes but refuses to execute (forward 1.1, the fastest allowed) is
# dropped while timing, the next fastest kept; no error
check refuse.txt DDP_EMU_CUDNN_ENGINE_REFUSE=fwd:1.1 || { echo "FAIL: check with a refusing engine"; cat refuse.txt; exit 1; }
if grep -q "forward engine 1 knobs 17=1 graph API" refuse.txt ||
    ! grep -q "C1 12x12 -> 6 k3 s1 p1, batch 16: forward engine 1 knobs 17=2 graph API" refuse.txt; then
    echo "FAIL: an engine refusing to execute was kept, or the next fastest was not"
    grep "C1 12" refuse.txt; fail=1
else
    echo "ok   an engine that refuses to execute is dropped while timing, the next fastest kept"
fi

# rank 1 finds knob 2 fastest: it runs rank 0's all the same
k2="fwd:1.2=0.01,data:1.2=0.01,filter:1.2=0.01"
run rank1 DDP_EMU_CUDNN_ENGINE_MS=$k2 DDP_EMU_CUDNN_MS_RANK=1 ||
    { echo "FAIL: run with rank 1 timing differently"; tail -5 rank1.log; exit 1; }
if r=$(cmp_h5 rank1/model.h5 full/model.h5 0); then
    echo "ok   rank 1 timing another config fastest runs rank 0's: bitwise $r"
else
    echo "FAIL rank 1 did not run rank 0's engine configs: $r"; fail=1
fi
run other DDP_EMU_CUDNN_ENGINE_MS=$k2 || { echo "FAIL: run timing differently"; exit 1; }
grep -q "forward engine 1 knobs 17=2 graph API" other.log ||
    { echo "FAIL: DDP_EMU_CUDNN_ENGINE_MS did not change the choice"; fail=1; }
if cmp_h5 other/model.h5 full/model.h5 0 >/dev/null; then
    echo "FAIL: knob 1 and knob 2 gave the same bits: the checks here cannot fail"; fail=1
fi

# resume from step 10 of the full run where every rank times knob 2 fastest
run res DDP_EMU_CUDNN_ENGINE_MS=$k2 -- --set checkpoint.resume="$PWD/$ck" ||
    { echo "FAIL: resumed run"; tail -5 res.log; exit 1; }
if r=$(cmp_h5 res/model.h5 full/model.h5 0); then
    echo "ok   resumed where another config times fastest = uninterrupted run, bitwise: $r"
else
    echo "FAIL resumed run vs uninterrupted: $r"; fail=1
fi
cp "$ck" bare.h5
$PY -c 'import h5py, sys; del h5py.File(sys.argv[1], "r+").attrs["conv_algorithms"]' bare.h5
run bare DDP_EMU_CUDNN_ENGINE_MS=$k2 -- --set checkpoint.resume="$PWD/bare.h5" ||
    { echo "FAIL: resumed run without the attribute"; tail -5 bare.log; exit 1; }
if cmp_h5 bare/model.h5 full/model.h5 0 >/dev/null; then
    echo "FAIL: resuming without the checkpoint's engines gave the same bits"; fail=1
fi
# ... from a checkpoint whose text names the runtime-compiled engine 3 for forward: the
# forward choices are not taken (the backward ones are), this run's own forward runs
cp "$ck" rtc.h5
fwd_engines rtc.h5 3 >/dev/null || { echo "FAIL: rewriting the choices' text"; exit 1; }
run rtc DDP_EMU_CUDNN_ENGINE_MS=$k2 -- --set checkpoint.resume="$PWD/rtc.h5" ||
    { echo "FAIL: resumed run naming engine 3"; tail -5 rtc.log; exit 1; }
if grep -q "forward engine 3 " rtc.log || ! grep -q "4 algorithm choices taken" rtc.log ||
    cmp_h5 rtc/model.h5 full/model.h5 0 >/dev/null; then
    echo "FAIL: a checkpoint naming the runtime-compiled forward engine 3 was adopted"
    grep "conv" rtc.log; fail=1
else
    echo "ok   a checkpoint naming the runtime-compiled forward engine 3: forward not adopted"
fi

# a convolution whose weights are not 16-byte aligned in the flat parameter buffer (linear(5)
# before it in the buffer: 4325 floats) runs graph plans on an aligned copy: the twin's
# execute refuses a pointer misaligned to the tensor's declared alignment
sed -e 's/^layers = .*/layers = conv2d(6, 3, pad=1), relu, flatten, linear(5)/' \
    -e 's/^every_steps = .*/every_steps = 0/' j.ini > mis.ini
if DDP_EMU_CUDNN_ENGINE_MS=fwd:1.1=0.01,data:1.1=0.01 timeout 300 "$DDPTRAIN_TWIN" mis.ini \
        --set train.device=cuda --set train.max_steps=3 --set job.output=mis > mis.log 2>&1 &&
    grep -q "forward engine 1 knobs 17=1 graph API" mis.log; then
    echo "ok   graph plans of misaligned weights run on an aligned copy"
else
    echo "FAIL: graph plans of a misaligned weight tensor"; tail -3 mis.log; fail=1
fi

# no graph API: the legacy API, said in the log
run nog DDP_EMU_CUDNN_NO_GRAPH=1 || { echo "FAIL: run without the graph API"; tail -5 nog.log; exit 1; }
if grep -q "legacy API: the graph API is unavailable" nog.log && ! grep -q "graph API [0-9]" nog.log &&
    r=$(cmp_h5 nog/model.h5 leg/model.h5 0); then
    echo "ok   without the graph API: the legacy API, said in the log, bitwise legacy's $r"
else
    echo "FAIL: DDP_EMU_CUDNN_NO_GRAPH=1"; grep conv nog.log; fail=1
fi

# a bad value: exit 2, one line naming the key and the choices
"$DDPTRAIN_TWIN" check j.ini --set train.cudnn_api=graph > bad.txt 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "train.cudnn_api.*auto/legacy" bad.txt && [ "$(wc -l < bad.txt)" = 1 ]; then
    echo "ok   a bad cudnn_api exits 2 naming the key"
else
    echo "FAIL: bad cudnn_api: exit $rc"; cat bad.txt; fail=1
fi
[ $fail = 0 ] && echo "ok   cudnn graph API: chosen, filtered, shared by rank 0, kept across resume"
exit $fail

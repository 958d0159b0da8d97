#!/bin/bash
# device-check.sh [CARRY] | --dry - everything one call to the GPU device machine checks, in at
# most 8 minutes (TOTAL_S, default 470 s), from the bundle that tests/gpu/pack.sh made here in
# CARRY (default .dev/gpu): nothing is built there. Each stage has a fixed time budget (its
# timeout, cut to what is left of TOTAL_S); the benchmark gets what the checks left over.
#
#   1. device       the card, the driver, PyTorch (information only)
#   2. libraries    every carried binary finds its libraries (carried ones; cuBLAS, cuDNN and NCCL
#                   from the device's CUDA toolkit or PyTorch's pip packages: a build with cuDNN
#                   that finds no libcudnn.so.9 fails here); gpu_probe finds the GPU; the job keys
#                   the checks use (train.precision = bf16, train.cuda_graph) are known
#   3. ops          test_cuda_ops: every CUDA op against the CPU backend; then OP_TESTS (30 s
#                   each): channels-last against NCHW, cuDNN's NHWC convolutions, bf16
#                   activation storage against fp32 (element-wise, norm and pools, conv and
#                   linear), the pool backward with the bias gradient; test_nccl, world size 1
#   4. validate     (40 s) `ddptrain validate --quick --json` on the card (CPU and GPU rates, HBM,
#                   GEMMs, host copies, memory pattern, NVML health, golden run: its table in the
#                   log), then a second run that records the cuda backend's golden reference on
#                   1 rank (--record: cuda-w1.ref, to ship as configs/validate-ref/cuda-w1.ref)
#                   and the card's expectation file (--record-expect, level quick: expect-CARD.ini,
#                   configs/expect-*.ini style; one GPU, so [gpu] count = 1); all in validate.tar
#   5. sanitizer    compute-sanitizer (SAN_TOOLS, default memcheck racecheck synccheck) over
#                   test_cuda_ops and a 20-step training (SANITIZER_S per run, default 20: a run
#                   that is out of time is reported, not failed; an error the tool finds fails);
#                   racecheck, too slow for the whole ops test in 20 s on an H200, runs the op
#                   groups RACE_OPS (DDP_TEST_OPS of test_cuda_ops; default our own kernels,
#                   those with shared memory (block_sum: bias gradients, xent, sumsq) among
#                   them: elementwise, linear, residual, batchnorm, xent, sumsq, optim, clip,
#                   u8; not conv, fusion, graph, tf32, bf16 (cuDNN's and cuBLAS's kernels) nor
#                   pool (no shared memory, a 16 Mi-element case)); the output names the groups
#   6. curves       train_curve.sh: CPU vs GPU loss curves of two short trainings, fp32, tf32,
#                   bf16, within a tolerance measured at run time: 10 x the divergence of three
#                   CPU runs with different OpenBLAS kernels (float32 noise that Adam and
#                   batchnorm amplify: the first H200 run's `cnn fp32` failure, 1.4e-3 against a
#                   fixed 1e-3, was that noise), with a floor per precision; the MLP learns
#                   (normalised inputs): the first run's `mlp bf16` failure was the accuracy of
#                   an untrained model, the same on the twin's bf16 (train_curve.sh's header)
#   7. graphs       configs/fashion-resnet.ini with accumulate = 3 and clip_grad_norm, cuda_graph
#                   on and off: the same loss at every log step (a graph per micro-batch role,
#                   the clip factor on the device)
#   8. fullrun      configs/fashion-resnet.ini to its end on the real Fashion-MNIST (the IDX files
#                   pack.sh carries): training time and test accuracy (fullrun.json)
#   9. bench        samples/s and peak device memory of BENCH_PLAN's runs, in priority order until
#                   the time is up: configs/cifar-resnet18.ini at batch 256 (3x32x32 synthetic
#                   data), configs/fashion-cnn.ini's CNN at 1024 and 256, the MLP 784-512-512-10
#                   (fashion-mlp) at 256 and 1024 (Fashion-MNIST-shaped synthetic data, uint8);
#                   ddptrain in fp32, tf32, bf16 (cuda_graph on; off for fp32), PyTorch on the same
#                   GPU (tests/gpu/torch_gpu_bench.py: data preloaded on the GPU, eager and
#                   torch.compile); tests/gpu/bench_table.py makes the table, each row naming the
#                   convolution path; what did not fit is "-"
#  10. profile      (PROFILE_S, default 75 s, kept from the benchmark's time) `ddptrain profile`
#                   of configs/cifar-resnet18.ini at batch 256 (the benchmark's 3x32x32 synthetic
#                   data) in bf16 (channels-last and bf16 activations, the defaults), bf16 with
#                   train.cudnn_api = legacy, bf16 with train.activations = fp32, bf16 with
#                   train.layout = nchw, and tf32: per-layer forward and backward times (each with
#                   one device synchronisation) and the unsynchronised step, 3 warm-up and 10 timed steps;
#                   each run's table and JSON (profile-bf16.txt, profile-bf16.json, ...) go into
#                   validate.tar, the tables also into the log (--dry: configs/fashion-cnn.ini at
#                   batch 2, one step each, for the plumbing)
# STAGES (default all) runs a subset of 3-10 (e.g. STAGES="ops fullrun bench"); the others are
# reported "not run".
#
# Writes under $OUT/gpu 8 files (the device tool brings back 8): device-check.log (all of it),
# ops.txt (test_cuda_ops, test_nccl, then the sanitizer's runs), validate.tar (validate.json,
# validate.txt: both runs' output, cuda-w1.ref, expect-CARD.ini; the profile stage's tables and
# JSON files), curve.txt, fullrun.json,
# bench.json, bench.md (the table, ready for bench/RESULTS-gpu.md) and bench-runs.txt (the last
# lines of every benchmark run). Prints the table last. Exit 0 when
# every check that ran passed, else 1 (the summary names the stage).
#
# Usage with the device tool: command "bash tests/gpu/device-check.sh .dev/gpu", carry
# [".dev/gpu"], timeout_s 540.
#
# --dry: the same stages' plumbing without a GPU, in CI (suite twin): build/ddptrain-twin and
# the twin's test_cuda_ops and test_nccl (DDP_BUILD, default ./build), CPU PyTorch, a stand-in
# for compute-sanitizer, tiny data, step counts and batches (the numbers mean nothing). A job key
# the later stages set that this ddptrain does not accept on a GPU fails, there as on the GPU.
set -u
cd "$(dirname "$0")/../.." || exit 1
SRC=$PWD
DRY=0
if [ "${1:-}" = --dry ]; then
    DRY=1
    shift
fi
TOTAL_S=${TOTAL_S:-470}
SANITIZER_S=${SANITIZER_S:-20}
SAN_TOOLS=${SAN_TOOLS:-memcheck racecheck synccheck}
RACE_OPS=${RACE_OPS:-elementwise,linear,residual,batchnorm,xent,sumsq,optim,clip,u8}
VALIDATE_S=${VALIDATE_S:-40}
PROFILE_S=${PROFILE_S:-75}
# STAGES: the stages to run after device and libraries (default all): ops validate sanitizer
# curves graphs fullrun bench profile; a stage left out is reported as "not run" and does not fail the check
STAGES=${STAGES:-all}
on() { [[ " $STAGES " == *" all "* || " $STAGES " == *" $1 "* ]]; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
[ $DRY = 1 ] && [ -z "${OUT:-}" ] && OUT=$W/out # --dry without OUT: removed at the end
OUT=${OUT:-$(mktemp -d)}
R="$OUT/gpu"
mkdir -p "$R" "$W/bin" "$W/carry"
exec > >(tee "$R/device-check.log") 2>&1
T0=$(date +%s)
elapsed() { echo $(($(date +%s) - T0)); }
# budget N: N seconds, or what is left of TOTAL_S (at least 1)
budget() {
    local left=$((TOTAL_S - $(elapsed)))
    if [ "$left" -ge "$1" ]; then echo "$1"; elif [ "$left" -gt 1 ]; then echo "$left"; else echo 1; fi
}
step() { echo; echo "== $* (t=$(elapsed) s)"; }
declare -A RESULT
ORDER=()
result() { RESULT[$1]=$2; ORDER+=("$1"); echo "-> $1: $2"; }

# ---- the binaries: the carried bundle, or (--dry) this build's twin ---------------------------
# the op tests beyond test_cuda_ops (tests/gpu; pack.sh carries them, --dry runs their twin builds)
OP_TESTS="test_cuda_layout test_cuda_nhwc_conv test_cuda_act16_elem test_cuda_act16_norm
    test_cuda_act16_conv test_cuda_pool_bias test_cuda_conv_graph"
OP_TESTS=$(echo $OP_TESTS)
setup_bundle() {
    local bundle
    bundle=$(realpath "${1:-.dev/gpu}")/bundle.tar.xz
    if ! { tar -C "$W/carry" -xJf "$bundle" 2>/dev/null ||
           python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
               "$bundle" "$W/carry"; }; then
        echo "FAIL: cannot unpack $bundle (made by tests/gpu/pack.sh)"
        exit 1
    fi
    [ -f "$W/carry/REVISION" ] && echo "carried build of $(cat "$W/carry/REVISION")"
    LIBDIRS=$(python3 - <<'EOF'
import glob, os, site, sys
# cuDNN is dlopened (ldd and pack.sh never see it): on these machines only PyTorch's pip
# folder has it, so it must be searched for like the others
want = ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libnccl.so.2",
        "libcudnn.so.9")
roots = ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    roots += sorted(glob.glob(os.path.join(sp, "nvidia", "**", "lib"), recursive=True))
found = {}
for d in roots:
    for w in want:
        if w not in found and os.path.exists(os.path.join(d, w)):
            found[w] = d
for w in want:
    print(f"  {w}: {found.get(w, 'NOT FOUND')}", file=sys.stderr)
print(":".join(dict.fromkeys(found.values())))
EOF
)
    LDPATH="$W/carry/lib${LIBDIRS:+:$LIBDIRS}"
    for b in ddptrain test_cuda_ops test_nccl gpu_probe $OP_TESTS; do
        REAL[$b]="$W/carry/bin/$b"
    done
    PY=python3
    TORCH_DEVICE=cuda
    SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
}

setup_dry() {
    local b=${DDP_BUILD:-$SRC/build}
    REAL[ddptrain]=$b/ddptrain-twin
    REAL[test_cuda_ops]=$b/tests/twin/tests/test_cuda_ops_twin
    REAL[test_nccl]=$b/tests/twin/tests/test_nccl_twin
    for t in $OP_TESTS; do REAL[$t]=$b/tests/twin/tests/${t}_twin; done
    printf '#!/bin/sh\necho "gpu_probe (dry): the GPU twin"\n' > "$W/gpu_probe"
    REAL[gpu_probe]=$W/gpu_probe
    LDPATH=${LD_LIBRARY_PATH:-}
    PY=/usr/bin/python3
    TORCH_DEVICE=cpu
    # compute-sanitizer's stand-in: drops the tool's options, runs the program
    cat > "$W/sanitizer" <<'EOF'
#!/bin/bash
# compute-sanitizer's stand-in (--dry): skips --tool X --error-exitcode N, runs the program
while [ $# -gt 0 ]; do
    case $1 in --tool | --error-exitcode) shift 2 ;; -*) shift ;; *) break ;; esac
done
echo "========= COMPUTE-SANITIZER (dry stand-in)"
"$@"
rc=$?
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
EOF
    chmod +x "$W/gpu_probe" "$W/sanitizer"
    SAN=$W/sanitizer
    export DDP_EMU_GPUS=1
}

declare -A REAL
if [ $DRY = 1 ]; then
    echo "device-check --dry: the plumbing of every stage on the GPU twin and CPU PyTorch"
    setup_dry
    # the twin is slow: one batch size, the MLP where the CNN adds no plumbing
    STEPS_MLP="6 2" STEPS_CNN="4 2" STEPS_R18="3 1" NTRAIN=600 NTRAIN_R18=64 SAN_BATCH=4
    SAN_CFG=fashion-mlp R18_SHAPE=3,8,8 FULLRUN_ARGS=(--set train.max_steps=4 --set data.batch_size=8)
    BENCH_PLAN="fashion-mlp:16:fp32-on,fp32-off:60 cifar-resnet18:2:fp32-on,fp32-on-nd,tf32-on,tf32-on-nchw,bf16-on,bf16-on-leg:60"
    CURVE_ENV=(CURVE_STEPS=10 CURVE_TEST=50 CURVE_BATCH=32 CURVE_MIN_ACC=0) SAN_STEPS=5
    GRAPH_CFG=fashion-mlp GRAPH_STEPS=6
    # the twin runs ResNet-18 at seconds a step: the profile's plumbing on the small CNN
    PROFILE_CFG=fashion-cnn PROFILE_ARGS=(--set data.batch_size=2 --warmup 1 --steps 1)
else
    setup_bundle "${1:-.dev/gpu}"
    STEPS_MLP="400 100" STEPS_CNN="250 50" STEPS_R18="100 20" NTRAIN=60000 NTRAIN_R18=8192
    SAN_BATCH=32 R18_SHAPE=3,32,32 FULLRUN_ARGS=()
    # model:batch:ddptrain runs (precision-graph[-variant], ddp_run): PyTorch's seconds, in
    # priority order
    BENCH_PLAN=${BENCH_PLAN:-"cifar-resnet18:256:fp32-on,tf32-on,bf16-on,bf16-on-leg,tf32-on-leg,bf16-on-f32a,tf32-on-nchw,bf16-on-nchw:150
        fashion-cnn:1024:fp32-on,tf32-on,bf16-on,bf16-on-leg,fp32-off:75 fashion-cnn:256:fp32-on,tf32-on,bf16-on,fp32-off:60
        fashion-mlp:256:fp32-on,bf16-on,tf32-on,fp32-off:40 fashion-mlp:1024:fp32-on,bf16-on,tf32-on:30"}
    SAN_CFG=fashion-cnn CURVE_ENV=() SAN_STEPS=20 GRAPH_CFG=fashion-resnet GRAPH_STEPS=12
    PROFILE_CFG=cifar-resnet18 PROFILE_ARGS=(--set data.batch_size=256 --warmup 3 --steps 10)
    FMNIST_DIR=$(realpath "${1:-.dev/gpu}")/fashion-mnist
fi
# wrappers: the carried libraries for our binaries only, never for python/PyTorch
for b in ddptrain test_cuda_ops test_nccl gpu_probe $OP_TESTS; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LDPATH" "${REAL[$b]}" > "$W/bin/$b"
    chmod +x "$W/bin/$b"
done
export DDP_GPU_REQUIRE=1 DDPTRAIN="$W/bin/ddptrain" GPU_PROBE="$W/bin/gpu_probe" DDP_SRC="$SRC"

# ---- the benchmark's runs ----------------------------------------------------------------------
layers_of() {
    "$PY" -c 'import configparser,sys; c=configparser.ConfigParser(inline_comment_prefixes=(";",)); c.read(sys.argv[1]); print(" ".join(c["model"]["layers"].split()))' "configs/$1.ini"
}
# steps_of MODEL: "STEPS WARMUP" of that model's runs
steps_of() {
    case $1 in
    fashion-mlp) echo "$STEPS_MLP" ;;
    cifar-resnet18) echo "$STEPS_R18" ;;
    *) echo "$STEPS_CNN" ;;
    esac
}
data_of() { [ "$1" = cifar-resnet18 ] && echo "$W/c10.h5" || echo "$W/fm.h5"; }
# one ddptrain run: model batch precision graph [variant] -> $W/ddp-<model>-<batch>-<precision>-
# graph<on|off>[-<variant>]/; variant: nd ([train] deterministic = false), nchw ([train]
# layout = nchw: tf32 and bf16 are channels-last by default), nd-nchw, f32a ([train]
# activations = fp32: bf16 runs store bf16 activations by default), or leg ([train] cudnn_api
# = legacy: cuDNN's legacy algorithms only, without the graph API's engines)
ddp_run() {
    local cfg=$1 b=$2 prec=$3 graph=$4 v=${5:-} steps warm id=ddp-$1-$2-$3-graph$4${5:+-$5} t
    local det=(--set train.deterministic=true --set train.layout=auto --set train.activations=auto
        --set train.cudnn_api=auto)
    [[ $v == *nd* ]] && det[1]=train.deterministic=false
    [[ $v == *nchw* ]] && det[3]=train.layout=nchw
    [[ $v == *f32a* ]] && det[5]=train.activations=fp32
    [[ $v == *leg* ]] && det[7]=train.cudnn_api=legacy
    read -r steps warm <<< "$(steps_of "$cfg")"
    if [ "${KEY_OK[train.precision=$prec]:-1}" = 0 ] ||
       [ "${KEY_OK[train.cuda_graph=$graph]:-1}" = 0 ]; then
        echo "FAIL: $id: this ddptrain does not know train.precision = $prec or cuda_graph"
        BENCH_FAIL=1
        return
    fi
    t=$(budget 40)
    [ "$t" -lt 5 ] && { echo "skipped: $id: out of time"; return; }
    timeout "$t" "$DDPTRAIN" "configs/$cfg.ini" "${GPU_ARGS[@]}" --set data.file="$(data_of "$cfg")" \
        --set data.test= --set data.batch_size="$b" --set train.max_steps="$steps" \
        --set train.epochs=1000 --set train.log_every="$warm" --set checkpoint.every_epochs=0 \
        --set job.report=false --set train.precision="$prec" --set train.cuda_graph="$graph" \
        "${det[@]}" --set job.output="$W/$id" > "$W/$id.log" 2>&1
    local rc=$?
    { echo "---- $id (exit $rc)"; grep -E "convolutions|  conv " "$W/$id.log"; tail -3 "$W/$id.log"; } >> "$R/bench-runs.txt"
    [ $rc = 0 ] || { echo "FAIL: $id exit $rc: $(tail -1 "$W/$id.log")"; BENCH_FAIL=1; }
}
# PyTorch, one process per model and batch: its variants (mode:precision) in priority order
# while its time lasts -> $W/torch-<cfg>-<batch>.json (a list, rewritten after each variant)
torch_run() {
    local cfg=$1 b=$2 cap=$3 steps warm id=torch-$1-$2 t runs
    read -r steps warm <<< "$(steps_of "$cfg")"
    t=$(budget "$cap")
    [ "$t" -lt 10 ] && { echo "skipped: $id: out of time"; return; }
    runs=eager:fp32,eager:bf16,eager:tf32,compile:bf16,compile:fp32,compile:tf32
    [ "$cfg" = cifar-resnet18 ] && runs=eager:bf16,eager:tf32,eager:fp32,compile:bf16
    timeout "$t" "$PY" tests/gpu/torch_gpu_bench.py --data "$(data_of "$cfg")" \
        --layers "$(layers_of "$cfg")" --batch "$b" --steps "$steps" --warmup "$warm" \
        --budget-s $((t - 5)) --runs "$runs" --device "$TORCH_DEVICE" --json "$W/$id.json" \
        > "$W/$id.log" 2>&1
    local rc=$?
    { echo "---- $id (exit $rc)"; tail -8 "$W/$id.log"; } >> "$R/bench-runs.txt"
    [ $rc = 0 ] || echo "torch $id: exit $rc (bench-runs.txt)"
}

step "device"
if [ $DRY = 0 ]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit \
        --format=csv 2>&1 | head -3
fi
timeout 60 "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1

step "libraries"
missing=0
for b in ddptrain test_cuda_ops test_nccl $OP_TESTS; do
    if [ ! -x "${REAL[$b]}" ]; then
        echo "$b: ${REAL[$b]} missing"
        missing=1
    elif LD_LIBRARY_PATH="$LDPATH" ldd "${REAL[$b]}" | grep "not found"; then
        echo "$b: libraries not found"
        missing=1
    fi
done
# cuBLAS is opened at run time (not in ldd): --version opens it
if ! timeout "$(budget 20)" "$DDPTRAIN" --version > "$W/version.txt" 2>&1 ||
   grep "cuda (" "$W/version.txt" | grep -q "library not found"; then
    cat "$W/version.txt"
    echo "ddptrain: --version failed or cannot open cuBLAS (libcublas.so.13) with LD_LIBRARY_PATH=$LDPATH"
    missing=1
fi
grep "backends" "$W/version.txt"
# a build with cuDNN whose library is not found would silently take im2col for every convolution
if grep -q "cuDNN not found" "$W/version.txt"; then
    grep -m1 "cuDNN" "$W/version.txt"
    echo "FAIL: built with cuDNN but libcudnn.so.9 is not found (LD_LIBRARY_PATH=$LDPATH)"
    missing=1
fi
timeout "$(budget 20)" "$GPU_PROBE" || { echo "gpu_probe: no usable GPU"; missing=1; }
# the job keys the later stages set: known to this ddptrain?
timeout 60 "$DDPTRAIN" data synth -o "$W/san.h5" --shape 1,28,28 --classes 10 --train 2000 \
    --test 200 --seed 1 >/dev/null || missing=1
declare -A KEY_OK
for kv in train.precision=tf32 train.precision=bf16 train.cuda_graph=off train.cuda_graph=on \
    train.layout=nchw train.activations=fp32 train.cudnn_api=legacy; do
    if timeout 30 "$DDPTRAIN" check configs/fashion-cnn.ini --set data.file="$W/san.h5" \
            --set job.output="$W/check" --set train.device=cuda --set "$kv" > "$W/key.txt" 2>&1; then
        KEY_OK[$kv]=1
    else
        KEY_OK[$kv]=0
        why=$(grep -m1 -- "--set ${kv%%=*}" "$W/key.txt" || tail -1 "$W/key.txt")
        echo "FAIL: $kv: $why"
        missing=1
    fi
done
[ $missing = 0 ] && result libraries pass || result libraries FAIL

if on ops; then
    step "ops"
    timeout "$(budget 90)" "$W/bin/test_cuda_ops" > "$R/ops.txt" 2>&1
    rc=$?
    grep -E "^FAIL|^GPU|checks" "$R/ops.txt"
    ops_fail=""
    [ $rc = 0 ] || ops_fail="test_cuda_ops exit $rc"
    for t in $OP_TESTS; do # each after the other, its output appended to ops.txt
        echo "-- $t" >> "$R/ops.txt"
        timeout "$(budget 30)" "$W/bin/$t" > "$W/op.txt" 2>&1
        rc=$?
        cat "$W/op.txt" >> "$R/ops.txt"
        echo "$t: exit $rc; $(grep -E "checks" "$W/op.txt" | tail -1)"
        grep -E "^FAIL" "$W/op.txt" | head -5
        [ $rc = 0 ] || ops_fail="${ops_fail:+$ops_fail, }$t exit $rc"
    done
    [ -z "$ops_fail" ] && result ops pass || result ops "FAIL ($ops_fail; ops.txt)"
    NCCL_DEBUG=${NCCL_DEBUG:-WARN} timeout "$(budget 30)" "$W/bin/test_nccl" > "$W/nccl.txt" 2>&1
    rc=$?
    tail -2 "$W/nccl.txt"
    cat "$W/nccl.txt" >> "$R/ops.txt"
    [ $rc = 0 ] && result nccl pass || result nccl "FAIL (exit $rc; ops.txt)"
fi

# ---- ddptrain validate on the card, and what the next session ships from it -----------------
# card_slug: the expectation file's name part for this card (NVIDIA H200 -> h200; twin: twin)
card_slug() {
    local name=twin
    [ $DRY = 0 ] && name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    name=$(echo "${name:-card}" | tr 'A-Z' 'a-z' | sed 's/^nvidia //; s/[^a-z0-9]\{1,\}/-/g; s/^-//; s/-$//')
    echo "${name:-card}"
}
# pack_validate DIR: DIR's files into $R/validate.tar (one file of the 8 the tool brings back)
pack_validate() {
    tar -C "$1" -cf "$R/validate.tar" . 2>/dev/null ||
        python3 -c 'import sys, tarfile; t = tarfile.open(sys.argv[1], "w"); t.add(sys.argv[2], "."); t.close()' \
            "$R/validate.tar" "$1"
}
validate_stage() {
    local vd=$W/validate t0 rc rc2 rest expect cfg=()
    mkdir -p "$vd"
    # --dry: this shared machine is never idle: no retest verdict, and --record-expect records
    if [ $DRY = 1 ]; then
        printf '[validate]\nforeign_load_max = 0\n' > "$W/validate-dry.ini"
        cfg=(--config "$W/validate-dry.ini")
    fi
    t0=$(elapsed)
    expect=expect-$(card_slug).ini
    # the check itself: its verdict is the stage's; its tables go to the log
    timeout "$(budget 15)" "$DDPTRAIN" validate --quick "${cfg[@]}" --json "$vd/validate.json" \
        > "$vd/run.txt" 2>&1
    rc=$?
    cat "$vd/run.txt"
    # the records: the golden run's 100 steps as the cuda reference, the rates of 5 rounds as
    # the card's floors (level quick, margin 0.2), in what is left of VALIDATE_S
    rest=$((VALIDATE_S - ($(elapsed) - t0)))
    [ "$rest" -lt 5 ] && rest=5
    timeout "$(budget $rest)" "$DDPTRAIN" validate --quick "${cfg[@]}" \
        --record "$vd" --record-expect "$vd/$expect" > "$vd/record.txt" 2>&1
    rc2=$?
    grep -E "recorded|PASS: recorded|^validate:|FAIL|RETEST|refus" "$vd/record.txt" | head -8
    { echo "==== ddptrain validate --quick --json validate.json (exit $rc)"; cat "$vd/run.txt"
      echo "==== ddptrain validate --quick --record ./ --record-expect $expect (exit $rc2)"
      cat "$vd/record.txt"; } > "$vd/validate.txt"
    rm -f "$vd/run.txt" "$vd/record.txt"
    pack_validate "$vd"
    echo "validate.tar: $(cd "$vd" && ls | tr '\n' ' ')"
    if [ $rc != 0 ]; then
        result validate "FAIL (exit $rc; validate.tar)"
    elif [ $rc2 != 0 ] || [ ! -s "$vd/cuda-w1.ref" ] || [ ! -s "$vd/$expect" ]; then
        result validate "FAIL (recording: exit $rc2$([ $rc2 = 124 ] && echo ", out of time"); validate.tar)"
    else
        result validate pass
    fi
}
if on validate; then
    step "validate"
    validate_stage
fi

if on sanitizer; then
    step "sanitizer"
    if [ -z "$SAN" ]; then
        echo "no compute-sanitizer on this machine"
        result sanitizer FAIL
    else
        san_fail=0
        SANF=$R/ops.txt # the sanitizer's runs after the ops test's output (8 files at most)
        echo "==== compute-sanitizer" >> "$SANF"
        ops_s=$SANITIZER_S
        [ $DRY = 1 ] && ops_s=2 # the twin's ops test is slow: its out-of-time path is the plumbing
        for tool in $SAN_TOOLS; do
            for what in ops train; do
                ops_env=()
                if [ $what = ops ]; then
                    cmd=("${REAL[test_cuda_ops]}")
                    t=$(budget "$ops_s")
                    # racecheck: the op groups that fit its budget (test_cuda_ops names them)
                    [ $tool = racecheck ] && ops_env=(DDP_TEST_OPS="$RACE_OPS")
                else
                    cmd=("${REAL[ddptrain]}" configs/$SAN_CFG.ini --set data.file="$W/san.h5"
                         --set data.batch_size=$SAN_BATCH --set train.max_steps=$SAN_STEPS --set train.log_every=5
                         --set job.output="$W/san-$tool" --set job.report=false --set train.device=cuda)
                    t=$(budget "$SANITIZER_S")
                fi
                echo "-- $tool: $what (${t} s)${ops_env:+, ${ops_env[0]}}" | tee -a "$SANF"
                env LD_LIBRARY_PATH="$LDPATH" "${ops_env[@]}" timeout "$t" "$SAN" --tool $tool \
                    --error-exitcode 9 "${cmd[@]}" > "$W/san.txt" 2>&1
                rc=$?
                grep -E "ERROR SUMMARY|^=+ (Invalid|Race|Barrier|Error)|^groups|checks, " "$W/san.txt" |
                    head -6 | tee -a "$SANF"
                tail -c 3000 "$W/san.txt" >> "$SANF"
                case $rc in
                0) echo "   $tool $what: clean" ;;
                124) echo "   $tool $what: out of its $t s (what ran was clean)" ;;
                *) echo "   $tool $what: FAIL (exit $rc)"; san_fail=1 ;;
                esac
            done
        done
        [ $san_fail = 0 ] && result sanitizer pass || result sanitizer "FAIL (ops.txt)"
    fi
fi

if on curves; then
    step "curves"
    : > "$R/curve.txt"
    curve_fail=0
    for prec in fp32 tf32 bf16; do
        if [ "${KEY_OK[train.precision=$prec]:-1}" = 0 ]; then
            echo "-- $prec: FAIL: ddptrain does not know train.precision = $prec" | tee -a "$R/curve.txt"
            curve_fail=1
            continue
        fi
        echo "-- $prec" | tee -a "$R/curve.txt"
        n0=$(wc -l < "$R/curve.txt")
        jobs="mlp cnn"
        [ $DRY = 1 ] && [ $prec != fp32 ] && jobs=mlp # the CNN on the twin is slow: once
        env "${CURVE_ENV[@]}" CURVE_JOBS="$jobs" CURVE_PRECISION=$prec DDP_BUILD="$W" PATH="$(dirname "$PY"):$PATH" \
            timeout "$(budget 40)" bash tests/gpu/train_curve.sh >> "$R/curve.txt" 2>&1
        rc=$?
        tail -n +$((n0 + 1)) "$R/curve.txt" | grep -E "^(ok|FAIL)"
        [ $rc = 0 ] || { echo "   $prec: FAIL (exit $rc)"; curve_fail=1; }
    done
    [ $curve_fail = 0 ] && result curves pass || result curves "FAIL (curve.txt)"
fi

if on graphs; then
    step "graphs"
    # CUDA graphs on the card with accumulation (a graph per micro-batch role) and clipping (its
    # factor on the device): cuda_graph on and off must log the same loss at every log step, as
    # bit-identical weights do
    for mode in on off; do
        timeout "$(budget 40)" "$DDPTRAIN" configs/$GRAPH_CFG.ini --set data.file="$W/san.h5" \
            --set data.batch_size=$SAN_BATCH --set train.max_steps=$GRAPH_STEPS --set train.log_every=2 \
            --set train.accumulate=3 --set optim.clip_grad_norm=0.5 --set train.cuda_graph=$mode \
            --set job.output="$W/graph-$mode" --set job.report=false --set train.device=cuda \
            > "$W/graph-$mode.txt" 2>&1 || { echo "cuda_graph=$mode: exit $?"; tail -3 "$W/graph-$mode.txt"; }
    done
    loss_of() { sed -n 's/.*"kind":"train".*"loss":\([^,]*\),.*/\1/p' "$W/graph-$1/metrics.jsonl" 2>/dev/null | tr '\n' ' '; }
    l_on=$(loss_of on) l_off=$(loss_of off)
    echo "losses with graphs: $l_on"
    echo "losses without:     $l_off"
    # the two runs time cuDNN's algorithms each: their choices must agree for bitwise equality
    algos() { grep "  conv C" "$W/graph-$1.txt" | sed 's/^[^ ]* *//; s/ [0-9.]* ms//g'; }
    if [ "$(algos on)" != "$(algos off)" ]; then
        echo "the two runs chose different convolution algorithms:"
        diff <(algos on) <(algos off) | head -8
    fi
    if [ -n "$l_on" ] && [ "$l_on" = "$l_off" ] && grep -q "steady-state step is captured" "$W/graph-on.txt"; then
        result graphs pass
    else
        result graphs "FAIL (on and off differ, or a run failed; device-check.log)"
    fi
fi
# ---- a whole run on the real data -------------------------------------------------------------
if on fullrun; then
    step "fullrun"
    # configs/fashion-resnet.ini to its end on the real Fashion-MNIST (the carried IDX files):
    # the training time and the test accuracy, for the README's and the issue's targets
    # (--dry: the small synthetic set of the earlier stages, for the plumbing)
    if [ $DRY = 1 ]; then
        fm_data=$W/san.h5
    elif [ -d "$FMNIST_DIR" ] && timeout "$(budget 60)" "$DDPTRAIN" data idx --dir "$FMNIST_DIR" \
            -o "$W/fmnist.h5" > "$W/idx.txt" 2>&1; then
        fm_data=$W/fmnist.h5
    else
        fm_data=
    fi
    if [ -n "$fm_data" ]; then
        timeout "$(budget 120)" "$DDPTRAIN" configs/fashion-resnet.ini --set data.file="$fm_data" \
            --set job.output="$W/fullrun" --set job.report=false --set train.device=cuda \
            "${FULLRUN_ARGS[@]}" > "$W/fullrun.txt" 2>&1
        rc=$?
        tail -4 "$W/fullrun.txt"
        { echo "---- fullrun (exit $rc)"; grep -E "convolutions|algorithm" "$W/fullrun.txt"; tail -6 "$W/fullrun.txt"; } >> "$R/bench-runs.txt"
        "$PY" - "$W/fullrun/metrics.jsonl" "$R/fullrun.json" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
s = [r for r in recs if r.get("kind") == "summary"][-1]
ev = [r for r in recs if r.get("kind") == "eval"]
out = {k: s.get(k) for k in ("train_s", "test_acc", "samples_per_s", "gpu_mem_peak_bytes", "steps")}
out["last_eval"] = ev[-1] if ev else None
json.dump(out, open(sys.argv[2], "w"))
print("fullrun:", json.dumps(out))
EOF
        [ $rc = 0 ] && [ -s "$R/fullrun.json" ] && result fullrun done || result fullrun "FAIL (exit $rc)"
    else
        cat "$W/idx.txt" 2>/dev/null
        result fullrun "FAIL (no Fashion-MNIST IDX files in $FMNIST_DIR)"
    fi
fi

# ---- benchmark --------------------------------------------------------------------------------
if on bench; then
    # the profile's seconds are kept from the benchmark, which takes whatever is left
    TOTAL_BENCH=$TOTAL_S
    on profile && TOTAL_S=$((TOTAL_S - PROFILE_S))
    step "bench (what is left of $TOTAL_S s)"
    BENCH_FAIL=0
    : > "$R/bench-runs.txt.new"
    cat "$R/bench-runs.txt" >> "$R/bench-runs.txt.new" 2>/dev/null
    mv "$R/bench-runs.txt.new" "$R/bench-runs.txt"
    timeout "$(budget 60)" "$DDPTRAIN" data synth -o "$W/fm.h5" --shape 1,28,28 --classes 10 \
        --train $NTRAIN --test 100 --seed 1 >/dev/null || BENCH_FAIL=1
    timeout "$(budget 60)" "$DDPTRAIN" data synth -o "$W/c10.h5" --shape $R18_SHAPE --classes 10 \
        --train $NTRAIN_R18 --test 100 --seed 1 >/dev/null || BENCH_FAIL=1
    . tests/gpu/lib.sh
    gpu_select configs/fashion-mlp.ini --set data.file="$W/fm.h5" || BENCH_FAIL=1
    if [ $BENCH_FAIL = 0 ]; then
        echo "device chosen through $GPU_SELECT"
        # in priority order: what the targets are about first
        for item in $BENCH_PLAN; do
            IFS=: read -r cfg b runs torch_cap <<< "$item"
            echo "-- $cfg batch $b (t=$(elapsed) s)"
            for run in ${runs//,/ }; do
                IFS=- read -r prec graph variant <<< "$run"
                ddp_run "$cfg" "$b" "$prec" "$graph" $variant
            done
            torch_run "$cfg" "$b" "$torch_cap"
        done
    fi
    "$PY" tests/gpu/bench_table.py "$W" "$R" "$DRY" || BENCH_FAIL=1
    [ $BENCH_FAIL = 0 ] && result bench done || result bench "FAIL (bench-runs.txt)"
    TOTAL_S=$TOTAL_BENCH
fi

# ---- per-layer profile ------------------------------------------------------------------------
# profile_stage: ResNet-18 (--dry: the small CNN) in bf16 (default: channels-last, bf16
# activations), bf16 on the legacy API only, bf16 with fp32 activations, bf16 NCHW and tf32; each run's table and JSON into
# $W/validate, then validate.tar again (the 8 files the tool brings back)
profile_stage() {
    local pd=$W/validate data v t rc prof_fail=0 args
    data=$(data_of $PROFILE_CFG)
    mkdir -p "$pd"
    [ -s "$data" ] || [ $PROFILE_CFG != cifar-resnet18 ] ||
        timeout "$(budget 30)" "$DDPTRAIN" data synth -o "$data" --shape $R18_SHAPE \
            --classes 10 --train 64 --test 16 --seed 1 >/dev/null || prof_fail=1
    [ $PROFILE_CFG = cifar-resnet18 ] || data=$W/san.h5 # the libraries stage's 1x28x28
    for v in bf16 bf16-leg bf16-f32a bf16-nchw tf32; do
        args=(--set train.precision=${v%%-*})
        [[ $v == *nchw ]] && args+=(--set train.layout=nchw)
        [[ $v == *f32a ]] && args+=(--set train.activations=fp32)
        [[ $v == *leg ]] && args+=(--set train.cudnn_api=legacy)
        t=$(budget $((PROFILE_S / 5)))
        [ "$t" -lt 5 ] && { echo "skipped: profile $v: out of time"; prof_fail=1; continue; }
        timeout "$t" "$DDPTRAIN" profile configs/$PROFILE_CFG.ini --set train.device=cuda \
            --set data.file="$data" "${PROFILE_ARGS[@]}" "${args[@]}" \
            --json "$pd/profile-$v.json" > "$pd/profile-$v.txt" 2>&1
        rc=$?
        echo "-- profile $v (exit $rc)"
        cat "$pd/profile-$v.txt"
        [ $rc = 0 ] || { echo "FAIL: profile $v exit $rc"; prof_fail=1; }
    done
    pack_validate "$pd"
    [ $prof_fail = 0 ] && result profile done || result profile "FAIL (validate.tar: profile-*.txt)"
}
if on profile; then
    step "profile"
    profile_stage
fi

step "summary"
fail=0
for k in "${ORDER[@]}"; do
    printf '  %-10s %s\n' "$k" "${RESULT[$k]}"
    case ${RESULT[$k]} in pass | done) ;; *) fail=1 ;; esac
done
for k in ops validate sanitizer curves graphs fullrun bench profile; do
    on $k || printf '  %-10s %s\n' "$k" "not run (STAGES=$STAGES)"
done
nfiles=$(find "$R" -type f | wc -l)
if [ "$nfiles" -gt 8 ]; then
    echo "FAIL: $nfiles files under $R (the device tool brings back 8)"
    fail=1
fi
echo "total $(elapsed) s of $TOTAL_S; $nfiles files in $R"
echo
[ -f "$R/bench.md" ] && cat "$R/bench.md"
exit $fail

#!/bin/bash
# device-check.sh [CARRY] | --dry - everything one call to the GPU device machine checks, in at
# most 8 minutes (TOTAL_S, default 470 s), from the bundle that tests/gpu/pack.sh made here in
# CARRY (default .dev/gpu): nothing is built there. Each stage has a fixed time budget (its
# timeout, cut to what is left of TOTAL_S); the benchmark gets what the checks left over.
#
#   1. device       the card, the driver, PyTorch (information only)
#   2. libraries    every carried binary finds its libraries (carried ones; cuBLAS and NCCL from
#                   the device's CUDA toolkit or PyTorch's pip packages); gpu_probe finds the GPU;
#                   the job keys the checks use (train.precision = bf16, train.cuda_graph) are known
#   3. ops          test_cuda_ops: every CUDA op against the CPU backend; test_nccl, world size 1
#   4. sanitizer    compute-sanitizer memcheck, racecheck and synccheck over test_cuda_ops and a
#                   20-step training (SANITIZER_S per run, default 20: a run that is out of time
#                   is reported, not failed; an error the tool finds fails)
#   5. curves       train_curve.sh: CPU vs GPU loss curves of two short trainings, fp32, tf32, bf16
#   5b. graphs      configs/fashion-resnet.ini with accumulate = 3 and clip_grad_norm, cuda_graph
#                   on and off: the same loss at every log step (a graph per micro-batch role,
#                   the clip factor on the device)
#   6. bench        samples/s and peak device memory, MLP 784-512-512-10 and configs/fashion-cnn.ini's
#                   CNN at batch 256 and 1024, on Fashion-MNIST-shaped synthetic data (uint8):
#                   ddptrain with cuda_graph off and on, fp32, tf32, bf16; PyTorch on the same GPU
#                   (tests/gpu/torch_gpu_bench.py: data preloaded on the GPU, eager and
#                   torch.compile, the same three precisions); in priority order (batch 256
#                   first) until the time is up; what did not fit is "-" in the table
#
# Writes under $OUT/gpu at most 7 files: device-check.log (all of it), ops.txt, sanitizer.txt,
# curve.txt, bench.json, bench.md (the table, ready for bench/RESULTS-gpu.md) and bench-runs.txt
# (the last lines of every benchmark run). Prints the table last. Exit 0 when every check
# passed, else 1 (the summary names the stage).
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
want = ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libnccl.so.2")
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
    for b in ddptrain test_cuda_ops test_nccl gpu_probe; do
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
    STEPS_MLP="6 2" STEPS_CNN="4 2" BATCHES="16" NTRAIN=600 SAN_BATCH=4 SAN_CFG=fashion-mlp
    CURVE_ENV=(CURVE_STEPS=10 CURVE_TEST=50 CURVE_BATCH=32) SAN_STEPS=5
    GRAPH_CFG=fashion-mlp GRAPH_STEPS=6
else
    setup_bundle "${1:-.dev/gpu}"
    STEPS_MLP="400 100" STEPS_CNN="250 50" BATCHES="256 1024" NTRAIN=60000 SAN_BATCH=32
    SAN_CFG=fashion-cnn CURVE_ENV=() SAN_STEPS=20 GRAPH_CFG=fashion-resnet GRAPH_STEPS=12
fi
# wrappers: the carried libraries for our binaries only, never for python/PyTorch
for b in ddptrain test_cuda_ops test_nccl gpu_probe; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LDPATH" "${REAL[$b]}" > "$W/bin/$b"
    chmod +x "$W/bin/$b"
done
export DDP_GPU_REQUIRE=1 DDPTRAIN="$W/bin/ddptrain" GPU_PROBE="$W/bin/gpu_probe" DDP_SRC="$SRC"

step "device"
if [ $DRY = 0 ]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit \
        --format=csv 2>&1 | head -3
fi
timeout 60 "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1

step "libraries"
missing=0
for b in ddptrain test_cuda_ops test_nccl; do
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
timeout "$(budget 20)" "$GPU_PROBE" || { echo "gpu_probe: no usable GPU"; missing=1; }
# the job keys the later stages set: known to this ddptrain?
timeout 60 "$DDPTRAIN" data synth -o "$W/san.h5" --shape 1,28,28 --classes 10 --train 2000 \
    --test 200 --seed 1 >/dev/null || missing=1
declare -A KEY_OK
for kv in train.precision=tf32 train.precision=bf16 train.cuda_graph=off train.cuda_graph=on; do
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

step "ops"
timeout "$(budget 90)" "$W/bin/test_cuda_ops" > "$R/ops.txt" 2>&1
rc=$?
grep -E "^FAIL|^GPU|checks" "$R/ops.txt"
[ $rc = 0 ] && result ops pass || result ops "FAIL (exit $rc; ops.txt)"
NCCL_DEBUG=${NCCL_DEBUG:-WARN} timeout "$(budget 30)" "$W/bin/test_nccl" > "$W/nccl.txt" 2>&1
rc=$?
tail -2 "$W/nccl.txt"
cat "$W/nccl.txt" >> "$R/ops.txt"
[ $rc = 0 ] && result nccl pass || result nccl "FAIL (exit $rc; ops.txt)"

step "sanitizer"
if [ -z "$SAN" ]; then
    echo "no compute-sanitizer on this machine"
    result sanitizer FAIL
else
    san_fail=0
    : > "$R/sanitizer.txt"
    ops_s=$SANITIZER_S
    [ $DRY = 1 ] && ops_s=2 # the twin's ops test is slow: its out-of-time path is the plumbing
    for tool in memcheck racecheck synccheck; do
        for what in ops train; do
            if [ $what = ops ]; then
                cmd=("${REAL[test_cuda_ops]}")
                t=$(budget "$ops_s")
            else
                cmd=("${REAL[ddptrain]}" configs/$SAN_CFG.ini --set data.file="$W/san.h5"
                     --set data.batch_size=$SAN_BATCH --set train.max_steps=$SAN_STEPS --set train.log_every=5
                     --set job.output="$W/san-$tool" --set job.report=false --set train.device=cuda)
                t=$(budget "$SANITIZER_S")
            fi
            echo "-- $tool: $what (${t} s)" | tee -a "$R/sanitizer.txt"
            LD_LIBRARY_PATH="$LDPATH" timeout "$t" "$SAN" --tool $tool --error-exitcode 9 \
                "${cmd[@]}" > "$W/san.txt" 2>&1
            rc=$?
            grep -E "ERROR SUMMARY|^=+ (Invalid|Race|Barrier|Error)" "$W/san.txt" | head -5 |
                tee -a "$R/sanitizer.txt"
            tail -c 3000 "$W/san.txt" >> "$R/sanitizer.txt"
            case $rc in
            0) echo "   $tool $what: clean" ;;
            124) echo "   $tool $what: out of its $t s (what ran was clean)" ;;
            *) echo "   $tool $what: FAIL (exit $rc)"; san_fail=1 ;;
            esac
        done
    done
    [ $san_fail = 0 ] && result sanitizer pass || result sanitizer "FAIL (sanitizer.txt)"
fi

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
    jobs="mlp cnn"
    [ $DRY = 1 ] && [ $prec != fp32 ] && jobs=mlp # the CNN on the twin is slow: once
    env "${CURVE_ENV[@]}" CURVE_JOBS="$jobs" CURVE_PRECISION=$prec DDP_BUILD="$W" PATH="$(dirname "$PY"):$PATH" \
        timeout "$(budget 40)" bash tests/gpu/train_curve.sh >> "$R/curve.txt" 2>&1
    rc=$?
    grep -E "^(ok|FAIL)" "$R/curve.txt" | tail -2
    [ $rc = 0 ] || { echo "   $prec: FAIL (exit $rc)"; curve_fail=1; }
done
[ $curve_fail = 0 ] && result curves pass || result curves "FAIL (curve.txt)"

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
on=$(loss_of on) off=$(loss_of off)
echo "losses with graphs: $on"
echo "losses without:     $off"
if [ -n "$on" ] && [ "$on" = "$off" ] && grep -q "steady-state step is captured" "$W/graph-on.txt"; then
    result graphs pass
else
    result graphs "FAIL (on and off differ, or a run failed; device-check.log)"
fi

# ---- benchmark --------------------------------------------------------------------------------
step "bench (what is left of $TOTAL_S s)"
BENCH_FAIL=0
: > "$R/bench-runs.txt"
timeout "$(budget 60)" "$DDPTRAIN" data synth -o "$W/fm.h5" --shape 1,28,28 --classes 10 \
    --train $NTRAIN --test 100 --seed 1 >/dev/null || BENCH_FAIL=1
. tests/gpu/lib.sh
gpu_select configs/fashion-mlp.ini --set data.file="$W/fm.h5" || BENCH_FAIL=1
layers_of() {
    "$PY" -c 'import configparser,sys; c=configparser.ConfigParser(inline_comment_prefixes=(";",)); c.read(sys.argv[1]); print(" ".join(c["model"]["layers"].split()))' "configs/$1.ini"
}
# one ddptrain run: model batch precision graph -> $W/run-<id>/metrics.jsonl
ddp_run() {
    local cfg=$1 b=$2 prec=$3 graph=$4 steps warm id=ddp-$1-$2-$3-graph$4 t extra=()
    read -r steps warm <<< "$([ "$cfg" = fashion-mlp ] && echo "$STEPS_MLP" || echo "$STEPS_CNN")"
    if [ "${KEY_OK[train.precision=$prec]:-1}" = 0 ] ||
       [ "${KEY_OK[train.cuda_graph=$graph]:-1}" = 0 ]; then
        echo "FAIL: $id: this ddptrain does not know train.precision = $prec or cuda_graph"
        BENCH_FAIL=1
        return
    fi
    extra=(--set train.cuda_graph=$graph)
    t=$(budget 40)
    [ "$t" -lt 5 ] && { echo "skipped: $id: out of time"; return; }
    timeout "$t" "$DDPTRAIN" "configs/$cfg.ini" "${GPU_ARGS[@]}" --set data.file="$W/fm.h5" \
        --set data.test= --set data.batch_size=$b --set train.max_steps=$steps \
        --set train.log_every=$warm --set checkpoint.every_epochs=0 --set job.report=false \
        --set train.precision=$prec "${extra[@]}" --set job.output="$W/$id" > "$W/$id.log" 2>&1
    local rc=$?
    { echo "---- $id (exit $rc)"; tail -4 "$W/$id.log"; } >> "$R/bench-runs.txt"
    [ $rc = 0 ] || { echo "FAIL: $id exit $rc: $(tail -1 "$W/$id.log")"; BENCH_FAIL=1; }
}
# PyTorch, one process per model and batch: its variants (mode:precision) in priority order
# while its time lasts -> $W/torch-<cfg>-<batch>.json (a list, rewritten after each variant)
torch_run() {
    local cfg=$1 b=$2 cap=$3 steps warm id=torch-$1-$2 t
    read -r steps warm <<< "$([ "$cfg" = fashion-mlp ] && echo "$STEPS_MLP" || echo "$STEPS_CNN")"
    t=$(budget "$cap")
    [ "$t" -lt 10 ] && { echo "skipped: $id: out of time"; return; }
    timeout "$t" "$PY" tests/gpu/torch_gpu_bench.py --data "$W/fm.h5" --layers "$(layers_of "$cfg")" \
        --batch "$b" --steps "$steps" --warmup "$warm" --budget-s $((t - 5)) \
        --runs eager:fp32,eager:bf16,compile:fp32,compile:bf16,eager:tf32,compile:tf32 \
        --device "$TORCH_DEVICE" --json "$W/$id.json" > "$W/$id.log" 2>&1
    local rc=$?
    { echo "---- $id (exit $rc)"; tail -8 "$W/$id.log"; } >> "$R/bench-runs.txt"
    [ $rc = 0 ] || echo "torch $id: exit $rc (bench-runs.txt)"
}
if [ $BENCH_FAIL = 0 ]; then
    echo "device chosen through $GPU_SELECT"
    for b in $BATCHES; do
        for cfg in fashion-mlp fashion-cnn; do
            echo "-- $cfg batch $b (t=$(elapsed) s)"
            for run in "fp32 off" "fp32 on" "bf16 on" "tf32 on" "bf16 off" "tf32 off"; do
                ddp_run $cfg "$b" $run
            done
            torch_run $cfg "$b" $([ "$b" = "${BATCHES%% *}" ] && echo 150 || echo 90)
        done
    done
fi
"$PY" - "$W" "$R" "$DRY" "$BATCHES" <<'EOF' || BENCH_FAIL=1
import glob, json, os, statistics, sys
W, R, dry, batches = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4].split()
def ddp(cfg, b, prec, graph):
    d = os.path.join(W, f"ddp-{cfg}-{b}-{prec}-graph{graph}")
    try:
        recs = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    except OSError:
        return None
    rates = [r["samples_per_s"] for r in recs if r.get("kind") == "train"][1:]
    summ = [r for r in recs if r.get("kind") == "summary"]
    mem = summ[-1].get("gpu_mem_peak_bytes") if summ else None
    return dict(rate=statistics.median(rates) if rates else None, mem=mem)
def torch(cfg, b, mode, prec):
    try:
        runs = json.load(open(os.path.join(W, f"torch-{cfg}-{b}.json")))
    except (OSError, ValueError):
        return None
    r = next((x for x in runs if x.get("mode") == mode and x.get("precision") == prec), None)
    if r is None:
        return None
    if "skipped" in r:
        return dict(rate=None, mem=None, skipped=r["skipped"])
    return dict(rate=r.get("samples_per_s"), mem=r.get("peak_mem_bytes"), torch=r.get("torch"),
                device=r.get("device"))
rows = []
for b in batches:
    for cfg in ("fashion-mlp", "fashion-cnn"):
        for prec in ("fp32", "tf32", "bf16"):
            off, on = ddp(cfg, b, prec, "off"), ddp(cfg, b, prec, "on")
            eager, comp = torch(cfg, b, "eager", prec), torch(cfg, b, "compile", prec)
            rate = lambda x: x and x.get("rate")
            best = max([v for v in (rate(off), rate(on)) if v], default=None)
            rows.append(dict(model=cfg, batch=int(b), precision=prec, ddp_graph_off=rate(off),
                             ddp_graph_on=rate(on), torch_eager=rate(eager),
                             torch_compile=rate(comp),
                             over_eager=best / rate(eager) if best and rate(eager) else None,
                             over_compile=best / rate(comp) if best and rate(comp) else None,
                             mem_ddp=max([x["mem"] for x in (off, on) if x and x.get("mem")],
                                         default=None),
                             mem_eager=eager and eager.get("mem"),
                             mem_compile=comp and comp.get("mem")))
f0 = lambda v: "-" if v is None else f"{v:,.0f}"
f2 = lambda v: "-" if v is None else f"{v:.2f}x"
mib = lambda v: "-" if v is None else f"{v / 1048576:.1f}"
name = {"fashion-mlp": "MLP 784-512-512-10", "fashion-cnn": "CNN (fashion-cnn)"}
lines = ["| model | batch | precision | ddptrain graph off | ddptrain graph on | PyTorch eager "
         "| torch.compile | ddptrain / eager | ddptrain / compile | peak MiB ddptrain "
         "| peak MiB eager | peak MiB compile |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    lines.append(f"| {name[r['model']]} | {r['batch']} | {r['precision']} | "
                 f"{f0(r['ddp_graph_off'])} | {f0(r['ddp_graph_on'])} | {f0(r['torch_eager'])} | "
                 f"{f0(r['torch_compile'])} | {f2(r['over_eager'])} | {f2(r['over_compile'])} | "
                 f"{mib(r['mem_ddp'])} | {mib(r['mem_eager'])} | {mib(r['mem_compile'])} |")
tj = [t for p in glob.glob(os.path.join(W, "torch-*.json")) for t in json.load(open(p))]
dev = next((t.get("device") for t in tj if t.get("device")), "CPU (dry run)" if dry else "?")
tv = next((t.get("torch") for t in tj if t.get("torch")), "?")
head = [f"Device: {dev}; PyTorch {tv}." + (" DRY RUN: the GPU twin and CPU PyTorch, tiny "
        "step counts: these numbers mean nothing." if dry else ""),
        "samples/s: ddptrain the median of its logged rates after the first log interval; "
        "PyTorch timed after its warm-up, data preloaded on the device. ddptrain / PyTorch: "
        "the faster of graph off and on. Peak MiB: device memory allocated by the framework "
        "(ddptrain gpu_mem_peak_bytes; torch.cuda.max_memory_allocated less the preloaded "
        "data); - = not run (out of time, or not supported)."]
table = "\n".join(head + [""] + lines)
open(os.path.join(R, "bench.md"), "w").write(table + "\n")
json.dump(rows, open(os.path.join(R, "bench.json"), "w"), indent=1)
measured = sum(1 for r in rows for k in ("ddp_graph_off", "ddp_graph_on", "torch_eager") if r[k])
print(f"{measured} figures measured")
sys.exit(0 if measured else 1)
EOF
[ $BENCH_FAIL = 0 ] && result bench done || result bench "FAIL (bench-runs.txt)"

step "summary"
fail=0
for k in "${ORDER[@]}"; do
    printf '  %-10s %s\n' "$k" "${RESULT[$k]}"
    case ${RESULT[$k]} in pass | done) ;; *) fail=1 ;; esac
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

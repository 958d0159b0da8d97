#!/bin/bash
# device-check.sh [CARRY] - everything one call to the GPU device machine checks, in under
# 8 minutes, from the bundle that tests/gpu/pack.sh made here in CARRY (default .dev/gpu):
# nothing is built there.
#
#   1. the card, the driver, PyTorch (information only)
#   2. every carried binary finds its libraries (carried ones, cuBLAS and NCCL from the
#      device's CUDA toolkit or PyTorch's pip packages)
#   3. test_cuda_ops    every CUDA op against the CPU backend (normalised error <= 1e-6)
#   4. test_nccl        the NCCL communicator, world size 1
#   5. train_curve.sh   CPU vs GPU loss curves of two short training runs
#   5b. sanitizer       compute-sanitizer memcheck, racecheck and synccheck over test_cuda_ops
#                       and memcheck over a 20-step training (skipped where compute-sanitizer
#                       is absent; SANITIZER_S seconds per tool, default 60)
#   6. throughput       samples/s of configs/fashion-mlp.ini and configs/fashion-cnn.ini on
#                       synthetic data of Fashion-MNIST's shape: ddptrain on the GPU (fp32 and
#                       tf32), PyTorch on the same GPU (tests/gpu/torch_gpu_bench.py), and
#                       ddptrain's CPU backend for scale; skipped if the checks ran long
#
# Writes under $OUT/gpu at most 7 files: device-check.log (all of it, per-run logs appended),
# ops.txt, nccl.txt, curve.txt, sanitizer.txt, bench.md (the table) and bench.json. Exit 0 when every correctness check (3-5) passed, else 1.
# Usage with the device tool: command "bash tests/gpu/device-check.sh .dev/gpu", carry
# [".dev/gpu"], timeout_s 540.
set -u
cd "$(dirname "$0")/../.." || exit 1
SRC=$PWD
BUNDLE=$(realpath "${1:-.dev/gpu}")/bundle.tar.xz
OUT=${OUT:-$(mktemp -d)}
R="$OUT/gpu"
W=$(mktemp -d)
mkdir -p "$R" "$W/bin" "$W/carry"
exec > >(tee "$R/device-check.log") 2>&1
CARRY="$W/carry"
if ! { tar -C "$CARRY" -xJf "$BUNDLE" 2>/dev/null ||
       python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
           "$BUNDLE" "$CARRY"; }; then
    echo "FAIL: cannot unpack $BUNDLE (made by tests/gpu/pack.sh)"
    exit 1
fi
T0=$(date +%s)
BENCH_AFTER_S=${BENCH_AFTER_S:-300} # no throughput runs once the checks took this long
step() { echo; echo "== $* (t=$(( $(date +%s) - T0 )) s)"; }
declare -A RESULT
ORDER=()
result() { RESULT[$1]=$2; ORDER+=("$1"); echo "-> $1: $2"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit \
    --format=csv 2>&1 | head -3
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
[ -f "$CARRY/REVISION" ] && echo "carried build of $(cat "$CARRY/REVISION")"

step "libraries"
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
LDPATH="$CARRY/lib${LIBDIRS:+:$LIBDIRS}"
# wrappers: the carried libraries for our binaries only, never for python/PyTorch
for b in ddptrain test_cuda_ops test_nccl gpu_probe; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LDPATH" "$CARRY/bin/$b" > "$W/bin/$b"
    chmod +x "$W/bin/$b"
done
missing=0
for b in ddptrain test_cuda_ops test_nccl gpu_probe; do
    if LD_LIBRARY_PATH="$LDPATH" ldd "$CARRY/bin/$b" | grep "not found"; then
        echo "$b: libraries not found"
        missing=1
    fi
done
# cuBLAS is opened at run time (not in ldd): --version opens it
if "$W/bin/ddptrain" --version | grep "cuda (" | grep -q "library not found"; then
    echo "ddptrain: cuBLAS (libcublas.so.13) cannot be opened with LD_LIBRARY_PATH=$LDPATH"
    missing=1
fi
[ $missing = 0 ] && result libraries pass || result libraries FAIL

export DDP_GPU_REQUIRE=1 DDPTRAIN="$W/bin/ddptrain" GPU_PROBE="$W/bin/gpu_probe" DDP_SRC="$SRC"

step "gpu_probe"
timeout 60 "$W/bin/gpu_probe" && result probe pass || result probe FAIL

step "test_cuda_ops"
timeout 180 "$W/bin/test_cuda_ops" 2>&1 | tee "$R/ops.txt"
[ "${PIPESTATUS[0]}" = 0 ] && result ops pass || result ops FAIL

step "test_nccl"
NCCL_DEBUG=${NCCL_DEBUG:-WARN} timeout 120 "$W/bin/test_nccl" 2>&1 | tee "$R/nccl.txt"
[ "${PIPESTATUS[0]}" = 0 ] && result nccl pass || result nccl FAIL

step "train_curve.sh"
DDP_BUILD="$W" timeout 240 bash tests/gpu/train_curve.sh 2>&1 | tee "$R/curve.txt"
[ "${PIPESTATUS[0]}" = 0 ] && result curve pass || result curve FAIL

step "compute-sanitizer"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -z "$SAN" ]; then
    echo "skipped: no compute-sanitizer"
    result sanitizer skipped
else
    san_fail=0
    for tool in memcheck racecheck synccheck; do
        echo "-- $tool test_cuda_ops"
        LD_LIBRARY_PATH="$LDPATH" timeout "${SANITIZER_S:-60}" "$SAN" --tool $tool \
            --error-exitcode 9 "$CARRY/bin/test_cuda_ops" > "$W/san-$tool.txt" 2>&1
        rc=$?
        tail -3 "$W/san-$tool.txt"
        # 124: out of time (the ops ran partly under the tool): reported, not a failure
        case $rc in 0) ;; 124) echo "($tool ran out of its ${SANITIZER_S:-60} s)" ;; *) san_fail=1 ;; esac
    done
    timeout 60 "$DDPTRAIN" data synth -o "$W/san.h5" --shape 1,8,8 --classes 10 --train 2000 \
        --test 10 --seed 1 >/dev/null
    echo "-- memcheck: 20 training steps"
    LD_LIBRARY_PATH="$LDPATH" timeout "${SANITIZER_S:-60}" "$SAN" --tool memcheck \
        --error-exitcode 9 "$CARRY/bin/ddptrain" configs/fashion-cnn.ini \
        --set data.file="$W/san.h5" --set data.test= --set data.batch_size=32 \
        --set train.max_steps=20 --set train.log_every=5 --set job.output="$W/san-run" \
        --set train.device=cuda > "$W/san-train.txt" 2>&1
    rc=$?
    tail -3 "$W/san-train.txt"
    case $rc in 0) ;; 124) echo "(training ran out of time under memcheck)" ;; *) san_fail=1 ;; esac
    cat "$W"/san-*.txt > "$R/sanitizer.txt"
    [ $san_fail = 0 ] && result sanitizer pass || result sanitizer FAIL
fi

step "throughput"
if [ $(( $(date +%s) - T0 )) -gt "$BENCH_AFTER_S" ]; then
    echo "skipped: the checks took more than $BENCH_AFTER_S s"
    result bench skipped
else
    . tests/gpu/lib.sh
    timeout 60 "$DDPTRAIN" data synth -o "$W/fm.h5" --shape 1,28,28 --classes 10 \
        --train 60000 --test 1000 --seed 1 >/dev/null
    if gpu_select configs/fashion-mlp.ini --set data.file="$W/fm.h5"; then
        echo "device chosen through $GPU_SELECT"
        # config steps warmup(=log_every)
        for spec in "fashion-mlp 600 100" "fashion-cnn 300 50"; do
            set -- $spec
            cfg=$1 steps=$2 warm=$3
            layers=$(python3 -c 'import configparser,sys; c=configparser.ConfigParser(inline_comment_prefixes=(";",)); c.read(sys.argv[1]); print(" ".join(c["model"]["layers"].split()))' "configs/$cfg.ini")
            common=(--set data.file="$W/fm.h5" --set data.test= --set train.max_steps=$steps
                    --set train.log_every=$warm --set checkpoint.every_epochs=0)
            for prec in fp32 tf32; do
                timeout 120 "$DDPTRAIN" "configs/$cfg.ini" "${GPU_ARGS[@]}" "${common[@]}" \
                    --set train.precision=$prec --set job.output="$W/$cfg-gpu-$prec" \
                    > "$W/$cfg-gpu-$prec.log" 2>&1 || echo "ddptrain $cfg $prec failed"
                tf=""; [ $prec = tf32 ] && tf=--tf32
                timeout 120 python3 tests/gpu/torch_gpu_bench.py --data "$W/fm.h5" \
                    --layers "$layers" --batch 256 --steps $steps --warmup $warm $tf \
                    --json "$W/$cfg-torch-$prec.json" > "$W/$cfg-torch-$prec.log" 2>&1 ||
                    echo "torch $cfg $prec failed (its log is appended below)"
            done
            cpu_steps=$((warm * 3))
            timeout 90 "$DDPTRAIN" "configs/$cfg.ini" "${CPU_ARGS[@]}" "${common[@]}" \
                --set train.max_steps=$cpu_steps --set job.output="$W/$cfg-cpu-fp32" \
                > "$W/$cfg-cpu-fp32.log" 2>&1 || echo "ddptrain $cfg cpu failed"
        done
        python3 - "$W" "$R" <<'EOF'
import json, os, statistics, sys
W, R = sys.argv[1], sys.argv[2]
def ddp_rate(d):
    try:
        recs = [json.loads(l) for l in open(os.path.join(W, d, "metrics.jsonl"))]
    except OSError:
        return None
    rates = [r["samples_per_s"] for r in recs if r.get("kind") == "train"][1:]
    return statistics.median(rates) if rates else None
def torch_rate(f):
    try:
        return json.load(open(os.path.join(W, f)))["samples_per_s"]
    except (OSError, ValueError, KeyError):
        return None
rows = []
for cfg in ("fashion-mlp", "fashion-cnn"):
    cpu = ddp_rate(f"{cfg}-cpu-fp32")
    for prec in ("fp32", "tf32"):
        g, t = ddp_rate(f"{cfg}-gpu-{prec}"), torch_rate(f"{cfg}-torch-{prec}.json")
        rows.append(dict(config=cfg, precision=prec, ddptrain_gpu=g, pytorch_gpu=t,
                         ddptrain_cpu=cpu if prec == "fp32" else None,
                         ddptrain_over_pytorch=g / t if g and t else None))
fmt = lambda v, f="%.0f": "-" if v is None else f % v
lines = ["| config | precision | ddptrain GPU | PyTorch GPU | ddptrain / PyTorch | ddptrain CPU |",
         "|---|---|---|---|---|---|",
         "| | | samples/s | samples/s | ratio | samples/s |"]
for r in rows:
    lines.append(f"| {r['config']} | {r['precision']} | {fmt(r['ddptrain_gpu'])} | "
                 f"{fmt(r['pytorch_gpu'])} | {fmt(r['ddptrain_over_pytorch'], '%.2f')} | "
                 f"{fmt(r['ddptrain_cpu'])} |")
table = "\n".join(lines)
open(os.path.join(R, "bench.md"), "w").write(table + "\n")
json.dump(rows, open(os.path.join(R, "bench.json"), "w"), indent=1)
print("batch 256 per step, one GPU, synthetic data of Fashion-MNIST's shape (60000 x 1x28x28);")
print("ddptrain: median of its logged samples/s after the first log interval")
print(table)
EOF
        result bench done
    else
        result bench FAIL
    fi
fi

for f in "$W"/*.log; do
    [ -f "$f" ] && { echo "---- $(basename "$f") (last 15 lines)"; tail -15 "$f"; }
done

step "summary"
fail=0
for k in "${ORDER[@]}"; do
    printf '  %-10s %s\n' "$k" "${RESULT[$k]}"
    case $k in
    libraries|probe|ops|nccl|curve) [ "${RESULT[$k]}" = pass ] || fail=1 ;;
    sanitizer) [ "${RESULT[$k]}" = FAIL ] && fail=1 ;;
    esac
done
echo "total $(( $(date +%s) - T0 )) s; logs in $R"
rm -rf "$W"
exit $fail

#!/bin/bash
# train_curve.sh - the same short training runs on the CPU backend and on the CUDA backend
# (one rank, through NCCL, world size 1): the loss curve (every 5 steps, 40 steps) and the final
# test loss must agree within 1e-3 relative, test accuracy within 1 point. Two jobs: an MLP with
# dropout and SGD-momentum (dropout masks are the same on both backends), and a CNN with
# conv, batchnorm (2d and 1d), both pools and Adam. Exit 0 pass, 1 fail, 77 without a GPU.
# CURVE_PRECISION (fp32, tf32, bf16; default fp32): the GPU run's [train] precision, against the
# same fp32 CPU run, with tolerances for its rounding: fp32 1e-3 relative per logged loss and 1
# point of accuracy, tf32 1e-2 and 2 points, bf16 5e-2 and 5 points (every run must still learn).
# CURVE_STEPS (default 40), CURVE_TEST (default 500), CURVE_BATCH (default 64): steps of each
# run, test samples and batch size (device-check.sh --dry uses fewer); CURVE_JOBS (default
# "mlp cnn"): which of the two jobs.
set -u
PREC=${CURVE_PRECISION:-fp32}
STEPS=${CURVE_STEPS:-40}
case $PREC in
fp32) LOSS_TOL=1e-3 ACC_TOL=0.01 ;;
tf32) LOSS_TOL=1e-2 ACC_TOL=0.02 ;;
bf16) LOSS_TOL=5e-2 ACC_TOL=0.05 ;;
*) echo "FAIL: CURVE_PRECISION=$PREC: expected fp32, tf32 or bf16"; exit 1 ;;
esac
DDPTRAIN=${DDPTRAIN:?} DDP_SRC=${DDP_SRC:?}
. "$DDP_SRC/tests/gpu/lib.sh"
gpu_available
rc=$?
[ $rc = 0 ] || exit $rc
PY=$(command -v python3) || { echo "FAIL: python3 needed"; exit 1; }

work=$(mktemp -d)
[ "${DDP_GPU_KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
"$DDPTRAIN" data synth -o d.h5 --shape 1,28,28 --classes 10 --train 3000 --test "${CURVE_TEST:-500}" --seed 7 \
    >/dev/null || { echo "FAIL: data synth"; exit 1; }

cat > mlp.ini <<INI
[job]
seed = 11
[data]
file = d.h5
batch_size = ${CURVE_BATCH:-64}
[model]
layers = flatten, linear(128), relu, dropout(0.2), linear(64), relu, linear(10)
[optim]
name = sgd
lr = 0.1
momentum = 0.9
weight_decay = 0.0001
[train]
epochs = 1
max_steps = $STEPS
log_every = 5
[checkpoint]
every_epochs = 0
INI
sed -e 's/^layers = .*/layers = conv2d(8, 5, pad=2), batchnorm, relu, maxpool(2), conv2d(16, 3), relu, avgpool(2), flatten, linear(32), batchnorm, relu, linear(10)/' \
    -e 's/^name = sgd/name = adam/' -e 's/^lr = 0.1/lr = 0.003/' -e '/^momentum/d' mlp.ini > cnn.ini

gpu_select mlp.ini || exit 1
echo "device chosen through $GPU_SELECT"
fail=0
for job in ${CURVE_JOBS:-mlp cnn}; do
    if ! "$DDPTRAIN" $job.ini "${CPU_ARGS[@]}" --set job.output=$job-cpu > $job-cpu.log 2>&1; then
        echo "FAIL $job: CPU run"; tail -5 $job-cpu.log; fail=1; continue
    fi
    if ! "$DDPTRAIN" $job.ini "${GPU_ARGS[@]}" --set train.precision=$PREC --set job.output=$job-gpu \
            > $job-gpu.log 2>&1; then
        echo "FAIL $job: GPU run"; tail -5 $job-gpu.log; fail=1; continue
    fi
    gpu_check_log $job-gpu.log || { fail=1; continue; }
    "$PY" - $job-cpu/metrics.jsonl $job-gpu/metrics.jsonl "$job $PREC" $LOSS_TOL $ACC_TOL $((STEPS / 5)) \
        <<'PYEOF' || fail=1
import json, math, sys
def load(p):
    tr, ev = {}, None
    for line in open(p):
        r = json.loads(line)
        if r.get("kind") == "train":
            tr[r["step"]] = r["loss"]
        elif r.get("kind") == "eval":
            ev = r
    return tr, ev
(ct, ce), (gt, ge) = load(sys.argv[1]), load(sys.argv[2])
name, ok = sys.argv[3], True
loss_tol, acc_tol, min_logs = float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
if sorted(ct) != sorted(gt) or len(ct) < min_logs:
    print(f"FAIL {name}: logged steps differ or too few: cpu {sorted(ct)} gpu {sorted(gt)}")
    sys.exit(1)
worst = 0.0
for s in sorted(ct):
    rel = abs(gt[s] - ct[s]) / max(1.0, abs(ct[s]))
    worst = max(worst, rel)
    if not rel <= loss_tol:
        print(f"FAIL {name} step {s}: loss cpu {ct[s]:.6f} gpu {gt[s]:.6f} (rel {rel:.1e})")
        ok = False
if ce is None or ge is None:
    print(f"FAIL {name}: no eval record"); sys.exit(1)
tl = abs(ge["test_loss"] - ce["test_loss"]) / max(1.0, abs(ce["test_loss"]))
ta = abs(ge["test_acc"] - ce["test_acc"])
if not (tl <= loss_tol and ta <= acc_tol):
    print(f"FAIL {name}: test loss cpu {ce['test_loss']:.6f} gpu {ge['test_loss']:.6f}, "
          f"acc cpu {ce['test_acc']:.4f} gpu {ge['test_acc']:.4f}")
    ok = False
first, last = min(ct), max(ct)
if not ct[last] < ct[first]:
    print(f"FAIL {name}: loss did not fall ({ct[first]:.4f} -> {ct[last]:.4f})")
    ok = False
if ok:
    print(f"ok   {name}: {len(ct)} logged losses, worst rel diff {worst:.1e}; "
          f"loss {ct[first]:.4f} -> {ct[last]:.4f}; test loss diff {tl:.1e}, acc diff {ta:.4f}")
sys.exit(0 if ok else 1)
PYEOF
done
exit $fail

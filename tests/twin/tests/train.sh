#!/bin/bash
# train.sh - the NCCL path on 1, 2, 4 twin GPUs (`ddptrain-twin launch`) ends within 1e-5 of the
# 1-rank CPU run: MLP, SyncBatchNorm, residual blocks (cuDNN, and without it), a recipe, uint8 and
# float32 data. DDP_EMU_STATS counters of 2-rank runs: no allocation after step 1, no free, no
# host sync or pageable copy in steady steps, one all-reduce per optimiser step, the bytes per
# batch. A 2 s stall of rank 1 shows in rank 0's all-reduce share (docs/gpu.md).
set -u
DDPTRAIN=${DDPTRAIN:?} DDPTRAIN_TWIN=${DDPTRAIN_TWIN:?} DDP_SRC=${DDP_SRC:?}
# shellcheck source=tests/lib.sh
. "$DDP_SRC/tests/lib.sh"
PY=/usr/bin/python3
need_h5py
enter_workdir
synth_small d.h5
synth_small f.h5 --dtype float32
G=48
mlp_job plain.ini
cnn="conv2d(4, 3, pad=1), batchnorm, relu, maxpool(2), flatten, linear(16), batchnorm, relu"
sed "s/^layers = .*/layers = $cnn, linear(10)/" plain.ini > syncbn.ini
printf '[dist]\nsync_bn = true\n' >> syncbn.ini
# residual blocks (the join's add, globalavgpool, bias=false) with SyncBatchNorm inside
sed '/^layers = /d' syncbn.ini > resnet.ini
printf '%s\n' '[model]' 'layers = conv2d(4, 3, pad=1, bias=false), batchnorm, relu,' \
    '  residual(conv2d(8, 3, stride=2, pad=1, bias=false), batchnorm, relu,' \
    '           residual(conv2d(8, 3, pad=1, bias=false), batchnorm, relu)),' \
    '  residual(conv2d(8, 3, pad=1), batchnorm), globalavgpool, flatten, linear(10)' >> resnet.ini

sed 's/^epochs = .*/epochs = 1\naccumulate = 3\nlabel_smoothing = 0.1/; s/^max_steps = .*/max_steps = 10/;
     s/^test =/test =\nval_fraction = 0.1014\naugment = random_crop(pad=2), hflip\nnormalize = 0.45, 0.3/;
     s/^weight_decay = .*/&\nclip_grad_norm = 0.5/' plain.ini > recipe.ini

sed 's/^file = d.h5/file = f.h5/' plain.ini > plainf32.ini
sed 's/^test =/test =\naugment = random_crop(pad=2), hflip\nnormalize = 0.45, 0.3/' plain.ini > aug.ini

fail=0
for model in plain syncbn resnet recipe aug plainf32; do
    "$DDPTRAIN" $model.ini --set data.batch_size=$G --set job.output=$model-cpu >/dev/null ||
        { echo "FAIL $model: CPU run"; fail=1; continue; }
    # W=2n: the convolutions of the CNNs through im2col + cuBLAS, cuDNN missing (the fallback);
    # W=2c: channels-last activations ([train] layout = nhwc; syncbn's flatten turns 4x4x4 back
    # into PyTorch's order); aug and plainf32 (crops and flips on uint8 bytes, float32 data) on
    # one twin GPU
    runs="1 2 4"
    case $model in
    syncbn | resnet) runs="2 4 2n 2c" ;;
    recipe) runs="2 4" ;;
    aug | plainf32) runs="1" ;;
    esac
    for W in $runs; do
        nocudnn=0; [ $W = 2n ] && nocudnn=1
        layout=nchw; [ $W = 2c ] && layout=nhwc
        n=${W%[nc]}
        if ! DDP_EMU_NO_CUDNN=$nocudnn timeout 300 "$DDPTRAIN_TWIN" launch \
                --nproc-per-node $n $model.ini --set train.layout=$layout \
                --set data.batch_size=$((G / n)) --set job.output=$model-w$W \
                > $model-w$W.log 2>&1; then
            echo "FAIL $model W=$W: run failed"; tail -5 $model-w$W.log; fail=1; continue
        fi
        want="convolutions: cuDNN 9"
        [ $nocudnn = 1 ] && want="convolutions: cuDNN not found (.*): convolutions use im2col"
        [ $layout = nhwc ] && want="convolutions: cuDNN 9.*; activations channels-last (NHWC)"
        if ! grep -q "$want" $model-w$W.log; then
            echo "FAIL $model W=$W: no line '$want':"; grep 'convolutions' $model-w$W.log
            fail=1; continue
        fi
        if ! grep -q "comm nccl, device cuda:0 (ddptrain GPU twin 0" $model-w$W.log &&
           ! { [ $W = 1 ] && grep -q "device cuda:0 (ddptrain GPU twin 0" $model-w$W.log; }; then
            echo "FAIL $model W=$W: not on the twin GPU / NCCL:"; grep '^ddptrain' $model-w$W.log
            fail=1; continue
        fi
        if $PY "$DDP_SRC/tests/compare_h5.py" $model-w$W/model.h5 $model-cpu/model.h5 1e-5 \
                > cmp.txt; then
            echo "ok   $model W=$W twin GPUs vs CPU: $(head -1 cmp.txt)"
        else
            echo "FAIL $model W=$W twin GPUs vs CPU:"; cat cmp.txt; fail=1
        fi
    done
done
# the comparison can fail: another seed does not agree
"$DDPTRAIN" plain.ini --set data.batch_size=$G --set job.seed=78 --set job.output=other >/dev/null
if $PY "$DDP_SRC/tests/compare_h5.py" other/model.h5 plain-cpu/model.h5 1e-5 >/dev/null; then
    echo "FAIL: runs with different seeds compared equal"; fail=1
fi

# counters per step, 2 ranks; the CNN with cuDNN and with cuDNN missing (syncbn-im2col); the
# batch's bytes up per step: 24 samples of 64 elements as uint8 (float32 for plainf32) and 24
# int32 labels; also with [train] precision = bf16 (its operand casts need scratch that grows
# in step 1 only)
for m in plain syncbn; do
    sed 's/^max_steps = .*/&\nprecision = bf16/' $m.ini > $m-bf16.ini
done
for run in plain syncbn syncbn-im2col plainf32 plain-bf16 syncbn-bf16; do
    model=${run%-im2col}
    nocudnn=0; [ $run != $model ] && nocudnn=1
    xb=$((24 * 64)); [ $model = plainf32 ] && xb=$((24 * 64 * 4))
    if ! DDP_EMU_NO_CUDNN=$nocudnn DDP_EMU_STATS=$work/stats-$run timeout 300 "$DDPTRAIN_TWIN" \
            launch --nproc-per-node 2 $model.ini --set data.batch_size=24 \
            --set job.output=stats-$run > stats-$run.log 2>&1; then
        echo "FAIL: $run stats run"; tail -5 stats-$run.log; fail=1; continue
    fi
    # the frees allowed: one per cuDNN plan, at model build before any collective (the scratch
    # its algorithms were timed on), each listed in the log as "conv C..."
    PLANS=$(grep -c "  conv C" stats-$run.log) H2D=$((xb + 24 * 4)) \
        $PY - stats-$run.0 stats-$run.1 <<'PYEOF' || fail=1
import json, os, sys
bad = 0
h2d_want = int(os.environ["H2D"])
plans = int(os.environ["PLANS"])
for path in sys.argv[1:]:
    rows = [json.loads(l) for l in open(path)]
    if len(rows) != 30:
        print(f"FAIL {path}: {len(rows)} step lines, expected 30"); bad = 1; continue
    later = [r for r in rows if r["step"] > 1]
    n = sum(r["allocs"] for r in later)
    msgs = [f"{n} allocations after step 1"] if n else []
    msgs += [f"{r['frees']} frees in step {r['step']}" for r in rows
             if r["frees"] and (r["step"] > 1 or r["frees"] != plans)]
    for m in msgs:
        print(f"FAIL {path}: {m}")
    if msgs:
        bad = 1
        continue
    plain = [r for r in later if not r["log_step"]]
    logr = [r for r in later if r["log_step"]][0]
    for r in plain:
        why = []
        if r["syncs"] or r.get("syncs_by_stream"):
            why.append(f"{r['syncs']} host synchronisations {r.get('syncs_by_stream')}")
        if r["pageable_copies"]:
            why.append(f"{r['pageable_copies']} pageable copies")
        h2d = r.get("h2d_by_stream", {})
        if not h2d or "compute" in h2d or r.get("pinned_copies", 0) < 2:
            why.append(f"batch not uploaded from page-locked memory off the compute stream: "
                       f"h2d_by_stream {h2d}, pinned_copies {r.get('pinned_copies')}")
        # a replayed CUDA graph also takes up its step values (cuda/internal.cuh struct graph_vals, 40 B)
        want = h2d_want + (40 if r.get("graph_launches") else 0)
        if r["h2d_bytes"] != want:
            why.append(f"{r['h2d_bytes']} bytes up, expected {want} (the batch as stored: "
                       "uint8 as bytes, float32 as floats, plus the labels)")
        for w in why:
            print(f"FAIL {path}: step {r['step']} (not a log step): {w}")
        bad |= bool(why)
    if bad:
        continue
    keys = ("syncs", "launches", "collectives", "h2d_bytes", "d2h_bytes", "pageable_copies",
            "pinned_copies", "syncs_by_stream", "h2d_by_stream")
    print(f"ok   {path}: step 1 allocs {rows[0]['allocs']}; later steps 0 allocs; frees only "
          f"the {plans} build-time timing scratch; "
          "per plain step " + ", ".join(f"{k} {plain[0][k]}" for k in keys) + "; per log step "
          + ", ".join(f"{k} {logr[k]}" for k in keys))
sys.exit(bad)
PYEOF
done
# accumulate = 3 all-reduces once per optimiser step (DDP's no_sync on the other micro-batches):
# as many collectives per step as the plain run, which has the same buckets; clip_grad_norm
# keeps its factor on the device (clip_scale): 0 host synchronisations off log steps
if DDP_EMU_STATS=$work/stats-recipe timeout 300 "$DDPTRAIN_TWIN" launch --nproc-per-node 2 \
        recipe.ini --set data.batch_size=24 --set job.output=stats-recipe > stats-recipe.log 2>&1; then
    $PY - stats-plain.0 stats-recipe.0 <<'PYEOF' || fail=1
import json, sys
def per_step(path):
    rows = [json.loads(l) for l in open(path)]
    return {r["collectives"] for r in rows if r["step"] > 1 and not r["log_step"]}
plain, rec = per_step(sys.argv[1]), per_step(sys.argv[2])
syncs = {r["step"]: r["syncs"] for r in map(json.loads, open(sys.argv[2]))
         if r["step"] > 1 and not r["log_step"] and r["syncs"]}
if len(plain) == 1 and rec == plain and not syncs:
    print(f"ok   accumulate = 3: {rec.pop()} collectives per optimiser step, as without "
          "accumulation; with clip_grad_norm 0 host synchronisations off log steps")
else:
    print(f"FAIL accumulate = 3: collectives per step {sorted(rec)}, without accumulation "
          f"{sorted(plain)}; host synchronisations by step (clip_grad_norm): {syncs}")
    sys.exit(1)
PYEOF
else
    echo "FAIL: recipe stats run"; tail -5 stats-recipe.log; fail=1
fi
# the all-reduce share on GPUs is the compute stream's stall on the buckets, timed on the
# device (grad_sync.h): rank 1 stalls 2 s after step 15, so rank 0's device waits about that
# long in step 16's all-reduce while its host does not (cudaStreamWaitEvent); rank 0's record
# at step 20 must show most of that interval, the others far less; no busbw (not measured on
# GPUs) in metrics.jsonl or the log. Uncaptured steps: the twin replays a graph's nodes one
# after another, so it cannot time a stall inside one (a GPU runs them as their edges allow)
if DDP_TEST_FAULT=1:15:stall:2 timeout 300 "$DDPTRAIN_TWIN" launch --nproc-per-node 2 \
        plain.ini --set data.batch_size=24 --set train.cuda_graph=off \
        --set job.output=share > share.log 2>&1; then
    $PY - share/metrics.jsonl share.log <<'PYEOF' || fail=1
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
frac = {r["step"]: r.get("allreduce_frac") for r in rows if r["kind"] == "train"}
lines = [l for l in open(sys.argv[2]) if re.search(r" step \d+/30 ", l)]
bad = [r for r in rows if "busbw_gbs" in r] + [l for l in lines if "busbw" in l]
if (sorted(frac) == [10, 20, 30] and frac[20] >= 0.5 and frac[30] < 0.5 and not bad
        and len(lines) == 3 and all(re.search(r" allreduce \d+% elapsed", l) for l in lines)):
    print(f"ok   all-reduce share timed on the device: {frac[20]:.2f} at step 20 (rank 1 "
          f"stalled 2 s), {frac[10]:.3f} and {frac[30]:.3f} otherwise; no busbw on GPUs")
else:
    print(f"FAIL all-reduce share on the device: {frac}; busbw: {bad[:2]}; lines: {lines}")
    sys.exit(1)
PYEOF
else
    echo "FAIL: share run"; tail -5 share.log; fail=1
fi
exit $fail

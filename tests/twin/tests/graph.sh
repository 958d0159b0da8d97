#!/bin/bash
# graph.sh - [train] cuda_graph on the GPU twin (docs/gpu.md, CUDA Graphs): on and off give
# bit-identical weights on 1 and 2 twin GPUs (MLP with AdamW and warmup + cosine, CNN with
# SyncBatchNorm under Nesterov and onecycle, clipping, accumulation over whole epochs); one graph
# launch per steady step, no host launch, allocation or sync; resume from a checkpoint is bitwise;
# a dead peer during a replay ends rank 0 with exit 5 within timeout_s; on the CPU backend
# cuda_graph = on stops with one line (exit 2), auto runs.
set -u
DDPTRAIN=${DDPTRAIN:?} DDPTRAIN_TWIN=${DDPTRAIN_TWIN:?} DDP_SRC=${DDP_SRC:?}
PY=/usr/bin/python3
$PY -c 'import h5py, numpy' 2>/dev/null || { echo "python3-h5py needed"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
"$DDPTRAIN" data synth -o d.h5 --shape 1,8,8 --classes 10 --train 2003 --test 10 --seed 5 \
    >/dev/null || exit 1
cat > mlp.ini <<INI
[job]
seed = 77
[data]
file = d.h5
test =
[model]
layers = flatten, linear(32), relu, dropout(0.2), linear(16), relu, linear(10)
[optim]
name = adamw
lr = 0.01
weight_decay = 0.01
schedule = cosine
warmup_epochs = 1
[train]
epochs = 3
max_steps = 30
log_every = 10
INI
cnn="conv2d(4, 3, pad=1), batchnorm, relu, maxpool(2), flatten, dropout(0.3), linear(16)"
sed "s/^layers = .*/layers = $cnn, batchnorm, relu, linear(10)/;
     s/^name = adamw/name = sgd\nmomentum = 0.9\nnesterov = true/; s/^lr = .*/lr = 0.05/;
     s/^schedule = .*/schedule = onecycle/; /^warmup_epochs/d" mlp.ini > cnn.ini
printf '[dist]\nsync_bn = true\n' >> cnn.ini
# the MLP with its gradient clipped to a norm of 0.05, small enough to change the weights
sed 's/^weight_decay = .*/&\nclip_grad_norm = 0.05/' mlp.ini > clip.ini
# accumulation: each micro-batch role (first, middle, last) a graph per input set; 10 steps
# stay inside the first epoch (no short batch): K = 4 uses 4 of the 6 slots, K = 3 all 6
sed 's/^max_steps = .*/max_steps = 10\naccumulate = 4/' mlp.ini > acc.ini
sed 's/^max_steps = .*/max_steps = 10\naccumulate = 3/' cnn.ini > cnnacc.ini
cmp_h5() { $PY "$DDP_SRC/tests/compare_h5.py" "$@"; }
fail=0
# run NAME JOB W MODE [--set ...]: W twin GPUs, batch 24 per rank, counters in stats-NAME.*
run() {
    local name=$1 job=$2 W=$3 mode=$4
    shift 4
    DDP_EMU_STATS=$work/stats-$name timeout 300 "$DDPTRAIN_TWIN" launch --nproc-per-node "$W" \
        "$job" --set data.batch_size=24 --set train.cuda_graph="$mode" \
        --set job.output="$name" "$@" > "$name.log" 2>&1
}
for job in mlp cnn clip acc cnnacc; do
    for W in 1 2; do
        for mode in on off; do
            run $job-w$W-$mode $job.ini $W $mode ||
                { echo "FAIL $job W=$W cuda_graph=$mode: run failed"; tail -5 $job-w$W-$mode.log
                  fail=1; }
        done
        if ! grep -q "steady-state step is captured" $job-w$W-on.log; then
            echo "FAIL $job W=$W: graphs not in use"; fail=1
        elif r=$(cmp_h5 $job-w$W-on/model.h5 $job-w$W-off/model.h5 0); then
            echo "ok   $job W=$W: cuda_graph on = off, bitwise: $r"
        else
            echo "FAIL $job W=$W: cuda_graph on vs off: $r"; fail=1
        fi
    done
    K=$(sed -n 's/^accumulate = //p' $job.ini) S=$(sed -n 's/^max_steps = //p' $job.ini) \
        $PY - stats-$job-w2-on.0 stats-$job-w2-on.1 <<'PYEOF' || fail=1
import json, os, sys
bad = 0
K, S = int(os.environ["K"] or 1), int(os.environ["S"])
for path in sys.argv[1:]:
    rows = [json.loads(l) for l in open(path)]
    later = [r for r in rows if r["step"] > 3]
    why = []
    for r in later:
        w = []
        if r["graph_launches"] != K or r["launches"] != 0:
            w.append(f"{r['graph_launches']} graph launches, {r['launches']} kernel launches")
        if r["allocs"] or r["frees"]:
            w.append(f"{r['allocs']} allocs, {r['frees']} frees")
        if r["log_step"]:  # the loss read back and its all-reduce come after the step
            pass
        elif r["syncs"] or r["syncs_by_stream"] or r["pageable_copies"]:
            w.append(f"{r['syncs']} host synchronisations {r['syncs_by_stream']}, "
                     f"{r['pageable_copies']} pageable copies")
        elif set(r["h2d_by_stream"]) != {"copy"}:
            w.append(f"h2d_by_stream {r['h2d_by_stream']}")
        if w:
            why.append(f"step {r['step']}: " + "; ".join(w))
    if len(rows) != S or len(later) != S - 3 or why:
        print(f"FAIL {path}: {len(rows)} steps; " + " | ".join(why[:4])); bad = 1
    else:
        r = later[0]
        print(f"ok   {path}: steps 4-{S} {K} graph launch(es) each ({r['graph_ops']} operations, "
              f"{r['collectives']} collectives), 0 kernel launches, 0 allocs, 0 pageable, "
              f"no sync off log steps; capture steps {[x['launches'] for x in rows[:3]]} launches")
sys.exit(bad)
PYEOF
done

if r=$(cmp_h5 clip-w2-on/model.h5 mlp-w2-on/model.h5 0); then
    echo "FAIL clip_grad_norm = 0.05 changed nothing: $r"; fail=1
else
    echo "ok   clip_grad_norm = 0.05 changes the weights: $r"
fi

# resume: died after step 17 with a checkpoint at step 10, run again: as the uninterrupted run
DDP_TEST_FAULT=0:17:exit:9 run res mlp.ini 1 on --set checkpoint.every_steps=10
rc=$?
run res mlp.ini 1 on --set checkpoint.every_steps=10 || { echo "FAIL: resume"; fail=1; }
if [ $rc = 9 ] && grep -q "resuming from" res.log &&
   r=$(cmp_h5 res/model.h5 mlp-w1-on/model.h5 0); then
    echo "ok   died at step 17 (exit $rc), resumed with graphs: bitwise the uninterrupted run: $r"
else
    echo "FAIL resume with graphs: first exit $rc; $(grep -m1 resuming res.log); ${r:-}"
    tail -3 res.log; fail=1
fi

# peer death: rank 1 exits after step 12; rank 0 replays step 13's graph, which waits in NCCL
# shellcheck source=tests/hold_port.sh
. "${DDP_SRC:?}/tests/hold_port.sh"
hold_ports 1 || { echo "FAIL: cannot hold a port"; exit 1; }
port=$HELD_PORTS
for r in 0 1; do
    DDP_TEST_FAULT=1:12:exit:9 CUDA_VISIBLE_DEVICES=$r timeout 120 "$DDPTRAIN_TWIN" launch \
        --nnodes 2 --node-rank $r --nproc-per-node 1 --master-addr 127.0.0.1 \
        --master-port "$port" mlp.ini --set train.cuda_graph=on --set data.batch_size=24 \
        --set train.max_steps=1000 --set train.log_every=5 --set dist.timeout_s=10 \
        --set job.output=pd > pd$r.txt 2>&1 &
    eval "pid$r=$!"
done
wait "$pid1"; rc1=$?
wait "$pid0"; rc0=$?
if [ $rc1 = 9 ] && [ $rc0 = 5 ] && grep -q "rank 1" pd0.txt; then
    echo "ok   rank 1 died after step 12: rank 0 exit 5: $(grep -m1 'rank 1' pd0.txt)"
else
    echo "FAIL peer death with graphs: rank 0 exit $rc0, rank 1 exit $rc1"; tail -3 pd0.txt
    fail=1
fi

# refusals and auto's note
# refuse NAME WANT_PATTERN CMD...: exit 2 with one line (besides the launcher's) matching
refuse() {
    local name=$1 pat=$2
    shift 2
    "$@" > $name.txt 2>&1
    local rc=$? n
    n=$(grep -c "cuda_graph" $name.txt)
    if [ $rc = 2 ] && [ "$n" -ge 1 ] && grep -q "$pat" $name.txt; then
        echo "ok   $name: exit 2: $(grep -m1 "$pat" $name.txt)"
    else
        echo "FAIL $name: exit $rc (want 2), output:"; cat $name.txt; fail=1
    fi
}
refuse on-cpu "cuda_graph = on: the step cannot be captured: the CPU backend .* set cuda_graph" \
    "$DDPTRAIN" mlp.ini --set train.cuda_graph=on --set job.output=rc
# accumulate = 5 over two whole epochs on one twin GPU: 84 micro-batches an epoch, the last
# short (uncaptured) and in a step of 4: on = off bitwise
for mode in on off; do
    run accw1-$mode mlp.ini 1 $mode --set train.accumulate=5 --set train.max_steps=0 \
        --set train.epochs=2 || { echo "FAIL accumulate over epochs: $mode"; fail=1; }
done
if r=$(cmp_h5 accw1-on/model.h5 accw1-off/model.h5 0); then
    echo "ok   accumulate = 5 over 2 epochs (short batch, short step): on = off, bitwise: $r"
else
    echo "FAIL accumulate = 5 over 2 epochs: cuda_graph on vs off: $r"; fail=1
fi
"$DDPTRAIN" mlp.ini --set train.max_steps=3 --set job.output=ac > auto-cpu.txt 2>&1
if [ $? = 0 ] && [ -z "$(grep -i graph auto-cpu.txt | grep -v 'cuda_graph=auto')" ]; then
    echo "ok   auto on the CPU backend: runs, no note"
else
    echo "FAIL auto on the CPU backend"; grep -i graph auto-cpu.txt; fail=1
fi
exit $fail

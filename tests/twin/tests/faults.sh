#!/bin/bash
# faults.sh - the GPU twin finds planted bugs, and ddptrain reports GPU faults as such
# (suite twin). Each planted bug must make the twin report it with the plant and pass without:
#   host-read, kernel-host, missing-wait, slot-reuse, cudnn-workspace, cudnn-host, capture-sync,
#     capture-freed, capture-fork, capture-rules
#     (test_twin_faults, under DDP_EMU_LATE=1)
#   sticky kernel error in rank 1 of a 2-rank ddptrain-twin run: rank 1 says its own GPU
#     faulted and exits 1 (not "a peer may have died"); rank 0 exits 5
#   two ranks on one twin GPU of one host: NCCL's "Duplicate GPU detected", exit 4 (setup)
set -u
DDPTRAIN=${DDPTRAIN:?} DDPTRAIN_TWIN=${DDPTRAIN_TWIN:?} DDP_BUILD=${DDP_BUILD:?}
T=$DDP_BUILD/tests/twin/tests/test_twin_faults
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fail=0

# expect CASE RC PATTERN: the planted run exits RC with PATTERN in its output; clean passes
expect() {
    local case=$1 want=$2 pat=$3 rc
    DDP_EMU_LATE=1 timeout 60 "$T" "$case" plant > plant.txt 2>&1
    rc=$?
    if [ $rc = "$want" ] && grep -q "$pat" plant.txt; then
        echo "ok   $case planted: exit $rc, reported: $(grep -m1 "$pat" plant.txt)"
    else
        echo "FAIL $case planted: exit $rc (want $want), output:"; cat plant.txt; fail=1
    fi
    DDP_EMU_LATE=1 timeout 60 "$T" "$case" clean > clean.txt 2>&1
    rc=$?
    if [ $rc = 0 ]; then
        echo "ok   $case clean: $(tail -1 clean.txt)"
    else
        echo "FAIL $case clean: exit $rc, output:"; cat clean.txt; fail=1
    fi
}
expect host-read 139 "host access to device memory"
expect kernel-host 1 "GPU fault: kernel k_scale: argument 1 .* is not device memory"
expect missing-wait 3 "FAIL (bug exposed): parameters after the optimiser step"
# the twin keeps a page-locked source read-only while its copy is queued: the refill faults
expect slot-reuse 139 "host write to page-locked memory at .* still queued"
# the twin's cuDNN checks its operands: a workspace smaller than planned, a host input (the
# legacy API's calls, or the graph API's execute where one of its engines was kept)
expect cudnn-workspace 1 \
    "GPU fault: cudnn\(Convolution[A-Za-z]*\|BackendExecute\): operand workSpace .* is not inside"
expect cudnn-host 1 \
    "GPU fault: cudnn\(ConvolutionForward\|BackendExecute\): operand x .* is not inside"
# CUDA graphs: a host sync inside the captured step, a buffer freed under a graph, a stream
# forked into a capture and not joined back
expect capture-sync 1 "cudaStreamSynchronize on compute during stream capture .* invalidated"
expect capture-freed 1 "GPU fault: graph launch: .* freed after the capture"
expect capture-fork 1 "FAIL (bug exposed): cudaStreamEndCapture: cudaErrorStreamCaptureUnjoined"
# each call CUDA forbids in a global-mode capture fails and invalidates the capture (8 calls)
expect capture-rules 1 "exposed: cudaStreamQuery during a capture"
n=$(grep -c "^exposed:" plant.txt)
[ "$n" = 8 ] || { echo "FAIL capture-rules: $n of 8 forbidden calls exposed:"; cat plant.txt; fail=1; }

# two ranks as two one-rank "nodes" of this host: each launcher returns its own rank's code;
# float32 data: 24 launches a step (uint8 data add u8_to_float's), as the kernel number below counts
"$DDPTRAIN" data synth -o d.h5 --shape 1,8,8 --classes 10 --train 600 --test 10 --seed 5 \
    --dtype float32 >/dev/null || exit 1
cat > j.ini <<INI
[data]
file = d.h5
test =
batch_size = 16
[model]
layers = flatten, linear(32), relu, linear(16), relu, linear(10)
[train]
max_steps = 30
log_every = 10
# DDP_EMU_FAIL=kernel:N counts kernel launches from the host: replayed graphs launch none
cuda_graph = off
[dist]
timeout_s = 20
INI
# shellcheck source=tests/hold_port.sh
. "${DDP_SRC:?}/tests/hold_port.sh"
hold_ports 3 || { echo "FAIL: cannot hold a port"; exit 1; }
read -ra ports <<<"$HELD_PORTS"
run2_n=0 # runs so far: each run has a port of its own
# run2 VIS0 VIS1 ENV...: both ranks, rank r with CUDA_VISIBLE_DEVICES=VISr; codes in rc0 rc1
run2() {
    local v0=$1 v1=$2 pids=() port=${ports[run2_n]}
    shift 2
    run2_n=$((run2_n + 1))
    for r in 0 1; do
        local v=$v0
        [ $r = 1 ] && v=$v1
        env "$@" CUDA_VISIBLE_DEVICES="$v" timeout 120 "$DDPTRAIN_TWIN" launch --nnodes 2 \
            --node-rank $r --nproc-per-node 1 --master-addr 127.0.0.1 --master-port "$port" \
            j.ini --set job.output=out$r > r$r.txt 2>&1 &
        pids+=($!)
    done
    wait "${pids[0]}"; rc0=$?
    wait "${pids[1]}"; rc1=$?
}
# kernel 117 of rank 1 (24 launches a step) is the last backward kernel of step 5: under
# DDP_EMU_LATE it runs (and faults) only when the all-reduce's event is queried, the old "peer
# may have died" path
run2 0 1 DDP_EMU_LATE=1 DDP_EMU_FAIL=kernel:117 DDP_EMU_FAIL_RANK=1
if [ $rc1 = 1 ] && grep -q "GPU fault: kernel" r1.txt && grep -q "not of a peer" r1.txt &&
   ! grep -q "may have died" r1.txt && [ $rc0 = 5 ]; then
    echo "ok   sticky kernel error: rank 1 exit 1: $(grep -m1 'not of a peer' r1.txt);" \
        "rank 0 exit 5"
else
    echo "FAIL sticky kernel error: rank 1 exit $rc1, rank 0 exit $rc0:"; cat r1.txt r0.txt
    fail=1
fi
run2 0 1
if [ $rc0 = 0 ] && [ $rc1 = 0 ]; then
    echo "ok   the same run without the fault: both ranks exit 0"
else
    echo "FAIL clean 2-rank run: exit $rc0 $rc1"; tail -3 r0.txt r1.txt; fail=1
fi
run2 0 0
if [ $rc0 = 4 ] && [ $rc1 = 4 ] && grep -q "Duplicate GPU detected" r0.txt; then
    echo "ok   two ranks on twin GPU 0 of one host:" \
        "$(grep -m1 -o 'Duplicate GPU detected[^(]*' r0.txt)"
else
    echo "FAIL duplicate GPU: exit $rc0 $rc1:"; cat r0.txt r1.txt; fail=1
fi
exit $fail

#!/bin/bash
# overlap.sh - gradient buckets are contiguous slices of the flat gradient buffer, and the first
# bucket's all-reduce starts before backward has reached the first layer: the trainer's trace
# (DDP_TEST_TRACE) of the first step on 2 MPI ranks records the order of events.
set -u
DDPTRAIN=${DDPTRAIN:?}
command -v mpirun >/dev/null || { echo "mpirun not installed"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
"$DDPTRAIN" data synth -o d.h5 --shape 1,28,28 --classes 10 --train 512 --test 0 >/dev/null 2>&1 ||
    "$DDPTRAIN" data synth -o d.h5 --shape 1,28,28 --classes 10 --train 512 --test 16 >/dev/null || exit 1
cat > j.ini <<INI
[data]
file = d.h5
test =
batch_size = 16
[model]
layers = flatten, linear(256), relu, linear(256), relu, linear(256), relu, linear(10)
[train]
max_steps = 2
[dist]
bucket_mb = 0.25
INI
DDP_TEST_TRACE=$work/trace.txt timeout 120 mpirun -n 2 "$DDPTRAIN" j.ini --set job.output=out \
    --set train.threads=1 > log.txt 2>&1 || { cat log.txt; exit 1; }
cat trace.txt
awk '
/^bucket [0-9]+ off/ { off[$2] = $4; n[$2] = $6; nb++ }
/^layer_done/ { ev++; if (first_layer_done == "" ) {}; last_layer[ev] = $2; ld[$2] = ev }
/^bucket_start/ { ev++; if (!($2 in bs)) bs[$2] = ev }
END {
    fail = 0
    if (nb < 2) { print "FAIL: expected several buckets, got " nb; fail = 1 }
    if (off[0] != 0) { print "FAIL: bucket 0 does not start at 0"; fail = 1 }
    for (b = 1; b < nb; b++)
        if (off[b] != off[b-1] + n[b-1]) { print "FAIL: bucket " b " is not contiguous"; fail = 1 }
    # layer 1 is the first layer with parameters (0 is flatten)
    if (!(0 in bs) || !(1 in ld)) { print "FAIL: events missing"; fail = 1 }
    else if (bs[0] >= ld[1]) { print "FAIL: bucket 0 started after backward reached layer 1"; fail = 1 }
    else print "ok: bucket 0 started at event " bs[0] ", backward reached layer 1 at event " ld[1]
    if (!fail) print "ok: " nb " contiguous buckets"
    exit fail
}' trace.txt

#!/bin/bash
# failfast.sh MODE [VICTIM] - 4 ranks under mpirun told not to tear the job down itself
# (orte_abort_on_non_zero_status 0, as srun without -K does not), [dist] timeout_s left at its
# default of 300 s. When rank VICTIM (default 2; rank 0 is the hub of the watch, the others
# notice its death on their own) dies, every other rank exits 5 naming it (rank, host, pid)
# within 10 s of the death (liveness watch, src/comm/liveness.h):
#   kill   kill -9 of the victim mid-training ("closed its connection without saying goodbye")
#   stop   SIGSTOP of the victim: it keeps its sockets open but sends nothing ("is unresponsive")
#   exit   the victim leaves on its own with exit code 3 after step 30 (DDP_TEST_FAULT)
#   suspend  nobody dies: every rank is stopped for 8 s, then continued (scontrol suspend and
#          resume): each watch sees that the silence was its own; all ranks finish with exit 0
#          (the 8 s stop is the thing tested, not a wait for an event)
#   slow   nobody dies: rank 0 stalls 8 s (longer than the 5 s heartbeat bound) in its training
#          loop at the last step while the others wait for it: all ranks finish with exit 0 and
#          nobody is named (heartbeats come from a thread of their own, not the training loop)
# Without the watch the survivors of kill/stop/exit wait 300 s: the test gives up after 20 s.
set -u
MODE=${1:?usage: failfast.sh kill|stop|exit|suspend|slow [VICTIM]}
VICTIM=${2:-2}
DDPTRAIN=${DDPTRAIN:?}
command -v mpirun >/dev/null || { echo "mpirun not installed"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
LIMIT=10    # seconds from the death to the last survivor's exit
DEADLINE=20 # give up waiting for the survivors after this many seconds
# wait_for COND SECONDS: poll a condition (a file that appears, a line count) with a deadline
wait_for() {
    local end=$((SECONDS + $2))
    until eval "$1"; do
        [ $SECONDS -ge $end ] && return 1
        sleep 0.05
    done
}
work=$(mktemp -d)
mp=
cleanup() {
    # nothing may outlive the test: the ranks (stopped or waiting) and mpirun
    for f in "$work"/pid.*; do [ -s "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
    printf 'go\ngo\ngo\ngo\n' 2>/dev/null >&9 # release the wrappers
    [ -n "$mp" ] && ! wait_for "! kill -0 $mp 2>/dev/null" 10 && kill -9 "$mp" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
cd "$work" || exit 1
fail=0
bad() { echo "FAIL: $*"; fail=1; }

"$DDPTRAIN" data synth -o d.h5 --shape 64 --classes 4 --train 4000 --test 40 >/dev/null || exit 1
epochs=1000
[ "$MODE" = slow ] && epochs=1 # 500 steps of 8 samples: seconds
[ "$MODE" = suspend ] && epochs=3
printf '[data]\nfile = d.h5\nbatch_size = 2\n[model]\nlayers = linear(32), relu, linear(4)
[train]\nepochs = %d\nlog_every = 20\nthreads = 1\n[checkpoint]\nevery_epochs = 1\n[job]
output = out\n' "$epochs" > j.ini
case $MODE in
exit) export DDP_TEST_FAULT=$VICTIM:30:exit:3 ;;
slow) export DDP_TEST_FAULT=0:500:stall:8 ;;
kill | stop | suspend) ;;
*) echo "unknown mode $MODE"; exit 2 ;;
esac
# Each rank's wrapper records its pid, then its exit code and the time it exited, and stays
# until the test releases it (a line on the fifo `release`): so mpirun sees no process end
# until then and reacts to nothing but what the ranks do, as with abort-on-nonzero off. The
# ranks must end on their own. (Without wrappers, Open MPI 4.1's mpirun with
# orte_abort_on_non_zero_status 0 never returns after a rank was killed and the others exited
# non-zero, though no rank is left; and a wrapper that exits while its MPI process never
# finalized makes mpirun tear the job down.)
mkfifo release
exec 9<> release # held open by the test: lines written wait there for the wrappers
cat > wrap.sh <<W
#!/bin/bash
exec 3<> $work/release
setsid bash -c '"$DDPTRAIN" j.ini & echo \$! > pid.\$OMPI_COMM_WORLD_RANK; wait \$!
    echo "\$OMPI_COMM_WORLD_RANK \$? \$EPOCHREALTIME" >> codes.txt' &
read -r -t 150 -u 3 _
W
chmod +x wrap.sh
: > codes.txt
timeout 120 mpirun -n 4 --mca orte_abort_on_non_zero_status 0 ./wrap.sh > run.out 2> run.err &
mp=$!

survivors_done() { [ "$(awk -v v=$VICTIM '$1 != v' codes.txt | wc -l)" -ge 3 ]; }

if [ "$MODE" = kill ] || [ "$MODE" = stop ]; then
    wait_for '[ -s out/metrics.jsonl ] && [ -s pid.$VICTIM ]' 60 ||
        { cat run.err; bad "training did not start"; exit 1; }
    vpid=$(cat pid.$VICTIM)
    t0=$EPOCHREALTIME
    if [ "$MODE" = kill ]; then kill -9 "$vpid"; else kill -STOP "$vpid"; fi
elif [ "$MODE" = exit ]; then
    wait_for "grep -q '^$VICTIM ' codes.txt" 60 ||
        { cat run.err; bad "rank $VICTIM did not exit"; exit 1; }
    vpid=$(cat pid.$VICTIM)
    t0=$(awk -v v=$VICTIM '$1 == v {print $3}' codes.txt)
fi

if [ "$MODE" = suspend ]; then
    wait_for '[ -s out/metrics.jsonl ] && [ "$(ls pid.* | wc -l)" -eq 4 ]' 60 ||
        { cat run.err; bad "training did not start"; exit 1; }
    all=$(cat pid.*)
    kill -STOP $all
    sleep 8
    kill -CONT $all
fi
if [ "$MODE" = slow ] || [ "$MODE" = suspend ]; then
    wait_for '[ "$(wc -l < codes.txt)" -ge 4 ]' 90 || bad "the run did not finish"
    cat codes.txt
    [ "$(awk '$2 != 0' codes.txt | wc -l)" -eq 0 ] || bad "a rank did not exit 0"
    [ "$MODE" = slow ] && { grep "DDP_TEST_FAULT: stall 8" run.err || bad "rank 0 did not stall"; }
    grep "peer gone" run.err && bad "a live rank was taken for a dead one"
    grep -q '"kind":"summary"' out/metrics.jsonl || bad "no summary written"
    exit $fail
fi

if ! wait_for survivors_done $DEADLINE; then
    cat run.err
    bad "$(awk -v v=$VICTIM '$1 != v' codes.txt | wc -l) of 3 survivors had exited $DEADLINE s" \
        "after rank $VICTIM died (they wait for [dist] timeout_s = 300 s)"
    exit 1
fi
last=$(awk -v v=$VICTIM '$1 != v {print $3}' codes.txt | sort -n | tail -1)
took=$(awk -v a="$t0" -v b="$last" 'BEGIN {printf "%.2f", b - a}')
host=$(hostname)
why="closed its connection without saying goodbye"
[ "$MODE" = stop ] && why="is unresponsive"
echo "$MODE: rank $VICTIM (pid $vpid) died; the last survivor exited ${took} s later"
grep "peer gone" run.err
awk -v t="$took" -v l=$LIMIT 'BEGIN {exit !(t <= l)}' || bad "took ${took} s > $LIMIT s"
for r in 0 1 2 3; do
    [ $r = "$VICTIM" ] && continue
    code=$(awk -v r=$r '$1 == r {print $2}' codes.txt)
    [ "$code" = 5 ] || bad "rank $r exited '$code', expected 5"
    grep -q "rank $r: peer gone: rank $VICTIM on $host (pid $vpid) $why" run.err ||
        bad "rank $r did not name rank $VICTIM on $host (pid $vpid) ($why)"
done
kill -9 "$vpid" 2>/dev/null # the stopped one
wait_for "! kill -0 $vpid 2>/dev/null" 10 || bad "rank $VICTIM (pid $vpid) still there"
exit $fail

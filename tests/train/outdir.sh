#!/bin/bash
# outdir.sh - the output directory is never shared silently (docs/checkpoints.md, "The output
# directory"), on real runs, in seven sections below: failures before the first step leave a
# finished run byte-identical; keys that only extend a run resume; resume = never moves the old
# run aside; one run per directory (1 rank and 2 MPI ranks, flock); [job] output patterns; a
# finished job run again writes nothing; %j outputs warn that a resubmission starts afresh.
set -u
DDPTRAIN=${DDPTRAIN:?}
PY=/usr/bin/python3
$PY -c 'import h5py' 2>/dev/null || { echo "python3-h5py needed"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
busy_pid=
trap '[ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null; rm -rf "$work"' EXIT
cd "$work" || exit 1
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
# sums DIR [FIND-ARGS]: sha256 of every file under DIR but previous-*/ (relative names), one line
sums() {
    local d=$1
    shift
    (cd "$d" && find . -type f ! -path './previous-*' "$@" | sort | xargs -r sha256sum | sha256sum)
}
# one_line FILE PATTERN...: FILE has exactly one line and every PATTERN (fixed strings)
one_line() {
    local f=$1
    shift
    [ "$(grep -c . "$f")" -eq 1 ] || return 1
    for p in "$@"; do grep -qF -- "$p" "$f" || return 1; done
}

"$DDPTRAIN" data synth -o d.h5 --shape 1,8,8 --classes 4 --train 768 --test 64 --seed 5 \
    >/dev/null || exit 1
cat > j.ini <<INI
[job]
output = fin
[data]
file = d.h5
batch_size = 16
[model]
layers = flatten, linear(16), relu, linear(4)
[optim]
lr = 0.05
momentum = 0.9
[train]
epochs = 1
log_every = 8
threads = 1
INI

# ---- 1. failures before the first step leave a finished run alone --------------------------
"$DDPTRAIN" j.ini > fin.log 2>&1 || { bad "the first run failed"; cat fin.log; exit 1; }
steps=$(sed -n 's/.*"kind":"summary".*"steps":\([0-9]*\).*/\1/p' fin/metrics.jsonl)
before=$(sums fin)
try() { # NAME CODE PATTERNS... -- ARGS...
    local name=$1 code=$2 pats=()
    shift 2
    while [ "$1" != -- ]; do pats+=("$1"); shift; done
    shift
    timeout 60 "$DDPTRAIN" j.ini "$@" > try.out 2> try.err
    local rc=$?
    if [ $rc -eq "$code" ] && one_line try.err "${pats[@]}" && [ "$(sums fin)" = "$before" ]; then
        ok "$name: exit $rc, directory unchanged: $(head -c 230 try.err)"
    else
        bad "$name: exit $rc (want $code), or the directory changed, or the message lacks" \
            "'${pats[*]}'"
        head -3 try.err
    fi
}
try "missing dataset" 3 "nope.h5" -- --set data.file=nope.h5
try "impossible model" 2 "conv2d" -- --set "model.layers=flatten, conv2d(4, 3)"
try "another lr" 2 "fin/checkpoints/ckpt-" "written by a different job" "optim.lr 0.05 -> 0.2" \
    "resume = never" "another [job] output" -- --set optim.lr=0.2
try "another model and seed" 2 "job.seed 1234 -> 7" \
    "model.layers 'flatten, linear(16), relu, linear(4)' -> 'flatten, linear(8), relu, linear(4)'" \
    -- --set "model.layers=flatten, linear(8), relu, linear(4)" --set job.seed=7
try "another global batch" 2 "global batch (data.batch_size x ranks) 16 -> 32" -- \
    --set data.batch_size=32
ck=$(ls fin/checkpoints/ckpt-*.h5 | tail -1)
try "resume = PATH of another job" 2 "--set checkpoint.resume" "optim.name sgd -> adam" \
    "[model] init = $ck" -- --set checkpoint.resume="$ck" --set optim.name=adam \
    --set optim.momentum=0

# ---- 2. differences that only extend the run ----------------------------------------------
cp fin/metrics.jsonl first.jsonl
"$DDPTRAIN" j.ini --set train.epochs=2 --set train.log_every=5 --set checkpoint.every_steps=7 \
    --set train.threads=2 --set dist.timeout_s=60 > ext.out 2> ext.err
rc=$?
new=$(ls fin/checkpoints/ckpt-*.h5 | tail -1)
if [ $rc -eq 0 ] && grep -q "resuming from fin/checkpoints/ckpt-0*$steps.h5" ext.out &&
    cmp -s first.jsonl <(head -n "$(wc -l < first.jsonl)" fin/metrics.jsonl) &&
    grep -q "\"kind\":\"summary\".*\"epochs\":2,\"steps\":$((2 * steps))," fin/metrics.jsonl &&
    grep -qx "epochs = 2" fin/job.ini && grep -qx "every_steps = 7" fin/job.ini &&
    $PY - "$new" <<'PY'
import sys, h5py
job = h5py.File(sys.argv[1], "r").attrs["job"]
job = job.decode() if isinstance(job, bytes) else job
lines = job.splitlines()
assert lines[0].startswith("; effective job:"), lines[0]
assert "epochs = 2" in lines and "every_steps = 7" in lines and "lr = 0.05" in lines, job
PY
then
    ok "epochs 1 -> 2, log_every, every_steps, threads, timeout changed: resumed at step $steps," \
        "metrics appended, job.ini and the checkpoint's job attribute hold the effective job"
else
    bad "allowed differences: rc $rc"; head -3 ext.err; grep -i resum ext.out
fi

# ---- 3. resume = never moves the earlier run aside ----------------------------------------
before=$(sums fin ! -name .ddptrain.lock) # the lock file stays where it is
"$DDPTRAIN" j.ini --set checkpoint.resume=never --set optim.lr=0.01 > never.out 2> never.err
rc=$?
prev=$(ls -d fin/previous-* 2>/dev/null | head -1)
if [ $rc -eq 0 ] && [ -n "$prev" ] && [ "$(sums "$prev")" = "$before" ] &&
    grep -q "moved to $prev" never.out && ! grep -q '"epoch":2' fin/metrics.jsonl &&
    grep -qx "lr = 0.01" fin/job.ini && [ "$(ls fin/checkpoints | wc -l)" -ge 1 ]; then
    ok "resume = never: the earlier run's files moved to $prev byte for byte; a fresh run in fin"
else
    bad "resume = never: rc $rc, previous '$prev'"; head -3 never.err
fi

# ---- 4. one run per directory ---------------------------------------------------------------
SLURM_JOB_ID=4242 "$DDPTRAIN" j.ini --set job.output=busy --set train.epochs=1000000 \
    --set train.log_every=1 > busy.out 2>&1 &
busy_pid=$!
t=0 # until its first metrics line: it holds the lock and has started training
until [ -s busy/metrics.jsonl ]; do
    kill -0 $busy_pid 2>/dev/null || break
    t=$((t + 1)); [ $t -gt 1200 ] && break
    sleep 0.05
done
if [ -s busy/metrics.jsonl ]; then
    host=$(hostname)
    timeout 60 "$DDPTRAIN" j.ini --set job.output=busy > b1.out 2> b1.err
    rc1=$?
    timeout 120 mpirun -n 2 "$DDPTRAIN" j.ini --set job.output=busy --set data.batch_size=8 \
        > b2.out 2> b2.err
    rc2=$?
    if [ $rc1 -eq 2 ] && one_line b1.err "busy is in use by another ddptrain run" "host $host" \
        "pid $busy_pid," "Slurm job 4242" "use another [job] output"; then
        ok "second run, 1 rank: exit 2: $(cat b1.err)"
    else
        bad "second run, 1 rank: exit $rc1"; head -3 b1.err
    fi
    if [ $rc2 -eq 2 ] && grep -qF "pid $busy_pid," b2.err && ! grep -q "final" b2.out; then
        ok "second run, 2 MPI ranks: exit 2, no rank trained"
    else
        bad "second run, 2 ranks: exit $rc2"; head -5 b2.err
    fi
    kill -USR1 $busy_pid
    wait $busy_pid
    rc=$?
    busy_pid=
    if [ $rc -eq 75 ] && $PY -c '
import json, sys
rows = [json.loads(l) for l in open("busy/metrics.jsonl")]
steps = [r["step"] for r in rows if r["kind"] == "train"]
assert steps == list(range(1, len(steps) + 1)), steps[:20]'; then
        ok "the first run went on undisturbed (exit 75 on USR1, metrics.jsonl valid, steps 1..N)"
    else
        bad "the first run: exit $rc, or its metrics.jsonl was disturbed"
    fi
else
    bad "the first run never wrote a metrics line"; tail -3 busy.out
fi
mkdir -p held
exec 9>>held/.ddptrain.lock
flock -n 9 || bad "cannot flock held/.ddptrain.lock from the test"
timeout 60 "$DDPTRAIN" j.ini --set job.output=held > h.out 2> h.err
rc=$?
exec 9>&-
if [ $rc -eq 2 ] && one_line h.err "held is in use" "left no record" && [ ! -e held/job.ini ]; then
    ok "a lock held by flock(1): exit 2, nothing written"
else
    bad "lock held by flock(1): exit $rc"; head -3 h.err
fi

# ---- 5. Slurm filename patterns in [job] output ---------------------------------------------
user=$(id -un)
SLURM_JOB_ID=77 SLURM_ARRAY_JOB_ID=70 SLURM_ARRAY_TASK_ID=3 SLURM_JOB_NAME=sweep \
    SLURM_JOB_NODELIST='node[08-09]' "$DDPTRAIN" j.ini --set train.max_steps=1 \
    --set 'job.output=pat/%x-%A_%a/%j-%u-%N-%3a-100%%' > p.out 2>&1
rc=$?
want="pat/sweep-70_3/77-$user-node08-003-100%"
if [ $rc -eq 0 ] && [ -s "$want/model.h5" ] && grep -qxF "output = $want" "$want/job.ini"; then
    ok "%x-%A_%a/%j-%u-%N-%3a-100%% -> $want"
else
    bad "patterns: rc $rc, want $want, have: $(find pat -name model.h5)"
fi
"$DDPTRAIN" j.ini --set train.max_steps=1 --set 'job.output=pat/%j_%a' > p.out 2>&1
want="pat/local_0"
[ $? -eq 0 ] && [ -s "$want/model.h5" ] && ok "outside Slurm: %j_%a -> $want" ||
    bad "outside Slurm: want $want, have: $(find pat -name model.h5)"
"$DDPTRAIN" j.ini --set 'job.output=pat/%s' > p.out 2> p.err
rc=$?
if [ $rc -eq 2 ] && one_line p.err "--set job.output" "unknown pattern %s" &&
    [ ! -e 'pat/%s' ]; then
    ok "unknown pattern: exit 2: $(cat p.err)"
else
    bad "unknown pattern: exit $rc"; head -3 p.err
fi

# ---- 6. a finished job run again writes nothing ---------------------------------------------
# rerun DIR WHAT [ARGS...]: run the job twice into DIR; the second run must change nothing
rerun() {
    local d=$1 what=$2 rc
    shift 2
    "$DDPTRAIN" j.ini --set job.output="$d" "$@" > "$d.1.out" 2>&1 || bad "$d: first run failed"
    before=$(sums "$d")
    "$DDPTRAIN" j.ini --set job.output="$d" "$@" > "$d.2.out" 2> "$d.2.err"
    rc=$?
    if [ $rc -eq 0 ] && grep -q "already finished: $d holds this job's finished run" "$d.2.out" &&
        [ "$(sums "$d")" = "$before" ] &&
        [ "$(grep -c '"kind":"summary"' "$d/metrics.jsonl")" = 1 ]; then
        ok "a finished job ($what) run again: exit 0, 'already finished', every file unchanged"
    else
        bad "a finished job ($what) run again: exit $rc, or files changed"
        cat "$d.2.err"; tail -3 "$d.2.out"
    fi
}
rerun again "all epochs, a checkpoint at the end"
rerun again_max "max_steps mid-epoch, no checkpoint at the end" --set train.max_steps=5

# ---- 7. %j in [job] output: a resubmission is warned that it starts afresh -------------------
SLURM_JOB_ID=501 SLURM_JOB_NAME=pre "$DDPTRAIN" j.ini --set 'job.output=jobs/%x-%j' > j1.out \
    2> j1.err || bad "%j: the first job failed"
SLURM_JOB_ID=502 SLURM_JOB_NAME=pre "$DDPTRAIN" j.ini --set 'job.output=jobs/%x-%j' > j2.out \
    2> j2.err
rc=$?
if [ $rc -eq 0 ] && one_line j2.err "warning: --set job.output = jobs/%x-%j" \
    "starts afresh in jobs/pre-502 while jobs/pre-501 holds checkpoints" "use a stable output" &&
    [ ! -s j1.err ]; then
    ok "%j: the second job id is warned: $(cat j2.err)"
else
    bad "%j: exit $rc, or no warning on the second job (or one on the first)"; cat j1.err j2.err
fi
SLURM_JOB_ID=503 SLURM_JOB_NAME=other "$DDPTRAIN" j.ini --set 'job.output=jobs/pre-%j' \
    --set job.name=other > j3.out 2> j3.err
[ $? -eq 0 ] && [ ! -s j3.err ] && ok "%j: no warning for another job name's directories" ||
    bad "%j: a job of another name was warned: $(cat j3.err)"

echo
[ $fail -eq 0 ] && echo "outdir: all passed" || echo "outdir: failures"
exit $fail

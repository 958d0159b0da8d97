#!/usr/bin/env bash
# kill -9 of one of 4 ranks mid-training under srun --mpi=pmix without -K: nobody hangs. The
# survivors' liveness watch or Slurm's PMIx plugin (which cancels the step when a task that
# shares its node dies; srun names the task) ends them; a survivor that reports names the dead
# rank and exits 5. Either way all ranks are gone within timeout_s + 10 s and the dead rank is
# named. (A lone rank per node, and timeout_s at its default: cases 42-44.)
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"
need_ddptrain
"$DDPTRAIN" data synth -o "$CASE_DIR/d.h5" --shape 64 --classes 4 --train 4000 --test 10 >/dev/null
printf '[data]\nfile = %s/d.h5\ntest =\nbatch_size = 2\n[model]\nlayers = linear(32), relu, linear(4)\n[train]\nepochs = 1000\nlog_every = 100\n[dist]\ntimeout_s = 5\n[job]\noutput = %s/out\n' \
    "$CASE_DIR" "$CASE_DIR" > "$CASE_DIR/j.ini"
[[ $DDP_SLURM_MODE == netns ]] || export MASTER_ADDR=$DDP_SLURM_MASTER_ADDR
SR_TIMEOUT=120 sr srun -N 2 -n 4 --ntasks-per-node=2 --mpi=pmix "$DDPTRAIN" "$CASE_DIR/j.ini" \
    > "$CASE_DIR/out.txt" 2> "$CASE_DIR/err.txt" &
srun_pid=$!
for _ in $(seq 1 1200); do [[ -s $CASE_DIR/out/metrics.jsonl ]] && break; sleep 0.05; done
[[ -s $CASE_DIR/out/metrics.jsonl ]] || fail "training did not start"
victim=""
for p in $(pgrep -f "$DDPTRAIN $CASE_DIR/j.ini"); do
    r=$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | sed -n 's/^SLURM_PROCID=//p')
    [[ $r == 3 ]] && victim=$p
done
[[ -n $victim ]] || fail "no task with SLURM_PROCID=3 found"
t0=$SECONDS
kill -9 "$victim"
wait $srun_pid || true
took=$((SECONDS - t0))
cat "$CASE_DIR/err.txt"
((took <= 15)) || fail "survivors took ${took}s (> timeout_s + 10)"
pgrep -f "$DDPTRAIN $CASE_DIR/j.ini" >/dev/null && fail "ranks still running after srun returned"
grep -q "n2: task 3: Killed" "$CASE_DIR/err.txt" || fail "srun did not name the dead task 3"
# survivors that reached their own deadline must have named rank 3 and exited 5
if grep -q "peer gone" "$CASE_DIR/err.txt"; then
    grep "peer gone" "$CASE_DIR/err.txt" | grep -qv "rank 3 on" && fail "a survivor named the wrong rank"
    grep -Eq "Exited with exit code 5" "$CASE_DIR/err.txt" || fail "survivors did not exit 5"
fi
echo "killed rank 3 on n2: every rank gone within ${took}s, the dead task named"

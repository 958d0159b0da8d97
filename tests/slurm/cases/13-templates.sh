#!/usr/bin/env bash
# Every training template in slurm/ is submitted with real `sbatch --wait`, unchanged, with a
# job file and --set overrides that shorten the run, and completes on the test cluster's fake
# GPUs: single-node.sbatch (4 ranks on one node, 2 threads each: 8 CPUs / 4 ranks),
# multi-node.sbatch (8 ranks on n1 and n2), cpu-only.sbatch (2 x 2 ranks, threads = its
# --cpus-per-task=4), preemptible.sbatch (no signal: done on the first start, no requeue).
# Their logs show the binary, the srun line and ddptrain's summary; model.h5 and metrics.jsonl
# are written; every template appends to its log (--open-mode=append). Failures end the job
# with ddptrain's code and no requeue: a missing job file (2), a missing binary (2), an
# unreadable dataset under the preemptible template (3).
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

need_ddptrain
sr srun --mpi=list 2>&1 | grep -qw pmix || skip "this Slurm has no pmix plugin"
data=$(fashion_h5)
T=$DDP_SRC/slurm
job=$DDP_SRC/configs/fashion-mlp.ini
short=(--set "data.file=$data" --set data.test= --set train.max_steps=10 --set data.batch_size=32
    --set train.log_every=5)
export DDPTRAIN

# A requeued job must not truncate its first run's log: every template appends.
for t in "$T"/*.sbatch; do
    grep -qx '#SBATCH --open-mode=append' "$t" || fail "$(basename "$t"): no --open-mode=append"
done

# submit NAME TEMPLATE ARGS...: sbatch --wait in the background; exit code in NAME.rc
submit() {
    local name=$1
    shift
    (
        rc=0
        SR_TIMEOUT=150 sr sbatch --wait "$@" >"$name.sbatch.txt" 2>&1 || rc=$?
        echo "$rc" >"$name.rc"
    ) &
}
# All at once: sbatch --wait polls every few seconds, the jobs queue for nodes by themselves.
submit single "$T/single-node.sbatch" "$job" "${short[@]}" --set "job.output=$CASE_DIR/single"
submit multi "$T/multi-node.sbatch" "$job" "${short[@]}" --set "job.output=$CASE_DIR/multi"
submit cpu "$T/cpu-only.sbatch" "$job" "${short[@]}" --set "job.output=$CASE_DIR/cpu"
submit preempt "$T/preemptible.sbatch" "$job" "${short[@]}" --set "job.output=$CASE_DIR/preempt"
submit nojob -J ddp-nojob "$T/cpu-only.sbatch" "$CASE_DIR/no-such.ini"
DDPTRAIN=/nonexistent/ddptrain submit nobin -J ddp-nobin "$T/single-node.sbatch" "$job"
submit baddata -J ddp-baddata "$T/preemptible.sbatch" "$job" --set data.file=/nonexistent.h5 \
    --set "job.output=$CASE_DIR/baddata"
# the repository's build/ddptrain, found without DDPTRAIN (when that is where DDPTRAIN points)
findbin=
if [[ $(realpath "$DDPTRAIN") == $(realpath -m "$DDP_SRC/build/ddptrain") ]] &&
    ! command -v ddptrain >/dev/null; then
    findbin=1
    DDPTRAIN='' submit findbin -J ddp-findbin "$T/cpu-only.sbatch" "$job" "${short[@]}" \
        --set "job.output=$CASE_DIR/findbin"
fi
wait

log_of() { cat ./"$1"-[0-9]*.out 2>/dev/null | untime; }

# check NAME LOG-PREFIX RANKS THREADS
check() {
    local name=$1 prefix=$2 ranks=$3 threads=$4 out
    out=$(log_of "$prefix")
    echo "=== $name ($prefix-*.out)"
    grep -v '^  \[' <<<"$out"
    expect_eq "$(cat "$name.rc")" 0 "$name: sbatch --wait exit code"
    grep -q "^binary: .*ddptrain" <<<"$out" || fail "$name: no binary line"
    grep -q "^run: srun --mpi=pmix --cpus-per-task=$threads " <<<"$out" || fail "$name: srun line"
    grep -q "$ranks ranks, launcher slurm, comm mpi, device cpu, $threads threads per rank" <<<"$out" ||
        fail "$name: want $ranks Slurm ranks over MPI with $threads threads each"
    grep -q '^done: 10 steps' <<<"$out" || fail "$name: ddptrain did not finish 10 steps"
    grep -q '^ddptrain exited 0;' <<<"$out" || fail "$name: no 'ddptrain exited 0'"
    [[ -s $name/model.h5 ]] || fail "$name: no model.h5"
    grep -q "\"kind\":\"summary\".*\"world_size\":$ranks," "$name/metrics.jsonl" ||
        fail "$name: metrics summary lacks world_size $ranks"
}
check single ddp-1node 4 2
check multi ddp-multinode 8 2
check cpu ddp-cpu 4 4
check preempt ddp-preempt 4 2
out=$(log_of ddp-preempt)
grep -q 'restart count 0' <<<"$out" || fail "preempt: no restart count 0"
! grep -q requeue <<<"$out" || fail "preempt: requeued although ddptrain exited 0"

# expect_failure NAME LOG-PREFIX CODE TEXT
expect_failure() {
    local out
    out=$(log_of "$2")
    echo "=== $1 ($2-*.out)"
    echo "$out"
    [[ $(cat "$1.rc") != 0 ]] || fail "$1: sbatch --wait succeeded"
    grep -q -- "$4" <<<"$out" || fail "$1: no '$4' in the log"
    if [[ -n $3 ]]; then
        grep -q "^ddptrain exited $3;" <<<"$out" || fail "$1: want 'ddptrain exited $3'"
    fi
    ! grep -q 'requeue' <<<"$out" || fail "$1: requeued"
}
expect_failure nojob ddp-nojob "" "error: job file '$CASE_DIR/no-such.ini' not readable"
expect_failure nobin ddp-nobin "" "error: DDPTRAIN=/nonexistent/ddptrain is not an executable"
expect_failure baddata ddp-baddata 3 "/nonexistent.h5"

if [[ -n $findbin ]]; then
    out=$(log_of ddp-findbin)
    echo "=== findbin (no DDPTRAIN, no ddptrain on PATH)"
    grep -E '^(binary|done|ddptrain exited)' <<<"$out" || true
    expect_eq "$(cat findbin.rc)" 0 "findbin: sbatch --wait exit code"
    grep -q "^binary: $(realpath "$DDP_SRC/build/ddptrain") " <<<"$out" ||
        fail "findbin: the template did not find the repository's build/ddptrain"
else
    echo "(binary search without DDPTRAIN not checked: DDPTRAIN is not \$DDP_SRC/build/ddptrain)"
fi

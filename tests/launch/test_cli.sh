#!/bin/sh
# test_cli.sh BIN - `BIN hostlist` and `BIN env` as users see them: output, stderr, exit codes.
# BIN is tests/launch/launch_cli (same functions as `ddptrain hostlist|env`) or ddptrain.
set -u
BIN=${1:?usage: test_cli.sh BIN}
T=$(mktemp -d "${TMPDIR:-/tmp}/ddp-cli-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# run ARGS...: stdout in $T/out, stderr in $T/err, exit code in $rc (clean environment)
run() { env -i PATH="$PATH" "$@" >"$T/out" 2>"$T/err"; rc=$?; }
lines() { wc -l <"$1" | tr -d ' '; }

run "$BIN" hostlist 'n[1-3],gpu[01-02] rack[1-2]-n[3-4]'
printf 'n1\nn2\nn3\ngpu01\ngpu02\nrack1-n3\nrack1-n4\nrack2-n3\nrack2-n4\n' >"$T/want"
[ $rc -eq 0 ] || fail "hostlist: exit $rc"
cmp -s "$T/out" "$T/want" || fail "hostlist: output $(tr '\n' ' ' <"$T/out")"
[ -s "$T/err" ] && fail "hostlist: stderr $(cat "$T/err")"

run "$BIN" hostlist -- 'a[1-2]x'
[ $rc -eq 0 ] && [ "$(tr '\n' ' ' <"$T/out")" = "a1x a2x " ] || fail "hostlist --: $rc $(cat "$T/out")"

run "$BIN" hostlist 'n[3-1]'
[ $rc -eq 2 ] || fail "bad hostlist: exit $rc, want 2"
[ -s "$T/out" ] && fail "bad hostlist: printed $(cat "$T/out")"
[ "$(lines "$T/err")" = 1 ] || fail "bad hostlist: stderr not one line: $(cat "$T/err")"
grep -q 'n\[3-1\]' "$T/err" && grep -q backwards "$T/err" || fail "bad hostlist: $(cat "$T/err")"

run "$BIN" hostlist
[ $rc -eq 2 ] || fail "hostlist without EXPR: exit $rc"
run "$BIN" hostlist a b
[ $rc -eq 2 ] || fail "hostlist with two EXPR: exit $rc"
run "$BIN" hostlist --help
[ $rc -eq 0 ] && grep -q usage "$T/out" || fail "hostlist --help: exit $rc"
run "$BIN" hostlist ''
[ $rc -eq 0 ] && [ ! -s "$T/out" ] || fail "empty hostlist: exit $rc"

# env: single process
run "$BIN" env
[ $rc -eq 0 ] || fail "env: exit $rc $(cat "$T/err")"
[ "$(lines "$T/out")" = 1 ] || fail "env: not one line: $(cat "$T/out")"
for k in rank local_rank world_size local_size node_id num_nodes host master_host master_addr \
         master_port device launcher job_id step_id mpi cpus_per_task; do
    grep -q "\(^\| \)$k=" "$T/out" || fail "env: no $k= in $(cat "$T/out")"
done
grep -q ' launcher=single' "$T/out" && grep -q ' master_addr=127.0.0.1 ' "$T/out" &&
    grep -q ' device=cpu ' "$T/out" && grep -q '^rank=0 ' "$T/out" ||
    fail "env single: $(cat "$T/out")"

# env: Slurm step, rank 5 of 8 on the second node; master localhost; derived port
run env SLURM_JOB_ID=1234 SLURM_STEP_ID=0 SLURM_NTASKS=8 SLURM_STEP_NUM_NODES=2 \
    SLURM_STEP_NODELIST=localhost,n2.invalid SLURM_STEP_TASKS_PER_NODE='4(x2)' \
    SLURM_PROCID=5 SLURM_LOCALID=1 SLURM_NODEID=1 SLURM_MPI_TYPE=pmix "$BIN" env
want='rank=5 local_rank=1 world_size=8 local_size=4 node_id=1 num_nodes=2 host=n2.invalid master_host=localhost master_addr=127.0.0.1 master_port=22340 device=cpu launcher=slurm job_id=1234 step_id=0 mpi=1 cpus_per_task=0'
[ $rc -eq 0 ] && [ "$(cat "$T/out")" = "$want" ] || fail "env slurm: $rc $(cat "$T/out" "$T/err")"

# env: sbatch shell without srun: one process, warning on stderr
run env SLURM_JOB_ID=1234 SLURM_NTASKS=8 SLURM_NNODES=2 "$BIN" env
[ $rc -eq 0 ] && grep -q 'world_size=1 ' "$T/out" || fail "env sbatch: $rc $(cat "$T/out")"
grep -q 'srun' "$T/err" || fail "env sbatch: no srun advice on stderr: $(cat "$T/err")"

# env: bad input -> exit 4, one line on stderr naming the variable
run env SLURM_JOB_ID=1 SLURM_STEP_ID=0 SLURM_PROCID=abc "$BIN" env
[ $rc -eq 4 ] || fail "env bad: exit $rc, want 4"
[ -s "$T/out" ] && fail "env bad: printed $(cat "$T/out")"
[ "$(lines "$T/err")" = 1 ] && grep -q SLURM_PROCID "$T/err" || fail "env bad: $(cat "$T/err")"
run env RANK=0 WORLD_SIZE=2 MASTER_ADDR=nowhere.invalid "$BIN" env
[ $rc -eq 4 ] && grep -q MASTER_ADDR "$T/err" || fail "env unresolvable: $rc $(cat "$T/err")"
run "$BIN" env extra
[ $rc -eq 2 ] || fail "env with an argument: exit $rc, want 2"

[ $fails -eq 0 ] && echo "cli: all checks passed ($BIN)"
[ $fails -eq 0 ]

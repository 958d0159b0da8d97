#!/bin/sh
# test_cli.sh BIN - `BIN hostlist`, `BIN env`, `BIN bootstrap-test` and `BIN launch` as users
# see them: output, stderr, exit codes. BIN is tests/launch/launch_cli (same functions as
# `ddptrain hostlist|env|bootstrap-test|launch`) or ddptrain.
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

# env: single process. CUDA_VISIBLE_DEVICES= (empty): no GPU for this rank whatever the build
# and the machine, so the expected lines hold on GPU hosts too.
run env CUDA_VISIBLE_DEVICES= "$BIN" env
[ $rc -eq 0 ] || fail "env: exit $rc $(cat "$T/err")"
[ "$(lines "$T/out")" = 1 ] || fail "env: not one line: $(cat "$T/out")"
for k in rank local_rank world_size local_size node_id num_nodes host master_host master_addr \
         master_port device gpus_visible launcher job_id step_id mpi cpus_per_task; do
    grep -q "\(^\| \)$k=" "$T/out" || fail "env: no $k= in $(cat "$T/out")"
done
grep -q ' launcher=single' "$T/out" && grep -q ' master_addr=127.0.0.1 ' "$T/out" &&
    grep -q ' device=cpu gpus_visible=none ' "$T/out" && grep -q '^rank=0 ' "$T/out" ||
    fail "env single: $(cat "$T/out")"

# env: Slurm step, rank 5 of 8 on the second node; master localhost; derived port
run env CUDA_VISIBLE_DEVICES= SLURM_JOB_ID=1234 SLURM_STEP_ID=0 SLURM_NTASKS=8 SLURM_STEP_NUM_NODES=2 \
    SLURM_STEP_NODELIST=localhost,n2.invalid SLURM_STEP_TASKS_PER_NODE='4(x2)' \
    SLURM_PROCID=5 SLURM_LOCALID=1 SLURM_NODEID=1 SLURM_MPI_TYPE=pmix "$BIN" env
want='rank=5 local_rank=1 world_size=8 local_size=4 node_id=1 num_nodes=2 host=n2.invalid master_host=localhost master_addr=127.0.0.1 master_port=22340 device=cpu gpus_visible=none launcher=slurm job_id=1234 step_id=0 mpi=1 cpus_per_task=0'
[ $rc -eq 0 ] && [ "$(cat "$T/out")" = "$want" ] || fail "env slurm: $rc $(cat "$T/out" "$T/err")"

# env: GPU binding. Without a GPU backend the device is cpu and the visible list is shown;
# DDP_TEST_FAKE_GPUS=N stands in for a driver that reports N devices on this node.
slurm_r5="SLURM_JOB_ID=1234 SLURM_STEP_ID=0 SLURM_NTASKS=8 SLURM_STEP_NUM_NODES=2
    SLURM_STEP_NODELIST=localhost,n2.invalid SLURM_STEP_TASKS_PER_NODE=4(x2) SLURM_PROCID=5
    SLURM_LOCALID=1 SLURM_NODEID=1"
if [ ! -e /dev/nvidiactl ]; then # a GPU build on a GPU host would bind for real
    # shellcheck disable=SC2086
    run env $slurm_r5 CUDA_VISIBLE_DEVICES=0,1,2,3 "$BIN" env
    [ $rc -eq 0 ] && grep -q ' device=cpu gpus_visible=0,1,2,3 ' "$T/out" || fail "env cpu gpus: $rc $(cat "$T/out" "$T/err")"
fi
# shellcheck disable=SC2086
run env $slurm_r5 CUDA_VISIBLE_DEVICES=0,1,2,3 DDP_TEST_FAKE_GPUS=4 "$BIN" env
[ $rc -eq 0 ] && grep -q ' device=cuda:1 gpus_visible=0,1,2,3 ' "$T/out" || fail "env fake gpus: $rc $(cat "$T/out" "$T/err")"
# shellcheck disable=SC2086
run env $slurm_r5 CUDA_VISIBLE_DEVICES=2 SLURM_GPUS_ON_NODE=4 DDP_TEST_FAKE_GPUS=4 "$BIN" env
[ $rc -eq 0 ] && grep -q ' device=cuda:0 gpus_visible=2 ' "$T/out" || fail "env gpus-per-task: $rc $(cat "$T/out" "$T/err")"
# shellcheck disable=SC2086
run env $slurm_r5 CUDA_VISIBLE_DEVICES=0 SLURM_GPUS_ON_NODE=1 DDP_TEST_FAKE_GPUS=4 "$BIN" env
[ $rc -eq 4 ] && [ ! -s "$T/out" ] && [ "$(lines "$T/err")" = 1 ] &&
    grep -q 'share device 0.*srun --gpus-per-task=1' "$T/err" || fail "env shared gpu: $rc $(cat "$T/out" "$T/err")"
# shellcheck disable=SC2086
run env $slurm_r5 DDP_TEST_FAKE_GPUS=0 "$BIN" env
[ $rc -eq 0 ] && grep -q ' device=cpu gpus_visible=none ' "$T/out" || fail "env no gpus: $rc $(cat "$T/out" "$T/err")"
run env DDP_TEST_FAKE_GPUS=lots "$BIN" env
[ $rc -eq 4 ] && grep -q DDP_TEST_FAKE_GPUS "$T/err" || fail "env bad DDP_TEST_FAKE_GPUS: $rc $(cat "$T/err")"

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

# bootstrap-test: one process has nobody to tell; bad arguments are usage errors
run "$BIN" bootstrap-test
[ $rc -eq 0 ] && grep -q '^rank=0 world_size=1 host=.* via=tcp len=128 hash=[0-9a-f]\{16\} ' "$T/out" ||
    fail "bootstrap-test single: $rc $(cat "$T/out" "$T/err")"
run "$BIN" bootstrap-test --via carrier-pigeon
[ $rc -eq 2 ] && grep -q 'bad argument' "$T/err" || fail "bootstrap-test bad via: $rc $(cat "$T/err")"
run "$BIN" bootstrap-test --len 0
[ $rc -eq 2 ] || fail "bootstrap-test --len 0: exit $rc"
run env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "$BIN" bootstrap-test --via pmi2
[ $rc -eq 4 ] && grep -q 'pmi2' "$T/err" || fail "bootstrap-test pmi2 outside srun: $rc $(cat "$T/err")"

# launch: two ranks with their own environments, and the TCP bootstrap between them
run env CUDA_VISIBLE_DEVICES= "$BIN" launch --nproc-per-node 2 --spawn env env
[ $rc -eq 0 ] && [ "$(grep -c 'launcher=torchrun' "$T/out")" = 2 ] || fail "launch env: $rc $(cat "$T/out" "$T/err")"
run "$BIN" launch --nproc-per-node 2 --spawn env bootstrap-test --via tcp
[ $rc -eq 0 ] && [ "$(tr ' ' '\n' <"$T/out" | grep -c '^hash=')" = 2 ] &&
    [ "$(tr ' ' '\n' <"$T/out" | grep '^hash=' | sort -u | wc -l)" = 1 ] ||
    fail "launch bootstrap-test: $rc $(cat "$T/out" "$T/err")"
run "$BIN" launch
[ $rc -eq 2 ] || fail "launch without arguments: exit $rc"

[ $fails -eq 0 ] && echo "cli: all checks passed ($BIN)"
[ $fails -eq 0 ]

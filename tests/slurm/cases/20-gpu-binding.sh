#!/usr/bin/env bash
# GPU binding under srun --gres=gpu:4 (four fake GPUs per node): with 4 tasks per node every
# rank binds device = its local rank of CUDA_VISIBLE_DEVICES=0,1,2,3; where Slurm packs more
# tasks on a node than it has GPUs, every rank there stops (exit 4) with one line that says so
# and names the srun flag that fixes it. DDP_TEST_FAKE_GPUS=4 stands in for a CUDA driver that
# reports four devices (this machine has none); without it a CPU build prints device=cpu and
# still lists the GPUs it was given.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

[[ -n ${DDPTRAIN:-} && -x $DDPTRAIN ]] || skip "no ddptrain binary (DDPTRAIN=${DDPTRAIN:-unset})"
"$DDPTRAIN" env 2>/dev/null | grep -q ' gpus_visible=' || skip "ddptrain env has no GPU binding yet"
[[ $DDP_SLURM_MODE == netns ]] || export MASTER_ADDR=$DDP_SLURM_MASTER_ADDR

# field NAME LINE: the value of NAME=... in one `ddptrain env` line
field() { tr ' \t' '\n\n' <<<"$2" | sed -n "s/^$1=//p" | head -1; }

echo "# srun -N 2 -n 8 --ntasks-per-node=4 --gres=gpu:4 env DDP_TEST_FAKE_GPUS=4 ddptrain env"
out=$(sr srun -N 2 -n 8 --ntasks-per-node=4 --gres=gpu:4 env DDP_TEST_FAKE_GPUS=4 "$DDPTRAIN" env) ||
    fail "4 tasks per node: ddptrain env exited non-zero"
echo "$out"
expect_eq "$(grep -c '^rank=' <<<"$out")" 8 "lines"
while read -r line; do
    r=$(field rank "$line")
    lr=$(field local_rank "$line")
    expect_eq "$(field device "$line")" "cuda:$lr" "rank $r (local rank $lr) device"
    expect_eq "$(field gpus_visible "$line")" "0,1,2,3" "rank $r gpus_visible"
    expect_eq "$(field local_size "$line")" 4 "rank $r local_size"
done <<<"$out"
expect_eq "$(grep -o ' device=cuda:[0-9]' <<<"$out" | sort | uniq -c | awk '{print $1}' | sort -u)" 2 \
    "each device used once per node"

if "$DDPTRAIN" --version 2>/dev/null | grep -qi cuda; then
    echo "GPU build: device=cpu without a driver is not checked"
else
    echo "# CPU build, no DDP_TEST_FAKE_GPUS: srun -N 2 -n 2 --gres=gpu:4 ddptrain env"
    out=$(sr srun -N 2 -n 2 --gres=gpu:4 "$DDPTRAIN" env) || fail "cpu build: exit non-zero"
    echo "$out"
    expect_eq "$(grep -o ' device=[^ ]* gpus_visible=[^ ]*' <<<"$out" | sort -u)" \
        " device=cpu gpus_visible=0,1,2,3" "cpu build"
fi

# Without --ntasks-per-node Slurm may pack the tasks (7 + 1 here, CPUs=8 per node): the doctor
# must stop exactly the ranks on the node with more tasks than GPUs.
echo "# srun -N 2 -n 8 --gres=gpu:4 env DDP_TEST_FAKE_GPUS=4 ddptrain env"
set +e
out=$(sr srun -N 2 -n 8 --gres=gpu:4 env DDP_TEST_FAKE_GPUS=4 "$DDPTRAIN" env 2>err)
rc=$?
set -e
echo "$out"
cat err
ok=$(grep -c '^rank=' <<<"$out" || true)
bad=$(grep -c 'more local ranks (.*) than visible GPUs (4, CUDA_VISIBLE_DEVICES=0,1,2,3)' err || true)
expect_eq "$((ok + bad))" 8 "bound ranks + refused ranks"
while read -r line; do
    [[ -n $line ]] || continue
    (($(field local_size "$line") <= 4)) || fail "a rank on a node with more than 4 tasks bound: $line"
    expect_eq "$(field device "$line")" "cuda:$(field local_rank "$line")" "packed layout: device"
done <<<"$out"
if ((bad > 0)); then
    expect_eq "$rc" 4 "srun exit code with refused ranks"
    grep -q -- '--ntasks-per-node=N' err || fail "no srun flag in the advice"
    grep 'more local ranks' err | grep -vq '^ddptrain: n[0-9]* rank [0-9]*: ' &&
        fail "advice lines are not prefixed with host and rank"
else
    expect_eq "$rc" 0 "srun exit code"
fi
echo "packed layout: $ok bound, $bad refused"

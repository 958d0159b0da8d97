#!/usr/bin/env bash
# Two jobs on one node at once: their rendezvous ports derive from their job ids, so both
# rank 0s listen side by side (the peers join 3 s late so the listeners overlap) and both
# jobs succeed on different ports. A third job forced onto the port of a running one
# (MASTER_PORT) stops at once: its rank 0 says the port is in use, its rank 1, reaching the
# other job's rendezvous, is refused as a stranger; the running job is not disturbed.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

[[ -n ${DDPTRAIN:-} && -x $DDPTRAIN ]] || skip "no ddptrain binary (DDPTRAIN=${DDPTRAIN:-unset})"
"$DDPTRAIN" bootstrap-test --help >/dev/null 2>&1 || skip "ddptrain has no bootstrap-test yet"
[[ $DDP_SLURM_MODE == netns ]] || export MASTER_ADDR=$DDP_SLURM_MASTER_ADDR

field() { tr ' \t' '\n\n' <<<"$2" | sed -n "s/^$1=//p"; }

echo "# two jobs: srun -w n1 -n 2 ddptrain bootstrap-test --via tcp --delay 3, at once"
sr srun -w n1 -N 1 -n 2 "$DDPTRAIN" bootstrap-test --via tcp --delay 3 --timeout 30 >a 2>ea &
pa=$!
sr srun -w n1 -N 1 -n 2 "$DDPTRAIN" bootstrap-test --via tcp --delay 3 --timeout 30 >b 2>eb &
pb=$!
ra=0 rb=0
wait $pa || ra=$?
wait $pb || rb=$?
cat a ea b eb
expect_eq "$ra $rb" "0 0" "both jobs succeed"
for f in a b; do
    expect_eq "$(field rank "$(cat $f)" | sort -n | tr '\n' ' ')" "0 1 " "job $f: ranks"
    expect_eq "$(field hash "$(cat $f)" | sort -u | wc -l)" 1 "job $f: one hash"
done
pa_port=$(field master "$(cat a)" | sort -u)
pb_port=$(field master "$(cat b)" | sort -u)
[[ $pa_port != "$pb_port" ]] || fail "both jobs used $pa_port"
echo "ports: $pa_port and $pb_port"

# a job on the port of a running one
port=$((29000 + RANDOM % 500))
echo "# job A on port $port (peers 6 s late), job B forced onto it"
MASTER_PORT=$port sr srun -N 2 -n 2 "$DDPTRAIN" bootstrap-test --via tcp --delay 6 --timeout 30 >a 2>ea &
pa=$!
sleep 2
set +e
MASTER_PORT=$port sr srun -N 2 -n 2 "$DDPTRAIN" bootstrap-test --via tcp --timeout 20 >b 2>eb
rb=$?
set -e
ra=0
wait $pa || ra=$?
cat a ea b eb
expect_eq "$ra" 0 "job A undisturbed"
expect_eq "$(field hash "$(cat a)" | sort -u | wc -l)" 1 "job A: one hash"
expect_eq "$rb" 4 "job B: exit code"
grep -q "rank 0: port $port on n1 is in use: another job? set \[dist\] port or MASTER_PORT" eb ||
    fail "job B rank 0: no 'port in use' line"
grep -q "rank 1: the rendezvous at .*:$port belongs to another job ('slurm:[0-9]*\.0'; this job is 'slurm:[0-9]*\.0')" eb ||
    fail "job B rank 1: not refused as a stranger"
grep -q "warning: refused a rendezvous connection" ea || fail "job A rank 0 did not note the stranger"

#!/usr/bin/env bash
# shellcheck disable=SC2016  # the stub's text is expanded when it runs
# slurm/validate-nodes.sbatch, the orchestration only, with a stand-in for `ddptrain validate`
# (30-validate-template.sh runs the real one): phase 1 runs one step per node, in parallel
# (each waits for the other to have started), with 4 ranks each and the arguments given to
# sbatch (--quick); a failing node is reported with its failing check, not a rank table row; phase 2 runs all nodes that passed together; a node failing alone is
# listed with the scontrol line to drain it; passing alone but failing together is reported;
# the exit code says whether all passed. A node whose validate exits 6 (retest: short only
# under foreign load) is listed to run again, not to drain, still takes part in phase 2, and
# the job exits 6. With a
# ddptrain that has no `validate`, the template stops with exit 2 and says so.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

T=$DDP_SRC/slurm/validate-nodes.sbatch
cat >stub <<'STUB'
#!/bin/bash
# stand-in for `ddptrain validate [--quick] [--json FILE]`: STUB_BAD_NODES (comma list) fail
# alone, STUB_FAIL_TOGETHER=1 fails every step over more than one node. A one-node step
# announces itself in $DDP_VALIDATE_DIR/started/ and waits for the other node's: they must
# run at the same time.
case ${1:-} in
--version) echo "ddptrain-stub 0"; exit 0 ;;
validate) shift ;;
*) echo "stub: unexpected arguments: $*" >&2; exit 2 ;;
esac
[[ ${1:-} == --help ]] && { echo "usage: ddptrain validate [--quick] [--json FILE]"; exit 0; }
json=
args=()
while [[ $# -gt 0 ]]; do
    case $1 in --json) json=$2; shift 2 ;; *) args+=("$1"); shift ;; esac
done
node=$SLURMD_NODENAME
if [[ $SLURM_STEP_NUM_NODES == 1 ]]; then
    mkdir -p "$DDP_VALIDATE_DIR/started"
    touch "$DDP_VALIDATE_DIR/started/$node"
    for ((i = 0; i < 200; i++)); do
        [[ $(ls "$DDP_VALIDATE_DIR/started" | wc -l) == 2 ]] && break
        sleep 0.1
    done
    [[ $i -lt 200 ]] || { echo "error: $node: the other node's step never started"; exit 1; }
fi
if [[ ,${STUB_BAD_NODES:-}, == *,$node,* ]]; then
    # as the real validate prints: a rank table row with FAIL first, the failing check last
    printf '%-20s %-12s %-7s %s\n' "$node" 0-3 FAIL "rank $SLURM_PROCID: memory"
    echo "validate: FAIL on 1 check:"
    echo "FAIL memory: rank $SLURM_PROCID on $node: GPU 2 failed the memory test"; exit 1
fi
if [[ ,${STUB_RETEST_NODES:-}, == *,$node,* ]]; then
    echo "validate: RETEST: 1 check fell short while other processes loaded the node"
    echo "RETEST gemm: rank $SLURM_PROCID on $node: sgemm 10.0 GFLOP/s is below the floor 20.0"; exit 6
fi
if [[ ${STUB_FAIL_TOGETHER:-} == 1 && $SLURM_STEP_NUM_NODES -gt 1 ]]; then
    echo "error: all-reduce between nodes timed out"; exit 5
fi
echo "ok node=$node rank=$SLURM_PROCID/$SLURM_NTASKS nodes=$SLURM_STEP_NODELIST" \
    "args=${args[*]} end"
if [[ $SLURM_PROCID == 0 && -n $json ]]; then echo "{\"ok\": true}" >"$json"; fi
STUB
chmod +x stub

# run NAME ENV...: submit the template with the stub (and ENV), in the background
run() {
    local name=$1
    shift
    (
        rc=0
        env DDPTRAIN="$CASE_DIR/stub" DDP_VALIDATE_DIR="$CASE_DIR/$name" "$@" \
            "$CLUSTER" run timeout 120 sbatch --wait -J "v-$name" -o "$CASE_DIR/$name.out" "$T" \
            --quick >/dev/null 2>&1 || rc=$?
        echo "$rc" >"$name.rc"
    ) &
}
run ok
run bad STUB_BAD_NODES=n2
run apart STUB_FAIL_TOGETHER=1
run loaded STUB_RETEST_NODES=n1
nov=
if [[ -n ${DDPTRAIN:-} && -x $DDPTRAIN ]] &&
    ! { "$DDPTRAIN" validate --help 2>&1 | grep -qw validate; }; then
    nov=1
    (
        rc=0
        sr sbatch --wait -J v-novalidate -o "$CASE_DIR/novalidate.out" "$T" >/dev/null 2>&1 || rc=$?
        echo "$rc" >novalidate.rc
    ) &
fi
wait

echo "=== all pass"
cat ok.out
expect_eq "$(cat ok.rc)" 0 "all pass: exit code"
for n in n1 n2; do
    grep -qx "PASS $n (alone)" ok.out || fail "all pass: no 'PASS $n (alone)'"
    expect_eq "$(grep -c "^ok node=$n .* nodes=$n args=--quick " "ok/node-$n.log")" 4 \
        "ranks of the $n-alone step (with --quick)"
    [[ -s ok/node-$n.json ]] || fail "all pass: no node-$n.json"
done
grep -qx 'PASS together: n1 n2' ok.out || fail "all pass: no 'PASS together'"
expect_eq "$(grep -c '^ok .* nodes=n\[1-2\] args=--quick ' ok/all.log)" 8 \
    "ranks of the together step"
[[ -s ok/all.json ]] || fail "all pass: no all.json"
grep -q '^all 2 node(s) passed' ok.out || fail "all pass: no summary"
! grep -q 'drain' ok.out || fail "all pass: something to drain"
echo "=== n2 fails alone"
cat bad.out
[[ $(cat bad.rc) != 0 ]] || fail "n2 bad: sbatch --wait succeeded"
grep -qx 'PASS n1 (alone)' bad.out || fail "n2 bad: n1 should pass"
grep -q '^FAIL n2 (alone, exit 1): FAIL memory: rank [0-9] on n2: GPU 2' bad.out ||
    fail "n2 bad: no FAIL line for n2"
grep -qx 'nodes to drain: n2' bad.out || fail "n2 bad: n2 not listed to drain"
grep -q '^  scontrol update nodename=n2 state=drain reason=' bad.out ||
    fail "n2 bad: no drain command"
! grep -q 'together' bad.out || fail "n2 bad: a together step with one good node"

echo "=== pass alone, fail together"
cat apart.out
[[ $(cat apart.rc) != 0 ]] || fail "together failure: sbatch --wait succeeded"
grep -q '^FAIL together (exit 5)' apart.out || fail "together failure: no FAIL together line"
grep -q 'passed alone but not together' apart.out || fail "together failure: no advice"
! grep -q 'nodes to drain' apart.out || fail "together failure: a node listed to drain"

echo "=== n1 short under load: retest"
cat loaded.out
expect_eq "$(cat loaded.rc)" 6 "retest: sbatch --wait exit code"
grep -q '^RETEST n1 (alone, exit 6): RETEST gemm: rank [0-9] on n1: ' loaded.out ||
    fail "retest: no RETEST line for n1"
grep -qx 'PASS n2 (alone)' loaded.out || fail "retest: n2 should pass"
grep -q '^to run again when idle .*: n1' loaded.out || fail "retest: n1 not listed to run again"
grep -qE '^(PASS|RETEST) together.*: n1 n2' loaded.out || fail "retest: n1 left out of phase 2"
! grep -q 'drain' loaded.out || fail "retest: a node listed to drain"

if [[ -n $nov ]]; then
    echo "=== the real ddptrain, without validate"
    cat novalidate.out
    expect_eq "$(cat novalidate.rc)" 2 "no validate: sbatch --wait exit code"
    grep -q "has no 'validate' subcommand" novalidate.out || fail "no validate: no message"
fi

#!/usr/bin/env bash
# `ddptrain validate --slurm-health --drain` as the cluster's real HealthCheckProgram: the case
# adds HealthCheckProgram (a wrapper in CASE_DIR) and HealthCheckInterval=2 to slurm.conf,
# `scontrol reconfigure`s, and takes both out again at the end. slurmd runs the wrapper with a
# bare environment; the wrapper reads the round to run and the node's fault from files here,
# runs one health check per round and node, and leaves a marker with the exit code (the case
# waits on those markers, with a deadline). Settings of tests/validate/fast.ini; floors: half
# of a first measurement.
#   round 1: DDP_TEST_VALIDATE_FAULT=slow_gemm:0 on n1 only: n1 is drained with the failing
#            check as the reason, n2 is not;
#   round 2: n1 resumed, a busy loop per core started by the case (stopped by it), floors at
#            0.9 of the first measurement: neither node fails nor is drained (exit 0; the log
#            says PASS or RETEST). The time each check took is printed (its budget: 20 s).
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

need_ddptrain
"$DDPTRAIN" validate --help 2>&1 | grep -q -- '--slurm-health' ||
    fail "this ddptrain's validate has no --slurm-health"
CONF=$DDP_SLURM_BASE/etc/slurm.conf
[[ -w $CONF ]] || skip "$CONF is not writable"

loaders=()
restore() {
    ((${#loaders[@]})) && kill "${loaders[@]}" 2>/dev/null
    sed -i '/^# 32-validate-health-check/,$d' "$CONF"
    sr scontrol reconfigure >/dev/null 2>&1 || true
    sr scontrol update nodename=n1,n2 state=resume >/dev/null 2>&1 || true
}
trap restore EXIT

# floors at half (and 0.9) of what this machine does now
CFG=$DDP_SRC/tests/validate/fast.ini
"$DDPTRAIN" validate --quick --config "$CFG" --json base.json >base.log 2>&1 || [[ $? == 6 ]] ||
    fail "first measurement: $(tail -n 3 base.log)"
floors() {
    /usr/bin/python3 - base.json "$1" <<'PY'
import json, sys
r, f = json.load(open(sys.argv[1]))["ranks"][0], float(sys.argv[2])
print("[node]\ntype = test cluster node\n[gemm]\nn = 256\nmin_gflops = %.3f" % (r["gemm_gflops"] * f))
print("[triad]\nmib = 128\nmin_gbs = %.3f" % (r["triad_gbs"] * f))
PY
}
floors 0.5 >half.ini
floors 0.9 >tight.ini

cat >hc.sh <<EOF
#!/bin/bash
# HealthCheckProgram of case 32: one check per round and node
node=\${SLURMD_NODENAME:-\$(hostname)}
dir=$CASE_DIR
round=\$(cat \$dir/round 2>/dev/null) || exit 0
[[ -e \$dir/done.\$node.\$round ]] && exit 0
exec 9>\$dir/lock.\$node
flock -n 9 || exit 0
[[ -e \$dir/done.\$node.\$round ]] && exit 0
export SLURM_CONF=$CONF PATH=\$PATH:$(dirname "$(command -v scontrol)")
export DDP_TEST_VALIDATE_FAULT=\$(cat \$dir/fault.\$node 2>/dev/null)
t0=\$(date +%s.%N)
$DDPTRAIN validate --slurm-health --drain --config $CFG --expect \$dir/\$(cat \$dir/expect) >\$dir/hc.\$node.\$round.log 2>&1
rc=\$?
echo "\$rc \$t0 \$(date +%s.%N)" >\$dir/done.\$node.\$round.tmp
mv \$dir/done.\$node.\$round.tmp \$dir/done.\$node.\$round
EOF
chmod +x hc.sh

# wait_round N: both nodes' markers of round N, within 90 s
wait_round() {
    local t=$((SECONDS + 90)) n
    for n in n1 n2; do
        until [[ -e done.$n.$1 ]]; do
            ((SECONDS < t)) || fail "round $1: no health check result from $n within 90 s"
            sleep 0.2
        done
        read -r rc t0 t1 <"done.$n.$1"
        echo "round $1, $n: exit $rc in $(/usr/bin/python3 -c "print('%.1f' % ($t1 - $t0))") s:" \
            "$(grep -E '^(validate|FAIL|RETEST)' "hc.$n.$1.log" | head -n 2 | tr '\n' ' ')"
    done
}
node_state() { sr scontrol show node "$1" | grep -oE 'State=[A-Z+_]+|Reason=.*' | tr '\n' ' '; }

echo half.ini >expect
echo slow_gemm:0 >fault.n1
: >fault.n2
echo 1 >round
printf '# 32-validate-health-check\nHealthCheckProgram=%s\nHealthCheckInterval=2\n' \
    "$CASE_DIR/hc.sh" >>"$CONF"
sr scontrol reconfigure
wait_round 1
s1=$(node_state n1) s2=$(node_state n2)
echo "n1: $s1"
echo "n2: $s2"
read -r rc1 _ <done.n1.1
read -r rc2 _ <done.n2.1
expect_eq "$rc1" 1 "round 1, n1 (slow GEMM): exit code"
expect_eq "$rc2" 0 "round 1, n2 (healthy): exit code"
[[ $s1 == *DRAIN* && $s1 == *"Reason=ddptrain validate: gemm: rank 0 on n1: sgemm"* ]] ||
    fail "n1 not drained for its GEMM: $s1"
[[ $s2 != *DRAIN* ]] || fail "healthy n2 drained: $s2"

# round 2: n1 back, no fault, a busy loop per core, floors at 0.9
sr scontrol update nodename=n1 state=resume
: >fault.n1
echo tight.ini >expect
for ((i = 0; i < $(nproc); i++)); do
    (while :; do :; done) &
    loaders+=($!)
done
echo 2 >round
wait_round 2
kill "${loaders[@]}" 2>/dev/null
loaders=()
for n in n1 n2; do
    read -r rc _ <"done.$n.2"
    s=$(node_state $n)
    expect_eq "$rc" 0 "round 2 (loaded), $n: exit code"
    [[ $s != *DRAIN* ]] || fail "round 2 (loaded): healthy $n drained: $s"
    ! grep -q '^FAIL ' "hc.$n.2.log" || fail "round 2 (loaded): $n failed: $(grep '^FAIL' "hc.$n.2.log")"
done

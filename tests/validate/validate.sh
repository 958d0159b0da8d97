#!/bin/bash
# validate.sh - `ddptrain validate --quick` under mpirun (suite mpi), with the test settings of
# fast.ini. A clean run on 2 ranks passes and its JSON holds the all-reduce table with busbw per
# size, both ranks' GEMM and triad rates and a golden verdict checked against the shipped
# configs/validate-ref/cpu-w2.ref; one process and 3 ranks pass as well. Each injected fault
# (DDP_TEST_VALIDATE_FAULT) fails the run with exit 1, naming the rank that injected it and its
# host, and not the other ranks for that check. References: --record then --reference
# passes; a reference changed in one rank's value names that rank; one for another world size
# is a warning; a missing one is a usage error (2), as are bad settings and fault strings.
# Expectations (--expect): floors at half of a first measurement pass a healthy node (or give
# "retest", exit 6, when other processes load it) and fail an injected slow GEMM (exit 1) on
# one rank, also under --slurm-health; --record-expect writes a file --expect reads. Under a
# busy loop per core started and stopped by this script, no healthy run fails (exit 0 or 6),
# while a slow GEMM still does. --level long's burn finds a wrong GEMM result (bad_burn).
# A clean run passes, or is "retest" (6, no FAIL line) when the machine is loaded: timing
# never decides a test.
set -u
command -v mpirun >/dev/null || { echo "mpirun not installed"; exit 77; }
command -v python3 >/dev/null || { echo "python3 not installed"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
SRC=${DDP_SRC:?}
if [[ -n ${DDPTRAIN:-} ]] && "$DDPTRAIN" validate --help 2>/dev/null | grep -q 'ddptrain validate'; then
    V=("$DDPTRAIN" validate)
else
    V=("${DDP_VALIDATE_DRIVER:?neither DDPTRAIN nor DDP_VALIDATE_DRIVER has validate}" validate)
fi
echo "validate command: ${V[*]}"
CFG=$SRC/tests/validate/fast.ini
REF=$SRC/configs/validate-ref
HOST=$(hostname)
work=$(mktemp -d)
loaders=()
stop_load() {
    ((${#loaders[@]})) || return 0
    kill "${loaders[@]}" 2>/dev/null
    wait "${loaders[@]}" 2>/dev/null
    loaders=()
}
trap 'stop_load; rm -rf "$work"' EXIT
cd "$work" || exit 1
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# run NAME NP [ARGS...]: validate --quick with the test settings on NP ranks (0: no mpirun);
# output in NAME.log, JSON in NAME.json, exit code in $rc
run() {
    local name=$1 np=$2
    shift 2
    local cmd=("${V[@]}" --quick --config "$CFG" --json "$name.json" "$@")
    ((np > 0)) && cmd=(mpirun -n "$np" "${cmd[@]}")
    local t0=$SECONDS
    timeout 300 "${cmd[@]}" >"$name.log" 2>&1
    rc=$?
    echo "--- $name: np $np, exit $rc, $((SECONDS - t0)) s"
}
# expect_fail NAME CHECK RANK: exit 1, a FAIL line for CHECK naming RANK on this host, none
# for CHECK naming another rank, and the same in the JSON failures
expect_fail() {
    local name=$1 check=$2 rank=$3
    [[ $rc == 1 ]] || bad "$name: exit $rc, want 1"
    grep -q "^FAIL $check: rank $rank on $HOST: " "$name.log" ||
        { bad "$name: no 'FAIL $check: rank $rank on $HOST'"; tail -n 20 "$name.log"; }
    grep "^FAIL $check: " "$name.log" | grep -v "^FAIL $check: rank $rank on " &&
        bad "$name: another rank blamed for $check"
    python3 - "$name.json" "$check" "$rank" "$HOST" <<'PY' || bad "$name: JSON failures"
import json, sys
j = json.load(open(sys.argv[1]))
check, rank, host = sys.argv[2], int(sys.argv[3]), sys.argv[4]
f = [x for x in j["failures"] if x["check"] == check]
assert j["verdict"] == "FAIL" and j["exit_code"] == 1, j["verdict"]
assert f and all(x["rank"] == rank and x["host"] == host for x in f), f
node = [n for n in j["nodes"] if n["host"] == host][0]
assert node["verdict"] == "FAIL" and node["reasons"], node
PY
    grep "^FAIL $check: " "$name.log" | head -n 1
}

# clean_ok NAME: exit 0, or 6 (retest: a shortfall the load explains) without any FAIL line
clean_ok() {
    [[ $rc == 0 || ($rc == 6 && $(grep -c '^FAIL ' "$1.log") == 0) ]] || {
        bad "$1: exit $rc, want 0 (or 6 without FAIL under load)"
        grep -E '^(FAIL|RETEST|validate)' "$1.log" || tail -n 5 "$1.log"
    }
    [[ $rc == 6 ]] && echo "$1: retest under load: $(grep -m1 '^RETEST' "$1.log")"
    return 0
}

# 1. clean, 2 ranks: pass, and the JSON holds what admins need
run clean 2
clean_ok clean
python3 - clean.json "$HOST" <<'PY' || bad "clean run: JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["verdict"] in ("PASS", "RETEST") and j["exit_code"] in (0, 6), j["verdict"]
assert j["world_size"] == 2 and j["level"] == "quick" and j["quick"] is True
assert all(f["verdict"] == "RETEST" for f in j["failures"]) and j["warnings"] == [], (
    j["failures"], j["warnings"])
rows = j["allreduce"]["rows"]
assert [r["bytes"] for r in rows] == [8 << i for i in range(18)], [r["bytes"] for r in rows]
assert all(r["busbw_gbs"] > 0 and r["time_us"] > 0 and r["wrong_elements"] == 0 for r in rows)
assert all(abs(r["busbw_gbs"] - r["algbw_gbs"]) < 1e-3 for r in rows)  # factor 1 on 2 ranks
assert len(j["ranks"]) == 2
for r in j["ranks"]:
    assert r["host"] == sys.argv[2] and r["gemm_gflops"] > 0 and r["triad_gbs"] > 0, r
    assert r["gpu"] in ("none", "cuda") and r["cpu_model"] and r["mem_total_bytes"] > 0, r
    assert 0 <= r["cpu_wait_share"] <= 1 and 0 <= r["foreign_cpu_share"] <= 1, r
g = j["golden"]
assert g["verdict"] == "PASS" and g["hash_match"] and g["steps"] == 30, g
assert g["reference"].endswith("cpu-w2.ref") and g["max_rel_diff"] <= g["tolerance"], g
assert len(g["losses"]) == 30 and j["nodes"][0]["verdict"] in ("PASS", "RETEST")
r1 = [r for r in rows if r["bytes"] == 1 << 20][0]
print("clean: 1 MiB busbw %.3f GB/s, sgemm %s GFLOP/s, triad %s GB/s, golden %s" % (
    r1["busbw_gbs"], [r["gemm_gflops"] for r in j["ranks"]], [r["triad_gbs"] for r in j["ranks"]],
    g["reason"]))
PY
grep -qE '^validate: (PASS \(2 ranks on 1 node|RETEST)' clean.log || bad "clean run: no PASS line"
grep -q '^ *(B) *(elements) *(us) *(GB/s) *(GB/s)' clean.log || bad "clean run: no units row"

# 2. each fault names its rank and host
DDP_TEST_VALIDATE_FAULT=slow_gemm:1 run slow_gemm 2
expect_fail slow_gemm gemm 1
DDP_TEST_VALIDATE_FAULT=slow_triad:0 run slow_triad 2
expect_fail slow_triad triad 0
DDP_TEST_VALIDATE_FAULT=bad_allreduce:1 run bad_allreduce 2
expect_fail bad_allreduce allreduce 1
DDP_TEST_VALIDATE_FAULT=flip_param:0 run flip_param 2
expect_fail flip_param golden 0
grep -q 'changed in memory between steps 15 and 16' flip_param.log || bad "flip_param: step"
DDP_TEST_VALIDATE_FAULT=bad_grad:1 run bad_grad 2
expect_fail bad_grad golden 1
grep -q '^FAIL golden: rank 1 on .*: golden run step 10: ' bad_grad.log || bad "bad_grad: step"

# 3. one process, and 3 ranks (a majority) with two faults at once
run single 0
clean_ok single
grep -q 'cpu-w1.ref' single.json || bad "single process: not checked against cpu-w1.ref"
run three 3
clean_ok three
DDP_TEST_VALIDATE_FAULT=flip_param:1,bad_allreduce:2 run three_faults 3
[[ $rc == 1 ]] || bad "3 ranks, two faults: exit $rc"
grep -q "^FAIL golden: rank 1 on $HOST: " three_faults.log || bad "3 ranks: rank 1 not named"
grep -q "^FAIL allreduce: rank 2 on $HOST: " three_faults.log || bad "3 ranks: rank 2 not named"
[[ $(grep -c '^FAIL ' three_faults.log) == 2 ]] ||
    { bad "3 ranks: not exactly two failures"; grep '^FAIL' three_faults.log; }

# 4. references
run record 2 --record "$work/r.ref"
clean_ok record
[[ -s r.ref ]] || { bad "--record: no r.ref"; tail record.log; }
[[ $(grep -c '^step ' r.ref) == 100 ]] || bad "--record: not 100 steps"
run own 2 --reference "$work/r.ref"
clean_ok own
# rank 1's gradient norm at step 3 changed in the file: rank 1 is named, at step 3
awk '$1 == "step" && $2 == 3 { $7 = $7 * 1.01 } { print }' r.ref >r1.ref
run changed 2 --reference "$work/r1.ref"
expect_fail changed golden 1
grep -q 'golden run step 3: ' changed.log || bad "changed reference: step 3 not named"
run other_size 2 --reference "$REF/cpu-w1.ref"
clean_ok other_size
grep -q '^WARN: golden run: no reference: .*cpu-w1.ref is for 1 rank, this run has 2' \
    other_size.log || bad "reference for another world size: no warning"
grep -q '"verdict": "WARN"' other_size.json || bad "other size: golden verdict not WARN"
run missing 2 --reference "$work/nope.ref"
[[ $rc == 2 ]] || bad "missing reference: exit $rc, want 2"

# 5. usage errors
DDP_TEST_VALIDATE_FAULT=slow:1 run badfault 0
[[ $rc == 2 ]] && grep -q 'DDP_TEST_VALIDATE_FAULT' badfault.log || bad "bad fault string: exit $rc"
printf '[gemm]\nn_quick = 3\n' >bad.ini
timeout 60 "${V[@]}" --config bad.ini >badcfg.log 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q 'bad.ini:2: \[gemm\] n_quick' badcfg.log || bad "bad settings: exit $rc"
timeout 60 "${V[@]}" --frobnicate >badarg.log 2>&1
[[ $? == 2 ]] || bad "unknown argument: not exit 2"

# 6. expectations: floors at half of the single run's rates (whatever the load was then)
python3 - single.json >half.ini <<'PY' || bad "single run: no rates for the floors"
import json, sys
r = json.load(open(sys.argv[1]))["ranks"][0]
print("[node]\ntype = test, half of a first run\n[gpu]\ncount = %d" % r["gpu_count"])
print("[gemm]\nn = 256\nmin_gflops = %.3f\n[triad]\nmib = 128\nmin_gbs = %.3f" % (
    r["gemm_gflops"] / 2, r["triad_gbs"] / 2))
PY
run expect_ok 0 --expect "$work/half.ini"
clean_ok expect_ok
grep -q '"level": "quick"' expect_ok.json && grep -q "\"expect\": \"$work/half.ini\"" expect_ok.json ||
    bad "expect_ok: no level or expectation file in the JSON"
DDP_TEST_VALIDATE_FAULT=slow_gemm:0 run expect_slow 0 --expect "$work/half.ini"
expect_fail expect_slow gemm 0
grep -q "^FAIL gemm: rank 0 on $HOST: sgemm .* is below the floor .* of $work/half.ini" \
    expect_slow.log || bad "expect_slow: the floor is not named"
# the node's GPU count is part of the expectation
sed 's/^count = .*/count = 7/' half.ini >gpus.ini
run expect_gpus 0 --expect "$work/gpus.ini"
expect_fail expect_gpus gpu 0
# --slurm-health: one process, the quick level within the budget, exit 0 or 1
timeout 120 "${V[@]}" --slurm-health --config "$CFG" --expect "$work/half.ini" >health_ok.log 2>&1
rc=$?
[[ $rc == 0 ]] || { bad "--slurm-health, healthy: exit $rc"; tail -n 5 health_ok.log; }
DDP_TEST_VALIDATE_FAULT=slow_gemm:0 timeout 120 "${V[@]}" --slurm-health --config "$CFG" \
    --expect "$work/half.ini" >health_slow.log 2>&1
rc=$?
[[ $rc == 1 ]] && grep -q "^FAIL gemm: rank 0 on $HOST: " health_slow.log ||
    { bad "--slurm-health, slow GEMM: exit $rc"; tail -n 5 health_slow.log; }
# --record-expect (foreign_load_max 0: record even on this shared machine) writes what
# --expect reads; the margin (floors at 5% of the first run) is for the plumbing, not the
# speed: on this shared machine a second run's all-reduce was once half the first's
{ cat "$CFG"; printf '[validate]\nforeign_load_max = 0\n'; } >rec.ini
run rec_expect 2 --config "$work/rec.ini" --record-expect "$work/rec-expect.ini" --margin 0.95
[[ $rc == 0 && -s rec-expect.ini ]] || { bad "--record-expect: exit $rc"; tail -n 5 rec_expect.log; }
grep -q '^min_gflops = ' rec-expect.ini && grep -q '^min_busbw_gbs = 1048576:' rec-expect.ini ||
    { bad "--record-expect: no floors"; cat rec-expect.ini; }
grep -q '^source = measured on .*margin 0.95' rec-expect.ini || bad "--record-expect: no source"
run rec_check 2 --expect "$work/rec-expect.ini"
clean_ok rec_check

# 7. a busy loop per core, started here and stopped here: healthy runs are never failed (0, or
# 6 = retest), a slow GEMM still is
for ((i = 0; i < $(nproc); i++)); do
    (while :; do :; done) &
    loaders+=($!)
done
echo "load: ${#loaders[@]} busy loops (pids ${loaders[*]})"
python3 - single.json >tight.ini <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["ranks"][0]
print("[gemm]\nn = 256\nmin_gflops = %.3f\n[triad]\nmib = 128\nmin_gbs = %.3f" % (
    r["gemm_gflops"] * 0.9, r["triad_gbs"] * 0.9))
PY
run loaded_tight 0 --expect "$work/tight.ini"
clean_ok loaded_tight
run loaded_two 2
clean_ok loaded_two
timeout 120 "${V[@]}" --slurm-health --config "$CFG" --expect "$work/tight.ini" \
    >loaded_health.log 2>&1
rc=$?
[[ $rc == 0 ]] || { bad "--slurm-health under load: exit $rc, want 0"; tail -n 5 loaded_health.log; }
grep -E '^(validate|RETEST)' loaded_health.log | head -n 2
DDP_TEST_VALIDATE_FAULT=slow_gemm:0 run loaded_slow 0 --expect "$work/half.ini"
expect_fail loaded_slow gemm 0
stop_load

# 8. --level long: the burn compares every GEMM result with the first
# the long level's own keys, small (the plain keys apply, not the _quick ones)
printf '%s\n' '[gemm]' 'n = 256' 'reps = 3' 'seconds = 0.2' '[triad]' 'mib = 16' 'reps = 3' \
    'seconds = 0.1' '[allreduce]' 'max_bytes_long = 65536' 'block_ms = 2' '[golden]' 'steps = 30' \
    '[burn]' 'seconds = 0.5' >burn.ini
run long_ok 0 --level long --config "$work/burn.ini"
clean_ok long_ok
grep -q 'burn: ' long_ok.log || bad "--level long: no burn"
DDP_TEST_VALIDATE_FAULT=bad_burn:0 run long_bad 0 --level long --config "$work/burn.ini"
expect_fail long_bad burn 0

# 9. usage errors of the new options
for args in "--expect $work/nope.ini" "--level fast" "--drain" "--budget-s 5" "--margin 1.5" \
    "--slurm-health --level long" "--expect $work/half.ini --record-expect x.ini"; do
    # shellcheck disable=SC2086  # split on purpose
    timeout 60 "${V[@]}" $args >usage.log 2>&1
    rc=$?
    [[ $rc == 2 ]] || { bad "validate $args: exit $rc, want 2"; cat usage.log; }
done
printf '[gemm]\nn = 256\nmin_gflops = 1\nmin_gflops = 2\n' >dup.ini
timeout 60 "${V[@]}" --expect dup.ini >dup.log 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q 'dup.ini:4: \[gemm\] min_gflops: given twice (first on line 3)' dup.log ||
    { bad "duplicate key in an expect file: exit $rc"; cat dup.log; }

((fails == 0)) && echo "all validate checks passed"
exit $((fails > 0))

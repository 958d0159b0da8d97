#!/usr/bin/env bash
# The real `ddptrain validate --quick` through slurm/validate-nodes.sbatch on both nodes, with
# the test settings of tests/validate/fast.ini (the cluster runs 8 ranks of 2 threads on this
# machine's cores: only gross slowness may fail a rate there). A clean job passes every node
# alone and together, and its JSON reports hold 4 and 8 ranks on the right hosts, the
# all-reduce table with busbw per size, and golden runs checked against the shipped
# references for 4 and 8 ranks. A job with faults on ranks 5 and 6 (which exist only in the
# together step, on n2) passes alone, fails together with exit 1, and names rank 5 on n2
# (all-reduce) and rank 6 on n2 (golden run) in the log and the JSON.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

need_ddptrain
"$DDPTRAIN" validate --help 2>&1 | grep -q 'ddptrain validate' ||
    skip "this ddptrain has no validate subcommand"
sr srun --mpi=list 2>&1 | grep -qw pmix || skip "this Slurm has no pmix plugin"
T=$DDP_SRC/slurm/validate-nodes.sbatch
[[ -f $T ]] || fail "slurm/validate-nodes.sbatch missing"
CFG=$DDP_SRC/tests/validate/fast.ini

rc=0
DDP_VALIDATE_DIR=$CASE_DIR/ok SR_TIMEOUT=140 sr sbatch --wait -J v-ok -o "$CASE_DIR/ok.out" "$T" \
    --quick --config "$CFG" || rc=$?
cat ok.out
if [[ $rc != 0 ]]; then # the step logs say why
    for f in ok/*.log; do echo "--- $f"; tail -n 40 "$f"; done
fi
# 6: retest, a node short only while other processes loaded the machine (never a FAIL)
[[ $rc == 0 || $rc == 6 ]] || fail "clean job: sbatch --wait exit code $rc, want 0 (or 6)"
grep -qxE '(PASS|RETEST) n1 \(alone.*' ok.out || fail "clean job: n1 did not pass alone"
grep -qxE '(PASS|RETEST) n2 \(alone.*' ok.out || fail "clean job: n2 did not pass alone"
grep -qE '^(PASS|RETEST) together.*: n1 n2' ok.out || fail "clean job: no PASS together"
! grep -q '^FAIL' ok.out || fail "clean job: a FAIL line"
/usr/bin/python3 - ok <<'PY' || fail "clean job: JSON reports"
import json, sys
d = sys.argv[1]
for name, ranks, hosts in (("node-n1", 4, ["n1"]), ("node-n2", 4, ["n2"]), ("all", 8, ["n1", "n2"])):
    j = json.load(open(f"{d}/{name}.json"))
    assert j["verdict"] in ("PASS", "RETEST") and j["world_size"] == ranks, name
    assert j["launcher"] == "slurm", name
    assert [n["host"] for n in j["nodes"]] == hosts, (name, j["nodes"])
    assert [r["host"] for r in j["ranks"]] == sorted(hosts * (ranks // len(hosts))), name
    rows = j["allreduce"]["rows"]
    assert rows and all(r["busbw_gbs"] > 0 and r["wrong_elements"] == 0 for r in rows), name
    assert all(r["gemm_gflops"] > 0 and r["triad_gbs"] > 0 for r in j["ranks"]), name
    g = j["golden"]
    assert g["verdict"] == "PASS" and g["hash_match"], (name, g["reason"])
    assert g["reference"].endswith(f"cpu-w{ranks}.ref"), (name, g["reference"])
    mib = [r for r in rows if r["bytes"] == 1 << 20][0]
    print(f"{name}: {ranks} ranks, 1 MiB busbw {mib['busbw_gbs']:.3f} GB/s, golden {g['reason']}")
PY

rc=0
DDP_TEST_VALIDATE_FAULT=bad_allreduce:5,flip_param:6 DDP_VALIDATE_DIR=$CASE_DIR/bad SR_TIMEOUT=140 \
    sr sbatch --wait -J v-bad -o "$CASE_DIR/bad.out" "$T" --quick --config "$CFG" || rc=$?
cat bad.out
grep -E '^(FAIL|validate:)' bad/all.log || true
[[ $rc != 0 ]] || fail "faulty job: sbatch --wait exit 0"
grep -qx 'PASS n1 (alone)' bad.out || fail "faulty job: n1 did not pass alone"
grep -qx 'PASS n2 (alone)' bad.out || fail "faulty job: n2 did not pass alone"
grep -qE '^FAIL together \(exit 1\): n1 n2: FAIL (allreduce|golden): rank [56] on n2: ' bad.out ||
    fail "faulty job: no 'FAIL together (exit 1)' naming the failing check"
grep -q '^FAIL allreduce: rank 5 on n2: ' bad/all.log || fail "rank 5 on n2 not named (all-reduce)"
grep -q '^FAIL golden: rank 6 on n2: ' bad/all.log || fail "rank 6 on n2 not named (golden run)"
/usr/bin/python3 - bad/all.json <<'PY' || fail "faulty job: JSON failures"
import json, sys
j = json.load(open(sys.argv[1]))
f = {(x["check"], x["rank"], x["host"]) for x in j["failures"] if x["check"] in ("allreduce", "golden")}
assert f == {("allreduce", 5, "n2"), ("golden", 6, "n2")}, f
assert j["verdict"] == "FAIL" and [n["verdict"] for n in j["nodes"] if n["host"] == "n2"] == ["FAIL"], j["nodes"]
PY

#!/usr/bin/env bash
# `srun -N 2 -n 4 --ntasks-per-node=2 --mpi=pmix ddptrain validate --quick` across the two
# nodes (ranks 0-1 on n1, 2-3 on n2), with the test settings of tests/validate/fast.ini: clean,
# it passes; with DDP_TEST_VALIDATE_FAULT=slow_gemm:1,bad_allreduce:2,bad_grad:3 it exits 1 and names
# rank 1 on n1 (GEMM), rank 2 on n2 (all-reduce) and rank 3 on n2 (golden run), and no other.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

need_ddptrain
"$DDPTRAIN" validate --help 2>&1 | grep -q 'ddptrain validate' ||
    skip "this ddptrain has no validate subcommand"
sr srun --mpi=list 2>&1 | grep -qw pmix || skip "this Slurm has no pmix plugin"
CFG=$DDP_SRC/tests/validate/fast.ini
run=(srun -N 2 -n 4 --ntasks-per-node=2 --cpus-per-task=1 --mpi=pmix "$DDPTRAIN" validate --quick
    --config "$CFG")

rc=0
SR_TIMEOUT=100 sr "${run[@]}" --json "$CASE_DIR/ok.json" >ok.log 2>&1 || rc=$?
tail -n 8 ok.log
# 6: retest, a rank short only while other processes loaded the machine (never a FAIL)
[[ $rc == 0 || ($rc == 6 && $(grep -c '^FAIL ' ok.log) == 0) ]] || fail "clean: exit code $rc, want 0 (or 6)"
grep -qE '^validate: (PASS \(4 ranks on 2 nodes|RETEST)' ok.log || fail "clean srun: no PASS line"

rc=0
DDP_TEST_VALIDATE_FAULT=slow_gemm:1,bad_allreduce:2,bad_grad:3 SR_TIMEOUT=100 \
    sr "${run[@]}" --json "$CASE_DIR/bad.json" >bad.log 2>&1 || rc=$?
grep -E "^(FAIL|validate:)" bad.log || tail -n 20 bad.log
sed -n "/^ranks/,/median/p" bad.log
expect_eq "$rc" 1 "faulty srun: exit code"
grep -q '^FAIL gemm: rank 1 on n1: ' bad.log || fail "rank 1 on n1 not named (gemm)"
grep -q '^FAIL allreduce: rank 2 on n2: ' bad.log || fail "rank 2 on n2 not named (all-reduce)"
grep -q '^FAIL golden: rank 3 on n2: golden run step 10: ' bad.log ||
    fail "rank 3 on n2 not named (golden run, step 10)"
/usr/bin/python3 - bad.json <<'PY' || fail "faulty srun: JSON failures"
import json, sys
j = json.load(open(sys.argv[1]))
f = {(x["check"], x["rank"], x["host"]) for x in j["failures"]
     if x["check"] in ("allreduce", "golden") or x["rank"] == 1}
assert f == {("gemm", 1, "n1"), ("allreduce", 2, "n2"), ("golden", 3, "n2")}, f
assert [n["verdict"] for n in j["nodes"]] == ["FAIL", "FAIL"], j["nodes"]
PY

#!/usr/bin/env bash
# `ddptrain validate --quick` on 2 nodes x 4 twin GPUs (build/ddptrain-twin, docs/gpu.md):
# srun -N 2 -n 8 --gres=gpu:4 (NCCL id through the TCP rendezvous): every check runs on the
# ranks' bound GPUs, the all-reduce sweep goes through NCCL and reports its busbw, and it
# passes; with DDP_TEST_VALIDATE_FAULT=bad_allreduce:5,flip_param:2 it exits 1 naming rank 5 on n2
# GPU 1 (all-reduce) and rank 2 on n1 GPU 2 (golden run), and no other.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"
need_ddptrain
TWIN=${DDPTRAIN_TWIN:-$(dirname "$DDPTRAIN")/ddptrain-twin}
[[ -x $TWIN ]] || skip "no ddptrain-twin (built where a C++20 compiler is; -Dtwin)"
[[ $DDP_SLURM_MODE == netns ]] || skip "needs the netns cluster (node names n1, n2)"
run=(srun -N 2 -n 8 --ntasks-per-node=4 --gres=gpu:4 "$TWIN" validate --quick
    --config "$DDP_SRC/tests/validate/fast.ini")

rc=0
SR_TIMEOUT=140 sr "${run[@]}" >ok.log 2>&1 || rc=$?
grep -E '^(ddptrain|validate|FAIL)|through comm' ok.log
# 6: retest, a rank short only while other processes loaded the machine (never a FAIL)
[[ $rc == 0 || ($rc == 6 && $(grep -c '^FAIL ' ok.log) == 0) ]] || fail "clean: exit code $rc, want 0 (or 6)"
grep -q 'comm nccl, backend cuda' ok.log || fail "clean: not on twin GPUs through NCCL"
grep -q '^all-reduce: .* through comm nccl' ok.log || fail "clean: no NCCL all-reduce sweep"
grep -Eq '^ +1048576 +262144 +[0-9.]+ +[0-9.]+ +[0-9.]+ ' ok.log || fail "clean: no busbw row"
grep -qE '^validate: (PASS \(8 ranks on 2 nodes|RETEST)' ok.log || fail "clean: no PASS line"

rc=0
DDP_TEST_VALIDATE_FAULT=bad_allreduce:5,flip_param:2 SR_TIMEOUT=140 sr "${run[@]}" >bad.log 2>&1 ||
    rc=$?
grep -E '^(FAIL|validate:)' bad.log || tail -n 20 bad.log
expect_eq "$rc" 1 "faulty: exit code"
grep -q '^FAIL allreduce: rank 5 on n2 GPU 1: ' bad.log || fail "rank 5 on n2 GPU 1 not named"
grep -q '^FAIL golden: rank 2 on n1 GPU 2: ' bad.log || fail "rank 2 on n1 GPU 2 not named"
expect_eq "$(grep -c '^FAIL [a-z]*: rank' bad.log)" 2 "faulty: failures named"

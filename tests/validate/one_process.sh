#!/bin/bash
# one_process.sh - `ddptrain validate` on one process (suite unit): its all-reduce is not
# measured and says so (no table of figures, "measured": false in the JSON); a --slurm-health
# retest (fault `loaded` against a floor no node reaches) exits 0, and its RETEST line and its
# JSON say 0.
set -u
command -v python3 >/dev/null || { echo "python3 not installed"; exit 77; }
V=("${DDPTRAIN:?}" validate)
CFG=${DDP_SRC:?}/tests/validate/fast.ini
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fails=0
bad() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

# one rank: no all-reduce figures
timeout 120 "${V[@]}" --quick --config "$CFG" --json one.json >one.log 2>&1
rc=$?
[[ $rc == 0 || $rc == 6 ]] || { bad "one rank: exit $rc"; tail -n 5 one.log; }
grep -q '^all-reduce: not measured (one rank)$' one.log || bad "one rank: no 'not measured' line"
grep -q '(elements) *(us)' one.log && bad "one rank: an all-reduce table"
python3 - one.json <<'PY' || bad "one rank: JSON"
import json, sys
a = json.load(open(sys.argv[1]))["allreduce"]
assert a["measured"] is False and a["rows"] == [], a
PY

# --slurm-health: a retest exits 0 and says 0
printf '[gemm]\nn = 64\nmin_gflops = 1000000000\n' >never.ini
DDP_TEST_VALIDATE_FAULT=loaded:0 timeout 120 "${V[@]}" --slurm-health --config "$CFG" \
    --expect never.ini --json health.json >health.log 2>&1
rc=$?
[[ $rc == 0 ]] || { bad "--slurm-health retest: exit $rc, want 0"; tail -n 5 health.log; }
grep -q '^validate: RETEST: .*(exit 0: --slurm-health never fails a node for its load)$' \
    health.log || bad "--slurm-health retest: the RETEST line does not say exit 0"
grep -q '(exit 6' health.log && bad "--slurm-health retest: prints exit 6"
python3 - health.json <<'PY' || bad "--slurm-health retest: JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["verdict"] == "RETEST" and j["exit_code"] == 0, (j["verdict"], j["exit_code"])
PY
((fails == 0)) || { grep -E '^(validate|RETEST|FAIL|all-reduce)' one.log health.log; exit 1; }
echo "one process: all-reduce not measured; --slurm-health retest exits 0 and says so"

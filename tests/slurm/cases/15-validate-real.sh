#!/usr/bin/env bash
# slurm/validate-nodes.sbatch with the real `ddptrain validate --quick` on both nodes: every
# node passes alone and together, the job exits 0 and the JSON reports are written and parse.
# Skipped (77) until ddptrain has the subcommand (`ddptrain validate --help` exits 0 and
# describes validate; 14-validate-template.sh covers the script's logic meanwhile).
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

need_ddptrain
if ! help=$("$DDPTRAIN" validate --help 2>&1) || ! grep -qw validate <<<"$help"; then
    skip "ddptrain validate not built yet (slurm/validate-nodes.sbatch is tested with a stub in 14)"
fi

rc=0
DDP_VALIDATE_DIR=$CASE_DIR/reports SR_TIMEOUT=240 sr sbatch --wait -o "$CASE_DIR/validate.out" \
    "$DDP_SRC/slurm/validate-nodes.sbatch" --quick --config "$DDP_SRC/tests/validate/fast.ini" || rc=$?
cat validate.out
for f in reports/*.log; do echo "== $f"; tail -n 5 "$f"; done
# 6: retest, a node short only while other processes loaded the machine (never a FAIL)
[[ $rc == 0 || $rc == 6 ]] || fail "sbatch --wait exit code $rc, want 0 (or 6)"
grep -qxE '(PASS|RETEST) n1 \(alone.*' validate.out || fail "n1 did not pass alone"
grep -qxE '(PASS|RETEST) n2 \(alone.*' validate.out || fail "n2 did not pass alone"
grep -qE '^(PASS|RETEST) together.*: n1 n2' validate.out || fail "n1 and n2 did not pass together"
for f in node-n1 node-n2 all; do
    /usr/bin/python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "reports/$f.json" ||
        fail "reports/$f.json missing or not JSON"
done

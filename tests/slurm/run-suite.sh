#!/usr/bin/env bash
# tests/slurm/run-suite.sh: the `slurm` suite. Brings up a private Slurm cluster once
# (tools/slurm-cluster, its own base directory so a user's cluster is left alone), runs every
# case in cases/ (each in its own empty directory), prints one PASS/FAIL/SKIP line per case, and
# takes the cluster down again whatever happens. Exit 0 only if no case failed; 77 where Slurm
# cannot be started at all (not root, binaries missing).
#   tests/slurm/run-suite.sh [CASE-PATTERN]     e.g. run-suite.sh 05
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${DDP_SRC:-$(cd "$HERE/../.." && pwd)}
export CLUSTER=$SRC/tools/slurm-cluster
export DDP_SRC=$SRC
export DDPTRAIN=${DDPTRAIN:-}
PATTERN=${1:-}
CASE_TIMEOUT=${DDP_SLURM_CASE_TIMEOUT:-150}

if [[ $(id -u) != 0 ]]; then echo "SKIP: the slurm suite needs root"; exit 77; fi
for b in slurmctld slurmd munged srun sbatch ip; do
    command -v "$b" >/dev/null || { echo "SKIP: $b not installed"; exit 77; }
done
[[ -x $CLUSTER ]] || { echo "FAIL: $CLUSTER missing"; exit 1; }

WORK=$(mktemp -d /tmp/ddptrain-slurm-test.XXXXXX)
chmod 0755 "$WORK"
export DDP_SLURM_BASE=$WORK/cluster

cleanup() {
    timeout 60 "$CLUSTER" down >/dev/null 2>&1 || echo "warning: cluster down failed" >&2
    rm -rf "$WORK"
}
casepid=
on_signal() {
    [[ -n $casepid ]] && kill -TERM "$casepid" 2>/dev/null
    exit 130
}
trap cleanup EXIT
trap on_signal INT TERM

# Elapsed seconds with one decimal since a start taken with $(now_ms); bash only (no bc).
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }
since() { local d=$(($(now_ms) - $1)); printf '%d.%d' $((d / 1000)) $((d % 1000 / 100)); }

t0=$(now_ms)
if ! timeout 120 "$CLUSTER" up 2>&1; then
    echo "FAIL: could not bring up the Slurm cluster"
    exit 1
fi
eval "$("$CLUSTER" env)"
echo "cluster up: mode=$DDP_SLURM_MODE nodes=$DDP_SLURM_NODES ($(since "$t0") s)"

pass=0 fail=0 skip=0 failed=()
for c in "$HERE"/cases/*.sh; do
    name=$(basename "$c" .sh)
    [[ -z $PATTERN || $name == *$PATTERN* ]] || continue
    export CASE_DIR=$WORK/$name
    mkdir -p "$CASE_DIR"
    s=$(now_ms)
    # in the background so that a signal to the suite is handled at once (wait is interruptible)
    (cd "$CASE_DIR" && exec timeout "$CASE_TIMEOUT" bash "$c") >"$WORK/$name.log" 2>&1 &
    casepid=$!
    wait "$casepid"
    rc=$?
    casepid=
    dt=$(since "$s")
    case $rc in
    0) echo "PASS $name (${dt} s)"; pass=$((pass + 1)) ;;
    77) echo "SKIP $name: $(grep -m1 '^SKIP:' "$WORK/$name.log" | sed 's/^SKIP: //')"; skip=$((skip + 1)) ;;
    *)
        [[ $rc == 124 ]] && echo "timed out after ${CASE_TIMEOUT} s" >>"$WORK/$name.log"
        echo "FAIL $name (exit $rc, ${dt} s)"
        sed 's/^/    | /' "$WORK/$name.log"
        fail=$((fail + 1)) failed+=("$name")
        ;;
    esac
    [[ ${VERBOSE:-0} == 1 ]] && [[ $rc == 0 || $rc == 77 ]] && sed 's/^/    | /' "$WORK/$name.log"
done

if ((fail > 0)); then
    echo "--- cluster state and logs after failures"
    timeout 10 "$CLUSTER" status 2>&1 | sed 's/^/    | /'
    for f in "$DDP_SLURM_BASE"/log/*.log; do
        [[ -s $f ]] || continue
        echo "    | == $(basename "$f")"
        grep -E 'error|fatal' "$f" | grep -vE 'state file|Trying backup state' | tail -n 10 |
            sed 's/^/    | /'
    done
fi
echo "slurm suite: $pass passed, $fail failed, $skip skipped${failed:+ (${failed[*]})}"
echo "total $(since "$t0") s"
((fail == 0))

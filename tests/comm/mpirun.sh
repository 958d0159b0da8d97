#!/bin/sh
# mpirun.sh [--expect CODE] [--min S] [--max S]
#           [--grep TEXT [--from MARK] [--after S] [--within S]] NP PROGRAM [ARGS...]
#
# Runs PROGRAM under `mpirun -n NP --oversubscribe` (NP = 0: directly, without mpirun) with a
# hard time limit, then checks its exit code (default 0), its wall time in seconds (at least
# --min, at most --max), that its output contains TEXT and, with --within, that the first line
# with TEXT came out between --after and --within seconds after the start, or after the first
# line with MARK. Exit 0 pass, 1 fail, 77 skipped (no mpirun).
expect=0 min=0 max=100 pattern= within= mark= after=0
while [ $# -gt 0 ]; do
    case $1 in
    --expect) expect=$2; shift 2 ;;
    --min) min=$2; shift 2 ;;
    --max) max=$2; shift 2 ;;
    --grep) pattern=$2; shift 2 ;;
    --within) within=$2; shift 2 ;;
    --from) mark=$2; shift 2 ;;
    --after) after=$2; shift 2 ;;
    *) break ;;
    esac
done
np=$1
shift
if [ "$np" -gt 0 ]; then
    command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skipped"; exit 77; }
    set -- mpirun -n "$np" --oversubscribe "$@"
fi
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Keep the oversubscribed ranks from spinning on each other's cores.
export OMPI_MCA_mpi_yield_when_idle=1
# Two ranks aborting at once make the aggregated help messages race in mpirun (seconds late).
export OMPI_MCA_orte_base_help_aggregate=0

log=$(mktemp)
rcfile=$(mktemp)
seen=$(mktemp)
marked=$(mktemp)
trap 'rm -f "$log" "$rcfile" "$seen" "$marked"' EXIT
t0=$(date +%s.%N)
# The limit is generous beyond --max so that a hang shows up as a failure, not a stuck suite.
# Each line is stamped as it arrives, so the time of the expected message can be checked
# apart from the launcher's own teardown.
{
    timeout -k 5 $((${max%.*} + 30)) "$@" 2>&1
    echo $? >"$rcfile"
} | while IFS= read -r line; do
    printf '%s\n' "$line" >>"$log"
    if [ -n "$pattern" ] && [ ! -s "$seen" ]; then
        case $line in *"$pattern"*) date +%s.%N >"$seen" ;; esac
    fi
    if [ -n "$mark" ] && [ ! -s "$marked" ]; then
        case $line in *"$mark"*) date +%s.%N >"$marked" ;; esac
    fi
done
rc=$(cat "$rcfile")
t1=$(date +%s.%N)
cat "$log"
elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
echo "mpirun.sh: exit $rc after $elapsed s (want exit $expect within [$min, $max] s)"
status=0
if [ "$rc" -ne "$expect" ]; then
    echo "FAIL: exit code $rc, want $expect"
    status=1
fi
if awk -v e="$elapsed" -v lo="$min" -v hi="$max" 'BEGIN { exit !(e < lo || e > hi) }'; then
    echo "FAIL: took $elapsed s, want [$min, $max] s"
    status=1
fi
if [ -n "$pattern" ] && [ ! -s "$seen" ]; then
    echo "FAIL: output lacks: $pattern"
    status=1
elif [ -n "$mark" ] && [ ! -s "$marked" ]; then
    echo "FAIL: output lacks the mark: $mark"
    status=1
elif [ -n "$pattern" ] && [ -n "$within" ]; then
    from=$t0
    [ -n "$mark" ] && from=$(cat "$marked")
    at=$(awk -v a="$from" -v b="$(cat "$seen")" 'BEGIN { printf "%.2f", b - a }')
    echo "mpirun.sh: message after $at s (want within [$after, $within] s)"
    if awk -v e="$at" -v lo="$after" -v hi="$within" 'BEGIN { exit !(e < lo || e > hi) }'; then
        echo "FAIL: message after $at s, want [$after, $within] s"
        status=1
    fi
fi
exit $status

#!/bin/bash
# usage.sh - `ddptrain validate` usage errors found before any measurement (suite unit):
# output paths (--json, --record, --record-expect) that cannot be written or name an input,
# --margin without --record-expect, a --reference that is a FIFO and an expectation asking for
# more triad memory than the process has each exit 2 with one line naming the option, and
# nothing is measured (no table on stdout) or written.
set -u
V=("${DDPTRAIN:?}" validate)
CFG=${DDP_SRC:?}/tests/validate/fast.ini
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
pass=0 fail=0
# case_ NAME PATTERN ARGS...: exit 2, one line on stderr holding PATTERN, nothing measured
case_() {
    local name=$1 pattern=$2
    shift 2
    timeout -k 5 120 "${V[@]}" --quick --config "$CFG" "$@" >out.txt 2>err.txt
    local rc=$? why=""
    [ $rc -eq 2 ] || why="exit $rc, want 2"
    [ "$(grep -c . err.txt)" -eq 1 ] || why="$why; stderr has $(grep -c . err.txt) lines"
    grep -q -- "$pattern" err.txt || why="$why; stderr lacks '$pattern'"
    ! grep -qi 'gemm\|triad\|all-reduce' out.txt || why="$why; it measured first"
    if [ -z "$why" ]; then
        pass=$((pass + 1)); printf 'ok   %-34s %s\n' "$name" "$(head -c 160 err.txt)"
    else
        fail=$((fail + 1)); printf 'FAIL %-34s %s\n' "$name" "$why"; head -3 err.txt out.txt
    fi
}
mkdir adir
mkfifo fifo.ref
case_ "--json in a missing directory" "validate: --json nodir/v.json: its directory nodir" \
    --json nodir/v.json
case_ "--json ''" "validate: --json '': an empty path" --json ""
case_ "--json a directory" "validate: --json adir: is a directory" --json adir
case_ "--record in a missing directory" "validate: --record nodir/x.ref: its directory nodir" \
    --record nodir/x.ref
case_ "--record-expect in a missing dir" "validate: --record-expect nodir/e.ini: its directory" \
    --record-expect nodir/e.ini
case_ "--margin without --record-expect" \
    "validate: --margin 0.1 applies to --record-expect only" --margin 0.1
case_ "--reference a FIFO" "reference fifo.ref is a FIFO, not a reference file" \
    --reference fifo.ref
# 3 x 64 GiB of triad buffers: refused where the process has less (every test machine)
avail_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
if [ "${avail_kib:-0}" -lt $((3 * 64 * 1024 * 1024)) ]; then
    printf '[triad]\nmib = 65536\n' > big.ini
    case_ "triad beyond available memory" \
        "validate: --expect ./big.ini: \[triad\] mib = 65536 asks for 3 buffers of 65536 MiB (192.0 GiB) but this process has" \
        --expect ./big.ini
fi
printf '[gemm]\nn = 256\nmin_gflops = 0.001\n' > floors.ini
cp floors.ini floors.orig
ln -s floors.ini floors-link.ini
case_ "--json over --expect" "validate: --json floors.ini is --expect floors.ini: validate never" \
    --expect floors.ini --json floors.ini
case_ "--json over a link to --expect" "validate: --json floors-link.ini is --expect floors.ini" \
    --expect floors.ini --json floors-link.ini
cmp -s floors.ini floors.orig || { fail=$((fail + 1)); echo "FAIL floors.ini was replaced"; }
[ -z "$(ls -A adir)" ] && ! ls ./*.tmp >/dev/null 2>&1 || { fail=$((fail + 1)); echo "FAIL wrote"; }
echo "validate usage: $pass passed, $fail failed"
[ $fail -eq 0 ]

#!/bin/sh
# test_launch_mpi.sh BIN - `BIN launch` running CPU ranks through mpirun (suite 'mpi'): the
# default for several ranks on one node, the MPI and TCP bootstraps under it, a failing rank,
# and SIGTERM / SIGUSR1 reaching the ranks. BIN is tests/launch/launch_cli (see
# test_launch.sh). Exit 77 without mpirun.
set -u
BIN=${1:?usage: test_launch_mpi.sh BIN}
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skipped"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/ddp-launch-mpi-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
# Keep oversubscribed ranks from spinning on each other's cores (as tests/comm/mpirun.sh).
export OMPI_MCA_mpi_yield_when_idle=1
# CPU ranks (the mpirun default) also in a GPU build on a GPU machine
export DDP_TEST_FAKE_GPUS=0
run() { timeout -k 5 60 "$@" >"$T/out" 2>"$T/err"; rc=$?; }
field() { tr ' ' '\n' <"$2" | sed -n "s/^$1=//p"; }
lines() { wc -l <"$1" | tr -d ' '; }

# auto: 3 CPU ranks on one node run under mpirun
run "$BIN" launch --nproc-per-node 3 env
[ $rc -eq 0 ] && [ "$(lines "$T/out")" = 3 ] || fail "env x3: rc $rc $(cat "$T/out" "$T/err")"
[ "$(field launcher "$T/out" | sort -u)" = ompi ] && [ "$(field mpi "$T/out" | sort -u)" = 1 ] &&
    [ "$(field rank "$T/out" | sort | tr '\n' ' ')" = "0 1 2 " ] &&
    [ "$(field world_size "$T/out" | sort -u)" = 3 ] &&
    [ "$(field master_addr "$T/out" | sort -u)" = 127.0.0.1 ] &&
    [ "$(field master_port "$T/out" | sort -u | wc -l)" = 1 ] ||
    fail "env x3 under mpirun: $(cat "$T/out")"

# the MPI bootstrap (auto under mpirun) and the TCP one (MASTER_ADDR/PORT passed through)
for via in auto mpi tcp; do
    run "$BIN" launch --nproc-per-node 4 bootstrap-test --via $via
    want=$via
    [ $via = auto ] && want=mpi
    [ $rc -eq 0 ] && [ "$(lines "$T/out")" = 4 ] && [ "$(field via "$T/out" | sort -u)" = $want ] &&
        [ "$(field hash "$T/out" | sort -u | wc -l)" = 1 ] ||
        fail "bootstrap $via under mpirun: rc $rc $(cat "$T/out" "$T/err")"
done

# a failing rank: mpirun ends the others and names it; the launcher returns its code
run "$BIN" launch --nproc-per-node 3 probe --fail 1:3
[ $rc -eq 3 ] || fail "rank failure under mpirun: exit $rc, want 3"
grep -q "ddptrain launch: mpirun exited with code 3" "$T/err" || fail "rank failure: $(cat "$T/err")"

# SIGTERM goes to the ranks themselves (mpirun would abort at once), SIGUSR1 through mpirun;
# every rank sees it once and exits 75, and so does the launcher
# Ready means both ranks printed their probe line, which they do after installing their
# handlers. The output file exists before the launcher starts (the shell would create it only
# in the child), so the count is a number from the first poll on.
for sig in TERM USR1; do
    : >"$T/sig"
    "$BIN" launch --nproc-per-node 2 probe >>"$T/sig" 2>"$T/sigerr" &
    pl=$!
    n=0 ready=0
    while [ $n -lt 300 ]; do
        ready=$(grep -c '^probe rank=.*pid=' "$T/sig") || ready=0
        [ "$ready" -ge 2 ] && break
        kill -0 $pl 2>/dev/null || break
        sleep 0.05
        n=$((n + 1))
    done
    [ "$ready" -ge 2 ] || fail "SIG$sig under mpirun: ranks not ready: $(cat "$T/sig" "$T/sigerr")"
    kill -s $sig $pl
    wait $pl
    rs=$?
    num=15
    [ $sig = USR1 ] && num=10
    [ $rs -eq 75 ] || fail "SIG$sig under mpirun: launcher exit $rs, want 75: $(cat "$T/sigerr")"
    [ "$(grep -c "signal=$num\$" "$T/sig")" = 2 ] || fail "SIG$sig under mpirun: $(cat "$T/sig")"
done

[ $fails -eq 0 ] && echo "launch under mpirun: all checks passed ($BIN)"
[ $fails -eq 0 ]

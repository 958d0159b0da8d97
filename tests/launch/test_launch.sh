#!/bin/sh
# test_launch.sh BIN - `BIN launch --spawn env` as users see it, plus the TCP bootstrap between
# real processes. BIN is tests/launch/launch_cli: it runs the same ddp_cmd_launch as
# `ddptrain launch`, and its children (/proc/self/exe) are launch_cli again, which adds the
# `probe` helper (prints its rank, reacts to signals, can fail on purpose).
# Exit 0 when every check passes.
set -u
BIN=${1:?usage: test_launch.sh BIN}
T=$(mktemp -d "${TMPDIR:-/tmp}/ddp-launch-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# run ARGS...: stdout in $T/out, stderr in $T/err, exit code in $rc, wall seconds in $dt;
# clean environment (no GPU visible, so that `env` lines are the same on GPU hosts), bounded
# in time
run() {
    t0=$(date +%s.%N)
    env -i PATH="$PATH" CUDA_VISIBLE_DEVICES= timeout -k 5 60 "$@" >"$T/out" 2>"$T/err"
    rc=$?
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
}
lines() { wc -l <"$1" | tr -d ' '; }
field() { tr ' ' '\n' <"$2" | sed -n "s/^$1=//p"; } # every value of FIELD in FILE
# between LO HI X: LO <= X < HI (decimals)
between() { awk -v lo="$1" -v hi="$2" -v x="$3" 'BEGIN { exit !(x >= lo && x < hi) }'; }

# --- env mode: one environment per child -----------------------------------------------------
run "$BIN" launch --nproc-per-node 3 --spawn env env
[ $rc -eq 0 ] && [ "$(lines "$T/out")" = 3 ] || fail "env x3: rc $rc $(cat "$T/out" "$T/err")"
[ -s "$T/err" ] && fail "env x3: stderr $(cat "$T/err")"
[ "$(field rank "$T/out" | sort | tr '\n' ' ')" = "0 1 2 " ] || fail "env x3: ranks $(cat "$T/out")"
[ "$(field launcher "$T/out" | sort -u)" = torchrun ] || fail "env x3: launcher"
[ "$(field world_size "$T/out" | sort -u)" = 3 ] && [ "$(field local_size "$T/out" | sort -u)" = 3 ] ||
    fail "env x3: sizes"
[ "$(field master_addr "$T/out" | sort -u)" = 127.0.0.1 ] || fail "env x3: master_addr"
[ "$(field master_port "$T/out" | sort -u | wc -l)" = 1 ] || fail "env x3: ports differ"
for r in 0 1 2; do
    grep -q "^rank=$r local_rank=$r " "$T/out" || fail "env x3: local rank of rank $r"
done

# an outer launcher's variables (srun ... ddptrain launch) do not reach the children
run env SLURM_JOB_ID=77 SLURM_STEP_ID=0 SLURM_PROCID=5 SLURM_LOCALID=1 SLURM_NODEID=1 \
    SLURM_NTASKS=8 PMI_FD=9 PMI_RANK=5 RANK=5 WORLD_SIZE=8 OMPI_COMM_WORLD_RANK=5 \
    "$BIN" launch --nproc-per-node 2 --spawn env env
[ $rc -eq 0 ] && [ "$(field launcher "$T/out" | sort -u)" = torchrun ] &&
    [ "$(field rank "$T/out" | sort | tr '\n' ' ')" = "0 1 " ] &&
    [ "$(field job_id "$T/out" | sort -u)" = 77 ] ||
    fail "inside an outer launcher: rc $rc $(cat "$T/out" "$T/err")"

# node 1 of 2, port from MASTER_PORT
run env MASTER_PORT=23999 "$BIN" launch --nproc-per-node 2 --nnodes 2 --node-rank 1 \
    --master-addr 127.0.0.1 env
[ $rc -eq 0 ] && [ "$(field rank "$T/out" | sort | tr '\n' ' ')" = "2 3 " ] &&
    [ "$(field world_size "$T/out" | sort -u)" = 4 ] &&
    [ "$(field node_id "$T/out" | sort -u)" = 1 ] &&
    [ "$(field num_nodes "$T/out" | sort -u)" = 2 ] &&
    [ "$(field master_port "$T/out" | sort -u)" = 23999 ] ||
    fail "node 1 of 2: rc $rc $(cat "$T/out" "$T/err")"

# --- the TCP bootstrap between the children --------------------------------------------------
run "$BIN" launch --nproc-per-node 4 --spawn env bootstrap-test --via tcp
[ $rc -eq 0 ] && [ "$(lines "$T/out")" = 4 ] && [ "$(field via "$T/out" | sort -u)" = tcp ] ||
    fail "bootstrap tcp x4: rc $rc $(cat "$T/out" "$T/err")"
h1=$(field hash "$T/out" | sort -u)
[ "$(echo "$h1" | wc -l)" = 1 ] && [ -n "$h1" ] || fail "bootstrap tcp x4: hashes differ: $(cat "$T/out")"
run "$BIN" launch --nproc-per-node 2 --spawn env bootstrap-test --via tcp --len 65536
h2=$(field hash "$T/out" | sort -u)
[ $rc -eq 0 ] && [ "$(echo "$h2" | wc -l)" = 1 ] && [ "$h2" != "$h1" ] ||
    fail "bootstrap 64 KiB: rc $rc hashes '$h2' (first run '$h1')"
run "$BIN" launch --nproc-per-node 3 --spawn env bootstrap-test --via auto
[ $rc -eq 0 ] && [ "$(field via "$T/out" | sort -u)" = tcp ] || fail "auto outside MPI is not tcp: $(cat "$T/out")"

# two launches at once: each picks its own free port, both succeed
"$BIN" launch --nproc-per-node 2 --spawn env bootstrap-test --via tcp --delay 1 >"$T/a" 2>&1 &
pa=$!
"$BIN" launch --nproc-per-node 2 --spawn env bootstrap-test --via tcp --delay 1 >"$T/b" 2>&1
rb=$?
wait $pa
ra=$?
[ $ra -eq 0 ] && [ $rb -eq 0 ] && [ "$(field hash "$T/a" | sort -u | wc -l)" = 1 ] &&
    [ "$(field hash "$T/b" | sort -u | wc -l)" = 1 ] ||
    fail "concurrent launches: $ra $rb $(cat "$T/a" "$T/b")"

# the port the launcher picked stays held while the ranks run: another program's bind fails
# (a port released at once could be taken before rank 0 listens on it)
run "$BIN" launch --nproc-per-node 2 --spawn env port-check
[ $rc -eq 0 ] && [ "$(grep -c '^port-check port=[0-9]* held$' "$T/out")" = 2 ] ||
    fail "launcher's port not held: rc $rc $(cat "$T/out" "$T/err")"

# port in use: rank 0 says so in one line and the launcher exits 4 naming rank 0
"$BIN" hold-port 0 8 >"$T/hold" &
holder=$!
n=0
while ! grep -q holding "$T/hold" && [ $n -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
port=$(sed -n 's/^holding //p' "$T/hold")
run "$BIN" launch --nproc-per-node 2 --spawn env --master-port "$port" --grace 1 \
    bootstrap-test --via tcp --timeout 20
kill $holder 2>/dev/null
wait $holder 2>/dev/null
[ $rc -eq 4 ] || fail "port in use: exit $rc, want 4"
grep -q "rank 0: port $port on .* is in use: another job? set \[dist\] port or MASTER_PORT" "$T/err" ||
    fail "port in use: $(cat "$T/err")"
grep -q "ddptrain launch: rank 0 (local rank 0, pid [0-9]*) exited with code 4" "$T/err" ||
    fail "port in use: launcher line: $(cat "$T/err")"
between 0 5 "$dt" || fail "port in use: took $dt s"

# torchrun-style by hand: a missing rank is named when rank 0 gives up; an unreachable
# master is reported by the peer
# shellcheck source=tests/hold_port.sh
. "${DDP_SRC:?}/tests/hold_port.sh"
hold_ports 2 || { echo "FAIL: cannot hold two ports" >&2; exit 1; }
port=${HELD_PORTS% *}
tr_env="MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=3 LOCAL_WORLD_SIZE=3"
# shellcheck disable=SC2086
env $tr_env RANK=1 LOCAL_RANK=1 "$BIN" bootstrap-test --via tcp --timeout 5 >"$T/r1" 2>&1 &
p1=$!
# shellcheck disable=SC2086
run env $tr_env RANK=0 LOCAL_RANK=0 "$BIN" bootstrap-test --via tcp --timeout 1.5
wait $p1
[ $rc -eq 4 ] && grep -q "rank 2 (1 of 2) did not arrive within 1.5 s" "$T/err" ||
    fail "missing rank: rc $rc $(cat "$T/err")"
between 1.4 4 "$dt" || fail "missing rank: gave up after $dt s"
# shellcheck disable=SC2086
run env $tr_env RANK=2 LOCAL_RANK=2 "$BIN" bootstrap-test --via tcp --timeout 1
[ $rc -eq 4 ] && grep -q "could not reach rank 0's rendezvous at 127.0.0.1:$port" "$T/err" &&
    grep -q "Connection refused" "$T/err" ||
    fail "unreachable master: rc $rc $(cat "$T/err")"
[ "$(lines "$T/err")" = 1 ] || fail "unreachable master: not one line: $(cat "$T/err")"

# a stranger (another job's token) is refused at once; the real job still completes
port=${HELD_PORTS#* }
tr_env="MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 LOCAL_WORLD_SIZE=2"
# shellcheck disable=SC2086
env $tr_env RANK=0 LOCAL_RANK=0 DDP_BOOTSTRAP_TOKEN=job-A "$BIN" bootstrap-test --via tcp \
    --timeout 10 >"$T/r0" 2>&1 &
p0=$!
sleep 0.3
# shellcheck disable=SC2086
run env $tr_env RANK=1 LOCAL_RANK=1 DDP_BOOTSTRAP_TOKEN=job-B "$BIN" bootstrap-test --via tcp --timeout 10
[ $rc -eq 4 ] && grep -q "belongs to another job ('job-A'; this job is 'job-B')" "$T/err" ||
    fail "stranger: rc $rc $(cat "$T/err")"
between 0 3 "$dt" || fail "stranger: refused after $dt s"
# shellcheck disable=SC2086
run env $tr_env RANK=1 LOCAL_RANK=1 DDP_BOOTSTRAP_TOKEN=job-A "$BIN" bootstrap-test --via tcp --timeout 10
wait $p0
r0=$?
[ $rc -eq 0 ] && [ $r0 -eq 0 ] && [ "$(field hash "$T/out")" = "$(field hash "$T/r0")" ] ||
    fail "stranger, then the real rank 1: $rc $r0 $(cat "$T/out" "$T/r0")"
grep -q "refused a rendezvous connection .* 'job-B'" "$T/r0" || fail "rank 0 did not note the stranger: $(cat "$T/r0")"

# --- failures and signals ----------------------------------------------------------------
# rank 1 exits 3: the others get SIGTERM (the probe exits 75 on it), the launcher exits 3
run "$BIN" launch --nproc-per-node 3 --spawn env --grace 5 probe --fail 1:3
[ $rc -eq 3 ] || fail "rank failure: exit $rc, want 3"
grep -q "^ddptrain launch: rank 1 (local rank 1, pid [0-9]*) exited with code 3; stopping the other 2 ranks" "$T/err" ||
    fail "rank failure: $(cat "$T/err")"
[ "$(grep -c 'signal=15' "$T/out")" = 2 ] || fail "rank failure: others not sent SIGTERM: $(cat "$T/out")"
between 0 4 "$dt" || fail "rank failure: took $dt s"
# each child leads its own process group
awk '/^probe rank=/ { split($5, a, "="); split($6, b, "="); if (a[2] != b[2]) bad = 1 }
     END { exit bad }' "$T/out" || fail "children share a process group: $(cat "$T/out")"

# a rank that ignores SIGTERM is killed after the grace period
run "$BIN" launch --nproc-per-node 2 --spawn env --grace 1 probe --fail 0:5 --ignore-term
[ $rc -eq 5 ] || fail "grace: exit $rc, want 5"
grep -q "ignored=15" "$T/out" || fail "grace: rank 1 saw no SIGTERM: $(cat "$T/out")"
between 1.2 4.5 "$dt" || fail "grace: took $dt s, want about 1.3"

# a rank killed by a signal: 128 + signal
run "$BIN" launch --nproc-per-node 2 --spawn env --grace 1 probe --fail 1:-9
[ $rc -eq 137 ] && grep -q "rank 1 (local rank 1, pid [0-9]*) was killed by signal 9" "$T/err" ||
    fail "killed rank: $rc $(cat "$T/err")"
# ranks that all finish cleanly, one early: exit 0, nothing printed by the launcher
run "$BIN" launch --nproc-per-node 2 --spawn env probe --fail 1:0 --sleep 0.5
[ $rc -eq 0 ] && [ ! -s "$T/err" ] || fail "clean exit: $rc $(cat "$T/err")"

# SIGUSR1, SIGTERM, SIGINT to the launcher reach every child once; all exit 75 -> 75
# Ready: all three probe lines, printed after the handlers are installed, in a file that exists
# before the launcher starts (so the count is a number from the first poll on).
for sig in USR1 TERM INT; do
    : >"$T/sig"
    "$BIN" launch --nproc-per-node 3 --spawn env probe >>"$T/sig" 2>"$T/sigerr" &
    pl=$!
    n=0 ready=0
    while [ $n -lt 300 ]; do
        ready=$(grep -c '^probe rank=.*pid=' "$T/sig") || ready=0
        [ "$ready" -ge 3 ] && break
        kill -0 $pl 2>/dev/null || break
        sleep 0.05
        n=$((n + 1))
    done
    [ "$ready" -ge 3 ] || fail "SIG$sig: ranks not ready: $(cat "$T/sig" "$T/sigerr")"
    kill -s "$sig" $pl
    wait $pl
    rs=$?
    case $sig in USR1) num=10 ;; TERM) num=15 ;; INT) num=2 ;; esac
    [ $rs -eq 75 ] || fail "SIG$sig: launcher exit $rs, want 75 $(cat "$T/sigerr")"
    [ "$(grep -c "signal=$num\$" "$T/sig")" = 3 ] || fail "SIG$sig: $(cat "$T/sig")"
    [ -s "$T/sigerr" ] && fail "SIG$sig: stderr $(cat "$T/sigerr")"
done

# --- usage ------------------------------------------------------------------------------------
run "$BIN" launch
[ $rc -eq 2 ] && grep -q "nproc-per-node N is required" "$T/err" && grep -q usage "$T/err" ||
    fail "launch without arguments: $rc $(cat "$T/err")"
run "$BIN" launch --help
[ $rc -eq 0 ] && grep -q "usage: ddptrain launch" "$T/out" || fail "launch --help: $rc"
run "$BIN" launch --nproc-per-node 2 --bogus job.ini
[ $rc -eq 2 ] && grep -q "unknown option '--bogus'" "$T/err" || fail "bogus option: $rc $(cat "$T/err")"
# CPU ranks on one node need mpirun: without it in PATH the launcher refuses (exit 4).
# DDP_TEST_FAKE_GPUS=0: no GPU for the ranks, also in a GPU build on a GPU machine.
env -i PATH=/nonexistent DDP_TEST_FAKE_GPUS=0 "$BIN" launch --nproc-per-node 2 env >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 4 ] && grep -q "talk through MPI" "$T/err" && grep -q -- "--spawn env" "$T/err" ||
    fail "no mpirun: $rc $(cat "$T/err")"
# one rank needs no mpirun
env -i PATH=/nonexistent "$BIN" launch --nproc-per-node 1 env >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 0 ] && grep -q "launcher=torchrun" "$T/out" || fail "one rank: $rc $(cat "$T/out" "$T/err")"

[ $fails -eq 0 ] && echo "launch: all checks passed ($BIN)"
[ $fails -eq 0 ]

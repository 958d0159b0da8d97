# shellcheck shell=bash
# tests/slurm/failfast.sh: the fail-fast cases (cases/4x-*.sh) source this after lib.sh.
# failfast_case MODE VICTIM: `srun -N 2 -n 4 --mpi=pmix` fills n1 first, so ranks 0-2 run on n1
# and rank 3 alone on n2; [dist] timeout_s stays at its default of 300 s. Rank VICTIM dies
# mid-training (kill: kill -9, its sockets close; stop: SIGSTOP, it keeps its sockets but sends
# nothing, as a vanished node would). Every other rank must exit 5 naming it, its host and pid,
# within 10 s of the death. Without the liveness watch, the survivors of a lone rank on n2 wait
# 300 s (the case gives up after 20 s); those of a rank that shares n1 are ended by Slurm
# itself, unnamed.
LIMIT=10
DEADLINE=20

# Wait for a condition, polling, with a deadline in seconds. 1 if it never held.
wait_for() {
    local end=$((SECONDS + $2))
    until eval "$1"; do
        ((SECONDS < end)) || return 1
        sleep 0.05
    done
}

# The pids of this case's tasks, as "procid:pid:node" words.
case_tasks() {
    local p r n
    for p in $(pgrep -f "$DDPTRAIN $CASE_DIR/j.ini"); do
        r=$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^SLURM_PROCID=//p')
        n=$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^SLURMD_NODENAME=//p')
        [[ -n $r ]] && echo "$r:$p:$n"
    done
}

# Every task gone? (the pids given)
all_gone() {
    local p
    for p in "$@"; do kill -0 "$p" 2>/dev/null && return 1; done
    return 0
}

failfast_case() {
    local mode=$1 victim=$2
    need_ddptrain
    sr srun --mpi=list 2>&1 | grep -qw pmix || skip "this Slurm has no pmix plugin"
    "$DDPTRAIN" data synth -o "$CASE_DIR/d.h5" --shape 64 --classes 4 --train 4000 --test 40 \
        >/dev/null
    printf '[data]\nfile = %s/d.h5\nbatch_size = 2\n[model]\nlayers = linear(32), relu, linear(4)
[train]\nepochs = 1000\nlog_every = 20\nthreads = 1\n[job]\noutput = %s/out\n' \
        "$CASE_DIR" "$CASE_DIR" > "$CASE_DIR/j.ini"
    [[ $DDP_SLURM_MODE == netns ]] || export MASTER_ADDR=$DDP_SLURM_MASTER_ADDR
    SR_TIMEOUT=120 sr srun -N 2 -n 4 -l --mpi=pmix "$DDPTRAIN" "$CASE_DIR/j.ini" \
        > "$CASE_DIR/out.txt" 2> "$CASE_DIR/err.txt" &
    local srun_pid=$!
    wait_for '[[ -s $CASE_DIR/out/metrics.jsonl ]] || ! kill -0 $srun_pid 2>/dev/null' 60
    if [[ ! -s $CASE_DIR/out/metrics.jsonl ]]; then
        kill "$srun_pid" 2>/dev/null
        cat "$CASE_DIR/out.txt" "$CASE_DIR/err.txt"
        fail "training did not start"
    fi
    local tasks t r p n vpid="" survivors=() node=(n1 n1 n1 n2)
    tasks=$(case_tasks)
    for t in $tasks; do
        IFS=: read -r r p n <<< "$t"
        [[ $n == "${node[$r]}" ]] || fail "expected ranks 0-2 on n1, 3 on n2: got $(echo $tasks)"
        if [[ $r == "$victim" ]]; then vpid=$p; else survivors+=("$p"); fi
    done
    [[ -n $vpid && ${#survivors[@]} == 3 ]] || fail "tasks not found: $(echo $tasks)"
    local t0=$EPOCHREALTIME
    if [[ $mode == kill ]]; then kill -9 "$vpid"; else kill -STOP "$vpid"; fi
    if ! wait_for 'all_gone "${survivors[@]}"' $DEADLINE; then
        kill -9 "$vpid" "${survivors[@]}" 2>/dev/null
        sed 's/^/    /' "$CASE_DIR/err.txt"
        fail "the other ranks still run $DEADLINE s after rank $victim died ($mode)"
    fi
    local took
    took=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}')
    [[ $mode == stop ]] && kill -9 "$vpid"
    wait "$srun_pid" || true
    cat "$CASE_DIR/err.txt"
    echo "rank $victim ($mode, pid $vpid on ${node[$victim]}): the others gone ${took} s later"
    awk -v t="$took" -v l=$LIMIT 'BEGIN {exit !(t <= l)}' || fail "took ${took} s > $LIMIT s"
    local why="closed its connection without saying goodbye" others=""
    [[ $mode == stop ]] && why="is unresponsive"
    for r in 0 1 2 3; do
        [[ $r == "$victim" ]] && continue
        others+="$r "
        local line="^$r: ddptrain: ${node[$r]} rank $r: peer gone: rank $victim on ${node[$victim]}"
        grep -q "$line (pid $vpid) $why" "$CASE_DIR/err.txt" ||
            fail "rank $r did not name rank $victim (pid $vpid): $why"
    done
    # srun: "error: n1: tasks 0-2: Exited with exit code 5", or one line per task or node
    local fives
    fives=$(sed -n 's/.*: tasks\? \([0-9,-]*\): Exited with exit code 5$/\1/p' \
        "$CASE_DIR/err.txt" | tr ',' '\n' |
        awk -F- '{for (i = $1; i <= ($2 == "" ? $1 : $2); i++) print i}' | sort -u | tr '\n' ' ')
    expect_eq "$fives" "$others" "tasks that exited 5"
}

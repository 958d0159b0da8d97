#!/usr/bin/env bash
# shellcheck disable=SC2016  # single-quoted commands are expanded by the tasks
# `ddptrain env` under srun --mpi=pmix on two nodes: every rank names the same master, the
# address of the host that runs rank 0 (n1), and its own rank / local_rank / node_id / world_size.
# Skipped (77) until the binary has the `hostlist` and `env` subcommands.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

[[ -n ${DDPTRAIN:-} && -x $DDPTRAIN ]] || skip "no ddptrain binary (DDPTRAIN=${DDPTRAIN:-unset})"
hl=$("$DDPTRAIN" hostlist 'n[1-2]' 2>/dev/null | tr '\n' ' ') || true
[[ $hl == "n1 n2 " ]] || skip "ddptrain hostlist not available yet"

# field NAME LINE: the value of NAME=... in one `ddptrain env` line
field() { tr ' \t' '\n\n' <<<"$2" | sed -n "s/^$1=//p" | head -1; }

# check TITLE "rank:local_rank:node_id:node ..." srun-options...
check() {
    local title=$1 want=$2 out line r lr nid node port="" n=0
    shift 2
    echo "# srun -N 2 -n 4 --mpi=pmix${*:+ $*} \$DDPTRAIN env"
    out=$(SR_TIMEOUT=90 sr srun -N 2 -n 4 --mpi=pmix "$@" "$DDPTRAIN" env) ||
        fail "$title: ddptrain env exited non-zero"
    echo "$out"
    for spec in $want; do
        IFS=: read -r r lr nid node <<<"$spec"
        line=$(grep -E "(^|[[:space:]])rank=$r([[:space:]]|$)" <<<"$out" || true)
        [[ $(wc -l <<<"$line") == 1 && -n $line ]] || fail "$title: want one line for rank $r"
        expect_eq "$(field local_rank "$line")" "$lr" "$title rank $r local_rank"
        expect_eq "$(field node_id "$line")" "$nid" "$title rank $r node_id"
        expect_eq "$(field world_size "$line")" 4 "$title rank $r world_size"
        expect_eq "$(field master_addr "$line")" "$DDP_SLURM_MASTER_ADDR" "$title rank $r master_addr (n1)"
        [[ $DDP_SLURM_MODE != netns ]] || expect_eq "$(field host "$line")" "$node" "$title rank $r host"
        [[ -z $port ]] && port=$(field master_port "$line")
        expect_eq "$(field master_port "$line")" "$port" "$title rank $r master_port (same on all ranks)"
        n=$((n + 1))
    done
    [[ $port =~ ^[0-9]+$ ]] && ((port > 0 && port < 65536)) || fail "$title: master_port '$port'"
    expect_eq "$(grep -Ec '(^|[[:space:]])rank=' <<<"$out")" "$n" "$title: lines with rank="
}

if [[ $DDP_SLURM_MODE != netns ]]; then
    # All nodes are this machine and their names do not resolve: the documented way out.
    echo "loopback mode: node names do not resolve; running with MASTER_ADDR=$DDP_SLURM_MASTER_ADDR"
    export MASTER_ADDR=$DDP_SLURM_MASTER_ADDR
fi
check block "0:0:0:n1 1:1:0:n1 2:2:0:n1 3:0:1:n2"
check cyclic "0:0:0:n1 1:0:1:n2 2:1:0:n1 3:2:0:n1" --distribution=cyclic

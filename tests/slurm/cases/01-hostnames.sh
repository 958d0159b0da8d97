#!/usr/bin/env bash
# shellcheck disable=SC2016  # single-quoted commands are expanded by the tasks
# srun -N 2 -n 4 hostname shows both nodes by their own hostnames, and each name resolves to
# that node's own address (the network ddptrain's master resolution and OpenMPI cross).
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

out=$(sr srun -N 2 -n 4 hostname)
echo "$out"
expect_eq "$(wc -l <<<"$out")" 4 "lines from 4 tasks"
if [[ $DDP_SLURM_MODE == netns ]]; then
    expect_eq "$(sort -u <<<"$out" | tr '\n' ' ')" "n1 n2 " "hostnames"
    out=$(sr srun -N 2 -n 2 --ntasks-per-node=1 sh -c \
        'echo "$SLURMD_NODENAME $(hostname) $(getent ahostsv4 $(hostname) | head -1 | cut -d" " -f1)"' | sort)
    echo "$out"
    a1=$(awk '$1 == "n1" {print $3}' <<<"$out")
    a2=$(awk '$1 == "n2" {print $3}' <<<"$out")
    expect_eq "$(awk '{print $1 "=" $2}' <<<"$out" | tr '\n' ' ')" "n1=n1 n2=n2 " "hostname = node name"
    [[ -n $a1 && -n $a2 && $a1 != "$a2" && $a1 != 127.* ]] || fail "n1/n2 addresses: '$a1' '$a2'"
    expect_eq "$a1" "$DDP_SLURM_MASTER_ADDR" "address of n1"
else
    echo "loopback mode: every node has this machine's hostname; checking node names"
    out=$(sr srun -N 2 -n 4 printenv SLURMD_NODENAME)
    expect_eq "$(sort -u <<<"$out" | tr '\n' ' ')" "n1 n2 " "node names"
fi

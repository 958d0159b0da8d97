#!/usr/bin/env bash
# shellcheck disable=SC2016  # single-quoted commands are expanded by the tasks
# srun --mpi=pmi2 gives each task PMI_FD, PMI_RANK, PMI_SIZE; where libpmi2 is installed, a
# Put/Fence/Get across the two nodes round-trips values (the way ddptrain ships the NCCL id).
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

out=$(sr srun --mpi=pmi2 -N 2 -n 2 sh -c 'echo "fd=${PMI_FD:-unset} rank=${PMI_RANK:-unset} size=${PMI_SIZE:-unset}"' | sort -t= -k3)
echo "$out"
expect_eq "$(sed 's/fd=[0-9][0-9]* /fd=N /' <<<"$out" | sort)" "fd=N rank=0 size=2
fd=N rank=1 size=2" "PMI variables"
out=$(sr srun -n 1 sh -c 'echo "fd=${PMI_FD:-unset}"')
expect_eq "$out" "fd=unset" "PMI_FD without --mpi=pmi2"

[[ -r /usr/include/slurm/pmi2.h ]] || { echo "no slurm/pmi2.h: KVS round trip not tested"; exit 0; }
cat >kvs.c <<'C'
#include <slurm/pmi2.h>
#include <stdio.h>
#include <string.h>
int main(void) {
    int spawned, size, rank, appnum, len, peer, rc;
    char key[64], val[PMI2_MAX_VALLEN], got[PMI2_MAX_VALLEN], jobid[256];
    if (PMI2_Init(&spawned, &size, &rank, &appnum) != PMI2_SUCCESS) return 2;
    if (PMI2_Job_GetId(jobid, sizeof jobid) != PMI2_SUCCESS) return 3;
    snprintf(key, sizeof key, "ddp-%d", rank);
    memset(val, 'a' + rank, 300);
    val[300] = '\0';
    if (PMI2_KVS_Put(key, val) != PMI2_SUCCESS || PMI2_KVS_Fence() != PMI2_SUCCESS) return 4;
    peer = (rank + 1) % size;
    snprintf(key, sizeof key, "ddp-%d", peer);
    rc = PMI2_KVS_Get(jobid, PMI2_ID_NULL, key, got, sizeof got, &len);
    memset(val, 'a' + peer, 300);
    printf("rank=%d size=%d peer=%d ok=%d\n", rank, size, peer,
           rc == PMI2_SUCCESS && len == 300 && memcmp(got, val, 300) == 0);
    PMI2_Finalize();
    return 0;
}
C
cc -o kvs kvs.c -lpmi2 || fail "cannot build the PMI2 test program"
out=$(sr srun --mpi=pmi2 -N 2 -n 2 ./kvs | sort)
echo "$out"
expect_eq "$out" "rank=0 size=2 peer=1 ok=1
rank=1 size=2 peer=0 ok=1" "PMI2 KVS round trip"

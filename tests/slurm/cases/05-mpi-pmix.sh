#!/usr/bin/env bash
# shellcheck disable=SC2016  # single-quoted commands are expanded by the tasks
# OpenMPI direct launch: srun --mpi=pmix starts a tiny MPI program on both nodes; every rank
# knows rank/size and an all-reduce across the nodes gives the right sum.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

command -v mpicc >/dev/null || skip "no mpicc"
sr srun --mpi=list 2>&1 | grep -qw pmix || skip "this Slurm has no pmix plugin"

cat >hello.c <<'C'
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank, size, one, sum = 0;
    char host[256];
    const char *node = getenv("SLURMD_NODENAME");
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof host);
    one = rank + 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank=%d size=%d host=%s node=%s sum=%d\n", rank, size, host, node ? node : "?", sum);
    MPI_Finalize();
    return 0;
}
C
mpicc -O1 -o hello hello.c || fail "mpicc failed"
out=$(SR_TIMEOUT=90 sr srun -N 2 -n 4 --mpi=pmix ./hello | sort)
echo "$out"
want_host() { [[ $DDP_SLURM_MODE == netns ]] && echo "$1" || hostname; }
expect_eq "$out" "rank=0 size=4 host=$(want_host n1) node=n1 sum=10
rank=1 size=4 host=$(want_host n1) node=n1 sum=10
rank=2 size=4 host=$(want_host n1) node=n1 sum=10
rank=3 size=4 host=$(want_host n2) node=n2 sum=10" "MPI ranks"

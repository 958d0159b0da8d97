#!/usr/bin/env bash
# A PMIx fence over two nodes waits for the ranks of both nodes, with and without data
# collection (OpenMPI's MPI_Init ends with a fence without data: where it returned on one node
# before the other node's ranks had set up their transports, a fast rank's first message
# crashed a slow rank inside MPI_Init, srun: "task 4: Segmentation fault").
# Slurm 22.05's tree fence, used by default for fences without data, completed node-locally;
# tools/slurm-cluster's mpi.conf selects the ring fence.
# Method: the ranks on n1 record that they entered fence k, then call it; the ranks on n2 wait
# until those records exist, then give n1 half a second to come out of fence k on its own (a
# correct fence cannot), then record and call fence k themselves. After each fence every rank
# checks that all ranks had entered it. A correct fence never fails this, whatever the timing.
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"

sr srun --mpi=list 2>&1 | grep -qw pmix || skip "this Slurm has no pmix plugin"
pkg-config --exists pmix 2>/dev/null || skip "no PMIx development files (pkg-config pmix)"
cat >fence.c <<'C'
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int exists(int k, const char *what, int rank)
{
    char p[64];
    snprintf(p, sizeof p, "%d.%s.%d", k, what, rank);
    return access(p, F_OK) == 0;
}

static void mark(int k, const char *what, int rank)
{
    char p[64];
    snprintf(p, sizeof p, "%d.%s.%d", k, what, rank);
    close(open(p, O_CREAT | O_WRONLY, 0644));
}

/* Wait until ranks lo..hi-1 have marked (k, what), at most 30 s. */
static int wait_marks(int k, const char *what, int lo, int hi)
{
    const double end = now() + 30;
    for (int r = lo; r < hi; r++)
        while (!exists(k, what, r)) {
            if (now() > end)
                return -1;
            usleep(1000);
        }
    return 0;
}

int main(void)
{
    pmix_proc_t me, all;
    pmix_value_t *v = NULL;
    if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS)
        return 2;
    PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
    if (PMIx_Get(&all, PMIX_JOB_SIZE, NULL, 0, &v) != PMIX_SUCCESS)
        return 2;
    const int n = (int)v->data.uint32, half = n / 2, r = (int)me.rank, first = r < half;
    int bad = 0;
    for (int k = 0; k < 4; k++) {
        bool collect = k % 2 == 0;
        pmix_info_t info;
        if (!first) {
            if (wait_marks(k, "in", 0, half) != 0)
                return 3;
            const double end = now() + 0.5;
            while (now() < end && !exists(k, "out", 0))
                usleep(1000);
        }
        mark(k, "in", r);
        PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
        if (PMIx_Fence(NULL, 0, &info, 1) != PMIX_SUCCESS)
            return 4;
        mark(k, "out", r);
        for (int q = 0; q < n; q++)
            if (!exists(k, "in", q)) {
                printf("rank %d: fence %d (%s) returned before rank %d entered it\n", r, k,
                       collect ? "collecting data" : "barrier", q);
                bad = 1;
            }
    }
    PMIx_Finalize(NULL, 0);
    printf("rank %d: %s\n", r, bad ? "FAIL" : "ok");
    return bad;
}
C
# shellcheck disable=SC2046  # pkg-config prints several words
cc -o fence fence.c $(pkg-config --cflags --libs pmix) || fail "cannot build the PMIx test program"
rc=0
out=$(sr srun --mpi=pmix -N 2 -n 4 --ntasks-per-node=2 ./fence) || rc=$?
sort <<<"$out"
[[ $rc == 0 ]] || fail "a fence returned on one node before the other node's ranks entered it (srun exit $rc)"
expect_eq "$(grep -c ': ok$' <<<"$out")" 4 "ranks that saw every fence wait for all ranks"

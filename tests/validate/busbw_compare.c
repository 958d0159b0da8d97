/*
 * busbw_compare.c - `ddptrain validate`'s all-reduce bus bandwidth at one size next to a plain
 * MPI_Allreduce loop timed the same way (barrier, a block of calls, the slowest rank's time
 * per call, the median block), in alternating rounds of one run so that both see the same
 * machine. A measurement, not a test:
 *   mpirun -n 2 build/tests/validate/busbw_compare [rounds [bytes]]
 * Prints one line per round, then the medians, their ratio and one JSON line.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "dist/world.h"
#include "core/util.h"
#include "validate/validate.h"

#define BLOCKS 5
#define BLOCK_S 0.02

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* busbw (GB/s) of plain MPI_Allreduce: BLOCKS blocks of iters calls, median block. */
static double plain_busbw(float *buf, int n, int iters, int W)
{
    double t[BLOCKS];
    for (int b = 0; b < BLOCKS; b++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double dt = (MPI_Wtime() - t0) / iters;
        MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t[b] = dt;
    }
    double algbw = (double)n * sizeof(float) / median(t, BLOCKS) / 1e9;
    return algbw * 2.0 * (W - 1) / W;
}

int main(int argc, char **argv)
{
    struct ddp_world w;
    memset(&w, 0, sizeof w);
    w.launcher = DDP_LAUNCHER_OMPI;
    w.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    w.world_size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    w.mpi_launched = 1;
    gethostname(w.host, sizeof w.host - 1);
    ddp_log_set_identity(w.host, w.rank, w.world_size);
    const int rounds = argc > 1 && atoi(argv[1]) > 0 ? atoi(argv[1]) : 7;
    const long long bytes = argc > 2 && atoll(argv[2]) >= 8 ? atoll(argv[2]) : 1 << 20;
    char err[DDP_ERR_LEN];
    ddp_comm *c =
        ddp_comm_create(&(struct ddp_comm_opts){DDP_COMM_MPI, 60, -1, DDP_BOOTSTRAP_AUTO, NULL}, &w,
                        err, sizeof err);
    if (!c) {
        fprintf(stderr, "busbw_compare: %s\n", err);
        return 4;
    }
    const int W = ddp_comm_size(c);
    if (W < 2) {
        fprintf(stderr, "busbw_compare: run it on 2 or more ranks (mpirun -n 2)\n");
        ddp_comm_destroy(c);
        return 2;
    }
    const int n = (int)(bytes / 4);
    float *buf = ddp_malloc_aligned((size_t)n * sizeof(float));
    memset(buf, 0, (size_t)n * sizeof(float));
    double *v = ddp_malloc(sizeof(double) * (size_t)rounds);
    double *m = ddp_malloc(sizeof(double) * (size_t)rounds);
    struct ddp_validate_ar_row row;
    struct ddp_validate_ar_opts o = {bytes, bytes, BLOCKS, BLOCK_S, 0};
    if (w.rank == 0)
        printf("%5s %12s %14s %14s %6s\n%5s %12s %14s %14s %6s\n", "round", "size", "validate",
               "MPI_Allreduce", "ratio", "", "(B)", "busbw (GB/s)", "busbw (GB/s)", "");
    for (int r = 0; r < rounds; r++) {
        /* alternate which goes first, so that neither always follows the other */
        if (r % 2 == 0) {
            ddp_validate_allreduce_sweep(c, &o, &row);
            m[r] = plain_busbw(buf, n, row.iters, W);
        } else { /* with the block length validate chose in the round before */
            m[r] = plain_busbw(buf, n, row.iters, W);
            ddp_validate_allreduce_sweep(c, &o, &row);
        }
        v[r] = row.busbw;
        if (row.bad_elems)
            fprintf(stderr, "busbw_compare: rank %d: %lld wrong elements\n", w.rank,
                    (long long)row.bad_elems);
        if (w.rank == 0)
            printf("%5d %12lld %14.3f %14.3f %6.3f\n", r, bytes, v[r], m[r], v[r] / m[r]);
    }
    double mv = median(v, rounds), mm = median(m, rounds);
    if (w.rank == 0) {
        printf("median over %d rounds: validate %.3f GB/s, MPI_Allreduce %.3f GB/s, ratio %.3f "
               "(%s 20%%)\n",
               rounds, mv, mm, mv / mm, mv >= 0.8 * mm && mv <= 1.2 * mm ? "within" : "NOT within");
        printf("{\"bench\":\"validate_busbw_compare\",\"ranks\":%d,\"bytes\":%lld,\"rounds\":%d,"
               "\"validate_busbw_gbs\":%.4f,\"mpi_allreduce_busbw_gbs\":%.4f,\"ratio\":%.4f}\n",
               W, bytes, rounds, mv, mm, mv / mm);
    }
    free(v);
    free(m);
    free(buf);
    ddp_comm_destroy(c);
    return 0;
}

/*
 * bench_allreduce.c - time of one f32 sum all-reduce through src/comm (blocking, and
 * start + wait) next to a plain MPI_Allreduce loop. A measurement, not a test: run it by hand,
 *   mpirun -n 2 build/tests/comm/bench_allreduce [iters]
 * Rank 0 prints a table (units row, median of 9 blocks of iters calls) and one JSON line per
 * size and call.
 * busbw = algbw * 2 (n - 1) / n, as nccl-tests reports it.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "dist/world.h"
#include "core/util.h"

static const size_t k_bytes[] = {4096, 32768, 262144, 1 << 20, 4 << 20, 16 << 20};
#define NSIZES (sizeof k_bytes / sizeof k_bytes[0])

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

/* Seconds per call of kind (0 ddp blocking, 1 ddp start+wait, 2 MPI_Allreduce,
 * 3 MPI_Iallreduce + MPI_Wait) over one block of iters calls, the slowest rank's view. */
static double time_kind(ddp_comm *c, int kind, float *buf, size_t n, int iters)
{
    ddp_comm_barrier(c);
    const double t0 = MPI_Wtime();
    for (int it = 0; it < iters; it++) {
        if (kind == 0)
            ddp_comm_allreduce(c, buf, n, DDP_F32);
        else if (kind == 1)
            ddp_comm_wait(c, ddp_comm_allreduce_start(c, buf, n, DDP_F32));
        else if (kind == 2)
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else {
            MPI_Request r;
            MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
        /* Keep the values bounded so repeated sums never reach inf. */
        buf[0] = 1.0f;
    }
    double dt = (MPI_Wtime() - t0) / iters;
    ddp_comm_allreduce_max(c, &dt, 1, DDP_F64);
    return dt;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
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
    const int iters = argc > 1 && atoi(argv[1]) > 0 ? atoi(argv[1]) : 200;
    char err[DDP_ERR_LEN];
    ddp_comm *c =
        ddp_comm_create(&(struct ddp_comm_opts){DDP_COMM_MPI, 60, -1, DDP_BOOTSTRAP_AUTO, NULL}, &w,
                        err, sizeof err);
    if (!c) {
        fprintf(stderr, "bench_allreduce: %s\n", err);
        return 4;
    }
    const int n_ranks = ddp_comm_size(c);
    const double busf = n_ranks > 1 ? 2.0 * (n_ranks - 1) / n_ranks : 1.0;
    float *buf = ddp_malloc_aligned(k_bytes[NSIZES - 1]);
    memset(buf, 0, k_bytes[NSIZES - 1]);
    static const char *names[4] = {"ddp_comm_allreduce", "ddp_comm start+wait", "MPI_Allreduce",
                                   "MPI_Iallreduce+Wait"};
    if (w.rank == 0) {
        printf("%-10s %-20s %12s %10s %10s\n", "size", "call", "time", "algbw", "busbw");
        printf("%-10s %-20s %12s %10s %10s\n", "(bytes)", "", "(us)", "(GB/s)", "(GB/s)");
    }
    /* REPS blocks per size and kind, kinds interleaved so that a noisy neighbour hits all
     * of them alike; the median block is reported. */
    enum { KINDS = 4, REPS = 9 };
    for (size_t s = 0; s < NSIZES; s++) {
        const size_t n = k_bytes[s] / sizeof(float);
        const int it = k_bytes[s] > (1 << 20) ? iters / 8 + 1 : iters;
        double t[KINDS][REPS];
        for (int kind = 0; kind < KINDS; kind++)
            (void)time_kind(c, kind, buf, n, it / 4 + 1); /* warm-up */
        for (int rep = 0; rep < REPS; rep++)
            for (int kind = 0; kind < KINDS; kind++)
                t[kind][rep] = time_kind(c, kind, buf, n, it);
        for (int kind = 0; kind < KINDS; kind++) {
            qsort(t[kind], REPS, sizeof(double), cmp_double);
            const double dt = t[kind][REPS / 2];
            const double algbw = (double)k_bytes[s] / dt / 1e9;
            if (w.rank == 0) {
                printf("%-10zu %-20s %12.1f %10.2f %10.2f\n", k_bytes[s], names[kind], dt * 1e6,
                       algbw, algbw * busf);
                printf("{\"bench\":\"allreduce\",\"ranks\":%d,\"bytes\":%zu,\"call\":\"%s\","
                       "\"us\":%.2f,\"algbw_gbs\":%.3f,\"busbw_gbs\":%.3f}\n",
                       n_ranks, k_bytes[s], names[kind], dt * 1e6, algbw, algbw * busf);
            }
        }
    }
    free(buf);
    ddp_comm_destroy(c);
    return 0;
}

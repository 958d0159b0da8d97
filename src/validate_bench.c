/*
 * validate_bench.c - the per-rank rates of `ddptrain validate`: a square f32 GEMM through the
 * backend (cblas_sgemm on the CPU) and STREAM's triad on the rank's threads. See validate.h.
 *
 * Dimension letters: N the GEMM side, n the elements of one triad array, T threads.
 * Both report the best of their repetitions: the rate the node can reach, which is what a
 * comparison with the other ranks needs; noise only ever makes a repetition slower.
 * What they leave to others: comparing ranks, taking turns on a shared machine (validate.c).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"
#include "validate.h"

/* Sleep for s seconds (fault injection: a slow rank). */
static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

double ddp_validate_gemm(const struct ddp_backend *be, int n, int reps, int slow)
{
    const size_t elems = (size_t)n * (size_t)n;
    float *host = ddp_malloc(sizeof(float) * elems);
    /* values in [-1, 1) from a fixed LCG: no denormals, nothing special for the kernel */
    uint32_t s = 12345;
    for (size_t i = 0; i < elems; i++) {
        s = s * 1664525u + 1013904223u;
        host[i] = (float)(s >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
    float *a = be->alloc(sizeof(float) * elems); /* (N, N) */
    float *w = be->alloc(sizeof(float) * elems); /* (N, N) */
    float *out = be->alloc(sizeof(float) * elems); /* (N, N) */
    be->upload(a, host, sizeof(float) * elems);
    be->upload(w, host, sizeof(float) * elems);
    free(host);
    be->linear_fwd(out, a, w, NULL, n, n, n); /* warm-up: thread pool, pages, caches */
    if (be->sync)
        be->sync();
    double best = 0;
    for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
        double t0 = ddp_now();
        be->linear_fwd(out, a, w, NULL, n, n, n);
        if (be->sync)
            be->sync();
        if (slow)
            sleep_s(ddp_now() - t0);
        double dt = ddp_now() - t0;
        double rate = 2.0 * (double)n * (double)n * (double)n / dt / 1e9;
        if (rate > best)
            best = rate;
    }
    be->free(a);
    be->free(w);
    be->free(out);
    return best;
}

struct triad_part {
    double *a, *b, *c; /* this thread's slices */
    size_t n;
    int init;          /* 1: first touch (fill b, c), 0: triad */
};

/* One thread's slice: first touch, or a[i] = b[i] + 3 c[i]. */
static void *triad_part_run(void *arg)
{
    struct triad_part *p = arg;
    if (p->init) {
        for (size_t i = 0; i < p->n; i++) {
            p->a[i] = 0;
            p->b[i] = 1;
            p->c[i] = 2;
        }
    } else {
        double *restrict a = p->a;
        const double *restrict b = p->b, *restrict c = p->c;
        for (size_t i = 0; i < p->n; i++)
            a[i] = b[i] + 3.0 * c[i];
    }
    return NULL;
}

/* Run every thread's part once (the calling thread takes part 0). */
static void triad_pass(struct triad_part *parts, int T, int init)
{
    pthread_t tid[T > 1 ? T : 1];
    int started[T > 1 ? T : 1];
    for (int t = 0; t < T; t++) {
        parts[t].init = init;
        started[t] = 0;
    }
    for (int t = 1; t < T; t++)
        started[t] = pthread_create(&tid[t], NULL, triad_part_run, &parts[t]) == 0;
    triad_part_run(&parts[0]);
    for (int t = 1; t < T; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            triad_part_run(&parts[t]); /* no thread: do it here, slower but right */
    }
}

double ddp_validate_triad(int64_t mib, int reps, int threads, int slow)
{
    const size_t n = (size_t)mib * ((size_t)1 << 20) / sizeof(double);
    const int T = threads > 0 ? (threads < 1024 ? threads : 1024) : 1;
    double *a = ddp_malloc_aligned(n * sizeof(double)); /* (n) */
    double *b = ddp_malloc_aligned(n * sizeof(double)); /* (n) */
    double *c = ddp_malloc_aligned(n * sizeof(double)); /* (n) */
    struct triad_part *parts = ddp_calloc((size_t)T, sizeof *parts);
    for (int t = 0; t < T; t++) {
        size_t lo = n * (size_t)t / (size_t)T, hi = n * (size_t)(t + 1) / (size_t)T;
        parts[t] = (struct triad_part){a + lo, b + lo, c + lo, hi - lo, 0};
    }
    triad_pass(parts, T, 1);
    triad_pass(parts, T, 0); /* warm-up */
    double best = 0;
    for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
        double t0 = ddp_now();
        triad_pass(parts, T, 0);
        if (slow)
            sleep_s(ddp_now() - t0);
        double dt = ddp_now() - t0;
        double rate = 3.0 * sizeof(double) * (double)n / dt / 1e9;
        if (rate > best)
            best = rate;
    }
    /* every element must be 1 + 3 * 2: this also keeps the compiler from dropping the loops */
    for (size_t i = 0; i < n; i++)
        if (a[i] != 7.0) {
            best = -1;
            break;
        }
    free(parts);
    free(a);
    free(b);
    free(c);
    return best;
}

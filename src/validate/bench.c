/*
 * bench.c - the per-rank rates of `ddptrain validate`: a square f32 GEMM through the
 * backend (cblas_sgemm on the CPU) and STREAM's triad on the rank's threads. See validate.h.
 *
 * Dimension letters: N the GEMM side, n the elements of one triad array, T threads.
 *
 * Timing: after a warm-up, the caller's sync (a barrier) lines the ranks up; then each rank
 * repeats its kernel for a window of `seconds` plus a guard band of two calls at each end,
 * and counts only the calls that lie inside the window. Ranks that measure at the same time
 * (they share memory bandwidth, caches and power) thus all compete over every counted call:
 * none gets a quiet moment because another started late or finished early. The median
 * counted call is reported: a best call would be the one moment a rank happened to have the
 * memory to itself (another rank descheduled), which favours the luckier rank; the median is
 * the rate under the load all of them put on the node, and a minority of calls hit by noise
 * (another process, a page fault, a timer tick) does not move it.
 * What they leave to others: comparing ranks, taking turns on a shared machine (validate.c).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util.h"
#include "validate/validate.h"

/* Most calls however short they are (a bound on a tiny N under a long window). */
#define MAX_REPS 100000
/* Fault injection: a slow rank spins this many times as long as the work took (a hundredth of
 * the rate: far outside any noise, so the test that injects it is not flaky). */
#define SLOW_FACTOR 99.0

/* ddp_validate_bench_cap: 0 or the most seconds one measurement may take. */
static double g_cap_s;

void ddp_validate_bench_cap(double seconds)
{
    g_cap_s = seconds;
}

/* Stay busy for s seconds (fault injection: a slow rank keeps its CPU, as slow hardware does;
 * a sleep would hand the CPU to other processes and look like their load). */
static void sleep_s(double s)
{
    const double end = ddp_now() + s;
    volatile unsigned long spin = 0;
    while (ddp_now() < end)
        spin++;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Run pass(ctx) (work units per call) in the window described above; returns the median rate
 * in units per second of the counted calls. At least reps calls are counted: a window too
 * short for them is extended. */
static double windowed_median(void (*pass)(void *), void *ctx, double work, int reps,
                              double seconds, int slow)
{
    const double t0 = ddp_now();
    double guard = -1, first = 0;
    int counted = 0, cap = 64;
    double *rate = ddp_malloc(sizeof(double) * (size_t)cap);
    if (reps < 1)
        reps = 1;
    for (int r = 0; r < MAX_REPS; r++) {
        const double a = ddp_now();
        pass(ctx);
        if (slow)
            sleep_s(SLOW_FACTOR * (ddp_now() - a));
        const double b = ddp_now();
        if (guard < 0) { /* the first call sizes the guard band and is never counted... */
            guard = 2 * (b - a);
            first = work / (b - a);
            if (g_cap_s > 0 && b - t0 > g_cap_s)
                break; /* ... unless it is all the cap allows */
            continue;
        }
        const double lo = t0 + guard, hi = t0 + guard + seconds;
        if ((a >= lo && b <= hi) || (b > hi && counted < reps)) {
            if (counted == cap) {
                cap *= 2;
                rate = ddp_realloc(rate, sizeof(double) * (size_t)cap);
            }
            rate[counted++] = work / (b - a);
        }
        if ((b >= hi + guard && counted >= reps) || (g_cap_s > 0 && b - t0 > g_cap_s))
            break;
    }
    if (counted == 0)
        rate[counted++] = first;
    qsort(rate, (size_t)counted, sizeof(double), cmp_double);
    double m = counted % 2 ? rate[counted / 2] : 0.5 * (rate[counted / 2 - 1] + rate[counted / 2]);
    free(rate);
    return m;
}

struct gemm_ctx {
    const struct ddp_backend *be;
    float *a, *w, *out;
    int n;
};

static void gemm_pass(void *arg)
{
    struct gemm_ctx *g = arg;
    g->be->linear_fwd(g->out, g->a, g->w, NULL, g->n, g->n, g->n);
    if (g->be->sync)
        g->be->sync();
}

/* The fixed inputs of the GEMMs: values in [-1, 1) from an LCG (no denormals). */
static void fill_lcg(float *x, size_t n)
{
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
}

double ddp_validate_gemm(const struct ddp_backend *be, int n, int reps, double seconds, int slow,
                         void (*sync)(void *), void *sync_ctx)
{
    const size_t elems = (size_t)n * (size_t)n;
    float *host = ddp_malloc(sizeof(float) * elems);
    fill_lcg(host, elems);
    struct gemm_ctx g = {be, be->alloc(sizeof(float) * elems) /* (N, N) */,
                         be->alloc(sizeof(float) * elems) /* (N, N) */,
                         be->alloc(sizeof(float) * elems) /* (N, N) */, n};
    be->upload(g.a, host, sizeof(float) * elems);
    be->upload(g.w, host, sizeof(float) * elems);
    free(host);
    gemm_pass(&g); /* warm-up: thread pool, pages, caches */
    if (sync)
        sync(sync_ctx);
    double best = windowed_median(gemm_pass, &g, 2.0 * (double)n * (double)n * (double)n / 1e9,
                                  reps, seconds, slow);
    be->free(g.a);
    be->free(g.w);
    be->free(g.out);
    return best;
}

struct triad_part {
    double *a, *b, *c; /* this thread's slices */
    size_t n;
    int init; /* 1: first touch (fill b, c), 0: triad */
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

struct triad_ctx {
    struct triad_part *parts;
    int T;
};

/* Run every thread's part once (the calling thread takes part 0). */
static void triad_run(struct triad_ctx *t, int init)
{
    pthread_t tid[t->T];
    int started[t->T];
    for (int i = 0; i < t->T; i++) {
        t->parts[i].init = init;
        started[i] = 0;
    }
    for (int i = 1; i < t->T; i++)
        started[i] = pthread_create(&tid[i], NULL, triad_part_run, &t->parts[i]) == 0;
    triad_part_run(&t->parts[0]);
    for (int i = 1; i < t->T; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            triad_part_run(&t->parts[i]); /* no thread: do it here, slower but right */
    }
}

static void triad_pass(void *arg)
{
    triad_run(arg, 0);
}

double ddp_validate_triad(int64_t mib, int reps, double seconds, int threads, int slow,
                          void (*sync)(void *), void *sync_ctx)
{
    const size_t n = (size_t)mib * ((size_t)1 << 20) / sizeof(double);
    const int T = threads > 0 ? (threads < 1024 ? threads : 1024) : 1;
    double *a = ddp_malloc_aligned(n * sizeof(double)); /* (n) */
    double *b = ddp_malloc_aligned(n * sizeof(double)); /* (n) */
    double *c = ddp_malloc_aligned(n * sizeof(double)); /* (n) */
    struct triad_ctx t = {ddp_calloc((size_t)T, sizeof(struct triad_part)), T};
    for (int i = 0; i < T; i++) {
        size_t lo = n * (size_t)i / (size_t)T, hi = n * (size_t)(i + 1) / (size_t)T;
        t.parts[i] = (struct triad_part){a + lo, b + lo, c + lo, hi - lo, 0};
    }
    triad_run(&t, 1); /* first touch by the threads that will use the pages */
    triad_run(&t, 0); /* warm-up */
    if (sync)
        sync(sync_ctx);
    double best = windowed_median(triad_pass, &t, 3.0 * sizeof(double) * (double)n / 1e9, reps,
                                  seconds, slow);
    /* every element must be 1 + 3 * 2: this also keeps the compiler from dropping the loops */
    for (size_t i = 0; i < n; i++)
        if (a[i] != 7.0) {
            best = -1;
            break;
        }
    free(t.parts);
    free(a);
    free(b);
    free(c);
    return best;
}

void ddp_validate_burn(const struct ddp_backend *be, int n, double seconds, int corrupt,
                       struct ddp_validate_burn_result *res)
{
    const size_t elems = (size_t)n * (size_t)n, bytes = sizeof(float) * elems;
    float *host = ddp_malloc(bytes), *first = ddp_malloc(bytes), *now = ddp_malloc(bytes);
    fill_lcg(host, elems);
    struct gemm_ctx g = {be, be->alloc(bytes), be->alloc(bytes), be->alloc(bytes), n};
    be->upload(g.a, host, bytes);
    be->upload(g.w, host, bytes);
    gemm_pass(&g);
    be->download(first, g.out, bytes); /* the reference result: the same inputs each call */
    memset(res, 0, sizeof *res);
    res->min_gflops = 1e300;
    const double flop = 2.0 * (double)n * (double)n * (double)n / 1e9, t0 = ddp_now();
    double win_t = t0;
    int win_calls = 0;
    while (ddp_now() - t0 < seconds || res->calls == 0) {
        gemm_pass(&g);
        be->download(now, g.out, bytes);
        if (corrupt && res->calls == 0)
            now[elems / 2] = -now[elems / 2] + 1.0f; /* fault injection: one wrong element */
        res->calls++;
        win_calls++;
        if (memcmp(now, first, bytes) != 0)
            res->mismatches++;
        const double t = ddp_now();
        if (t - win_t >= 1.0 || ddp_now() - t0 >= seconds) { /* rate per second of burn */
            const double r = flop * win_calls / (t - win_t);
            res->min_gflops = r < res->min_gflops ? r : res->min_gflops;
            win_t = t;
            win_calls = 0;
        }
    }
    res->seconds = ddp_now() - t0;
    res->gflops = flop * res->calls / res->seconds;
    if (res->min_gflops > 1e299)
        res->min_gflops = res->gflops;
    be->free(g.a);
    be->free(g.w);
    be->free(g.out);
    free(host);
    free(first);
    free(now);
}

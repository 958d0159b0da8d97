/*
 * cpu.c - the CPU backend: OpenBLAS for GEMMs, plain C loops for everything else, and one
 * thread pool, ours, sized by set_threads. The kernels live in cpu_kernels.inc, compiled here
 * once as float (the table below) and once as double (the reference for tests, cpu_ref.h).
 *
 * Threads. set_threads(n) pins OpenBLAS to one thread and starts n - 1 workers of our own;
 * a kernel cuts its work into parts (GEMM rows or columns, runs of samples of a convolution,
 * ranges of a loop) that the caller and the workers claim, each calling single-threaded
 * OpenBLAS on its part. So one pool runs at a time: OpenBLAS's own workers (which poll with
 * sched_yield between calls: the high system time of 2-thread runs) stay asleep, and the C
 * loops around the GEMMs (im2col, pooling, ReLU, the optimiser) use every core too. Workers
 * spin (PAUSE, no system calls) for a short while after a job, then sleep. Without
 * set_threads (tests), the pool is the caller alone and OpenBLAS keeps its default.
 *
 * Determinism. The cut is a pure function of the shapes and the thread count, every output
 * element is computed within one part, a part's result does not depend on which thread runs
 * it, and the only cross-part sums (convolution weight gradients) are added in part order:
 * results are bitwise reproducible for a fixed thread count (they may differ between thread
 * counts, as with OpenBLAS's own threading).
 *
 * Scratch. Convolutions work on blocks of samples in scratch that the backend owns (per
 * thread, and per part for partial sums), grown on the first step and kept for the life of
 * the process: no allocation per step. The `col` buffer of the table is not needed, so
 * conv_col_elems asks for none.
 *
 * Not here: vector intrinsics. The loops are written so that the compiler vectorises them,
 * without FMA contraction (-std=c11 implies -ffp-contract=off): elementwise results (ReLU,
 * pooling, the optimisers) are the same on every x86-64 and equal the scalar loops bit for bit.
 */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu_ref.h"
#include "core/hash.h"
#include "core/util.h"

/* Loops here are simple enough to vectorise; -O2's very cheap cost model skips any loop whose
 * trip count is not a known multiple of the vector width, i.e. all of them. no-math-errno lets
 * sqrt vectorise (Adam; its argument is never negative). no-tree-loop-distribute-patterns keeps
 * the short row copies of im2col inline instead of turning each into a memmove call. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-math-errno", \
                     "no-tree-loop-distribute-patterns")
#endif

/* OpenBLAS's own control, declared by its cblas.h on Debian; kept explicit for other cblas. */
void openblas_set_num_threads(int num_threads);

double ddp_cpu_uniform(uint64_t seed, uint64_t i)
{
    return ddp_uniform01(seed, i);
}

/* ---- the thread pool ---------------------------------------------------------------------
 * A job is `parts` independent parts, fn(ctx, part, parts, tid). The caller publishes it as
 * one 64-bit ticket (generation, parts, next part) and bumps `gen`; the caller and the workers
 * claim parts by compare-and-swap on the ticket until none are left, and the caller returns
 * once `done` counts every part. Nobody waits for a particular thread: a worker that is
 * descheduled (a shared machine) or still asleep simply claims nothing, and the caller runs
 * its parts. Which thread runs a part never changes the result (a part writes only its own
 * outputs or its own partial buffer), so dynamic claiming keeps results bitwise repeatable. */

#define POOL_MAX 64         /* threads per process; more cores than this get no more threads */
#define POOL_PARTS_MAX 4096 /* parts of one job (ticket field width) */
/* A worker spins this long after a job before it sleeps: longer than the serial gaps inside a
 * step, far shorter than a pause. */
#define POOL_SPIN_NS 100000

typedef void (*pool_fn)(void *ctx, int part, int parts, int tid);

/* ticket: generation (32 bits) | parts (16) | next part to claim (16) */
#define TICKET(gen, parts, next) ((uint64_t)(gen) << 32 | (uint64_t)(parts) << 16 | (next))
#define TICKET_GEN(t) ((unsigned)((t) >> 32))
#define TICKET_PARTS(t) ((int)(((t) >> 16) & 0xffff))
#define TICKET_NEXT(t) ((int)((t)&0xffff))

static struct {
    int n; /* threads including the caller (tid 0); workers are tids 1..n-1 */
    pthread_t th[POOL_MAX];
    atomic_uint gen; /* bumped once per job */
    unsigned gen0;   /* gen when the workers were started */
    _Atomic uint64_t ticket;
    atomic_int done;   /* parts finished of the current job */
    atomic_int asleep; /* workers blocked on cv */
    atomic_int quit;
    pool_fn fn; /* the job: written before the ticket, read after a successful claim */
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} g_pool = {.n = 1, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Claim and run parts of job `gen` until none are left. */
static void pool_work(unsigned gen, int tid)
{
    uint64_t t = atomic_load(&g_pool.ticket);
    while (TICKET_GEN(t) == gen && TICKET_NEXT(t) < TICKET_PARTS(t)) {
        if (!atomic_compare_exchange_weak(&g_pool.ticket, &t, t + 1))
            continue; /* t now holds the current ticket */
        /* the claim orders these reads after the caller's writes of the job */
        g_pool.fn(g_pool.ctx, TICKET_NEXT(t), TICKET_PARTS(t), tid);
        atomic_fetch_add_explicit(&g_pool.done, 1, memory_order_release);
        t = atomic_load(&g_pool.ticket);
    }
}

/* Worker body: wait for a new generation (spin, then sleep), claim parts. */
static void *pool_main(void *arg)
{
    int tid = (int)(intptr_t)arg;
    unsigned seen = g_pool.gen0; /* not gen now: a job may have been published already */
    for (;;) {
        unsigned g;
        int64_t t0 = 0;
        for (int spin = 0; (g = atomic_load_explicit(&g_pool.gen, memory_order_acquire)) == seen;
             spin++) {
            cpu_relax();
            if ((spin & 255) != 255)
                continue;
            if (!t0)
                t0 = now_ns();
            else if (now_ns() - t0 > POOL_SPIN_NS) {
                pthread_mutex_lock(&g_pool.mu);
                atomic_fetch_add(&g_pool.asleep, 1);
                while (atomic_load(&g_pool.gen) == seen)
                    pthread_cond_wait(&g_pool.cv, &g_pool.mu);
                atomic_fetch_sub(&g_pool.asleep, 1);
                pthread_mutex_unlock(&g_pool.mu);
                t0 = 0;
            }
        }
        seen = g;
        if (atomic_load(&g_pool.quit))
            return NULL;
        pool_work(g, tid);
    }
}

/* Wake the workers for a new generation (a job, or quit). */
static unsigned pool_kick(void)
{
    unsigned g = atomic_fetch_add(&g_pool.gen, 1) + 1; /* seq_cst: pairs with `asleep` */
    if (atomic_load(&g_pool.asleep) > 0) {
        pthread_mutex_lock(&g_pool.mu);
        pthread_cond_broadcast(&g_pool.cv);
        pthread_mutex_unlock(&g_pool.mu);
    }
    return g;
}

/* Run fn(ctx, part, parts, tid) for every part in [0, parts) on the caller and the workers;
 * returns when all parts are done. Without workers (or one part) the caller runs them in
 * order. One job at a time, from one thread: a part never calls par_run. */
static void par_run(pool_fn fn, void *ctx, int parts)
{
    if (parts <= 1 || g_pool.n <= 1) {
        for (int p = 0; p < parts; p++)
            fn(ctx, p, parts, 0);
        return;
    }
    g_pool.fn = fn;
    g_pool.ctx = ctx;
    atomic_store_explicit(&g_pool.done, 0, memory_order_relaxed);
    unsigned g = atomic_load_explicit(&g_pool.gen, memory_order_relaxed) + 1;
    atomic_store(&g_pool.ticket, TICKET(g, parts, 0)); /* releases fn, ctx, done */
    pool_kick();
    pool_work(g, 0);
    for (int spin = 0; atomic_load_explicit(&g_pool.done, memory_order_acquire) < parts; spin++) {
        cpu_relax();
        if (spin > 4096) /* a worker holding a part was preempted: let it have this core */
            sched_yield();
    }
}

static void pool_stop(void)
{
    if (g_pool.n <= 1)
        return;
    atomic_store(&g_pool.quit, 1);
    pool_kick();
    for (int i = 1; i < g_pool.n; i++)
        pthread_join(g_pool.th[i], NULL);
    atomic_store(&g_pool.quit, 0);
    g_pool.n = 1;
}

/* A forked child has no workers: it runs alone until it calls set_threads itself. */
static void pool_after_fork(void)
{
    g_pool.n = 1;
}

static void pool_register_fork(void)
{
    pthread_atfork(NULL, NULL, pool_after_fork);
}

static void pool_start(int n)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pool_register_fork);
    if (n > POOL_MAX)
        n = POOL_MAX;
    if (n == g_pool.n)
        return;
    pool_stop();
    g_pool.gen0 = atomic_load(&g_pool.gen);
    for (int i = 1; i < n; i++) {
        if (pthread_create(&g_pool.th[i], NULL, pool_main, (void *)(intptr_t)i) != 0)
            ddp_die("cannot start compute thread %d of %d", i + 1, n);
        g_pool.n = i + 1; /* pool_stop joins what started */
    }
}

/* Parts for `work` units: at least `min_each` units a part, at most `per_thread` parts per
 * thread (more parts balance better; fewer keep GEMMs large). A function of the shapes and
 * the thread count only. */
static int par_parts(double work, double min_each, int per_thread)
{
    double k = work / min_each, most = (double)g_pool.n * per_thread;
    if (g_pool.n <= 1 || k < 2)
        return 1;
    if (most > POOL_PARTS_MAX)
        most = POOL_PARTS_MAX;
    return k < most ? (int)k : (int)most;
}

/* Part [lo, hi) of n items for part p of parts: even shares with boundaries rounded to
 * multiples of align (64-byte lines of floats: parts never write the same line). */
static void par_range(size_t n, int p, int parts, size_t align, size_t *lo, size_t *hi)
{
    size_t units = (n + align - 1) / align;
    size_t a = units * (size_t)p / (size_t)parts, b = units * (size_t)(p + 1) / (size_t)parts;
    *lo = a * align < n ? a * align : n;
    *hi = b * align < n ? b * align : n;
}

/* Rows [m0, m1) and columns [n0, n1) of an (M, N) GEMM output that part p of parts computes:
 * the larger dimension is split, so the smaller operand is the one every part packs whole. */
static void gemm_slice(int M, int N, int p, int parts, int *m0, int *m1, int *n0, int *n1)
{
    size_t lo, hi;
    if (N >= M) {
        par_range((size_t)N, p, parts, 16, &lo, &hi);
        *m0 = 0, *m1 = M, *n0 = (int)lo, *n1 = (int)hi;
    } else {
        par_range((size_t)M, p, parts, 16, &lo, &hi);
        *m0 = (int)lo, *m1 = (int)hi, *n0 = 0, *n1 = N;
    }
}

/* Scratch, grown on demand and kept; both precisions share it. Per thread (tid): what a part
 * needs while it runs. Per part: what must outlive the job (partial sums read by the next). */
struct scratch {
    void *p;
    size_t bytes;
    char pad[48]; /* one line each */
};
static struct scratch g_scratch[POOL_MAX], g_partial[POOL_PARTS_MAX];

static void *scratch_get(struct scratch *s, size_t bytes)
{
    if (s->bytes < bytes) {
        free(s->p);
        s->p = ddp_malloc_aligned(bytes);
        s->bytes = bytes;
    }
    return s->p;
}

static void *cpu_scratch(int tid, size_t bytes)
{
    return scratch_get(&g_scratch[tid], bytes);
}
static void *cpu_partial(int part, size_t bytes)
{
    return scratch_get(&g_partial[part], bytes);
}

/* ---- the kernels, in both precisions ----------------------------------------------------- */

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

#define REAL float
#define FN(name) CAT(name, _f32)
#define GEMM cblas_sgemm
#define SQRT sqrtf
#include "cpu_kernels.inc"
#undef REAL
#undef FN
#undef GEMM
#undef SQRT

#define REAL double
#define FN(name) CAT(name, _f64)
#define GEMM cblas_dgemm
#define SQRT sqrt
#include "cpu_kernels.inc"
#undef REAL
#undef FN
#undef GEMM
#undef SQRT

/* ---- the table ---------------------------------------------------------------------------- */

/* Alignment of cpu_alloc's blocks (a cache line, what the vector kernels want). */
#define CPU_ALIGN 64

/* Zeroed, CPU_ALIGN-aligned memory through calloc, whose large blocks come zeroed from the
 * kernel with no page touched: a block is paid for when it is first used, so `ddptrain check`
 * of a large model builds it without faulting in gigabytes of activations it never computes.
 * The block calloc returned is kept just before the aligned pointer, for cpu_free. */
static void *cpu_alloc(size_t bytes)
{
    if (bytes > SIZE_MAX - CPU_ALIGN - sizeof(void *))
        ddp_die("out of memory allocating %zu bytes", bytes);
    char *raw = ddp_calloc(1, bytes + CPU_ALIGN + sizeof(void *));
    const uintptr_t at =
        ((uintptr_t)(raw + sizeof(void *)) + CPU_ALIGN - 1) & ~(uintptr_t)(CPU_ALIGN - 1);
    ((void **)at)[-1] = raw;
    return (void *)at;
}

static void cpu_free(void *p)
{
    if (p)
        free(((void **)p)[-1]);
}
static void cpu_copy(void *dst, const void *src, size_t bytes)
{
    memmove(dst, src, bytes);
}

static void cpu_set_threads(int n)
{
    openblas_set_num_threads(1);
    pool_start(n > 0 ? n : 1);
}

#define ELEMS_EACH 65536.0 /* elements of a memory-bound loop worth a part (~10 us) */

struct vec_job {
    float *x;
    size_t n;
    float a;
};

static void zero_job(void *arg, int part, int parts, int tid)
{
    struct vec_job *j = arg;
    size_t lo, hi;
    (void)tid;
    par_range(j->n, part, parts, 16, &lo, &hi);
    if (hi > lo)
        memset(j->x + lo, 0, (hi - lo) * sizeof *j->x);
}

static void scale_job(void *arg, int part, int parts, int tid)
{
    struct vec_job *j = arg;
    size_t lo, hi;
    (void)tid;
    par_range(j->n, part, parts, 16, &lo, &hi);
    float *x = j->x, a = j->a;
    for (size_t i = lo; i < hi; i++)
        x[i] *= a;
}

static void cpu_zero(float *x, size_t n)
{
    struct vec_job j = {x, n, 0};
    par_run(zero_job, &j, par_parts((double)n, 4 * ELEMS_EACH, 2));
}

static void cpu_scale(float *x, size_t n, float a)
{
    struct vec_job j = {x, n, a};
    par_run(scale_job, &j, par_parts((double)n, ELEMS_EACH, 2));
}

/* The optimisers of the table: the CPU has no clip_scale, so gs is always NULL. */
static void cpu_sgd_step(float *p, const float *g, float gscale, const float *gs, float *buf,
                         size_t n, const struct ddp_optim_args *a)
{
    (void)gs;
    ddp_cpu_sgd_step_f32(p, g, gscale, buf, n, a->lr, a->momentum, a->weight_decay, a->nesterov,
                         a->first_step);
}

static void cpu_adam_step(float *p, const float *g, float gscale, const float *gs, float *m,
                          float *v, size_t n, const struct ddp_optim_args *a)
{
    (void)gs;
    ddp_cpu_adam_step_f32(p, g, gscale, m, v, n, a->lr, a->b1, a->b2, a->eps, a->weight_decay,
                          a->decoupled, a->t);
}

/* Sum of squares in double, in index order (4 interleaved partial sums, then added in order):
 * deterministic, one thread (a gradient norm per step is a small pass). */
static double cpu_sumsq(const float *x, size_t n)
{
    double s[4] = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++)
            s[k] += (double)x[i + k] * x[i + k];
    for (; i < n; i++)
        s[0] += (double)x[i] * x[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

static size_t cpu_conv_col_elems(int B, const struct ddp_conv_geom *g)
{
    (void)B, (void)g;
    return 0; /* the kernels use their own per-thread scratch (above) */
}

/* The table's conv2d on the reference kernels' arguments. */
static void cpu_conv2d_fwd(float *out, float *col, const float *inp, const float *w, const float *b,
                           int B, const struct ddp_conv_geom *g)
{
    ddp_cpu_conv2d_fwd_f32(out, col, inp, w, b, B, g->C, g->H, g->W, g->O, g->k, g->stride, g->pad);
}

static void cpu_conv2d_bwd(float *dinp, float *dw, float *db, float *col, const float *dout,
                           const float *inp, const float *w, int B, const struct ddp_conv_geom *g)
{
    ddp_cpu_conv2d_bwd_f32(dinp, dw, db, col, dout, inp, w, B, g->C, g->H, g->W, g->O, g->k,
                           g->stride, g->pad);
}

/* ---- batchnorm on the table's contract (backend.h): counts travel with the sums ---------- */

static void cpu_bn_stats(double *sums, const float *inp, int B, int C, int S)
{
    ddp_cpu_bn_stats_f32(sums, inp, B, C, S);
    sums[2 * C] = (double)B * S;
}

static void cpu_bn_bwd_sums(double *sums, const float *dout, const float *xhat, int B, int C, int S)
{
    ddp_cpu_bn_bwd_sums_f32(sums, dout, xhat, B, C, S);
    sums[2 * C] = (double)B * S;
}

static void cpu_bn_bwd_apply(float *dinp, float *dgamma, float *dbeta, const float *dout,
                             const float *xhat, const float *invstd, const float *gamma,
                             const double *local, const double *global, int B, int C, int S)
{
    ddp_cpu_bn_bwd_apply_f32(dinp, dgamma, dbeta, dout, xhat, invstd, gamma, local, global,
                             global[2 * C], B, C, S);
}

/* In double, rounded to float once per value; cuda/normpool.cu's k_bn_update does the same operations
 * (IEEE division and square root in double), so both backends give the same bits. */
static void cpu_bn_update(float *mean, float *invstd, float *rm, float *rv, const double *sums,
                          int C, double eps, double momentum)
{
    for (int c = 0; c < C; c++) {
        if (!sums) {
            mean[c] = rm[c];
            invstd[c] = (float)(1.0 / sqrt((double)rv[c] + eps));
            continue;
        }
        const double count = sums[2 * C];
        const double mu = sums[c] / count;
        double var = sums[C + c] / count - mu * mu;
        if (var < 0)
            var = 0;
        mean[c] = (float)mu;
        invstd[c] = (float)(1.0 / sqrt(var + eps));
        const double unbiased = count > 1 ? var * count / (count - 1) : var;
        rm[c] = (float)((1 - momentum) * rm[c] + momentum * mu);
        rv[c] = (float)((1 - momentum) * rv[c] + momentum * unbiased);
    }
}

static const struct ddp_backend g_cpu = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .set_threads = cpu_set_threads,
    .sync = NULL,
    .zero = cpu_zero,
    .scale = cpu_scale,
    .linear_fwd = ddp_cpu_linear_fwd_f32,
    .linear_bwd = ddp_cpu_linear_bwd_f32,
    .relu_fwd = ddp_cpu_relu_fwd_f32,
    .relu_bwd = ddp_cpu_relu_bwd_f32,
    .conv_col_elems = cpu_conv_col_elems,
    .conv2d_fwd = cpu_conv2d_fwd,
    .conv2d_bwd = cpu_conv2d_bwd,
    .maxpool_fwd = ddp_cpu_maxpool_fwd_f32,
    .maxpool_bwd = ddp_cpu_maxpool_bwd_f32,
    .avgpool_fwd = ddp_cpu_avgpool_fwd_f32,
    .avgpool_bwd = ddp_cpu_avgpool_bwd_f32,
    .gap_fwd = ddp_cpu_gap_fwd_f32,
    .gap_bwd = ddp_cpu_gap_bwd_f32,
    .add = ddp_cpu_add_f32,
    .bn_stats = cpu_bn_stats,
    .bn_update = cpu_bn_update,
    .bn_fwd_apply = ddp_cpu_bn_fwd_apply_f32,
    .bn_bwd_sums = cpu_bn_bwd_sums,
    .bn_bwd_apply = cpu_bn_bwd_apply,
    .dropout_fwd = ddp_cpu_dropout_fwd_f32,
    .dropout_bwd = ddp_cpu_dropout_bwd_f32,
    .xent = ddp_cpu_xent_f32,
    .sgd_step = cpu_sgd_step,
    .adam_step = cpu_adam_step,
    .sumsq = cpu_sumsq,
};

const struct ddp_backend *ddp_backend_cpu(void)
{
    return &g_cpu;
}

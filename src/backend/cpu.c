/*
 * cpu.c - the CPU backend: OpenBLAS for GEMMs, plain C loops for everything else, one thread
 * pool (OpenBLAS's), sized by set_threads. The kernels live in cpu_kernels.inc, compiled here
 * once as float (the table below) and once as double (the reference for tests, cpu_ref.h).
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_ref.h"
#include "util.h"

/* OpenBLAS's own control, declared by its cblas.h on Debian; kept explicit for other cblas. */
void openblas_set_num_threads(int num_threads);

double ddp_cpu_uniform(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

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

static void *cpu_alloc(size_t bytes)
{
    void *p = ddp_malloc_aligned(bytes);
    memset(p, 0, bytes);
    return p;
}

static void cpu_free(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }
static void cpu_set_threads(int n) { openblas_set_num_threads(n > 0 ? n : 1); }
static void cpu_zero(float *x, size_t n) { memset(x, 0, n * sizeof *x); }

static void cpu_scale(float *x, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= a;
}

static size_t cpu_conv_col_elems(int B, int C, int H, int W, int k, int stride, int pad)
{
    (void)B;
    size_t OH = (size_t)((H + 2 * pad - k) / stride + 1), OW = (size_t)((W + 2 * pad - k) / stride + 1);
    return 2 * (size_t)C * k * k * OH * OW; /* col and dcol of one sample */
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
    .conv2d_fwd = ddp_cpu_conv2d_fwd_f32,
    .conv2d_bwd = ddp_cpu_conv2d_bwd_f32,
    .maxpool_fwd = ddp_cpu_maxpool_fwd_f32,
    .maxpool_bwd = ddp_cpu_maxpool_bwd_f32,
    .avgpool_fwd = ddp_cpu_avgpool_fwd_f32,
    .avgpool_bwd = ddp_cpu_avgpool_bwd_f32,
    .bn_stats = ddp_cpu_bn_stats_f32,
    .bn_fwd_apply = ddp_cpu_bn_fwd_apply_f32,
    .bn_bwd_sums = ddp_cpu_bn_bwd_sums_f32,
    .bn_bwd_apply = ddp_cpu_bn_bwd_apply_f32,
    .dropout_fwd = ddp_cpu_dropout_fwd_f32,
    .dropout_bwd = ddp_cpu_dropout_bwd_f32,
    .xent = ddp_cpu_xent_f32,
    .sgd_step = ddp_cpu_sgd_step_f32,
    .adam_step = ddp_cpu_adam_step_f32,
};

const struct ddp_backend *ddp_backend_cpu(void) { return &g_cpu; }

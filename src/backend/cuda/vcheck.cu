/*
 * vcheck.cu - what `ddptrain validate` measures on the backend's GPU (cuda.h, "Validation"):
 * device-memory bandwidth (STREAM's copy and triad), GEMM rates (fp32 SGEMM, tf32 and bf16
 * tensor-core GEMMs through cublasGemmEx), page-locked host<->device copies and a device-memory
 * pattern test. Each timed call is bracketed by CUDA events on the compute stream; the median
 * call is returned. Buffers are allocated for one measurement and freed after it (validation
 * trains nothing: the backend's accounting is left alone). Judging is src/validate/gpu.c's.
 *
 * Dimension letters: n floats per array (bandwidth), N the GEMM side, w 32-bit words (pattern).
 */
#include "backend/cuda/internal.cuh"

#include <stdlib.h>

/* Words the bad_devmem fault flips after the pattern is written (each one wrong word). */
#define VCHECK_BAD_WORDS 3
/* Blocks of the pattern test (grid-stride), each counting its wrong words into one slot. */
#define VCHECK_COUNT_BLOCKS 4096u
/* Timed calls at most per measurement (events are made per call). */
#define VCHECK_MAX_REPS 256

/* ---- kernels ------------------------------------------------------------------------------ */

/* copy and triad 16 bytes at a time (the buffers are cudaMalloc's, 256-byte aligned), the
 * n % 4 tail one float at a time: what a bandwidth test needs to reach the card's rate. */
__global__ void k_vcopy(float *a, const float *b, size_t n)
{
    const size_t n4 = n / 4;
    GRID_STRIDE(i, n4)
    {
        ((float4 *)a)[i] = ((const float4 *)b)[i];
    }
    GRID_STRIDE(t, n - 4 * n4) a[4 * n4 + t] = b[4 * n4 + t];
}

__global__ void k_vtriad(float *a, const float *b, const float *c, float s, size_t n)
{
    const size_t n4 = n / 4;
    GRID_STRIDE(i, n4)
    {
        const float4 x = ((const float4 *)b)[i], y = ((const float4 *)c)[i];
        float4 r;
        r.x = x.x + s * y.x;
        r.y = x.y + s * y.y;
        r.z = x.z + s * y.z;
        r.w = x.w + s * y.w;
        ((float4 *)a)[i] = r;
    }
    GRID_STRIDE(t, n - 4 * n4) a[4 * n4 + t] = b[4 * n4 + t] + s * c[4 * n4 + t];
}

/* Values in [-1, 1) from a hash of the index (no denormals): GEMM and bandwidth inputs. */
__global__ void k_vfill(float *x, size_t n, uint32_t seed)
{
    GRID_STRIDE(i, n)
    {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
}

__global__ void k_vto_bf16(__nv_bfloat16 *out, const float *x, size_t n)
{
    GRID_STRIDE(i, n) out[i] = __float2bfloat16_rn(x[i]);
}

/* The pattern of word i: its index folded and mixed with the pass's key (address-dependent,
 * so a word written at the wrong address, or an address line stuck, reads back wrong). */
__device__ __forceinline__ uint32_t vpattern(size_t i, uint32_t key)
{
    return ((uint32_t)i ^ (uint32_t)(i >> 32)) * 0x9E3779B1u ^ key;
}

__global__ void k_vpat_write(uint32_t *w, size_t n, uint32_t key)
{
    GRID_STRIDE(i, n) w[i] = vpattern(i, key);
}

/* Flip one bit in VCHECK_BAD_WORDS words spread over the buffer (fault injection). */
__global__ void k_vpat_corrupt(uint32_t *w, size_t n)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        for (size_t k = 0; k < VCHECK_BAD_WORDS; k++)
            w[(n - 1) / VCHECK_BAD_WORDS * k + 1] ^= 1u << (k + 3);
}

/* bad[blockIdx.x] = words of this block's share that do not hold their pattern. */
__global__ void k_vpat_check(unsigned long long *bad, const uint32_t *w, size_t n, uint32_t key)
{
    unsigned long long mine = 0;
    GRID_STRIDE(i, n) mine += w[i] != vpattern(i, key);
    mine = block_sum(mine);
    if (threadIdx.x == 0)
        bad[blockIdx.x] = mine;
}

/* ---- timing ------------------------------------------------------------------------------- */

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of reps calls of fn(ctx), each between two events on the compute
 * stream, after one untimed warm-up call. */
static double timed_median_ms(void (*fn)(void *), void *ctx, int reps)
{
    reps = reps < 1 ? 1 : reps > VCHECK_MAX_REPS ? VCHECK_MAX_REPS : reps;
    cudaEvent_t ev[VCHECK_MAX_REPS + 1];
    float ms[VCHECK_MAX_REPS];
    for (int i = 0; i <= reps; i++)
        CUDA_CHECK(cudaEventCreate(&ev[i]));
    fn(ctx);
    CUDA_CHECK(cudaEventRecord(ev[0], g_cuda.stream));
    for (int i = 0; i < reps; i++) {
        fn(ctx);
        CUDA_CHECK(cudaEventRecord(ev[i + 1], g_cuda.stream));
    }
    CUDA_CHECK(cudaEventSynchronize(ev[reps]));
    for (int i = 0; i < reps; i++)
        CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
    for (int i = 0; i <= reps; i++)
        CUDA_CHECK(cudaEventDestroy(ev[i]));
    qsort(ms, (size_t)reps, sizeof(float), cmp_float);
    const double m = reps % 2 ? ms[reps / 2] : 0.5 * ((double)ms[reps / 2 - 1] + ms[reps / 2]);
    return m > 1e-6 ? m : 1e-6; /* a clock too coarse for the call: at most 1 ns */
}

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
}

/* ---- device-memory bandwidth -------------------------------------------------------------- */

struct vstream {
    float *a, *b, *c; /* (n) each */
    size_t n;
    int triad;
};

static void vstream_call(void *arg)
{
    struct vstream *s = (struct vstream *)arg;
    if (s->triad)
        LAUNCH(k_vtriad, blocks_for(s->n / 4 + 1), THREADS, s->a, s->b, s->c, 3.0f, s->n);
    else
        LAUNCH(k_vcopy, blocks_for(s->n / 4 + 1), THREADS, s->a, s->b, s->n);
}

extern "C" double ddp_cuda_vcheck_stream(int triad, size_t bytes, int reps)
{
    struct vstream s = {NULL, NULL, NULL, bytes / sizeof(float), triad};
    if (g_cuda.device < 0 || s.n == 0)
        return 0;
    s.a = (float *)dev_alloc(s.n * sizeof(float));
    s.b = (float *)dev_alloc(s.n * sizeof(float));
    s.c = triad ? (float *)dev_alloc(s.n * sizeof(float)) : NULL;
    LAUNCH(k_vfill, blocks_for(s.n), THREADS, s.b, s.n, 1u);
    if (triad)
        LAUNCH(k_vfill, blocks_for(s.n), THREADS, s.c, s.n, 2u);
    const double ms = timed_median_ms(vstream_call, &s, reps);
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
    CUDA_CHECK(cudaFree(s.a));
    CUDA_CHECK(cudaFree(s.b));
    if (s.c)
        CUDA_CHECK(cudaFree(s.c));
    /* STREAM's count: every array read or written once (copy 2, triad 3), no write-allocate */
    return (triad ? 3.0 : 2.0) * (double)(s.n * sizeof(float)) / (ms * 1e-3) / 1e9;
}

/* ---- GEMM rates ---------------------------------------------------------------------------- */

struct vgemm {
    const void *a, *b; /* (N, N) floats, or bf16 for DDP_CUDA_VGEMM_BF16 */
    float *c;          /* (N, N) */
    int n, kind;
};

static void vgemm_call(void *arg)
{
    struct vgemm *g = (struct vgemm *)arg;
    const float one = 1, zero = 0;
    const cudaDataType in = g->kind == DDP_CUDA_VGEMM_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t compute =
        g->kind == DDP_CUDA_VGEMM_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(g_cuda.blas_fn.gemm_ex(g_cuda.blas, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n,
                                        &one, g->a, in, g->n, g->b, in, g->n, &zero, g->c,
                                        CUDA_R_32F, g->n, compute, CUBLAS_GEMM_DEFAULT));
}

extern "C" double ddp_cuda_vcheck_gemm(int kind, int n, int reps)
{
    if (g_cuda.device < 0 || n <= 0 || kind < 0 || kind >= DDP_CUDA_VGEMM_KINDS)
        return 0;
    const size_t elems = (size_t)n * (size_t)n;
    float *a = (float *)dev_alloc(elems * sizeof(float)),
          *b = (float *)dev_alloc(elems * sizeof(float));
    struct vgemm g = {a, b, (float *)dev_alloc(elems * sizeof(float)), n, kind};
    LAUNCH(k_vfill, blocks_for(elems), THREADS, a, elems, 3u);
    LAUNCH(k_vfill, blocks_for(elems), THREADS, b, elems, 4u);
    void *ha = NULL, *hb = NULL;
    if (kind == DDP_CUDA_VGEMM_BF16) {
        ha = dev_alloc(elems * sizeof(__nv_bfloat16));
        hb = dev_alloc(elems * sizeof(__nv_bfloat16));
        LAUNCH(k_vto_bf16, blocks_for(elems), THREADS, (__nv_bfloat16 *)ha, a, elems);
        LAUNCH(k_vto_bf16, blocks_for(elems), THREADS, (__nv_bfloat16 *)hb, b, elems);
        g.a = ha;
        g.b = hb;
    }
    const double ms = timed_median_ms(vgemm_call, &g, reps);
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    CUDA_CHECK(cudaFree(g.c));
    if (ha) {
        CUDA_CHECK(cudaFree(ha));
        CUDA_CHECK(cudaFree(hb));
    }
    return 2.0 * (double)n * (double)n * (double)n / (ms * 1e-3) / 1e12;
}

/* ---- host <-> device ----------------------------------------------------------------------- */

struct vcopy {
    void *dst;
    const void *src;
    size_t bytes;
    cudaMemcpyKind kind;
};

static void vcopy_call(void *arg)
{
    struct vcopy *c = (struct vcopy *)arg;
    CUDA_CHECK(cudaMemcpyAsync(c->dst, c->src, c->bytes, c->kind, g_cuda.stream));
}

extern "C" double ddp_cuda_vcheck_pcie(int d2h, size_t bytes, int reps)
{
    if (g_cuda.device < 0 || bytes == 0)
        return 0;
    void *host = NULL, *dev = dev_alloc(bytes);
    CUDA_CHECK(cudaMallocHost(&host, bytes));
    memset(host, 0x5a, bytes); /* touched: its pages are there before the first copy */
    CUDA_CHECK(cudaMemsetAsync(dev, 0x3c, bytes, g_cuda.stream));
    struct vcopy c = {d2h ? host : dev, d2h ? dev : host, bytes,
                      d2h ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice};
    const double ms = timed_median_ms(vcopy_call, &c, reps);
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
    CUDA_CHECK(cudaFreeHost(host));
    CUDA_CHECK(cudaFree(dev));
    return (double)bytes / (ms * 1e-3) / 1e9;
}

/* ---- device-memory pattern test ------------------------------------------------------------ */

/* Words of w (n) that do not hold pattern `key`. */
static int64_t pattern_count(const uint32_t *w, size_t n, uint32_t key, unsigned long long *bad,
                             unsigned long long *host_bad, unsigned blocks)
{
    LAUNCH(k_vpat_check, blocks, THREADS, bad, w, n, key);
    CUDA_CHECK(cudaMemcpyAsync(host_bad, bad, sizeof(unsigned long long) * blocks,
                               cudaMemcpyDeviceToHost, g_cuda.stream));
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
    int64_t sum = 0;
    for (unsigned b = 0; b < blocks; b++)
        sum += (int64_t)host_bad[b];
    return sum;
}

extern "C" int64_t ddp_cuda_vcheck_pattern(size_t bytes, int corrupt, int64_t *words)
{
    const size_t n = bytes / sizeof(uint32_t);
    *words = 0;
    if (g_cuda.device < 0 || n == 0)
        return 0;
    uint32_t *w = (uint32_t *)dev_alloc(n * sizeof(uint32_t));
    const unsigned blocks =
        blocks_for(n) < VCHECK_COUNT_BLOCKS ? blocks_for(n) : VCHECK_COUNT_BLOCKS;
    unsigned long long *bad = (unsigned long long *)dev_alloc(sizeof(*bad) * blocks);
    unsigned long long *host_bad =
        (unsigned long long *)ddp_malloc(sizeof(unsigned long long) * blocks);
    /* two passes, the pattern and its complement: every bit of every word holds 0 and 1 */
    const uint32_t keys[2] = {0x5A5A5A5Au, 0xA5A5A5A5u};
    int64_t wrong = 0;
    for (int p = 0; p < 2; p++) {
        LAUNCH(k_vpat_write, blocks, THREADS, w, n, keys[p]);
        if (corrupt && p == 0)
            LAUNCH(k_vpat_corrupt, 1, THREADS, w, n);
        wrong += pattern_count(w, n, keys[p], bad, host_bad, blocks);
        *words += (int64_t)n;
    }
    free(host_bad);
    CUDA_CHECK(cudaFree(bad));
    CUDA_CHECK(cudaFree(w));
    return wrong;
}

/* ---- what the device is --------------------------------------------------------------------- */

extern "C" int ddp_cuda_vcheck_info(struct ddp_cuda_vinfo *vi)
{
    memset(vi, 0, sizeof *vi);
    if (g_cuda.device < 0)
        return -1;
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, g_cuda.device));
    snprintf(vi->pci_bus_id, sizeof vi->pci_bus_id, "%08X:%02X:%02X.0", (unsigned)p.pciDomainID,
             (unsigned)p.pciBusID, (unsigned)p.pciDeviceID);
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    vi->free_bytes = free_b;
    vi->total_bytes = total_b;
#ifdef DDP_CUDA_TWIN
    vi->twin = 1; /* tests/twin: the CPU runs it; sizes stay tiny */
#endif
    return 0;
}

/*
 * cuda.cu - the CUDA backend (see cuda.h): cuBLAS for the GEMMs of linear and conv2d, one
 * kernel per remaining op, everything queued on one compute stream. Correctness first: the
 * kernels follow cpu_kernels.inc line by line (same first-maximum rule in maxpool and xent,
 * same dropout hash, double accumulation where the CPU accumulates in double); they are
 * simple grid-stride loops, not tuned.
 *
 * Dimension letters as in backend.h: B batch, C in channels, O out channels or features,
 * H W input height and width, OH OW output, P = OH*OW, S positions per channel, K classes,
 * CKK = C*k*k, nb samples in one conv chunk, Q = nb*P columns of a chunk's im2col matrix.
 *
 * Row-major on column-major cuBLAS: a row-major (r, c) matrix is a column-major (c, r) one, so
 * each row-major product Y = A B is issued as Y^T = B^T A^T with the operands swapped.
 *
 * Scratch: conv keeps its im2col matrix (CKK, Q) and its gradient in the caller's col buffer
 * (conv_col_elems); everything else an op needs on the device (conv's transposed output
 * gradient, reduction partials, batchnorm and xent sums) lives in one workspace owned here,
 * grown on demand during the first step (never freed: see ws_get) and kept until exit.
 *
 * Every launch goes through LAUNCH, and the runtime and cuBLAS headers can be swapped for the
 * GPU twin's (tests/twin, DDP_CUDA_TWIN): ddptrain-twin runs this very file on the CPU.
 */
#ifdef DDP_CUDA_TWIN
#include "twin_kernels.h" /* tests/twin: the GPU twin's runtime, cuBLAS and kernel language */
#include "cudnn.h"        /* the twin's cuDNN (tests/twin/cudnn.cc) */
#else
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#if DDP_HAVE_CUDNN_H /* src/backend/meson.build: cudnn.h found next to the toolkit's headers */
#include <cudnn.h>
#endif
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda.h"

extern "C" {
#include "core/config.h" /* enum ddp_precision */
#include "core/util.h"
}

/* ---- cuBLAS, opened when first needed ----------------------------------------------------
 * ddptrain does not link cuBLAS: the constructors of libcublas and libcublasLt take 50-70 ms at
 * the start of every process that loads them, CPU-only runs, `ddptrain env` and `hostlist`
 * included. blas_open() dlopens it (the soname of the cuBLAS the build was compiled against,
 * found through LD_LIBRARY_PATH, the binary's run path and the system's) when the first GPU
 * backend is made, and every call goes through this table. The emulator build points the
 * table at the twin's cuBLAS. */
#ifdef DDP_CUDA_TWIN
#define V2(f) f
#else
#define V2(f) f##_v2
#endif

/* GemmEx and its strided-batched form, spelled out: C++ sees cuBLAS's overloads of both. */
typedef cublasStatus_t (*gemm_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                     int, const void *, const void *, cudaDataType, int,
                                     const void *, cudaDataType, int, const void *, void *,
                                     cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
typedef cublasStatus_t (*gemm_strided_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                             int, int, int, const void *, const void *,
                                             cudaDataType, int, long long, const void *,
                                             cudaDataType, int, long long, const void *, void *,
                                             cudaDataType, int, long long, int, cublasComputeType_t,
                                             cublasGemmAlgo_t);

struct blas_api {
    decltype(&V2(cublasCreate)) create;
    decltype(&V2(cublasDestroy)) destroy;
    decltype(&V2(cublasSetStream)) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&V2(cublasSgemm)) sgemm;
    decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
    decltype(&cublasGetProperty) get_property;
    decltype(&cublasGetStatusName) status_name;
    decltype(&cublasGetStatusString) status_string;
    gemm_ex_fn gemm_ex;                         /* [train] precision = bf16 */
    gemm_strided_ex_fn gemm_strided_batched_ex; /* [train] precision = bf16 */
};

#ifdef DDP_CUDA_TWIN
static struct blas_api g_blas = {&cublasCreate,
                                 &cublasDestroy,
                                 &cublasSetStream,
                                 &cublasSetMathMode,
                                 &cublasSgemm,
                                 &cublasSgemmStridedBatched,
                                 &cublasGetProperty,
                                 &cublasGetStatusName,
                                 &cublasGetStatusString,
                                 &cublasGemmEx,
                                 &cublasGemmStridedBatchedEx};

static int blas_open(char *err, size_t errlen)
{
    (void)err, (void)errlen;
    return 0;
}
#else
static struct blas_api g_blas;

#define BLAS_STR2(x) #x
#define BLAS_STR(x) BLAS_STR2(x)
#define BLAS_SONAME "libcublas.so." BLAS_STR(CUBLAS_VER_MAJOR)

/* 0 when the table is filled (once per process); -1 with one line in err. */
static int blas_open(char *err, size_t errlen)
{
    static int state; /* 0 not tried, 1 open, -1 failed */
    static char why[512];
    if (state == 0) {
        static const struct {
            const char *sym;
            size_t off;
        } syms[] = {
            {"cublasCreate_v2", offsetof(blas_api, create)},
            {"cublasDestroy_v2", offsetof(blas_api, destroy)},
            {"cublasSetStream_v2", offsetof(blas_api, set_stream)},
            {"cublasSetMathMode", offsetof(blas_api, set_math_mode)},
            {"cublasSgemm_v2", offsetof(blas_api, sgemm)},
            {"cublasSgemmStridedBatched", offsetof(blas_api, sgemm_strided_batched)},
            {"cublasGetProperty", offsetof(blas_api, get_property)},
            {"cublasGetStatusName", offsetof(blas_api, status_name)},
            {"cublasGetStatusString", offsetof(blas_api, status_string)},
            {"cublasGemmEx", offsetof(blas_api, gemm_ex)},
            {"cublasGemmStridedBatchedEx", offsetof(blas_api, gemm_strided_batched_ex)},
        };
        void *h = dlopen(BLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
        state = h ? 1 : -1;
        if (!h) {
            const char *d = dlerror();
            snprintf(why, sizeof why,
                     "cannot load cuBLAS (%s): %s; install the CUDA toolkit's cuBLAS %d or add "
                     "the directory that holds %s to LD_LIBRARY_PATH",
                     BLAS_SONAME, d ? d : "not found", CUBLAS_VER_MAJOR, BLAS_SONAME);
        }
        for (size_t i = 0; h && i < sizeof syms / sizeof syms[0]; i++) {
            void *f = dlsym(h, syms[i].sym);
            if (!f) {
                snprintf(why, sizeof why,
                         "%s has no %s: a cuBLAS other than the %d.x this build expects",
                         BLAS_SONAME, syms[i].sym, CUBLAS_VER_MAJOR);
                state = -1;
                break;
            }
            memcpy((char *)&g_blas + syms[i].off, &f, sizeof f);
        }
    }
    if (state < 0)
        return ddp_err(err, errlen, "%s", why);
    return 0;
}
#endif

/* cuBLAS math mode for [train] precision: TF32 tensor cores for FP32 GEMMs with tf32, else
 * plain FP32 (bf16 GEMMs go through GemmEx, which needs no math mode). */
static cublasMath_t math_mode(int precision)
{
    return precision == DDP_PRECISION_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
}

/* ---- checks ------------------------------------------------------------------------------ */

#define CUDA_CHECK(call)                                                                     \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess)                                                               \
            ddp_die_at(__FILE__, __LINE__, DDP_EXIT_RUNTIME, "%s: CUDA error %s: %s", #call, \
                       cudaGetErrorName(e_), cudaGetErrorString(e_));                        \
    } while (0)

#define CUBLAS_CHECK(call)                                                                     \
    do {                                                                                       \
        cublasStatus_t s_ = (call);                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                       \
            ddp_die_at(__FILE__, __LINE__, DDP_EXIT_RUNTIME, "%s: cuBLAS error %s: %s", #call, \
                       g_blas.status_name(s_), g_blas.status_string(s_));                      \
    } while (0)

/* Every kernel launch: queued on the compute stream, a bad configuration reported at its
 * launch site. A macro so that tests/gpu/emu can run the very same kernels on the CPU. */
#ifndef LAUNCH
#define LAUNCH(kernel, grid, block, ...)                       \
    do {                                                       \
        kernel<<<(grid), (block), 0, g.stream>>>(__VA_ARGS__); \
        CUDA_CHECK(cudaGetLastError());                        \
    } while (0)
#endif

/* ---- state ------------------------------------------------------------------------------- */

/* Threads per block of every kernel (a multiple of 32, as block_sum needs). */
#define THREADS 256
/* Most blocks of a grid-stride launch: enough to fill any current GPU several times over. */
#ifndef MAX_BLOCKS
#define MAX_BLOCKS 65535u
#endif
/* Floats of one conv chunk's im2col matrix: the batch is cut into chunks of nb samples with
 * nb*CKK*P at most this (64 MiB), so col stays bounded for any batch size. */
#define COL_CHUNK_FLOATS ((size_t)1 << 24)
/* Most partial sums per channel in the batchnorm reductions. */
#define BN_MAX_SPLITS 64
/* Elements one batchnorm reduction block should cover before another split is worth it. */
#define BN_ELEMS_PER_SPLIT 8192

/* Device allocations whose sizes are kept for the accounting of mem_info (frees come only at
 * the end; beyond this many live blocks a free is not subtracted from `allocated`). */
#define MEM_BLOCKS 4096

/* Batch uploads whose completion events are kept (copies_done looks no further back: the
 * loader holds at most DDP_LOADER_MAX_SLOTS batches). */
#define UPLOAD_RING 64

static struct {
    int device;    /* -1 until ddp_backend_cuda succeeds */
    int precision; /* [train] precision: enum ddp_precision (core/config.h) */
    cudaStream_t stream;
    cublasHandle_t blas;
    void *ws; /* workspace, ws_bytes bytes of device memory */
    size_t ws_bytes;
    char devname[320];
    /* input pipeline (upload_batch): */
    cudaStream_t copy;               /* host-to-device batch copies */
    cudaEvent_t mark[2];             /* compute work queued before upload q, at q % 2 */
    cudaEvent_t copied[UPLOAD_RING]; /* copy q done, at q % UPLOAD_RING */
    int64_t uploads, done;           /* copies queued; highest known complete */
} g = {-1, 0, NULL, NULL, NULL, 0, "", NULL, {NULL, NULL}, {}, 0, 0};

/* 1 when [train] precision = tf32 allows TF32 tensor cores (cuBLAS and cuDNN). */
static int tf32_math(void)
{
    return g.precision == DDP_PRECISION_TF32;
}

/* 1 when cuDNN's convolutions may use the tensor cores on fp32 data (TF32 operands): under
 * tf32, and under bf16, whose convolutions run through cuDNN in that math (bf16 through cuDNN
 * needs bf16 activations, which the trunk does not keep yet). */
static int dnn_tensor_math(void)
{
    return g.precision == DDP_PRECISION_TF32 || g.precision == DDP_PRECISION_BF16;
}

static struct ddp_backend g_table;

/* ---- device memory accounting (backend.h mem_info) --------------------------------------- */

static struct {
    size_t allocated, peak; /* bytes of cuda_alloc and the workspace, now and at most */
    int nblocks;
    struct {
        void *p;
        size_t bytes;
    } blocks[MEM_BLOCKS];
} g_mem;

static void mem_note(void *p, size_t bytes)
{
    g_mem.allocated += bytes;
    if (g_mem.allocated > g_mem.peak)
        g_mem.peak = g_mem.allocated;
    if (g_mem.nblocks < MEM_BLOCKS) {
        g_mem.blocks[g_mem.nblocks].p = p;
        g_mem.blocks[g_mem.nblocks++].bytes = bytes;
    }
}

static void mem_forget(void *p)
{
    for (int i = g_mem.nblocks - 1; i >= 0; i--)
        if (g_mem.blocks[i].p == p) {
            g_mem.allocated -= g_mem.blocks[i].bytes;
            g_mem.blocks[i] = g_mem.blocks[--g_mem.nblocks];
            return;
        }
}

static void cuda_mem_info(struct ddp_mem_info *mi)
{
    mi->allocated = g_mem.allocated;
    mi->peak = g_mem.peak;
    mi->dev_free = mi->dev_total = 0;
    if (cudaMemGetInfo(&mi->dev_free, &mi->dev_total) != cudaSuccess) {
        cudaGetLastError();
        mi->dev_free = mi->dev_total = 0;
    }
}

/* The workspace, at least `bytes` large. It grows during the first step (every op has run
 * once by its end), never after. Growing neither frees nor waits: the outgrown buffer may
 * still be read by queued kernels and is left allocated (a few, as each growth at least
 * doubles) until exit. A cudaFree here would synchronise the device, collectives in flight
 * included, and hang on a dead peer outside any deadline. */
static void *ws_get(size_t bytes)
{
    if (bytes <= g.ws_bytes)
        return g.ws;
    size_t want = g.ws_bytes * 2 > bytes ? g.ws_bytes * 2 : bytes;
    want = (want + 255) / 256 * 256;
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, want));
    mem_note(p, want);
    g.ws = p;
    g.ws_bytes = want;
    return g.ws;
}

static size_t align256(size_t bytes)
{
    return (bytes + 255) / 256 * 256;
}

/* Blocks for a grid-stride loop over n items. */
static unsigned blocks_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return b > MAX_BLOCKS ? MAX_BLOCKS : (unsigned)(b ? b : 1);
}

/* Each thread takes items i, i + (all threads), ...: neighbouring threads read neighbouring
 * items (coalesced). The GPU twin, which runs the threads one after another, gives each thread
 * a contiguous run instead (twin_kernels.h): the same items, each once. */
#ifndef GRID_STRIDE
#define GRID_STRIDE(i, n)                                                   \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)gridDim.x * blockDim.x)
#endif

/* ---- device helpers ---------------------------------------------------------------------- */

template <typename T> __device__ T warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

/* Sum of v over the block (blockDim.x a multiple of 32); the result is valid in thread 0.
 * May be called several times in one kernel. */
template <typename T> __device__ T block_sum(T v)
{
    __shared__ T sh[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* a previous call may still read sh */
    if (lane == 0)
        sh[wid] = v;
    __syncthreads();
    const int nw = blockDim.x >> 5;
    v = threadIdx.x < (unsigned)nw ? sh[threadIdx.x] : T(0);
    if (wid == 0)
        v = warp_sum(v);
    return v;
}

/* ddp_cpu_uniform (cpu.c), bit for bit: dropout masks match the CPU backend's. */
__device__ __forceinline__ double dev_uniform(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- elementwise kernels ------------------------------------------------------------------ */

__global__ void k_scale(float *x, size_t n, float a)
{
    GRID_STRIDE(i, n) x[i] *= a;
}

/* out (rows, O*inner): every element of feature o = (idx / inner) % O gets b[o]. */
__global__ void k_fill_bias(float *out, const float *b, size_t n, int O, int inner)
{
    GRID_STRIDE(i, n) out[i] = b[(i / (size_t)inner) % (size_t)O];
}

__global__ void k_relu_fwd(float *out, const float *inp, size_t n)
{
    GRID_STRIDE(i, n) out[i] = inp[i] > 0 ? inp[i] : 0;
}

__global__ void k_relu_bwd(float *dinp, const float *dout, const float *out, size_t n)
{
    GRID_STRIDE(i, n) dinp[i] = out[i] > 0 ? dout[i] : 0;
}

__global__ void k_dropout_fwd(float *out, float *mask, const float *inp, size_t n, double p,
                              float keep, uint64_t seed)
{
    GRID_STRIDE(i, n)
    {
        const float m = dev_uniform(seed, i) >= p ? keep : 0.0f;
        mask[i] = m;
        out[i] = inp[i] * m;
    }
}

__global__ void k_mul(float *dinp, const float *dout, const float *mask, size_t n)
{
    GRID_STRIDE(i, n) dinp[i] = dout[i] * mask[i];
}

__global__ void k_sgd(float *p, const float *g_, float gscale_, const float *gs, float *buf,
                      size_t n, float lr, float momentum, float weight_decay, int nesterov,
                      int first_step)
{
    const float gscale = gs ? *gs : gscale_; /* clip_scale's, on the device */
    GRID_STRIDE(i, n)
    {
        float d = __fmul_rn(g_[i], gscale);
        if (weight_decay != 0)
            d += weight_decay * p[i];
        if (momentum != 0) {
            buf[i] = first_step ? d : momentum * buf[i] + d;
            d = nesterov ? d + momentum * buf[i] : buf[i];
        }
        p[i] -= lr * d;
    }
}

__global__ void k_adam(float *p, const float *g_, float gscale_, const float *gs, float *m,
                       float *v, size_t n, float b1, float b2, float eps, float weight_decay,
                       int decoupled, float step_size, float bc2_sqrt, float decay)
{
    const float gscale = gs ? *gs : gscale_; /* clip_scale's, on the device */
    GRID_STRIDE(i, n)
    {
        float d = __fmul_rn(g_[i], gscale);
        if (decoupled)
            p[i] *= decay;
        else if (weight_decay != 0)
            d += weight_decay * p[i];
        m[i] = b1 * m[i] + (1 - b1) * d;
        v[i] = b2 * v[i] + (1 - b2) * d * d;
        const float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        p[i] -= step_size * m[i] / denom;
    }
}

/* ---- bf16 operands ([train] precision = bf16) ---------------------------------------------
 * What PyTorch autocast does for matmuls and convolutions: the GEMM operands are rounded to
 * bf16 (round to nearest even), multiplied on the tensor cores with fp32 accumulation into an
 * fp32 result. Everything else (weights, gradients, optimiser state, batchnorm, softmax, loss)
 * stays fp32: the bf16 copies are scratch, made before each GEMM into BF16_SLOTS buffers that,
 * like the workspace, grow during the first step only (outgrown ones are left allocated, never
 * freed: see ws_get). A slot may be reused by the next GEMM: all run in order on one stream. */

#define BF16_SLOTS 3

static struct {
    int on; /* [train] precision = bf16 */
    void *buf[BF16_SLOTS];
    size_t bytes[BF16_SLOTS];
} g_bf16;

__global__ void k_to_bf16(__nv_bfloat16 *out, const float *x, size_t n)
{
    GRID_STRIDE(i, n) out[i] = __float2bfloat16_rn(x[i]);
}

/* The n floats at x rounded to bf16 in scratch buffer `slot` (valid until that slot's next
 * use); queued, never waits. */
static const void *as_bf16(const float *x, size_t n, int slot)
{
    const size_t bytes = sizeof(__nv_bfloat16) * n;
    if (bytes > g_bf16.bytes[slot]) {
        size_t want = g_bf16.bytes[slot] * 2 > bytes ? g_bf16.bytes[slot] * 2 : bytes;
        want = align256(want);
        void *p = NULL;
        CUDA_CHECK(cudaMalloc(&p, want));
        g_bf16.buf[slot] = p;
        g_bf16.bytes[slot] = want;
    }
    if (n) {
        LAUNCH(k_to_bf16, blocks_for(n), THREADS, (__nv_bfloat16 *)g_bf16.buf[slot], x, n);
    }
    return g_bf16.buf[slot];
}

/* C (fp32, column-major) = op(A) op(B) + beta C for bf16 A and B, accumulated in fp32. */
static void gemm_bf16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                      const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc)
{
    const float one = 1;
    CUBLAS_CHECK(g_blas.gemm_ex(g.blas, ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B, CUDA_R_16BF,
                                ldb, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
}

/* gemm_bf16 over `batch` matrices strideA, strideB, strideC elements apart. */
static void gemm_bf16_strided(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const void *A, int lda, long long sA, const void *B, int ldb,
                              long long sB, float beta, float *C, int ldc, long long sC, int batch)
{
    const float one = 1;
    CUBLAS_CHECK(g_blas.gemm_strided_batched_ex(
        g.blas, ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, sA, B, CUDA_R_16BF, ldb, sB, &beta, C,
        CUDA_R_32F, ldc, sC, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* ---- linear ------------------------------------------------------------------------------ */

/* db (O) += column sums of dout (B,O). One block per 32 features: lane l of warp r sums
 * rows r, r + nwarps, ... of feature 32 * blockIdx.x + l (a warp reads 32 consecutive floats
 * of a row), then the warps' partial sums are added in warp order: parallel over rows and
 * features, and the same order of summation on every run. */
__global__ void k_colsum_add(float *db, const float *dout, int B, int O)
{
    __shared__ float part[THREADS / 32][32];
    const int lane = threadIdx.x & 31, r = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int o = blockIdx.x * 32 + lane;
    float s = 0;
    if (o < O)
        for (int b = r; b < B; b += nw)
            s += dout[(size_t)b * O + o];
    part[r][lane] = s;
    __syncthreads();
    if (r == 0 && o < O) {
        float t = 0;
        for (int i = 0; i < nw; i++)
            t += part[i][lane];
        db[o] += t;
    }
}

/* out (B,O) = inp (B,C) w^T + beta out, in fp32 or on bf16 operands ([train] precision). */
static void linear_gemm(float *out, const float *inp, const float *w, int B, int C, int O,
                        float beta)
{
    if (g_bf16.on) {
        gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, O, B, C, as_bf16(w, (size_t)O * C, 0), C,
                  as_bf16(inp, (size_t)B * C, 1), C, beta, out, O);
        return;
    }
    const float one = 1;
    CUBLAS_CHECK(
        g_blas.sgemm(g.blas, CUBLAS_OP_T, CUBLAS_OP_N, O, B, C, &one, w, C, inp, C, &beta, out, O));
}

static void cuda_linear_fwd(float *out, const float *inp, const float *w, const float *b, int B,
                            int C, int O)
{
    /* out (B,O) = inp (B,C) w^T + b. Column-major: out^T (O,B) = w (O,C) inp^T (C,B), where w
     * is stored as a column-major (C,O) matrix (op T) and inp as a column-major (C,B) one. */
    const size_t n = (size_t)B * O;
    if (n == 0)
        return;
    if (b) {
        LAUNCH(k_fill_bias, blocks_for(n), THREADS, out, b, n, O, 1);
    }
    linear_gemm(out, inp, w, B, C, O, b ? 1.0f : 0.0f);
}

/* cuda_linear_bwd's GEMMs on bf16 operands (dout cast once for both). */
static void linear_bwd_bf16(float *dinp, float *dw, const float *dout, const float *inp,
                            const float *w, int B, int C, int O)
{
    const void *dout16 = as_bf16(dout, (size_t)B * O, 0);
    if (dinp)
        gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, C, B, O, as_bf16(w, (size_t)O * C, 1), C, dout16, O, 0,
                  dinp, C);
    gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_T, C, O, B, as_bf16(inp, (size_t)B * C, 1), C, dout16, O, 1,
              dw, C);
}

static void cuda_linear_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, int B, int C, int O)
{
    if (B == 0)
        return;
    if (g_bf16.on) {
        linear_bwd_bf16(dinp, dw, dout, inp, w, B, C, O);
        if (db) {
            LAUNCH(k_colsum_add, (O + 31) / 32, THREADS, db, dout, B, O);
        }
        return;
    }
    const float one = 1, zero = 0;
    /* dinp (B,C) = dout (B,O) w (O,C): column-major dinp^T (C,B) = w^T (C,O) dout^T (O,B) */
    if (dinp)
        CUBLAS_CHECK(g_blas.sgemm(g.blas, CUBLAS_OP_N, CUBLAS_OP_N, C, B, O, &one, w, C, dout, O,
                                  &zero, dinp, C));
    /* dw (O,C) += dout^T (O,B) inp (B,C): column-major dw^T (C,O) += inp^T (C,B) dout (B,O) */
    CUBLAS_CHECK(g_blas.sgemm(g.blas, CUBLAS_OP_N, CUBLAS_OP_T, C, O, B, &one, inp, C, dout, O,
                              &one, dw, C));
    if (db) {
        LAUNCH(k_colsum_add, (O + 31) / 32, THREADS, db, dout, B, O);
    }
}

static void cuda_relu_fwd(float *out, const float *inp, size_t n)
{
    if (!n)
        return;
    LAUNCH(k_relu_fwd, blocks_for(n), THREADS, out, inp, n);
}

static void cuda_relu_bwd(float *dinp, const float *dout, const float *out, size_t n)
{
    if (!n)
        return;
    LAUNCH(k_relu_bwd, blocks_for(n), THREADS, dinp, dout, out, n);
}

/* ---- fused epilogues --------------------------------------------------------------------- */

/* out (n, O per `inner` run) = relu(out + b), in place; b NULL: relu alone. The sum is the
 * one rounding cuBLAS's beta = 1 makes when the bias was broadcast first. */
__global__ void k_bias_relu(float *out, const float *b, size_t n, int O, int inner)
{
    GRID_STRIDE(i, n)
    {
        const float v = b ? out[i] + b[(i / (size_t)inner) % (size_t)O] : out[i];
        out[i] = v > 0 ? v : 0;
    }
}

/* linear + relu: the GEMM writes the product (beta = 0), one kernel adds the bias and clamps;
 * separately, the bias is broadcast, the GEMM reads it back (beta = 1) and relu makes a third
 * pass into another buffer. */
static void cuda_linear_relu_fwd(float *out, const float *inp, const float *w, const float *b,
                                 int B, int C, int O)
{
    const size_t n = (size_t)B * O;
    if (n == 0)
        return;
    linear_gemm(out, inp, w, B, C, O, 0.0f);
    LAUNCH(k_bias_relu, blocks_for(n), THREADS, out, b, n, O, 1);
}

/* ---- conv2d: im2col per chunk of nb samples + GEMMs ---------------------------------------- */

struct conv_geom {
    int C, H, W, O, k, stride, pad, OH, OW, P, CKK;
};

static struct conv_geom conv_geom_of(int C, int H, int W, int O, int k, int stride, int pad)
{
    struct conv_geom q;
    q.C = C;
    q.H = H;
    q.W = W;
    q.O = O;
    q.k = k;
    q.stride = stride;
    q.pad = pad;
    q.OH = (H + 2 * pad - k) / stride + 1;
    q.OW = (W + 2 * pad - k) / stride + 1;
    q.P = q.OH * q.OW;
    q.CKK = C * k * k;
    return q;
}

/* Samples per chunk for a batch of B: as many as keep one im2col matrix within
 * COL_CHUNK_FLOATS, at least 1. Monotone in B, so the chunk of any B <= max_batch fits the
 * col buffer sized for max_batch. */
static int conv_chunk(int B, int CKK, int P)
{
    const size_t per = (size_t)CKK * (size_t)P;
    size_t nb = per ? COL_CHUNK_FLOATS / per : (size_t)B;
    if (nb < 1)
        nb = 1;
    if (nb > (size_t)B)
        nb = (size_t)B;
    return (int)nb;
}

/* col (CKK, nb*P), column i*P + p = sample i0+i, output position p; zero outside the image. */
__global__ void k_im2col(float *col, const float *inp, int i0, int nb, struct conv_geom q)
{
    const size_t n = (size_t)q.CKK * nb * q.P;
    GRID_STRIDE(idx, n)
    {
        const int p = (int)(idx % q.P);
        const size_t t = idx / q.P;
        const int i = (int)(t % nb);
        const int ckk = (int)(t / nb);
        const int c = ckk / (q.k * q.k), r = ckk % (q.k * q.k);
        const int ki = r / q.k, kj = r % q.k;
        const int oh = p / q.OW, ow = p % q.OW;
        const int ih = oh * q.stride - q.pad + ki, iw = ow * q.stride - q.pad + kj;
        float v = 0;
        if (ih >= 0 && ih < q.H && iw >= 0 && iw < q.W)
            v = inp[(((size_t)(i0 + i) * q.C + c) * q.H + ih) * q.W + iw];
        col[idx] = v;
    }
}

/* dyT (O, nb*P) from dout (B, O, P), samples i0 .. i0+nb-1. */
__global__ void k_conv_dout_t(float *dyT, const float *dout, int i0, int nb, int O, int P)
{
    const size_t n = (size_t)O * nb * P;
    GRID_STRIDE(idx, n)
    {
        const int p = (int)(idx % P);
        const size_t t = idx / P;
        const int i = (int)(t % nb);
        const int o = (int)(t / nb);
        dyT[idx] = dout[((size_t)(i0 + i) * O + o) * P + p];
    }
}

/* db[o] += sum of row o of dyT (O, Q): one block per feature. */
__global__ void k_rowsum_add(float *db, const float *dyT, size_t Q)
{
    const float *row = dyT + (size_t)blockIdx.x * Q;
    double s = 0;
    for (size_t j = threadIdx.x; j < Q; j += blockDim.x)
        s += row[j];
    s = block_sum(s);
    if (threadIdx.x == 0)
        db[blockIdx.x] += (float)s;
}

/* dinp of samples i0.. (overwritten) gathered from dcol (CKK, nb*P): each input pixel sums the
 * columns whose window covers it, in (ki, kj) order as the CPU's col2im adds them. */
__global__ void k_col2im(float *dinp, const float *dcol, int i0, int nb, struct conv_geom q)
{
    const size_t n = (size_t)nb * q.C * q.H * q.W;
    const size_t Q = (size_t)nb * q.P;
    GRID_STRIDE(idx, n)
    {
        const int w = (int)(idx % q.W);
        size_t t = idx / q.W;
        const int h = (int)(t % q.H);
        t /= q.H;
        const int c = (int)(t % q.C);
        const int i = (int)(t / q.C);
        float s = 0;
        for (int ki = 0; ki < q.k; ki++) {
            const int hn = h + q.pad - ki;
            if (hn < 0 || hn % q.stride)
                continue;
            const int oh = hn / q.stride;
            if (oh >= q.OH)
                continue;
            for (int kj = 0; kj < q.k; kj++) {
                const int wn = w + q.pad - kj;
                if (wn < 0 || wn % q.stride)
                    continue;
                const int ow = wn / q.stride;
                if (ow >= q.OW)
                    continue;
                const size_t row = ((size_t)c * q.k + ki) * q.k + kj;
                s += dcol[row * Q + (size_t)i * q.P + (size_t)oh * q.OW + ow];
            }
        }
        dinp[(size_t)i0 * q.C * q.H * q.W + idx] = s;
    }
}

static size_t cuda_conv_col_elems(int B, int C, int H, int W, int k, int stride, int pad)
{
    struct conv_geom q = conv_geom_of(C, H, W, 1, k, stride, pad);
    const int nb = conv_chunk(B > 0 ? B : 1, q.CKK, q.P);
    return 2 * (size_t)q.CKK * (size_t)nb * (size_t)q.P; /* col and dcol of one chunk */
}

static void cuda_conv2d_fwd(float *out, float *col, const float *inp, const float *w,
                            const float *b, int B, int C, int H, int W, int O, int k, int stride,
                            int pad)
{
    const struct conv_geom q = conv_geom_of(C, H, W, O, k, stride, pad);
    const size_t n_out = (size_t)B * O * q.P;
    if (n_out == 0)
        return;
    if (b) {
        LAUNCH(k_fill_bias, blocks_for(n_out), THREADS, out, b, n_out, O, q.P);
    } else {
        CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float) * n_out, g.stream));
    }
    const int nbmax = conv_chunk(B, q.CKK, q.P);
    const float one = 1;
    const void *w16 = g_bf16.on ? as_bf16(w, (size_t)O * q.CKK, 0) : NULL;
    for (int i0 = 0; i0 < B; i0 += nbmax) {
        const int nb = B - i0 < nbmax ? B - i0 : nbmax;
        const size_t ncol = (size_t)q.CKK * nb * q.P;
        LAUNCH(k_im2col, blocks_for(ncol), THREADS, col, inp, i0, nb, q);
        /* per sample i: y_i (O,P) += w (O,CKK) col_i (CKK,P), col_i = columns i*P.. of col.
         * Column-major: y_i^T (P,O) += col_i^T (P,CKK) w^T (CKK,O). */
        const int Q = nb * q.P;
        if (w16) {
            gemm_bf16_strided(CUBLAS_OP_N, CUBLAS_OP_N, q.P, O, q.CKK, as_bf16(col, ncol, 1), Q,
                              (long long)q.P, w16, q.CKK, 0LL, 1, out + (size_t)i0 * O * q.P, q.P,
                              (long long)O * q.P, nb);
            continue;
        }
        CUBLAS_CHECK(g_blas.sgemm_strided_batched(
            g.blas, CUBLAS_OP_N, CUBLAS_OP_N, q.P, O, q.CKK, &one, col, Q, (long long)q.P, w, q.CKK,
            0LL, &one, out + (size_t)i0 * O * q.P, q.P, (long long)O * q.P, nb));
    }
}

/* The GEMMs of one chunk of cuda_conv2d_bwd on bf16 operands (the same products):
 * dw += dyT col^T, and dcol = w^T dyT when dcol is given (w16: w in bf16, slot 0). */
static void conv_chunk_bwd_bf16(float *dcol, float *dw, const float *col, const float *dyT,
                                const void *w16, struct conv_geom q, int Q)
{
    const void *dy16 = as_bf16(dyT, (size_t)q.O * Q, 2);
    gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, q.CKK, q.O, Q, as_bf16(col, (size_t)q.CKK * Q, 1), Q, dy16,
              Q, 1, dw, q.CKK);
    if (dcol)
        gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_T, Q, q.CKK, q.O, dy16, Q, w16, q.CKK, 0, dcol, Q);
}

static void cuda_conv2d_bwd(float *dinp, float *dw, float *db, float *col, const float *dout,
                            const float *inp, const float *w, int B, int C, int H, int W, int O,
                            int k, int stride, int pad)
{
    const struct conv_geom q = conv_geom_of(C, H, W, O, k, stride, pad);
    if (B == 0 || q.P == 0)
        return;
    const int nbmax = conv_chunk(B, q.CKK, q.P);
    float *dcol = col + (size_t)q.CKK * nbmax * q.P;
    float *dyT = (float *)ws_get(sizeof(float) * (size_t)O * nbmax * q.P);
    const float one = 1, zero = 0;
    const void *w16 = g_bf16.on && dinp ? as_bf16(w, (size_t)O * q.CKK, 0) : NULL;
    for (int i0 = 0; i0 < B; i0 += nbmax) {
        const int nb = B - i0 < nbmax ? B - i0 : nbmax;
        const int Q = nb * q.P;
        const size_t ncol = (size_t)q.CKK * Q, ndy = (size_t)O * Q;
        LAUNCH(k_im2col, blocks_for(ncol), THREADS, col, inp, i0, nb, q);
        LAUNCH(k_conv_dout_t, blocks_for(ndy), THREADS, dyT, dout, i0, nb, O, q.P);
        if (g_bf16.on) {
            conv_chunk_bwd_bf16(dinp ? dcol : NULL, dw, col, dyT, w16, q, Q);
            if (db) {
                LAUNCH(k_rowsum_add, O, THREADS, db, dyT, (size_t)Q);
            }
            if (dinp) {
                LAUNCH(k_col2im, blocks_for((size_t)nb * C * H * W), THREADS, dinp, dcol, i0, nb,
                       q);
            }
            continue;
        }
        /* dw (O,CKK) += dyT (O,Q) col^T (Q,CKK). Column-major: dw^T (CKK,O) += col (CKK,Q)
         * dyT^T (Q,O), where col is stored as a column-major (Q,CKK) matrix: op T. */
        CUBLAS_CHECK(g_blas.sgemm(g.blas, CUBLAS_OP_T, CUBLAS_OP_N, q.CKK, O, Q, &one, col, Q, dyT,
                                  Q, &one, dw, q.CKK));
        if (db) {
            LAUNCH(k_rowsum_add, O, THREADS, db, dyT, (size_t)Q);
        }
        if (dinp) {
            /* dcol (CKK,Q) = w^T (CKK,O) dyT (O,Q). Column-major: dcol^T (Q,CKK) =
             * dyT^T (Q,O) w (O,CKK), w stored as column-major (CKK,O): op T. */
            CUBLAS_CHECK(g_blas.sgemm(g.blas, CUBLAS_OP_N, CUBLAS_OP_T, Q, q.CKK, O, &one, dyT, Q,
                                      w, q.CKK, &zero, dcol, Q));
            const size_t nin = (size_t)nb * C * H * W;
            LAUNCH(k_col2im, blocks_for(nin), THREADS, dinp, dcol, i0, nb, q);
        }
    }
}

/* ---- conv2d through cuDNN ---------------------------------------------------------------
 * cuDNN (the legacy convolution API of cuDNN 9) is opened at run time like cuBLAS: dnn_open()
 * dlopens the soname of the cuDNN the build was compiled against (libcudnn.so.9) when the
 * trainer chooses the convolution path (ddp_cuda_conv_path), and every call goes through
 * g_dnn. Missing (or a build without cudnn.h, or [train] conv = im2col): the im2col + cuBLAS
 * functions above run instead. The twin build points the table at the twin's cuDNN
 * (tests/twin/cudnn.cc); DDP_EMU_NO_CUDNN=1 makes it missing.
 *
 * Plans: conv_plan (at model build) makes one plan per convolution shape (C,H,W,O,k,stride,
 * pad) with descriptors and, for the planned batch B, times every algorithm cuDNN has for each
 * direction on scratch of the real shapes (cudnnFind*AlgorithmEx, as PyTorch's
 * cudnn.benchmark) within a workspace budget (dnn_budget: about the layer's input and output
 * size, less where the device has little free), and keeps the fastest that [train] deterministic allows, in FMA math (fp32) or any but
 * a down-conversion (tf32, as PyTorch's allow_tf32). The workspace is the caller's col buffer,
 * sized by conv_plan's answer: the most the kept algorithms need, then one weight gradient's
 * room (timing backward filter writes there, not into the accumulating dw). A call with
 * another batch size (the last partial batch, evaluation) takes one of DNN_SLOTS - 1 further
 * slots and times each direction at its first call on that call's own buffers, within the
 * planned workspace; inside a graph capture, where nothing may be timed, it takes cuDNN's
 * heuristic instead. Steady steps neither allocate nor synchronise.
 * ddp_cuda_conv_report() lists each plan's choices for the run log and `ddptrain check`. */
#if defined(DDP_CUDA_TWIN) || DDP_HAVE_CUDNN_H
#define DDP_DNN 1

struct dnn_api {
    decltype(&cudnnGetVersion) get_version;
    decltype(&cudnnGetErrorString) error_string;
    decltype(&cudnnCreate) create;
    decltype(&cudnnSetStream) set_stream;
    decltype(&cudnnCreateTensorDescriptor) create_tensor;
    decltype(&cudnnSetTensor4dDescriptor) set_tensor;
    decltype(&cudnnCreateFilterDescriptor) create_filter;
    decltype(&cudnnSetFilter4dDescriptor) set_filter;
    decltype(&cudnnCreateConvolutionDescriptor) create_conv;
    decltype(&cudnnSetConvolution2dDescriptor) set_conv;
    decltype(&cudnnSetConvolutionMathType) set_math;
    decltype(&cudnnGetConvolutionForwardAlgorithm_v7) fwd_algos;
    decltype(&cudnnGetConvolutionBackwardDataAlgorithm_v7) bwd_data_algos;
    decltype(&cudnnGetConvolutionBackwardFilterAlgorithm_v7) bwd_filter_algos;
    decltype(&cudnnGetConvolutionForwardWorkspaceSize) fwd_ws;
    decltype(&cudnnGetConvolutionBackwardDataWorkspaceSize) bwd_data_ws;
    decltype(&cudnnGetConvolutionBackwardFilterWorkspaceSize) bwd_filter_ws;
    decltype(&cudnnConvolutionForward) fwd;
    decltype(&cudnnConvolutionBackwardData) bwd_data;
    decltype(&cudnnConvolutionBackwardFilter) bwd_filter;
    decltype(&cudnnFindConvolutionForwardAlgorithmEx) find_fwd;
    decltype(&cudnnFindConvolutionBackwardDataAlgorithmEx) find_bwd_data;
    decltype(&cudnnFindConvolutionBackwardFilterAlgorithmEx) find_bwd_filter;
};

#define DNN_STR2(x) #x
#define DNN_STR(x) DNN_STR2(x)
#define DNN_SONAME "libcudnn.so." DNN_STR(CUDNN_MAJOR)

#ifdef DDP_CUDA_TWIN
static struct dnn_api g_dnn = {&cudnnGetVersion,
                               &cudnnGetErrorString,
                               &cudnnCreate,
                               &cudnnSetStream,
                               &cudnnCreateTensorDescriptor,
                               &cudnnSetTensor4dDescriptor,
                               &cudnnCreateFilterDescriptor,
                               &cudnnSetFilter4dDescriptor,
                               &cudnnCreateConvolutionDescriptor,
                               &cudnnSetConvolution2dDescriptor,
                               &cudnnSetConvolutionMathType,
                               &cudnnGetConvolutionForwardAlgorithm_v7,
                               &cudnnGetConvolutionBackwardDataAlgorithm_v7,
                               &cudnnGetConvolutionBackwardFilterAlgorithm_v7,
                               &cudnnGetConvolutionForwardWorkspaceSize,
                               &cudnnGetConvolutionBackwardDataWorkspaceSize,
                               &cudnnGetConvolutionBackwardFilterWorkspaceSize,
                               &cudnnConvolutionForward,
                               &cudnnConvolutionBackwardData,
                               &cudnnConvolutionBackwardFilter,
                               &cudnnFindConvolutionForwardAlgorithmEx,
                               &cudnnFindConvolutionBackwardDataAlgorithmEx,
                               &cudnnFindConvolutionBackwardFilterAlgorithmEx};

/* The twin's cuDNN, or missing under DDP_EMU_NO_CUDNN=1 (the fallback path's tests). */
static int dnn_open(char *err, size_t errlen)
{
    const char *no = getenv("DDP_EMU_NO_CUDNN");
    if (no && strcmp(no, "1") == 0)
        return ddp_err(err, errlen, "%s: cannot open shared object file (DDP_EMU_NO_CUDNN=1)",
                       DNN_SONAME);
    return 0;
}
#else
static struct dnn_api g_dnn;

/* 0 when the table is filled (once per process); -1 with the reason in err. */
static int dnn_open(char *err, size_t errlen)
{
    static int state; /* 0 not tried, 1 open, -1 failed */
    static char why[512];
#define DNN_SYM(f, field)            \
    {                                \
#f, offsetof(dnn_api, field) \
    }
    static const struct {
        const char *sym;
        size_t off;
    } syms[] = {
        DNN_SYM(cudnnGetVersion, get_version),
        DNN_SYM(cudnnGetErrorString, error_string),
        DNN_SYM(cudnnCreate, create),
        DNN_SYM(cudnnSetStream, set_stream),
        DNN_SYM(cudnnCreateTensorDescriptor, create_tensor),
        DNN_SYM(cudnnSetTensor4dDescriptor, set_tensor),
        DNN_SYM(cudnnCreateFilterDescriptor, create_filter),
        DNN_SYM(cudnnSetFilter4dDescriptor, set_filter),
        DNN_SYM(cudnnCreateConvolutionDescriptor, create_conv),
        DNN_SYM(cudnnSetConvolution2dDescriptor, set_conv),
        DNN_SYM(cudnnSetConvolutionMathType, set_math),
        DNN_SYM(cudnnGetConvolutionForwardAlgorithm_v7, fwd_algos),
        DNN_SYM(cudnnGetConvolutionBackwardDataAlgorithm_v7, bwd_data_algos),
        DNN_SYM(cudnnGetConvolutionBackwardFilterAlgorithm_v7, bwd_filter_algos),
        DNN_SYM(cudnnGetConvolutionForwardWorkspaceSize, fwd_ws),
        DNN_SYM(cudnnGetConvolutionBackwardDataWorkspaceSize, bwd_data_ws),
        DNN_SYM(cudnnGetConvolutionBackwardFilterWorkspaceSize, bwd_filter_ws),
        DNN_SYM(cudnnConvolutionForward, fwd),
        DNN_SYM(cudnnConvolutionBackwardData, bwd_data),
        DNN_SYM(cudnnConvolutionBackwardFilter, bwd_filter),
        DNN_SYM(cudnnFindConvolutionForwardAlgorithmEx, find_fwd),
        DNN_SYM(cudnnFindConvolutionBackwardDataAlgorithmEx, find_bwd_data),
        DNN_SYM(cudnnFindConvolutionBackwardFilterAlgorithmEx, find_bwd_filter),
    };
#undef DNN_SYM
    if (state == 0) {
        void *h = dlopen(DNN_SONAME, RTLD_NOW | RTLD_LOCAL);
        state = h ? 1 : -1;
        if (!h) {
            const char *d = dlerror();
            snprintf(why, sizeof why, "%s", d ? d : DNN_SONAME ": not found");
        }
        for (size_t i = 0; h && i < sizeof syms / sizeof syms[0]; i++) {
            void *f = dlsym(h, syms[i].sym);
            if (!f) {
                snprintf(why, sizeof why,
                         "%s has no %s: a cuDNN other than the %d.x this build "
                         "expects",
                         DNN_SONAME, syms[i].sym, CUDNN_MAJOR);
                state = -1;
                break;
            }
            memcpy((char *)&g_dnn + syms[i].off, &f, sizeof f);
        }
    }
    if (state < 0)
        return ddp_err(err, errlen, "%s", why);
    return 0;
}
#endif

#define DNN_CHECK(call)                                                                   \
    do {                                                                                  \
        cudnnStatus_t s_ = (call);                                                        \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                   \
            ddp_die_at(__FILE__, __LINE__, DDP_EXIT_RUNTIME, "%s: cuDNN error %s", #call, \
                       g_dnn.error_string(s_));                                           \
    } while (0)

/* Workspace one convolution may plan for (bytes; the im2col path's col is 128 MiB): at most
 * DNN_WS_MAX and this fraction of the device's free memory at model build, at least
 * DNN_WS_MIN (dnn_budget). */
#define DNN_WS_MAX ((size_t)256 << 20)
#define DNN_WS_MIN ((size_t)8 << 20)
#define DNN_WS_FREE_SHARE 8
/* Algorithms asked of each _v7 heuristic or timed by FindEx (more than cuDNN has of any
 * direction). */
#define DNN_ALGOS 16
/* Convolution shapes planned at most (one per conv layer shape of the model). */
#define DNN_PLANS 256
/* Batch sizes planned per shape: the planned one, the last partial batch, evaluation's and
 * its last; a fifth size replaces the oldest of the others. */
#define DNN_SLOTS 4
/* Timed candidates within this fraction of the fastest count as equally fast: among them the
 * least workspace, then the lowest algorithm number wins, so that timing noise seldom changes
 * the choice from one run to the next (a resumed run makes the same choices). */
#define DNN_TIE 0.10f
/* ... or within this many milliseconds of it (convolutions of a few microseconds time with
 * more noise than their differences). */
#define DNN_TIE_MS 0.005f
/* Each timed search runs this many times; an algorithm's time is its fastest. */
#define DNN_REPEAT 3

enum { DNN_FWD, DNN_BWD_DATA, DNN_BWD_FILTER, DNN_DIRS };
/* How a slot's algorithm of one direction was chosen. */
enum { DNN_UNCHOSEN, DNN_HEURISTIC, DNN_MEASURED };

/* Descriptors and algorithms of one plan for one batch size. */
struct dnn_slot {
    int B, tf32, det; /* B 0: not prepared */
    cudnnTensorDescriptor_t x, y;
    cudnnConvolutionDescriptor_t cv[DNN_DIRS];
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t ws[DNN_DIRS]; /* bytes each needs */
    int how[DNN_DIRS];   /* DNN_UNCHOSEN, DNN_HEURISTIC or DNN_MEASURED */
    float ms[DNN_DIRS];  /* the measured time of the kept algorithm */
    cudnnMathType_t math[DNN_DIRS];
};

struct dnn_plan {
    struct conv_geom q;
    size_t cap;    /* workspace bytes every caller's col holds for this shape */
    size_t wbytes; /* bytes of a weight gradient: col holds them after the workspace */
    cudnnFilterDescriptor_t w;
    struct dnn_slot slot[DNN_SLOTS]; /* slot 0: the planned batch */
    int next;                        /* the slot (1..) a new batch size takes */
};

static struct {
    int mode; /* -1 not chosen yet, 0 im2col + cuBLAS, 1 cuDNN */
    int det;  /* [train] deterministic: keep only deterministic algorithms */
    cudnnHandle_t h;
    struct dnn_plan plans[DNN_PLANS];
    int nplans;
} gd = {-1, 1, NULL, {}, 0};

/* 1 when entry p of an algorithm list may run here: supported, its workspace within cap,
 * deterministic when [train] deterministic asks, in the math this run allows (FMA for fp32;
 * anything but a down-conversion for tf32). */
template <typename Perf> static int dnn_allowed(const Perf &p, size_t cap, int tf32)
{
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > cap ||
        (gd.det && p.determinism != CUDNN_DETERMINISTIC))
        return 0;
    return tf32 ? p.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
                : p.mathType == CUDNN_FMA_MATH;
}

/* Index of the entry to keep from a list: of a timed (FindEx) list the fastest allowed one,
 * ties as DNN_TIE says; of a heuristic (_v7) list, which has no times, the first allowed one
 * whose size query ws(i) fits cap. -1 when none qualifies. */
template <typename Perf, typename WsFn>
static int dnn_pick(const Perf *p, int n, size_t cap, int tf32, int timed, WsFn ws)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (!dnn_allowed(p[i], cap, tf32))
            continue;
        if (!timed && ws(i) <= cap)
            return i;
        if (timed && (best < 0 || p[i].time < p[best].time))
            best = i;
    }
    if (best < 0)
        return -1;
    int keep = best;
    for (int i = 0; i < n; i++)
        if (i != best && dnn_allowed(p[i], cap, tf32) &&
            (p[i].time <= p[best].time * (1.0f + DNN_TIE) ||
             p[i].time <= p[best].time + DNN_TIE_MS) &&
            (p[i].memory < p[keep].memory ||
             (p[i].memory == p[keep].memory && (int)p[i].algo < (int)p[keep].algo)))
            keep = i;
    return keep;
}

/* Descriptors of slot s for batch B, no algorithm chosen yet. */
static void dnn_describe(const struct dnn_plan *pl, struct dnn_slot *s, int B)
{
    const struct conv_geom q = pl->q;
    if (!s->x) {
        DNN_CHECK(g_dnn.create_tensor(&s->x));
        DNN_CHECK(g_dnn.create_tensor(&s->y));
        for (int d = 0; d < DNN_DIRS; d++) {
            DNN_CHECK(g_dnn.create_conv(&s->cv[d]));
            DNN_CHECK(g_dnn.set_conv(s->cv[d], q.pad, q.pad, q.stride, q.stride, 1, 1,
                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        }
    }
    DNN_CHECK(g_dnn.set_tensor(s->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, q.C, q.H, q.W));
    DNN_CHECK(g_dnn.set_tensor(s->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, q.O, q.OH, q.OW));
    for (int d = 0; d < DNN_DIRS; d++) {
        DNN_CHECK(
            g_dnn.set_math(s->cv[d], dnn_tensor_math() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
        s->how[d] = DNN_UNCHOSEN;
        s->ws[d] = 0;
        s->ms[d] = 0;
    }
    s->B = B;
    s->tf32 = dnn_tensor_math();
    s->det = gd.det;
}

/* The operands a timed choice runs on; each direction reads two and writes one: forward reads
 * x and w and writes y, backward data reads w and y (as dy) and writes x (as dx), backward
 * filter reads x and y (as dy) and writes dw. Callers pass buffers whose contents the call
 * overwrites anyway, or scratch. */
struct dnn_operands {
    float *x, *w, *y, *dw;
    void *ws;
    size_t ws_bytes;
};

/* Keep entry p for direction d of slot s (its algorithm already stored by the caller). */
template <typename Perf> static void dnn_keep(struct dnn_slot *s, int d, const Perf &p, int timed)
{
    s->how[d] = timed ? DNN_MEASURED : DNN_HEURISTIC;
    s->ms[d] = timed ? p.time : 0;
    s->math[d] = p.mathType;
    DNN_CHECK(g_dnn.set_math(s->cv[d], p.mathType));
}

/* The list of query(out, &n) into p (n entries); when timed, the query runs DNN_REPEAT times
 * and each entry's time is the fastest of its runs (the same algorithm and math). */
template <typename Perf, typename Query>
static void dnn_list(Perf *p, int *n, int timed, Query query)
{
    DNN_CHECK(query(p, n));
    for (int r = 1; timed && r < DNN_REPEAT; r++) {
        Perf again[DNN_ALGOS];
        int m = 0;
        DNN_CHECK(query(again, &m));
        for (int i = 0; i < *n; i++)
            for (int j = 0; j < m; j++)
                if (again[j].algo == p[i].algo && again[j].mathType == p[i].mathType &&
                    again[j].status == CUDNN_STATUS_SUCCESS && again[j].time < p[i].time)
                    p[i].time = again[j].time;
    }
}

/* Choose direction d of slot s within cap: timed on o's buffers (FindEx), or from cuDNN's
 * heuristic list when o is NULL. 0, or -1 when no algorithm qualifies. */
static int dnn_choose(const struct dnn_plan *pl, struct dnn_slot *s, int d,
                      const struct dnn_operands *o, size_t cap)
{
    const int timed = o != NULL;
    const size_t wsb = timed ? o->ws_bytes : 0;
    int n = 0, i;
    size_t b = SIZE_MAX;
    if (d == DNN_FWD) {
        cudnnConvolutionFwdAlgoPerf_t p[DNN_ALGOS];
        dnn_list(p, &n, timed, [&](cudnnConvolutionFwdAlgoPerf_t *out, int *m) {
            return timed ? g_dnn.find_fwd(gd.h, s->x, o->x, pl->w, o->w, s->cv[d], s->y, o->y,
                                          DNN_ALGOS, m, out, o->ws, wsb)
                         : g_dnn.fwd_algos(gd.h, s->x, pl->w, s->cv[d], s->y, DNN_ALGOS, m, out);
        });
        i = dnn_pick(p, n, cap, s->tf32, timed, [&](int j) {
            return g_dnn.fwd_ws(gd.h, s->x, pl->w, s->cv[d], s->y, p[j].algo, &b) ==
                           CUDNN_STATUS_SUCCESS
                       ? b
                       : SIZE_MAX;
        });
        if (i < 0)
            return -1;
        s->fwd = p[i].algo;
        dnn_keep(s, d, p[i], timed);
        DNN_CHECK(g_dnn.fwd_ws(gd.h, s->x, pl->w, s->cv[d], s->y, s->fwd, &s->ws[d]));
    } else if (d == DNN_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t p[DNN_ALGOS];
        dnn_list(p, &n, timed, [&](cudnnConvolutionBwdDataAlgoPerf_t *out, int *m) {
            return timed
                       ? g_dnn.find_bwd_data(gd.h, pl->w, o->w, s->y, o->y, s->cv[d], s->x, o->x,
                                             DNN_ALGOS, m, out, o->ws, wsb)
                       : g_dnn.bwd_data_algos(gd.h, pl->w, s->y, s->cv[d], s->x, DNN_ALGOS, m, out);
        });
        i = dnn_pick(p, n, cap, s->tf32, timed, [&](int j) {
            return g_dnn.bwd_data_ws(gd.h, pl->w, s->y, s->cv[d], s->x, p[j].algo, &b) ==
                           CUDNN_STATUS_SUCCESS
                       ? b
                       : SIZE_MAX;
        });
        if (i < 0)
            return -1;
        s->bwd_data = p[i].algo;
        dnn_keep(s, d, p[i], timed);
        DNN_CHECK(g_dnn.bwd_data_ws(gd.h, pl->w, s->y, s->cv[d], s->x, s->bwd_data, &s->ws[d]));
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[DNN_ALGOS];
        dnn_list(p, &n, timed, [&](cudnnConvolutionBwdFilterAlgoPerf_t *out, int *m) {
            return timed ? g_dnn.find_bwd_filter(gd.h, s->x, o->x, s->y, o->y, s->cv[d], pl->w,
                                                 o->dw, DNN_ALGOS, m, out, o->ws, wsb)
                         : g_dnn.bwd_filter_algos(gd.h, s->x, s->y, s->cv[d], pl->w, DNN_ALGOS, m,
                                                  out);
        });
        i = dnn_pick(p, n, cap, s->tf32, timed, [&](int j) {
            return g_dnn.bwd_filter_ws(gd.h, s->x, s->y, s->cv[d], pl->w, p[j].algo, &b) ==
                           CUDNN_STATUS_SUCCESS
                       ? b
                       : SIZE_MAX;
        });
        if (i < 0)
            return -1;
        s->bwd_filter = p[i].algo;
        dnn_keep(s, d, p[i], timed);
        DNN_CHECK(g_dnn.bwd_filter_ws(gd.h, s->x, s->y, s->cv[d], pl->w, s->bwd_filter, &s->ws[d]));
    }
    return 0;
}

static int geom_eq(const struct conv_geom *a, const struct conv_geom *b)
{
    return a->C == b->C && a->H == b->H && a->W == b->W && a->O == b->O && a->k == b->k &&
           a->stride == b->stride && a->pad == b->pad;
}

static struct dnn_plan *dnn_find(const struct conv_geom *q)
{
    for (int i = 0; i < gd.nplans; i++)
        if (geom_eq(&gd.plans[i].q, q))
            return &gd.plans[i];
    return NULL;
}

static const char *const dnn_dir_names[DNN_DIRS] = {"forward", "backward data", "backward filter"};

[[noreturn]] static void dnn_no_algo(const struct conv_geom *q, int B, size_t cap, int d)
{
    ddp_die("cuDNN has no %s%s algorithm for conv2d C%d %dx%d -> O%d k%d stride %d pad %d at "
            "batch %d within a %zu-byte workspace; set [train] conv = im2col",
            gd.det ? "deterministic " : "", dnn_dir_names[d], q->C, q->H, q->W, q->O, q->k,
            q->stride, q->pad, B, cap);
}

/* 1 while the compute stream is being captured into a CUDA graph: nothing may be timed (or
 * synchronised) then, so a batch size first seen in a capture takes cuDNN's heuristic. */
static int dnn_capturing(void)
{
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(g.stream, &st) != cudaSuccess) {
        cudaGetLastError();
        return 1;
    }
    return st != cudaStreamCaptureStatusNone;
}

/* Workspace budget of a new plan whose input and output take io bytes: as much as those (so
 * that timing, on scratch of the layer's size plus this, stays below what the activations
 * take later and adds nothing to the run's peak), at least DNN_WS_MIN, at most DNN_WS_MAX and
 * 1/DNN_WS_FREE_SHARE of the device's free memory. */
static size_t dnn_budget(size_t io)
{
    size_t cap = io < DNN_WS_MIN ? DNN_WS_MIN : io > DNN_WS_MAX ? DNN_WS_MAX : io;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return cap;
    }
    return free_b / DNN_WS_FREE_SHARE < cap ? free_b / DNN_WS_FREE_SHARE : cap;
}

/* One timing pass at model build: each direction of slot s (batch B) not chosen yet, timed
 * within cap on zeroed scratch (allocated, counted and freed here). Returns the directions
 * still without an algorithm (all of them when the scratch does not fit in device memory). */
static int dnn_time_pass(struct dnn_plan *pl, struct dnn_slot *s, int B, size_t cap)
{
    const struct conv_geom *q = &pl->q;
    const size_t xb = align256(sizeof(float) * B * q->C * q->H * q->W);
    const size_t yb = align256(sizeof(float) * B * q->O * q->P);
    const size_t total = xb + yb + 2 * pl->wbytes + align256(cap);
    char *p = NULL;
    if (cudaMalloc((void **)&p, total) != cudaSuccess) {
        cudaGetLastError();
        return DNN_DIRS;
    }
    mem_note(p, total);
    CUDA_CHECK(cudaMemsetAsync(p, 0, total, g.stream));
    const struct dnn_operands o = {(float *)p,
                                   (float *)(p + xb),
                                   (float *)(p + xb + pl->wbytes),
                                   (float *)(p + xb + pl->wbytes + yb),
                                   p + xb + yb + 2 * pl->wbytes,
                                   cap};
    int left = 0;
    for (int d = 0; d < DNN_DIRS; d++)
        if (s->how[d] == DNN_UNCHOSEN && dnn_choose(pl, s, d, &o, cap) != 0)
            left++;
    CUDA_CHECK(cudaStreamSynchronize(g.stream));
    CUDA_CHECK(cudaFree(p));
    mem_forget(p);
    return left;
}

/* Slot s of plan pl prepared for batch B at model build: every direction timed within cap;
 * one that has no algorithm there is timed again within big (a deterministic algorithm may
 * need more workspace than the layer's size), then taken from cuDNN's heuristic list. Dies
 * when a direction has no algorithm at all. */
static void dnn_plan_build(struct dnn_plan *pl, struct dnn_slot *s, int B, size_t cap, size_t big)
{
    dnn_describe(pl, s, B);
    int left = dnn_time_pass(pl, s, B, cap);
    if (left && big > cap)
        left = dnn_time_pass(pl, s, B, big);
    const size_t most = big > cap ? big : cap;
    for (int d = 0; left && d < DNN_DIRS; d++)
        if (s->how[d] == DNN_UNCHOSEN && dnn_choose(pl, s, d, NULL, most) != 0)
            dnn_no_algo(&pl->q, B, most, d);
}

/* conv_plan of the table with cuDNN: the plan of this shape for batch B (made or re-made),
 * the floats of col it needs: the workspace, then room for one weight gradient. */
static size_t dnn_plan_shape(const struct conv_geom *q, int B)
{
    struct dnn_plan *pl = dnn_find(q);
    if (!pl) {
        if (gd.nplans == DNN_PLANS)
            ddp_die("more than %d convolution shapes in one model", DNN_PLANS);
        pl = &gd.plans[gd.nplans++];
        memset(pl, 0, sizeof *pl);
        pl->q = *q;
        pl->wbytes = align256(sizeof(float) * q->O * q->C * q->k * q->k);
        pl->next = 1;
        DNN_CHECK(g_dnn.create_filter(&pl->w));
        DNN_CHECK(
            g_dnn.set_filter(pl->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, q->O, q->C, q->k, q->k));
        const size_t io = sizeof(float) * B * (q->C * q->H * q->W + q->O * q->P);
        dnn_plan_build(pl, &pl->slot[0], B, dnn_budget(io), dnn_budget(DNN_WS_MAX));
        const struct dnn_slot *s = &pl->slot[0];
        pl->cap = s->ws[0] > s->ws[1] ? s->ws[0] : s->ws[1];
        pl->cap = s->ws[2] > pl->cap ? s->ws[2] : pl->cap;
        pl->cap = align256(pl->cap);
    } else {
        dnn_plan_build(pl, &pl->slot[0], B, pl->cap, 0); /* planned again: within its cap */
    }
    return (pl->cap + pl->wbytes) / sizeof(float);
}

/* The slot for a call with batch B: a prepared one, or one described now (its algorithms
 * chosen by the call, which has the real buffers). */
static struct dnn_slot *dnn_slot_for(struct dnn_plan *pl, int B)
{
    for (int i = 0; i < DNN_SLOTS; i++) {
        struct dnn_slot *s = &pl->slot[i];
        if (s->B == B && s->tf32 == dnn_tensor_math() && s->det == gd.det)
            return s;
    }
    struct dnn_slot *s = &pl->slot[pl->next];
    pl->next = pl->next + 1 < DNN_SLOTS ? pl->next + 1 : 1;
    dnn_describe(pl, s, B);
    return s;
}

/* The plan of q; dies when conv_plan never sized it. */
static struct dnn_plan *dnn_plan_of(const struct conv_geom *q)
{
    struct dnn_plan *pl = dnn_find(q);
    if (!pl)
        ddp_die("conv2d C%d %dx%d -> O%d k%d stride %d pad %d was not planned: the backend's "
                "conv_plan must size col before the convolution runs (a bug)",
                q->C, q->H, q->W, q->O, q->k, q->stride, q->pad);
    return pl;
}

/* Direction d of slot s chosen on first use: timed on o's buffers outside a graph capture,
 * else from the heuristic list. */
static void dnn_ensure(const struct dnn_plan *pl, struct dnn_slot *s, int d,
                       const struct dnn_operands *o)
{
    if (s->how[d] != DNN_UNCHOSEN)
        return;
    const struct dnn_operands *timed = dnn_capturing() ? NULL : o;
    if (dnn_choose(pl, s, d, timed, pl->cap) != 0 &&
        (!timed || dnn_choose(pl, s, d, NULL, pl->cap) != 0))
        dnn_no_algo(&pl->q, s->B, pl->cap, d);
}

/* Per-channel sums of dout (B, O, P) over batch and positions: block (o, y) covers elements
 * y, y + splits, ... (in blocks of THREADS) of channel o; in double, in a fixed order. */
__global__ void k_chan_partial(double *part, const float *dout, int B, int O, int P)
{
    const int o = blockIdx.x, y = blockIdx.y, splits = gridDim.y;
    const size_t n = (size_t)B * P;
    double s = 0;
    for (size_t j = (size_t)y * blockDim.x + threadIdx.x; j < n; j += (size_t)splits * blockDim.x)
        s += dout[((j / P) * O + o) * P + j % P];
    s = block_sum(s);
    if (threadIdx.x == 0)
        part[(size_t)o * splits + y] = s;
}

/* db[o] += the splits' sums of channel o, in order. */
__global__ void k_chan_finish(float *db, const double *part, int O, int splits)
{
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= O)
        return;
    double s = 0;
    for (int y = 0; y < splits; y++)
        s += part[(size_t)o * splits + y];
    db[o] += (float)s;
}

/* db (O) += per-channel sums of dout (B, O, P): a deterministic two-pass reduction. */
static void conv_bias_grad(float *db, const float *dout, int B, int O, int P)
{
    const size_t n = (size_t)B * P;
    if (O <= 0 || n == 0)
        return;
    size_t splits = (n + BN_ELEMS_PER_SPLIT - 1) / BN_ELEMS_PER_SPLIT;
    if (splits > BN_MAX_SPLITS)
        splits = BN_MAX_SPLITS;
    double *part = (double *)ws_get(sizeof(double) * (size_t)O * splits);
    dim3 grid((unsigned)O, (unsigned)splits);
    LAUNCH(k_chan_partial, grid, THREADS, part, dout, B, O, P);
    LAUNCH(k_chan_finish, (O + THREADS - 1) / THREADS, THREADS, db, part, O, (int)splits);
}

/* relu: out = relu(conv + b) with the convolution written at beta = 0 and one bias+relu
 * pass after it, instead of a bias broadcast, beta = 1 and a relu pass into another buffer. */
static void dnn_conv2d_fwd(float *out, float *col, const float *inp, const float *w, const float *b,
                           int B, const struct conv_geom *q, int relu)
{
    struct dnn_plan *pl = dnn_plan_of(q);
    struct dnn_slot *s = dnn_slot_for(pl, B);
    const struct dnn_operands o = {(float *)inp, (float *)w, out, NULL, col, pl->cap};
    dnn_ensure(pl, s, DNN_FWD, &o); /* before the bias fill: timing writes out */
    const size_t n_out = (size_t)B * q->O * q->P;
    if (b && !relu) {
        LAUNCH(k_fill_bias, blocks_for(n_out), THREADS, out, b, n_out, q->O, q->P);
    }
    const float one = 1, beta = b && !relu ? 1.0f : 0.0f;
    DNN_CHECK(g_dnn.fwd(gd.h, &one, s->x, inp, pl->w, w, s->cv[DNN_FWD], s->fwd, col,
                        s->ws[DNN_FWD], &beta, s->y, out));
    if (relu) {
        LAUNCH(k_bias_relu, blocks_for(n_out), THREADS, out, b, n_out, q->O, q->P);
    }
}

/* Backward filter accumulates into dw (beta 1): its timing writes the scratch that col holds
 * after the workspace; backward data's writes dinp, which the call then overwrites. */
static void dnn_conv2d_bwd(float *dinp, float *dw, float *db, float *col, const float *dout,
                           const float *inp, const float *w, int B, const struct conv_geom *q)
{
    struct dnn_plan *pl = dnn_plan_of(q);
    struct dnn_slot *s = dnn_slot_for(pl, B);
    float *dw_scratch = (float *)((char *)col + pl->cap);
    const struct dnn_operands of = {(float *)inp, (float *)w, (float *)dout,
                                    dw_scratch,   col,        pl->cap};
    const struct dnn_operands od = {dinp, (float *)w, (float *)dout, NULL, col, pl->cap};
    const float one = 1, zero = 0;
    if (db)
        conv_bias_grad(db, dout, B, q->O, q->P);
    dnn_ensure(pl, s, DNN_BWD_FILTER, &of);
    DNN_CHECK(g_dnn.bwd_filter(gd.h, &one, s->x, inp, s->y, dout, s->cv[DNN_BWD_FILTER],
                               s->bwd_filter, col, s->ws[DNN_BWD_FILTER], &one, pl->w, dw));
    if (dinp) {
        dnn_ensure(pl, s, DNN_BWD_DATA, &od);
        DNN_CHECK(g_dnn.bwd_data(gd.h, &one, pl->w, w, s->y, dout, s->cv[DNN_BWD_DATA], s->bwd_data,
                                 col, s->ws[DNN_BWD_DATA], &zero, s->x, dinp));
    }
}

/* Which path: 1 for cuDNN. Chosen at ddp_cuda_conv_path; cuDNN if it loads when never
 * chosen (a program that makes the backend without the trainer). */
static int dnn_active(void)
{
    if (gd.mode < 0) {
        char line[8];
        ddp_cuda_conv_path(1, 1, line, sizeof line);
    }
    return gd.mode == 1;
}

/* Open cuDNN and make its handle on the compute stream; 0, or with the reason in err -1 (not
 * found) or -2 (found, but it does not start on this GPU). */
static int dnn_start(char *err, size_t errlen)
{
    if (gd.h)
        return 0;
    if (dnn_open(err, errlen) != 0)
        return -1;
    cudnnHandle_t h;
    cudnnStatus_t s = g_dnn.create(&h);
    if (s != CUDNN_STATUS_SUCCESS) {
        ddp_err(err, errlen, "cudnnCreate: %s", g_dnn.error_string(s));
        return -2;
    }
    if ((s = g_dnn.set_stream(h, g.stream)) != CUDNN_STATUS_SUCCESS) {
        ddp_err(err, errlen, "cudnnSetStream: %s", g_dnn.error_string(s));
        return -2;
    }
    gd.h = h;
    return 0;
}

static void dnn_version(char *out, size_t len)
{
    char why[8];
    if (dnn_open(why, sizeof why) != 0) {
        snprintf(out, len, "not found");
        return;
    }
    const size_t v = g_dnn.get_version();
    snprintf(out, len, "%zu.%zu.%zu", v / 10000, v % 10000 / 100, v % 100);
}
#else /* built without cudnn.h: im2col + cuBLAS only */
static int dnn_start(char *err, size_t errlen)
{
    return ddp_err(err, errlen, "this ddptrain was built without cuDNN (no cudnn.h at build time)");
}
static void dnn_version(char *out, size_t len)
{
    snprintf(out, len, "not built in");
}
#endif

/* The table's conv entries: cuDNN when it runs, else im2col + cuBLAS. */
static size_t conv2d_plan_any(int B, int C, int H, int W, int O, int k, int stride, int pad)
{
#ifdef DDP_DNN
    if (dnn_active()) {
        const struct conv_geom q = conv_geom_of(C, H, W, O, k, stride, pad);
        return dnn_plan_shape(&q, B > 0 ? B : 1);
    }
#endif
    (void)O;
    return cuda_conv_col_elems(B, C, H, W, k, stride, pad);
}

static void conv2d_fwd_any(float *out, float *col, const float *inp, const float *w, const float *b,
                           int B, int C, int H, int W, int O, int k, int stride, int pad)
{
#ifdef DDP_DNN
    if (dnn_active()) {
        const struct conv_geom q = conv_geom_of(C, H, W, O, k, stride, pad);
        if ((size_t)B * O * q.P > 0)
            dnn_conv2d_fwd(out, col, inp, w, b, B, &q, 0);
        return;
    }
#endif
    cuda_conv2d_fwd(out, col, inp, w, b, B, C, H, W, O, k, stride, pad);
}

/* conv2d + relu (backend.h): through cuDNN, one epilogue pass; on the im2col path the relu is
 * applied in place (no second buffer). */
static void conv2d_relu_fwd_any(float *out, float *col, const float *inp, const float *w,
                                const float *b, int B, int C, int H, int W, int O, int k,
                                int stride, int pad)
{
    const struct conv_geom q = conv_geom_of(C, H, W, O, k, stride, pad);
    const size_t n_out = (size_t)B * O * q.P;
    if (n_out == 0)
        return;
#ifdef DDP_DNN
    if (dnn_active()) {
        dnn_conv2d_fwd(out, col, inp, w, b, B, &q, 1);
        return;
    }
#endif
    cuda_conv2d_fwd(out, col, inp, w, b, B, C, H, W, O, k, stride, pad);
    LAUNCH(k_bias_relu, blocks_for(n_out), THREADS, out, (const float *)NULL, n_out, O, q.P);
}

static void conv2d_bwd_any(float *dinp, float *dw, float *db, float *col, const float *dout,
                           const float *inp, const float *w, int B, int C, int H, int W, int O,
                           int k, int stride, int pad)
{
#ifdef DDP_DNN
    if (dnn_active()) {
        const struct conv_geom q = conv_geom_of(C, H, W, O, k, stride, pad);
        if (B > 0 && q.P > 0)
            dnn_conv2d_bwd(dinp, dw, db, col, dout, inp, w, B, &q);
        return;
    }
#endif
    cuda_conv2d_bwd(dinp, dw, db, col, dout, inp, w, B, C, H, W, O, k, stride, pad);
}

extern "C" int ddp_cuda_conv_path(int use_cudnn, int deterministic, char *line, size_t len)
{
    char why[400];
    if (g.device < 0) {
        snprintf(line, len, "%s", "");
        return 0;
    }
    if (!use_cudnn) {
#ifdef DDP_DNN
        gd.mode = 0;
#endif
        snprintf(line, len, "im2col + cuBLAS%s ([train] conv = im2col)",
                 g.precision == DDP_PRECISION_BF16 ? ", bf16 GEMMs" : "");
        return 0;
    }
    const int rc = dnn_start(why, sizeof why);
    if (rc != 0) {
#ifdef DDP_DNN
        gd.mode = 0;
#endif
        snprintf(line, len, "cuDNN %s (%s): convolutions use im2col + cuBLAS",
                 rc == -1 ? "not found" : "does not start", why);
        return 0;
    }
#ifdef DDP_DNN
    gd.mode = 1;
    gd.det = deterministic != 0;
#endif
    char v[32];
    dnn_version(v, sizeof v);
    snprintf(line, len, "cuDNN %s (fastest measured %s algorithms, %s)", v,
             deterministic ? "deterministic"
                           : "deterministic or not ([train] deterministic = false)",
             g.precision == DDP_PRECISION_BF16 ? "bf16 run: tensor-core math on fp32 data"
             : tf32_math()                     ? "tf32 allowed"
                                               : "fp32 FMA math");
    return 1;
}

#ifdef DDP_DNN
/* cuDNN's names of the algorithms of direction d (the legacy API's enums), without prefix. */
static const char *dnn_algo_name(int d, int algo)
{
    static const char *const fwd[] = {
        "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
        "WINOGRAD",      "WINOGRAD_NONFUSED"};
    static const char *const bwd_data[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                           "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    static const char *const bwd_filter[] = {
        "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
    const char *const *t = d == DNN_FWD ? fwd : d == DNN_BWD_DATA ? bwd_data : bwd_filter;
    const int n = d == DNN_FWD ? 8 : d == DNN_BWD_DATA ? 6 : 7;
    return algo >= 0 && algo < n ? t[algo] : "?";
}

static const char *dnn_math_name(cudnnMathType_t m)
{
    return m == CUDNN_FMA_MATH         ? "fma"
           : m == CUDNN_TENSOR_OP_MATH ? "tensor-op"
           : m == CUDNN_DEFAULT_MATH   ? "default"
                                       : "tensor-op-conversion";
}

/* One line of ddp_cuda_conv_report for slot s of plan pl into out (at most len). */
static void dnn_report_slot(const struct dnn_plan *pl, const struct dnn_slot *s, char *out,
                            size_t len)
{
    const struct conv_geom *q = &pl->q;
    const int algo[DNN_DIRS] = {(int)s->fwd, (int)s->bwd_data, (int)s->bwd_filter};
    int n = snprintf(out, len, "C%d %dx%d -> %d k%d s%d p%d, batch %d:", q->C, q->H, q->W, q->O,
                     q->k, q->stride, q->pad, s->B);
    for (int d = 0; d < DNN_DIRS && n >= 0 && (size_t)n < len; d++) {
        char t[32] = "heuristic";
        if (s->how[d] == DNN_MEASURED)
            snprintf(t, sizeof t, "%.3f ms", s->ms[d]);
        n += snprintf(out + n, len - n, "%s %s %s %s %s", d ? "," : "", dnn_dir_names[d],
                      s->how[d] == DNN_UNCHOSEN ? "-" : dnn_algo_name(d, algo[d]),
                      dnn_math_name(s->math[d]), s->how[d] == DNN_UNCHOSEN ? "unused" : t);
    }
    if (n >= 0 && (size_t)n < len)
        snprintf(out + n, len - n, "; workspace %.1f MiB", (double)pl->cap / 1048576.0);
}
#endif

extern "C" int ddp_cuda_conv_report(char *out, size_t len)
{
    int lines = 0;
    size_t used = 0;
    if (len)
        out[0] = 0;
#ifdef DDP_DNN
    for (int i = 0; gd.mode == 1 && i < gd.nplans; i++)
        for (int j = 0; j < DNN_SLOTS; j++) {
            const struct dnn_slot *s = &gd.plans[i].slot[j];
            if (!s->B || used + 2 >= len)
                continue;
            if (lines++)
                out[used++] = '\n';
            dnn_report_slot(&gd.plans[i], s, out + used, len - used);
            used += strlen(out + used);
        }
#else
    (void)used;
#endif
    return lines;
}

/* ---- pools ------------------------------------------------------------------------------- */

__global__ void k_maxpool_fwd(float *out, int32_t *argmax, const float *inp, size_t BC, int H,
                              int W, int k)
{
    const int OH = H / k, OW = W / k;
    const size_t n = BC * OH * OW;
    GRID_STRIDE(o, n)
    {
        const size_t bc = o / ((size_t)OH * OW);
        const int r = (int)(o % ((size_t)OH * OW));
        const int oh = r / OW, ow = r % OW;
        const float *x = inp + bc * H * W;
        int best = (oh * k) * W + ow * k;
        float m = x[best];
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++) {
                const int idx = (oh * k + i) * W + ow * k + j;
                if (x[idx] > m) { /* strict: the first maximum wins, as PyTorch */
                    m = x[idx];
                    best = idx;
                }
            }
        out[o] = m;
        argmax[o] = best;
    }
}

/* Windows do not overlap (stride k): each input pixel has at most one window, so the
 * gradient is gathered, not scattered, and needs no atomics. */
__global__ void k_maxpool_bwd(float *dinp, const float *dout, const int32_t *argmax, size_t BC,
                              int H, int W, int k)
{
    const int OH = H / k, OW = W / k;
    const size_t n = BC * H * W;
    GRID_STRIDE(idx, n)
    {
        const size_t bc = idx / ((size_t)H * W);
        const int hw = (int)(idx % ((size_t)H * W));
        const int oh = (hw / W) / k, ow = (hw % W) / k;
        float v = 0;
        if (oh < OH && ow < OW) {
            const size_t o = bc * OH * OW + (size_t)oh * OW + ow;
            if (argmax[o] == hw)
                v = dout[o];
        }
        dinp[idx] = v;
    }
}

__global__ void k_avgpool_fwd(float *out, const float *inp, size_t BC, int H, int W, int k,
                              float inv)
{
    const int OH = H / k, OW = W / k;
    const size_t n = BC * OH * OW;
    GRID_STRIDE(o, n)
    {
        const size_t bc = o / ((size_t)OH * OW);
        const int r = (int)(o % ((size_t)OH * OW));
        const int oh = r / OW, ow = r % OW;
        const float *x = inp + bc * H * W;
        float s = 0;
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++)
                s += x[(oh * k + i) * W + ow * k + j];
        out[o] = s * inv;
    }
}

__global__ void k_avgpool_bwd(float *dinp, const float *dout, size_t BC, int H, int W, int k,
                              float inv)
{
    const int OH = H / k, OW = W / k;
    const size_t n = BC * H * W;
    GRID_STRIDE(idx, n)
    {
        const size_t bc = idx / ((size_t)H * W);
        const int hw = (int)(idx % ((size_t)H * W));
        const int oh = (hw / W) / k, ow = (hw % W) / k;
        dinp[idx] = (oh < OH && ow < OW) ? dout[bc * OH * OW + (size_t)oh * OW + ow] * inv : 0.0f;
    }
}

static void cuda_maxpool_fwd(float *out, int32_t *argmax, const float *inp, int B, int C, int H,
                             int W, int k)
{
    const size_t n = (size_t)B * C * (H / k) * (W / k);
    if (!n)
        return;
    LAUNCH(k_maxpool_fwd, blocks_for(n), THREADS, out, argmax, inp, (size_t)B * C, H, W, k);
}

static void cuda_maxpool_bwd(float *dinp, const float *dout, const int32_t *argmax, int B, int C,
                             int H, int W, int k)
{
    const size_t n = (size_t)B * C * H * W;
    if (!n)
        return;
    LAUNCH(k_maxpool_bwd, blocks_for(n), THREADS, dinp, dout, argmax, (size_t)B * C, H, W, k);
}

static void cuda_avgpool_fwd(float *out, const float *inp, int B, int C, int H, int W, int k)
{
    const size_t n = (size_t)B * C * (H / k) * (W / k);
    if (!n)
        return;
    const float inv = 1.0f / (float)(k * k);
    LAUNCH(k_avgpool_fwd, blocks_for(n), THREADS, out, inp, (size_t)B * C, H, W, k, inv);
}

static void cuda_avgpool_bwd(float *dinp, const float *dout, int B, int C, int H, int W, int k)
{
    const size_t n = (size_t)B * C * H * W;
    if (!n)
        return;
    const float inv = 1.0f / (float)(k * k);
    LAUNCH(k_avgpool_bwd, blocks_for(n), THREADS, dinp, dout, (size_t)B * C, H, W, k, inv);
}

/* ---- global average pool, add ------------------------------------------------------------- */

/* out (BC) = mean of each row of inp (BC, S): one thread per row, positions in order. */
__global__ void k_gap_fwd(float *out, const float *inp, size_t BC, int S)
{
    GRID_STRIDE(r, BC)
    {
        const float *x = inp + r * (size_t)S;
        float s = 0;
        for (int i = 0; i < S; i++)
            s += x[i];
        out[r] = s / (float)S;
    }
}

__global__ void k_gap_bwd(float *dinp, const float *dout, size_t n, int S)
{
    GRID_STRIDE(i, n) dinp[i] = dout[i / (size_t)S] / (float)S;
}

__global__ void k_add(float *out, const float *a, const float *b, size_t n)
{
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

static void cuda_gap_fwd(float *out, const float *inp, int B, int C, int S)
{
    const size_t BC = (size_t)B * C;
    if (!BC)
        return;
    LAUNCH(k_gap_fwd, blocks_for(BC), THREADS, out, inp, BC, S);
}

static void cuda_gap_bwd(float *dinp, const float *dout, int B, int C, int S)
{
    const size_t n = (size_t)B * C * S;
    if (!n)
        return;
    LAUNCH(k_gap_bwd, blocks_for(n), THREADS, dinp, dout, n, S);
}

static void cuda_add(float *out, const float *a, const float *b, size_t n)
{
    if (!n)
        return;
    LAUNCH(k_add, blocks_for(n), THREADS, out, a, b, n);
}

/* ---- batchnorm --------------------------------------------------------------------------- */

/* Partial per-channel sums over (B, S): block (c, y) covers elements y, y + splits, ... (in
 * blocks of THREADS) of channel c and writes part[(c * splits + y) * 2 + {0, 1}]:
 * with b == NULL, sum a and sum a^2; else sum a and sum a*b. In double, as the CPU. */
__global__ void k_bn_partial(double *part, const float *a, const float *b, int B, int C, int S)
{
    const int c = blockIdx.x, y = blockIdx.y, splits = gridDim.y;
    const size_t n = (size_t)B * S;
    double s = 0, s2 = 0;
    for (size_t j = (size_t)y * blockDim.x + threadIdx.x; j < n; j += (size_t)splits * blockDim.x) {
        const size_t bi = j / S, si = j % S;
        const size_t off = (bi * C + c) * S + si;
        const double v = a[off];
        s += v;
        s2 += b ? v * (double)b[off] : v * v;
    }
    s = block_sum(s);
    s2 = block_sum(s2);
    if (threadIdx.x == 0) {
        part[((size_t)c * splits + y) * 2] = s;
        part[((size_t)c * splits + y) * 2 + 1] = s2;
    }
}

/* sums (2C+1): sums[c] = sum of the splits' first sums, sums[C + c] of the second, in order;
 * sums[2C] = count. */
__global__ void k_bn_finish(double *sums, const double *part, int C, int splits, double count)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c == 0)
        sums[2 * C] = count;
    if (c >= C)
        return;
    double s = 0, s2 = 0;
    for (int y = 0; y < splits; y++) {
        s += part[((size_t)c * splits + y) * 2];
        s2 += part[((size_t)c * splits + y) * 2 + 1];
    }
    sums[c] = s;
    sums[C + c] = s2;
}

/* Per-channel sums of (a, a^2) or (a, a*b) over (B,C,S) and the count B*S into the device
 * array sums (2C+1). Never waits. */
static void bn_reduce(double *sums, const float *a, const float *b, int B, int C, int S)
{
    if (C <= 0)
        return;
    const size_t n = (size_t)B * S;
    if (n == 0) { /* all sums and the count 0 */
        CUDA_CHECK(cudaMemsetAsync(sums, 0, sizeof(double) * (2 * (size_t)C + 1), g.stream));
        return;
    }
    size_t splits = (n + BN_ELEMS_PER_SPLIT - 1) / BN_ELEMS_PER_SPLIT;
    if (splits > BN_MAX_SPLITS)
        splits = BN_MAX_SPLITS;
    double *part = (double *)ws_get(sizeof(double) * 2 * (size_t)C * splits);
    dim3 grid((unsigned)C, (unsigned)splits);
    LAUNCH(k_bn_partial, grid, THREADS, part, a, b, B, C, S);
    LAUNCH(k_bn_finish, (C + THREADS - 1) / THREADS, THREADS, sums, part, C, (int)splits,
           (double)n);
}

/* As cpu.c's cpu_bn_update, operation for operation (double, IEEE / and sqrt). */
__global__ void k_bn_update(float *mean, float *invstd, float *rm, float *rv, const double *sums,
                            int C, double eps, double momentum)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    if (!sums) {
        mean[c] = rm[c];
        invstd[c] = (float)(1.0 / sqrt((double)rv[c] + eps));
        return;
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

static void cuda_bn_update(float *mean, float *invstd, float *rm, float *rv, const double *sums,
                           int C, double eps, double momentum)
{
    if (C <= 0)
        return;
    LAUNCH(k_bn_update, (C + THREADS - 1) / THREADS, THREADS, mean, invstd, rm, rv, sums, C, eps,
           momentum);
}

static void cuda_bn_stats(double *sums, const float *inp, int B, int C, int S)
{
    bn_reduce(sums, inp, NULL, B, C, S);
}

static void cuda_bn_bwd_sums(double *sums, const float *dout, const float *xhat, int B, int C,
                             int S)
{
    bn_reduce(sums, dout, xhat, B, C, S);
}

__global__ void k_bn_fwd_apply(float *out, float *xhat, const float *inp, const float *mean,
                               const float *invstd, const float *gamma, const float *beta, size_t n,
                               int C, int S)
{
    GRID_STRIDE(i, n)
    {
        const int c = (int)((i / (size_t)S) % (size_t)C);
        const float xh = (inp[i] - mean[c]) * invstd[c];
        if (xhat)
            xhat[i] = xh;
        out[i] = gamma[c] * xh + beta[c];
    }
}

static void cuda_bn_fwd_apply(float *out, float *xhat, const float *inp, const float *mean,
                              const float *invstd, const float *gamma, const float *beta, int B,
                              int C, int S)
{
    const size_t n = (size_t)B * C * S;
    if (!n)
        return;
    LAUNCH(k_bn_fwd_apply, blocks_for(n), THREADS, out, xhat, inp, mean, invstd, gamma, beta, n, C,
           S);
}

/* dbeta[c] += local[c], dgamma[c] += local[C + c] (rounded to float, as the CPU). */
__global__ void k_bn_param_grads(float *dgamma, float *dbeta, const double *local, int C)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    dbeta[c] += (float)local[c];
    dgamma[c] += (float)local[C + c];
}

__global__ void k_bn_bwd_apply(float *dinp, const float *dout, const float *xhat,
                               const float *invstd, const float *gamma, const double *global,
                               size_t n, int C, int S)
{
    const double count = global[2 * C];
    GRID_STRIDE(i, n)
    {
        const int c = (int)((i / (size_t)S) % (size_t)C);
        const float mdy = (float)(global[c] / count), mdyx = (float)(global[C + c] / count);
        const float f = gamma[c] * invstd[c];
        dinp[i] = f * (dout[i] - mdy - xhat[i] * mdyx);
    }
}

static void cuda_bn_bwd_apply(float *dinp, float *dgamma, float *dbeta, const float *dout,
                              const float *xhat, const float *invstd, const float *gamma,
                              const double *local_sums, const double *global_sums, int B, int C,
                              int S)
{
    if (C <= 0)
        return;
    LAUNCH(k_bn_param_grads, (C + THREADS - 1) / THREADS, THREADS, dgamma, dbeta, local_sums, C);
    const size_t n = (size_t)B * C * S;
    if (!dinp || !n)
        return;
    LAUNCH(k_bn_bwd_apply, blocks_for(n), THREADS, dinp, dout, xhat, invstd, gamma, global_sums, n,
           C, S);
}

/* ---- CUDA Graphs: the per-step values in device memory ----------------------------------- */

/* What a captured step's kernels read instead of their scalar arguments (backend.h, graph_*):
 * one block per graph slot (device input set), written by graph_launch on the copy stream. */
struct graph_vals {
    float lr, momentum;                   /* sgd */
    int first;                            /* sgd: first step */
    float b1, step_size, bc2_sqrt, decay; /* adam, from lr, beta1 and t as cuda_adam_step */
    uint64_t noise;                       /* dropout: the step's seed */
};

/* Page-locked staging slots of graph_launch, one page each (a slot is rewritten only after
 * its event says its copy ran; the loader keeps the host far fewer steps ahead than this). */
#define GRAPH_RING 64
#define GRAPH_SLOT_BYTES 4096

static struct {
    int capturing;
    int slot;               /* the slot being captured */
    struct graph_vals *dev; /* DDP_GRAPH_SLOTS device blocks */
    char *host;             /* GRAPH_RING page-locked slots */
    cudaEvent_t copied[GRAPH_RING];
    cudaEvent_t used[DDP_GRAPH_SLOTS]; /* the last launch of slot s's graph, recorded after it */
    int64_t writes;
    cudaGraphExec_t exec[DDP_GRAPH_SLOTS];
    uint64_t noise;         /* the capture step's seed */
    float adam_b2, adam_wd; /* the captured adam_step's constants */
    int adam_decoupled;
} gg;

__global__ void k_sgd_graph(float *p, const float *g_, float gscale_, const float *gs, float *buf,
                            size_t n, const graph_vals *sc, float weight_decay, int nesterov)
{
    const float gscale = gs ? *gs : gscale_; /* clip_scale's, on the device */
    const float lr = sc->lr, momentum = sc->momentum;
    const int first_step = sc->first;
    GRID_STRIDE(i, n)
    {
        float d = __fmul_rn(g_[i], gscale);
        if (weight_decay != 0)
            d += weight_decay * p[i];
        if (momentum != 0) {
            buf[i] = first_step ? d : momentum * buf[i] + d;
            d = nesterov ? d + momentum * buf[i] : buf[i];
        }
        p[i] -= lr * d;
    }
}

__global__ void k_adam_graph(float *p, const float *g_, float gscale_, const float *gs, float *m,
                             float *v, size_t n, const graph_vals *sc, float b2, float eps,
                             float weight_decay, int decoupled)
{
    const float gscale = gs ? *gs : gscale_; /* clip_scale's, on the device */
    const float b1 = sc->b1, step_size = sc->step_size, bc2_sqrt = sc->bc2_sqrt, decay = sc->decay;
    GRID_STRIDE(i, n)
    {
        float d = __fmul_rn(g_[i], gscale);
        if (decoupled)
            p[i] *= decay;
        else if (weight_decay != 0)
            d += weight_decay * p[i];
        m[i] = b1 * m[i] + (1 - b1) * d;
        v[i] = b2 * v[i] + (1 - b2) * d * d;
        const float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        p[i] -= step_size * m[i] / denom;
    }
}

__global__ void k_dropout_graph(float *out, float *mask, const float *inp, size_t n, double p,
                                float keep, uint64_t salt, const graph_vals *sc)
{
    const uint64_t seed = sc->noise ^ salt;
    GRID_STRIDE(i, n)
    {
        const float m = dev_uniform(seed, i) >= p ? keep : 0.0f;
        mask[i] = m;
        out[i] = inp[i] * m;
    }
}

/* The block's values for sc, the scalar factors exactly as cuda_adam_step computes them. */
static void graph_fill(struct graph_vals *v, const struct ddp_graph_scalars *sc)
{
    memset(v, 0, sizeof *v);
    v->lr = sc->lr;
    v->momentum = sc->momentum;
    v->first = sc->t == 1;
    const float lr = sc->lr, b1 = sc->beta1, b2 = gg.adam_b2, weight_decay = gg.adam_wd;
    const int64_t t = sc->t;
    const double bc1 = 1 - pow((double)b1, (double)t), bc2 = 1 - pow((double)b2, (double)t);
    v->b1 = b1;
    v->step_size = (float)((double)lr / bc1);
    v->bc2_sqrt = (float)sqrt(bc2);
    v->decay = gg.adam_decoupled ? 1 - lr * weight_decay : 1.0f;
    v->noise = sc->noise;
}

static void graph_sgd(float *p, const float *grad, float gscale, const float *gs, float *buf,
                      size_t n, float weight_decay, int nesterov)
{
    LAUNCH(k_sgd_graph, blocks_for(n), THREADS, p, grad, gscale, gs, buf, n, gg.dev + gg.slot,
           weight_decay, nesterov);
}

static void graph_adam(float *p, const float *grad, float gscale, const float *gs, float *m,
                       float *v, size_t n, float b2, float eps, float weight_decay, int decoupled)
{
    gg.adam_b2 = b2;
    gg.adam_wd = weight_decay;
    gg.adam_decoupled = decoupled;
    LAUNCH(k_adam_graph, blocks_for(n), THREADS, p, grad, gscale, gs, m, v, n, gg.dev + gg.slot, b2,
           eps, weight_decay, decoupled);
}

static void graph_dropout(float *out, float *mask, const float *inp, size_t n, double p, float keep,
                          uint64_t seed)
{
    LAUNCH(k_dropout_graph, blocks_for(n), THREADS, out, mask, inp, n, p, keep, seed ^ gg.noise,
           gg.dev + gg.slot);
}

/* Device blocks, staging slots and their events: made with the backend, so that no step
 * allocates. */
static cudaError_t graph_setup(void)
{
    cudaError_t e = cudaMalloc((void **)&gg.dev, DDP_GRAPH_SLOTS * sizeof(struct graph_vals));
    if (e == cudaSuccess)
        e = cudaHostAlloc((void **)&gg.host, (size_t)GRAPH_RING * GRAPH_SLOT_BYTES,
                          cudaHostAllocDefault);
    for (int i = 0; i < GRAPH_RING && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&gg.copied[i], cudaEventDisableTiming);
    for (int i = 0; i < DDP_GRAPH_SLOTS && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&gg.used[i], cudaEventDisableTiming);
    return e;
}

static int cuda_graph_capture_begin(int slot, const struct ddp_graph_scalars *sc, char *err,
                                    size_t errlen)
{
    const cudaError_t e = cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeGlobal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return ddp_err(err, errlen, "GPU %d: cudaStreamBeginCapture failed: %s", g.device,
                       cudaGetErrorString(e));
    }
    gg.capturing = 1;
    gg.slot = slot;
    gg.noise = sc->noise;
    return 0;
}

static int cuda_graph_capture_end(int slot, char *err, size_t errlen)
{
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(g.stream, &graph);
    gg.capturing = 0;
    if (e == cudaSuccess) {
        if (gg.exec[slot])
            CUDA_CHECK(cudaGraphExecDestroy(gg.exec[slot]));
        gg.exec[slot] = NULL;
        e = cudaGraphInstantiate(&gg.exec[slot], graph, 0);
        cudaGraphDestroy(graph);
    }
    if (e == cudaSuccess)
        return 0;
    cudaGetLastError();
    return ddp_err(err, errlen,
                   "GPU %d: capturing the training step as a CUDA graph failed: %s (%s): an op "
                   "of the step waited for the device, allocated or copied pageable memory",
                   g.device, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* The values go up on the copy stream, after the slot's previous launch has run (in training
 * upload_batch has ordered the copy stream so already: the slot's input set was last read
 * by that launch), and the compute stream waits for the copy, as for the batch. */
static void cuda_graph_launch(int slot, const struct ddp_graph_scalars *sc)
{
    const int i = (int)(gg.writes % GRAPH_RING);
    if (gg.writes++ >= GRAPH_RING) {
        const cudaError_t e = cudaEventQuery(gg.copied[i]);
        if (e == cudaErrorNotReady)
            ddp_die("internal: CUDA graph staging slot %d still being copied", i);
        CUDA_CHECK(e);
    }
    struct graph_vals *h = (struct graph_vals *)(gg.host + (size_t)i * GRAPH_SLOT_BYTES);
    graph_fill(h, sc);
    CUDA_CHECK(cudaStreamWaitEvent(g.copy, gg.used[slot], 0));
    CUDA_CHECK(cudaMemcpyAsync(gg.dev + slot, h, sizeof *h, cudaMemcpyHostToDevice, g.copy));
    CUDA_CHECK(cudaEventRecord(gg.copied[i], g.copy));
    CUDA_CHECK(cudaStreamWaitEvent(g.stream, gg.copied[i], 0));
    CUDA_CHECK(cudaGraphLaunch(gg.exec[slot], g.stream));
    CUDA_CHECK(cudaEventRecord(gg.used[slot], g.stream));
}

/* ---- dropout ----------------------------------------------------------------------------- */

static void cuda_dropout_fwd(float *out, float *mask, const float *inp, size_t n, float p,
                             uint64_t seed)
{
    if (!n)
        return;
    const float keep = p < 1 ? 1.0f / (1.0f - p) : 0.0f; /* as the CPU: in float */
    if (gg.capturing)
        return graph_dropout(out, mask, inp, n, (double)p, keep, seed);
    LAUNCH(k_dropout_fwd, blocks_for(n), THREADS, out, mask, inp, n, (double)p, keep, seed);
}

static void cuda_dropout_bwd(float *dinp, const float *dout, const float *mask, size_t n)
{
    if (!n)
        return;
    LAUNCH(k_mul, blocks_for(n), THREADS, dinp, dout, mask, n);
}

/* ---- softmax cross-entropy ---------------------------------------------------------------- */

#define XENT_ROWS_PER_BLOCK (THREADS / 32)

/* One warp per row i of logits (B,K): row_loss[i] = logsumexp - z[label], row_ok[i] = argmax
 * (first maximum) == label, and dlogits as the CPU computes them. A label outside [0, K)
 * gives a NaN loss (the trainer validates labels; this only keeps the kernel in bounds). */
__global__ void k_xent_rows(double *row_loss, int *row_ok, float *dlogits, const float *logits,
                            const int32_t *labels, int B, int K, float grad_scale, float smoothing)
{
    const int lane = threadIdx.x & 31;
    const int i = blockIdx.x * XENT_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (i >= B)
        return; /* whole warps leave together: every shuffle below has all 32 lanes */
    const float *z = logits + (size_t)i * K;
    float best = -INFINITY;
    int arg = K; /* K: none yet */
    for (int j = lane; j < K; j += 32)
        if (arg == K || z[j] > best) {
            best = z[j];
            arg = j;
        }
    for (int o = 16; o > 0; o >>= 1) {
        const float ob = __shfl_down_sync(0xffffffffu, best, o);
        const int oa = __shfl_down_sync(0xffffffffu, arg, o);
        if (oa < K && (arg == K || ob > best || (ob == best && oa < arg))) {
            best = ob;
            arg = oa;
        }
    }
    arg = __shfl_sync(0xffffffffu, arg, 0);
    if (arg >= K)
        arg = 0;
    const double m = z[arg];
    double se = 0, sz = 0;
    for (int j = lane; j < K; j += 32) {
        se += exp((double)z[j] - m);
        sz += z[j];
    }
    se = warp_sum(se);
    se = __shfl_sync(0xffffffffu, se, 0);
    sz = warp_sum(sz); /* valid in lane 0, which alone writes the loss */
    const double lse = log(se) + m;
    const int label = labels[i];
    const int valid = label >= 0 && label < K;
    const double eps = smoothing;
    if (dlogits) {
        float *d = dlogits + (size_t)i * K;
        const float off = (float)(eps / K) * grad_scale, keep_y = (float)(1.0 - eps);
        for (int j = lane; j < K; j += 32) {
            float v = (float)exp((double)z[j] - lse) * grad_scale;
            if (eps != 0)
                v -= off;
            if (j == label)
                v -= eps != 0 ? keep_y * grad_scale : grad_scale;
            d[j] = v;
        }
    }
    if (lane == 0) {
        const double l =
            eps == 0 ? lse - (double)z[label] : lse - (1.0 - eps) * (double)z[label] - eps * sz / K;
        row_loss[i] = valid ? l : (double)NAN;
        row_ok[i] = valid && arg == label;
    }
}

/* One block: acc[0] += the batch's loss sum, acc[1] += its correct count (fixed order). */
__global__ void k_xent_acc(double *acc, const double *row_loss, const int *row_ok, int B)
{
    double s = 0, c = 0;
    for (int i = threadIdx.x; i < B; i += blockDim.x) {
        s += row_loss[i];
        c += row_ok[i];
    }
    s = block_sum(s);
    c = block_sum(c);
    if (threadIdx.x == 0) {
        acc[0] += s;
        acc[1] += c;
    }
}

/* The loss kernels' per-row scratch in the workspace: row_loss (B doubles), row_ok (B ints),
 * then `extra` bytes. */
static char *xent_rows(double **row_loss, int **row_ok, size_t extra, int B)
{
    const size_t loss_bytes = align256(sizeof(double) * (size_t)B);
    const size_t ok_bytes = align256(sizeof(int) * (size_t)B);
    char *ws = (char *)ws_get(loss_bytes + ok_bytes + extra);
    *row_loss = (double *)ws;
    *row_ok = (int *)(ws + loss_bytes);
    return ws + loss_bytes + ok_bytes;
}

static void cuda_xent_acc(float *dlogits, double *acc, const float *logits, const int32_t *labels,
                          int B, int K, float grad_scale, float smoothing)
{
    if (B <= 0 || K <= 0)
        return;
    double *row_loss;
    int *row_ok;
    xent_rows(&row_loss, &row_ok, 0, B);
    const unsigned blocks = (unsigned)((B + XENT_ROWS_PER_BLOCK - 1) / XENT_ROWS_PER_BLOCK);
    LAUNCH(k_xent_rows, blocks, THREADS, row_loss, row_ok, dlogits, logits, labels, B, K,
           grad_scale, smoothing);
    LAUNCH(k_xent_acc, 1, 1024, acc, row_loss, row_ok, B);
}

/* ---- the compute stream's stall clock (grad_sync.h) --------------------------------------- */

#ifndef DDP_CUDA_TWIN /* the twin's is the host's monotonic clock (twin_kernels.h) */
/* The device's nanosecond clock. */
static __device__ __forceinline__ unsigned long long globaltimer_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#endif

/* t[0] = now (begin), or t[1] += now - t[0] (end). */
__global__ void k_stall_mark(unsigned long long *t, int end)
{
    const unsigned long long now = globaltimer_ns();
    if (end)
        t[1] += now - t[0];
    else
        t[0] = now;
}

static void cuda_stall_mark(void *t, int end)
{
    LAUNCH(k_stall_mark, 1, 1, (unsigned long long *)t, end);
}

static double cuda_xent(float *dlogits, int64_t *correct, const float *logits,
                        const int32_t *labels, int B, int K, float grad_scale, float smoothing)
{
    if (B <= 0 || K <= 0) {
        if (correct)
            *correct = 0;
        return 0;
    }
    double *row_loss;
    int *row_ok;
    double *dres = (double *)xent_rows(&row_loss, &row_ok, 2 * sizeof(double), B);
    CUDA_CHECK(cudaMemsetAsync(dres, 0, 2 * sizeof(double), g.stream));
    const unsigned blocks = (unsigned)((B + XENT_ROWS_PER_BLOCK - 1) / XENT_ROWS_PER_BLOCK);
    LAUNCH(k_xent_rows, blocks, THREADS, row_loss, row_ok, dlogits, logits, labels, B, K,
           grad_scale, smoothing);
    LAUNCH(k_xent_acc, 1, 1024, dres, row_loss, row_ok, B);
    double res[2]; /* loss sum, correct count (exact in a double) */
    CUDA_CHECK(cudaMemcpyAsync(res, dres, sizeof res, cudaMemcpyDeviceToHost, g.stream));
    CUDA_CHECK(cudaStreamSynchronize(g.stream));
    if (correct)
        *correct = (int64_t)res[1];
    return res[0];
}

/* ---- sum of squares (gradient norm) ------------------------------------------------------- */

#define SUMSQ_BLOCKS 256 /* partial sums; a fixed count, so the order of summation is fixed */

/* Block b sums x[i]^2 (in double) over its grid-stride share into part[b]. */
__global__ void k_sumsq_partial(double *part, const float *x, size_t n)
{
    double s = 0;
    GRID_STRIDE(i, n)
    s += (double)x[i] * x[i];
    s = block_sum(s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

/* One block: the partials in a fixed order. */
__global__ void k_sumsq_total(double *out, const double *part, int nparts)
{
    double s = 0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x)
        s += part[i];
    s = block_sum(s);
    if (threadIdx.x == 0)
        *out = s;
}

/* The sum of squares of x queued on the compute stream into the workspace (0 when n is 0);
 * returns where it will be. */
static double *sumsq_queue(const float *x, size_t n)
{
    double *part = (double *)ws_get(sizeof(double) * (SUMSQ_BLOCKS + 1));
    if (n) {
        LAUNCH(k_sumsq_partial, SUMSQ_BLOCKS, THREADS, part, x, n);
        LAUNCH(k_sumsq_total, 1, THREADS, part + SUMSQ_BLOCKS, part, SUMSQ_BLOCKS);
    } else {
        CUDA_CHECK(cudaMemsetAsync(part + SUMSQ_BLOCKS, 0, sizeof(double), g.stream));
    }
    return part + SUMSQ_BLOCKS;
}

static double cuda_sumsq(const float *x, size_t n)
{
    if (!n)
        return 0;
    double res = 0;
    CUDA_CHECK(
        cudaMemcpyAsync(&res, sumsq_queue(x, n), sizeof res, cudaMemcpyDeviceToHost, g.stream));
    CUDA_CHECK(cudaStreamSynchronize(g.stream));
    return res;
}

/* clip_grad_norm's factor folded into the gradient scale, as ddp_optim_step computes it on the
 * host: norm = sqrt(sumsq) x gscale in double; out = gscale x min(1, max_norm / (norm +
 * 1e-6)). */
__global__ void k_clip_scale(float *out, const double *sumsq, float gscale, double max_norm)
{
    const double norm = sqrt(*sumsq) * (double)gscale;
    const double coef = max_norm / (norm + 1e-6);
    const float clip = coef < 1 ? (float)coef : 1.0f;
    *out = clip == 1.0f ? gscale : __fmul_rn(gscale, clip);
}

static void cuda_clip_scale(float *out, const float *x, size_t n, float gscale, double max_norm)
{
    LAUNCH(k_clip_scale, 1, 1, out, sumsq_queue(x, n), gscale, max_norm);
}

/* ---- optimisers -------------------------------------------------------------------------- */

static void cuda_sgd_step(float *p, const float *grad, float gscale, const float *gs, float *buf,
                          size_t n, float lr, float momentum, float weight_decay, int nesterov,
                          int first_step)
{
    if (!n)
        return;
    if (gg.capturing)
        return graph_sgd(p, grad, gscale, gs, buf, n, weight_decay, nesterov);
    LAUNCH(k_sgd, blocks_for(n), THREADS, p, grad, gscale, gs, buf, n, lr, momentum, weight_decay,
           nesterov, first_step);
}

static void cuda_adam_step(float *p, const float *grad, float gscale, const float *gs, float *m,
                           float *v, size_t n, float lr, float b1, float b2, float eps,
                           float weight_decay, int decoupled, int64_t t)
{
    if (!n)
        return;
    if (gg.capturing)
        return graph_adam(p, grad, gscale, gs, m, v, n, b2, eps, weight_decay, decoupled);
    /* The scalar factors exactly as cpu_kernels.inc computes them. */
    const double bc1 = 1 - pow((double)b1, (double)t), bc2 = 1 - pow((double)b2, (double)t);
    const float step_size = (float)((double)lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    const float decay = decoupled ? 1 - lr * weight_decay : 1.0f;
    LAUNCH(k_adam, blocks_for(n), THREADS, p, grad, gscale, gs, m, v, n, b1, b2, eps, weight_decay,
           decoupled, step_size, bc2_sqrt, decay);
}

/* ---- memory ------------------------------------------------------------------------------ */

static void *cuda_alloc(size_t bytes)
{
    void *p = NULL;
    if (bytes == 0)
        bytes = 1;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        ddp_die("cudaMalloc of %zu bytes on GPU %d failed: %s (%zu MiB free of %zu MiB); "
                "lower [data] batch_size or use a smaller model",
                bytes, g.device, cudaGetErrorString(e), free_b >> 20, total_b >> 20);
    }
    mem_note(p, bytes);
    /* zeroed, and complete before any other stream (NCCL's) can touch it */
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, g.stream));
    CUDA_CHECK(cudaStreamSynchronize(g.stream));
    return p;
}

static void cuda_free(void *p)
{
    if (p) {
        mem_forget(p);
        CUDA_CHECK(cudaFree(p));
    }
}

/* Host -> device, or device -> device (model.c copies activations with upload). Queued on the
 * compute stream. A pageable source is staged by CUDA before cudaMemcpyAsync returns; a
 * page-locked one is read later by the DMA engine, so then this waits: either way the caller
 * may reuse src as soon as this returns. */
static void cuda_upload(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    cudaPointerAttributes a;
    CUDA_CHECK(cudaPointerGetAttributes(&a, src));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, g.stream));
    if (a.type == cudaMemoryTypeHost)
        CUDA_CHECK(cudaStreamSynchronize(g.stream));
}

static void *cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    const cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess)
        ddp_die("cudaHostAlloc of %zu bytes of page-locked host memory failed: %s; lower [data] "
                "batch_size or raise the memory lock limit (ulimit -l)",
                bytes, cudaGetErrorString(e));
    return p;
}

static void cuda_host_free(void *p)
{
    if (p)
        CUDA_CHECK(cudaFreeHost(p));
}

/* The input pipeline (backend.h upload_batch): upload q goes into the device set q % 2, last
 * used by batch q - 2, whose work was all queued before upload q - 1 recorded mark[(q-1) % 2];
 * the copy stream waits for that mark, copies, and the compute stream waits for the copy.
 * Nothing here waits on the host. */
static int64_t cuda_upload_batch(void *dx, const void *x, size_t xbytes, void *dy, const void *y,
                                 size_t ybytes)
{
    const int64_t q = ++g.uploads;
    if (q > 1)
        CUDA_CHECK(cudaStreamWaitEvent(g.copy, g.mark[(q - 1) % 2], 0));
    CUDA_CHECK(cudaEventRecord(g.mark[q % 2], g.stream));
    if (xbytes)
        CUDA_CHECK(cudaMemcpyAsync(dx, x, xbytes, cudaMemcpyHostToDevice, g.copy));
    if (ybytes)
        CUDA_CHECK(cudaMemcpyAsync(dy, y, ybytes, cudaMemcpyHostToDevice, g.copy));
    cudaEvent_t done = g.copied[q % UPLOAD_RING];
    CUDA_CHECK(cudaEventRecord(done, g.copy));
    CUDA_CHECK(cudaStreamWaitEvent(g.stream, done, 0));
    return q;
}

/* Highest upload whose copies ran, from event queries (never waits). Older than the ring
 * counts as done: the ring is far longer than any loader keeps batches. */
static int64_t cuda_copies_done(void)
{
    if (g.done < g.uploads - UPLOAD_RING + 1)
        g.done = g.uploads - UPLOAD_RING + 1;
    while (g.done < g.uploads) {
        const cudaError_t e = cudaEventQuery(g.copied[(g.done + 1) % UPLOAD_RING]);
        if (e == cudaErrorNotReady) {
            cudaGetLastError(); /* not an error */
            break;
        }
        CUDA_CHECK(e);
        g.done++;
    }
    return g.done;
}

/* ---- uint8 input (backend.h u8_to_float) ------------------------------------------------- */

/* Most channels [data] normalize takes (core/config.h DDP_NORM_CHANNELS_MAX). */
#define U8_NORM_MAX 16

/* The normalisation, passed by value with the launch: no copy, nothing to keep alive. */
struct u8_norm {
    int nchan; /* 0: none; else the channel count C */
    float mean[U8_NORM_MAX], std[U8_NORM_MAX];
};

/* out = in / 255.0f, then (v - mean[c]) / std[c] for channel c = (i / S) % C: the CPU loader's
 * operations in its order (h5data.c's conversion, then augment.c's normalisation), each one
 * IEEE-rounded (no contraction applies: a division, a subtraction, a division), so bit for bit
 * the CPU's floats. */
__global__ void k_u8_to_float(float *out, const uint8_t *in, size_t n, int C, int S, u8_norm nm)
{
    GRID_STRIDE(i, n)
    {
        float v = (float)in[i] / 255.0f;
        if (nm.nchan) {
            const int c = (int)((i / (size_t)S) % (size_t)C);
            v = (v - nm.mean[c]) / nm.std[c];
        }
        out[i] = v;
    }
}

static void cuda_u8_to_float(float *out, const uint8_t *in, size_t n, int C, int S, int nchan,
                             const float *mean, const float *std)
{
    if (!n)
        return;
    u8_norm nm;
    memset(&nm, 0, sizeof nm);
    if (nchan < 0 || nchan > U8_NORM_MAX || (nchan && nchan != C))
        ddp_die("internal: u8_to_float with %d normalised channels of %d (at most %d)", nchan, C,
                U8_NORM_MAX);
    nm.nchan = nchan;
    for (int c = 0; c < nchan; c++) {
        nm.mean[c] = mean[c];
        nm.std[c] = std[c];
    }
    LAUNCH(k_u8_to_float, blocks_for(n), THREADS, out, in, n, C, S, nm);
}

static void cuda_download(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, g.stream));
    CUDA_CHECK(cudaStreamSynchronize(g.stream));
}

static void cuda_sync(void)
{
    CUDA_CHECK(cudaStreamSynchronize(g.stream));
}

static void cuda_zero(float *x, size_t n)
{
    if (n)
        CUDA_CHECK(cudaMemsetAsync(x, 0, sizeof(float) * n, g.stream));
}

static void cuda_scale(float *x, size_t n, float a)
{
    if (!n)
        return;
    LAUNCH(k_scale, blocks_for(n), THREADS, x, n, a);
}

/* ---- entry points ------------------------------------------------------------------------ */

static void fill_table(void)
{
    struct ddp_backend *t = &g_table;
    memset(t, 0, sizeof *t);
    t->name = "cuda";
    t->alloc = cuda_alloc;
    t->free = cuda_free;
    t->upload = cuda_upload;
    t->download = cuda_download;
    t->step_end = ddp_cuda_step_end;
    t->set_threads = NULL;
    t->sync = cuda_sync;
    t->host_alloc = cuda_host_alloc;
    t->host_free = cuda_host_free;
    t->upload_batch = cuda_upload_batch;
    t->copies_done = cuda_copies_done;
    t->u8_to_float = cuda_u8_to_float;
    t->mem_info = cuda_mem_info;
    t->zero = cuda_zero;
    t->scale = cuda_scale;
    t->linear_fwd = cuda_linear_fwd;
    t->linear_bwd = cuda_linear_bwd;
    t->relu_fwd = cuda_relu_fwd;
    t->linear_relu_fwd = cuda_linear_relu_fwd;
    t->relu_bwd = cuda_relu_bwd;
    t->conv_col_elems = cuda_conv_col_elems;
    t->conv_plan = conv2d_plan_any;
    t->conv2d_fwd = conv2d_fwd_any;
    t->conv2d_relu_fwd = conv2d_relu_fwd_any;
    t->conv2d_bwd = conv2d_bwd_any;
    t->maxpool_fwd = cuda_maxpool_fwd;
    t->maxpool_bwd = cuda_maxpool_bwd;
    t->avgpool_fwd = cuda_avgpool_fwd;
    t->avgpool_bwd = cuda_avgpool_bwd;
    t->gap_fwd = cuda_gap_fwd;
    t->gap_bwd = cuda_gap_bwd;
    t->add = cuda_add;
    t->bn_stats = cuda_bn_stats;
    t->bn_update = cuda_bn_update;
    t->bn_fwd_apply = cuda_bn_fwd_apply;
    t->bn_bwd_sums = cuda_bn_bwd_sums;
    t->bn_bwd_apply = cuda_bn_bwd_apply;
    t->dropout_fwd = cuda_dropout_fwd;
    t->dropout_bwd = cuda_dropout_bwd;
    t->xent = cuda_xent;
    t->xent_acc = cuda_xent_acc;
    t->stall_mark = cuda_stall_mark;
    t->sgd_step = cuda_sgd_step;
    t->adam_step = cuda_adam_step;
    t->graph_capture_begin = cuda_graph_capture_begin;
    t->graph_capture_end = cuda_graph_capture_end;
    t->graph_launch = cuda_graph_launch;
    t->sumsq = cuda_sumsq;
    t->clip_scale = cuda_clip_scale;
}

/* The copy stream and the events of upload_batch. */
static cudaError_t input_setup(void)
{
    cudaError_t e = cudaStreamCreateWithFlags(&g.copy, cudaStreamNonBlocking);
    for (int i = 0; i < 2 && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&g.mark[i], cudaEventDisableTiming);
    for (int i = 0; i < UPLOAD_RING && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&g.copied[i], cudaEventDisableTiming);
    return e == cudaSuccess ? graph_setup() : e; /* and the CUDA graphs' step values */
}

/* [train] precision for the ops (the cuBLAS math mode is the caller's). */
static void use_precision(int precision)
{
    g.precision = precision;
    g_bf16.on = precision == DDP_PRECISION_BF16;
}

/* One line for a failed setup call; clears CUDA's last error. Returns NULL. */
static const struct ddp_backend *setup_fail(char *err, size_t errlen, int device, const char *what,
                                            cudaError_t e)
{
    cudaGetLastError();
    ddp_err(err, errlen, "GPU %d: %s failed: %s (%s)", device, what, cudaGetErrorString(e),
            cudaGetErrorName(e));
    return NULL;
}

extern "C" const struct ddp_backend *ddp_backend_cuda(int device, int precision, char *err,
                                                      size_t errlen)
{
    if (g.device >= 0) {
        if (device != g.device) {
            ddp_err(err, errlen,
                    "the CUDA backend is already bound to GPU %d; one process drives one GPU",
                    g.device);
            return NULL;
        }
        if (precision != g.precision) {
            CUBLAS_CHECK(g_blas.set_math_mode(g.blas, math_mode(precision)));
            use_precision(precision);
        }
        return &g_table;
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        int drv = 0, rt = 0;
        cudaGetLastError();
        if (cudaDriverGetVersion(&drv) != cudaSuccess)
            drv = 0;
        if (cudaRuntimeGetVersion(&rt) != cudaSuccess)
            rt = 0;
        cudaGetLastError();
        if (drv == 0)
            ddp_err(err, errlen,
                    "no CUDA driver on this machine (is this a GPU node? "
                    "nvidia-smi should list the GPUs)");
        else if (e == cudaErrorInsufficientDriver)
            ddp_err(err, errlen,
                    "the NVIDIA driver supports CUDA %d.%d, older than this "
                    "build's runtime %d.%d: update the driver",
                    drv / 1000, (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
        else
            ddp_err(err, errlen, "no usable GPU: %s (nvidia-smi should list the GPUs)",
                    cudaGetErrorString(e));
        return NULL;
    }
    if (count == 0) {
        ddp_err(err, errlen, "no CUDA device visible (CUDA_VISIBLE_DEVICES may hide them)");
        return NULL;
    }
    if (device < 0 || device >= count) {
        ddp_err(err, errlen, "GPU %d does not exist: %d visible (CUDA ordinals 0..%d)", device,
                count, count - 1);
        return NULL;
    }
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
        return setup_fail(err, errlen, device, "cudaGetDeviceProperties", e);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return setup_fail(err, errlen, device, "cudaSetDevice", e);
    if ((e = cudaFree(0)) != cudaSuccess) /* creates the context: busy/prohibited shows here */
        return setup_fail(err, errlen, device, "creating a CUDA context", e);
    /* Is there code for this GPU in the binary (sm_80, sm_90, PTX for newer)? */
    cudaFuncAttributes fa;
    if ((e = cudaFuncGetAttributes(&fa, k_scale)) != cudaSuccess) {
        cudaGetLastError();
        ddp_err(err, errlen,
                "GPU %d (%s, sm_%d%d) cannot run this build's kernels (%s): built for sm_80 and "
                "sm_90; rebuild with a matching -gencode in src/backend/meson.build",
                device, prop.name, prop.major, prop.minor, cudaGetErrorString(e));
        return NULL;
    }
    cudaStream_t stream;
    if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess)
        return setup_fail(err, errlen, device, "cudaStreamCreate", e);
    if ((e = input_setup()) != cudaSuccess)
        return setup_fail(err, errlen, device, "creating the copy stream and its events", e);
    if (blas_open(err, errlen) != 0) {
        cudaStreamDestroy(stream);
        return NULL;
    }
    cublasHandle_t blas;
    cublasStatus_t s = g_blas.create(&blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(stream);
        ddp_err(err, errlen, "GPU %d: cublasCreate failed: %s", device, g_blas.status_string(s));
        return NULL;
    }
    if ((s = g_blas.set_stream(blas, stream)) != CUBLAS_STATUS_SUCCESS ||
        (s = g_blas.set_math_mode(blas, math_mode(precision))) != CUBLAS_STATUS_SUCCESS) {
        g_blas.destroy(blas);
        cudaStreamDestroy(stream);
        ddp_err(err, errlen, "GPU %d: cuBLAS setup failed: %s", device, g_blas.status_string(s));
        return NULL;
    }
    g.stream = stream;
#ifdef DDP_CUDA_TWIN
    twin_name_stream(g.stream, "compute");
    twin_name_stream(g.copy, "copy");
#endif
    g.blas = blas;
    use_precision(precision);
    g.device = device;
    snprintf(g.devname, sizeof g.devname, "%s (sm_%d%d, %zu GiB)", prop.name, prop.major,
             prop.minor, (size_t)(prop.totalGlobalMem >> 30));
    fill_table();
    return &g_table;
}

extern "C" int ddp_cuda_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return count;
}

extern "C" const char *ddp_cuda_version_string(void)
{
    static char buf[200];
    int rt = 0, drv = 0, maj = 0, min = 0, pat = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess)
        rt = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess)
        drv = 0;
    cudaGetLastError();
    char why[8];
    const int have_blas = blas_open(why, sizeof why) == 0;
    if (!have_blas || g_blas.get_property(MAJOR_VERSION, &maj) != CUBLAS_STATUS_SUCCESS ||
        g_blas.get_property(MINOR_VERSION, &min) != CUBLAS_STATUS_SUCCESS ||
        g_blas.get_property(PATCH_LEVEL, &pat) != CUBLAS_STATUS_SUCCESS) {
        maj = CUBLAS_VER_MAJOR;
        min = CUBLAS_VER_MINOR;
        pat = CUBLAS_VER_PATCH;
    }
    char driver[32];
    if (drv > 0)
        snprintf(driver, sizeof driver, "%d.%d", drv / 1000, (drv % 1000) / 10);
    else
        snprintf(driver, sizeof driver, "none");
#ifdef DDP_CUDA_TWIN
    const char *what = "GPU twin: "; /* tests/twin, not a GPU */
#else
    const char *what = "";
#endif
    char dnn[32];
    dnn_version(dnn, sizeof dnn);
    snprintf(buf, sizeof buf, "%sCUDA runtime %d.%d, cuBLAS %d.%d.%d%s, cuDNN %s, driver %s", what,
             rt / 1000, (rt % 1000) / 10, maj, min, pat, have_blas ? "" : " (library not found)",
             dnn, driver);
    return buf;
}

extern "C" const char *ddp_cuda_device_string(void)
{
    return g.devname;
}

extern "C" void *ddp_cuda_stream(void)
{
    return g.device >= 0 ? (void *)g.stream : NULL;
}

extern "C" int ddp_cuda_device(void)
{
    return g.device;
}

extern "C" void ddp_cuda_step_end(int rank, long step, int log_step)
{
#ifdef DDP_CUDA_TWIN
    twin_step_end(rank, step, log_step);
#else
    (void)rank, (void)step, (void)log_step;
#endif
}

/*
 * blas.cu - the CUDA backend's GEMMs (see internal.cuh for the parts): the bf16 operand casts
 * and GEMMs of [train] precision = bf16 (also used by conv.cu's im2col path), and the linear
 * layer, forward (also fused with relu) and backward, through cuBLAS (dlopen.cu's table, the
 * handle table.cu made on the compute stream). It leaves convolutions to conv.cu and the bias
 * and relu epilogues' kernels to elementwise.cu.
 *
 * On bf16 activations (g_cuda.act16, backend.h set_act_type) inp, out, dinp and dout are bf16
 * and the GEMMs read them as they are (GemmEx, bf16 operands, fp32 accumulation; the fp32
 * weights cast by as_bf16, whatever [train] precision says): the forward's product goes into
 * the workspace in fp32 and one kernel adds the bias (and clamps) and rounds it into out, so
 * that out is the fp32-storage layer's output rounded once; dinp is GemmEx's bf16 output
 * (rounded once, by cuBLAS); dw accumulates in fp32 (C fp32, beta 1) and db sums the bf16 dout
 * in fp32 as the fp32 path sums its floats. The fp32-storage paths are unchanged.
 */
#include "backend/cuda/internal.cuh"

/* ---- bf16 operands ([train] precision = bf16) ---------------------------------------------
 * What PyTorch autocast does for matmuls and convolutions: the GEMM operands are rounded to
 * bf16 (round to nearest even), multiplied on the tensor cores with fp32 accumulation into an
 * fp32 result. Everything else (weights, gradients, optimiser state, batchnorm, softmax, loss)
 * stays fp32: the bf16 copies are scratch, made before each GEMM into BF16_SLOTS buffers that,
 * like the workspace, grow during the first step only (outgrown ones are left allocated, never
 * freed: see ws_get). A slot may be reused by the next GEMM: all run in order on one stream. */

__global__ void k_to_bf16(__nv_bfloat16 *out, const float *x, size_t n)
{
    GRID_STRIDE(i, n) out[i] = __float2bfloat16_rn(x[i]);
}

/* The n floats at x rounded to bf16 in scratch buffer `slot` (valid until that slot's next
 * use); queued, never waits. */
const void *as_bf16(const float *x, size_t n, int slot)
{
    const size_t bytes = sizeof(__nv_bfloat16) * n;
    if (bytes > g_cuda.bf16.bytes[slot]) {
        size_t want = g_cuda.bf16.bytes[slot] * 2 > bytes ? g_cuda.bf16.bytes[slot] * 2 : bytes;
        want = align256(want);
        void *p = NULL;
        CUDA_CHECK(cudaMalloc(&p, want));
        mem_note(p, want); /* in gpu_mem_peak_bytes like every allocation */
        g_cuda.bf16.buf[slot] = p;
        g_cuda.bf16.bytes[slot] = want;
    }
    if (n) {
        LAUNCH(k_to_bf16, blocks_for(n), THREADS, (__nv_bfloat16 *)g_cuda.bf16.buf[slot], x, n);
    }
    return g_cuda.bf16.buf[slot];
}

/* C (fp32, column-major) = op(A) op(B) + beta C for bf16 A and B, accumulated in fp32. */
void gemm_bf16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A,
               int lda, const void *B, int ldb, float beta, float *C, int ldc)
{
    const float one = 1;
    CUBLAS_CHECK(g_cuda.blas_fn.gemm_ex(g_cuda.blas, ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B,
                                        CUDA_R_16BF, ldb, &beta, C, CUDA_R_32F, ldc,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* gemm_bf16 over `batch` matrices strideA, strideB, strideC elements apart. */
void gemm_bf16_strided(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       const void *A, int lda, long long sA, const void *B, int ldb, long long sB,
                       float beta, float *C, int ldc, long long sC, int batch)
{
    const float one = 1;
    CUBLAS_CHECK(g_cuda.blas_fn.gemm_strided_batched_ex(
        g_cuda.blas, ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, sA, B, CUDA_R_16BF, ldb, sB, &beta,
        C, CUDA_R_32F, ldc, sC, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* ---- linear ------------------------------------------------------------------------------ */

/* Rows of dout one block of the bias gradient's first pass sums: 8 per warp. */
#define COLSUM_ROWS 64

/* First pass of db (O) += column sums of dout (B,O): block (x, y) sums rows y*rows ..
 * y*rows + rows - 1 of features 32x .. 32x + 31 into part[y * O + o]. Lane l of warp r takes
 * feature 32x + l over rows r, r + nwarps, ... of the block's rows (a warp reads 32
 * consecutive floats of a row); the warps' sums are then added in warp order. */
template <typename A>
__global__ void k_colsum_partial(float *part, const A *dout, int B, int O, int rows)
{
    __shared__ float sh[THREADS / 32][32];
    const int lane = threadIdx.x & 31, r = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int o = blockIdx.x * 32 + lane;
    const size_t b0 = (size_t)blockIdx.y * rows;
    const size_t b1 = b0 + rows < (size_t)B ? b0 + rows : (size_t)B;
    float s = 0;
    if (o < O)
        for (size_t b = b0 + r; b < b1; b += nw)
            s += act_ld(dout[b * O + o]);
    sh[r][lane] = s;
    __syncthreads();
    if (r == 0 && o < O) {
        float t = 0;
        for (int i = 0; i < nw; i++)
            t += sh[i][lane];
        part[(size_t)blockIdx.y * O + o] = t;
    }
}

/* Second pass: block o adds the `splits` partial sums of feature o (thread t takes splits t,
 * t + THREADS, ...; then block_sum's fixed tree) to db[o]. */
__global__ void k_colsum_finish(float *db, const float *part, int O, int splits)
{
    const int o = blockIdx.x;
    float s = 0;
    for (int y = threadIdx.x; y < splits; y += blockDim.x)
        s += part[(size_t)y * O + o];
    s = block_sum(s);
    if (threadIdx.x == 0)
        db[o] += s;
}

/* db (O) += column sums of dout (B,O) (activation storage): a two-level reduction, parallel
 * over rows and features. The grid follows from B and O alone (COLSUM_ROWS rows per block, more where
 * B / COLSUM_ROWS would pass gridDim.y's limit), so the order of summation is fixed: the same
 * bits on every run, no atomics. */
static void colsum_add(float *db, const float *dout, int B, int O)
{
    if (B <= 0 || O <= 0)
        return;
    size_t rows = COLSUM_ROWS;
    if (((size_t)B + rows - 1) / rows > MAX_GRID_YZ)
        rows = ((size_t)B + MAX_GRID_YZ - 1) / MAX_GRID_YZ;
    const unsigned splits = (unsigned)(((size_t)B + rows - 1) / rows);
    float *part = (float *)ws_get(sizeof(float) * (size_t)splits * O);
    const dim3 grid((unsigned)((O + 31) / 32), splits);
    ACT_LAUNCH(k_colsum_partial, grid, THREADS, (part, dout, B, O, (int)rows),
               (part, (const bf16 *)dout, B, O, (int)rows));
    LAUNCH(k_colsum_finish, (unsigned)O, THREADS, db, part, O, (int)splits);
}

/* out (B,O) = inp (B,C) w^T + beta out, in fp32 or on bf16 operands ([train] precision). */
static void linear_gemm(float *out, const float *inp, const float *w, int B, int C, int O,
                        float beta)
{
    if (g_cuda.bf16.on) {
        gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, O, B, C, as_bf16(w, (size_t)O * C, 0), C,
                  as_bf16(inp, (size_t)B * C, 1), C, beta, out, O);
        return;
    }
    const float one = 1;
    CUBLAS_CHECK(g_cuda.blas_fn.sgemm(g_cuda.blas, CUBLAS_OP_T, CUBLAS_OP_N, O, B, C, &one, w, C,
                                      inp, C, &beta, out, O));
}

/* out (n = rows * O, bf16) = acc + b[o] (b NULL: acc), relu'd when relu: the one rounding
 * of a layer's output on bf16 activations (the float sum as k_bias_relu1 and cuBLAS's
 * beta = 1 make it). */
__global__ void k_linear_out16(bf16 *out, const float *acc, const float *b, size_t n, int O,
                               int relu)
{
    GRID_STRIDE(i, n)
    {
        const float v = b ? acc[i] + b[i % (size_t)O] : acc[i];
        out[i] = act_st<bf16>(relu && !(v > 0) ? 0.0f : v);
    }
}

/* k_linear_out16 on vectors of 8 (internal.cuh bf16x8; acc two float4), each element's feature
 * stepped on from the vector's first (chan_walk), then the n % 8 tail one at a time. */
__global__ void k_linear_out16x8(bf16 *out, const float *acc, const float *b, size_t n, int O,
                                 int relu)
{
    const size_t n8 = n / 8;
    GRID_STRIDE(i, n8)
    {
        float v[8];
        act_ld8(v, acc, i);
        if (b) {
            chan_walk w = chan_at(8 * i, O, 1);
            for (int j = 0; j < 8; j++) {
                v[j] = v[j] + b[w.c];
                chan_next(&w, O, 1);
            }
        }
        for (int j = 0; j < 8; j++)
            v[j] = relu && !(v[j] > 0) ? 0.0f : v[j];
        act_st8(out, i, v);
    }
    GRID_STRIDE(t, n - 8 * n8)
    {
        const size_t i = 8 * n8 + t;
        const float v = b ? acc[i] + b[i % (size_t)O] : acc[i];
        out[i] = act_st<bf16>(relu && !(v > 0) ? 0.0f : v);
    }
}

/* linear (+ relu) forward on bf16 activations: out (B,O) bf16 = inp (B,C) bf16 w^T + b, the
 * product in fp32 in the workspace, rounded once by k_linear_out16. */
static void linear_fwd16(float *out, const float *inp, const float *w, const float *b, int B, int C,
                         int O, int relu)
{
    const size_t n = (size_t)B * O;
    float *acc = (float *)ws_get(sizeof(float) * n);
    gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, O, B, C, as_bf16(w, (size_t)O * C, 0), C, inp, C, 0.0f, acc,
              O);
    const void *p[] = {out, acc};
    if (vec4_ok(p, 2))
        LAUNCH(k_linear_out16x8, blocks_for((n + 7) / 8), THREADS, (bf16 *)out, acc, b, n, O, relu);
    else
        LAUNCH(k_linear_out16, blocks_for(n), THREADS, (bf16 *)out, acc, b, n, O, relu);
}

static void cuda_linear_fwd(float *out, const float *inp, const float *w, const float *b, int B,
                            int C, int O)
{
    /* out (B,O) = inp (B,C) w^T + b. Column-major: out^T (O,B) = w (O,C) inp^T (C,B), where w
     * is stored as a column-major (C,O) matrix (op T) and inp as a column-major (C,B) one. */
    const size_t n = (size_t)B * O;
    if (n == 0)
        return;
    if (g_cuda.act16) {
        linear_fwd16(out, inp, w, b, B, C, O, 0);
        return;
    }
    if (b) {
        fill_bias(out, b, n, O, 1);
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

/* cuda_linear_bwd on bf16 activations: dinp (B,C) bf16 = dout (B,O) w, GemmEx's bf16 output
 * (rounded once); dw (O,C) += dout^T inp in fp32, both read as stored. */
static void linear_bwd16(float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, int B, int C, int O)
{
    if (dinp) {
        const float one = 1, zero = 0;
        CUBLAS_CHECK(g_cuda.blas_fn.gemm_ex(g_cuda.blas, CUBLAS_OP_N, CUBLAS_OP_N, C, B, O, &one,
                                            as_bf16(w, (size_t)O * C, 1), CUDA_R_16BF, C, dout,
                                            CUDA_R_16BF, O, &zero, dinp, CUDA_R_16BF, C,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_T, C, O, B, inp, C, dout, O, 1, dw, C);
}

static void cuda_linear_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, int B, int C, int O)
{
    if (B == 0)
        return;
    if (g_cuda.act16 || g_cuda.bf16.on) {
        if (g_cuda.act16)
            linear_bwd16(dinp, dw, dout, inp, w, B, C, O);
        else
            linear_bwd_bf16(dinp, dw, dout, inp, w, B, C, O);
        if (db)
            colsum_add(db, dout, B, O);
        return;
    }
    const float one = 1, zero = 0;
    /* dinp (B,C) = dout (B,O) w (O,C): column-major dinp^T (C,B) = w^T (C,O) dout^T (O,B) */
    if (dinp)
        CUBLAS_CHECK(g_cuda.blas_fn.sgemm(g_cuda.blas, CUBLAS_OP_N, CUBLAS_OP_N, C, B, O, &one, w,
                                          C, dout, O, &zero, dinp, C));
    /* dw (O,C) += dout^T (O,B) inp (B,C): column-major dw^T (C,O) += inp^T (C,B) dout (B,O) */
    CUBLAS_CHECK(g_cuda.blas_fn.sgemm(g_cuda.blas, CUBLAS_OP_N, CUBLAS_OP_T, C, O, B, &one, inp, C,
                                      dout, O, &one, dw, C));
    if (db)
        colsum_add(db, dout, B, O);
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
    if (g_cuda.act16) {
        linear_fwd16(out, inp, w, b, B, C, O, 1);
        return;
    }
    linear_gemm(out, inp, w, B, C, O, 0.0f);
    bias_relu(out, b, n, O, 1);
}

/* This part's entries of the ops table. */
void cuda_table_blas(struct ddp_backend *t)
{
    t->linear_fwd = cuda_linear_fwd;
    t->linear_bwd = cuda_linear_bwd;
    t->linear_relu_fwd = cuda_linear_relu_fwd;
}

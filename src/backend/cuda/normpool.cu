/*
 * normpool.cu - the CUDA backend's normalisation and pooling (see internal.cuh for the parts):
 * batchnorm (per-channel sums in double by a deterministic two-pass reduction, running
 * statistics as cpu.c, forward and backward application), max and average pools (windows of
 * stride k), global average pool, and add (the join of a residual block). It leaves
 * SyncBatchNorm's all-reduce of the sums to the trainer (comm/).
 *
 * Channels-last (backend.h set_layout): where nhwc_on(S) the entries hand the pools and gap to
 * layout.cu's (B, H, W, C) kernels, and batchnorm sums columns of a (B*S, C) matrix there
 * (colsum_partial) instead of channel planes; its element-wise kernels take the channel as
 * (i / inner) % C with inner = S (NCHW) or 1 (NHWC), one expression for both layouts.
 *
 * Activation storage (backend.h set_act_type): every kernel that reads or writes activations
 * (inp, out, xhat, dout, dinp) is a template over their storage type A (internal.cuh), computes
 * in float as the fp32 instance does and stores through act_st; the statistics, parameters,
 * their gradients, argmax and the double sums are the same in both. The entries launch the
 * instance g_cuda.act16 asks for; the NHWC kernels and colsum_partial (layout.cu) read it
 * themselves.
 */
#include "backend/cuda/internal.cuh"

/* LAUNCH of kernel<A, I> (storage A, index type I) through a pointer named after the kernel:
 * the comma of the template arguments would split LAUNCH's first argument. */
#define LAUNCH_AI(kernel, A, I, grid, ...)             \
    do {                                               \
        auto *const kernel##_ = kernel<A, I>;          \
        LAUNCH(kernel##_, grid, THREADS, __VA_ARGS__); \
    } while (0)

/* f<bf16>(args) or f<float>(args), by the activation storage in force (f returns void). */
#define ACT_CALL(f, ...) (g_cuda.act16 ? f<bf16>(__VA_ARGS__) : f<float>(__VA_ARGS__))

/* ---- pools ------------------------------------------------------------------------------- */

/* The pools index with I: uint32_t where the input has fewer than 2^32 elements (32-bit
 * divisions, several times cheaper than 64-bit ones), else size_t. */
template <typename A, typename I>
__global__ void k_maxpool_fwd(A *out, int32_t *argmax, const A *inp, I BC, int H, int W, int k)
{
    const I OH = (I)(H / k), OW = (I)(W / k);
    const I n = BC * OH * OW;
    GRID_STRIDE(o_, n)
    {
        const I o = (I)o_, bc = o / (OH * OW), r = o - bc * (OH * OW);
        const int oh = (int)(r / OW), ow = (int)(r - (I)oh * OW);
        const A *x = inp + (size_t)bc * H * W;
        int best = (oh * k) * W + ow * k;
        float m = act_ld(x[best]);
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++) {
                const int idx = (oh * k + i) * W + ow * k + j;
                if (act_ld(x[idx]) > m) { /* strict: the first maximum wins, as PyTorch */
                    m = act_ld(x[idx]);
                    best = idx;
                }
            }
        out[o] = act_st<A>(m);
        argmax[o] = best;
    }
}

/* Windows do not overlap (stride k): each input pixel has at most one window, so the
 * gradient is gathered, not scattered, and needs no atomics. */
template <typename A, typename I>
__global__ void k_maxpool_bwd(A *dinp, const A *dout, const int32_t *argmax, I BC, int H, int W,
                              int k)
{
    const I OH = (I)(H / k), OW = (I)(W / k), HW = (I)H * (I)W;
    const I n = BC * HW;
    GRID_STRIDE(idx_, n)
    {
        const I idx = (I)idx_, bc = idx / HW;
        const int hw = (int)(idx - bc * HW);
        const int h = hw / W, oh = h / k, ow = (hw - h * W) / k;
        float v = 0;
        if (oh < (int)OH && ow < (int)OW) {
            const I o = bc * OH * OW + (I)oh * OW + (I)ow;
            if (argmax[o] == hw)
                v = act_ld(dout[o]);
        }
        dinp[idx] = act_st<A>(v);
    }
}

/* relu then maxpool in one pass (backend.h relu_maxpool_fwd): out = the first maximum of
 * relu(x + b[c]) over each window (b NULL: relu(x)), argmax its place i*k + j in the window
 * as one byte (k <= 16). The values are those of bias_relu and k_maxpool_fwd in turn, bit for
 * bit: the same sum, the same relu, the same strict comparison; with bf16 storage each value
 * is rounded to bf16 before the comparison, as bias_relu would have stored it (a no-op without
 * b: the input is bf16 already), so the argmax too is that of the two ops in turn. */
template <typename A, typename I>
__global__ void k_relu_maxpool_fwd(A *out, uint8_t *argmax, const A *inp, const float *b, I BC,
                                   int C, int H, int W, int k)
{
    const I OH = (I)(H / k), OW = (I)(W / k);
    const I n = BC * OH * OW;
    GRID_STRIDE(o_, n)
    {
        const I o = (I)o_, bc = o / (OH * OW), r = o - bc * (OH * OW);
        const int oh = (int)(r / OW), ow = (int)(r - (I)oh * OW);
        const A *x = inp + (size_t)bc * H * W + (size_t)(oh * k) * W + ow * k;
        const float bias = b ? b[bc % (I)C] : 0.0f;
        float m = 0;
        int best = -1;
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++) {
                float v = b ? act_ld(x[i * W + j]) + bias : act_ld(x[i * W + j]);
                v = act_ld(act_st<A>(v > 0 ? v : 0));
                if (best < 0 || v > m) {
                    m = v;
                    best = i * k + j;
                }
            }
        out[o] = act_st<A>(m);
        argmax[o] = (uint8_t)best;
    }
}

/* maxpool's backward then relu's (backend.h maxpool_relu_bwd): the gradient of the relu's
 * input, from the pool's output gradient, output and byte argmax. The pixel at a window's
 * maximum gets dout where the pool's output (the relu's output there) is > 0; every other
 * pixel 0: what k_maxpool_bwd and relu_bwd give in turn, without the two full-size passes
 * between them and without reading the activation. */
template <typename A, typename I>
__global__ void k_maxpool_relu_bwd(A *dinp, const A *dout, const A *out, const uint8_t *argmax,
                                   I BC, int H, int W, int k)
{
    const I OH = (I)(H / k), OW = (I)(W / k), HW = (I)H * (I)W;
    const I n = BC * HW;
    GRID_STRIDE(idx_, n)
    {
        const I idx = (I)idx_, bc = idx / HW;
        const int hw = (int)(idx - bc * HW);
        const int h = hw / W, w = hw - h * W, oh = h / k, ow = w / k;
        float v = 0;
        if (oh < (int)OH && ow < (int)OW) {
            const I o = bc * OH * OW + (I)oh * OW + (I)ow;
            if (argmax[o] == (h - oh * k) * k + (w - ow * k) && act_ld(out[o]) > 0)
                v = act_ld(dout[o]);
        }
        dinp[idx] = act_st<A>(v);
    }
}

/* k_maxpool_relu_bwd that also sums what it stores per channel (backend.h maxpool_relu_bwd_db):
 * block (c, y) writes elements j = y*THREADS + t, j + splits*THREADS, ... of channel c's B*H*W
 * (conv_dnn.cu k_chan_partial's walk over the convolution's output gradient) and sums them in
 * double as stored, then block_sum: part[c * splits + y] holds the bits k_chan_partial gives on
 * the same tensor, and rowsum_finish makes the bias gradient conv_bias_grad would. */
template <typename A, typename I>
__global__ void k_maxpool_relu_bwd_db(double *part, A *dinp, const A *dout, const A *out,
                                      const uint8_t *argmax, int B, int C, int H, int W, int k)
{
    const int c = blockIdx.x, y = blockIdx.y, splits = gridDim.y;
    const int OH = H / k, OW = W / k;
    const I P = (I)H * (I)W, n = (I)B * P, step = (I)splits * blockDim.x;
    double s = 0;
    for (I j = (I)y * blockDim.x + threadIdx.x; j < n; j += step) {
        const I b = j / P;
        const int hw = (int)(j - b * P), h = hw / W, w = hw - h * W, oh = h / k, ow = w / k;
        float v = 0;
        if (oh < OH && ow < OW) {
            const I o = ((b * (I)C + (I)c) * (I)OH + (I)oh) * (I)OW + (I)ow;
            if (argmax[o] == (h - oh * k) * k + (w - ow * k) && act_ld(out[o]) > 0)
                v = act_ld(dout[o]);
        }
        const A st = act_st<A>(v);
        dinp[(b * (I)C + (I)c) * P + (I)hw] = st;
        s += act_ld(st);
    }
    s = block_sum(s);
    if (threadIdx.x == 0)
        part[(size_t)c * splits + y] = s;
}

template <typename A>
__global__ void k_avgpool_fwd(A *out, const A *inp, size_t BC, int H, int W, int k, float inv)
{
    const int OH = H / k, OW = W / k;
    const size_t n = BC * OH * OW;
    GRID_STRIDE(o, n)
    {
        const size_t bc = o / ((size_t)OH * OW);
        const int r = (int)(o % ((size_t)OH * OW));
        const int oh = r / OW, ow = r % OW;
        const A *x = inp + bc * H * W;
        float s = 0;
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++)
                s += act_ld(x[(oh * k + i) * W + ow * k + j]);
        out[o] = act_st<A>(s * inv);
    }
}

template <typename A>
__global__ void k_avgpool_bwd(A *dinp, const A *dout, size_t BC, int H, int W, int k, float inv)
{
    const int OH = H / k, OW = W / k;
    const size_t n = BC * H * W;
    GRID_STRIDE(idx, n)
    {
        const size_t bc = idx / ((size_t)H * W);
        const int hw = (int)(idx % ((size_t)H * W));
        const int oh = (hw / W) / k, ow = (hw % W) / k;
        const float v =
            (oh < OH && ow < OW) ? act_ld(dout[bc * OH * OW + (size_t)oh * OW + ow]) * inv : 0.0f;
        dinp[idx] = act_st<A>(v);
    }
}

/* 1 when a pool's input (B, C, H, W) has fewer than 2^32 elements: 32-bit indices. */
static int pool_idx32(int B, int C, int H, int W)
{
    return (size_t)B * C * H * W <= UINT32_MAX;
}

/* The NCHW launches of the pools for storage A, n the items of the grid (outputs forward,
 * inputs backward), non-zero. */
template <typename A>
static void maxpool_fwd_nchw(float *out, int32_t *argmax, const float *inp, int B, int C, int H,
                             int W, int k, size_t n)
{
    const size_t BC = (size_t)B * C;
    if (pool_idx32(B, C, H, W))
        LAUNCH_AI(k_maxpool_fwd, A, uint32_t, blocks_for(n), (A *)out, argmax, (const A *)inp,
                  (uint32_t)BC, H, W, k);
    else
        LAUNCH_AI(k_maxpool_fwd, A, size_t, blocks_for(n), (A *)out, argmax, (const A *)inp, BC, H,
                  W, k);
}

template <typename A>
static void maxpool_bwd_nchw(float *dinp, const float *dout, const int32_t *argmax, int B, int C,
                             int H, int W, int k, size_t n)
{
    const size_t BC = (size_t)B * C;
    if (pool_idx32(B, C, H, W))
        LAUNCH_AI(k_maxpool_bwd, A, uint32_t, blocks_for(n), (A *)dinp, (const A *)dout, argmax,
                  (uint32_t)BC, H, W, k);
    else
        LAUNCH_AI(k_maxpool_bwd, A, size_t, blocks_for(n), (A *)dinp, (const A *)dout, argmax, BC,
                  H, W, k);
}

template <typename A>
static void relu_maxpool_nchw(float *out, uint8_t *argmax, const float *inp, const float *b, int B,
                              int C, int H, int W, int k, size_t n)
{
    const size_t BC = (size_t)B * C;
    if (pool_idx32(B, C, H, W))
        LAUNCH_AI(k_relu_maxpool_fwd, A, uint32_t, blocks_for(n), (A *)out, argmax, (const A *)inp,
                  b, (uint32_t)BC, C, H, W, k);
    else
        LAUNCH_AI(k_relu_maxpool_fwd, A, size_t, blocks_for(n), (A *)out, argmax, (const A *)inp, b,
                  BC, C, H, W, k);
}

template <typename A>
static void maxpool_relu_bwd_nchw(float *dinp, const float *dout, const float *out,
                                  const uint8_t *argmax, int B, int C, int H, int W, int k,
                                  size_t n)
{
    const size_t BC = (size_t)B * C;
    if (pool_idx32(B, C, H, W))
        LAUNCH_AI(k_maxpool_relu_bwd, A, uint32_t, blocks_for(n), (A *)dinp, (const A *)dout,
                  (const A *)out, argmax, (uint32_t)BC, H, W, k);
    else
        LAUNCH_AI(k_maxpool_relu_bwd, A, size_t, blocks_for(n), (A *)dinp, (const A *)dout,
                  (const A *)out, argmax, BC, H, W, k);
}

static void cuda_maxpool_fwd(float *out, int32_t *argmax, const float *inp, int B, int C, int H,
                             int W, int k)
{
    const size_t n = (size_t)B * C * (H / k) * (W / k);
    if (!n)
        return;
    if (nhwc_on((size_t)H * W))
        nhwc_maxpool_fwd(out, argmax, inp, B, C, H, W, k);
    else
        ACT_CALL(maxpool_fwd_nchw, out, argmax, inp, B, C, H, W, k, n);
}

static void cuda_maxpool_bwd(float *dinp, const float *dout, const int32_t *argmax, int B, int C,
                             int H, int W, int k)
{
    const size_t n = (size_t)B * C * H * W;
    if (!n)
        return;
    if (nhwc_on((size_t)H * W))
        nhwc_maxpool_bwd(dinp, dout, argmax, B, C, H, W, k);
    else
        ACT_CALL(maxpool_bwd_nchw, dinp, dout, argmax, B, C, H, W, k, n);
}

/* out, argmax (B, C, H/k, W/k) = maxpool of relu(inp + b[c]) (b NULL: relu(inp)); conv.cu's
 * conv2d_relu_maxpool_fwd passes the bias it left out of the convolution. Channels-last where
 * nhwc_on(H*W): inp (B, H, W, C), out and argmax (B, H/k, W/k, C). */
void relu_maxpool(float *out, uint8_t *argmax, const float *inp, const float *b, int B, int C,
                  int H, int W, int k)
{
    const size_t n = (size_t)B * C * (H / k) * (W / k);
    if (!n)
        return;
    if (nhwc_on((size_t)H * W))
        nhwc_relu_maxpool(out, argmax, inp, b, B, C, H, W, k);
    else
        ACT_CALL(relu_maxpool_nchw, out, argmax, inp, b, B, C, H, W, k, n);
}

static void cuda_relu_maxpool_fwd(float *out, uint8_t *argmax, const float *inp, int B, int C,
                                  int H, int W, int k)
{
    relu_maxpool(out, argmax, inp, NULL, B, C, H, W, k);
}

static void cuda_maxpool_relu_bwd(float *dinp, const float *dout, const float *out,
                                  const uint8_t *argmax, int B, int C, int H, int W, int k)
{
    const size_t n = (size_t)B * C * H * W;
    if (!n)
        return;
    if (nhwc_on((size_t)H * W))
        nhwc_maxpool_relu_bwd(dinp, dout, out, argmax, B, C, H, W, k);
    else
        ACT_CALL(maxpool_relu_bwd_nchw, dinp, dout, out, argmax, B, C, H, W, k, n);
}

/* The NCHW launch of k_maxpool_relu_bwd_db for storage A: block (c, y) of C x splits. */
template <typename A>
static void maxpool_relu_bwd_db_nchw(double *part, float *dinp, const float *dout, const float *out,
                                     const uint8_t *argmax, int B, int C, int H, int W, int k,
                                     size_t splits)
{
    const dim3 grid((unsigned)C, (unsigned)splits);
    if ((size_t)B * C * H * W + splits * THREADS <= UINT32_MAX) /* j + step never wraps */
        LAUNCH_AI(k_maxpool_relu_bwd_db, A, uint32_t, grid, part, (A *)dinp, (const A *)dout,
                  (const A *)out, argmax, B, C, H, W, k);
    else
        LAUNCH_AI(k_maxpool_relu_bwd_db, A, size_t, grid, part, (A *)dinp, (const A *)dout,
                  (const A *)out, argmax, B, C, H, W, k);
}

/* backend.h maxpool_relu_bwd_db: db's sums grouped as the convolution's own bias gradient on
 * the cuDNN path in the layout in force (conv_dnn.cu: colsum_add under NHWC, conv_bias_grad
 * else), so db has the bits conv2d_bwd would add. The im2col path sums a batch of several chunks
 * chunk by chunk; there the bits may differ (the sum here is the whole batch's in double). */
static void cuda_maxpool_relu_bwd_db(float *dinp, float *db, const float *dout, const float *out,
                                     const uint8_t *argmax, int B, int C, int H, int W, int k)
{
    const size_t n = (size_t)B * H * W;
    if (!n || C <= 0)
        return;
    if (g_cuda.layout == DDP_LAYOUT_NHWC) {
        nhwc_maxpool_relu_bwd_db(dinp, db, dout, out, argmax, B, C, H, W, k);
        return;
    }
    const size_t splits = rowsum_splits(n);
    double *part = (double *)ws_get(sizeof(double) * (size_t)C * splits);
    ACT_CALL(maxpool_relu_bwd_db_nchw, part, dinp, dout, out, argmax, B, C, H, W, k, splits);
    rowsum_finish(db, part, C, splits);
}

static void cuda_avgpool_fwd(float *out, const float *inp, int B, int C, int H, int W, int k)
{
    const size_t n = (size_t)B * C * (H / k) * (W / k);
    if (!n)
        return;
    if (nhwc_on((size_t)H * W)) {
        nhwc_avgpool_fwd(out, inp, B, C, H, W, k);
        return;
    }
    const float inv = 1.0f / (float)(k * k);
    ACT_LAUNCH(k_avgpool_fwd, blocks_for(n), THREADS, (out, inp, (size_t)B * C, H, W, k, inv),
               ((bf16 *)out, (const bf16 *)inp, (size_t)B * C, H, W, k, inv));
}

static void cuda_avgpool_bwd(float *dinp, const float *dout, int B, int C, int H, int W, int k)
{
    const size_t n = (size_t)B * C * H * W;
    if (!n)
        return;
    if (nhwc_on((size_t)H * W)) {
        nhwc_avgpool_bwd(dinp, dout, B, C, H, W, k);
        return;
    }
    const float inv = 1.0f / (float)(k * k);
    ACT_LAUNCH(k_avgpool_bwd, blocks_for(n), THREADS, (dinp, dout, (size_t)B * C, H, W, k, inv),
               ((bf16 *)dinp, (const bf16 *)dout, (size_t)B * C, H, W, k, inv));
}

/* ---- global average pool, add ------------------------------------------------------------- */

/* out (BC) = mean of each row of inp (BC, S): one thread per row, positions in order. */
template <typename A> __global__ void k_gap_fwd(A *out, const A *inp, size_t BC, int S)
{
    GRID_STRIDE(r, BC)
    {
        const A *x = inp + r * (size_t)S;
        float s = 0;
        for (int i = 0; i < S; i++)
            s += act_ld(x[i]);
        out[r] = act_st<A>(s / (float)S);
    }
}

template <typename A> __global__ void k_gap_bwd(A *dinp, const A *dout, size_t n, int S)
{
    GRID_STRIDE(i, n) dinp[i] = act_st<A>(act_ld(dout[i / (size_t)S]) / (float)S);
}

/* out = a + b on float4 vectors, the n % 4 tail one at a time (out may be a); fp32 storage
 * only (bf16: k_add1). */
__global__ void k_add(float *out, const float *a, const float *b, size_t n)
{
    const size_t n4 = n / 4;
    GRID_STRIDE(i, n4)
    {
        const float4 x = ((const float4 *)a)[i], y = ((const float4 *)b)[i];
        float4 r;
        r.x = x.x + y.x;
        r.y = x.y + y.y;
        r.z = x.z + y.z;
        r.w = x.w + y.w;
        ((float4 *)out)[i] = r;
    }
    GRID_STRIDE(t, n - 4 * n4) out[4 * n4 + t] = a[4 * n4 + t] + b[4 * n4 + t];
}

struct op_add { /* internal.cuh map2_8 */
    __device__ float operator()(float a, float b) const
    {
        return a + b;
    }
};

/* out = a + b one element at a time (out may be a). */
template <typename A> __global__ void k_add1(A *out, const A *a, const A *b, size_t n)
{
    GRID_STRIDE(i, n) out[i] = act_st<A>(act_ld(a[i]) + act_ld(b[i]));
}

/* k_add1<bf16> on vectors of 8 (internal.cuh bf16x8), then the n % 8 tail (out may be a). */
__global__ void k_add8(bf16 *out, const bf16 *a, const bf16 *b, size_t n)
{
    map2_8(out, a, b, n, op_add());
}

static void cuda_gap_fwd(float *out, const float *inp, int B, int C, int S)
{
    const size_t BC = (size_t)B * C;
    if (!BC)
        return;
    if (nhwc_on((size_t)S)) {
        nhwc_gap_fwd(out, inp, B, C, S);
        return;
    }
    ACT_LAUNCH(k_gap_fwd, blocks_for(BC), THREADS, (out, inp, BC, S),
               ((bf16 *)out, (const bf16 *)inp, BC, S));
}

static void cuda_gap_bwd(float *dinp, const float *dout, int B, int C, int S)
{
    const size_t n = (size_t)B * C * S;
    if (!n)
        return;
    if (nhwc_on((size_t)S)) {
        nhwc_gap_bwd(dinp, dout, B, C, S);
        return;
    }
    ACT_LAUNCH(k_gap_bwd, blocks_for(n), THREADS, (dinp, dout, n, S),
               ((bf16 *)dinp, (const bf16 *)dout, n, S));
}

static void cuda_add(float *out, const float *a, const float *b, size_t n)
{
    if (!n)
        return;
    const void *p[] = {out, a, b};
    if (g_cuda.act16 && vec4_ok(p, 3))
        LAUNCH(k_add8, blocks_for((n + 7) / 8), THREADS, (bf16 *)out, (const bf16 *)a,
               (const bf16 *)b, n);
    else if (g_cuda.act16)
        LAUNCH(k_add1<bf16>, blocks_for(n), THREADS, (bf16 *)out, (const bf16 *)a, (const bf16 *)b,
               n);
    else if (vec4_ok(p, 3))
        LAUNCH(k_add, blocks_for((n + 3) / 4), THREADS, out, a, b, n);
    else
        LAUNCH(k_add1<float>, blocks_for(n), THREADS, out, a, b, n);
}

/* ---- batchnorm --------------------------------------------------------------------------- */

/* relu's backward on one element, as elementwise.cu's relu_grad: dy where the relu's output
 * y is > 0, else 0. */
__device__ __forceinline__ float bn_relu_grad(float y, float dy)
{
    return y > 0 ? dy : 0;
}

/* Partial per-channel sums over (B, S): block (c, y) covers elements y, y + splits, ... (in
 * blocks of THREADS) of channel c and writes part[(c * splits + y) * 2 + {0, 1}]:
 * with b == NULL, sum a and sum a^2; else sum a and sum a*b. In double, as the CPU. With
 * mask (a relu's output), a is first taken through the relu's backward (bn_relu_grad). */
template <typename A>
__global__ void k_bn_partial(double *part, const A *a, const A *b, const A *mask, int B, int C,
                             int S)
{
    const int c = blockIdx.x, y = blockIdx.y, splits = gridDim.y;
    const size_t n = (size_t)B * S;
    double s = 0, s2 = 0;
    for (size_t j = (size_t)y * blockDim.x + threadIdx.x; j < n; j += (size_t)splits * blockDim.x) {
        const size_t bi = j / S, si = j % S;
        const size_t off = (bi * C + c) * S + si;
        const double v = mask ? bn_relu_grad(act_ld(mask[off]), act_ld(a[off])) : act_ld(a[off]);
        s += v;
        s2 += b ? v * (double)act_ld(b[off]) : v * v;
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

/* Per-channel sums of (a, a^2) or (a, a*b) over (B,C,S) (channels-last: (B,S,C), the column
 * sums of a (B*S, C) matrix) and the count B*S into the device array sums (2C+1); mask as
 * k_bn_partial's. Never waits. */
static void bn_reduce(double *sums, const float *a, const float *b, const float *mask, int B, int C,
                      int S)
{
    if (C <= 0)
        return;
    const size_t n = (size_t)B * S;
    if (n == 0) { /* all sums and the count 0 */
        CUDA_CHECK(cudaMemsetAsync(sums, 0, sizeof(double) * (2 * (size_t)C + 1), g_cuda.stream));
        return;
    }
    const int nhwc = nhwc_on((size_t)S);
    size_t splits = (n + BN_ELEMS_PER_SPLIT - 1) / BN_ELEMS_PER_SPLIT;
    if (splits > BN_MAX_SPLITS)
        splits = BN_MAX_SPLITS;
    if (nhwc)
        splits = colsum_splits(n, C);
    double *part = (double *)ws_get(sizeof(double) * 2 * (size_t)C * splits);
    if (nhwc) {
        colsum_partial(part, a, b, mask, n, C, splits, 2);
    } else {
        dim3 grid((unsigned)C, (unsigned)splits);
        ACT_LAUNCH(k_bn_partial, grid, THREADS, (part, a, b, mask, B, C, S),
                   (part, (const bf16 *)a, (const bf16 *)b, (const bf16 *)mask, B, C, S));
    }
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
    bn_reduce(sums, inp, NULL, NULL, B, C, S);
}

static void cuda_bn_bwd_sums(double *sums, const float *dout, const float *xhat, int B, int C,
                             int S)
{
    bn_reduce(sums, dout, xhat, NULL, B, C, S);
}

/* bn_bwd_sums of the relu's input gradient: dout (the relu's) where out > 0, else 0. */
static void cuda_bn_relu_bwd_sums(double *sums, const float *dout, const float *out,
                                  const float *xhat, int B, int C, int S)
{
    bn_reduce(sums, dout, xhat, out, B, C, S);
}

/* out = gamma * xhat + beta, with relu then max(0, that) as elementwise.cu's relu1: one
 * expression for both, so that the fused op is bn_fwd_apply + relu_fwd bit for bit. Element
 * i is of channel (i / inner) % C: inner S (NCHW) or 1 (NHWC). */
template <typename A>
__global__ void k_bn_fwd_apply(A *out, A *xhat, const A *inp, const float *mean,
                               const float *invstd, const float *gamma, const float *beta, size_t n,
                               int C, int inner, int relu)
{
    GRID_STRIDE(i, n)
    {
        const int c = (int)((i / (size_t)inner) % (size_t)C);
        const float xh = (act_ld(inp[i]) - mean[c]) * invstd[c];
        if (xhat)
            xhat[i] = act_st<A>(xh);
        const float y = gamma[c] * xh + beta[c];
        out[i] = act_st<A>(relu ? (y > 0 ? y : 0) : y);
    }
}

/* k_bn_fwd_apply<bf16> on vectors of 8 (internal.cuh bf16x8), each element's channel stepped
 * on from the vector's first (chan_walk), then the n % 8 tail one at a time. */
__global__ void k_bn_fwd_apply8(bf16 *out, bf16 *xhat, const bf16 *inp, const float *mean,
                                const float *invstd, const float *gamma, const float *beta,
                                size_t n, int C, int inner, int relu)
{
    const size_t n8 = n / 8;
    GRID_STRIDE(i, n8)
    {
        float x[8], y[8];
        act_ld8(x, inp, i);
        chan_walk w = chan_at(8 * i, C, inner);
        for (int j = 0; j < 8; j++) {
            const int c = w.c;
            x[j] = (x[j] - mean[c]) * invstd[c];
            const float v = gamma[c] * x[j] + beta[c];
            y[j] = relu ? (v > 0 ? v : 0) : v;
            chan_next(&w, C, inner);
        }
        if (xhat)
            act_st8(xhat, i, x);
        act_st8(out, i, y);
    }
    GRID_STRIDE(t, n - 8 * n8)
    {
        const size_t i = 8 * n8 + t;
        const int c = (int)((i / (size_t)inner) % (size_t)C);
        const float xh = (act_ld(inp[i]) - mean[c]) * invstd[c];
        if (xhat)
            xhat[i] = act_st<bf16>(xh);
        const float y = gamma[c] * xh + beta[c];
        out[i] = act_st<bf16>(relu ? (y > 0 ? y : 0) : y);
    }
}

/* The batchnorm's apply over (B,C,S) (channels-last: (B,S,C)), then relu (relu != 0). */
static void bn_apply(float *out, float *xhat, const float *inp, const float *mean,
                     const float *invstd, const float *gamma, const float *beta, int B, int C,
                     int S, int relu)
{
    const size_t n = (size_t)B * C * S;
    if (!n)
        return;
    const int inner = nhwc_on((size_t)S) ? 1 : S;
    const void *p[] = {out, xhat, inp};
    if (g_cuda.act16 && vec4_ok(p, 3)) {
        LAUNCH(k_bn_fwd_apply8, blocks_for((n + 7) / 8), THREADS, (bf16 *)out, (bf16 *)xhat,
               (const bf16 *)inp, mean, invstd, gamma, beta, n, C, inner, relu);
        return;
    }
    ACT_LAUNCH(k_bn_fwd_apply, blocks_for(n), THREADS,
               (out, xhat, inp, mean, invstd, gamma, beta, n, C, inner, relu),
               ((bf16 *)out, (bf16 *)xhat, (const bf16 *)inp, mean, invstd, gamma, beta, n, C,
                inner, relu));
}

static void cuda_bn_fwd_apply(float *out, float *xhat, const float *inp, const float *mean,
                              const float *invstd, const float *gamma, const float *beta, int B,
                              int C, int S)
{
    bn_apply(out, xhat, inp, mean, invstd, gamma, beta, B, C, S, 0);
}

static void cuda_bn_relu_fwd_apply(float *out, float *xhat, const float *inp, const float *mean,
                                   const float *invstd, const float *gamma, const float *beta,
                                   int B, int C, int S)
{
    bn_apply(out, xhat, inp, mean, invstd, gamma, beta, B, C, S, 1);
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

/* dinp = gamma invstd (dy - mean dy - xhat mean dy*xhat), dy = dout, or with mask (a relu's
 * output) dout through the relu's backward (bn_relu_grad); channel as k_bn_fwd_apply's. */
template <typename A>
__global__ void k_bn_bwd_apply(A *dinp, const A *dout, const A *mask, const A *xhat,
                               const float *invstd, const float *gamma, const double *global,
                               size_t n, int C, int inner)
{
    const double count = global[2 * C];
    GRID_STRIDE(i, n)
    {
        const int c = (int)((i / (size_t)inner) % (size_t)C);
        const float mdy = (float)(global[c] / count), mdyx = (float)(global[C + c] / count);
        const float f = gamma[c] * invstd[c];
        const float dy = mask ? bn_relu_grad(act_ld(mask[i]), act_ld(dout[i])) : act_ld(dout[i]);
        dinp[i] = act_st<A>(f * (dy - mdy - act_ld(xhat[i]) * mdyx));
    }
}

/* k_bn_bwd_apply<bf16> on vectors of 8, channels as k_bn_fwd_apply8's, then the tail. */
__global__ void k_bn_bwd_apply8(bf16 *dinp, const bf16 *dout, const bf16 *mask, const bf16 *xhat,
                                const float *invstd, const float *gamma, const double *global,
                                size_t n, int C, int inner)
{
    const double count = global[2 * C];
    const size_t n8 = n / 8;
    GRID_STRIDE(i, n8)
    {
        float dy[8], xh[8], y[8];
        act_ld8(dy, dout, i);
        act_ld8(xh, xhat, i);
        if (mask) {
            act_ld8(y, mask, i);
            for (int j = 0; j < 8; j++)
                dy[j] = bn_relu_grad(y[j], dy[j]);
        }
        chan_walk w = chan_at(8 * i, C, inner);
        int c = -1; /* the channel whose factors mdy, mdyx, f are in hand */
        float mdy = 0, mdyx = 0, f = 0;
        for (int j = 0; j < 8; j++) {
            if (w.c != c) {
                c = w.c;
                mdy = (float)(global[c] / count), mdyx = (float)(global[C + c] / count);
                f = gamma[c] * invstd[c];
            }
            dy[j] = f * (dy[j] - mdy - xh[j] * mdyx);
            chan_next(&w, C, inner);
        }
        act_st8(dinp, i, dy);
    }
    GRID_STRIDE(t, n - 8 * n8)
    {
        const size_t i = 8 * n8 + t;
        const int c = (int)((i / (size_t)inner) % (size_t)C);
        const float mdy = (float)(global[c] / count), mdyx = (float)(global[C + c] / count);
        const float f = gamma[c] * invstd[c];
        const float dy = mask ? bn_relu_grad(act_ld(mask[i]), act_ld(dout[i])) : act_ld(dout[i]);
        dinp[i] = act_st<bf16>(f * (dy - mdy - act_ld(xhat[i]) * mdyx));
    }
}

/* The parameter gradients from local_sums, then dinp (NULL: not needed); mask as above. */
static void bn_bwd_apply(float *dinp, float *dgamma, float *dbeta, const float *dout,
                         const float *mask, const float *xhat, const float *invstd,
                         const float *gamma, const double *local_sums, const double *global_sums,
                         int B, int C, int S)
{
    if (C <= 0)
        return;
    LAUNCH(k_bn_param_grads, (C + THREADS - 1) / THREADS, THREADS, dgamma, dbeta, local_sums, C);
    const size_t n = (size_t)B * C * S;
    if (!dinp || !n)
        return;
    const int inner = nhwc_on((size_t)S) ? 1 : S;
    const void *p[] = {dinp, dout, mask, xhat};
    if (g_cuda.act16 && vec4_ok(p, 4)) {
        LAUNCH(k_bn_bwd_apply8, blocks_for((n + 7) / 8), THREADS, (bf16 *)dinp, (const bf16 *)dout,
               (const bf16 *)mask, (const bf16 *)xhat, invstd, gamma, global_sums, n, C, inner);
        return;
    }
    ACT_LAUNCH(k_bn_bwd_apply, blocks_for(n), THREADS,
               (dinp, dout, mask, xhat, invstd, gamma, global_sums, n, C, inner),
               ((bf16 *)dinp, (const bf16 *)dout, (const bf16 *)mask, (const bf16 *)xhat, invstd,
                gamma, global_sums, n, C, inner));
}

static void cuda_bn_bwd_apply(float *dinp, float *dgamma, float *dbeta, const float *dout,
                              const float *xhat, const float *invstd, const float *gamma,
                              const double *local_sums, const double *global_sums, int B, int C,
                              int S)
{
    bn_bwd_apply(dinp, dgamma, dbeta, dout, NULL, xhat, invstd, gamma, local_sums, global_sums, B,
                 C, S);
}

static void cuda_bn_relu_bwd_apply(float *dinp, float *dgamma, float *dbeta, const float *dout,
                                   const float *out, const float *xhat, const float *invstd,
                                   const float *gamma, const double *local_sums,
                                   const double *global_sums, int B, int C, int S)
{
    bn_bwd_apply(dinp, dgamma, dbeta, dout, out, xhat, invstd, gamma, local_sums, global_sums, B, C,
                 S);
}

/* This part's entries of the ops table. */
void cuda_table_normpool(struct ddp_backend *t)
{
    t->maxpool_fwd = cuda_maxpool_fwd;
    t->maxpool_bwd = cuda_maxpool_bwd;
    t->relu_maxpool_fwd = cuda_relu_maxpool_fwd;
    t->maxpool_relu_bwd = cuda_maxpool_relu_bwd;
    t->maxpool_relu_bwd_db = cuda_maxpool_relu_bwd_db;
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
    t->bn_relu_fwd_apply = cuda_bn_relu_fwd_apply;
    t->bn_relu_bwd_sums = cuda_bn_relu_bwd_sums;
    t->bn_relu_bwd_apply = cuda_bn_relu_bwd_apply;
}

/*
 * layout.cu - the CUDA backend's channels-last activations (backend.h set_layout; see
 * internal.cuh for the parts): the table's to_nhwc and to_nchw (a tiled transpose through shared
 * memory), and the (B, H, W, C) kernels of the spatial ops that normpool.cu's entries hand over
 * to when g_cuda.layout is DDP_LAYOUT_NHWC (nhwc_on): max and average pools, relu + maxpool
 * with a per-channel bias, the global average pool, and the per-channel column sums of a
 * (rows, C) matrix (batchnorm's statistics, a channels-last bias gradient).
 *
 * Each kernel equals its NCHW sibling in normpool.cu on the permuted tensors, bit for bit: the
 * same window order, the same strict first-maximum rule, the same float sums in the same order
 * (avgpool's window, gap's positions). Only the column sums group their double additions
 * differently from the NCHW reduction (rows, not channel planes), so batchnorm's statistics
 * may differ from the NCHW ones in the last bits of a double. The layout choice (conv.cu) and
 * the convolutions themselves are left to conv.cu and conv_dnn.cu.
 *
 * Every kernel reads and writes activations in the storage in force (g_cuda.act16: fp32 or
 * bf16, internal.cuh act_ld / act_st) and computes in float as the fp32 instance does; the
 * argmax, the biases and the double sums keep their types. act_from_f32 and act_to_f32 (the
 * model's input in, its logits out) convert between fp32 and that storage.
 *
 * Dimension letters as in internal.cuh; with the channel innermost, an NHWC activation is a
 * (B*S, C) matrix, S = H*W positions.
 */
#include "backend/cuda/internal.cuh"

/* ---- transposes --------------------------------------------------------------------------- */

/* Side of the square tiles of the transpose. */
#define TILE 32

/* out (B, Q, R) = inp (B, R, Q) transposed per sample: one block per TILE x TILE tile (tiles
 * beyond the grid taken in turn), read along Q and written along R, both coalesced, through a
 * padded shared tile (no bank conflicts). blockDim.x a multiple of TILE. Read as X, stored as
 * Y (the activation storage; act_from_f32: fp32 in), through a float tile: exact when X = Y. */
template <typename X, typename Y>
__global__ void k_transpose(Y *out, const X *inp, size_t B, int R, int Q)
{
    __shared__ float tile[TILE][TILE + 1];
    const size_t tr = ((size_t)R + TILE - 1) / TILE, tq = ((size_t)Q + TILE - 1) / TILE;
    const size_t n = B * tr * tq, RQ = (size_t)R * Q;
    const int tx = threadIdx.x % TILE, ty = threadIdx.x / TILE, rows = blockDim.x / TILE;
    for (size_t t = blockIdx.x; t < n; t += gridDim.x) {
        const size_t b = t / (tr * tq), rem = t % (tr * tq);
        const int r0 = (int)(rem / tq) * TILE, q0 = (int)(rem % tq) * TILE;
        const X *x = inp + b * RQ;
        Y *y = out + b * RQ;
        for (int i = ty; i < TILE; i += rows)
            if (r0 + i < R && q0 + tx < Q)
                tile[i][tx] = act_ld(x[(size_t)(r0 + i) * Q + q0 + tx]);
        __syncthreads();
        for (int i = ty; i < TILE; i += rows)
            if (q0 + i < Q && r0 + tx < R)
                y[(size_t)(q0 + i) * R + r0 + tx] = act_st<Y>(tile[tx][i]);
        __syncthreads(); /* the tile is rewritten by the next turn */
    }
}

/* out (B, Q, R) = inp (B, R, Q), both activations; where R or Q is 1 both are the same
 * bytes: one copy. */
static void transpose(float *out, const float *inp, int B, int R, int Q)
{
    const size_t n = (size_t)B * R * Q;
    if (!n)
        return;
    if (R == 1 || Q == 1) {
        CUDA_CHECK(
            cudaMemcpyAsync(out, inp, act_bytes() * n, cudaMemcpyDeviceToDevice, g_cuda.stream));
        return;
    }
    const size_t tiles =
        (size_t)B * (((size_t)R + TILE - 1) / TILE) * (((size_t)Q + TILE - 1) / TILE);
    if (g_cuda.act16)
        LAUNCH((k_transpose<bf16, bf16>), blocks_for(tiles * THREADS), THREADS, (bf16 *)out,
               (const bf16 *)inp, (size_t)B, R, Q);
    else
        LAUNCH((k_transpose<float, float>), blocks_for(tiles * THREADS), THREADS, out, inp,
               (size_t)B, R, Q);
}

/* backend.h to_nhwc: out (B, S, C) = inp (B, C, S). */
static void cuda_to_nhwc(float *out, const float *inp, int B, int C, int S)
{
    transpose(out, inp, B, C, S);
}

/* backend.h to_nchw: out (B, C, S) = inp (B, S, C). */
static void cuda_to_nchw(float *out, const float *inp, int B, int C, int S)
{
    transpose(out, inp, B, S, C);
}

/* ---- fp32 in and out -------------------------------------------------------------------------- */

template <typename Y, typename X> __global__ void k_convert(Y *out, const X *inp, size_t n)
{
    GRID_STRIDE(i, n) out[i] = act_st<Y>(act_ld(inp[i]));
}

struct op_copy { /* internal.cuh map1_8 */
    __device__ float operator()(float v) const
    {
        return v;
    }
};

/* k_convert on vectors of 8 (internal.cuh bf16x8: 16 bytes of bf16, 32 of fp32), then the
 * n % 8 tail one at a time. */
template <typename Y, typename X> __global__ void k_convert8(Y *out, const X *inp, size_t n)
{
    map1_8(out, inp, n, op_copy());
}

/* out (n, storage Y) = inp (n, storage X), the one of fp32 and bf16 on each side. */
template <typename Y, typename X> static void convert(Y *out, const X *inp, size_t n)
{
    const void *p[] = {out, inp};
    if (vec4_ok(p, 2))
        LAUNCH((k_convert8<Y, X>), blocks_for((n + 7) / 8), THREADS, out, inp, n);
    else
        LAUNCH((k_convert<Y, X>), blocks_for(n), THREADS, out, inp, n);
}

/* backend.h act_from_f32: out (activations; (B, S, C) where nhwc_on(S)) = inp (B, C, S) fp32,
 * each value rounded to the storage once. */
static void cuda_act_from_f32(float *out, const float *inp, int B, int C, int S)
{
    const size_t n = (size_t)B * C * S;
    if (!n)
        return;
    if (!g_cuda.act16) {
        if (nhwc_on((size_t)S))
            transpose(out, inp, B, C, S);
        else
            CUDA_CHECK(cudaMemcpyAsync(out, inp, sizeof(float) * n, cudaMemcpyDeviceToDevice,
                                       g_cuda.stream));
        return;
    }
    if (nhwc_on((size_t)S) && C > 1) {
        const size_t tiles =
            (size_t)B * (((size_t)C + TILE - 1) / TILE) * (((size_t)S + TILE - 1) / TILE);
        LAUNCH((k_transpose<float, bf16>), blocks_for(tiles * THREADS), THREADS, (bf16 *)out, inp,
               (size_t)B, C, S);
    } else {
        convert((bf16 *)out, inp, n);
    }
}

/* backend.h act_to_f32: out (n floats) = inp (n activations), exact. */
static void cuda_act_to_f32(float *out, const float *inp, size_t n)
{
    if (!n)
        return;
    if (g_cuda.act16)
        convert(out, (const bf16 *)inp, n);
    else
        CUDA_CHECK(
            cudaMemcpyAsync(out, inp, sizeof(float) * n, cudaMemcpyDeviceToDevice, g_cuda.stream));
}

/* ---- pools -----------------------------------------------------------------------------------
 * One thread per output (forward) or input (backward) element, c = index % C innermost, so that
 * a warp reads neighbouring channels of one pixel. The argmax is what normpool.cu's kernels
 * store (the place h*W + w in the channel's plane, or the byte i*k + j in the window), so that
 * it too is the NCHW one permuted. I as normpool.cu's pools: uint32_t below 2^32 elements. */

/* Output o of a (B, OH, OW, C) pool: its channel, the offset of its sample's first input
 * element, and its window's top-left pixel (oh*k, ow*k). */
template <typename I> struct pool_at {
    I c, base;
    int oh, ow;
};

template <typename I>
__device__ __forceinline__ pool_at<I> pool_out_at(I o, I C, int H, int W, int k)
{
    const I OH = (I)(H / k), OW = (I)(W / k), p = o / C;
    pool_at<I> a;
    a.c = o - p * C;
    a.ow = (int)(p % OW);
    a.oh = (int)((p / OW) % OH);
    a.base = (p / OW / OH) * (I)H * (I)W * C;
    return a;
}

template <typename A, typename I>
__global__ void k_maxpool_fwd_nhwc(A *out, int32_t *argmax, const A *inp, I n, I C, int H, int W,
                                   int k)
{
    GRID_STRIDE(o_, n)
    {
        const pool_at<I> a = pool_out_at<I>((I)o_, C, H, W, k);
        const A *x = inp + a.base + a.c;
        int best = (a.oh * k) * W + a.ow * k;
        float m = act_ld(x[(I)best * C]);
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++) {
                const int idx = (a.oh * k + i) * W + a.ow * k + j;
                const float v = act_ld(x[(I)idx * C]);
                if (v > m) { /* strict: the first maximum wins, as PyTorch */
                    m = v;
                    best = idx;
                }
            }
        out[o_] = act_st<A>(m);
        argmax[o_] = best;
    }
}

/* out = the first maximum of relu(x + b[c]) over each window (b NULL: relu(x)), argmax its
 * place i*k + j as one byte: k_relu_maxpool_fwd's expressions, channel innermost. Each value is
 * compared as stored (bf16: rounded), so the fused op picks bias_relu + maxpool's argmax. */
template <typename A, typename I>
__global__ void k_relu_maxpool_fwd_nhwc(A *out, uint8_t *argmax, const A *inp, const float *b, I n,
                                        I C, int H, int W, int k)
{
    GRID_STRIDE(o_, n)
    {
        const pool_at<I> a = pool_out_at<I>((I)o_, C, H, W, k);
        const A *x = inp + a.base + a.c + ((I)(a.oh * k) * (I)W + (I)(a.ow * k)) * C;
        const float bias = b ? b[a.c] : 0.0f;
        float m = 0;
        int best = -1;
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++) {
                const float xv = act_ld(x[((I)i * (I)W + (I)j) * C]);
                float v = b ? xv + bias : xv;
                v = act_ld(act_st<A>(v > 0 ? v : 0)); /* as bias_relu stores it (bf16) */
                if (best < 0 || v > m) {
                    m = v;
                    best = i * k + j;
                }
            }
        out[o_] = act_st<A>(m);
        argmax[o_] = (uint8_t)best;
    }
}

/* Input element idx of a (B, H, W, C) pool's input: its pixel (h, w) and the index of the
 * output whose window holds it, or -1 (floor mode: the last rows and columns have none). */
template <typename I>
__device__ __forceinline__ I pool_in_at(I idx, I C, int H, int W, int k, int *h, int *w)
{
    const I OH = (I)(H / k), OW = (I)(W / k), HW = (I)H * (I)W, p = idx / C;
    const I c = idx - p * C, bi = p / HW;
    const int hw = (int)(p - bi * HW);
    *h = hw / W;
    *w = hw - *h * W;
    const int oh = *h / k, ow = *w / k;
    if (oh >= (int)OH || ow >= (int)OW)
        return (I)-1;
    return ((bi * OH + (I)oh) * OW + (I)ow) * C + c;
}

/* Gathered, not scattered, as k_maxpool_bwd: each input pixel has at most one window. */
template <typename A, typename I>
__global__ void k_maxpool_bwd_nhwc(A *dinp, const A *dout, const int32_t *argmax, I n, I C, int H,
                                   int W, int k)
{
    GRID_STRIDE(idx_, n)
    {
        int h, w;
        const I o = pool_in_at<I>((I)idx_, C, H, W, k, &h, &w);
        dinp[idx_] = act_st<A>(o != (I)-1 && argmax[o] == h * W + w ? act_ld(dout[o]) : 0.0f);
    }
}

/* k_maxpool_relu_bwd, channel innermost. */
template <typename A, typename I>
__global__ void k_maxpool_relu_bwd_nhwc(A *dinp, const A *dout, const A *out, const uint8_t *argmax,
                                        I n, I C, int H, int W, int k)
{
    GRID_STRIDE(idx_, n)
    {
        int h, w;
        const I o = pool_in_at<I>((I)idx_, C, H, W, k, &h, &w);
        float v = 0;
        if (o != (I)-1 && argmax[o] == (h % k) * k + (w % k) && act_ld(out[o]) > 0)
            v = act_ld(dout[o]);
        dinp[idx_] = act_st<A>(v);
    }
}

/* k_avgpool_fwd, channel innermost: the window summed in the same (i, j) order. */
template <typename A>
__global__ void k_avgpool_fwd_nhwc(A *out, const A *inp, size_t n, size_t C, int H, int W, int k,
                                   float inv)
{
    GRID_STRIDE(o, n)
    {
        const pool_at<size_t> a = pool_out_at<size_t>(o, C, H, W, k);
        const A *x = inp + a.base + a.c;
        float s = 0;
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++)
                s += act_ld(x[((size_t)(a.oh * k + i) * W + a.ow * k + j) * C]);
        out[o] = act_st<A>(s * inv);
    }
}

template <typename A>
__global__ void k_avgpool_bwd_nhwc(A *dinp, const A *dout, size_t n, size_t C, int H, int W, int k,
                                   float inv)
{
    GRID_STRIDE(idx, n)
    {
        int h, w;
        const size_t o = pool_in_at<size_t>(idx, C, H, W, k, &h, &w);
        dinp[idx] = act_st<A>(o != (size_t)-1 ? act_ld(dout[o]) * inv : 0.0f);
    }
}

/* 1 when a pool's input (B, C, H, W) has fewer than 2^32 elements: 32-bit indices. */
static int idx32(int B, int C, int H, int W)
{
    return (size_t)B * C * H * W <= UINT32_MAX;
}

/* f(A(), I()) with A the activation storage in force and I the index type of a pool over
 * (B, C, H, W): the kernel instance to launch. */
template <typename F> static void act_idx(int B, int C, int H, int W, F f)
{
    const int i32 = idx32(B, C, H, W);
    if (g_cuda.act16 && i32)
        f(bf16(), uint32_t());
    else if (g_cuda.act16)
        f(bf16(), size_t());
    else if (i32)
        f(0.0f, uint32_t());
    else
        f(0.0f, size_t());
}

void nhwc_maxpool_fwd(float *out, int32_t *argmax, const float *inp, int B, int C, int H, int W,
                      int k)
{
    const size_t n = (size_t)B * C * (H / k) * (W / k);
    if (!n)
        return;
    act_idx(B, C, H, W, [&](auto a, auto i) {
        using A = decltype(a);
        using I = decltype(i);
        LAUNCH((k_maxpool_fwd_nhwc<A, I>), blocks_for(n), THREADS, (A *)out, argmax, (const A *)inp,
               (I)n, (I)C, H, W, k);
    });
}

void nhwc_maxpool_bwd(float *dinp, const float *dout, const int32_t *argmax, int B, int C, int H,
                      int W, int k)
{
    const size_t n = (size_t)B * C * H * W;
    if (!n)
        return;
    act_idx(B, C, H, W, [&](auto a, auto i) {
        using A = decltype(a);
        using I = decltype(i);
        LAUNCH((k_maxpool_bwd_nhwc<A, I>), blocks_for(n), THREADS, (A *)dinp, (const A *)dout,
               argmax, (I)n, (I)C, H, W, k);
    });
}

void nhwc_relu_maxpool(float *out, uint8_t *argmax, const float *inp, const float *b, int B, int C,
                       int H, int W, int k)
{
    const size_t n = (size_t)B * C * (H / k) * (W / k);
    if (!n)
        return;
    act_idx(B, C, H, W, [&](auto a, auto i) {
        using A = decltype(a);
        using I = decltype(i);
        LAUNCH((k_relu_maxpool_fwd_nhwc<A, I>), blocks_for(n), THREADS, (A *)out, argmax,
               (const A *)inp, b, (I)n, (I)C, H, W, k);
    });
}

void nhwc_maxpool_relu_bwd(float *dinp, const float *dout, const float *out, const uint8_t *argmax,
                           int B, int C, int H, int W, int k)
{
    const size_t n = (size_t)B * C * H * W;
    if (!n)
        return;
    act_idx(B, C, H, W, [&](auto a, auto i) {
        using A = decltype(a);
        using I = decltype(i);
        LAUNCH((k_maxpool_relu_bwd_nhwc<A, I>), blocks_for(n), THREADS, (A *)dinp, (const A *)dout,
               (const A *)out, argmax, (I)n, (I)C, H, W, k);
    });
}

void nhwc_avgpool_fwd(float *out, const float *inp, int B, int C, int H, int W, int k)
{
    const size_t n = (size_t)B * C * (H / k) * (W / k);
    if (!n)
        return;
    const float inv = 1.0f / (float)(k * k);
    ACT_LAUNCH(k_avgpool_fwd_nhwc, blocks_for(n), THREADS, (out, inp, n, (size_t)C, H, W, k, inv),
               ((bf16 *)out, (const bf16 *)inp, n, (size_t)C, H, W, k, inv));
}

void nhwc_avgpool_bwd(float *dinp, const float *dout, int B, int C, int H, int W, int k)
{
    const size_t n = (size_t)B * C * H * W;
    if (!n)
        return;
    const float inv = 1.0f / (float)(k * k);
    ACT_LAUNCH(k_avgpool_bwd_nhwc, blocks_for(n), THREADS, (dinp, dout, n, (size_t)C, H, W, k, inv),
               ((bf16 *)dinp, (const bf16 *)dout, n, (size_t)C, H, W, k, inv));
}

/* ---- global average pool -------------------------------------------------------------------- */

/* out (B, C) = mean over S of inp (B, S, C): one thread per (b, c), positions in order, as
 * k_gap_fwd (the same float sum); neighbouring threads read neighbouring channels. */
template <typename A> __global__ void k_gap_fwd_nhwc(A *out, const A *inp, size_t BC, int C, int S)
{
    GRID_STRIDE(r, BC)
    {
        const size_t b = r / (size_t)C, c = r - b * C;
        const A *x = inp + b * S * C + c;
        float s = 0;
        for (int i = 0; i < S; i++)
            s += act_ld(x[(size_t)i * C]);
        out[r] = act_st<A>(s / (float)S);
    }
}

/* dinp (B, S, C) = dout (B, C) / S. */
template <typename A> __global__ void k_gap_bwd_nhwc(A *dinp, const A *dout, size_t n, int C, int S)
{
    GRID_STRIDE(i, n)
    {
        const size_t c = i % (size_t)C, b = i / ((size_t)S * C);
        dinp[i] = act_st<A>(act_ld(dout[b * C + c]) / (float)S);
    }
}

void nhwc_gap_fwd(float *out, const float *inp, int B, int C, int S)
{
    const size_t BC = (size_t)B * C;
    if (!BC)
        return;
    ACT_LAUNCH(k_gap_fwd_nhwc, blocks_for(BC), THREADS, (out, inp, BC, C, S),
               ((bf16 *)out, (const bf16 *)inp, BC, C, S));
}

void nhwc_gap_bwd(float *dinp, const float *dout, int B, int C, int S)
{
    const size_t n = (size_t)B * C * S;
    if (!n)
        return;
    ACT_LAUNCH(k_gap_bwd_nhwc, blocks_for(n), THREADS, (dinp, dout, n, C, S),
               ((bf16 *)dinp, (const bf16 *)dout, n, C, S));
}

/* ---- per-channel column sums -----------------------------------------------------------------
 * Sums over the rows of a (rows, C) matrix, per column, in double: block (x, y) covers the
 * columns of tile x (tw of them, tw a power of two <= 32 fitted to C) and the rows y*rb + ty,
 * y*rb + ty + splits*rb, ... (rb = THREADS / tw rows a pass): a warp reads 32 / tw whole
 * neighbouring row segments. The block's rb partial sums per column are then added in order of
 * ty, the splits' in order of y (second pass): the grouping depends on rows and C only, so the
 * same bits every run, and no single block covers more than 1/splits of a column. */

/* Columns of a tile: the least power of two >= C, at most 32 (one warp's width). */
static int colsum_tile(int C)
{
    int tw = 1;
    while (tw < C && tw < 32)
        tw *= 2;
    return tw;
}

/* part[(c * splits + y) * np + {0, 1}]: sum a, and (np 2) sum a^2 (b NULL) or sum a*b. With mask
 * (a relu's output), a is first taken through the relu's backward (mask > 0 ? a : 0). */
template <typename A>
__global__ void k_colsum_partial(double *part, const A *a, const A *b, const A *mask, size_t rows,
                                 int C, int tw, int np)
{
    __shared__ double sh[2][THREADS];
    const int tx = threadIdx.x % tw, ty = threadIdx.x / tw, rb = blockDim.x / tw;
    const int c = blockIdx.x * tw + tx;
    const size_t y = blockIdx.y, splits = gridDim.y;
    double s = 0, s2 = 0;
    if (c < C)
        for (size_t r = y * rb + ty; r < rows; r += splits * rb) {
            const size_t off = r * C + c;
            const float av = act_ld(a[off]);
            const double v = mask ? (act_ld(mask[off]) > 0 ? av : 0.0f) : av;
            s += v;
            s2 += b ? v * (double)act_ld(b[off]) : v * v;
        }
    sh[0][threadIdx.x] = s;
    sh[1][threadIdx.x] = s2;
    __syncthreads();
    if (ty != 0 || c >= C)
        return;
    for (int i = 1; i < rb; i++) {
        s += sh[0][i * tw + tx];
        s2 += sh[1][i * tw + tx];
    }
    part[((size_t)c * splits + y) * np] = s;
    if (np == 2)
        part[((size_t)c * splits + y) * 2 + 1] = s2;
}

/* Blocks a column tile of the column sums of (rows, C): one per BN_ELEMS_PER_SPLIT elements of
 * the tile, at least 1, at most COLSUM_MAX_SPLITS. */
size_t colsum_splits(size_t rows, int C)
{
    const size_t splits =
        (rows * (size_t)colsum_tile(C) + BN_ELEMS_PER_SPLIT - 1) / BN_ELEMS_PER_SPLIT;
    return splits < 1 ? 1 : splits > COLSUM_MAX_SPLITS ? COLSUM_MAX_SPLITS : splits;
}

void colsum_partial(double *part, const float *a, const float *b, const float *mask, size_t rows,
                    int C, size_t splits, int np)
{
    const int tw = colsum_tile(C);
    dim3 grid((unsigned)((C + tw - 1) / tw), (unsigned)splits);
    ACT_LAUNCH(k_colsum_partial, grid, THREADS, (part, a, b, mask, rows, C, tw, np),
               (part, (const bf16 *)a, (const bf16 *)b, (const bf16 *)mask, rows, C, tw, np));
}

void colsum_add(float *db, const float *x, size_t rows, int C)
{
    if (C <= 0 || rows == 0)
        return;
    const size_t splits = colsum_splits(rows, C);
    double *part = (double *)ws_get(sizeof(double) * (size_t)C * splits);
    colsum_partial(part, x, NULL, NULL, rows, C, splits, 1);
    rowsum_finish(db, part, C, splits);
}

/* k_maxpool_relu_bwd_nhwc that also sums what it stores per channel (normpool.cu
 * maxpool_relu_bwd_db): dinp is a (B*H*W, C) matrix, each block walks its tile's columns and
 * rows as k_colsum_partial (np 1) does and adds the same values in the same order, so part
 * holds the bits colsum_partial gives on the written dinp, and rowsum_finish makes the bias
 * gradient colsum_add would. */
template <typename A, typename I>
__global__ void k_maxpool_relu_bwd_db_nhwc(double *part, A *dinp, const A *dout, const A *out,
                                           const uint8_t *argmax, I rows, int C, int H, int W,
                                           int k, int tw)
{
    __shared__ double sh[THREADS];
    const int tx = threadIdx.x % tw, ty = threadIdx.x / tw, rb = blockDim.x / tw;
    const int c = blockIdx.x * tw + tx, OH = H / k, OW = W / k;
    const I y = blockIdx.y, step = (I)gridDim.y * (I)rb, HW = (I)H * (I)W;
    double s = 0;
    if (c < C)
        for (I r = y * (I)rb + (I)ty; r < rows; r += step) {
            const I bi = r / HW;
            const int hw = (int)(r - bi * HW), h = hw / W, w = hw - h * W, oh = h / k, ow = w / k;
            float v = 0;
            if (oh < OH && ow < OW) {
                const I o = ((bi * (I)OH + (I)oh) * (I)OW + (I)ow) * (I)C + (I)c;
                if (argmax[o] == (h - oh * k) * k + (w - ow * k) && act_ld(out[o]) > 0)
                    v = act_ld(dout[o]);
            }
            const A st = act_st<A>(v);
            dinp[r * (I)C + (I)c] = st;
            s += act_ld(st);
        }
    sh[threadIdx.x] = s;
    __syncthreads();
    if (ty != 0 || c >= C)
        return;
    for (int i = 1; i < rb; i++)
        s += sh[i * tw + tx];
    part[(size_t)c * gridDim.y + y] = s;
}

/* The launch of k_maxpool_relu_bwd_db_nhwc for storage A, 32-bit indices where r + step never
 * wraps. */
template <typename A>
static void maxpool_relu_bwd_db_nhwc(double *part, float *dinp, const float *dout, const float *out,
                                     const uint8_t *argmax, size_t rows, int C, int H, int W, int k,
                                     size_t splits)
{
    const int tw = colsum_tile(C);
    const dim3 grid((unsigned)((C + tw - 1) / tw), (unsigned)splits);
    if (rows * C + splits * THREADS <= UINT32_MAX)
        LAUNCH((k_maxpool_relu_bwd_db_nhwc<A, uint32_t>), grid, THREADS, part, (A *)dinp,
               (const A *)dout, (const A *)out, argmax, (uint32_t)rows, C, H, W, k, tw);
    else
        LAUNCH((k_maxpool_relu_bwd_db_nhwc<A, size_t>), grid, THREADS, part, (A *)dinp,
               (const A *)dout, (const A *)out, argmax, rows, C, H, W, k, tw);
}

void nhwc_maxpool_relu_bwd_db(float *dinp, float *db, const float *dout, const float *out,
                              const uint8_t *argmax, int B, int C, int H, int W, int k)
{
    const size_t rows = (size_t)B * H * W;
    if (C <= 0 || rows == 0)
        return;
    const size_t splits = colsum_splits(rows, C);
    double *part = (double *)ws_get(sizeof(double) * (size_t)C * splits);
    if (g_cuda.act16)
        maxpool_relu_bwd_db_nhwc<bf16>(part, dinp, dout, out, argmax, rows, C, H, W, k, splits);
    else
        maxpool_relu_bwd_db_nhwc<float>(part, dinp, dout, out, argmax, rows, C, H, W, k, splits);
    rowsum_finish(db, part, C, splits);
}

/* cuda.h's test entries of this part. */
extern "C" size_t ddp_cuda_test_colsum(double *part, const float *a, const float *b,
                                       const float *mask, size_t rows, int C, int np)
{
    const size_t splits = colsum_splits(rows, C);
    colsum_partial(part, a, b, mask, rows, C, splits, np);
    return splits;
}

extern "C" void ddp_cuda_test_colsum_add(float *db, const float *x, size_t rows, int C)
{
    colsum_add(db, x, rows, C);
}

extern "C" void ddp_cuda_test_relu_maxpool(float *out, uint8_t *argmax, const float *inp,
                                           const float *b, int B, int C, int H, int W, int k)
{
    relu_maxpool(out, argmax, inp, b, B, C, H, W, k);
}

/* This part's entries of the ops table (set_layout and layout are conv.cu's). */
void cuda_table_layout(struct ddp_backend *t)
{
    t->to_nhwc = cuda_to_nhwc;
    t->to_nchw = cuda_to_nchw;
    t->act_from_f32 = cuda_act_from_f32;
    t->act_to_f32 = cuda_act_to_f32;
}

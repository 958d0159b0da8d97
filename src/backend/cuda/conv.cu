/*
 * conv.cu - the CUDA backend's conv2d (see internal.cuh for the parts): im2col per chunk of
 * samples + cuBLAS GEMMs, and cuDNN's convolutions with their plans (descriptors and
 * deterministic algorithms per shape and batch size); which of the two runs
 * (ddp_cuda_conv_path) and the table's conv entries that dispatch to it. It leaves opening
 * cuDNN to dlopen.cu, bf16 casts and GEMMs to blas.cu, the bias and relu epilogues to
 * elementwise.cu.
 */
#include "backend/cuda/internal.cuh"

/* ---- conv2d: im2col per chunk of nb samples + GEMMs ---------------------------------------- */

/* Floats of one conv chunk's im2col matrix: the batch is cut into chunks of nb samples with
 * nb*CKK*P at most this (64 MiB), so col stays bounded for any batch size. */
#define COL_CHUNK_FLOATS ((size_t)1 << 24)

/* The shape of backend.h with what follows from it. */
static struct conv_geom conv_geom_of(const struct ddp_conv_geom *g)
{
    struct conv_geom q;
    q.C = g->C;
    q.H = g->H;
    q.W = g->W;
    q.O = g->O;
    q.k = g->k;
    q.stride = g->stride;
    q.pad = g->pad;
    q.OH = (q.H + 2 * q.pad - q.k) / q.stride + 1;
    q.OW = (q.W + 2 * q.pad - q.k) / q.stride + 1;
    q.P = q.OH * q.OW;
    q.CKK = q.C * q.k * q.k;
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

static size_t cuda_conv_col_elems(int B, const struct ddp_conv_geom *g)
{
    const struct conv_geom q = conv_geom_of(g);
    const int nb = conv_chunk(B > 0 ? B : 1, q.CKK, q.P);
    return 2 * (size_t)q.CKK * (size_t)nb * (size_t)q.P; /* col and dcol of one chunk */
}

static void cuda_conv2d_fwd(float *out, float *col, const float *inp, const float *w,
                            const float *b, int B, const struct conv_geom *shape)
{
    const struct conv_geom q = *shape;
    const int O = q.O;
    const size_t n_out = (size_t)B * O * q.P;
    if (n_out == 0)
        return;
    if (b) {
        fill_bias(out, b, n_out, O, q.P);
    } else {
        CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float) * n_out, g_cuda.stream));
    }
    const int nbmax = conv_chunk(B, q.CKK, q.P);
    const float one = 1;
    const void *w16 = g_cuda.bf16.on ? as_bf16(w, (size_t)O * q.CKK, 0) : NULL;
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
        CUBLAS_CHECK(g_cuda.blas_fn.sgemm_strided_batched(
            g_cuda.blas, CUBLAS_OP_N, CUBLAS_OP_N, q.P, O, q.CKK, &one, col, Q, (long long)q.P, w,
            q.CKK, 0LL, &one, out + (size_t)i0 * O * q.P, q.P, (long long)O * q.P, nb));
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
                            const float *inp, const float *w, int B, const struct conv_geom *shape)
{
    const struct conv_geom q = *shape;
    const int C = q.C, H = q.H, W = q.W, O = q.O;
    if (B == 0 || q.P == 0)
        return;
    const int nbmax = conv_chunk(B, q.CKK, q.P);
    float *dcol = col + (size_t)q.CKK * nbmax * q.P;
    float *dyT = (float *)ws_get(sizeof(float) * (size_t)O * nbmax * q.P);
    const float one = 1, zero = 0;
    const void *w16 = g_cuda.bf16.on && dinp ? as_bf16(w, (size_t)O * q.CKK, 0) : NULL;
    for (int i0 = 0; i0 < B; i0 += nbmax) {
        const int nb = B - i0 < nbmax ? B - i0 : nbmax;
        const int Q = nb * q.P;
        const size_t ncol = (size_t)q.CKK * Q, ndy = (size_t)O * Q;
        LAUNCH(k_im2col, blocks_for(ncol), THREADS, col, inp, i0, nb, q);
        LAUNCH(k_conv_dout_t, blocks_for(ndy), THREADS, dyT, dout, i0, nb, O, q.P);
        if (g_cuda.bf16.on) {
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
        CUBLAS_CHECK(g_cuda.blas_fn.sgemm(g_cuda.blas, CUBLAS_OP_T, CUBLAS_OP_N, q.CKK, O, Q, &one,
                                          col, Q, dyT, Q, &one, dw, q.CKK));
        if (db) {
            LAUNCH(k_rowsum_add, O, THREADS, db, dyT, (size_t)Q);
        }
        if (dinp) {
            /* dcol (CKK,Q) = w^T (CKK,O) dyT (O,Q). Column-major: dcol^T (Q,CKK) =
             * dyT^T (Q,O) w (O,CKK), w stored as column-major (CKK,O): op T. */
            CUBLAS_CHECK(g_cuda.blas_fn.sgemm(g_cuda.blas, CUBLAS_OP_N, CUBLAS_OP_T, Q, q.CKK, O,
                                              &one, dyT, Q, w, q.CKK, &zero, dcol, Q));
            const size_t nin = (size_t)nb * C * H * W;
            LAUNCH(k_col2im, blocks_for(nin), THREADS, dinp, dcol, i0, nb, q);
        }
    }
}

/* ---- conv2d through cuDNN ---------------------------------------------------------------
 * cuDNN (the legacy convolution API of cuDNN 9) is opened at run time like cuBLAS: dnn_open()
 * dlopens the soname of the cuDNN the build was compiled against (libcudnn.so.9) when the
 * trainer chooses the convolution path (ddp_cuda_conv_path), and every call goes through
 * g_cuda.dnn_fn. Missing (or a build without cudnn.h, or [train] conv = im2col): the im2col + cuBLAS
 * functions above run instead. The twin build points the table at the twin's cuDNN
 * (tests/twin/cudnn.cc); DDP_EMU_NO_CUDNN=1 makes it missing.
 *
 * Plans: conv_plan (at model build) makes one plan per convolution shape (C,H,W,O,k,stride,
 * pad) with descriptors and, for the planned batch B, the first algorithm of each direction
 * that cuDNN's heuristics (_v7) list as deterministic and supported with a workspace of at
 * most DNN_WS_MAX, in FMA math (fp32) or default math (tf32, as PyTorch's allow_tf32); the
 * workspace is the caller's col buffer, sized by conv_plan's answer (the most of the three).
 * A call with another batch size (the last partial batch, evaluation) re-chooses within that
 * workspace in a second slot, kept for the next call of that size: host work only, no device
 * memory, no synchronisation, so steady steps stay free of both. */
#ifdef DDP_DNN

#define DNN_CHECK(call)                                                                   \
    do {                                                                                  \
        cudnnStatus_t s_ = (call);                                                        \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                   \
            ddp_die_at(__FILE__, __LINE__, DDP_EXIT_RUNTIME, "%s: cuDNN error %s", #call, \
                       g_cuda.dnn_fn.error_string(s_));                                   \
    } while (0)

/* Most workspace one convolution may plan for (bytes): the im2col path's col is 128 MiB. */
#define DNN_WS_MAX ((size_t)256 << 20)
/* Algorithms asked of each _v7 heuristic (more than cuDNN has of any direction). */
#define DNN_ALGOS 16

/* Index of the first deterministic, supported entry of a _v7 list in the math this run
 * allows (FMA for fp32; anything but a down-conversion for tf32) whose workspace fits cap per
 * its size query ws(i); -1 when none. */
template <typename Perf, typename WsFn>
static int dnn_pick(const Perf *p, int n, size_t cap, int tf32, WsFn ws)
{
    for (int i = 0; i < n; i++) {
        if (p[i].status != CUDNN_STATUS_SUCCESS || p[i].determinism != CUDNN_DETERMINISTIC ||
            p[i].memory > cap)
            continue;
        if (tf32 ? p[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
                 : p[i].mathType != CUDNN_FMA_MATH)
            continue;
        if (ws(i) <= cap)
            return i;
    }
    return -1;
}

/* Descriptors of slot s for batch B within cap workspace bytes; 0, or -1 with the direction
 * that has no algorithm in err. */
static int dnn_prepare(struct dnn_plan *pl, struct dnn_slot *s, int B, size_t cap, char *err,
                       size_t errlen)
{
    const struct conv_geom q = pl->q;
    const cudnnMathType_t math = tf32_math() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    if (!s->x) {
        DNN_CHECK(g_cuda.dnn_fn.create_tensor(&s->x));
        DNN_CHECK(g_cuda.dnn_fn.create_tensor(&s->y));
        for (int d = 0; d < 3; d++) {
            DNN_CHECK(g_cuda.dnn_fn.create_conv(&s->cv[d]));
            DNN_CHECK(g_cuda.dnn_fn.set_conv(s->cv[d], q.pad, q.pad, q.stride, q.stride, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        }
    }
    s->B = 0;
    DNN_CHECK(
        g_cuda.dnn_fn.set_tensor(s->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, q.C, q.H, q.W));
    DNN_CHECK(
        g_cuda.dnn_fn.set_tensor(s->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, q.O, q.OH, q.OW));
    for (int d = 0; d < 3; d++)
        DNN_CHECK(g_cuda.dnn_fn.set_math(s->cv[d], math));
    int n = 0, i;
    cudnnConvolutionFwdAlgoPerf_t pf[DNN_ALGOS];
    DNN_CHECK(
        g_cuda.dnn_fn.fwd_algos(g_cuda.dnn.h, s->x, pl->w, s->cv[0], s->y, DNN_ALGOS, &n, pf));
    i = dnn_pick(pf, n, cap, tf32_math(), [&](int j) {
        size_t b = SIZE_MAX;
        return g_cuda.dnn_fn.fwd_ws(g_cuda.dnn.h, s->x, pl->w, s->cv[0], s->y, pf[j].algo, &b) ==
                       CUDNN_STATUS_SUCCESS
                   ? b
                   : SIZE_MAX;
    });
    if (i < 0)
        return ddp_err(err, errlen, "forward");
    s->fwd = pf[i].algo;
    DNN_CHECK(g_cuda.dnn_fn.set_math(s->cv[0], pf[i].mathType));
    DNN_CHECK(g_cuda.dnn_fn.fwd_ws(g_cuda.dnn.h, s->x, pl->w, s->cv[0], s->y, s->fwd, &s->ws[0]));
    cudnnConvolutionBwdDataAlgoPerf_t pd[DNN_ALGOS];
    DNN_CHECK(
        g_cuda.dnn_fn.bwd_data_algos(g_cuda.dnn.h, pl->w, s->y, s->cv[1], s->x, DNN_ALGOS, &n, pd));
    i = dnn_pick(pd, n, cap, tf32_math(), [&](int j) {
        size_t b = SIZE_MAX;
        return g_cuda.dnn_fn.bwd_data_ws(g_cuda.dnn.h, pl->w, s->y, s->cv[1], s->x, pd[j].algo,
                                         &b) == CUDNN_STATUS_SUCCESS
                   ? b
                   : SIZE_MAX;
    });
    if (i < 0)
        return ddp_err(err, errlen, "backward data");
    s->bwd_data = pd[i].algo;
    DNN_CHECK(g_cuda.dnn_fn.set_math(s->cv[1], pd[i].mathType));
    DNN_CHECK(g_cuda.dnn_fn.bwd_data_ws(g_cuda.dnn.h, pl->w, s->y, s->cv[1], s->x, s->bwd_data,
                                        &s->ws[1]));
    cudnnConvolutionBwdFilterAlgoPerf_t pw[DNN_ALGOS];
    DNN_CHECK(g_cuda.dnn_fn.bwd_filter_algos(g_cuda.dnn.h, s->x, s->y, s->cv[2], pl->w, DNN_ALGOS,
                                             &n, pw));
    i = dnn_pick(pw, n, cap, tf32_math(), [&](int j) {
        size_t b = SIZE_MAX;
        return g_cuda.dnn_fn.bwd_filter_ws(g_cuda.dnn.h, s->x, s->y, s->cv[2], pl->w, pw[j].algo,
                                           &b) == CUDNN_STATUS_SUCCESS
                   ? b
                   : SIZE_MAX;
    });
    if (i < 0)
        return ddp_err(err, errlen, "backward filter");
    s->bwd_filter = pw[i].algo;
    DNN_CHECK(g_cuda.dnn_fn.set_math(s->cv[2], pw[i].mathType));
    DNN_CHECK(g_cuda.dnn_fn.bwd_filter_ws(g_cuda.dnn.h, s->x, s->y, s->cv[2], pl->w, s->bwd_filter,
                                          &s->ws[2]));
    s->B = B;
    s->tf32 = tf32_math();
    return 0;
}

static int geom_eq(const struct conv_geom *a, const struct conv_geom *b)
{
    return a->C == b->C && a->H == b->H && a->W == b->W && a->O == b->O && a->k == b->k &&
           a->stride == b->stride && a->pad == b->pad;
}

static struct dnn_plan *dnn_find(const struct conv_geom *q)
{
    for (int i = 0; i < g_cuda.dnn.nplans; i++)
        if (geom_eq(&g_cuda.dnn.plans[i].q, q))
            return &g_cuda.dnn.plans[i];
    return NULL;
}

[[noreturn]] static void dnn_no_algo(const struct conv_geom *q, int B, size_t cap, const char *dir)
{
    ddp_die("cuDNN has no deterministic %s algorithm for conv2d C%d %dx%d -> O%d k%d stride %d "
            "pad %d at batch %d within a %zu-byte workspace; set [train] conv = im2col",
            dir, q->C, q->H, q->W, q->O, q->k, q->stride, q->pad, B, cap);
}

/* conv_plan of the table with cuDNN: the plan of this shape for batch B (made or re-made),
 * its workspace in floats. */
static size_t dnn_plan_shape(const struct conv_geom *q, int B)
{
    struct dnn_plan *pl = dnn_find(q);
    char dir[32];
    if (!pl) {
        if (g_cuda.dnn.nplans == DNN_PLANS)
            ddp_die("more than %d convolution shapes in one model", DNN_PLANS);
        pl = &g_cuda.dnn.plans[g_cuda.dnn.nplans++];
        memset(pl, 0, sizeof *pl);
        pl->q = *q;
        pl->cap = DNN_WS_MAX;
        DNN_CHECK(g_cuda.dnn_fn.create_filter(&pl->w));
        DNN_CHECK(g_cuda.dnn_fn.set_filter(pl->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, q->O, q->C,
                                           q->k, q->k));
        if (dnn_prepare(pl, &pl->slot[0], B, pl->cap, dir, sizeof dir) != 0)
            dnn_no_algo(q, B, pl->cap, dir);
        const struct dnn_slot *s = &pl->slot[0];
        pl->cap = s->ws[0] > s->ws[1] ? s->ws[0] : s->ws[1];
        pl->cap = s->ws[2] > pl->cap ? s->ws[2] : pl->cap;
    } else if (dnn_prepare(pl, &pl->slot[0], B, pl->cap, dir, sizeof dir) != 0) {
        dnn_no_algo(q, B, pl->cap, dir); /* planned again (another model): within its cap */
    }
    return (pl->cap + sizeof(float) - 1) / sizeof(float);
}

/* The slot for a call with batch B: the planned one, or the other slot (re)prepared. */
static const struct dnn_slot *dnn_slot_for(const struct conv_geom *q, int B)
{
    struct dnn_plan *pl = dnn_find(q);
    if (!pl)
        ddp_die("conv2d C%d %dx%d -> O%d k%d stride %d pad %d was not planned: the backend's "
                "conv_plan must size col before the convolution runs (a bug)",
                q->C, q->H, q->W, q->O, q->k, q->stride, q->pad);
    for (int i = 0; i < 2; i++)
        if (pl->slot[i].B == B && pl->slot[i].tf32 == tf32_math())
            return &pl->slot[i];
    char dir[32];
    if (dnn_prepare(pl, &pl->slot[1], B, pl->cap, dir, sizeof dir) != 0)
        dnn_no_algo(q, B, pl->cap, dir);
    return &pl->slot[1];
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
    const struct dnn_slot *s = dnn_slot_for(q, B);
    const size_t n_out = (size_t)B * q->O * q->P;
    if (b && !relu) {
        fill_bias(out, b, n_out, q->O, q->P);
    }
    const float one = 1, beta = b && !relu ? 1.0f : 0.0f;
    DNN_CHECK(g_cuda.dnn_fn.fwd(g_cuda.dnn.h, &one, s->x, inp, dnn_find(q)->w, w, s->cv[0], s->fwd,
                                col, s->ws[0], &beta, s->y, out));
    if (relu) {
        bias_relu(out, b, n_out, q->O, q->P);
    }
}

static void dnn_conv2d_bwd(float *dinp, float *dw, float *db, float *col, const float *dout,
                           const float *inp, const float *w, int B, const struct conv_geom *q)
{
    const struct dnn_slot *s = dnn_slot_for(q, B);
    const cudnnFilterDescriptor_t wd = dnn_find(q)->w;
    const float one = 1, zero = 0;
    if (db)
        conv_bias_grad(db, dout, B, q->O, q->P);
    DNN_CHECK(g_cuda.dnn_fn.bwd_filter(g_cuda.dnn.h, &one, s->x, inp, s->y, dout, s->cv[2],
                                       s->bwd_filter, col, s->ws[2], &one, wd, dw));
    if (dinp)
        DNN_CHECK(g_cuda.dnn_fn.bwd_data(g_cuda.dnn.h, &one, wd, w, s->y, dout, s->cv[1],
                                         s->bwd_data, col, s->ws[1], &zero, s->x, dinp));
}

/* Which path: 1 for cuDNN. Chosen at ddp_cuda_conv_path; cuDNN if it loads when never
 * chosen (a program that makes the backend without the trainer); never under bf16 (the
 * precision may change after the choice: a program that remakes the backend). */
static int dnn_active(void)
{
    if (g_cuda.dnn.mode < 0) {
        char line[8];
        ddp_cuda_conv_path(1, line, sizeof line);
    }
    return g_cuda.dnn.mode == 1 && g_cuda.precision != DDP_PRECISION_BF16;
}

/* Open cuDNN and make its handle on the compute stream; 0, or with the reason in err -1 (not
 * found) or -2 (found, but it does not start on this GPU). */
static int dnn_start(char *err, size_t errlen)
{
    if (g_cuda.dnn.h)
        return 0;
    if (dnn_open(err, errlen) != 0)
        return -1;
    cudnnHandle_t h;
    cudnnStatus_t s = g_cuda.dnn_fn.create(&h);
    if (s != CUDNN_STATUS_SUCCESS) {
        ddp_err(err, errlen, "cudnnCreate: %s", g_cuda.dnn_fn.error_string(s));
        return -2;
    }
    if ((s = g_cuda.dnn_fn.set_stream(h, g_cuda.stream)) != CUDNN_STATUS_SUCCESS) {
        ddp_err(err, errlen, "cudnnSetStream: %s", g_cuda.dnn_fn.error_string(s));
        return -2;
    }
    g_cuda.dnn.h = h;
    return 0;
}

void dnn_version(char *out, size_t len)
{
    char why[8];
    if (dnn_open(why, sizeof why) != 0) {
        snprintf(out, len, "not found");
        return;
    }
    const size_t v = g_cuda.dnn_fn.get_version();
    snprintf(out, len, "%zu.%zu.%zu", v / 10000, v % 10000 / 100, v % 100);
}
#else /* built without cudnn.h: im2col + cuBLAS only */
static int dnn_start(char *err, size_t errlen)
{
    return ddp_err(err, errlen, "this ddptrain was built without cuDNN (no cudnn.h at build time)");
}
void dnn_version(char *out, size_t len)
{
    snprintf(out, len, "not built in");
}
#endif

/* The table's conv entries: cuDNN when it runs, else im2col + cuBLAS. */
static size_t conv2d_plan_any(int B, const struct ddp_conv_geom *g)
{
#ifdef DDP_DNN
    if (dnn_active()) {
        const struct conv_geom q = conv_geom_of(g);
        return dnn_plan_shape(&q, B > 0 ? B : 1);
    }
#endif
    return cuda_conv_col_elems(B, g);
}

static void conv2d_fwd_any(float *out, float *col, const float *inp, const float *w, const float *b,
                           int B, const struct ddp_conv_geom *g)
{
    const struct conv_geom q = conv_geom_of(g);
#ifdef DDP_DNN
    if (dnn_active()) {
        if ((size_t)B * q.O * q.P > 0)
            dnn_conv2d_fwd(out, col, inp, w, b, B, &q, 0);
        return;
    }
#endif
    cuda_conv2d_fwd(out, col, inp, w, b, B, &q);
}

/* conv2d + relu (backend.h): through cuDNN, one epilogue pass; on the im2col path the relu is
 * applied in place (no second buffer). */
static void conv2d_relu_fwd_any(float *out, float *col, const float *inp, const float *w,
                                const float *b, int B, const struct ddp_conv_geom *g)
{
    const struct conv_geom q = conv_geom_of(g);
    const size_t n_out = (size_t)B * q.O * q.P;
    if (n_out == 0)
        return;
#ifdef DDP_DNN
    if (dnn_active()) {
        dnn_conv2d_fwd(out, col, inp, w, b, B, &q, 1);
        return;
    }
#endif
    cuda_conv2d_fwd(out, col, inp, w, b, B, &q);
    bias_relu(out, NULL, n_out, q.O, q.P);
}

static void conv2d_bwd_any(float *dinp, float *dw, float *db, float *col, const float *dout,
                           const float *inp, const float *w, int B, const struct ddp_conv_geom *g)
{
    const struct conv_geom q = conv_geom_of(g);
#ifdef DDP_DNN
    if (dnn_active()) {
        if (B > 0 && q.P > 0)
            dnn_conv2d_bwd(dinp, dw, db, col, dout, inp, w, B, &q);
        return;
    }
#endif
    cuda_conv2d_bwd(dinp, dw, db, col, dout, inp, w, B, &q);
}

extern "C" int ddp_cuda_conv_path(int use_cudnn, char *line, size_t len)
{
    char why[400];
    if (g_cuda.device < 0) {
        snprintf(line, len, "%s", "");
        return 0;
    }
    if (!use_cudnn || g_cuda.precision == DDP_PRECISION_BF16) {
#ifdef DDP_DNN
        g_cuda.dnn.mode = 0;
#endif
        snprintf(line, len, "%s",
                 use_cudnn ? "im2col + cuBLAS, bf16 GEMMs ([train] precision = bf16; "
                             "the cuDNN path runs fp32 and tf32)"
                           : "im2col + cuBLAS ([train] conv = im2col)");
        return 0;
    }
    const int rc = dnn_start(why, sizeof why);
    if (rc != 0) {
#ifdef DDP_DNN
        g_cuda.dnn.mode = 0;
#endif
        snprintf(line, len, "cuDNN %s (%s): convolutions use im2col + cuBLAS",
                 rc == -1 ? "not found" : "does not start", why);
        return 0;
    }
#ifdef DDP_DNN
    g_cuda.dnn.mode = 1;
#endif
    char v[32];
    dnn_version(v, sizeof v);
    snprintf(line, len, "cuDNN %s (deterministic algorithms, %s)", v,
             tf32_math() ? "tf32 allowed" : "fp32 FMA math");
    return 1;
}

/* This part's entries of the ops table. */
void cuda_table_conv(struct ddp_backend *t)
{
    t->conv_col_elems = cuda_conv_col_elems;
    t->conv_plan = conv2d_plan_any;
    t->conv2d_fwd = conv2d_fwd_any;
    t->conv2d_relu_fwd = conv2d_relu_fwd_any;
    t->conv2d_bwd = conv2d_bwd_any;
}

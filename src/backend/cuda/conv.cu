/*
 * conv.cu - the CUDA backend's conv2d (see internal.cuh for the parts): im2col per chunk of
 * samples + cuBLAS GEMMs; which path runs (ddp_cuda_conv_path: cuDNN when it loads and [train]
 * conv allows, else im2col); and the table's conv entries that dispatch to it. The cuDNN path
 * is conv_dnn.cu: one plan per convolution shape whose algorithms are chosen by measurement
 * (every algorithm of each direction timed, three times, with cudnnFind*AlgorithmEx on scratch
 * of the real shapes at model build, and at a new batch size's first call on its own buffers;
 * cuDNN's heuristic inside a graph capture), keeping the fastest that [train] deterministic
 * allows, ties within 10% or 5 us to the least workspace. Channels-last (NHWC) activations
 * (set_layout) run only there: cuDNN's NHWC descriptors, the weights transposed per call. It
 * leaves opening cuDNN to
 * dlopen.cu, bf16 casts and GEMMs to blas.cu, the bias and relu epilogues to elementwise.cu.
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

/* First pass of db[o] += the sum of row o of dyT (O, Q): block (o, y) sums, in double,
 * columns y*THREADS + t, y*THREADS + t + splits*THREADS, ... of row o into
 * part[o * splits + y]. */
__global__ void k_rowsum_partial(double *part, const float *dyT, size_t Q)
{
    const float *row = dyT + (size_t)blockIdx.x * Q;
    const size_t splits = gridDim.y;
    double s = 0;
    for (size_t j = (size_t)blockIdx.y * blockDim.x + threadIdx.x; j < Q; j += splits * blockDim.x)
        s += row[j];
    s = block_sum(s);
    if (threadIdx.x == 0)
        part[(size_t)blockIdx.x * splits + blockIdx.y] = s;
}

/* Second pass: db[o] += the sum of feature o's partial sums, in order. */
__global__ void k_rowsum_finish(float *db, const double *part, int O, int splits)
{
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= O)
        return;
    double s = 0;
    for (int y = 0; y < splits; y++)
        s += part[(size_t)o * splits + y];
    db[o] += (float)s;
}

/* Blocks a feature of the row sums over Q columns: one per BN_ELEMS_PER_SPLIT columns, at
 * most BN_MAX_SPLITS (monotone in Q). */
size_t rowsum_splits(size_t Q)
{
    const size_t splits = (Q + BN_ELEMS_PER_SPLIT - 1) / BN_ELEMS_PER_SPLIT;
    return splits < 1 ? 1 : splits > BN_MAX_SPLITS ? BN_MAX_SPLITS : splits;
}

/* db (O) += the row sums of dyT (O, Q): rowsum_splits(Q) blocks a feature, then a
 * fixed-order sum: parallel beyond one block per feature, the same order every run. part:
 * scratch of O * rowsum_splits(Q) doubles. */
static void rowsum_add(float *db, double *part, const float *dyT, int O, size_t Q)
{
    const size_t splits = rowsum_splits(Q);
    LAUNCH(k_rowsum_partial, dim3((unsigned)O, (unsigned)splits), THREADS, part, dyT, Q);
    rowsum_finish(db, part, O, splits);
}

void rowsum_finish(float *db, const double *part, int O, size_t splits)
{
    LAUNCH(k_rowsum_finish, (unsigned)((O + THREADS - 1) / THREADS), THREADS, db, part, O,
           (int)splits);
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

/* im2col's kernels read NCHW: channels-last activations reaching them are a bug (set_layout
 * takes NHWC only on the cuDNN path; a later switch to im2col must set NCHW first). */
static void im2col_layout_check(void)
{
    if (g_cuda.layout != DDP_LAYOUT_NCHW)
        ddp_die("conv2d on channels-last (NHWC) activations reached im2col + cuBLAS, which reads "
                "NCHW only: set_layout(DDP_LAYOUT_NCHW) before choosing im2col (a bug)");
    if (g_cuda.act16)
        ddp_die("conv2d on bf16 activations reached im2col + cuBLAS, which reads fp32 only: "
                "set_act_type(DDP_ACT_FP32) before choosing im2col (a bug)");
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
    im2col_layout_check();
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
    im2col_layout_check();
    const int nbmax = conv_chunk(B, q.CKK, q.P);
    float *dcol = col + (size_t)q.CKK * nbmax * q.P;
    /* the workspace: dyT of a chunk, then the bias row sums' partials */
    const size_t dy_bytes = align256(sizeof(float) * (size_t)O * nbmax * q.P);
    char *ws =
        (char *)ws_get(dy_bytes + sizeof(double) * (size_t)O * rowsum_splits((size_t)nbmax * q.P));
    float *dyT = (float *)ws;
    double *part = (double *)(ws + dy_bytes);
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
            if (db)
                rowsum_add(db, part, dyT, O, (size_t)Q);
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
        if (db)
            rowsum_add(db, part, dyT, O, (size_t)Q);
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

/* ---- the path: cuDNN (conv_dnn.cu) or im2col + cuBLAS ------------------------------------ */

#ifdef DDP_DNN
/* Which path: 1 for cuDNN. Chosen at ddp_cuda_conv_path; cuDNN if it loads when never
 * chosen (a program that makes the backend without the trainer). */
static int dnn_active(void)
{
    if (g_cuda.dnn.mode < 0) {
        char line[8];
        ddp_cuda_conv_path(1, DDP_CUDA_CONV_RANKED, line, sizeof line);
    }
    return g_cuda.dnn.mode == 1;
}
#endif

/* conv_tensor_max of the table: cuDNN's limit where cuDNN runs; im2col + cuBLAS cuts the batch
 * into chunks and indexes with size_t, so it has none. */
static size_t conv_tensor_max_any(const char **path)
{
#ifdef DDP_DNN
    if (dnn_active()) {
        *path = "cuDNN";
        return DNN_TENSOR_MAX;
    }
#endif
    *path = "im2col + cuBLAS";
    return 0;
}

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

/* conv2d + relu + maxpool(k) (backend.h): the convolution into act, then one pass that adds
 * the bias, clamps and pools. Through cuDNN the convolution is written at beta = 0 and the
 * bias added in that pass, as conv2d_relu_fwd's bias_relu adds it; on the im2col path the GEMM
 * adds the broadcast bias, as there. */
static void conv2d_relu_maxpool_fwd_any(float *out, uint8_t *argmax, float *act, float *col,
                                        const float *inp, const float *w, const float *b, int B,
                                        const struct ddp_conv_geom *g, int k)
{
    const struct conv_geom q = conv_geom_of(g);
    if ((size_t)B * q.O * q.P == 0)
        return;
#ifdef DDP_DNN
    if (dnn_active()) {
        dnn_conv2d_fwd(act, col, inp, w, NULL, B, &q, 0);
        relu_maxpool(out, argmax, act, b, B, q.O, q.OH, q.OW, k);
        return;
    }
#endif
    cuda_conv2d_fwd(act, col, inp, w, b, B, &q);
    relu_maxpool(out, argmax, act, NULL, B, q.O, q.OH, q.OW, k);
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

extern "C" void ddp_cuda_conv_api(int graph)
{
#ifdef DDP_DNN
    g_cuda.dnn.api = graph != 0;
#else
    (void)graph;
#endif
}

/* Which API the cuDNN path times (g_cuda.dnn.graph) and the clause that says so, into api. */
static void conv_api_clause(char *api, size_t len)
{
#ifdef DDP_DNN
    char why[200];
    g_cuda.dnn.graph = g_cuda.dnn.api && dnn_graph_probe(why, sizeof why);
    if (g_cuda.dnn.graph)
        snprintf(api, len, "graph and legacy APIs");
    else if (!g_cuda.dnn.api)
        snprintf(api, len, "legacy API ([train] cudnn_api = legacy)");
    else
        snprintf(api, len, "legacy API: the graph API is unavailable (%s)", why);
#else
    snprintf(api, len, "legacy API");
#endif
}

extern "C" int ddp_cuda_conv_path(int use_cudnn, int deterministic, char *line, size_t len)
{
    char why[400];
    if (g_cuda.device < 0) {
        snprintf(line, len, "%s", "");
        return 0;
    }
    if (!use_cudnn) {
#ifdef DDP_DNN
        g_cuda.dnn.mode = 0;
#endif
        snprintf(line, len, "im2col + cuBLAS%s ([train] conv = im2col)",
                 g_cuda.precision == DDP_PRECISION_BF16 ? ", bf16 GEMMs" : "");
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
    g_cuda.dnn.det = deterministic == DDP_CUDA_CONV_RANKED ? DNN_RANKED : deterministic != 0;
#endif
    char v[32], api[300];
    dnn_version(v, sizeof v);
    conv_api_clause(api, sizeof api);
    snprintf(line, len, "cuDNN %s (%s, %s; %s)", v,
             deterministic == DDP_CUDA_CONV_RANKED ? "deterministic algorithms in cuDNN's ranking"
             : deterministic ? "fastest measured deterministic algorithms ([train] "
                               "deterministic = true)"
                             : "fastest measured algorithms, deterministic or not ([train] "
                               "deterministic = false)",
             g_cuda.precision == DDP_PRECISION_BF16 ? "bf16 run: tensor-core math"
             : tf32_math()                          ? "tf32 allowed"
                                                    : "fp32 FMA math",
             api);
    return 1;
}

/* set_layout and layout of the table (backend.h): channels-last activations only where the
 * convolutions run through cuDNN, whose tensor-core kernels want them; im2col's kernels read
 * NCHW. */
static int set_layout_any(int layout, char *err, size_t errlen)
{
    if (layout == DDP_LAYOUT_NHWC) {
#ifdef DDP_DNN
        if (dnn_active()) {
            g_cuda.layout = DDP_LAYOUT_NHWC;
            return 0;
        }
#endif
        return ddp_err(err, errlen,
                       "this run's convolutions use im2col + cuBLAS (no cuDNN, or [train] conv "
                       "= im2col)");
    }
    g_cuda.layout = DDP_LAYOUT_NCHW;
    return 0;
}

static int layout_any(void)
{
    return g_cuda.layout;
}

/* set_act_type and act_type of the table (backend.h): bf16 activations only where the
 * convolutions run through cuDNN, which reads and writes them; im2col's kernels read fp32. */
static int set_act_type_any(int type, char *err, size_t errlen)
{
    if (type == DDP_ACT_BF16) {
#ifdef DDP_DNN
        if (dnn_active()) {
            g_cuda.act16 = 1;
            return 0;
        }
#endif
        return ddp_err(err, errlen,
                       "this run's convolutions use im2col + cuBLAS (no cuDNN, or [train] conv "
                       "= im2col)");
    }
    g_cuda.act16 = 0;
    return 0;
}

static int act_type_any(void)
{
    return g_cuda.act16 ? DDP_ACT_BF16 : DDP_ACT_FP32;
}

/* This part's entries of the ops table. */
void cuda_table_conv(struct ddp_backend *t)
{
    t->set_layout = set_layout_any;
    t->layout = layout_any;
    t->set_act_type = set_act_type_any;
    t->act_type = act_type_any;
    t->conv_col_elems = cuda_conv_col_elems;
    t->conv_plan = conv2d_plan_any;
    t->conv_tensor_max = conv_tensor_max_any;
    t->conv2d_fwd = conv2d_fwd_any;
    t->conv2d_relu_fwd = conv2d_relu_fwd_any;
    t->conv2d_relu_maxpool_fwd = conv2d_relu_maxpool_fwd_any;
    t->conv2d_bwd = conv2d_bwd_any;
}

/*
 * loss_optim.cu - the CUDA backend's loss and optimiser (see internal.cuh for the parts):
 * softmax cross-entropy (one warp per row, sums in double in a fixed order), the sum of
 * squares of the gradients and clip_grad_norm's factor on the device, and the sgd and adam
 * steps (also as captured in a CUDA graph, reading the step's values from device memory).
 * It leaves the all-reduce of gradients to comm/ and the graphs' values to graph.cu.
 */
#include "backend/cuda/internal.cuh"

/* ---- optimiser kernels ------------------------------------------------------------------- */

/* One parameter's sgd update, as cpu_kernels.inc. */
__device__ __forceinline__ void sgd1(float *p, float g, float *buf, float gscale, float lr,
                                     float momentum, float weight_decay, int nesterov,
                                     int first_step)
{
    float d = __fmul_rn(g, gscale);
    if (weight_decay != 0)
        d += weight_decay * *p;
    if (momentum != 0) {
        *buf = first_step ? d : momentum * *buf + d;
        d = nesterov ? d + momentum * *buf : *buf;
    }
    *p -= lr * d;
}

/* sgd on float4 vectors where p, g and buf are 16-byte aligned (vec4 1; buf unused without
 * momentum), else one parameter at a time. */
__device__ __forceinline__ void sgd_all(float *p, const float *g_, float gscale, float *buf,
                                        size_t n, float lr, float momentum, float weight_decay,
                                        int nesterov, int first_step, int vec4)
{
    const size_t n4 = vec4 ? n / 4 : 0;
    GRID_STRIDE(i, n4)
    {
        float4 pv = ((float4 *)p)[i], bv = {0, 0, 0, 0};
        const float4 gv = ((const float4 *)g_)[i];
        if (momentum != 0 && !first_step)
            bv = ((float4 *)buf)[i];
        sgd1(&pv.x, gv.x, &bv.x, gscale, lr, momentum, weight_decay, nesterov, first_step);
        sgd1(&pv.y, gv.y, &bv.y, gscale, lr, momentum, weight_decay, nesterov, first_step);
        sgd1(&pv.z, gv.z, &bv.z, gscale, lr, momentum, weight_decay, nesterov, first_step);
        sgd1(&pv.w, gv.w, &bv.w, gscale, lr, momentum, weight_decay, nesterov, first_step);
        ((float4 *)p)[i] = pv;
        if (momentum != 0)
            ((float4 *)buf)[i] = bv;
    }
    GRID_STRIDE(t, n - 4 * n4)
    {
        const size_t i = 4 * n4 + t;
        sgd1(p + i, g_[i], buf + i, gscale, lr, momentum, weight_decay, nesterov, first_step);
    }
}

__global__ void k_sgd(float *p, const float *g_, float gscale_, const float *gs, float *buf,
                      size_t n, float lr, float momentum, float weight_decay, int nesterov,
                      int first_step, int vec4)
{
    const float gscale = gs ? *gs : gscale_; /* clip_scale's, on the device */
    sgd_all(p, g_, gscale, buf, n, lr, momentum, weight_decay, nesterov, first_step, vec4);
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

__global__ void k_sgd_graph(float *p, const float *g_, float gscale_, const float *gs, float *buf,
                            size_t n, const graph_vals *sc, float weight_decay, int nesterov,
                            int vec4)
{
    const float gscale = gs ? *gs : gscale_; /* clip_scale's, on the device */
    sgd_all(p, g_, gscale, buf, n, sc->lr, sc->momentum, weight_decay, nesterov, sc->first, vec4);
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

/* sgd_step and adam_step while a step is captured: lr, momentum and the step's factors from
 * the graph slot's values. */
static void graph_sgd(float *p, const float *grad, float gscale, const float *gs, float *buf,
                      size_t n, float weight_decay, int nesterov)
{
    const void *ptr[] = {p, grad, buf};
    const int vec4 = vec4_ok(ptr, 3);
    LAUNCH(k_sgd_graph, blocks_for(vec4 ? (n + 3) / 4 : n), THREADS, p, grad, gscale, gs, buf, n,
           g_cuda.graph.dev + g_cuda.graph.slot, weight_decay, nesterov, vec4);
}

static void graph_adam(float *p, const float *grad, float gscale, const float *gs, float *m,
                       float *v, size_t n, float b2, float eps, float weight_decay, int decoupled)
{
    g_cuda.graph.adam_b2 = b2;
    g_cuda.graph.adam_wd = weight_decay;
    g_cuda.graph.adam_decoupled = decoupled;
    LAUNCH(k_adam_graph, blocks_for(n), THREADS, p, grad, gscale, gs, m, v, n,
           g_cuda.graph.dev + g_cuda.graph.slot, b2, eps, weight_decay, decoupled);
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

/* Rows one block of k_xent_part sums: a batch of up to this many is summed by k_xent_acc
 * alone, a larger one in two levels. */
#define XENT_ACC_ROWS 8192

/* Block b: part[2b] = the loss sum, part[2b + 1] the correct count of rows b*XENT_ACC_ROWS ..
 * (b+1)*XENT_ACC_ROWS - 1 (fixed order). */
__global__ void k_xent_part(double *part, const double *row_loss, const int *row_ok, int B)
{
    const int r0 = blockIdx.x * XENT_ACC_ROWS;
    const int r1 = B - r0 < XENT_ACC_ROWS ? B : r0 + XENT_ACC_ROWS;
    double s = 0, c = 0;
    for (int i = r0 + threadIdx.x; i < r1; i += blockDim.x) {
        s += row_loss[i];
        c += row_ok[i];
    }
    s = block_sum(s);
    c = block_sum(c);
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = s;
        part[2 * blockIdx.x + 1] = c;
    }
}

/* One block: acc[0] += the sum of the parts' losses, acc[1] of their counts (fixed order). */
__global__ void k_xent_parts_acc(double *acc, const double *part, int nparts)
{
    double s = 0, c = 0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) {
        s += part[2 * i];
        c += part[2 * i + 1];
    }
    s = block_sum(s);
    c = block_sum(c);
    if (threadIdx.x == 0) {
        acc[0] += s;
        acc[1] += c;
    }
}

/* The loss kernels' per-row scratch in the workspace: row_loss (B doubles), row_ok (B ints),
 * the two-level sum's parts, then `extra` bytes. */
static char *xent_rows(double **row_loss, int **row_ok, double **part, size_t extra, int B)
{
    const size_t loss_bytes = align256(sizeof(double) * (size_t)B);
    const size_t ok_bytes = align256(sizeof(int) * (size_t)B);
    const size_t parts = ((size_t)B + XENT_ACC_ROWS - 1) / XENT_ACC_ROWS;
    const size_t part_bytes = align256(2 * sizeof(double) * parts);
    char *ws = (char *)ws_get(loss_bytes + ok_bytes + part_bytes + extra);
    *row_loss = (double *)ws;
    *row_ok = (int *)(ws + loss_bytes);
    *part = (double *)(ws + loss_bytes + ok_bytes);
    return ws + loss_bytes + ok_bytes + part_bytes;
}

/* acc (2 doubles) += the batch's loss sum and correct count: one block up to XENT_ACC_ROWS
 * rows, else a block per XENT_ACC_ROWS rows and one over their parts. */
static void xent_sum(double *acc, double *part, const double *row_loss, const int *row_ok, int B)
{
    const int parts = (B + XENT_ACC_ROWS - 1) / XENT_ACC_ROWS;
    if (parts <= 1) {
        LAUNCH(k_xent_acc, 1, 1024, acc, row_loss, row_ok, B);
        return;
    }
    LAUNCH(k_xent_part, (unsigned)parts, 1024, part, row_loss, row_ok, B);
    LAUNCH(k_xent_parts_acc, 1, 1024, acc, part, parts);
}

static void cuda_xent_acc(float *dlogits, double *acc, const float *logits, const int32_t *labels,
                          int B, int K, float grad_scale, float smoothing)
{
    if (B <= 0 || K <= 0)
        return;
    double *row_loss, *part;
    int *row_ok;
    xent_rows(&row_loss, &row_ok, &part, 0, B);
    const unsigned blocks = (unsigned)((B + XENT_ROWS_PER_BLOCK - 1) / XENT_ROWS_PER_BLOCK);
    LAUNCH(k_xent_rows, blocks, THREADS, row_loss, row_ok, dlogits, logits, labels, B, K,
           grad_scale, smoothing);
    xent_sum(acc, part, row_loss, row_ok, B);
}

static double cuda_xent(float *dlogits, int64_t *correct, const float *logits,
                        const int32_t *labels, int B, int K, float grad_scale, float smoothing)
{
    if (B <= 0 || K <= 0) {
        if (correct)
            *correct = 0;
        return 0;
    }
    double *row_loss, *part;
    int *row_ok;
    double *dres = (double *)xent_rows(&row_loss, &row_ok, &part, 2 * sizeof(double), B);
    CUDA_CHECK(cudaMemsetAsync(dres, 0, 2 * sizeof(double), g_cuda.stream));
    const unsigned blocks = (unsigned)((B + XENT_ROWS_PER_BLOCK - 1) / XENT_ROWS_PER_BLOCK);
    LAUNCH(k_xent_rows, blocks, THREADS, row_loss, row_ok, dlogits, logits, labels, B, K,
           grad_scale, smoothing);
    xent_sum(dres, part, row_loss, row_ok, B);
    double res[2]; /* loss sum, correct count (exact in a double) */
    CUDA_CHECK(cudaMemcpyAsync(res, dres, sizeof res, cudaMemcpyDeviceToHost, g_cuda.stream));
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
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
        CUDA_CHECK(cudaMemsetAsync(part + SUMSQ_BLOCKS, 0, sizeof(double), g_cuda.stream));
    }
    return part + SUMSQ_BLOCKS;
}

static double cuda_sumsq(const float *x, size_t n)
{
    if (!n)
        return 0;
    double res = 0;
    CUDA_CHECK(cudaMemcpyAsync(&res, sumsq_queue(x, n), sizeof res, cudaMemcpyDeviceToHost,
                               g_cuda.stream));
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
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
                          size_t n, const struct ddp_optim_args *a)
{
    if (!n)
        return;
    if (g_cuda.graph.capturing)
        return graph_sgd(p, grad, gscale, gs, buf, n, a->weight_decay, a->nesterov);
    const void *ptr[] = {p, grad, buf};
    const int vec4 = vec4_ok(ptr, 3);
    LAUNCH(k_sgd, blocks_for(vec4 ? (n + 3) / 4 : n), THREADS, p, grad, gscale, gs, buf, n, a->lr,
           a->momentum, a->weight_decay, a->nesterov, a->first_step, vec4);
}

static void cuda_adam_step(float *p, const float *grad, float gscale, const float *gs, float *m,
                           float *v, size_t n, const struct ddp_optim_args *a)
{
    if (!n)
        return;
    const float lr = a->lr, b1 = a->b1, b2 = a->b2, eps = a->eps, weight_decay = a->weight_decay;
    const int decoupled = a->decoupled;
    if (g_cuda.graph.capturing)
        return graph_adam(p, grad, gscale, gs, m, v, n, b2, eps, weight_decay, decoupled);
    /* The scalar factors exactly as cpu_kernels.inc computes them. */
    const double bc1 = 1 - pow((double)b1, (double)a->t), bc2 = 1 - pow((double)b2, (double)a->t);
    const float step_size = (float)((double)lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    const float decay = decoupled ? 1 - lr * weight_decay : 1.0f;
    LAUNCH(k_adam, blocks_for(n), THREADS, p, grad, gscale, gs, m, v, n, b1, b2, eps, weight_decay,
           decoupled, step_size, bc2_sqrt, decay);
}

/* This part's entries of the ops table. */
void cuda_table_loss_optim(struct ddp_backend *t)
{
    t->xent = cuda_xent;
    t->xent_acc = cuda_xent_acc;
    t->sumsq = cuda_sumsq;
    t->clip_scale = cuda_clip_scale;
    t->sgd_step = cuda_sgd_step;
    t->adam_step = cuda_adam_step;
}

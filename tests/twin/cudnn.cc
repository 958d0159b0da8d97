/*
 * cudnn.cc - the GPU twin's cuDNN: descriptors, algorithm lists with workspace sizes and
 * determinism, and the three convolutions (NCHW, pad, stride, alpha/beta) computed on the CPU
 * (im2col and cblas) and queued on the handle's stream like a kernel (counted as a launch).
 * Operands are device addresses, translated and checked to lie inside one live allocation
 * each; a host or out-of-range operand, or a workspace smaller than the algorithm needs, is a
 * GPU fault with one line naming it, and so is a workspace that shares a byte with another
 * operand; the workspace's first (needed) bytes are NaN when an algorithm starts, so data a
 * caller keeps there is lost, as on a GPU. A tensor descriptor of more than 2^31 - 1 values is
 * refused with CUDNN_STATUS_NOT_SUPPORTED, as cuDNN's is.
 *
 * Data types: CUDNN_DATA_FLOAT, or CUDNN_DATA_BFLOAT16 tensors and filters with a
 * CUDNN_DATA_FLOAT compute type (cuDNN's PSEUDO_BFLOAT16 configuration): bf16 operands are
 * widened to float (exact), computed as float data are, and the output rounded to bf16 (to
 * nearest even, the twin's cuda_bf16.h) after alpha and beta (beta reads the bf16 output
 * widened). So a bf16 convolution's result is the rounded result of the float convolution of
 * the same values, bit for bit. x, y and the filter must share one data type: a mix is
 * refused with CUDNN_STATUS_NOT_SUPPORTED, as cuDNN refuses it. The workspace sizes do not
 * depend on the data type (the twin's scratch is float).
 *
 * Formats: tensors and filters in CUDNN_TENSOR_NCHW or CUDNN_TENSOR_NHWC ((n,h,w,c) in
 * memory; a filter (k,h,w,c), cuDNN's NHWC filter format), in every algorithm and direction,
 * with the same workspace sizes. The twin computes all-NCHW or all-NHWC convolutions (x, y and
 * the filter alike); any mix is refused with CUDNN_STATUS_NOT_SUPPORTED by the queries and the
 * calls (cuDNN takes some mixes in some algorithms only: code relying on one fails here rather
 * than computing NCHW on channels-last data). NCHW_VECT_C (int8x4 only) is BAD_PARAM for float.
 *
 * Algorithms the twin reports (ddptrain must pick a deterministic one):
 *   forward         IMPLICIT_PRECOMP_GEMM (workspace: one sample's im2col matrix),
 *                   IMPLICIT_GEMM (none)
 *   backward data   ALGO_0 (non-deterministic, none), ALGO_1 (workspace: one sample's dcol)
 *   backward filter ALGO_0 (non-deterministic, none), ALGO_1 (workspace: one sample's col)
 * The non-deterministic ones are: their sums run in an order that changes from call to call,
 * so their results differ in the last bits between two identical calls, as on a GPU.
 *
 * The two forward algorithms are both deterministic but round differently (IMPLICIT_GEMM sums
 * the reduction in two halves), so a run that changes algorithm changes the last bits, as on
 * a GPU.
 *
 * cudnnFind*AlgorithmEx runs every algorithm of the list whose workspace fits the one given
 * (alpha 1, beta 0: the output operand is overwritten, as cuDNN's is), waits for it as cuDNN
 * does, and reports fixed times (TWIN_MS) sorted fastest first, so that the choice is the same
 * on every run: forward IMPLICIT_GEMM is the fastest (not the heuristic list's first), the
 * non-deterministic backward algorithms are faster than the deterministic ones. An algorithm
 * whose workspace does not fit is reported CUDNN_STATUS_NOT_SUPPORTED, last.
 * DDP_EMU_CUDNN_MS (twin_ms_override) changes those times, on every rank or on one.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "cuda_bf16.h"
#include "cudnn.h"
#include "cudnn_internal.h"
#include "twin.h"

struct cudnnContext {
    cudaStream_t stream = nullptr;
    long calls = 0; /* the non-deterministic algorithms' order */
};
struct cudnnTensorStruct {
    int n = 0, c = 0, h = 0, w = 0;
    cudnnTensorFormat_t f = CUDNN_TENSOR_NCHW; /* NHWC: (n, h, w, c) in memory */
    cudnnDataType_t t = CUDNN_DATA_FLOAT;      /* or CUDNN_DATA_BFLOAT16 */
};
struct cudnnFilterStruct {
    int k = 0, c = 0, h = 0, w = 0;
    cudnnTensorFormat_t f = CUDNN_TENSOR_NCHW; /* NHWC: (k, h, w, c) in memory */
    cudnnDataType_t t = CUDNN_DATA_FLOAT;      /* or CUDNN_DATA_BFLOAT16 */
};
struct cudnnConvolutionStruct {
    int ph = 0, pw = 0, u = 1, v = 1;
    bool set = false;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace
{

using twin_dnn::Geom;
using twin_dnn::Variant;

/* CUDNN_STATUS_BAD_PARAM for shapes that do not fit together; CUDNN_STATUS_NOT_SUPPORTED for
 * a mix of formats (the twin computes all-NCHW or all-NHWC; cuDNN's algorithms take only some
 * mixes, so code that relies on one is wrong on the twin rather than silently NCHW) or of
 * data types (cuDNN has no convolution of float data with a bf16 filter, or the reverse). */
cudnnStatus_t geom_of(const cudnnTensorStruct *x, const cudnnFilterStruct *f,
                      const cudnnConvolutionStruct *cv, const cudnnTensorStruct *y, Geom *g)
{
    if (!x || !f || !cv || !y || !cv->set || x->n <= 0 || f->k <= 0 || x->c != f->c)
        return CUDNN_STATUS_BAD_PARAM;
    *g = Geom{x->n,
              x->c,
              x->h,
              x->w,
              f->k,
              f->h,
              f->w,
              cv->ph,
              cv->pw,
              cv->u,
              cv->v,
              0,
              0,
              x->f == CUDNN_TENSOR_NHWC,
              x->t == CUDNN_DATA_BFLOAT16};
    g->OH = (x->h + 2 * cv->ph - f->h) / cv->u + 1;
    g->OW = (x->w + 2 * cv->pw - f->w) / cv->v + 1;
    if (!(g->OH > 0 && g->OW > 0 && y->n == x->n && y->c == f->k && y->h == g->OH && y->w == g->OW))
        return CUDNN_STATUS_BAD_PARAM;
    if (x->t != y->t || x->t != f->t)
        return CUDNN_STATUS_NOT_SUPPORTED;
    return x->f == y->f && x->f == f->f ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
}

/* The n values at p (bf16 when bf16, else float) as floats: p itself, or a copy widened into
 * buf (exact). */
const float *as_float(const void *p, size_t n, bool bf16, std::vector<float> &buf)
{
    if (!bf16)
        return (const float *)p;
    buf.resize(n);
    const __nv_bfloat16 *h = (const __nv_bfloat16 *)p;
    for (size_t i = 0; i < n; i++)
        buf[i] = __bfloat162float(h[i]);
    return buf.data();
}

/* The output operand p (n values) as floats to blend into: p itself, or buf (p widened where
 * beta != 0; zeros else: beta 0 never reads the output), which store_back rounds into p. */
float *out_float(void *p, size_t n, bool bf16, float beta, std::vector<float> &buf)
{
    if (!bf16)
        return (float *)p;
    if (beta != 0)
        as_float(p, n, true, buf);
    else
        buf.assign(n, 0.0f);
    return buf.data();
}

/* A bf16 output's floats (out_float's buf) rounded into p, to nearest even. */
void store_back(void *p, const std::vector<float> &buf, bool bf16)
{
    __nv_bfloat16 *h = (__nv_bfloat16 *)p;
    for (size_t i = 0; bf16 && i < buf.size(); i++)
        h[i] = __float2bfloat16_rn(buf[i]);
}

/* (N, C, S) NCHW copy of t (N, S, C) when nhwc; else empty and t is used as it is. */
std::vector<float> nchw_of(const float *t, int N, int C, size_t S, bool nhwc)
{
    std::vector<float> out(nhwc ? (size_t)N * C * S : 0);
    for (int n = 0; nhwc && n < N; n++)
        for (int c = 0; c < C; c++)
            for (size_t s = 0; s < S; s++)
                out[((size_t)n * C + c) * S + s] = t[((size_t)n * S + s) * C + c];
    return out;
}

/* out = alpha * v + beta * out, v (C, S); out (C, S), or (S, C) when nhwc; beta == 0 never
 * reads out (as cuDNN). */
void blend_to(float *out, const float *v, int C, size_t S, bool nhwc, float alpha, float beta)
{
    for (int c = 0; c < C; c++)
        for (size_t s = 0; s < S; s++) {
            float *o = out + (nhwc ? s * C + c : c * S + s);
            *o = beta == 0 ? alpha * v[c * S + s] : alpha * v[c * S + s] + beta * *o;
        }
}

/* col (CKK, P) of one sample x (C,H,W), zero outside the image. */
void im2col(float *col, const float *x, const Geom &g)
{
    for (int c = 0; c < g.C; c++)
        for (int r = 0; r < g.R; r++)
            for (int s = 0; s < g.S; s++) {
                float *row = col + (((size_t)c * g.R + r) * g.S + s) * g.P();
                for (int oh = 0; oh < g.OH; oh++)
                    for (int ow = 0; ow < g.OW; ow++) {
                        const int ih = oh * g.u - g.ph + r, iw = ow * g.v - g.pw + s;
                        row[(size_t)oh * g.OW + ow] = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W
                                                          ? x[((size_t)c * g.H + ih) * g.W + iw]
                                                          : 0.0f;
                    }
            }
}

/* dx (C,H,W) += the columns of dcol (CKK, P) scattered back. */
void col2im_add(float *dx, const float *dcol, const Geom &g)
{
    for (int c = 0; c < g.C; c++)
        for (int r = 0; r < g.R; r++)
            for (int s = 0; s < g.S; s++) {
                const float *row = dcol + (((size_t)c * g.R + r) * g.S + s) * g.P();
                for (int oh = 0; oh < g.OH; oh++)
                    for (int ow = 0; ow < g.OW; ow++) {
                        const int ih = oh * g.u - g.ph + r, iw = ow * g.v - g.pw + s;
                        if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W)
                            dx[((size_t)c * g.H + ih) * g.W + iw] += row[(size_t)oh * g.OW + ow];
                    }
            }
}

/* The first bytes of a workspace (the algorithm's need) made NaN before the algorithm runs: a
 * GPU algorithm leaves its workspace in any state, so data kept there by the caller is lost
 * and shows in the result. */
void poison_ws(float *ws, size_t bytes)
{
    for (size_t i = 0; ws && i < bytes / 4; i++)
        ws[i] = __builtin_nanf("");
}

/* One operand of a convolution: its device address, the bytes it must span, its name. */
struct Operand {
    const void *dev;
    size_t bytes;
    const char *name;
    void *host = nullptr;
};

/* 1 when the byte ranges of operands a and b (translated) overlap. */
bool overlap(const struct Operand &a, const struct Operand &b)
{
    const char *pa = (const char *)a.host, *pb = (const char *)b.host;
    return a.bytes && b.bytes && pa < pb + b.bytes && pb < pa + a.bytes;
}

/* Translate every operand and check the workspace (large enough, and sharing no byte with
 * another operand: the last operand is the workspace); on a problem queue a fault naming it
 * (what the hardware would do: a workspace over an operand corrupts it) and return false. */
bool translate(cudnnHandle_t h, const char *call, Operand *ops, int nops, size_t ws_need,
               size_t ws_given, cudaError_t *e)
{
    const bool inject = twin::inject_kernel_fault();
    char why[320] = "";
    if (inject)
        snprintf(why, sizeof why, "%s: fault injected by DDP_EMU_FAIL", call);
    else if (ws_given < ws_need)
        snprintf(why, sizeof why,
                 "%s: workspace of %zu bytes given, the algorithm needs %zu: an out-of-bounds "
                 "workspace access",
                 call, ws_given, ws_need);
    for (int i = 0; i < nops && !why[0]; i++) {
        if (ops[i].bytes == 0)
            continue;
        ops[i].host = twin::dev_to_host(ops[i].dev, ops[i].bytes);
        if (!ops[i].host)
            snprintf(why, sizeof why,
                     "%s: operand %s (%p, %zu bytes) is not inside one device allocation", call,
                     ops[i].name, ops[i].dev, ops[i].bytes);
    }
    for (int i = 0; i + 1 < nops && !why[0]; i++)
        if (overlap(ops[i], ops[nops - 1]))
            snprintf(why, sizeof why,
                     "%s: the workspace (%p, %zu bytes) overlaps operand %s (%p, %zu bytes)", call,
                     ops[nops - 1].dev, ops[nops - 1].bytes, ops[i].name, ops[i].dev, ops[i].bytes);
    if (!why[0])
        return true;
    std::string line(why);
    *e = twin::enqueue(h->stream, call,
                       [line] { twin::device_fault(cudaErrorIllegalAddress, "%s", line.c_str()); });
    return false;
}

cudnnStatus_t status_of(cudaError_t e)
{
    return e == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

/* The first n entries of list into out (a _v7 answer). */
template <typename Perf>
void report(Perf *out, int n, int *returned, std::initializer_list<Perf> list)
{
    int i = 0;
    for (const Perf &p : list)
        if (i < n)
            out[i++] = p;
    *returned = i;
}

} // namespace

extern "C" {

size_t cudnnGetVersion(void)
{
    return CUDNN_VERSION;
}

const char *cudnnGetErrorString(cudnnStatus_t s)
{
    switch (s) {
    case CUDNN_STATUS_SUCCESS:
        return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED:
        return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM:
        return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED:
        return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR:
        return "CUDNN_STATUS_INTERNAL_ERROR";
    default:
        return "CUDNN_STATUS_EXECUTION_FAILED";
    }
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *h)
{
    *h = new cudnnContext;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t h)
{
    delete h;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s)
{
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d)
{
    *d = new cudnnTensorStruct;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f,
                                         cudnnDataType_t t, int n, int c, int h, int w)
{
    /* NCHW_VECT_C needs int8x4 data: BAD_PARAM for float and bf16, as cuDNN's */
    if (!d || (f != CUDNN_TENSOR_NCHW && f != CUDNN_TENSOR_NHWC) ||
        (t != CUDNN_DATA_FLOAT && t != CUDNN_DATA_BFLOAT16) || n <= 0 || c <= 0 || h <= 0 || w <= 0)
        return CUDNN_STATUS_BAD_PARAM;
    if ((int64_t)n * c * h * w > INT32_MAX) /* cuDNN's 2^31 - 1 values per tensor */
        return CUDNN_STATUS_NOT_SUPPORTED;
    *d = cudnnTensorStruct{n, c, h, w, f, t};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d)
{
    delete d;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d)
{
    *d = new cudnnFilterStruct;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t,
                                         cudnnTensorFormat_t f, int k, int c, int h, int w)
{
    if (!d || (f != CUDNN_TENSOR_NCHW && f != CUDNN_TENSOR_NHWC) ||
        (t != CUDNN_DATA_FLOAT && t != CUDNN_DATA_BFLOAT16) || k <= 0 || c <= 0 || h <= 0 || w <= 0)
        return CUDNN_STATUS_BAD_PARAM;
    *d = cudnnFilterStruct{k, c, h, w, f, t};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d)
{
    delete d;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d)
{
    *d = new cudnnConvolutionStruct;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int u,
                                              int v, int dh, int dw, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t t)
{
    if (!d || ph < 0 || pw < 0 || u <= 0 || v <= 0 || dh <= 0 || dw <= 0 || t != CUDNN_DATA_FLOAT)
        return CUDNN_STATUS_BAD_PARAM;
    if (dh != 1 || dw != 1 || mode != CUDNN_CROSS_CORRELATION)
        return CUDNN_STATUS_NOT_SUPPORTED; /* the twin does what ddptrain uses */
    d->ph = ph, d->pw = pw, d->u = u, d->v = v, d->set = true;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m)
{
    if (!d || m < CUDNN_DEFAULT_MATH || m > CUDNN_FMA_MATH)
        return CUDNN_STATUS_BAD_PARAM;
    d->math = m;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d)
{
    delete d;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- algorithms and workspaces ---- */

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t f,
    const cudnnConvolutionDescriptor_t cv, const cudnnTensorDescriptor_t y, const int n,
    int *returned, cudnnConvolutionFwdAlgoPerf_t *out)
{
    Geom g;
    if (!h || !returned || !out || n <= 0)
        return CUDNN_STATUS_BAD_PARAM;
    if (const cudnnStatus_t st_ = geom_of(x, f, cv, y, &g); st_ != CUDNN_STATUS_SUCCESS)
        return st_;
    const cudnnMathType_t m = cv->math;
    report<cudnnConvolutionFwdAlgoPerf_t>(out, n, returned,
                                          {{CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                            CUDNN_STATUS_SUCCESS,
                                            -1,
                                            g.col_bytes(),
                                            CUDNN_DETERMINISTIC,
                                            m,
                                            {}},
                                           {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                            CUDNN_STATUS_SUCCESS,
                                            -1,
                                            0,
                                            CUDNN_DETERMINISTIC,
                                            m,
                                            {}}});
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t h, const cudnnFilterDescriptor_t f, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t cv, const cudnnTensorDescriptor_t dx, const int n,
    int *returned, cudnnConvolutionBwdDataAlgoPerf_t *out)
{
    Geom g;
    if (!h || !returned || !out || n <= 0)
        return CUDNN_STATUS_BAD_PARAM;
    if (const cudnnStatus_t st_ = geom_of(dx, f, cv, dy, &g); st_ != CUDNN_STATUS_SUCCESS)
        return st_;
    const cudnnMathType_t m = cv->math;
    report<cudnnConvolutionBwdDataAlgoPerf_t>(out, n, returned,
                                              {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                                                CUDNN_STATUS_SUCCESS,
                                                -1,
                                                0,
                                                CUDNN_NON_DETERMINISTIC,
                                                m,
                                                {}},
                                               {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                                                CUDNN_STATUS_SUCCESS,
                                                -1,
                                                g.col_bytes(),
                                                CUDNN_DETERMINISTIC,
                                                m,
                                                {}}});
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t cv, const cudnnFilterDescriptor_t f, const int n,
    int *returned, cudnnConvolutionBwdFilterAlgoPerf_t *out)
{
    Geom g;
    if (!h || !returned || !out || n <= 0)
        return CUDNN_STATUS_BAD_PARAM;
    if (const cudnnStatus_t st_ = geom_of(x, f, cv, dy, &g); st_ != CUDNN_STATUS_SUCCESS)
        return st_;
    const cudnnMathType_t m = cv->math;
    report<cudnnConvolutionBwdFilterAlgoPerf_t>(out, n, returned,
                                                {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
                                                  CUDNN_STATUS_SUCCESS,
                                                  -1,
                                                  0,
                                                  CUDNN_NON_DETERMINISTIC,
                                                  m,
                                                  {}},
                                                 {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                                                  CUDNN_STATUS_SUCCESS,
                                                  -1,
                                                  g.col_bytes(),
                                                  CUDNN_DETERMINISTIC,
                                                  m,
                                                  {}}});
    return CUDNN_STATUS_SUCCESS;
}

} /* extern "C" */

/* Workspace bytes of an algorithm (the twin's rule: the one-sample im2col matrix or none);
 * -1 for an algorithm the twin does not have. */
long long twin_dnn::fwd_ws(const Geom &g, int algo)
{
    return algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ? (long long)g.col_bytes()
           : algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM       ? 0
                                                                    : -1;
}
long long twin_dnn::bwd_ws(const Geom &g, int algo) /* data and filter alike */
{
    return algo == 1 ? (long long)g.col_bytes() : algo == 0 ? 0 : -1;
}

using twin_dnn::bwd_ws;
using twin_dnn::fwd_ws;

extern "C" {

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h,
                                                      const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t f,
                                                      const cudnnConvolutionDescriptor_t cv,
                                                      const cudnnTensorDescriptor_t y,
                                                      cudnnConvolutionFwdAlgo_t algo, size_t *sz)
{
    Geom g;
    if (!h || !sz)
        return CUDNN_STATUS_BAD_PARAM;
    if (const cudnnStatus_t st_ = geom_of(x, f, cv, y, &g); st_ != CUDNN_STATUS_SUCCESS)
        return st_;
    const long long b = fwd_ws(g, algo);
    if (b < 0)
        return CUDNN_STATUS_NOT_SUPPORTED;
    *sz = (size_t)b;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t h, const cudnnFilterDescriptor_t f, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t cv, const cudnnTensorDescriptor_t dx,
    cudnnConvolutionBwdDataAlgo_t algo, size_t *sz)
{
    Geom g;
    if (!h || !sz)
        return CUDNN_STATUS_BAD_PARAM;
    if (const cudnnStatus_t st_ = geom_of(dx, f, cv, dy, &g); st_ != CUDNN_STATUS_SUCCESS)
        return st_;
    const long long b = bwd_ws(g, algo);
    if (b < 0)
        return CUDNN_STATUS_NOT_SUPPORTED;
    *sz = (size_t)b;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t cv, const cudnnFilterDescriptor_t f,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t *sz)
{
    Geom g;
    if (!h || !sz)
        return CUDNN_STATUS_BAD_PARAM;
    if (const cudnnStatus_t st_ = geom_of(x, f, cv, dy, &g); st_ != CUDNN_STATUS_SUCCESS)
        return st_;
    const long long b = bwd_ws(g, algo);
    if (b < 0)
        return CUDNN_STATUS_NOT_SUPPORTED;
    *sz = (size_t)b;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- the convolutions ---- */

} /* extern "C" */

namespace
{

/* p (n floats) rounded to tf32 (10 mantissa bits, to nearest even: what a tensor core reads)
 * into buf when tf32 (p may be buf's data); else p itself. */
const float *tf32_of(const float *p, size_t n, bool tf32, std::vector<float> &buf)
{
    if (!tf32)
        return p;
    std::vector<float> r(n);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &p[i], 4);
        if ((u & 0x7f800000u) != 0x7f800000u) /* finite: the 13 low bits rounded away */
            u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
        memcpy(&r[i], &u, 4);
    }
    buf.swap(r);
    return buf.data();
}

/* A gemm over the reduction's terms [k0, k1) into out (beta 0: overwrite, 1: add). */
using PartGemm = std::function<void(int k0, int k1, float beta, float *out)>;

/* out (n values) = the reduction over [0, K) summed by gemm: one part, or two split at cut
 * (cut_mid: at the middle of the range) when that lies inside; halves (the graph's knob 2):
 * the halves [0, K/2) and [K/2, K) each summed so, into out and a second buffer, added at the
 * end (another rounding). */
void reduce(const PartGemm &gemm, float *out, size_t n, int K, bool cut_mid, int cut, bool halves)
{
    auto sum = [&](int k0, int k1, float *o) {
        const int c = cut_mid ? k0 + (k1 - k0) / 2 : cut;
        if (c > k0 && c < k1) {
            gemm(k0, c, 0.0f, o);
            gemm(c, k1, 1.0f, o);
        } else
            gemm(k0, k1, 0.0f, o);
    };
    if (!halves || K < 2)
        return sum(0, K, out);
    std::vector<float> second(n);
    sum(0, K / 2, out);
    sum(K / 2, K, second.data());
    for (size_t i = 0; i < n; i++)
        out[i] += second[i];
}

/* Queue body on h's stream as v.call; with a cost (v.cost_ms >= 0) the device clock advances
 * by that cost instead of body's CPU time. */
cudaError_t queue(cudnnHandle_t h, const Variant &v, const std::function<void()> &body)
{
    if (v.cost_ms < 0)
        return twin::enqueue(h->stream, v.call, body);
    const double ms = v.cost_ms;
    return twin::enqueue(h->stream, v.call, [ms, body] { twin::run_at_cost(ms, body); });
}

} // namespace

/* y = alpha * conv(x, w) + beta * y */
cudnnStatus_t twin_dnn::conv_fwd(cudnnHandle_t h, const Geom &g, int algo, const Variant &v,
                                 const void *x, const void *w, void *y, void *ws, size_t ws_bytes,
                                 float a, float b)
{
    const long long need = fwd_ws(g, algo);
    if (need < 0)
        return CUDNN_STATUS_NOT_SUPPORTED;
    const size_t CHW = (size_t)g.C * g.H * g.W, OP = (size_t)g.O * g.P();
    Operand ops[] = {{x, g.esz() * g.N * CHW, "x"},
                     {w, g.esz() * g.O * g.CKK(), "w"},
                     {y, g.esz() * g.N * OP, "y"},
                     {ws, (size_t)need, "workSpace"}};
    cudaError_t e = cudaSuccess;
    if (!translate(h, v.call, ops, 4, (size_t)need, ws_bytes, &e))
        return status_of(e);
    const void *hx0 = ops[0].host, *hw0 = ops[1].host;
    void *hy0 = ops[2].host;
    float *hws = (float *)ops[3].host;
    /* IMPLICIT_GEMM sums the reduction in two halves: deterministic, but rounded differently
     * from IMPLICIT_PRECOMP_GEMM, as two algorithms of cuDNN are */
    const bool mid = algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, halves = v.halves;
    const bool tf = v.tf32;
    const size_t poison = (size_t)need;
    e = queue(h, v, [=] {
        poison_ws(hws, poison);
        std::vector<float> own(hws ? 0 : g.CKK() * g.P()), tmp(OP), xb, wb, yb;
        const size_t nx = g.N * CHW, nw = g.O * g.CKK();
        const float *hx = tf32_of(as_float(hx0, nx, g.bf16, xb), nx, tf, xb);
        const float *hw = tf32_of(as_float(hw0, nw, g.bf16, wb), nw, tf, wb);
        float *hy = out_float(hy0, g.N * OP, g.bf16, b, yb);
        const std::vector<float> xn = nchw_of(hx, g.N, g.C, (size_t)g.H * g.W, g.nhwc),
                                 wn = nchw_of(hw, g.O, g.C, (size_t)g.R * g.S, g.nhwc);
        const float *X = g.nhwc ? xn.data() : hx, *Wt = g.nhwc ? wn.data() : hw;
        float *col = hws ? hws : own.data();
        const int P = (int)g.P(), K = (int)g.CKK();
        const PartGemm gemm = [&](int k0, int k1, float beta, float *o) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.O, P, k1 - k0, 1.0f, Wt + k0,
                        K, col + (size_t)k0 * P, P, beta, o, P);
        };
        for (int i = 0; i < g.N; i++) {
            im2col(col, X + i * CHW, g);
            reduce(gemm, tmp.data(), OP, K, mid, 0, halves);
            blend_to(hy + i * OP, tmp.data(), g.O, g.P(), g.nhwc, a, b);
        }
        store_back(hy0, yb, g.bf16);
    });
    return status_of(e);
}

/* dx = alpha * conv^T(dy, w) + beta * dx */
cudnnStatus_t twin_dnn::conv_bwd_data(cudnnHandle_t h, const Geom &g, int algo, const Variant &v,
                                      const void *w, const void *dy, void *dx, void *ws,
                                      size_t ws_bytes, float a, float b)
{
    const long long need = bwd_ws(g, algo);
    if (need < 0)
        return CUDNN_STATUS_NOT_SUPPORTED;
    const size_t CHW = (size_t)g.C * g.H * g.W, OP = (size_t)g.O * g.P();
    Operand ops[] = {{w, g.esz() * g.O * g.CKK(), "w"},
                     {dy, g.esz() * g.N * OP, "dy"},
                     {dx, g.esz() * g.N * CHW, "dx"},
                     {ws, (size_t)need, "workSpace"}};
    cudaError_t e = cudaSuccess;
    if (!translate(h, v.call, ops, 4, (size_t)need, ws_bytes, &e))
        return status_of(e);
    const void *hw0 = ops[0].host, *hdy0 = ops[1].host;
    void *hdx0 = ops[2].host;
    float *hws = (float *)ops[3].host;
    /* ALGO_0 splits the sum over output channels at a point that moves from call to call */
    const int split = algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 ? (int)(h->calls++ % g.O) : 0;
    const bool halves = v.halves, tf = v.tf32;
    const size_t poison = (size_t)need;
    e = queue(h, v, [=] {
        poison_ws(hws, poison);
        std::vector<float> own(hws ? 0 : g.CKK() * g.P()), tmp(CHW), wb, dyb, dxb;
        const size_t nw = g.O * g.CKK(), ndy = g.N * OP;
        const float *hw = tf32_of(as_float(hw0, nw, g.bf16, wb), nw, tf, wb);
        const float *hdy = tf32_of(as_float(hdy0, ndy, g.bf16, dyb), ndy, tf, dyb);
        float *hdx = out_float(hdx0, g.N * CHW, g.bf16, b, dxb);
        const std::vector<float> dyn = nchw_of(hdy, g.N, g.O, g.P(), g.nhwc),
                                 wn = nchw_of(hw, g.O, g.C, (size_t)g.R * g.S, g.nhwc);
        const float *DY = g.nhwc ? dyn.data() : hdy, *Wt = g.nhwc ? wn.data() : hw;
        float *dcol = hws ? hws : own.data();
        const int P = (int)g.P(), CKK = (int)g.CKK();
        const float *d = nullptr;
        /* dcol (CKK,P) = w^T (CKK,O) dy_i (O,P), the sum over output channels in parts */
        const PartGemm gemm = [&](int k0, int k1, float beta, float *o) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, CKK, P, k1 - k0, 1.0f,
                        Wt + (size_t)k0 * CKK, CKK, d + (size_t)k0 * P, P, beta, o, P);
        };
        for (int i = 0; i < g.N; i++) {
            d = DY + i * OP;
            reduce(gemm, dcol, g.CKK() * g.P(), g.O, false, split, halves);
            memset(tmp.data(), 0, 4 * CHW);
            col2im_add(tmp.data(), dcol, g);
            blend_to(hdx + i * CHW, tmp.data(), g.C, (size_t)g.H * g.W, g.nhwc, a, b);
        }
        store_back(hdx0, dxb, g.bf16);
    });
    return status_of(e);
}

/* dw = alpha * sum over samples of dy_i col_i^T + beta * dw */
cudnnStatus_t twin_dnn::conv_bwd_filter(cudnnHandle_t h, const Geom &g, int algo, const Variant &v,
                                        const void *x, const void *dy, void *dw, void *ws,
                                        size_t ws_bytes, float a, float b)
{
    const long long need = bwd_ws(g, algo);
    if (need < 0)
        return CUDNN_STATUS_NOT_SUPPORTED;
    const size_t CHW = (size_t)g.C * g.H * g.W, OP = (size_t)g.O * g.P();
    const size_t nw = (size_t)g.O * g.CKK();
    Operand ops[] = {{x, g.esz() * g.N * CHW, "x"},
                     {dy, g.esz() * g.N * OP, "dy"},
                     {dw, g.esz() * nw, "dw"},
                     {ws, (size_t)need, "workSpace"}};
    cudaError_t e = cudaSuccess;
    if (!translate(h, v.call, ops, 4, (size_t)need, ws_bytes, &e))
        return status_of(e);
    const void *hx0 = ops[0].host, *hdy0 = ops[1].host;
    void *hdw0 = ops[2].host;
    float *hws = (float *)ops[3].host;
    /* ALGO_0 sums the samples starting at one that moves from call to call */
    const int first = algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ? (int)(h->calls++ % g.N) : 0;
    const bool halves = v.halves, tf = v.tf32;
    const size_t poison = (size_t)need;
    e = queue(h, v, [=] {
        poison_ws(hws, poison);
        std::vector<float> own(hws ? 0 : g.CKK() * g.P()), acc(nw), xb, dyb, dwb;
        const size_t nx = g.N * CHW, ndy = g.N * OP;
        const float *hx = tf32_of(as_float(hx0, nx, g.bf16, xb), nx, tf, xb);
        const float *hdy = tf32_of(as_float(hdy0, ndy, g.bf16, dyb), ndy, tf, dyb);
        float *hdw = out_float(hdw0, nw, g.bf16, b, dwb);
        const std::vector<float> xn = nchw_of(hx, g.N, g.C, (size_t)g.H * g.W, g.nhwc),
                                 dyn = nchw_of(hdy, g.N, g.O, g.P(), g.nhwc);
        const float *X = g.nhwc ? xn.data() : hx, *DY = g.nhwc ? dyn.data() : hdy;
        float *col = hws ? hws : own.data();
        const int P = (int)g.P(), CKK = (int)g.CKK();
        /* the samples [j0, j1) in order from first: acc (O,CKK) += dy_i (O,P) col_i^T (P,CKK) */
        const PartGemm gemm = [&](int j0, int j1, float beta, float *o) {
            for (int j = j0; j < j1; j++) {
                const int i = (first + j) % g.N;
                im2col(col, X + i * CHW, g);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g.O, CKK, P, 1.0f, DY + i * OP,
                            P, col, P, j > j0 ? 1.0f : beta, o, CKK);
            }
        };
        reduce(gemm, acc.data(), nw, g.N, false, 0, halves);
        for (int o = 0; o < g.O; o++) /* (C, R*S) per output channel; (R*S, C) when NHWC */
            blend_to(hdw + (size_t)o * CKK, acc.data() + (size_t)o * CKK, g.C, (size_t)g.R * g.S,
                     g.nhwc, a, b);
        store_back(hdw0, dwb, g.bf16);
    });
    return status_of(e);
}

extern "C" {

/* y = alpha * conv(x, w) + beta * y */
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha,
                                      const cudnnTensorDescriptor_t xd, const void *x,
                                      const cudnnFilterDescriptor_t wd, const void *w,
                                      const cudnnConvolutionDescriptor_t cv,
                                      cudnnConvolutionFwdAlgo_t algo, void *ws, size_t ws_bytes,
                                      const void *beta, const cudnnTensorDescriptor_t yd, void *y)
{
    Geom g;
    if (!h || !alpha || !beta)
        return CUDNN_STATUS_BAD_PARAM;
    if (const cudnnStatus_t st_ = geom_of(xd, wd, cv, yd, &g); st_ != CUDNN_STATUS_SUCCESS)
        return st_;
    return twin_dnn::conv_fwd(h, g, algo, Variant{"cudnnConvolutionForward"}, x, w, y, ws, ws_bytes,
                              *(const float *)alpha, *(const float *)beta);
}

/* dx = alpha * conv^T(dy, w) + beta * dx */
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha,
                                           const cudnnFilterDescriptor_t wd, const void *w,
                                           const cudnnTensorDescriptor_t dyd, const void *dy,
                                           const cudnnConvolutionDescriptor_t cv,
                                           cudnnConvolutionBwdDataAlgo_t algo, void *ws,
                                           size_t ws_bytes, const void *beta,
                                           const cudnnTensorDescriptor_t dxd, void *dx)
{
    Geom g;
    if (!h || !alpha || !beta)
        return CUDNN_STATUS_BAD_PARAM;
    if (const cudnnStatus_t st_ = geom_of(dxd, wd, cv, dyd, &g); st_ != CUDNN_STATUS_SUCCESS)
        return st_;
    return twin_dnn::conv_bwd_data(h, g, algo, Variant{"cudnnConvolutionBackwardData"}, w, dy, dx,
                                   ws, ws_bytes, *(const float *)alpha, *(const float *)beta);
}

/* dw = alpha * sum over samples of dy_i col_i^T + beta * dw */
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha,
                                             const cudnnTensorDescriptor_t xd, const void *x,
                                             const cudnnTensorDescriptor_t dyd, const void *dy,
                                             const cudnnConvolutionDescriptor_t cv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *ws,
                                             size_t ws_bytes, const void *beta,
                                             const cudnnFilterDescriptor_t dwd, void *dw)
{
    Geom g;
    if (!h || !alpha || !beta)
        return CUDNN_STATUS_BAD_PARAM;
    if (const cudnnStatus_t st_ = geom_of(xd, dwd, cv, dyd, &g); st_ != CUDNN_STATUS_SUCCESS)
        return st_;
    return twin_dnn::conv_bwd_filter(h, g, algo, Variant{"cudnnConvolutionBackwardFilter"}, x, dy,
                                     dw, ws, ws_bytes, *(const float *)alpha, *(const float *)beta);
}

} /* extern "C" */

/* ---- timed algorithm search ---- */

namespace
{

/* DDP_EMU_CUDNN_MS=DIR:ALGO=MS[,...] (DIR fwd, data or filter): algorithm ALGO of that
 * direction "measures" MS milliseconds instead of its fixed time; with DDP_EMU_CUDNN_MS_RANK=R
 * only on rank R (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK). Parsed at each call
 * (searches run at model build only). -1 when no override names it. */
float twin_ms_override(int dir, int algo)
{
    const char *e = getenv("DDP_EMU_CUDNN_MS");
    if (!e || !*e || !twin::on_rank(getenv("DDP_EMU_CUDNN_MS_RANK")))
        return -1;
    static const char *const dirs[] = {"fwd:", "data:", "filter:"};
    for (const char *p = e; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : nullptr) {
        const size_t n = strlen(dirs[dir]);
        int a = -1;
        float ms = -1;
        if (strncmp(p, dirs[dir], n) == 0 && sscanf(p + n, "%d=%f", &a, &ms) == 2 && a == algo &&
            ms > 0)
            return ms;
    }
    return -1;
}

/* The twin's fixed "measured" time of algorithm algo of direction dir (0 forward, 1 backward
 * data, 2 backward filter), in ms. */
float twin_ms(int dir, int algo)
{
    const float over = twin_ms_override(dir, algo);
    if (over > 0)
        return over;
    if (dir == 0)
        return algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ? 0.4f : 1.0f;
    return algo == 0 ? 0.3f : 0.6f;
}

/* Run each of list's algorithms whose workspace fits ws_bytes through run(algo) and fill out
 * (at most n) with the results, fastest first; a failed run's status is returned. */
template <typename Perf, typename Run>
cudnnStatus_t find_ex(cudnnHandle_t h, int dir, Perf *list, int nlist, size_t ws_bytes, int n,
                      int *returned, Perf *out, Run run)
{
    std::vector<Perf> ok, failed;
    for (int i = 0; i < nlist; i++) {
        Perf p = list[i];
        if (p.memory > ws_bytes) {
            p.status = CUDNN_STATUS_NOT_SUPPORTED;
            p.time = -1;
            failed.push_back(p);
            continue;
        }
        const cudnnStatus_t st = run(p.algo);
        if (st != CUDNN_STATUS_SUCCESS)
            return st;
        if (cudaStreamSynchronize(h->stream) != cudaSuccess)
            return CUDNN_STATUS_EXECUTION_FAILED;
        p.time = twin_ms(dir, (int)p.algo);
        ok.push_back(p);
    }
    std::stable_sort(ok.begin(), ok.end(),
                     [](const Perf &a, const Perf &b) { return a.time < b.time; });
    ok.insert(ok.end(), failed.begin(), failed.end());
    int i = 0;
    for (const Perf &p : ok)
        if (i < n)
            out[i++] = p;
    *returned = i;
    return CUDNN_STATUS_SUCCESS;
}

} // namespace

extern "C" {

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
    const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t cv,
    const cudnnTensorDescriptor_t yd, void *y, const int n, int *returned,
    cudnnConvolutionFwdAlgoPerf_t *out, void *ws, size_t ws_bytes)
{
    cudnnConvolutionFwdAlgoPerf_t list[8];
    int nlist = 0;
    if (!returned || !out || n <= 0)
        return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t st = cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cv, yd, 8, &nlist, list);
    if (st != CUDNN_STATUS_SUCCESS)
        return st;
    const float one = 1, zero = 0;
    return find_ex(h, 0, list, nlist, ws_bytes, n, returned, out, [&](cudnnConvolutionFwdAlgo_t a) {
        return cudnnConvolutionForward(h, &one, xd, x, wd, w, cv, a, ws, ws_bytes, &zero, yd, y);
    });
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t h, const cudnnFilterDescriptor_t wd, const void *w,
    const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cv,
    const cudnnTensorDescriptor_t dxd, void *dx, const int n, int *returned,
    cudnnConvolutionBwdDataAlgoPerf_t *out, void *ws, size_t ws_bytes)
{
    cudnnConvolutionBwdDataAlgoPerf_t list[8];
    int nlist = 0;
    if (!returned || !out || n <= 0)
        return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t st =
        cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, dyd, cv, dxd, 8, &nlist, list);
    if (st != CUDNN_STATUS_SUCCESS)
        return st;
    const float one = 1, zero = 0;
    return find_ex(h, 1, list, nlist, ws_bytes, n, returned, out,
                   [&](cudnnConvolutionBwdDataAlgo_t a) {
                       return cudnnConvolutionBackwardData(h, &one, wd, w, dyd, dy, cv, a, ws,
                                                           ws_bytes, &zero, dxd, dx);
                   });
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
    const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cv,
    const cudnnFilterDescriptor_t dwd, void *dw, const int n, int *returned,
    cudnnConvolutionBwdFilterAlgoPerf_t *out, void *ws, size_t ws_bytes)
{
    cudnnConvolutionBwdFilterAlgoPerf_t list[8];
    int nlist = 0;
    if (!returned || !out || n <= 0)
        return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t st =
        cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd, dyd, cv, dwd, 8, &nlist, list);
    if (st != CUDNN_STATUS_SUCCESS)
        return st;
    const float one = 1, zero = 0;
    return find_ex(h, 2, list, nlist, ws_bytes, n, returned, out,
                   [&](cudnnConvolutionBwdFilterAlgo_t a) {
                       return cudnnConvolutionBackwardFilter(h, &one, xd, x, dyd, dy, cv, a, ws,
                                                             ws_bytes, &zero, dwd, dw);
                   });
}

} /* extern "C" */

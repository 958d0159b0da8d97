/*
 * cudnn_internal.h - what the twin's legacy cuDNN (cudnn.cc) shares with its graph API
 * (cudnn_graph.cc): a convolution's shape, and the three convolutions of the legacy
 * algorithms, queued on a handle's stream with their operands translated and checked, with
 * the variations the graph's engines add (Variant). Not part of any cuDNN API.
 */
#ifndef DDP_TWIN_CUDNN_INTERNAL_H
#define DDP_TWIN_CUDNN_INTERNAL_H

#include <stddef.h>

#include "cudnn.h"

namespace twin_dnn
{

/* One convolution's shape (cudnn.cc's geom_of from legacy descriptors, cudnn_graph.cc from
 * graph tensors): x (N, C, H, W), filter (O, C, R, S), y (N, O, OH, OW). */
struct Geom {
    int N, C, H, W, O, R, S, ph, pw, u, v, OH, OW;
    bool nhwc;         /* x, y and the filter channels-last (all three, or none) */
    bool bf16;         /* x, y and the filter bf16 (all three, or none) */
    size_t esz() const /* bytes of one value of x, y or the filter */
    {
        return bf16 ? 2 : 4;
    }
    size_t P() const
    {
        return (size_t)OH * OW;
    }
    size_t CKK() const
    {
        return (size_t)C * R * S;
    }
    size_t col_bytes() const
    {
        return 4 * CKK() * P();
    }
};

/* How a convolution departs from its legacy algorithm (all off: the legacy call itself). */
struct Variant {
    const char *call;    /* the API call, for fault reports */
    bool halves = false; /* the reduction summed as two halves added at the end */
    bool tf32 = false;   /* x, w, dy rounded to tf32 (10 mantissa bits) before computing */
    double cost_ms = -1; /* >= 0: the device clock advances by this, not the CPU time */
};

/* Workspace bytes of legacy algorithm algo (forward; backward data and filter alike); -1 for
 * one the twin does not have. */
long long fwd_ws(const Geom &g, int algo);
long long bwd_ws(const Geom &g, int algo);

/* The legacy convolutions on checked shapes: y = alpha conv(x, w) + beta y; dx = alpha
 * conv^T(dy, w) + beta dx; dw = alpha sum_i dy_i col_i^T + beta dw. Operands are device
 * addresses; ws_bytes the workspace given (a fault when smaller than the algorithm needs).
 * CUDNN_STATUS_NOT_SUPPORTED for an algorithm the twin does not have. */
cudnnStatus_t conv_fwd(cudnnHandle_t h, const Geom &g, int algo, const Variant &v, const void *x,
                       const void *w, void *y, void *ws, size_t ws_bytes, float alpha, float beta);
cudnnStatus_t conv_bwd_data(cudnnHandle_t h, const Geom &g, int algo, const Variant &v,
                            const void *w, const void *dy, void *dx, void *ws, size_t ws_bytes,
                            float alpha, float beta);
cudnnStatus_t conv_bwd_filter(cudnnHandle_t h, const Geom &g, int algo, const Variant &v,
                              const void *x, const void *dy, void *dw, void *ws, size_t ws_bytes,
                              float alpha, float beta);

} // namespace twin_dnn

#endif

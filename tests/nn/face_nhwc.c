/*
 * face_nhwc.c - the CPU backend behind a channels-last face, for the model's tests
 * (face_nhwc.h): every spatial entry takes its (B,H,W,C) arguments, transposes them to NCHW,
 * runs the CPU's own op and transposes the results back, so the arithmetic is the CPU's, bit
 * for bit.
 *
 * Dimension letters: B batch, C channels, S positions per channel.
 */
#include "face_nhwc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

static struct ddp_backend g_face; /* the CPU backend, channels-last */
static const struct ddp_backend *g_cpu;
static int g_layout = DDP_LAYOUT_NCHW;

static void to_nhwc(float *out, const float *inp, int B, int C, int S)
{
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            for (int s = 0; s < S; s++)
                out[((size_t)b * S + s) * C + c] = inp[((size_t)b * C + c) * S + s];
}

static void to_nchw(float *out, const float *inp, int B, int C, int S)
{
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            for (int s = 0; s < S; s++)
                out[((size_t)b * C + c) * S + s] = inp[((size_t)b * S + s) * C + c];
}

/* A fresh NCHW copy of channels-last t (NULL stays NULL); n = B*C*S. */
static float *nchw(const float *t, int B, int C, int S)
{
    if (!t)
        return NULL;
    float *p = ddp_malloc(sizeof(float) * ((size_t)B * C * S + 1));
    to_nchw(p, t, B, C, S);
    return p;
}

/* Scratch for an NCHW result (NULL when the caller passed none). */
static float *scratch(const void *want, int B, int C, int S)
{
    return want ? ddp_calloc((size_t)B * C * S + 1, sizeof(float)) : NULL;
}

/* Write NCHW result p into the caller's channels-last t, and free p. */
static void back(float *t, float *p, int B, int C, int S)
{
    if (t && p)
        to_nhwc(t, p, B, C, S);
    free(p);
}

static int set_layout(int layout, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    g_layout = layout;
    return 0;
}

static int layout(void)
{
    return g_layout;
}

static int out_hw(int n, const struct ddp_conv_geom *g)
{
    return (n + 2 * g->pad - g->k) / g->stride + 1;
}

static void conv2d_fwd(float *out, float *col, const float *inp, const float *w, const float *b,
                       int B, const struct ddp_conv_geom *g)
{
    const int P = out_hw(g->H, g) * out_hw(g->W, g);
    float *x = nchw(inp, B, g->C, g->H * g->W), *y = scratch(out, B, g->O, P);
    g_cpu->conv2d_fwd(y, col, x, w, b, B, g);
    back(out, y, B, g->O, P);
    free(x);
}

static void conv2d_bwd(float *dinp, float *dw, float *db, float *col, const float *dout,
                       const float *inp, const float *w, int B, const struct ddp_conv_geom *g)
{
    const int P = out_hw(g->H, g) * out_hw(g->W, g), S = g->H * g->W;
    float *x = nchw(inp, B, g->C, S), *dy = nchw(dout, B, g->O, P), *dx = scratch(dinp, B, g->C, S);
    g_cpu->conv2d_bwd(dx, dw, db, col, dy, x, w, B, g);
    back(dinp, dx, B, g->C, S);
    free(x);
    free(dy);
}

static void maxpool_fwd(float *out, int32_t *argmax, const float *inp, int B, int C, int H, int W,
                        int k)
{
    float *x = nchw(inp, B, C, H * W), *y = scratch(out, B, C, (H / k) * (W / k));
    g_cpu->maxpool_fwd(y, argmax, x, B, C, H, W, k); /* argmax: the CPU's own, as backend.h */
    back(out, y, B, C, (H / k) * (W / k));
    free(x);
}

static void maxpool_bwd(float *dinp, const float *dout, const int32_t *argmax, int B, int C, int H,
                        int W, int k)
{
    float *dy = nchw(dout, B, C, (H / k) * (W / k)), *dx = scratch(dinp, B, C, H * W);
    g_cpu->maxpool_bwd(dx, dy, argmax, B, C, H, W, k);
    back(dinp, dx, B, C, H * W);
    free(dy);
}

static void avgpool_fwd(float *out, const float *inp, int B, int C, int H, int W, int k)
{
    float *x = nchw(inp, B, C, H * W), *y = scratch(out, B, C, (H / k) * (W / k));
    g_cpu->avgpool_fwd(y, x, B, C, H, W, k);
    back(out, y, B, C, (H / k) * (W / k));
    free(x);
}

static void avgpool_bwd(float *dinp, const float *dout, int B, int C, int H, int W, int k)
{
    float *dy = nchw(dout, B, C, (H / k) * (W / k)), *dx = scratch(dinp, B, C, H * W);
    g_cpu->avgpool_bwd(dx, dy, B, C, H, W, k);
    back(dinp, dx, B, C, H * W);
    free(dy);
}

static void gap_fwd(float *out, const float *inp, int B, int C, int S)
{
    float *x = nchw(inp, B, C, S);
    g_cpu->gap_fwd(out, x, B, C, S);
    free(x);
}

static void gap_bwd(float *dinp, const float *dout, int B, int C, int S)
{
    float *dx = scratch(dinp, B, C, S);
    g_cpu->gap_bwd(dx, dout, B, C, S);
    back(dinp, dx, B, C, S);
}

static void bn_stats(double *sums, const float *inp, int B, int C, int S)
{
    float *x = nchw(inp, B, C, S);
    g_cpu->bn_stats(sums, x, B, C, S);
    free(x);
}

static void bn_fwd_apply(float *out, float *xhat, const float *inp, const float *mean,
                         const float *invstd, const float *gamma, const float *beta, int B, int C,
                         int S)
{
    float *x = nchw(inp, B, C, S), *y = scratch(out, B, C, S), *h = scratch(xhat, B, C, S);
    g_cpu->bn_fwd_apply(y, h, x, mean, invstd, gamma, beta, B, C, S);
    back(out, y, B, C, S);
    back(xhat, h, B, C, S);
    free(x);
}

static void bn_bwd_sums(double *sums, const float *dout, const float *xhat, int B, int C, int S)
{
    float *dy = nchw(dout, B, C, S), *h = nchw(xhat, B, C, S);
    g_cpu->bn_bwd_sums(sums, dy, h, B, C, S);
    free(dy);
    free(h);
}

static void bn_bwd_apply(float *dinp, float *dgamma, float *dbeta, const float *dout,
                         const float *xhat, const float *invstd, const float *gamma,
                         const double *local, const double *global, int B, int C, int S)
{
    float *dy = nchw(dout, B, C, S), *h = nchw(xhat, B, C, S), *dx = scratch(dinp, B, C, S);
    g_cpu->bn_bwd_apply(dx, dgamma, dbeta, dy, h, invstd, gamma, local, global, B, C, S);
    back(dinp, dx, B, C, S);
    free(dy);
    free(h);
}

const struct ddp_backend *face_nhwc(void)
{
    g_cpu = ddp_backend_cpu();
    g_face = *g_cpu;
    g_face.name = "cpu-channels-last";
    g_face.set_layout = set_layout;
    g_face.layout = layout;
    g_face.to_nhwc = to_nhwc;
    g_face.to_nchw = to_nchw;
    g_face.conv2d_fwd = conv2d_fwd;
    g_face.conv2d_bwd = conv2d_bwd;
    g_face.maxpool_fwd = maxpool_fwd;
    g_face.maxpool_bwd = maxpool_bwd;
    g_face.avgpool_fwd = avgpool_fwd;
    g_face.avgpool_bwd = avgpool_bwd;
    g_face.gap_fwd = gap_fwd;
    g_face.gap_bwd = gap_bwd;
    g_face.bn_stats = bn_stats;
    g_face.bn_fwd_apply = bn_fwd_apply;
    g_face.bn_bwd_sums = bn_bwd_sums;
    g_face.bn_bwd_apply = bn_bwd_apply;
    return &g_face;
}

void face_nhwc_layout(int layout)
{
    g_layout = layout;
}

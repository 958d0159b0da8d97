/*
 * test_model_act16.c - the model on bf16 activation storage (model.h act16, backend.h
 * set_act_type): its memory plan in 2-byte values, the converted input, the fp32 logits and
 * their gradient, the copies between activation buffers. Two faces over one fp32 backend (the
 * CPU's, or its channels-last face, face_nhwc.h) run the same arithmetic:
 *   rounded: fp32 storage (4 bytes a value) where every activation an entry writes is rounded
 *            to bf16's precision; the model sees an fp32 backend;
 *   bf16:    real 2-byte storage: each entry widens its activation inputs into float scratch,
 *            runs the backend's op and rounds its outputs into 2 bytes; set_act_type, act_type,
 *            act_from_f32 and act_to_f32 as backend.h lists them (dropout's mask, xent's logits
 *            and dlogits fp32).
 * The values are then the same wherever both store them, so a model on the bf16 face must
 * give the logits, loss, gradients and running statistics of the same model on the rounded
 * face bit for bit, over two training steps and an evaluation: a buffer sized in the wrong
 * element, a copy of the wrong length, a missing conversion or a block reused while live
 * changes them. Its plan must hold every activation block in half the bytes (rounded to the
 * plan's 256) and the fp32 ones unchanged. The input is bf16-exact (the rounded face reads it
 * as is). With `fused` the faces add the relu fusions of linear, conv2d, batchnorm and the
 * residual join (composed of the backend's plain ops on float scratch, in both faces alike);
 * the pool fusions need a byte argmax of the backend's own and are left to tests/gpu.
 *
 * Dimension letters: B batch, C channels, S positions per channel, K classes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"
#include "core/util.h"
#include "face_nhwc.h"
#include "nn/model.h"

#define PLAN_ALIGN 256 /* bytes: model_plan.c rounds every block up to a multiple */

enum face { ROUNDED, BF16 };

static const struct ddp_backend *g_base; /* the fp32 backend under both faces */
static struct ddp_backend g_tab[2];      /* [ROUNDED], [BF16] */
static enum face g_mode;                 /* the face whose entries run now */
static int g_act = DDP_ACT_FP32;         /* the bf16 face's storage (set_act_type) */
static int g_diagnosed; /* diagnoses that found a non-finite layer output (check_eval) */

/* float -> bf16, round to nearest even (NaN stays NaN). */
static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static float f32_of(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Activation input p of n values as floats: p itself (rounded face), else a widened copy. */
static const float *in_act(const float *p, size_t n)
{
    if (!p || g_mode == ROUNDED)
        return p;
    float *f = ddp_malloc(sizeof(float) * (n + 1));
    const uint16_t *h = (const uint16_t *)p;
    for (size_t i = 0; i < n; i++)
        f[i] = f32_of(h[i]);
    return f;
}

static void in_done(const float *f, const float *p)
{
    if (f != p)
        free((void *)f);
}

/* Where an op writes activation output p (n values) as floats: p itself (rounded face), else
 * scratch; acc: the scratch starts as p's values (an op that adds into it). */
static float *out_act(float *p, size_t n, int acc)
{
    if (!p || g_mode == ROUNDED)
        return p;
    return acc ? (float *)in_act(p, n) : ddp_calloc(n + 1, sizeof(float));
}

/* Store the op's output f into p: rounded in place (rounded face), or into 2 bytes a value
 * (f freed). */
static void out_done(float *p, float *f, size_t n)
{
    if (!p)
        return;
    if (g_mode == ROUNDED) {
        for (size_t i = 0; i < n; i++)
            p[i] = f32_of(bf16_of(p[i]));
        return;
    }
    uint16_t *h = (uint16_t *)p;
    for (size_t i = 0; i < n; i++)
        h[i] = bf16_of(f[i]);
    free(f);
}

/* ---- the plain entries ------------------------------------------------------------------ */

static void linear_fwd(float *out, const float *inp, const float *w, const float *b, int B, int C,
                       int O)
{
    const size_t ni = (size_t)B * C, no = (size_t)B * O;
    const float *x = in_act(inp, ni);
    float *y = out_act(out, no, 0);
    g_base->linear_fwd(y, x, w, b, B, C, O);
    out_done(out, y, no);
    in_done(x, inp);
}

static void linear_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, int B, int C, int O)
{
    const size_t ni = (size_t)B * C, no = (size_t)B * O;
    const float *dy = in_act(dout, no), *x = in_act(inp, ni);
    float *dx = out_act(dinp, ni, 0);
    g_base->linear_bwd(dx, dw, db, dy, x, w, B, C, O);
    out_done(dinp, dx, ni);
    in_done(dy, dout);
    in_done(x, inp);
}

static void relu_fwd(float *out, const float *inp, size_t n)
{
    const float *x = in_act(inp, n);
    float *y = out_act(out, n, 0);
    g_base->relu_fwd(y, x, n);
    out_done(out, y, n);
    in_done(x, inp);
}

static void relu_bwd(float *dinp, const float *dout, const float *out, size_t n)
{
    const float *dy = in_act(dout, n), *y = in_act(out, n);
    float *dx = out_act(dinp, n, 0);
    g_base->relu_bwd(dx, dy, y, n);
    out_done(dinp, dx, n);
    in_done(dy, dout);
    in_done(y, out);
}

static size_t conv_out(int B, const struct ddp_conv_geom *g)
{
    const int oh = (g->H + 2 * g->pad - g->k) / g->stride + 1;
    const int ow = (g->W + 2 * g->pad - g->k) / g->stride + 1;
    return (size_t)B * g->O * oh * ow;
}

static void conv2d_fwd(float *out, float *col, const float *inp, const float *w, const float *b,
                       int B, const struct ddp_conv_geom *g)
{
    const size_t ni = (size_t)B * g->C * g->H * g->W, no = conv_out(B, g);
    const float *x = in_act(inp, ni);
    float *y = out_act(out, no, 0);
    g_base->conv2d_fwd(y, col, x, w, b, B, g);
    out_done(out, y, no);
    in_done(x, inp);
}

static void conv2d_bwd(float *dinp, float *dw, float *db, float *col, const float *dout,
                       const float *inp, const float *w, int B, const struct ddp_conv_geom *g)
{
    const size_t ni = (size_t)B * g->C * g->H * g->W, no = conv_out(B, g);
    const float *dy = in_act(dout, no), *x = in_act(inp, ni);
    float *dx = out_act(dinp, ni, 0);
    g_base->conv2d_bwd(dx, dw, db, col, dy, x, w, B, g);
    out_done(dinp, dx, ni);
    in_done(dy, dout);
    in_done(x, inp);
}

static void maxpool_fwd(float *out, int32_t *argmax, const float *inp, int B, int C, int H, int W,
                        int k)
{
    const size_t ni = (size_t)B * C * H * W, no = (size_t)B * C * (H / k) * (W / k);
    const float *x = in_act(inp, ni);
    float *y = out_act(out, no, 0);
    g_base->maxpool_fwd(y, argmax, x, B, C, H, W, k);
    out_done(out, y, no);
    in_done(x, inp);
}

static void maxpool_bwd(float *dinp, const float *dout, const int32_t *argmax, int B, int C, int H,
                        int W, int k)
{
    const size_t ni = (size_t)B * C * H * W, no = (size_t)B * C * (H / k) * (W / k);
    const float *dy = in_act(dout, no);
    float *dx = out_act(dinp, ni, 0);
    g_base->maxpool_bwd(dx, dy, argmax, B, C, H, W, k);
    out_done(dinp, dx, ni);
    in_done(dy, dout);
}

static void avgpool_fwd(float *out, const float *inp, int B, int C, int H, int W, int k)
{
    const size_t ni = (size_t)B * C * H * W, no = (size_t)B * C * (H / k) * (W / k);
    const float *x = in_act(inp, ni);
    float *y = out_act(out, no, 0);
    g_base->avgpool_fwd(y, x, B, C, H, W, k);
    out_done(out, y, no);
    in_done(x, inp);
}

static void avgpool_bwd(float *dinp, const float *dout, int B, int C, int H, int W, int k)
{
    const size_t ni = (size_t)B * C * H * W, no = (size_t)B * C * (H / k) * (W / k);
    const float *dy = in_act(dout, no);
    float *dx = out_act(dinp, ni, 0);
    g_base->avgpool_bwd(dx, dy, B, C, H, W, k);
    out_done(dinp, dx, ni);
    in_done(dy, dout);
}

static void gap_fwd(float *out, const float *inp, int B, int C, int S)
{
    const size_t ni = (size_t)B * C * S, no = (size_t)B * C;
    const float *x = in_act(inp, ni);
    float *y = out_act(out, no, 0);
    g_base->gap_fwd(y, x, B, C, S);
    out_done(out, y, no);
    in_done(x, inp);
}

static void gap_bwd(float *dinp, const float *dout, int B, int C, int S)
{
    const size_t ni = (size_t)B * C * S, no = (size_t)B * C;
    const float *dy = in_act(dout, no);
    float *dx = out_act(dinp, ni, 0);
    g_base->gap_bwd(dx, dy, B, C, S);
    out_done(dinp, dx, ni);
    in_done(dy, dout);
}

static void add(float *out, const float *a, const float *b, size_t n)
{
    const float *x = in_act(a, n), *y = in_act(b, n);
    float *z = out_act(out, n, 0);
    g_base->add(z, x, y, n);
    out_done(out, z, n);
    in_done(x, a);
    in_done(y, b);
}

static void bn_stats(double *sums, const float *inp, int B, int C, int S)
{
    const float *x = in_act(inp, (size_t)B * C * S);
    g_base->bn_stats(sums, x, B, C, S);
    in_done(x, inp);
}

static void bn_fwd_apply(float *out, float *xhat, const float *inp, const float *mean,
                         const float *invstd, const float *gamma, const float *beta, int B, int C,
                         int S)
{
    const size_t n = (size_t)B * C * S;
    const float *x = in_act(inp, n);
    float *y = out_act(out, n, 0), *h = out_act(xhat, n, 0);
    g_base->bn_fwd_apply(y, h, x, mean, invstd, gamma, beta, B, C, S);
    out_done(out, y, n);
    out_done(xhat, h, n);
    in_done(x, inp);
}

static void bn_bwd_sums(double *sums, const float *dout, const float *xhat, int B, int C, int S)
{
    const size_t n = (size_t)B * C * S;
    const float *dy = in_act(dout, n), *h = in_act(xhat, n);
    g_base->bn_bwd_sums(sums, dy, h, B, C, S);
    in_done(dy, dout);
    in_done(h, xhat);
}

static void bn_bwd_apply(float *dinp, float *dgamma, float *dbeta, const float *dout,
                         const float *xhat, const float *invstd, const float *gamma,
                         const double *local, const double *global, int B, int C, int S)
{
    const size_t n = (size_t)B * C * S;
    const float *dy = in_act(dout, n), *h = in_act(xhat, n);
    float *dx = out_act(dinp, n, 0);
    g_base->bn_bwd_apply(dx, dgamma, dbeta, dy, h, invstd, gamma, local, global, B, C, S);
    out_done(dinp, dx, n);
    in_done(dy, dout);
    in_done(h, xhat);
}

static void dropout_fwd(float *out, float *mask, const float *inp, size_t n, float p, uint64_t seed)
{
    const float *x = in_act(inp, n);
    float *y = out_act(out, n, 0);
    g_base->dropout_fwd(y, mask, x, n, p, seed); /* the mask: fp32 in both faces */
    out_done(out, y, n);
    in_done(x, inp);
}

static void dropout_bwd(float *dinp, const float *dout, const float *mask, size_t n)
{
    const float *dy = in_act(dout, n);
    float *dx = out_act(dinp, n, 0);
    g_base->dropout_bwd(dx, dy, mask, n);
    out_done(dinp, dx, n);
    in_done(dy, dout);
}

static void to_nhwc(float *out, const float *inp, int B, int C, int S)
{
    const size_t n = (size_t)B * C * S;
    const float *x = in_act(inp, n);
    float *y = out_act(out, n, 0);
    g_base->to_nhwc(y, x, B, C, S);
    out_done(out, y, n);
    in_done(x, inp);
}

static void to_nchw(float *out, const float *inp, int B, int C, int S)
{
    const size_t n = (size_t)B * C * S;
    const float *x = in_act(inp, n);
    float *y = out_act(out, n, 0);
    g_base->to_nchw(y, x, B, C, S);
    out_done(out, y, n);
    in_done(x, inp);
}

/* The rounded face's dlogits are the last layer's dout, an activation: rounded. The bf16
 * face's are fp32 (the model converts them). */
static double xent(float *dlogits, int64_t *correct, const float *logits, const int32_t *labels,
                   int B, int K, float grad_scale, float smoothing)
{
    const double loss = g_base->xent(dlogits, correct, logits, labels, B, K, grad_scale, smoothing);
    if (dlogits && g_mode == ROUNDED)
        out_done(dlogits, dlogits, (size_t)B * K);
    return loss;
}

/* ---- the relu fusions: the plain ops on float scratch, the stored outputs rounded ------- */

static void linear_relu_fwd(float *out, const float *inp, const float *w, const float *b, int B,
                            int C, int O)
{
    const size_t ni = (size_t)B * C, no = (size_t)B * O;
    const float *x = in_act(inp, ni);
    float *y = out_act(out, no, 0);
    g_base->linear_fwd(y, x, w, b, B, C, O);
    g_base->relu_fwd(y, y, no);
    out_done(out, y, no);
    in_done(x, inp);
}

static void conv2d_relu_fwd(float *out, float *col, const float *inp, const float *w,
                            const float *b, int B, const struct ddp_conv_geom *g)
{
    const size_t ni = (size_t)B * g->C * g->H * g->W, no = conv_out(B, g);
    const float *x = in_act(inp, ni);
    float *y = out_act(out, no, 0);
    g_base->conv2d_fwd(y, col, x, w, b, B, g);
    g_base->relu_fwd(y, y, no);
    out_done(out, y, no);
    in_done(x, inp);
}

static void bn_relu_fwd_apply(float *out, float *xhat, const float *inp, const float *mean,
                              const float *invstd, const float *gamma, const float *beta, int B,
                              int C, int S)
{
    const size_t n = (size_t)B * C * S;
    const float *x = in_act(inp, n);
    float *y = out_act(out, n, 0), *h = out_act(xhat, n, 0);
    g_base->bn_fwd_apply(y, h, x, mean, invstd, gamma, beta, B, C, S);
    g_base->relu_fwd(y, y, n);
    out_done(out, y, n);
    out_done(xhat, h, n);
    in_done(x, inp);
}

/* dout through the relu's backward (out: the relu's output), as floats (caller frees). */
static float *relu_grad(const float *dout, const float *out, size_t n)
{
    const float *dy = in_act(dout, n), *y = in_act(out, n);
    float *g = ddp_malloc(sizeof(float) * (n + 1));
    g_base->relu_bwd(g, dy, y, n);
    in_done(dy, dout);
    in_done(y, out);
    return g;
}

static void bn_relu_bwd_sums(double *sums, const float *dout, const float *out, const float *xhat,
                             int B, int C, int S)
{
    const size_t n = (size_t)B * C * S;
    float *g = relu_grad(dout, out, n);
    const float *h = in_act(xhat, n);
    g_base->bn_bwd_sums(sums, g, h, B, C, S);
    in_done(h, xhat);
    free(g);
}

static void bn_relu_bwd_apply(float *dinp, float *dgamma, float *dbeta, const float *dout,
                              const float *out, const float *xhat, const float *invstd,
                              const float *gamma, const double *local, const double *global, int B,
                              int C, int S)
{
    const size_t n = (size_t)B * C * S;
    float *g = relu_grad(dout, out, n), *dx = out_act(dinp, n, 0);
    const float *h = in_act(xhat, n);
    g_base->bn_bwd_apply(dx, dgamma, dbeta, g, h, invstd, gamma, local, global, B, C, S);
    out_done(dinp, dx, n);
    in_done(h, xhat);
    free(g);
}

static void add_relu_fwd(float *out, const float *a, const float *b, size_t n)
{
    const float *x = in_act(a, n), *y = in_act(b, n);
    float *z = out_act(out, n, 0);
    g_base->add(z, x, y, n);
    g_base->relu_fwd(z, z, n);
    out_done(out, z, n);
    in_done(x, a);
    in_done(y, b);
}

/* One input's gradient of a join: d = g, or d + g with acc; stored before the next. */
static void join_grad(float *d, int acc, const float *g, size_t n)
{
    if (!d)
        return;
    float *f = out_act(d, n, acc);
    if (acc)
        g_base->add(f, f, g, n);
    else
        memcpy(f, g, sizeof(float) * n);
    out_done(d, f, n);
}

static void relu_bwd_join(float *da, int acc_a, float *db, int acc_b, const float *dout,
                          const float *out, size_t n)
{
    float *g = relu_grad(dout, out, n);
    join_grad(da, acc_a, g, n); /* da before db: they may be one buffer */
    join_grad(db, acc_b, g, n);
    free(g);
}

/* ---- the bf16 face's own entries -------------------------------------------------------- */

static int set_act_type(int type, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    g_act = type;
    return 0;
}

static int act_type(void)
{
    return g_act;
}

/* out (bf16, the layout in force) = inp (B, C, S) fp32 NCHW. */
static void act_from_f32(float *out, const float *inp, int B, int C, int S)
{
    const size_t n = (size_t)B * C * S;
    float *t = NULL;
    if (S > 1 && g_base->layout && g_base->layout() == DDP_LAYOUT_NHWC) {
        t = ddp_malloc(sizeof(float) * (n + 1));
        g_base->to_nhwc(t, inp, B, C, S);
    }
    uint16_t *h = (uint16_t *)out;
    for (size_t i = 0; i < n; i++)
        h[i] = bf16_of(t ? t[i] : inp[i]);
    free(t);
}

static void act_to_f32(float *out, const float *inp, size_t n)
{
    const uint16_t *h = (const uint16_t *)inp;
    for (size_t i = 0; i < n; i++)
        out[i] = f32_of(h[i]);
}

/* The two faces over base, with the relu fusions or without. */
static void faces_make(const struct ddp_backend *base, int fused)
{
    struct ddp_backend t = *base;
    g_base = base;
    t.linear_fwd = linear_fwd, t.linear_bwd = linear_bwd;
    t.relu_fwd = relu_fwd, t.relu_bwd = relu_bwd;
    t.conv2d_fwd = conv2d_fwd, t.conv2d_bwd = conv2d_bwd;
    t.maxpool_fwd = maxpool_fwd, t.maxpool_bwd = maxpool_bwd;
    t.avgpool_fwd = avgpool_fwd, t.avgpool_bwd = avgpool_bwd;
    t.gap_fwd = gap_fwd, t.gap_bwd = gap_bwd;
    t.add = add;
    t.bn_stats = bn_stats, t.bn_fwd_apply = bn_fwd_apply;
    t.bn_bwd_sums = bn_bwd_sums, t.bn_bwd_apply = bn_bwd_apply;
    t.dropout_fwd = dropout_fwd, t.dropout_bwd = dropout_bwd;
    t.xent = xent;
    t.xent_acc = NULL;
    t.to_nhwc = base->to_nhwc ? to_nhwc : NULL;
    t.to_nchw = base->to_nchw ? to_nchw : NULL;
    t.relu_maxpool_fwd = NULL, t.maxpool_relu_bwd = NULL, t.conv2d_relu_maxpool_fwd = NULL;
    t.linear_relu_fwd = fused ? linear_relu_fwd : NULL;
    t.conv2d_relu_fwd = fused ? conv2d_relu_fwd : NULL;
    t.bn_relu_fwd_apply = fused ? bn_relu_fwd_apply : NULL;
    t.bn_relu_bwd_sums = fused ? bn_relu_bwd_sums : NULL;
    t.bn_relu_bwd_apply = fused ? bn_relu_bwd_apply : NULL;
    t.add_relu_fwd = fused ? add_relu_fwd : NULL;
    t.relu_bwd_join = fused ? relu_bwd_join : NULL;
    t.set_act_type = NULL, t.act_type = NULL, t.act_from_f32 = NULL, t.act_to_f32 = NULL;
    g_tab[ROUNDED] = t;
    g_tab[ROUNDED].name = "cpu-bf16-rounded";
    g_tab[BF16] = t;
    g_tab[BF16].name = "cpu-bf16";
    g_tab[BF16].set_act_type = set_act_type;
    g_tab[BF16].act_type = act_type;
    g_tab[BF16].act_from_f32 = act_from_f32;
    g_tab[BF16].act_to_f32 = act_to_f32;
}

/* ---- the checks ------------------------------------------------------------------------- */

static size_t aligned(size_t bytes)
{
    return (bytes + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
}

static const struct ddp_mem_block *find_block(const struct ddp_mem_plan *p, int layer,
                                              enum ddp_mem_what what)
{
    for (int i = 0; i < p->nblocks; i++)
        if (p->blocks[i].layer == layer && p->blocks[i].what == what)
            return &p->blocks[i];
    return NULL;
}

/* Values of block b of model m: what it holds per sample. */
static size_t block_elems(const struct ddp_model *m, const struct ddp_mem_block *b)
{
    if (b->layer < 0)
        return b->what == DDP_MEM_XIN ? m->in_elems : (size_t)m->classes;
    const struct ddp_layer *l = &m->layers[b->layer];
    return b->what == DDP_MEM_DTMP ? m->layers[l->in].out_elems : l->out_elems;
}

/* 1 for a block that stays fp32 (or bytes) under bf16 storage. */
static int kept(const struct ddp_model *m, const struct ddp_mem_block *b)
{
    return b->what == DDP_MEM_ARGMAX || b->what == DDP_MEM_ARGMAX8 ||
           (b->what == DDP_MEM_AUX && m->layers[b->layer].spec.kind == DDP_LAYER_DROPOUT);
}

/* The plans of the rounded model r and the bf16 model h for batches of B: every activation
 * block of r in h at half the bytes (each rounded up to the plan's alignment), the kept ones
 * unchanged, h's input copy in 2-byte values and its fp32 logits and dlogits. */
static void check_plans(const char *layers, const struct ddp_model *r, const struct ddp_model *h,
                        int B)
{
    struct ddp_mem_plan p[2];
    char err[256];
    size_t act[2] = {0, 0};
    ddp_mem_plan_make(r, B, &p[0]);
    ddp_mem_plan_make(h, B, &p[1]);
    CHECK(ddp_mem_plan_check(&p[1], err, sizeof err) == 0, "%s: bf16 plan: %s", layers, err);
    for (int i = 0; i < p[0].nblocks; i++) {
        const struct ddp_mem_block *a = &p[0].blocks[i], *b = find_block(&p[1], a->layer, a->what);
        CHECK(b != NULL, "%s: block %d (layer %d) missing under bf16", layers, i, a->layer);
        if (!b)
            continue;
        const size_t e = (size_t)B * block_elems(r, a);
        const int k = kept(r, a);
        if (!k) {
            act[0] += a->bytes;
            act[1] += b->bytes;
        }
        CHECK(a->bytes == (k ? b->bytes : aligned(e * 4)) &&
                  b->bytes == (k ? a->bytes : aligned(e * 2)),
              "%s: layer %d block kind %d: %zu bytes under fp32, %zu under bf16, for %zu values",
              layers, a->layer, (int)a->what, a->bytes, b->bytes, e);
    }
    const struct ddp_mem_block *x = find_block(&p[1], -1, DDP_MEM_XIN);
    const struct ddp_mem_block *lg = find_block(&p[1], -1, DDP_MEM_LOGITS);
    const struct ddp_mem_block *dl = find_block(&p[1], -1, DDP_MEM_DLOGITS);
    const size_t bk = aligned((size_t)B * (size_t)h->classes * 4);
    CHECK(x && x->bytes == aligned((size_t)B * h->in_elems * 2), "%s: the bf16 input copy", layers);
    CHECK(lg && lg->bytes == bk && dl && dl->bytes == bk, "%s: fp32 logits and dlogits", layers);
    CHECK(p[1].nblocks == p[0].nblocks + 2 + !find_block(&p[0], -1, DDP_MEM_XIN),
          "%s: %d blocks under bf16, %d under fp32", layers, p[1].nblocks, p[0].nblocks);
    CHECK(2 * act[1] >= act[0] && 2 * act[1] < act[0] + 2 * PLAN_ALIGN * (size_t)p[0].nblocks,
          "%s: activation blocks %zu bytes under bf16, %zu under fp32", layers, act[1], act[0]);
    printf("%-72.72s arena %7zu -> %7zu bytes, activation blocks %7zu -> %7zu\n", layers,
           p[0].arena, p[1].arena, act[0], act[1]);
    ddp_mem_plan_free(&p[0]);
    ddp_mem_plan_free(&p[1]);
}

/* Both models' training step on x: the logits, the loss and the gradients bit for bit. */
static void check_step(const char *what, struct ddp_model *m, const float *x, const int32_t *y,
                       int B, int step)
{
    const float *logits[2];
    double loss[2];
    for (int k = 0; k < 2; k++) {
        g_mode = (enum face)k;
        memset(m[k].grads, 0, sizeof(float) * m[k].nparams);
        logits[k] = ddp_model_forward(&m[k], x, B, 1, 99 + (uint64_t)step);
        loss[k] = g_tab[k].xent(ddp_model_dlogits(&m[k]), NULL, logits[k], y, B, m[k].classes,
                                1.0f / (float)B, 0.1f);
        ddp_model_backward(&m[k], x, B, NULL, NULL);
    }
    CHECK(memcmp(logits[0], logits[1], sizeof(float) * (size_t)B * m[0].classes) == 0,
          "%s: step %d logits differ (%g, %g)", what, step, logits[0][0], logits[1][0]);
    CHECK(loss[0] == loss[1], "%s: step %d loss %.9g, %.9g", what, step, loss[0], loss[1]);
    CHECK(memcmp(m[0].grads, m[1].grads, sizeof(float) * m[0].nparams) == 0,
          "%s: step %d gradients differ", what, step);
    CHECK(memcmp(m[0].buffers, m[1].buffers, sizeof(float) * m[0].nbuffers) == 0,
          "%s: step %d running statistics differ", what, step);
    for (size_t i = 0; i < m[0].nparams; i++) /* a step of plain SGD for the next */
        m[0].params[i] = m[1].params[i] = m[0].params[i] - 0.1f * m[0].grads[i];
}

/* After the steps: an evaluation pass alike, and the diagnosis of a diverged first layer
 * with parameters (every activation downloaded, widened from bf16 on the host) in the same
 * words. */
static void check_eval(const char *what, struct ddp_model *m, const float *x, int B)
{
    const float *logits[2];
    char why[2][512];
    for (int k = 0; k < 2; k++) {
        g_mode = (enum face)k;
        logits[k] = ddp_model_forward(&m[k], x, B, 0, 0);
    }
    CHECK(memcmp(logits[0], logits[1], sizeof(float) * (size_t)B * m[0].classes) == 0,
          "%s: evaluation logits differ", what);
    for (int k = 0; k < 2; k++) {
        g_mode = (enum face)k;
        const struct ddp_layer *l = &m[k].layers[0];
        while (!l->w_n)
            l++;
        for (size_t i = 0; i < l->w_n; i++) /* overflows its output, not its weights */
            m[k].params[l->w_off + i] = (i % 2 ? 3e38f : 2e38f);
        ddp_model_explain_nonfinite(&m[k], x, B, 5, why[k], sizeof why[k]);
    }
    CHECK(strcmp(why[0], why[1]) == 0, "%s: diagnoses differ:\n  %s\n  %s", what, why[0], why[1]);
    g_diagnosed += strstr(why[1], "is the first whose output is non-finite") != NULL;
}

/* layers on B samples of dims (ndim 1 or 3) on both faces over base (channels-last where
 * nhwc), with the relu fusions or without. */
static void same(const char *layers, int ndim, int64_t d0, int64_t d1, int64_t d2, int nhwc,
                 int fused)
{
    enum { B = 5 };
    const int64_t dims[3] = {d0, d1, d2};
    const size_t in = (size_t)(ndim == 3 ? d0 * d1 * d2 : d0);
    struct ddp_model m[2];
    char err[512] = "", what[600];
    snprintf(what, sizeof what, "%s [%s%s]", layers, nhwc ? "nhwc" : "nchw",
             fused ? ", fused" : "");
    faces_make(nhwc ? face_nhwc() : ddp_backend_cpu(), fused);
    face_nhwc_layout(nhwc ? DDP_LAYOUT_NHWC : DDP_LAYOUT_NCHW);
    g_act = DDP_ACT_FP32;
    CHECK(g_tab[BF16].set_act_type(DDP_ACT_BF16, err, sizeof err) == 0, "set_act_type");
    float *x = ddp_malloc(sizeof(float) * B * in);
    int32_t y[B];
    for (size_t i = 0; i < B * in; i++) /* bf16-exact: the rounded face reads x as is */
        x[i] = (float)((int)((i * 7919 + 13) % 101) - 50) / 32.0f;
    for (int k = 0; k < 2; k++) {
        g_mode = (enum face)k;
        int rc = ddp_model_create(&m[k], &g_tab[k], layers, ndim, dims, B, err, sizeof err);
        CHECK(rc == 0, "%s: %s", what, err);
        if (rc)
            return;
        ddp_model_init(&m[k], 7);
    }
    for (int i = 0; i < B; i++)
        y[i] = (int32_t)((i * 3 + 1) % m[0].classes);
    CHECK(m[1].act16 && m[1].act_bytes == 2 && !m[0].act16 && m[0].act_bytes == 4,
          "%s: act16 %d/%d", what, m[0].act16, m[1].act16);
    CHECK(m[1].xin && m[1].logits && m[1].dlogits && !m[0].logits && !m[0].dlogits,
          "%s: the bf16 model's own blocks", what);
    check_plans(what, &m[0], &m[1], B);
    for (int step = 0; step < 2; step++)
        check_step(what, m, x, y, B, step);
    check_eval(what, m, x, B);
    for (int k = 0; k < 2; k++)
        ddp_model_free(&m[k]);
    free(x);
}

int main(void)
{
    static const struct {
        const char *layers;
        int ndim;
        int64_t d[3];
    } models[] = {
        /* an MLP with dropout on a flat input (the input copy as (in_elems, 1)) */
        {"linear(32), relu, dropout(0.5), linear(16), relu, linear(10)", 1, {20, 1, 1}},
        /* dropout(0) copies its input, forward and backward, in training too (widths where a
         * copy of the wrong length reaches a live block) */
        {"linear(64), dropout(0), linear(64), dropout(0), linear(10)", 1, {12, 1, 1}},
        {"linear(64), relu, dropout(0), linear(10)", 1, {64, 1, 1}},
        /* a CNN with maxpool and batchnorm, a flatten of 8x3x3 */
        {"conv2d(8, 3, pad=1), relu, maxpool(2), conv2d(8, 3, stride=2), batchnorm, relu,"
         " flatten, linear(16), relu, linear(10)",
         3,
         {3, 12, 12}},
        /* batchnorm CNN, a batchnorm after flatten (S = 1), avgpool */
        {"conv2d(6, 3, pad=1, bias=false), batchnorm, relu, avgpool(2), conv2d(6, 3, pad=1),"
         " batchnorm, relu, globalavgpool, flatten, batchnorm, linear(10)",
         3,
         {3, 8, 8}},
        /* a residual block at the input: its shortcut and body both read the copy */
        {"residual(conv2d(8, 3, pad=1, bias=false), batchnorm, relu, conv2d(8, 3, pad=1)), relu,"
         " residual(conv2d(8, 3, pad=1), batchnorm, relu), relu, globalavgpool, flatten,"
         " linear(10)",
         3,
         {3, 8, 8}},
        /* an identity block at the input: the join adds the copy itself */
        {"residual(conv2d(3, 3, pad=1), relu), maxpool(2), flatten, dropout(0.5), linear(10)",
         3,
         {3, 6, 6}},
        /* a flatten first reads the input's copy in PyTorch's order; the last layer a relu */
        {"flatten, linear(12), relu, dropout(0.25), linear(10), relu", 3, {3, 4, 4}},
        /* the last layer a flatten (a view): its dout is the pool's */
        {"conv2d(10, 3), relu, globalavgpool, flatten", 3, {3, 5, 5}},
        {"conv2d(4, 3, pad=1), relu, avgpool(2), flatten, linear(10)", 3, {1, 8, 8}},
    };
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        for (int nhwc = 0; nhwc < 2; nhwc++)
            for (int fused = 0; fused < 2; fused++)
                same(models[i].layers, models[i].ndim, models[i].d[0], models[i].d[1],
                     models[i].d[2], nhwc, fused);
    /* most first layers overflow (a relu after one may clip it to zeros) */
    printf("%d diagnoses of 40 found a non-finite layer output\n", g_diagnosed);
    CHECK(g_diagnosed >= 30, "%d diagnoses found a non-finite output", g_diagnosed);
    return check_report("test_model_act16");
}

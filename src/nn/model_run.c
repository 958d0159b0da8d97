/*
 * model_run.c - a built model run through its backend: forward and backward over the layer
 * list (residual joins, batchnorm, fused layer pairs, gradient accumulation), the one-line
 * description, and the diagnosis of a non-finite loss. See model.h.
 *
 * Dimension letters: B batch, C H W channels/height/width, D features, K classes, S spatial.
 */
#include "nn/model.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/suggest.h"
#include "core/util.h"
#include "nn/model_impl.h"

/* ---- forward / backward ----------------------------------------------------------------- */

#define BN_EPS 1e-5
#define BN_MOMENTUM 0.1

/* Channels and positions per channel of a batchnorm input: (C,H,W) -> C, H*W; (D) -> D, 1. */
static void bn_dims(const struct ddp_layer *l, int *C, int *S)
{
    *C = l->ishape[0];
    *S = l->in_ndim == 3 ? l->ishape[1] * l->ishape[2] : 1;
}

/* Batchnorm forward. The statistics stay in backend memory from the reduction through the
 * SyncBatchNorm all-reduce (sync_sums) to mean, invstd and the running statistics: on a GPU
 * no host round trip. With its relu (fused 6) only the final apply changes: it writes the
 * relu's out. */
static void bn_forward(struct ddp_model *m, struct ddp_layer *l, const float *x, int B, int train)
{
    const struct ddp_backend *be = m->be;
    int C, S;
    bn_dims(l, &C, &S);
    float *gamma = m->params + l->w_off, *beta = m->params + l->b_off;
    float *rm = m->buffers + l->rm_off, *rv = m->buffers + l->rv_off;
    float *out = l->fused == 6 ? l[1].out : l->out;
    __typeof__(be->bn_fwd_apply) apply = l->fused == 6 ? be->bn_relu_fwd_apply : be->bn_fwd_apply;
    if (!train) {
        be->bn_update(l->mean, l->invstd, rm, rv, NULL, C, BN_EPS, BN_MOMENTUM);
        apply(out, NULL, x, l->mean, l->invstd, gamma, beta, B, C, S);
        return;
    }
    double *sums = l->sums; /* [0,2C): sum, sumsq; [2C]: count */
    be->bn_stats(sums, x, B, C, S);
    if (m->sync_sums)
        m->sync_sums(m->sync_ctx, sums, 2 * (size_t)C + 1);
    be->bn_update(l->mean, l->invstd, rm, rv, sums, C, BN_EPS, BN_MOMENTUM);
    l->num_batches_tracked++;
    apply(out, l->aux, x, l->mean, l->invstd, gamma, beta, B, C, S);
}

/* Spatial positions per channel of a (C,H,W) layer input. */
static int spatial(const struct ddp_layer *l)
{
    return l->ishape[1] * l->ishape[2];
}

/* The output of layer i, or the model's input x for i = -1 (what in and in2 name; its
 * converted copy where the model keeps one). */
static const float *value_of(const struct ddp_model *m, int i, const float *x)
{
    return i >= 0 ? m->layers[i].out : m->xin ? m->xin : x;
}

/* Before layer 0: the converted copy of the input x, where the model keeps one: bf16 (and
 * channels-last where a spatial layer reads it) by act_from_f32, else channels-last. */
static void input_forward(struct ddp_model *m, const float *x, int B)
{
    if (!m->xin)
        return;
    const int relayout = model_input_relayout(m);
    const int C = relayout ? m->ishape[0] : (int)m->in_elems;
    const int S = relayout ? m->ishape[1] * m->ishape[2] : 1;
    if (m->act16)
        m->be->act_from_f32(m->xin, x, B, C, S);
    else
        m->be->to_nhwc(m->xin, x, B, C, S);
}

/* Bytes of n activations in the storage in force (model.h act_bytes). */
static size_t act_size(const struct ddp_model *m, size_t n)
{
    return m->act_bytes * n;
}

/* 1 when relu layer r's forward ran with the layers before it (a conv2d with fused 3). */
static int relu_ran(const struct ddp_model *m, int r)
{
    const int c = m->layers[r].in;
    return c >= 0 && m->layers[c].fused == 3;
}

/* Layer i of the forward pass on the model's input x (B, in_elems of layer 0). */
static void layer_forward(struct ddp_model *m, int i, const float *x, int B, int train,
                          uint64_t noise_seed)
{
    const struct ddp_backend *be = m->be;
    struct ddp_layer *l = &m->layers[i];
    const struct ddp_layer_spec *s = &l->spec;
    const float *inp = value_of(m, l->in, x);
    float *w = m->params + l->w_off, *b = l->b_n ? m->params + l->b_off : NULL;
    size_t n = (size_t)B * l->out_elems;
    switch (s->kind) {
    case DDP_LAYER_FLATTEN: /* a view, of the input in PyTorch's order at the model's input */
        if (l->relayout)
            be->to_nchw(l->out, inp, B, l->ishape[0], spatial(l));
        else /* (under bf16 the input's copy: a spatial layer never reads the same input) */
            l->out = (float *)(l->in < 0 && !m->act16 ? x : inp);
        break;
    case DDP_LAYER_LINEAR:
        if (l->fused == 1)
            be->linear_relu_fwd(m->layers[i + 1].out, inp, w, b, B, l->ishape[0], l->oshape[0]);
        else
            be->linear_fwd(l->out, inp, w, b, B, l->ishape[0], l->oshape[0]);
        break;
    case DDP_LAYER_RELU:
        if (l->fused != 2 && l->fused != 4 && l->fused != 7 && l->fused != 9)
            be->relu_fwd(l->out, inp, n);
        break;
    case DDP_LAYER_CONV2D: {
        const struct ddp_conv_geom g = model_conv_geom(l);
        if (l->fused == 3) { /* conv2d, relu, maxpool: the pool's out and argmax */
            const struct ddp_layer *p = &m->layers[i + 2];
            be->conv2d_relu_maxpool_fwd(p->out, p->argmax8, l->out, m->col, inp, w, b, B, &g,
                                        p->spec.k);
            break;
        }
        (l->fused == 1 ? be->conv2d_relu_fwd : be->conv2d_fwd)(
            l->fused == 1 ? m->layers[i + 1].out : l->out, m->col, inp, w, b, B, &g);
        break;
    }
    case DDP_LAYER_MAXPOOL:
        if (l->fused == 5 && !relu_ran(m, l->in)) /* else the conv2d before ran all three */
            be->relu_maxpool_fwd(l->out, l->argmax8, value_of(m, m->layers[l->in].in, x), B,
                                 l->ishape[0], l->ishape[1], l->ishape[2], s->k);
        else if (l->fused != 5)
            be->maxpool_fwd(l->out, l->argmax, inp, B, l->ishape[0], l->ishape[1], l->ishape[2],
                            s->k);
        break;
    case DDP_LAYER_AVGPOOL:
        be->avgpool_fwd(l->out, inp, B, l->ishape[0], l->ishape[1], l->ishape[2], s->k);
        break;
    case DDP_LAYER_GLOBALAVGPOOL:
        be->gap_fwd(l->out, inp, B, l->ishape[0], spatial(l));
        break;
    case DDP_LAYER_DROPOUT:
        if (train && s->p > 0)
            be->dropout_fwd(l->out, l->aux, inp, n, s->p,
                            noise_seed ^ (0xd1b54a32d192ed03ULL * (uint64_t)(i + 1)));
        else
            be->upload(l->out, inp, act_size(m, n));
        break;
    case DDP_LAYER_BATCHNORM:
        bn_forward(m, l, inp, B, train);
        break;
    case DDP_LAYER_RESIDUAL: /* a block at the model's input adds the input itself */
        /* with its relu (8): max(0, the sum) into the relu's out */
        if (l->fused == 8)
            be->add_relu_fwd(m->layers[i + 1].out, inp, value_of(m, l->in2, x), n);
        else
            be->add(l->out, inp, value_of(m, l->in2, x), n);
        break;
    case DDP_LAYER_RESIDUAL_END:
        break;
    }
}

const float *ddp_model_forward(struct ddp_model *m, const float *x, int B, int train,
                               uint64_t noise_seed)
{
    input_forward(m, x, B);
    for (int i = 0; i < m->nlayers; i++)
        layer_forward(m, i, x, B, train, noise_seed);
    return ddp_model_forward_end(m, B);
}

const float *ddp_model_forward_end(struct ddp_model *m, int B)
{
    const float *out = m->layers[m->nlayers - 1].out;
    if (!m->act16)
        return out;
    m->be->act_to_f32(m->logits, out, (size_t)B * (size_t)m->classes);
    return m->logits;
}

float *ddp_model_dlogits(struct ddp_model *m)
{
    return m->act16 ? m->dlogits : m->layers[m->nlayers - 1].dout;
}

/* Where layer l's input gradient goes: NULL when not needed (its input below `first`, the
 * first layer with parameters), l's scratch when it is to be added (acc), else the input's
 * dout. */
static float *grad_dest(struct ddp_model *m, const struct ddp_layer *l, int first)
{
    if (l->in < first)
        return NULL;
    return l->acc ? l->dtmp : m->layers[l->in].dout;
}

/* After a backward that wrote into l's scratch: add it to its input's dout. */
static void grad_add(struct ddp_model *m, const struct ddp_layer *l, const float *dest, int B)
{
    if (dest && dest == l->dtmp) {
        float *d = m->layers[l->in].dout;
        m->be->add(d, d, l->dtmp, (size_t)B * m->layers[l->in].out_elems);
    }
}

/* Batchnorm backward; with its relu (fused 6) from the relu's dout and out, both passes
 * taking dout through the relu's backward as they read it. */
static void bn_backward(struct ddp_model *m, struct ddp_layer *l, float *dinp, int B)
{
    const struct ddp_backend *be = m->be;
    int C, S;
    bn_dims(l, &C, &S);
    double *local = l->sums + 2 * C + 1, *global = local + 2 * C + 1;
    float *dgamma = m->grads + l->w_off, *dbeta = m->grads + l->b_off;
    const float *gamma = m->params + l->w_off;
    if (l->fused == 6)
        be->bn_relu_bwd_sums(local, l[1].dout, l[1].out, l->aux, B, C, S);
    else
        be->bn_bwd_sums(local, l->dout, l->aux, B, C, S);
    be->upload(global, local, sizeof(double) * (2 * (size_t)C + 1)); /* on the device */
    if (m->sync_sums)
        m->sync_sums(m->sync_ctx, global, 2 * (size_t)C + 1);
    if (l->fused == 6)
        be->bn_relu_bwd_apply(dinp, dgamma, dbeta, l[1].dout, l[1].out, l->aux, l->invstd, gamma,
                              local, global, B, C, S);
    else
        be->bn_bwd_apply(dinp, dgamma, dbeta, l->dout, l->aux, l->invstd, gamma, local, global, B,
                         C, S);
}

/* The join's gradient goes unchanged to both of its inputs. With its relu (fused 8) the
 * relu's backward runs in the same pass, from the relu's dout and out. */
static void join_backward(struct ddp_model *m, const struct ddp_layer *l, int B, int first)
{
    const size_t n = (size_t)B * l->out_elems;
    const int src[2] = {l->in, l->in2}, acc[2] = {l->acc, l->acc2};
    if (l->fused == 8) {
        float *d[2];
        for (int k = 0; k < 2; k++)
            d[k] = src[k] < first ? NULL : m->layers[src[k]].dout;
        m->be->relu_bwd_join(d[0], acc[0], d[1], acc[1], l[1].dout, l[1].out, n);
        return;
    }
    for (int k = 0; k < 2; k++) {
        if (src[k] < first)
            continue;
        float *d = m->layers[src[k]].dout;
        if (acc[k])
            m->be->add(d, d, l->dout, n);
        else
            m->be->upload(d, l->dout, act_size(m, n));
    }
}

/* 1 when layer i is a conv2d with bias whose relu and maxpool run with it (fused 3, the relu
 * i + 1 and the pool i + 2) and the backend has maxpool_relu_bwd_db: the pool's backward sums
 * the convolution's bias gradient as it writes the convolution's output gradient, and the
 * convolution's own backward skips that reduction (db NULL). */
static int bias_grad_in_pool(const struct ddp_model *m, int i)
{
    const struct ddp_layer *c = &m->layers[i];
    return c->spec.kind == DDP_LAYER_CONV2D && c->fused == 3 && c->b_n &&
           m->be->maxpool_relu_bwd_db && !m->layers[i + 1].acc;
}

/* The pool's backward with its relu (fused 5): dinp the gradient of the relu's input, and with
 * bias_grad_in_pool the convolution's bias gradient added too. */
static void pool_relu_backward(struct ddp_model *m, const struct ddp_layer *l, float *dinp, int B)
{
    const int ci = m->layers[l->in].in;
    if (ci >= 0 && bias_grad_in_pool(m, ci)) {
        float *db = m->grads + m->layers[ci].b_off;
        m->be->maxpool_relu_bwd_db(dinp, db, l->dout, l->out, l->argmax8, B, l->ishape[0],
                                   l->ishape[1], l->ishape[2], l->spec.k);
        return;
    }
    m->be->maxpool_relu_bwd(dinp, l->dout, l->out, l->argmax8, B, l->ishape[0], l->ishape[1],
                            l->ishape[2], l->spec.k);
}

/* Layer i of the backward pass: parameter gradients added, the input's gradient into dinp
 * (NULL: not needed). */
static void layer_backward(struct ddp_model *m, int i, const float *inp, float *dinp, int B)
{
    const struct ddp_backend *be = m->be;
    struct ddp_layer *l = &m->layers[i];
    const struct ddp_layer_spec *s = &l->spec;
    float *w = m->params + l->w_off;
    float *dw = m->grads + l->w_off, *db = l->b_n ? m->grads + l->b_off : NULL;
    size_t n = (size_t)B * l->out_elems;
    switch (s->kind) {
    case DDP_LAYER_LINEAR:
        be->linear_bwd(dinp, dw, db, l->dout, inp, w, B, l->ishape[0], l->oshape[0]);
        break;
    case DDP_LAYER_RELU:
        if (dinp)
            be->relu_bwd(dinp, l->dout, l->out, n);
        break;
    case DDP_LAYER_CONV2D: {
        const struct ddp_conv_geom g = model_conv_geom(l);
        if (bias_grad_in_pool(m, i)) /* the pool's backward added it */
            db = NULL;
        be->conv2d_bwd(dinp, dw, db, m->col, l->dout, inp, w, B, &g);
        break;
    }
    case DDP_LAYER_MAXPOOL: /* fused 5: dinp is the gradient of the relu's input */
        if (dinp && l->fused == 5)
            pool_relu_backward(m, l, dinp, B);
        else if (dinp)
            be->maxpool_bwd(dinp, l->dout, l->argmax, B, l->ishape[0], l->ishape[1], l->ishape[2],
                            s->k);
        break;
    case DDP_LAYER_AVGPOOL:
        if (dinp)
            be->avgpool_bwd(dinp, l->dout, B, l->ishape[0], l->ishape[1], l->ishape[2], s->k);
        break;
    case DDP_LAYER_GLOBALAVGPOOL:
        if (dinp)
            be->gap_bwd(dinp, l->dout, B, l->ishape[0], spatial(l));
        break;
    case DDP_LAYER_DROPOUT:
        if (dinp && s->p > 0)
            be->dropout_bwd(dinp, l->dout, l->aux, n);
        else if (dinp)
            be->upload(dinp, l->dout, act_size(m, n));
        break;
    case DDP_LAYER_BATCHNORM:
        bn_backward(m, l, dinp, B);
        break;
    case DDP_LAYER_FLATTEN: /* a relayout; a view shares its input's dout */
        if (dinp)
            be->to_nhwc(dinp, l->dout, B, l->ishape[0], spatial(l));
        break;
    default:
        break; /* joins: join_backward */
    }
}

/* Backward of layer i (>= first, the first layer with parameters): its parameter gradients
 * added, its input's gradient written or added. Returns 0 where the layer's backward runs
 * elsewhere or nowhere: a view, or a relu fused into its maxpool (batchnorm, join). */
static int backward_at(struct ddp_model *m, int i, const float *x, int B, int first)
{
    struct ddp_layer *l = &m->layers[i];
    if (m->act16 && i == m->nlayers - 1) /* the loss's fp32 dlogits into the last dout */
        m->be->act_from_f32(l->dout, m->dlogits, B, m->classes, 1);
    if (l->spec.kind == DDP_LAYER_RESIDUAL) {
        join_backward(m, l, B, first);
        return 1;
    }
    if ((l->spec.kind == DDP_LAYER_FLATTEN && !l->relayout) || l->fused == 4 || l->fused == 7 ||
        l->fused == 9)
        return 0;
    /* a maxpool with its relu (5) writes the gradient of the relu's input */
    const struct ddp_layer *src = l->fused == 5 ? &m->layers[l->in] : l;
    float *dinp = grad_dest(m, src, first);
    layer_backward(m, i, value_of(m, l->in, x), dinp, B);
    grad_add(m, src, dinp, B);
    return 1;
}

void ddp_model_backward(struct ddp_model *m, const float *x, int B,
                        void (*layer_done)(void *ctx, int layer), void *ctx)
{
    /* below the first layer with parameters no gradient is needed (flatten, linear: the
     * first linear's input gradient would be pure waste) */
    const int first = model_first_param(m);
    for (int i = m->nlayers - 1; i >= first; i--)
        if (backward_at(m, i, x, B, first) && layer_done && m->layers[i].w_n)
            layer_done(ctx, i);
}

/* Blocks around layer l: one per ".body." or ".shortcut." in its name. */
static int block_depth(const struct ddp_layer *l)
{
    int d = 0;
    for (const char *p = l->name; (p = strchr(p, '.')) != NULL; p++)
        d += strncmp(p, ".body.", 6) == 0 || strncmp(p, ".shortcut.", 10) == 0;
    return d;
}

/* Append to buf (len) at *used, never past its end. */
static void append(char *buf, size_t len, size_t *used, const char *a, const char *b, const char *c)
{
    if (*used + 1 >= len)
        return;
    int n = snprintf(buf + *used, len - *used, "%s%s%s", a, b, c);
    *used = n < 0 ? *used : *used + (size_t)n >= len ? len - 1 : *used + (size_t)n;
}

void ddp_model_describe(const struct ddp_model *m, char *buf, size_t len)
{
    size_t used = 0;
    int prev = 0;
    buf[0] = '\0';
    for (int i = 0; i < m->nlayers; i++) {
        const struct ddp_layer *l = &m->layers[i];
        const enum ddp_layer_kind k = l->spec.kind;
        const int d = block_depth(l);
        const char *sep = i ? ", " : "";
        char out[48]; /* " -> 16x28x28": not "(16, 28, 28)", which reads as arguments */
        if (l->out_ndim == 1)
            snprintf(out, sizeof out, " -> %d", l->oshape[0]);
        else
            snprintf(out, sizeof out, " -> %dx%dx%d", l->oshape[0], l->oshape[1], l->oshape[2]);
        if (k == DDP_LAYER_RESIDUAL) { /* the join closes its block */
            append(buf, len, &used, ")", "", "");
            prev = d;
            continue;
        }
        for (; prev < d; prev++, sep = "")
            append(buf, len, &used, sep, "residual(", "");
        size_t nl = strlen(l->name);
        if (nl > 11 && strcmp(l->name + nl - 11, ".shortcut.0") == 0)
            sep = "; shortcut ";
        int shaped = k == DDP_LAYER_LINEAR || k == DDP_LAYER_CONV2D || k == DDP_LAYER_MAXPOOL ||
                     k == DDP_LAYER_AVGPOOL;
        append(buf, len, &used, sep, model_kind_name(k), shaped ? out : "");
    }
}

/* ---- diagnosis -------------------------------------------------------------------------- */

/* Largest |v| of n device values of esize bytes (4: fp32; 2: bf16, widened here) (NaN/inf:
 * *bad set), via a host copy. */
static double max_abs(const struct ddp_backend *be, const float *v, size_t n, size_t esize,
                      int *bad)
{
    float *h = ddp_malloc(sizeof(float) * (n ? n : 1));
    be->download(h, v, esize * n);
    if (esize == 2) { /* bf16: the high half of a float; widen from the end down */
        const uint16_t *h16 = (const uint16_t *)h;
        for (size_t i = n; i-- > 0;) {
            const uint32_t bits = (uint32_t)h16[i] << 16;
            memcpy(&h[i], &bits, sizeof bits);
        }
    }
    double mx = 0;
    *bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(h[i]))
            *bad = 1;
        else if (fabs((double)h[i]) > mx)
            mx = fabs((double)h[i]);
    }
    free(h);
    return mx;
}

int ddp_model_explain_nonfinite(struct ddp_model *m, const float *x, int B, uint64_t noise_seed,
                                char *why, size_t len)
{
    const struct ddp_backend *be = m->be;
    int bad;
    char what[64];
    double in_max = max_abs(be, x, (size_t)B * m->in_elems, sizeof(float), &bad);
    if (bad)
        return snprintf(why, len, "the input batch holds NaN or inf; check the dataset"), 1;
    for (int i = 0; i < m->nlayers; i++) {
        struct ddp_layer *l = &m->layers[i];
        model_layer_str(&l->spec, what, sizeof what);
        max_abs(be, m->params + l->w_off, l->w_n + l->b_n, sizeof(float), &bad);
        if (bad)
            return snprintf(why, len,
                            "layer %s %s has non-finite weights: training diverged; "
                            "lower [optim] lr",
                            l->pos, what),
                   0;
    }
    /* each output checked right after its layer: the memory plan lets later layers reuse
     * its bytes */
    input_forward(m, x, B);
    double prev = in_max;
    int first_param = -1;
    for (int i = 0; i < m->nlayers; i++) {
        struct ddp_layer *l = &m->layers[i];
        layer_forward(m, i, x, B, 1, noise_seed);
        if (first_param < 0 && l->w_n)
            first_param = i;
        if (l->fused == 1 || l->fused == 4 || l->fused == 6 || l->fused == 8)
            continue; /* its relu's (its maxpool's) output stands for it */
        double out = max_abs(be, l->out, (size_t)B * l->out_elems, m->act_bytes, &bad);
        if (!bad) {
            prev = out;
            continue;
        }
        /* the layer before and its relu ran as one (2, 7, 9): name that layer */
        if (l->fused == 2 || l->fused == 7 || l->fused == 9)
            l = &m->layers[--i];
        model_layer_str(&l->spec, what, sizeof what);
        if (first_param < 0 || first_param == i)
            return snprintf(why, len,
                            "layer %s %s is the first whose output is non-finite, "
                            "from finite weights and input values as large as %.3g: scale the "
                            "dataset's values (e.g. to [0, 1])",
                            l->pos, what, prev),
                   1;
        return snprintf(why, len,
                        "layer %s %s is the first whose output is non-finite (its "
                        "input reaches %.3g): training diverged; lower [optim] lr or normalise "
                        "the input",
                        l->pos, what, prev),
               0;
    }
    return snprintf(why, len,
                    "every layer's output is finite (logits up to %.3g) but the loss "
                    "is not: training diverged; lower [optim] lr",
                    prev),
           0;
}

/* ---- one layer at a time (ddptrain profile) --------------------------------------------- */

void ddp_model_forward_input(struct ddp_model *m, const float *x, int B)
{
    input_forward(m, x, B);
}

void ddp_model_forward_layer(struct ddp_model *m, int i, const float *x, int B, int train,
                             uint64_t noise_seed)
{
    layer_forward(m, i, x, B, train, noise_seed);
}

void ddp_model_backward_layer(struct ddp_model *m, int i, const float *x, int B)
{
    const int first = model_first_param(m);
    if (i >= first)
        backward_at(m, i, x, B, first);
}

int ddp_model_runner(const struct ddp_model *m, int i, int backward)
{
    const struct ddp_layer *l = &m->layers[i];
    if (l->spec.kind == DDP_LAYER_FLATTEN && !l->relayout)
        return -1; /* a view */
    if (backward && i < model_first_param(m))
        return -1;
    if (l->fused == 7 || l->fused == 9 || (l->fused == 2 && !backward))
        return l->in;    /* the batchnorm (join, linear, conv2d) before it */
    if (l->fused == 4) { /* its maxpool, or in forward the conv2d that runs both */
        int p = i + 1;
        while (p < m->nlayers && !(m->layers[p].in == i && m->layers[p].fused == 5))
            p++;
        return !backward && relu_ran(m, i) ? l->in : p;
    }
    if (l->fused == 5 && !backward && relu_ran(m, l->in))
        return m->layers[l->in].in;
    return i;
}

void ddp_model_layer_text(const struct ddp_model *m, int i, char *buf, size_t len)
{
    const struct ddp_layer *l = &m->layers[i];
    if (l->out_ndim == 1)
        snprintf(buf, len, "%s -> %d", model_kind_name(l->spec.kind), l->oshape[0]);
    else
        snprintf(buf, len, "%s -> %dx%dx%d", model_kind_name(l->spec.kind), l->oshape[0],
                 l->oshape[1], l->oshape[2]);
}

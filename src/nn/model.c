/*
 * model.c - the model from its layer list: shape inference, the flat parameter layout, the
 * memory estimate, buffers, and PyTorch's default initialisation. Parsing the list is
 * model_parse.c's, running it (forward, backward, description, diagnosis) model_run.c's.
 * See model.h.
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
#include "core/hash.h"
#include "core/util.h"
#include "nn/model_impl.h"

/* Largest side of a sample (the dataset's limit too). Also the largest product of the strides
 * and pool windows along a residual body, which becomes its projection shortcut's stride: past
 * the largest side a stride adds nothing (its output is one position wide), and within it the
 * shortcut's stride stays a valid int for the kernels and ONNX. */
#define SAMPLE_DIM_MAX (1 << 24)

/* Largest number of values of one sample at any layer (the dataset's limit too), so that
 * offsets within a sample and each side of a layer fit the int arguments of the kernels. */
#define SAMPLE_ELEMS_MAX ((size_t)1 << 28)

/* Largest number of weights of one layer: the kernels index them (and a convolution its
 * C * k * k inputs per output) with int. */
#define LAYER_WEIGHTS_MAX ((size_t)INT_MAX)

/* ---- construction ----------------------------------------------------------------------- */

void model_shape_str(int ndim, const int *d, char *buf, size_t len)
{
    if (ndim == 1)
        snprintf(buf, len, "(%d)", d[0]);
    else
        snprintf(buf, len, "(%d, %d, %d)", d[0], d[1], d[2]);
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + DDP_SPLITMIX64_GAMMA + (h << 6) + (h >> 2);
    return h * DDP_FNV1A64_PRIME;
}

static void add_tensor(struct ddp_model *m, const char *layer, const char *what, int is_buffer,
                       size_t off, size_t n, int ndim, const int64_t *dims)
{
    struct ddp_tensor_info *t = &m->tensors[m->ntensors++];
    snprintf(t->name, sizeof t->name, "%s.%s", layer, what);
    t->is_buffer = is_buffer;
    t->off = off;
    t->n = n;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->dims[i] = dims[i];
}

/* "conv2d(64, 5)" for messages. */
void model_layer_str(const struct ddp_layer_spec *s, char *buf, size_t len)
{
    switch (s->kind) {
    case DDP_LAYER_LINEAR:
        snprintf(buf, len, "linear(%d)", s->n);
        break;
    case DDP_LAYER_CONV2D:
        snprintf(buf, len, "conv2d(%d, %d%s)", s->n, s->k, s->stride > 1 ? ", stride>1" : "");
        break;
    case DDP_LAYER_MAXPOOL:
    case DDP_LAYER_AVGPOOL:
        snprintf(buf, len, "%s(%d)", model_kind_name(s->kind), s->k);
        break;
    case DDP_LAYER_DROPOUT:
        snprintf(buf, len, "dropout(%g)", (double)s->p);
        break;
    default:
        snprintf(buf, len, "%s", model_kind_name(s->kind));
        break;
    }
}

/* The memory the model may take on its backend into *avail: what this process can have of the
 * host's on the CPU, the device's free memory where the backend has a device (mem_info); 0
 * where it reports neither. The words for the message in *where and *which. */
static int memory_available(const struct ddp_backend *be, size_t *avail, const char **where,
                            const char **which)
{
    if (be->name && strcmp(be->name, "cpu") == 0) {
        *avail = ddp_mem_available(which);
        *where = "this machine";
        return 1;
    }
    if (!be->mem_info)
        return 0;
    struct ddp_mem_info mi;
    be->mem_info(&mi);
    *avail = mi.dev_free;
    *where = "the GPU";
    *which = "its free memory now";
    return 1;
}

/* Before allocating anything that the layers size: the whole model (parameters, gradients and
 * up to two optimiser states, activations of a batch, conv scratch) must fit the memory this
 * process can have, host memory on the CPU, the device's free memory on a GPU. Names the
 * largest layer and the batch size that would fit. */
static int check_memory(const struct ddp_model *m, int max_batch, char *err, size_t errlen)
{
    const char *which = NULL, *where = NULL;
    size_t avail;
    if (!memory_available(m->be, &avail, &where, &which))
        return 0;
    struct ddp_model_mem mm;
    int worst = ddp_model_memory(m, max_batch, &mm);
    double params = mm.params, total = mm.total, big = mm.largest_layer;
    if (total <= (double)avail)
        return 0;
    char need[32], have[32], all[32], what[64], fit[96] = "";
    ddp_fmt_bytes((double)avail, have, sizeof have);
    ddp_fmt_bytes(total, all, sizeof all);
    if (params >= big)
        return ddp_err(err, errlen,
                       "the model's %zu parameters need %s with their gradients "
                       "and optimiser state (%s in all) but %s has %s available (%s); "
                       "make the layers narrower",
                       m->nparams, ddp_fmt_bytes(params, need, sizeof need), all, where, have,
                       which);
    /* activations grow with the batch; parameters and the bounded conv scratch do not */
    const double per_sample = (total - params - mm.scratch) / max_batch;
    const double room = (double)avail - params - mm.scratch;
    if (per_sample > 0 && room >= per_sample)
        snprintf(fit, sizeof fit, " (at most about %.0f fits)", floor(room / per_sample));
    model_layer_str(&m->layers[worst].spec, what, sizeof what);
    return ddp_err(err, errlen,
                   "layer %s %s: its outputs for a batch of %d need %s (the model "
                   "%s in all) but %s has %s available (%s); lower [data] batch_size%s "
                   "or the layer's size",
                   m->layers[worst].pos, what, max_batch, ddp_fmt_bytes(big, need, sizeof need),
                   all, where, have, which, fit);
}

/* Before conv_plan sees the batch size: each convolution's input and output for batches of
 * max_batch within the backend's limit on one tensor (cuDNN's 2^31 - 1 values). Names the
 * first layer past it and the largest batch size within it. */
static int check_tensor_limit(const struct ddp_model *m, int max_batch, char *err, size_t errlen)
{
    const char *path = "";
    const size_t lim = m->be->conv_tensor_max ? m->be->conv_tensor_max(&path) : 0;
    if (!lim)
        return 0;
    for (int i = 0; i < m->nlayers; i++) {
        const struct ddp_layer *l = &m->layers[i];
        if (l->spec.kind != DDP_LAYER_CONV2D)
            continue;
        const int out = l->out_elems >= l->in_elems;
        const size_t per = out ? l->out_elems : l->in_elems; /* at most 2^28 */
        if (per * (size_t)max_batch <= lim)
            continue;
        char what[64];
        model_layer_str(&l->spec, what, sizeof what);
        return ddp_err(err, errlen,
                       "layer %s %s: its %s for a batch of %d has %zu values (%zu per sample), "
                       "more than %s's limit of %zu (2^31 - 1) per tensor; lower [data] "
                       "batch_size to at most %zu (or set [train] conv = im2col)",
                       l->pos, what, out ? "output" : "input", max_batch, per * (size_t)max_batch,
                       per, path, lim, lim / per);
    }
    return 0;
}

/* The shape of conv layer l. */
struct ddp_conv_geom model_conv_geom(const struct ddp_layer *l)
{
    const struct ddp_conv_geom g = {l->ishape[0], l->ishape[1],   l->ishape[2], l->spec.n,
                                    l->spec.k,    l->spec.stride, l->spec.pad};
    return g;
}

/* Floats of col conv layer l needs for batches up to max_batch: the backend's plan (cuDNN's
 * algorithms chosen and their workspace sized here, at build) or its im2col size. */
static size_t conv_scratch(const struct ddp_backend *be, const struct ddp_layer *l, int max_batch)
{
    const struct ddp_conv_geom g = model_conv_geom(l);
    if (be->conv_plan)
        return be->conv_plan(max_batch, &g);
    return be->conv_col_elems(max_batch, &g);
}

/* Bytes of batchnorm's per-channel buffers (mean, invstd, and its sums in doubles). */
static double stats_bytes(const struct ddp_model *m)
{
    double b = 0;
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].spec.kind == DDP_LAYER_BATCHNORM)
            b += 2.0 * sizeof(float) * (double)m->layers[i].b_n +
                 sizeof(double) * (6.0 * (double)m->layers[i].b_n + 3);
    return b;
}

int ddp_model_memory(const struct ddp_model *m, int max_batch, struct ddp_model_mem *out)
{
    const struct ddp_backend *be = m->be;
    double params = 4.0 * sizeof(float) * (double)m->nparams, col = 0, big = 0;
    double *per = ddp_calloc((size_t)m->nlayers, sizeof *per);
    struct ddp_mem_plan p;
    ddp_mem_plan_make(m, max_batch, &p);
    for (int i = 0; i < p.nblocks; i++)
        if (p.blocks[i].layer >= 0) /* not the channels-last input */
            per[p.blocks[i].layer] += (double)p.blocks[i].bytes;
    int worst = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const struct ddp_layer *l = &m->layers[i];
        if (l->spec.kind == DDP_LAYER_CONV2D) {
            double c = (double)conv_scratch(be, l, max_batch) * sizeof(float);
            col = c > col ? c : col;
        }
        if (per[i] > big) {
            big = per[i];
            worst = i;
        }
    }
    const double stats = stats_bytes(m);
    out->params = params;
    out->activations = (double)p.arena + stats;
    out->unshared = (double)p.unshared + stats;
    out->scratch = col;
    out->total = params + out->activations + col;
    out->largest_layer = big;
    ddp_mem_plan_free(&p);
    free(per);
    return worst;
}

/* Layer l's output shape from its input shape (*ndim, d; shp: the input as text), checked:
 * updates *ndim and d in place. */
static int layer_shape(const struct ddp_layer *l, int *ndim, int d[3], const char *shp, char *err,
                       size_t errlen)
{
    const struct ddp_layer_spec *s = &l->spec;
    const char *pos = l->pos;
    switch (s->kind) {
    case DDP_LAYER_FLATTEN:
        d[0] = (int)l->in_elems;
        *ndim = 1;
        break;
    case DDP_LAYER_LINEAR:
        if (*ndim != 1)
            return ddp_err(err, errlen,
                           "layer %s linear(%d): input %s is not flat; put flatten before it", pos,
                           s->n, shp);
        d[0] = s->n;
        break;
    case DDP_LAYER_CONV2D: {
        if (*ndim != 3)
            return ddp_err(err, errlen,
                           "layer %s conv2d: input %s is not (C, H, W); conv2d needs image "
                           "input before any flatten or linear",
                           pos, shp);
        int oh = (d[1] + 2 * s->pad - s->k) / s->stride + 1;
        int ow = (d[2] + 2 * s->pad - s->k) / s->stride + 1;
        if (d[1] + 2 * s->pad < s->k || d[2] + 2 * s->pad < s->k || oh < 1 || ow < 1)
            return ddp_err(err, errlen, "layer %s conv2d(%d, %d): kernel larger than its input %s",
                           pos, s->n, s->k, shp);
        if (s->pad >= s->k)
            return ddp_err(err, errlen, "layer %s conv2d: pad %d must be smaller than k %d", pos,
                           s->pad, s->k);
        d[0] = s->n;
        d[1] = oh;
        d[2] = ow;
        break;
    }
    case DDP_LAYER_MAXPOOL:
    case DDP_LAYER_AVGPOOL:
        if (*ndim != 3)
            return ddp_err(err, errlen, "layer %s %s(%d): input %s is not (C, H, W)", pos,
                           model_kind_name(s->kind), s->k, shp);
        if (s->k > d[1] || s->k > d[2])
            return ddp_err(err, errlen, "layer %s %s(%d): window larger than input %s", pos,
                           model_kind_name(s->kind), s->k, shp);
        d[1] /= s->k;
        d[2] /= s->k;
        break;
    case DDP_LAYER_GLOBALAVGPOOL:
        if (*ndim != 3)
            return ddp_err(err, errlen,
                           "layer %s globalavgpool: input %s is not (C, H, W); put it after the "
                           "last convolution, before flatten",
                           pos, shp);
        d[1] = d[2] = 1;
        break;
    default:
        break;
    }
    return 0;
}

/* Parameters of layer l (w_n, b_n) from its kind and shapes; -1 with err when its weights
 * pass LAYER_WEIGHTS_MAX (out * in * k * k of sizes a user gives can even wrap size_t). */
static int param_sizes(struct ddp_layer *l, char *err, size_t errlen)
{
    size_t f[4] = {0};
    int nf = 0;
    switch (l->spec.kind) {
    case DDP_LAYER_LINEAR:
        f[nf++] = (size_t)l->oshape[0];
        f[nf++] = (size_t)l->ishape[0];
        l->b_n = l->spec.nobias ? 0 : (size_t)l->oshape[0];
        break;
    case DDP_LAYER_CONV2D:
        f[nf++] = (size_t)l->spec.n;
        f[nf++] = (size_t)l->ishape[0];
        f[nf++] = (size_t)l->spec.k;
        f[nf++] = (size_t)l->spec.k;
        l->b_n = l->spec.nobias ? 0 : (size_t)l->spec.n;
        break;
    case DDP_LAYER_BATCHNORM:
        l->w_n = l->b_n = (size_t)l->ishape[0];
        return 0;
    default:
        return 0;
    }
    size_t w = 1;
    int wraps = 0;
    for (int i = 0; i < nf; i++)
        wraps |= __builtin_mul_overflow(w, f[i], &w);
    if (!wraps && w <= LAYER_WEIGHTS_MAX) {
        l->w_n = w;
        return 0;
    }
    char what[64], prod[96];
    size_t used = 0;
    for (int i = 0; i < nf && used < sizeof prod; i++)
        used += (size_t)snprintf(prod + used, sizeof prod - used, "%s%zu", i ? " x " : "", f[i]);
    model_layer_str(&l->spec, what, sizeof what);
    return ddp_err(err, errlen,
                   "layer %s %s: its weights (%s) need %s values, more than %zu (2^31 - 1); "
                   "make the layer narrower%s",
                   l->pos, what, nf == 4 ? "out x in x k x k" : "out x in", prod, LAYER_WEIGHTS_MAX,
                   nf == 4 ? ", its kernel smaller or its input's channels fewer"
                           : " or its input smaller");
}

/* The named tensors of layer l, in PyTorch's state_dict order. */
static void layer_tensors(struct ddp_model *m, const struct ddp_layer *l)
{
    int64_t dims[4];
    if (l->spec.kind == DDP_LAYER_LINEAR) {
        dims[0] = l->oshape[0];
        dims[1] = l->ishape[0];
        add_tensor(m, l->name, "weight", 0, l->w_off, l->w_n, 2, dims);
    } else if (l->spec.kind == DDP_LAYER_CONV2D) {
        dims[0] = l->spec.n;
        dims[1] = l->ishape[0];
        dims[2] = dims[3] = l->spec.k;
        add_tensor(m, l->name, "weight", 0, l->w_off, l->w_n, 4, dims);
    } else if (l->spec.kind == DDP_LAYER_BATCHNORM) {
        dims[0] = l->ishape[0];
        add_tensor(m, l->name, "weight", 0, l->w_off, l->w_n, 1, dims);
    } else
        return;
    dims[0] = l->spec.kind == DDP_LAYER_CONV2D ? l->spec.n : l->oshape[0];
    if (l->b_n)
        add_tensor(m, l->name, "bias", 0, l->b_off, l->b_n, 1, dims);
    if (l->spec.kind == DDP_LAYER_BATCHNORM) {
        add_tensor(m, l->name, "running_mean", 1, l->rm_off, l->b_n, 1, dims);
        add_tensor(m, l->name, "running_var", 1, l->rv_off, l->b_n, 1, dims);
    }
}

/* The flat layout: parameters in reverse layer order (buffers likewise); tensors listed in
 * forward order. */
static int layout_params(struct ddp_model *m, char *err, size_t errlen)
{
    size_t cursor = 0, bcursor = 0;
    for (int i = 0; i < m->nlayers; i++) /* in forward order: the first culprit is named */
        if (param_sizes(&m->layers[i], err, errlen) != 0)
            return -1;
    for (int i = m->nlayers - 1; i >= 0; i--) {
        struct ddp_layer *l = &m->layers[i];
        if (l->spec.kind == DDP_LAYER_BATCHNORM) {
            l->rm_off = bcursor;
            l->rv_off = bcursor + l->b_n;
            bcursor += 2 * l->b_n;
        }
        l->w_off = cursor;
        l->b_off = cursor + l->w_n;
        cursor += l->w_n + l->b_n;
    }
    if ((long long)cursor > DDP_MODEL_PARAMS_MAX)
        return ddp_err(err, errlen, "model has %zu parameters; at most %lld supported", cursor,
                       DDP_MODEL_PARAMS_MAX);
    m->nparams = cursor;
    m->nbuffers = bcursor;
    for (int i = 0; i < m->nlayers; i++)
        layer_tensors(m, &m->layers[i]);
    return 0;
}

/* How many layers read layer i's output (a residual join counts each of its two inputs). */
static int readers_of(const struct ddp_model *m, int i)
{
    int n = 0;
    for (int j = 0; j < m->nlayers; j++)
        n += (m->layers[j].in == i) + (m->layers[j].in2 == i);
    return n;
}

/* Fuse each linear or conv2d layer whose output only a relu reads (the next layer) into one
 * backend op, where the backend has one: the relu's forward is done by the layer's, and the
 * pre-activation is never stored (the relu's backward needs only its own output). */
static void plan_fusion(struct ddp_model *m)
{
    for (int i = 0; i + 1 < m->nlayers; i++) {
        struct ddp_layer *l = &m->layers[i], *r = &m->layers[i + 1];
        const int kind = l->spec.kind;
        if (!(kind == DDP_LAYER_LINEAR && m->be->linear_relu_fwd) &&
            !(kind == DDP_LAYER_CONV2D && m->be->conv2d_relu_fwd))
            continue;
        if (r->spec.kind != DDP_LAYER_RELU || r->in != i || l->fused)
            continue;
        if (readers_of(m, i) == 1) {
            l->fused = 1;
            r->fused = 2;
        }
    }
}

/* Fuse each relu whose only reader is a maxpool (window k <= 16: its argmax fits a byte)
 * into that maxpool, where the backend has relu_maxpool_fwd and maxpool_relu_bwd: the pool
 * runs both (4, 5) and the relu's output is never stored. A relu already fused into the
 * conv2d before it (1, 2) makes the three one forward op (3, 4, 5) where the backend has
 * conv2d_relu_maxpool_fwd, else stays as it is. */
static void plan_pool_fusion(struct ddp_model *m)
{
    const struct ddp_backend *be = m->be;
    if (!be->relu_maxpool_fwd || !be->maxpool_relu_bwd)
        return;
    for (int i = 1; i < m->nlayers; i++) {
        struct ddp_layer *p = &m->layers[i], *r = &m->layers[i - 1];
        if (p->spec.kind != DDP_LAYER_MAXPOOL || p->in != i - 1 || r->spec.kind != DDP_LAYER_RELU ||
            p->spec.k > 16 || p->spec.k < 1)
            continue;
        if (readers_of(m, i - 1) != 1)
            continue;
        if (r->fused == 2) { /* conv2d (or linear) + relu */
            struct ddp_layer *c = &m->layers[r->in];
            if (c->spec.kind != DDP_LAYER_CONV2D || !be->conv2d_relu_maxpool_fwd)
                continue;
            c->fused = 3;
        }
        r->fused = 4;
        p->fused = 5;
    }
}

/* Pair each layer of kind `kind` whose only reader is the relu right after it, neither fused
 * otherwise (a relu into a maxpool keeps that fusion): the layer gets code `code`, the relu
 * code + 1. */
static void fuse_with_relu(struct ddp_model *m, enum ddp_layer_kind kind, int code)
{
    for (int i = 0; i + 1 < m->nlayers; i++) {
        struct ddp_layer *l = &m->layers[i], *r = &m->layers[i + 1];
        if (l->spec.kind != kind || r->spec.kind != DDP_LAYER_RELU || r->in != i || l->fused ||
            r->fused || readers_of(m, i) != 1)
            continue;
        l->fused = code;
        r->fused = code + 1;
    }
}

/* Fuse each batchnorm whose only reader is a relu not fused otherwise into that relu, where
 * the backend has the bn_relu ops: the batchnorm applies the relu into the relu's out in its
 * forward and runs the relu's backward with its own (6, 7); neither its out nor its dout is
 * stored. */
static void plan_bn_fusion(struct ddp_model *m)
{
    const struct ddp_backend *be = m->be;
    if (be->bn_relu_fwd_apply && be->bn_relu_bwd_sums && be->bn_relu_bwd_apply)
        fuse_with_relu(m, DDP_LAYER_BATCHNORM, 6);
}

/* Fuse each residual join whose only reader is the relu after it, where that relu is not
 * fused otherwise, where the backend has add_relu_fwd and relu_bwd_join: the join writes the
 * relu's out in its forward and takes the relu's gradient into both its inputs' douts in its
 * backward (8, 9); neither the join's out nor its dout is stored. */
static void plan_join_fusion(struct ddp_model *m)
{
    const struct ddp_backend *be = m->be;
    if (be->add_relu_fwd && be->relu_bwd_join)
        fuse_with_relu(m, DDP_LAYER_RESIDUAL, 8);
}

/* Channels-last activations (the backend's layout at build, backend.h set_layout): a flatten
 * of a (C,H,W) input whose two orders differ turns it back into PyTorch's order, so that the
 * linear layers after it, their weights and every checkpoint are the same in both layouts.
 * The activations' storage (backend.h set_act_type) likewise, read once here. */
static void plan_layout(struct ddp_model *m)
{
    m->nhwc = m->be->layout && m->be->layout() == DDP_LAYOUT_NHWC;
    m->act16 = m->be->act_type && m->be->act_type() == DDP_ACT_BF16; /* model.h act16 */
    m->act_bytes = m->act16 ? 2 : sizeof(float);
    for (int i = 0; m->nhwc && i < m->nlayers; i++) {
        struct ddp_layer *l = &m->layers[i];
        l->relayout = l->spec.kind == DDP_LAYER_FLATTEN && l->in >= 0 && l->in_ndim == 3 &&
                      l->ishape[0] > 1 && l->ishape[1] * l->ishape[2] > 1;
    }
}

/* Parameters, gradients, buffers, conv scratch, and the arena of every layer's batch-sized
 * buffers laid out by the memory plan for max_batch. */
static void alloc_buffers(struct ddp_model *m, int max_batch)
{
    const struct ddp_backend *be = m->be;
    m->params = be->alloc(sizeof(float) * (m->nparams ? m->nparams : 1));
    m->grads = be->alloc(sizeof(float) * (m->nparams ? m->nparams : 1));
    m->buffers = be->alloc(sizeof(float) * (m->nbuffers ? m->nbuffers : 1));
    /* the convolutions first: the backend may time its algorithms on scratch while nothing
     * else is allocated, so that its scratch does not add to the run's peak */
    size_t col = 0;
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].spec.kind == DDP_LAYER_CONV2D) {
            size_t c = conv_scratch(be, &m->layers[i], max_batch);
            col = c > col ? c : col;
        }
    struct ddp_mem_plan p;
    ddp_mem_plan_make(m, max_batch, &p);
    char why[DDP_ERR_LEN];
    if (ddp_mem_plan_check(&p, why, sizeof why) != 0) /* cheap: every build proves its plan */
        ddp_die("memory plan: %s (a bug)", why);
    m->arena_bytes = p.arena;
    m->arena = be->alloc(p.arena ? p.arena : 1);
    model_plan_assign(m, &p, m->arena);
    ddp_mem_plan_free(&p);
    for (int i = 0; i < m->nlayers; i++) {
        struct ddp_layer *l = &m->layers[i];
        if (l->spec.kind != DDP_LAYER_BATCHNORM)
            continue;
        l->mean = be->alloc(sizeof(float) * l->b_n);
        l->invstd = be->alloc(sizeof(float) * l->b_n);
        l->sums = be->alloc(sizeof(double) * (6 * l->b_n + 3));
    }
    m->col = col ? be->alloc(sizeof(float) * col) : NULL;
}

/* Building the graph: the blocks open around the current layer, innermost last. Frame 0 is
 * the top-level list. */
struct frame {
    int src;        /* the block's input layer (-1: the model's input) */
    int64_t stride; /* product of the body's strides and pool windows so far (blocks only) */
    int items;      /* items of this list so far */
    char name[DDP_MODEL_NAME_MAX - 24], pos[POS_MAX];
};

struct builder {
    struct ddp_model *m;
    int max_batch;
    int cur; /* the layer whose output the next layer reads (-1: the model's input) */
    int depth;
    struct frame f[DDP_MODEL_NEST_MAX + 1];
    uint64_t fp;
};

/* Name and position of the next item of the innermost list ("3" / "3.body.1"; "4" / "4.2"). */
static void next_item(struct builder *b, char *name, size_t nlen, char *pos, size_t plen)
{
    struct frame *f = &b->f[b->depth];
    if (b->depth == 0) {
        snprintf(name, nlen, "%d", f->items);
        snprintf(pos, plen, "%d", f->items + 1);
    } else {
        snprintf(name, nlen, "%s.body.%d", f->name, f->items);
        snprintf(pos, plen, "%s.%d", f->pos, f->items + 1);
    }
    f->items++;
}

/* Values of a (C, H, W) or (D) shape into *n; -1 when they do not fit size_t. */
static int shape_elems(int ndim, const int *d, size_t *n)
{
    *n = (size_t)d[0];
    for (int i = 1; i < ndim; i++)
        if (__builtin_mul_overflow(*n, (size_t)d[i], n))
            return -1;
    return 0;
}

/* Layer l's output, checked: at most SAMPLE_ELEMS_MAX values per sample (its product of
 * user-given sizes checked for overflow first), and for a batch at most what alloc_buffers
 * takes. */
static int check_output(struct ddp_layer *l, int max_batch, char *err, size_t errlen)
{
    char what[64], out[64];
    model_layer_str(&l->spec, what, sizeof what);
    model_shape_str(l->out_ndim, l->oshape, out, sizeof out);
    if (shape_elems(l->out_ndim, l->oshape, &l->out_elems) != 0 || l->out_elems > SAMPLE_ELEMS_MAX)
        return ddp_err(err, errlen,
                       "layer %s %s: its output %s holds more than %zu (2^28) values per "
                       "sample; give it fewer channels, a smaller kernel or pad, or downsample "
                       "before it",
                       l->pos, what, out, SAMPLE_ELEMS_MAX);
    if ((size_t)max_batch * l->out_elems > (1ULL << 34))
        return ddp_err(err, errlen,
                       "layer %s %s: its output %s for a batch of %d holds more than 2^34 "
                       "values; lower [data] batch_size",
                       l->pos, what, out, max_batch);
    return 0;
}

/* Append layer s reading layers in (and in2) with its output shape checked; returns its index
 * (and makes it current) or -1 with err. */
static int add_layer(struct builder *b, const struct ddp_layer_spec *s, const char *name,
                     const char *pos, int in, int in2, char *err, size_t errlen)
{
    struct ddp_model *m = b->m;
    int i = m->nlayers++;
    struct ddp_layer *l = &m->layers[i];
    l->spec = *s;
    l->index = atoi(name);
    snprintf(l->name, sizeof l->name, "%s", name);
    snprintf(l->pos, sizeof l->pos, "%s", pos);
    l->in = in;
    l->in2 = in2;
    int ndim = in < 0 ? m->in_ndim : m->layers[in].out_ndim, d[3];
    memcpy(d, in < 0 ? m->ishape : m->layers[in].oshape, sizeof d);
    char shp[64];
    l->in_ndim = ndim;
    memcpy(l->ishape, d, sizeof d);
    l->in_elems = in < 0 ? m->in_elems : m->layers[in].out_elems;
    model_shape_str(ndim, d, shp, sizeof shp);
    if (layer_shape(l, &ndim, d, shp, err, errlen) != 0)
        return -1;
    l->out_ndim = ndim;
    memcpy(l->oshape, d, sizeof d);
    if (check_output(l, b->max_batch, err, errlen) != 0)
        return -1;
    b->fp = mix(b->fp, (uint64_t)s->kind);
    b->fp = mix(b->fp, (uint64_t)s->n);
    b->fp = mix(b->fp, (uint64_t)s->k * 131 + (uint64_t)s->stride * 7 + (uint64_t)s->pad);
    if (s->nobias || in2 >= 0 || in != i - 1)
        b->fp = mix(b->fp, (uint64_t)s->nobias * 977 + (uint64_t)(in + 1) * 31 + (uint64_t)in2);
    b->cur = i;
    return i;
}

/* Multiply the innermost open block's stride product by factor, the stride of the item at
 * position `at` (a layer or a nested block); refused past SAMPLE_DIM_MAX. The top-level list
 * keeps no product. */
static int grow_stride(struct builder *b, int64_t factor, const char *at, char *err, size_t errlen)
{
    struct frame *f = &b->f[b->depth];
    if (b->depth == 0)
        return 0;
    int64_t p = f->stride * factor; /* at most 2^24 * 2^28: no overflow in 64 bits */
    if (p <= SAMPLE_DIM_MAX) {
        f->stride = p;
        return 0;
    }
    return ddp_err(err, errlen,
                   "layer %s residual: its body's strides and pool windows multiply to %lld "
                   "(%lld x %lld at layer %s), more than %d (2^24, the largest sample side); a "
                   "stride past its input's size adds nothing: lower the body's strides",
                   f->pos, (long long)p, (long long)f->stride, (long long)factor, at,
                   SAMPLE_DIM_MAX);
}

/* Close the innermost block: the shortcut (identity, or 1x1 convolution with the body's stride
 * and batchnorm when the body changes the shape) and the join. */
static int close_block(struct builder *b, char *err, size_t errlen)
{
    struct ddp_model *m = b->m;
    struct frame *f = &b->f[b->depth];
    const struct ddp_layer *body = &m->layers[b->cur];
    int ndim = f->src < 0 ? m->in_ndim : m->layers[f->src].out_ndim;
    const int *d = f->src < 0 ? m->ishape : m->layers[f->src].oshape;
    int same = ndim == body->out_ndim && d[0] == body->oshape[0] &&
               (ndim == 1 || (d[1] == body->oshape[1] && d[2] == body->oshape[2]));
    int body_last = b->cur, short_last = f->src;
    char in[48], out[48], name[DDP_MODEL_NAME_MAX], pos[POS_MAX + 16];
    model_shape_str(ndim, d, in, sizeof in);
    model_shape_str(body->out_ndim, body->oshape, out, sizeof out);
    if (!same) {
        int s = (int)f->stride; /* at most SAMPLE_DIM_MAX (grow_stride) */
        if (ndim != 3 || body->out_ndim != 3)
            return ddp_err(err, errlen,
                           "layer %s residual: its body turns %s into %s; only an image "
                           "(C, H, W) can take a projection shortcut: keep the body's output "
                           "shape equal to its input's, or (C, H, W)",
                           f->pos, in, out);
        if ((d[1] - 1) / s + 1 != body->oshape[1] || (d[2] - 1) / s + 1 != body->oshape[2])
            return ddp_err(err, errlen,
                           "layer %s residual: its body turns %s into %s, which a 1x1 "
                           "convolution with the body's stride %d cannot match; pad the body's "
                           "convolutions (pad = k/2) so that only strides change the size",
                           f->pos, in, out, s);
        struct ddp_layer_spec conv = {
            .kind = DDP_LAYER_CONV2D, .n = body->oshape[0], .k = 1, .stride = s, .nobias = 1};
        struct ddp_layer_spec bn = {.kind = DDP_LAYER_BATCHNORM, .stride = 1};
        snprintf(name, sizeof name, "%s.shortcut.0", f->name);
        snprintf(pos, sizeof pos, "%s (shortcut)", f->pos);
        if (add_layer(b, &conv, name, pos, f->src, -1, err, errlen) < 0)
            return -1;
        snprintf(name, sizeof name, "%s.shortcut.1", f->name);
        if ((short_last = add_layer(b, &bn, name, pos, b->cur, -1, err, errlen)) < 0)
            return -1;
    }
    struct ddp_layer_spec join = {.kind = DDP_LAYER_RESIDUAL, .stride = 1};
    if (add_layer(b, &join, f->name, f->pos, body_last, short_last, err, errlen) < 0)
        return -1;
    b->depth--;
    return grow_stride(b, f->stride, f->pos, err, errlen);
}

/* The stride by which layer s shrinks its input (H: the input's height), for the shortcut. */
static int layer_stride(const struct ddp_layer_spec *s, const struct ddp_layer *l)
{
    if (s->kind == DDP_LAYER_CONV2D)
        return s->stride;
    if (s->kind == DDP_LAYER_MAXPOOL || s->kind == DDP_LAYER_AVGPOOL)
        return s->k;
    if (s->kind == DDP_LAYER_GLOBALAVGPOOL)
        return l->ishape[1] > l->ishape[2] ? l->ishape[1] : l->ishape[2];
    return 1;
}

/* One spec of the pre-order list: open a block, close one, or add a plain layer. */
static int build_spec(struct builder *b, const struct ddp_layer_spec *s, char *err, size_t errlen)
{
    char name[DDP_MODEL_NAME_MAX], pos[POS_MAX];
    if (s->kind == DDP_LAYER_RESIDUAL_END)
        return close_block(b, err, errlen);
    next_item(b, name, sizeof name, pos, sizeof pos);
    if (s->kind == DDP_LAYER_RESIDUAL) {
        struct frame *f = &b->f[++b->depth];
        memset(f, 0, sizeof *f);
        f->src = b->cur;
        f->stride = 1;
        memcpy(f->name, name, sizeof f->name - 1);
        memcpy(f->pos, pos, sizeof f->pos - 1);
        return 0;
    }
    if (b->depth > 0 && s->kind == DDP_LAYER_FLATTEN)
        return ddp_err(err, errlen,
                       "layer %s: flatten inside residual(...) has no shortcut to match; put "
                       "flatten after the block",
                       pos);
    int i = add_layer(b, s, name, pos, b->cur, -1, err, errlen);
    if (i < 0)
        return -1;
    return grow_stride(b, layer_stride(s, &b->m->layers[i]), pos, err, errlen);
}

/* Backward order decides who overwrites a shared input's gradient: the first consumer seen
 * walking back from the last layer; later ones add (acc, acc2). */
static void mark_accumulation(struct ddp_model *m)
{
    char *seen = ddp_calloc((size_t)m->nlayers + 1, 1);
    for (int i = m->nlayers - 1; i >= 0; i--) {
        struct ddp_layer *l = &m->layers[i];
        if (l->in >= 0) {
            l->acc = seen[l->in];
            seen[l->in] = 1;
        }
        if (l->spec.kind == DDP_LAYER_RESIDUAL && l->in2 >= 0) {
            l->acc2 = seen[l->in2];
            seen[l->in2] = 1;
        }
    }
    free(seen);
}

int ddp_model_create(struct ddp_model *m, const struct ddp_backend *be, const char *layers,
                     int in_ndim, const int64_t *in_dims, int max_batch, char *err, size_t errlen)
{
    struct ddp_layer_spec specs[DDP_MODEL_LAYERS_MAX];
    memset(m, 0, sizeof *m);
    int n = ddp_model_parse(layers, specs, DDP_MODEL_LAYERS_MAX, &m->err_at, err, errlen);
    if (n < 0)
        return -1;
    m->be = be;
    m->max_batch = max_batch;
    m->layers = ddp_calloc((size_t)n * 3, sizeof *m->layers); /* a block adds up to 3 */
    m->tensors = ddp_calloc((size_t)n * 3 * 5, sizeof *m->tensors);
    m->in_ndim = in_ndim;
    for (int i = 0; i < in_ndim; i++) {
        if (in_dims[i] < 1 || in_dims[i] > SAMPLE_DIM_MAX)
            return ddp_err(err, errlen, "sample dimension %lld out of range",
                           (long long)in_dims[i]);
        m->ishape[i] = (int)in_dims[i];
    }
    if (shape_elems(in_ndim, m->ishape, &m->in_elems) != 0 || m->in_elems > SAMPLE_ELEMS_MAX)
        return ddp_err(err, errlen, "samples of more than %zu (2^28) values are not supported",
                       SAMPLE_ELEMS_MAX);
    struct builder b = {.m = m, .max_batch = max_batch, .cur = -1};
    b.fp = mix(DDP_FNV1A64_INIT, (uint64_t)in_ndim);
    for (int i = 0; i < in_ndim; i++)
        b.fp = mix(b.fp, (uint64_t)m->ishape[i]);
    for (int i = 0; i < n; i++)
        if (build_spec(&b, &specs[i], err, errlen) != 0) {
            m->err_at = specs[i].at;
            return -1;
        }
    struct ddp_layer *last = &m->layers[m->nlayers - 1];
    if (last->out_ndim != 1 || last->oshape[0] < 2) {
        m->err_at = specs[n - 1].at;
        return ddp_err(err, errlen,
                       "the last layer must produce class scores (a flat vector of at least 2); "
                       "end with linear(classes)");
    }
    m->classes = last->oshape[0];
    m->fingerprint = b.fp;
    mark_accumulation(m);

    if (layout_params(m, err, errlen) != 0)
        return -1;
    plan_fusion(m); /* before the memory estimate: a fused layer's own output is not stored */
    plan_pool_fusion(m);
    plan_bn_fusion(m);
    plan_join_fusion(m);
    plan_layout(m);
    if (check_tensor_limit(m, max_batch, err, errlen) != 0 ||
        check_memory(m, max_batch, err, errlen) != 0)
        return -1;

    alloc_buffers(m, max_batch);
    return 0;
}
void ddp_model_free(struct ddp_model *m)
{
    if (!m || !m->be)
        return;
    const struct ddp_backend *be = m->be;
    for (int i = 0; i < m->nlayers; i++) {
        struct ddp_layer *l = &m->layers[i];
        be->free(l->mean);
        be->free(l->invstd);
        be->free(l->sums);
    }
    be->free(m->params);
    be->free(m->grads);
    be->free(m->buffers);
    be->free(m->col);
    be->free(m->arena);
    free(m->layers);
    free(m->tensors);
    memset(m, 0, sizeof *m);
}

/* ---- initialisation --------------------------------------------------------------------- */

void ddp_model_init(struct ddp_model *m, uint64_t seed)
{
    struct ddp_rng r;
    ddp_rng_seed(&r, seed ^ 0x5eed5eed5eedULL);
    float *p = ddp_calloc(m->nparams ? m->nparams : 1, sizeof(float));
    float *b = ddp_calloc(m->nbuffers ? m->nbuffers : 1, sizeof(float));
    for (int i = 0; i < m->nlayers; i++) {
        struct ddp_layer *l = &m->layers[i];
        if (l->spec.kind == DDP_LAYER_LINEAR || l->spec.kind == DDP_LAYER_CONV2D) {
            double fan_in = (double)l->w_n / (double)l->oshape[0]; /* in * k * k */
            double bound = 1.0 / sqrt(fan_in);
            for (size_t j = 0; j < l->w_n; j++)
                p[l->w_off + j] = (float)((2 * ddp_rng_uniform(&r) - 1) * bound);
            for (size_t j = 0; j < l->b_n; j++)
                p[l->b_off + j] = (float)((2 * ddp_rng_uniform(&r) - 1) * bound);
        } else if (l->spec.kind == DDP_LAYER_BATCHNORM) {
            for (size_t j = 0; j < l->w_n; j++) {
                p[l->w_off + j] = 1;
                p[l->b_off + j] = 0;
                b[l->rm_off + j] = 0;
                b[l->rv_off + j] = 1;
            }
            l->num_batches_tracked = 0;
        }
    }
    m->be->upload(m->params, p, sizeof(float) * m->nparams);
    m->be->upload(m->buffers, b, sizeof(float) * m->nbuffers);
    free(p);
    free(b);
}

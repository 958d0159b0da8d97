/*
 * model_plan.c - the model's memory plan (model.h): which batch-sized buffers a training step
 * needs, from which step of the schedule to which, and where each lies in one arena, so that
 * buffers whose lifetimes do not overlap share bytes. Made at build for max_batch; nothing is
 * allocated during training. The arena itself is allocated by model.c.
 *
 * The schedule of a step over n layers: forward of layer i is step i, the loss step n,
 * backward of layer i step 2n - i, and step 2n + 1 stands for "after backward" (the logits
 * stay valid until then). A block is live from the step that first writes it to the step that
 * last reads it, both included: a layer never reads and writes the same bytes, so no result
 * depends on the plan.
 *
 * What backward reads (model_run.c): a linear or conv2d its input, a relu its own output,
 * batchnorm its xhat (aux), dropout its mask (aux), maxpool its argmax, every layer its
 * dout. A relu fused into the maxpool after it (model.h, fused 4 and 5) owns nothing: the
 * pool reads the relu's input forward (or the conv2d before ran all three and wrote the
 * pool's output and byte argmax at its own step), and backward reads its own output, dout
 * and byte argmax and writes the gradient of the relu's input. A batchnorm with the relu
 * after it (6, 7) owns no output or dout: its forward writes the relu's output, its backward
 * reads the relu's output and dout (the step after the relu's own); a residual join with the
 * relu after it (8, 9) likewise, its backward writing both its inputs' douts. Flatten owns
 * nothing: its output is its input's, its dout its input's dout; unless it turns a
 * channels-last input back into PyTorch's order (relayout), which owns both like any layer.
 * Layers below the first with parameters get no dout (backward stops there). The model's
 * input is the trainer's, except its converted copy (model.h xin: channels-last, bf16): a
 * block of layer -1, written at step 0 before layer 0 and live while any layer reads the
 * input.
 *
 * Bytes: outputs, douts, xin, dtmp and batchnorm's xhat hold activations, act_bytes a value
 * (2 under bf16 storage, model.h act16); dropout's mask and argmax 4, the byte argmax 1
 * (rounded up to 4 a sample). Under bf16 two fp32 blocks of layer -1 carry the logits,
 * converted after the last layer's forward (step n - 1) and valid until after backward, and
 * their gradient, written by the loss (step n) and read by the last layer's backward (n + 1).
 *
 * Dimension letters: B batch.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "nn/model.h"
#include "nn/model_impl.h"

#define PLAN_ALIGN 256 /* bytes: every block starts at a multiple (cuDNN, vector loads) */

/* 1 for a flatten that is a view of its input's bytes (every flatten but a relayout). */
static int is_view(const struct ddp_layer *l)
{
    return l->spec.kind == DDP_LAYER_FLATTEN && !l->relayout;
}

/* The layer that owns the bytes of layer i's output (-1: the model's input). */
static int out_owner(const struct ddp_model *m, int i)
{
    while (i >= 0 && is_view(&m->layers[i]))
        i = m->layers[i].in;
    return i;
}

/* The layer that owns layer i's dout: a flatten at the model's input owns its own. */
static int dout_owner(const struct ddp_model *m, int i)
{
    while (is_view(&m->layers[i]) && m->layers[i].in >= 0)
        i = m->layers[i].in;
    return i;
}

int model_input_copy(const struct ddp_model *m)
{
    return m->act16 || model_input_relayout(m);
}

int model_input_relayout(const struct ddp_model *m)
{
    if (!m->nhwc || m->in_ndim != 3 || m->ishape[0] < 2 || m->ishape[1] * m->ishape[2] < 2)
        return 0;
    for (int i = 0; i < m->nlayers; i++) {
        const struct ddp_layer *l = &m->layers[i];
        if (l->spec.kind != DDP_LAYER_FLATTEN &&
            (l->in < 0 || (l->spec.kind == DDP_LAYER_RESIDUAL && l->in2 < 0)))
            return 1;
    }
    return 0;
}

int model_first_param(const struct ddp_model *m)
{
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].w_n)
            return i;
    return m->nlayers;
}

/* Lifetimes under construction: out and dout per layer, [lo, hi], lo > hi while unused. */
struct span {
    int lo, hi;
};

static void touch(struct span *s, int t)
{
    s->lo = t < s->lo ? t : s->lo;
    s->hi = t > s->hi ? t : s->hi;
}

/* The step where maxpool i writes its output and argmax: its own, or with a relu fused into
 * it (5) whose conv2d ran all three (3), the conv2d's. */
static int pool_step(const struct ddp_model *m, int i)
{
    const int c = m->layers[i].fused == 5 ? m->layers[m->layers[i].in].in : -1;
    return c >= 0 && m->layers[c].fused == 3 ? c : i;
}

/* Maxpool i with its relu fused into it (5): forward reads the relu's input (unless the
 * conv2d before ran all three), backward the pool's own output and dout, and writes the
 * gradient of the relu's input. The relu (4) reads and writes nothing of its own. */
static void pool_relu_spans(const struct ddp_model *m, int i, int first, struct span *out,
                            struct span *dout)
{
    const int bwd = 2 * m->nlayers - i, below = m->layers[m->layers[i].in].in;
    touch(&out[i], pool_step(m, i));
    if (pool_step(m, i) == i)
        touch(&out[out_owner(m, below)], i);
    if (i < first)
        return;
    touch(&out[i], bwd);
    touch(&dout[i], bwd);
    if (below >= first)
        touch(&dout[dout_owner(m, below)], bwd);
}

/* Widen the lifetimes of the outputs and douts that layer i writes and reads; out[-1] is the
 * model's input (its channels-last copy where it has one). */
static void layer_spans(const struct ddp_model *m, int i, int first, struct span *out,
                        struct span *dout)
{
    const struct ddp_layer *l = &m->layers[i];
    const enum ddp_layer_kind k = l->spec.kind;
    const int n = m->nlayers, bwd = 2 * n - i, two = k == DDP_LAYER_RESIDUAL;
    const int src[2] = {l->in, two ? l->in2 : -1};
    if (l->fused == 4 || l->fused == 5) {
        if (l->fused == 5)
            pool_relu_spans(m, i, first, out, dout);
        return;
    }
    /* a relu fused into the layer before (2, 7, 9): that layer writes its output */
    const int by_before = l->fused == 2 || l->fused == 7 || l->fused == 9;
    if (!is_view(l) && l->fused != 1 && l->fused != 6 && l->fused != 8)
        touch(&out[i], by_before ? i - 1 : i);
    for (int s = 0; l->fused != 7 && l->fused != 9 && s < 1 + two; s++)
        touch(&out[out_owner(m, src[s])], i);
    if (i < first || is_view(l))
        return;
    if (l->fused == 7 || l->fused == 9) { /* read by the next step: the layer before's backward */
        touch(&out[i], bwd + 1);
        touch(&dout[i], bwd + 1);
        return;
    }
    if (k == DDP_LAYER_LINEAR || k == DDP_LAYER_CONV2D)
        touch(&out[out_owner(m, l->in)], bwd);
    if (k == DDP_LAYER_RELU)
        touch(&out[i], bwd);
    if (l->fused != 6 && l->fused != 8) /* a batchnorm (join) with its relu reads the relu's */
        touch(&dout[i], bwd);
    for (int s = 0; s < 1 + two; s++)
        if (src[s] >= first)
            touch(&dout[dout_owner(m, src[s])], bwd);
}

/* Append a block of B x elems values of esize bytes, live over [first, last]. */
static void add_block(struct ddp_mem_plan *p, int layer, enum ddp_mem_what what, int first,
                      int last, size_t elems, size_t esize, int B)
{
    struct ddp_mem_block *b = &p->blocks[p->nblocks++];
    const size_t bytes = (size_t)B * elems * esize;
    b->layer = layer;
    b->what = what;
    b->first = first;
    b->last = last;
    b->bytes = (bytes + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
    b->off = 0;
    p->unshared += b->bytes;
}

/* The blocks of layer i: output, dout, saved tensor, input-gradient scratch. */
static void layer_blocks(const struct ddp_model *m, int i, int first, const struct span *out,
                         const struct span *dout, int B, struct ddp_mem_plan *p)
{
    const struct ddp_layer *l = &m->layers[i];
    const enum ddp_layer_kind k = l->spec.kind;
    const int n = m->nlayers, bwd = i >= first ? 2 * n - i : i;
    const size_t a = m->act_bytes;
    if (out[i].lo <= out[i].hi)
        add_block(p, i, DDP_MEM_OUT, out[i].lo, out[i].hi, l->out_elems, a, B);
    if (dout[i].lo <= dout[i].hi)
        add_block(p, i, DDP_MEM_DOUT, dout[i].lo, dout[i].hi, l->out_elems, a, B);
    if (k == DDP_LAYER_BATCHNORM) /* xhat: an activation */
        add_block(p, i, DDP_MEM_AUX, i, bwd, l->out_elems, a, B);
    if (k == DDP_LAYER_DROPOUT && l->spec.p > 0) /* the mask: fp32 */
        add_block(p, i, DDP_MEM_AUX, i, bwd, l->out_elems, 4, B);
    if (k == DDP_LAYER_MAXPOOL && l->fused == 5) /* bytes: B x out_elems, rounded up */
        add_block(p, i, DDP_MEM_ARGMAX8, pool_step(m, i), bwd, (l->out_elems + 3) / 4, 4, B);
    else if (k == DDP_LAYER_MAXPOOL)
        add_block(p, i, DDP_MEM_ARGMAX, i, bwd, l->out_elems, 4, B);
    /* a relu fused into its maxpool (4) takes its input's gradient at the pool's backward */
    const int at = l->fused == 4 ? bwd - 1 : bwd;
    if (i >= first && l->acc && l->in >= first && k != DDP_LAYER_RESIDUAL && !is_view(l) &&
        l->fused != 7)
        add_block(p, i, DDP_MEM_DTMP, at, at, m->layers[l->in].out_elems, a, B);
}

/* Order for placement: larger first, then earlier, then by position in the list. */
static int by_size(const void *a, const void *b)
{
    const struct ddp_mem_block *x = *(struct ddp_mem_block *const *)a;
    const struct ddp_mem_block *y = *(struct ddp_mem_block *const *)b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int by_off(const void *a, const void *b)
{
    const struct ddp_mem_block *x = *(struct ddp_mem_block *const *)a;
    const struct ddp_mem_block *y = *(struct ddp_mem_block *const *)b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static int overlap(const struct ddp_mem_block *a, const struct ddp_mem_block *b)
{
    return a->first <= b->last && b->first <= a->last;
}

/* Greedy by size: each block, largest first, at the lowest offset where it meets no block
 * already placed that is live at the same time. */
static void place(struct ddp_mem_plan *p)
{
    const int n = p->nblocks;
    struct ddp_mem_block **order = ddp_calloc((size_t)n + 1, sizeof *order);
    struct ddp_mem_block **live = ddp_calloc((size_t)n + 1, sizeof *live);
    for (int i = 0; i < n; i++)
        order[i] = &p->blocks[i];
    qsort(order, (size_t)n, sizeof *order, by_size);
    p->arena = 0;
    for (int i = 0; i < n; i++) {
        struct ddp_mem_block *b = order[i];
        int nl = 0;
        for (int j = 0; j < i; j++)
            if (overlap(b, order[j]))
                live[nl++] = order[j];
        qsort(live, (size_t)nl, sizeof *live, by_off);
        size_t at = 0;
        for (int j = 0; j < nl && live[j]->off < at + b->bytes; j++)
            if (live[j]->off + live[j]->bytes > at)
                at = live[j]->off + live[j]->bytes;
        b->off = at;
        if (at + b->bytes > p->arena)
            p->arena = at + b->bytes;
    }
    free(order);
    free(live);
}

void ddp_mem_plan_make(const struct ddp_model *m, int B, struct ddp_mem_plan *p)
{
    const int n = m->nlayers, first = model_first_param(m);
    struct span *out_all = ddp_calloc((size_t)n + 1, sizeof *out_all); /* [0]: the input */
    struct span *dout = ddp_calloc((size_t)n, sizeof *dout), *out = out_all + 1;
    for (int i = -1; i < n; i++)
        out[i].lo = INT_MAX, out[i].hi = -1;
    for (int i = 0; i < n; i++)
        dout[i].lo = INT_MAX, dout[i].hi = -1;
    memset(p, 0, sizeof *p);
    p->steps = 2 * n + 2;
    p->blocks = ddp_calloc((size_t)n * 5 + 4, sizeof *p->blocks);
    for (int i = 0; i < n; i++)
        layer_spans(m, i, first, out, dout);
    /* the logits: valid until after backward (under bf16 their fp32 copy) */
    touch(&out[out_owner(m, n - 1)], m->act16 ? n - 1 : 2 * n + 1);
    touch(&dout[dout_owner(m, n - 1)], n); /* the loss writes dlogits */
    if (model_input_copy(m))               /* written before layer 0, at step 0 */
        add_block(p, -1, DDP_MEM_XIN, 0, out[-1].hi, m->in_elems, m->act_bytes, B);
    if (m->act16) {
        add_block(p, -1, DDP_MEM_LOGITS, n - 1, 2 * n + 1, (size_t)m->classes, 4, B);
        add_block(p, -1, DDP_MEM_DLOGITS, n, n + 1, (size_t)m->classes, 4, B);
    }
    for (int i = 0; i < n; i++)
        layer_blocks(m, i, first, out, dout, B, p);
    place(p);
    free(out_all);
    free(dout);
}

void ddp_mem_plan_free(struct ddp_mem_plan *p)
{
    if (!p)
        return;
    free(p->blocks);
    memset(p, 0, sizeof *p);
}

static const char *what_name(enum ddp_mem_what w)
{
    static const char *const names[] = {"out",     "dout", "aux",    "argmax", "dtmp",
                                        "argmax8", "xin",  "logits", "dlogits"};
    _Static_assert(sizeof names / sizeof *names == DDP_MEM_DLOGITS + 1, "one name a block kind");
    return names[w];
}

int ddp_mem_plan_check(const struct ddp_mem_plan *p, char *err, size_t errlen)
{
    const int n = p->nblocks;
    const struct ddp_mem_block **live = ddp_calloc((size_t)n + 1, sizeof *live);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const struct ddp_mem_block *b = &p->blocks[i];
        if (b->off % PLAN_ALIGN || b->off + b->bytes > p->arena || b->first > b->last ||
            b->first < 0 || b->last >= p->steps)
            rc = ddp_err(err, errlen,
                         "block %d (layer %d %s) at %zu+%zu, steps %d..%d, "
                         "outside the arena of %zu or the schedule of %d steps",
                         i, b->layer, what_name(b->what), b->off, b->bytes, b->first, b->last,
                         p->arena, p->steps);
    }
    for (int t = 0; t < p->steps && rc == 0; t++) { /* at each step, the live blocks apart */
        int nl = 0;
        for (int i = 0; i < n; i++)
            if (p->blocks[i].first <= t && t <= p->blocks[i].last)
                live[nl++] = &p->blocks[i];
        qsort(live, (size_t)nl, sizeof *live, by_off);
        for (int j = 1; j < nl && rc == 0; j++)
            if (live[j - 1]->off + live[j - 1]->bytes > live[j]->off)
                rc = ddp_err(err, errlen,
                             "step %d: layer %d %s [%zu, %zu) overlaps layer %d %s "
                             "[%zu, %zu)",
                             t, live[j - 1]->layer, what_name(live[j - 1]->what), live[j - 1]->off,
                             live[j - 1]->off + live[j - 1]->bytes, live[j]->layer,
                             what_name(live[j]->what), live[j]->off, live[j]->off + live[j]->bytes);
    }
    free(live);
    return rc;
}

/* Point every layer's buffers into the arena by the plan (made for the model's max_batch). */
void model_plan_assign(struct ddp_model *m, const struct ddp_mem_plan *p, char *arena)
{
    for (int i = 0; i < p->nblocks; i++) {
        const struct ddp_mem_block *b = &p->blocks[i];
        void *at = arena + b->off;
        if (b->layer < 0) { /* the model's own */
            float **own = b->what == DDP_MEM_XIN      ? &m->xin
                          : b->what == DDP_MEM_LOGITS ? &m->logits
                                                      : &m->dlogits;
            *own = at;
            continue;
        }
        struct ddp_layer *l = &m->layers[b->layer];
        switch (b->what) {
        case DDP_MEM_OUT:
            l->out = at;
            break;
        case DDP_MEM_DOUT:
            l->dout = at;
            break;
        case DDP_MEM_AUX:
            l->aux = at;
            break;
        case DDP_MEM_ARGMAX:
            l->argmax = at;
            break;
        case DDP_MEM_DTMP:
            l->dtmp = at;
            break;
        case DDP_MEM_ARGMAX8:
            l->argmax8 = at;
            break;
        case DDP_MEM_XIN:
        case DDP_MEM_LOGITS:
        case DDP_MEM_DLOGITS:
            break;
        }
    }
    for (int i = 0; i < m->nlayers; i++) { /* flatten: views of what its input owns */
        struct ddp_layer *l = &m->layers[i];
        if (!is_view(l))
            continue;
        l->out = l->in >= 0 ? m->layers[l->in].out : NULL; /* the input's: set by forward */
        if (l->in >= 0)
            l->dout = m->layers[l->in].dout;
    }
}

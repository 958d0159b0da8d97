/*
 * model.c - layer-list parsing, shape inference, the flat parameter layout, PyTorch's default
 * initialisation, and forward/backward through the backend table. See model.h.
 *
 * Dimension letters: B batch, C H W channels/height/width, D features, K classes, S spatial.
 */
#include "nn/model.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/suggest.h"
#include "core/util.h"

/* ---- parsing ---------------------------------------------------------------------------- */

#define ITEM_MAX 128 /* characters of one layer item, e.g. "conv2d(64, 5, stride=1, pad=2)" */

static const char *kind_name(enum ddp_layer_kind k)
{
    static const char *names[] = {"flatten", "linear",  "relu",    "conv2d",
                                  "maxpool", "avgpool", "dropout", "batchnorm"};
    return names[k];
}

/* Largest width, channel count, kernel, stride, pad or window: keeps every product of two
 * of them far inside the int arguments of the kernels. */
#define LAYER_ARG_MAX (1 << 20)

/* What positional argument i of a layer kind means, for messages. */
static const char *arg_name(enum ddp_layer_kind k, int i)
{
    static const char *conv[] = {"output channels", "kernel size", "stride", "pad"};
    if (k == DDP_LAYER_LINEAR)
        return "width";
    if (k == DDP_LAYER_CONV2D && i < 4)
        return conv[i];
    if (k == DDP_LAYER_MAXPOOL || k == DDP_LAYER_AVGPOOL)
        return "window";
    return "argument";
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* " did you mean 'linear'?" for an unknown layer name, or "". */
static const char *near_layer(const char *name)
{
    static char hint[48];
    const char *names[DDP_LAYER_BATCHNORM + 1];
    for (int k = DDP_LAYER_FLATTEN; k <= DDP_LAYER_BATCHNORM; k++)
        names[k] = kind_name((enum ddp_layer_kind)k);
    const char *near = ddp_suggest(name, names, DDP_LAYER_BATCHNORM + 1);
    hint[0] = '\0';
    if (near)
        snprintf(hint, sizeof hint, " did you mean '%s'?", near);
    return hint;
}

/* Positional arguments of layer `pos` must be whole numbers, >= 1 (pad: >= 0), and within
 * LAYER_ARG_MAX, which the message names. */
static int check_whole_args(const double *a, int npos, enum ddp_layer_kind kind, int pos,
                            const char *orig, char *err, size_t errlen)
{
    for (int i = 0; i < npos; i++) {
        if (a[i] != floor(a[i]) || a[i] < (i >= 3 ? 0 : 1))
            return ddp_err(err, errlen, "layer %d '%s': argument %d must be a whole number >= %d",
                           pos, orig, i + 1, i >= 3 ? 0 : 1);
        if (a[i] > LAYER_ARG_MAX)
            return ddp_err(err, errlen, "layer %d '%s': %s: %s %.0f exceeds the limit %d (2^20)",
                           pos, orig, kind_name(kind), arg_name(kind, i), a[i], LAYER_ARG_MAX);
    }
    return 0;
}

static const char *const LAYERS_USAGE =
    "expected flatten, linear(n), relu, conv2d(out, k[, stride=s, pad=p]), maxpool(k), "
    "avgpool(k), batchnorm or dropout(p)";

/* A layer's arguments (the text between its parentheses): up to 4 positional numbers into
 * pos_args (*npos of them), then conv2d's stride= and pad= into spec. pos, orig: the layer's
 * place and text, for messages. */
static int parse_args(char *args, int pos, const char *orig, struct ddp_layer_spec *spec,
                      double pos_args[4], int *npos, char *err, size_t errlen)
{
    const char *usage = LAYERS_USAGE;
    int has_stride = 0, has_pad = 0;
    char *save = NULL;
    for (char *tok = strtok_r(args, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        tok = trim(tok);
        char *eq = strchr(tok, '=');
        double v;
        if (eq) {
            *eq = '\0';
            char *key = trim(tok);
            if (ddp_parse_f64(eq + 1, &v) != 0 || v != floor(v) || v < 0)
                return ddp_err(err, errlen, "layer %d '%s': %s needs a whole number", pos, orig,
                               key);
            if (v > LAYER_ARG_MAX)
                return ddp_err(err, errlen,
                               "layer %d '%s': %s %.0f exceeds the limit %d "
                               "(2^20)",
                               pos, orig, key, v, LAYER_ARG_MAX);
            if (spec->kind == DDP_LAYER_CONV2D && strcmp(key, "stride") == 0) {
                spec->stride = (int)v;
                has_stride = 1;
            } else if (spec->kind == DDP_LAYER_CONV2D && strcmp(key, "pad") == 0) {
                spec->pad = (int)v;
                has_pad = 1;
            } else
                return ddp_err(err, errlen, "layer %d '%s': unknown argument '%s'; %s", pos, orig,
                               key, usage);
            continue;
        }
        if (has_stride || has_pad)
            return ddp_err(err, errlen,
                           "layer %d '%s': positional argument after stride=/pad=", pos, orig);
        if (*npos == 4 || ddp_parse_f64(tok, &v) != 0)
            return ddp_err(err, errlen, "layer %d '%s': '%s' is not a number; %s", pos, orig, tok,
                           usage);
        pos_args[(*npos)++] = v;
    }
    return 0;
}

/* Parse "name" or "name(args)" into spec. pos is 1-based, for messages. */
static int parse_item(char *item, int pos, struct ddp_layer_spec *spec, char *err, size_t errlen)
{
    const char *usage = LAYERS_USAGE;
    char orig[ITEM_MAX];
    snprintf(orig, sizeof orig, "%s", item);
    memset(spec, 0, sizeof *spec);
    char *open = strchr(item, '(');
    char *args = NULL;
    if (open) {
        char *close = strrchr(item, ')');
        if (!close || close < open || *trim(close + 1) != '\0')
            return ddp_err(err, errlen, "layer %d '%s': unbalanced parentheses; %s", pos, orig,
                           usage);
        *open = '\0';
        *close = '\0';
        args = open + 1;
    }
    char *name = trim(item);
    for (char *p = name; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    int kind = -1;
    for (int k = DDP_LAYER_FLATTEN; k <= DDP_LAYER_BATCHNORM; k++)
        if (strcmp(name, kind_name((enum ddp_layer_kind)k)) == 0)
            kind = k;
    if (kind < 0)
        return ddp_err(err, errlen, "layer %d '%s': unknown layer;%s %s", pos, orig,
                       near_layer(name), usage);
    spec->kind = (enum ddp_layer_kind)kind;
    spec->stride = 1;

    /* arguments: positional numbers, then name=value */
    double pos_args[4];
    int npos = 0;
    if (args && parse_args(args, pos, orig, spec, pos_args, &npos, err, errlen) != 0)
        return -1;
    int want_min = 0, want_max = 0;
    switch (spec->kind) {
    case DDP_LAYER_LINEAR:
        want_min = want_max = 1;
        break;
    case DDP_LAYER_CONV2D:
        want_min = 2;
        want_max = 4;
        break;
    case DDP_LAYER_MAXPOOL:
    case DDP_LAYER_AVGPOOL:
    case DDP_LAYER_DROPOUT:
        want_min = want_max = 1;
        break;
    default:
        break;
    }
    if (npos < want_min || npos > want_max)
        return ddp_err(err, errlen, "layer %d '%s': %s takes %d%s argument%s, got %d; %s", pos,
                       orig, kind_name(spec->kind), want_min, want_max > want_min ? " or more" : "",
                       want_max == 1 ? "" : "s", npos, usage);
    if (spec->kind != DDP_LAYER_DROPOUT &&
        check_whole_args(pos_args, npos, spec->kind, pos, orig, err, errlen) != 0)
        return -1;
    switch (spec->kind) {
    case DDP_LAYER_LINEAR:
        spec->n = (int)pos_args[0];
        break;
    case DDP_LAYER_CONV2D:
        spec->n = (int)pos_args[0];
        spec->k = (int)pos_args[1];
        if (npos > 2)
            spec->stride = (int)pos_args[2];
        if (npos > 3)
            spec->pad = (int)pos_args[3];
        if (spec->stride < 1)
            return ddp_err(err, errlen, "layer %d '%s': stride must be >= 1", pos, orig);
        break;
    case DDP_LAYER_MAXPOOL:
    case DDP_LAYER_AVGPOOL:
        spec->k = (int)pos_args[0];
        break;
    case DDP_LAYER_DROPOUT:
        if (!(pos_args[0] >= 0 && pos_args[0] < 1))
            return ddp_err(err, errlen, "layer %d '%s': dropout probability must be in [0, 1)", pos,
                           orig);
        spec->p = (float)pos_args[0];
        break;
    default:
        break;
    }
    return 0;
}

int ddp_model_parse(const char *text, struct ddp_layer_spec *specs, int max, char *err,
                    size_t errlen)
{
    int count = 0, depth = 0;
    const char *start = text;
    for (const char *p = text;; p++) {
        if (*p == '(')
            depth++;
        else if (*p == ')')
            depth--;
        if (depth < 0)
            return ddp_err(err, errlen, "layer %d: ')' without '('", count + 1);
        if ((*p == ',' && depth == 0) || *p == '\0') {
            char item[ITEM_MAX];
            size_t n = (size_t)(p - start);
            if (n >= sizeof item)
                return ddp_err(err, errlen, "layer %d: longer than %d characters", count + 1,
                               ITEM_MAX - 1);
            memcpy(item, start, n);
            item[n] = '\0';
            char *t = trim(item);
            if (*t == '\0') {
                if (*p == '\0' && count > 0 && depth == 0)
                    break; /* trailing comma */
                return ddp_err(err, errlen, "layer %d: empty item; remove the extra comma",
                               count + 1);
            }
            if (count == max)
                return ddp_err(err, errlen, "more than %d layers", max);
            if (parse_item(t, count + 1, &specs[count], err, errlen) != 0)
                return -1;
            count++;
            start = p + 1;
        }
        if (*p == '\0')
            break;
    }
    if (depth != 0)
        return ddp_err(err, errlen, "unbalanced parentheses");
    if (count == 0)
        return ddp_err(err, errlen, "no layers; expected e.g. flatten, linear(10)");
    return count;
}

/* ---- construction ----------------------------------------------------------------------- */

static void shape_str(int ndim, const int *d, char *buf, size_t len)
{
    if (ndim == 1)
        snprintf(buf, len, "(%d)", d[0]);
    else
        snprintf(buf, len, "(%d, %d, %d)", d[0], d[1], d[2]);
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0x100000001b3ULL;
}

static void add_tensor(struct ddp_model *m, int index, const char *what, int is_buffer, size_t off,
                       size_t n, int ndim, const int64_t *dims)
{
    struct ddp_tensor_info *t = &m->tensors[m->ntensors++];
    snprintf(t->name, sizeof t->name, "%d.%s", index, what);
    t->is_buffer = is_buffer;
    t->off = off;
    t->n = n;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->dims[i] = dims[i];
}

/* "conv2d(64, 5)" for messages. */
static void layer_str(const struct ddp_layer_spec *s, char *buf, size_t len)
{
    switch (s->kind) {
    case DDP_LAYER_LINEAR:
        snprintf(buf, len, "linear(%d)", s->n);
        break;
    case DDP_LAYER_CONV2D:
        snprintf(buf, len, "conv2d(%d, %d)", s->n, s->k);
        break;
    case DDP_LAYER_MAXPOOL:
    case DDP_LAYER_AVGPOOL:
        snprintf(buf, len, "%s(%d)", kind_name(s->kind), s->k);
        break;
    case DDP_LAYER_DROPOUT:
        snprintf(buf, len, "dropout(%g)", (double)s->p);
        break;
    default:
        snprintf(buf, len, "%s", kind_name(s->kind));
        break;
    }
}

/* Bytes that layer l allocates for batches of B: out and dout, plus its mask, statistics or
 * argmax (flatten owns nothing but the first layer's dout). */
static double layer_bytes(const struct ddp_layer *l, int i, int B)
{
    double act = (double)B * (double)l->out_elems * sizeof(float);
    if (l->spec.kind == DDP_LAYER_FLATTEN)
        return i == 0 ? act : 0;
    double extra = l->spec.kind == DDP_LAYER_MAXPOOL || l->spec.kind == DDP_LAYER_DROPOUT ||
                           l->spec.kind == DDP_LAYER_BATCHNORM
                       ? act
                       : 0;
    return 2 * act + extra;
}

/* Before allocating anything that the layers size: the whole model (parameters, gradients and
 * up to two optimiser states, activations of a batch, conv scratch) must fit the memory this
 * process can have. Only for host memory (the CPU backend). Names the largest layer. */
static int check_memory(const struct ddp_model *m, int max_batch, char *err, size_t errlen)
{
    if (!m->be->name || strcmp(m->be->name, "cpu") != 0)
        return 0;
    struct ddp_model_mem mm;
    int worst = ddp_model_memory(m, max_batch, &mm);
    double params = mm.params, total = mm.total, big = mm.largest_layer;
    const char *which = NULL;
    size_t avail = ddp_mem_available(&which);
    if (total <= (double)avail)
        return 0;
    char need[32], have[32], all[32], what[64];
    ddp_fmt_bytes((double)avail, have, sizeof have);
    ddp_fmt_bytes(total, all, sizeof all);
    if (params >= big)
        return ddp_err(err, errlen,
                       "the model's %zu parameters need %s with their gradients "
                       "and optimiser state (%s in all) but this machine has %s available (%s); "
                       "make the layers narrower",
                       m->nparams, ddp_fmt_bytes(params, need, sizeof need), all, have, which);
    layer_str(&m->layers[worst].spec, what, sizeof what);
    return ddp_err(err, errlen,
                   "layer %d %s: its outputs for a batch of %d need %s (the model "
                   "%s in all) but this machine has %s available (%s); lower [data] batch_size "
                   "or the layer's size",
                   worst + 1, what, max_batch, ddp_fmt_bytes(big, need, sizeof need), all, have,
                   which);
}

int ddp_model_memory(const struct ddp_model *m, int max_batch, struct ddp_model_mem *out)
{
    const struct ddp_backend *be = m->be;
    double params = 4.0 * sizeof(float) * (double)m->nparams, total = params, col = 0, big = 0;
    int worst = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const struct ddp_layer *l = &m->layers[i];
        double b = layer_bytes(l, i, max_batch);
        if (l->spec.kind == DDP_LAYER_CONV2D) {
            double c =
                (double)be->conv_col_elems(max_batch, l->ishape[0], l->ishape[1], l->ishape[2],
                                           l->spec.k, l->spec.stride, l->spec.pad) *
                sizeof(float);
            col = c > col ? c : col;
        }
        total += b;
        if (b > big) {
            big = b;
            worst = i;
        }
    }
    total += col;
    out->params = params;
    out->activations = total - params - col;
    out->scratch = col;
    out->total = total;
    out->largest_layer = big;
    return worst;
}

/* Layer i's output shape from its input shape (*ndim, d; shp: the input as text), checked:
 * updates *ndim and d in place. */
static int layer_shape(const struct ddp_layer *l, int i, int *ndim, int d[3], const char *shp,
                       char *err, size_t errlen)
{
    const struct ddp_layer_spec *s = &l->spec;
    switch (s->kind) {
    case DDP_LAYER_FLATTEN:
        d[0] = (int)l->in_elems;
        *ndim = 1;
        break;
    case DDP_LAYER_LINEAR:
        if (*ndim != 1)
            return ddp_err(err, errlen,
                           "layer %d linear(%d): input %s is not flat; put flatten before it",
                           i + 1, s->n, shp);
        d[0] = s->n;
        break;
    case DDP_LAYER_CONV2D: {
        if (*ndim != 3)
            return ddp_err(err, errlen,
                           "layer %d conv2d: input %s is not (C, H, W); conv2d needs image "
                           "input before any flatten or linear",
                           i + 1, shp);
        int oh = (d[1] + 2 * s->pad - s->k) / s->stride + 1;
        int ow = (d[2] + 2 * s->pad - s->k) / s->stride + 1;
        if (d[1] + 2 * s->pad < s->k || d[2] + 2 * s->pad < s->k || oh < 1 || ow < 1)
            return ddp_err(err, errlen, "layer %d conv2d(%d, %d): kernel larger than its input %s",
                           i + 1, s->n, s->k, shp);
        if (s->pad >= s->k)
            return ddp_err(err, errlen, "layer %d conv2d: pad %d must be smaller than k %d", i + 1,
                           s->pad, s->k);
        d[0] = s->n;
        d[1] = oh;
        d[2] = ow;
        break;
    }
    case DDP_LAYER_MAXPOOL:
    case DDP_LAYER_AVGPOOL:
        if (*ndim != 3)
            return ddp_err(err, errlen, "layer %d %s(%d): input %s is not (C, H, W)", i + 1,
                           kind_name(s->kind), s->k, shp);
        if (s->k > d[1] || s->k > d[2])
            return ddp_err(err, errlen, "layer %d %s(%d): window larger than input %s", i + 1,
                           kind_name(s->kind), s->k, shp);
        d[1] /= s->k;
        d[2] /= s->k;
        break;
    default:
        break;
    }
    return 0;
}

/* The flat layout: parameters in reverse layer order (buffers likewise); tensors listed in
 * forward order. */
static int layout_params(struct ddp_model *m, char *err, size_t errlen)
{
    size_t cursor = 0, bcursor = 0;
    for (int i = m->nlayers - 1; i >= 0; i--) {
        struct ddp_layer *l = &m->layers[i];
        switch (l->spec.kind) {
        case DDP_LAYER_LINEAR:
            l->w_n = (size_t)l->oshape[0] * l->ishape[0];
            l->b_n = (size_t)l->oshape[0];
            break;
        case DDP_LAYER_CONV2D:
            l->w_n = (size_t)l->spec.n * l->ishape[0] * l->spec.k * l->spec.k;
            l->b_n = (size_t)l->spec.n;
            break;
        case DDP_LAYER_BATCHNORM:
            l->w_n = l->b_n = (size_t)l->ishape[0];
            l->rm_off = bcursor;
            l->rv_off = bcursor + l->b_n;
            bcursor += 2 * l->b_n;
            break;
        default:
            break;
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
    for (int i = 0; i < m->nlayers; i++) {
        struct ddp_layer *l = &m->layers[i];
        int64_t dims[4];
        if (l->spec.kind == DDP_LAYER_LINEAR) {
            dims[0] = l->oshape[0];
            dims[1] = l->ishape[0];
            add_tensor(m, i, "weight", 0, l->w_off, l->w_n, 2, dims);
            add_tensor(m, i, "bias", 0, l->b_off, l->b_n, 1, dims);
        } else if (l->spec.kind == DDP_LAYER_CONV2D) {
            dims[0] = l->spec.n;
            dims[1] = l->ishape[0];
            dims[2] = dims[3] = l->spec.k;
            add_tensor(m, i, "weight", 0, l->w_off, l->w_n, 4, dims);
            add_tensor(m, i, "bias", 0, l->b_off, l->b_n, 1, dims);
        } else if (l->spec.kind == DDP_LAYER_BATCHNORM) {
            dims[0] = l->ishape[0];
            add_tensor(m, i, "weight", 0, l->w_off, l->w_n, 1, dims);
            add_tensor(m, i, "bias", 0, l->b_off, l->b_n, 1, dims);
            add_tensor(m, i, "running_mean", 1, l->rm_off, l->b_n, 1, dims);
            add_tensor(m, i, "running_var", 1, l->rv_off, l->b_n, 1, dims);
        }
    }

    return 0;
}

/* Parameters, gradients, buffers, and each layer's activations and scratch for max_batch. */
static void alloc_buffers(struct ddp_model *m, int max_batch)
{
    const struct ddp_backend *be = m->be;
    m->params = be->alloc(sizeof(float) * (m->nparams ? m->nparams : 1));
    m->grads = be->alloc(sizeof(float) * (m->nparams ? m->nparams : 1));
    m->buffers = be->alloc(sizeof(float) * (m->nbuffers ? m->nbuffers : 1));
    size_t col = 0;
    for (int i = 0; i < m->nlayers; i++) {
        struct ddp_layer *l = &m->layers[i];
        size_t act = (size_t)max_batch * l->out_elems;
        if (l->spec.kind == DDP_LAYER_FLATTEN) {
            /* aliases: out is the input, dout is shared with the previous layer's */
            if (i > 0) {
                l->dout = m->layers[i - 1].dout;
            } else {
                l->dout = be->alloc(sizeof(float) * act);
            }
            continue;
        }
        l->out = be->alloc(sizeof(float) * act);
        l->dout = be->alloc(sizeof(float) * act);
        switch (l->spec.kind) {
        case DDP_LAYER_CONV2D: {
            size_t c = be->conv_col_elems(max_batch, l->ishape[0], l->ishape[1], l->ishape[2],
                                          l->spec.k, l->spec.stride, l->spec.pad);
            if (c > col)
                col = c;
            break;
        }
        case DDP_LAYER_MAXPOOL:
            l->argmax = be->alloc(sizeof(int32_t) * act);
            break;
        case DDP_LAYER_DROPOUT:
        case DDP_LAYER_BATCHNORM:
            l->aux = be->alloc(sizeof(float) * act);
            if (l->spec.kind == DDP_LAYER_BATCHNORM) {
                l->mean = be->alloc(sizeof(float) * l->b_n);
                l->invstd = be->alloc(sizeof(float) * l->b_n);
                l->sums = be->alloc(sizeof(double) * (6 * l->b_n + 3));
            }
            break;
        default:
            break;
        }
    }
    /* A flatten that follows a layer shares that layer's dout, so the earlier layer must
     * see the flatten's (identical-size) buffer: walk forward once more. */
    for (int i = 1; i < m->nlayers; i++)
        if (m->layers[i].spec.kind == DDP_LAYER_FLATTEN)
            m->layers[i].dout = m->layers[i - 1].dout;
    m->col = col ? be->alloc(sizeof(float) * col) : NULL;
}

int ddp_model_create(struct ddp_model *m, const struct ddp_backend *be, const char *layers,
                     int in_ndim, const int64_t *in_dims, int max_batch, char *err, size_t errlen)
{
    struct ddp_layer_spec specs[DDP_MODEL_LAYERS_MAX];
    memset(m, 0, sizeof *m);
    int n = ddp_model_parse(layers, specs, DDP_MODEL_LAYERS_MAX, err, errlen);
    if (n < 0)
        return -1;
    m->be = be;
    m->nlayers = n;
    m->max_batch = max_batch;
    m->layers = ddp_calloc((size_t)n, sizeof *m->layers);
    m->tensors = ddp_calloc((size_t)n * 5, sizeof *m->tensors);
    m->in_ndim = in_ndim;
    for (int i = 0; i < in_ndim; i++) {
        if (in_dims[i] < 1 || in_dims[i] > (1 << 24))
            return ddp_err(err, errlen, "sample dimension %lld out of range",
                           (long long)in_dims[i]);
        m->ishape[i] = (int)in_dims[i];
    }
    uint64_t fp = mix(0xcbf29ce484222325ULL, (uint64_t)in_ndim);
    for (int i = 0; i < in_ndim; i++)
        fp = mix(fp, (uint64_t)m->ishape[i]);

    /* shapes */
    int ndim = in_ndim, d[3] = {m->ishape[0], m->ishape[1], m->ishape[2]};
    char shp[64];
    for (int i = 0; i < n; i++) {
        struct ddp_layer *l = &m->layers[i];
        l->spec = specs[i];
        l->index = i;
        l->in_ndim = ndim;
        memcpy(l->ishape, d, sizeof d);
        l->in_elems = ndim == 1 ? (size_t)d[0] : (size_t)d[0] * d[1] * d[2];
        shape_str(ndim, d, shp, sizeof shp);
        if (layer_shape(l, i, &ndim, d, shp, err, errlen) != 0)
            return -1;
        l->out_ndim = ndim;
        memcpy(l->oshape, d, sizeof d);
        l->out_elems = ndim == 1 ? (size_t)d[0] : (size_t)d[0] * d[1] * d[2];
        if (l->out_elems > (1u << 28) || (size_t)max_batch * l->out_elems > (1ULL << 34))
            return ddp_err(err, errlen, "layer %d: output of %zu values per sample is too large",
                           i + 1, l->out_elems);
        const struct ddp_layer_spec *s = &l->spec;
        fp = mix(fp, (uint64_t)s->kind);
        fp = mix(fp, (uint64_t)s->n);
        fp = mix(fp, (uint64_t)s->k * 131 + (uint64_t)s->stride * 7 + (uint64_t)s->pad);
    }
    struct ddp_layer *last = &m->layers[n - 1];
    if (last->out_ndim != 1 || last->oshape[0] < 2)
        return ddp_err(err, errlen,
                       "the last layer must produce class scores (a flat vector of at least 2); "
                       "end with linear(classes)");
    m->classes = last->oshape[0];
    m->in_elems = m->layers[0].in_elems;
    m->fingerprint = fp;

    if (layout_params(m, err, errlen) != 0)
        return -1;
    if (check_memory(m, max_batch, err, errlen) != 0)
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
        if (l->spec.kind == DDP_LAYER_FLATTEN) {
            if (i == 0)
                be->free(l->dout);
            continue;
        }
        be->free(l->out);
        be->free(l->dout);
        be->free(l->aux);
        be->free(l->argmax);
        be->free(l->mean);
        be->free(l->invstd);
        be->free(l->sums);
    }
    be->free(m->params);
    be->free(m->grads);
    be->free(m->buffers);
    be->free(m->col);
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
            double fan_in = (double)l->w_n / (double)l->b_n;
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
 * no host round trip. */
static void bn_forward(struct ddp_model *m, struct ddp_layer *l, const float *x, int B, int train)
{
    const struct ddp_backend *be = m->be;
    int C, S;
    bn_dims(l, &C, &S);
    float *gamma = m->params + l->w_off, *beta = m->params + l->b_off;
    float *rm = m->buffers + l->rm_off, *rv = m->buffers + l->rv_off;
    if (!train) {
        be->bn_update(l->mean, l->invstd, rm, rv, NULL, C, BN_EPS, BN_MOMENTUM);
        be->bn_fwd_apply(l->out, NULL, x, l->mean, l->invstd, gamma, beta, B, C, S);
        return;
    }
    double *sums = l->sums; /* [0,2C): sum, sumsq; [2C]: count */
    be->bn_stats(sums, x, B, C, S);
    if (m->sync_sums)
        m->sync_sums(m->sync_ctx, sums, 2 * (size_t)C + 1);
    be->bn_update(l->mean, l->invstd, rm, rv, sums, C, BN_EPS, BN_MOMENTUM);
    l->num_batches_tracked++;
    be->bn_fwd_apply(l->out, l->aux, x, l->mean, l->invstd, gamma, beta, B, C, S);
}

const float *ddp_model_forward(struct ddp_model *m, const float *x, int B, int train,
                               uint64_t noise_seed)
{
    const struct ddp_backend *be = m->be;
    for (int i = 0; i < m->nlayers; i++) {
        struct ddp_layer *l = &m->layers[i];
        const struct ddp_layer_spec *s = &l->spec;
        float *w = m->params + l->w_off, *b = m->params + l->b_off;
        switch (s->kind) {
        case DDP_LAYER_FLATTEN:
            l->out = (float *)x;
            break;
        case DDP_LAYER_LINEAR:
            be->linear_fwd(l->out, x, w, b, B, l->ishape[0], l->oshape[0]);
            break;
        case DDP_LAYER_RELU:
            be->relu_fwd(l->out, x, (size_t)B * l->out_elems);
            break;
        case DDP_LAYER_CONV2D:
            be->conv2d_fwd(l->out, m->col, x, w, b, B, l->ishape[0], l->ishape[1], l->ishape[2],
                           s->n, s->k, s->stride, s->pad);
            break;
        case DDP_LAYER_MAXPOOL:
            be->maxpool_fwd(l->out, l->argmax, x, B, l->ishape[0], l->ishape[1], l->ishape[2],
                            s->k);
            break;
        case DDP_LAYER_AVGPOOL:
            be->avgpool_fwd(l->out, x, B, l->ishape[0], l->ishape[1], l->ishape[2], s->k);
            break;
        case DDP_LAYER_DROPOUT:
            if (train && s->p > 0)
                be->dropout_fwd(l->out, l->aux, x, (size_t)B * l->out_elems, s->p,
                                noise_seed ^ (0xd1b54a32d192ed03ULL * (uint64_t)(i + 1)));
            else
                be->upload(l->out, x, sizeof(float) * (size_t)B * l->out_elems);
            break;
        case DDP_LAYER_BATCHNORM:
            bn_forward(m, l, x, B, train);
            break;
        }
        x = l->out;
    }
    return x;
}

float *ddp_model_dlogits(struct ddp_model *m)
{
    return m->layers[m->nlayers - 1].dout;
}

void ddp_model_backward(struct ddp_model *m, const float *x, int B,
                        void (*layer_done)(void *ctx, int layer), void *ctx)
{
    const struct ddp_backend *be = m->be;
    /* below the first layer with parameters no gradient is needed (flatten, linear: the
     * first linear's input gradient would be pure waste) */
    int first = m->nlayers;
    for (int i = 0; i < m->nlayers && first == m->nlayers; i++)
        if (m->layers[i].w_n)
            first = i;
    for (int i = m->nlayers - 1; i >= first; i--) {
        struct ddp_layer *l = &m->layers[i];
        const struct ddp_layer_spec *s = &l->spec;
        const float *inp = i ? m->layers[i - 1].out : x;
        float *dinp = i > first ? m->layers[i - 1].dout : NULL;
        float *w = m->params + l->w_off;
        float *dw = m->grads + l->w_off, *db = m->grads + l->b_off;
        size_t n = (size_t)B * l->out_elems;
        switch (s->kind) {
        case DDP_LAYER_FLATTEN:
            break; /* dout is shared with the previous layer */
        case DDP_LAYER_LINEAR:
            be->linear_bwd(dinp, dw, db, l->dout, inp, w, B, l->ishape[0], l->oshape[0]);
            break;
        case DDP_LAYER_RELU:
            if (dinp)
                be->relu_bwd(dinp, l->dout, l->out, n);
            break;
        case DDP_LAYER_CONV2D:
            be->conv2d_bwd(dinp, dw, db, m->col, l->dout, inp, w, B, l->ishape[0], l->ishape[1],
                           l->ishape[2], s->n, s->k, s->stride, s->pad);
            break;
        case DDP_LAYER_MAXPOOL:
            if (dinp)
                be->maxpool_bwd(dinp, l->dout, l->argmax, B, l->ishape[0], l->ishape[1],
                                l->ishape[2], s->k);
            break;
        case DDP_LAYER_AVGPOOL:
            if (dinp)
                be->avgpool_bwd(dinp, l->dout, B, l->ishape[0], l->ishape[1], l->ishape[2], s->k);
            break;
        case DDP_LAYER_DROPOUT:
            if (dinp) {
                if (s->p > 0)
                    be->dropout_bwd(dinp, l->dout, l->aux, n);
                else
                    be->upload(dinp, l->dout, sizeof(float) * n);
            }
            break;
        case DDP_LAYER_BATCHNORM: {
            int C, S;
            bn_dims(l, &C, &S);
            double *local = l->sums + 2 * C + 1, *global = local + 2 * C + 1;
            be->bn_bwd_sums(local, l->dout, l->aux, B, C, S);
            be->upload(global, local, sizeof(double) * (2 * (size_t)C + 1)); /* on the device */
            if (m->sync_sums)
                m->sync_sums(m->sync_ctx, global, 2 * (size_t)C + 1);
            be->bn_bwd_apply(dinp, dw, db, l->dout, l->aux, l->invstd, w, local, global, B, C, S);
            break;
        }
        }
        if (layer_done && l->w_n)
            layer_done(ctx, i);
    }
}

void ddp_model_describe(const struct ddp_model *m, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < m->nlayers && used + 1 < len; i++) {
        const struct ddp_layer *l = &m->layers[i];
        char in[48], out[48];
        shape_str(l->in_ndim, l->ishape, in, sizeof in);
        shape_str(l->out_ndim, l->oshape, out, sizeof out);
        used += (size_t)snprintf(
            buf + used, len - used, "%s%s%s", i ? ", " : "", kind_name(l->spec.kind),
            l->spec.kind == DDP_LAYER_LINEAR || l->spec.kind == DDP_LAYER_CONV2D ||
                    l->spec.kind == DDP_LAYER_MAXPOOL || l->spec.kind == DDP_LAYER_AVGPOOL
                ? out
                : "");
    }
}

/* ---- diagnosis -------------------------------------------------------------------------- */

/* Largest |v| of n device values (NaN/inf: *bad set), via a host copy. */
static double max_abs(const struct ddp_backend *be, const float *v, size_t n, int *bad)
{
    float *h = ddp_malloc(sizeof(float) * (n ? n : 1));
    be->download(h, v, sizeof(float) * n);
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
    double in_max = max_abs(be, x, (size_t)B * m->in_elems, &bad);
    if (bad)
        return snprintf(why, len, "the input batch holds NaN or inf; check the dataset"), 1;
    for (int i = 0; i < m->nlayers; i++) {
        struct ddp_layer *l = &m->layers[i];
        layer_str(&l->spec, what, sizeof what);
        max_abs(be, m->params + l->w_off, l->w_n + l->b_n, &bad);
        if (bad)
            return snprintf(why, len,
                            "layer %d %s has non-finite weights: training diverged; "
                            "lower [optim] lr",
                            i + 1, what),
                   0;
    }
    ddp_model_forward(m, x, B, 1, noise_seed);
    double prev = in_max;
    int first_param = -1;
    for (int i = 0; i < m->nlayers; i++) {
        struct ddp_layer *l = &m->layers[i];
        if (first_param < 0 && l->w_n)
            first_param = i;
        double out = max_abs(be, l->out, (size_t)B * l->out_elems, &bad);
        if (!bad) {
            prev = out;
            continue;
        }
        layer_str(&l->spec, what, sizeof what);
        if (first_param < 0 || first_param == i)
            return snprintf(why, len,
                            "layer %d %s is the first whose output is non-finite, "
                            "from finite weights and input values as large as %.3g: scale the "
                            "dataset's values (e.g. to [0, 1])",
                            i + 1, what, prev),
                   1;
        return snprintf(why, len,
                        "layer %d %s is the first whose output is non-finite (its "
                        "input reaches %.3g): training diverged; lower [optim] lr or normalise "
                        "the input",
                        i + 1, what, prev),
               0;
    }
    return snprintf(why, len,
                    "every layer's output is finite (logits up to %.3g) but the loss "
                    "is not: training diverged; lower [optim] lr",
                    prev),
           0;
}

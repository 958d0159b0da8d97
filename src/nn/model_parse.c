/*
 * model_parse.c - the [model] layers grammar: a comma-separated list of layers with positional
 * and keyword arguments and nested residual(...) blocks, into layer specs (model.h
 * ddp_model_parse); every error names the layer's position and what was expected.
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

/* ---- parsing ---------------------------------------------------------------------------- */

#define ITEM_MAX 128 /* characters of one layer item, e.g. "conv2d(64, 5, stride=1, pad=2)" */

/* The parseable kinds run from DDP_LAYER_FLATTEN to DDP_LAYER_RESIDUAL. */
#define KIND_LAST DDP_LAYER_RESIDUAL

const char *model_kind_name(enum ddp_layer_kind k)
{
    static const char *names[] = {"flatten",       "linear",   "relu",           "conv2d",
                                  "maxpool",       "avgpool",  "dropout",        "batchnorm",
                                  "globalavgpool", "residual", "end of residual"};
    _Static_assert(sizeof names / sizeof names[0] == DDP_LAYER_RESIDUAL_END + 1,
                   "one name per layer kind");
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
    const char *names[KIND_LAST + 1];
    for (int k = DDP_LAYER_FLATTEN; k <= KIND_LAST; k++)
        names[k] = model_kind_name((enum ddp_layer_kind)k);
    const char *near = ddp_suggest(name, names, KIND_LAST + 1);
    hint[0] = '\0';
    if (near)
        snprintf(hint, sizeof hint, " did you mean '%s'?", near);
    return hint;
}

/* Positional arguments of layer `pos` must be whole numbers, >= 1 (pad: >= 0), and within
 * LAYER_ARG_MAX, which the message names. */
static int check_whole_args(const double *a, int npos, enum ddp_layer_kind kind, const char *pos,
                            const char *orig, char *err, size_t errlen)
{
    for (int i = 0; i < npos; i++) {
        if (a[i] != floor(a[i]) || a[i] < (i >= 3 ? 0 : 1))
            return ddp_err(err, errlen, "layer %s '%s': argument %d must be a whole number >= %d",
                           pos, orig, i + 1, i >= 3 ? 0 : 1);
        if (a[i] > LAYER_ARG_MAX)
            return ddp_err(err, errlen, "layer %s '%s': %s: %s %.0f exceeds the limit %d (2^20)",
                           pos, orig, model_kind_name(kind), arg_name(kind, i), a[i],
                           LAYER_ARG_MAX);
    }
    return 0;
}

static const char *const LAYERS_USAGE =
    "expected flatten, linear(n[, bias=false]), relu, conv2d(out, k[, stride=s, pad=p, "
    "bias=false]), maxpool(k), avgpool(k), globalavgpool, batchnorm, dropout(p) or "
    "residual(layers...)";

/* bias=true|false of conv2d and linear into spec. */
static int parse_bias(const char *val, const char *pos, const char *orig,
                      struct ddp_layer_spec *spec, char *err, size_t errlen)
{
    char v[16];
    snprintf(v, sizeof v, "%s", val);
    char *t = trim(v);
    if (spec->kind != DDP_LAYER_CONV2D && spec->kind != DDP_LAYER_LINEAR)
        return ddp_err(err, errlen,
                       "layer %s '%s': unknown argument 'bias'; only conv2d and linear take "
                       "bias=false",
                       pos, orig);
    if (strcmp(t, "false") == 0)
        spec->nobias = 1;
    else if (strcmp(t, "true") == 0)
        spec->nobias = 0;
    else
        return ddp_err(err, errlen, "layer %s '%s': bias must be true or false, not '%s'", pos,
                       orig, t);
    return 0;
}

/* One name=value argument of a layer into spec; *has_kw is set. */
static int parse_kwarg(char *tok, char *eq, const char *pos, const char *orig,
                       struct ddp_layer_spec *spec, char *err, size_t errlen)
{
    *eq = '\0';
    char *key = trim(tok);
    double v;
    if (strcmp(key, "bias") == 0)
        return parse_bias(eq + 1, pos, orig, spec, err, errlen);
    int known = spec->kind == DDP_LAYER_CONV2D && (!strcmp(key, "stride") || !strcmp(key, "pad"));
    if (!known)
        return ddp_err(err, errlen, "layer %s '%s': unknown argument '%s'; %s", pos, orig, key,
                       LAYERS_USAGE);
    if (ddp_parse_f64(eq + 1, &v) != 0 || v != floor(v) || v < 0)
        return ddp_err(err, errlen, "layer %s '%s': %s needs a whole number", pos, orig, key);
    if (v > LAYER_ARG_MAX)
        return ddp_err(err, errlen, "layer %s '%s': %s %.0f exceeds the limit %d (2^20)", pos, orig,
                       key, v, LAYER_ARG_MAX);
    if (strcmp(key, "stride") == 0)
        spec->stride = (int)v;
    else
        spec->pad = (int)v;
    return 0;
}

/* A layer's arguments (the text between its parentheses): up to 4 positional numbers into
 * pos_args (*npos of them), then name=value arguments (stride=, pad=, bias=) into spec. pos,
 * orig: the layer's place and text, for messages. */
static int parse_args(char *args, const char *pos, const char *orig, struct ddp_layer_spec *spec,
                      double pos_args[4], int *npos, char *err, size_t errlen)
{
    int has_kw = 0;
    char *save = NULL;
    for (char *tok = strtok_r(args, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        tok = trim(tok);
        char *eq = strchr(tok, '=');
        double v;
        if (eq) {
            if (parse_kwarg(tok, eq, pos, orig, spec, err, errlen) != 0)
                return -1;
            has_kw = 1;
            continue;
        }
        if (has_kw)
            return ddp_err(err, errlen,
                           "layer %s '%s': positional argument after a name=value argument", pos,
                           orig);
        if (*npos == 4 || ddp_parse_f64(tok, &v) != 0)
            return ddp_err(err, errlen, "layer %s '%s': '%s' is not a number; %s", pos, orig, tok,
                           LAYERS_USAGE);
        pos_args[(*npos)++] = v;
    }
    return 0;
}

/* Positional arguments a layer kind takes: [*lo, *hi]. */
static void arg_counts(enum ddp_layer_kind kind, int *lo, int *hi)
{
    *lo = *hi = 0;
    if (kind == DDP_LAYER_CONV2D) {
        *lo = 2;
        *hi = 4;
    } else if (kind == DDP_LAYER_LINEAR || kind == DDP_LAYER_MAXPOOL || kind == DDP_LAYER_AVGPOOL ||
               kind == DDP_LAYER_DROPOUT)
        *lo = *hi = 1;
}

/* The positional arguments (checked for count and range) into spec. */
static int apply_args(struct ddp_layer_spec *spec, const double *a, int npos, const char *pos,
                      const char *orig, char *err, size_t errlen)
{
    int want_min, want_max;
    arg_counts(spec->kind, &want_min, &want_max);
    if (npos < want_min || npos > want_max)
        return ddp_err(err, errlen, "layer %s '%s': %s takes %d%s argument%s, got %d; %s", pos,
                       orig, model_kind_name(spec->kind), want_min,
                       want_max > want_min ? " or more" : "", want_max == 1 ? "" : "s", npos,
                       LAYERS_USAGE);
    if (spec->kind != DDP_LAYER_DROPOUT &&
        check_whole_args(a, npos, spec->kind, pos, orig, err, errlen) != 0)
        return -1;
    switch (spec->kind) {
    case DDP_LAYER_LINEAR:
        spec->n = (int)a[0];
        break;
    case DDP_LAYER_CONV2D:
        spec->n = (int)a[0];
        spec->k = (int)a[1];
        if (npos > 2)
            spec->stride = (int)a[2];
        if (npos > 3)
            spec->pad = (int)a[3];
        if (spec->stride < 1)
            return ddp_err(err, errlen, "layer %s '%s': stride must be >= 1", pos, orig);
        break;
    case DDP_LAYER_MAXPOOL:
    case DDP_LAYER_AVGPOOL:
        spec->k = (int)a[0];
        break;
    case DDP_LAYER_DROPOUT:
        if (!(a[0] >= 0 && a[0] < 1))
            return ddp_err(err, errlen, "layer %s '%s': dropout probability must be in [0, 1)", pos,
                           orig);
        spec->p = (float)a[0];
        break;
    default:
        break;
    }
    return 0;
}

/* Parse "name" or "name(args)" into spec. pos: "3" or "3.2" (inside a block), for messages. */
static int parse_item(char *item, const char *pos, struct ddp_layer_spec *spec, char *err,
                      size_t errlen)
{
    char orig[ITEM_MAX];
    snprintf(orig, sizeof orig, "%s", item);
    memset(spec, 0, sizeof *spec);
    char *open = strchr(item, '(');
    char *args = NULL;
    if (open) {
        char *close = strrchr(item, ')');
        if (!close || close < open || *trim(close + 1) != '\0')
            return ddp_err(err, errlen, "layer %s '%s': unbalanced parentheses; %s", pos, orig,
                           LAYERS_USAGE);
        *open = '\0';
        *close = '\0';
        args = open + 1;
    }
    char *name = trim(item);
    for (char *p = name; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    int kind = -1;
    for (int k = DDP_LAYER_FLATTEN; k < KIND_LAST; k++)
        if (strcmp(name, model_kind_name((enum ddp_layer_kind)k)) == 0)
            kind = k;
    if (kind < 0)
        return ddp_err(err, errlen, "layer %s '%s': unknown layer;%s %s", pos, orig,
                       near_layer(name), LAYERS_USAGE);
    spec->kind = (enum ddp_layer_kind)kind;
    spec->stride = 1;

    /* arguments: positional numbers, then name=value */
    double pos_args[4];
    int npos = 0;
    if (args && parse_args(args, pos, orig, spec, pos_args, &npos, err, errlen) != 0)
        return -1;
    return apply_args(spec, pos_args, npos, pos, orig, err, errlen);
}

/* Where parse_list writes: the specs, how many, the limit, the nesting depth. */
struct parse_out {
    struct ddp_layer_spec *specs;
    int count, max, depth;
};

static int parse_list(const char *text, const char *where, struct parse_out *o, char *err,
                      size_t errlen);

/* "residual(...)" at item text t (trimmed, lower-cased prefix checked by the caller): the
 * block's spec, its body's (parse_list, one level deeper), the closing spec. */
static int parse_residual(const char *t, const char *pos, struct parse_out *o, char *err,
                          size_t errlen)
{
    const char *open = strchr(t, '(');
    const char *close = strrchr(t, ')');
    char orig[40];
    snprintf(orig, sizeof orig, "%.32s%s", t, strlen(t) > 32 ? "..." : "");
    if (!open || !close || close < open)
        return ddp_err(err, errlen,
                       "layer %s '%s': unbalanced parentheses; expected residual(layers...)", pos,
                       orig);
    for (const char *p = close + 1; *p; p++)
        if (!isspace((unsigned char)*p))
            return ddp_err(err, errlen,
                           "layer %s '%s': text after residual(...)'s ')'; put a comma before "
                           "the next layer",
                           pos, orig);
    for (const char *p = open + 1; p < close; p++)
        if (!isspace((unsigned char)*p))
            goto nonempty;
    return ddp_err(err, errlen,
                   "layer %s '%s': residual block with an empty body; put its layers inside, "
                   "e.g. residual(conv2d(16, 3, pad=1), batchnorm, relu)",
                   pos, orig);
nonempty:
    if (o->depth == DDP_MODEL_NEST_MAX)
        return ddp_err(err, errlen,
                       "layer %s: residual blocks nested more than %d deep; flatten the nesting",
                       pos, DDP_MODEL_NEST_MAX);
    if (o->count + 2 > o->max)
        return ddp_err(err, errlen, "more than %d layers", o->max);
    memset(&o->specs[o->count], 0, sizeof o->specs[0]);
    o->specs[o->count++].kind = DDP_LAYER_RESIDUAL;
    size_t n = (size_t)(close - open - 1);
    char *inner = ddp_malloc(n + 1);
    memcpy(inner, open + 1, n);
    inner[n] = '\0';
    o->depth++;
    int rc = parse_list(inner, pos, o, err, errlen);
    o->depth--;
    free(inner);
    if (rc != 0)
        return -1;
    if (o->count == o->max)
        return ddp_err(err, errlen, "more than %d layers", o->max);
    memset(&o->specs[o->count], 0, sizeof o->specs[0]);
    o->specs[o->count++].kind = DDP_LAYER_RESIDUAL_END;
    return 0;
}

/* One item of a list: a residual block or a plain layer. */
static int parse_one(const char *start, size_t n, const char *pos, struct parse_out *o, char *err,
                     size_t errlen)
{
    while (n > 0 && isspace((unsigned char)*start)) {
        start++;
        n--;
    }
    char head[16];
    size_t hn = n < sizeof head - 1 ? n : sizeof head - 1;
    memcpy(head, start, hn);
    head[hn] = '\0';
    char *h = trim(head);
    for (char *p = h; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    if (strncmp(h, "residual", 8) == 0 && (h[8] == '(' || isspace((unsigned char)h[8]))) {
        char *t = ddp_malloc(n + 1);
        memcpy(t, start, n);
        t[n] = '\0';
        int rc = parse_residual(trim(t), pos, o, err, errlen);
        free(t);
        return rc;
    }
    char item[ITEM_MAX];
    if (n >= sizeof item)
        return ddp_err(err, errlen, "layer %s: longer than %d characters", pos, ITEM_MAX - 1);
    memcpy(item, start, n);
    item[n] = '\0';
    if (o->count == o->max)
        return ddp_err(err, errlen, "more than %d layers", o->max);
    return parse_item(trim(item), pos, &o->specs[o->count++], err, errlen);
}

/* A comma-separated list (the layers, or a block's body); where: the block's position ("" at
 * the top), for messages. */
static int parse_list(const char *text, const char *where, struct parse_out *o, char *err,
                      size_t errlen)
{
    int items = 0, depth = 0;
    const char *start = text;
    char pos[POS_MAX];
    for (const char *p = text;; p++) {
        if (*p == '(')
            depth++;
        else if (*p == ')')
            depth--;
        snprintf(pos, sizeof pos, "%s%s%d", where, *where ? "." : "", items + 1);
        if (depth < 0)
            return ddp_err(err, errlen, "layer %s: ')' without '('; remove it or add its '('", pos);
        if ((*p == ',' && depth == 0) || *p == '\0') {
            size_t n = (size_t)(p - start);
            int blank = 1;
            for (size_t i = 0; i < n && blank; i++)
                blank = isspace((unsigned char)start[i]) != 0;
            if (blank) {
                if (*p == '\0' && items > 0 && depth == 0)
                    break; /* trailing comma */
                if (*p == '\0' && depth != 0)
                    break; /* reported below */
                return ddp_err(err, errlen, "layer %s: empty item; remove the extra comma", pos);
            }
            if (*p == '\0' && depth != 0)
                break;
            if (parse_one(start, n, pos, o, err, errlen) != 0)
                return -1;
            items++;
            start = p + 1;
        }
        if (*p == '\0')
            break;
    }
    if (depth != 0)
        return ddp_err(err, errlen,
                       "unbalanced parentheses: %d '(' without its ')'; close every layer's "
                       "arguments and every residual(...)",
                       depth);
    return 0;
}

int ddp_model_parse(const char *text, struct ddp_layer_spec *specs, int max, char *err,
                    size_t errlen)
{
    struct parse_out o = {specs, 0, max, 0};
    if (parse_list(text, "", &o, err, errlen) != 0)
        return -1;
    if (o.count == 0)
        return ddp_err(err, errlen, "no layers; expected e.g. flatten, linear(10)");
    return o.count;
}

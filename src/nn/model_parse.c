/*
 * model_parse.c - the [model] layers grammar: a comma-separated list of layers with positional
 * and keyword arguments and nested residual(...) blocks, into layer specs (model.h
 * ddp_model_parse); every error names the layer's position and what was expected.
 */
#include "nn/model.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/rng.h"
#include "core/suggest.h"
#include "core/util.h"
#include "nn/model_impl.h"

/* ---- parsing ---------------------------------------------------------------------------- */

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

/* A layer item being parsed: a private copy of its text, edited in place, and where it came
 * from. Every error blames one character of the layers text (o->err_at): the first blamed
 * wins, so the innermost culprit is named. */
struct parse_out;
struct item {
    char *buf;           /* the item's text, NUL-terminated (owned) */
    size_t at;           /* offset of buf[0] in the layers text */
    const char *pos;     /* "3" or "3.2" (inside a block), for messages */
    char orig[72];       /* the item as written, abbreviated past 60 characters */
    char *arg_at[4];     /* where each positional argument starts in buf */
    unsigned kw_given;   /* name=value arguments seen: bit i for kwarg_names' names[i] */
    struct parse_out *o; /* the error's place and text */
    struct ddp_layer_spec *spec;
};

/* Where parse_list writes: the specs, how many, the limit, the nesting depth; the whole text
 * (offsets are into it), the character to blame for an error and the error's text. */
struct parse_out {
    struct ddp_layer_spec *specs;
    int count, max, depth;
    const char *text;
    int err_at;
    char *err;
    size_t errlen;
};

/* Blame the character at p (an address in o->text) unless one is blamed already. */
static void blame_text(struct parse_out *o, const char *p)
{
    if (o->err_at < 0)
        o->err_at = (int)(p - o->text);
}

/* Blame the character at p (an address in it->buf). */
static void blame(const struct item *it, const char *p)
{
    if (it->o->err_at < 0)
        it->o->err_at = (int)(it->at + (size_t)(p - it->buf));
}

/* An error of the list: at (in o->text) blamed, the message into o->err. Returns -1. */
__attribute__((format(printf, 3, 4))) static int fail_text(struct parse_out *o, const char *at,
                                                           const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    blame_text(o, at);
    if (o->err)
        vsnprintf(o->err, o->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* An error of a layer: at (in it->buf) blamed, "layer POS 'TEXT': " and the message into the
 * error. Returns -1. */
__attribute__((format(printf, 3, 4))) static int fail(const struct item *it, const char *at,
                                                      const char *fmt, ...)
{
    char why[DDP_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    blame(it, at);
    return ddp_err(it->o->err, it->o->errlen, "layer %s '%s': %s", it->pos, it->orig, why);
}

/* In trimmed text s, the first word after a blank ("3 pad=1" -> "pad=1"), or NULL: two
 * arguments or layers with the comma between them missing. */
static char *second_word(char *s)
{
    char *p = s;
    while (*p && !isspace((unsigned char)*p))
        p++;
    while (isspace((unsigned char)*p))
        p++;
    return *p ? p : NULL;
}

/* The error for text `next` that follows an argument or layer without a comma. */
static int missing_comma(const struct item *it, const char *next)
{
    char word[40];
    size_t n = 0;
    while (next[n] && next[n] != ',' && n < 32)
        n++;
    snprintf(word, sizeof word, "%.*s%s", (int)n, next, next[n] && next[n] != ',' ? "..." : "");
    return fail(it, next,
                "missing comma before '%s'; separate layers, and the arguments "
                "of a layer, with commas",
                word);
}

/* Positional arguments must be whole numbers, >= 1 (pad: >= 0), and within LAYER_ARG_MAX,
 * which the message names. */
static int check_whole_args(const struct item *it, const double *a, int npos)
{
    enum ddp_layer_kind kind = it->spec->kind;
    for (int i = 0; i < npos; i++) {
        if (a[i] == floor(a[i]) && a[i] >= (i >= 3 ? 0 : 1) && a[i] <= LAYER_ARG_MAX)
            continue;
        if (a[i] > LAYER_ARG_MAX)
            return fail(it, it->arg_at[i], "%s: %s %.0f exceeds the limit %d (2^20)",
                        model_kind_name(kind), arg_name(kind, i), a[i], LAYER_ARG_MAX);
        return fail(it, it->arg_at[i], "argument %d must be a whole number >= %d", i + 1,
                    i >= 3 ? 0 : 1);
    }
    return 0;
}

static const char *const LAYERS_USAGE =
    "expected flatten, linear(n[, bias=false]), relu, conv2d(out, k[, stride=s, pad=p, "
    "bias=false]), maxpool(k), avgpool(k), globalavgpool, batchnorm, dropout(p) or "
    "residual(layers...)";

/* The name=value arguments a layer kind takes, into names; returns how many. */
static int kwarg_names(enum ddp_layer_kind kind, const char *names[3])
{
    names[0] = "stride";
    names[1] = "pad";
    names[2] = "bias";
    if (kind == DDP_LAYER_CONV2D)
        return 3;
    names[0] = "bias";
    return kind == DDP_LAYER_LINEAR;
}

/* An argument name the layer does not take: with "did you mean" where one of its own names is
 * near (or a prefix of it: "padding" -> "pad"), and what the layer takes. */
static int unknown_kwarg(const struct item *it, const char *key, const char *at)
{
    const char *names[3];
    int n = kwarg_names(it->spec->kind, names);
    const char *near = ddp_suggest(key, names, n);
    for (int i = 0; i < n && !near; i++)
        if (strncmp(key, names[i], strlen(names[i])) == 0)
            near = names[i];
    char hint[48] = "";
    if (near)
        snprintf(hint, sizeof hint, " did you mean '%s'?", near);
    const char *takes = n == 3   ? "stride=, pad= and bias="
                        : n == 1 ? "bias="
                                 : "no name=value arguments (conv2d takes stride=, pad= and "
                                   "bias=, linear bias=)";
    return fail(it, at, "unknown argument '%s';%s %s takes %s", key, hint,
                model_kind_name(it->spec->kind), takes);
}

/* bias=true|false (any case) into the spec; val: the trimmed value in it->buf. */
static int parse_bias(const struct item *it, char *val)
{
    if (strcasecmp(val, "false") == 0)
        it->spec->nobias = 1;
    else if (strcasecmp(val, "true") == 0)
        it->spec->nobias = 0;
    else
        return fail(it, val, "bias must be true or false, not '%s'", val);
    return 0;
}

/* One name=value argument (tok, trimmed, with its '=' at eq) into the spec, after npos
 * positional ones. Names are matched in any case; each may be given once, and not also as a
 * positional argument (conv2d's 3rd is stride, its 4th pad). */
static int parse_kwarg(struct item *it, char *tok, char *eq, int npos)
{
    *eq = '\0';
    char *key = trim(tok), *val = trim(eq + 1), *next = second_word(key);
    if (next)
        return missing_comma(it, next);
    if ((next = second_word(val)) != NULL)
        return missing_comma(it, next);
    for (char *p = key; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    const char *names[3];
    int n = kwarg_names(it->spec->kind, names), known = -1;
    for (int i = 0; i < n; i++)
        if (strcmp(key, names[i]) == 0)
            known = i;
    if (known < 0)
        return unknown_kwarg(it, key, key);
    if (it->kw_given & (1u << known))
        return fail(it, key, "%s= given twice; give each argument once", key);
    it->kw_given |= 1u << known;
    if (it->spec->kind == DDP_LAYER_CONV2D && npos > 2 + known && known < 2)
        return fail(it, key, "%s given twice: as argument %d and as %s=; give it once", key,
                    3 + known, key);
    if (strcmp(key, "bias") == 0)
        return parse_bias(it, val);
    double v;
    int least = strcmp(key, "stride") == 0; /* pad may be 0 */
    if (ddp_parse_f64(val, &v) != 0 || v != floor(v) || v < least)
        return fail(it, val, "%s needs a whole number >= %d, not '%s'", key, least, val);
    if (v > LAYER_ARG_MAX)
        return fail(it, val, "%s %.0f exceeds the limit %d (2^20)", key, v, LAYER_ARG_MAX);
    if (strcmp(key, "stride") == 0)
        it->spec->stride = (int)v;
    else
        it->spec->pad = (int)v;
    return 0;
}

/* A layer's arguments (the text between its parentheses, in it->buf): up to 4 positional
 * numbers into pos_args (*npos of them), then name=value arguments (stride=, pad=, bias=). */
static int parse_args(struct item *it, char *args, double pos_args[4], int *npos)
{
    int has_kw = 0;
    char *save = NULL;
    for (char *tok = strtok_r(args, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        tok = trim(tok);
        char *eq = strchr(tok, '=');
        double v;
        if (eq) {
            if (parse_kwarg(it, tok, eq, *npos) != 0)
                return -1;
            has_kw = 1;
            continue;
        }
        if (has_kw)
            return fail(it, tok, "positional argument after a name=value argument");
        char *next = second_word(tok);
        if (next && ddp_parse_f64(tok, &v) != 0)
            return missing_comma(it, next);
        if (*npos == 4 || ddp_parse_f64(tok, &v) != 0)
            return fail(it, tok, "'%s' is not a number; %s", tok, LAYERS_USAGE);
        it->arg_at[*npos] = tok;
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

/* The positional arguments (checked for count and range) into the spec. */
static int apply_args(const struct item *it, const double *a, int npos)
{
    struct ddp_layer_spec *spec = it->spec;
    int want_min, want_max;
    arg_counts(spec->kind, &want_min, &want_max);
    if (npos < want_min || npos > want_max)
        return fail(it, it->buf, "%s takes %d%s argument%s, got %d; %s",
                    model_kind_name(spec->kind), want_min, want_max > want_min ? " or more" : "",
                    want_max == 1 ? "" : "s", npos, LAYERS_USAGE);
    if (spec->kind != DDP_LAYER_DROPOUT && check_whole_args(it, a, npos) != 0)
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
        break;
    case DDP_LAYER_MAXPOOL:
    case DDP_LAYER_AVGPOOL:
        spec->k = (int)a[0];
        break;
    case DDP_LAYER_DROPOUT:
        if (!(a[0] >= 0 && a[0] < 1))
            return fail(it, it->arg_at[0], "dropout probability must be in [0, 1)");
        spec->p = (float)a[0];
        break;
    default:
        break;
    }
    return 0;
}

/* The ')' that closes the '(' at open, or NULL. */
static char *matching_paren(char *open)
{
    int depth = 0;
    for (char *p = open; *p; p++)
        if (*p == '(')
            depth++;
        else if (*p == ')' && --depth == 0)
            return p;
    return NULL;
}

/* The layer's name (before any '(') into the spec's kind; args: its arguments' text or NULL. */
static int parse_name(struct item *it, char **args)
{
    char *open = strchr(it->buf, '(');
    *args = NULL;
    if (open) {
        char *close = matching_paren(open), *rest = close ? trim(close + 1) : NULL;
        if (!close) /* parse_list checked the balance; kept for safety */
            return fail(it, open, "unbalanced parentheses: the '(' at character %d has no ')'",
                        (int)(it->at + (size_t)(open - it->buf)) + 1);
        if (*rest)
            return missing_comma(it, rest);
        *open = '\0';
        *close = '\0';
        *args = open + 1;
    }
    char *name = trim(it->buf), *next = second_word(name);
    if (next && isalpha((unsigned char)*next))
        return missing_comma(it, next);
    for (char *p = name; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    for (int k = DDP_LAYER_FLATTEN; k < KIND_LAST; k++)
        if (strcmp(name, model_kind_name((enum ddp_layer_kind)k)) == 0) {
            it->spec->kind = (enum ddp_layer_kind)k;
            return 0;
        }
    return fail(it, name, "unknown layer;%s %s", near_layer(name), LAYERS_USAGE);
}

/* Parse the item of n characters at start (in o->text; no blanks around it), a layer "name"
 * or "name(args)", into the next spec. pos: "3" or "3.2" (inside a block), for messages. */
static int parse_item(const char *start, size_t n, const char *pos, struct parse_out *o)
{
    if (o->count == o->max)
        return ddp_err(o->err, o->errlen, "more than %d layers", o->max);
    struct item it = {.buf = ddp_malloc(n + 1),
                      .at = (size_t)(start - o->text),
                      .pos = pos,
                      .o = o,
                      .spec = &o->specs[o->count++]};
    memcpy(it.buf, start, n);
    it.buf[n] = '\0';
    snprintf(it.orig, sizeof it.orig, "%.60s%s", it.buf, n > 60 ? "..." : "");
    memset(it.spec, 0, sizeof *it.spec);
    it.spec->at = (int)it.at;
    it.spec->stride = 1;
    char *args;
    double pos_args[4];
    int npos = 0;
    int rc = parse_name(&it, &args);
    if (rc == 0 && args)
        rc = parse_args(&it, args, pos_args, &npos);
    if (rc == 0)
        rc = apply_args(&it, pos_args, npos);
    if (rc != 0)
        blame(&it, it.buf); /* the layer, where nothing narrower was blamed */
    free(it.buf);
    return rc;
}

static int parse_list(const char *text, const char *end, const char *where, struct parse_out *o);

/* "residual(...)" at t (n characters, no blanks around; its lower-cased name checked by the
 * caller): the block's spec, its body's (parse_list, one level deeper), the closing spec. */
static int parse_residual(const char *t, size_t n, const char *pos, struct parse_out *o)
{
    char orig[40];
    snprintf(orig, sizeof orig, "%.*s%s", n > 32 ? 32 : (int)n, t, n > 32 ? "..." : "");
    const char *open = t + 8, *close = NULL;
    while (isspace((unsigned char)*open))
        open++;
    if (*open != '(')
        return fail_text(o, open,
                         "layer %s '%s': expected residual(layers...), with "
                         "the block's layers in parentheses",
                         pos, orig);
    for (int depth = 0, i = (int)(open - t); i < (int)n && !close; i++)
        if (t[i] == '(')
            depth++;
        else if (t[i] == ')' && --depth == 0)
            close = t + i;
    const char *next = close ? close + 1 : t + n;
    while (next < t + n && isspace((unsigned char)*next))
        next++;
    if (!close) /* parse_list checked the balance; kept for safety */
        return fail_text(o, open,
                         "layer %s '%s': unbalanced parentheses; expected "
                         "residual(layers...)",
                         pos, orig);
    if (next < t + n)
        return fail_text(o, next,
                         "layer %s '%s': missing comma before '%.*s'; put a comma "
                         "after residual(...)'s ')'",
                         pos, orig, (int)(t + n - next > 20 ? 20 : t + n - next), next);
    const char *body = open + 1;
    while (body < close && isspace((unsigned char)*body))
        body++;
    if (body == close)
        return fail_text(o, open,
                         "layer %s '%s': residual block with an empty body; put its layers inside, "
                         "e.g. residual(conv2d(16, 3, pad=1), batchnorm, relu)",
                         pos, orig);
    if (o->depth == DDP_MODEL_NEST_MAX)
        return fail_text(o, t,
                         "layer %s: residual blocks nested more than %d deep; "
                         "flatten the nesting",
                         pos, DDP_MODEL_NEST_MAX);
    if (o->count + 2 > o->max)
        return ddp_err(o->err, o->errlen, "more than %d layers", o->max);
    memset(&o->specs[o->count], 0, sizeof o->specs[0]);
    o->specs[o->count].at = (int)(t - o->text);
    o->specs[o->count++].kind = DDP_LAYER_RESIDUAL;
    o->depth++;
    int rc = parse_list(open + 1, close, pos, o);
    o->depth--;
    if (rc != 0)
        return -1;
    if (o->count == o->max)
        return ddp_err(o->err, o->errlen, "more than %d layers", o->max);
    memset(&o->specs[o->count], 0, sizeof o->specs[0]);
    o->specs[o->count].at = (int)(t - o->text);
    o->specs[o->count++].kind = DDP_LAYER_RESIDUAL_END;
    return 0;
}

/* One item of a list (n characters at start, in o->text): a residual block or a plain layer. */
static int parse_one(const char *start, size_t n, const char *pos, struct parse_out *o)
{
    while (n > 0 && isspace((unsigned char)*start)) {
        start++;
        n--;
    }
    while (n > 0 && isspace((unsigned char)start[n - 1]))
        n--;
    char head[10];
    size_t hn = n < sizeof head - 1 ? n : sizeof head - 1;
    for (size_t i = 0; i < hn; i++)
        head[i] = (char)tolower((unsigned char)start[i]);
    head[hn] = '\0';
    if (strncmp(head, "residual", 8) == 0 && (head[8] == '(' || isspace((unsigned char)head[8])))
        return parse_residual(start, n, pos, o);
    return parse_item(start, n, pos, o);
}

/* The unbalanced-parentheses error for the '(' at open (in o->text) without its ')', in the
 * item that starts at start. */
static int unclosed(struct parse_out *o, const char *start, const char *open, const char *pos)
{
    while (isspace((unsigned char)*start))
        start++;
    size_t n = strlen(start);
    while (n > 0 && isspace((unsigned char)start[n - 1]))
        n--;
    return fail_text(
        o, open,
        "layer %s '%.*s%s': unbalanced parentheses: the '(' at character %d has no ')'; close "
        "every layer's arguments and every residual(...)",
        pos, n > 40 ? 40 : (int)n, start, n > 40 ? "..." : "", (int)(open - o->text) + 1);
}

/* A comma-separated list [text, end) of o->text (the layers, or a block's body); where: the
 * block's position ("" at the top), for messages. */
static int parse_list(const char *text, const char *end, const char *where, struct parse_out *o)
{
    int items = 0, depth = 0;
    const char *start = text, *open = NULL; /* open: the outermost '(' not yet closed */
    char pos[POS_MAX];
    for (const char *p = text;; p++) {
        int last = p == end;
        snprintf(pos, sizeof pos, "%s%s%d", where, *where ? "." : "", items + 1);
        if (!last && *p == '(' && depth++ == 0)
            open = p;
        else if (!last && *p == ')' && --depth < 0)
            return fail_text(o, p,
                             "layer %s: the ')' at character %d has no '('; "
                             "remove it or add its '('",
                             pos, (int)(p - o->text) + 1);
        if (!last && (*p != ',' || depth != 0))
            continue;
        if (last && depth != 0)
            return unclosed(o, start, open, pos);
        int blank = 1;
        for (const char *q = start; q < p && blank; q++)
            blank = isspace((unsigned char)*q) != 0;
        if (blank && last && items > 0)
            break; /* trailing comma */
        if (blank)
            return fail_text(o, p, "layer %s: empty item; remove the extra comma", pos);
        if (parse_one(start, (size_t)(p - start), pos, o) != 0)
            return -1;
        items++;
        start = p + 1;
        if (last)
            break;
    }
    return 0;
}

int ddp_model_parse(const char *text, struct ddp_layer_spec *specs, int max, int *err_at, char *err,
                    size_t errlen)
{
    struct parse_out o = {specs, 0, max, 0, text, -1, err, errlen};
    int rc = parse_list(text, text + strlen(text), "", &o);
    if (rc == 0 && o.count == 0)
        rc = ddp_err(err, errlen, "no layers; expected e.g. flatten, linear(10)");
    if (err_at)
        *err_at = rc == 0 ? -1 : o.err_at;
    return rc == 0 ? o.count : -1;
}

/*
 * hostlist.c - our own parser for the Slurm hostlist grammar and Slurm's compressed count
 * lists (see hostlist.h for the grammar and the order of expansion). Written from the
 * documented behaviour and from `scontrol show hostnames` output, not from Slurm's code.
 *
 * Shape: the expression is copied, cut into tokens (separators only count outside brackets),
 * each token is parsed into literal pieces and bracket groups, every limit is checked before
 * anything is allocated for the product, then the names are generated with an odometer over
 * the groups in Slurm's nesting order. Names are not resolved here; that is world.c's job.
 */
#include "dist/hostlist.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* How much of a token an error message quotes before cutting it with "...". */
#define QUOTE_MAX 64

/* One "lo-hi" item of a bracket group; width is the number of digits written for lo. */
struct range {
    int64_t lo, hi;
    int width;
};

/* One bracket group: its ranges, its number of values, and (once the product is known to be
 * within limits) its values and widths in order. */
struct group {
    struct range *r;
    int nr;
    int64_t size;
    int64_t *val; /* (size) */
    int *wid;     /* (size) */
};

/* A growing array of owned names. */
struct names {
    char **v;
    int n, cap;
};

static int is_sep(char c)
{
    return c == ',' || c == ' ' || c == '\t' || c == '\n';
}
static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}
static int is_name_char(unsigned char c)
{
    return c > 0x20 && c < 0x7f;
}

/* Copy s[0..len) into dst as a quoted string for an error line, cut at QUOTE_MAX, with
 * control and non-ASCII bytes shown as '?' so the message stays one printable line. */
static void quote(char *dst, size_t dstlen, const char *s, size_t len)
{
    char clean[QUOTE_MAX + 1];
    size_t n = len > QUOTE_MAX ? QUOTE_MAX : len;
    for (size_t i = 0; i < n; i++)
        clean[i] = is_name_char((unsigned char)s[i]) || s[i] == ' ' ? s[i] : '?';
    clean[n] = '\0';
    snprintf(dst, dstlen, "\"%s%s\"", clean, len > n ? "..." : "");
}

/* Append name (taking ownership) to out. */
static void names_push(struct names *out, char *name)
{
    if (out->n == out->cap) {
        out->cap = out->cap ? 2 * out->cap : 16;
        out->v = ddp_realloc(out->v, (size_t)out->cap * sizeof *out->v);
    }
    out->v[out->n++] = name;
}

static void names_free(struct names *out)
{
    ddp_hostlist_free(out->v, out->n);
    out->v = NULL;
    out->n = out->cap = 0;
}

void ddp_hostlist_free(char **hosts, int count)
{
    if (!hosts)
        return;
    for (int i = 0; i < count; i++)
        free(hosts[i]);
    free(hosts);
}

static void groups_free(struct group *g, int ng)
{
    for (int i = 0; i < ng; i++) {
        free(g[i].r);
        free(g[i].val);
        free(g[i].wid);
    }
    free(g);
}

/* Parse the digits s[0..len) (len >= 1, all digits, at most DDP_HOSTLIST_DIGITS_MAX). */
static int64_t digits_value(const char *s, size_t len)
{
    int64_t v = 0;
    for (size_t i = 0; i < len; i++)
        v = v * 10 + (s[i] - '0');
    return v;
}

/* Parse the inside of one bracket group, s[0..len), into g. tq is the quoted token for
 * messages. Returns 0 or -1 with err filled. */
static int parse_group(const char *s, size_t len, const char *tq, struct group *g, char *err,
                       size_t errlen)
{
    if (len == 0)
        return ddp_err(err, errlen,
                       "hostlist %s: empty brackets \"[]\"; put numbers or ranges inside, "
                       "e.g. n[1-3,5]",
                       tq);
    int cap = 0;
    size_t i = 0;
    while (i <= len) {
        size_t j = i;
        while (j < len && s[j] != ',')
            j++;
        /* item s[i..j) */
        char iq[QUOTE_MAX + 8];
        quote(iq, sizeof iq, s + i, j - i);
        if (j == i)
            return ddp_err(err, errlen,
                           "hostlist %s: empty item between commas in brackets; write numbers "
                           "or ranges separated by single commas, e.g. n[1-3,5]",
                           tq);
        size_t dash = j, ndash = 0;
        for (size_t k = i; k < j; k++) {
            if (s[k] == '-') {
                if (ndash++ == 0)
                    dash = k;
            } else if (!is_digit(s[k])) {
                return ddp_err(err, errlen,
                               "hostlist %s: '%c' in item %s is not a digit; brackets hold "
                               "only unsigned numbers and ranges like 1-3, without blanks",
                               tq, s[k], iq);
            }
        }
        if (ndash > 1)
            return ddp_err(err, errlen,
                           "hostlist %s: item %s has more than one '-'; a range is low-high, "
                           "e.g. 1-3",
                           tq, iq);
        size_t lo_len = dash - i, hi_len = ndash ? j - dash - 1 : 0;
        if (lo_len == 0)
            return ddp_err(err, errlen,
                           "hostlist %s: range %s has no low bound; write low-high, e.g. 1-3", tq,
                           iq);
        if (ndash && hi_len == 0)
            return ddp_err(err, errlen,
                           "hostlist %s: range %s has no high bound; write low-high, e.g. 1-3", tq,
                           iq);
        if (lo_len > DDP_HOSTLIST_DIGITS_MAX || hi_len > DDP_HOSTLIST_DIGITS_MAX)
            return ddp_err(err, errlen,
                           "hostlist %s: number in %s has more than %d digits; check the "
                           "expression",
                           tq, iq, DDP_HOSTLIST_DIGITS_MAX);
        struct range r;
        r.lo = digits_value(s + i, lo_len);
        r.hi = ndash ? digits_value(s + dash + 1, hi_len) : r.lo;
        r.width = (int)lo_len;
        if (r.lo > r.hi)
            return ddp_err(err, errlen,
                           "hostlist %s: range %s runs backwards; write the low bound first, "
                           "e.g. %" PRId64 "-%" PRId64,
                           tq, iq, r.hi, r.lo);
        if (r.hi - r.lo + 1 > DDP_HOSTLIST_MAX_RANGE)
            return ddp_err(err, errlen,
                           "hostlist %s: range %s holds %" PRId64
                           " numbers, more than the limit of %d per range; split it or check "
                           "for a typo",
                           tq, iq, r.hi - r.lo + 1, DDP_HOSTLIST_MAX_RANGE);
        if (g->nr == cap) {
            cap = cap ? 2 * cap : 4;
            g->r = ddp_realloc(g->r, (size_t)cap * sizeof *g->r);
        }
        g->r[g->nr++] = r;
        g->size += r.hi - r.lo + 1;
        if (g->size > DDP_HOSTLIST_MAX_HOSTS)
            return ddp_err(err, errlen,
                           "hostlist %s: one bracket group names more than %d hosts, the "
                           "limit; split the expression or check for a typo",
                           tq, DDP_HOSTLIST_MAX_HOSTS);
        i = j + 1;
    }
    return 0;
}

/* Fill g->val / g->wid from its ranges (g->size is within limits). */
static void group_materialize(struct group *g)
{
    g->val = ddp_malloc((size_t)g->size * sizeof *g->val);
    g->wid = ddp_malloc((size_t)g->size * sizeof *g->wid);
    int64_t k = 0;
    for (int i = 0; i < g->nr; i++)
        for (int64_t v = g->r[i].lo; v <= g->r[i].hi; v++) {
            g->val[k] = v;
            g->wid[k] = g->r[i].width;
            k++;
        }
}

/* A token split into pieces: lit[0] grp[0] lit[1] grp[1] ... lit[ng]; lit_off/lit_len index
 * into the token. */
struct pieces {
    struct group *g;
    int ng, gcap;
    size_t *lit_off, *lit_len;
    size_t lit_total;
};

static void pieces_free(struct pieces *p)
{
    groups_free(p->g, p->ng);
    free(p->lit_off);
    free(p->lit_len);
}

/* The bracket group of t starting at t[i] == '[': parsed into a new group of p; *next is the
 * index after its ']'. */
static int scan_group(const char *t, size_t len, size_t i, const char *tq, struct pieces *p,
                      size_t *next, char *err, size_t errlen)
{
    size_t j = i + 1;
    while (j < len && t[j] != ']') {
        if (t[j] == '[')
            return ddp_err(err, errlen,
                           "hostlist %s: nested '[' inside brackets; a bracket group holds "
                           "only numbers and ranges, e.g. n[1-3]",
                           tq);
        j++;
    }
    if (j == len)
        return ddp_err(err, errlen,
                       "hostlist %s: '[' is never closed; finish the group with ']', e.g. "
                       "n[1-3]",
                       tq);
    if (p->ng == p->gcap) {
        p->gcap = p->gcap ? 2 * p->gcap : 4;
        p->g = ddp_realloc(p->g, (size_t)p->gcap * sizeof *p->g);
    }
    memset(&p->g[p->ng], 0, sizeof p->g[p->ng]);
    p->ng++;
    if (parse_group(t + i + 1, j - i - 1, tq, &p->g[p->ng - 1], err, errlen) < 0)
        return -1;
    p->lit_off[p->ng] = j + 1;
    p->lit_len[p->ng] = 0;
    *next = j + 1;
    return 0;
}

/* Split t[0..len) into literal pieces and bracket groups. */
static int scan_token(const char *t, size_t len, const char *tq, struct pieces *p, char *err,
                      size_t errlen)
{
    p->lit_off = ddp_malloc((len + 2) * sizeof *p->lit_off);
    p->lit_len = ddp_malloc((len + 2) * sizeof *p->lit_len);
    p->lit_off[0] = 0;
    p->lit_len[0] = 0;
    size_t i = 0;
    while (i < len) {
        char c = t[i];
        if (c == '[') {
            if (scan_group(t, len, i, tq, p, &i, err, errlen) < 0)
                return -1;
        } else if (c == ']') {
            return ddp_err(err, errlen,
                           "hostlist %s: ']' without a matching '['; remove it or open the "
                           "group, e.g. n[1-3]",
                           tq);
        } else if (!is_name_char((unsigned char)c)) {
            return ddp_err(err, errlen,
                           "hostlist %s: character 0x%02x is not allowed in a host name; use "
                           "printable ASCII (letters, digits, '-', '.', '_')",
                           tq, (unsigned)(unsigned char)c);
        } else {
            p->lit_len[p->ng]++;
            p->lit_total++;
            i++;
        }
    }
    if (p->lit_total > DDP_HOSTLIST_NAME_MAX)
        return ddp_err(err, errlen,
                       "hostlist %s: host name longer than %d characters; check the expression", tq,
                       DDP_HOSTLIST_NAME_MAX);
    return 0;
}

/* Size of the product of p's groups, checked against what is left of the host budget. */
static int product_size(const struct pieces *p, int have, const char *tq, int64_t *prod, char *err,
                        size_t errlen)
{
    int64_t left = DDP_HOSTLIST_MAX_HOSTS - have;
    *prod = 1;
    for (int k = 0; k < p->ng && *prod <= left; k++) {
        if (p->g[k].size > left / *prod)
            *prod = left + 1;
        else
            *prod *= p->g[k].size;
    }
    if (*prod > left)
        return ddp_err(err, errlen,
                       "hostlist: the expression names more than %d hosts in all, the limit "
                       "(reached at %s); split it or check for a typo",
                       DDP_HOSTLIST_MAX_HOSTS, tq);
    return 0;
}

/* Name number idx of the product (idx: each group's position) into name; its length, or -1
 * when longer than DDP_HOSTLIST_NAME_MAX. */
static int compose_name(const char *t, const struct pieces *p, const int *idx, char *name)
{
    size_t pos = 0;
    for (int k = 0; k <= p->ng; k++) {
        if (p->lit_len[k] > 0) {
            /* lit_total <= NAME_MAX, and numbers are checked below */
            if (pos + p->lit_len[k] > DDP_HOSTLIST_NAME_MAX)
                return -1;
            memcpy(name + pos, t + p->lit_off[k], p->lit_len[k]);
            pos += p->lit_len[k];
        }
        if (k < p->ng) {
            char num[32];
            int w =
                snprintf(num, sizeof num, "%0*" PRId64, p->g[k].wid[idx[k]], p->g[k].val[idx[k]]);
            if (w < 0 || pos + (size_t)w > DDP_HOSTLIST_NAME_MAX)
                return -1;
            memcpy(name + pos, num, (size_t)w);
            pos += (size_t)w;
        }
    }
    name[pos] = '\0';
    return (int)pos;
}

/* Expand one token t[0..len) (no separators outside brackets) into out. */
static int expand_token(const char *t, size_t len, struct names *out, char *err, size_t errlen)
{
    char tq[QUOTE_MAX + 8];
    quote(tq, sizeof tq, t, len);
    struct pieces p = {0};
    int64_t prod;
    int rc = -1, *idx = NULL, *order = NULL;
    char name[DDP_HOSTLIST_NAME_MAX + 1];
    if (scan_token(t, len, tq, &p, err, errlen) < 0 ||
        product_size(&p, out->n, tq, &prod, err, errlen) < 0)
        goto done;
    for (int k = 0; k < p.ng; k++)
        group_materialize(&p.g[k]);

    /* Nesting order, outermost first: G(k-1), ..., G1, Gk (0-based: ng-2 .. 0, ng-1). */
    order = ddp_malloc((size_t)(p.ng + 1) * sizeof *order);
    idx = ddp_calloc((size_t)(p.ng + 1), sizeof *idx);
    if (p.ng >= 1) {
        int m = 0;
        for (int k = p.ng - 2; k >= 0; k--)
            order[m++] = k;
        order[m] = p.ng - 1;
    }
    for (int64_t n = 0; n < prod; n++) {
        int nl = compose_name(t, &p, idx, name);
        if (nl < 0) {
            ddp_err(err, errlen,
                    "hostlist %s: expands to a host name longer than %d characters; check the "
                    "expression",
                    tq, DDP_HOSTLIST_NAME_MAX);
            goto done;
        }
        char *copy = ddp_malloc((size_t)nl + 1);
        memcpy(copy, name, (size_t)nl + 1);
        names_push(out, copy);
        /* odometer: innermost group turns fastest */
        for (int m = p.ng - 1; m >= 0; m--) {
            int k = order[m];
            if (++idx[k] < p.g[k].size)
                break;
            idx[k] = 0;
        }
    }
    rc = 0;
done:
    pieces_free(&p);
    free(order);
    free(idx);
    return rc;
}

int ddp_hostlist_expand(const char *expr, char ***hosts, int *count, char *err, size_t errlen)
{
    *hosts = NULL;
    *count = 0;
    if (!expr)
        return ddp_err(err, errlen, "hostlist: no expression given; pass e.g. n[1-4]");
    size_t len = strnlen(expr, (size_t)DDP_HOSTLIST_EXPR_MAX + 1);
    if (len > DDP_HOSTLIST_EXPR_MAX)
        return ddp_err(err, errlen,
                       "hostlist: expression longer than %d bytes, the limit; this is not a "
                       "nodelist, check the variable or argument",
                       DDP_HOSTLIST_EXPR_MAX);
    char *buf = ddp_malloc(len + 1); /* private copy */
    memcpy(buf, expr, len + 1);

    struct names out = {0};
    size_t i = 0;
    while (i < len) {
        while (i < len && is_sep(buf[i]))
            i++; /* empty tokens are skipped, as Slurm does */
        if (i == len)
            break;
        size_t start = i;
        int depth = 0;
        while (i < len && (depth > 0 || !is_sep(buf[i]))) {
            if (buf[i] == '[')
                depth++;
            else if (buf[i] == ']' && depth > 0)
                depth--;
            i++;
        }
        if (expand_token(buf + start, i - start, &out, err, errlen) < 0) {
            names_free(&out);
            free(buf);
            return -1;
        }
    }
    free(buf);
    *hosts = out.v;
    *count = out.n;
    return 0;
}

/* Item s[i..e) of a count list: "N" or "N(xR)" -> *val, *rep (q, iq: the list and the item,
 * quoted for messages). */
static int count_item(const char *s, size_t i, size_t e, const char *q, const char *iq,
                      int64_t *val_out, int64_t *rep_out, char *err, size_t errlen)
{
    size_t d = i;
    while (d < e && is_digit(s[d]))
        d++;
    if (d == i || d - i > DDP_HOSTLIST_DIGITS_MAX) {
        ddp_err(err, errlen,
                "count list %s: item %s does not start with a count; expected N or "
                "N(xR) with unsigned numbers, e.g. 4(x2)",
                q, iq);
        return -1;
    }
    int64_t val = digits_value(s + i, d - i), rep = 1;
    if (val > DDP_HOSTLIST_COUNT_MAX) {
        ddp_err(err, errlen, "count list %s: count %" PRId64 " in item %s is above the limit %d", q,
                val, iq, DDP_HOSTLIST_COUNT_MAX);
        return -1;
    }
    if (d < e) {
        /* must be "(x" digits ")" and then the end of the item */
        size_t r = d + 2, rd = d + 2;
        while (rd < e && is_digit(s[rd]))
            rd++;
        if (s[d] != '(' || d + 1 >= e || s[d + 1] != 'x' || rd == r || rd + 1 != e ||
            s[rd] != ')' || rd - r > DDP_HOSTLIST_DIGITS_MAX) {
            ddp_err(err, errlen,
                    "count list %s: item %s is malformed; expected N or N(xR), e.g. "
                    "4(x2) for 4,4",
                    q, iq);
            return -1;
        }
        rep = digits_value(s + r, rd - r);
        if (rep < 1) {
            ddp_err(err, errlen,
                    "count list %s: item %s repeats zero times; the repeat R in N(xR) "
                    "must be at least 1",
                    q, iq);
            return -1;
        }
    }
    *val_out = val;
    *rep_out = rep;
    return 0;
}

int ddp_hostlist_expand_counts(const char *expr, int **counts, int *n, char *err, size_t errlen)
{
    *counts = NULL;
    *n = 0;
    if (!expr)
        return ddp_err(err, errlen, "count list: none given; expected e.g. 4(x2),3");
    size_t len = strnlen(expr, (size_t)DDP_HOSTLIST_EXPR_MAX + 1);
    if (len > DDP_HOSTLIST_EXPR_MAX)
        return ddp_err(err, errlen, "count list: longer than %d bytes, the limit",
                       DDP_HOSTLIST_EXPR_MAX);
    char *buf = ddp_malloc(len + 1); /* private copy */
    memcpy(buf, expr, len + 1);
    char *s = buf;
    while (*s == ' ' || *s == '\t' || *s == '\n')
        s++;
    size_t sl = strlen(s);
    while (sl > 0 && (s[sl - 1] == ' ' || s[sl - 1] == '\t' || s[sl - 1] == '\n'))
        s[--sl] = '\0';

    char q[QUOTE_MAX + 8];
    quote(q, sizeof q, s, sl);
    int *v = NULL, nv = 0, cap = 0;
    if (sl == 0) {
        ddp_err(err, errlen, "count list is empty; expected counts like 4(x2),3");
        goto fail;
    }
    size_t i = 0;
    for (;;) {
        size_t item = i;
        char iq[QUOTE_MAX + 8];
        size_t e = i;
        while (e < sl && s[e] != ',')
            e++;
        quote(iq, sizeof iq, s + item, e - item);
        if (e == item) {
            ddp_err(err, errlen,
                    "count list %s: empty item between commas; expected counts like 4(x2),3", q);
            goto fail;
        }
        int64_t val, rep;
        if (count_item(s, i, e, q, iq, &val, &rep, err, errlen) < 0)
            goto fail;
        if (rep > DDP_HOSTLIST_MAX_HOSTS - nv) {
            ddp_err(err, errlen, "count list %s: more than %d entries, the limit", q,
                    DDP_HOSTLIST_MAX_HOSTS);
            goto fail;
        }
        while (nv + rep > cap) {
            cap = cap ? 2 * cap : 16;
            v = ddp_realloc(v, (size_t)cap * sizeof *v);
        }
        for (int64_t k = 0; k < rep; k++)
            v[nv++] = (int)val;
        if (e == sl)
            break;
        i = e + 1;
        if (i == sl) {
            ddp_err(err, errlen,
                    "count list %s: ends with a comma; remove it or add the missing count", q);
            goto fail;
        }
    }
    free(buf);
    *counts = v;
    *n = nv;
    return 0;
fail:
    free(v);
    free(buf);
    return -1;
}

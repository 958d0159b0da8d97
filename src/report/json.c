/* json.c - JSON reader. See json.h. */
#include "report/json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

struct parser {
    const char *p;
    char *err;
    size_t errlen;
    int failed;
};

static int fail(struct parser *ps, const char *what)
{
    if (!ps->failed)
        ddp_err(ps->err, ps->errlen, "%s at \"%.12s\"", what, ps->p);
    ps->failed = 1;
    return -1;
}

static void blanks(struct parser *ps)
{
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
        ps->p++;
}

/* A number: JSON's grammar (strtod alone would take -nan, -inf and hex), or the NaN, Infinity
 * and -Infinity that Python's json module writes for non-finite floats. */
static int number(struct parser *ps, struct ddp_json *v)
{
    static const struct {
        const char *word;
        double num;
    } special[] = {{"NaN", NAN}, {"Infinity", INFINITY}, {"-Infinity", -INFINITY}};
    const char *p = ps->p;
    v->type = DDP_JSON_NUM;
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        if (strncmp(p, special[i].word, strlen(special[i].word)) == 0) {
            v->num = special[i].num;
            ps->p += strlen(special[i].word);
            return 0;
        }
    char *end;
    v->num = strtod(p, &end);
    const char *digit = p + (*p == '-');
    if (end == p || *digit < '0' || *digit > '9' ||
        strspn(p, "0123456789+-.eE") < (size_t)(end - p))
        return fail(ps, "expected a value");
    ps->p = end;
    return 0;
}

/* A string after its opening quote; malloc'd. */
static char *string(struct parser *ps)
{
    size_t cap = 32, n = 0;
    char *out = ddp_malloc(cap);
    for (;;) {
        char c = *ps->p++;
        if (c == '\0' || (unsigned char)c < 0x20) {
            free(out);
            ps->p--;
            fail(ps, "unterminated string");
            return NULL;
        }
        if (c == '"')
            break;
        if (c == '\\') {
            char e = *ps->p++;
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *k = e ? strchr(from, e) : NULL;
            if (k) {
                c = to[k - from];
            } else if (e == 'u' && strspn(ps->p, "0123456789abcdefABCDEF") >= 4) {
                long u = strtol((char[5]){ps->p[0], ps->p[1], ps->p[2], ps->p[3], 0}, NULL, 16);
                c = u > 0 && u < 0x80 ? (char)u : '?';
                ps->p += 4;
            } else {
                free(out);
                fail(ps, "bad escape in string");
                return NULL;
            }
        }
        if (n + 2 > cap)
            out = ddp_realloc(out, cap *= 2);
        out[n++] = c;
    }
    out[n] = '\0';
    return out;
}

static int value(struct parser *ps, struct ddp_json *v, int depth);

/* Array or object after its opening bracket. */
static int container(struct parser *ps, struct ddp_json *v, int depth, int obj)
{
    char close = obj ? '}' : ']';
    int cap = 0;
    blanks(ps);
    if (*ps->p == close) {
        ps->p++;
        return 0;
    }
    for (;;) {
        if (v->n == cap) {
            cap = cap ? cap * 2 : 8;
            v->items = ddp_realloc(v->items, sizeof *v->items * (size_t)cap);
            if (obj)
                v->keys = ddp_realloc(v->keys, sizeof *v->keys * (size_t)cap);
        }
        blanks(ps);
        if (obj) {
            if (*ps->p != '"')
                return fail(ps, "expected a key");
            ps->p++;
            char *k = string(ps);
            if (!k)
                return -1;
            v->keys[v->n] = k;
            blanks(ps);
            if (*ps->p++ != ':') {
                memset(&v->items[v->n++], 0, sizeof *v->items);
                return fail(ps, "expected ':'");
            }
        }
        memset(&v->items[v->n], 0, sizeof *v->items);
        v->n++;
        if (value(ps, &v->items[v->n - 1], depth + 1) != 0)
            return -1;
        blanks(ps);
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p++ == close)
            return 0;
        return fail(ps, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int value(struct parser *ps, struct ddp_json *v, int depth)
{
    if (depth > DDP_JSON_DEPTH_MAX)
        return fail(ps, "nested too deep");
    blanks(ps);
    const char *p = ps->p;
    if (*p == '{' || *p == '[') {
        v->type = *p == '{' ? DDP_JSON_OBJ : DDP_JSON_ARR;
        ps->p++;
        return container(ps, v, depth, v->type == DDP_JSON_OBJ);
    }
    if (*p == '"') {
        ps->p++;
        v->type = DDP_JSON_STR;
        v->str = string(ps);
        return v->str ? 0 : -1;
    }
    static const char *words[] = {"null", "true", "false"};
    for (int i = 0; i < 3; i++)
        if (strncmp(p, words[i], strlen(words[i])) == 0) {
            v->type = i ? DDP_JSON_BOOL : DDP_JSON_NULL;
            v->num = i == 1;
            ps->p += strlen(words[i]);
            return 0;
        }
    return number(ps, v);
}

/* Release what v holds (not v itself). */
static void clear(struct ddp_json *v)
{
    for (int i = 0; i < v->n; i++) {
        clear(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
}

struct ddp_json *ddp_json_parse(const char *text, char *err, size_t errlen)
{
    struct parser ps = {text, err, errlen, 0};
    struct ddp_json *v = ddp_calloc(1, sizeof *v);
    if (value(&ps, v, 0) == 0) {
        blanks(&ps);
        if (*ps.p == '\0')
            return v;
        fail(&ps, "text after the value");
    }
    ddp_json_free(v);
    return NULL;
}

void ddp_json_free(struct ddp_json *v)
{
    if (!v)
        return;
    clear(v);
    free(v);
}

const struct ddp_json *ddp_json_get(const struct ddp_json *v, const char *key)
{
    if (!v || v->type != DDP_JSON_OBJ)
        return NULL;
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->keys[i], key) == 0)
            return &v->items[i];
    return NULL;
}

double ddp_json_num(const struct ddp_json *v, const char *key)
{
    const struct ddp_json *m = ddp_json_get(v, key);
    return m && (m->type == DDP_JSON_NUM || m->type == DDP_JSON_BOOL) ? m->num : NAN;
}

const char *ddp_json_text(const struct ddp_json *v, const char *key, const char *def)
{
    const struct ddp_json *m = ddp_json_get(v, key);
    return m && m->type == DDP_JSON_STR ? m->str : def;
}

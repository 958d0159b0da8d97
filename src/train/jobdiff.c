/* jobdiff.c - compare a checkpoint's effective job with this job. See jobdiff.h. */
#include "train/jobdiff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/outdir.h"
#include "core/util.h"

#define EFFECTIVE_HEADER "; effective job:" /* the first line ddp_job_write writes */
#define NAME_LEN 160                        /* "section.key" */
#define ITEMS_MAX (DDP_JOB_KEYS_MAX * 2)    /* a newer version's extra keys are ignored */
#define VALUE_SHOWN 48                      /* characters of one value in the message */

/* Keys that may differ between a checkpoint's job and the job that resumes it. */
static const char *const g_may_differ[] = {
    "job.name",          "job.output",      "data.test",
    "data.cache_mb",     "data.batch_size", /* compared as the global batch */
    "train.epochs",      "train.max_steps", "train.log_every",
    "train.eval_every",  "train.threads",   "train.device",
    "checkpoint.*",      "dist.backend",    "dist.bucket_mb",
    "dist.timeout_s",    "dist.port",       "dist.bootstrap",
    "dist.check_every",  "job.report",      "job.tensorboard",
    "train.early_stop",  /* when the run ends, as train.epochs; not what it trains */
    "train.conv",        /* how the GPU convolves, as train.device; not what it trains */
    "train.layout",      /* how the GPU lays out activations; not what it trains */
    "train.activations", /* how the GPU stores activations; a checkpoint is fp32 either way */
    "train.cudnn_api",   /* which cuDNN API convolves, as train.conv; not what it trains */
    "train.cuda_graph",  /* how the step is issued, not what it computes */
};

struct item {
    char name[NAME_LEN]; /* "section.key" */
    char *value;         /* owned */
    int bad;             /* this ddptrain rejects the stored value */
};
struct items {
    struct item v[ITEMS_MAX];
    int n;
};

int ddp_jobdiff_is_effective(const char *text)
{
    return text && strncmp(text, EFFECTIVE_HEADER, strlen(EFFECTIVE_HEADER)) == 0;
}

static int may_differ(const char *name)
{
    for (size_t i = 0; i < sizeof g_may_differ / sizeof g_may_differ[0]; i++) {
        const char *m = g_may_differ[i];
        size_t n = strlen(m);
        if (m[n - 1] == '*' ? strncmp(name, m, n - 1) == 0 : strcmp(name, m) == 0)
            return 1;
    }
    return 0;
}

/* Copy of s[0..n) without leading and trailing blanks (malloc'd). */
static char *trimmed(const char *s, size_t n)
{
    while (n > 0 && (*s == ' ' || *s == '\t')) {
        s++;
        n--;
    }
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        n--;
    char *t = ddp_malloc(n + 1);
    memcpy(t, s, n);
    t[n] = '\0';
    return t;
}

/* One line of job.ini's format into out: a section header, a key, or a continuation. */
static void parse_line(const char *p, size_t n, char *section, size_t slen, struct items *out)
{
    if (n == 0 || p[0] == ';' || p[0] == '#')
        return;
    if (p[0] == '[') {
        const char *end = memchr(p, ']', n);
        snprintf(section, slen, "%.*s", end ? (int)(end - p - 1) : 0, p + 1);
        return;
    }
    if ((p[0] == ' ' || p[0] == '\t') && out->n > 0) { /* continuation of the last value */
        char *more = trimmed(p, n), *last = out->v[out->n - 1].value;
        size_t a = strlen(last), b = strlen(more);
        last = ddp_realloc(last, a + b + 2);
        last[a] = ' ';
        memcpy(last + a + 1, more, b + 1);
        out->v[out->n - 1].value = last;
        free(more);
        return;
    }
    const char *eq = memchr(p, '=', n);
    if (!eq || out->n == ITEMS_MAX)
        return;
    char *key = trimmed(p, (size_t)(eq - p));
    struct item *it = &out->v[out->n++];
    snprintf(it->name, sizeof it->name, "%s.%s", section, key);
    it->value = trimmed(eq + 1, n - (size_t)(eq + 1 - p));
    it->bad = 0;
    free(key);
}

/* Items of an effective job text, in order. */
static void parse_items(const char *text, struct items *out)
{
    char section[64] = "";
    out->n = 0;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        parse_line(p, n, section, sizeof section, out);
        p += n;
        if (*p)
            p++;
    }
}

static void free_items(struct items *it)
{
    for (int i = 0; i < it->n; i++)
        free(it->v[i].value);
    it->n = 0;
}

/* The same value? model.layers ignores blanks ("conv2d(4, 3)" is "conv2d(4,3)"). */
static int same_value(const char *name, const char *a, const char *b)
{
    if (strcmp(name, "model.layers") != 0)
        return strcmp(a, b) == 0;
    for (;; a++, b++) {
        while (*a == ' ' || *a == '\t')
            a++;
        while (*b == ' ' || *b == '\t')
            b++;
        if (*a != *b)
            return 0;
        if (!*a)
            return 1;
    }
}

static const struct item *find_item(const struct items *it, const char *name)
{
    for (int i = 0; i < it->n; i++)
        if (strcmp(it->v[i].name, name) == 0)
            return &it->v[i];
    return NULL;
}

/* value as shown in a difference: quoted when empty or with blanks, cut when long. */
static void shown(const char *v, char *buf, size_t len)
{
    int quote = !*v || strpbrk(v, " \t,") != NULL;
    size_t n = strlen(v);
    snprintf(buf, len, "%s%.*s%s%s", quote ? "'" : "", (int)(n > VALUE_SHOWN ? VALUE_SHOWN : n), v,
             n > VALUE_SHOWN ? "..." : "", quote ? "'" : "");
}

static void append(char *out, size_t outlen, const char *name, const char *was, const char *now)
{
    char a[VALUE_SHOWN + 8], b[VALUE_SHOWN + 8];
    shown(was, a, sizeof a);
    shown(now, b, sizeof b);
    size_t used = strlen(out);
    if (used < outlen)
        snprintf(out + used, outlen - used, "%s%s %s -> %s", used ? ", " : "", name, a, b);
}

/* The stored items as this ddptrain formats them: set on a default job, written again.
 * Items this ddptrain rejects keep their stored text and are marked bad. */
static void normalise(const struct items *stored, const struct items *current, struct items *out)
{
    struct ddp_job *s = ddp_malloc(sizeof *s);
    ddp_job_defaults(s);
    char err[DDP_ERR_LEN];
    int bad[ITEMS_MAX] = {0};
    for (int i = 0; i < stored->n; i++) {
        const struct item *it = &stored->v[i];
        if (!find_item(current, it->name)) /* a key this ddptrain does not have */
            continue;
        size_t need = strlen(it->name) + strlen(it->value) + 2;
        char *set = ddp_malloc(need);
        snprintf(set, need, "%s=%s", it->name, it->value);
        bad[i] = ddp_job_set(s, set, err, sizeof err) != 0;
        free(set);
    }
    char *text = ddp_outdir_job_text(s);
    parse_items(text, out);
    free(text);
    ddp_job_free(s);
    free(s);
    for (int i = 0; i < stored->n; i++) {
        struct item *o = bad[i] ? (struct item *)find_item(out, stored->v[i].name) : NULL;
        if (o) {
            free(o->value);
            o->value = ddp_strdup(stored->v[i].value);
            o->bad = 1;
        }
    }
}

int ddp_jobdiff(const struct ddp_job *job, int64_t global_batch, const char *stored,
                int64_t stored_global_batch, char *out, size_t outlen)
{
    if (outlen)
        out[0] = '\0';
    if (!ddp_jobdiff_is_effective(stored))
        return -1;
    static struct items cur, old, norm; /* large; rank 0 compares once at setup */
    char *text = ddp_outdir_job_text(job);
    parse_items(text, &cur);
    free(text);
    parse_items(stored, &old);
    normalise(&old, &cur, &norm);
    int differ = 0;
    for (int i = 0; i < cur.n; i++) {
        const struct item *c = &cur.v[i], *o = find_item(&norm, c->name);
        if (may_differ(c->name) || !o || (!o->bad && same_value(c->name, o->value, c->value)))
            continue;
        append(out, outlen, c->name, o->value, c->value);
        differ++;
    }
    if (stored_global_batch > 0 && stored_global_batch != global_batch) {
        char a[32], b[32];
        snprintf(a, sizeof a, "%lld", (long long)stored_global_batch);
        snprintf(b, sizeof b, "%lld", (long long)global_batch);
        append(out, outlen, "global batch (data.batch_size x ranks)", a, b);
        differ++;
    }
    free_items(&cur);
    free_items(&old);
    free_items(&norm);
    return differ;
}

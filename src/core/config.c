/*
 * config.c - the job-file schema and its parser (inih underneath). See config.h.
 *
 * inih is driven through ini_parse_stream with our own line reader, so that every value is
 * known with its line number, lines longer than inih's buffer are reported instead of being
 * cut, and continuation lines (leading blanks) are told apart from a key given twice.
 */
#include "core/config.h"

#include <ini.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "backend/select.h"
#include "comm/comm.h"
#include "core/util.h"
#include "dist/bootstrap.h"
#include "core/recipe.h"
#include "core/suggest.h"

enum key_type { T_INT, T_FLOAT, T_BOOL, T_STR, T_ENUM, T_INT_AUTO };

struct key_def {
    const char *section, *key;
    enum key_type type;
    size_t off, size;            /* field in struct ddp_job; size for strings */
    const char *def;             /* default, as text */
    double min, max;             /* inclusive range for numbers */
    const struct names *choices; /* T_ENUM: the words, stored as the index */
    const char *doc;
};

/* A name table: the words of an enum, in the enum's order. */
struct names {
    const char *const *v;
    int n;
};
#define NAMES(table, count) (&(const struct names){table, count})

static const char *const OPTIM_NAMES[DDP_OPTIM_COUNT] = {"sgd", "adam", "adamw"};
static const char *const SCALING_NAMES[DDP_LR_SCALING_COUNT] = {"none", "linear", "sqrt"};
static const char *const SCHEDULE_NAMES[DDP_SCHEDULE_COUNT] = {"constant", "step", "cosine",
                                                               "multistep", "onecycle"};
static const char *const KEEP_BEST_NAMES[DDP_KEEP_BEST_COUNT] = {"none", "val_acc", "val_loss"};
static const char *const PRECISION_NAMES[DDP_PRECISION_COUNT] = {"fp32", "tf32"};
_Static_assert(sizeof OPTIM_NAMES / sizeof *OPTIM_NAMES == DDP_OPTIM_COUNT, "optim names");
_Static_assert(sizeof SCALING_NAMES / sizeof *SCALING_NAMES == DDP_LR_SCALING_COUNT,
               "lr_scaling names");
_Static_assert(sizeof SCHEDULE_NAMES / sizeof *SCHEDULE_NAMES == DDP_SCHEDULE_COUNT,
               "schedule names");
_Static_assert(sizeof KEEP_BEST_NAMES / sizeof *KEEP_BEST_NAMES == DDP_KEEP_BEST_COUNT,
               "keep_best names");
_Static_assert(sizeof PRECISION_NAMES / sizeof *PRECISION_NAMES == DDP_PRECISION_COUNT,
               "precision names");

#define F(field) offsetof(struct ddp_job, field), sizeof(((struct ddp_job *)0)->field)
#define BIG 9.0e15

static const struct key_def g_keys[] = {
#include "core/config_keys.inc"
};
#define NKEYS ((int)(sizeof g_keys / sizeof g_keys[0]))
_Static_assert(sizeof g_keys / sizeof g_keys[0] <= DDP_JOB_KEYS_MAX, "raise DDP_JOB_KEYS_MAX");

/* A T_ENUM key's words, joined by sep ("a/b/c"). */
static void choices_text(const struct key_def *k, char sep, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < k->choices->n && n < len; i++)
        n +=
            (size_t)snprintf(buf + n, len - n, "%s%s", i ? (char[]){sep, 0} : "", k->choices->v[i]);
}

static int find_key(const char *section, const char *key)
{
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(g_keys[i].section, section) == 0 && strcmp(g_keys[i].key, key) == 0)
            return i;
    return -1;
}

static int section_known(const char *section)
{
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(g_keys[i].section, section) == 0)
            return 1;
    return 0;
}

/* " did you mean [optim]?" for an unknown section, or "". */
static const char *hint_section(const char *section, char *out, size_t len)
{
    const char *cands[NKEYS];
    for (int i = 0; i < NKEYS; i++)
        cands[i] =
            i && !strcmp(g_keys[i].section, g_keys[i - 1].section) ? NULL : g_keys[i].section;
    const char *near = ddp_suggest(section, cands, NKEYS);
    if (near)
        snprintf(out, len, " did you mean [%s]?", near);
    else
        out[0] = '\0';
    return out;
}

/* " did you mean 'epochs'?" (a near key of the section) or " did you mean [optim] lr?" (the
 * key, or a near one, of another section) for an unknown key; or "". */
static const char *hint_key(const char *section, const char *key, char *out, size_t len)
{
    const char *here[NKEYS], *all[NKEYS];
    for (int i = 0; i < NKEYS; i++) {
        here[i] = strcmp(g_keys[i].section, section) == 0 ? g_keys[i].key : NULL;
        all[i] = g_keys[i].key;
    }
    const char *near = ddp_suggest(key, here, NKEYS);
    out[0] = '\0';
    if (near) {
        snprintf(out, len, " did you mean '%s'?", near);
        return out;
    }
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(g_keys[i].key, key) == 0 || g_keys[i].key == ddp_suggest(key, all, NKEYS)) {
            snprintf(out, len, " did you mean [%s] %s?", g_keys[i].section, g_keys[i].key);
            break;
        }
    return out;
}

/* Lowercase copy of s trimmed of blanks, for enum and bool matching. */
static void lower_trim(const char *s, char *out, size_t len)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = 0;
    for (; *s && n + 1 < len; s++)
        out[n++] = (char)((*s >= 'A' && *s <= 'Z') ? *s - 'A' + 'a' : *s);
    while (n > 0 && (out[n - 1] == ' ' || out[n - 1] == '\t'))
        n--;
    out[n] = '\0';
}

/* Convert value for key k into the job. Returns 0, or -1 with the reason (no location). */
static int assign(struct ddp_job *job, const struct key_def *k, const char *value, char *why,
                  size_t whylen)
{
    char *field = (char *)job + k->off;
    char low[256];
    lower_trim(value, low, sizeof low);
    switch (k->type) {
    case T_INT_AUTO:
        if (strcmp(low, "auto") == 0) {
            *(int64_t *)field = 0;
            return 0;
        }
        /* fall through */
    case T_INT: {
        int64_t v;
        if (ddp_parse_i64(value, &v) != 0)
            return ddp_err(why, whylen, "'%s' is not an integer; expected a whole number%s", value,
                           k->type == T_INT_AUTO ? " or auto" : "");
        if ((double)v < k->min || (double)v > k->max)
            return ddp_err(why, whylen, "%lld is out of range; expected %.0f to %.0f", (long long)v,
                           k->min, k->max);
        *(int64_t *)field = v;
        return 0;
    }
    case T_FLOAT: {
        double v;
        if (ddp_parse_f64(value, &v) != 0)
            return ddp_err(why, whylen, "'%s' is not a number; expected e.g. 0.01 or 1e-3", value);
        if (v < k->min || v > k->max)
            return ddp_err(why, whylen, "%g is out of range; expected %g to %g", v, k->min, k->max);
        *(double *)field = v;
        return 0;
    }
    case T_BOOL:
        if (!strcmp(low, "true") || !strcmp(low, "yes") || !strcmp(low, "on") || !strcmp(low, "1"))
            *(int *)field = 1;
        else if (!strcmp(low, "false") || !strcmp(low, "no") || !strcmp(low, "off") ||
                 !strcmp(low, "0"))
            *(int *)field = 0;
        else
            return ddp_err(why, whylen, "'%s' is not a boolean; expected true or false", value);
        return 0;
    case T_ENUM: {
        for (int idx = 0; idx < k->choices->n; idx++)
            if (strcmp(low, k->choices->v[idx]) == 0) {
                *(int *)field = idx;
                return 0;
            }
        char alts[128];
        choices_text(k, '/', alts, sizeof alts);
        return ddp_err(why, whylen, "'%s' is not a choice; expected one of %s", value, alts);
    }
    case T_STR: {
        size_t n = strlen(value);
        if (n >= k->size)
            return ddp_err(why, whylen, "value is %zu characters; at most %zu allowed", n,
                           k->size - 1);
        memcpy(field, value, n + 1);
        return 0;
    }
    }
    return ddp_err(why, whylen, "internal: unknown key type");
}

/* The text of key k's value in job, for job.ini and logs. */
static void format_value(const struct ddp_job *job, const struct key_def *k, char *out, size_t len)
{
    const char *field = (const char *)job + k->off;
    switch (k->type) {
    case T_INT_AUTO:
        if (*(const int64_t *)field == 0) {
            snprintf(out, len, "auto");
            break;
        }
        /* fall through */
    case T_INT:
        snprintf(out, len, "%lld", (long long)*(const int64_t *)field);
        break;
    case T_FLOAT: { /* shortest text that reads back to the same double */
        double v = *(const double *)field;
        for (int prec = 6; prec <= 17; prec++) {
            snprintf(out, len, "%.*g", prec, v);
            if (strtod(out, NULL) == v)
                break;
        }
        break;
    }
    case T_BOOL:
        snprintf(out, len, "%s", *(const int *)field ? "true" : "false");
        break;
    case T_ENUM: {
        int idx = *(const int *)field;
        snprintf(out, len, "%s", idx >= 0 && idx < k->choices->n ? k->choices->v[idx] : "");
        break;
    }
    case T_STR:
        snprintf(out, len, "%s", field);
        break;
    }
}

void ddp_job_defaults(struct ddp_job *job)
{
    memset(job, 0, sizeof *job);
    for (int i = 0; i < NKEYS; i++) {
        char why[DDP_ERR_LEN];
        if (assign(job, &g_keys[i], g_keys[i].def, why, sizeof why) != 0)
            ddp_die("internal: default of [%s] %s: %s", g_keys[i].section, g_keys[i].key, why);
    }
}

/* Parser state shared by the line reader and the inih handler. */
struct parse_state {
    struct ddp_job *job;
    FILE *f;
    int line; /* line number of the line inih is handling */
    int line_too_long;
    int cont; /* the current raw line starts with a blank: a continuation */
    char last_section[64], last_key[64];
    char *err;
    size_t errlen;
    int failed;
};

/* ini_reader: hands inih one line at a time, counting lines; a line that would not fit
 * inih's buffer is flagged (inih would otherwise split it silently). */
static char *read_line(char *str, int num, void *stream)
{
    struct parse_state *ps = stream;
    char buf[8192];
    if (!fgets(buf, sizeof buf, ps->f))
        return NULL;
    ps->line++;
    size_t n = strlen(buf);
    if (n == sizeof buf - 1 && buf[n - 1] != '\n') { /* drain an absurdly long line */
        int c;
        while ((c = fgetc(ps->f)) != EOF && c != '\n')
            ;
    }
    ps->cont = (buf[0] == ' ' || buf[0] == '\t');
    if (n >= (size_t)num - 1 && !(n == (size_t)num - 1 && buf[n - 1] == '\n')) {
        if (!ps->line_too_long)
            ps->line_too_long = ps->line;
        n = (size_t)num - 2;
        buf[n] = '\0';
    }
    memcpy(str, buf, n + 1);
    return str;
}

static int fail_at(struct parse_state *ps, const char *section, const char *key, const char *fmt,
                   const char *why)
{
    if (!ps->failed) {
        ps->failed = 1;
        if (key)
            snprintf(ps->err, ps->errlen, "%s:%d: [%s] %s: %s", ps->job->path, ps->line, section,
                     key, why);
        else
            snprintf(ps->err, ps->errlen, fmt, ps->job->path, ps->line, section, why);
    }
    return 0;
}

static int on_value(void *user, const char *section, const char *name, const char *value)
{
    struct parse_state *ps = user;
    char why[DDP_ERR_LEN];
    if (ps->failed)
        return 0;
    if (section[0] == '\0')
        return fail_at(ps, "", name, NULL,
                       "key outside any section; put it under its [section] header");
    if (!section_known(section)) {
        char hint[96];
        snprintf(why, sizeof why,
                 "unknown section;%s expected one of [job] [data] [model] [optim] [train] "
                 "[checkpoint] [dist]",
                 hint_section(section, hint, sizeof hint));
        return fail_at(ps, section, NULL, "%s:%d: [%s]: %s", why);
    }
    int k = find_key(section, name);
    if (k < 0) {
        char known[512] = "";
        size_t used = 0;
        for (int i = 0; i < NKEYS; i++)
            if (strcmp(g_keys[i].section, section) == 0 && used < sizeof known - 40)
                used += (size_t)snprintf(known + used, sizeof known - used, "%s%s",
                                         used ? ", " : "", g_keys[i].key);
        char hint[160];
        snprintf(why, sizeof why, "unknown key;%s [%s] takes %s",
                 hint_key(section, name, hint, sizeof hint), section, known);
        return fail_at(ps, section, name, NULL, why);
    }
    const struct key_def *kd = &g_keys[k];
    if (ps->cont && strcmp(ps->last_section, section) == 0 && strcmp(ps->last_key, name) == 0) {
        /* continuation line: append to the value so far */
        if (kd->type != T_STR)
            return fail_at(ps, section, name, NULL,
                           "continuation line for a non-text key; write the value on one line");
        char *field = (char *)ps->job + kd->off;
        size_t have = strlen(field), add = strlen(value);
        if (have + 1 + add >= kd->size)
            return fail_at(ps, section, name, NULL, "value too long after continuation lines");
        field[have] = ' ';
        memcpy(field + have + 1, value, add + 1);
        return 1;
    }
    if (ps->job->key_line[k] > 0) {
        snprintf(why, sizeof why, "given twice (first on line %d); keep one", ps->job->key_line[k]);
        return fail_at(ps, section, name, NULL, why);
    }
    if (assign(ps->job, kd, value, why, sizeof why) != 0)
        return fail_at(ps, section, name, NULL, why);
    ps->job->key_line[k] = ps->line;
    snprintf(ps->last_section, sizeof ps->last_section, "%s", section);
    snprintf(ps->last_key, sizeof ps->last_key, "%s", name);
    return 1;
}

#define JOB_FILE_MAX (1 << 20) /* a job file is a page of text; refuse anything absurd */

/* The whole job file, NUL-terminated, into *text (*len bytes) from a descriptor that is known
 * to be a regular file. Fails (-1, err) on a read error or past JOB_FILE_MAX bytes. */
static int read_job_bytes(int fd, const char *path, char **text, size_t *len, char *err,
                          size_t errlen)
{
    size_t cap = 4096, n = 0;
    char *buf = ddp_malloc(cap);
    for (;;) {
        if (n + 1 == cap)
            buf = ddp_realloc(buf, cap *= 2);
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            return ddp_err(err, errlen, "%s: cannot read job file: %s", path, strerror(e));
        }
        if (got == 0)
            break;
        n += (size_t)got;
        if (n > JOB_FILE_MAX) {
            free(buf);
            return ddp_err(err, errlen,
                           "%s: larger than %d bytes; is this a job file? give "
                           "an INI file (docs/job-file.md)",
                           path, JOB_FILE_MAX);
        }
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return 0;
}

/* A job file is text: a NUL byte (which would silently cut the line) or a control character
 * other than tab and CR is an error naming line and column. */
static int check_job_bytes(const char *text, size_t len, const char *path, char *err, size_t errlen)
{
    int line = 1, col = 1;
    for (size_t i = 0; i < len; i++, col++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n') {
            line++;
            col = 0;
            continue;
        }
        if (c >= 0x20 && c != 0x7f)
            continue;
        if (c == '\t' || c == '\r')
            continue;
        return ddp_err(err, errlen,
                       "%s:%d: %s byte 0x%02x at column %d; a job file is plain "
                       "text, remove it (is this a binary file?)",
                       path, line, c == 0 ? "NUL" : "control", c, col);
    }
    return 0;
}

int ddp_job_load(struct ddp_job *job, const char *path, char *err, size_t errlen)
{
    snprintf(job->path, sizeof job->path, "%s", path);
    const char *kind = NULL;
    int fd = ddp_open_regular(path, &kind);
    if (fd < 0 && kind && strcmp(kind, "file") != 0)
        return ddp_err(err, errlen,
                       "%s: is a %s, not a job file; give the path of an INI file "
                       "(docs/job-file.md)",
                       path, kind);
    if (fd < 0)
        return ddp_err(err, errlen, "%s: cannot open job file: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0;
    int rc = read_job_bytes(fd, path, &text, &len, err, errlen);
    close(fd);
    if (rc != 0)
        return -1;
    if (check_job_bytes(text, len, path, err, errlen) != 0) {
        free(text);
        return -1;
    }
    free(job->text);
    job->text = text; /* the bytes that are parsed, kept for checkpoints */
    if (len == 0)
        return 0;                       /* an empty job file: every default */
    FILE *f = fmemopen(text, len, "r"); /* inih reads lines from a stream */
    if (!f)
        return ddp_err(err, errlen, "%s: cannot read job file: %s", path, strerror(errno));
    struct parse_state ps = {.job = job, .f = f, .err = err, .errlen = errlen};
    rc = ini_parse_stream(read_line, &ps, on_value, &ps);
    fclose(f);
    if (ps.line_too_long && (!ps.failed || ps.line_too_long <= ps.line))
        return ddp_err(err, errlen,
                       "%s:%d: line longer than %d characters; continue a long value on "
                       "the next line, indented",
                       path, ps.line_too_long, 198);
    if (ps.failed)
        return -1;
    if (rc > 0)
        return ddp_err(err, errlen,
                       "%s:%d: not INI syntax; expected [section], key = value, or ; comment", path,
                       rc);
    if (rc < 0)
        return ddp_err(err, errlen, "%s: cannot read job file", path);
    return 0;
}

int ddp_job_set(struct ddp_job *job, const char *assignment, char *err, size_t errlen)
{
    char buf[DDP_LAYERS_MAX + 128];
    if (strlen(assignment) >= sizeof buf)
        return ddp_err(err, errlen, "--set %.40s...: too long", assignment);
    snprintf(buf, sizeof buf, "%s", assignment);
    char *eq = strchr(buf, '=');
    char *dot = strchr(buf, '.');
    if (!eq || !dot || dot > eq)
        return ddp_err(err, errlen, "--set %s: expected SECTION.KEY=VALUE, e.g. train.epochs=2",
                       assignment);
    *eq = '\0';
    *dot = '\0';
    char section[64], key[64];
    lower_trim(buf, section, sizeof section);
    lower_trim(dot + 1, key, sizeof key);
    const char *value = eq + 1;
    while (*value == ' ')
        value++;
    int k = find_key(section, key);
    if (k < 0) {
        char hint[160];
        if (section_known(section))
            hint_key(section, key, hint, sizeof hint);
        else
            hint_section(section, hint, sizeof hint);
        return ddp_err(err, errlen, "--set %s.%s: unknown %s;%s see docs/job-file.md", section, key,
                       section_known(section) ? "key" : "section", hint);
    }
    char why[DDP_ERR_LEN];
    if (assign(job, &g_keys[k], value, why, sizeof why) != 0)
        return ddp_err(err, errlen, "--set %s.%s: %s", section, key, why);
    job->key_line[k] = -1;
    return 0;
}

const char *ddp_job_where(const struct ddp_job *job, const char *section, const char *key,
                          char *buf, size_t len)
{
    int k = find_key(section, key);
    int line = k >= 0 ? job->key_line[k] : 0;
    if (line > 0)
        snprintf(buf, len, "%s:%d: [%s] %s", job->path, line, section, key);
    else if (line < 0)
        snprintf(buf, len, "--set %s.%s", section, key);
    else if (job->path[0])
        snprintf(buf, len, "%s: [%s] %s (default)", job->path, section, key);
    else
        snprintf(buf, len, "[%s] %s (default)", section, key);
    return buf;
}

int ddp_job_validate(struct ddp_job *job, char *err, size_t errlen)
{
    char where[DDP_PATH_MAX + 64];
    if (job->nesterov && job->momentum <= 0)
        return ddp_err(err, errlen,
                       "%s: Nesterov momentum needs momentum > 0; set [optim] "
                       "momentum or nesterov = false",
                       ddp_job_where(job, "optim", "nesterov", where, sizeof where));
    if (job->optim != DDP_OPTIM_SGD && job->momentum != 0)
        return ddp_err(err, errlen,
                       "%s: momentum applies to sgd only; for adam/adamw use "
                       "beta1",
                       ddp_job_where(job, "optim", "momentum", where, sizeof where));
    if (job->output[0] == '\0')
        return ddp_err(err, errlen, "%s: empty; expected a directory for the run's files",
                       ddp_job_where(job, "job", "output", where, sizeof where));
    if (job->data_file[0] == '\0')
        return ddp_err(err, errlen, "%s: empty; expected an HDF5 dataset path",
                       ddp_job_where(job, "data", "file", where, sizeof where));
    if (job->data_train[0] == '\0')
        return ddp_err(err, errlen, "%s: empty; expected a group such as /train",
                       ddp_job_where(job, "data", "train", where, sizeof where));
    return ddp_recipe_parse(job, err, errlen);
}

void ddp_job_write(const struct ddp_job *job, FILE *f)
{
    const char *section = "";
    fprintf(f, "; effective job: %s with defaults and --set overrides applied\n",
            job->path[0] ? job->path : "(defaults)");
    for (int i = 0; i < NKEYS; i++) {
        const struct key_def *k = &g_keys[i];
        if (strcmp(section, k->section) != 0) {
            section = k->section;
            fprintf(f, "%s[%s]\n", i ? "\n" : "", section);
        }
        char v[DDP_LAYERS_MAX];
        format_value(job, k, v, sizeof v);
        /* Values longer than inih's line buffer are folded into continuation lines. */
        size_t n = strlen(v), col = strlen(k->key) + 3;
        fprintf(f, "%s = ", k->key);
        const char *p = v;
        while (n > 0) {
            size_t take = n;
            if (col + take > 150) {
                take = 150 - col;
                while (take > 1 && p[take] != ' ')
                    take--;
            }
            fprintf(f, "%.*s\n", (int)take, p);
            p += take;
            n -= take;
            while (n > 0 && *p == ' ') {
                p++;
                n--;
            }
            if (n > 0)
                fprintf(f, "    ");
            col = 4;
        }
        if (v[0] == '\0')
            fprintf(f, "\n");
    }
}

void ddp_job_log_lines(const struct ddp_job *job, void (*emit)(const char *line))
{
    char line[DDP_LAYERS_MAX + 1024];
    size_t used = 0;
    for (int i = 0; i < NKEYS; i++) {
        const struct key_def *k = &g_keys[i];
        if (i == 0 || strcmp(g_keys[i - 1].section, k->section) != 0)
            used = (size_t)snprintf(line, sizeof line, "  [%s]", k->section);
        char v[DDP_LAYERS_MAX];
        format_value(job, k, v, sizeof v);
        if (used < sizeof line)
            used += (size_t)snprintf(line + used, sizeof line - used, " %s=%s", k->key, v);
        if (i == NKEYS - 1 || strcmp(g_keys[i + 1].section, k->section) != 0)
            emit(line);
    }
}

void ddp_job_write_reference(FILE *f)
{
    const char *section = "";
    fprintf(f, "# Job file reference\n\n"
               "Generated by `ddptrain --job-reference` from the schema in src/core/config.c.\n"
               "Every key may also be given on the command line as `--set SECTION.KEY=VALUE`.\n"
               "Unknown sections or keys, values of the wrong type or out of range, and a key\n"
               "given twice are errors that name the file, line and key (exit 2). A long value\n"
               "continues on the next line when that line starts with blanks.\n\n"
               "A job file is a regular file of plain text, at most 1 MiB: a directory, FIFO or\n"
               "device is refused without being read (exit 2), and so is a NUL byte or another\n"
               "control character (tab and CR aside), named by line and column. Messages that\n"
               "quote the file show control characters as `\\xNN`.\n");
    for (int i = 0; i < NKEYS; i++) {
        const struct key_def *k = &g_keys[i];
        if (strcmp(section, k->section) != 0) {
            section = k->section;
            fprintf(f,
                    "\n## [%s]\n\n| key | type | default | range | meaning |\n"
                    "|---|---|---|---|---|\n",
                    section);
        }
        char range[96] = "";
        static const char *tn[] = {"integer", "number", "boolean", "text", "choice", "integer"};
        if (k->type == T_INT || k->type == T_INT_AUTO || k->type == T_FLOAT)
            snprintf(range, sizeof range, "%g to %g%s", k->min, k->max,
                     k->type == T_INT_AUTO ? ", or auto" : "");
        else if (k->type == T_ENUM)
            choices_text(k, '/', range, sizeof range);
        fprintf(f, "| `%s` | %s | `%s` | %s | %s |\n", k->key, tn[k->type], k->def, range, k->doc);
    }
}

void ddp_job_free(struct ddp_job *job)
{
    if (job)
        DDP_FREE(job->text);
}

/*
 * config.c - the job-file schema; core/ini.h reads the file (line numbers, long lines,
 * continuation lines, duplicate and unknown keys, typed values). See config.h.
 */
#include "job/config.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "backend/select.h"
#include "comm/comm.h"
#include "core/ini.h"
#include "core/util.h"
#include "dist/bootstrap.h"

enum key_type {
    T_INT = DDP_INI_INT,
    T_FLOAT = DDP_INI_FLOAT,
    T_BOOL = DDP_INI_BOOL,
    T_STR = DDP_INI_STR,
    T_ENUM = DDP_INI_ENUM,
    T_INT_AUTO = DDP_INI_INT_AUTO
};

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
static const char *const PRECISION_NAMES[DDP_PRECISION_COUNT] = {"fp32", "tf32", "bf16"};
static const char *const CUDA_GRAPH_NAMES[DDP_CUDA_GRAPH_COUNT] = {"auto", "on", "off"};
_Static_assert(sizeof CUDA_GRAPH_NAMES / sizeof *CUDA_GRAPH_NAMES == DDP_CUDA_GRAPH_COUNT,
               "cuda_graph names");
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
#include "job/config_keys.inc"
};
#define NKEYS ((int)(sizeof g_keys / sizeof g_keys[0]))
_Static_assert(sizeof g_keys / sizeof g_keys[0] <= DDP_JOB_KEYS_MAX, "raise DDP_JOB_KEYS_MAX");

/* The schema as core/ini.h reads it: the rows of g_keys, in their order. */
static const struct ddp_ini_schema *job_schema(void)
{
    static struct ddp_ini_key keys[NKEYS];
    static struct ddp_ini_schema schema;
    if (!schema.keys) {
        for (int i = 0; i < NKEYS; i++) {
            const struct key_def *k = &g_keys[i];
            keys[i] = (struct ddp_ini_key){k->section,
                                           k->key,
                                           (enum ddp_ini_type)k->type,
                                           k->off,
                                           k->size,
                                           k->min,
                                           k->max,
                                           k->choices ? k->choices->v : NULL,
                                           k->choices ? k->choices->n : 0};
        }
        schema = (struct ddp_ini_schema){keys, NKEYS, "job file", "docs/job-file.md", 1};
    }
    return &schema;
}

static int find_key(const char *section, const char *key)
{
    return ddp_ini_find(job_schema(), section, key);
}

/* Convert value for key k into the job. Returns 0, or -1 with the reason (no location). */
static int assign(struct ddp_job *job, const struct key_def *k, const char *value, char *why,
                  size_t whylen)
{
    return ddp_ini_assign(&job_schema()->keys[k - g_keys], job, value, why, whylen);
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

int ddp_job_load(struct ddp_job *job, const char *path, char *err, size_t errlen)
{
    snprintf(job->path, sizeof job->path, "%s", path);
    char *text = NULL;
    int rc = ddp_ini_load_pieces(job_schema(), path, job, job->key_line, &text,
                                 find_key("model", "layers"), &job->layers_at, err, errlen);
    if (text) {
        free(job->text);
        job->text = text; /* the bytes that were parsed, kept for checkpoints */
    }
    return rc;
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
    ddp_ini_lower_trim(buf, section, sizeof section);
    ddp_ini_lower_trim(dot + 1, key, sizeof key);
    const char *value = eq + 1;
    while (*value == ' ')
        value++;
    int k = find_key(section, key);
    if (k < 0) {
        char hint[160];
        const int known = ddp_ini_section_known(job_schema(), section);
        if (known)
            ddp_ini_hint_key(job_schema(), section, key, hint, sizeof hint);
        else
            ddp_ini_hint_section(job_schema(), section, hint, sizeof hint);
        return ddp_err(err, errlen, "--set %s.%s: unknown %s;%s see docs/job-file.md", section, key,
                       known ? "key" : "section", hint);
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

const char *ddp_job_where_layers(const struct ddp_job *job, int off, char *buf, size_t len)
{
    int k = find_key("model", "layers"), line, col;
    if (off >= 0 && job->key_line[k] > 0 &&
        ddp_ini_locate(&job->layers_at, (size_t)off, &line, &col) == 0) {
        snprintf(buf, len, "%s:%d:%d: [model] layers", job->path, line, col);
        return buf;
    }
    return ddp_job_where(job, "model", "layers", buf, len);
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
               "Generated by `ddptrain --job-reference` from the schema in src/job/config.c.\n"
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
            ddp_ini_choices_text(&job_schema()->keys[i], '/', range, sizeof range);
        fprintf(f, "| `%s` | %s | `%s` | %s | %s |\n", k->key, tn[k->type], k->def, range, k->doc);
    }
}

void ddp_job_free(struct ddp_job *job)
{
    if (job)
        DDP_FREE(job->text);
}

const char *ddp_job_precision_name(int precision)
{
    return precision >= 0 && precision < DDP_PRECISION_COUNT ? PRECISION_NAMES[precision] : "?";
}

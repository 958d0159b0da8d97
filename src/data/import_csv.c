/*
 * import_csv.c - `ddptrain data csv` (import.h): a CSV of numeric features and one integer
 * label column into (N, D) float32 samples. Two passes over the file, so it may exceed
 * memory: the first checks every cell and keeps the labels, the second parses the features
 * piece by piece for the writer. Cells are separated by commas, may be double-quoted
 * ("" for a quote; no line breaks inside), blanks around a cell are ignored, and blank lines
 * are skipped.
 *
 * Legend: N samples (data lines), D features (columns less the label column).
 */
#include "data/import.h"

#include "core/util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A line longer than this is no table of features a model trains on (and bounds a file
 * without line breaks). */
#define CSV_MAX_LINE ((size_t)64 << 20)

typedef struct {
    const char *path;
    FILE *f;
    char *line;
    size_t cap;
    int64_t lineno;
    char **cell;
    int ncell, cellcap;
    int header;       /* the file's first line is a header */
    int ncols, label; /* columns per line; index of the label column */
    int32_t *labels;
    int64_t n, lcap;
} csv_file;

/* Trim blanks around s (in place). */
static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

/* Split c->line into c->cell; -1 on an unterminated quote. */
static int split_line(csv_file *c)
{
    char *p = c->line;
    c->ncell = 0;
    for (;;) {
        if (c->ncell == c->cellcap) {
            c->cellcap = c->cellcap ? 2 * c->cellcap : 64;
            c->cell = ddp_realloc(c->cell, (size_t)c->cellcap * sizeof *c->cell);
        }
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '"') {
            char *o = ++p, *start = p;
            for (;; p++) {
                if (!*p)
                    return -1;
                if (*p == '"' && p[1] == '"')
                    *o++ = *p++;
                else if (*p == '"')
                    break;
                else
                    *o++ = *p;
            }
            *o = '\0';
            c->cell[c->ncell++] = start;
            p = p + 1 + strspn(p + 1, " \t");
            if (*p != ',' && *p)
                return -1;
        } else {
            char *e = p + strcspn(p, ",");
            c->cell[c->ncell++] = p;
            p = e;
        }
        if (!*p) {
            for (int i = 0; i < c->ncell; i++)
                c->cell[i] = trim(c->cell[i]);
            return 0;
        }
        *p++ = '\0';
    }
}

/* Next non-blank line, split: 1, 0 at the end of the file, -1 with err. */
static int next_line(csv_file *c, char *err, size_t errlen)
{
    for (;;) {
        errno = 0;
        ssize_t n = getline(&c->line, &c->cap, c->f);
        if (n < 0)
            return errno ? ddp_err(err, errlen, "%s: read error: %s", c->path, strerror(errno)) : 0;
        c->lineno++;
        if ((size_t)n > CSV_MAX_LINE)
            return ddp_err(err, errlen,
                           "%s:%lld: line of %zd bytes, above %zu; is this a CSV "
                           "file?",
                           c->path, (long long)c->lineno, n, CSV_MAX_LINE);
        if (memchr(c->line, '\0', (size_t)n))
            return ddp_err(err, errlen, "%s:%lld: holds a NUL byte; expected a text CSV file",
                           c->path, (long long)c->lineno);
        while (n && (c->line[n - 1] == '\n' || c->line[n - 1] == '\r'))
            c->line[--n] = '\0';
        if (c->line[strspn(c->line, " \t")] == '\0')
            continue;
        if (split_line(c) != 0)
            return ddp_err(err, errlen,
                           "%s:%lld: unterminated or misplaced double quote; "
                           "quote whole cells (\"a\"), with \"\" for a quote",
                           c->path, (long long)c->lineno);
        return 1;
    }
}

/* A float32 cell: 0, or -1 when not a finite number. */
static int cell_float(const char *s, float *v)
{
    char *end;
    errno = 0;
    *v = strtof(s, &end);
    return (*s && !*end && isfinite(*v) && errno != ERANGE) ? 0 : -1;
}

/* First line: header or data; resolve the label column; returns 1 when line 1 is data. */
static int first_line(csv_file *c, const char *column, const csv_file *like, char *err,
                      size_t errlen)
{
    int r = next_line(c, err, errlen);
    if (r <= 0)
        return r < 0 ? -1
                     : ddp_err(err, errlen,
                               "%s: holds no lines; expected a CSV of "
                               "features and a label column",
                               c->path);
    float v;
    c->ncols = c->ncell;
    c->header = 0;
    for (int i = 0; i < c->ncell; i++)
        c->header |= cell_float(c->cell[i], &v) != 0;
    c->label = -1;
    for (int i = 0; c->header && i < c->ncell; i++)
        if (!strcmp(c->cell[i], column))
            c->label = i;
    int64_t idx;
    if (c->label < 0 && ddp_parse_i64(column, &idx) == 0 && idx >= 0 && idx < c->ncols)
        c->label = (int)idx;
    if (c->label < 0)
        return ddp_err(err, errlen,
                       "%s:%lld: no column `%s` among %d (%s); give a header "
                       "name or a 0-based index",
                       c->path, (long long)c->lineno, column, c->ncols,
                       c->header ? "header found" : "no header: all numeric");
    if (c->ncols < 2)
        return ddp_err(err, errlen, "%s:%lld: one column; expected features and a label", c->path,
                       (long long)c->lineno);
    if (like && c->ncols != like->ncols)
        return ddp_err(err, errlen,
                       "%s:%lld: %d columns, but %s has %d; train and test must "
                       "have the same columns",
                       c->path, (long long)c->lineno, c->ncols, like->path, like->ncols);
    return c->header ? 0 : 1;
}

/* Check the current (data) line and keep its label. */
static int check_row(csv_file *c, char *err, size_t errlen)
{
    if (c->ncell != c->ncols)
        return ddp_err(err, errlen, "%s:%lld: %d cells, expected %d like line %s; fix the line",
                       c->path, (long long)c->lineno, c->ncell, c->ncols, c->header ? "2" : "1");
    for (int i = 0; i < c->ncell; i++) {
        float v;
        int64_t l;
        if (i == c->label) {
            if (ddp_parse_i64(c->cell[i], &l) != 0 || l < 0 || l >= DDP_H5_MAX_CLASSES)
                return ddp_err(err, errlen,
                               "%s:%lld: label `%s` (column %d) is not an integer "
                               "in [0, %d); map class names to numbers first",
                               c->path, (long long)c->lineno, c->cell[i], i, DDP_H5_MAX_CLASSES);
            if (c->n == c->lcap) {
                c->lcap = c->lcap ? 2 * c->lcap : 4096;
                c->labels = ddp_realloc(c->labels, (size_t)c->lcap * sizeof *c->labels);
            }
            c->labels[c->n] = (int32_t)l;
        } else if (cell_float(c->cell[i], &v) != 0) {
            return ddp_err(err, errlen,
                           "%s:%lld: column %d `%s` is not a finite number; "
                           "features must be numeric, fix the cell or drop the column",
                           c->path, (long long)c->lineno, i, c->cell[i]);
        }
    }
    if (++c->n > DDP_H5_MAX_SAMPLES)
        return ddp_err(err, errlen, "%s:%lld: more than %lld samples", c->path,
                       (long long)c->lineno, (long long)DDP_H5_MAX_SAMPLES);
    return 0;
}

/* Pass 1 over the whole file; leaves it rewound past the header for pass 2. */
static int scan(csv_file *c, const char *column, const csv_file *like, char *err, size_t errlen)
{
    const char *kind = NULL;
    int fd = ddp_open_regular(c->path, &kind);
    if (fd < 0 || !(c->f = fdopen(fd, "r")))
        return ddp_err(err, errlen, "%s: cannot open: %s; give a regular file", c->path,
                       kind ? kind : strerror(errno));
    int r = first_line(c, column, like, err, errlen);
    if (r < 0 || (r == 1 && check_row(c, err, errlen) != 0))
        return -1;
    while ((r = next_line(c, err, errlen)) == 1)
        if (check_row(c, err, errlen) != 0)
            return -1;
    if (r < 0)
        return -1;
    if (c->n == 0)
        return ddp_err(err, errlen, "%s: a header but no data lines", c->path);
    rewind(c->f);
    c->lineno = 0;
    return c->header ? next_line(c, err, errlen) == 1 ? 0 : -1 : 0;
}

/* ddp_import_rows_fn: the next n data lines' features. */
static int read_rows(void *ctx, void *buf, int64_t n, char *err, size_t errlen)
{
    csv_file *c = ctx;
    float *x = buf;
    for (int64_t k = 0; k < n; k++) {
        if (next_line(c, err, errlen) != 1 || c->ncell != c->ncols)
            return ddp_err(err, errlen, "%s:%lld: the file changed while it was imported", c->path,
                           (long long)c->lineno);
        for (int i = 0; i < c->ncell; i++)
            if (i != c->label && cell_float(c->cell[i], x++) != 0)
                return ddp_err(err, errlen, "%s:%lld: the file changed while it was imported",
                               c->path, (long long)c->lineno);
    }
    return 0;
}

/* Open c->path again for a second reading of its data lines, as `like` found them. */
static int reopen(csv_file *c, const csv_file *like, char *err, size_t errlen)
{
    c->path = like->path;
    c->header = like->header;
    c->ncols = like->ncols;
    c->label = like->label;
    const char *kind = NULL;
    int fd = ddp_open_regular(c->path, &kind);
    if (fd < 0 || !(c->f = fdopen(fd, "r")))
        return ddp_err(err, errlen, "%s: cannot open: %s; give a regular file", c->path,
                       kind ? kind : strerror(errno));
    return c->header && next_line(c, err, errlen) != 1 ? -1 : 0;
}

int ddp_import_csv(const char *train, const char *test, const char *label_column,
                   const ddp_import_opts *o, ddp_import_summary *sum, char *err, size_t errlen)
{
    csv_file c[2];
    ddp_import_split s[2];
    static const char *const group[2] = {"/train", "/test"};
    const int nsplits = test ? 2 : 1;
    int rc = -1;
    memset(c, 0, sizeof c);
    memset(s, 0, sizeof s);
    c[0].path = train;
    c[1].path = test;
    for (int k = 0; k < nsplits; k++) {
        if (scan(&c[k], label_column, k ? &c[0] : NULL, err, errlen) != 0)
            goto out;
        s[k] = (ddp_import_split){.group = group[k],
                                  .images_name = c[k].path,
                                  .labels_name = c[k].path,
                                  .n = c[k].n,
                                  .rank = 1,
                                  .dims = {c[k].ncols - 1, 0, 0},
                                  .dtype = DDP_H5DTYPE_FLOAT32,
                                  .labels = c[k].labels,
                                  .read = read_rows,
                                  .ctx = &c[k]};
    }
    if (o->test_fraction > 0)
        rc = reopen(&c[1], &c[0], err, errlen) != 0
                 ? -1
                 : ddp_import_write_held_out(o, &s[0], read_rows, &c[1], sum, err, errlen);
    else
        rc = ddp_import_write(o, s, nsplits, sum, err, errlen);
out:
    for (int k = 0; k < 2; k++) {
        if (c[k].f)
            fclose(c[k].f);
        free(c[k].line);
        free(c[k].cell);
        free(c[k].labels);
    }
    return rc;
}

/*
 * report.c - report.html from run directories (see report.h): reading metrics.jsonl, the
 * charts as inline SVG, the tables. The validate node table is in report_validate.c.
 */
#include "report/report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "job/config.h"
#include "nn/weights.h"
#include "report/html.h"
#include "report/json.h"
#include "core/util.h"

#define LINE_MAX_BYTES (1 << 20) /* one metrics line; ddptrain writes < 8 KiB */
#define JOB_MAX_BYTES (1 << 20)  /* job.ini shown in the page */
/* all of metrics.jsonl: a train record is < 1 KiB, one per log_every steps, so 256 MiB is
 * some 25 million steps at the default log_every; more would not fit in memory as parsed */
#define METRICS_MAX_BYTES (256 << 20)
#define RUNS_MAX 64 /* directories overlaid in one page */

struct run {
    const char *dir;
    struct ddp_json **rec; /* (n) metrics.jsonl lines, in file order */
    int n;
    char *job; /* job.ini, or NULL */
};

/* ---- reading -------------------------------------------------------------------------- */

/* path opened for reading when it is a regular file; NULL otherwise, with *kind naming what
 * it is ("FIFO", "directory", ...): a FIFO would block for good and /dev/zero never ends. */
static FILE *open_regular(const char *path, const char **kind)
{
    int fd = ddp_open_regular(path, kind);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (fd >= 0 && !f)
        close(fd);
    return f;
}

/* The whole of path (at most max bytes) as a string; NULL when it cannot be read. */
static char *slurp(const char *path, size_t max)
{
    FILE *f = open_regular(path, NULL);
    if (!f)
        return NULL;
    char *buf = ddp_malloc(max + 1);
    size_t n = fread(buf, 1, max, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* One line of f into buf (cap bytes), newline kept, NUL-terminated. Returns its length in
 * bytes, 0 at the end of the file, -1 when it does not fit (the rest of the line unread).
 * *nul gets the offset of its first NUL byte, or -1: the parser would stop there. */
static long read_line(FILE *f, char *buf, size_t cap, long *nul)
{
    size_t n = 0;
    int c = 0;
    *nul = -1;
    while (c != '\n' && (c = getc(f)) != EOF) {
        if (n + 1 >= cap)
            return -1;
        if (c == '\0' && *nul < 0)
            *nul = (long)n;
        buf[n++] = (char)c;
    }
    buf[n] = '\0';
    return (long)n;
}

/* One metrics line as a record into r; 1 when it is not one but may be skipped (a torn last
 * line of a killed run, or the zeros a crash can leave at the end of an appended file). */
static int add_record(struct run *r, int *cap, const char *line, long len, long nul,
                      const char *path, int lineno, char *err, size_t errlen)
{
    if (strspn(line, " \t\r\n") == (size_t)len)
        return 0;
    char why[160] = "";
    struct ddp_json *v = nul < 0 ? ddp_json_parse(line, why, sizeof why) : NULL;
    if (!v || v->type != DDP_JSON_OBJ) {
        ddp_json_free(v);
        if (line[len - 1] != '\n') /* only the last line can lack one */
            return 1;
        if (nul >= 0)
            return ddp_err(err, errlen, "%s:%d: NUL byte at column %ld; not a metrics record", path,
                           lineno, nul + 1);
        return ddp_err(err, errlen, "%s:%d: not a metrics record: %s", path, lineno,
                       v ? "not an object" : why);
    }
    if (r->n == *cap)
        r->rec = ddp_realloc(r->rec, sizeof *r->rec * (size_t)(*cap = *cap ? *cap * 2 : 256));
    r->rec[r->n++] = v;
    return 0;
}

static int load_run(struct run *r, const char *dir, char *err, size_t errlen)
{
    char path[DDP_PATH_MAX + 32];
    memset(r, 0, sizeof *r);
    r->dir = dir;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    const char *kind = "file";
    FILE *f = open_regular(path, &kind);
    if (!f && strcmp(kind, "file") != 0)
        return ddp_err(err, errlen,
                       "%s: is a %s, not a metrics file; give a run directory (its [job] output)",
                       path, kind);
    if (!f)
        return ddp_err(err, errlen,
                       "%s: cannot read: %s; give a run directory (its [job] "
                       "output)",
                       path, strerror(errno));
    char *line = ddp_malloc(LINE_MAX_BYTES);
    int cap = 0, lineno = 0, rc = 0;
    long len, nul;
    size_t total = 0;
    while (!rc && (len = read_line(f, line, LINE_MAX_BYTES, &nul)) != 0) {
        lineno++;
        if (len < 0)
            rc = ddp_err(err, errlen, "%s:%d: line longer than %d MiB; not a metrics record", path,
                         lineno, LINE_MAX_BYTES >> 20);
        else if ((total += (size_t)len) > METRICS_MAX_BYTES)
            rc = ddp_err(err, errlen, "%s: larger than %d MiB; not the metrics of one run", path,
                         METRICS_MAX_BYTES >> 20);
        else
            rc = add_record(r, &cap, line, len, nul, path, lineno, err, errlen) < 0;
    }
    rc = rc ? -1 : 0;
    fclose(f);
    free(line);
    snprintf(path, sizeof path, "%s/job.ini", dir);
    r->job = slurp(path, JOB_MAX_BYTES);
    return rc;
}

static void free_run(struct run *r)
{
    for (int i = 0; i < r->n; i++)
        ddp_json_free(r->rec[i]);
    free(r->rec);
    free(r->job);
}

static int is_kind(const struct ddp_json *v, const char *kind)
{
    return strcmp(ddp_json_text(v, "kind", ""), kind) == 0;
}

/* ---- charts --------------------------------------------------------------------------- */

struct series_def {
    const char *kind, *field, *label;
};
struct chart_def {
    const char *title;
    struct series_def s[3];
};

static const struct chart_def g_charts[] = {
    {"loss",
     {{"train", "loss", "train"}, {"eval", "test_loss", "test"}, {"val", "val_loss", "val"}}},
    {"accuracy",
     {{"train", "acc", "train"}, {"eval", "test_acc", "test"}, {"val", "val_acc", "val"}}},
    {"learning rate", {{"train", "lr", "lr"}, {NULL, NULL, NULL}}},
    {"samples/s (all ranks)", {{"train", "samples_per_s", "samples/s"}, {NULL, NULL, NULL}}},
    {"all-reduce share of the step time",
     {{"train", "allreduce_frac", "all-reduce share"}, {NULL, NULL, NULL}}},
    {"all-reduce bus bandwidth (GB/s)", {{"train", "busbw_gbs", "busbw"}, {NULL, NULL, NULL}}},
    {"compute time per step, fastest and slowest rank (s)",
     {{"train", "step_s_min", "fastest rank"}, {"train", "step_s_max", "slowest rank"}}},
};

static const char *const g_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                       "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

struct frame {
    double x0, x1, y0, y1;           /* data */
    double left, right, top, bottom; /* pixels */
};

static double px(const struct frame *fr, double x)
{
    return fr->left + (x - fr->x0) / (fr->x1 - fr->x0) * (fr->right - fr->left);
}
static double py(const struct frame *fr, double y)
{
    return fr->bottom - (y - fr->y0) / (fr->y1 - fr->y0) * (fr->bottom - fr->top);
}

/* The data range of a chart over every run; 0 when it has no point at all. */
static int chart_range(const struct chart_def *c, const struct run *runs, int nruns,
                       struct frame *fr)
{
    int any = 0;
    fr->x0 = fr->y0 = INFINITY;
    fr->x1 = fr->y1 = -INFINITY;
    for (int r = 0; r < nruns; r++)
        for (int i = 0; i < runs[r].n; i++)
            for (int s = 0; s < 3 && c->s[s].kind; s++) {
                const struct ddp_json *v = runs[r].rec[i];
                double x = ddp_json_num(v, "step"), y = ddp_json_num(v, c->s[s].field);
                if (!is_kind(v, c->s[s].kind) || !isfinite(x) || !isfinite(y))
                    continue;
                any = 1;
                fr->x0 = fmin(fr->x0, x);
                fr->x1 = fmax(fr->x1, x);
                fr->y0 = fmin(fr->y0, y);
                fr->y1 = fmax(fr->y1, y);
            }
    if (!any)
        return 0;
    if (fr->x1 <= fr->x0)
        fr->x1 = fr->x0 + 1;
    double pad = (fr->y1 - fr->y0) * 0.05;
    if (pad <= 0)
        pad = fabs(fr->y0) > 0 ? fabs(fr->y0) * 0.05 : 1;
    fr->y0 -= pad;
    fr->y1 += pad;
    return 1;
}

/* Axes with five ticks each, labelled. */
static void axes(FILE *f, const struct frame *fr)
{
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" class=\"plot\"/>\n",
            fr->left, fr->top, fr->right - fr->left, fr->bottom - fr->top);
    for (int i = 0; i <= 4; i++) {
        double x = fr->x0 + (fr->x1 - fr->x0) * i / 4, y = fr->y0 + (fr->y1 - fr->y0) * i / 4;
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" class=\"grid\"/>"
                "<text x=\"%.1f\" y=\"%.0f\" class=\"xt\">%.0f</text>\n",
                px(fr, x), fr->top, px(fr, x), fr->bottom, px(fr, x), fr->bottom + 14, x);
        fprintf(f,
                "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" class=\"grid\"/>"
                "<text x=\"%.0f\" y=\"%.1f\" class=\"yt\">%.4g</text>\n",
                fr->left, py(fr, y), fr->right, py(fr, y), fr->left - 4, py(fr, y) + 4, y);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" class=\"xl\">step</text>\n", (fr->left + fr->right) / 2,
            fr->bottom + 30);
}

/* A vertical marker at step x with a label (epoch boundaries, resumes, preemptions). */
static void marker(FILE *f, const struct frame *fr, double x, const char *cls, const char *label,
                   int row)
{
    if (x < fr->x0 || x > fr->x1)
        return;
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" class=\"%s\"/>"
            "<text x=\"%.1f\" y=\"%.0f\" class=\"ml %s\">%s</text>\n",
            px(fr, x), fr->top, px(fr, x), fr->bottom, cls, px(fr, x) + 2, fr->top + 10 + 10 * row,
            cls, label);
}

/* Epoch boundaries (of run 0), resumes and preemptions (of every run). */
static void markers(FILE *f, const struct frame *fr, const struct run *runs, int nruns)
{
    double last_epoch = NAN;
    int nep = 0;
    for (int i = 0; i < runs[0].n; i++)
        if (is_kind(runs[0].rec[i], "train"))
            nep += ddp_json_num(runs[0].rec[i], "epoch") != last_epoch,
                last_epoch = ddp_json_num(runs[0].rec[i], "epoch");
    last_epoch = NAN;
    for (int i = 0; i < runs[0].n && nep <= 30; i++) {
        const struct ddp_json *v = runs[0].rec[i];
        double e = ddp_json_num(v, "epoch"), s = ddp_json_num(v, "step");
        if (!is_kind(v, "train") || e == last_epoch)
            continue;
        if (isfinite(last_epoch)) {
            char lab[32];
            snprintf(lab, sizeof lab, "epoch %.0f", e);
            marker(f, fr, s - 0.5, "epoch", lab, 0);
        }
        last_epoch = e;
    }
    for (int r = 0; r < nruns; r++)
        for (int i = 0; i < runs[r].n; i++) {
            const struct ddp_json *v = runs[r].rec[i];
            char lab[64];
            if (is_kind(v, "start") && ddp_json_num(v, "resumed") == 1)
                marker(f, fr, ddp_json_num(v, "step"), "resume", "resumed", 1);
            if (is_kind(v, "stop")) {
                snprintf(lab, sizeof lab, "preempted (SIG%s)", ddp_json_text(v, "signal", "?"));
                marker(f, fr, ddp_json_num(v, "step"), "stop", lab, 2);
            }
        }
}

/* One series of one run as a polyline (and dots, for sparse series such as evaluations). */
static void polyline(FILE *f, const struct frame *fr, const struct run *run, int r, int s,
                     const struct series_def *sd)
{
    fprintf(f,
            "<polyline class=\"series%s\" data-run=\"%d\" data-kind=\"%s\" data-field=\"%s\""
            " stroke=\"%s\" points=\"",
            s == 2 ? " third"
            : s    ? " second"
                   : "",
            r, sd->kind, sd->field, g_colors[r % 8]);
    int n = 0;
    for (int i = 0; i < run->n; i++) {
        const struct ddp_json *v = run->rec[i];
        double x = ddp_json_num(v, "step"), y = ddp_json_num(v, sd->field);
        if (is_kind(v, sd->kind) && isfinite(x) && isfinite(y)) {
            fprintf(f, "%s%.3f,%.3f", n ? " " : "", px(fr, x), py(fr, y));
            n++;
        }
    }
    fputs("\"/>\n", f);
    if (n > 0 && n <= 50)
        for (int i = 0; i < run->n; i++) {
            const struct ddp_json *v = run->rec[i];
            double x = ddp_json_num(v, "step"), y = ddp_json_num(v, sd->field);
            if (is_kind(v, sd->kind) && isfinite(x) && isfinite(y))
                fprintf(f, "<circle cx=\"%.3f\" cy=\"%.3f\" r=\"2.5\" fill=\"%s\"/>", px(fr, x),
                        py(fr, y), g_colors[r % 8]);
        }
}

static void chart(FILE *f, const struct chart_def *c, const struct run *runs, int nruns)
{
    struct frame fr = {.left = 64, .right = 624, .top = 12, .bottom = 236};
    if (!chart_range(c, runs, nruns, &fr))
        return;
    fprintf(f,
            "<figure><figcaption>%s</figcaption>\n<svg class=\"chart\" width=\"640\" "
            "height=\"276\" viewBox=\"0 0 640 276\" xmlns=\"http://www.w3.org/2000/svg\" "
            "data-x0=\"%.17g\" data-x1=\"%.17g\" data-y0=\"%.17g\" data-y1=\"%.17g\" "
            "data-left=\"%g\" data-right=\"%g\" data-top=\"%g\" data-bottom=\"%g\">\n",
            c->title, fr.x0, fr.x1, fr.y0, fr.y1, fr.left, fr.right, fr.top, fr.bottom);
    axes(f, &fr);
    markers(f, &fr, runs, nruns);
    for (int r = 0; r < nruns; r++)
        for (int s = 0; s < 3 && c->s[s].kind; s++)
            polyline(f, &fr, &runs[r], r, s, &c->s[s]);
    fputs("</svg>\n<div class=\"legend\">", f);
    for (int r = 0; r < nruns; r++)
        for (int s = 0; s < 3 && c->s[s].kind; s++) {
            fprintf(f,
                    "<span><svg width=\"24\" height=\"8\"><line x1=\"0\" y1=\"4\" x2=\"24\" "
                    "y2=\"4\" stroke=\"%s\" class=\"%s\"/></svg> ",
                    g_colors[r % 8],
                    s == 2 ? "third"
                    : s    ? "second"
                           : "first");
            if (nruns > 1)
                ddp_html_text(f, runs[r].dir), fputs(": ", f);
            fprintf(f, "%s</span>", c->s[s].label);
        }
    fputs("</div></figure>\n", f);
}

/* ---- tables --------------------------------------------------------------------------- */

/* The last record of a kind, or NULL. */
static const struct ddp_json *last_of(const struct run *r, const char *kind)
{
    for (int i = r->n - 1; i >= 0; i--)
        if (is_kind(r->rec[i], kind))
            return r->rec[i];
    return NULL;
}

/* The run's summary: the last one that ended more training than the one before it. A re-run
 * of a finished job (an older ddptrain appended a second summary, with no samples/s and the
 * re-run's world size) repeats an earlier summary's step count and is ignored. NULL: none. */
static const struct ddp_json *final_summary(const struct run *r)
{
    const struct ddp_json *best = NULL;
    for (int i = 0; i < r->n; i++)
        if (is_kind(r->rec[i], "summary") &&
            (!best || ddp_json_num(r->rec[i], "steps") != ddp_json_num(best, "steps")))
            best = r->rec[i];
    return best;
}

/* Seconds since the epoch as ISO 8601 UTC (2026-12-05T20:49:16Z) into buf; "?" when t is not
 * a time. */
static const char *iso_time(double t, char *buf, size_t len)
{
    time_t s = (time_t)t;
    struct tm tm;
    if (!isfinite(t) || !gmtime_r(&s, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, len, "?");
    return buf;
}

/* Every member of an object as a row of name and value (arrays as comma lists; "time" as
 * ISO 8601 UTC). */
static void member_rows(FILE *f, const struct ddp_json *v)
{
    for (int i = 0; v && i < v->n; i++) {
        const struct ddp_json *m = &v->items[i];
        if (strcmp(v->keys[i], "kind") == 0)
            continue;
        fputs("<tr><th>", f);
        ddp_html_text(f, v->keys[i]);
        fputs("</th><td>", f);
        char when[32];
        if (strcmp(v->keys[i], "time") == 0 && m->type == DDP_JSON_NUM)
            fputs(iso_time(m->num, when, sizeof when), f);
        else
            ddp_html_value(f, m);
        fputs("</td></tr>\n", f);
    }
}

/* Starts and stops of a run, in order: the time line of resumes and preemptions. */
static void timeline(FILE *f, const struct run *r)
{
    fputs("<table><tr><th>event</th><th>time (UTC)</th><th>epoch</th><th>step</th><th>world"
          "</th><th>signal</th></tr>\n",
          f);
    for (int i = 0; i < r->n; i++) {
        const struct ddp_json *v = r->rec[i];
        int start = is_kind(v, "start");
        if (!start && !is_kind(v, "stop"))
            continue;
        char when[32];
        iso_time(ddp_json_num(v, "time"), when, sizeof when);
        fprintf(f, "<tr><td>%s</td><td>%s</td><td>%.0f</td><td>%.0f</td><td>%.0f</td><td>",
                start ? (ddp_json_num(v, "resumed") == 1 ? "resumed" : "started") : "preempted",
                when, ddp_json_num(v, "epoch"), ddp_json_num(v, "step"),
                ddp_json_num(v, "world_size"));
        ddp_html_text(f, ddp_json_text(v, "signal", ""));
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

static void run_tables(FILE *f, const struct run *r, int idx)
{
    fprintf(f, "<h2><span class=\"swatch\" style=\"background:%s\"></span>", g_colors[idx % 8]);
    ddp_html_text(f, r->dir);
    fputs("</h2>\n<div class=\"cols\"><div><h3>final numbers</h3><table>\n", f);
    const struct ddp_json *sum = final_summary(r), *tr = last_of(r, "train");
    if (!sum)
        fputs("<tr><td colspan=\"2\">no summary: the run has not finished</td></tr>\n", f);
    member_rows(f, sum);
    if (tr)
        fprintf(f,
                "<tr><th>last train loss</th><td>%.6g</td></tr><tr><th>last train acc</th>"
                "<td>%.6g</td></tr>\n",
                ddp_json_num(tr, "loss"), ddp_json_num(tr, "acc"));
    fputs("</table></div><div><h3>machine and launcher (last start)</h3><table>\n", f);
    member_rows(f, last_of(r, "start"));
    fputs("</table></div></div>\n<h3>starts, resumes and preemptions</h3>\n", f);
    timeline(f, r);
    fputs("<details><summary>effective job (job.ini)</summary><pre>", f);
    ddp_html_text(f, r->job ? r->job : "(no job.ini)");
    fputs("</pre></details>\n", f);
}

static void page(FILE *f, const struct run *runs, int nruns)
{
    ddp_html_head(f, "ddptrain report");
    fputs("<h1>ddptrain report: ", f);
    for (int r = 0; r < nruns; r++) {
        fputs(r ? ", " : "", f);
        ddp_html_text(f, runs[r].dir);
    }
    fputs("</h1>\n<div class=\"charts\">\n", f);
    for (size_t c = 0; c < sizeof g_charts / sizeof g_charts[0]; c++)
        chart(f, &g_charts[c], runs, nruns);
    fputs("</div>\n", f);
    for (int r = 0; r < nruns; r++)
        run_tables(f, &runs[r], r);
    ddp_html_tail(f);
}

int ddp_report_write_to(const char *const *dirs, int n, const char *out, char *err, size_t errlen)
{
    if (n < 1 || n > RUNS_MAX)
        return ddp_err(err, errlen, "report: give 1 to %d run directories", RUNS_MAX);
    struct run *runs = ddp_calloc((size_t)n, sizeof *runs);
    int rc = 0, loaded = 0;
    for (; loaded < n && !rc; loaded++)
        rc = load_run(&runs[loaded], dirs[loaded], err, errlen);
    char path[DDP_PATH_MAX + 32];
    if (out)
        snprintf(path, sizeof path, "%s", out);
    else
        snprintf(path, sizeof path, "%s/report.html", dirs[0]);
    FILE *f = NULL;
    if (!rc)
        f = ddp_html_open(path, err, errlen);
    if (f) {
        page(f, runs, n);
        rc = ddp_html_close(f, path, err, errlen) != 0 ? -2 : 0;
    } else {
        rc = rc ? -1 : -2; /* an input that failed, or the output that cannot be opened */
    }
    for (int i = 0; i < loaded; i++)
        free_run(&runs[i]);
    free(runs);
    return rc;
}

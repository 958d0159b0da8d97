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
#define RUNS_MAX 64       /* directories overlaid in one page */
#define NAME_MAX_CHARS 32 /* a run's name in a legend; longer ones lose their middle */

struct run {
    const char *dir;
    char *name;            /* brief, unique among the page's runs: legends (owned) */
    struct ddp_json **rec; /* (n) metrics.jsonl lines, in file order */
    int *line;             /* (n) line number of each record in metrics.jsonl */
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
    if (r->n == *cap) {
        *cap = *cap ? *cap * 2 : 256;
        r->rec = ddp_realloc(r->rec, sizeof *r->rec * (size_t)*cap);
        r->line = ddp_realloc(r->line, sizeof *r->line * (size_t)*cap);
    }
    r->line[r->n] = lineno;
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

/* The last `parts` components of dir, trailing slashes dropped (owned by the caller). */
static char *tail_name(const char *dir, int parts)
{
    size_t end = strlen(dir);
    while (end > 1 && dir[end - 1] == '/')
        end--;
    size_t start = end;
    for (; start > 0; start--)
        if (dir[start - 1] == '/' && --parts == 0)
            break;
    if (start == end) /* "/" */
        start = 0;
    size_t len = end - start, keep = len > NAME_MAX_CHARS ? NAME_MAX_CHARS / 2 : len;
    char *name = ddp_malloc(len + 4);
    if (keep < len) /* the middle left out: runs of a sweep differ at one end or the other */
        snprintf(name, len + 4, "%.*s\xe2\x80\xa6%.*s", (int)keep, dir + start, (int)keep,
                 dir + end - keep);
    else
        snprintf(name, len + 4, "%.*s", (int)len, dir + start);
    return name;
}

/* Each run's name in legends: the last component of its directory, or as many more as make
 * the names of the page's runs differ (runs/a/seed1 and runs/b/seed1: a/seed1, b/seed1). */
static void name_runs(struct run *runs, int n)
{
    for (int parts = 1;; parts++) {
        int same = 0;
        for (int r = 0; r < n; r++) {
            free(runs[r].name);
            runs[r].name = tail_name(runs[r].dir, parts);
        }
        for (int r = 0; r < n && !same; r++)
            for (int q = 0; q < r && !same; q++)
                same = strcmp(runs[r].name, runs[q].name) == 0;
        if (!same || parts >= 64)
            return;
    }
}

static void free_run(struct run *r)
{
    for (int i = 0; i < r->n; i++)
        ddp_json_free(r->rec[i]);
    free(r->rec);
    free(r->line);
    free(r->name);
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

/* Beyond this magnitude a value is not drawn but counted and named under its chart: it is a
 * diverged or damaged value (a loss of -1e308), the span of two of them overflows a double
 * and turns every coordinate into inf or NaN, and the other points would be one flat line. */
#define PLOT_MAX_EXP10 15
#define PLOT_MAX 1e15  /* 10^PLOT_MAX_EXP10 */
#define TICK_FONT_PX 6 /* width of one character of a tick or marker label (10px font) */

struct frame {
    double x0, x1, y0, y1;           /* data: the axes run from the first tick to the last */
    double xstep, ystep;             /* data between two ticks: 1, 2 or 5 times a power of 10 */
    double left, right, top, bottom; /* pixels */
};

/* What one chart holds: the points drawn per run and series, and the ones that cannot be. */
struct chart_scan {
    int drawn[RUNS_MAX][3];
    int skipped, skip_run, skip_line; /* values not drawn; the first one's run and line */
};

static double px(const struct frame *fr, double x)
{
    return fr->left + (x - fr->x0) / (fr->x1 - fr->x0) * (fr->right - fr->left);
}
static double py(const struct frame *fr, double y)
{
    return fr->bottom - (y - fr->y0) / (fr->y1 - fr->y0) * (fr->bottom - fr->top);
}

/* Member field of v: 1 with *out when it can be drawn, 0 when v has no such member, -1 when
 * it has one that cannot be (null, not a number, not finite, beyond PLOT_MAX). */
static int plot_value(const struct ddp_json *v, const char *field, double *out)
{
    const struct ddp_json *m = ddp_json_get(v, field);
    if (!m)
        return 0;
    *out = m->type == DDP_JSON_NUM ? m->num : NAN;
    return isfinite(*out) && fabs(*out) <= PLOT_MAX ? 1 : -1;
}

/* Record v as a point of series sd: 1 at (*x, *y), 0 when it is not one of the series, -1
 * when it is but its step or its value cannot be drawn. */
static int plot_point(const struct ddp_json *v, const struct series_def *sd, double *x, double *y)
{
    if (!is_kind(v, sd->kind))
        return 0;
    int val = plot_value(v, sd->field, y);
    if (val == 0)
        return 0;
    return val > 0 && plot_value(v, "step", x) > 0 ? 1 : -1;
}

/* An axis over [lo, hi] from tick to tick: of the round steps (1, 2 or 5 times a power of
 * ten, at least min_step) that give 2 to max_ticks intervals, the one that wastes least room
 * (then the longer step). One value gets an axis from 0 to twice it. */
static void nice_axis(double lo, double hi, double min_step, int max_ticks, double *a0, double *a1,
                      double *step)
{
    static const double mult[] = {1, 2, 5, 10, 20, 50, 100};
    if (hi <= lo) {
        if (lo > 0)
            lo = 0, hi *= 2;
        else if (lo < 0)
            hi = 0, lo *= 2;
        else
            hi = 1;
    }
    double mag = pow(10, floor(log10((hi - lo) / max_ticks))), best = INFINITY;
    *step = fmax(min_step, mag);
    *a0 = floor(lo / *step) * *step; /* no candidate: a span below two min_steps */
    *a1 = fmax(ceil(hi / *step) * *step, *a0 + 2 * *step);
    for (size_t i = 0; i < sizeof mult / sizeof mult[0]; i++) {
        double st = fmax(min_step, mult[i] * mag), b0 = floor(lo / st + 1e-9) * st,
               b1 = ceil(hi / st - 1e-9) * st, n = (b1 - b0) / st;
        /* room wasted first, then how far from 5 intervals */
        double score = (b1 - b0) / (hi - lo) + 1e-6 * fabs(n - 5);
        if (n >= 2 - 1e-9 && n <= max_ticks + 1e-9 && score < best)
            best = score, *a0 = b0, *a1 = b1, *step = st;
    }
}

/* The axes of a chart over every run, and what it holds; 0 when no point can be drawn. */
static int chart_range(const struct chart_def *c, const struct run *runs, int nruns,
                       struct frame *fr, struct chart_scan *sc)
{
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    memset(sc, 0, sizeof *sc);
    for (int r = 0; r < nruns; r++)
        for (int i = 0; i < runs[r].n; i++)
            for (int s = 0; s < 3 && c->s[s].kind; s++) {
                double x, y;
                int got = plot_point(runs[r].rec[i], &c->s[s], &x, &y);
                if (got < 0 && sc->skipped++ == 0)
                    sc->skip_run = r, sc->skip_line = runs[r].line[i];
                if (got <= 0)
                    continue;
                sc->drawn[r][s]++;
                x0 = fmin(x0, x), x1 = fmax(x1, x), y0 = fmin(y0, y), y1 = fmax(y1, y);
            }
    if (!(x0 <= x1))
        return 0;
    nice_axis(x0, x1, 1, 8, &fr->x0, &fr->x1, &fr->xstep);
    nice_axis(y0, y1, 0, 6, &fr->y0, &fr->y1, &fr->ystep);
    return 1;
}

/* How the ticks of an axis are written: v / scale with `decimals` digits and a suffix (k, M,
 * G, T on an axis that reaches 10 thousand, a million, ...), or, on an axis of small values
 * whose plain labels would need more than 6 characters (0.00005), v / 10^exp10 with exp10
 * named once in the chart's title ("(x1e-5)"): never an exponent on a tick. */
struct tick_fmt {
    double scale;
    const char *suffix;
    int decimals;
    int exp10; /* 0: none in the title */
};

/* Digits after the point that tick steps of s need (0 for whole steps). */
static int step_decimals(double s)
{
    return s >= 1 ? 0 : (int)ceil(-log10(s) - 1e-9);
}

/* The format of an axis over [a0, a1] with ticks step apart. */
static void tick_format(struct tick_fmt *t, double a0, double a1, double step)
{
    static const double scale[] = {1, 1e3, 1e6, 1e9, 1e12};
    static const char *const suffix[] = {"", "k", "M", "G", "T"};
    const double amax = fmax(fabs(a0), fabs(a1));
    int u = amax >= 1e12 ? 4 : amax >= 1e9 ? 3 : amax >= 1e6 ? 2 : amax >= 1e4 ? 1 : 0;
    *t = (struct tick_fmt){scale[u], suffix[u], step_decimals(step / scale[u]), 0};
    if (amax < 1 && amax > 0 && t->decimals > 4) { /* "0." and more than 4 digits */
        const int e = (int)floor(log10(amax) + 1e-9);
        const int d = step_decimals(step / pow(10, e)); /* then "D." and d digits */
        if (d <= 4) /* else a narrow band far from 0 (0.10001, 0.10002): scaling no help */
            t->exp10 = e, t->scale = pow(10, e), t->decimals = d;
    }
}

/* Tick k of an axis with ticks step apart, written as t says. */
static void tick_label(char *buf, size_t len, long long k, double step, const struct tick_fmt *t)
{
    if (k == 0)
        snprintf(buf, len, "0");
    else
        snprintf(buf, len, "%.*f%s", t->decimals, (double)k * step / t->scale, t->suffix);
}

/* Axes with a tick at every round step, labelled. */
static void axes(FILE *f, const struct frame *fr)
{
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" class=\"plot\"/>\n",
            fr->left, fr->top, fr->right - fr->left, fr->bottom - fr->top);
    char lab[48];
    struct tick_fmt xf, yf;
    tick_format(&xf, fr->x0, fr->x1, fr->xstep);
    tick_format(&yf, fr->y0, fr->y1, fr->ystep);
    for (long long k = llround(fr->x0 / fr->xstep); k <= llround(fr->x1 / fr->xstep); k++) {
        double x = px(fr, (double)k * fr->xstep);
        tick_label(lab, sizeof lab, k, fr->xstep, &xf);
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" class=\"grid\"/>"
                "<text x=\"%.1f\" y=\"%.0f\" class=\"xt\">%s</text>\n",
                x, fr->top, x, fr->bottom, x, fr->bottom + 14, lab);
    }
    for (long long k = llround(fr->y0 / fr->ystep); k <= llround(fr->y1 / fr->ystep); k++) {
        double y = py(fr, (double)k * fr->ystep);
        tick_label(lab, sizeof lab, k, fr->ystep, &yf);
        fprintf(f,
                "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" class=\"grid\"/>"
                "<text x=\"%.0f\" y=\"%.1f\" class=\"yt\">%s</text>\n",
                fr->left, y, fr->right, y, fr->left - 4, y + 4, lab);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" class=\"xl\">step</text>\n", (fr->left + fr->right) / 2,
            fr->bottom + 30);
}

/* A vertical marker at step x (epoch boundaries, resumes, preemptions), with a label unless
 * label is NULL; near the right edge the label ends at the line, so that it stays inside. Returns the marker's pixel column, or -1 when x is off the axis. */
static double marker(FILE *f, const struct frame *fr, double x, const char *cls, const char *label,
                     int row)
{
    if (!(x >= fr->x0 && x <= fr->x1))
        return -1;
    double at = px(fr, x);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" class=\"%s\"/>", at, fr->top,
            at, fr->bottom, cls);
    if (label) {
        int right = at + 2 + (double)strlen(label) * TICK_FONT_PX > fr->right;
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" class=\"ml %s%s\">", at + (right ? -2 : 2),
                fr->top + 10 + 10 * row, cls, right ? " end" : "");
        ddp_html_text(f, label);
        fputs("</text>", f);
    }
    fputs("\n", f);
    return at;
}

/* Epoch boundaries (of run 0), resumes and preemptions (of every run). An epoch's label is
 * left out where it would run into the one before. */
static void markers(FILE *f, const struct frame *fr, const struct run *runs, int nruns)
{
    double last_epoch = NAN, last_at = -1e9;
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
            int room = px(fr, s - 0.5) - last_at >= (double)(strlen(lab) + 2) * TICK_FONT_PX;
            double at = marker(f, fr, s - 0.5, "epoch", room ? lab : NULL, 0);
            if (room && at >= 0)
                last_at = at;
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
                snprintf(lab, sizeof lab, "preempted (SIG%.16s)", ddp_json_text(v, "signal", "?"));
                marker(f, fr, ddp_json_num(v, "step"), "stop", lab, 2);
            }
        }
}

/* One series of one run as a polyline (and dots, for sparse series such as evaluations);
 * n is the number of its points that can be drawn (plot_point). */
static void polyline(FILE *f, const struct frame *fr, const struct run *run, int r, int s,
                     const struct series_def *sd, int n)
{
    fprintf(f,
            "<polyline class=\"series%s\" data-run=\"%d\" data-kind=\"%s\" data-field=\"%s\""
            " stroke=\"%s\" points=\"",
            s == 2 ? " third"
            : s    ? " second"
                   : "",
            r, sd->kind, sd->field, g_colors[r % 8]);
    double x, y;
    for (int i = 0, k = 0; i < run->n; i++)
        if (plot_point(run->rec[i], sd, &x, &y) > 0)
            fprintf(f, "%s%.3f,%.3f", k++ ? " " : "", px(fr, x), py(fr, y));
    fputs("\"/>\n", f);
    if (n <= 50)
        for (int i = 0; i < run->n; i++)
            if (plot_point(run->rec[i], sd, &x, &y) > 0)
                fprintf(f, "<circle cx=\"%.3f\" cy=\"%.3f\" r=\"2.5\" fill=\"%s\"/>", px(fr, x),
                        py(fr, y), g_colors[r % 8]);
}

/* The legend: one entry per series that has a point, named by its run when there are several. */
static void legend(FILE *f, const struct chart_def *c, const struct run *runs, int nruns,
                   const struct chart_scan *sc)
{
    fputs("<div class=\"legend\">", f);
    for (int r = 0; r < nruns; r++)
        for (int s = 0; s < 3 && c->s[s].kind; s++) {
            if (!sc->drawn[r][s])
                continue;
            fprintf(f,
                    "<span data-run=\"%d\" data-kind=\"%s\" data-field=\"%s\"><svg width=\"24\" "
                    "height=\"8\"><line x1=\"0\" y1=\"4\" x2=\"24\" y2=\"4\" stroke=\"%s\" "
                    "class=\"%s\"/></svg> ",
                    r, c->s[s].kind, c->s[s].field, g_colors[r % 8],
                    s == 2 ? "third"
                    : s    ? "second"
                           : "first");
            if (nruns > 1)
                ddp_html_text(f, runs[r].name), fputs(": ", f);
            fprintf(f, "%s</span>", c->s[s].label);
        }
    fputs("</div>", f);
}

/* Under a chart: how many values could not be drawn and where the first one is. */
static void skipped_note(FILE *f, const struct run *runs, int nruns, const struct chart_scan *sc)
{
    fprintf(f,
            "<p class=\"note\">%d value%s not drawn: null, not finite or beyond "
            "&#177;10<sup>%d</sup> (the first on line %d of ",
            sc->skipped, sc->skipped == 1 ? "" : "s", PLOT_MAX_EXP10, sc->skip_line);
    ddp_html_text(f, nruns > 1 ? runs[sc->skip_run].name : "");
    fputs(nruns > 1 ? "/metrics.jsonl)</p>" : "metrics.jsonl)</p>", f);
}

static void chart(FILE *f, const struct chart_def *c, const struct run *runs, int nruns)
{
    struct frame fr = {.left = 64, .right = 624, .top = 12, .bottom = 236};
    struct chart_scan sc;
    int any = chart_range(c, runs, nruns, &fr, &sc);
    if (!any && !sc.skipped)
        return;
    struct tick_fmt yf = {0};
    if (any)
        tick_format(&yf, fr.y0, fr.y1, fr.ystep);
    fprintf(f, "<figure><figcaption>%s", c->title);
    if (yf.exp10) /* the values' factor, named once */
        fprintf(f, " (x1e%d)", yf.exp10);
    fputs("</figcaption>\n", f);
    if (any) {
        fprintf(f,
                "<svg class=\"chart\" width=\"640\" height=\"276\" viewBox=\"0 0 640 276\" "
                "xmlns=\"http://www.w3.org/2000/svg\" data-x0=\"%.17g\" data-x1=\"%.17g\" "
                "data-y0=\"%.17g\" data-y1=\"%.17g\" data-left=\"%g\" data-right=\"%g\" "
                "data-top=\"%g\" data-bottom=\"%g\">\n",
                fr.x0, fr.x1, fr.y0, fr.y1, fr.left, fr.right, fr.top, fr.bottom);
        axes(f, &fr);
        markers(f, &fr, runs, nruns);
        for (int r = 0; r < nruns; r++)
            for (int s = 0; s < 3 && c->s[s].kind; s++)
                if (sc.drawn[r][s])
                    polyline(f, &fr, &runs[r], r, s, &c->s[s], sc.drawn[r][s]);
        fputs("</svg>\n", f);
        legend(f, c, runs, nruns, &sc);
    }
    if (sc.skipped)
        skipped_note(f, runs, nruns, &sc);
    fputs("</figure>\n", f);
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
    ddp_html_fmt_num(buf, len, "time", t);
    if (!strchr(buf, 'T'))
        snprintf(buf, len, "?");
    return buf;
}

/* Every member of an object as a row of name and value (arrays as comma lists; numbers as a
 * person reads them: ddp_html_member). */
static void member_rows(FILE *f, const struct ddp_json *v)
{
    for (int i = 0; v && i < v->n; i++) {
        const struct ddp_json *m = &v->items[i];
        if (strcmp(v->keys[i], "kind") == 0)
            continue;
        fputs("<tr><th>", f);
        ddp_html_text(f, v->keys[i]);
        fputs("</th><td>", f);
        ddp_html_member(f, v->keys[i], m);
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
        char num[3][64];
        fprintf(f, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>",
                start ? (ddp_json_num(v, "resumed") == 1 ? "resumed" : "started") : "preempted",
                when, ddp_html_fmt_num(num[0], 64, "epoch", ddp_json_num(v, "epoch")),
                ddp_html_fmt_num(num[1], 64, "step", ddp_json_num(v, "step")),
                ddp_html_fmt_num(num[2], 64, "world_size", ddp_json_num(v, "world_size")));
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
    char num[2][64];
    if (tr)
        fprintf(f,
                "<tr><th>last train loss</th><td>%s</td></tr><tr><th>last train acc</th>"
                "<td>%s</td></tr>\n",
                ddp_html_fmt_num(num[0], 64, "loss", ddp_json_num(tr, "loss")),
                ddp_html_fmt_num(num[1], 64, "acc", ddp_json_num(tr, "acc")));
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
    if (!rc) {
        name_runs(runs, n);
        f = ddp_html_open(path, err, errlen);
    }
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

/*
 * report_validate.c - `ddptrain report FILE.json` for a `ddptrain validate --json` file: the
 * verdict, one row per node, per rank and per GPU (measurements and NVML health), the all-reduce
 * table, as HTML (see report.h).
 * Also the `report` command line.
 */
#include "report/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileio.h"
#include "job/config.h"
#include "report/html.h"
#include "report/json.h"
#include "core/util.h"

#define VALIDATE_MAX_BYTES (64 << 20) /* a validate file of 100k ranks is ~40 MiB */

/* A table from an array of objects: the given columns, a verdict class per row. */
static void table(FILE *f, const struct ddp_json *arr, const char *const *cols, int ncols)
{
    fputs("<table><tr>", f);
    for (int c = 0; c < ncols; c++) {
        fputs("<th>", f);
        ddp_html_text(f, cols[c]);
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    for (int i = 0; arr && arr->type == DDP_JSON_ARR && i < arr->n; i++) {
        const struct ddp_json *row = &arr->items[i];
        fprintf(f, "<tr class=\"%s\">",
                strcmp(ddp_json_text(row, "verdict", ""), "FAIL") ? "" : "FAIL");
        for (int c = 0; c < ncols; c++) {
            const struct ddp_json *v = ddp_json_get(row, cols[c]);
            fputs("<td>", f);
            if (v)
                ddp_html_member(f, cols[c], v);
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* ---- the GPU table: "gpus" (validate's measurements, one per rank with a GPU) joined with
 * "gpu_health" (NVML, one per GPU a rank read: under --slurm-health every GPU of the node) on
 * (rank, CUDA device), the reasons from "failures". Sorted indexes keep a hostile file of a
 * million rows from costing a million squared. */

#define GPU_ROWS_MAX 65536  /* a table beyond this is not read; the JSON has them all */
#define REASONS_SCAN_MAX 64 /* failures of one rank looked at for a row (real: a few) */

struct gkey {
    double rank, dev;
    int idx;
};

/* Orders by rank, then device; NaN (a missing or mistyped member) after every number. */
static int gkey_cmp(const void *pa, const void *pb)
{
    const struct gkey *a = pa, *b = pb;
    const double x[2] = {a->rank, a->dev}, y[2] = {b->rank, b->dev};
    for (int i = 0; i < 2; i++) {
        if (isnan(x[i]) || isnan(y[i])) {
            if (isnan(x[i]) != isnan(y[i]))
                return isnan(x[i]) ? 1 : -1;
            continue;
        }
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    }
    return 0;
}

/* The n items of arr (an array, else none) keyed by members rk and dk, sorted; owned. */
static struct gkey *gkeys(const struct ddp_json *arr, const char *rk, const char *dk, int *n)
{
    *n = arr && arr->type == DDP_JSON_ARR ? arr->n : 0;
    struct gkey *k = ddp_malloc(sizeof *k * (size_t)(*n ? *n : 1));
    for (int i = 0; i < *n; i++) {
        k[i].rank = ddp_json_num(&arr->items[i], rk);
        k[i].dev = dk ? ddp_json_num(&arr->items[i], dk) : 0;
        k[i].idx = i;
    }
    qsort(k, (size_t)*n, sizeof *k, gkey_cmp);
    return k;
}

/* First key of k[0..n) not ordered before (rank, dev). */
static int gkey_lower(const struct gkey *k, int n, double rank, double dev)
{
    const struct gkey want = {rank, dev, 0};
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (gkey_cmp(&k[mid], &want) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A verdict cell, styled as the page's verdicts. */
static void verdict_cell(FILE *f, const struct ddp_json *v)
{
    const char *t = v && v->type == DDP_JSON_STR ? v->str : "-";
    if (!strcmp(t, "FAIL") || !strcmp(t, "PASS"))
        fprintf(f, "<td class=\"%s\">", t);
    else
        fputs("<td>", f);
    ddp_html_text(f, t);
    fputs("</td>", f);
}

/* The failures of rank r that concern this row: its GPU checks (gpu_*) when g is the rank's
 * measured GPU, the "gpu health" ones that name health row h's GPU. */
static void reasons_cell(FILE *f, const struct ddp_json *fails, const struct gkey *fk, int nf,
                         double r, const struct ddp_json *g, const struct ddp_json *h)
{
    char gpu[96] = "";
    if (h && !isnan(ddp_json_num(h, "gpu")))
        snprintf(gpu, sizeof gpu, "GPU %.0f (%.40s) ", ddp_json_num(h, "gpu"),
                 ddp_json_text(h, "bus_id", "?"));
    int shown = 0;
    fputs("<td>", f);
    for (int i = gkey_lower(fk, nf, r, 0), seen = 0;
         i < nf && fk[i].rank == r && seen < REASONS_SCAN_MAX; i++, seen++) {
        const struct ddp_json *x = &fails->items[fk[i].idx];
        const char *check = ddp_json_text(x, "check", ""), *why = ddp_json_text(x, "reason", "");
        const int mine = (g && !strncmp(check, "gpu_", 4)) ||
                         (gpu[0] && !strcmp(check, "gpu health") && strstr(why, gpu));
        if (!mine)
            continue;
        fputs(shown++ ? "<br>" : "", f);
        ddp_html_text(f, check);
        fputs(": ", f);
        ddp_html_text(f, why);
    }
    const struct ddp_json *rep = ddp_json_get(h, "reported");
    if (rep && rep->type == DDP_JSON_BOOL && !rep->num) {
        fputs(shown ? "<br>" : "", f);
        fputs("not reported: ", f);
        ddp_html_text(f, ddp_json_text(h, "status", "?"));
    }
    fputs("</td>", f);
}

/* One row: measurements g (or NULL: a GPU only NVML read), health h (or NULL). */
static void gpu_row(FILE *f, const struct ddp_json *g, const struct ddp_json *h,
                    const struct ddp_json *fails, const struct gkey *fk, int nf)
{
    static const char *const rates[] = {"hbm_copy_gbs",     "hbm_triad_gbs",      "sgemm_tflops",
                                        "tf32_gemm_tflops", "bf16_gemm_tflops",   "h2d_gbs",
                                        "d2h_gbs",          "pattern_wrong_words"};
    const struct ddp_json *any = g ? g : h;
    const struct ddp_json *gv = ddp_json_get(g, "verdict"), *hv = ddp_json_get(h, "verdict");
    const int bad = (gv && gv->type == DDP_JSON_STR && !strcmp(gv->str, "FAIL")) ||
                    (hv && hv->type == DDP_JSON_STR && !strcmp(hv->str, "FAIL"));
    const struct ddp_json *cell[4] = {
        ddp_json_get(any, "rank"), ddp_json_get(any, "host"),
        g ? ddp_json_get(g, "device") : ddp_json_get(h, "cuda_device"),
        g ? ddp_json_get(g, "pci_bus_id")
          : ddp_json_get(h, ddp_json_get(h, "bus_id") ? "bus_id" : "cuda_bus_id")};
    static const char *const cell_key[4] = {"rank", "host", "device", "pci_bus_id"};
    fprintf(f, "<tr class=\"%s\">", bad ? "FAIL" : "");
    for (int c = 0; c < 4; c++) {
        fputs("<td>", f);
        if (cell[c])
            ddp_html_member(f, cell_key[c], cell[c]);
        fputs("</td>", f);
    }
    for (size_t c = 0; c < sizeof rates / sizeof rates[0]; c++) {
        const struct ddp_json *x = ddp_json_get(g, rates[c]);
        fputs("<td>", f);
        ddp_html_member(f, rates[c], x ? x : &(const struct ddp_json){.type = DDP_JSON_NULL});
        fputs("</td>", f);
    }
    verdict_cell(f, gv);
    verdict_cell(f, hv);
    reasons_cell(f, fails, fk, nf, ddp_json_num(any, "rank"), g, h);
    fputs("</tr>\n", f);
}

static void gpu_table(FILE *f, const struct ddp_json *v)
{
    static const char *const head[] = {"rank",
                                       "host",
                                       "GPU",
                                       "bus id",
                                       "HBM copy (GB/s)",
                                       "HBM triad (GB/s)",
                                       "SGEMM (TFLOP/s)",
                                       "TF32 (TFLOP/s)",
                                       "BF16 (TFLOP/s)",
                                       "H2D (GB/s)",
                                       "D2H (GB/s)",
                                       "pattern (wrong words)",
                                       "GPU checks",
                                       "health",
                                       "reasons"};
    const struct ddp_json *gpus = ddp_json_get(v, "gpus"), *health = ddp_json_get(v, "gpu_health");
    const struct ddp_json *fails = ddp_json_get(v, "failures");
    int ng, nh, nf;
    struct gkey *hk = gkeys(health, "rank", "cuda_device", &nh);
    struct gkey *fk = gkeys(fails, "rank", NULL, &nf);
    ng = gpus && gpus->type == DDP_JSON_ARR ? gpus->n : 0;
    if (ng + nh == 0)
        goto done; /* a CPU run: no GPU table */
    fputs("<h2>GPUs</h2>\n<table><tr>", f);
    for (size_t c = 0; c < sizeof head / sizeof head[0]; c++)
        fprintf(f, "<th>%s</th>", head[c]);
    fputs("</tr>\n", f);
    char *used = ddp_calloc((size_t)(nh ? nh : 1), 1);
    int rows = 0, matched = 0;
    for (int i = 0; i < ng && rows < GPU_ROWS_MAX; i++, rows++) {
        const struct ddp_json *g = &gpus->items[i];
        const double r = ddp_json_num(g, "rank"), d = ddp_json_num(g, "device");
        const int j = gkey_lower(hk, nh, r, d);
        const int hit = j < nh && hk[j].rank == r && hk[j].dev == d && !used[j];
        if (hit)
            used[j] = 1, matched++;
        gpu_row(f, g, hit ? &health->items[hk[j].idx] : NULL, fails, fk, nf);
    }
    for (int j = 0; j < nh && rows < GPU_ROWS_MAX; j++)
        if (!used[j]) {
            gpu_row(f, NULL, &health->items[hk[j].idx], fails, fk, nf);
            rows++;
        }
    fputs("</table>\n", f);
    if (ng + nh - matched > rows)
        fprintf(f,
                "<p class=\"note\">the first %d rows shown: the JSON has %d GPU and %d "
                "health entries</p>\n",
                rows, ng, nh);
    free(used);
done:
    free(hk);
    free(fk);
}

static void validate_page(FILE *f, const struct ddp_json *v, const char *src)
{
    static const char *node_cols[] = {"host", "ranks", "verdict", "reasons"};
    static const char *rank_cols[] = {"rank",        "host",        "cpu_model",  "threads",
                                      "gpu_count",   "gemm_gflops", "gemm_ratio", "triad_gbs",
                                      "triad_ratio", "verdict"};
    static const char *ar_cols[] = {"bytes", "time_us", "algbw_gbs", "busbw_gbs", "wrong_elements"};
    const char *verdict = ddp_json_text(v, "verdict", "?");
    ddp_html_head(f, "ddptrain validate");
    fputs("<h1>ddptrain validate: ", f);
    ddp_html_text(f, src);
    fprintf(f, "</h1>\n<p class=\"%s\">verdict <b>%s</b>: %.0f ranks on %.0f nodes, launcher ",
            strcmp(verdict, "FAIL") ? "PASS" : "FAIL", strcmp(verdict, "FAIL") ? "PASS" : "FAIL",
            ddp_json_num(v, "world_size"), ddp_json_num(v, "nodes_count"));
    ddp_html_text(f, ddp_json_text(v, "launcher", "?"));
    fputs(", comm ", f);
    ddp_html_text(f, ddp_json_text(v, "comm", "?"));
    fputs("</p>\n<h2>nodes</h2>\n", f);
    table(f, ddp_json_get(v, "nodes"), node_cols, 4);
    fputs("<h2>ranks</h2>\n", f);
    table(f, ddp_json_get(v, "ranks"), rank_cols, 10);
    gpu_table(f, v);
    fputs("<h2>all-reduce</h2>\n", f);
    const struct ddp_json *ar = ddp_json_get(v, "allreduce"),
                          *measured = ddp_json_get(ar, "measured");
    if (measured && measured->type == DDP_JSON_BOOL && !measured->num)
        fputs("<p>not measured (one rank)</p>\n", f);
    else
        table(f, ddp_json_get(ar, "rows"), ar_cols, 5);
    ddp_html_tail(f);
}

int ddp_report_validate(const char *json_path, const char *out, char *err, size_t errlen)
{
    FILE *in = fopen(json_path, "rb");
    if (!in)
        return ddp_err(err, errlen, "%s: cannot read the validate results", json_path);
    char *text = ddp_malloc(VALIDATE_MAX_BYTES + 1);
    size_t n = fread(text, 1, VALIDATE_MAX_BYTES, in);
    fclose(in);
    text[n] = '\0';
    char why[200];
    struct ddp_json *v = ddp_json_parse(text, why, sizeof why);
    free(text);
    if (!v || strcmp(ddp_json_text(v, "format", ""), "ddptrain-validate-1") != 0) {
        ddp_json_free(v);
        return ddp_err(err, errlen, "%s: not the output of `ddptrain validate --json` (%s)",
                       json_path, v ? "no format ddptrain-validate-1" : why);
    }
    FILE *f = ddp_html_open(out, err, errlen);
    int rc = -2; /* the output failed */
    if (f) {
        validate_page(f, v, json_path);
        rc = ddp_html_close(f, out, err, errlen) != 0 ? -2 : 0;
    }
    ddp_json_free(v);
    return rc;
}

/* A report function's result as the exit code: -1 an input (3), -2 the output that cannot be
 * written (1, as in every subcommand). */
static int exit_code(int rc)
{
    return rc == 0 ? 0 : rc == -2 ? DDP_EXIT_RUNTIME : DDP_EXIT_DATA;
}

/* The input of the report that out would replace (a VALIDATE.json, or a run's metrics.jsonl
 * or job.ini), into path; 0 when out is none of them. */
static int replaces_input(const char *out, const char **dirs, int n, char *path, size_t len)
{
    static const char *const names[] = {"", "/metrics.jsonl", "/job.ini"};
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
            snprintf(path, len, "%s%s", dirs[i], names[k]);
            if (ddp_file_same(out, path))
                return 1;
        }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ddptrain report RUN_DIR [RUN_DIR...] [-o OUT.html]\n"
               "       ddptrain report VALIDATE.json [-o OUT.html]\n"
               "  RUN_DIR  a run's output directory; several overlay their curves\n"
               "  OUT      default RUN_DIR/report.html (the first), or VALIDATE.html\n");
}

int ddp_cmd_report(int argc, char **argv)
{
    const char **dirs = ddp_calloc((size_t)argc, sizeof *dirs);
    const char *out = NULL;
    int n = 0, rc = 0;
    char err[DDP_ERR_LEN + DDP_PATH_MAX], path[DDP_PATH_MAX + 32];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            goto done;
        } else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
            out = argv[++i];
        } else if (argv[i][0] == '-') {
            ddp_warn("report: unknown option '%s'", argv[i]);
            usage(stderr);
            rc = DDP_EXIT_USAGE;
            goto done;
        } else {
            dirs[n++] = argv[i];
        }
    }
    struct stat st;
    if (n == 0) {
        usage(stderr);
        rc = DDP_EXIT_USAGE;
    } else if (out && ddp_file_check_output("-o", out, err, sizeof err) != 0) {
        ddp_warn("report: %s", err);
        rc = DDP_EXIT_USAGE;
    } else if (out && replaces_input(out, dirs, n, path, sizeof path)) {
        ddp_warn("report: -o %s is the report's input %s: a report never writes over its "
                 "input; give another -o",
                 out, path);
        rc = DDP_EXIT_USAGE;
    } else if (n == 1 && stat(dirs[0], &st) == 0 && S_ISREG(st.st_mode)) {
        size_t len = strlen(dirs[0]);
        snprintf(path, sizeof path, "%.*s.html",
                 (int)(len > 5 && !strcmp(dirs[0] + len - 5, ".json") ? len - 5 : len), dirs[0]);
        rc = exit_code(ddp_report_validate(dirs[0], out ? out : path, err, sizeof err));
        if (!rc)
            ddp_log("wrote %s", out ? out : path);
    } else {
        rc = exit_code(ddp_report_write_to(dirs, n, out, err, sizeof err));
        if (!rc)
            ddp_log("wrote %s",
                    out ? out : (snprintf(path, sizeof path, "%s/report.html", dirs[0]), path));
    }
    if (rc == DDP_EXIT_DATA || rc == DDP_EXIT_RUNTIME)
        ddp_warn("%s", err);
done:
    free(dirs);
    return rc;
}

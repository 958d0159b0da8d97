/*
 * report_validate.c - `ddptrain report FILE.json` for a `ddptrain validate --json` file: the
 * verdict, one row per node and per rank, the all-reduce table, as HTML (see report.h).
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

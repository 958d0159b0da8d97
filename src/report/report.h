/*
 * report.h - `ddptrain report RUN_DIR [RUN_DIR...]`: one self-contained HTML page per call
 * (inline SVG and CSS, no script, nothing fetched) with the run's curves against the step
 * (epoch boundaries, resumes and preemptions marked), the machine and launcher facts, the
 * final numbers and the effective job, read from RUN_DIR/metrics.jsonl and RUN_DIR/job.ini.
 * Several run directories overlay their curves (a sweep); the page goes to the first one's
 * report.html unless -o names another file. A `ddptrain validate --json` file given instead
 * of a directory renders as a node table into FILE.html (docs/report.md).
 *
 * Every curve is a <polyline class="series" data-run=I data-kind=K data-field=F> in an
 * <svg class="chart"> whose data-x0/x1/y0/y1 (data) and data-left/right/top/bottom (pixels)
 * give the linear mapping, so tests can read the values back. Axes run between round ticks
 * (1, 2 or 5 times a power of ten); a legend entry <span data-run data-kind data-field> exists
 * only for a series with a point; a value that cannot be drawn (null, not finite, beyond
 * +-1e15) is left out and counted in a <p class="note"> under its chart with its line number.
 *
 * Rank 0 calls ddp_report_write at the end of a run ([job] report). It reads only; failures
 * come back as -1 with one line in err (a file missing, a line that is not JSON: named with
 * its line number).
 */
#ifndef DDP_REPORT_H
#define DDP_REPORT_H

#include <stddef.h>

/* Write the report of n run directories to out (NULL: dirs[0]/report.html). Returns 0, -1 when
 * an input cannot be read, -2 when out cannot be written (no out.tmp is left); err says why. */
int ddp_report_write_to(const char *const *dirs, int n, const char *out, char *err, size_t errlen);
#define ddp_report_write(dirs, n, err, errlen) \
    ddp_report_write_to((dirs), (n), NULL, (err), (errlen))
/* A `validate --json` file as an HTML node table into out. Returns as ddp_report_write_to. */
int ddp_report_validate(const char *json_path, const char *out, char *err, size_t errlen);
/* `ddptrain report ...`; returns the exit code. */
int ddp_cmd_report(int argc, char **argv);

#endif

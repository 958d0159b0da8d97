/* metrics.c - metrics.jsonl writer (and the TensorBoard copy of its series). See metrics.h. */
#include "train/metrics.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "report/tbevents.h"

int ddp_metrics_open(struct ddp_metrics *mt, const char *path, int append, int tensorboard,
                     char *err, size_t errlen)
{
    snprintf(mt->path, sizeof mt->path, "%s", path);
    mt->f = fopen(path, append ? "a" : "w");
    if (!mt->f)
        return ddp_err(err, errlen, "%s: cannot write metrics: %s", path, strerror(errno));
    if (tensorboard) {
        char dir[sizeof mt->path];
        snprintf(dir, sizeof dir, "%s", path);
        mt->tb = ddp_tb_open(dirname(dir), err, errlen);
        if (!mt->tb) {
            ddp_metrics_close(mt);
            return -1;
        }
    }
    return 0;
}

void ddp_metrics_close(struct ddp_metrics *mt)
{
    if (mt && mt->f) {
        fclose(mt->f);
        mt->f = NULL;
    }
    if (mt) {
        ddp_tb_close(mt->tb);
        mt->tb = NULL;
    }
}

/* Push the line out; a failed write stops the run naming the file and the reason. */
static void flush_line(struct ddp_metrics *mt)
{
    if (fflush(mt->f) != 0 || ferror(mt->f))
        ddp_die("%s: cannot write metrics: %s; free space there or set [job] output elsewhere",
                mt->path, strerror(errno));
    ddp_tb_flush(mt->tb);
}

/* ,"name":value, both to the JSON line and as TensorBoard scalar prefix/name. JSON has no NaN
 * or Infinity: null for them. */
static void field(struct ddp_metrics *mt, const char *name, double v, const char *prefix,
                  int64_t step)
{
    fprintf(mt->f, ",\"%s\":", name);
    if (isfinite(v))
        fprintf(mt->f, "%.9g", v);
    else
        fputs("null", mt->f);
    if (mt->tb) {
        char tag[64];
        snprintf(tag, sizeof tag, "%s/%s", prefix, name);
        ddp_tb_scalar(mt->tb, tag, step, v);
    }
}

void ddp_metrics_train(struct ddp_metrics *mt, const struct ddp_train_record *r)
{
    if (!mt->f)
        return;
    fprintf(mt->f, "{\"kind\":\"train\",\"epoch\":%lld,\"step\":%lld", (long long)r->epoch,
            (long long)r->step);
    field(mt, "loss", r->loss, "train", r->step);
    field(mt, "acc", r->acc, "train", r->step);
    field(mt, "lr", r->lr, "train", r->step);
    field(mt, "samples_per_s", r->samples_per_s, "train", r->step);
    if (r->comm_frac >= 0) {
        field(mt, "allreduce_frac", r->comm_frac, "train", r->step);
        if (r->busbw_gbs >= 0)
            field(mt, "busbw_gbs", r->busbw_gbs, "train", r->step);
    }
    if (r->step_s_min >= 0) {
        field(mt, "step_s_min", r->step_s_min, "train", r->step);
        field(mt, "step_s_max", r->step_s_max, "train", r->step);
    }
    fputs("}\n", mt->f);
    flush_line(mt);
}

void ddp_metrics_eval(struct ddp_metrics *mt, int64_t epoch, int64_t step, double test_loss,
                      double test_acc)
{
    if (!mt->f)
        return;
    fprintf(mt->f, "{\"kind\":\"eval\",\"epoch\":%lld,\"step\":%lld", (long long)epoch,
            (long long)step);
    struct ddp_tb *tb = mt->tb;
    mt->tb = NULL; /* TensorBoard tags test/loss, test/acc rather than test/test_loss */
    field(mt, "test_loss", test_loss, "", step);
    field(mt, "test_acc", test_acc, "", step);
    mt->tb = tb;
    ddp_tb_scalar(tb, "test/loss", step, test_loss);
    ddp_tb_scalar(tb, "test/acc", step, test_acc);
    fputs("}\n", mt->f);
    flush_line(mt);
}

void ddp_metrics_val(struct ddp_metrics *mt, int64_t epoch, int64_t step, double val_loss,
                     double val_acc, int best)
{
    if (!mt->f)
        return;
    fprintf(mt->f, "{\"kind\":\"val\",\"epoch\":%lld,\"step\":%lld", (long long)epoch,
            (long long)step);
    struct ddp_tb *tb = mt->tb;
    mt->tb = NULL; /* TensorBoard tags val/loss, val/acc */
    field(mt, "val_loss", val_loss, "", step);
    field(mt, "val_acc", val_acc, "", step);
    mt->tb = tb;
    ddp_tb_scalar(tb, "val/loss", step, val_loss);
    ddp_tb_scalar(tb, "val/acc", step, val_acc);
    fprintf(mt->f, ",\"best\":%s}\n", best ? "true" : "false");
    flush_line(mt);
}

void ddp_metrics_line(struct ddp_metrics *mt, const char *kind, const char *members)
{
    if (!mt->f)
        return;
    fprintf(mt->f, "{\"kind\":\"%s\",%s}\n", kind, members);
    flush_line(mt);
}

int ddp_metrics_finished(const char *path, int64_t *steps)
{
    *steps = -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    static const char start[] = "{\"kind\":\"start\"", summary[] = "{\"kind\":\"summary\"";
    char line[256]; /* only a line's beginning matters; the rest is read past below */
    int finished = 0, at_line_start = 1;
    while (fgets(line, sizeof line, f)) {
        if (at_line_start && strncmp(line, start, sizeof start - 1) == 0)
            finished = 0;
        else if (at_line_start && strncmp(line, summary, sizeof summary - 1) == 0) {
            const char *s = strstr(line, "\"steps\":"); /* among the first members */
            *steps = s ? strtoll(s + 8, NULL, 10) : -1;
            finished = 1;
        }
        at_line_start = strchr(line, '\n') != NULL;
    }
    fclose(f);
    return finished;
}

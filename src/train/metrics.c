/* metrics.c - metrics.jsonl writer. See metrics.h. */
#include "train/metrics.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "core/util.h"

int ddp_metrics_open(struct ddp_metrics *mt, const char *path, int append, char *err,
                     size_t errlen)
{
    snprintf(mt->path, sizeof mt->path, "%s", path);
    mt->f = fopen(path, append ? "a" : "w");
    if (!mt->f)
        return ddp_err(err, errlen, "%s: cannot write metrics: %s", path, strerror(errno));
    return 0;
}

void ddp_metrics_close(struct ddp_metrics *mt)
{
    if (mt && mt->f) {
        fclose(mt->f);
        mt->f = NULL;
    }
}

/* Push the line out; a failed write stops the run naming the file and the reason. */
static void flush_line(struct ddp_metrics *mt)
{
    if (fflush(mt->f) != 0 || ferror(mt->f))
        ddp_die("%s: cannot write metrics: %s; free space there or set [job] output elsewhere",
                mt->path, strerror(errno));
}

/* JSON has no NaN or Infinity: write null for them. */
static void num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.9g", v);
    else
        fputs("null", f);
}

void ddp_metrics_train(struct ddp_metrics *mt, int64_t epoch, int64_t step, double loss,
                       double lr, double samples_per_s, double comm_frac, double busbw_gbs)
{
    if (!mt->f)
        return;
    fprintf(mt->f, "{\"kind\":\"train\",\"epoch\":%lld,\"step\":%lld,\"loss\":", (long long)epoch,
            (long long)step);
    num(mt->f, loss);
    fputs(",\"lr\":", mt->f);
    num(mt->f, lr);
    fputs(",\"samples_per_s\":", mt->f);
    num(mt->f, samples_per_s);
    if (comm_frac >= 0) {
        fputs(",\"allreduce_frac\":", mt->f);
        num(mt->f, comm_frac);
        fputs(",\"busbw_gbs\":", mt->f);
        num(mt->f, busbw_gbs);
    }
    fputs("}\n", mt->f);
    flush_line(mt);
}

void ddp_metrics_eval(struct ddp_metrics *mt, int64_t epoch, int64_t step, double test_loss,
                      double test_acc)
{
    if (!mt->f)
        return;
    fprintf(mt->f, "{\"kind\":\"eval\",\"epoch\":%lld,\"step\":%lld,\"test_loss\":",
            (long long)epoch, (long long)step);
    num(mt->f, test_loss);
    fputs(",\"test_acc\":", mt->f);
    num(mt->f, test_acc);
    fputs("}\n", mt->f);
    flush_line(mt);
}

void ddp_metrics_summary(struct ddp_metrics *mt, const char *members)
{
    if (!mt->f)
        return;
    fprintf(mt->f, "{\"kind\":\"summary\",%s}\n", members);
    flush_line(mt);
}

/*
 * metrics.h - `<output>/metrics.jsonl`, one JSON object a line (docs/training.md, Outputs):
 *   {"kind":"train","epoch":E,"step":S,"loss":L,"lr":R,"samples_per_s":X}
 *     (+ "allreduce_frac":F,"busbw_gbs":B with several ranks: comm_frac >= 0)
 *   {"kind":"eval","epoch":E,"step":S,"test_loss":L,"test_acc":A}
 *   {"kind":"summary",...}
 * Epochs count from 1, steps are global optimiser steps from 1. Only rank 0 opens the file;
 * on other ranks every call is a no-op. Each line is flushed as it is written; a write that
 * fails (a full disk) is fatal, with the path and the system's reason.
 */
#ifndef DDP_METRICS_H
#define DDP_METRICS_H

#include <stdint.h>
#include <stdio.h>

struct ddp_metrics {
    FILE *f; /* NULL: not rank 0, or not opened */
    char path[1100];
};

int ddp_metrics_open(struct ddp_metrics *mt, const char *path, int append, char *err,
                     size_t errlen);
void ddp_metrics_close(struct ddp_metrics *mt);
void ddp_metrics_train(struct ddp_metrics *mt, int64_t epoch, int64_t step, double loss,
                       double lr, double samples_per_s, double comm_frac, double busbw_gbs);
void ddp_metrics_eval(struct ddp_metrics *mt, int64_t epoch, int64_t step, double test_loss,
                      double test_acc);
/* The summary line: fields already formatted as JSON members ("\"a\":1,\"b\":2"). */
void ddp_metrics_summary(struct ddp_metrics *mt, const char *members);

#endif

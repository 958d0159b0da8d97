/*
 * metrics.h - `<output>/metrics.jsonl`, one JSON object a line (docs/training.md, Outputs;
 * docs/report.md):
 *   {"kind":"start","epoch":E,"step":S,"time":T,"world_size":W,...}   each start of the run
 *   {"kind":"train","epoch":E,"step":S,"loss":L,"acc":A,"lr":R,"samples_per_s":X}
 *     (+ "allreduce_frac":F,"busbw_gbs":B,"step_s_min":a,"step_s_max":b with several ranks;
 *     no "busbw_gbs" on GPUs)
 *   {"kind":"eval","epoch":E,"step":S,"test_loss":L,"test_acc":A}     the test split
 *   {"kind":"val","epoch":E,"step":S,"val_loss":L,"val_acc":A,"best":B} the validation split;
 *     B: the best so far by the selection metric (best.h5 written when keep_best is on)
 *   {"kind":"stop","epoch":E,"step":S,"time":T,"signal":"USR1"}       preempted (exit 75)
 *   {"kind":"summary",...}
 * Epochs count from 1, steps are global optimiser steps from 1. Only rank 0 opens the file;
 * on other ranks every call is a no-op. Each line is flushed as it is written; a write that
 * fails (a full disk) is fatal, with the path and the system's reason.
 *
 * With [job] tensorboard, the same train and eval series also go to TensorBoard event files
 * (report/tbevents.h) under tags train/<field>, test/<loss|acc> and val/<loss|acc>.
 */
#ifndef DDP_METRICS_H
#define DDP_METRICS_H

#include <stdint.h>
#include <stdio.h>

struct ddp_tb;

struct ddp_metrics {
    FILE *f; /* NULL: not rank 0, or not opened */
    char path[1100];
    struct ddp_tb *tb; /* TensorBoard events, or NULL */
};

/* One train record. comm_frac < 0: a single rank (no all-reduce fields); busbw_gbs and
 * step_s_* < 0: not measured. acc is the share of the logged interval's samples classified right. */
struct ddp_train_record {
    int64_t epoch, step;
    double loss, acc, lr, samples_per_s;
    double comm_frac, busbw_gbs;
    double step_s_min, step_s_max; /* the fastest and slowest rank's compute s per step */
};

/* Opens the file; with tensorboard, also an events file in path's directory's tb/. */
int ddp_metrics_open(struct ddp_metrics *mt, const char *path, int append, int tensorboard,
                     char *err, size_t errlen);
void ddp_metrics_close(struct ddp_metrics *mt);
void ddp_metrics_train(struct ddp_metrics *mt, const struct ddp_train_record *r);
void ddp_metrics_eval(struct ddp_metrics *mt, int64_t epoch, int64_t step, double test_loss,
                      double test_acc);
void ddp_metrics_val(struct ddp_metrics *mt, int64_t epoch, int64_t step, double val_loss,
                     double val_acc, int best);
/* A line {"kind":"<kind>",<members>}: fields already formatted as JSON members
 * ("\"a\":1,\"b\":2"); kind is "summary", "start" or "stop". */
void ddp_metrics_line(struct ddp_metrics *mt, const char *kind, const char *members);
#define ddp_metrics_summary(mt, members) ddp_metrics_line((mt), "summary", (members))

/* 1 when the metrics file at path records a finished run: a "summary" line after its last
 * "start" line; steps gets that summary's step count (-1 if it has none). 0 otherwise: no
 * file, a run still going, stopped or preempted. Reads only. */
int ddp_metrics_finished(const char *path, int64_t *steps);

#endif

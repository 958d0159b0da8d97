/*
 * train.h - the training run: job file + environment -> a trained model, metrics.jsonl and
 * model.h5 in the job's output directory (rank 0 writes; every rank computes).
 *
 * Setup failures on any rank (job, dataset, weights, output directory) are agreed on by all
 * ranks before training starts, so one rank's bad file never leaves the others waiting: the
 * failing rank prints its one-line reason, rank 0 names the failing rank, and every rank exits
 * with that rank's code.
 */
#ifndef DDP_TRAIN_H
#define DDP_TRAIN_H

#include <stddef.h>

#include "job/config.h"
#include "nn/model.h"

enum ddp_run_mode {
    DDP_RUN_TRAIN,
    DDP_RUN_EVAL,
    DDP_RUN_CHECK,
    DDP_RUN_EXPORT,
    DDP_RUN_PREDICT,
    DDP_RUN_PROFILE
};

/* What a run does besides training; filled by the command line (cli/run_args.h). */
struct ddp_run_args {
    enum ddp_run_mode mode;
    const char *checkpoint; /* eval, export, predict: the weights (a checkpoint or model.h5) */
    const char *onnx;       /* export */
    const char *onnx_input; /* export: "uint8", "float", or NULL (by the data's dtype) */
    const char *input, *output, *group;   /* predict: X.h5, Y.h5, the group in X.h5 */
    const char *steps_text, *warmup_text; /* profile: --steps, --warmup as given */
    const char *json;                     /* profile: --json FILE, or NULL */
    int steps, warmup;                    /* profile: parsed (defaults 10 and 3) */
    int bad; /* an option was given without its value (already reported) */
    /* export, predict: the last act once setup has built the model with the weights; returns
     * an exit code after printing any error. NULL for the other modes. */
    int (*finish)(const struct ddp_run_args *a, struct ddp_model *m, const struct ddp_job *job,
                  char *err, size_t errlen);
};

/* Train on job (loaded, overrides applied, validated: cli/train.c), or in the mode of args
 * (eval: the checkpoint on the job's test split; check: setup only, then a summary; export,
 * predict: setup with the checkpoint's weights, then the ONNX file or the logits; profile:
 * setup on one rank without the data's samples, then train/profile.h). Takes the
 * job's allocations (job is left empty). Returns the exit code. */
int ddp_train_run(struct ddp_job *job, const struct ddp_run_args *args);

#endif

/*
 * predict.h - `ddptrain predict JOB.ini --checkpoint F --input X.h5 --output Y.h5`: batch
 * inference in eval mode (batchnorm running statistics, no dropout) on a group of X.h5 in the
 * dataset layout (docs/data.md: `images`, and `labels` when there are any: they are optional
 * here and only used to report accuracy). Y.h5 holds
 *   /logits       (N, K) float32, the model's outputs, as `ddptrain eval` computes them
 *   /predictions  (N,)   int32, argmax of each row
 * written to Y.h5.tmp and renamed. Runs on the calling process only (rank 0 of the trainer).
 */
#ifndef DDP_PREDICT_H
#define DDP_PREDICT_H

#include <stddef.h>

#include "job/config.h"
#include "nn/model.h"

/* Returns an exit code: 0, DDP_EXIT_DATA (X.h5 unreadable or of another sample shape),
 * DDP_EXIT_RUNTIME (Y.h5 cannot be written); err says why. The samples are normalised as
 * job's [data] normalize says, as in training and evaluation (no augmentation). */
int ddp_predict(struct ddp_model *m, const struct ddp_job *job, const char *input,
                const char *group, const char *output, int batch, char *err, size_t errlen);

#endif

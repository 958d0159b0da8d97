/*
 * profile.h - `ddptrain profile`: where a training step's time goes, per layer (docs/training.md,
 * "Profiling a step"). The trainer's setup (train.c) chooses the device, precision, convolution
 * path and layout as a training run would and builds the model; this module then feeds it a
 * random batch (uniform [0, 1) samples, uniform labels) and times:
 *
 *   - warm-up whole steps (ddp_step_run), untimed;
 *   - timed steps spelled out one layer at a time (nn/model.h ddp_model_forward_layer,
 *     ddp_model_backward_layer) in ddp_step_micro's order: zero the gradients, forward, loss,
 *     backward with the buckets' hook, the buckets' wait, optimiser step; the host clock around
 *     each part, on a backend with sync (a GPU) a device synchronisation after each, so each
 *     part's time includes one synchronisation;
 *   - as many whole steps through the trainer's step (ddp_step_run), a synchronisation after
 *     each step only: the step time and samples/s a run would see (CUDA graphs off).
 *
 * It prints an aligned table (one row per layer, by the log's positions; a layer whose work a
 * fused partner runs shows "(fused into N)"; medians over the timed steps; each layer's share of
 * the sum of the rows) and, with json, writes the same numbers as one JSON object. It never
 * trains on data, writes no output directory and no checkpoint; accumulation, schedules and
 * max_steps of the job do not apply (a step is one batch and one optimiser step).
 */
#ifndef DDP_PROFILE_H
#define DDP_PROFILE_H

#include <stdint.h>

#include "job/config.h"
#include "nn/model.h"
#include "train/grad_sync.h"
#include "train/optim.h"

#define DDP_PROFILE_STEPS_MAX 100000 /* timed or warm-up steps: more is a typo */

struct ddp_profile_setup {
    struct ddp_model *model; /* built for batches of job->batch_size, initialised */
    struct ddp_sync *sync;   /* the buckets (one rank) */
    struct ddp_optim *optim;
    const struct ddp_job *job;
    const char *device;    /* "cpu" or "cuda:N (name)" */
    const char *conv_path; /* the GPU's convolution path and layout; "" on the CPU */
    double *acc;           /* NULL, or backend memory for xent_acc as the trainer's step */
    int warmup, steps;     /* warm-up steps (>= 0), timed steps (>= 1) */
    const char *json;      /* NULL, or the JSON file to write */
};

/* Profile and print; returns an exit code (1 when the JSON file cannot be written, the reason
 * printed). */
int ddp_profile_run(const struct ddp_profile_setup *p);

#endif

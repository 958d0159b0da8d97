/*
 * summary.h - `ddptrain check JOB.ini [--set ...]`: the trainer's own setup (train.c: parse,
 * world, device, collectives, data, model, weights, resume point, output guard) runs as for
 * a real run and stops before the first step; this module prints the one-screen summary.
 * The exit code and any error line are the trainer's, so check and a real run agree.
 *
 * It writes nothing: the output directory is probed (ddp_outdir_probe), not created or
 * locked, and nothing is moved aside.
 */
#ifndef DDP_SUMMARY_H
#define DDP_SUMMARY_H

#include <stdint.h>

#include "train/ckpt.h"
#include "job/config.h"
#include "dist/world.h"
#include "nn/model.h"

/* What setup found; filled by train.c, all pointers borrowed. */
struct ddp_check_facts {
    const struct ddp_job *job;
    const struct ddp_world *world;
    const char *device, *comm;
    int threads, nbuckets;
    const struct ddp_model *model;
    int64_t train_n, test_n, steps_per_epoch;
    const struct ddp_ckpt_pos *start; /* the resume point (zero: from scratch) */
    int resumed;
    double setup_s;
    int64_t val_n;         /* validation samples ([data] val or val_fraction), 0: none */
    const char *conv_path; /* the GPU's convolution path and why; "" on the CPU */
};

/* Forward FLOPs of one sample (multiply-adds count 2). */
double ddp_model_flops_per_sample(const struct ddp_model *m);
/* Rank 0 prints the summary on stdout; returns 0. */
int ddp_check_print(const struct ddp_check_facts *f);

#endif

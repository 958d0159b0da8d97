/*
 * optim.h - SGD (momentum, Nesterov, weight decay), Adam and AdamW on the flat parameter
 * buffer, with PyTorch's update rules (see docs/training.md), and the learning-rate schedule.
 *
 * The arithmetic runs in the backend (sgd_step/adam_step); this module owns the optimiser
 * state buffers (same flat layout as the parameters), the step count and the schedule.
 *
 * Gradient averaging over ranks is folded into the update (grad_scale), saving a pass over the
 * gradients per step.
 *
 * Schedule, per step: lr_eff = lr * scale(world_size) (lr_scaling none/linear/sqrt). During the
 * first warmup_epochs * steps_per_epoch steps, lr rises linearly: lr_eff * (g + 1) / warmup
 * (g = global step from 0). After warmup the per-epoch schedule applies to e = epoch -
 * warmup_epochs (whole epochs): constant; step: lr_eff * gamma^floor(e / step_epochs);
 * cosine: lr_eff * (1 + cos(pi * e / E)) / 2 with E = epochs - warmup_epochs; multistep:
 * lr_eff * gamma^(milestones <= e) (MultiStepLR stepped per epoch).
 *
 * onecycle is per step, torch's OneCycleLR(max_lr = lr_eff, total_steps = epochs x
 * steps_per_epoch, pct_start, div_factor, final_div_factor, anneal_strategy = 'cos',
 * three_phase = False, cycle_momentum = True, base_momentum 0.85, max_momentum 0.95): lr
 * rises from lr_eff / div_factor to lr_eff over pct_start x total - 1 steps, then falls to
 * lr_eff / div_factor / final_div_factor at the last step, both by cosine annealing; the
 * momentum (sgd) or beta1 (adam, adamw) goes the opposite way between 0.95 and 0.85, so the
 * job's momentum/beta1 is not used, as in torch.
 */
#ifndef DDP_OPTIM_H
#define DDP_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "job/config.h"

struct ddp_optim {
    const struct ddp_backend *be;
    int kind; /* enum ddp_optim_kind */
    size_t n;
    float *state1, *state2; /* sgd: momentum buffer; adam: exp_avg, exp_avg_sq (backend mem) */
    int64_t t;              /* optimiser steps taken */
    double lr_eff;          /* lr after world-size scaling */
    float grad_scale;       /* 1 / world size: grads arrive as the sum over ranks */
    double momentum, weight_decay, beta1, beta2, eps, gamma, warmup_epochs;
    int nesterov, schedule;
    int64_t step_epochs, epochs;
    int64_t milestones[DDP_MILESTONES_MAX]; /* multistep */
    int nmilestones;
    double pct_start, div_factor, final_div_factor; /* onecycle */
    int64_t steps_per_epoch; /* onecycle's total steps = epochs x this; set by the trainer */
    double clip_grad_norm;   /* [optim] clip_grad_norm; 0: off */
    float *gscale_dev; /* clipping on a backend with clip_scale: the step's factor (1 float) */
};

void ddp_optim_init(struct ddp_optim *o, const struct ddp_backend *be, const struct ddp_job *job,
                    size_t nparams, int world_size);
void ddp_optim_free(struct ddp_optim *o); /* accepts a zeroed struct */

/* Learning rate for global step `step` (0-based) in `epoch`. */
double ddp_optim_lr(const struct ddp_optim *o, int64_t epoch, int64_t step,
                    int64_t steps_per_epoch);

/* One update of params from grads with learning rate lr. grads holds the SUM of the ranks'
 * gradients (ddp_sync_finish); the update uses grads / world_size, scaled inside the same
 * pass (bitwise what a separate scaling pass gives). With [optim] clip_grad_norm the gradient
 * is also multiplied by min(1, clip_grad_norm / (norm + 1e-6)), norm the global L2 norm of
 * the averaged gradient (in double), as torch.nn.utils.clip_grad_norm_: on a backend with
 * clip_scale the factor is computed and used on the device (no host wait; a CUDA graph
 * captures it), else sumsq brings the norm to the host; both give the same bits for the same
 * sum of squares. */
void ddp_optim_step(struct ddp_optim *o, float *params, const float *grads, double lr);
/* The values the next ddp_optim_step would pass to the backend (lr, momentum or beta1 at this
 * step, t after it), for a replayed CUDA graph of the step (backend.h); noise is left alone. */
void ddp_optim_scalars(const struct ddp_optim *o, double lr, struct ddp_graph_scalars *sc);

/* onecycle: the momentum (sgd) or beta1 (adam) at global step `step` (0-based). */
double ddp_optim_onecycle_momentum(const struct ddp_optim *o, int64_t step);

/* The schedule against the job's length, once steps_per_epoch is known (check and run call
 * it alike): onecycle refuses a pct_start whose warmup ends exactly at step 0 (pct_start x
 * total = 1), where torch's OneCycleLR divides by zero and lr would be NaN from the first
 * step. Returns 0, or -1 with one line naming [optim] pct_start in err. */
int ddp_optim_check_schedule(const struct ddp_job *job, int64_t steps_per_epoch, char *err,
                             size_t errlen);

#endif

/*
 * optim.c - optimiser state and learning-rate schedule; the update arithmetic is the
 * backend's (PyTorch rules, see backend/cpu_kernels.inc). See optim.h.
 */
#include "train/optim.h"

#include <math.h>
#include <string.h>

void ddp_optim_init(struct ddp_optim *o, const struct ddp_backend *be, const struct ddp_job *job,
                    size_t nparams, int world_size)
{
    memset(o, 0, sizeof *o);
    o->be = be;
    o->kind = job->optim;
    o->n = nparams;
    double scale = 1;
    if (job->lr_scaling == DDP_LR_SCALING_LINEAR)
        scale = world_size;
    else if (job->lr_scaling == DDP_LR_SCALING_SQRT)
        scale = sqrt((double)world_size);
    o->lr_eff = job->lr * scale;
    o->grad_scale = 1.0f / (float)world_size;
    o->momentum = job->momentum;
    o->nesterov = job->nesterov;
    o->weight_decay = job->weight_decay;
    o->beta1 = job->beta1;
    o->beta2 = job->beta2;
    o->eps = job->eps;
    o->schedule = job->schedule;
    o->gamma = job->gamma;
    o->step_epochs = job->step_epochs;
    o->warmup_epochs = job->warmup_epochs;
    o->epochs = job->epochs;
    size_t bytes = sizeof(float) * (nparams ? nparams : 1);
    if (o->kind == DDP_OPTIM_SGD) {
        if (o->momentum != 0)
            o->state1 = be->alloc(bytes);
    } else {
        o->state1 = be->alloc(bytes);
        o->state2 = be->alloc(bytes);
    }
}

void ddp_optim_free(struct ddp_optim *o)
{
    if (!o || !o->be)
        return;
    o->be->free(o->state1);
    o->be->free(o->state2);
    memset(o, 0, sizeof *o);
}

double ddp_optim_lr(const struct ddp_optim *o, int64_t epoch, int64_t step, int64_t steps_per_epoch)
{
    double warm = o->warmup_epochs * (double)steps_per_epoch;
    double g = (double)step;
    if (warm > 0 && g < warm)
        return o->lr_eff * (g + 1) / warm;
    double e = floor((double)epoch - o->warmup_epochs);
    if (e < 0)
        e = 0;
    switch (o->schedule) {
    case DDP_SCHEDULE_STEP:
        return o->lr_eff * pow(o->gamma, floor(e / (double)o->step_epochs));
    case DDP_SCHEDULE_COSINE: {
        double total = (double)o->epochs - o->warmup_epochs;
        if (total <= 0)
            return o->lr_eff;
        return o->lr_eff * 0.5 * (1 + cos(M_PI * e / total));
    }
    default:
        return o->lr_eff;
    }
}

void ddp_optim_step(struct ddp_optim *o, float *params, const float *grads, double lr)
{
    o->t++;
    if (o->kind == DDP_OPTIM_SGD)
        o->be->sgd_step(params, grads, o->grad_scale, o->state1, o->n, (float)lr,
                        (float)o->momentum, (float)o->weight_decay, o->nesterov, o->t == 1);
    else
        o->be->adam_step(params, grads, o->grad_scale, o->state1, o->state2, o->n, (float)lr,
                         (float)o->beta1, (float)o->beta2, (float)o->eps, (float)o->weight_decay,
                         o->kind == DDP_OPTIM_ADAMW, o->t);
}

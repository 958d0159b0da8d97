/*
 * optim.c - optimiser state and learning-rate schedule; the update arithmetic is the
 * backend's (PyTorch rules, see backend/cpu_kernels.inc). See optim.h.
 */
#include "train/optim.h"

#include <math.h>
#include <string.h>

#include "core/util.h"

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
    o->nmilestones = job->nmilestones;
    memcpy(o->milestones, job->milestones, sizeof o->milestones);
    o->pct_start = job->pct_start;
    o->div_factor = job->div_factor;
    o->final_div_factor = job->final_div_factor;
    o->steps_per_epoch = 1;
    o->clip_grad_norm = job->clip_grad_norm;
    if (o->clip_grad_norm > 0 && be->clip_scale)
        o->gscale_dev = be->alloc(sizeof(float));
    size_t bytes = sizeof(float) * (nparams ? nparams : 1);
    if (o->kind == DDP_OPTIM_SGD) {
        if (o->momentum != 0 || o->schedule == DDP_SCHEDULE_ONECYCLE)
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
    if (o->gscale_dev)
        o->be->free(o->gscale_dev);
    memset(o, 0, sizeof *o);
}

/* OneCycleLR's cosine annealing from start to end at pct in [0, 1]. */
static double anneal_cos(double start, double end, double pct)
{
    return end + (start - end) / 2.0 * (cos(M_PI * pct) + 1);
}

/* The step at which OneCycleLR's first phase ends, as torch computes it: a float, negative
 * when pct_start x total < 1 (then there is no warmup and phase 2 holds from step 0). */
static double onecycle_end1(double pct_start, int64_t total_steps)
{
    return pct_start * (double)total_steps - 1;
}

/* OneCycleLR (two phases) at step: phase 1 ends at pct_start * total - 1, phase 2 at total - 1;
 * f(start, end, pct) of the phase the step is in, as torch's get_lr. */
static double onecycle_at(const struct ddp_optim *o, int64_t step, int64_t steps_per_epoch,
                          double v1_start, double v1_end, double v2_end)
{
    double total = (double)(o->epochs * steps_per_epoch);
    double end1 = onecycle_end1(o->pct_start, o->epochs * steps_per_epoch), end2 = total - 1,
           s = (double)step;
    if (s <= end1)
        return anneal_cos(v1_start, v1_end, s / end1);
    return anneal_cos(v1_end, v2_end, (s - end1) / (end2 - end1));
}

double ddp_optim_onecycle_momentum(const struct ddp_optim *o, int64_t step)
{
    return onecycle_at(o, step, o->steps_per_epoch, 0.95, 0.85, 0.95);
}

int ddp_optim_check_schedule(const struct ddp_job *job, int64_t steps_per_epoch, char *err,
                             size_t errlen)
{
    int64_t total = job->epochs * steps_per_epoch;
    char where[DDP_PATH_MAX + 64];
    /* step 0 <= end1 = 0 puts it in phase 1, whose length end1 - 0 is the divisor */
    if (job->schedule != DDP_SCHEDULE_ONECYCLE || onecycle_end1(job->pct_start, total) != 0)
        return 0;
    return ddp_err(err, errlen,
                   "%s: %g of %lld steps ends onecycle's warmup at step 0 (pct_start x steps - "
                   "1), where OneCycleLR divides by zero; expected pct_start above %g (a warmup "
                   "of more than one step)",
                   ddp_job_where(job, "optim", "pct_start", where, sizeof where), job->pct_start,
                   (long long)total, 1.0 / (double)total);
}

double ddp_optim_lr(const struct ddp_optim *o, int64_t epoch, int64_t step, int64_t steps_per_epoch)
{
    if (o->schedule == DDP_SCHEDULE_ONECYCLE) {
        double first = o->lr_eff / o->div_factor;
        return onecycle_at(o, step, steps_per_epoch, first, o->lr_eff, first / o->final_div_factor);
    }
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
    case DDP_SCHEDULE_MULTISTEP: {
        int passed = 0;
        while (passed < o->nmilestones && (double)o->milestones[passed] <= e)
            passed++;
        return o->lr_eff * pow(o->gamma, passed);
    }
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

void ddp_optim_scalars(const struct ddp_optim *o, double lr, struct ddp_graph_scalars *sc)
{
    double momentum = o->momentum, beta1 = o->beta1;
    if (o->schedule == DDP_SCHEDULE_ONECYCLE) /* cycle_momentum, at this step (t from 0) */
        momentum = beta1 = ddp_optim_onecycle_momentum(o, o->t);
    sc->lr = (float)lr;
    sc->momentum = (float)momentum;
    sc->beta1 = (float)beta1;
    sc->t = o->t + 1;
}

/* The update with the gradient times gscale, or times *gs (backend memory) where gs is set. */
static void update(struct ddp_optim *o, float *params, const float *grads, double lr, float gscale,
                   const float *gs)
{
    struct ddp_graph_scalars sc;
    ddp_optim_scalars(o, lr, &sc);
    o->t++;
    struct ddp_optim_args a = {0};
    a.lr = sc.lr;
    a.weight_decay = (float)o->weight_decay;
    a.momentum = sc.momentum;
    a.nesterov = o->nesterov;
    a.first_step = o->t == 1;
    a.b1 = sc.beta1;
    a.b2 = (float)o->beta2;
    a.eps = (float)o->eps;
    a.decoupled = o->kind == DDP_OPTIM_ADAMW;
    a.t = o->t;
    if (o->kind == DDP_OPTIM_SGD)
        o->be->sgd_step(params, grads, gscale, gs, o->state1, o->n, &a);
    else
        o->be->adam_step(params, grads, gscale, gs, o->state1, o->state2, o->n, &a);
}

void ddp_optim_step(struct ddp_optim *o, float *params, const float *grads, double lr)
{
    if (o->clip_grad_norm <= 0) {
        update(o, params, grads, lr, o->grad_scale, NULL);
    } else if (o->gscale_dev) { /* the factor stays on the device: no wait for the norm */
        o->be->clip_scale(o->gscale_dev, grads, o->n, o->grad_scale, o->clip_grad_norm);
        update(o, params, grads, lr, o->grad_scale, o->gscale_dev);
    } else { /* the same arithmetic as the backends' clip_scale */
        const double norm = sqrt(o->be->sumsq(grads, o->n)) * (double)o->grad_scale;
        const double coef = o->clip_grad_norm / (norm + 1e-6);
        const float clip = coef < 1 ? (float)coef : 1.0f;
        update(o, params, grads, lr, clip == 1.0f ? o->grad_scale : o->grad_scale * clip, NULL);
    }
}

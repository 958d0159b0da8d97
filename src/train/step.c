/*
 * step.c - the one training step (step.h).
 *
 * Dimension letters: B batch (n), K classes.
 */
#include "train/step.h"

#include <math.h>
#include <string.h>

/* Backward hook of a micro-batch that is not the last: no all-reduce (DDP's no_sync). */
static void no_sync(void *ctx, int layer)
{
    (void)ctx, (void)layer;
}

double ddp_step_micro(const struct ddp_step *s, const float *x, const int32_t *y, int n,
                      uint64_t noise, double lr, int first, int last)
{
    struct ddp_model *m = s->model;
    const struct ddp_backend *be = m->be;
    const int K = s->accumulate > 1 ? s->accumulate : 1;
    if (s->prologue)
        s->prologue(s->prologue_ctx);
    if (first)
        be->zero(m->grads, m->nparams);
    const float *logits = ddp_model_forward(m, x, n, 1, noise); /* (B, K) */
    const float gscale = K > 1 ? 1.0f / ((float)n * (float)K) : 1.0f / (float)n;
    double loss = 0;
    if (s->acc) {
        be->xent_acc(ddp_model_dlogits(m), s->acc, logits, y, n, m->classes, gscale,
                     s->label_smoothing);
    } else {
        int64_t correct = 0;
        loss = be->xent(ddp_model_dlogits(m), s->correct ? &correct : NULL, logits, y, n,
                        m->classes, gscale, s->label_smoothing);
        if (s->correct)
            *s->correct += correct;
        if (!isfinite(loss) && s->nonfinite)
            s->nonfinite(s->nonfinite_ctx, x, n, noise, loss);
    }
    if (!last) {
        ddp_model_backward(m, x, n, no_sync, NULL);
        return loss;
    }
    ddp_sync_begin(s->sync);
    if (s->layer_done)
        ddp_model_backward(m, x, n, s->layer_done, s->layer_ctx);
    else
        ddp_model_backward(m, x, n, ddp_sync_layer_done, s->sync);
    ddp_sync_finish(s->sync);
    ddp_optim_step(s->optim, m->params, m->grads, lr); /* clips, where the job says so */
    return loss;
}

double ddp_step_run(const struct ddp_step *s, const float *x, const int32_t *y, int n,
                    uint64_t noise, double lr)
{
    return ddp_step_micro(s, x, y, n, noise, lr, 1, 1);
}

void ddp_step_flip_bit(const struct ddp_backend *be, float *params)
{
    float v;
    be->download(&v, params, sizeof v);
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    bits ^= 1u << 3;
    memcpy(&v, &bits, sizeof v);
    be->upload(params, &v, sizeof v);
}

/*
 * step.c - the one training step (step.h).
 *
 * Dimension letters: B batch (n), K classes.
 */
#include "train/step.h"

#include <math.h>
#include <string.h>

double ddp_step_run(const struct ddp_step *s, const float *x, const int32_t *y, int n,
                    uint64_t noise, double lr)
{
    struct ddp_model *m = s->model;
    const struct ddp_backend *be = m->be;
    be->zero(m->grads, m->nparams);
    const float *logits = ddp_model_forward(m, x, n, 1, noise); /* (B, K) */
    double loss = 0;
    if (s->acc) {
        be->xent_acc(ddp_model_dlogits(m), s->acc, logits, y, n, m->classes, 1.0f / (float)n);
    } else {
        int64_t correct = 0;
        loss = be->xent(ddp_model_dlogits(m), s->correct ? &correct : NULL, logits, y, n,
                        m->classes, 1.0f / (float)n);
        if (s->correct)
            *s->correct += correct;
        if (!isfinite(loss) && s->nonfinite)
            s->nonfinite(s->nonfinite_ctx, x, n, noise, loss);
    }
    ddp_sync_begin(s->sync);
    if (s->layer_done)
        ddp_model_backward(m, x, n, s->layer_done, s->layer_ctx);
    else
        ddp_model_backward(m, x, n, ddp_sync_layer_done, s->sync);
    ddp_sync_finish(s->sync);
    ddp_optim_step(s->optim, m->params, m->grads, lr);
    return loss;
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

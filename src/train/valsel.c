/* valsel.c - the best validation value so far and early stopping. See valsel.h. */
#include "train/valsel.h"

#include <math.h>

#include "job/config.h"

void ddp_valsel_init(struct ddp_valsel *v, int keep_best)
{
    v->by_loss = keep_best == DDP_KEEP_BEST_LOSS;
    v->best = NAN;
    v->best_epoch = 0;
    v->since = 0;
}

int ddp_valsel_update(struct ddp_valsel *v, int64_t epoch, double loss, double acc)
{
    double x = v->by_loss ? loss : acc;
    int better = isnan(v->best) || (v->by_loss ? x < v->best : x > v->best);
    if (better) {
        v->best = x;
        v->best_epoch = epoch;
        v->since = 0;
    } else {
        v->since++;
    }
    return better;
}

int ddp_valsel_stop(const struct ddp_valsel *v, int64_t early_stop)
{
    return early_stop > 0 && v->since >= early_stop;
}

const char *ddp_valsel_metric(const struct ddp_valsel *v)
{
    return v->by_loss ? "val_loss" : "val_acc";
}

/*
 * valsel.h - model selection on the validation split ([checkpoint] keep_best, [train]
 * early_stop; docs/training.md, Validation): the best value so far, the epoch it came from
 * and how many evaluations since have not improved on it. Checkpoints carry the three
 * (ckpt.h), so a resumed run decides exactly as an uninterrupted one.
 *
 * Improvement: val_acc strictly higher, or val_loss strictly lower; the metric is keep_best's,
 * val_acc when keep_best = none. The first evaluation always improves.
 */
#ifndef DDP_VALSEL_H
#define DDP_VALSEL_H

#include <stdint.h>

struct ddp_valsel {
    int by_loss;        /* 1: val_loss selects; 0: val_acc */
    double best;        /* NAN before the first evaluation */
    int64_t best_epoch; /* 1-based epoch of best; 0 before the first evaluation */
    int64_t since;      /* evaluations since best without improvement */
};

/* keep_best: enum ddp_keep_best (job/config.h). */
void ddp_valsel_init(struct ddp_valsel *v, int keep_best);
/* One evaluation after epoch (1-based): returns 1 when it improved on the best. */
int ddp_valsel_update(struct ddp_valsel *v, int64_t epoch, double loss, double acc);
/* early_stop > 0 evaluations without improvement reached? */
int ddp_valsel_stop(const struct ddp_valsel *v, int64_t early_stop);
/* "val_acc" or "val_loss". */
const char *ddp_valsel_metric(const struct ddp_valsel *v);

#endif

/*
 * sampler.h - which samples each rank trains on, in the order of PyTorch's
 * DistributedSampler with set_epoch (docs/data.md):
 *
 *   order = permutation of 0..N-1 seeded by seed + epoch (or 0..N-1 without shuffle);
 *   drop_last = false: pad by repeating the head of order up to T = ceil(N / W) * W;
 *   drop_last = true:  cut to T = floor(N / W) * W;
 *   rank r takes positions r, r + W, r + 2W, ... (T / W samples).
 *
 * Batch b of size B on rank r holds positions c + b*B*W + r + k*W, k < B (c the cursor, 0 at the
 * start of an epoch): the global step b covers
 * positions c + [b*G, (b+1)*G) of the padded order, G = B*W. So one rank with batch G and W ranks
 * with batch G/W see the same samples at every step, and a position in the epoch is a single
 * global sample count (the cursor) that any world size can resume from.
 *
 * The permutation generator is rng.h's, not torch.randperm: the structure matches PyTorch, the
 * random stream does not need to.
 */
#ifndef DDP_SAMPLER_H
#define DDP_SAMPLER_H

#include <stdint.h>

struct ddp_sampler {
    int64_t n; /* samples in the split */
    int world_size, rank;
    uint64_t seed;
    int shuffle, drop_last;
    int64_t cursor;        /* positions already consumed in this epoch (resume), 0 normally */
    int64_t total;         /* T: padded or cut length of the epoch's order */
    int64_t per_rank;      /* this rank's share: T / W (eval: positions r + kW < N) */
    int64_t epoch;         /* epoch of the current order, -1 before set_epoch */
    int64_t *order;        /* (T) global order of the current epoch (owned) */
    const int64_t *subset; /* (n) the split's indices the sampler's 0..n-1 stand for (a
                            * held-out validation share, ddp_sampler_holdout); NULL: the same */
};

/* [data] val_fraction: the n samples of a split divided, by seed alone (so any world size
 * agrees), into a training part and a held-out validation part of floor(n * fraction) samples
 * (at least 1, at most n - 1), each in increasing index order. *train (n - *nval) and *val
 * (*nval) are malloc'd; the caller frees them. */
void ddp_sampler_holdout(int64_t n, double fraction, uint64_t seed, int64_t **train, int64_t **val,
                         int64_t *nval);

void ddp_sampler_init(struct ddp_sampler *s, int64_t n, int world_size, int rank, uint64_t seed,
                      int shuffle, int drop_last);
/* Continue the epoch after `cursor` positions (a global sample count, from a checkpoint made
 * with any world size): the remaining positions cursor.. are padded (or cut, with drop_last)
 * to a multiple of W and dealt out as above, so no sample of the epoch is skipped or repeated
 * and every rank gets the same number of steps. */
void ddp_sampler_set_cursor(struct ddp_sampler *s, int64_t cursor);
/* Evaluation order: no shuffle and no padding, rank r takes r, r + W, ... < N, so every test
 * sample is counted exactly once over the ranks. */
void ddp_sampler_init_eval(struct ddp_sampler *s, int64_t n, int world_size, int rank);
void ddp_sampler_free(struct ddp_sampler *s); /* accepts a zeroed struct */
/* Build the epoch's global order (set_epoch). */
void ddp_sampler_set_epoch(struct ddp_sampler *s, int64_t epoch);
/* Steps in an epoch for per-rank batch B (the last partial batch counts unless drop_last). */
int64_t ddp_sampler_steps(const struct ddp_sampler *s, int64_t B);
/* Fill idx with this rank's samples of step `step` (batch B); returns how many (<= B). */
int ddp_sampler_batch(const struct ddp_sampler *s, int64_t step, int64_t B, int64_t *idx);

#endif

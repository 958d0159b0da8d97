/*
 * rng.h - the one pseudo-random generator of ddptrain: xoshiro256** seeded through
 * splitmix64. Used for initialisation and the sampler's permutations; its state is four words,
 * so checkpoints can store it. Not cryptographic.
 */
#ifndef DDP_RNG_H
#define DDP_RNG_H

#include <stdint.h>

struct ddp_rng {
    uint64_t s[4];
};

void ddp_rng_seed(struct ddp_rng *r, uint64_t seed);
uint64_t ddp_rng_next(struct ddp_rng *r);
double ddp_rng_uniform(struct ddp_rng *r);             /* [0, 1) with 53 bits */
uint64_t ddp_rng_below(struct ddp_rng *r, uint64_t n); /* uniform in [0, n), unbiased; n > 0 */

#endif

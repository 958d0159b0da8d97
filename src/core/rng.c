/* rng.c - xoshiro256** with splitmix64 seeding (public-domain algorithms by Blackman and
 * Vigna, written from their description). See rng.h. */
#include "core/rng.h"

#include "core/hash.h"

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void ddp_rng_seed(struct ddp_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = ddp_splitmix64(&x);
}

uint64_t ddp_rng_next(struct ddp_rng *r)
{
    uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return res;
}

double ddp_rng_uniform(struct ddp_rng *r)
{
    return (double)(ddp_rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t ddp_rng_below(struct ddp_rng *r, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* reject the biased tail */
    uint64_t v;
    do
        v = ddp_rng_next(r);
    while (v >= limit);
    return v % n;
}

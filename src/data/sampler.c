/* sampler.c - DistributedSampler order. See sampler.h. */
#include "data/sampler.h"

#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/util.h"

void ddp_sampler_init(struct ddp_sampler *s, int64_t n, int world_size, int rank, uint64_t seed,
                      int shuffle, int drop_last)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    s->world_size = world_size;
    s->rank = rank;
    s->seed = seed;
    s->shuffle = shuffle;
    s->drop_last = drop_last;
    s->epoch = -1;
    s->order = ddp_malloc(sizeof(int64_t) * (size_t)(n + world_size));
    ddp_sampler_set_cursor(s, 0);
}

void ddp_sampler_set_cursor(struct ddp_sampler *s, int64_t cursor)
{
    int64_t W = s->world_size, rest = s->n - cursor;
    if (rest < 0)
        rest = 0;
    s->cursor = cursor;
    s->total = cursor + (s->drop_last ? (rest / W) * W : ((rest + W - 1) / W) * W);
    s->per_rank = (s->total - cursor) / W;
}

void ddp_sampler_init_eval(struct ddp_sampler *s, int64_t n, int world_size, int rank)
{
    ddp_sampler_init(s, n, world_size, rank, 0, 0, 0);
    s->total = n;
    s->cursor = 0;
    s->per_rank = (n - rank + world_size - 1) / world_size;
    if (s->per_rank < 0)
        s->per_rank = 0;
}

void ddp_sampler_free(struct ddp_sampler *s)
{
    if (s)
        DDP_FREE(s->order);
}

void ddp_sampler_set_epoch(struct ddp_sampler *s, int64_t epoch)
{
    int64_t n = s->n;
    for (int64_t i = 0; i < n; i++)
        s->order[i] = i;
    if (s->shuffle) {
        struct ddp_rng r;
        ddp_rng_seed(&r, s->seed + (uint64_t)epoch);
        for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
            int64_t j = (int64_t)ddp_rng_below(&r, (uint64_t)i + 1);
            int64_t t = s->order[i];
            s->order[i] = s->order[j];
            s->order[j] = t;
        }
    }
    for (int64_t i = n; i < n + s->world_size; i++) /* padding repeats the head */
        s->order[i] = s->order[(i - n) % n];
    s->epoch = epoch;
}

int64_t ddp_sampler_steps(const struct ddp_sampler *s, int64_t B)
{
    return s->drop_last ? s->per_rank / B : (s->per_rank + B - 1) / B;
}

int ddp_sampler_batch(const struct ddp_sampler *s, int64_t step, int64_t B, int64_t *idx)
{
    int64_t first = step * B, count = 0;
    for (int64_t k = first; k < first + B && k < s->per_rank; k++)
        idx[count++] = s->order[s->cursor + s->rank + k * s->world_size];
    if (s->subset)
        for (int64_t k = 0; k < count; k++)
            idx[k] = s->subset[idx[k]];
    return (int)count;
}

void ddp_sampler_holdout(int64_t n, double fraction, uint64_t seed, int64_t **train, int64_t **val,
                         int64_t *nval)
{
    int64_t nv = (int64_t)((double)n * fraction);
    nv = nv < 1 ? 1 : nv > n - 1 ? n - 1 : nv;
    int64_t *perm = ddp_malloc(sizeof(int64_t) * (size_t)n);
    char *held = ddp_calloc((size_t)n, 1);
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    struct ddp_rng r;
    ddp_rng_seed(&r, seed ^ 0x76616c5f73706c74ULL); /* "val_splt": not the epochs' streams */
    for (int64_t i = 0; i < nv; i++) { /* partial Fisher-Yates: the first nv are held out */
        int64_t j = i + (int64_t)ddp_rng_below(&r, (uint64_t)(n - i));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
        held[perm[i]] = 1;
    }
    *train = ddp_malloc(sizeof(int64_t) * (size_t)(n - nv + 1));
    *val = ddp_malloc(sizeof(int64_t) * (size_t)nv);
    int64_t a = 0, b = 0;
    for (int64_t i = 0; i < n; i++) {
        if (held[i])
            (*val)[b++] = i;
        else
            (*train)[a++] = i;
    }
    *nval = nv;
    free(perm);
    free(held);
}

/*
 * test_sampler.c - the sampler against DistributedSampler's structure on stated cases:
 * partition by rank, padding by repeating the head, drop_last, epoch reshuffle, and the
 * equivalence that one rank with global batch G and W ranks with batch G/W see the same
 * samples at every step.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/sampler.h"

/* Without shuffle the order is 0..N-1, so DistributedSampler's lists can be written out. */
static void stated_cases(void)
{
    /* N=10, W=3: padded to 12 with 0, 1; rank r takes r, r+3, ... */
    static const int64_t want[3][4] = {{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}};
    for (int r = 0; r < 3; r++) {
        struct ddp_sampler s;
        ddp_sampler_init(&s, 10, 3, r, 0, 0, 0);
        ddp_sampler_set_epoch(&s, 0);
        CHECK(s.total == 12 && s.per_rank == 4, "N=10 W=3 total %lld", (long long)s.total);
        int64_t idx[4];
        int n = ddp_sampler_batch(&s, 0, 4, idx);
        CHECK(n == 4, "rank %d got %d", r, n);
        for (int k = 0; k < 4; k++)
            CHECK(idx[k] == want[r][k], "rank %d pos %d = %lld, want %lld", r, k, (long long)idx[k],
                  (long long)want[r][k]);
        /* batches of 3: step 1 holds the one remaining sample */
        CHECK(ddp_sampler_steps(&s, 3) == 2, "steps");
        n = ddp_sampler_batch(&s, 1, 3, idx);
        CHECK(n == 1 && idx[0] == want[r][3], "tail batch rank %d", r);
        ddp_sampler_free(&s);
    }
    /* drop_last: N=10, W=3 cut to 9; rank 0 takes 0,3,6 */
    struct ddp_sampler s;
    ddp_sampler_init(&s, 10, 3, 0, 0, 0, 1);
    ddp_sampler_set_epoch(&s, 0);
    CHECK(s.total == 9 && s.per_rank == 3, "drop_last total %lld", (long long)s.total);
    CHECK(ddp_sampler_steps(&s, 2) == 1, "drop_last drops the partial batch");
    ddp_sampler_free(&s);
    /* N=2 smaller than W=4: padding wraps around the head repeatedly */
    static const int64_t tiny[4] = {0, 1, 0, 1};
    for (int r = 0; r < 4; r++) {
        ddp_sampler_init(&s, 2, 4, r, 0, 0, 0);
        ddp_sampler_set_epoch(&s, 0);
        int64_t idx[1];
        CHECK(ddp_sampler_batch(&s, 0, 1, idx) == 1 && idx[0] == tiny[r], "tiny rank %d", r);
        ddp_sampler_free(&s);
    }
    /* eval split: no padding, every sample once */
    int seen[10] = {0};
    for (int r = 0; r < 3; r++) {
        ddp_sampler_init_eval(&s, 10, 3, r);
        ddp_sampler_set_epoch(&s, 0);
        int64_t idx[8];
        int n = ddp_sampler_batch(&s, 0, 8, idx);
        CHECK(n == (r == 0 ? 4 : 3), "eval rank %d count %d", r, n);
        for (int k = 0; k < n; k++)
            seen[idx[k]]++;
        ddp_sampler_free(&s);
    }
    for (int i = 0; i < 10; i++)
        CHECK(seen[i] == 1, "eval sample %d seen %d times", i, seen[i]);
}

/* Shuffled: permutation property, same order on every rank, new order each epoch. */
static void shuffled(void)
{
    enum { N = 1001, W = 4 };
    struct ddp_sampler s[W];
    for (int r = 0; r < W; r++) {
        ddp_sampler_init(&s[r], N, W, r, 42, 1, 0);
        ddp_sampler_set_epoch(&s[r], 3);
    }
    int *count = calloc(N, sizeof(int));
    for (int64_t i = 0; i < N; i++)
        count[s[0].order[i]]++;
    int ok = 1;
    for (int i = 0; i < N; i++)
        ok &= count[i] == 1;
    CHECK(ok, "epoch order is a permutation");
    for (int r = 1; r < W; r++)
        CHECK(memcmp(s[0].order, s[r].order, sizeof(int64_t) * s[0].total) == 0,
              "rank %d has a different order", r);
    int64_t first3 = s[0].order[0];
    ddp_sampler_set_epoch(&s[0], 4);
    int same = 0;
    for (int64_t i = 0; i < N; i++)
        same += count[i] && 0;
    (void)same;
    int64_t moved = 0;
    struct ddp_sampler t;
    ddp_sampler_init(&t, N, W, 0, 42, 1, 0);
    ddp_sampler_set_epoch(&t, 3);
    for (int64_t i = 0; i < N; i++)
        moved += t.order[i] != s[0].order[i];
    CHECK(moved > N / 2, "epoch 4 reshuffles (only %lld positions moved)", (long long)moved);
    CHECK(t.order[0] == first3, "epoch 3 order is reproducible");
    /* padding repeats the head of the epoch's order */
    CHECK(t.total == 1004 && t.order[1001] == t.order[0] && t.order[1003] == t.order[2], "padding");
    ddp_sampler_free(&t);
    for (int r = 0; r < W; r++)
        ddp_sampler_free(&s[r]);
    free(count);
}

/* One rank with batch G and W ranks with batch G/W cover the same samples at every step. */
static void equivalence(int W, int64_t N, int64_t G)
{
    struct ddp_sampler one;
    ddp_sampler_init(&one, N, 1, 0, 7, 1, 0);
    ddp_sampler_set_epoch(&one, 2);
    struct ddp_sampler *many = calloc((size_t)W, sizeof *many);
    for (int r = 0; r < W; r++) {
        ddp_sampler_init(&many[r], N, W, r, 7, 1, 0);
        ddp_sampler_set_epoch(&many[r], 2);
    }
    int64_t B = G / W, steps = N / G; /* full steps before any padding */
    int64_t *a = malloc(sizeof(int64_t) * G), *b = malloc(sizeof(int64_t) * G);
    int bad = 0;
    for (int64_t st = 0; st < steps; st++) {
        int n = ddp_sampler_batch(&one, st, G, a), m = 0;
        for (int r = 0; r < W; r++)
            m += ddp_sampler_batch(&many[r], st, B, b + m);
        if (n != m) {
            bad++;
            continue;
        }
        /* same multiset: sort both */
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++) {
                if (a[j] < a[i]) {
                    int64_t x = a[i];
                    a[i] = a[j];
                    a[j] = x;
                }
                if (b[j] < b[i]) {
                    int64_t x = b[i];
                    b[i] = b[j];
                    b[j] = x;
                }
            }
        bad += memcmp(a, b, sizeof(int64_t) * (size_t)n) != 0;
    }
    CHECK(bad == 0, "W=%d N=%lld G=%lld: %d steps differ", W, (long long)N, (long long)G, bad);
    for (int r = 0; r < W; r++)
        ddp_sampler_free(&many[r]);
    ddp_sampler_free(&one);
    free(many), free(a), free(b);
}

/* Resume mid-epoch on another world size: the samples of the epoch seen before (W=4) and after
 * (W=2) the checkpoint are every sample exactly once, plus only the final padding. */
static void resume_other_world(void)
{
    enum { N = 1003, B4 = 16, B2 = 32, STEPS4 = 5 };
    int *seen = calloc(N, sizeof(int));
    int64_t idx[64];
    for (int r = 0; r < 4; r++) {
        struct ddp_sampler s;
        ddp_sampler_init(&s, N, 4, r, 9, 1, 0);
        ddp_sampler_set_epoch(&s, 1);
        for (int st = 0; st < STEPS4; st++) {
            int n = ddp_sampler_batch(&s, st, B4, idx);
            for (int k = 0; k < n; k++)
                seen[idx[k]]++;
        }
        ddp_sampler_free(&s);
    }
    int64_t cursor = (int64_t)STEPS4 * B4 * 4;
    int64_t steps_r[2];
    for (int r = 0; r < 2; r++) {
        struct ddp_sampler s;
        ddp_sampler_init(&s, N, 2, r, 9, 1, 0);
        ddp_sampler_set_epoch(&s, 1);
        ddp_sampler_set_cursor(&s, cursor);
        steps_r[r] = ddp_sampler_steps(&s, B2);
        for (int64_t st = 0; st < steps_r[r]; st++) {
            int n = ddp_sampler_batch(&s, st, B2, idx);
            for (int k = 0; k < n; k++)
                seen[idx[k]]++;
        }
        ddp_sampler_free(&s);
    }
    CHECK(steps_r[0] == steps_r[1], "ranks disagree on the number of steps");
    int missing = 0, twice = 0;
    for (int i = 0; i < N; i++) {
        missing += seen[i] == 0;
        twice += seen[i] > 1;
    }
    /* (N - cursor) = 683 is odd: exactly one padded repeat */
    CHECK(missing == 0 && twice == 1, "resume 4->2: %d missing, %d seen twice", missing, twice);
    free(seen);
}

int main(void)
{
    resume_other_world();
    stated_cases();
    shuffled();
    equivalence(2, 1001, 64);
    equivalence(3, 1000, 96);
    equivalence(4, 997, 128);
    return check_report("test_sampler");
}

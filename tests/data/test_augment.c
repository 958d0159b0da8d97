/*
 * test_augment.c - the loader's transforms (data/augment.h) against their torchvision
 * definitions written out here, and the held-out validation share (ddp_sampler_holdout):
 *  - every augmented sample is one of the 2 x (2P+1)^2 images that RandomCrop(size, padding=P)
 *    (zero padding) followed by RandomHorizontalFlip can give, and over many samples every
 *    one of them occurs about equally often;
 *  - the choice is a function of (seed, epoch, sample index) only, and changes with the epoch;
 *  - Normalize: (v - mean_c) / std_c per channel, bit for bit; evaluation only normalises;
 *  - holdout: floor(N x F) samples, disjoint from the rest, sorted, a function of the seed;
 *  - uint8 samples (ddp_augment_apply_u8, the GPU's input path): crops and flips the same
 *    samples the same way, so converting after it gives the float path's bits.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/augment.h"
#include "data/h5data.h"
#include "data/sampler.h"
#include "job/config.h"

enum { C = 2, H = 5, W = 7, P = 2, E = C * H * W };

static void image(float *x)
{
    for (int c = 0; c < C; c++)
        for (int i = 0; i < H; i++)
            for (int j = 0; j < W; j++)
                x[(c * H + i) * W + j] = (float)(1 + c * 100 + i * 10 + j);
}

/* torchvision: pad by P with zeros, take the H x W window at (top, left), then flip. */
static void reference(const float *x, int top, int left, int flip, float *out)
{
    for (int c = 0; c < C; c++)
        for (int i = 0; i < H; i++)
            for (int j = 0; j < W; j++) {
                int pi = top + i, pj = left + (flip ? W - 1 - j : j); /* padded coordinates */
                int si = pi - P, sj = pj - P;
                out[(c * H + i) * W + j] =
                    si >= 0 && si < H && sj >= 0 && sj < W ? x[(c * H + si) * W + sj] : 0.0f;
            }
}

static struct ddp_augment make(int train)
{
    struct ddp_job job;
    ddp_job_defaults(&job);
    job.seed = 42;
    job.crop_pad = P;
    job.hflip = 1;
    int64_t dims[3] = {C, H, W};
    struct ddp_augment a;
    ddp_augment_init(&a, &job, 3, dims, train);
    return a;
}

/* The (top, left, flip) that produced y from x, or -1. */
static int which(const float *x, const float *y)
{
    float r[E];
    for (int k = 0; k < 2 * (2 * P + 1) * (2 * P + 1); k++) {
        reference(x, k / 2 / (2 * P + 1), k / 2 % (2 * P + 1), k % 2, r);
        if (memcmp(r, y, sizeof r) == 0)
            return k;
    }
    return -1;
}

static void crop_flip(void)
{
    enum { N = 5000, CELLS = 2 * (2 * P + 1) * (2 * P + 1) };
    struct ddp_augment a = make(1);
    float x[E], scratch[E];
    image(x);
    float *b = malloc(sizeof(float) * E * N);
    int64_t *idx = malloc(sizeof(int64_t) * N);
    for (int n = 0; n < N; n++) {
        memcpy(b + (size_t)n * E, x, sizeof x);
        idx[n] = n;
    }
    ddp_augment_apply(&a, b, N, idx, 3, scratch);
    int count[CELLS] = {0}, bad = 0;
    for (int n = 0; n < N; n++) {
        int k = which(x, b + (size_t)n * E);
        if (k < 0)
            bad++;
        else
            count[k]++;
    }
    CHECK(bad == 0, "%d of %d samples are no crop-and-flip of the image", bad, N);
    for (int k = 0; k < CELLS; k++) /* expected N / CELLS = 100 each */
        CHECK(count[k] >= 50 && count[k] <= 150, "top %d left %d flip %d: %d of %d", k / 2 / 5,
              k / 2 % 5, k % 2, count[k], N);
    /* the same (seed, epoch, index) again: the same images; another epoch: others */
    float *c = malloc(sizeof(float) * E * N);
    for (int n = 0; n < N; n++)
        memcpy(c + (size_t)n * E, x, sizeof x);
    ddp_augment_apply(&a, c, N, idx, 3, scratch);
    CHECK(memcmp(b, c, sizeof(float) * E * N) == 0, "not a function of (seed, epoch, index)");
    for (int n = 0; n < N; n++)
        memcpy(c + (size_t)n * E, x, sizeof x);
    ddp_augment_apply(&a, c, N, idx, 4, scratch);
    int same = 0;
    for (int n = 0; n < N; n++)
        same += memcmp(b + (size_t)n * E, c + (size_t)n * E, sizeof x) == 0;
    CHECK(same < N / 10, "epoch 4 repeats epoch 3's choice for %d of %d samples", same, N);
    free(b), free(c), free(idx);
}

static void normalise(void)
{
    struct ddp_job job;
    ddp_job_defaults(&job);
    job.crop_pad = P;
    job.hflip = 1;
    job.norm_channels = C;
    job.norm_mean[0] = 0.25f, job.norm_mean[1] = -3.5f;
    job.norm_std[0] = 0.3f, job.norm_std[1] = 7.0f;
    int64_t dims[3] = {C, H, W};
    struct ddp_augment a;
    ddp_augment_init(&a, &job, 3, dims, 0); /* evaluation: no crop or flip */
    CHECK(a.crop_pad == 0 && a.hflip == 0 && a.nchan == C, "evaluation transform");
    float x[E], y[E], scratch[E];
    image(x);
    memcpy(y, x, sizeof x);
    int64_t idx = 7;
    ddp_augment_apply(&a, y, 1, &idx, 0, scratch);
    int bad = 0;
    for (int c = 0; c < C; c++)
        for (int i = 0; i < H * W; i++) {
            float want = (x[c * H * W + i] - job.norm_mean[c]) / job.norm_std[c];
            bad += memcmp(&want, &y[c * H * W + i], sizeof want) != 0;
        }
    CHECK(bad == 0, "%d values differ from (v - mean) / std", bad);
}

static void holdout(void)
{
    int64_t *tr, *va, nv, *tr2, *va2, nv2;
    ddp_sampler_holdout(1203, 0.1, 9, &tr, &va, &nv);
    CHECK(nv == 120, "held out %lld, want 120", (long long)nv);
    char *seen = calloc(1203, 1);
    for (int64_t i = 0; i < nv; i++)
        seen[va[i]] |= 1;
    for (int64_t i = 0; i < 1203 - nv; i++)
        seen[tr[i]] |= 2;
    int bad = 0;
    for (int i = 0; i < 1203; i++)
        bad += seen[i] != 1 && seen[i] != 2;
    CHECK(bad == 0, "%d samples in both parts or in none", bad);
    for (int64_t i = 1; i < nv; i++)
        CHECK(va[i] > va[i - 1], "held-out indices not increasing");
    ddp_sampler_holdout(1203, 0.1, 9, &tr2, &va2, &nv2);
    CHECK(nv2 == nv && memcmp(va, va2, sizeof(int64_t) * (size_t)nv) == 0,
          "not a function of the seed");
    free(tr2), free(va2);
    ddp_sampler_holdout(1203, 0.1, 10, &tr2, &va2, &nv2);
    CHECK(memcmp(va, va2, sizeof(int64_t) * (size_t)nv) != 0, "another seed holds out the same");
    free(tr2), free(va2), free(tr), free(va), free(seen);
    ddp_sampler_holdout(5, 0.01, 1, &tr, &va, &nv); /* at least one */
    CHECK(nv == 1, "5 x 0.01: held out %lld, want 1", (long long)nv);
    free(tr), free(va);
}

/* uint8: crop and flip the bytes, then convert = convert, then crop and flip (bit for bit). */
static void bytes(void)
{
    enum { N = 2000 };
    struct ddp_augment a = make(1);
    a.nchan = 0; /* normalisation is the converter's (the GPU's u8_to_float) */
    uint8_t *u = malloc((size_t)E * N);
    float *f = malloc(sizeof(float) * E * N), *g = malloc(sizeof(float) * E * N), scratch[E];
    int64_t *idx = malloc(sizeof(int64_t) * N);
    for (int n = 0; n < N; n++) {
        for (int e = 0; e < E; e++)
            u[(size_t)n * E + e] = (uint8_t)((n * 7 + e * 13) % 256);
        idx[n] = 3 * n + 1;
    }
    ddp_h5_u8_to_float(u, f, (size_t)E * N);
    ddp_augment_apply(&a, f, N, idx, 2, scratch);
    ddp_augment_apply_u8(&a, u, N, idx, 2, (uint8_t *)scratch);
    ddp_h5_u8_to_float(u, g, (size_t)E * N);
    int bad = 0;
    for (int n = 0; n < N; n++)
        bad += memcmp(f + (size_t)n * E, g + (size_t)n * E, sizeof(float) * E) != 0;
    CHECK(bad == 0, "uint8 path: %d of %d samples differ from the float path", bad, N);
    free(u), free(f), free(g), free(idx);
}

int main(void)
{
    crop_flip();
    bytes();
    normalise();
    holdout();
    return check_report("test_augment");
}

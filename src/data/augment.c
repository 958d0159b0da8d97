/*
 * augment.c - random crop, horizontal flip and normalisation of samples. See augment.h.
 *
 * Dimension letters: C channels, H height, W width of one sample.
 */
#include "data/augment.h"

#include "core/hash.h"

#include <stddef.h>
#include <string.h>

void ddp_augment_init(struct ddp_augment *a, const struct ddp_job *job, int nd, const int64_t *dims,
                      int train)
{
    memset(a, 0, sizeof *a);
    a->C = nd == 3 ? (int)dims[0] : 1;
    a->H = nd == 3 ? (int)dims[1] : 1;
    a->W = nd == 3 ? (int)dims[2] : (int)dims[0];
    a->seed = (uint64_t)job->seed;
    if (train && nd == 3) {
        a->crop_pad = job->crop_pad;
        a->hflip = job->hflip;
    }
    if (job->norm_channels == a->C) {
        a->nchan = job->norm_channels;
        memcpy(a->mean, job->norm_mean, sizeof a->mean);
        memcpy(a->std, job->norm_std, sizeof a->std);
    }
}

int ddp_augment_active(const struct ddp_augment *a)
{
    return a->crop_pad > 0 || a->hflip || a->nchan > 0;
}

/* The random crop (top, left of the zero-padded image) and flip of sample idx in epoch; returns
 * 0 when they leave the sample as it is. */
static int choose(const struct ddp_augment *a, int64_t idx, int64_t epoch, int *top, int *left,
                  int *flip)
{
    if (a->crop_pad <= 0 && !a->hflip)
        return 0;
    uint64_t r = ddp_mix64(ddp_mix64(a->seed ^ 0x6a09e667f3bcc909ULL) ^
                           ddp_mix64((uint64_t)epoch + 1) ^ (uint64_t)idx * DDP_SPLITMIX64_GAMMA);
    const uint64_t span = (uint64_t)(2 * a->crop_pad + 1);
    *top = a->crop_pad ? (int)((r & 0xffffff) % span) : 0;
    *left = a->crop_pad ? (int)(((r >> 24) & 0xffffff) % span) : 0;
    *flip = a->hflip ? (int)((r >> 63) & 1) : 0;
    return *top != a->crop_pad || *left != a->crop_pad || *flip;
}

/* Element (c, i, j) of the cropped, flipped sample: its index in the unpadded sample, or -1 where
 * it falls in the zero padding. */
static inline ptrdiff_t source_of(const struct ddp_augment *a, int c, int i, int j, int top,
                                  int left, int flip)
{
    const int H = a->H, W = a->W, P = a->crop_pad;
    const int si = i + top - P, sj = (flip ? W - 1 - j : j) + left - P;
    return si >= 0 && si < H && sj >= 0 && sj < W ? ((ptrdiff_t)c * H + si) * W + sj : -1;
}

/* One sample x (C, H, W): crop at (top, left) of the zero-padded image, flip, into out. */
static void crop_flip(const struct ddp_augment *a, const float *x, float *out, int top, int left,
                      int flip)
{
    for (int c = 0; c < a->C; c++)
        for (int i = 0; i < a->H; i++) {
            float *o = out + ((size_t)c * a->H + i) * a->W;
            for (int j = 0; j < a->W; j++) {
                const ptrdiff_t k = source_of(a, c, i, j, top, left, flip);
                o[j] = k >= 0 ? x[k] : 0.0f;
            }
        }
}

/* The same on bytes (uint8 samples; 0 pads, which converts to 0.0f). */
static void crop_flip_u8(const struct ddp_augment *a, const uint8_t *x, uint8_t *out, int top,
                         int left, int flip)
{
    for (int c = 0; c < a->C; c++)
        for (int i = 0; i < a->H; i++) {
            uint8_t *o = out + ((size_t)c * a->H + i) * a->W;
            for (int j = 0; j < a->W; j++) {
                const ptrdiff_t k = source_of(a, c, i, j, top, left, flip);
                o[j] = k >= 0 ? x[k] : 0;
            }
        }
}

void ddp_augment_apply(const struct ddp_augment *a, float *x, int n, const int64_t *idx,
                       int64_t epoch, float *scratch)
{
    const size_t S = (size_t)a->H * a->W, elems = (size_t)a->C * S;
    for (int b = 0; b < n; b++) {
        float *s = x + (size_t)b * elems;
        int top, left, flip;
        if (choose(a, idx[b], epoch, &top, &left, &flip)) {
            crop_flip(a, s, scratch, top, left, flip);
            memcpy(s, scratch, elems * sizeof *s);
        }
        for (int c = 0; c < a->nchan; c++) {
            float *p = s + (size_t)c * S, m = a->mean[c], sd = a->std[c];
            for (size_t i = 0; i < S; i++)
                p[i] = (p[i] - m) / sd;
        }
    }
}

void ddp_augment_apply_u8(const struct ddp_augment *a, uint8_t *x, int n, const int64_t *idx,
                          int64_t epoch, uint8_t *scratch)
{
    const size_t elems = (size_t)a->C * a->H * a->W;
    for (int b = 0; b < n; b++) {
        uint8_t *s = x + (size_t)b * elems;
        int top, left, flip;
        if (choose(a, idx[b], epoch, &top, &left, &flip)) {
            crop_flip_u8(a, s, scratch, top, left, flip);
            memcpy(s, scratch, elems);
        }
    }
}

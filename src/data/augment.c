/*
 * augment.c - random crop, horizontal flip and normalisation of samples. See augment.h.
 *
 * Dimension letters: C channels, H height, W width of one sample.
 */
#include "data/augment.h"

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

/* splitmix64's finaliser: a well-mixed 64-bit word from a key. */
static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* One sample x (C, H, W): crop at (top, left) of the zero-padded image, flip, into out. */
static void crop_flip(const struct ddp_augment *a, const float *x, float *out, int top, int left,
                      int flip)
{
    const int H = a->H, W = a->W, P = a->crop_pad;
    for (int c = 0; c < a->C; c++)
        for (int i = 0; i < H; i++) {
            const int si = i + top - P; /* row in the unpadded image */
            float *o = out + ((size_t)c * H + i) * W;
            for (int j = 0; j < W; j++) {
                const int sj = (flip ? W - 1 - j : j) + left - P;
                o[j] = si >= 0 && si < H && sj >= 0 && sj < W ? x[((size_t)c * H + si) * W + sj]
                                                              : 0.0f;
            }
        }
}

void ddp_augment_apply(const struct ddp_augment *a, float *x, int n, const int64_t *idx,
                       int64_t epoch, float *scratch)
{
    const size_t S = (size_t)a->H * a->W, elems = (size_t)a->C * S;
    for (int b = 0; b < n; b++) {
        float *s = x + (size_t)b * elems;
        if (a->crop_pad > 0 || a->hflip) {
            uint64_t r = mix(mix(a->seed ^ 0x6a09e667f3bcc909ULL) ^ mix((uint64_t)epoch + 1) ^
                             (uint64_t)idx[b] * 0x9e3779b97f4a7c15ULL);
            const uint64_t span = (uint64_t)(2 * a->crop_pad + 1);
            int top = a->crop_pad ? (int)((r & 0xffffff) % span) : 0;
            int left = a->crop_pad ? (int)(((r >> 24) & 0xffffff) % span) : 0;
            int flip = a->hflip ? (int)((r >> 63) & 1) : 0;
            if (top != a->crop_pad || left != a->crop_pad || flip) {
                crop_flip(a, s, scratch, top, left, flip);
                memcpy(s, scratch, elems * sizeof *s);
            }
        }
        for (int c = 0; c < a->nchan; c++) {
            float *p = s + (size_t)c * S, m = a->mean[c], sd = a->std[c];
            for (size_t i = 0; i < S; i++)
                p[i] = (p[i] - m) / sd;
        }
    }
}

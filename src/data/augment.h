/*
 * augment.h - per-sample transforms that the loader thread applies after reading a batch:
 * torchvision's RandomCrop(size, padding=P) (zero padding), RandomHorizontalFlip() and
 * Normalize(mean, std), in that order (docs/data.md, Augmentation).
 *
 * Dimension letters: C channels, H height, W width of one sample (C, H, W); flat samples (D)
 * are one channel of D elements and take only normalisation.
 *
 * The random choices of a sample are a hash of (seed, epoch, sample index): no generator
 * state, so a resumed run and any world size draw the same crops and flips for the same
 * sample in the same epoch. Evaluation uses a transform with crop and flip off.
 */
#ifndef DDP_AUGMENT_H
#define DDP_AUGMENT_H

#include <stdint.h>

#include "job/config.h"

struct ddp_augment {
    int crop_pad; /* 0: no random crop */
    int hflip;    /* flip with probability 0.5 */
    int nchan;    /* 0: no normalisation; else C */
    float mean[DDP_NORM_CHANNELS_MAX], std[DDP_NORM_CHANNELS_MAX];
    int C, H, W; /* sample shape; H = 1, W = D for flat samples */
    uint64_t seed;
};

/* The job's transform for samples of shape dims (nd = 1 or 3); train = 0 keeps only the
 * normalisation. */
void ddp_augment_init(struct ddp_augment *a, const struct ddp_job *job, int nd, const int64_t *dims,
                      int train);
/* Anything to do? */
int ddp_augment_active(const struct ddp_augment *a);
/* Transform the n samples x (n, C*H*W) in place; idx are their indices in the split (the
 * random choices' key), scratch holds C*H*W floats. */
void ddp_augment_apply(const struct ddp_augment *a, float *x, int n, const int64_t *idx,
                       int64_t epoch, float *scratch);

/* The crops and flips of ddp_augment_apply on uint8 samples x (n, C*H*W) as stored, in place
 * (scratch: C*H*W bytes); the normalisation is left to whoever converts them to float (the
 * CUDA backend's u8_to_float: (v / 255.0f - mean) / std, as the float path). Converting the
 * result gives the float path's bits: padding is 0, which converts to 0.0f. */
void ddp_augment_apply_u8(const struct ddp_augment *a, uint8_t *x, int n, const int64_t *idx,
                          int64_t epoch, uint8_t *scratch);

#endif

/*
 * step.h - the one training step of ddptrain: zero the gradients, forward, cross-entropy,
 * backward with the buckets' all-reduce started from the per-layer hook, wait for the
 * buckets, optimiser step. The trainer (train.c) and the validator's golden run
 * (validate/golden.c) both call ddp_step_run; nothing else spells the sequence out.
 *
 * Dimension letters: B batch (n here), K classes.
 * What it leaves to others: the data (the caller passes x and y in backend memory), the
 * learning rate schedule (optim.h), logging and checkpoints (the trainer).
 *
 * Recipes ([train] accumulate, label_smoothing, [optim] clip_grad_norm; docs/training.md):
 * with accumulate = K an optimiser step is K micro-batches (ddp_step_micro): the first zeroes
 * the gradients, each adds its loss / K's gradient (backward adds into the weight gradients),
 * and only the last reports layers to the buckets (all-reduce, as DDP's no_sync on the
 * others), clips and steps. Clipping scales the averaged gradient by
 * min(1, max_norm / (norm + 1e-6)), norm its global L2 norm, as clip_grad_norm_ does (the
 * optimiser, [optim] clip_grad_norm: ddp_optim_step).
 */
#ifndef DDP_STEP_H
#define DDP_STEP_H

#include <stdint.h>

#include "nn/model.h"
#include "train/grad_sync.h"
#include "train/optim.h"

struct ddp_step {
    struct ddp_model *model;
    struct ddp_sync *sync;
    struct ddp_optim *optim;
    /* Per-layer backward hook; NULL: ddp_sync_layer_done on sync. A hook of its own must call
     * ddp_sync_layer_done(sync, layer) itself (the golden run watches local gradients). */
    void (*layer_done)(void *ctx, int layer);
    void *layer_ctx;
    /* Called when the loss is not finite, after the forward and before any gradient or
     * update (the trainer names the culprit and stops there); NULL: the step goes on. */
    void (*nonfinite)(void *ctx, const float *x, int n, uint64_t noise, double loss);
    void *nonfinite_ctx;
    /* NULL, or where each step adds the batch's correct predictions (counted by the loss
     * kernel during forward: free). */
    int64_t *correct;
    /* NULL, or (backends with xent_acc) backend memory of 2 doubles where the step adds the
     * batch's loss sum and correct count on the device: the host then never waits for the
     * loss, ddp_step_run returns 0, `correct` and `nonfinite` are not used, and the caller
     * reads acc when it logs (a non-finite loss shows there). */
    double *acc;
    int accumulate;        /* K micro-batches per optimiser step; 0 or 1: none */
    float label_smoothing; /* nn.CrossEntropyLoss(label_smoothing=) */
    /* NULL, or device work the batch needs before the forward (the trainer's conversion of a
     * uint8 batch), run first in every micro-batch: inside the step, so a CUDA graph
     * captures it with the step and a replay runs it (train/graph.h). */
    void (*prologue)(void *ctx);
    void *prologue_ctx;
};

/* One step on the batch x (B, in_elems), labels y (B), both in backend memory; noise seeds
 * dropout. Leaves the averaged update applied to the parameters and returns the summed
 * (not averaged) loss of the batch on this rank. */
double ddp_step_run(const struct ddp_step *s, const float *x, const int32_t *y, int n,
                    uint64_t noise, double lr);

/* One micro-batch of an accumulating step: first zeroes the gradients, last all-reduces,
 * clips and applies the update (first = last = 1 is ddp_step_run). The gradient is that of
 * the batch's mean loss divided by s->accumulate. Returns the summed loss, as above. */
double ddp_step_micro(const struct ddp_step *s, const float *x, const int32_t *y, int n,
                      uint64_t noise, double lr, int first, int last);

/* Fault injection for tests: flip bit 3 of the first parameter (params in backend memory). */
void ddp_step_flip_bit(const struct ddp_backend *be, float *params);

#endif

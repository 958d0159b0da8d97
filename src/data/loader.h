/*
 * loader.h - batches for one rank, read ahead by a prefetch thread.
 *
 * The loader walks a sampler's batches for one epoch, starting at any step (resume), and keeps
 * 3 to 16 batches read ahead (as many as fit in DDP_LOADER_BUDGET bytes): the thread reads the
 * images by hyperslab (or from the in-memory cache, h5data.h), converts uint8 to float (or keeps
 * the bytes for a device that converts them, keep_u8), and copies the labels. The trainer consumes them in order. The prefetch thread is the only thread
 * that reads the split while an epoch runs. It does no arithmetic beyond the conversion, so it
 * does not compete with the compute thread pool.
 *
 * Buffers returned by ddp_loader_next stay valid until the next call.
 */
#ifndef DDP_LOADER_H
#define DDP_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "data/augment.h"
#include "data/h5data.h"
#include "data/sampler.h"

#define DDP_LOADER_MIN_SLOTS 3
#define DDP_LOADER_MAX_SLOTS 16
#define DDP_LOADER_BUDGET (32.0 * 1024 * 1024) /* bytes of read-ahead batches, at most */

typedef struct ddp_loader ddp_loader;

/* The loader borrows split and sampler; both must outlive it. */
ddp_loader *ddp_loader_create(ddp_h5split *split, struct ddp_sampler *sampler, int64_t batch);

/* Batches read asynchronously by a device (the CUDA backend's upload_batch): the slots' images
 * and labels in memory from alloc (page-locked), freed with free_fn; a slot handed to
 * ddp_loader_hold is refilled only once done(ctx) (non-blocking) reaches its ticket, and when
 * the reader would otherwise wait for a free slot, wait(ctx, ticket) (bounded; may exit) is
 * called first. Every function is called on the consumer's thread except none: the prefetch
 * thread only fills slots. */
struct ddp_loader_device {
    void *(*alloc)(size_t bytes);
    void (*free_fn)(void *p);
    int64_t (*done)(void *ctx);
    void (*wait)(void *ctx, int64_t ticket);
    void *ctx;
    /* 1: where the split stores uint8, the slots hold the images as stored (one byte per
     * element; crops and flips on the bytes, no normalisation) for a device that converts them
     * (backend.h u8_to_float): ddp_loader_next then gives x = NULL and ddp_loader_bytes the
     * images. */
    int keep_u8;
};
ddp_loader *ddp_loader_create_device(ddp_h5split *split, struct ddp_sampler *sampler, int64_t batch,
                                     const struct ddp_loader_device *dev);
/* The batch last returned by ddp_loader_next is being read by the device until done() reaches
 * ticket: its slot is not refilled before. */
void ddp_loader_hold(ddp_loader *ld, int64_t ticket);
void ddp_loader_destroy(ddp_loader *ld); /* stops the thread; accepts NULL */

/* Transform every batch after reading it (augment.h; copied), on the prefetch thread.
 * Call before the first ddp_loader_start. */
void ddp_loader_set_augment(ddp_loader *ld, const struct ddp_augment *aug);

/* Start reading epoch `epoch` from step `first_step` (sets the sampler's epoch). */
void ddp_loader_start(ddp_loader *ld, int64_t epoch, int64_t first_step);
/* Stop the current epoch early (e.g. max_steps reached). */
void ddp_loader_stop(ddp_loader *ld);

/* Next batch: returns its size (> 0), 0 at the end of the epoch, -1 on a read error (one line
 * in err naming the file). x is (n, sample_elems), y is (n). */
int ddp_loader_next(ddp_loader *ld, const float **x, const int32_t **y, char *err, size_t errlen);

/* Sample indices of the batch last returned by ddp_loader_next. */
const int64_t *ddp_loader_indices(const ddp_loader *ld);

/* Whether the slots hold uint8 images (ddp_loader_device.keep_u8 on a uint8 split), and then
 * the images of the batch last returned by ddp_loader_next: (n, sample_elems) bytes as stored,
 * cropped and flipped, not normalised (NULL otherwise). */
int ddp_loader_u8(const ddp_loader *ld);
const uint8_t *ddp_loader_bytes(const ddp_loader *ld);

#endif

/*
 * loader.c - the prefetch thread and its slot ring. See loader.h.
 *
 * Hand-off. Step s lives in slot s % nslots. Two counters carry the whole protocol:
 * `filled` (steps [first, filled) are in their slots) and `released` (the consumer is done with
 * steps before it). The producer may fill step f while f - released < nslots; the consumer may
 * take step t while t < filled. Both are atomics, so a consumer whose batch is ready (the
 * normal case) takes it without a lock or a system call. A side that must wait sleeps on the
 * condition variable after saying so in its `*_asleep` flag; the other side wakes it only then.
 * The consumer wakes a sleeping producer once half the slots are free (or when it must wait
 * itself), so the thread reads batches in bursts instead of waking every step: a wake-up is a
 * system call on the trainer's path (several microseconds under a hypervisor, where waking a
 * thread on another core is an inter-processor interrupt), worth avoiding when a step of a
 * small model takes 20 us. Slots: as many as fit in DDP_LOADER_BUDGET bytes, from 3 to 16.
 *
 * Scheduling. The thread runs SCHED_BATCH: when it wakes it does not preempt a compute thread
 * in the middle of a parallel kernel (which would stall the kernel's other threads); it runs
 * in the next gap or time slice. Its work is small (a few microseconds per sample).
 */
#include "data/loader.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

struct slot {
    void *x; /* float, or uint8 as stored (u8) */
    int32_t *y;
    int64_t *idx; /* sample indices of the batch */
    int n;        /* samples; 0 = end of epoch; -1 = error */
};

struct ddp_loader {
    ddp_h5split *split;
    struct ddp_sampler *sampler;
    int64_t batch, elems;
    const int64_t *current; /* indices of the batch last returned */
    struct slot slots[DDP_LOADER_MAX_SLOTS];
    int nslots, wake_free; /* slots in use; free slots at which the producer is woken */
    pthread_t thread;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int stop;
    atomic_llong filled;   /* steps before this are in their slots */
    atomic_llong released; /* the consumer is done with steps before this */
    atomic_int producer_asleep, consumer_asleep;
    int64_t next_take, steps;
    char err[DDP_ERR_LEN];
    /* device reads (ddp_loader_create_device): has_dev, and per slot the ticket the device's
     * done() must reach before the slot may be refilled (0: none) */
    int has_dev;
    struct ddp_loader_device dev;
    int64_t tickets[DDP_LOADER_MAX_SLOTS];
    struct ddp_augment aug; /* applied when active (ddp_loader_set_augment) */
    float *aug_scratch;     /* (elems) */
    int u8;                 /* slots hold uint8 images as stored (ddp_loader_device.keep_u8) */
    const void *current_x;  /* images of the batch last returned */
};

/* Sleep until ready(ld) holds or the loader stops; *asleep tells the other side to wake us. */
static void wait_for(ddp_loader *ld, atomic_int *asleep, int (*ready)(ddp_loader *))
{
    pthread_mutex_lock(&ld->mu);
    atomic_store(asleep, 1); /* seq_cst: the other side's counter update is then seen below, or
                              * it sees this flag and signals (after taking the mutex) */
    while (!ready(ld) && !atomic_load(&ld->stop))
        pthread_cond_wait(&ld->cv, &ld->mu);
    atomic_store(asleep, 0);
    pthread_mutex_unlock(&ld->mu);
}

static void wake(ddp_loader *ld)
{
    pthread_mutex_lock(&ld->mu);
    pthread_cond_broadcast(&ld->cv);
    pthread_mutex_unlock(&ld->mu);
}

static int slot_free(ddp_loader *ld)
{
    return atomic_load(&ld->filled) - atomic_load(&ld->released) < ld->nslots;
}

static int batch_ready(ddp_loader *ld)
{
    return ld->next_take < atomic_load(&ld->filled);
}

/* The images of slot sl's n samples (sl->idx), augmented; 0 or -1 with ld->err. */
static int fill_images(ddp_loader *ld, struct slot *sl, int n)
{
    const int64_t epoch = ld->sampler->epoch;
    if (ld->u8) {
        if (ddp_h5split_read_raw(ld->split, sl->idx, n, sl->x, ld->err, sizeof ld->err) != 0)
            return -1;
        if (n > 0 && ld->aug_scratch)
            ddp_augment_apply_u8(&ld->aug, sl->x, n, sl->idx, epoch, (uint8_t *)ld->aug_scratch);
        return 0;
    }
    if (ddp_h5split_read(ld->split, sl->idx, n, sl->x, ld->err, sizeof ld->err) != 0)
        return -1;
    if (n > 0 && ld->aug_scratch)
        ddp_augment_apply(&ld->aug, sl->x, n, sl->idx, epoch, ld->aug_scratch);
    return 0;
}

/* Thread body: fill slots in step order until the epoch ends, an error, or stop. */
static void *prefetch(void *arg)
{
    ddp_loader *ld = arg;
    struct sched_param sp = {0};
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp); /* best effort */
    const int32_t *labels = ddp_h5split_labels(ld->split);
    for (;;) {
        if (!slot_free(ld))
            wait_for(ld, &ld->producer_asleep, slot_free);
        if (atomic_load(&ld->stop))
            return NULL;
        int64_t step = atomic_load_explicit(&ld->filled, memory_order_relaxed);
        struct slot *sl = &ld->slots[step % ld->nslots];
        int n = 0;
        if (step < ld->steps) {
            n = ddp_sampler_batch(ld->sampler, step, ld->batch, sl->idx);
            if (fill_images(ld, sl, n) != 0)
                n = -1;
            else
                for (int i = 0; i < n; i++)
                    sl->y[i] = labels[sl->idx[i]];
        }
        sl->n = n;
        atomic_store(&ld->filled, step + 1); /* publishes the slot */
        if (atomic_load(&ld->consumer_asleep))
            wake(ld);
        if (n <= 0)
            return NULL; /* end of epoch or error: the consumer sees it in the slot */
    }
}

ddp_loader *ddp_loader_create(ddp_h5split *split, struct ddp_sampler *sampler, int64_t batch)
{
    return ddp_loader_create_device(split, sampler, batch, NULL);
}

ddp_loader *ddp_loader_create_device(ddp_h5split *split, struct ddp_sampler *sampler, int64_t batch,
                                     const struct ddp_loader_device *dev)
{
    ddp_loader *ld = ddp_calloc(1, sizeof *ld);
    if (dev) {
        ld->has_dev = 1;
        ld->dev = *dev;
    }
    ld->split = split;
    ld->sampler = sampler;
    ld->batch = batch;
    ld->elems = ddp_h5split_sample_elems(split);
    ld->u8 = dev && dev->keep_u8 && ddp_h5split_dtype(split) == DDP_H5DTYPE_UINT8;
    const size_t esz = ld->u8 ? 1 : sizeof(float);
    double slot_bytes = (double)batch * (double)ld->elems * (double)esz;
    double fit = DDP_LOADER_BUDGET / (slot_bytes > 1 ? slot_bytes : 1);
    ld->nslots = fit >= DDP_LOADER_MAX_SLOTS   ? DDP_LOADER_MAX_SLOTS
                 : fit <= DDP_LOADER_MIN_SLOTS ? DDP_LOADER_MIN_SLOTS
                                               : (int)fit;
    ld->wake_free = ld->nslots / 2 > 2 ? ld->nslots / 2 : 2;
    for (int i = 0; i < ld->nslots; i++) {
        const size_t xb = esz * (size_t)(batch * ld->elems);
        const size_t yb = sizeof(int32_t) * (size_t)batch;
        /* separate allocations: a device reads x and y, the host may write other memory */
        ld->slots[i].x = ld->has_dev ? ld->dev.alloc(xb) : ddp_malloc_aligned(xb);
        ld->slots[i].y = ld->has_dev ? ld->dev.alloc(yb) : ddp_malloc(yb);
        ld->slots[i].idx = ddp_malloc(sizeof(int64_t) * (size_t)batch);
    }
    pthread_mutex_init(&ld->mu, NULL);
    pthread_cond_init(&ld->cv, NULL);
    return ld;
}

/* The steps before next_take that may be refilled, in order: those the device is done reading
 * (asks done() once, and only when a held slot is in the way). Returns the new `released`. */
static int64_t releasable(ddp_loader *ld)
{
    int64_t r = atomic_load(&ld->released), done = -1;
    for (; r < ld->next_take; r++) {
        int64_t *t = &ld->tickets[r % ld->nslots];
        if (*t > 0 && done < 0)
            done = ld->dev.done(ld->dev.ctx);
        if (*t > done && *t > 0)
            break;
        *t = 0;
    }
    return r;
}

/* Wait until the device has read every held slot (before the slots are refilled anew). */
static void drain_device(ddp_loader *ld)
{
    int64_t last = 0;
    for (int i = 0; i < ld->nslots; i++)
        last = ld->tickets[i] > last ? ld->tickets[i] : last;
    if (last > 0 && ld->dev.done(ld->dev.ctx) < last)
        ld->dev.wait(ld->dev.ctx, last);
    memset(ld->tickets, 0, sizeof ld->tickets);
}

void ddp_loader_hold(ddp_loader *ld, int64_t ticket)
{
    if (ld->has_dev && ld->next_take > 0)
        ld->tickets[(ld->next_take - 1) % ld->nslots] = ticket;
}

void ddp_loader_set_augment(ddp_loader *ld, const struct ddp_augment *aug)
{
    ld->aug = *aug;
    if (ddp_augment_active(aug) && !ld->aug_scratch)
        ld->aug_scratch = ddp_malloc(sizeof(float) * (size_t)ld->elems);
}

void ddp_loader_stop(ddp_loader *ld)
{
    if (!ld->running)
        return;
    atomic_store(&ld->stop, 1);
    wake(ld);
    pthread_join(ld->thread, NULL);
    ld->running = 0;
    if (ld->has_dev)
        drain_device(ld);
}

void ddp_loader_start(ddp_loader *ld, int64_t epoch, int64_t first_step)
{
    ddp_loader_stop(ld);
    if (ld->sampler->epoch != epoch)
        ddp_sampler_set_epoch(ld->sampler, epoch);
    ld->steps = ddp_sampler_steps(ld->sampler, ld->batch);
    ld->next_take = first_step;
    atomic_store(&ld->filled, first_step);
    atomic_store(&ld->released, first_step);
    atomic_store(&ld->producer_asleep, 0);
    atomic_store(&ld->consumer_asleep, 0);
    atomic_store(&ld->stop, 0);
    if (pthread_create(&ld->thread, NULL, prefetch, ld) != 0)
        ddp_die("cannot start the prefetch thread");
    ld->running = 1;
}

int ddp_loader_next(ddp_loader *ld, const float **x, const int32_t **y, char *err, size_t errlen)
{
    if (!ld->running)
        return 0;
    /* hand the previous slots back (every step before next_take the device is done reading) */
    if (!ld->has_dev) {
        atomic_store(&ld->released, ld->next_take);
    } else {
        atomic_store(&ld->released, releasable(ld));
        const int64_t r = atomic_load(&ld->released);
        if (!batch_ready(ld) && atomic_load(&ld->filled) - r >= ld->nslots) {
            /* every slot is filled or held by the device: wait for the oldest held one */
            ld->dev.wait(ld->dev.ctx, ld->tickets[r % ld->nslots]);
            atomic_store(&ld->released, releasable(ld));
        }
    }
    int ready = batch_ready(ld);
    const int64_t in_use = atomic_load(&ld->filled) - atomic_load(&ld->released);
    if (atomic_load(&ld->producer_asleep) && (!ready || ld->nslots - in_use >= ld->wake_free))
        wake(ld);
    if (!ready)
        wait_for(ld, &ld->consumer_asleep, batch_ready);
    struct slot *sl = &ld->slots[ld->next_take % ld->nslots];
    int n = sl->n; /* published by the acquire load of filled in batch_ready */
    if (n <= 0) {
        ddp_loader_stop(ld);
        if (n < 0)
            return ddp_err(err, errlen, "%s", ld->err);
        return 0;
    }
    ld->next_take++;
    ld->current_x = sl->x;
    *x = ld->u8 ? NULL : sl->x;
    *y = sl->y;
    ld->current = sl->idx;
    return n;
}

const int64_t *ddp_loader_indices(const ddp_loader *ld)
{
    return ld->current;
}

int ddp_loader_u8(const ddp_loader *ld)
{
    return ld->u8;
}

const uint8_t *ddp_loader_bytes(const ddp_loader *ld)
{
    return ld->u8 ? ld->current_x : NULL;
}

void ddp_loader_destroy(ddp_loader *ld)
{
    if (!ld)
        return;
    ddp_loader_stop(ld);
    for (int i = 0; i < ld->nslots; i++) {
        if (ld->has_dev) {
            ld->dev.free_fn(ld->slots[i].x);
            ld->dev.free_fn(ld->slots[i].y);
        } else {
            free(ld->slots[i].x);
            free(ld->slots[i].y);
        }
        free(ld->slots[i].idx);
    }
    free(ld->aug_scratch);
    pthread_mutex_destroy(&ld->mu);
    pthread_cond_destroy(&ld->cv);
    free(ld);
}

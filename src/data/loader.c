/* loader.c - the prefetch thread and its slot ring. See loader.h. */
#include "data/loader.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct slot {
    float *x;
    int32_t *y;
    int64_t *idx; /* sample indices of the batch */
    int n;        /* samples; 0 = end of epoch; -1 = error */
    int64_t step;
    int ready;
};

struct ddp_loader {
    ddp_h5split *split;
    struct ddp_sampler *sampler;
    int64_t batch, elems;
    const int64_t *current; /* indices of the batch last returned */
    struct slot slots[DDP_LOADER_SLOTS];
    pthread_t thread;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    int64_t next_fill, next_take, steps;
    char err[DDP_ERR_LEN];
};

/* Thread body: fill slots in step order until the epoch ends, an error, or stop. */
static void *prefetch(void *arg)
{
    ddp_loader *ld = arg;
    const int32_t *labels = ddp_h5split_labels(ld->split);
    for (;;) {
        pthread_mutex_lock(&ld->mu);
        int64_t step = ld->next_fill;
        struct slot *sl = &ld->slots[step % DDP_LOADER_SLOTS];
        while (!ld->stop && sl->ready)
            pthread_cond_wait(&ld->cv, &ld->mu);
        if (ld->stop) {
            pthread_mutex_unlock(&ld->mu);
            return NULL;
        }
        pthread_mutex_unlock(&ld->mu);

        int n = 0;
        if (step < ld->steps) {
            n = ddp_sampler_batch(ld->sampler, step, ld->batch, sl->idx);
            if (ddp_h5split_read(ld->split, sl->idx, n, sl->x, ld->err, sizeof ld->err) != 0)
                n = -1;
            else
                for (int i = 0; i < n; i++)
                    sl->y[i] = labels[sl->idx[i]];
        }
        pthread_mutex_lock(&ld->mu);
        sl->n = n;
        sl->step = step;
        sl->ready = 1;
        ld->next_fill = step + 1;
        pthread_cond_broadcast(&ld->cv);
        pthread_mutex_unlock(&ld->mu);
        if (n <= 0)
            return NULL; /* end of epoch or error: the consumer sees it in the slot */
    }
}

ddp_loader *ddp_loader_create(ddp_h5split *split, struct ddp_sampler *sampler, int64_t batch)
{
    ddp_loader *ld = ddp_calloc(1, sizeof *ld);
    ld->split = split;
    ld->sampler = sampler;
    ld->batch = batch;
    ld->elems = ddp_h5split_sample_elems(split);
    for (int i = 0; i < DDP_LOADER_SLOTS; i++) {
        ld->slots[i].x = ddp_malloc_aligned(sizeof(float) * (size_t)(batch * ld->elems));
        ld->slots[i].y = ddp_malloc(sizeof(int32_t) * (size_t)batch);
        ld->slots[i].idx = ddp_malloc(sizeof(int64_t) * (size_t)batch);
    }
    pthread_mutex_init(&ld->mu, NULL);
    pthread_cond_init(&ld->cv, NULL);
    return ld;
}

void ddp_loader_stop(ddp_loader *ld)
{
    if (!ld->running)
        return;
    pthread_mutex_lock(&ld->mu);
    ld->stop = 1;
    pthread_cond_broadcast(&ld->cv);
    pthread_mutex_unlock(&ld->mu);
    pthread_join(ld->thread, NULL);
    ld->running = 0;
}

void ddp_loader_start(ddp_loader *ld, int64_t epoch, int64_t first_step)
{
    ddp_loader_stop(ld);
    if (ld->sampler->epoch != epoch)
        ddp_sampler_set_epoch(ld->sampler, epoch);
    ld->steps = ddp_sampler_steps(ld->sampler, ld->batch);
    ld->next_fill = ld->next_take = first_step;
    ld->stop = 0;
    for (int i = 0; i < DDP_LOADER_SLOTS; i++)
        ld->slots[i].ready = 0;
    if (pthread_create(&ld->thread, NULL, prefetch, ld) != 0)
        ddp_die("cannot start the prefetch thread");
    ld->running = 1;
}

int ddp_loader_next(ddp_loader *ld, const float **x, const int32_t **y, char *err, size_t errlen)
{
    if (!ld->running)
        return 0;
    pthread_mutex_lock(&ld->mu);
    if (ld->next_take > 0) { /* hand the previous slot back to the thread */
        struct slot *prev = &ld->slots[(ld->next_take - 1) % DDP_LOADER_SLOTS];
        if (prev->ready && prev->step == ld->next_take - 1) {
            prev->ready = 0;
            pthread_cond_broadcast(&ld->cv);
        }
    }
    struct slot *sl = &ld->slots[ld->next_take % DDP_LOADER_SLOTS];
    while (!(sl->ready && sl->step == ld->next_take))
        pthread_cond_wait(&ld->cv, &ld->mu);
    int n = sl->n;
    pthread_mutex_unlock(&ld->mu);
    if (n <= 0) {
        ddp_loader_stop(ld);
        if (n < 0)
            return ddp_err(err, errlen, "%s", ld->err);
        return 0;
    }
    ld->next_take++;
    *x = sl->x;
    *y = sl->y;
    ld->current = sl->idx;
    return n;
}

const int64_t *ddp_loader_indices(const ddp_loader *ld) { return ld->current; }

void ddp_loader_destroy(ddp_loader *ld)
{
    if (!ld)
        return;
    ddp_loader_stop(ld);
    for (int i = 0; i < DDP_LOADER_SLOTS; i++) {
        free(ld->slots[i].x);
        free(ld->slots[i].y);
        free(ld->slots[i].idx);
    }
    pthread_mutex_destroy(&ld->mu);
    pthread_cond_destroy(&ld->cv);
    free(ld);
}

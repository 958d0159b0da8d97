/* grad_sync.c - buckets, overlap and averaging. See grad_sync.h. */
#include "train/grad_sync.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/util.h"

static void trace(struct ddp_sync *s, enum ddp_trace_kind k, int id)
{
    if (s->trace_on && s->ntrace < (int)(sizeof s->trace / sizeof s->trace[0]))
        s->trace[s->ntrace++] = (struct ddp_trace_event){k, id};
}

void ddp_sync_init(struct ddp_sync *s, ddp_comm *comm, struct ddp_model *m, double bucket_mb)
{
    memset(s, 0, sizeof *s);
    s->comm = comm;
    s->m = m;
    s->world_size = ddp_comm_size(comm);
    s->layer_bucket = ddp_malloc(sizeof(int) * (size_t)m->nlayers);
    s->buckets = ddp_calloc((size_t)m->nlayers + 1, sizeof *s->buckets);
    size_t cap_bytes = (size_t)(bucket_mb * 1024 * 1024);
    size_t first_cap = cap_bytes < DDP_FIRST_BUCKET_BYTES ? cap_bytes : DDP_FIRST_BUCKET_BYTES;
    if (first_cap < sizeof(float))
        first_cap = sizeof(float);
    struct ddp_bucket *cur = NULL;
    for (int i = m->nlayers - 1; i >= 0; i--) {
        struct ddp_layer *l = &m->layers[i];
        s->layer_bucket[i] = -1;
        if (l->w_n == 0)
            continue;
        if (!cur) {
            cur = &s->buckets[s->nbuckets++];
            cur->off = l->w_off;
            cur->hi = i;
        }
        cur->n += l->w_n + l->b_n;
        cur->lo = i;
        cur->nlayers++;
        s->layer_bucket[i] = (int)(cur - s->buckets);
        size_t cap = s->nbuckets == 1 ? first_cap : cap_bytes;
        if (cur->n * sizeof(float) >= cap)
            cur = NULL;
    }
    if (s->world_size > 1 && m->be->stall_mark)
        s->stall = m->be->alloc(2 * sizeof(uint64_t));
}

void ddp_sync_free(struct ddp_sync *s)
{
    if (!s)
        return;
    DDP_FREE(s->layer_bucket);
    DDP_FREE(s->buckets);
    if (s->stall)
        s->m->be->free(s->stall);
    s->stall = NULL;
}

void ddp_sync_broadcast_state(struct ddp_sync *s)
{
    if (s->world_size == 1)
        return;
    struct ddp_model *m = s->m;
    ddp_comm_broadcast(s->comm, m->params, sizeof(float) * m->nparams, 0);
    if (m->nbuffers)
        ddp_comm_broadcast(s->comm, m->buffers, sizeof(float) * m->nbuffers, 0);
}

int ddp_sync_check_fingerprint(struct ddp_sync *s, char *err, size_t errlen)
{
    if (s->world_size == 1)
        return 0;
    uint64_t mine[2] = {s->m->fingerprint, (uint64_t)s->m->nparams};
    uint64_t *all = ddp_malloc(sizeof mine * (size_t)s->world_size);
    ddp_comm_allgather(s->comm, mine, all, sizeof mine);
    int bad = -1;
    for (int r = 1; r < s->world_size && bad < 0; r++)
        if (all[2 * r] != all[0] || all[2 * r + 1] != all[1])
            bad = r;
    free(all);
    if (bad >= 0)
        return ddp_err(err, errlen,
                       "rank %d built a different model than rank 0 (layers or input shape "
                       "differ); every rank must run the same job file and dataset",
                       bad);
    return 0;
}

void ddp_sync_begin(struct ddp_sync *s)
{
    for (int b = 0; b < s->nbuckets; b++)
        s->buckets[b].pending = s->buckets[b].nlayers;
}

void ddp_sync_layer_done(void *ctx, int layer)
{
    struct ddp_sync *s = ctx;
    trace(s, DDP_TRACE_LAYER_DONE, layer);
    int b = s->layer_bucket[layer];
    if (b < 0)
        return;
    struct ddp_bucket *bk = &s->buckets[b];
    if (--bk->pending > 0)
        return;
    if (s->world_size > 1) {
        const double t0 = ddp_now();
        bk->req = ddp_comm_allreduce_start(s->comm, s->m->grads + bk->off, bk->n, DDP_F32);
        ddp_comm_progress(s->comm);
        s->comm_s += ddp_now() - t0;
        s->comm_floats += (double)bk->n;
    }
    trace(s, DDP_TRACE_BUCKET_START, b);
}

void ddp_sync_finish(struct ddp_sync *s)
{
    const double t0 = s->world_size > 1 ? ddp_now() : 0;
    if (s->stall)
        s->m->be->stall_mark(s->stall, 0);
    for (int b = 0; b < s->nbuckets; b++) {
        struct ddp_bucket *bk = &s->buckets[b];
        if (bk->pending != 0)
            ddp_die("internal: bucket %d finished with %d layers not reported", b, bk->pending);
        if (s->world_size > 1) { /* on a GPU the optimiser's stream waits, not the host */
            ddp_comm_wait_device(s->comm, bk->req);
            bk->req = NULL;
        }
        trace(s, DDP_TRACE_BUCKET_DONE, b);
    }
    if (s->stall)
        s->m->be->stall_mark(s->stall, 1);
    if (s->world_size > 1)
        s->comm_s += ddp_now() - t0;
    s->trace_on = 0; /* one step is enough */
}

void ddp_sync_take_stats(struct ddp_sync *s, double *comm_s, double *busbw_gbs)
{
    const int W = s->world_size;
    if (s->stall) {
        uint64_t t[2];
        s->m->be->download(t, s->stall, sizeof t);
        s->m->be->zero((float *)s->stall + 2, 2); /* t[1] */
        *comm_s = (double)t[1] * 1e-9;
        *busbw_gbs = -1;
        s->comm_s = s->comm_floats = 0;
        return;
    }
    *comm_s = s->comm_s;
    *busbw_gbs = s->comm_s > 0
                     ? s->comm_floats * sizeof(float) * ddp_comm_busbw_factor(W) / s->comm_s / 1e9
                     : 0;
    s->comm_s = s->comm_floats = 0;
}

void ddp_sync_write_trace(const struct ddp_sync *s, FILE *f)
{
    for (int b = 0; b < s->nbuckets; b++)
        fprintf(f, "bucket %d off %zu n %zu layers %d..%d\n", b, s->buckets[b].off, s->buckets[b].n,
                s->buckets[b].hi, s->buckets[b].lo);
    static const char *names[] = {"layer_done", "bucket_start", "bucket_done"};
    for (int i = 0; i < s->ntrace; i++)
        fprintf(f, "%s %d\n", names[s->trace[i].kind], s->trace[i].id);
}

int ddp_sync_check_replicas(struct ddp_sync *s, const char *hosts, size_t host_len, char *err,
                            size_t errlen)
{
    struct ddp_model *m = s->m;
    int W = s->world_size, T = m->ntensors;
    if (W == 1)
        return 0;
    float *host = ddp_malloc(sizeof(float) * (m->nparams + 1));
    m->be->download(host, m->params, sizeof(float) * m->nparams);
    int64_t *mine = ddp_calloc((size_t)T, sizeof(int64_t));
    int64_t *all = ddp_malloc(sizeof(int64_t) * (size_t)T * (size_t)W);
    for (int i = 0; i < T; i++)
        if (!m->tensors[i].is_buffer)
            mine[i] =
                (int64_t)crc32_z(crc32(0L, Z_NULL, 0), (const Bytef *)(host + m->tensors[i].off),
                                 m->tensors[i].n * sizeof(float));
    ddp_comm_allgather(s->comm, mine, all, sizeof(int64_t) * (size_t)T);
    int rc = 0;
    for (int i = 0; i < T && rc == 0; i++) {
        /* the value most ranks hold is the reference; the first rank without it is named */
        int best = 0, best_count = 0;
        for (int r = 0; r < W; r++) {
            int c = 0;
            for (int q = 0; q < W; q++)
                c += all[(size_t)q * T + i] == all[(size_t)r * T + i];
            if (c > best_count) {
                best_count = c;
                best = r;
            }
        }
        for (int r = 0; r < W && rc == 0; r++)
            if (all[(size_t)r * T + i] != all[(size_t)best * T + i])
                rc = ddp_err(err, errlen,
                             "replica check failed: rank %d on %s holds different parameters in "
                             "tensor %s than %d of %d ranks (silent data corruption or a bad "
                             "node); stopping before a checkpoint is saved",
                             r, hosts + (size_t)r * host_len, m->tensors[i].name, best_count, W);
    }
    free(host);
    free(mine);
    free(all);
    return rc;
}

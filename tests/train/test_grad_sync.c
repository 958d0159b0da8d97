/*
 * test_grad_sync.c - gradient buckets (train/grad_sync.h) on one rank: the layout follows
 * PyTorch DDP's rule (reverse layer order, the first bucket closed at min(1 MiB, bucket_mb),
 * the others at bucket_mb, always at a layer boundary), the buckets tile the gradient buffer,
 * each bucket starts as soon as its last layer's backward reports, and with one rank the
 * gradients are those of a backward without the hook.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"
#include "comm/comm.h"
#include "dist/world.h"
#include "nn/model.h"
#include "train/grad_sync.h"

static ddp_comm *self_comm(void)
{
    struct ddp_world w = {0};
    w.world_size = w.local_size = w.num_nodes = 1;
    char err[512] = "";
    struct ddp_comm_opts o = ddp_comm_opts_of(DDP_COMM_NONE, 30);
    ddp_comm *c = ddp_comm_create(&o, &w, err, sizeof err);
    CHECK(c != NULL, "self communicator: %s", err);
    return c;
}

static void make(struct ddp_model *m, const char *layers, int64_t side)
{
    char err[512] = "";
    const int64_t dims[3] = {1, side, side};
    CHECK(ddp_model_create(m, ddp_backend_cpu(), layers, 3, dims, 4, err, sizeof err) == 0,
          "model %s: %s", layers, err);
    ddp_model_init(m, 7);
}

/* The buckets tile grads in order and every layer with parameters is in exactly one. */
static void check_tiling(const struct ddp_sync *s, const char *what)
{
    size_t off = s->buckets[0].off;
    CHECK(off == 0, "%s: first bucket at %zu", what, off);
    for (int b = 0; b < s->nbuckets; b++) {
        CHECK(s->buckets[b].off == off, "%s: bucket %d at %zu, want %zu", what, b,
              s->buckets[b].off, off);
        off += s->buckets[b].n;
    }
    CHECK(off == s->m->nparams, "%s: buckets cover %zu of %zu floats", what, off, s->m->nparams);
    for (int i = 0; i < s->m->nlayers; i++) {
        int b = s->layer_bucket[i];
        CHECK((s->m->layers[i].w_n > 0) == (b >= 0), "%s: layer %d in bucket %d", what, i, b);
        if (b >= 0)
            CHECK(i <= s->buckets[b].hi && i >= s->buckets[b].lo, "%s: layer %d outside %d..%d",
                  what, i, s->buckets[b].hi, s->buckets[b].lo);
    }
}

static void expect_buckets(ddp_comm *c, const char *layers, int64_t side, double mb, int n,
                           const int (*hi_lo)[2])
{
    struct ddp_model m;
    struct ddp_sync s;
    make(&m, layers, side);
    ddp_sync_init(&s, c, &m, mb);
    CHECK(s.nbuckets == n, "%s at %g MB: %d buckets, want %d", layers, mb, s.nbuckets, n);
    for (int b = 0; b < n && b < s.nbuckets; b++)
        CHECK(s.buckets[b].hi == hi_lo[b][0] && s.buckets[b].lo == hi_lo[b][1],
              "%s at %g MB: bucket %d covers %d..%d, want %d..%d", layers, mb, b, s.buckets[b].hi,
              s.buckets[b].lo, hi_lo[b][0], hi_lo[b][1]);
    check_tiling(&s, layers);
    ddp_sync_free(&s);
    ddp_model_free(&m);
}

static void test_layout(ddp_comm *c)
{
    /* 4160, 2080, 528, 170 floats: at 0.01 MB (2621 floats) 170+528+2080 closes the first
     * bucket, and 4160 is a bucket of its own */
    const char *mlp = "flatten, linear(64), relu, linear(32), relu, linear(16), relu, linear(10)";
    expect_buckets(c, mlp, 8, 0.01, 2, (const int[][2]){{7, 3}, {1, 1}});
    expect_buckets(c, mlp, 8, 25, 1, (const int[][2]){{7, 1}});
    expect_buckets(c, mlp, 8, 1e-9, 4, (const int[][2]){{7, 7}, {5, 5}, {3, 3}, {1, 1}});
    /* 524800, 262656, 5130 floats: the first bucket closes past 1 MiB although bucket_mb is 25 */
    const char *big = "flatten, linear(512), relu, linear(512), relu, linear(10)";
    expect_buckets(c, big, 32, 25, 2, (const int[][2]){{5, 3}, {1, 1}});
}

static void backward(struct ddp_model *m, const float *x, struct ddp_sync *s)
{
    memset(m->grads, 0, m->nparams * sizeof(float));
    const float *y = ddp_model_forward(m, x, 4, 1, 1);
    float *g = ddp_model_dlogits(m);
    for (int i = 0; i < 4 * m->classes; i++)
        g[i] = y[i] * 0.25f;
    if (s) {
        ddp_sync_begin(s);
        ddp_model_backward(m, x, 4, ddp_sync_layer_done, s);
        ddp_sync_finish(s);
    } else {
        ddp_model_backward(m, x, 4, NULL, NULL);
    }
}

static void test_order(ddp_comm *c)
{
    struct ddp_model m;
    struct ddp_sync s;
    make(&m, "flatten, linear(64), relu, linear(32), relu, linear(16), relu, linear(10)", 8);
    float x[4 * 64];
    for (int i = 0; i < 4 * 64; i++)
        x[i] = (float)sin(0.3 * i);
    backward(&m, x, NULL);
    float *plain = malloc(m.nparams * sizeof(float));
    memcpy(plain, m.grads, m.nparams * sizeof(float));

    ddp_sync_init(&s, c, &m, 0.01);
    s.trace_on = 1;
    backward(&m, x, &s);
    CHECK(!memcmp(plain, m.grads, m.nparams * sizeof(float)), "one rank changed the gradients");
    /* layer 7, 5, 3 done -> bucket 0 starts; layer 1 done -> bucket 1 starts; then done 0, 1 */
    static const int want[][2] = {
        {DDP_TRACE_LAYER_DONE, 7},   {DDP_TRACE_LAYER_DONE, 5},  {DDP_TRACE_LAYER_DONE, 3},
        {DDP_TRACE_BUCKET_START, 0}, {DDP_TRACE_LAYER_DONE, 1},  {DDP_TRACE_BUCKET_START, 1},
        {DDP_TRACE_BUCKET_DONE, 0},  {DDP_TRACE_BUCKET_DONE, 1},
    };
    const int n = (int)(sizeof want / sizeof want[0]);
    CHECK(s.ntrace == n, "%d trace events, want %d", s.ntrace, n);
    for (int i = 0; i < n && i < s.ntrace; i++)
        CHECK((int)s.trace[i].kind == want[i][0] && s.trace[i].id == want[i][1],
              "event %d: kind %d id %d, want kind %d id %d", i, (int)s.trace[i].kind, s.trace[i].id,
              want[i][0], want[i][1]);
    CHECK(!s.trace_on, "trace still on after the first step");

    double comm_s = -1, busbw = -1;
    ddp_sync_take_stats(&s, &comm_s, &busbw);
    CHECK(comm_s == 0 && busbw == 0, "one rank timed communication: %g s, %g GB/s", comm_s, busbw);
    char err[256] = "";
    CHECK(ddp_sync_check_fingerprint(&s, err, sizeof err) == 0, "fingerprint: %s", err);
    free(plain);
    ddp_sync_free(&s);
    ddp_model_free(&m);
}

int main(void)
{
    ddp_comm *c = self_comm();
    if (!c)
        return check_report("test_grad_sync");
    test_layout(c);
    test_order(c);
    ddp_comm_destroy(c);
    return check_report("test_grad_sync");
}

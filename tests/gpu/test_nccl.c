/*
 * test_nccl.c - the NCCL communicator on a world of one rank (suite gpu): setup through the
 * bootstrap, every collective on device and on host buffers (staged), several outstanding
 * all-reduces waited out of order, an all-reduce queued right behind compute-stream work with
 * no host sync, barrier, destroy. A sum over one rank is the buffer itself, so every result is
 * exactly predictable; what is checked is that NCCL ran, the ordering after the compute
 * stream, the bounce-buffer round trips and the request bookkeeping. Several ranks need
 * several GPUs (NCCL refuses two ranks on one): that is for a multi-GPU node, not this test.
 *
 * Exit 0 pass, 1 fail, 77 skipped (no CUDA/NCCL in this build, or no GPU; DDP_GPU_REQUIRE=1
 * turns a skip into a failure).
 */
#include "ddp_build.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/comm.h"
#include "comm/comm_impl.h"
#include "dist/world.h"
#include "core/util.h"
#if HAVE_CUDA && HAVE_NCCL
#include "backend/cuda.h"
#include "comm/comm_nccl.h"
#endif

static int skip(const char *why)
{
    const char *req = getenv("DDP_GPU_REQUIRE");
    printf("SKIP: %s\n", why);
    return req && strcmp(req, "1") == 0 ? 1 : 77;
}

#if HAVE_CUDA && HAVE_NCCL

static const struct ddp_backend *G;

static float *dev_f(const float *h, size_t n)
{
    float *d = G->alloc(sizeof(float) * n);
    G->upload(d, h, sizeof(float) * n);
    return d;
}

/* The communicator through comm.c; where comm.c does not route "nccl" yet, the backend's
 * constructor on a hand-made handle (what comm.c would do), so the backend is tested either
 * way. */
static ddp_comm *make_comm(const struct ddp_world *w, char *err, size_t errlen)
{
    const struct ddp_comm_opts o = {DDP_COMM_NCCL, 60, 0, DDP_BOOTSTRAP_AUTO, NULL};
    ddp_comm *c = ddp_comm_create(&o, w, err, errlen);
    if (c) {
        printf("communicator through ddp_comm_create(nccl)\n");
        return c;
    }
    printf("note: ddp_comm_create(nccl) refused (%s); testing the backend on a hand-made "
           "handle\n",
           err);
    c = ddp_calloc(1, sizeof *c);
    c->rank = w->rank;
    c->size = w->world_size;
    c->timeout_s = 60;
    snprintf(c->host, sizeof c->host, "%s", w->host);
    if (ddp_comm_nccl_init(c, w, &o, err, errlen) != 0) {
        free(c);
        return NULL;
    }
    return c;
}

static int run(void)
{
    char err[DDP_ERR_LEN];
    G = ddp_backend_cuda(0, 0, err, sizeof err);
    if (!G)
        return skip(err);
    printf("GPU: %s; %s; %s\n", ddp_cuda_device_string(), ddp_cuda_version_string(),
           ddp_nccl_version_string());

    struct ddp_world w;
    memset(&w, 0, sizeof w);
    w.launcher = DDP_LAUNCHER_SINGLE;
    w.world_size = w.local_size = w.num_nodes = 1;
    snprintf(w.host, sizeof w.host, "localhost");
    snprintf(w.master_addr, sizeof w.master_addr, "127.0.0.1");
    w.master_port = 29500;
    w.job_id = w.step_id = -1;
    ddp_comm *c = make_comm(&w, err, sizeof err);
    CHECK(c != NULL, "NCCL communicator: %s", err);
    if (!c)
        return 1;
    CHECK(strcmp(ddp_comm_name(c), "nccl") == 0, "name %s", ddp_comm_name(c));
    CHECK(ddp_comm_size(c) == 1 && ddp_comm_rank(c) == 0, "rank %d of %d", ddp_comm_rank(c),
          ddp_comm_size(c));

    /* device all-reduce queued right behind a compute-stream kernel, no host sync between */
    const size_t n = (size_t)1 << 22;
    float *h = ddp_malloc(sizeof(float) * n), *back = ddp_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(i % 1000);
    float *d = dev_f(h, n);
    G->scale(d, n, 2.0f);
    ddp_comm_req *r = ddp_comm_allreduce_start(c, d, n, DDP_F32);
    ddp_comm_progress(c);
    ddp_comm_wait(c, r);
    G->download(back, d, sizeof(float) * n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += back[i] != 2.0f * (float)(i % 1000);
    CHECK(bad == 0, "device allreduce after scale: %zu wrong", bad);

    /* many outstanding, waited in reverse order, then the buffer scaled as ddp.c does */
    enum { NB = 12 };
    ddp_comm_req *rs[NB];
    const size_t slice = n / NB;
    for (int b = 0; b < NB; b++)
        rs[b] = ddp_comm_allreduce_start(c, d + (size_t)b * slice, slice, DDP_F32);
    for (int b = NB - 1; b >= 0; b--)
        ddp_comm_wait(c, rs[b]);
    G->scale(d, n, 0.5f);
    G->download(back, d, sizeof(float) * n);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += back[i] != (float)(i % 1000);
    CHECK(bad == 0, "outstanding allreduces: %zu wrong", bad);

    /* host buffers: staged through bounce buffers */
    double hd[7];
    for (int i = 0; i < 7; i++)
        hd[i] = 0.25 * i - 1;
    ddp_comm_allreduce(c, hd, 7, DDP_F64);
    for (int i = 0; i < 7; i++)
        CHECK(hd[i] == 0.25 * i - 1, "host f64 allreduce [%d] = %g", i, hd[i]);
    int64_t hi[5];
    for (int i = 0; i < 5; i++)
        hi[i] = ((int64_t)1 << 53) + 1 + i;
    ddp_comm_allreduce_max(c, hi, 5, DDP_I64);
    for (int i = 0; i < 5; i++)
        CHECK(hi[i] == ((int64_t)1 << 53) + 1 + i, "host i64 max [%d] = %lld", i, (long long)hi[i]);
    /* a large host all-reduce (bigger than the first bounce buffer: it grows) */
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(i % 777);
    ddp_comm_allreduce(c, h, n, DDP_F32);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += h[i] != (float)(i % 777);
    CHECK(bad == 0, "host f32 allreduce of %zu: %zu wrong", n, bad);

    /* broadcast: host and device */
    char msg[64] = "rank 0 says hello";
    ddp_comm_broadcast(c, msg, sizeof msg, 0);
    CHECK(strcmp(msg, "rank 0 says hello") == 0, "host broadcast: '%s'", msg);
    ddp_comm_broadcast(c, d, sizeof(float) * n, 0);
    G->download(back, d, sizeof(float) * n);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += back[i] != (float)(i % 1000);
    CHECK(bad == 0, "device broadcast: %zu wrong", bad);

    /* allgather: host separate and in place, device */
    int64_t mine = 424242, all[1] = {0};
    ddp_comm_allgather(c, &mine, all, sizeof mine);
    CHECK(all[0] == 424242, "host allgather: %lld", (long long)all[0]);
    char names[1][32];
    snprintf(names[0], sizeof names[0], "node-a");
    ddp_comm_allgather(c, names[0], names, sizeof names[0]);
    CHECK(strcmp(names[0], "node-a") == 0, "host allgather in place: '%s'", names[0]);
    float *d2 = G->alloc(sizeof(float) * 1000);
    ddp_comm_allgather(c, d, d2, sizeof(float) * 1000);
    G->download(back, d2, sizeof(float) * 1000);
    bad = 0;
    for (size_t i = 0; i < 1000; i++)
        bad += back[i] != (float)(i % 1000);
    CHECK(bad == 0, "device allgather: %zu wrong", bad);

    ddp_comm_barrier(c);
    ddp_comm_destroy(c);
    G->free(d);
    G->free(d2);
    free(h);
    free(back);
    return check_report("test_nccl");
}
#endif

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
#if HAVE_CUDA && HAVE_NCCL
    return run();
#else
    return skip("this ddptrain was built without CUDA and NCCL");
#endif
}

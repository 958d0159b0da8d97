/*
 * comm_nccl.c - the NCCL collective backend (see comm_nccl.h): setup through the bootstrap,
 * collectives on a communication stream ordered after the compute stream by events, requests
 * as events, host buffers staged through bounce buffers. Deadlines and the fatal path are
 * comm.c's; nothing here waits except through ddp_comm_poll.
 *
 * The communicator is non-blocking (ncclConfig_t.blocking = 0): setup, the first collective
 * (which connects the peers) and finalize return ncclInProgress instead of blocking, and are
 * polled with ncclCommGetAsyncError under the deadline. A collective counts as queued only
 * once the communicator is no longer in progress; the event that is its request is recorded
 * after that.
 */
#include "ddp_build.h"

#if HAVE_NCCL

#include <cuda_runtime.h>
#include <stddef.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda.h"
#include "comm/comm_impl.h"
#include "comm/comm_nccl.h"
#include "dist/bootstrap.h"
#include "dist/world.h"
#include "core/dl.h"
#include "core/util.h"

/* ---- NCCL, opened when first needed -----------------------------------------------------
 * ddptrain does not link libnccl: a GPU build then starts (and `ddptrain --version`, `env`,
 * CPU runs work) where NCCL is not installed, and says so only when NCCL is needed. nccl_open
 * dlopens the soname of the NCCL the build was compiled against (LD_LIBRARY_PATH, the run
 * path, the system's) and every call goes through this table. The GPU twin's build
 * (DDP_TWIN) points the table at the twin's NCCL. */
// clang-format off
#define NCCL_FUNCS(X)                                                                          \
    X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclCommFinalize)        \
    X(ncclCommDestroy) X(ncclCommAbort) X(ncclCommGetAsyncError) X(ncclGetErrorString)        \
    X(ncclGetLastError) X(ncclAllReduce) X(ncclBroadcast) X(ncclAllGather)
// clang-format on

static struct {
#define X(f) __typeof__(&f) f;
    NCCL_FUNCS(X)
#undef X
} N;

#define NCCL_STR2(x) #x
#define NCCL_STR(x) NCCL_STR2(x)
#define NCCL_SONAME "libnccl.so." NCCL_STR(NCCL_MAJOR)
#define NCCL_FIX                                                               \
    "install NCCL " NCCL_STR(                                                  \
        NCCL_MAJOR) " (libnccl2) or add the directory that holds " NCCL_SONAME \
                    " to LD_LIBRARY_PATH"

/* 0 when the table is filled (once per process); -1 with one line in err. */
static int nccl_open(char *err, size_t errlen)
{
    static int state; /* 0 not tried, 1 open, -1 failed */
    static char why[512];
    if (state == 0) {
#if DDP_TWIN
#define X(f) N.f = f;
        NCCL_FUNCS(X)
#undef X
        state = 1;
#else
#define X(f) {#f, offsetof(__typeof__(N), f)},
        static const struct ddp_dl_sym syms[] = {NCCL_FUNCS(X)};
#undef X
        static const char *const sonames[] = {NCCL_SONAME, NULL};
        const struct ddp_dl_lib lib = {"NCCL",   sonames,
                                       NCCL_FIX, NCCL_STR(NCCL_MAJOR) ".x",
                                       syms,     sizeof syms / sizeof syms[0]};
        state = ddp_dl_open(&lib, &N, why, sizeof why) == 0 ? 1 : -1;
#endif
    }
    if (state < 0)
        return ddp_err(err, errlen, "%s", why);
    return 0;
}

/* A page-locked host buffer and a device buffer of cap bytes each, for one host request. */
struct stage {
    void *host, *dev;
    size_t cap;
    struct stage *next; /* free list */
};

struct event_node {
    cudaEvent_t ev;
    struct event_node *next;
};

struct nccl_state {
    ncclComm_t comm;
    int device;
    cudaStream_t stream;       /* communication stream */
    cudaEvent_t ready;         /* recorded on the compute stream at each start */
    int32_t *scratch;          /* one device int for the barrier */
    struct stage *stages;      /* free bounce buffers */
    struct event_node *events; /* free events */
    int aborted;
};

struct nccl_req {
    struct event_node *done; /* recorded after the collective (and its copy back) */
    struct stage *stage;     /* host buffer: the bounce buffers, else NULL */
    void *host_dst;          /* host buffer to fill from stage->host when done */
    size_t host_bytes;
};

const char *ddp_nccl_version_string(void)
{
    static char buf[96];
    int v = 0;
    char why[8];
    const int have = nccl_open(why, sizeof why) == 0;
    if (!have || N.ncclGetVersion(&v) != ncclSuccess || v <= 0)
        v = NCCL_VERSION_CODE;
        /* since 2.9: MAJOR * 10000 + MINOR * 100 + PATCH */
#if DDP_TWIN
    const char *what = "GPU twin: "; /* tests/twin over TCP, not NCCL */
#else
    const char *what = "";
#endif
    snprintf(buf, sizeof buf, "%sNCCL %d.%d.%d%s", what, v / 10000, (v % 10000) / 100, v % 100,
             have ? "" : " (library not found)");
    return buf;
}

static struct nccl_state *state_of(ddp_comm *c)
{
    return c->impl;
}
static struct nccl_req *req_of(struct ddp_comm_req *r)
{
    return r->priv;
}

static int nccl_fail(struct nccl_state *st, const char *call, ncclResult_t rc, char *err,
                     size_t errlen)
{
    const char *last = st && st->comm ? N.ncclGetLastError(st->comm) : NULL;
    return ddp_err(err, errlen, "%s: %s%s%s", call, N.ncclGetErrorString(rc),
                   last && last[0] ? ": " : "", last && last[0] ? last : "");
}

static int cuda_fail(const char *call, cudaError_t e, char *err, size_t errlen)
{
    cudaGetLastError();
    return ddp_err(err, errlen, "%s: CUDA error %s: %s", call, cudaGetErrorName(e),
                   cudaGetErrorString(e));
}

#define CU(call)                                      \
    do {                                              \
        cudaError_t e_ = (call);                      \
        if (e_ != cudaSuccess)                        \
            return cuda_fail(#call, e_, err, errlen); \
    } while (0)

/* A CUDA error on a collective's path after setup is this rank's GPU failing (a sticky fault
 * of a kernel, say), not a peer: one line that says so, exit DDP_EXIT_RUNTIME. ddp_die runs the
 * trainer's abort hook, which aborts the communicator, so the peers stop too. */
static void __attribute__((noreturn)) local_fault(const struct nccl_state *st, const char *call,
                                                  cudaError_t e, const char *file, int line)
{
    ddp_die_at(file, line, DDP_EXIT_RUNTIME,
               "GPU %d: %s: CUDA error %s: %s (a fault of this rank's GPU, not of a peer)",
               st ? st->device : -1, call, cudaGetErrorName(e), cudaGetErrorString(e));
}

#define CU_LOCAL(st, call)                                    \
    do {                                                      \
        cudaError_t e_ = (call);                              \
        if (e_ != cudaSuccess)                                \
            local_fault((st), #call, e_, __FILE__, __LINE__); \
    } while (0)

/* NCCL's async error: a CUDA error inside NCCL is local too (local_fault), anything else is
 * the reason a collective failed. */
static int async_fail(struct nccl_state *st, ncclResult_t async, char *err, size_t errlen)
{
    if (async == ncclUnhandledCudaError) {
        cudaError_t e = cudaGetLastError();
        local_fault(st, "NCCL (unhandled CUDA error)", e ? e : cudaErrorLaunchFailure, __FILE__,
                    __LINE__);
    }
    return nccl_fail(st, "NCCL", async, err, errlen);
}

/* ncclCommGetAsyncError as a ddp_comm_poll test: 1 settled, 0 in progress, -1 error. */
static int settled_test(void *arg, char *err, size_t errlen)
{
    struct nccl_state *st = arg;
    ncclResult_t async = ncclSuccess;
    ncclResult_t rc = N.ncclCommGetAsyncError(st->comm, &async);
    if (rc != ncclSuccess)
        return nccl_fail(st, "ncclCommGetAsyncError", rc, err, errlen);
    if (async == ncclInProgress)
        return 0;
    if (async != ncclSuccess)
        return async_fail(st, async, err, errlen);
    return 1;
}

/* Wait (bounded) until the communicator has no call in progress. what: for the message. */
static int settle(ddp_comm *c, const char *what, char *err, size_t errlen)
{
    struct nccl_state *st = state_of(c);
    const int rc = ddp_comm_poll(c->timeout_s, settled_test, st, err, errlen);
    if (rc == 1)
        return 0;
    if (rc == 0)
        return ddp_err(err, errlen,
                       "%s not queued within %g s (NCCL still connecting to its "
                       "peers)",
                       what, c->timeout_s);
    return -1;
}

/* After an NCCL call returned rc: 0 once queued, else -1 with the reason. */
static int queued(ddp_comm *c, const char *what, ncclResult_t rc, char *err, size_t errlen)
{
    if (rc == ncclSuccess)
        return 0;
    if (rc == ncclInProgress)
        return settle(c, what, err, errlen);
    return nccl_fail(state_of(c), what, rc, err, errlen);
}

/* 1 when p is memory a device can use in place (device or managed). */
static int is_device_ptr(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static int stage_get(struct nccl_state *st, size_t bytes, struct stage **out, char *err,
                     size_t errlen)
{
    struct stage **pp = &st->stages, *s = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->cap >= bytes) {
            s = *pp;
            *pp = s->next;
            break;
        }
    if (!s) {
        /* A new pair; the smaller free ones stay. Never cudaFree/cudaFreeHost here: both
         * synchronise the device, collectives in flight included (a dead peer would hang it). */
        s = ddp_calloc(1, sizeof *s);
        s->host = s->dev = NULL;
        s->cap = 0;
        size_t cap = bytes < 4096 ? 4096 : bytes;
        cudaError_t e = cudaMallocHost(&s->host, cap);
        if (e == cudaSuccess)
            e = cudaMalloc(&s->dev, cap);
        if (e != cudaSuccess) {
            if (s->host)
                cudaFreeHost(s->host);
            free(s);
            return cuda_fail("allocating NCCL bounce buffers", e, err, errlen);
        }
        s->cap = cap;
    }
    s->next = NULL;
    *out = s;
    return 0;
}

static void stage_put(struct nccl_state *st, struct stage *s)
{
    if (!s)
        return;
    s->next = st->stages;
    st->stages = s;
}

static int event_get(struct nccl_state *st, struct event_node **out, char *err, size_t errlen)
{
    struct event_node *n = st->events;
    if (n) {
        st->events = n->next;
    } else {
        n = ddp_calloc(1, sizeof *n);
        cudaError_t e = cudaEventCreateWithFlags(&n->ev, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            free(n);
            return cuda_fail("cudaEventCreate", e, err, errlen);
        }
    }
    n->next = NULL;
    *out = n;
    return 0;
}

static void event_put(struct nccl_state *st, struct event_node *n)
{
    if (!n)
        return;
    n->next = st->events;
    st->events = n;
}

/* Order the communication stream after everything queued so far on the compute stream. */
static int after_compute(struct nccl_state *st, char *err, size_t errlen)
{
    cudaStream_t compute = (cudaStream_t)ddp_cuda_stream(); /* NULL: the legacy stream */
    (void)err, (void)errlen;
    CU_LOCAL(st, cudaEventRecord(st->ready, compute));
    CU_LOCAL(st, cudaStreamWaitEvent(st->stream, st->ready, 0));
    return 0;
}

/* Common start: request state, order after compute, stage a host buffer in. For a host buffer
 * of `bytes` (`in_off`, `in_bytes`: the part to copy in; the collective then works on
 * stage->dev), *devbuf is the device address to hand to NCCL. */
static int begin(ddp_comm *c, struct ddp_comm_req *r, void *buf, size_t bytes, size_t in_off,
                 size_t in_bytes, const void *in_src, void **devbuf, char *err, size_t errlen)
{
    struct nccl_state *st = state_of(c);
    struct nccl_req *q = req_of(r);
    memset(q, 0, sizeof *q);
    if (settle(c, "the previous collective", err, errlen) != 0)
        return -1;
    if (event_get(st, &q->done, err, errlen) != 0)
        return -1;
    if (after_compute(st, err, errlen) != 0)
        return -1;
    if (bytes == 0 || is_device_ptr(buf)) {
        *devbuf = buf;
        return 0;
    }
    if (stage_get(st, bytes, &q->stage, err, errlen) != 0)
        return -1;
    q->host_dst = buf;
    q->host_bytes = bytes;
    if (in_bytes) {
        memcpy((char *)q->stage->host + in_off, in_src, in_bytes);
        CU_LOCAL(st,
                 cudaMemcpyAsync((char *)q->stage->dev + in_off, (char *)q->stage->host + in_off,
                                 in_bytes, cudaMemcpyHostToDevice, st->stream));
    }
    *devbuf = q->stage->dev;
    return 0;
}

/* Common end, after the NCCL call returned rc: wait until queued, copy a staged result back
 * to the bounce buffer, record the request's event. */
static int finish(ddp_comm *c, struct ddp_comm_req *r, const char *what, ncclResult_t rc, char *err,
                  size_t errlen)
{
    struct nccl_state *st = state_of(c);
    struct nccl_req *q = req_of(r);
    if (queued(c, what, rc, err, errlen) != 0)
        return -1;
    if (q->stage && q->host_bytes)
        CU_LOCAL(st, cudaMemcpyAsync(q->stage->host, q->stage->dev, q->host_bytes,
                                     cudaMemcpyDeviceToHost, st->stream));
    CU_LOCAL(st, cudaEventRecord(q->done->ev, st->stream));
    return 0;
}

static ncclDataType_t nccl_type(enum ddp_dtype t)
{
    switch (t) {
    case DDP_F32:
        return ncclFloat32;
    case DDP_F64:
        return ncclFloat64;
    case DDP_I64:
        return ncclInt64;
    }
    return ncclFloat32; /* comm.c validated t */
}

static size_t type_size(enum ddp_dtype t)
{
    return t == DDP_F32 ? 4 : 8;
}

static int nccl_iallreduce(ddp_comm *c, struct ddp_comm_req *r, void *buf, size_t n,
                           enum ddp_dtype t, enum ddp_comm_op op, char *err, size_t errlen)
{
    const size_t bytes = n * type_size(t);
    void *dev = NULL;
    if (begin(c, r, buf, bytes, 0, bytes, buf, &dev, err, errlen) != 0)
        return -1;
    ncclResult_t rc =
        N.ncclAllReduce(dev, dev, n, nccl_type(t), op == DDP_OP_MAX ? ncclMax : ncclSum,
                        state_of(c)->comm, state_of(c)->stream);
    return finish(c, r, "ncclAllReduce", rc, err, errlen);
}

static int nccl_ibroadcast(ddp_comm *c, struct ddp_comm_req *r, void *buf, size_t bytes, int root,
                           char *err, size_t errlen)
{
    void *dev = NULL;
    const int mine = c->rank == root;
    if (begin(c, r, buf, bytes, 0, mine ? bytes : 0, buf, &dev, err, errlen) != 0)
        return -1;
    ncclResult_t rc =
        N.ncclBroadcast(dev, dev, bytes, ncclInt8, root, state_of(c)->comm, state_of(c)->stream);
    return finish(c, r, "ncclBroadcast", rc, err, errlen);
}

static int nccl_ibarrier(ddp_comm *c, struct ddp_comm_req *r, char *err, size_t errlen)
{
    struct nccl_state *st = state_of(c);
    void *dev = NULL;
    if (begin(c, r, st->scratch, sizeof(int32_t), 0, 0, NULL, &dev, err, errlen) != 0)
        return -1;
    ncclResult_t rc = N.ncclAllReduce(dev, dev, 1, ncclInt32, ncclSum, st->comm, st->stream);
    return finish(c, r, "ncclAllReduce (barrier)", rc, err, errlen);
}

static int nccl_iallgather(ddp_comm *c, struct ddp_comm_req *r, const void *send, void *recv,
                           size_t bytes, char *err, size_t errlen)
{
    struct nccl_state *st = state_of(c);
    const size_t total = bytes * (size_t)c->size, off = bytes * (size_t)c->rank;
    const int in_place = send == (const char *)recv + off;
    if (bytes && !in_place && is_device_ptr(send) != is_device_ptr(recv))
        return ddp_err(err, errlen, "internal error: allgather between host and device memory");
    void *dev = NULL;
    if (begin(c, r, recv, total, off, bytes, send, &dev, err, errlen) != 0)
        return -1;
    /* staged or in place: this rank's part is at dev + off; else NCCL reads send */
    const void *dsend = dev != recv || in_place ? (const char *)dev + off : send;
    ncclResult_t rc = N.ncclAllGather(dsend, dev, bytes, ncclInt8, st->comm, st->stream);
    return finish(c, r, "ncclAllGather", rc, err, errlen);
}

/* The compute stream waits for r's event; r's event goes back to the pool at once (a later
 * record does not change what this wait waits for). */
static int nccl_order_after(ddp_comm *c, struct ddp_comm_req *r, char *err, size_t errlen)
{
    struct nccl_state *st = state_of(c);
    struct nccl_req *q = req_of(r);
    (void)err, (void)errlen;
    if (q->stage || !q->done)
        return 0; /* a host buffer: the host copies the result out, so it must wait */
    CU_LOCAL(st, cudaStreamWaitEvent((cudaStream_t)ddp_cuda_stream(), q->done->ev, 0));
    event_put(st, q->done);
    q->done = NULL;
    return 1;
}

/* A request that completes when the compute stream's work queued so far has run. */
static int nccl_ifence(ddp_comm *c, struct ddp_comm_req *r, char *err, size_t errlen)
{
    struct nccl_state *st = state_of(c);
    struct nccl_req *q = req_of(r);
    memset(q, 0, sizeof *q);
    if (event_get(st, &q->done, err, errlen) != 0)
        return -1;
    CU_LOCAL(st, cudaEventRecord(q->done->ev, (cudaStream_t)ddp_cuda_stream()));
    return 0;
}

static int nccl_test(ddp_comm *c, struct ddp_comm_req *r, char *err, size_t errlen)
{
    struct nccl_state *st = state_of(c);
    struct nccl_req *q = req_of(r);
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)ddp_cuda_stream(), &cs) == cudaSuccess &&
        cs != cudaStreamCaptureStatusNone)
        return 0; /* recorded in a CUDA graph capture: it runs when the graph is launched */
    cudaError_t e = cudaEventQuery(q->done->ev);
    if (e == cudaErrorNotReady) {
        cudaGetLastError(); /* not an error: keep it from the backend's launch checks */
        ncclResult_t async = ncclSuccess;
        ncclResult_t rc = N.ncclCommGetAsyncError(st->comm, &async);
        if (rc != ncclSuccess)
            return nccl_fail(st, "ncclCommGetAsyncError", rc, err, errlen);
        if (async != ncclSuccess && async != ncclInProgress)
            return async_fail(st, async, err, errlen);
        return 0;
    }
    if (e != cudaSuccess)
        local_fault(st, "cudaEventQuery", e, __FILE__, __LINE__);
    if (q->stage) {
        memcpy(q->host_dst, q->stage->host, q->host_bytes);
        stage_put(st, q->stage);
        q->stage = NULL;
    }
    event_put(st, q->done);
    q->done = NULL;
    return 1;
}

static void free_pools(struct nccl_state *st)
{
    while (st->stages) {
        struct stage *s = st->stages;
        st->stages = s->next;
        cudaFreeHost(s->host);
        cudaFree(s->dev);
        free(s);
    }
    while (st->events) {
        struct event_node *n = st->events;
        st->events = n->next;
        cudaEventDestroy(n->ev);
        free(n);
    }
}

static void nccl_destroy(ddp_comm *c)
{
    struct nccl_state *st = state_of(c);
    if (!st)
        return;
    if (st->comm && !st->aborted) {
        char msg[256] = "";
        ncclResult_t rc = N.ncclCommFinalize(st->comm);
        if ((rc != ncclSuccess && rc != ncclInProgress) ||
            (rc == ncclInProgress && settle(c, "ncclCommFinalize", msg, sizeof msg) != 0)) {
            ddp_warn("NCCL finalize: %s; aborting the communicator",
                     msg[0] ? msg : N.ncclGetErrorString(rc));
            N.ncclCommAbort(st->comm);
        } else {
            N.ncclCommDestroy(st->comm);
        }
    }
    st->comm = NULL;
    free_pools(st);
    if (st->scratch)
        cudaFree(st->scratch);
    if (st->ready)
        cudaEventDestroy(st->ready);
    if (st->stream)
        cudaStreamDestroy(st->stream);
    cudaGetLastError();
    free(st);
    c->impl = NULL;
    ddp_bootstrap_finalize(); /* PMI2, when the id travelled that way */
}

/* Seconds ncclCommAbort may take before the process leaves without it. */
#define ABORT_WATCHDOG_S 10

static int g_abort_code;

static void *abort_watchdog(void *arg)
{
    (void)arg;
    struct timespec ts = {ABORT_WATCHDOG_S, 0};
    while (nanosleep(&ts, &ts) != 0)
        ;
    static const char msg[] = "ddptrain: ncclCommAbort did not return within 10 s; leaving "
                              "without it\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(g_abort_code);
    _exit(g_abort_code);
}

/* ncclCommAbort under a watchdog, then _exit: a communicator (or a CUDA context) stuck on a
 * dead peer can neither hang the abort nor the exit handlers (CUDA's and NCCL's destructors). */
static void nccl_abort(ddp_comm *c, int code)
{
    struct nccl_state *st = state_of(c);
    if (st && st->comm && !st->aborted) {
        st->aborted = 1;
        g_abort_code = code;
        pthread_t t;
        if (pthread_create(&t, NULL, abort_watchdog, NULL) == 0)
            pthread_detach(t);
        N.ncclCommAbort(st->comm); /* peers see the error or their deadline */
    }
    fflush(stdout);
    fflush(stderr);
    _exit(code);
}

static const struct ddp_comm_ops nccl_ops = {
    .name = "nccl",
    .req_size = sizeof(struct nccl_req),
    .iallreduce = nccl_iallreduce,
    .ibroadcast = nccl_ibroadcast,
    .ibarrier = nccl_ibarrier,
    .iallgather = nccl_iallgather,
    .test = nccl_test,
    .order_after = nccl_order_after,
    .ifence = nccl_ifence,
    .destroy = nccl_destroy,
    .abort = nccl_abort,
};

/* Everything of st that exists, on a failed setup. */
static int setup_fail(ddp_comm *c, struct nccl_state *st)
{
    if (st->comm)
        N.ncclCommAbort(st->comm);
    st->comm = NULL;
    st->aborted = 1;
    c->impl = st;
    nccl_destroy(c);
    return -1;
}

int ddp_comm_nccl_init(ddp_comm *c, const struct ddp_world *w, const struct ddp_comm_opts *o,
                       char *err, size_t errlen)
{
    int device = o->device >= 0 ? o->device : ddp_cuda_device();
    cudaError_t e;
    if (nccl_open(err, errlen) != 0)
        return -1;
    if (device < 0 && (e = cudaGetDevice(&device)) != cudaSuccess)
        return cuda_fail("cudaGetDevice (no GPU for NCCL)", e, err, errlen);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return cuda_fail("cudaSetDevice", e, err, errlen);

    /* the id: made by rank 0, carried by the bootstrap */
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (w->rank == 0) {
        ncclResult_t rc = N.ncclGetUniqueId(&id);
        if (rc != ncclSuccess)
            return nccl_fail(NULL, "ncclGetUniqueId", rc, err, errlen);
    }
    struct ddp_bootstrap_bcast bb;
    const struct ddp_bootstrap_bcast *bcast = ddp_comm_bootstrap_bcast(o->boot_comm, &bb);
    const enum ddp_bootstrap_kind kind = ddp_bootstrap_choose(o->bootstrap, bcast);
    char berr[DDP_ERR_LEN];
    if (ddp_bootstrap_share(w, kind, bcast, &id, sizeof id, c->timeout_s, berr, sizeof berr) != 0) {
        ddp_bootstrap_finalize();
        return ddp_err(err, errlen, "NCCL id through bootstrap %s: %s", ddp_bootstrap_name(kind),
                       berr);
    }

    struct nccl_state *st = ddp_calloc(1, sizeof *st);
    st->device = device;
    c->impl = st; /* settle() and the fail path find it there */
    int least = 0, greatest = 0;
    if ((e = cudaDeviceGetStreamPriorityRange(&least, &greatest)) != cudaSuccess ||
        (e = cudaStreamCreateWithPriority(&st->stream, cudaStreamNonBlocking, greatest)) !=
            cudaSuccess ||
        (e = cudaEventCreateWithFlags(&st->ready, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaMalloc((void **)&st->scratch, sizeof(int32_t))) != cudaSuccess ||
        (e = cudaMemset(st->scratch, 0, sizeof(int32_t))) != cudaSuccess) {
        cuda_fail("NCCL stream/event setup", e, err, errlen);
        return setup_fail(c, st);
    }
#if DDP_TWIN
    twin_name_stream(st->stream, "nccl"); /* in the twin's counters */
#endif

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = N.ncclCommInitRankConfig(&st->comm, c->size, id, c->rank, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        nccl_fail(st, "ncclCommInitRankConfig", rc, err, errlen);
        return setup_fail(c, st);
    }
    if (rc == ncclInProgress) {
        char msg[256] = "";
        const int prc = ddp_comm_poll(c->timeout_s, settled_test, st, msg, sizeof msg);
        if (prc != 1) {
            if (prc == 0)
                ddp_err(err, errlen,
                        "NCCL communicator setup (%d ranks, id through %s) did not complete "
                        "within %g s: a rank may not have started or cannot reach this one "
                        "(NCCL_SOCKET_IFNAME selects the network)",
                        c->size, ddp_bootstrap_name(kind), c->timeout_s);
            else
                ddp_err(err, errlen, "NCCL communicator setup: %s", msg);
            return setup_fail(c, st);
        }
    }
    c->ops = &nccl_ops;
    return 0;
}

#else
typedef int ddp_comm_nccl_unused; /* ISO C forbids an empty translation unit */
#endif

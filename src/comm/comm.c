/*
 * comm.c - backend dispatch, the request pool, the deadline loop and the one fatal path
 * shared by every collective backend. See comm.h for the contract, comm_impl.h for what a
 * backend provides.
 *
 * Every blocking collective is its non-blocking form plus ddp_comm_wait, so every wait on a
 * peer goes through ddp_comm_poll and its deadline. On expiry or a backend error this rank
 * prints one line, aborts the whole job through the backend (MPI_Abort) and exits
 * DDP_EXIT_PEER: nothing half-finished is returned to the caller.
 *
 * Not thread-safe: one thread (the one that created the handle) makes every call.
 */
#include "comm/comm_impl.h"
#if HAVE_NCCL
#include "comm/comm_nccl.h"
#endif

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/world.h"
#include "core/util.h"

/* Largest element or byte count of one backend operation: MPI counts are int. */
#define COMM_MAX_COUNT ((size_t)INT_MAX)
/* Blocking collectives split larger buffers into pieces of this many elements / bytes. */
#define COMM_CHUNK_ELEMS ((size_t)1 << 28)
#define COMM_CHUNK_BYTES ((size_t)1 << 30)
/* Requests allocated at once when the pool runs dry (then reused: no malloc per call). */
#define COMM_SLAB_REQS 16
/* Backoff of ddp_comm_poll: spin first (a 1 MiB all-reduce takes ~0.2 ms here), then yield
 * the core (ranks may share cores), then sleep from a few us up to ~1 ms. */
#define POLL_SPIN_S 100e-6
#define POLL_YIELD_S 2e-3
#define POLL_SLEEP_MIN_NS 4000L
#define POLL_SLEEP_MAX_NS 1000000L
/* Upper bound of timeout_s (about 115 days): anything larger is a typo. */
#define COMM_MAX_TIMEOUT_S 1e7

/* The handle the abort hook tears down (ddp_set_abort_hook takes no context). */
static ddp_comm *g_hook_comm;

/* ddp_die's hook: tear the job down so no peer waits; one rank only exits. */
static void comm_abort_hook(int code)
{
    if (g_hook_comm && g_hook_comm->size > 1)
        ddp_comm_abort(g_hook_comm, code);
}

int ddp_comm_poll(double timeout_s, int (*test)(void *arg, char *err, size_t errlen), void *arg,
                  char *err, size_t errlen)
{
    int rc = test(arg, err, errlen);
    if (rc)
        return rc;
    const double t0 = ddp_now();
    long sleep_ns = POLL_SLEEP_MIN_NS;
    for (;;) {
        rc = test(arg, err, errlen);
        if (rc)
            return rc;
        const double waited = ddp_now() - t0;
        if (waited >= timeout_s)
            return 0;
        if (waited < POLL_SPIN_S)
            continue;
        if (waited < POLL_YIELD_S) {
            sched_yield();
            continue;
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        sleep_ns = sleep_ns * 2 > POLL_SLEEP_MAX_NS ? POLL_SLEEP_MAX_NS : sleep_ns * 2;
    }
}

/* Print the one line that says which collective failed on which rank, then tear the job
 * down. detail is NULL for a deadline expiry, else the backend's reason. */
static void __attribute__((noreturn)) comm_fail(ddp_comm *c, const char *what, const char *detail)
{
    char peer[512] = "a peer";
    if (c->size == 2) /* the only rank we can wait for */
        snprintf(peer, sizeof peer, "rank %d", 1 - c->rank);
    if (c->peer_probe) {
        char who[448] = "";
        c->peer_probe(c->peer_probe_ctx, who, sizeof who);
        if (who[0]) {
            /* A peer is known dead: say so and leave. No MPI_Abort, so that every surviving
             * rank reaches its own deadline and says the same; the launcher cleans up. */
            fprintf(stderr, "ddptrain: collective %s %s: peer gone: %s (this rank: %s rank %d)\n",
                    what, detail ? "failed" : "did not complete", who, c->host, c->rank);
            fflush(stderr);
            _exit(DDP_EXIT_PEER);
        }
    }
    if (detail)
        fprintf(stderr,
                "ddptrain: collective %s failed (%s); %s may have died (this rank: %s rank %d)\n",
                what, detail, peer, c->host, c->rank);
    else
        fprintf(stderr,
                "ddptrain: collective %s did not complete within %g s; %s may have died "
                "(this rank: %s rank %d)\n",
                what, c->timeout_s, peer, c->host, c->rank);
    ddp_comm_abort(c, DDP_EXIT_PEER);
}

void ddp_comm_set_peer_probe(ddp_comm *c, void (*probe)(void *ctx, char *buf, size_t len),
                             void *ctx)
{
    c->peer_probe = probe;
    c->peer_probe_ctx = ctx;
}

/* Take a request from the pool (growing it by a slab when empty) and append it to the
 * outstanding list. */
static struct ddp_comm_req *req_get(ddp_comm *c, const char *what)
{
    if (!c->free_list) {
        const size_t unit = sizeof(max_align_t);
        const size_t head = (sizeof(struct ddp_comm_req) + unit - 1) / unit * unit;
        const size_t each = head + (c->ops->req_size + unit - 1) / unit * unit;
        unsigned char *slab = ddp_calloc(COMM_SLAB_REQS, each);
        c->slabs = ddp_realloc(c->slabs, (c->nslabs + 1) * sizeof *c->slabs);
        c->slabs[c->nslabs++] = slab;
        for (size_t i = 0; i < COMM_SLAB_REQS; i++) {
            struct ddp_comm_req *r = (struct ddp_comm_req *)(slab + i * each);
            r->priv = c->ops->req_size ? slab + i * each + head : NULL;
            r->next = c->free_list;
            c->free_list = r;
        }
    }
    struct ddp_comm_req *r = c->free_list;
    c->free_list = r->next;
    r->what = what;
    r->done = 0;
    r->active = 1;
    r->next = NULL;
    r->prev = c->active_tail;
    if (c->active_tail)
        c->active_tail->next = r;
    else
        c->active_head = r;
    c->active_tail = r;
    return r;
}

/* Unlink a finished request from the outstanding list and return it to the pool. */
static void req_put(ddp_comm *c, struct ddp_comm_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        c->active_head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        c->active_tail = r->prev;
    r->active = 0;
    r->prev = NULL;
    r->next = c->free_list;
    c->free_list = r;
}

struct wait_arg {
    ddp_comm *c;
    struct ddp_comm_req *r;
};

static int wait_test(void *arg, char *err, size_t errlen)
{
    struct wait_arg *a = arg;
    return a->c->ops->test(a->c, a->r, err, errlen);
}

/* A start function failed: the error is fatal like a failed wait. */
static void start_failed(ddp_comm *c, struct ddp_comm_req *r, const char *msg)
{
    comm_fail(c, r->what, msg[0] ? msg : "could not start");
}

static size_t dtype_size(enum ddp_dtype t)
{
    switch (t) {
    case DDP_F32:
        return 4;
    case DDP_F64:
        return 8;
    case DDP_I64:
        return 8;
    }
    ddp_die("unknown dtype %d given to a collective", (int)t);
}

static ddp_comm_req *allreduce_start(ddp_comm *c, void *buf, size_t n, enum ddp_dtype t,
                                     enum ddp_comm_op op, const char *what)
{
    (void)dtype_size(t);
    if (n > COMM_MAX_COUNT)
        ddp_die("%s of %zu elements exceeds the limit of %zu per request: use smaller buckets",
                what, n, COMM_MAX_COUNT);
    struct ddp_comm_req *r = req_get(c, what);
    char msg[256] = "";
    if (c->ops->iallreduce(c, r, buf, n, t, op, msg, sizeof msg) != 0)
        start_failed(c, r, msg);
    return r;
}

/* Map a user-facing world to an error message when MPI is needed but did not launch us. */
static void no_mpi_launcher(const struct ddp_world *w, char *err, size_t errlen)
{
    switch (w->launcher) {
    case DDP_LAUNCHER_SLURM: {
        /* srun exports its --mpi plugin to the tasks; pmi2 is one OpenMPI cannot use */
        const char *plugin = getenv("SLURM_MPI_TYPE");
        if (plugin && *plugin && strcmp(plugin, "none") != 0)
            ddp_err(err, errlen,
                    "%d tasks were started by srun --mpi=%.32s, which this OpenMPI cannot use "
                    "for CPU ranks: run CPU jobs with `srun --mpi=pmix ...` (PMI2 serves only "
                    "the NCCL bootstrap of GPU jobs)",
                    w->world_size, plugin);
        else
            ddp_err(err, errlen,
                    "%d tasks were started by srun without an MPI plugin: run CPU jobs with "
                    "`srun --mpi=pmix ...`",
                    w->world_size);
        return;
    }
    case DDP_LAUNCHER_TORCHRUN:
        ddp_err(err, errlen,
                "%d ranks were started by a torchrun-style launcher (RANK, WORLD_SIZE), but CPU "
                "ranks talk through MPI: run CPU jobs with `mpirun -n %d ...` or "
                "`srun --mpi=pmix ...`",
                w->world_size, w->world_size);
        return;
    default:
        ddp_err(err, errlen,
                "%d ranks, but MPI did not launch this process: run CPU jobs with `mpirun` or "
                "`srun --mpi=pmix ...`",
                w->world_size);
        return;
    }
}

const char *const ddp_comm_backend_names[DDP_COMM_BACKEND_COUNT] = {"auto", "nccl", "mpi", "none"};
_Static_assert(sizeof ddp_comm_backend_names / sizeof *ddp_comm_backend_names ==
                   DDP_COMM_BACKEND_COUNT,
               "one name per comm backend");

struct ddp_comm_opts ddp_comm_opts_of(enum ddp_comm_backend b, double timeout_s)
{
    struct ddp_comm_opts o = {b, timeout_s, -1, DDP_BOOTSTRAP_AUTO, NULL};
    return o;
}

/* The backend that serves o->backend in world w: DDP_COMM_NONE (self), _MPI or _NCCL; or -1
 * with one line in err. */
static int choose_backend(const struct ddp_comm_opts *o, const struct ddp_world *w, int quiet,
                          char *err, size_t errlen)
{
    int use;
    switch (o->backend) {
    case DDP_COMM_NONE:
        if (w->world_size != 1)
            return ddp_err(err, errlen,
                           "backend = none runs a single rank, but this world has "
                           "%d: use backend = auto or mpi",
                           w->world_size);
        return DDP_COMM_NONE;
    case DDP_COMM_AUTO:
        use = w->world_size > 1 || w->mpi_launched ? DDP_COMM_MPI : DDP_COMM_NONE;
        break;
    case DDP_COMM_MPI:
        use = DDP_COMM_MPI;
        if (w->world_size == 1 && !w->mpi_launched) {
            /* MPI_Init outside an MPI launcher may abort (plain srun): one rank needs none. */
            if (!quiet)
                ddp_warn("backend = mpi, but MPI did not launch this single process: running "
                         "without MPI");
            use = DDP_COMM_NONE;
        }
        break;
    case DDP_COMM_NCCL:
#if HAVE_NCCL
        return DDP_COMM_NCCL; /* the NCCL id travels through the bootstrap: no MPI launch */
#else
        return ddp_err(err, errlen,
                       "backend = nccl needs a GPU build of ddptrain (CUDA and "
                       "NCCL); this one has none: use backend = auto or mpi");
#endif
    default:
        return ddp_err(err, errlen, "unknown backend %d (expected auto, mpi, nccl or none)",
                       (int)o->backend);
    }
    if (use == DDP_COMM_MPI && !w->mpi_launched) {
        no_mpi_launcher(w, err, errlen);
        return -1;
    }
    if (use == DDP_COMM_MPI && !HAVE_MPI)
        return ddp_err(err, errlen,
                       "%d ranks need MPI, but this ddptrain was built without it: "
                       "install libopenmpi-dev and rebuild",
                       w->world_size);
    return use;
}

/* The options and the world as such: 0, or -1 with one line in err. */
static int check_args(const struct ddp_comm_opts *o, const struct ddp_world *w, char *err,
                      size_t errlen)
{
    if (!w || !o)
        return ddp_err(err, errlen,
                       "internal error: no world or options given to the communicator");
    if (!(o->timeout_s > 0) || o->timeout_s > COMM_MAX_TIMEOUT_S)
        return ddp_err(err, errlen, "[dist] timeout_s must be in (0, %g] seconds (got %g)",
                       COMM_MAX_TIMEOUT_S, o->timeout_s);
    if (w->world_size < 1 || w->rank < 0 || w->rank >= w->world_size)
        return ddp_err(err, errlen, "internal error: rank %d of a world of %d", w->rank,
                       w->world_size);
    return 0;
}

int ddp_comm_check(const struct ddp_comm_opts *o, const struct ddp_world *w, char *err,
                   size_t errlen)
{
    if (check_args(o, w, err, errlen) < 0)
        return -1;
    return choose_backend(o, w, 1, err, errlen) < 0 ? -1 : 0;
}

ddp_comm *ddp_comm_create(const struct ddp_comm_opts *o, const struct ddp_world *w, char *err,
                          size_t errlen)
{
    if (check_args(o, w, err, errlen) < 0)
        return NULL;
    int use = choose_backend(o, w, 0, err, errlen);
    if (use < 0)
        return NULL;

    ddp_comm *c = ddp_calloc(1, sizeof *c);
    c->rank = w->rank;
    c->size = w->world_size;
    c->timeout_s = o->timeout_s;
    c->backend = (enum ddp_comm_backend)use;
    snprintf(c->host, sizeof c->host, "%s", w->host);
    if (!c->host[0] && gethostname(c->host, sizeof c->host) != 0)
        snprintf(c->host, sizeof c->host, "?");
    c->host[sizeof c->host - 1] = '\0';

    int rc;
#if HAVE_NCCL
    if (use == DDP_COMM_NCCL)
        rc = ddp_comm_nccl_init(c, w, o, err, errlen);
    else
#endif
#if HAVE_MPI
        if (use == DDP_COMM_MPI)
        rc = ddp_comm_mpi_init(c, w, err, errlen);
    else
#endif
        rc = ddp_comm_self_init(c, err, errlen);
    if (rc != 0) {
        free(c);
        return NULL;
    }
    g_hook_comm = c;
    ddp_set_abort_hook(comm_abort_hook);
    return c;
}

/* The bootstrap's broadcast through c. */
static void bootstrap_bcast(void *ctx, void *buf, size_t len)
{
    ddp_comm_broadcast(ctx, buf, len, 0);
}

const struct ddp_bootstrap_bcast *ddp_comm_bootstrap_bcast(ddp_comm *c,
                                                           struct ddp_bootstrap_bcast *b)
{
    if (!c)
        return NULL;
    memset(b, 0, sizeof *b);
    b->rank = c->rank;
    b->size = c->size;
    if (c->backend == DDP_COMM_MPI) {
        b->fn = bootstrap_bcast;
        b->ctx = c;
    } else {
        b->why_not = "the communicator is not MPI";
    }
    return b;
}

void ddp_comm_destroy(ddp_comm *c)
{
    if (!c)
        return;
    while (c->active_head)
        ddp_comm_wait(c, c->active_head);
    /* Every rank must reach here before MPI_Finalize, whose own rendezvous has no deadline. */
    if (c->size > 1)
        ddp_comm_barrier(c);
    if (g_hook_comm == c) {
        ddp_set_abort_hook(NULL);
        g_hook_comm = NULL;
    }
    if (c->ops->destroy)
        c->ops->destroy(c);
    for (size_t i = 0; i < c->nslabs; i++)
        free(c->slabs[i]);
    free(c->slabs);
    free(c);
}

const char *ddp_comm_name(const ddp_comm *c)
{
    return c->ops->name;
}

double ddp_comm_busbw_factor(int world_size)
{
    return world_size > 1 ? 2.0 * (world_size - 1) / world_size : 0.0;
}
int ddp_comm_rank(const ddp_comm *c)
{
    return c->rank;
}
int ddp_comm_size(const ddp_comm *c)
{
    return c->size;
}

ddp_comm_req *ddp_comm_allreduce_start(ddp_comm *c, void *buf, size_t n, enum ddp_dtype t)
{
    return allreduce_start(c, buf, n, t, DDP_OP_SUM, "allreduce");
}

void ddp_comm_wait(ddp_comm *c, ddp_comm_req *r)
{
    if (!r)
        return;
    if (!r->active)
        ddp_die("internal error: wait on a request that was already waited for");
    if (!r->done) {
        struct wait_arg a = {c, r};
        char msg[256] = "";
        const int rc = ddp_comm_poll(c->timeout_s, wait_test, &a, msg, sizeof msg);
        if (rc != 1)
            comm_fail(c, r->what, rc == 0 ? NULL : msg[0] ? msg : "unknown error");
        r->done = 1;
    }
    req_put(c, r);
}

void ddp_comm_wait_device(ddp_comm *c, ddp_comm_req *r)
{
    if (!r)
        return;
    if (c->ops->order_after && r->active && !r->done) {
        char msg[256] = "";
        const int rc = c->ops->order_after(c, r, msg, sizeof msg);
        if (rc < 0)
            comm_fail(c, r->what, msg[0] ? msg : "unknown error");
        if (rc == 1) {
            r->done = 1;
            req_put(c, r);
            return;
        }
    }
    ddp_comm_wait(c, r);
}

int ddp_comm_fence(ddp_comm *c)
{
    if (!c->ops->ifence)
        return 0;
    struct ddp_comm_req *r = req_get(c, "fence (this rank's GPU work, collectives included)");
    char msg[256] = "";
    if (c->ops->ifence(c, r, msg, sizeof msg) != 0)
        start_failed(c, r, msg);
    ddp_comm_wait(c, r);
    return 1;
}

void ddp_comm_progress(ddp_comm *c)
{
    for (struct ddp_comm_req *r = c->active_head; r; r = r->next) {
        if (r->done)
            continue;
        char msg[256] = "";
        const int rc = c->ops->test(c, r, msg, sizeof msg);
        if (rc < 0)
            comm_fail(c, r->what, msg[0] ? msg : "unknown error");
        r->done = rc == 1;
    }
}

/* Blocking all-reduce with op, split into pieces that fit one backend request. */
static void allreduce_blocking(ddp_comm *c, void *buf, size_t n, enum ddp_dtype t,
                               enum ddp_comm_op op, const char *what)
{
    const size_t es = dtype_size(t);
    size_t off = 0;
    do {
        const size_t k = n - off < COMM_CHUNK_ELEMS ? n - off : COMM_CHUNK_ELEMS;
        ddp_comm_wait(c, allreduce_start(c, (char *)buf + off * es, k, t, op, what));
        off += k;
    } while (off < n);
}

void ddp_comm_allreduce(ddp_comm *c, void *buf, size_t n, enum ddp_dtype t)
{
    allreduce_blocking(c, buf, n, t, DDP_OP_SUM, "allreduce");
}

void ddp_comm_allreduce_max(ddp_comm *c, void *buf, size_t n, enum ddp_dtype t)
{
    allreduce_blocking(c, buf, n, t, DDP_OP_MAX, "allreduce_max");
}

void ddp_comm_broadcast(ddp_comm *c, void *buf, size_t bytes, int root)
{
    if (root < 0 || root >= c->size)
        ddp_die("internal error: broadcast from rank %d in a world of %d", root, c->size);
    size_t off = 0;
    do {
        const size_t k = bytes - off < COMM_CHUNK_BYTES ? bytes - off : COMM_CHUNK_BYTES;
        struct ddp_comm_req *r = req_get(c, "broadcast");
        char msg[256] = "";
        if (c->ops->ibroadcast(c, r, (char *)buf + off, k, root, msg, sizeof msg) != 0)
            start_failed(c, r, msg);
        ddp_comm_wait(c, r);
        off += k;
    } while (off < bytes);
}

void ddp_comm_barrier(ddp_comm *c)
{
    struct ddp_comm_req *r = req_get(c, "barrier");
    char msg[256] = "";
    if (c->ops->ibarrier(c, r, msg, sizeof msg) != 0)
        start_failed(c, r, msg);
    ddp_comm_wait(c, r);
}

void ddp_comm_allgather(ddp_comm *c, const void *send, void *recv, size_t bytes)
{
    if (bytes > COMM_MAX_COUNT)
        ddp_die("allgather of %zu bytes per rank exceeds the limit of %zu", bytes, COMM_MAX_COUNT);
    struct ddp_comm_req *r = req_get(c, "allgather");
    char msg[256] = "";
    if (c->ops->iallgather(c, r, send, recv, bytes, msg, sizeof msg) != 0)
        start_failed(c, r, msg);
    ddp_comm_wait(c, r);
}

int ddp_comm_agree(ddp_comm *c, int code, int *first_rank)
{
    int W = ddp_comm_size(c);
    int64_t mine = code, *all = ddp_malloc(sizeof(int64_t) * (size_t)W);
    ddp_comm_allgather(c, &mine, all, sizeof mine);
    int first = -1;
    for (int r = 0; r < W && first < 0; r++)
        if (all[r] != 0)
            first = r;
    int rc = first < 0 ? 0 : (int)all[first];
    free(all);
    if (first_rank)
        *first_rank = first;
    return rc;
}

void ddp_comm_abort(ddp_comm *c, int code)
{
    /* Never come back here through ddp_die. */
    if (g_hook_comm) {
        g_hook_comm = NULL;
        ddp_set_abort_hook(NULL);
    }
    fflush(stdout);
    fflush(stderr);
    if (c && c->ops->abort)
        c->ops->abort(c, code);
    exit(code);
}

/*
 * comm_impl.h - what a collective backend provides to comm.c (internal; the trainer includes
 * comm.h only).
 *
 * comm.c owns the handle, the request pool, the deadline loop and the fatal path (one line,
 * abort the job, exit DDP_EXIT_PEER). A backend only starts non-blocking operations and tests
 * them; it never waits without a bound and never exits on its own.
 */
#ifndef DDP_COMM_IMPL_H
#define DDP_COMM_IMPL_H

#include <stddef.h>

#include "comm/comm.h"
#include "ddp_build.h"

enum ddp_comm_op { DDP_OP_SUM, DDP_OP_MAX };

/* One outstanding operation. Lives in comm.c's pool; the backend keeps its own state
 * (an MPI_Request, ...) in priv. */
struct ddp_comm_req {
    struct ddp_comm_req *prev, *next; /* outstanding list, or free list (next only) */
    const char *what;                 /* "allreduce", "barrier", ... for the error line */
    int done;                         /* backend reported completion */
    int active;                       /* started and not yet waited for */
    void *priv;                       /* backend state: ops->req_size bytes after this struct */
};

/*
 * The table of a backend. Start functions return 0, or -1 with a one-line reason in err
 * (comm.c treats that as fatal). test returns 1 when r is complete, 0 when not yet, -1 on an
 * error (reason in err); after it returned 1 it is not called again for r.
 */
struct ddp_comm_ops {
    const char *name;
    size_t req_size; /* bytes of priv per request */
    int (*iallreduce)(ddp_comm *c, struct ddp_comm_req *r, void *buf, size_t n, enum ddp_dtype t,
                      enum ddp_comm_op op, char *err, size_t errlen);
    int (*ibroadcast)(ddp_comm *c, struct ddp_comm_req *r, void *buf, size_t bytes, int root,
                      char *err, size_t errlen);
    int (*ibarrier)(ddp_comm *c, struct ddp_comm_req *r, char *err, size_t errlen);
    /* send may alias recv + rank * bytes (in place). */
    int (*iallgather)(ddp_comm *c, struct ddp_comm_req *r, const void *send, void *recv,
                      size_t bytes, char *err, size_t errlen);
    int (*test)(ddp_comm *c, struct ddp_comm_req *r, char *err, size_t errlen);
    /* Optional (device backends): order the compute stream after r without a host wait.
     * Returns 1 when done so (r is then complete as far as the caller is concerned), 0 when r
     * needs a host wait (a host buffer), -1 on an error. */
    int (*order_after)(ddp_comm *c, struct ddp_comm_req *r, char *err, size_t errlen);
    /* Optional: start a request that completes when the compute stream's work queued so far
     * has run (tested with test). */
    int (*ifence)(ddp_comm *c, struct ddp_comm_req *r, char *err, size_t errlen);
    /* Free backend state; outstanding requests are already complete. Optional. */
    void (*destroy)(ddp_comm *c);
    /* Tear down every rank of the job with code; may return (comm.c exits then). Optional:
     * NULL means exiting this process is enough (one rank). */
    void (*abort)(ddp_comm *c, int code);
};

struct ddp_comm {
    const struct ddp_comm_ops *ops;
    enum ddp_comm_backend backend; /* the one serving: self is DDP_COMM_NONE */
    void *impl;                    /* backend state, owned by the backend */
    int rank, size;
    double timeout_s;
    char host[256];
    struct ddp_comm_req *active_head, *active_tail; /* outstanding, in start order */
    struct ddp_comm_req *free_list;
    void **slabs; /* request pool storage, freed at destroy */
    size_t nslabs;
    /* optional: names the peers that are gone, for the failure message (liveness.h) */
    void (*peer_probe)(void *ctx, char *buf, size_t len);
    void *peer_probe_ctx;
};

/* Deadline loop shared by every wait: calls test(arg) until it returns non-zero, with a
 * backoff from spinning to sched_yield to sleeps of a few us growing to ~1 ms.
 * Returns test's value (1 done, -1 error), or 0 if timeout_s passed first. */
int ddp_comm_poll(double timeout_s, int (*test)(void *arg, char *err, size_t errlen), void *arg,
                  char *err, size_t errlen);

/* Backends. Each fills c->ops and c->impl, or returns -1 with a message in err. */
int ddp_comm_self_init(ddp_comm *c, char *err, size_t errlen);
#if HAVE_MPI
int ddp_comm_mpi_init(ddp_comm *c, const struct ddp_world *w, char *err, size_t errlen);
#endif

#endif

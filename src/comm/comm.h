/*
 * comm.h - collectives between the ranks of one job, behind a table of backends:
 *   self  one process (world size 1): every collective is a copy or a no-op;
 *   mpi   OpenMPI (CPU ranks), MPI_Init only where MPI really launched the process;
 *   nccl  NCCL (one GPU per rank; comm_nccl.h), whose unique id travels through the
 *         bootstrap (dist/bootstrap.h).
 *
 * Every wait on a peer has a deadline (timeout_s given at create): a collective that does not
 * complete in time aborts the communicator on this rank and exits DDP_EXIT_PEER with a message
 * that names the rank that stopped answering where it can be known. Nothing here returns a
 * half-finished collective to the caller.
 *
 * Buffers are host memory for self and mpi; nccl takes device or host memory. The caller owns every buffer it passes; a buffer
 * given to an async all-reduce must stay untouched until ddp_comm_wait returns.
 */
#ifndef DDP_COMM_H
#define DDP_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "dist/bootstrap.h"

struct ddp_world;

typedef struct ddp_comm ddp_comm;
/* Handle of one outstanding non-blocking all-reduce; freed by ddp_comm_wait. */
typedef struct ddp_comm_req ddp_comm_req;

enum ddp_dtype { DDP_F32, DDP_F64, DDP_I64 };

/* [dist] backend; ddp_comm_backend_names holds the job file's words, in this order.
 * auto: mpi for several ranks (or where MPI launched the process), else self; none: self,
 * one rank only. */
enum ddp_comm_backend {
    DDP_COMM_AUTO,
    DDP_COMM_NCCL,
    DDP_COMM_MPI,
    DDP_COMM_NONE,
    DDP_COMM_BACKEND_COUNT
};
extern const char *const ddp_comm_backend_names[DDP_COMM_BACKEND_COUNT];

struct ddp_comm_opts {
    enum ddp_comm_backend backend;
    double timeout_s; /* deadline of every wait on a peer ([dist] timeout_s) */
    /* nccl only: */
    int device;                        /* CUDA device of this rank; -1: the CUDA backend's */
    enum ddp_bootstrap_kind bootstrap; /* how the NCCL id travels */
    ddp_comm *boot_comm;               /* bootstrap mpi: the MPI communicator to carry it */
};

/* Returns NULL with a one-line message in err (caller exits DDP_EXIT_LAUNCH) when the backend
 * cannot serve this world, e.g. several Slurm tasks started without --mpi=pmix. The last
 * communicator made is the one ddp_die aborts (so no peer waits on a rank that died), until it
 * is destroyed; in a world of one rank ddp_die only exits. */
ddp_comm *ddp_comm_create(const struct ddp_comm_opts *o, const struct ddp_world *w, char *err,
                          size_t errlen);
/* The checks of ddp_comm_create that depend only on the options, the build and the launcher
 * (a backend this build lacks, CPU ranks that MPI did not start, a bad timeout), made without
 * creating anything or printing: every rank of a launch reaches the same verdict, so a caller
 * may print it once (rank 0) and have every rank exit DDP_EXIT_LAUNCH. Returns 0, or -1 with
 * ddp_comm_create's one-line message in err. */
int ddp_comm_check(const struct ddp_comm_opts *o, const struct ddp_world *w, char *err,
                   size_t errlen);
/* The options for backend b with the deadline timeout_s and no NCCL settings. */
struct ddp_comm_opts ddp_comm_opts_of(enum ddp_comm_backend b, double timeout_s);
void ddp_comm_destroy(ddp_comm *c); /* accepts NULL; finalizes MPI if it initialised it */

/* The broadcast c offers the bootstrap (dist/bootstrap.h, kind mpi): c's own broadcast when c
 * is the MPI backend; else none, saying why. c may be NULL (returns NULL then). */
const struct ddp_bootstrap_bcast *ddp_comm_bootstrap_bcast(ddp_comm *c,
                                                           struct ddp_bootstrap_bcast *b);

const char *ddp_comm_name(const ddp_comm *c); /* "self", "mpi", ... */
int ddp_comm_rank(const ddp_comm *c);
int ddp_comm_size(const ddp_comm *c);

/* In-place sum over all ranks of n elements of buf; returns at once, complete with wait. */
ddp_comm_req *ddp_comm_allreduce_start(ddp_comm *c, void *buf, size_t n, enum ddp_dtype t);
/* Wait for req under the communicator's deadline, then free it. */
void ddp_comm_wait(ddp_comm *c, ddp_comm_req *req);
/* Order the backend's later work after req without waiting on the host, then free req. On
 * NCCL the compute stream waits for the collective's event (the GPU, not the host, waits);
 * the deadline is then enforced by the next host wait on that stream, ddp_comm_fence. Other
 * backends (host memory) simply wait, as ddp_comm_wait. req's buffer must be device memory on
 * NCCL. */
void ddp_comm_wait_device(ddp_comm *c, ddp_comm_req *req);
/* Wait, under the deadline, until the work queued so far on the CUDA backend's compute stream
 * has run, collectives it waits for included (a dead peer is then reported as by any wait).
 * Returns 1 when it waited so; 0 when this backend has no device work to fence (self, mpi): the
 * caller synchronises the backend itself. */
int ddp_comm_fence(ddp_comm *c);
/* Progress outstanding requests without blocking (lets MPI move data during backward). */
void ddp_comm_progress(ddp_comm *c);

/* Blocking collectives, all under the deadline. */
void ddp_comm_allreduce(ddp_comm *c, void *buf, size_t n, enum ddp_dtype t); /* sum */
void ddp_comm_allreduce_max(ddp_comm *c, void *buf, size_t n, enum ddp_dtype t);
void ddp_comm_broadcast(ddp_comm *c, void *buf, size_t bytes, int root);
void ddp_comm_barrier(ddp_comm *c);
/* recv holds size * bytes: rank r's send lands at recv + r * bytes. */
void ddp_comm_allgather(ddp_comm *c, const void *send, void *recv, size_t bytes);
/* Every rank learns whether all succeeded (code 0 each): returns 0, or the code of the lowest
 * rank whose code is not 0, the same on every rank. *first_rank (may be NULL): that rank, or
 * -1. Collective. */
int ddp_comm_agree(ddp_comm *c, int code, int *first_rank);

/* Optional: a probe that names the peers that are gone (e.g. liveness.h), consulted when a
 * collective fails or times out so the message says which rank died. */
void ddp_comm_set_peer_probe(ddp_comm *c, void (*probe)(void *ctx, char *buf, size_t len),
                             void *ctx);

/* The bus bandwidth factor of an all-reduce among world_size ranks, 2 (W - 1) / W, as
 * nccl-tests define it: busbw = bytes x factor / time. 0 for one rank. */
double ddp_comm_busbw_factor(int world_size);

/* Tear the job down from this rank so no peer waits: MPI_Abort or equivalent, then exit. */
void ddp_comm_abort(ddp_comm *c, int code) __attribute__((noreturn));

#endif

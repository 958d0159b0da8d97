/*
 * comm_nccl.h - the NCCL collective backend (comm_nccl.c), one GPU per rank. Built only where
 * ddp_build.h says HAVE_NCCL; the trainer reaches it through comm.h (ddp_comm_create with
 * backend DDP_COMM_NCCL; the options name the device and the bootstrap).
 *
 * Setup: rank 0 makes the NCCL unique id, the bootstrap (dist/bootstrap.h: PMI2 KVS, MPI or
 * the TCP rendezvous, [dist] bootstrap) carries it to every rank, then a non-blocking
 * ncclCommInitRankConfig is polled under the [dist] timeout_s deadline: a rank that never
 * comes makes setup fail with one line (the caller exits DDP_EXIT_LAUNCH), not hang.
 *
 * Collectives run on a communication stream of their own (highest priority). Each start
 * records an event on the CUDA backend's compute stream (ddp_cuda_stream) and makes the
 * communication stream wait for it, so a gradient bucket is reduced after the kernels that
 * wrote it, with no host synchronisation; its request is an event recorded after the
 * collective. comm.c's wait polls cudaEventQuery and ncclCommGetAsyncError under the deadline;
 * on expiry or an NCCL error comm.c prints its one line, this backend's abort calls
 * ncclCommAbort, and the process exits DDP_EXIT_PEER.
 *
 * Buffers may be device memory (used in place) or host memory (staged through page-locked and
 * device bounce buffers owned here, copied back when the request completes): the trainer's
 * small host collectives (setup agreement, metrics, SyncBatchNorm sums) work unchanged.
 *
 * What it does not do: pick or bind the GPU (dist/binding.h, backend/select.h), create the compute stream
 * (backend/cuda.h), or run several ranks on one GPU (NCCL refuses that).
 */
#ifndef DDP_COMM_NCCL_H
#define DDP_COMM_NCCL_H

#include <stddef.h>

#include "comm/comm.h"
#include "dist/bootstrap.h"
#include "dist/world.h"

/* comm.c's constructor for backend nccl: fills c->ops and c->impl, or returns -1 with one
 * line in err. c->rank, c->size, c->timeout_s and c->host are set by the caller. From o: the
 * CUDA device this rank drives (-1: the CUDA backend's device, else the current one), how the
 * NCCL id travels, and for bootstrap mpi the MPI communicator to carry it (NULL otherwise;
 * auto never picks mpi without one). When the bootstrap used PMI2, destroying the
 * communicator releases it (ddp_bootstrap_finalize). */
int ddp_comm_nccl_init(ddp_comm *c, const struct ddp_world *w, const struct ddp_comm_opts *o,
                       char *err, size_t errlen);

/* "NCCL 2.28.9" (the library loaded at run time); needs no GPU. Static storage. */
const char *ddp_nccl_version_string(void);

#endif

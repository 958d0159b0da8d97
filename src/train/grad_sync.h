/*
 * grad_sync.h - the "DDP" of ddptrain: gradient buckets, all-reduce overlapped with backward,
 * averaging, rank-0 broadcast of the initial state and the model fingerprint check.
 *
 * Buckets are contiguous slices of the flat gradient buffer (model.h lays parameters out in
 * reverse layer order). They are built at start from the layers that hold parameters, walking
 * backward from the last layer: the first bucket closes at min(1 MiB, bucket_mb), the others at
 * bucket_mb, always at a layer boundary (a layer larger than the cap is a bucket of its own),
 * as PyTorch's DDP does. During backward, ddp_sync_layer_done is the model's per-layer hook:
 * when the last layer of a bucket reports, the bucket's non-blocking all-reduce starts at
 * once, while backward goes on through earlier layers. ddp_sync_finish waits for the buckets
 * in order and leaves the SUM over ranks in the gradients: the optimiser divides by the world
 * size as it reads them (optim.h), so no extra pass runs. Every rank starts the buckets in the
 * same order.
 *
 * With world size 1 nothing is communicated.
 *
 * Trace (for tests): when enabled, the order of "layer L done" and "bucket B started" events
 * of the first step is recorded and can be written out (DDP_TEST_TRACE=path in the trainer, core/testhooks.h).
 */
#ifndef DDP_DDP_H
#define DDP_DDP_H

#include <stdint.h>
#include <stdio.h>

#include "comm/comm.h"
#include "nn/model.h"

#define DDP_FIRST_BUCKET_BYTES (1u << 20)

struct ddp_bucket {
    size_t off, n; /* slice of grads, floats */
    int hi, lo;    /* layers covered: from index hi down to lo */
    int nlayers;   /* layers with parameters in it */
    int pending;   /* layers still to report this step */
    ddp_comm_req *req;
};

enum ddp_trace_kind { DDP_TRACE_LAYER_DONE, DDP_TRACE_BUCKET_START, DDP_TRACE_BUCKET_DONE };

struct ddp_trace_event {
    enum ddp_trace_kind kind;
    int id; /* layer index or bucket index */
};

struct ddp_sync {
    ddp_comm *comm;
    struct ddp_model *m;
    int world_size;
    int nbuckets;
    struct ddp_bucket *buckets;
    int *layer_bucket; /* layer -> bucket, -1 for layers without parameters */
    /* Since the last ddp_sync_take_stats: seconds this rank spent in all-reduce calls (start,
     * progress, wait: the communication backward did not hide) and floats all-reduced. */
    double comm_s;
    double comm_floats;
    /* On a GPU (the backend's stall_mark) with world size > 1: the device's stall clock around
     * the compute stream's waits for the buckets, which the host does not see (and which CUDA
     * graphs replay without the host); ddp_sync_take_stats reports it instead of comm_s.
     * NULL otherwise. */
    void *stall;
    int trace_on;
    int ntrace;
    struct ddp_trace_event trace[1024];
};

void ddp_sync_init(struct ddp_sync *s, ddp_comm *comm, struct ddp_model *m, double bucket_mb);
void ddp_sync_free(struct ddp_sync *s); /* accepts a zeroed struct */

/* Rank 0's parameters and buffers to every rank. */
void ddp_sync_broadcast_state(struct ddp_sync *s);
/* Compare the model fingerprint across ranks; -1 with err naming the first rank that differs. */
int ddp_sync_check_fingerprint(struct ddp_sync *s, char *err, size_t errlen);

/* Per step: reset pending counts (call before backward). */
void ddp_sync_begin(struct ddp_sync *s);
/* Model hook (ctx = struct ddp_sync *). */
void ddp_sync_layer_done(void *ctx, int layer);
/* Order what follows after every bucket, in order (the gradients then hold the sum over
 * ranks for the backend's later work). On NCCL the compute stream waits for each bucket's
 * event (cudaStreamWaitEvent), the host does not; else the host waits. */
void ddp_sync_finish(struct ddp_sync *s);

/* Communication since the last call (world size > 1; zeros otherwise), then reset:
 * *comm_s seconds spent in all-reduce calls and *busbw_gbs, the bus bandwidth over that time
 * (bytes x 2(W-1)/W / comm_s, as nccl-tests define it; 0 when nothing was timed). On a GPU
 * (s->stall): *comm_s is the time the device's compute stream stalled waiting for the buckets
 * after backward, read from the device (a host synchronisation: call it at log steps), and
 * *busbw_gbs is -1, not measured (NCCL's own time per call is not timed). */
void ddp_sync_take_stats(struct ddp_sync *s, double *comm_s, double *busbw_gbs);

/* Replica check: hash every parameter tensor on each rank and compare across ranks. Returns 0
 * when all agree; else -1 with one line naming the first rank that disagrees with the majority,
 * its host (hosts: W names of host_len bytes each) and the tensor. */
int ddp_sync_check_replicas(struct ddp_sync *s, const char *hosts, size_t host_len, char *err,
                            size_t errlen);

/* Write the bucket layout and the recorded trace as text, one event a line. */
void ddp_sync_write_trace(const struct ddp_sync *s, FILE *f);

#endif

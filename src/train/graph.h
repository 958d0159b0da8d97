/*
 * graph.h - [train] cuda_graph: the steady-state training step captured once as a CUDA graph
 * and replayed (backend.h graph_*; docs/gpu.md, CUDA Graphs).
 *
 * A full batch's step is captured at the first full step of each device input set after the
 * process's first (which grows the workspace) and replayed from then on, log and checkpoint
 * steps included (what they add runs after the step, uncaptured); a short last batch and the
 * first step run as ddp_step_run. What changes per step (learning rate, momentum or beta1,
 * the optimiser's t, the dropout seed) reaches the graph through device memory.
 * With [train] accumulate = K > 1 each micro-batch is a graph of its own, by role: the first
 * (zeroes the gradients; no all-reduce), a middle one (no all-reduce) and the last (all-reduce,
 * clipping, optimiser), each per input set: graph slot = set + 2 x role, at most
 * DDP_GRAPH_SLOTS. An optimiser step of a single micro-batch with K > 1 (an epoch's
 * leftover) runs uncaptured.
 * [optim] clip_grad_norm is captured: its factor stays on the device (backend.h clip_scale).
 * Not captured: backends without graphs (the CPU).
 */
#ifndef DDP_GRAPH_H
#define DDP_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "job/config.h"
#include "train/step.h"

struct ddp_graph {
    int enabled;                /* capture and replay full steps */
    int batch;                  /* the full batch size the graphs are for */
    int warm;                   /* full steps this process ran uncaptured first */
    int ready[DDP_GRAPH_SLOTS]; /* graph slot s (set + 2 x role) is captured */
    int64_t captures, launches;
};

/* g for `job` on be: enabled when cuda_graph is auto or on and be has graphs (every job can
 * be captured there). With on and a backend without graphs (the CPU), one line naming the
 * key, the reason and the fix in err and -1 (exit 2); auto there runs uncaptured, silently. */
int ddp_graph_init(struct ddp_graph *g, const struct ddp_job *job, const struct ddp_backend *be,
                   char *err, size_t errlen);

/* One micro-batch x, y (n samples, in device input set `set` just uploaded), as
 * ddp_step_micro(s, x, y, n, noise, lr, first, last): captured, replayed or run as is. With
 * accumulate <= 1, first = last = 1: one optimiser step. */
double ddp_graph_micro(struct ddp_graph *g, const struct ddp_step *s, const float *x,
                       const int32_t *y, int n, int set, uint64_t noise, double lr, int first,
                       int last);

#endif

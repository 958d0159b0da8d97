/*
 * model.h - a sequential network described by `[model] layers`, run through a backend.
 *
 * Dimension letters: B batch, C H W sample shape, D flat features, K classes.
 *
 * Parameters live in ONE flat buffer (params), gradients in another of the same layout
 * (grads), laid out in reverse layer order: the last layer's weight and bias come first, so the
 * slices that backward finishes first are the first contiguous slices, and every gradient bucket
 * (train/grad_sync.c) is a single slice. Batchnorm running statistics live in a separate flat buffer
 * (buffers), never in params: they are not trained and not all-reduced.
 *
 * Names follow PyTorch's nn.Sequential: `<index>.weight`, `<index>.bias`, where index counts
 * every layer, parameterless ones included; batchnorm adds `<index>.running_mean`,
 * `<index>.running_var` and `<index>.num_batches_tracked`.
 *
 * Residual blocks: `residual(L1, L2, ...)` is one item of the list whose output is
 * body(x) + shortcut(x). The model holds it as a graph in topological order: the body's layers
 * (named `<i>.body.<j>`), when the body changes the shape a 1x1 convolution without bias and a
 * batchnorm on the block's input (`<i>.shortcut.0`, `<i>.shortcut.1`), then a join layer
 * (kind DDP_LAYER_RESIDUAL, named `<i>`, no parameters) that adds its two inputs. Every layer
 * names the layer(s) it reads (in, in2; -1 is the model's input). A layer whose output feeds
 * two others gets the sum of both gradients: the first consumer in backward order overwrites
 * its dout, the second adds into it (acc, acc2). Parameters stay in reverse list order, which
 * is the order backward finishes them, so buckets stay contiguous.
 *
 * The model owns every buffer it allocates (activations, gradients, scratch); ddp_model_free
 * releases them. It does not read files (weights.c does) nor talk to other ranks: batchnorm
 * synchronisation and the per-layer "gradients are final" signal go through the hooks below.
 */
#ifndef DDP_MODEL_H
#define DDP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

enum ddp_layer_kind {
    DDP_LAYER_FLATTEN,
    DDP_LAYER_LINEAR,
    DDP_LAYER_RELU,
    DDP_LAYER_CONV2D,
    DDP_LAYER_MAXPOOL,
    DDP_LAYER_AVGPOOL,
    DDP_LAYER_DROPOUT,
    DDP_LAYER_BATCHNORM,
    DDP_LAYER_GLOBALAVGPOOL, /* (C,H,W) -> (C,1,1), nn.AdaptiveAvgPool2d(1) */
    DDP_LAYER_RESIDUAL,      /* parsing: opens a block; model: the join, out = in + in2 */
    DDP_LAYER_RESIDUAL_END,  /* parsing only: closes the innermost block */
};

#define DDP_MODEL_NEST_MAX 4  /* residual blocks inside residual blocks: deeper is a typo */
#define DDP_MODEL_NAME_MAX 96 /* "12.body.3.body.1.shortcut.1.num_batches_tracked" fits */

#define DDP_MODEL_LAYERS_MAX 256         /* a spec line longer than this is surely a mistake */
#define DDP_MODEL_PARAMS_MAX (1LL << 31) /* floats: keeps offsets within int GEMM arguments */

struct ddp_layer_spec {
    enum ddp_layer_kind kind;
    int n;              /* linear: out features; conv2d: out channels */
    int k, stride, pad; /* conv2d, pools: window */
    float p;            /* dropout */
    int nobias;         /* conv2d, linear: bias=false */
    int at;             /* where the layer starts in the layers text (for messages) */
};

/* One named tensor of the model: a parameter (in params/grads) or a buffer (in buffers). */
struct ddp_tensor_info {
    char name[DDP_MODEL_NAME_MAX]; /* "3.weight", "2.body.0.weight" */
    int is_buffer;                 /* 0: params slice; 1: buffers slice */
    size_t off, n;                 /* floats */
    int ndim;
    int64_t dims[4]; /* PyTorch shape */
};

struct ddp_layer {
    struct ddp_layer_spec spec;
    int index;                          /* position in the top-level nn.Sequential */
    char name[DDP_MODEL_NAME_MAX - 24]; /* PyTorch module path: "3", "2.body.1", "2.shortcut.0" */
    char pos[48];                       /* 1-based place for messages: "3", "2.1", "2 (shortcut)" */
    int in, in2;   /* layers read (-1: the model's input); in2: residual joins only */
    int acc, acc2; /* backward adds into in's (in2's) dout instead of overwriting it */
    int fused;     /* 1: a linear or conv2d whose forward applies the next layer's relu into
                * that layer's out (its own out is not stored); 2: that relu (forward done);
                * 3: a conv2d whose forward also runs the next relu and the maxpool after it
                * (conv2d_relu_maxpool_fwd; its out is the pre-activation, scratch);
                * 4: a relu whose only reader is a maxpool (5) that runs it both ways
                * (relu_maxpool_fwd, maxpool_relu_bwd): nothing of its own, no out;
                * 6: a batchnorm whose forward applies the next layer's relu into that
                * layer's out and whose backward runs the relu's too (bn_relu_*): no out,
                * no dout; 7: that relu (its out and dout stored, nothing run);
                * 8: a residual join whose only reader is the relu after it: its forward
                * writes max(0, in + in2) into that relu's out (add_relu_fwd), its backward
                * takes the relu's dout through the relu's backward into in's and in2's
                * douts (relu_bwd_join): no out, no dout; 9: that relu (as 7) */
    int relayout;  /* a flatten of a channels-last (C,H,W) input with C > 1 and H*W > 1: its out
                   * and dout are its own, in PyTorch's order (to_nchw forward, to_nhwc back) */
    int in_ndim, ishape[3]; /* (D) or (C,H,W) per sample */
    int out_ndim, oshape[3];
    size_t in_elems, out_elems;    /* per sample */
    size_t w_off, w_n, b_off, b_n; /* slices of params/grads; w_n == 0 if none */
    size_t rm_off, rv_off;         /* batchnorm slices of buffers */
    int64_t num_batches_tracked;
    /* out, dout, aux, argmax, dtmp lie in the model's arena where the memory plan puts them:
     * valid only over the part of a step the plan gives them (see ddp_mem_plan) */
    float *out;      /* (B, out_elems); flatten aliases its input (unless relayout) */
    float *dout;     /* (B, out_elems) gradient of out; NULL below the first parameters */
    float *aux;      /* batchnorm xhat / dropout mask, (B, out_elems) */
    float *dtmp;     /* (B, in's out_elems) in's gradient before it is added into in's dout (acc) */
    int32_t *argmax; /* maxpool */
    uint8_t *argmax8;     /* maxpool after a relu (fused 5): the place in the window */
    float *mean, *invstd; /* batchnorm, (C) */
    double *sums; /* batchnorm, backend memory, 3 x (2C+1): forward, backward local, global */
};

struct ddp_model {
    const struct ddp_backend *be;
    int nlayers;
    struct ddp_layer *layers;
    int in_ndim, ishape[3];
    size_t in_elems;
    int classes; /* K: elements of the last layer's output */
    int max_batch;
    size_t nparams, nbuffers;
    float *params, *grads; /* (nparams) backend memory */
    float *buffers;        /* (nbuffers) backend memory */
    int ntensors;
    struct ddp_tensor_info *tensors; /* in nn.Sequential order */
    float *col;                      /* conv scratch */
    void *arena;                     /* every layer's batch-sized buffers, by the plan */
    size_t arena_bytes;
    uint64_t fingerprint; /* hash of the architecture and input shape */
    int err_at;           /* after ddp_model_create failed: the character of layers to blame */
    /* Channels-last: the backend's layout (backend.h set_layout) was NHWC at build. The
     * model's input arrives in PyTorch's order; where a layer other than flatten reads it and
     * the two orders differ (C > 1 and H*W > 1), forward first writes it channels-last into
     * xin (a block of the arena) and those layers read xin. */
    int nhwc;
    float *xin;
    /* bf16 storage: the backend's act_type (backend.h set_act_type) was DDP_ACT_BF16 at build.
     * Every activation block of the arena (outputs, their gradients, batchnorm's xhat, xin)
     * then holds act_bytes = 2 bytes a value (4 under fp32); dropout's mask and the argmaxes
     * keep theirs. The input, fp32 from the trainer, is converted into xin (channels-last too
     * where the model is), and the logits and their gradient pass through two fp32 blocks:
     * forward converts the last layer's output into logits, backward dlogits into its dout. */
    int act16;
    size_t act_bytes;
    float *logits, *dlogits; /* (B, K) fp32 under act16; NULL under fp32 */

    /* Sum of n doubles (backend memory) over all ranks, in place (SyncBatchNorm), ordered
     * before the backend's later work; NULL: local statistics. */
    void (*sync_sums)(void *ctx, double *buf, size_t n);
    void *sync_ctx;
};

/* Parse a layer list into specs in pre-order: a residual block is a DDP_LAYER_RESIDUAL spec,
 * its body's specs, then a DDP_LAYER_RESIDUAL_END spec. Returns the number of specs, or -1
 * with a one-line reason (naming the item and its position, e.g. "layer 3.2") in err and, in
 * *err_at (may be NULL), the offset in text of the character to blame (-1: none). */
int ddp_model_parse(const char *text, struct ddp_layer_spec *specs, int max, int *err_at, char *err,
                    size_t errlen);

/* Build the model for input samples of in_dims (ndim 1: D, ndim 3: C,H,W) and batches of at
 * most max_batch. Fails (-1, err) when the layers do not fit the input shape; then m->err_at
 * is the offset in layers of the character to blame (-1: none). */
int ddp_model_create(struct ddp_model *m, const struct ddp_backend *be, const char *layers,
                     int in_ndim, const int64_t *in_dims, int max_batch, char *err, size_t errlen);
void ddp_model_free(struct ddp_model *m);

/* PyTorch's default initialisation (kaiming-uniform a=sqrt(5) weights, U(+-1/sqrt(fan_in))
 * biases, batchnorm weight 1 bias 0, running mean 0 var 1) from a seeded generator. */
void ddp_model_init(struct ddp_model *m, uint64_t seed);

/* Forward a batch x (B, in_elems) in backend memory; returns the logits (B, K), fp32 whatever
 * the activations' storage. train selects batch statistics and dropout; noise_seed makes
 * dropout masks a pure function of the step. */
const float *ddp_model_forward(struct ddp_model *m, const float *x, int B, int train,
                               uint64_t noise_seed);
/* The logits' gradient buffer (B, K), fp32, to be filled by the loss before backward. */
float *ddp_model_dlogits(struct ddp_model *m);
/* Backward after forward (train mode). Adds into grads. After layer i's parameter gradients
 * are final, calls layer_done(ctx, i) (may be NULL). */
void ddp_model_backward(struct ddp_model *m, const float *x, int B,
                        void (*layer_done)(void *ctx, int layer), void *ctx);

/* After a non-finite loss: forward the same batch again (train mode, same noise) and find the
 * culprit - non-finite input, non-finite weights, or the first layer whose output is
 * non-finite from finite input and weights - into why (one clause, with the largest |value|
 * of that layer's input). Returns 1 when the batch itself is to blame (the input or the first
 * layer's finite but huge input), else 0 (training diverged). Only for diagnosis: it costs
 * downloads of every activation. */
int ddp_model_explain_nonfinite(struct ddp_model *m, const float *x, int B, uint64_t noise_seed,
                                char *why, size_t len);

/* Bytes the model needs for batches of max_batch (what ddp_model_create checks against the
 * memory available): parameters with gradients and two optimiser states, activations and
 * their gradients as the memory plan lays them out (plus batchnorm's per-channel statistics),
 * conv scratch. unshared: the activations if no two buffers shared bytes. Returns the index of
 * the layer with the largest share (its buffers' bytes before sharing). */
struct ddp_model_mem {
    double params, activations, unshared, scratch, total, largest_layer;
};
int ddp_model_memory(const struct ddp_model *m, int max_batch, struct ddp_model_mem *out);

/* The memory plan: every batch-sized buffer of a training step (an output, its gradient, a
 * saved tensor, an input gradient before it is added) as a block of one arena, live from the
 * step that first writes it to the step that last reads it (inclusive). Steps of a model of
 * n layers: forward of layer i is step i, the loss n, backward of layer i 2n - i, 2n + 1
 * after backward. Blocks live at the same step never share bytes; others may. Like llm.c's
 * activation layout, made once at build: nothing is allocated while training. */
enum ddp_mem_what {
    DDP_MEM_OUT,
    DDP_MEM_DOUT,
    DDP_MEM_AUX,
    DDP_MEM_ARGMAX,
    DDP_MEM_DTMP,
    DDP_MEM_ARGMAX8,
    DDP_MEM_XIN,    /* layer -1: the model's input, converted (struct ddp_model xin) */
    DDP_MEM_LOGITS, /* layer -1: fp32 logits under bf16 storage (struct ddp_model logits) */
    DDP_MEM_DLOGITS /* layer -1: their fp32 gradient (struct ddp_model dlogits) */
};
struct ddp_mem_block {
    int layer; /* -1: the model's (DDP_MEM_XIN, DDP_MEM_LOGITS, DDP_MEM_DLOGITS) */
    enum ddp_mem_what what;
    int first, last;   /* steps */
    size_t bytes, off; /* in the arena, both multiples of 256 */
};
struct ddp_mem_plan {
    int nblocks, steps;
    struct ddp_mem_block *blocks; /* owned: ddp_mem_plan_free */
    size_t arena;                 /* bytes: the plan's peak */
    size_t unshared;              /* bytes of all blocks, as if none shared */
};
/* The plan of a built model for batches of B. */
void ddp_mem_plan_make(const struct ddp_model *m, int B, struct ddp_mem_plan *p);
void ddp_mem_plan_free(struct ddp_mem_plan *p);
/* 0 when every block lies in the arena and within the schedule and no two blocks live at the
 * same step overlap; else -1 with the first fault in err. */
int ddp_mem_plan_check(const struct ddp_mem_plan *p, char *err, size_t errlen);

/* Human summary "flatten, linear(784->512), ..." into buf. */
void ddp_model_describe(const struct ddp_model *m, char *buf, size_t len);

/* One layer at a time, for `ddptrain profile` (train/profile.h), which times each call; the
 * trainer runs the whole passes above. ddp_model_forward is ddp_model_forward_input (the
 * converted copy of the input, struct ddp_model xin; nothing when there is none), then
 * ddp_model_forward_layer for i = 0 .. nlayers - 1 and ddp_model_forward_end;
 * ddp_model_backward is ddp_model_backward_layer for i = nlayers - 1 down to 0 (the last
 * first converts dlogits under bf16 storage), with layer_done after each layer with
 * parameters (w_n > 0), which these leave to the caller. A layer whose work another layer's
 * call does (the `fused` codes) does nothing in its own call. */
void ddp_model_forward_input(struct ddp_model *m, const float *x, int B);
/* After the last layer's forward: the logits (B, K) in fp32, as ddp_model_forward returns
 * them (converted from bf16 storage, act16; else the last layer's output). */
const float *ddp_model_forward_end(struct ddp_model *m, int B);
void ddp_model_forward_layer(struct ddp_model *m, int i, const float *x, int B, int train,
                             uint64_t noise_seed);
void ddp_model_backward_layer(struct ddp_model *m, int i, const float *x, int B);
/* The layer whose call runs layer i's forward (backward: its backward), by the fused codes:
 * i itself, a fused partner (a relu's conv2d, linear, batchnorm, join or maxpool; a maxpool's
 * conv2d), or -1 when nothing runs (a flatten that is a view; backward below the first layer
 * with parameters, where no gradient is needed). */
int ddp_model_runner(const struct ddp_model *m, int i, int backward);
/* "conv2d -> 64x32x32", "linear -> 10": layer i's kind and output shape per sample. */
void ddp_model_layer_text(const struct ddp_model *m, int i, char *buf, size_t len);

#endif

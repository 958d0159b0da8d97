/*
 * backend.h - the table of compute operations the engine runs on: the CPU backend (OpenBLAS
 * + C loops, cpu.c) and the CUDA backend (cuBLAS + kernels, cuda/) behind the same table;
 * select.h picks one per rank.
 * The model, the optimiser and the trainer call only these; none of them calls BLAS or CUDA.
 *
 * Dimension letters: B batch, C channels in, O channels (or features) out, H W input height and
 * width, P output positions (OH*OW), S spatial positions per channel, K classes, N elements.
 * All tensors are dense, row-major, NCHW like PyTorch (activations NHWC after set_layout,
 * below). Pointers are backend memory (host for the CPU backend; device for CUDA). Every
 * backward function ADDS into weight gradients (the caller zeroes them once per step) and
 * OVERWRITES the input gradient (which may be NULL when not needed, for the first layer).
 *
 * Optional members may be NULL; the caller checks.
 */
#ifndef DDP_BACKEND_H
#define DDP_BACKEND_H

#include <stddef.h>
#include <stdint.h>

/* [train] precision: the GEMMs' arithmetic on the GPU (fp32, TF32 tensor cores, or bf16 operands
 * with fp32 accumulation); the CPU computes in fp32 whatever it says. The job schema
 * (job/config.c) names the choices in this order. */
enum ddp_precision {
    DDP_PRECISION_FP32,
    DDP_PRECISION_TF32,
    DDP_PRECISION_BF16,
    DDP_PRECISION_COUNT
};

/* CUDA graphs a backend keeps (graph_capture_end's slot): 2 device input sets x 3 roles of
 * a micro-batch in an optimiser step (train/graph.h). */
#define DDP_GRAPH_SLOTS 6

/* The values of one training step that change from step to step, as the optimiser and the
 * model pass them to sgd_step / adam_step / dropout_fwd (CUDA Graphs, below). */
struct ddp_graph_scalars {
    float lr;       /* sgd_step's and adam_step's lr */
    float momentum; /* sgd_step's momentum */
    float beta1;    /* adam_step's b1 */
    int64_t t;      /* adam_step's t; sgd_step's first_step is t == 1 */
    uint64_t noise; /* the step's dropout seed: each layer's seed is noise ^ a constant */
};

/* Memory layout of activations (set_layout below): NCHW, as PyTorch's default, or NHWC
 * (channels-last). The job schema ([train] layout) names auto before these. */
enum ddp_layout { DDP_LAYOUT_NCHW, DDP_LAYOUT_NHWC };

/* Storage of activations (set_act_type below): fp32, or bf16 (2 bytes a value, as PyTorch's
 * autocast keeps them). The job schema ([train] activations) names auto before these. */
enum ddp_act_type { DDP_ACT_FP32, DDP_ACT_BF16 };

/* The shape of a conv2d (the table's conv entries): inp (B, C, H, W), w (O, C, k, k), a k x k
 * window moved by stride over the input padded with pad zeros on every side; out (B, O, OH, OW)
 * with OH = (H + 2 pad - k) / stride + 1, OW likewise. The batch B travels beside it. */
struct ddp_conv_geom {
    int C, H, W; /* input channels, height, width */
    int O;       /* output channels */
    int k;       /* window (k x k) */
    int stride, pad;
};

/* The settings of one optimiser step (sgd_step, adam_step; PyTorch's names, optim.h). */
struct ddp_optim_args {
    float lr;
    float weight_decay; /* L2 penalty, or decoupled decay with adam's decoupled */
    /* sgd */
    float momentum;
    int nesterov;
    int first_step; /* the momentum buffer starts as the gradient */
    /* adam */
    float b1, b2, eps;
    int decoupled; /* adamw */
    int64_t t;     /* the step, from 1 (bias corrections) */
};

/* Device memory (backend.h mem_info): what the backend allocated (its own allocations and
 * workspace; not the CUDA context, cuBLAS's or NCCL's) now and at most since it started, and
 * the device's free and total bytes (cudaMemGetInfo: every process and library included). */
struct ddp_mem_info {
    size_t allocated, peak;
    size_t dev_free, dev_total;
};

struct ddp_backend {
    const char *name;

    /* memory */
    void *(*alloc)(size_t bytes); /* zeroed; dies on failure */
    void (*free)(void *p);
    void (*upload)(void *dst, const void *src_host, size_t bytes);
    void (*download)(void *dst_host, const void *src, size_t bytes);
    void (*set_threads)(int n); /* compute threads; optional */
    void (*sync)(void);         /* wait for queued work; optional */
    /* Asynchronous input (optional; NULL where host memory is backend memory, as on the CPU).
     * host_alloc: page-locked host memory the device reads asynchronously (dies on failure).
     * upload_batch: queue the copies of x (xbytes) and y (ybytes), both host_alloc memory, into
     * device buffers dx, dy on a copy stream. The caller alternates between two sets of device
     * buffers: the copy waits until the work queued before the previous upload_batch call (the
     * last that used this set) has run, and the work queued after this call waits for the copy;
     * the host never waits. Returns the copy's number (1, 2, ...): x and y stay untouched until
     * copies_done() (non-blocking: the highest number whose copies have run) reaches it. */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    int64_t (*upload_batch)(void *dx, const void *x, size_t xbytes, void *dy, const void *y,
                            size_t ybytes);
    int64_t (*copies_done)(void);
    /* uint8 input (optional, with upload_batch): out (n floats) = in (n bytes) / 255.0f, then
     * where nchan > 0 (nchan = C) (v - mean[c]) / std[c] for channel c = (i / S) % C of samples
     * (C, S): the CPU loader's conversion and [data] normalize, bit for bit (h5data.h,
     * augment.h). mean and std are nchan host floats, read at the call. Queued as any op. */
    void (*u8_to_float)(float *out, const uint8_t *in, size_t n, int C, int S, int nchan,
                        const float *mean, const float *std);
    /* device memory now (optional; NULL on the CPU): struct ddp_mem_info above */
    void (*mem_info)(struct ddp_mem_info *mi);
    /* end of training step `step` of rank `rank` (log_step: a logging step); optional: the
     * GPU twin writes its per-step counters there (docs/gpu.md) */
    void (*step_end)(int rank, long step, int log_step);
    /* The compute stream's stall clock (optional; NULL on the CPU): stall_mark(t, 0) queues
     * "t[0] = the device's clock", stall_mark(t, 1) "t[1] += the clock - t[0]", on the compute
     * stream; t is 2 uint64 of device memory, nanoseconds. Around the compute stream's waits
     * for other streams, t[1] sums how long the device stalled on them; graphs capture it. */
    void (*stall_mark)(void *t, int end);

    /* elementwise */
    void (*zero)(float *x, size_t n);
    void (*scale)(float *x, size_t n, float a);

    /* linear: out (B,O) = inp (B,C) w^T (O,C) + b (O) */
    void (*linear_fwd)(float *out, const float *inp, const float *w, const float *b, int B, int C,
                       int O);
    void (*linear_bwd)(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, int B, int C, int O);

    void (*relu_fwd)(float *out, const float *inp, size_t n);
    /* linear followed by relu in one pass over the output: out (B,O) = max(0, inp w^T + b)
     * (b may be NULL); optional. The model uses it for a linear layer whose only reader is a
     * relu (the relu's out is written, the linear's pre-activation is never stored). */
    void (*linear_relu_fwd)(float *out, const float *inp, const float *w, const float *b, int B,
                            int C, int O);
    void (*relu_bwd)(float *dinp, const float *dout, const float *out, size_t n);

    /* conv2d: inp (B,C,H,W), w (O,C,k,k), b (O) -> out (B,O,OH,OW); col is scratch of
     * conv_col_elems() floats. */
    size_t (*conv_col_elems)(int B, const struct ddp_conv_geom *g);
    void (*conv2d_fwd)(float *out, float *col, const float *inp, const float *w, const float *b,
                       int B, const struct ddp_conv_geom *g);
    /* conv2d followed by relu, out = max(0, conv + b) (optional; as linear_relu_fwd) */
    void (*conv2d_relu_fwd)(float *out, float *col, const float *inp, const float *w,
                            const float *b, int B, const struct ddp_conv_geom *g);
    void (*conv2d_bwd)(float *dinp, float *dw, float *db, float *col, const float *dout,
                       const float *inp, const float *w, int B, const struct ddp_conv_geom *g);
    /* Optional: plan the convolution of this shape for batches of up to B (algorithms chosen
     * once, at model build) and return the floats of col conv2d_fwd/bwd then need for it, for
     * every batch size up to B (the model sizes col as the most over its conv layers). Where it
     * is NULL, conv_col_elems sizes col. Host work only: never in the steady step. */
    size_t (*conv_plan)(int B, const struct ddp_conv_geom *g);
    /* Optional: the most values one convolution's input or output (B*C*H*W) may have on the
     * path that runs, and that path's name for messages in *path ("cuDNN": 2^31 - 1, beyond
     * which its descriptors are refused); 0 where the path has no such limit. The model checks
     * it at build, before conv_plan sees a batch size past it. */
    size_t (*conv_tensor_max)(const char **path);

    /* Activation layout (optional: set_layout, layout, to_nhwc and to_nchw together; NULL:
     * always NCHW). A backend starts in DDP_LAYOUT_NCHW. After set_layout(DDP_LAYOUT_NHWC),
     * every (B, C, H, W) activation the spatial entries read or write is channels-last, (B, H,
     * W, C) in memory, as PyTorch's channels_last (the layout of cuDNN's tensor-core
     * convolutions): conv2d_* (inp, out, act, dinp, dout), maxpool_*, relu_maxpool_fwd,
     * maxpool_relu_bwd, avgpool_*, gap_fwd's inp and gap_bwd's dinp (out and dout (B, C) as
     * before), and bn_* where S > 1 (their (B, C, S) tensors are (B, S, C)). A pool's argmax is
     * the backend's own, read only by its backward. Weights, biases and every other tensor keep
     * their layout, element-wise entries read both alike, and where S = 1 (H = W = 1, a
     * batchnorm after flatten) the two layouts are the same bytes.
     * set_layout returns 0, or -1 with one line in err when this backend cannot (CUDA: only on
     * the cuDNN convolution path). It is called before the model is built (conv_plan plans for
     * the layout in force) and before any op of a step.
     * layout(): the layout in force (enum ddp_layout).
     * to_nhwc: out (B, S, C) = inp (B, C, S); to_nchw: out (B, C, S) = inp (B, S, C); queued as
     * any op, capturable; out and inp never overlap. */
    int (*set_layout)(int layout, char *err, size_t errlen);
    int (*layout)(void);
    void (*to_nhwc)(float *out, const float *inp, int B, int C, int S);
    void (*to_nchw)(float *out, const float *inp, int B, int C, int S);

    /* Activation storage (optional: set_act_type, act_type, act_from_f32 and act_to_f32
     * together; NULL: always fp32). A backend starts in DDP_ACT_FP32. After
     * set_act_type(DDP_ACT_BF16) every activation tensor an entry reads or writes holds bf16
     * values (2 bytes each, rounded to nearest even; the float * of such a tensor points at
     * them): inp, out, act, dinp and dout of linear_*, relu_*, conv2d_*, the pools and their
     * fusions, gap_*, add, add_relu_fwd, relu_bwd_join, dropout_* (not its mask, fp32),
     * to_nhwc and to_nchw, and inp, out, xhat, dinp and dout of bn_* (their statistics,
     * parameters and gradients stay fp32, sums double). Every computation runs in fp32 on the
     * values read and rounds what it stores. Weights, biases, their gradients, optimiser
     * state, xent's logits and dlogits, u8_to_float's output and every other entry stay fp32.
     * set_act_type returns 0, or -1 with one line in err when this backend cannot (CUDA: only
     * on the cuDNN convolution path); it is called with set_layout, before the model is built.
     * act_type(): the storage in force (enum ddp_act_type).
     * act_from_f32: out (activation storage, the layout in force: (B, S, C) under NHWC where
     *     S > 1) = inp (B, C, S) fp32, NCHW (the model's input; S = 1 for a flat input).
     * act_to_f32: out (n floats) = inp (n values in activation storage), exact (the logits).
     * Both queued as any op, capturable; out and inp never overlap. */
    int (*set_act_type)(int type, char *err, size_t errlen);
    int (*act_type)(void);
    void (*act_from_f32)(float *out, const float *inp, int B, int C, int S);
    void (*act_to_f32)(float *out, const float *inp, size_t n);

    /* pools with window k and stride k, floor mode: inp (B,C,H,W) -> out (B,C,H/k,W/k) */
    void (*maxpool_fwd)(float *out, int32_t *argmax, const float *inp, int B, int C, int H, int W,
                        int k);
    void (*maxpool_bwd)(float *dinp, const float *dout, const int32_t *argmax, int B, int C, int H,
                        int W, int k);
    /* relu followed by maxpool, in one pass each way (optional; both or neither). The model
     * uses them for a relu whose only reader is a maxpool with k <= 16: the relu's output is
     * never stored. relu_maxpool_fwd: out = maxpool(relu(inp)), argmax the place i*k + j of
     * the first maximum of relu(inp) within its window (one byte: k*k <= 256).
     * maxpool_relu_bwd: dinp (B,C,H,W) = the gradient of the relu's INPUT: dout where the
     * pixel is its window's argmax and out (the pool's output) > 0, else 0. Both equal
     * relu_fwd + maxpool_fwd and maxpool_bwd + relu_bwd bit for bit. */
    void (*relu_maxpool_fwd)(float *out, uint8_t *argmax, const float *inp, int B, int C, int H,
                             int W, int k);
    void (*maxpool_relu_bwd)(float *dinp, const float *dout, const float *out,
                             const uint8_t *argmax, int B, int C, int H, int W, int k);
    /* maxpool_relu_bwd that also adds into db (C) the per-channel sums of the dinp it writes
     * (optional). The model uses it for the maxpool of a conv2d (with bias) + relu + maxpool
     * whose forward is conv2d_relu_maxpool_fwd: db is that convolution's bias gradient, and
     * the convolution's conv2d_bwd then gets db NULL, so the gradient tensor is read once, not
     * twice. dinp as maxpool_relu_bwd's, bit for bit; db gets the bits conv2d_bwd's own bias
     * reduction would add on the same dinp, where the backend sums the same way in both (CUDA:
     * the cuDNN path; on im2col with a batch in several chunks db may differ in its last bits,
     * the sum here being one double sum over the batch). */
    void (*maxpool_relu_bwd_db)(float *dinp, float *db, const float *dout, const float *out,
                                const uint8_t *argmax, int B, int C, int H, int W, int k);
    /* conv2d, relu and maxpool(k) forward in one (optional, with the two above): act (B,O,OH,
     * OW) is scratch for the convolution's output, out and argmax as relu_maxpool_fwd's on
     * max(0, conv + b); bit for bit conv2d_relu_fwd followed by maxpool_fwd. */
    void (*conv2d_relu_maxpool_fwd)(float *out, uint8_t *argmax, float *act, float *col,
                                    const float *inp, const float *w, const float *b, int B,
                                    const struct ddp_conv_geom *g, int k);
    void (*avgpool_fwd)(float *out, const float *inp, int B, int C, int H, int W, int k);
    void (*avgpool_bwd)(float *dinp, const float *dout, int B, int C, int H, int W, int k);

    /* global average pool over the S = H*W positions of each channel: inp (B,C,S) -> out (B,C) */
    void (*gap_fwd)(float *out, const float *inp, int B, int C, int S);
    void (*gap_bwd)(float *dinp, const float *dout, int B, int C, int S);

    /* residual join and gradient sums: out = a + b elementwise (out may be a) */
    void (*add)(float *out, const float *a, const float *b, size_t n);
    /* residual join followed by relu (optional; both or neither). The model uses them for a
     * join whose only reader is the relu after it (ResNet's out = relu(body(x) + shortcut(x))):
     * the join's output and gradient are never stored. Element-wise, layout-agnostic.
     * add_relu_fwd: out = max(0, a + b), bit for bit add then relu_fwd (out never a or b).
     * relu_bwd_join: g = dout where out (the relu's output) > 0, else 0, with dout the relu's
     *     output gradient, goes to both inputs of the join: da (a's gradient) = g, or with
     *     acc_a da = da + g (add's rounding); db likewise with acc_b. Either may be NULL (not
     *     wanted); da and db may be the same buffer (da's update comes first, as two calls
     *     would); neither is dout or out. Bit for bit relu_bwd and then add or a copy into each. */
    void (*add_relu_fwd)(float *out, const float *a, const float *b, size_t n);
    void (*relu_bwd_join)(float *da, int acc_a, float *db, int acc_b, const float *dout,
                          const float *out, size_t n);

    /* batchnorm over (B,C,S): statistics per channel. Every sums array is backend memory of
     * 2C+1 doubles, the last one the count of elements per channel (B*S here; after a
     * SyncBatchNorm all-reduce, over all ranks), so the statistics never leave the device.
     * stats (2C+1): sum x, sum x^2, count.
     * update: train: mean, invstd from sums (biased variance, clamped at 0, eps added) and the
     *         running statistics rm, rv moved by momentum (unbiased variance), as PyTorch;
     *         eval (sums NULL): mean = rm, invstd = 1/sqrt(rv + eps).
     * fwd_apply: xhat = (x - mean) * invstd, out = gamma * xhat + beta (xhat saved).
     * bwd_sums (2C+1): sum dout, sum dout * xhat, count.
     * bwd_apply: dinp = gamma * invstd * (dout - g0/count - xhat * g1/count) with g the global
     *            sums (count their last element); dgamma += local1, dbeta += local0. */
    void (*bn_stats)(double *sums, const float *inp, int B, int C, int S);
    void (*bn_update)(float *mean, float *invstd, float *rm, float *rv, const double *sums, int C,
                      double eps, double momentum);
    void (*bn_fwd_apply)(float *out, float *xhat, const float *inp, const float *mean,
                         const float *invstd, const float *gamma, const float *beta, int B, int C,
                         int S);
    void (*bn_bwd_sums)(double *sums, const float *dout, const float *xhat, int B, int C, int S);
    void (*bn_bwd_apply)(float *dinp, float *dgamma, float *dbeta, const float *dout,
                         const float *xhat, const float *invstd, const float *gamma,
                         const double *local_sums, const double *global_sums, int B, int C, int S);
    /* batchnorm followed by relu (optional; all three or none). The model uses them for a
     * batchnorm whose only reader is a relu: the batchnorm's out and the relu's input gradient
     * are never stored. Statistics, update and any SyncBatchNorm all-reduce stay as above.
     * bn_relu_fwd_apply: out = max(0, gamma * xhat + beta) (xhat saved; NULL in eval), bit for
     *     bit bn_fwd_apply then relu_fwd.
     * bn_relu_bwd_sums, bn_relu_bwd_apply: bn_bwd_sums, bn_bwd_apply on dy = dout where out
     *     (the relu's output) > 0, else 0, with dout the relu's output gradient; bit for bit
     *     relu_bwd then those two. */
    void (*bn_relu_fwd_apply)(float *out, float *xhat, const float *inp, const float *mean,
                              const float *invstd, const float *gamma, const float *beta, int B,
                              int C, int S);
    void (*bn_relu_bwd_sums)(double *sums, const float *dout, const float *out, const float *xhat,
                             int B, int C, int S);
    void (*bn_relu_bwd_apply)(float *dinp, float *dgamma, float *dbeta, const float *dout,
                              const float *out, const float *xhat, const float *invstd,
                              const float *gamma, const double *local_sums,
                              const double *global_sums, int B, int C, int S);

    /* dropout: keep with probability 1-p from a counter-based hash of (seed, i); mask holds
     * 0 or 1/(1-p). */
    void (*dropout_fwd)(float *out, float *mask, const float *inp, size_t n, float p,
                        uint64_t seed);
    void (*dropout_bwd)(float *dinp, const float *dout, const float *mask, size_t n);

    /* softmax cross-entropy on logits (B,K), labels (B), with label smoothing e in [0, 1]
     * (nn.CrossEntropyLoss(label_smoothing=e): target q = (1 - e) onehot + e / K): returns the
     * SUM of losses -sum_j q_j log softmax_j over the batch and the number of correct argmax
     * predictions; dlogits (may be NULL) = (softmax - q) * grad_scale. e = 0 is plain
     * cross-entropy, bit for bit. */
    double (*xent)(float *dlogits, int64_t *correct, const float *logits, const int32_t *labels,
                   int B, int K, float grad_scale, float smoothing);
    /* The same, leaving the host out (optional): acc (backend memory, 2 doubles) += the sum of
     * losses and the number of correct predictions; the caller reads acc when it logs. */
    void (*xent_acc)(float *dlogits, double *acc, const float *logits, const int32_t *labels, int B,
                     int K, float grad_scale, float smoothing);

    /* optimisers on flat buffers of n parameters (PyTorch rules, see optim.h); the gradient
     * used is g[i] * gscale (gscale = 1/W turns the all-reduced sum into the mean; 1 is exact),
     * or g[i] * *gs where gs is not NULL: backend memory that clip_scale wrote (backends
     * without clip_scale always get NULL) */
    void (*sgd_step)(float *p, const float *g, float gscale, const float *gs, float *buf, size_t n,
                     const struct ddp_optim_args *a);
    void (*adam_step)(float *p, const float *g, float gscale, const float *gs, float *m, float *v,
                      size_t n, const struct ddp_optim_args *a);

    /* sum of x[i]^2 over n floats, in double, the same for the same input (a fixed order of
     * summation); the gradient norm of [optim] clip_grad_norm. Waits for the result. */
    double (*sumsq)(const float *x, size_t n);
    /* [optim] clip_grad_norm without the host (optional): out (backend memory, 1 float) =
     * gscale x min(1, max_norm / (norm + 1e-6)), norm = sqrt(sumsq(x, n)) x gscale, computed
     * as ddp_optim_step does on the host, bit for bit; queued, no wait, capturable.
     * The optimiser then reads it through its gs argument. */
    void (*clip_scale)(float *out, const float *x, size_t n, float gscale, double max_norm);

    /* CUDA Graphs (optional, with clip_scale: a captured step cannot wait for sumsq; docs/gpu.md
     * "CUDA Graphs"). graph_capture_begin(sc) starts
     * capturing the compute stream: the ops called until graph_capture_end are recorded, not
     * run, and sgd_step, adam_step and dropout_fwd take lr, momentum, beta1, t and the seed
     * from a block of device memory instead of their arguments (which must be sc's values).
     * graph_capture_end(slot) ends the capture and keeps it as graph `slot` (DDP_GRAPH_SLOTS:
     * the device input set of upload_batch the step reads, 0 or 1, + 2 x the micro-batch's
     * role, train/graph.h). Both return 0, or -1 with one line in
     * err (the capture failed, e.g. because an op synchronised with the host or allocated).
     * graph_launch(slot, sc), right after the upload_batch that filled the slot's set, copies
     * sc to the slot's device block (page-locked, on the copy stream, ordered as that batch)
     * and replays the graph after the work queued so far; the host does not wait. */
    int (*graph_capture_begin)(int slot, const struct ddp_graph_scalars *sc, char *err,
                               size_t errlen);
    int (*graph_capture_end)(int slot, char *err, size_t errlen);
    void (*graph_launch)(int slot, const struct ddp_graph_scalars *sc);
};

/* The CPU backend (always built). */
const struct ddp_backend *ddp_backend_cpu(void);

#endif

/*
 * conv_graph.cu - conv2d through cuDNN 9's graph (backend) API beside the legacy API (see
 * internal.cuh for the parts): for one slot of a cuDNN plan (conv_dnn.cu) and one direction,
 * the tensor, convolution, operation and operation graph descriptors; the engine configs that
 * cuDNN's heuristics list (mode A, then FALLBACK; deduplicated by engine and knobs, at most
 * DNN_ENGINES); their execution plans, timed with CUDA events on the caller's operands; the
 * kept plan, run with one variant pack per call; and a plan rebuilt from its engine's global
 * index and knob choices (the choices' text: rank 0 to the other ranks, a checkpoint to the
 * run that resumes it). These are the engines PyTorch reaches (its cudnn frontend uses the
 * same API), sm90 tensor-core kernels among them, which the legacy API's algorithms do not
 * name.
 *
 * Every operation is alpha 1, beta 0 (the callers add a bias or accumulate a filter gradient
 * after it). Tensors are described in n, c, h, w order with packed NCHW or NHWC strides; uids
 * x 1, w 2, y 3 in every direction (dx 1, dw 2, dy 3). A config qualifies unless a numerical
 * note says DOWN_CONVERT_INPUTS or REDUCED_PRECISION_REDUCTION, or TENSOR_CORE where tensor
 * math is not allowed (fp32 precision), or NONDETERMINISTIC under [train] deterministic
 * (timed anyway then: the run log's line of what deterministic = false would gain), or a
 * behaviour note says RUNTIME_COMPILATION (its plan's finalize compiles a kernel with NVRTC,
 * seconds per shape: minutes of model build for a ResNet; ruled out before its plan is made,
 * and a rebuilt choice naming one is not adopted), and unless its plan fails to finalize or
 * needs more workspace than the cap. At most DNN_ENGINES configs are timed per direction.
 * Untimed choices (cuDNN's ranking, a graph capture) never come here: they stay legacy.
 *
 * Descriptors live in the slot with the plan they made (struct dnn_graph) and are destroyed
 * when the direction is chosen again or the slot re-described; the candidates not kept are
 * destroyed after timing. A call allocates and synchronises nothing: its variant pack is a
 * host object, and cudnnBackendExecute only queues work (fine inside a graph capture).
 */
#include "backend/cuda/internal.cuh"

#ifdef DDP_DNN

/* Engine configs timed per direction at most (cuDNN 9 lists a few dozen for a convolution;
 * its heuristics rank the likely fastest first, so the tail rarely wins; PyTorch's
 * cudnn.benchmark_limit is 10). Each costs DNN_REPEAT runs at model build. */
#define DNN_ENGINES 16
/* Knob choices one config's get may return (the contract's bound; more than any engine has). */
#define DNN_KNOBS_GET 64

#define BE(call) ((call) == CUDNN_STATUS_SUCCESS)

/* One timed candidate: its plan and descriptors, notes, measured time. */
struct dnn_gcand {
    struct dnn_graph g;
    int det, tc; /* deterministic; uses tensor cores */
    float ms;
};

static cudnnBackendDescriptor_t be_new(cudnnBackendDescriptorType_t t)
{
    cudnnBackendDescriptor_t d = NULL;
    if (!BE(g_cuda.dnn_fn.be_create(t, &d)))
        return NULL;
    return d;
}

static void be_free(cudnnBackendDescriptor_t *d)
{
    if (*d)
        g_cuda.dnn_fn.be_destroy(*d);
    *d = NULL;
}

static int be_set1(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                   cudnnBackendAttributeType_t t, int64_t n, const void *v)
{
    return BE(g_cuda.dnn_fn.be_set(d, a, t, n, v));
}

/* A finalized tensor descriptor: dims (n, c, h, w) packed in layout, data type dt, uid. */
static cudnnBackendDescriptor_t be_tensor(const int64_t dim[4], int layout, cudnnDataType_t dt,
                                          int64_t uid)
{
    const int64_t n = dim[0], c = dim[1], h = dim[2], w = dim[3];
    (void)n;
    const int64_t nchw[4] = {c * h * w, h * w, w, 1};
    const int64_t nhwc[4] = {h * w * c, 1, w * c, c};
    const int64_t align = 16;
    cudnnBackendDescriptor_t d = be_new(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    if (!d)
        return NULL;
    if (be_set1(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt) &&
        be_set1(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim) &&
        be_set1(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4,
                layout == DDP_LAYOUT_NHWC ? nhwc : nchw) &&
        be_set1(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) &&
        be_set1(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align) &&
        BE(g_cuda.dnn_fn.be_finalize(d)))
        return d;
    be_free(&d);
    return NULL;
}

/* A finalized convolution descriptor of geometry q (fp32 compute, cross-correlation). */
static cudnnBackendDescriptor_t be_conv(const struct conv_geom *q)
{
    const cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t dims = 2, one[2] = {1, 1}, st[2] = {q->stride, q->stride},
                  pad[2] = {q->pad, q->pad};
    cudnnBackendDescriptor_t d = be_new(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    if (!d)
        return NULL;
    if (be_set1(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct) &&
        be_set1(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode) &&
        be_set1(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims) &&
        be_set1(d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one) &&
        be_set1(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, st) &&
        be_set1(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad) &&
        be_set1(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad) &&
        BE(g_cuda.dnn_fn.be_finalize(d)))
        return d;
    be_free(&d);
    return NULL;
}

/* The attributes of direction d's operation: descriptor type, then x, w, y (dx, dw, dy),
 * conv, alpha, beta. */
static void be_op_names(int d, cudnnBackendDescriptorType_t *t, cudnnBackendAttributeName_t a[6])
{
    static const cudnnBackendAttributeName_t names[DNN_DIRS][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
    static const cudnnBackendDescriptorType_t types[DNN_DIRS] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    *t = types[d];
    memcpy(a, names[d], sizeof names[d]);
}

static void be_drop_all(struct dnn_graph *g);

/* The operation graph of direction d of plan pl at batch B into g (x, w, y, conv, op, graph).
 * 1, or 0 with whatever was made destroyed. */
static int be_graph(const struct dnn_plan *pl, int B, int d, struct dnn_graph *g)
{
    const struct conv_geom *q = &pl->q;
    const cudnnDataType_t dt = pl->act16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    const int64_t xd[4] = {B, q->C, q->H, q->W}, wd[4] = {q->O, q->C, q->k, q->k};
    const int64_t yd[4] = {B, q->O, q->OH, q->OW};
    const float alpha = 1, beta = 0;
    cudnnBackendDescriptorType_t t;
    cudnnBackendAttributeName_t a[6];
    be_op_names(d, &t, a);
    g->x = be_tensor(xd, pl->layout, dt, 1);
    g->w = be_tensor(wd, pl->layout, dt, 2);
    g->y = be_tensor(yd, pl->layout, dt, 3);
    g->conv = be_conv(q);
    g->op = be_new(t);
    g->graph = be_new(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    cudnnHandle_t h = g_cuda.dnn.h;
    if (g->x && g->w && g->y && g->conv && g->op && g->graph &&
        be_set1(g->op, a[0], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->x) &&
        be_set1(g->op, a[1], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->w) &&
        be_set1(g->op, a[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->y) &&
        be_set1(g->op, a[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->conv) &&
        be_set1(g->op, a[4], CUDNN_TYPE_FLOAT, 1, &alpha) &&
        be_set1(g->op, a[5], CUDNN_TYPE_FLOAT, 1, &beta) && BE(g_cuda.dnn_fn.be_finalize(g->op)) &&
        be_set1(g->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                &g->op) &&
        be_set1(g->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) &&
        BE(g_cuda.dnn_fn.be_finalize(g->graph)))
        return 1;
    be_drop_all(g);
    return 0;
}

/* The engine config part of g destroyed (plan, knobs, config, engine). */
static void be_drop_cfg(struct dnn_graph *g)
{
    be_free(&g->plan);
    be_free(&g->cfg);
    for (int i = 0; i < DNN_KNOBS; i++)
        be_free(&g->knob[i]);
    be_free(&g->eng);
}

/* Everything of g destroyed, g zeroed. */
static void be_drop_all(struct dnn_graph *g)
{
    be_drop_cfg(g);
    be_free(&g->graph);
    be_free(&g->op);
    be_free(&g->conv);
    be_free(&g->y);
    be_free(&g->w);
    be_free(&g->x);
    memset(g, 0, sizeof *g);
}

void dnn_graph_drop(struct dnn_slot *s, int d)
{
    if (s->g[d].plan || s->g[d].graph)
        be_drop_all(&s->g[d]);
}

/* 1 where engine e's behaviour notes let it run here: not RUNTIME_COMPILATION (its plan's
 * finalize would compile a kernel with NVRTC, seconds per shape). Notes that cannot be read
 * rule nothing out (cuDNN 9 answers this query; an engine is not lost to a refusal). */
static int be_behavior_ok(cudnnBackendDescriptor_t e)
{
    cudnnBackendBehaviorNote_t notes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    int64_t n = 0;
    if (!BE(g_cuda.dnn_fn.be_get(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, notes)))
        return 1;
    for (int64_t i = 0; i < n && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; i++)
        if (notes[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION)
            return 0;
    return 1;
}

/* Notes of engine e: *det 0 where NONDETERMINISTIC, *tc 1 where TENSOR_CORE; returns 0 where a
 * note rules it out whatever the run (a down-conversion, a reduced-precision reduction, or a
 * kernel compiled at runtime). */
static int be_notes(cudnnBackendDescriptor_t e, int *det, int *tc)
{
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t n = 0;
    *det = 1;
    *tc = 0;
    if (!be_behavior_ok(e) ||
        !BE(g_cuda.dnn_fn.be_get(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes)))
        return 0;
    for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++) {
        if (notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
            notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)
            return 0;
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
            *det = 0;
        if (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE)
            *tc = 1;
    }
    return 1;
}

/* The execution plan of g's config (g->cfg finalized) into g->plan with its workspace size.
 * 1, or 0 (the plan destroyed) where it does not finalize or needs more than cap. */
static int be_plan(struct dnn_graph *g, size_t cap)
{
    cudnnHandle_t h = g_cuda.dnn.h;
    int64_t ws = 0, n = 0;
    g->plan = be_new(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    if (g->plan && be_set1(g->plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) &&
        be_set1(g->plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                &g->cfg) &&
        BE(g_cuda.dnn_fn.be_finalize(g->plan)) &&
        BE(g_cuda.dnn_fn.be_get(g->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                1, &n, &ws)) &&
        n == 1 && ws >= 0 && (uint64_t)ws <= cap) {
        g->ws = (size_t)ws;
        return 1;
    }
    be_free(&g->plan);
    return 0;
}

/* The engine and knob choices of heuristic result cfg (owned by the caller) into g (which
 * takes cfg over). 1, or 0 (g's config part destroyed, cfg with it) where it cannot be read
 * or has more than DNN_KNOBS knobs. */
static int be_read_cfg(cudnnBackendDescriptor_t cfg, struct dnn_graph *g)
{
    cudnnBackendDescriptor_t k[DNN_KNOBS_GET] = {NULL};
    int64_t n = 0, nk = 0;
    int ok = 1;
    g->cfg = cfg;
    g->eng = be_new(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    for (int i = 0; ok && i < DNN_KNOBS_GET; i++)
        ok = (k[i] = be_new(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR)) != NULL;
    ok = ok && g->eng &&
         BE(g_cuda.dnn_fn.be_get(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &n, &g->eng)) &&
         BE(g_cuda.dnn_fn.be_get(g->eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                 &g->engine)) &&
         BE(g_cuda.dnn_fn.be_get(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, DNN_KNOBS_GET, &nk, k)) &&
         nk >= 0 && nk <= DNN_KNOBS;
    for (int i = 0; ok && i < nk; i++) {
        int64_t m = 0;
        cudnnBackendKnobType_t kt;
        ok = BE(g_cuda.dnn_fn.be_get(k[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE,
                                     1, &m, &kt)) &&
             BE(g_cuda.dnn_fn.be_get(k[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1,
                                     &m, &g->knob_value[i]));
        g->knob_type[i] = (int64_t)kt;
    }
    g->nknobs = ok ? (int)nk : 0;
    for (int i = 0; i < DNN_KNOBS_GET; i++)
        if (ok && i < nk)
            g->knob[i] = k[i];
        else
            be_free(&k[i]);
    if (!ok)
        be_drop_cfg(g);
    return ok;
}

/* 1 when a and b are the same engine with the same knob choices. */
static int be_same_cfg(const struct dnn_graph *a, const struct dnn_graph *b)
{
    if (a->engine != b->engine || a->nknobs != b->nknobs)
        return 0;
    for (int i = 0; i < a->nknobs; i++)
        if (a->knob_type[i] != b->knob_type[i] || a->knob_value[i] != b->knob_value[i])
            return 0;
    return 1;
}

/* 1 where a config with these notes may run in this process (nondeterministic ones only
 * where [train] deterministic = false; det_only 0 lets them through for the gain line). */
static int be_allowed(int det, int tc, int tf32, int det_only)
{
    return (!tc || tf32) && (det || !det_only);
}

/* The configs of base's operation graph that heuristic mode lists, appended to c (n so far,
 * at most DNN_ENGINES): new ones (engine and knobs) whose notes may ever run here (tensor
 * cores where tf32, never a runtime-compiled engine: its notes are read before its plan is
 * made) and whose plans finalize within cap. Returns the new count. */
static int be_list(const struct dnn_graph *base, cudnnBackendHeurMode_t mode, struct dnn_gcand *c,
                   int n, size_t cap, int tf32)
{
    cudnnBackendDescriptor_t heur = be_new(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendDescriptor_t cfgs[2 * DNN_ENGINES] = {NULL};
    int64_t count = 0;
    if (!heur ||
        !be_set1(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                 &base->graph) ||
        !be_set1(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) ||
        !BE(g_cuda.dnn_fn.be_finalize(heur)) ||
        !BE(g_cuda.dnn_fn.be_get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 0, &count, NULL))) {
        be_free(&heur);
        return n;
    }
    const int64_t want = count < 2 * DNN_ENGINES ? count : 2 * DNN_ENGINES;
    int64_t got = 0;
    int ok = 1;
    for (int64_t i = 0; ok && i < want; i++)
        ok = (cfgs[i] = be_new(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)) != NULL;
    if (!ok || !BE(g_cuda.dnn_fn.be_get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, want, &got, cfgs)))
        got = 0;
    for (int64_t i = 0; i < want; i++) {
        struct dnn_gcand t;
        memset(&t, 0, sizeof t);
        if (i >= got || n >= DNN_ENGINES || !be_read_cfg(cfgs[i], &t.g)) {
            if (i >= got || n >= DNN_ENGINES)
                be_free(&cfgs[i]);
            continue;
        }
        int dup = 0;
        for (int j = 0; j < n && !dup; j++)
            dup = be_same_cfg(&c[j].g, &t.g);
        if (dup || !be_notes(t.g.eng, &t.det, &t.tc) || !be_allowed(t.det, t.tc, tf32, 0) ||
            !be_plan(&t.g, cap)) {
            be_drop_cfg(&t.g);
            continue;
        }
        c[n++] = t;
    }
    be_free(&heur);
    return n;
}

/* Queue plan g on the compute stream with x, w (dw), y (dy) by uid and workspace ws: cuDNN's
 * status. */
static cudnnStatus_t be_exec(const struct dnn_graph *g, const void *x, const void *w, const void *y,
                             void *ws)
{
    const int64_t uids[3] = {1, 2, 3};
    void *ptrs[3] = {(void *)x, (void *)w, (void *)y};
    cudnnBackendDescriptor_t vp = be_new(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    cudnnStatus_t st = CUDNN_STATUS_BAD_PARAM;
    if (vp && be_set1(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids) &&
        be_set1(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs) &&
        be_set1(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws) &&
        BE(st = g_cuda.dnn_fn.be_finalize(vp)))
        st = g_cuda.dnn_fn.be_execute(g_cuda.dnn.h, g->plan, vp);
    be_free(&vp);
    return st;
}

/* be_exec of a kept plan: a refusal is fatal (it ran when timed or adopted). */
static void be_run(const struct dnn_graph *g, const void *x, const void *w, const void *y, void *ws)
{
    const cudnnStatus_t st = be_exec(g, x, w, y, ws);
    if (st != CUDNN_STATUS_SUCCESS)
        ddp_die("cudnnBackendExecute of engine %lld (cuDNN's graph API): %s", (long long)g->engine,
                g_cuda.dnn_fn.error_string(st));
}

void dnn_graph_run(const struct dnn_slot *s, int d, const void *x, const void *w, const void *y,
                   void *ws)
{
    be_run(&s->g[d], x, w, y, ws);
}

/* The fastest of DNN_REPEAT runs of plan g on o (direction d's operands), in ms; -1 where
 * cuDNN refuses to execute it (the candidate is then dropped, as one whose plan does not
 * finalize). */
static float be_time(const struct dnn_graph *g, int d, const struct dnn_operands *o)
{
    cudaEvent_t a, b;
    float best = 0;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    for (int r = 0; r < DNN_REPEAT; r++) {
        float ms = 0;
        CUDA_CHECK(cudaEventRecord(a, g_cuda.stream));
        if (be_exec(g, o->x, d == DNN_BWD_FILTER ? o->dw : o->w, o->y, o->ws) !=
            CUDNN_STATUS_SUCCESS) {
            best = -1;
            break;
        }
        CUDA_CHECK(cudaEventRecord(b, g_cuda.stream));
        CUDA_CHECK(cudaEventSynchronize(b));
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        if (r == 0 || ms < best)
            best = ms;
    }
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    return best;
}

/* 1 when time t counts as equally fast as the fastest, f (DNN_TIE, DNN_TIE_MS). */
static int be_tied(float t, float f)
{
    return t <= f * (1.0f + DNN_TIE) || t <= f + DNN_TIE_MS;
}

/* Index of the candidate to keep of c (n, timed): the fastest of those this run allows, ties
 * to the least workspace, then the faster, then the earlier in cuDNN's lists; -1 when none
 * is allowed. */
static int be_pick(const struct dnn_gcand *c, int n, int tf32)
{
    const int det_only = g_cuda.dnn.det != 0;
    int best = -1, keep = -1;
    for (int i = 0; i < n; i++)
        if (be_allowed(c[i].det, c[i].tc, tf32, det_only) && (best < 0 || c[i].ms < c[best].ms))
            best = i;
    for (int i = 0; best >= 0 && i < n; i++)
        if (be_allowed(c[i].det, c[i].tc, tf32, det_only) && be_tied(c[i].ms, c[best].ms) &&
            (keep < 0 || c[i].g.ws < c[keep].g.ws ||
             (c[i].g.ws == c[keep].g.ws && c[i].ms < c[keep].ms)))
            keep = i;
    return keep;
}

/* Under [train] deterministic = true: the fastest non-deterministic config of c that beats the
 * slot's kept time and its noted legacy one becomes the noted one (the run log's gain line). */
static void be_note_any(struct dnn_slot *s, int d, const struct dnn_gcand *c, int n)
{
    if (g_cuda.dnn.det != 1)
        return;
    if (s->any_algo[d] >= 0 && s->any_ms[d] >= s->ms[d])
        s->any_algo[d] = -1; /* the legacy one noted no longer beats what is kept */
    for (int i = 0; i < n; i++)
        if (!c[i].det && be_allowed(1, c[i].tc, s->tf32, 0) && c[i].ms < s->ms[d] &&
            (s->any_algo[d] < 0 || c[i].ms < s->any_ms[d])) {
            s->any_algo[d] = (int)c[i].g.engine;
            s->any_graph[d] = 1;
            s->any_ms[d] = c[i].ms;
        }
}

/* 1 when the graph candidate (ms, ws) wins over the slot's legacy choice of direction d
 * (have: there is one): the faster, ties to the least workspace, then legacy. */
static int be_beats(const struct dnn_slot *s, int d, int have, float ms, size_t ws)
{
    if (!have)
        return 1;
    const float f = ms < s->ms[d] ? ms : s->ms[d];
    if (be_tied(ms, f) && be_tied(s->ms[d], f))
        return ws < s->ws[d];
    return ms < s->ms[d];
}

int dnn_graph_choose(const struct dnn_plan *pl, struct dnn_slot *s, int d,
                     const struct dnn_operands *o, size_t cap, int have)
{
    struct dnn_graph base;
    memset(&base, 0, sizeof base);
    dnn_graph_drop(s, d);
    if (!g_cuda.dnn.graph || !pl->wroom || !be_graph(pl, s->B, d, &base))
        return -1; /* (a plan made before the graph API was on has no aligned filter room) */
    struct dnn_gcand c[DNN_ENGINES];
    int n = be_list(&base, CUDNN_HEUR_MODE_A, c, 0, cap, s->tf32);
    n = be_list(&base, CUDNN_HEUR_MODE_FALLBACK, c, n, cap, s->tf32);
    int kept = 0;
    for (int i = 0; i < n; i++) /* those cuDNN refuses to execute dropped */
        if ((c[i].ms = be_time(&c[i].g, d, o)) < 0)
            be_drop_cfg(&c[i].g);
        else
            c[kept++] = c[i];
    n = kept;
    const int k = be_pick(c, n, s->tf32);
    const int take = k >= 0 && be_beats(s, d, have, c[k].ms, c[k].g.ws);
    if (take) {
        struct dnn_graph *g = &s->g[d];
        *g = base;
        memcpy(g->knob, c[k].g.knob, sizeof g->knob);
        g->plan = c[k].g.plan, g->eng = c[k].g.eng, g->cfg = c[k].g.cfg;
        g->engine = c[k].g.engine, g->nknobs = c[k].g.nknobs, g->ws = c[k].g.ws;
        memcpy(g->knob_type, c[k].g.knob_type, sizeof g->knob_type);
        memcpy(g->knob_value, c[k].g.knob_value, sizeof g->knob_value);
        s->how[d] = DNN_MEASURED;
        s->leg_ms[d] = have ? s->ms[d] : 0; /* the legacy algorithm it beat, for the run log */
        s->ms[d] = c[k].ms;
        s->ws[d] = g->ws;
        if (!have)
            s->any_algo[d] = -1;
    }
    if (have || take)
        be_note_any(s, d, c, n);
    for (int i = 0; i < n; i++)
        if (!take || i != k)
            be_drop_cfg(&c[i].g);
    if (!take)
        be_drop_all(&base);
    return take ? 0 : -1;
}

/* The engine of global index e for g's operation graph, its config with the knob choices
 * (type, value) and its plan within cap, into g. 1, or 0 (what was made is g's to drop),
 * also where its notes rule it out here (a runtime-compiled engine: its plan never made). */
static int be_rebuild(struct dnn_graph *g, int64_t e, int nk, const int64_t *type,
                      const int64_t *value, size_t cap, int tf32)
{
    int det = 0, tc = 0;
    g->eng = be_new(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    if (!g->eng ||
        !be_set1(g->eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                 &g->graph) ||
        !be_set1(g->eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &e) ||
        !BE(g_cuda.dnn_fn.be_finalize(g->eng)) || !be_notes(g->eng, &det, &tc) ||
        !be_allowed(det, tc, tf32, g_cuda.dnn.det != 0))
        return 0;
    g->engine = e;
    for (int i = 0; i < nk; i++) {
        const cudnnBackendKnobType_t kt = (cudnnBackendKnobType_t)type[i];
        g->knob_type[i] = type[i];
        g->knob_value[i] = value[i];
        g->knob[i] = be_new(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
        if (!g->knob[i] ||
            !be_set1(g->knob[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &kt) ||
            !be_set1(g->knob[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1,
                     &value[i]) ||
            !BE(g_cuda.dnn_fn.be_finalize(g->knob[i])))
            return 0;
    }
    g->nknobs = nk;
    g->cfg = be_new(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    return g->cfg &&
           be_set1(g->cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                   &g->eng) &&
           (nk == 0 || be_set1(g->cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, nk, g->knob)) &&
           BE(g_cuda.dnn_fn.be_finalize(g->cfg)) && be_plan(g, cap);
}

int dnn_graph_adopt(const struct dnn_plan *pl, struct dnn_slot *s, int d, int64_t engine,
                    int nknobs, const int64_t *type, const int64_t *value, size_t cap)
{
    struct dnn_graph g;
    memset(&g, 0, sizeof g);
    if (!g_cuda.dnn.graph || !pl->wroom || nknobs < 0 || nknobs > DNN_KNOBS ||
        !be_graph(pl, s->B, d, &g))
        return -1;
    if (!be_rebuild(&g, engine, nknobs, type, value, cap, s->tf32)) {
        be_drop_all(&g);
        return -1;
    }
    dnn_graph_drop(s, d);
    s->g[d] = g;
    s->how[d] = DNN_ADOPTED;
    s->ms[d] = 0;
    s->leg_ms[d] = 0;
    s->ws[d] = g.ws;
    s->any_algo[d] = -1;
    return 0;
}

int dnn_graph_probe(char *why, size_t len)
{
    if (!g_cuda.dnn_fn.be_create) {
        snprintf(why, len, "this cuDNN does not export the graph API's cudnnBackend* functions");
        return 0;
    }
    struct dnn_plan p;
    memset(&p, 0, sizeof p);
    p.q = {1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1};
    struct dnn_graph g;
    memset(&g, 0, sizeof g);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    cudnnBackendDescriptor_t heur = NULL;
    int ok = be_graph(&p, 1, DNN_FWD, &g);
    cudnnStatus_t st = CUDNN_STATUS_BAD_PARAM;
    if (ok && (heur = be_new(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)) &&
        be_set1(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                &g.graph) &&
        be_set1(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode))
        st = g_cuda.dnn_fn.be_finalize(heur);
    ok = ok && st == CUDNN_STATUS_SUCCESS;
    if (!ok)
        snprintf(why, len, "%s: %s",
                 g.graph ? "the engine heuristics of a convolution" : "a convolution's graph",
                 g_cuda.dnn_fn.error_string(st));
    be_free(&heur);
    be_drop_all(&g);
    return ok;
}
#endif

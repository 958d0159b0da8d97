/*
 * conv_dnn.cu - the CUDA backend's conv2d through cuDNN (see internal.cuh for the parts): one
 * plan per convolution shape, its algorithms chosen by measurement (the legacy API's, and with
 * [train] cudnn_api = auto the graph API's engines beside them: conv_graph.cu), and the calls.
 * conv_dnn_text.cu writes and takes the choices as text; conv_dnn_report.cu puts them in
 * words. conv.cu chooses the path and dispatches the table's conv entries here;
 * dlopen.cu opens cuDNN into g_cuda.dnn_fn; elementwise.cu has the bias and relu epilogues.
 *
 * cuDNN (the legacy convolution API of cuDNN 9) is opened at run time like cuBLAS: dnn_open()
 * dlopens the soname of the cuDNN the build was compiled against (libcudnn.so.9) when the
 * trainer chooses the convolution path (ddp_cuda_conv_path), and every call goes through
 * g_cuda.dnn_fn. Missing (or a build without cudnn.h, or [train] conv = im2col): conv.cu's
 * im2col + cuBLAS runs instead. The twin build points the table at the twin's cuDNN
 * (tests/twin/cudnn.cc); DDP_EMU_NO_CUDNN=1 makes it missing.
 *
 * Plans: conv_plan (at model build) makes one plan per convolution shape (C,H,W,O,k,stride,
 * pad) with descriptors and, for the planned batch B, an algorithm for each direction in FMA
 * math (fp32) or any but a down-conversion (tf32 and bf16, as PyTorch's allow_tf32):
 *   [train] deterministic = true (the default): every deterministic algorithm timed as below
 *     and the fastest kept. Rank 0's choices are every rank's (ddp_cuda_conv_adopt after the
 *     build) and are stored in each checkpoint, so that a resumed run adopts them and computes
 *     the same bits as an uninterrupted one.
 *   DNN_RANKED (programs without the trainer: validate's golden run, the ops test): the first
 *     deterministic one in cuDNN's own ranking (_v7) whose workspace fits DNN_WS_MAX. The
 *     ranking does not depend on timing, so every process computes the same bits.
 *   deterministic = false: every algorithm, deterministic or not, timed on scratch of the real
 *     shapes (cudnnFind*AlgorithmEx three times, as PyTorch's cudnn.benchmark) within a budget
 *     of about the layer's input and output size (dnn_budget; 256 MiB for a direction with
 *     nothing there); the fastest is kept, ties (DNN_TIE) to the least workspace. Two runs
 *     may keep different algorithms where timings are close, and differ in the last bits.
 * The workspace is the caller's col buffer, sized by conv_plan's answer: the most the kept
 * algorithms need, then one weight gradient's room (timing backward filter writes there, not
 * into the accumulating dw). A call with another batch size (the last partial batch,
 * evaluation) takes one of DNN_SLOTS - 1 further slots and chooses each direction at its first
 * call: timed on that call's own buffers within the planned workspace under deterministic =
 * false (not inside a graph capture, where nothing may be timed), else from cuDNN's ranking
 * (the same on every rank without timing). Steady steps neither allocate nor synchronise.
 * ddp_cuda_conv_report() lists each plan's choices for the run log; ddp_cuda_conv_choices()
 * writes them as text that ddp_cuda_conv_adopt() takes back (rank 0 to the others, a
 * checkpoint to the run that resumes it; conv_dnn_text.cu, whose header gives the format).
 *
 * Graph API (g_cuda.dnn.graph: [train] cudnn_api = auto and cuDNN's graph API works): a timed
 * choice also times the graph's qualifying engine configs on the same operands and keeps the
 * fastest of both (ties to the least workspace, then legacy); a direction then runs its slot's
 * execution plan (struct dnn_graph) at beta 0: a forward with a bias and no relu adds the bias
 * after (bias_add), backward filter writes col's gradient room and adds it into dw. The
 * plan's workspace counts in the slot's need and the plan's cap like an algorithm's. Untimed
 * choices stay legacy.
 *
 * Channels-last (g_cuda.layout NHWC, backend.h set_layout): plans are per shape and layout,
 * made under the layout in force. Activations are described as CUDNN_TENSOR_NHWC, the filter
 * in cuDNN's NHWC format (O,k,k,C); the caller's weights stay PyTorch's (O,C,k,k), so each
 * forward and backward data call first transposes them into col (after the workspace and the
 * weight gradient room: conv_plan's answer counts it), and backward filter writes the
 * (O,k,k,C) gradient into the room (beta 0) and adds it transposed into dw. The bias add and
 * bias+relu epilogue take the channel as the innermost index; the bias gradient sums dout as a
 * (B*P, O) matrix, whole rows at a time, in double and a fixed order (its bits differ from
 * NCHW's in the last place: another order). The choices' text marks an NHWC
 * plan's line with a seventeenth number (1); a line without it is NCHW, so text written before
 * channels-last existed is still taken, by NCHW plans only. The run log's line of an NHWC
 * plan names it ("... p1 NHWC, batch 64: ...").
 *
 * bf16 activations (g_cuda.act16, backend.h set_act_type): plans are per shape, layout and
 * storage. x, y and the filter are described as CUDNN_DATA_BFLOAT16 with a CUDNN_DATA_FLOAT
 * compute type (cuDNN's PSEUDO_BFLOAT16 configuration: bf16 operands, fp32 accumulation, the
 * output rounded to bf16) in tensor-op math. The caller's fp32 master weights are cast (under
 * NHWC also transposed to (O,k,k,C)) into bf16 in col at each forward and backward data call;
 * backward filter writes its bf16 gradient into col's gradient room (beta 0), which one
 * kernel adds, widened (and transposed back under NHWC), into the fp32 dw. The bias gradient
 * sums the bf16 dout in double as the fp32 path sums its floats; the bias and relu epilogues
 * (elementwise.cu) read and write the storage in force, so a convolution with a bias but no
 * relu rounds twice (cuDNN's bf16 output, then the bias added onto it with beta 1, as
 * PyTorch's bf16 convolution and bias add do). Timing runs on scratch of the bf16 sizes. The
 * choices' text marks a bf16 plan's line with an eighteenth number (1, after the layout's
 * seventeenth, then always written); lines with 16 or 17 numbers are fp32, so an fp32 choice
 * is never taken by a bf16 plan and text written before bf16 storage existed still loads, by
 * fp32 plans. The run log's line of a bf16 plan says "bf16 data".
 */
#include "backend/cuda/internal.cuh"

#include <ctype.h>
#include <errno.h>
#include <limits.h>

#ifdef DDP_DNN

#define DNN_CHECK(call)                                                                   \
    do {                                                                                  \
        cudnnStatus_t s_ = (call);                                                        \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                   \
            ddp_die_at(__FILE__, __LINE__, DDP_EXIT_RUNTIME, "%s: cuDNN error %s", #call, \
                       g_cuda.dnn_fn.error_string(s_));                                   \
    } while (0)

/* Workspace one convolution may plan for (bytes; the im2col path's col is 128 MiB): at most
 * DNN_WS_MAX and this fraction of the device's free memory at model build, at least
 * DNN_WS_MIN (dnn_budget). */
#define DNN_WS_MAX ((size_t)256 << 20)
#define DNN_WS_MIN ((size_t)8 << 20)
#define DNN_WS_FREE_SHARE 8
/* Algorithms asked of each _v7 heuristic or timed by FindEx (more than cuDNN has of any
 * direction). */
#define DNN_ALGOS 16
/* Timed candidates within DNN_TIE of the fastest, or within DNN_TIE_MS milliseconds of it
 * (internal.cuh), count as equally fast: among them the least workspace, then the lowest
 * algorithm number wins (less memory, and fewer choices that timing noise changes from one
 * run to the next; convolutions of a few microseconds time with more noise than their
 * differences). Each timed search runs DNN_REPEAT times; an algorithm's time is its fastest. */

/* 1 when entry p of an algorithm list may run here: supported, its workspace within cap,
 * deterministic when [train] deterministic asks, in the math this run allows (FMA for fp32;
 * anything but a down-conversion for tf32 and bf16). */
template <typename Perf> static int dnn_runs_here(const Perf &p, size_t cap, int tf32)
{
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > cap)
        return 0;
    return tf32 ? p.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
                : p.mathType == CUDNN_FMA_MATH;
}

template <typename Perf> static int dnn_allowed(const Perf &p, size_t cap, int tf32)
{
    return dnn_runs_here(p, cap, tf32) && !(g_cuda.dnn.det && p.determinism != CUDNN_DETERMINISTIC);
}

/* An algorithm asked for by name (ddp_cuda_conv_adopt): its number and math; algo -1: none. */
struct dnn_want {
    int algo, math;
};
static const struct dnn_want DNN_ANY = {-1, 0};

/* Index of the entry to keep from a list: the wanted one when want names one (allowed and its
 * size query ws(i) within cap, else none); of a timed (FindEx) list the fastest allowed one,
 * ties as DNN_TIE says; of a heuristic (_v7) list, which has no times, the first allowed one
 * whose ws(i) fits cap. -1 when none qualifies. */
template <typename Perf, typename WsFn>
static int dnn_pick(const Perf *p, int n, size_t cap, int tf32, int timed, struct dnn_want want,
                    WsFn ws)
{
    int best = -1;
    for (int i = 0; want.algo >= 0 && i < n; i++)
        if ((int)p[i].algo == want.algo && (int)p[i].mathType == want.math &&
            dnn_allowed(p[i], cap, tf32) && ws(i) <= cap)
            return i;
    if (want.algo >= 0)
        return -1;
    for (int i = 0; i < n; i++) {
        if (!dnn_allowed(p[i], cap, tf32))
            continue;
        if (!timed && ws(i) <= cap)
            return i;
        if (timed && (best < 0 || p[i].time < p[best].time))
            best = i;
    }
    if (best < 0)
        return -1;
    int keep = best;
    for (int i = 0; i < n; i++)
        if (i != best && dnn_allowed(p[i], cap, tf32) &&
            (p[i].time <= p[best].time * (1.0f + DNN_TIE) ||
             p[i].time <= p[best].time + DNN_TIE_MS) &&
            (p[i].memory < p[keep].memory ||
             (p[i].memory == p[keep].memory && (int)p[i].algo < (int)p[keep].algo)))
            keep = i;
    return keep;
}

/* cuDNN's format of activations (and filters) in layout (enum ddp_layout): (B,H,W,C) and
 * (O,k,k,C) for NHWC. */
static cudnnTensorFormat_t dnn_format(int layout)
{
    return layout == DDP_LAYOUT_NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

/* cuDNN's data type of a plan's activations and filter. */
static cudnnDataType_t dnn_dtype(const struct dnn_plan *pl)
{
    return pl->act16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* Bytes of one value of a plan's activations and filter. */
static size_t dnn_esize(const struct dnn_plan *pl)
{
    return pl->act16 ? 2 : sizeof(float);
}

/* The math a slot's descriptors start in: bf16 data in tensor-op math (the algorithm lists
 * then offer what runs on bf16 tensor cores), float data as [train] precision allows. */
static cudnnMathType_t dnn_start_math(const struct dnn_plan *pl)
{
    if (!dnn_tensor_math())
        return CUDNN_FMA_MATH;
    return pl->act16 ? CUDNN_TENSOR_OP_MATH : CUDNN_DEFAULT_MATH;
}

/* Descriptors of slot s for batch B, no algorithm chosen yet. */
static void dnn_describe(const struct dnn_plan *pl, struct dnn_slot *s, int B)
{
    const struct conv_geom q = pl->q;
    if (!s->x) {
        DNN_CHECK(g_cuda.dnn_fn.create_tensor(&s->x));
        DNN_CHECK(g_cuda.dnn_fn.create_tensor(&s->y));
        for (int d = 0; d < DNN_DIRS; d++) {
            DNN_CHECK(g_cuda.dnn_fn.create_conv(&s->cv[d]));
            DNN_CHECK(g_cuda.dnn_fn.set_conv(s->cv[d], q.pad, q.pad, q.stride, q.stride, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        }
    }
    const cudnnTensorFormat_t f = dnn_format(pl->layout);
    DNN_CHECK(g_cuda.dnn_fn.set_tensor(s->x, f, dnn_dtype(pl), B, q.C, q.H, q.W));
    DNN_CHECK(g_cuda.dnn_fn.set_tensor(s->y, f, dnn_dtype(pl), B, q.O, q.OH, q.OW));
    for (int d = 0; d < DNN_DIRS; d++) {
        DNN_CHECK(g_cuda.dnn_fn.set_math(s->cv[d], dnn_start_math(pl)));
        dnn_graph_drop(s, d);
        s->how[d] = DNN_UNCHOSEN;
        s->ws[d] = 0;
        s->ms[d] = 0;
    }
    s->B = B;
    s->tf32 = dnn_tensor_math();
    s->det = g_cuda.dnn.det;
    s->graph = g_cuda.dnn.graph;
}

/* Keep entry p for direction d of slot s (its algorithm already stored by the caller), chosen
 * as how says (DNN_HEURISTIC, DNN_MEASURED or DNN_ADOPTED). */
/* Keep entry i of list p (n entries) for direction d. Of a list timed under [train]
 * deterministic = true, also note the fastest entry that only its non-determinism kept out,
 * where it beat the kept one (the run log names it: what deterministic = false would gain). */
template <typename Perf>
static void dnn_keep(struct dnn_slot *s, int d, const Perf *p, int n, int i, int how, size_t cap)
{
    s->how[d] = how;
    s->ms[d] = how == DNN_MEASURED ? p[i].time : 0;
    s->math[d] = p[i].mathType;
    s->any_algo[d] = -1;
    s->any_graph[d] = 0;
    s->leg_ms[d] = 0;
    s->any_ms[d] = 0;
    for (int j = 0; how == DNN_MEASURED && g_cuda.dnn.det == 1 && j < n; j++)
        if (p[j].determinism != CUDNN_DETERMINISTIC && dnn_runs_here(p[j], cap, s->tf32) &&
            p[j].time < (s->any_algo[d] < 0 ? p[i].time : s->any_ms[d])) {
            s->any_algo[d] = (int)p[j].algo;
            s->any_ms[d] = p[j].time;
        }
    DNN_CHECK(g_cuda.dnn_fn.set_math(s->cv[d], p[i].mathType));
}

/* The list of query(out, &n) into p (n entries); when timed, the query runs DNN_REPEAT times
 * and each entry's time is the fastest of its runs (the same algorithm and math). */
template <typename Perf, typename Query>
static void dnn_list(Perf *p, int *n, int timed, Query query)
{
    DNN_CHECK(query(p, n));
    for (int r = 1; timed && r < DNN_REPEAT; r++) {
        Perf again[DNN_ALGOS];
        int m = 0;
        DNN_CHECK(query(again, &m));
        for (int i = 0; i < *n; i++)
            for (int j = 0; j < m; j++)
                if (again[j].algo == p[i].algo && again[j].mathType == p[i].mathType &&
                    again[j].status == CUDNN_STATUS_SUCCESS && again[j].time < p[i].time)
                    p[i].time = again[j].time;
    }
}

/* Choose direction d of slot s within cap from the legacy API: timed on o's buffers
 * (FindEx), or from cuDNN's heuristic list when o is NULL; with want naming an algorithm, that
 * one from the heuristic list if it qualifies there. 0, or -1 (the slot unchanged) when no
 * algorithm qualifies. */
static int dnn_choose_legacy(const struct dnn_plan *pl, struct dnn_slot *s, int d,
                             const struct dnn_operands *o, size_t cap,
                             struct dnn_want want = DNN_ANY)
{
    const int timed = o != NULL && want.algo < 0;
    const int how = want.algo >= 0 ? DNN_ADOPTED : timed ? DNN_MEASURED : DNN_HEURISTIC;
    const size_t wsb = timed ? o->ws_bytes : 0;
    int n = 0, i;
    size_t b = SIZE_MAX;
    if (d == DNN_FWD) {
        cudnnConvolutionFwdAlgoPerf_t p[DNN_ALGOS];
        dnn_list(p, &n, timed, [&](cudnnConvolutionFwdAlgoPerf_t *out, int *m) {
            return timed ? g_cuda.dnn_fn.find_fwd(g_cuda.dnn.h, s->x, o->x, pl->w, o->w, s->cv[d],
                                                  s->y, o->y, DNN_ALGOS, m, out, o->ws, wsb)
                         : g_cuda.dnn_fn.fwd_algos(g_cuda.dnn.h, s->x, pl->w, s->cv[d], s->y,
                                                   DNN_ALGOS, m, out);
        });
        i = dnn_pick(p, n, cap, s->tf32, timed, want, [&](int j) {
            return g_cuda.dnn_fn.fwd_ws(g_cuda.dnn.h, s->x, pl->w, s->cv[d], s->y, p[j].algo, &b) ==
                           CUDNN_STATUS_SUCCESS
                       ? b
                       : SIZE_MAX;
        });
        if (i < 0)
            return -1;
        s->fwd = p[i].algo;
        dnn_keep(s, d, p, n, i, how, cap);
        DNN_CHECK(
            g_cuda.dnn_fn.fwd_ws(g_cuda.dnn.h, s->x, pl->w, s->cv[d], s->y, s->fwd, &s->ws[d]));
    } else if (d == DNN_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t p[DNN_ALGOS];
        dnn_list(p, &n, timed, [&](cudnnConvolutionBwdDataAlgoPerf_t *out, int *m) {
            return timed ? g_cuda.dnn_fn.find_bwd_data(g_cuda.dnn.h, pl->w, o->w, s->y, o->y,
                                                       s->cv[d], s->x, o->x, DNN_ALGOS, m, out,
                                                       o->ws, wsb)
                         : g_cuda.dnn_fn.bwd_data_algos(g_cuda.dnn.h, pl->w, s->y, s->cv[d], s->x,
                                                        DNN_ALGOS, m, out);
        });
        i = dnn_pick(p, n, cap, s->tf32, timed, want, [&](int j) {
            return g_cuda.dnn_fn.bwd_data_ws(g_cuda.dnn.h, pl->w, s->y, s->cv[d], s->x, p[j].algo,
                                             &b) == CUDNN_STATUS_SUCCESS
                       ? b
                       : SIZE_MAX;
        });
        if (i < 0)
            return -1;
        s->bwd_data = p[i].algo;
        dnn_keep(s, d, p, n, i, how, cap);
        DNN_CHECK(g_cuda.dnn_fn.bwd_data_ws(g_cuda.dnn.h, pl->w, s->y, s->cv[d], s->x, s->bwd_data,
                                            &s->ws[d]));
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[DNN_ALGOS];
        dnn_list(p, &n, timed, [&](cudnnConvolutionBwdFilterAlgoPerf_t *out, int *m) {
            return timed ? g_cuda.dnn_fn.find_bwd_filter(g_cuda.dnn.h, s->x, o->x, s->y, o->y,
                                                         s->cv[d], pl->w, o->dw, DNN_ALGOS, m, out,
                                                         o->ws, wsb)
                         : g_cuda.dnn_fn.bwd_filter_algos(g_cuda.dnn.h, s->x, s->y, s->cv[d], pl->w,
                                                          DNN_ALGOS, m, out);
        });
        i = dnn_pick(p, n, cap, s->tf32, timed, want, [&](int j) {
            return g_cuda.dnn_fn.bwd_filter_ws(g_cuda.dnn.h, s->x, s->y, s->cv[d], pl->w, p[j].algo,
                                               &b) == CUDNN_STATUS_SUCCESS
                       ? b
                       : SIZE_MAX;
        });
        if (i < 0)
            return -1;
        s->bwd_filter = p[i].algo;
        dnn_keep(s, d, p, n, i, how, cap);
        DNN_CHECK(g_cuda.dnn_fn.bwd_filter_ws(g_cuda.dnn.h, s->x, s->y, s->cv[d], pl->w,
                                              s->bwd_filter, &s->ws[d]));
    }
    return 0;
}

/* Choose direction d of slot s within cap (dnn_choose_legacy), and where the choice is timed
 * and [train] cudnn_api = auto, the graph API's engine configs timed beside the legacy
 * algorithms on the same operands (conv_graph.cu), the fastest kept. A direction chosen from
 * the legacy API drops its graph plan. 0, or -1 (the slot's choice unchanged) when nothing
 * qualifies. */
static int dnn_choose(const struct dnn_plan *pl, struct dnn_slot *s, int d,
                      const struct dnn_operands *o, size_t cap, struct dnn_want want = DNN_ANY)
{
    const int rc = dnn_choose_legacy(pl, s, d, o, cap, want);
    if (o && want.algo < 0) /* timed: the graph's configs too (none where graph API is off) */
        return dnn_graph_choose(pl, s, d, o, cap, rc == 0) == 0 ? 0 : rc;
    if (rc == 0)
        dnn_graph_drop(s, d);
    return rc;
}

int dnn_adopt_legacy(const struct dnn_plan *pl, struct dnn_slot *s, int d, int algo, int math)
{
    const struct dnn_want w = {algo, math};
    return dnn_choose(pl, s, d, NULL, pl->cap, w);
}

static int geom_eq(const struct conv_geom *a, const struct conv_geom *b)
{
    return a->C == b->C && a->H == b->H && a->W == b->W && a->O == b->O && a->k == b->k &&
           a->stride == b->stride && a->pad == b->pad;
}

/* The plan of shape q in layout (enum ddp_layout) and storage (act16 1: bf16), or NULL. */
struct dnn_plan *dnn_find(const struct conv_geom *q, int layout, int act16)
{
    for (int i = 0; i < g_cuda.dnn.nplans; i++)
        if (geom_eq(&g_cuda.dnn.plans[i].q, q) && g_cuda.dnn.plans[i].layout == layout &&
            g_cuda.dnn.plans[i].act16 == act16)
            return &g_cuda.dnn.plans[i];
    return NULL;
}

const char *const dnn_dir_names[DNN_DIRS] = {"forward", "backward data", "backward filter"};

/* The name of a plan's layout and storage in messages and the run log: "" for NCHW fp32,
 * " NHWC" and " bf16 data" as they apply. */
const char *dnn_layout_tag(int layout, int act16)
{
    static const char *const tags[2][2] = {{"", " bf16 data"}, {" NHWC", " NHWC bf16 data"}};
    return tags[layout == DDP_LAYOUT_NHWC][act16 != 0];
}

[[noreturn]] static void dnn_no_algo(const struct dnn_plan *pl, int B, size_t cap, int d)
{
    const struct conv_geom *q = &pl->q;
    ddp_die("cuDNN has no %s%s algorithm for conv2d C%d %dx%d -> O%d k%d stride %d pad %d%s at "
            "batch %d within a %zu-byte workspace; set [train] conv = im2col",
            g_cuda.dnn.det ? "deterministic " : "", dnn_dir_names[d], q->C, q->H, q->W, q->O, q->k,
            q->stride, q->pad, dnn_layout_tag(pl->layout, pl->act16), B, cap);
}

/* 1 while the compute stream is being captured into a CUDA graph: nothing may be timed (or
 * synchronised) then, so a batch size first seen in a capture takes cuDNN's heuristic. */
static int dnn_capturing(void)
{
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(g_cuda.stream, &st) != cudaSuccess) {
        cudaGetLastError();
        return 1;
    }
    return st != cudaStreamCaptureStatusNone;
}

/* Workspace budget of a new plan whose input and output take io bytes: as much as those (so
 * that timing, on scratch of the layer's size plus this, stays below what the activations
 * take later and adds nothing to the run's peak), at least DNN_WS_MIN, at most DNN_WS_MAX and
 * 1/DNN_WS_FREE_SHARE of the device's free memory. */
static size_t dnn_budget(size_t io)
{
    size_t cap = io < DNN_WS_MIN ? DNN_WS_MIN : io > DNN_WS_MAX ? DNN_WS_MAX : io;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return cap;
    }
    return free_b / DNN_WS_FREE_SHARE < cap ? free_b / DNN_WS_FREE_SHARE : cap;
}

/* One timing pass at model build: each direction of slot s (batch B) not chosen yet, timed
 * within cap on zeroed scratch (allocated, counted and freed here). Returns the directions
 * still without an algorithm (all of them when the scratch does not fit in device memory). */
static int dnn_time_pass(struct dnn_plan *pl, struct dnn_slot *s, int B, size_t cap)
{
    const struct conv_geom *q = &pl->q;
    const size_t xb = align256(dnn_esize(pl) * B * q->C * q->H * q->W);
    const size_t yb = align256(dnn_esize(pl) * B * q->O * q->P);
    const size_t total = xb + yb + 2 * pl->wbytes + align256(cap);
    char *p = NULL;
    if (cudaMalloc((void **)&p, total) != cudaSuccess) {
        cudaGetLastError();
        return DNN_DIRS;
    }
    mem_note(p, total);
    CUDA_CHECK(cudaMemsetAsync(p, 0, total, g_cuda.stream));
    const struct dnn_operands o = {
        p,  p + xb, p + xb + pl->wbytes, p + xb + pl->wbytes + yb, p + xb + yb + 2 * pl->wbytes,
        cap};
    int left = 0;
    for (int d = 0; d < DNN_DIRS; d++)
        if (s->how[d] == DNN_UNCHOSEN && dnn_choose(pl, s, d, &o, cap) != 0)
            left++;
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
    CUDA_CHECK(cudaFree(p));
    mem_forget(p);
    return left;
}

/* Slot s of plan pl prepared for batch B at model build. DNN_RANKED: each direction's first
 * deterministic algorithm in cuDNN's ranking within the larger of cap and big (the same in
 * every process without timing). Otherwise every direction timed within cap (only the
 * deterministic algorithms under [train] deterministic); one that has no algorithm there is
 * timed again within big, then taken from cuDNN's ranking. Dies when a direction has no
 * algorithm at all. */
static void dnn_plan_build(struct dnn_plan *pl, struct dnn_slot *s, int B, size_t cap, size_t big)
{
    dnn_describe(pl, s, B);
    int left = DNN_DIRS;
    if (g_cuda.dnn.det != DNN_RANKED) {
        left = dnn_time_pass(pl, s, B, cap);
        if (left && big > cap)
            left = dnn_time_pass(pl, s, B, big);
    }
    const size_t most = big > cap ? big : cap;
    for (int d = 0; left && d < DNN_DIRS; d++)
        if (s->how[d] == DNN_UNCHOSEN && dnn_choose(pl, s, d, NULL, most) != 0)
            dnn_no_algo(pl, B, most, d);
}

/* 1 when slot s already holds batch B's algorithms under the current math and determinism
 * (the memory estimate at build and the allocation after it ask for the same plan). */
static int dnn_slot_ready(const struct dnn_slot *s, int B)
{
    if (s->B != B || s->tf32 != dnn_tensor_math() || s->det != g_cuda.dnn.det ||
        s->graph != g_cuda.dnn.graph)
        return 0;
    for (int d = 0; d < DNN_DIRS; d++)
        if (s->how[d] == DNN_UNCHOSEN)
            return 0;
    return 1;
}

/* 1 when a plan's filter is not the caller's fp32 (O,C,k,k) weights: NHWC or bf16 storage
 * (the weights are then cast or transposed into col, the gradient added from col). */
static int dnn_own_filter(const struct dnn_plan *pl)
{
    return pl->layout == DDP_LAYOUT_NHWC || pl->act16;
}

/* Bytes of col a plan needs: workspace, weight gradient room, the weights in the filter's
 * format and type (dnn_own_filter). */
static size_t dnn_col_bytes(const struct dnn_plan *pl)
{
    return pl->cap + (pl->wroom ? 2 : 1) * pl->wbytes;
}

/* conv_plan of the table with cuDNN: the plan of this shape in the layout and storage in
 * force for batch B (made or re-made), the floats of col it needs: the workspace, then room
 * for one weight gradient, then under NHWC or bf16 storage room for the weights as cuDNN
 * reads them. */
size_t dnn_plan_shape(const struct conv_geom *q, int B)
{
    struct dnn_plan *pl = dnn_find(q, g_cuda.layout, g_cuda.act16);
    if (!pl) {
        if (g_cuda.dnn.nplans == DNN_PLANS)
            ddp_die("more than %d convolution shapes in one model", DNN_PLANS);
        pl = &g_cuda.dnn.plans[g_cuda.dnn.nplans++];
        memset(pl, 0, sizeof *pl);
        pl->q = *q;
        pl->layout = g_cuda.layout;
        pl->act16 = g_cuda.act16;
        pl->wbytes = align256(dnn_esize(pl) * q->O * q->C * q->k * q->k);
        pl->next = 1;
        pl->wroom = dnn_own_filter(pl) || g_cuda.dnn.graph;
        DNN_CHECK(g_cuda.dnn_fn.create_filter(&pl->w));
        DNN_CHECK(g_cuda.dnn_fn.set_filter(pl->w, dnn_dtype(pl), dnn_format(pl->layout), q->O, q->C,
                                           q->k, q->k));
        const size_t io = dnn_esize(pl) * B * (q->C * q->H * q->W + q->O * q->P);
        dnn_plan_build(pl, &pl->slot[0], B, dnn_budget(io), dnn_budget(DNN_WS_MAX));
        const struct dnn_slot *s = &pl->slot[0];
        pl->cap = s->ws[0] > s->ws[1] ? s->ws[0] : s->ws[1];
        pl->cap = s->ws[2] > pl->cap ? s->ws[2] : pl->cap;
        pl->cap = align256(pl->cap);
    } else if (!dnn_slot_ready(&pl->slot[0], B)) {
        dnn_plan_build(pl, &pl->slot[0], B, pl->cap, 0); /* planned again: within its cap */
    }
    return dnn_col_bytes(pl) / sizeof(float);
}

/* The slot for a call with batch B: a prepared one, or one described now (its algorithms
 * chosen by the call, which has the real buffers). */
struct dnn_slot *dnn_slot_for(struct dnn_plan *pl, int B)
{
    for (int i = 0; i < DNN_SLOTS; i++) {
        struct dnn_slot *s = &pl->slot[i];
        if (s->B == B && s->tf32 == dnn_tensor_math() && s->det == g_cuda.dnn.det &&
            s->graph == g_cuda.dnn.graph)
            return s;
    }
    struct dnn_slot *s = &pl->slot[pl->next];
    pl->next = pl->next + 1 < DNN_SLOTS ? pl->next + 1 : 1;
    dnn_describe(pl, s, B);
    return s;
}

/* The plan of q in the layout and storage in force; dies when conv_plan never sized it. */
static struct dnn_plan *dnn_plan_of(const struct conv_geom *q)
{
    struct dnn_plan *pl = dnn_find(q, g_cuda.layout, g_cuda.act16);
    if (!pl)
        ddp_die("conv2d C%d %dx%d -> O%d k%d stride %d pad %d%s was not planned: the backend's "
                "conv_plan must size col before the convolution runs (a bug)",
                q->C, q->H, q->W, q->O, q->k, q->stride, q->pad,
                dnn_layout_tag(g_cuda.layout, g_cuda.act16));
    return pl;
}

/* Direction d of slot s chosen on first use: timed on o's buffers under [train]
 * deterministic = false outside a graph capture, else from cuDNN's ranking (deterministic
 * choices then agree on every rank without timing). */
static void dnn_ensure(const struct dnn_plan *pl, struct dnn_slot *s, int d,
                       const struct dnn_operands *o)
{
    if (s->how[d] != DNN_UNCHOSEN)
        return;
    const struct dnn_operands *timed = g_cuda.dnn.det || dnn_capturing() ? NULL : o;
    if (dnn_choose(pl, s, d, timed, pl->cap) != 0 &&
        (!timed || dnn_choose(pl, s, d, NULL, pl->cap) != 0))
        dnn_no_algo(pl, s->B, pl->cap, d);
}

/* Per-channel sums of dout (B, O, P) (activation storage) over batch and positions: block
 * (o, y) covers elements y, y + splits, ... (in blocks of THREADS) of channel o; in double, in
 * a fixed order. */
template <typename A>
__global__ void k_chan_partial(double *part, const A *dout, int B, int O, int P)
{
    const int o = blockIdx.x, y = blockIdx.y, splits = gridDim.y;
    const size_t n = (size_t)B * P;
    double s = 0;
    for (size_t j = (size_t)y * blockDim.x + threadIdx.x; j < n; j += (size_t)splits * blockDim.x)
        s += act_ld(dout[((j / P) * O + o) * P + j % P]);
    s = block_sum(s);
    if (threadIdx.x == 0)
        part[(size_t)o * splits + y] = s;
}

/* db (O) += per-channel sums of dout (B, O, P): a deterministic two-pass reduction. */
static void conv_bias_grad(float *db, const float *dout, int B, int O, int P)
{
    const size_t n = (size_t)B * P;
    if (O <= 0 || n == 0)
        return;
    const size_t splits = rowsum_splits(n);
    double *part = (double *)ws_get(sizeof(double) * (size_t)O * splits);
    dim3 grid((unsigned)O, (unsigned)splits);
    ACT_LAUNCH(k_chan_partial, grid, THREADS, (part, dout, B, O, P),
               (part, (const bf16 *)dout, B, O, P));
    rowsum_finish(db, part, O, splits);
}

/* wt (O, kk, C) = w (O, C, kk): the weights in cuDNN's NHWC filter format, stored as T (float,
 * or bf16 rounded to nearest even). */
template <typename T> __global__ void k_w_to_okkc(T *wt, const float *w, int O, int C, int kk)
{
    const size_t n = (size_t)O * C * kk;
    GRID_STRIDE(i, n)
    {
        const int c = (int)(i % C);
        const size_t t = i / C;
        const int r = (int)(t % kk), o = (int)(t / kk);
        wt[i] = act_st<T>(w[((size_t)o * C + c) * kk + r]);
    }
}

/* w16 (n) = w rounded to bf16: the NCHW filter of a plan on bf16 activations. */
__global__ void k_w_to_bf16(bf16 *w16, const float *w, size_t n)
{
    GRID_STRIDE(i, n) w16[i] = act_st<bf16>(w[i]);
}

/* dw (O, C, kk) += dwt (O, kk, C) (stored as T): an NHWC filter gradient added in PyTorch's
 * order. */
template <typename T> __global__ void k_add_okkc(float *dw, const T *dwt, int O, int C, int kk)
{
    const size_t n = (size_t)O * C * kk;
    GRID_STRIDE(i, n)
    {
        const int r = (int)(i % kk);
        const size_t t = i / kk;
        const int c = (int)(t % C), o = (int)(t / C);
        dw[i] += act_ld(dwt[((size_t)o * kk + r) * C + c]);
    }
}

/* dw (n) += dw16 widened: an NCHW filter gradient of bf16 activations added to the fp32 one. */
__global__ void k_add_bf16(float *dw, const bf16 *dw16, size_t n)
{
    GRID_STRIDE(i, n) dw[i] += act_ld(dw16[i]);
}

/* dw (n) += dw1: an NCHW fp32 filter gradient that a graph plan wrote at beta 0. */
__global__ void k_add_f32(float *dw, const float *dw1, size_t n)
{
    GRID_STRIDE(i, n) dw[i] += dw1[i];
}

/* The parts of col (the caller's scratch of dnn_col_bytes): the algorithm workspace, the
 * weight gradient room, and under NHWC or bf16 storage the weights as the filter says. */
struct dnn_scratch {
    void *ws, *dw, *wt;
};

/* The parts of col for plan pl (wt NULL where the filter is the caller's weights). */
static struct dnn_scratch dnn_scratch_of(const struct dnn_plan *pl, float *col)
{
    struct dnn_scratch sc = {col, (char *)col + pl->cap, NULL};
    if (pl->wroom)
        sc.wt = (char *)col + pl->cap + pl->wbytes;
    return sc;
}

/* 1 when direction d of slot s runs, or may still choose, a graph plan (which reads 16-byte
 * aligned weights): kept one, or not chosen yet with the graph API on and the filter room
 * there. A direction that kept a legacy algorithm reads the caller's weights directly. */
static int dnn_graph_may_run(const struct dnn_plan *pl, const struct dnn_slot *s, int d)
{
    return s->g[d].plan || (g_cuda.dnn.graph && pl->wroom && s->how[d] == DNN_UNCHOSEN);
}

/* The weights as the plan's filter descriptor says: w itself under NCHW fp32 (copied into
 * sc's room for a graph plan (graph 1) where w is not 16-byte aligned, as the graph's tensors
 * declare: a parameter inside the flat buffer may not be); else w transposed (NHWC) and or
 * cast (bf16 storage) into sc's room (queued now: small, and w changes every step). */
static const void *dnn_weights(const struct dnn_plan *pl, const struct dnn_scratch *sc,
                               const float *w, int graph)
{
    if (!dnn_own_filter(pl) && graph && (uintptr_t)w % 16 != 0) {
        CUDA_CHECK(cudaMemcpyAsync(sc->wt, w, sizeof(float) * pl->q.O * pl->q.CKK,
                                   cudaMemcpyDeviceToDevice, g_cuda.stream));
        return sc->wt;
    }
    if (!dnn_own_filter(pl))
        return w;
    const struct conv_geom *q = &pl->q;
    const size_t n = (size_t)q->O * q->CKK;
    const int kk = q->k * q->k;
    if (pl->layout != DDP_LAYOUT_NHWC)
        LAUNCH(k_w_to_bf16, blocks_for(n), THREADS, (bf16 *)sc->wt, w, n);
    else if (pl->act16)
        LAUNCH(k_w_to_okkc<bf16>, blocks_for(n), THREADS, (bf16 *)sc->wt, w, q->O, q->C, kk);
    else
        LAUNCH(k_w_to_okkc<float>, blocks_for(n), THREADS, (float *)sc->wt, w, q->O, q->C, kk);
    return sc->wt;
}

/* dw (O,C,k,k) fp32 += the gradient backward filter wrote into sc's room (dnn_own_filter, or
 * a graph plan, which writes at beta 0): transposed back under NHWC, widened under bf16
 * storage, as it is under NCHW fp32. */
static void dnn_add_dw(const struct dnn_plan *pl, const struct dnn_scratch *sc, float *dw)
{
    const struct conv_geom *q = &pl->q;
    const size_t n = (size_t)q->O * q->CKK;
    const int kk = q->k * q->k;
    if (pl->layout != DDP_LAYOUT_NHWC && !pl->act16)
        LAUNCH(k_add_f32, blocks_for(n), THREADS, dw, (const float *)sc->dw, n);
    else if (pl->layout != DDP_LAYOUT_NHWC)
        LAUNCH(k_add_bf16, blocks_for(n), THREADS, dw, (const bf16 *)sc->dw, n);
    else if (pl->act16)
        LAUNCH(k_add_okkc<bf16>, blocks_for(n), THREADS, dw, (const bf16 *)sc->dw, q->O, q->C, kk);
    else
        LAUNCH(k_add_okkc<float>, blocks_for(n), THREADS, dw, (const float *)sc->dw, q->O, q->C,
               kk);
}

/* relu: out = relu(conv + b) with the convolution written at beta = 0 and one bias+relu
 * pass after it, instead of a bias broadcast, beta = 1 and a relu pass into another buffer.
 * NHWC: the channel is the innermost index (a run of 1 per channel). On bf16 activations the
 * epilogues read and write bf16 (elementwise.cu). */
void dnn_conv2d_fwd(float *out, float *col, const float *inp, const float *w, const float *b, int B,
                    const struct conv_geom *q, int relu)
{
    struct dnn_plan *pl = dnn_plan_of(q);
    struct dnn_slot *s = dnn_slot_for(pl, B);
    const struct dnn_scratch sc = dnn_scratch_of(pl, col);
    const void *wd = dnn_weights(pl, &sc, w, dnn_graph_may_run(pl, s, DNN_FWD));
    const struct dnn_operands o = {(void *)inp, (void *)wd, out, NULL, sc.ws, pl->cap};
    dnn_ensure(pl, s, DNN_FWD, &o); /* before the bias fill: timing writes out */
    const size_t n_out = (size_t)B * q->O * q->P;
    const int inner = pl->layout == DDP_LAYOUT_NHWC ? 1 : q->P;
    if (s->g[DNN_FWD].plan) { /* the graph API: beta 0, the bias added after */
        dnn_graph_run(s, DNN_FWD, inp, wd, out, sc.ws);
        if (b && !relu)
            bias_add(out, b, n_out, q->O, inner);
    } else {
        if (b && !relu)
            fill_bias(out, b, n_out, q->O, inner);
        const float one = 1, beta = b && !relu ? 1.0f : 0.0f;
        DNN_CHECK(g_cuda.dnn_fn.fwd(g_cuda.dnn.h, &one, s->x, inp, pl->w, wd, s->cv[DNN_FWD],
                                    s->fwd, sc.ws, s->ws[DNN_FWD], &beta, s->y, out));
    }
    if (relu) {
        bias_relu(out, b, n_out, q->O, inner);
    }
}

/* Backward filter accumulates into dw (beta 1): its timing writes the weight gradient room of
 * col; backward data's writes dinp, which the call then overwrites. Under NHWC or bf16
 * storage backward filter writes (beta 0) its gradient into that room, added (transposed,
 * widened) into dw; under NHWC the bias gradient is the column sums of dout as a (B*P, O)
 * matrix (layout.cu colsum_add, as batchnorm's channels-last sums). */
void dnn_conv2d_bwd(float *dinp, float *dw, float *db, float *col, const float *dout,
                    const float *inp, const float *w, int B, const struct conv_geom *q)
{
    struct dnn_plan *pl = dnn_plan_of(q);
    struct dnn_slot *s = dnn_slot_for(pl, B);
    const struct dnn_scratch sc = dnn_scratch_of(pl, col);
    const int own = dnn_own_filter(pl);
    const struct dnn_operands of = {(void *)inp, (void *)w, (void *)dout, sc.dw, sc.ws, pl->cap};
    const float one = 1, zero = 0;
    if (db && pl->layout == DDP_LAYOUT_NHWC)
        colsum_add(db, dout, (size_t)B * q->P, q->O);
    else if (db)
        conv_bias_grad(db, dout, B, q->O, q->P);
    dnn_ensure(pl, s, DNN_BWD_FILTER, &of);
    const int room = own || s->g[DNN_BWD_FILTER].plan; /* beta 0 into col's room, added after */
    if (s->g[DNN_BWD_FILTER].plan)
        dnn_graph_run(s, DNN_BWD_FILTER, inp, sc.dw, dout, sc.ws);
    else
        DNN_CHECK(g_cuda.dnn_fn.bwd_filter(
            g_cuda.dnn.h, &one, s->x, inp, s->y, dout, s->cv[DNN_BWD_FILTER], s->bwd_filter, sc.ws,
            s->ws[DNN_BWD_FILTER], own ? &zero : &one, pl->w, own ? sc.dw : (void *)dw));
    if (room)
        dnn_add_dw(pl, &sc, dw);
    if (dinp) {
        const void *wd = dnn_weights(pl, &sc, w, dnn_graph_may_run(pl, s, DNN_BWD_DATA));
        const struct dnn_operands od = {dinp, (void *)wd, (void *)dout, NULL, sc.ws, pl->cap};
        dnn_ensure(pl, s, DNN_BWD_DATA, &od);
        if (s->g[DNN_BWD_DATA].plan)
            dnn_graph_run(s, DNN_BWD_DATA, dinp, wd, dout, sc.ws);
        else
            DNN_CHECK(g_cuda.dnn_fn.bwd_data(g_cuda.dnn.h, &one, pl->w, wd, s->y, dout,
                                             s->cv[DNN_BWD_DATA], s->bwd_data, sc.ws,
                                             s->ws[DNN_BWD_DATA], &zero, s->x, dinp));
    }
}

/* Open cuDNN and make its handle on the compute stream; 0, or with the reason in err -1 (not
 * found) or -2 (found, but it does not start on this GPU). */
int dnn_start(char *err, size_t errlen)
{
    if (g_cuda.dnn.h)
        return 0;
    if (dnn_open(err, errlen) != 0)
        return -1;
    cudnnHandle_t h;
    cudnnStatus_t s = g_cuda.dnn_fn.create(&h);
    if (s != CUDNN_STATUS_SUCCESS) {
        ddp_err(err, errlen, "cudnnCreate: %s", g_cuda.dnn_fn.error_string(s));
        return -2;
    }
    if ((s = g_cuda.dnn_fn.set_stream(h, g_cuda.stream)) != CUDNN_STATUS_SUCCESS) {
        ddp_err(err, errlen, "cudnnSetStream: %s", g_cuda.dnn_fn.error_string(s));
        return -2;
    }
    g_cuda.dnn.h = h;
    return 0;
}

void dnn_version(char *out, size_t len)
{
    char why[8];
    if (dnn_open(why, sizeof why) != 0) {
        snprintf(out, len, "not found");
        return;
    }
    const size_t v = g_cuda.dnn_fn.get_version();
    snprintf(out, len, "%zu.%zu.%zu", v / 10000, v % 10000 / 100, v % 100);
}
#else /* built without cudnn.h: im2col + cuBLAS only */
int dnn_start(char *err, size_t errlen)
{
    return ddp_err(err, errlen, "this ddptrain was built without cuDNN (no cudnn.h at build time)");
}
void dnn_version(char *out, size_t len)
{
    snprintf(out, len, "not built in");
}
#endif

/*
 * test_twin_cudnn_graph.cc - the GPU twin's cuDNN graph API (tests/twin/cudnn_graph.cc)
 * against its documented behaviour (suite twin), at API level: for each direction (forward,
 * backward data, backward filter), layout (packed NCHW, packed NHWC) and data type (float,
 * bf16) every engine with knob 1 equals its legacy algorithm bit for bit, knob 2 differs from
 * knob 1 (float data: a bf16 output's rounding hides the last bits), the tensor-core engine
 * equals legacy IMPLICIT_PRECOMP_GEMM on tf32-rounded operands, the runtime-compiled forward
 * engine 3 equals engine 1 bit for bit (knob 1 and 2) with its workspace; the heuristics'
 * lists, numerical and behaviour notes; configs rebuilt from engine index and knob equal the heuristics'; the statuses of
 * wrong attribute types, counts and names, sets after finalize, missing attributes, gets before
 * finalize, unknown engines, mismatched or unpacked strides and mixed data types; a workspace
 * smaller than the plan's a GPU fault naming it (in a child process); an execute's
 * cudaEventElapsedTime equal to its fixed cost (within 0.01 ms: the event records' own CPU
 * time counts), DDP_EMU_CUDNN_ENGINE_MS (and its _RANK)
 * changing it; DDP_EMU_CUDNN_NO_GRAPH=1 making heuristics and plans NOT_SUPPORTED. Exit 0 or 1.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "cuda_bf16.h"
#include "cuda_runtime.h"
#include "cudnn.h"

namespace
{

using D = cudnnBackendDescriptor_t;

int g_fail;

void expect(bool ok, const std::string &what)
{
    printf("%-4s %s\n", ok ? "ok" : "FAIL", what.c_str());
    g_fail += !ok;
}

/* The convolution: x (N, C, H, W), w (O, C, K, K), y (N, O, H, W): pad 1, stride 1. */
constexpr int N = 3, C = 5, H = 7, W = 7, O = 4, K = 3;
const int64_t DIMS[3][4] = {{N, C, H, W}, {O, C, K, K}, {N, O, H, W}};
const char *const DIR_NAME[3] = {"fwd", "data", "filter"};
const int OUT_OF[3] = {2, 0, 1}; /* the tensor each direction writes: y, dx, dw */

const cudnnBackendDescriptorType_t OP_TYPE[3] = {
    CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
    CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
    CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
/* x (dx), w (dw), y (dy), conv, alpha, beta */
const cudnnBackendAttributeName_t OP_ATTR[3][6] = {
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};

/* How one graph is built: per tensor (x, w, y) its layout and data type; unpacked: y's
 * strides with a gap. */
struct Opts {
    int dir = 0;
    bool nhwc[3] = {false, false, false};
    cudnnDataType_t dt[3] = {CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT};
    bool unpacked = false;
};

Opts opts(int dir, bool nhwc, bool bf16)
{
    Opts o;
    o.dir = dir;
    for (int k = 0; k < 3; k++)
        o.nhwc[k] = nhwc, o.dt[k] = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    return o;
}

D mk(cudnnBackendDescriptorType_t t)
{
    D d = nullptr;
    if (cudnnBackendCreateDescriptor(t, &d) != CUDNN_STATUS_SUCCESS)
        expect(false, "cudnnBackendCreateDescriptor");
    return d;
}
cudnnStatus_t set_i64(D d, cudnnBackendAttributeName_t n, std::vector<int64_t> v)
{
    return cudnnBackendSetAttribute(d, n, CUDNN_TYPE_INT64, (int64_t)v.size(), v.data());
}
cudnnStatus_t set_d(D d, cudnnBackendAttributeName_t n, D v)
{
    return cudnnBackendSetAttribute(d, n, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}
cudnnStatus_t set_e(D d, cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t, int32_t v)
{
    return cudnnBackendSetAttribute(d, n, t, 1, &v);
}
int64_t get_i64(D d, cudnnBackendAttributeName_t n)
{
    int64_t v = -1, cnt = 0;
    if (cudnnBackendGetAttribute(d, n, CUDNN_TYPE_INT64, 1, &cnt, &v) != CUDNN_STATUS_SUCCESS)
        return -1;
    return v;
}

/* A finalized tensor descriptor; st gathers the first failure. */
D tensor(int64_t uid, const int64_t *d, bool nhwc, cudnnDataType_t dt, bool unpacked,
         cudnnStatus_t *st)
{
    D t = mk(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t gap = unpacked ? 2 : 1;
    std::vector<int64_t> s =
        nhwc ? std::vector<int64_t>{d[2] * d[3] * d[1], 1, d[3] * d[1], d[1]}
             : std::vector<int64_t>{gap * d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
    cudnnStatus_t r[] = {set_e(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, dt),
                         set_i64(t, CUDNN_ATTR_TENSOR_DIMENSIONS, {d[0], d[1], d[2], d[3]}),
                         set_i64(t, CUDNN_ATTR_TENSOR_STRIDES, s),
                         set_i64(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, {uid}),
                         set_i64(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, {16}),
                         cudnnBackendFinalize(t)};
    for (cudnnStatus_t x : r)
        if (*st == CUDNN_STATUS_SUCCESS)
            *st = x;
    return t;
}

D conv_desc(cudnnStatus_t *st)
{
    D c = mk(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    cudnnStatus_t r[] = {
        set_e(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT),
        set_e(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE,
              CUDNN_CROSS_CORRELATION),
        set_i64(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, {2}),
        set_i64(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, {1, 1}),
        set_i64(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, {1, 1}),
        set_i64(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, {1, 1}),
        set_i64(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, {1, 1}),
        cudnnBackendFinalize(c)};
    for (cudnnStatus_t x : r)
        if (*st == CUDNN_STATUS_SUCCESS)
            *st = x;
    return c;
}

/* The operation graph of o, finalized (its first failing status in *st). */
D graph(const Opts &o, cudnnHandle_t h, cudnnStatus_t *st)
{
    *st = CUDNN_STATUS_SUCCESS;
    D t[3];
    for (int k = 0; k < 3; k++)
        t[k] = tensor(k + 1, DIMS[k], o.nhwc[k], o.dt[k], o.unpacked && k == 2, st);
    D cv = conv_desc(st), op = mk(OP_TYPE[o.dir]), g = mk(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    const float one = 1, zero = 0;
    cudnnStatus_t r[] = {
        set_d(op, OP_ATTR[o.dir][0], t[0]),
        set_d(op, OP_ATTR[o.dir][1], t[1]),
        set_d(op, OP_ATTR[o.dir][2], t[2]),
        set_d(op, OP_ATTR[o.dir][3], cv),
        cudnnBackendSetAttribute(op, OP_ATTR[o.dir][4], CUDNN_TYPE_FLOAT, 1, &one),
        cudnnBackendSetAttribute(op, OP_ATTR[o.dir][5], CUDNN_TYPE_FLOAT, 1, &zero),
        cudnnBackendFinalize(op),
        set_d(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, op),
        cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h),
        cudnnBackendFinalize(g)};
    for (cudnnStatus_t x : r)
        if (*st == CUDNN_STATUS_SUCCESS)
            *st = x;
    for (D d : {t[0], t[1], t[2], cv, op}) /* the graph holds copies */
        cudnnBackendDestroyDescriptor(d);
    return g;
}

/* The heuristics' configs for graph g in mode m (empty, *st set, on failure). */
std::vector<D> heur(D g, cudnnBackendHeurMode_t m, cudnnStatus_t *st)
{
    D hd = mk(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    set_d(hd, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, g);
    set_e(hd, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, m);
    std::vector<D> out;
    int64_t n = 0;
    *st = cudnnBackendFinalize(hd);
    if (*st == CUDNN_STATUS_SUCCESS)
        *st = cudnnBackendGetAttribute(hd, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, nullptr);
    for (int64_t i = 0; *st == CUDNN_STATUS_SUCCESS && i < n; i++)
        out.push_back(mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    if (n && *st == CUDNN_STATUS_SUCCESS)
        *st = cudnnBackendGetAttribute(hd, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &n, out.data());
    cudnnBackendDestroyDescriptor(hd);
    return out;
}

/* A config's engine index, knob value (-1: none), numerical and behaviour notes as bit sets. */
struct CfgInfo {
    int64_t engine = -1, knob = -1;
    unsigned notes = 0, behavior = 0;
};
CfgInfo info(D cfg)
{
    CfgInfo r;
    D e = mk(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    D kc[4];
    int64_t n = 0;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &n, &e) == CUDNN_STATUS_SUCCESS) {
        r.engine = get_i64(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
        cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
        if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                     CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
                                     notes) == CUDNN_STATUS_SUCCESS)
            for (int64_t i = 0; i < n; i++)
                r.notes |= 1u << notes[i];
        cudnnBackendBehaviorNote_t bn[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
        if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                     CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n,
                                     bn) == CUDNN_STATUS_SUCCESS)
            for (int64_t i = 0; i < n; i++)
                r.behavior |= 1u << bn[i];
        else
            r.behavior = ~0u;
    }
    for (D &k : kc)
        k = mk(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 4, &n,
                                 kc) == CUDNN_STATUS_SUCCESS &&
        n == 1)
        r.knob = get_i64(kc[0], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE);
    for (D k : kc)
        cudnnBackendDestroyDescriptor(k);
    cudnnBackendDestroyDescriptor(e);
    return r;
}

/* A config rebuilt from engine index and knob value for graph g (finalize status in *st). */
D rebuild(D g, int64_t engine, int64_t knob, cudnnStatus_t *st)
{
    D e = mk(CUDNN_BACKEND_ENGINE_DESCRIPTOR), k = mk(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    D cfg = mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    set_d(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, g);
    set_i64(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, {engine});
    *st = cudnnBackendFinalize(e);
    set_e(k, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, CUDNN_KNOB_TYPE_SPLIT_K_SLC);
    set_i64(k, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, {knob});
    cudnnBackendFinalize(k);
    if (*st == CUDNN_STATUS_SUCCESS) {
        set_d(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, e);
        set_d(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, k);
        *st = cudnnBackendFinalize(cfg);
    }
    cudnnBackendDestroyDescriptor(e);
    cudnnBackendDestroyDescriptor(k);
    return cfg;
}

/* An execution plan of cfg on h (finalize status in *st), its workspace size in *ws. */
D plan(cudnnHandle_t h, D cfg, int64_t *ws, cudnnStatus_t *st)
{
    D p = mk(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    set_d(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
    *st = cudnnBackendFinalize(p);
    *ws = *st == CUDNN_STATUS_SUCCESS ? get_i64(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) : -1;
    return p;
}

/* Execute plan p on h with the tensors dev (uids 1, 2, 3) and workspace ws. */
cudnnStatus_t execute(cudnnHandle_t h, D p, void *const dev[3], void *ws)
{
    D vp = mk(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    const int64_t uids[3] = {1, 2, 3};
    void *ptrs[3] = {dev[0], dev[1], dev[2]};
    cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
    cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3,
                             ptrs);
    if (ws)
        cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                 &ws);
    cudnnStatus_t st = cudnnBackendFinalize(vp);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendExecute(h, p, vp);
    cudnnBackendDestroyDescriptor(vp);
    return st;
}

/* ---- data on the device, the legacy API's results ---- */

size_t count_of(int k)
{
    return (size_t)(DIMS[k][0] * DIMS[k][1] * DIMS[k][2] * DIMS[k][3]);
}

/* Round f to tf32 (10 mantissa bits, to nearest even). */
float tf32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    memcpy(&f, &u, 4);
    return f;
}

/* The three tensors on the device (float or bf16 values of a fixed pseudo-random sequence,
 * tf32-rounded when round), a large workspace. */
struct Bufs {
    void *dev[3] = {};
    void *ws = nullptr;
};
Bufs upload(bool bf16, bool round)
{
    Bufs b;
    uint32_t seed = 12345;
    for (int k = 0; k < 3; k++) {
        std::vector<float> f(count_of(k));
        std::vector<__nv_bfloat16> h(f.size());
        for (size_t i = 0; i < f.size(); i++) {
            seed = seed * 1664525u + 1013904223u;
            f[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f + 1e-3f * (float)(i % 7);
            f[i] = round && !bf16 ? tf32(f[i]) : f[i]; /* bf16 values are tf32 */
            h[i] = __float2bfloat16_rn(f[i]);
        }
        const size_t bytes = f.size() * (bf16 ? 2 : 4);
        cudaMalloc(&b.dev[k], bytes);
        cudaMemcpy(b.dev[k], bf16 ? (const void *)h.data() : (const void *)f.data(), bytes,
                   cudaMemcpyHostToDevice);
    }
    cudaMalloc(&b.ws, 1 << 20);
    return b;
}
void release(Bufs &b)
{
    for (void *p : b.dev)
        cudaFree(p);
    cudaFree(b.ws);
}

/* The bytes of direction dir's output after a run. */
std::vector<unsigned char> output(const Bufs &b, int dir, bool bf16)
{
    const int k = OUT_OF[dir];
    std::vector<unsigned char> out(count_of(k) * (bf16 ? 2 : 4));
    cudaDeviceSynchronize();
    cudaMemcpy(out.data(), b.dev[k], out.size(), cudaMemcpyDeviceToHost);
    return out;
}

/* The legacy API's output of algorithm algo for o on b (a fresh handle). */
std::vector<unsigned char> legacy(const Opts &o, int algo, const Bufs &b)
{
    const bool bf16 = o.dt[0] == CUDNN_DATA_BFLOAT16;
    const cudnnTensorFormat_t f = o.nhwc[0] ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    const cudnnDataType_t dt = o.dt[0];
    cudnnHandle_t h;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t cv;
    cudnnCreate(&h);
    cudnnCreateTensorDescriptor(&x);
    cudnnCreateTensorDescriptor(&y);
    cudnnCreateFilterDescriptor(&w);
    cudnnCreateConvolutionDescriptor(&cv);
    cudnnSetTensor4dDescriptor(x, f, dt, N, C, H, W);
    cudnnSetTensor4dDescriptor(y, f, dt, N, O, H, W);
    cudnnSetFilter4dDescriptor(w, dt, f, O, C, K, K);
    cudnnSetConvolution2dDescriptor(cv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                    CUDNN_DATA_FLOAT);
    const float one = 1, zero = 0;
    cudnnStatus_t st;
    if (o.dir == 0)
        st = cudnnConvolutionForward(h, &one, x, b.dev[0], w, b.dev[1], cv,
                                     (cudnnConvolutionFwdAlgo_t)algo, b.ws, 1 << 20, &zero, y,
                                     b.dev[2]);
    else if (o.dir == 1)
        st = cudnnConvolutionBackwardData(h, &one, w, b.dev[1], y, b.dev[2], cv,
                                          (cudnnConvolutionBwdDataAlgo_t)algo, b.ws, 1 << 20, &zero,
                                          x, b.dev[0]);
    else
        st = cudnnConvolutionBackwardFilter(h, &one, x, b.dev[0], y, b.dev[2], cv,
                                            (cudnnConvolutionBwdFilterAlgo_t)algo, b.ws, 1 << 20,
                                            &zero, w, b.dev[1]);
    if (st != CUDNN_STATUS_SUCCESS)
        expect(false, "legacy convolution");
    std::vector<unsigned char> out = output(b, o.dir, bf16);
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(cv);
    cudnnDestroy(h);
    return out;
}

/* The graph API's output of engine e, knob for o on b (a fresh handle); empty on failure. */
std::vector<unsigned char> graph_run(const Opts &o, int64_t e, int64_t knob, const Bufs &b)
{
    cudnnHandle_t h;
    cudnnCreate(&h);
    cudnnStatus_t st;
    int64_t ws = 0;
    D g = graph(o, h, &st), cfg = rebuild(g, e, knob, &st), p = plan(h, cfg, &ws, &st);
    std::vector<unsigned char> out;
    if (st == CUDNN_STATUS_SUCCESS &&
        execute(h, p, b.dev, ws ? b.ws : nullptr) == CUDNN_STATUS_SUCCESS)
        out = output(b, o.dir, o.dt[0] == CUDNN_DATA_BFLOAT16);
    for (D d : {g, cfg, p})
        cudnnBackendDestroyDescriptor(d);
    cudnnDestroy(h);
    return out;
}

/* ---- the checks ---- */

std::string name_of(const Opts &o)
{
    return std::string(DIR_NAME[o.dir]) + (o.nhwc[0] ? " nhwc" : " nchw") +
           (o.dt[0] == CUDNN_DATA_BFLOAT16 ? " bf16" : " float");
}

/* Every engine with knob 1 = its legacy algorithm; knob 2 != knob 1 (float); the tensor-core
 * engine = legacy IMPLICIT_PRECOMP_GEMM of tf32-rounded operands; the runtime-compiled
 * engine = engine 1, knob for knob. */
void t_numerics(int dir, bool nhwc, bool bf16)
{
    const Opts o = opts(dir, nhwc, bf16);
    const std::string n = name_of(o);
    Bufs b = upload(bf16, false);
    for (int e = 0; e < 2; e++) {
        const std::vector<unsigned char> want = legacy(o, e, b), k1 = graph_run(o, e, 1, b);
        expect(!k1.empty() && k1 == want,
               n + ": engine " + std::to_string(e) + " knob 1 = legacy algorithm bit for bit");
        if (bf16)
            continue;
        const std::vector<unsigned char> k2 = graph_run(o, e, 2, b);
        expect(!k2.empty() && k2 != k1,
               n + ": engine " + std::to_string(e) + " knob 2 rounds otherwise than knob 1");
    }
    if (dir == 0) {
        const std::vector<unsigned char> tc = graph_run(o, 2, 1, b);
        Bufs r = upload(bf16, true);
        expect(!tc.empty() && tc == legacy(o, 1, r),
               n + ": tensor-core engine = IMPLICIT_PRECOMP_GEMM of tf32-rounded operands");
        if (!bf16)
            expect(tc != legacy(o, 1, b), n + ": tensor-core engine differs from fp32");
        release(r);
        for (int k = 1; k <= 2; k++) {
            const std::vector<unsigned char> rc = graph_run(o, 3, k, b);
            expect(!rc.empty() && rc == graph_run(o, 1, k, b),
                   n + ": runtime-compiled engine 3 knob " + std::to_string(k) +
                       " = engine 1 bit for bit");
        }
    }
    release(b);
}

/* The heuristics' lists (ENGINE.KNOB as 10 * ENGINE + KNOB) and notes; rebuilt configs equal. */
void t_heuristics(int dir)
{
    static const std::vector<int> want[3][2] = {{{31, 32, 1, 2, 12, 11, 22, 21}, {1, 2, 11, 12}},
                                                {{11, 12, 1, 2}, {11, 12}},
                                                {{11, 12, 1, 2}, {11, 12}}};
    cudnnHandle_t h;
    cudnnCreate(&h);
    cudnnStatus_t st;
    D g = graph(opts(dir, false, false), h, &st);
    for (int m = 0; m < 2; m++) {
        std::vector<D> cfgs = heur(g, m ? CUDNN_HEUR_MODE_FALLBACK : CUDNN_HEUR_MODE_A, &st);
        std::vector<int> got;
        bool notes_ok = true, behavior_ok = true, rebuilt_ok = true;
        int64_t ws_of[4] = {-1, -1, -1, -1}; /* by engine */
        for (D c : cfgs) {
            const CfgInfo i = info(c);
            got.push_back((int)(10 * i.engine + i.knob));
            const unsigned want_notes =
                dir == 0 && i.engine == 2 ? 1u << CUDNN_NUMERICAL_NOTE_TENSOR_CORE
                : dir && i.engine == 0    ? 1u << CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
                                          : 0u;
            notes_ok = notes_ok && i.notes == want_notes;
            behavior_ok = behavior_ok &&
                          i.behavior == (dir == 0 && i.engine == 3
                                             ? 1u << CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION
                                             : 0u);
            cudnnStatus_t rs;
            int64_t ws1 = -1, ws2 = -2;
            D r = rebuild(g, i.engine, i.knob, &rs), p1 = plan(h, c, &ws1, &st),
              p2 = plan(h, r, &ws2, &rs);
            const CfgInfo ri = info(r);
            if (i.engine >= 0 && i.engine < 4)
                ws_of[i.engine] = ws1;
            rebuilt_ok = rebuilt_ok && rs == CUDNN_STATUS_SUCCESS && ri.engine == i.engine &&
                         ri.knob == i.knob && ri.notes == i.notes &&
                         ri.behavior == i.behavior && ws1 == ws2;
            for (D d : {c, r, p1, p2})
                cudnnBackendDestroyDescriptor(d);
        }
        const std::string n = std::string(DIR_NAME[dir]) + (m ? " FALLBACK" : " mode A");
        expect(st == CUDNN_STATUS_SUCCESS && got == want[dir][m], n + ": the documented configs");
        expect(notes_ok, n + ": the documented numerical notes");
        expect(behavior_ok, n + ": the documented behaviour notes (forward 3: RUNTIME_COMPILATION)");
        expect(rebuilt_ok,
               n + ": configs rebuilt from engine index and knob equal the heuristics'");
        if (dir == 0 && m == 0)
            expect(ws_of[1] > 0 && ws_of[3] == ws_of[1],
                   n + ": the runtime-compiled engine 3 needs engine 1's workspace");
    }
    cudnnBackendDestroyDescriptor(g);
    cudnnDestroy(h);
}

/* The plan finalize status of engine 1 knob 1 on the graph of o. */
cudnnStatus_t plan_status(const Opts &o)
{
    cudnnHandle_t h;
    cudnnCreate(&h);
    cudnnStatus_t gs, cs, ps;
    int64_t ws;
    D g = graph(o, h, &gs), cfg = rebuild(g, 1, 1, &cs), p = plan(h, cfg, &ws, &ps);
    for (D d : {g, cfg, p})
        cudnnBackendDestroyDescriptor(d);
    cudnnDestroy(h);
    return gs != CUDNN_STATUS_SUCCESS ? gs : cs != CUDNN_STATUS_SUCCESS ? cs : ps;
}

void t_attribute_errors(void)
{
    const cudnnStatus_t BAD = CUDNN_STATUS_BAD_PARAM;
    D t = mk(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int32_t i32 = 1;
    int64_t v, n;
    expect(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT32, 1, &i32) ==
               BAD,
           "a wrong attribute type is BAD_PARAM");
    expect(set_i64(t, CUDNN_ATTR_TENSOR_DIMENSIONS, {1, 2, 3}) == BAD,
           "a wrong element count is BAD_PARAM");
    expect(set_e(t, (cudnnBackendAttributeName_t)CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
                 CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT) == BAD,
           "an attribute of another descriptor type is BAD_PARAM");
    set_e(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
    set_i64(t, CUDNN_ATTR_TENSOR_DIMENSIONS, {1, 1, 1, 1});
    set_i64(t, CUDNN_ATTR_TENSOR_STRIDES, {1, 1, 1, 1});
    set_i64(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, {1});
    expect(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &n, &v) ==
               BAD,
           "a get before finalize is BAD_PARAM");
    expect(cudnnBackendFinalize(t) == BAD, "finalize without a required attribute is BAD_PARAM");
    set_i64(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, {16});
    expect(cudnnBackendFinalize(t) == CUDNN_STATUS_SUCCESS, "finalize with every attribute");
    expect(set_i64(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, {2}) == BAD,
           "a set after finalize is BAD_PARAM");
    D op = mk(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    D cv = conv_desc(&st);
    expect(set_d(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, cv) == BAD,
           "a descriptor operand of the wrong type is BAD_PARAM");
    for (D d : {t, op, cv})
        cudnnBackendDestroyDescriptor(d);
}

void t_support(void)
{
    const cudnnStatus_t NS = CUDNN_STATUS_NOT_SUPPORTED;
    cudnnHandle_t h;
    cudnnCreate(&h);
    cudnnStatus_t st;
    for (int dir = 0; dir < 3; dir++) {
        D g = graph(opts(dir, false, false), h, &st);
        const int64_t bad = dir == 0 ? 4 : 2;
        D c = rebuild(g, bad, 1, &st);
        expect(st == NS, std::string(DIR_NAME[dir]) + ": engine " + std::to_string(bad) +
                             " does not exist: NOT_SUPPORTED at finalize");
        cudnnBackendDestroyDescriptor(c);
        c = rebuild(g, 1, 3, &st);
        expect(st == NS, std::string(DIR_NAME[dir]) + ": knob value 3: NOT_SUPPORTED");
        cudnnBackendDestroyDescriptor(c);
        cudnnBackendDestroyDescriptor(g);
        Opts o = opts(dir, false, false);
        o.nhwc[2] = true;
        expect(plan_status(o) == NS,
               std::string(DIR_NAME[dir]) + ": y NHWC, x and w NCHW: NOT_SUPPORTED");
        o = opts(dir, false, false);
        o.unpacked = true;
        expect(plan_status(opts(dir, true, false)) == CUDNN_STATUS_SUCCESS && plan_status(o) == NS,
               std::string(DIR_NAME[dir]) + ": unpacked strides: NOT_SUPPORTED");
        o = opts(dir, false, false);
        o.dt[1] = CUDNN_DATA_BFLOAT16;
        expect(plan_status(o) == NS,
               std::string(DIR_NAME[dir]) + ": mixed data types: NOT_SUPPORTED");
    }
    cudnnDestroy(h);
}

/* DDP_EMU_CUDNN_NO_GRAPH=1: heuristics and plans NOT_SUPPORTED. */
void t_no_graph(void)
{
    setenv("DDP_EMU_CUDNN_NO_GRAPH", "1", 1);
    cudnnHandle_t h;
    cudnnCreate(&h);
    cudnnStatus_t st, hs;
    D g = graph(opts(0, false, false), h, &st);
    heur(g, CUDNN_HEUR_MODE_A, &hs);
    expect(hs == CUDNN_STATUS_NOT_SUPPORTED, "NO_GRAPH: heuristics finalize NOT_SUPPORTED");
    expect(plan_status(opts(0, false, false)) == CUDNN_STATUS_NOT_SUPPORTED,
           "NO_GRAPH: plan finalize NOT_SUPPORTED");
    unsetenv("DDP_EMU_CUDNN_NO_GRAPH");
    cudnnBackendDestroyDescriptor(g);
    cudnnDestroy(h);
}

/* cudaEventElapsedTime around one execute of ENGINE.KNOB of dir. */
double elapsed(int dir, int64_t e, int64_t knob, const Bufs &b)
{
    cudnnHandle_t h;
    cudnnCreate(&h);
    cudnnStatus_t st;
    int64_t ws;
    D g = graph(opts(dir, false, false), h, &st), cfg = rebuild(g, e, knob, &st),
      p = plan(h, cfg, &ws, &st);
    cudaEvent_t a, z;
    cudaEventCreate(&a);
    cudaEventCreate(&z);
    float ms = -1;
    cudaEventRecord(a, nullptr);
    st = execute(h, p, b.dev, b.ws);
    cudaEventRecord(z, nullptr);
    cudaEventSynchronize(z);
    cudaEventElapsedTime(&ms, a, z);
    cudaEventDestroy(a);
    cudaEventDestroy(z);
    for (D d : {g, cfg, p})
        cudnnBackendDestroyDescriptor(d);
    cudnnDestroy(h);
    return st == CUDNN_STATUS_SUCCESS ? ms : -1;
}

bool near(double a, double b)
{
    return fabs(a - b) < 0.01; /* the events' own operations' CPU time: a few microseconds */
}

void t_cost(void)
{
    static const double BASE[3][4][2] = {
        {{0.30, 0.32}, {0.20, 0.22}, {0.10, 0.11}, {0.05, 0.06}},
        {{0.12, 0.13}, {0.18, 0.16}, {0, 0}, {0, 0}},
        {{0.12, 0.13}, {0.18, 0.16}, {0, 0}, {0, 0}}};
    const double m = (double)N * O * H * W * C * K * K, scale = 1 + 0.5 * m / (m + 16777216.0);
    Bufs b = upload(false, false);
    for (int dir = 0; dir < 3; dir++)
        for (int e = 0; e < (dir ? 2 : 4); e++)
            for (int k = 1; k <= 2; k++) {
                const double got = elapsed(dir, e, k, b), want = BASE[dir][e][k - 1] * scale;
                char what[160];
                snprintf(what, sizeof what, "%s %d.%d: elapsed %.4f ms = the fixed cost %.4f ms",
                         DIR_NAME[dir], e, k, got, want);
                expect(near(got, want), what);
            }
    setenv("DDP_EMU_CUDNN_ENGINE_MS", "fwd:1.1=2.5,data:0.2=0.75", 1);
    expect(near(elapsed(0, 1, 1, b), 2.5) && near(elapsed(1, 0, 2, b), 0.75) &&
               near(elapsed(0, 1, 2, b), 0.22 * scale),
           "DDP_EMU_CUDNN_ENGINE_MS sets the named configs' costs only");
    setenv("RANK", "0", 1);
    setenv("DDP_EMU_CUDNN_MS_RANK", "1", 1);
    expect(near(elapsed(0, 1, 1, b), 0.2 * scale), "DDP_EMU_CUDNN_MS_RANK=1: not on rank 0");
    setenv("DDP_EMU_CUDNN_MS_RANK", "0", 1);
    expect(near(elapsed(0, 1, 1, b), 2.5), "DDP_EMU_CUDNN_MS_RANK=0: on rank 0");
    for (const char *v : {"DDP_EMU_CUDNN_ENGINE_MS", "RANK", "DDP_EMU_CUDNN_MS_RANK"})
        unsetenv(v);
    release(b);
}

/* A child process: forward engine 1 with a 64-byte workspace allocation; 0 when the
 * synchronisation reports the fault. */
int fault_child(void)
{
    Bufs b = upload(false, false);
    void *small = nullptr;
    cudaMalloc(&small, 64);
    cudnnHandle_t h;
    cudnnCreate(&h);
    cudnnStatus_t st;
    int64_t ws;
    D g = graph(opts(0, false, false), h, &st), cfg = rebuild(g, 1, 1, &st),
      p = plan(h, cfg, &ws, &st);
    execute(h, p, b.dev, small);
    return cudaDeviceSynchronize() != cudaSuccess ? 0 : 1;
}

/* Before any CUDA call of this process (a fork keeps no runtime threads). */
void t_fault(void)
{
    int fd[2];
    if (pipe(fd) != 0)
        return expect(false, "pipe");
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        _exit(fault_child());
    }
    close(fd[1]);
    std::string text;
    char buf[512];
    for (ssize_t r; (r = read(fd[0], buf, sizeof buf)) > 0;)
        text.append(buf, (size_t)r);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    expect(WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
               text.find("GPU fault: cudnnBackendExecute: operand workSpace") != std::string::npos,
           "a too small workspace is a GPU fault naming it");
}

} // namespace

int main(void)
{
    t_fault();
    for (int dir = 0; dir < 3; dir++)
        for (int nhwc = 0; nhwc < 2; nhwc++)
            for (int bf16 = 0; bf16 < 2; bf16++)
                t_numerics(dir, nhwc, bf16);
    for (int dir = 0; dir < 3; dir++)
        t_heuristics(dir);
    t_attribute_errors();
    t_support();
    t_no_graph();
    t_cost();
    printf("%s\n", g_fail ? "FAIL" : "PASS");
    return g_fail ? 1 : 0;
}

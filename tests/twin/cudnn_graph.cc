/*
 * cudnn_graph.cc - the GPU twin's cuDNN 9 graph (backend) API, the part that ddptrain's
 * convolutions use (docs/gpu.md): tensor, convolution, operation (forward, backward data,
 * backward filter), operation graph, engine heuristics, engine, engine config, knob choice,
 * execution plan and variant pack descriptors with typed attributes, and cudnnBackendExecute
 * computing the convolution as the matching legacy algorithm of cudnn.cc does (the same code:
 * cudnn_internal.h), queued on the handle's stream like a kernel.
 *
 * Strict, as cuDNN is: an attribute that this descriptor type does not have, a wrong attribute
 * type or element count, a set after finalize, a descriptor operand of the wrong type or not
 * finalized, a finalize with a required attribute missing, or a get before finalize:
 * CUDNN_STATUS_BAD_PARAM (cuDNN 9 has finer codes, all of them not SUCCESS). A graph that
 * the twin's engines cannot run: CUDNN_STATUS_NOT_SUPPORTED at the execution plan's finalize
 * (x, w and y not all packed NCHW or all packed NHWC, in cuDNN's n, c, h, w order of
 * dimensions and strides; data types not one of FLOAT and BFLOAT16 shared by x, w and y;
 * dilation other than 1, pre and post paddings that differ, a compute type other than FLOAT,
 * CUDNN_CONVOLUTION mode); an engine index the graph does not have, or a knob other than
 * SPLIT_K_SLC = 1 or 2: NOT_SUPPORTED at the engine's or the config's finalize. Setting a
 * descriptor operand copies it: destroying the operand later changes nothing.
 *
 * Engines (global index; the legacy algorithm each computes as, bit for bit with knob 1):
 *   forward   0 IMPLICIT_GEMM (no workspace), 1 IMPLICIT_PRECOMP_GEMM (one sample's im2col),
 *             2 tensor core (note TENSOR_CORE): as 1 on x and w rounded to tf32 (10 mantissa
 *             bits, to nearest even), for float and bf16 data alike (bf16 values are tf32),
 *             3 runtime-compiled (behaviour note RUNTIME_COMPILATION; on a real GPU its plan's
 *             finalize compiles a kernel with NVRTC, seconds per shape): as 1, workspace too
 *   data      0 ALGO_0 (note NONDETERMINISTIC, none), 1 ALGO_1 (one sample's dcol)
 *   filter    0 ALGO_0 (note NONDETERMINISTIC, none), 1 ALGO_1 (one sample's col)
 * One knob each, CUDNN_KNOB_TYPE_SPLIT_K_SLC, 1 (the default) or 2: with 2 the reduction
 * (forward: C*R*S; data: the output channels; filter: the samples) is summed as two halves,
 * each as knob 1 sums the whole, added at the end: other bits (the filter's needs N >= 2).
 * Behaviour notes: forward 3's RUNTIME_COMPILATION, none else. Heuristics list one config per
 * engine and knob, each with its one knob choice: CUDNN_HEUR_MODE_A (and INSTANT, B)
 *   forward   3.1 3.2 0.1 0.2 1.2 1.1 2.2 2.1  data, filter   1.1 1.2 0.1 0.2
 * (ENGINE.KNOB; not fastest first, so that taking the first untimed shows; the
 * runtime-compiled engine first and the cheapest, so that a caller that does not skip it
 * keeps it), and CUDNN_HEUR_MODE_FALLBACK only the deterministic ones without tensor cores
 * or runtime compilation:
 *   forward   0.1 0.2 1.1 1.2                  data, filter   1.1 1.2
 *
 * Cost: an execute advances the device clock by exactly its config's fixed cost (its own CPU
 * time left out: twin::run_at_cost), so cudaEventElapsedTime around it is that cost, the same
 * on every run. Cost = base * (1 + 0.5 * M / (M + 2^24)) ms, M the convolution's multiply-adds
 * (N*O*OH*OW*C*R*S): a bigger layer costs more, at most 1.5 times the base, so the order is
 * fixed. Base (ms), ENGINE.KNOB:
 *   forward   0.1 0.30  0.2 0.32  1.1 0.20  1.2 0.22  2.1 0.10  2.2 0.11  3.1 0.05  3.2 0.06
 *   data      0.1 0.12  0.2 0.13  1.1 0.18  1.2 0.16
 *   filter    0.1 0.12  0.2 0.13  1.1 0.18  1.2 0.16
 * So forward 1.1 (at most 0.3) beats both legacy algorithms' times (TWIN_MS in cudnn.cc: 0.4,
 * 1.0) and is the fastest without tensor cores or runtime compilation; backward 0.1 < 0.2 < 1.2 < 1.1, all below
 * legacy ALGO_0's 0.3, so deterministic runs pick a graph engine too.
 * DDP_EMU_CUDNN_ENGINE_MS=DIR:ENGINE.KNOB=MS[,...] (DIR fwd, data, filter) sets a config's
 * cost to MS exactly, with DDP_EMU_CUDNN_MS_RANK=R on rank R only (as DDP_EMU_CUDNN_MS).
 * DDP_EMU_CUDNN_ENGINE_REFUSE=DIR:ENGINE.KNOB[,...] (with DDP_EMU_CUDNN_MS_RANK too): an
 * execute of that config returns CUDNN_STATUS_NOT_SUPPORTED, its plan finalized all the same
 * (an engine that cuDNN lists but that will not run those operands).
 * DDP_EMU_CUDNN_NO_GRAPH=1: every ENGINEHEUR and EXECUTION_PLAN finalize returns
 * CUDNN_STATUS_NOT_SUPPORTED (the graph API unusable).
 *
 * Execute: the variant pack's pointers found by the op's tensors' unique ids (one missing, or
 * a pointer not aligned to its tensor's BYTE_ALIGNMENT: BAD_PARAM); operands translated and
 * bounds-checked, the workspace NaN-filled, faults reported as cudnn.cc's legacy calls do
 * (a workspace allocation smaller than the plan's size is an operand outside its allocation).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "cudnn.h"
#include "cudnn_internal.h"
#include "twin.h"

namespace
{

using twin_dnn::Geom;

struct Desc;
using Ref = std::shared_ptr<const Desc>;

/* One attribute as set: count values of type (bytes), or descriptor snapshots (refs). */
struct Attr {
    cudnnBackendAttributeType_t type;
    int64_t count = 0;
    std::vector<unsigned char> bytes;
    std::vector<Ref> refs;
};

struct Desc {
    cudnnBackendDescriptorType_t type;
    bool final = false;
    std::map<int, Attr> attrs;
    std::vector<Ref> results; /* ENGINEHEUR: the configs, made at finalize */
    int64_t ws = 0;           /* EXECUTION_PLAN: workspace bytes, at finalize */
};

enum : unsigned { SET = 1, GET = 2, REQ = 4 };
constexpr int ANY_OP = -1; /* a descriptor operand of one of the three operation types */

/* What a descriptor type takes: attribute, its type, element counts, access, operand type. */
struct Spec {
    int desc, name;
    cudnnBackendAttributeType_t type;
    int64_t min, max;
    unsigned flags;
    int ref = 0;
};

constexpr cudnnBackendAttributeType_t BD = CUDNN_TYPE_BACKEND_DESCRIPTOR, I64 = CUDNN_TYPE_INT64;

const Spec SPECS[] = {
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, 1,
     SET | GET | REQ},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DIMENSIONS, I64, 4, 4, SET | GET | REQ},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_STRIDES, I64, 4, 4, SET | GET | REQ},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_UNIQUE_ID, I64, 1, 1, SET | GET | REQ},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, I64, 1, 1, SET | GET | REQ},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE,
     1, 1, SET | GET | REQ},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
     CUDNN_TYPE_CONVOLUTION_MODE, 1, 1, SET | GET | REQ},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, I64, 1, 1,
     SET | GET | REQ},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_DILATIONS, I64, 2, 2,
     SET | GET | REQ},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, I64, 2, 2,
     SET | GET | REQ},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, I64, 2, 2,
     SET | GET | REQ},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, I64, 2, 2,
     SET | GET | REQ},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE,
     1, 1, SET | REQ},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_OPS, BD, 1, 64,
     SET | GET | REQ, ANY_OP},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, BD, 1, 1,
     SET | GET | REQ, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, 1,
     SET | GET | REQ},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_RESULTS, BD, 0, 0, GET,
     CUDNN_BACKEND_ENGINECFG_DESCRIPTOR},
    {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, CUDNN_ATTR_ENGINECFG_ENGINE, BD, 1, 1, SET | GET | REQ,
     CUDNN_BACKEND_ENGINE_DESCRIPTOR},
    {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, BD, 0, 64, SET | GET,
     CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR},
    {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, BD, 1, 1, SET | GET | REQ,
     CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR},
    {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, I64, 1, 1, SET | GET | REQ},
    {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
     0, 0, GET},
    {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 0,
     0, GET},
    {CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE,
     1, 1, SET | GET | REQ},
    {CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, I64, 1, 1,
     SET | GET | REQ},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
     1, 1, SET | REQ},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, BD, 1, 1,
     SET | GET | REQ, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, I64, 1, 1,
     GET},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, I64, 1, 16,
     SET | REQ},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
     CUDNN_TYPE_VOID_PTR, 1, 16, SET | REQ},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
     1, 1, SET},
};

/* The three operations' attributes, per direction: x (dx), w (dw), y (dy), conv, alpha, beta. */
enum Dir { FWD = 0, DATA = 1, FILTER = 2 };
const int OP_TYPE[3] = {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
const int OP_ATTR[3][6] = {
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

int dir_of_type(int type)
{
    for (int d = 0; d < 3; d++)
        if (OP_TYPE[d] == type)
            return d;
    return -1;
}

/* The spec of attribute name of descriptor type desc (the operations' from OP_ATTR); NULL
 * when that type has no such attribute. */
const Spec *spec_of(int desc, int name)
{
    static Spec op_specs[3][6];
    static const bool made = [] {
        for (int d = 0; d < 3; d++)
            for (int k = 0; k < 6; k++)
                op_specs[d][k] = k < 3    ? Spec{OP_TYPE[d],
                                              OP_ATTR[d][k],
                                              BD,
                                              1,
                                              1,
                                              SET | GET | REQ,
                                              CUDNN_BACKEND_TENSOR_DESCRIPTOR}
                                 : k == 3 ? Spec{OP_TYPE[d],
                                                 OP_ATTR[d][k],
                                                 BD,
                                                 1,
                                                 1,
                                                 SET | GET | REQ,
                                                 CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR}
                                          : Spec{OP_TYPE[d], OP_ATTR[d][k],  CUDNN_TYPE_FLOAT, 1,
                                                 1,          SET | GET | REQ};
        return true;
    }();
    (void)made;
    for (const Spec &s : SPECS)
        if (s.desc == desc && s.name == name)
            return &s;
    const int d = dir_of_type(desc);
    for (int k = 0; d >= 0 && k < 6; k++)
        if (op_specs[d][k].name == name)
            return &op_specs[d][k];
    return nullptr;
}

/* Bytes of one value of an attribute type (descriptors: a handle). */
size_t esz_of(cudnnBackendAttributeType_t t)
{
    switch (t) {
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_INT64:
    case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
        return 8;
    case CUDNN_TYPE_DOUBLE:
        return 8;
    default: /* enums, FLOAT */
        return 4;
    }
}

/* ---- reading attributes of a finalized (or checked) descriptor ---- */

const Attr *find(const Desc &d, int name)
{
    auto it = d.attrs.find(name);
    return it == d.attrs.end() ? nullptr : &it->second;
}
int64_t i64(const Desc &d, int name, int k = 0)
{
    int64_t v = 0;
    memcpy(&v, find(d, name)->bytes.data() + 8 * k, 8);
    return v;
}
int32_t e32(const Desc &d, int name)
{
    int32_t v = 0;
    memcpy(&v, find(d, name)->bytes.data(), 4);
    return v;
}
float f32(const Desc &d, int name)
{
    float v = 0;
    memcpy(&v, find(d, name)->bytes.data(), 4);
    return v;
}
void *ptr(const Desc &d, int name, int k = 0)
{
    void *v = nullptr;
    memcpy(&v, find(d, name)->bytes.data() + 8 * k, 8);
    return v;
}
const Desc &ref(const Desc &d, int name, int k = 0)
{
    return *find(d, name)->refs[k];
}

/* An operation and its parts. */
struct OpView {
    int dir;
    const Desc *x, *w, *y, *cv; /* x or dx, w or dw, y or dy */
    float alpha, beta;
};
OpView op_view(const Desc &op)
{
    const int d = dir_of_type(op.type);
    const int *a = OP_ATTR[d];
    return OpView{d,
                  &ref(op, a[0]),
                  &ref(op, a[1]),
                  &ref(op, a[2]),
                  &ref(op, a[3]),
                  f32(op, a[4]),
                  f32(op, a[5])};
}
const Desc &graph_op(const Desc &graph)
{
    return ref(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS);
}
int graph_dir(const Desc &graph)
{
    return dir_of_type(graph_op(graph).type);
}
int engines_of(int dir)
{
    return dir == FWD ? 4 : 2;
}
/* The legacy algorithm that engine e of direction dir computes as (header). */
int legacy_of(int dir, int64_t e)
{
    return dir == FWD && (e == 2 || e == 3) ? 1 : (int)e;
}

/* ---- finalize: each descriptor type's checks ---- */

cudnnStatus_t check_tensor(const Desc &t)
{
    for (int k = 0; k < 4; k++)
        if (i64(t, CUDNN_ATTR_TENSOR_DIMENSIONS, k) <= 0 ||
            i64(t, CUDNN_ATTR_TENSOR_STRIDES, k) <= 0)
            return CUDNN_STATUS_BAD_PARAM;
    const int64_t al = i64(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT);
    return al > 0 && (al & (al - 1)) == 0 ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t check_conv(const Desc &c)
{
    if (i64(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS) != 2)
        return CUDNN_STATUS_BAD_PARAM;
    for (int k = 0; k < 2; k++)
        if (i64(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, k) <= 0 ||
            i64(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, k) <= 0 ||
            i64(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, k) < 0 ||
            i64(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, k) < 0)
            return CUDNN_STATUS_BAD_PARAM;
    return CUDNN_STATUS_SUCCESS;
}

/* x (N,C,H,W), w (O,C,R,S), y (N,O,OH,OW) fit together under the convolution; distinct uids. */
cudnnStatus_t check_op(const Desc &op)
{
    const OpView o = op_view(op);
    auto dim = [](const Desc *t, int k) { return i64(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, k); };
    auto cv = [&](int name, int k) { return i64(*o.cv, name, k); };
    if (dim(o.w, 1) != dim(o.x, 1) || dim(o.y, 0) != dim(o.x, 0) || dim(o.y, 1) != dim(o.w, 0))
        return CUDNN_STATUS_BAD_PARAM;
    for (int k = 0; k < 2; k++) {
        const int64_t in = dim(o.x, 2 + k) + cv(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, k) +
                           cv(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, k) -
                           cv(CUDNN_ATTR_CONVOLUTION_DILATIONS, k) * (dim(o.w, 2 + k) - 1) - 1;
        if (in < 0 || dim(o.y, 2 + k) != in / cv(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, k) + 1)
            return CUDNN_STATUS_BAD_PARAM;
    }
    const int64_t ux = i64(*o.x, CUDNN_ATTR_TENSOR_UNIQUE_ID),
                  uw = i64(*o.w, CUDNN_ATTR_TENSOR_UNIQUE_ID),
                  uy = i64(*o.y, CUDNN_ATTR_TENSOR_UNIQUE_ID);
    return ux != uw && ux != uy && uw != uy ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

/* Bit 0: t's strides are packed NCHW; bit 1: packed NHWC (n, c, h, w order of both). */
unsigned layouts_of(const Desc &t)
{
    int64_t d[4], s[4];
    for (int k = 0; k < 4; k++)
        d[k] = i64(t, CUDNN_ATTR_TENSOR_DIMENSIONS, k), s[k] = i64(t, CUDNN_ATTR_TENSOR_STRIDES, k);
    const bool nchw =
        s[0] == d[1] * d[2] * d[3] && s[1] == d[2] * d[3] && s[2] == d[3] && s[3] == 1;
    const bool nhwc =
        s[0] == d[1] * d[2] * d[3] && s[1] == 1 && s[2] == d[3] * d[1] && s[3] == d[1];
    return (nchw ? 1u : 0u) | (nhwc ? 2u : 0u);
}

/* The twin's Geom of a graph's operation, or NOT_SUPPORTED where its engines cannot run it
 * (layout, data types, dilation, asymmetric padding, compute type, mode, size). */
cudnnStatus_t geom_of_op(const OpView &o, Geom *g)
{
    const Desc *t[3] = {o.x, o.w, o.y};
    unsigned lay = 3;
    const int32_t dt = e32(*o.x, CUDNN_ATTR_TENSOR_DATA_TYPE);
    for (const Desc *d : t) {
        lay &= layouts_of(*d);
        if (e32(*d, CUDNN_ATTR_TENSOR_DATA_TYPE) != dt ||
            i64(*d, CUDNN_ATTR_TENSOR_DIMENSIONS, 0) * i64(*d, CUDNN_ATTR_TENSOR_STRIDES, 0) >
                INT32_MAX)
            return CUDNN_STATUS_NOT_SUPPORTED;
    }
    const Desc &c = *o.cv;
    auto cv = [&](int name, int k) { return i64(c, name, k); };
    if (!lay || (dt != CUDNN_DATA_FLOAT && dt != CUDNN_DATA_BFLOAT16) ||
        e32(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE) != CUDNN_DATA_FLOAT ||
        e32(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE) != CUDNN_CROSS_CORRELATION)
        return CUDNN_STATUS_NOT_SUPPORTED;
    for (int k = 0; k < 2; k++)
        if (cv(CUDNN_ATTR_CONVOLUTION_DILATIONS, k) != 1 ||
            cv(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, k) !=
                cv(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, k))
            return CUDNN_STATUS_NOT_SUPPORTED;
    auto dim = [](const Desc *d, int k) { return (int)i64(*d, CUDNN_ATTR_TENSOR_DIMENSIONS, k); };
    *g = Geom{dim(o.x, 0),
              dim(o.x, 1),
              dim(o.x, 2),
              dim(o.x, 3),
              dim(o.w, 0),
              dim(o.w, 2),
              dim(o.w, 3),
              (int)cv(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, 0),
              (int)cv(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, 1),
              (int)cv(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, 0),
              (int)cv(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, 1),
              dim(o.y, 2),
              dim(o.y, 3),
              !(lay & 1),
              dt == CUDNN_DATA_BFLOAT16};
    return CUDNN_STATUS_SUCCESS;
}

bool no_graph(void)
{
    const char *e = getenv("DDP_EMU_CUDNN_NO_GRAPH");
    return e && strcmp(e, "1") == 0;
}

/* The knob value of a config (SPLIT_K_SLC; 1 when it has no knob choice). */
int64_t knob_of(const Desc &cfg)
{
    const Attr *a = find(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES);
    for (size_t k = 0; a && k < a->refs.size(); k++)
        if (e32(*a->refs[k], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE) == CUDNN_KNOB_TYPE_SPLIT_K_SLC)
            return i64(*a->refs[k], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE);
    return 1;
}

cudnnStatus_t check_cfg(const Desc &cfg)
{
    const Attr *a = find(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES);
    int seen = 0;
    for (size_t k = 0; a && k < a->refs.size(); k++) {
        const Desc &kc = *a->refs[k];
        if (e32(kc, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE) != CUDNN_KNOB_TYPE_SPLIT_K_SLC)
            return CUDNN_STATUS_NOT_SUPPORTED;
        const int64_t v = i64(kc, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE);
        if (v != 1 && v != 2)
            return CUDNN_STATUS_NOT_SUPPORTED;
        if (seen++)
            return CUDNN_STATUS_BAD_PARAM; /* one knob given twice */
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_plan(Desc &plan)
{
    if (no_graph())
        return CUDNN_STATUS_NOT_SUPPORTED;
    const Desc &cfg = ref(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
    const Desc &eng = ref(cfg, CUDNN_ATTR_ENGINECFG_ENGINE);
    const OpView o = op_view(graph_op(ref(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH)));
    Geom g;
    if (const cudnnStatus_t st = geom_of_op(o, &g); st != CUDNN_STATUS_SUCCESS)
        return st;
    const int e = (int)i64(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
    plan.ws = o.dir == FWD ? twin_dnn::fwd_ws(g, legacy_of(FWD, e)) : twin_dnn::bwd_ws(g, e);
    return plan.ws < 0 ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t make_results(Desc &heur);

/* The checks and results of finalizing d (its required attributes present). */
cudnnStatus_t finalize_of(Desc &d)
{
    switch (d.type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
        return check_tensor(d);
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
        return check_conv(d);
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: /* the twin's graphs: one convolution */
        return find(d, CUDNN_ATTR_OPERATIONGRAPH_OPS)->count == 1 ? CUDNN_STATUS_SUCCESS
                                                                  : CUDNN_STATUS_NOT_SUPPORTED;
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR: {
        const int64_t e = i64(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
        const int dir = graph_dir(ref(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH));
        return e >= 0 && e < engines_of(dir) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
    }
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
        return check_cfg(d);
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
        return no_graph() ? CUDNN_STATUS_NOT_SUPPORTED : make_results(d);
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
        return check_plan(d);
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
        return find(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS)->count ==
                       find(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)->count
                   ? CUDNN_STATUS_SUCCESS
                   : CUDNN_STATUS_BAD_PARAM;
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR:
        return CUDNN_STATUS_SUCCESS;
    default: /* the operations */
        return check_op(d);
    }
}

/* ---- set, finalize, heuristics' configs ---- */

cudnnStatus_t set_attr(Desc &d, int name, cudnnBackendAttributeType_t type, int64_t n,
                       const void *arr)
{
    const Spec *sp = spec_of(d.type, name);
    if (d.final || !sp || !(sp->flags & SET) || sp->type != type || n < sp->min || n > sp->max ||
        !arr)
        return CUDNN_STATUS_BAD_PARAM;
    Attr a{type, n, {}, {}};
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        for (int64_t k = 0; k < n; k++) {
            const Desc *r = ((const Desc *const *)arr)[k];
            const bool type_ok =
                sp->ref == ANY_OP ? r && dir_of_type(r->type) >= 0 : r && (int)r->type == sp->ref;
            if (!type_ok || !r->final)
                return CUDNN_STATUS_BAD_PARAM;
            a.refs.push_back(std::make_shared<const Desc>(*r));
        }
    } else
        a.bytes.assign((const unsigned char *)arr,
                       (const unsigned char *)arr + (size_t)n * esz_of(type));
    d.attrs[name] = std::move(a);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize(Desc &d)
{
    if (d.final)
        return CUDNN_STATUS_BAD_PARAM;
    for (const Spec &s : SPECS)
        if (s.desc == (int)d.type && (s.flags & REQ) && !find(d, s.name))
            return CUDNN_STATUS_BAD_PARAM;
    const int dir = dir_of_type(d.type);
    for (int k = 0; dir >= 0 && k < 6; k++)
        if (!find(d, OP_ATTR[dir][k]))
            return CUDNN_STATUS_BAD_PARAM;
    const cudnnStatus_t st = finalize_of(d);
    d.final = st == CUDNN_STATUS_SUCCESS;
    return st;
}

/* A finalized config of engine e, knob value knob, for graph. */
Ref make_cfg(const Desc &graph, int64_t e, int64_t knob)
{
    Desc eng{CUDNN_BACKEND_ENGINE_DESCRIPTOR}, kc{CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR};
    Desc cfg{CUDNN_BACKEND_ENGINECFG_DESCRIPTOR};
    const Desc *gp = &graph, *ep = &eng, *kp = &kc;
    const cudnnBackendKnobType_t kt = CUDNN_KNOB_TYPE_SPLIT_K_SLC;
    set_attr(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gp);
    set_attr(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &e);
    finalize(eng);
    set_attr(kc, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &kt);
    set_attr(kc, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &knob);
    finalize(kc);
    set_attr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ep);
    set_attr(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &kp);
    finalize(cfg);
    return std::make_shared<const Desc>(cfg);
}

/* The heuristics' configs (header): ENGINE.KNOB as 10 * ENGINE + KNOB. */
cudnnStatus_t make_results(Desc &heur)
{
    static const int A_FWD[] = {31, 32, 1, 2, 12, 11, 22, 21}, A_BWD[] = {11, 12, 1, 2};
    static const int FB_FWD[] = {1, 2, 11, 12}, FB_BWD[] = {11, 12};
    const Desc &graph = ref(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
    const bool fb = e32(heur, CUDNN_ATTR_ENGINEHEUR_MODE) == CUDNN_HEUR_MODE_FALLBACK;
    const bool fwd = graph_dir(graph) == FWD;
    const int *l = fwd ? (fb ? FB_FWD : A_FWD) : (fb ? FB_BWD : A_BWD);
    const int n = fwd ? (fb ? 4 : 8) : (fb ? 2 : 4);
    heur.results.clear();
    for (int i = 0; i < n; i++)
        heur.results.push_back(make_cfg(graph, l[i] / 10, l[i] % 10));
    return CUDNN_STATUS_SUCCESS;
}

/* ---- get ---- */

/* An engine's numerical notes (header). */
std::vector<int32_t> notes_of(const Desc &eng)
{
    const int dir = graph_dir(ref(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH));
    const int64_t e = i64(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
    if (dir == FWD && e == 2)
        return {CUDNN_NUMERICAL_NOTE_TENSOR_CORE};
    if (dir != FWD && e == 0)
        return {CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC};
    return {};
}

/* An engine's behaviour notes (header). */
std::vector<int32_t> behavior_of(const Desc &eng)
{
    const int dir = graph_dir(ref(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH));
    if (dir == FWD && i64(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX) == 3)
        return {CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION};
    return {};
}

/* The values of a gettable attribute of a finalized descriptor: bytes (n values) or refs. */
void values_of(const Desc &d, int name, std::vector<unsigned char> *bytes, std::vector<Ref> *refs,
               int64_t *n)
{
    if (const Attr *a = find(d, name)) {
        *bytes = a->bytes, *refs = a->refs, *n = a->count;
    } else if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
        *refs = d.results, *n = (int64_t)d.results.size();
    } else if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
        bytes->assign((const unsigned char *)&d.ws, (const unsigned char *)&d.ws + 8), *n = 1;
    } else if (name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE ||
               name == CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE) {
        const std::vector<int32_t> v =
            name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE ? notes_of(d) : behavior_of(d);
        bytes->assign((const unsigned char *)v.data(),
                      (const unsigned char *)(v.data() + v.size()));
        *n = (int64_t)v.size();
    } else {
        *n = 0; /* an optional attribute not set */
    }
}

cudnnStatus_t get_attr(const Desc &d, int name, cudnnBackendAttributeType_t type, int64_t req,
                       int64_t *count, void *arr)
{
    const Spec *sp = spec_of(d.type, name);
    if (!sp || !(sp->flags & GET) || sp->type != type || req < 0 || (req > 0 && !arr) || !count ||
        !d.final)
        return CUDNN_STATUS_BAD_PARAM;
    std::vector<unsigned char> bytes;
    std::vector<Ref> refs;
    int64_t n = 0;
    values_of(d, name, &bytes, &refs, &n);
    const int64_t give = req ? std::min(req, n) : n;
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        for (int64_t k = 0; req && k < give; k++) {
            Desc *dst = ((Desc **)arr)[k];
            if (!dst || dst->type != refs[k]->type)
                return CUDNN_STATUS_BAD_PARAM;
        }
        for (int64_t k = 0; req && k < give; k++)
            *((Desc **)arr)[k] = *refs[k];
    } else if (req)
        memcpy(arr, bytes.data(), (size_t)give * esz_of(type));
    *count = give;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- execute ---- */

/* Whether environment variable var lists config ENGINE.KNOB of direction dir as
 * DIR:ENGINE.KNOB (with_ms: DIR:ENGINE.KNOB=MS, its MS into *ms). */
bool env_lists(const char *var, int dir, int64_t e, int64_t knob, bool with_ms, double *ms)
{
    const char *v = getenv(var);
    if (!v || !*v || !twin::on_rank(getenv("DDP_EMU_CUDNN_MS_RANK")))
        return false;
    static const char *const dirs[] = {"fwd:", "data:", "filter:"};
    const size_t n = strlen(dirs[dir]);
    for (const char *p = v; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : nullptr) {
        int pe = -1, pk = -1, used = 0;
        double t = -1;
        if (strncmp(p, dirs[dir], n) != 0 || sscanf(p + n, "%d.%d%n", &pe, &pk, &used) != 2 ||
            pe != e || pk != knob)
            continue;
        if (!with_ms)
            return true;
        if (sscanf(p + n + used, "=%lf", &t) == 1 && t >= 0) {
            *ms = t;
            return true;
        }
    }
    return false;
}

/* DDP_EMU_CUDNN_ENGINE_MS's cost of config ENGINE.KNOB of direction dir; -1 when none. */
double cost_override(int dir, int64_t e, int64_t knob)
{
    double ms = -1;
    return env_lists("DDP_EMU_CUDNN_ENGINE_MS", dir, e, knob, true, &ms) ? ms : -1;
}

/* A config's fixed cost in ms (header). */
double cost_ms(int dir, int64_t e, int64_t knob, const Geom &g)
{
    static const double BASE[3][4][2] = {
        {{0.30, 0.32}, {0.20, 0.22}, {0.10, 0.11}, {0.05, 0.06}},
        {{0.12, 0.13}, {0.18, 0.16}, {0, 0}, {0, 0}},
        {{0.12, 0.13}, {0.18, 0.16}, {0, 0}, {0, 0}}};
    const double over = cost_override(dir, e, knob);
    if (over >= 0)
        return over;
    const double m = (double)g.N * g.O * g.OH * g.OW * g.C * g.R * g.S;
    return BASE[dir][e][knob - 1] * (1 + 0.5 * m / (m + 16777216.0));
}

/* The device pointer of the variant pack for unique id uid; false when missing. */
bool pointer_of(const Desc &pack, int64_t uid, void **p)
{
    const Attr *a = find(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
    for (int64_t k = 0; k < a->count; k++)
        if (i64(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, (int)k) == uid) {
            *p = ptr(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, (int)k);
            return true;
        }
    return false;
}

cudnnStatus_t execute(cudnnHandle_t h, const Desc &plan, const Desc &pack)
{
    const Desc &cfg = ref(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
    const Desc &eng = ref(cfg, CUDNN_ATTR_ENGINECFG_ENGINE);
    const OpView o = op_view(graph_op(ref(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH)));
    Geom g;
    if (const cudnnStatus_t st = geom_of_op(o, &g); st != CUDNN_STATUS_SUCCESS)
        return st;
    void *p[3];
    const Desc *t[3] = {o.x, o.w, o.y};
    for (int k = 0; k < 3; k++) {
        const int64_t al = i64(*t[k], CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT);
        if (!pointer_of(pack, i64(*t[k], CUDNN_ATTR_TENSOR_UNIQUE_ID), &p[k]) ||
            (uintptr_t)p[k] % (uintptr_t)al)
            return CUDNN_STATUS_BAD_PARAM;
    }
    void *ws = find(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE)
                   ? ptr(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE)
                   : nullptr;
    const int64_t e = i64(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX), knob = knob_of(cfg);
    if (env_lists("DDP_EMU_CUDNN_ENGINE_REFUSE", o.dir, e, knob, false, nullptr))
        return CUDNN_STATUS_NOT_SUPPORTED; /* an engine that finalizes but will not run */
    twin_dnn::Variant v{"cudnnBackendExecute"};
    v.halves = knob == 2;
    v.tf32 = o.dir == FWD && e == 2;
    v.cost_ms = cost_ms(o.dir, e, knob, g);
    const size_t need = (size_t)plan.ws;
    if (o.dir == FWD)
        return twin_dnn::conv_fwd(h, g, legacy_of(FWD, e), v, p[0], p[1], p[2], ws, need, o.alpha,
                                  o.beta);
    if (o.dir == DATA)
        return twin_dnn::conv_bwd_data(h, g, (int)e, v, p[1], p[2], p[0], ws, need, o.alpha,
                                       o.beta);
    return twin_dnn::conv_bwd_filter(h, g, (int)e, v, p[0], p[2], p[1], ws, need, o.alpha, o.beta);
}

bool known_type(cudnnBackendDescriptorType_t t)
{
    if (dir_of_type(t) >= 0)
        return true;
    for (const Spec &s : SPECS)
        if (s.desc == (int)t)
            return true;
    return false;
}

} // namespace

extern "C" {

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                           cudnnBackendDescriptor_t *d)
{
    if (!d)
        return CUDNN_STATUS_BAD_PARAM;
    if (!known_type(type))
        return CUDNN_STATUS_NOT_SUPPORTED; /* what ddptrain does not use */
    *d = new Desc{type};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d)
{
    delete (Desc *)d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t d)
{
    return d ? finalize(*(Desc *)d) : CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t n, const void *arr)
{
    return d ? set_attr(*(Desc *)d, name, type, n, arr) : CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const d,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t req,
                                       int64_t *count, void *arr)
{
    return d ? get_attr(*(const Desc *)d, name, type, req, count, arr) : CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan,
                                  cudnnBackendDescriptor_t pack)
{
    const Desc *pl = (const Desc *)plan, *pk = (const Desc *)pack;
    if (!h || !pl || !pk || pl->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !pl->final ||
        pk->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR || !pk->final)
        return CUDNN_STATUS_BAD_PARAM;
    return execute(h, *pl, *pk);
}

} /* extern "C" */

/*
 * onnx.c - ONNX export. See onnx.h.
 *
 * Dimension letters: N batch (symbolic in the graph), C H W sample shape, D features, K
 * classes. Field numbers are those of onnx/onnx.proto.
 */
#include "report/onnx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddp_build.h"
#include "job/config.h"
#include "nn/weights.h"
#include "report/pb.h"
#include "core/fileio.h"
#include "core/util.h"

/* onnx.proto field numbers and enums */
enum {
    MODEL_IR = 1,
    MODEL_PRODUCER = 2,
    MODEL_PRODUCER_VERSION = 3,
    MODEL_GRAPH = 7,
    MODEL_OPSET = 8
};
enum { GRAPH_NODE = 1, GRAPH_NAME = 2, GRAPH_INIT = 5, GRAPH_INPUT = 11, GRAPH_OUTPUT = 12 };
enum { NODE_INPUT = 1, NODE_OUTPUT = 2, NODE_NAME = 3, NODE_OP = 4, NODE_ATTR = 5 };
enum { ATTR_NAME = 1, ATTR_F = 2, ATTR_I = 3, ATTR_INTS = 8, ATTR_TYPE = 20 };
enum { ATTR_FLOAT = 1, ATTR_INT = 2, ATTR_INTS_T = 7 };
enum { TENSOR_DIMS = 1, TENSOR_TYPE = 2, TENSOR_NAME = 8, TENSOR_RAW = 9 };
enum { ONNX_FLOAT = 1, ONNX_UINT8 = 2, ONNX_IR_VERSION = 8 };

static void attr_int(struct ddp_pb *node, const char *name, int64_t v)
{
    struct ddp_pb a = {0};
    ddp_pb_string(&a, ATTR_NAME, name);
    ddp_pb_varint(&a, ATTR_I, (uint64_t)v);
    ddp_pb_varint(&a, ATTR_TYPE, ATTR_INT);
    ddp_pb_message(node, NODE_ATTR, &a);
}

static void attr_float(struct ddp_pb *node, const char *name, float v)
{
    struct ddp_pb a = {0};
    ddp_pb_string(&a, ATTR_NAME, name);
    ddp_pb_float(&a, ATTR_F, v);
    ddp_pb_varint(&a, ATTR_TYPE, ATTR_FLOAT);
    ddp_pb_message(node, NODE_ATTR, &a);
}

static void attr_ints(struct ddp_pb *node, const char *name, const int64_t *v, int n)
{
    struct ddp_pb a = {0};
    ddp_pb_string(&a, ATTR_NAME, name);
    ddp_pb_packed_i64(&a, ATTR_INTS, v, n);
    ddp_pb_varint(&a, ATTR_TYPE, ATTR_INTS_T);
    ddp_pb_message(node, NODE_ATTR, &a);
}

/* ---- one row per layer kind: operator, attributes, tensors taken after the input ---- */
static void attrs_flatten(struct ddp_pb *n, const struct ddp_layer *l)
{
    attr_int(n, "axis", 1);
}
static void attrs_linear(struct ddp_pb *n, const struct ddp_layer *l)
{
    attr_int(n, "transB", 1);
}
static void attrs_bn(struct ddp_pb *n, const struct ddp_layer *l)
{
    attr_float(n, "epsilon", 1e-5f); /* BN_EPS of nn/model.c */
}
static void attrs_conv(struct ddp_pb *n, const struct ddp_layer *l)
{
    int64_t k[2] = {l->spec.k, l->spec.k}, s[2] = {l->spec.stride, l->spec.stride};
    int64_t p[4] = {l->spec.pad, l->spec.pad, l->spec.pad, l->spec.pad};
    attr_ints(n, "kernel_shape", k, 2);
    attr_ints(n, "strides", s, 2);
    attr_ints(n, "pads", p, 4);
}
static void attrs_pool(struct ddp_pb *n, const struct ddp_layer *l) /* window k, stride k */
{
    int64_t k[2] = {l->spec.k, l->spec.k};
    attr_ints(n, "kernel_shape", k, 2);
    attr_ints(n, "strides", k, 2);
}

struct op_row {
    enum ddp_layer_kind kind;
    const char *op;
    void (*attrs)(struct ddp_pb *node, const struct ddp_layer *l); /* NULL: none */
    const char *tensors[4]; /* suffixes of "<layer name>.<suffix>", in the operator's input
                               order; a missing "bias" (bias=false) is left out */
};

static const struct op_row g_ops[] = {
    {DDP_LAYER_FLATTEN, "Flatten", attrs_flatten, {NULL}},
    {DDP_LAYER_LINEAR, "Gemm", attrs_linear, {"weight", "bias"}},
    {DDP_LAYER_RELU, "Relu", NULL, {NULL}},
    {DDP_LAYER_CONV2D, "Conv", attrs_conv, {"weight", "bias"}},
    {DDP_LAYER_MAXPOOL, "MaxPool", attrs_pool, {NULL}},
    {DDP_LAYER_AVGPOOL, "AveragePool", attrs_pool, {NULL}},
    {DDP_LAYER_DROPOUT, "Identity", NULL, {NULL}}, /* inference: dropout does nothing */
    {DDP_LAYER_BATCHNORM,
     "BatchNormalization",
     attrs_bn,
     {"weight", "bias", "running_mean", "running_var"}},
    {DDP_LAYER_GLOBALAVGPOOL, "GlobalAveragePool", NULL, {NULL}},
    {DDP_LAYER_RESIDUAL, "Add", NULL, {NULL}}, /* the join: its second input is the shortcut */
};
/* DDP_LAYER_RESIDUAL_END only marks a block's end while parsing; no model layer has it */
_Static_assert(sizeof g_ops / sizeof g_ops[0] == DDP_LAYER_RESIDUAL + 1,
               "every layer kind needs a row in g_ops");

static const struct op_row *op_of(enum ddp_layer_kind kind)
{
    for (size_t i = 0; i < sizeof g_ops / sizeof g_ops[0]; i++)
        if (g_ops[i].kind == kind)
            return &g_ops[i];
    return NULL;
}

static const struct ddp_tensor_info *tensor(const struct ddp_model *m, const char *name)
{
    for (int i = 0; i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return &m->tensors[i];
    return NULL;
}

/* An initializer of n host floats (dims[0..ndim), ndim 0: a scalar), raw little-endian. */
static void init_floats(struct ddp_pb *graph, const char *name, const int64_t *dims, int ndim,
                        const float *v, size_t n)
{
    struct ddp_pb tp = {0};
    for (int d = 0; d < ndim; d++)
        ddp_pb_varint(&tp, TENSOR_DIMS, (uint64_t)dims[d]);
    ddp_pb_varint(&tp, TENSOR_TYPE, ONNX_FLOAT);
    ddp_pb_string(&tp, TENSOR_NAME, name);
    ddp_pb_bytes(&tp, TENSOR_RAW, v, sizeof(float) * n); /* the host is little-endian */
    ddp_pb_message(graph, GRAPH_INIT, &tp);
}

/* An initializer: t's floats downloaded from the backend. */
static void initializer(struct ddp_pb *graph, const struct ddp_model *m,
                        const struct ddp_tensor_info *t)
{
    float *host = ddp_malloc(sizeof(float) * (t->n ? t->n : 1));
    m->be->download(host, (t->is_buffer ? m->buffers : m->params) + t->off, sizeof(float) * t->n);
    init_floats(graph, t->name, t->dims, t->ndim, host, t->n);
    free(host);
}

/* A graph input or output: elem_type tensor of shape (N, dims...). */
static void value_info(struct ddp_pb *graph, int field, const char *name, int elem_type, int ndim,
                       const int *dims)
{
    struct ddp_pb shape = {0}, tt = {0}, type = {0}, vi = {0}, dim = {0};
    ddp_pb_string(&dim, 2, "N"); /* Dimension.dim_param */
    ddp_pb_message(&shape, 1, &dim);
    for (int d = 0; d < ndim; d++) {
        ddp_pb_varint(&dim, 1, (uint64_t)dims[d]); /* Dimension.dim_value */
        ddp_pb_message(&shape, 1, &dim);
    }
    ddp_pb_varint(&tt, 1, (uint64_t)elem_type); /* TypeProto.Tensor.elem_type */
    ddp_pb_message(&tt, 2, &shape);             /* TypeProto.Tensor.shape */
    ddp_pb_message(&type, 1, &tt);              /* TypeProto.tensor_type */
    ddp_pb_string(&vi, 1, name);                /* ValueInfoProto.name */
    ddp_pb_message(&vi, 2, &type);              /* ValueInfoProto.type */
    ddp_pb_message(graph, field, &vi);
}

/* A node op(a[, b]) -> out named op_out, without attributes unless to >= 0 (Cast's "to"). */
static void simple_node(struct ddp_pb *graph, const char *op, const char *a, const char *b,
                        const char *out, int to)
{
    struct ddp_pb node = {0};
    char nm[64];
    snprintf(nm, sizeof nm, "%s_%s", op, out);
    ddp_pb_string(&node, NODE_INPUT, a);
    if (b)
        ddp_pb_string(&node, NODE_INPUT, b);
    ddp_pb_string(&node, NODE_OUTPUT, out);
    ddp_pb_string(&node, NODE_NAME, nm);
    ddp_pb_string(&node, NODE_OP, op);
    if (to >= 0)
        attr_int(&node, "to", to);
    ddp_pb_message(graph, GRAPH_NODE, &node);
}

/* The nodes that turn the uint8 "input" into what the first layer takes, as the trainer's
 * reader and augment.c do: (float)v / 255.0f, then (x - mean[c]) / std[c]. Returns the name
 * of the value they end in. */
static const char *pixel_nodes(struct ddp_pb *graph, const struct ddp_model *m,
                               const struct ddp_onnx_input *in)
{
    float scale = 255.0f;
    simple_node(graph, "Cast", "input", NULL, "input_float", ONNX_FLOAT);
    init_floats(graph, "pixel_scale", NULL, 0, &scale, 1);
    simple_node(graph, "Div", "input_float", "pixel_scale", "input_scaled", -1);
    if (in->nchan <= 0)
        return "input_scaled";
    /* per channel: (C, 1, 1) broadcasts over H, W of (N, C, H, W); flat samples have C = 1 */
    int64_t dims[3] = {in->nchan, 1, 1};
    int nd = m->in_ndim == 3 ? 3 : 1;
    init_floats(graph, "norm_mean", dims, nd, in->mean, (size_t)in->nchan);
    init_floats(graph, "norm_std", dims, nd, in->std, (size_t)in->nchan);
    simple_node(graph, "Sub", "input_scaled", "norm_mean", "input_centered", -1);
    simple_node(graph, "Div", "input_centered", "norm_std", "input_normalized", -1);
    return "input_normalized";
}

/* The graph value that layer i's output is: first (i < 0: what the first layer takes),
 * "logits" (the last), else "x<i>". */
static void value_name(const struct ddp_model *m, int i, const char *first, char *buf, size_t len)
{
    if (i < 0)
        snprintf(buf, len, "%s", first);
    else if (i + 1 == m->nlayers)
        snprintf(buf, len, "logits");
    else
        snprintf(buf, len, "x%d", i);
}

/* Layer i as a node reading its input(s), writing its value; its tensors become initializers. */
static int layer_node(struct ddp_pb *graph, const struct ddp_model *m, int i, const char *first,
                      char *err, size_t errlen)
{
    const struct ddp_layer *l = &m->layers[i];
    const struct op_row *row = op_of(l->spec.kind);
    if (!row)
        return ddp_err(err, errlen, "layer %s has no ONNX form in this ddptrain", l->name);
    struct ddp_pb node = {0};
    char in[32], out[32];
    value_name(m, l->in, first, in, sizeof in);
    ddp_pb_string(&node, NODE_INPUT, in);
    if (l->spec.kind == DDP_LAYER_RESIDUAL) {
        value_name(m, l->in2, first, in, sizeof in);
        ddp_pb_string(&node, NODE_INPUT, in);
    }
    for (int k = 0; k < 4 && row->tensors[k]; k++) {
        char name[DDP_MODEL_NAME_MAX];
        snprintf(name, sizeof name, "%s.%s", l->name, row->tensors[k]);
        const struct ddp_tensor_info *t = tensor(m, name);
        if (!t && strcmp(row->tensors[k], "bias") == 0 && l->b_n == 0)
            continue; /* bias=false: Conv and Gemm take no third input */
        if (!t) {
            ddp_pb_free(&node);
            return ddp_err(err, errlen, "internal: layer %s has no tensor %s", l->name, name);
        }
        ddp_pb_string(&node, NODE_INPUT, name);
        initializer(graph, m, t);
    }
    char nm[DDP_MODEL_NAME_MAX + 32];
    snprintf(nm, sizeof nm, "%s_%s", row->op, l->name);
    value_name(m, i, first, out, sizeof out);
    ddp_pb_string(&node, NODE_OUTPUT, out);
    ddp_pb_string(&node, NODE_NAME, nm);
    ddp_pb_string(&node, NODE_OP, row->op);
    if (row->attrs)
        row->attrs(&node, l);
    ddp_pb_message(graph, GRAPH_NODE, &node);
    return 0;
}

/* The whole model message into model; 0 or -1 with err. */
static int encode(struct ddp_pb *model, const struct ddp_model *m, const char *graph_name,
                  const struct ddp_onnx_input *in, char *err, size_t errlen)
{
    struct ddp_pb graph = {0}, opset = {0};
    int u8 = in && in->uint8;
    const char *first = u8 ? pixel_nodes(&graph, m, in) : "input";
    for (int i = 0; i < m->nlayers; i++) {
        if (layer_node(&graph, m, i, first, err, errlen) != 0) {
            ddp_pb_free(&graph);
            return -1;
        }
    }
    ddp_pb_string(&graph, GRAPH_NAME, graph_name);
    value_info(&graph, GRAPH_INPUT, "input", u8 ? ONNX_UINT8 : ONNX_FLOAT, m->in_ndim, m->ishape);
    int k = m->classes;
    value_info(&graph, GRAPH_OUTPUT, "logits", ONNX_FLOAT, 1, &k);
    ddp_pb_varint(model, MODEL_IR, ONNX_IR_VERSION);
    ddp_pb_string(model, MODEL_PRODUCER, "ddptrain");
    ddp_pb_string(model, MODEL_PRODUCER_VERSION, DDP_VERSION);
    ddp_pb_message(model, MODEL_GRAPH, &graph);
    ddp_pb_string(&opset, 1, "");             /* OperatorSetIdProto.domain: the default */
    ddp_pb_varint(&opset, 2, DDP_ONNX_OPSET); /* OperatorSetIdProto.version */
    ddp_pb_message(model, MODEL_OPSET, &opset);
    return 0;
}

int ddp_onnx_write(const struct ddp_model *m, const char *path, const char *graph_name,
                   const struct ddp_onnx_input *in, char *err, size_t errlen)
{
    struct ddp_pb model = {0};
    if (encode(&model, m, graph_name, in, err, errlen) != 0)
        return -1;
    char tmp[DDP_PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(model.data, 1, model.len, f) == model.len;
    int e = errno;
    if (f && fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    ddp_pb_free(&model);
    if (!ok) {
        unlink(tmp);
        return ddp_err(err, errlen, "%s: cannot write the ONNX model: %s", path, strerror(e));
    }
    return ddp_file_commit(tmp, path, err, errlen);
}

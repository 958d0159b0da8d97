/*
 * test_model.c - building models (nn/model.h) on the CPU backend: output shapes, parameter
 * counts and tensor names as PyTorch's nn.Sequential has them, PyTorch's default
 * initialisation bounds, the architecture fingerprint, the memory estimate and the memory
 * plan (figures worked out by hand, also for a residual join fused with its relu on a table
 * that has the ops; no two buffers live at one step share bytes), layer lists that do not fit
 * their input refused with the layer named, and the layer-at-a-time calls of `ddptrain
 * profile` equal to the whole passes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"
#include "nn/model.h"

static int build(struct ddp_model *m, const char *layers, int ndim, int64_t c, int64_t h, int64_t w,
                 char *err, size_t errlen)
{
    const int64_t dims[3] = {c, h, w};
    memset(m, 0, sizeof *m);
    return ddp_model_create(m, ddp_backend_cpu(), layers, ndim, dims, 8, err, errlen);
}

static const struct ddp_tensor_info *tensor(const struct ddp_model *m, const char *name)
{
    for (int i = 0; i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return &m->tensors[i];
    return NULL;
}

static void test_cnn(void)
{
    struct ddp_model m;
    char err[512] = "";
    int rc = build(&m,
                   "conv2d(8, 3, pad=1), relu, maxpool(2), conv2d(4, 3, stride=2, bias=false),"
                   " flatten, linear(10)",
                   3, 1, 28, 28, err, sizeof err);
    CHECK(rc == 0, "cnn: %s", err);
    if (rc)
        return;
    /* 28 -pad 1-> 28 -pool-> 14 -k3 s2-> 6: 8*9+8 + 4*8*9 + 4*6*6*10+10 */
    CHECK(m.nparams == 80 + 288 + 1450, "nparams %zu, want 1818", m.nparams);
    CHECK(m.classes == 10 && m.in_elems == 784, "classes %d in %zu", m.classes, m.in_elems);
    const struct ddp_layer *c2 = &m.layers[3];
    CHECK(c2->oshape[0] == 4 && c2->oshape[1] == 6 && c2->oshape[2] == 6, "conv out %dx%dx%d",
          c2->oshape[0], c2->oshape[1], c2->oshape[2]);
    CHECK(m.layers[2].oshape[1] == 14, "pool out %d", m.layers[2].oshape[1]);
    const struct ddp_tensor_info *w0 = tensor(&m, "0.weight"), *b3 = tensor(&m, "3.bias");
    const struct ddp_tensor_info *w5 = tensor(&m, "5.weight");
    CHECK(w0 && w0->ndim == 4 && w0->dims[0] == 8 && w0->dims[1] == 1 && w0->dims[2] == 3,
          "0.weight shape");
    CHECK(!b3, "a bias=false convolution has a bias tensor");
    CHECK(w5 && w5->ndim == 2 && w5->dims[0] == 10 && w5->dims[1] == 144, "5.weight shape");

    /* kaiming-uniform(a=sqrt(5)): |w| <= 1/sqrt(fan_in), and the largest of 1440 draws close */
    ddp_model_init(&m, 42);
    double bound = 1 / sqrt(144.0), top = 0;
    for (size_t i = 0; w5 && i < w5->n; i++)
        top = fmax(top, fabs(m.params[w5->off + i]));
    CHECK(top <= bound && top > 0.98 * bound, "linear init max %g, bound %g", top, bound);
    float *first = malloc(m.nparams * sizeof(float));
    memcpy(first, m.params, m.nparams * sizeof(float));
    ddp_model_init(&m, 42);
    CHECK(!memcmp(first, m.params, m.nparams * sizeof(float)), "same seed, other weights");
    ddp_model_init(&m, 43);
    CHECK(memcmp(first, m.params, m.nparams * sizeof(float)), "other seed, same weights");
    free(first);

    struct ddp_model_mem mem8, mem1;
    ddp_model_memory(&m, 8, &mem8);
    ddp_model_memory(&m, 1, &mem1);
    CHECK(mem8.params == mem1.params && mem8.activations > mem1.activations,
          "memory: params %g/%g activations %g/%g", mem8.params, mem1.params, mem8.activations,
          mem1.activations);
    CHECK(mem8.params >= 4.0 * (double)m.nparams * 4, "params bytes %g", mem8.params);
    char desc[1024];
    ddp_model_describe(&m, desc, sizeof desc);
    CHECK(strstr(desc, "conv2d") && strstr(desc, "linear"), "describe: %s", desc);
    ddp_model_free(&m);
}

static void test_batchnorm_residual(void)
{
    struct ddp_model m;
    char err[512] = "";
    int rc = build(&m,
                   "conv2d(16, 3, pad=1, bias=false), batchnorm, relu,"
                   " residual(conv2d(32, 3, stride=2, pad=1, bias=false), batchnorm, relu,"
                   " conv2d(32, 3, pad=1, bias=false), batchnorm), relu,"
                   " globalavgpool, flatten, linear(10)",
                   3, 1, 28, 28, err, sizeof err);
    CHECK(rc == 0, "resnet: %s", err);
    if (rc)
        return;
    /* stem 144 + bn 32; body 4608 + 64 + 9216 + 64; projection 512 + 64; linear 330 */
    CHECK(m.nparams == 144 + 32 + 4608 + 64 + 9216 + 64 + 512 + 64 + 330, "nparams %zu", m.nparams);
    CHECK(tensor(&m, "3.body.0.weight") && tensor(&m, "3.shortcut.0.weight") &&
              tensor(&m, "3.shortcut.1.running_var"),
          "residual tensor names");
    const struct ddp_tensor_info *sc = tensor(&m, "3.shortcut.0.weight");
    CHECK(sc && sc->dims[0] == 32 && sc->dims[1] == 16 && sc->dims[2] == 1, "projection shape");
    ddp_model_init(&m, 1);
    const struct ddp_tensor_info *bw = tensor(&m, "1.weight"), *rv = tensor(&m, "1.running_var");
    CHECK(bw && rv && m.params[bw->off] == 1.0f && m.buffers[rv->off] == 1.0f,
          "batchnorm init: weight 1, running_var 1");
    ddp_model_free(&m);
}

static void test_fingerprint(void)
{
    struct ddp_model a, b, c;
    char err[512];
    const char *mlp = "flatten, linear(32), relu, linear(10)";
    build(&a, mlp, 3, 1, 8, 8, err, sizeof err);
    build(&b, mlp, 3, 1, 8, 8, err, sizeof err);
    build(&c, mlp, 3, 2, 8, 4, err, sizeof err); /* 64 inputs too, another shape */
    CHECK(a.fingerprint == b.fingerprint, "same model, other fingerprint");
    CHECK(a.fingerprint != c.fingerprint, "another input shape, same fingerprint");
    CHECK(a.nparams == c.nparams, "same parameter count expected");
    ddp_model_free(&c);
    build(&c, "flatten, linear(32), relu, dropout(0.5), linear(10)", 3, 1, 8, 8, err, sizeof err);
    CHECK(a.fingerprint != c.fingerprint, "another layer list, same fingerprint");
    ddp_model_free(&a);
    ddp_model_free(&b);
    ddp_model_free(&c);
}

/* A plan of this model (built on the CPU backend for batches of 8) that the checker accepts,
 * smaller than its buffers unshared, and laid out in the model's arena. */
static void plan_ok(const char *layers, int ndim, int64_t c, int64_t h, int64_t w)
{
    struct ddp_model m;
    char err[512] = "";
    CHECK(build(&m, layers, ndim, c, h, w, err, sizeof err) == 0, "%s: %s", layers, err);
    if (!m.nlayers)
        return;
    struct ddp_mem_plan p;
    ddp_mem_plan_make(&m, 8, &p);
    CHECK(ddp_mem_plan_check(&p, err, sizeof err) == 0, "%s: %s", layers, err);
    CHECK(p.arena < p.unshared && p.arena == m.arena_bytes, "%s: arena %zu unshared %zu model %zu",
          layers, p.arena, p.unshared, m.arena_bytes);
    for (int i = 0; i < m.nlayers; i++) {
        const char *o = (const char *)m.layers[i].out, *a = (const char *)m.arena;
        CHECK(!o || (o >= a && o < a + m.arena_bytes) || m.layers[i].spec.kind == DDP_LAYER_FLATTEN,
              "%s: layer %d's output outside the arena", layers, i);
    }
    ddp_mem_plan_free(&p);
    ddp_model_free(&m);
}

/* The plan of an MLP, worked out by hand. 64 features, batch 1: every buffer is 64 floats, 256
 * bytes. Layers 0 flatten, 1 linear, 2 relu, 3 linear, 4 relu, 5 linear; steps: forward i,
 * loss 6, backward 12 - i, 13 after. Outputs live 1: [1,2], 2: [2,10] (linear 3's backward at
 * 9, relu 2's own at 10), 3: [3,4], 4: [4,8], 5 (logits): [5,13]; douts 5: [6,7], 4: [7,8],
 * 3: [8,9], 2: [9,10], 1: [10,11]; none for the flatten below the first parameters. At steps
 * 7 and 8 five buffers are live: 1280 bytes of 2560. */
static void test_plan(void)
{
    struct ddp_model m;
    char err[512] = "";
    const int64_t d[1] = {64};
    int rc = ddp_model_create(&m, ddp_backend_cpu(),
                              "flatten, linear(64), relu, linear(64), relu, linear(64)", 1, d, 1,
                              err, sizeof err);
    CHECK(rc == 0, "mlp: %s", err);
    if (rc)
        return;
    struct ddp_mem_plan p;
    ddp_mem_plan_make(&m, 1, &p);
    CHECK(p.nblocks == 10 && p.steps == 14, "blocks %d steps %d, want 10 and 14", p.nblocks,
          p.steps);
    CHECK(p.unshared == 2560 && p.arena == 1280, "unshared %zu arena %zu, want 2560 and 1280",
          p.unshared, p.arena);
    CHECK(ddp_mem_plan_check(&p, err, sizeof err) == 0, "plan: %s", err);
    const int spans[10][2] = {{1, 2}, {2, 10}, {3, 4}, {4, 8},  {5, 13},
                              {6, 7}, {7, 8},  {8, 9}, {9, 10}, {10, 11}};
    for (int i = 0; i < p.nblocks && i < 10; i++) {
        const int k =
            p.blocks[i].what == DDP_MEM_OUT ? p.blocks[i].layer - 1 : 5 + (5 - p.blocks[i].layer);
        CHECK(p.blocks[i].first == spans[k][0] && p.blocks[i].last == spans[k][1],
              "layer %d %s live %d..%d, want %d..%d", p.blocks[i].layer,
              p.blocks[i].what == DDP_MEM_OUT ? "out" : "dout", p.blocks[i].first, p.blocks[i].last,
              spans[k][0], spans[k][1]);
    }
    struct ddp_model_mem mem;
    ddp_model_memory(&m, 1, &mem);
    CHECK(mem.activations == 1280 && mem.unshared == 2560, "estimate %g of %g, want the plan's",
          mem.activations, mem.unshared);
    CHECK(m.layers[0].dout == NULL && m.layers[2].out != m.layers[1].out, "buffers");
    /* the checker can fail: two buffers live at step 7 put on the same bytes */
    for (int i = 0; i < p.nblocks; i++)
        if (p.blocks[i].what == DDP_MEM_DOUT && p.blocks[i].layer == 4)
            p.blocks[i].off = 0; /* the logits' place */
    CHECK(ddp_mem_plan_check(&p, err, sizeof err) != 0 && strstr(err, "overlaps"),
          "an overlap passed the checker: %s", err);
    ddp_mem_plan_free(&p);
    ddp_model_free(&m);

    plan_ok("conv2d(8, 3, pad=1), relu, maxpool(2), conv2d(4, 3, stride=2, bias=false), flatten,"
            " dropout(0.5), linear(10)",
            3, 1, 28, 28);
    plan_ok("conv2d(16, 3, pad=1, bias=false), batchnorm, relu,"
            " residual(conv2d(16, 3, pad=1, bias=false), batchnorm, relu,"
            " conv2d(16, 3, pad=1, bias=false), batchnorm), relu,"
            " residual(conv2d(32, 3, stride=2, pad=1, bias=false), batchnorm), relu,"
            " globalavgpool, flatten, linear(10)",
            3, 3, 16, 16);
    plan_ok("residual(conv2d(3, 3, pad=1), relu), avgpool(2), flatten, linear(10)", 3, 3, 8, 8);
    plan_ok("flatten, dropout(0.2), linear(32), relu, dropout(0.5), linear(10)", 3, 1, 8, 8);
}

/* The join + relu ops (backend.h add_relu_fwd, relu_bwd_join) the CPU backend leaves out, in
 * plain C, so that a copy of its table plans and runs the fusion here. */
static void join_add_relu_fwd(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const float v = a[i] + b[i];
        out[i] = v > 0 ? v : 0;
    }
}

static void join_relu_bwd(float *da, int acc_a, float *db, int acc_b, const float *dout,
                          const float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const float g = out[i] > 0 ? dout[i] : 0;
        if (da)
            da[i] = acc_a ? da[i] + g : g;
        if (db)
            db[i] = acc_b ? db[i] + g : g;
    }
}

/* One training step (B = 8 of D = 16 features, labels i % 4) of layers on be: the train
 * logits, the eval logits and the gradients into out (16 * 4 + nparams floats). */
static size_t join_step(const struct ddp_backend *be, const char *layers, float *out, int *fused)
{
    struct ddp_model m;
    char err[512] = "";
    const int64_t d[1] = {16};
    int rc = ddp_model_create(&m, be, layers, 1, d, 8, err, sizeof err);
    CHECK(rc == 0, "%s: %s", layers, err);
    if (rc)
        return 0;
    ddp_model_init(&m, 3);
    float x[128];
    int32_t lab[8];
    for (int i = 0; i < 128; i++)
        x[i] = (float)((i * 37 % 23) - 11) / 7.0f;
    for (int i = 0; i < 8; i++)
        lab[i] = i % 4;
    const float *y = ddp_model_forward(&m, x, 8, 1, 1);
    memcpy(out, y, sizeof(float) * 32);
    be->xent(ddp_model_dlogits(&m), NULL, y, lab, 8, 4, 1.0f / 8, 0);
    ddp_model_backward(&m, x, 8, NULL, NULL);
    memcpy(out + 64, m.grads, sizeof(float) * m.nparams);
    memcpy(out + 32, ddp_model_forward(&m, x, 8, 0, 1), sizeof(float) * 32);
    *fused = 0;
    for (int i = 0; i < m.nlayers; i++)
        *fused += m.layers[i].fused == 8;
    const size_t np = m.nparams;
    ddp_model_free(&m);
    return np;
}

/* A residual join read only by a relu, on a table with the join + relu ops: fused (8, 9), the
 * join's out and dout never planned, the relu's out live from the join's forward to the
 * join's backward. An MLP of 64 features, batch 1, layers 0 linear, 1 linear (body), 2 join
 * (in 1, in2 0), 3 relu, 4 linear; steps: forward i, loss 5, backward 10 - i, 11 after.
 * Outputs 0: [0,9] (read by the body's backward at 9), 1: [1,2], 3: [2,8] (written by the
 * join at 2, read by the join's backward at 8), 4: [4,11]; douts 4: [5,6], 3: [6,8],
 * 1: [8,9], 0: [8,10]; layer 1's dtmp at 9 (layer 0's output has two readers): 9 blocks. Then
 * models with nested and input blocks give a step bit for bit the plain table's. */
static void test_join_plan(void)
{
    struct ddp_backend be = *ddp_backend_cpu();
    be.add_relu_fwd = join_add_relu_fwd;
    be.relu_bwd_join = join_relu_bwd;
    struct ddp_model m;
    char err[512] = "";
    const int64_t d[1] = {64};
    int rc = ddp_model_create(&m, &be, "linear(64), residual(linear(64)), relu, linear(64)", 1, d,
                              1, err, sizeof err);
    CHECK(rc == 0, "join: %s", err);
    if (rc)
        return;
    CHECK(m.layers[2].fused == 8 && m.layers[3].fused == 9, "fused %d %d, want 8 9",
          m.layers[2].fused, m.layers[3].fused);
    struct ddp_mem_plan p;
    ddp_mem_plan_make(&m, 1, &p);
    CHECK(ddp_mem_plan_check(&p, err, sizeof err) == 0, "join plan: %s", err);
    CHECK(p.nblocks == 9, "blocks %d, want 9", p.nblocks);
    /* [layer][what]: out, dout, dtmp spans ({0, -1}: none) */
    const int want[5][3][2] = {{{0, 9}, {8, 10}, {0, -1}},
                               {{1, 2}, {8, 9}, {9, 9}},
                               {{0, -1}, {0, -1}, {0, -1}},
                               {{2, 8}, {6, 8}, {0, -1}},
                               {{4, 11}, {5, 6}, {0, -1}}};
    for (int i = 0; i < p.nblocks; i++) {
        const struct ddp_mem_block *b = &p.blocks[i];
        const int w = b->what == DDP_MEM_OUT ? 0 : b->what == DDP_MEM_DOUT ? 1 : 2;
        CHECK(b->layer >= 0 && b->layer < 5 && b->first == want[b->layer][w][0] &&
                  b->last == want[b->layer][w][1],
              "layer %d block %d live %d..%d", b->layer, (int)b->what, b->first, b->last);
    }
    ddp_mem_plan_free(&p);
    ddp_model_free(&m);
    const char *nets[] = {"residual(linear(16), relu, linear(16)), relu, linear(4)",
                          "linear(16), relu, residual(residual(linear(16)), relu, linear(16)),"
                          " relu, residual(linear(16), relu), relu, linear(4)"};
    for (int k = 0; k < 2; k++) {
        float a[64 + 2048], b[64 + 2048];
        int fa = 0, fb = 0;
        const size_t na = join_step(&be, nets[k], a, &fa);
        const size_t nb = join_step(ddp_backend_cpu(), nets[k], b, &fb);
        CHECK(na && na == nb && na <= 2048 && memcmp(a, b, sizeof(float) * (64 + na)) == 0,
              "%s: fused step differs from the plain one", nets[k]);
        CHECK(fa == (k ? 3 : 1) && fb == 0, "%s: %d joins fused, want %d", nets[k], fa, k ? 3 : 1);
    }
}

/* layers must be refused for this input with a one-line message holding frag. */
static void refused(const char *layers, int64_t c, int64_t h, int64_t w, const char *frag)
{
    struct ddp_model m;
    char err[512] = "";
    int rc = build(&m, layers, 3, c, h, w, err, sizeof err);
    CHECK(rc == -1, "accepted: %s", layers);
    if (rc == 0)
        ddp_model_free(&m);
    CHECK(strstr(err, frag) && !strchr(err, '\n'), "%s: message '%s' lacks '%s'", layers, err,
          frag);
}

static void test_refusals(void)
{
    refused("conv2d(8, 30), flatten, linear(10)", 1, 28, 28, "1");
    refused("flatten, maxpool(2), linear(10)", 1, 28, 28, "2");
    refused("conv2d(8, 3), flatten, linear(10), maxpool(2)", 1, 28, 28, "4");
    refused("residual(conv2d(8, 3)), flatten, linear(10)", 3, 8, 8, "1");
    refused("conv2d(4, 3, stride=16), conv2d(4, 3, stride=16), flatten, linear(2)", 1, 28, 28, "2");
    refused("", 1, 28, 28, "");
    refused("flatten, linear(0)", 1, 28, 28, "linear");
}

/* One pass of a step on x, y: the logits and gradients into logits, grads (host copies), by the
 * whole passes (layered = 0) or one layer at a time (ddptrain profile's calls). */
static void run_pass(struct ddp_model *m, const float *x, const int32_t *y, int layered,
                     float *logits, float *grads)
{
    const struct ddp_backend *be = m->be;
    const int B = 8;
    be->zero(m->grads, m->nparams);
    const float *out;
    if (layered) {
        ddp_model_forward_input(m, x, B);
        for (int i = 0; i < m->nlayers; i++)
            ddp_model_forward_layer(m, i, x, B, 1, 7);
        out = m->layers[m->nlayers - 1].out;
    } else {
        out = ddp_model_forward(m, x, B, 1, 7);
    }
    memcpy(logits, out, sizeof(float) * (size_t)B * (size_t)m->classes);
    be->xent(ddp_model_dlogits(m), NULL, out, y, B, m->classes, 1.0f / B, 0);
    if (layered)
        for (int i = m->nlayers - 1; i >= 0; i--)
            ddp_model_backward_layer(m, i, x, B);
    else
        ddp_model_backward(m, x, B, NULL, NULL);
    memcpy(grads, m->grads, sizeof(float) * m->nparams);
}

/* The layer-at-a-time calls compute what the whole passes do, bit for bit, and each layer's
 * runner is itself on the CPU (no fusions) or -1 (a view; no backward below the first
 * parameters). */
static void test_layer_by_layer(void)
{
    struct ddp_model m;
    char err[512] = "";
    int rc = build(&m,
                   "conv2d(4, 3, pad=1), batchnorm, relu, maxpool(2),"
                   " residual(conv2d(4, 3, pad=1), batchnorm, relu, conv2d(4, 3, pad=1)), relu,"
                   " flatten, linear(8), relu, dropout(0.2), linear(3)",
                   3, 3, 8, 8, err, sizeof err);
    CHECK(rc == 0, "layered model: %s", err);
    if (rc)
        return;
    ddp_model_init(&m, 3);
    float x[8 * 3 * 8 * 8], la[8 * 3], lb[8 * 3];
    int32_t y[8];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        x[i] = (float)((i * 37) % 101) / 101.0f;
    for (int i = 0; i < 8; i++)
        y[i] = i % 3;
    float *ga = malloc(sizeof(float) * m.nparams), *gb = malloc(sizeof(float) * m.nparams);
    run_pass(&m, x, y, 0, la, ga);
    run_pass(&m, x, y, 1, lb, gb);
    CHECK(memcmp(la, lb, sizeof la) == 0, "layer by layer: the same logits");
    CHECK(memcmp(ga, gb, sizeof(float) * m.nparams) == 0, "layer by layer: the same gradients");
    for (int i = 0; i < m.nlayers; i++) {
        const int f = ddp_model_runner(&m, i, 0), b = ddp_model_runner(&m, i, 1);
        const int view = m.layers[i].spec.kind == DDP_LAYER_FLATTEN;
        CHECK(f == (view ? -1 : i) && b == (view ? -1 : i),
              "layer %s runs itself (forward %d, backward %d)", m.layers[i].pos, f, b);
    }
    char what[64];
    ddp_model_layer_text(&m, 0, what, sizeof what);
    CHECK(strcmp(what, "conv2d -> 4x8x8") == 0, "layer text '%s'", what);
    free(ga);
    free(gb);
    ddp_model_free(&m);
}

int main(void)
{
    test_cnn();
    test_batchnorm_residual();
    test_fingerprint();
    test_plan();
    test_join_plan();
    test_refusals();
    test_layer_by_layer();
    return check_report("test_model");
}

/*
 * test_cuda_conv_graph.c - the CUDA backend's convolutions through cuDNN's graph (backend) API
 * ([train] cudnn_api = auto; conv_graph.cu) against the CPU backend and against the legacy API
 * (suite gpu; suite twin on the GPU twin). Exit 0 pass, 1 fail, 77 skipped: no CUDA in this
 * build, no usable GPU, no cuDNN or no graph API, unless DDP_GPU_REQUIRE=1: then those fail.
 *
 * Each case runs conv2d_fwd (with bias, without, and with the fused relu) and conv2d_bwd
 * (dinp; dw and db added onto nonzero values) in both layouts (NCHW, NHWC) and both storages
 * (fp32; bf16 under [train] precision = bf16) with the directions timed under [train]
 * deterministic = true:
 *  - against the CPU backend on the same (bf16-valued) inputs, by normalised error: TOL_FP32
 *    in fp32 (as test_cuda_nhwc_conv), TOL_BF16 on bf16 storage (the outputs rounded to bf16);
 *  - on the twin, whose graph engines mirror its legacy algorithms (engine 0 = IMPLICIT_GEMM,
 *    1 = ALGO_1 backward; knob SPLIT_K_SLC 1): with DDP_EMU_CUDNN_ENGINE_MS making exactly
 *    those engines fastest, bit for bit the legacy API's results (cudnn_api = legacy picks
 *    the same algorithms there), except the bf16 forward with a bias and no relu, which the
 *    graph path rounds twice (the convolution at beta 0, then the bias added); then the
 *    twin's own fastest configs (knob 2, the tensor-core engine on bf16) against the CPU,
 *    never its runtime-compiled forward engine 3 (the cheapest: kept unless skipped).
 * The run log names "graph API" for every direction. Then the choices' text: with the knob 2
 * configs made fastest, a graph line carries each direction's engine and knob (17 2); taking
 * the line with the knobs set to 1 gives other bits; a line naming the runtime-compiled
 * forward engine 3 has its forward left out (twin); taking the original back gives the first
 * run's bits again (a knob lost on the way shows). Legacy lines (16 numbers) still load.
 *
 * Dimension letters as in backend.h.
 */
#include <math.h>

#define GPU_TEST_SEED 0x5851f42d4c957f2dULL
#include "gpu_test.h"

#if HAVE_CUDA

#include "backend_args.h" /* CONV_GEOM */

#define TOL_FP32 1e-5 /* normalised error against the CPU, fp32 (test_cuda_nhwc_conv's) */
#define TOL_BF16 1e-2 /* the same on bf16 storage: outputs rounded to 8 bits of mantissa */

static const struct ddp_backend *CPU; /* the CPU backend (the reference) */

/* The twin's engines that compute as its legacy choices under deterministic = true. */
#define MIRROR_MS "fwd:0.1=0.01,data:1.1=0.01,filter:1.1=0.01"
/* ... and the configs with knob 2 (other roundings) fastest. */
#define KNOB2_MS "fwd:1.2=0.01,data:1.2=0.01,filter:1.2=0.01"

struct tcase {
    int B, C, H, W, O, k, stride, pad;
};

/* Results of one run, NCHW host floats. */
struct tout {
    float *y, *yn, *yr, *dx, *dw, *db;
};

static void tout_free(struct tout *r)
{
    free(r->y), free(r->yn), free(r->yr), free(r->dx), free(r->dw), free(r->db);
    memset(r, 0, sizeof *r);
}

/* Inputs, bf16 values (exact in both storages), NCHW host. */
struct tin {
    float *x, *w, *b, *dy, *dw0, *db0;
};

/* A malloc'd copy of n floats. */
static float *copy(const void *x, size_t n)
{
    float *c = ddp_malloc(sizeof(float) * (n ? n : 1));
    memcpy(c, x, sizeof(float) * n);
    return c;
}

static int out_hw(const struct tcase *t, int *OH, int *OW)
{
    *OH = (t->H + 2 * t->pad - t->k) / t->stride + 1;
    *OW = (t->W + 2 * t->pad - t->k) / t->stride + 1;
    return *OH * *OW;
}

/* Case t on backend be (the GPU in layout nhwc and storage act16, or the CPU): the ops'
 * results into r. */
static void run(const struct ddp_backend *be, const struct tcase *t, const struct tin *in, int nhwc,
                int act16, struct tout *r)
{
    int OH, OW;
    const int P = out_hw(t, &OH, &OW), S = t->H * t->W;
    const struct ddp_conv_geom *g = CONV_GEOM(t->C, t->H, t->W, t->O, t->k, t->stride, t->pad);
    const size_t nw = (size_t)t->O * t->C * t->k * t->k;
    const size_t ncol = be->conv_plan ? be->conv_plan(t->B, g) : be->conv_col_elems(t->B, g);
    const int gpu = be == G;
    const size_t ny = (size_t)t->B * t->O * P, nx = (size_t)t->B * t->C * S;
    void *col = be->alloc(sizeof(float) * (ncol ? ncol : 1));
    void *x, *dy, *w, *b, *dw, *db, *y, *yn, *yr, *dx;
    if (gpu) {
        x = gt_act_up(in->x, t->B, t->C, S, nhwc, act16),
        dy = gt_act_up(in->dy, t->B, t->O, P, nhwc, act16);
        w = gt_act_up(in->w, 1, (int)nw, 1, 0, 0), b = gt_act_up(in->b, 1, t->O, 1, 0, 0);
        dw = gt_act_up(in->dw0, 1, (int)nw, 1, 0, 0), db = gt_act_up(in->db0, 1, t->O, 1, 0, 0);
    } else {
        x = in->x, dy = in->dy, w = in->w, b = in->b;
        dw = ddp_malloc(sizeof(float) * nw), db = ddp_malloc(sizeof(float) * t->O);
        memcpy(dw, in->dw0, sizeof(float) * nw), memcpy(db, in->db0, sizeof(float) * t->O);
    }
    y = be->alloc(gt_act_bytes(ny, act16)), yn = be->alloc(gt_act_bytes(ny, act16));
    yr = be->alloc(gt_act_bytes(ny, act16)), dx = be->alloc(gt_act_bytes(nx, act16));
    be->conv2d_fwd(y, col, x, w, b, t->B, g);
    be->conv2d_fwd(yn, col, x, w, NULL, t->B, g);
    if (be->conv2d_relu_fwd) {
        be->conv2d_relu_fwd(yr, col, x, w, b, t->B, g);
    } else { /* the CPU: the convolution, then relu */
        be->conv2d_fwd(yr, col, x, w, b, t->B, g);
        for (size_t i = 0; i < ny; i++)
            ((float *)yr)[i] = ((float *)yr)[i] > 0 ? ((float *)yr)[i] : 0;
    }
    be->conv2d_bwd(dx, dw, db, col, dy, x, w, t->B, g);
    if (gpu) {
        r->y = gt_act_down(y, t->B, t->O, P, nhwc, act16),
        r->yn = gt_act_down(yn, t->B, t->O, P, nhwc, act16);
        r->yr = gt_act_down(yr, t->B, t->O, P, nhwc, act16),
        r->dx = gt_act_down(dx, t->B, t->C, S, nhwc, act16);
        r->dw = gt_act_down(dw, 1, (int)nw, 1, 0, 0), r->db = gt_act_down(db, 1, t->O, 1, 0, 0);
        G->free(x), G->free(dy), G->free(w), G->free(b), G->free(col);
    } else {
        r->y = copy(y, ny), r->yn = copy(yn, ny), r->yr = copy(yr, ny), r->dx = copy(dx, nx);
        r->dw = dw, r->db = db;
        be->free(y), be->free(yn), be->free(yr), be->free(dx), be->free(col);
    }
}

/* got against want (n floats): within tol, or bit for bit (exact). */
static void check(const char *op, const char *shape, const float *got, const float *want, size_t n,
                  double tol, int exact)
{
    size_t differ;
    const double err = gt_nerr(got, want, n, &differ);
    const int ok = isfinite(err) && (exact ? differ == 0 : err <= tol);
    gt_count(ok);
    printf("%-4s %-22s %s n=%zu: err %.2e, %zu differ%s\n", ok ? "ok" : "FAIL", op, shape, n, err,
           differ, exact ? " (bit for bit)" : "");
}

static void check_true(const char *what, int ok, const char *detail)
{
    gt_count(ok);
    printf("%-4s %s%s%s\n", ok ? "ok" : "FAIL", what, detail && !ok ? ": " : "",
           detail && !ok ? detail : "");
}

/* Compare every output of a against b (tol, or exact; the bf16 forward with a bias and no
 * relu skipped where skip_y). */
static void check_all(const char *how, const char *shape, const struct tout *a,
                      const struct tout *b, const struct tcase *t, double tol, int exact,
                      int skip_y)
{
    int OH, OW;
    const size_t ny = (size_t)t->B * t->O * out_hw(t, &OH, &OW);
    const size_t nx = (size_t)t->B * t->C * t->H * t->W, nw = (size_t)t->O * t->C * t->k * t->k;
    char s[160];
    snprintf(s, sizeof s, "%s %s", how, shape);
    if (!skip_y)
        check("conv2d_fwd + bias", s, a->y, b->y, ny, tol, exact);
    check("conv2d_fwd", s, a->yn, b->yn, ny, tol, exact);
    check("conv2d_relu_fwd", s, a->yr, b->yr, ny, tol, exact);
    check("conv2d_bwd dinp", s, a->dx, b->dx, nx, tol, exact);
    check("conv2d_bwd dw (+=)", s, a->dw, b->dw, nw, tol, exact);
    check("conv2d_bwd db (+=)", s, a->db, b->db, (size_t)t->O, tol, exact);
}

/* The convolution path again under api (1 graph, 0 legacy), timed deterministic. */
static void path(int api)
{
    char line[1024];
    ddp_cuda_conv_api(api);
    ddp_cuda_conv_path(1, 1, line, sizeof line);
}

static struct tin inputs(const struct tcase *t)
{
    int OH, OW;
    const size_t P = (size_t)out_hw(t, &OH, &OW), nw = (size_t)t->O * t->C * t->k * t->k;
    struct tin in = {gt_rnd_bf16((size_t)t->B * t->C * t->H * t->W, 1, 0),
                     gt_rnd_bf16(nw, 0.2f, 0),
                     gt_rnd_bf16((size_t)t->O, 0.1f, 0),
                     gt_rnd_bf16((size_t)t->B * t->O * P, 1, 0),
                     gt_rnd_bf16(nw, 0.01f, 0),
                     gt_rnd_bf16((size_t)t->O, 0.01f, 0)};
    return in;
}

static void inputs_free(struct tin *in)
{
    free(in->x), free(in->w), free(in->b), free(in->dy), free(in->dw0), free(in->db0);
}

/* Case t in layout nhwc and storage act16: graph API against the CPU and (twin) the legacy
 * API; the report names the graph API. */
static void t_case(const struct tcase *t, int nhwc, int act16)
{
    struct tin in = inputs(t);
    struct tout cpu = {0}, graph = {0}, legacy = {0};
    char shape[128];
    snprintf(shape, sizeof shape, "%s%s B%d C%d %dx%d O%d k%d s%d p%d", nhwc ? "NHWC" : "NCHW",
             act16 ? " bf16" : "", t->B, t->C, t->H, t->W, t->O, t->k, t->stride, t->pad);
    run(CPU, t, &in, 0, 0, &cpu);
    gt_layout(nhwc ? DDP_LAYOUT_NHWC : DDP_LAYOUT_NCHW);
    gt_storage(act16);
#ifdef DDP_TWIN
    setenv("DDP_EMU_CUDNN_ENGINE_MS", MIRROR_MS, 1);
#endif
    path(1);
    run(G, t, &in, nhwc, act16, &graph);
    static char rep[1 << 16];
    ddp_cuda_conv_report(rep, sizeof rep);
    char want[96];
    static const char *const tags[2][2] = {{"", " bf16 data"}, {" NHWC", " NHWC bf16 data"}};
    snprintf(want, sizeof want, "C%d %dx%d -> %d k%d s%d p%d%s, batch", t->C, t->H, t->W, t->O,
             t->k, t->stride, t->pad, tags[nhwc][act16]);
    const char *l = strstr(rep, want), *e = l ? strchr(l, '\n') : NULL;
    int graphs = 0;
    for (const char *p = l; p && (!e || p < e) && (p = strstr(p, " graph API ")); p++)
        graphs += !e || p < e;
    check_true("report: each direction through the graph API", graphs == 3, l ? l : rep);
    check_all("graph vs CPU", shape, &graph, &cpu, t, act16 ? TOL_BF16 : TOL_FP32, 0, 0);
#ifdef DDP_TWIN
    path(0);
    run(G, t, &in, nhwc, act16, &legacy);
    check_all("graph vs legacy", shape, &graph, &legacy, t, 0, 1, act16);
    unsetenv("DDP_EMU_CUDNN_ENGINE_MS");
    /* the twin's own fastest configs (knob 2; the tensor-core engine on bf16) against the CPU */
    struct tout own = {0};
    path(1);
    run(G, t, &in, nhwc, act16, &own);
    check_all("fastest graph vs CPU", shape, &own, &cpu, t, act16 ? TOL_BF16 : TOL_FP32, 0, 0);
    ddp_cuda_conv_report(rep, sizeof rep);
    check_true("report: the runtime-compiled forward engine 3 is never kept",
               strstr(rep, "forward engine 3 ") == NULL, rep);
    tout_free(&own);
#endif
    tout_free(&cpu), tout_free(&graph), tout_free(&legacy);
    inputs_free(&in);
}

/* The choices' text of a graph plan (knob 2 configs fastest): the knobs written and taken. */
static void t_text(void)
{
    static const struct tcase t = {4, 3, 9, 9, 5, 3, 1, 1};
    struct tin in = inputs(&t);
    struct tout a = {0}, b = {0}, c = {0};
    gt_layout(DDP_LAYOUT_NCHW);
    gt_storage(0);
#ifdef DDP_TWIN
    setenv("DDP_EMU_CUDNN_ENGINE_MS", KNOB2_MS, 1);
#endif
    path(1);
    run(G, &t, &in, 0, 0, &a);
    static char text[1 << 16], alt[1 << 16], why[256];
    ddp_cuda_conv_choices(text, sizeof text);
    char *l = strstr(text, "\n3 9 9 5 3 1 1 4 ");
    char *e = l ? strchr(l + 1, '\n') : NULL;
    check_true("choices: the graph plan's line", l && e, text);
    if (!l || !e)
        return;
    *e = 0;
#ifdef DDP_TWIN
    check_true("choices: three graph directions with knob 17 = 2",
               strstr(l, " 0 0 3 0 1 1 17 2 1 1 1 17 2 2 1 1 17 2") != NULL, l + 1);
#endif
    static char mine[4096];
    char d[64];
    const int head = (int)(strchr(text, '\n') - text);
    snprintf(mine, sizeof mine, "%.*s%s\n", head, text, l); /* the head and this line */
    snprintf(alt, sizeof alt, "%s", mine);
    for (char *p = strstr(alt + head, " 17 2"); p; p = strstr(p + 1, " 17 2"))
        p[4] = '1'; /* the same engines with knob 1 */
    snprintf(d, sizeof d, "%d taken", ddp_cuda_conv_adopt(alt, 1, why, sizeof why));
    check_true("adopt: the knob 1 line", strstr(d, "3 taken") == d, d);
    run(G, &t, &in, 0, 0, &b);
#ifdef DDP_TWIN
    size_t differ;
    gt_nerr(b.yn, a.yn, (size_t)t.B * t.O * 81, &differ);
    check_true("adopt: knob 1 computes other bits than knob 2", differ > 0, NULL);
    snprintf(alt, sizeof alt, "%s", mine);
    char *f = strstr(alt + head, " 3 0 1 1 17 2 ");
    if (f)
        f[5] = '3'; /* forward: the runtime-compiled engine 3 */
    snprintf(d, sizeof d, "%d taken", ddp_cuda_conv_adopt(alt, 1, why, sizeof why));
    check_true("adopt: a line naming the runtime-compiled engine 3 leaves forward out",
               f && strstr(d, "2 taken") == d, d);
    ddp_cuda_conv_choices(text, sizeof text);
    check_true("choices: no forward engine 3 after adopting a line naming it",
               strstr(text, " 3 0 3 1 17 ") == NULL, text);
#endif
    snprintf(d, sizeof d, "%d taken", ddp_cuda_conv_adopt(mine, 1, why, sizeof why));
    check_true("adopt: the original line", strstr(d, "3 taken") == d, d);
    run(G, &t, &in, 0, 0, &c);
    check_all("re-adopted vs first", "B4 C3 9x9 O5", &c, &a, &t, 0, 1, 0);
    snprintf(alt, sizeof alt, "%.*s\n3 9 9 5 3 1 1 4 0 1 0 3 1 3 1 3\n", head, text);
    snprintf(d, sizeof d, "%d taken", ddp_cuda_conv_adopt(alt, 1, why, sizeof why));
    check_true("adopt: a legacy line of 16 numbers", strstr(d, "3 taken") == d, d);
#ifdef DDP_TWIN
    unsetenv("DDP_EMU_CUDNN_ENGINE_MS");
#endif
    tout_free(&a), tout_free(&b), tout_free(&c);
    inputs_free(&in);
}

static const struct tcase g_cases[] = {
    {4, 1, 9, 9, 6, 3, 1, 1},   /* C = 1 */
    {3, 3, 11, 13, 8, 7, 2, 3}, /* k7 s2 p3, odd sizes */
    {5, 5, 9, 7, 3, 1, 1, 0},   /* 1x1, odd sizes */
    {2, 8, 7, 9, 12, 3, 2, 0},  /* stride 2 pad 0 */
};

#endif

int main(void)
{
#if !HAVE_CUDA
    return gt_skip(GT_NO_CUDA);
#else
    char err[DDP_ERR_LEN], line[1024];
    const int rc =
        gt_start(DDP_PRECISION_FP32, 1, GT_NHWC | GT_ACT16, "graph API convolutions need cuDNN");
    if (rc)
        return rc;
    CPU = ddp_backend_cpu();
    ddp_cuda_conv_api(1);
    ddp_cuda_conv_path(1, 1, line, sizeof line);
    printf("convolutions: %s\n", line);
    if (!strstr(line, "graph and legacy APIs"))
        return gt_required() ? 1 : gt_skip("cuDNN's graph API is unavailable");
    for (int act16 = 0; act16 < 2; act16++) {
        if (act16 && !ddp_backend_cuda(0, DDP_PRECISION_BF16, err, sizeof err)) {
            check_true("bf16 backend", 0, err);
            break;
        }
        for (size_t i = 0; i < sizeof g_cases / sizeof *g_cases; i++)
            for (int nhwc = 0; nhwc < 2; nhwc++)
                t_case(&g_cases[i], nhwc, act16);
    }
    ddp_backend_cuda(0, DDP_PRECISION_FP32, err, sizeof err);
    t_text();
    gt_layout(DDP_LAYOUT_NCHW);
    return gt_report("test_cuda_conv_graph");
#endif
}

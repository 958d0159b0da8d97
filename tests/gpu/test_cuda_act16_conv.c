/*
 * test_cuda_act16_conv.c - the CUDA backend's convolutions (cuDNN) and linear layers on bf16
 * activations (backend.h set_act_type(DDP_ACT_BF16)) against the same ops on fp32 activations
 * (suite gpu; suite twin on the GPU twin). Exit 0 pass, 1 fail, 77 skipped: no CUDA in this
 * build, no usable GPU or no cuDNN (bf16 activations run only on cuDNN's convolution path),
 * unless DDP_GPU_REQUIRE=1: then those fail.
 *
 * Inputs are bf16 values (activations, weights, biases), so both storages compute on the same
 * numbers under [train] precision = bf16; each op runs once on fp32 activations (the
 * reference, r) and once on bf16 activations, and the bf16 result is checked against what the
 * bf16 path is meant to be, rnd() being round to nearest even to bf16 (gt_bf16_round):
 *   conv2d_fwd without bias   rnd(r)                       (cuDNN's bf16 output)
 *   conv2d_fwd with bias      rnd(c + rnd(b)), c the conv  (bias broadcast in bf16, beta 1)
 *   conv2d_relu_fwd           rnd(relu(rnd(c) + b))        (bias + relu epilogue on bf16)
 *   conv2d_bwd dinp           rnd(r)
 *   conv2d_bwd dw (+=)        dw0 + rnd(g), g the fp32 path's gradient from 0 (the bf16
 *                             gradient in col widened into the fp32 dw)
 *   conv2d_bwd db (+=)        r (the same values summed in double in the same order)
 *   linear_fwd, linear_relu_fwd, linear_bwd dinp   rnd(r) (one rounding of the fp32 result)
 *   linear_bwd dw, db (+=)    r (the same GEMM on the same bf16 operands; the same sums)
 * On the twin every check is bit for bit: its cuDNN and GemmEx widen bf16 exactly and compute
 * the float path's very sums, with the same algorithm in both storages, so the products and
 * their order are the same and only the documented roundings differ. On a GPU cuDNN and
 * cuBLAS pick other kernels for bf16 data (other summation orders, where a sum close to a
 * rounding boundary rounds the other way: one bf16 unit, 2^-8 relative), so there the limit is
 * TOL_GPU in normalised error ||got - want|| / ||want||, and the worst is printed.
 * dw0 and db0 are of the gradients' size (a gradient overwritten instead of added shows on a
 * GPU as well). Shapes: both layouts, C = 1, C and O odd or not multiples of 8, stride 2, pad 0, 1 and 3,
 * k 1, 3 and 7, a batch below the planned one; linear with C = 1, odd sizes, O = 40.
 * Then the choices' text: a bf16 plan's line carries an eighteenth number (1), the same line
 * as fp32 (16 or 17 numbers) is not taken by the bf16 plan, an fp32 NHWC plan still takes its
 * 17-number line, and the run log names "bf16 data".
 *
 * Dimension letters as in backend.h.
 */
#include <math.h>

#include "gpu_test.h"

#if HAVE_CUDA

#include "backend_args.h" /* CONV_GEOM */

#define TOL_GPU 1e-2 /* normalised error on a GPU: a few bf16 units of 2^-8 where orders differ */

static double g_worst; /* the largest normalised error seen */

static float *zeros(size_t n)
{
    float *x = ddp_malloc(sizeof(float) * (n ? n : 1));
    memset(x, 0, sizeof(float) * (n ? n : 1));
    return x;
}

/* Check got against want (n floats): bit for bit on the twin, within TOL_GPU on a GPU. */
static void check(const char *op, const char *shape, const float *got, const float *want, size_t n)
{
    size_t differ;
    const double err = gt_nerr(got, want, n, &differ);
#ifdef DDP_TWIN
    const int ok = differ == 0;
#else
    const int ok = isfinite(err) && err <= TOL_GPU;
#endif
    g_worst = err > g_worst ? err : g_worst;
    gt_count(ok);
    printf("%-4s %-22s %s n=%zu: %zu differ, err %.2e\n", ok ? "ok" : "FAIL", op, shape, n, differ,
           err);
}

static void check_true(const char *what, int ok, const char *detail)
{
    gt_count(ok);
    printf("%-4s %s%s%s\n", ok ? "ok" : "FAIL", what, detail && !ok ? ": " : "",
           detail && !ok ? detail : "");
}

/* Layout and storage of the activations; 0, or -1 with the reason printed as a failure. */
static int storage(int nhwc, int act16)
{
    char err[DDP_ERR_LEN];
    if (G->set_layout(nhwc ? DDP_LAYOUT_NHWC : DDP_LAYOUT_NCHW, err, sizeof err) != 0 ||
        G->set_act_type(act16 ? DDP_ACT_BF16 : DDP_ACT_FP32, err, sizeof err) != 0) {
        check_true("set_layout / set_act_type", 0, err);
        return -1;
    }
    return 0;
}

/* ---- convolutions ------------------------------------------------------------------------ */

/* One convolution case: batch B run, planB planned. */
struct tcase {
    int B, planB, C, H, W, O, k, stride, pad;
};

/* Inputs (NCHW host, bf16 values) and what the ops wrote (NCHW host floats): y without bias,
 * yb with, yr relu'd with bias; dw and db added onto dw0 and db0. */
struct tdata {
    float *x, *w, *b, *dy, *dw0, *db0;
    float *y, *yb, *yr, *dx, *dw, *db;
};

static void tdata_free(struct tdata *r)
{
    float **p[] = {&r->x, &r->w,  &r->b,  &r->dy, &r->dw0, &r->db0,
                   &r->y, &r->yb, &r->yr, &r->dx, &r->dw,  &r->db};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) {
        free(*p[i]);
        *p[i] = NULL;
    }
}

/* conv2d_fwd (without and with bias), conv2d_relu_fwd and conv2d_bwd of case t in layout nhwc
 * and storage act16 on in's inputs, dw and db added onto dw0 and db0; results into out. */
static int run_conv(const struct tcase *t, int nhwc, int act16, const struct tdata *in,
                    const float *dw0, const float *db0, struct tdata *out)
{
    if (storage(nhwc, act16) != 0)
        return -1;
    const struct ddp_conv_geom *g = CONV_GEOM(t->C, t->H, t->W, t->O, t->k, t->stride, t->pad);
    const int OH = (t->H + 2 * t->pad - t->k) / t->stride + 1;
    const int OW = (t->W + 2 * t->pad - t->k) / t->stride + 1, S = t->H * t->W, P = OH * OW;
    const size_t ncol = G->conv_plan(t->planB, g), nw = (size_t)t->O * t->C * t->k * t->k;
    const size_t ny = (size_t)t->B * t->O * P;
    float *col = G->alloc(sizeof(float) * (ncol ? ncol : 1));
    float *gx = gt_act_up(in->x, t->B, t->C, S, nhwc, act16),
          *gdy = gt_act_up(in->dy, t->B, t->O, P, nhwc, act16);
    float *gw = gt_act_up(in->w, 1, (int)nw, 1, 0, 0), *gb = gt_act_up(in->b, 1, t->O, 1, 0, 0);
    float *gdw = gt_act_up(dw0, 1, (int)nw, 1, 0, 0), *gdb = gt_act_up(db0, 1, t->O, 1, 0, 0);
    float *gy = G->alloc(gt_act_bytes(ny, act16)), *gyb = G->alloc(gt_act_bytes(ny, act16));
    float *gyr = G->alloc(gt_act_bytes(ny, act16));
    float *gdx = G->alloc(gt_act_bytes((size_t)t->B * t->C * S, act16));
    G->conv2d_fwd(gy, col, gx, gw, NULL, t->B, g);
    G->conv2d_fwd(gyb, col, gx, gw, gb, t->B, g);
    G->conv2d_relu_fwd(gyr, col, gx, gw, gb, t->B, g);
    G->conv2d_bwd(gdx, gdw, gdb, col, gdy, gx, gw, t->B, g);
    out->y = gt_act_down(gy, t->B, t->O, P, nhwc, act16);
    out->yb = gt_act_down(gyb, t->B, t->O, P, nhwc, act16);
    out->yr = gt_act_down(gyr, t->B, t->O, P, nhwc, act16);
    out->dx = gt_act_down(gdx, t->B, t->C, S, nhwc, act16);
    out->dw = gt_act_down(gdw, 1, (int)nw, 1, 0, 0);
    out->db = gt_act_down(gdb, 1, t->O, 1, 0, 0);
    G->free(col);
    G->free(gx);
    G->free(gdy);
    G->free(gw);
    G->free(gb);
    return 0;
}

/* What the bf16 run must give (the header's table), from the fp32 run r (dw from 0). */
static void conv_want(const struct tcase *t, const struct tdata *in, const struct tdata *r,
                      struct tdata *want)
{
    const int OH = (t->H + 2 * t->pad - t->k) / t->stride + 1;
    const int OW = (t->W + 2 * t->pad - t->k) / t->stride + 1, P = OH * OW;
    const size_t ny = (size_t)t->B * t->O * P, nx = (size_t)t->B * t->C * t->H * t->W;
    const size_t nw = (size_t)t->O * t->C * t->k * t->k;
    want->y = zeros(ny), want->yb = zeros(ny), want->yr = zeros(ny);
    want->dx = zeros(nx), want->dw = zeros(nw), want->db = zeros((size_t)t->O);
    for (size_t i = 0; i < ny; i++) {
        const float b = in->b[(i / P) % t->O], c = r->y[i];
        const float v = gt_bf16_round(c) + b;
        want->y[i] = gt_bf16_round(c);
        want->yb[i] = gt_bf16_round(c + gt_bf16_round(b));
        want->yr[i] = gt_bf16_round(v > 0 ? v : 0);
    }
    for (size_t i = 0; i < nx; i++)
        want->dx[i] = gt_bf16_round(r->dx[i]);
    for (size_t i = 0; i < nw; i++)
        want->dw[i] = in->dw0[i] + gt_bf16_round(r->dw[i]);
    memcpy(want->db, r->db, sizeof(float) * t->O);
}

/* Case t in layout nhwc: the bf16 run against conv_want of the fp32 run. */
static void t_conv(const struct tcase *t, int nhwc, const char *mode)
{
    const int OH = (t->H + 2 * t->pad - t->k) / t->stride + 1;
    const int OW = (t->W + 2 * t->pad - t->k) / t->stride + 1;
    const size_t nx = (size_t)t->B * t->C * t->H * t->W, ny = (size_t)t->B * t->O * OH * OW;
    const size_t nw = (size_t)t->O * t->C * t->k * t->k;
    struct tdata in = {.x = gt_rnd_bf16(nx, 1, 0),
                       .w = gt_rnd_bf16(nw, 0.25f, 0),
                       .b = gt_rnd_bf16((size_t)t->O, 0.5f, 0),
                       .dy = gt_rnd_bf16(ny, 1, 0),
                       .dw0 = gt_rnd_bf16(nw, 4, 0),
                       .db0 = gt_rnd_bf16((size_t)t->O, 4, 0)};
    struct tdata r = {0}, h = {0}, want = {0};
    float *z = zeros(nw);
    char shape[128];
    snprintf(shape, sizeof shape, "%s %s B%d/%d C%d %dx%d O%d k%d s%d p%d", mode,
             nhwc ? "NHWC" : "NCHW", t->B, t->planB, t->C, t->H, t->W, t->O, t->k, t->stride,
             t->pad);
    if (run_conv(t, nhwc, 0, &in, z, in.db0, &r) == 0 &&
        run_conv(t, nhwc, 1, &in, in.dw0, in.db0, &h) == 0) {
        conv_want(t, &in, &r, &want);
        check("conv2d_fwd", shape, h.y, want.y, ny);
        check("conv2d_fwd + bias", shape, h.yb, want.yb, ny);
        check("conv2d_relu_fwd", shape, h.yr, want.yr, ny);
        check("conv2d_bwd dinp", shape, h.dx, want.dx, nx);
        check("conv2d_bwd dw (+=)", shape, h.dw, want.dw, nw);
        check("conv2d_bwd db (+=)", shape, h.db, want.db, (size_t)t->O);
    }
    free(z);
    tdata_free(&want);
    tdata_free(&r);
    tdata_free(&h);
    tdata_free(&in);
}

static const struct tcase g_cases[] = {
    {4, 4, 1, 9, 9, 6, 3, 1, 1},    /* C = 1 */
    {5, 5, 3, 13, 13, 8, 3, 1, 1},  /* C = 3 */
    {3, 5, 3, 11, 13, 7, 7, 2, 3},  /* k7 s2 p3, odd sizes, the last partial batch */
    {7, 7, 5, 9, 7, 3, 1, 1, 0},    /* 1x1, odd sizes */
    {6, 6, 12, 10, 10, 9, 3, 2, 1}, /* stride 2, C and O not multiples of 8 */
    {2, 6, 8, 7, 9, 12, 3, 2, 0},   /* stride 2 pad 0, odd sizes, partial batch */
    {3, 3, 16, 8, 8, 40, 3, 1, 1},  /* O = 40 */
};

/* ---- linear ------------------------------------------------------------------------------ */

/* linear_fwd (with and without bias), linear_relu_fwd and linear_bwd (dw, db onto dw0, db0)
 * of (B, C) -> O in storage act16; results into out (y, yb, yr, dx, dw, db). */
static void run_linear(int B, int C, int O, int act16, const struct tdata *in, struct tdata *out)
{
    if (storage(0, act16) != 0)
        return;
    const size_t nw = (size_t)O * C, ny = (size_t)B * O;
    float *gx = gt_act_up(in->x, B, C, 1, 0, act16), *gdy = gt_act_up(in->dy, B, O, 1, 0, act16);
    float *gw = gt_act_up(in->w, 1, (int)nw, 1, 0, 0), *gb = gt_act_up(in->b, 1, O, 1, 0, 0);
    float *gdw = gt_act_up(in->dw0, 1, (int)nw, 1, 0, 0), *gdb = gt_act_up(in->db0, 1, O, 1, 0, 0);
    float *gy = G->alloc(gt_act_bytes(ny, act16)), *gyb = G->alloc(gt_act_bytes(ny, act16));
    float *gyr = G->alloc(gt_act_bytes(ny, act16)),
          *gdx = G->alloc(gt_act_bytes((size_t)B * C, act16));
    G->linear_fwd(gy, gx, gw, NULL, B, C, O);
    G->linear_fwd(gyb, gx, gw, gb, B, C, O);
    G->linear_relu_fwd(gyr, gx, gw, gb, B, C, O);
    G->linear_bwd(gdx, gdw, gdb, gdy, gx, gw, B, C, O);
    out->y = gt_act_down(gy, B, O, 1, 0, act16);
    out->yb = gt_act_down(gyb, B, O, 1, 0, act16);
    out->yr = gt_act_down(gyr, B, O, 1, 0, act16);
    out->dx = gt_act_down(gdx, B, C, 1, 0, act16);
    out->dw = gt_act_down(gdw, 1, (int)nw, 1, 0, 0);
    out->db = gt_act_down(gdb, 1, O, 1, 0, 0);
    G->free(gx);
    G->free(gdy);
    G->free(gw);
    G->free(gb);
}

/* (B, C) -> O: the bf16 run against the fp32 run's results rounded once (dw, db as they are). */
static void t_linear(int B, int C, int O)
{
    const size_t nw = (size_t)O * C, ny = (size_t)B * O, nx = (size_t)B * C;
    struct tdata in = {.x = gt_rnd_bf16(nx, 1, 0),
                       .w = gt_rnd_bf16(nw, 0.25f, 0),
                       .b = gt_rnd_bf16((size_t)O, 0.5f, 0),
                       .dy = gt_rnd_bf16(ny, 1, 0),
                       .dw0 = gt_rnd_bf16(nw, 4, 0),
                       .db0 = gt_rnd_bf16((size_t)O, 4, 0)};
    struct tdata r = {0}, h = {0};
    char shape[64];
    snprintf(shape, sizeof shape, "B%d C%d O%d", B, C, O);
    run_linear(B, C, O, 0, &in, &r);
    run_linear(B, C, O, 1, &in, &h);
    if (r.y && h.y) {
        float *ys[3][2] = {{r.y, h.y}, {r.yb, h.yb}, {r.yr, h.yr}};
        for (size_t i = 0; i < ny; i++)
            for (int j = 0; j < 3; j++)
                ys[j][0][i] = gt_bf16_round(ys[j][0][i]);
        for (size_t i = 0; i < nx; i++)
            r.dx[i] = gt_bf16_round(r.dx[i]);
        check("linear_fwd", shape, h.y, r.y, ny);
        check("linear_fwd + bias", shape, h.yb, r.yb, ny);
        check("linear_relu_fwd", shape, h.yr, r.yr, ny);
        check("linear_bwd dinp", shape, h.dx, r.dx, nx);
        check("linear_bwd dw (+=)", shape, h.dw, r.dw, nw);
        check("linear_bwd db (+=)", shape, h.db, r.db, (size_t)O);
    }
    tdata_free(&r);
    tdata_free(&h);
    tdata_free(&in);
}

/* ---- the choices' text ------------------------------------------------------------------- */

/* The line of text (after its head) that starts with prefix, with the head, into out: 1, else
 * 0. */
static int choice_line(const char *text, const char *prefix, char *out, size_t len, size_t *n)
{
    const char *line = strstr(text, prefix), *eol = line ? strchr(line + 1, '\n') : NULL;
    const char *nl = strchr(text, '\n');
    if (!line || !eol || !nl)
        return 0;
    *n = (size_t)(eol - line - 1);
    snprintf(out, len, "%.*s%.*s\n", (int)(nl - text), text, (int)*n + 1, line);
    return 1;
}

/* A shape planned only on bf16 activations (NCHW) and another only on fp32 NHWC ones: the
 * bf16 line ends in " 0 1", its fp32 forms (16 and 17 numbers) are not taken by the bf16
 * plan, the fp32 NHWC plan still takes its 17-number line, and the report says bf16 data. */
static void t_choices_text(void)
{
    static const struct tcase a = {2, 2, 3, 6, 5, 5, 3, 1, 1}, b = {2, 2, 3, 6, 7, 5, 3, 1, 1};
    struct tdata in = {.x = gt_rnd_bf16(252, 1, 0),
                       .w = gt_rnd_bf16(135, 0.2f, 0),
                       .b = gt_rnd_bf16(5, 0.1f, 0),
                       .dy = gt_rnd_bf16(350, 1, 0),
                       .dw0 = zeros(135),
                       .db0 = zeros(5)};
    struct tdata o1 = {0}, o2 = {0};
    run_conv(&a, 0, 1, &in, in.dw0, in.db0, &o1);
    run_conv(&b, 1, 0, &in, in.dw0, in.db0, &o2);
    static char text[1 << 16], report[1 << 16], l16[1024], l32[1024], why[256], d[320];
    size_t n16 = 0, n32 = 0;
    ddp_cuda_conv_choices(text, sizeof text);
    ddp_cuda_conv_report(report, sizeof report);
    const int f16 = choice_line(text, "\n3 6 5 5 3 1 1 2 ", l16, sizeof l16, &n16);
    const int f32 = choice_line(text, "\n3 6 7 5 3 1 1 2 ", l32, sizeof l32, &n32);
    check_true("choices: the bf16 and fp32 NHWC plans' lines", f16 && f32, text);
    if (f16 && f32) {
        const size_t e16 = strlen(l16) - 1, e32 = strlen(l32) - 1;
        check_true("choices: the bf16 line ends in layout 0, storage 1",
                   e16 > 4 && !strncmp(l16 + e16 - 4, " 0 1", 4), l16);
        snprintf(d, sizeof d, "%d taken (3 expected) %s", ddp_cuda_conv_adopt(l16, 1, why, 256),
                 why);
        check_true("adopt: the bf16 line by the bf16 plan", strstr(d, "3 taken") == d, d);
        strcpy(l16 + e16 - 2, "\n"); /* 17 numbers: fp32 NCHW */
        snprintf(d, sizeof d, "%d taken", ddp_cuda_conv_adopt(l16, 1, why, 256));
        check_true("adopt: its fp32 form (17 numbers) not by the bf16 plan", !strcmp(d, "0 taken"),
                   d);
        strcpy(l16 + e16 - 4, "\n"); /* 16 numbers: fp32 NCHW, text from before */
        snprintf(d, sizeof d, "%d taken", ddp_cuda_conv_adopt(l16, 1, why, 256));
        check_true("adopt: its fp32 form (16 numbers) not by the bf16 plan", !strcmp(d, "0 taken"),
                   d);
        check_true("choices: the fp32 NHWC line has 17 numbers", !strncmp(l32 + e32 - 2, " 1", 2),
                   l32);
        snprintf(d, sizeof d, "%d taken", ddp_cuda_conv_adopt(l32, 1, why, 256));
        check_true("adopt: an fp32 17-number line by its fp32 plan", !strcmp(d, "3 taken"), d);
    }
    check_true("report: names bf16 data",
               strstr(report, "C3 6x5 -> 5 k3 s1 p1 bf16 data, batch 2:") != NULL, report);
    tdata_free(&o1);
    tdata_free(&o2);
    tdata_free(&in);
}

/* Every convolution case in both layouts under the convolution choice det
 * (ddp_cuda_conv_path). */
static void t_all(int det, const char *mode)
{
    char line[480];
    ddp_cuda_conv_path(1, det, line, sizeof line);
    printf("convolutions: %s\n", line);
    for (size_t i = 0; i < sizeof g_cases / sizeof *g_cases; i++)
        for (int nhwc = 0; nhwc < 2; nhwc++)
            t_conv(&g_cases[i], nhwc, mode);
}

#endif

int main(void)
{
#if !HAVE_CUDA
    return gt_skip(GT_NO_CUDA);
#else
    const int rc = gt_start(DDP_PRECISION_BF16, DDP_CUDA_CONV_RANKED, GT_ACT16 | GT_NHWC,
                            "bf16 activations need cuDNN");
    if (rc)
        return rc;
    t_all(DDP_CUDA_CONV_RANKED, "ranked"); /* cuDNN's ranking, as without the trainer */
    /* the legacy API's algorithms timed: this file's oracles are its roundings (a graph API
     * plan's forward with a bias rounds twice: test_cuda_conv_graph checks that path) */
    ddp_cuda_conv_api(0);
    t_all(1, "timed"); /* timed deterministic ([train] deterministic) */
    static const int lin[][3] = {{5, 7, 3}, {4, 1, 9}, {33, 65, 17}, {8, 130, 40}, {1, 3, 1}};
    for (size_t i = 0; i < sizeof lin / sizeof *lin; i++)
        t_linear(lin[i][0], lin[i][1], lin[i][2]);
    t_choices_text();
    storage(0, 0);
    printf("largest normalised error, bf16 against its oracle: %.2e\n", g_worst);
    return gt_report("test_cuda_act16_conv");
#endif
}

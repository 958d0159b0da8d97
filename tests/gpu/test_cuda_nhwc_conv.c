/*
 * test_cuda_nhwc_conv.c - the CUDA backend's cuDNN convolutions on channels-last activations
 * (backend.h set_layout(DDP_LAYOUT_NHWC)) against its NCHW path on the same data permuted
 * (suite gpu; suite twin on the GPU twin). Exit 0 pass, 1 fail, 77 skipped: no CUDA in this
 * build, no usable GPU or no cuDNN, unless DDP_GPU_REQUIRE=1: then each of those fails (no
 * cuDNN also with DDP_TEST_CONV_PATH=cudnn).
 *
 * Each case runs conv2d_fwd, conv2d_relu_fwd and conv2d_bwd (dinp; dw and db added onto
 * nonzero values) once in NCHW and once in NHWC, the NHWC tensors being the NCHW ones
 * permuted, with the weights in PyTorch's (O,C,k,k) both times; the NHWC results are permuted
 * back and compared by normalised error ||nhwc - nchw|| / ||nchw||. Limits: TOL_FP32 in fp32
 * (the twin computes NHWC exactly as NCHW: measured 0 with deterministic algorithms, 1.6e-7
 * with the non-deterministic ones; on a GPU the NHWC algorithms sum in other orders),
 * TOL_TF32 under [train] precision = tf32 and bf16 (cuDNN's tensor-core math on fp32 data:
 * both layouts round operands to tf32's 10-bit mantissa, in different algorithms). The bias
 * gradient is summed in double in both layouts, in different orders. Shapes cover C = 1 and 3,
 * odd H and W, stride 2, pad 0, 1 and 3, k = 1, 3 and 7, bias or none, O = 40 (not a multiple
 * of 32), and a batch smaller than the planned one (the last partial batch).
 * conv2d_relu_maxpool_fwd (its pooled output and act) likewise.
 * Then the text of the algorithm choices: NHWC plans are marked, and a line without the mark
 * (text from before channels-last) is never taken by an NHWC plan; the run log names NHWC.
 *
 * Dimension letters as in backend.h.
 */
#include <math.h>

#define GPU_TEST_SEED 0x9e3779b97f4a7c15ULL
#include "gpu_test.h"

#if HAVE_CUDA

#include "backend_args.h" /* CONV_GEOM */

#define TOL_FP32 1e-5 /* normalised error, NHWC vs NCHW, fp32 */
#define TOL_TF32 5e-3 /* the same under tf32 (as test_cuda_ops's tf32 limit) */

static double g_worst[2]; /* the largest error measured, fp32 and tf32 */

/* out (B, S, C) = inp (B, C, S) when to_nhwc, else out (B, C, S) = inp (B, S, C). */
static void permute(float *out, const float *inp, int B, int C, int S, int to_nhwc)
{
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            for (int s = 0; s < S; s++) {
                const size_t nchw = ((size_t)b * C + c) * S + s, nhwc = ((size_t)b * S + s) * C + c;
                if (to_nhwc)
                    out[nhwc] = inp[nchw];
                else
                    out[nchw] = inp[nhwc];
            }
}

/* A device copy of host x (B, C, S) NCHW, in layout nhwc. */
static float *up(const float *x, int B, int C, int S, int nhwc)
{
    const size_t n = (size_t)B * C * S;
    float *t = ddp_malloc(sizeof(float) * (n ? n : 1));
    permute(t, x, B, C, S, 1);
    float *d = G->alloc(sizeof(float) * (n ? n : 1));
    G->upload(d, nhwc ? t : x, sizeof(float) * n);
    free(t);
    return d;
}

/* Host NCHW copy of device d (B, C, S) in layout nhwc; d freed. */
static float *down(float *d, int B, int C, int S, int nhwc)
{
    const size_t n = (size_t)B * C * S;
    float *h = ddp_malloc(sizeof(float) * (n ? n : 1)),
          *t = ddp_malloc(sizeof(float) * (n ? n : 1));
    G->download(t, d, sizeof(float) * n);
    G->free(d);
    if (nhwc)
        permute(h, t, B, C, S, 0);
    else
        memcpy(h, t, sizeof(float) * n);
    free(t);
    return h;
}

/* One convolution case: batch B run, planB planned. */
struct tcase {
    int B, planB, C, H, W, O, k, stride, pad, bias;
};

/* Inputs (NCHW host) and what the three ops wrote (NCHW host). */
struct tdata {
    float *x, *w, *b, *dy, *dw0, *db0;
    float *y, *yr, *dx, *dw, *db;
};

static void inputs_free(struct tdata *r)
{
    free(r->x);
    free(r->w);
    free(r->b);
    free(r->dy);
    free(r->dw0);
    free(r->db0);
}

static void outputs_free(struct tdata *r)
{
    free(r->y);
    free(r->yr);
    free(r->dx);
    free(r->dw);
    free(r->db);
}

/* conv2d_fwd, conv2d_relu_fwd and conv2d_bwd of case t in layout nhwc on in's inputs; the
 * results into out (NCHW). 0, or -1 when set_layout refuses (reason printed). */
static int run_layout(const struct tcase *t, int nhwc, const struct tdata *in, struct tdata *out)
{
    char err[DDP_ERR_LEN];
    if (G->set_layout(nhwc ? DDP_LAYOUT_NHWC : DDP_LAYOUT_NCHW, err, sizeof err) != 0) {
        printf("FAIL set_layout(%s): %s\n", nhwc ? "NHWC" : "NCHW", err);
        g_fail++;
        return -1;
    }
    const struct ddp_conv_geom *g = CONV_GEOM(t->C, t->H, t->W, t->O, t->k, t->stride, t->pad);
    const int OH = (t->H + 2 * t->pad - t->k) / t->stride + 1;
    const int OW = (t->W + 2 * t->pad - t->k) / t->stride + 1, S = t->H * t->W, P = OH * OW;
    const size_t ncol = G->conv_plan(t->planB, g), nw = (size_t)t->O * t->C * t->k * t->k;
    float *col = G->alloc(sizeof(float) * (ncol ? ncol : 1));
    float *gx = up(in->x, t->B, t->C, S, nhwc), *gdy = up(in->dy, t->B, t->O, P, nhwc);
    float *gw = up(in->w, 1, (int)nw, 1, 0), *gb = up(in->b, 1, t->O, 1, 0);
    float *gdw = up(in->dw0, 1, (int)nw, 1, 0), *gdb = up(in->db0, 1, t->O, 1, 0);
    float *gy = G->alloc(sizeof(float) * t->B * t->O * P),
          *gyr = G->alloc(sizeof(float) * t->B * t->O * P);
    float *gdx = G->alloc(sizeof(float) * t->B * t->C * S);
    G->conv2d_fwd(gy, col, gx, gw, t->bias ? gb : NULL, t->B, g);
    G->conv2d_relu_fwd(gyr, col, gx, gw, t->bias ? gb : NULL, t->B, g);
    G->conv2d_bwd(gdx, gdw, t->bias ? gdb : NULL, col, gdy, gx, gw, t->B, g);
    out->y = down(gy, t->B, t->O, P, nhwc);
    out->yr = down(gyr, t->B, t->O, P, nhwc);
    out->dx = down(gdx, t->B, t->C, S, nhwc);
    out->dw = down(gdw, 1, (int)nw, 1, 0);
    out->db = down(gdb, 1, t->O, 1, 0);
    G->free(col);
    G->free(gx);
    G->free(gdy);
    G->free(gw);
    G->free(gb);
    return 0;
}

/* Check got against want (n floats): normalised error within tol, or bit for bit (exact). */
static void check(const char *op, const char *shape, const float *got, const float *want, size_t n,
                  double tol, int exact, int tf32)
{
    size_t differ;
    const double err = gt_nerr(got, want, n, &differ);
    const int ok = isfinite(err) && (exact ? differ == 0 : err <= tol);
    g_worst[tf32] = err > g_worst[tf32] ? err : g_worst[tf32];
    gt_count(ok);
    if (exact)
        printf("%-4s %-24s %s n=%zu: %zu differ (bit for bit)\n", ok ? "ok" : "FAIL", op, shape, n,
               differ);
    else
        printf("%-4s %-24s %s n=%zu: err %.2e (limit %.0e)\n", ok ? "ok" : "FAIL", op, shape, n,
               err, tol);
}

/* Case t in both layouts (tf32: under [train] precision = tf32 or bf16, cuDNN's tensor-core
 * math), NHWC checked against NCHW. */
static void t_case(const struct tcase *t, int tf32)
{
    const int OH = (t->H + 2 * t->pad - t->k) / t->stride + 1;
    const int OW = (t->W + 2 * t->pad - t->k) / t->stride + 1;
    const size_t ni = (size_t)t->B * t->C * t->H * t->W, no = (size_t)t->B * t->O * OH * OW;
    const size_t nw = (size_t)t->O * t->C * t->k * t->k;
    struct tdata in = {.x = gt_rnd(ni, 1),
                       .w = gt_rnd(nw, 0.2f),
                       .b = gt_rnd((size_t)t->O, 0.1f),
                       .dy = gt_rnd(no, 1),
                       .dw0 = gt_rnd(nw, 0.01f),
                       .db0 = gt_rnd((size_t)t->O, 0.01f)};
    struct tdata a = {0}, b = {0};
    char shape[128];
    snprintf(shape, sizeof shape, "%s B%d/%d C%d %dx%d O%d k%d s%d p%d%s",
             tf32 ? "tensor-op" : "fp32", t->B, t->planB, t->C, t->H, t->W, t->O, t->k, t->stride,
             t->pad, t->bias ? "" : " nobias");
    if (run_layout(t, 0, &in, &a) == 0 && run_layout(t, 1, &in, &b) == 0) {
        const double tol = tf32 ? TOL_TF32 : TOL_FP32;
        check("conv2d_fwd", shape, b.y, a.y, no, tol, 0, tf32);
        check("conv2d_relu_fwd", shape, b.yr, a.yr, no, tol, 0, tf32);
        check("conv2d_bwd dinp", shape, b.dx, a.dx, ni, tol, 0, tf32);
        check("conv2d_bwd dw (+=)", shape, b.dw, a.dw, nw, tol, 0, tf32);
        if (t->bias)
            check("conv2d_bwd db (+=)", shape, b.db, a.db, (size_t)t->O, tol, 0, tf32);
    }
    outputs_free(&a);
    outputs_free(&b);
    inputs_free(&in);
}

static const struct tcase g_cases[] = {
    {4, 4, 1, 9, 9, 6, 3, 1, 1, 1},     /* C = 1 */
    {5, 5, 3, 13, 13, 8, 3, 1, 1, 1},   /* C = 3 */
    {3, 5, 3, 11, 13, 8, 7, 2, 3, 1},   /* k7 s2 p3, odd sizes, the last partial batch */
    {2, 4, 3, 15, 17, 4, 7, 1, 3, 0},   /* k7 p3, no bias, a partial batch */
    {7, 7, 5, 9, 7, 3, 1, 1, 0, 1},     /* 1x1, odd sizes */
    {3, 3, 16, 8, 8, 16, 1, 2, 0, 1},   /* 1x1 stride 2 (a downsampling shortcut) */
    {6, 6, 4, 10, 10, 8, 3, 2, 1, 0},   /* stride 2, no bias */
    {2, 6, 8, 7, 9, 12, 3, 2, 0, 1},    /* stride 2 pad 0, odd sizes, partial batch */
    {3, 3, 1, 28, 28, 32, 5, 1, 0, 1},  /* fashion-cnn's first layer */
    {16, 16, 3, 13, 13, 8, 3, 1, 1, 1}, /* the planned batch after its partial one */
    {8, 8, 3, 64, 64, 40, 3, 1, 1, 1},  /* O = 40: two channel groups; bias sums in 4 splits */
};

/* One check of a condition; detail printed when it fails. */
static void check_true(const char *what, int ok, const char *detail)
{
    gt_count(ok);
    printf("%-4s %s%s%s\n", ok ? "ok" : "FAIL", what, detail && !ok ? ": " : "",
           detail && !ok ? detail : "");
}

/* The choices' text and the run log of a shape planned only in NHWC: its line carries the
 * layout, the same line without it (as text written before channels-last) is not taken, and
 * the report names NHWC. */
static void t_choices_text(void)
{
    static const struct tcase t = {2, 2, 2, 6, 6, 4, 3, 1, 1, 1};
    struct tdata in = {.x = gt_rnd(144, 1),
                       .w = gt_rnd(72, 0.2f),
                       .b = gt_rnd(4, 0.1f),
                       .dy = gt_rnd(288, 1),
                       .dw0 = gt_rnd(72, 0),
                       .db0 = gt_rnd(4, 0)};
    struct tdata out = {0};
    run_layout(&t, 1, &in, &out);
    outputs_free(&out);
    inputs_free(&in);
    static char text[1 << 16], report[1 << 16], mine[1024], stripped[1024];
    ddp_cuda_conv_choices(text, sizeof text);
    ddp_cuda_conv_report(report, sizeof report);
    const char *line = strstr(text, "\n2 6 6 4 3 1 1 2 ");
    const char *eol = line ? strchr(line + 1, '\n') : NULL;
    const size_t head = (size_t)(strchr(text, '\n') - text);
    check_true("choices: the NHWC plan's line", line && eol, line ? NULL : text);
    if (!line || !eol)
        return;
    snprintf(mine, sizeof mine, "%.*s%.*s\n", (int)head, text, (int)(eol - line), line);
    check_true("choices: the line ends in the layout (1)",
               eol - line > 2 && !strncmp(eol - 2, " 1", 2), mine);
    snprintf(stripped, sizeof stripped, "%.*s%.*s\n", (int)head, text, (int)(eol - line - 2), line);
    char why[256] = "", detail[64];
    const int taken = ddp_cuda_conv_adopt(mine, 1, why, sizeof why);
    snprintf(detail, sizeof detail, "%d directions taken (3 expected) %s", taken, why);
    check_true("adopt: an NHWC line by the NHWC plan", taken == 3, detail);
    const int old = ddp_cuda_conv_adopt(stripped, 1, why, sizeof why);
    snprintf(detail, sizeof detail, "%d directions taken (0 expected)", old);
    check_true("adopt: the line without the layout (NCHW) not by the NHWC plan", old == 0, detail);
    check_true("report: names NHWC", strstr(report, "C2 6x6 -> 4 k3 s1 p1 NHWC, batch 2:") != NULL,
               report);
}

/* conv2d_relu_maxpool_fwd (window pk) of case t in layout nhwc: the pooled output into *y and
 * the convolution scratch act into *act, both NCHW host. */
static void run_pool(const struct tcase *t, int pk, int nhwc, const struct tdata *in, float **y,
                     float **act)
{
    char err[DDP_ERR_LEN];
    G->set_layout(nhwc ? DDP_LAYOUT_NHWC : DDP_LAYOUT_NCHW, err, sizeof err);
    const struct ddp_conv_geom *g = CONV_GEOM(t->C, t->H, t->W, t->O, t->k, t->stride, t->pad);
    const int OH = (t->H + 2 * t->pad - t->k) / t->stride + 1;
    const int OW = (t->W + 2 * t->pad - t->k) / t->stride + 1;
    const size_t ncol = G->conv_plan(t->planB, g), nw = (size_t)t->O * t->C * t->k * t->k;
    const size_t np = (size_t)t->B * t->O * (OH / pk) * (OW / pk);
    float *col = G->alloc(sizeof(float) * (ncol ? ncol : 1));
    float *gx = up(in->x, t->B, t->C, t->H * t->W, nhwc), *gw = up(in->w, 1, (int)nw, 1, 0);
    float *gb = up(in->b, 1, t->O, 1, 0), *gy = G->alloc(sizeof(float) * (np ? np : 1));
    float *gact = G->alloc(sizeof(float) * t->B * t->O * OH * OW);
    uint8_t *arg = G->alloc(np ? np : 1);
    G->conv2d_relu_maxpool_fwd(gy, arg, gact, col, gx, gw, t->bias ? gb : NULL, t->B, g, pk);
    *y = down(gy, t->B, t->O, (OH / pk) * (OW / pk), nhwc);
    *act = down(gact, t->B, t->O, OH * OW, nhwc);
    G->free(arg);
    G->free(col);
    G->free(gx);
    G->free(gw);
    G->free(gb);
}

/* conv2d_relu_maxpool_fwd in NHWC against NCHW: its pooled output and its act scratch (the
 * convolution, then the pooling pass that adds the bias per channel). */
static void t_conv_relu_pool(void)
{
    static const struct tcase cases[] = {{3, 3, 1, 28, 28, 32, 5, 1, 0, 1},
                                         {2, 4, 3, 11, 12, 5, 3, 1, 0, 0}};
    for (int i = 0; i < 2; i++) {
        const struct tcase *t = &cases[i];
        const int OH = t->H - t->k + 1, OW = t->W - t->k + 1;
        const size_t ni = (size_t)t->B * t->C * t->H * t->W, nw = (size_t)t->O * t->C * t->k * t->k;
        struct tdata in = {
            .x = gt_rnd(ni, 1), .w = gt_rnd(nw, 0.2f), .b = gt_rnd((size_t)t->O, 0.1f)};
        float *ya, *aa, *yb, *ab;
        char shape[96];
        snprintf(shape, sizeof shape, "B%d C%d %dx%d O%d k%d pool 2%s", t->B, t->C, t->H, t->W,
                 t->O, t->k, t->bias ? "" : " nobias");
        run_pool(t, 2, 0, &in, &ya, &aa);
        run_pool(t, 2, 1, &in, &yb, &ab);
        check("conv2d_relu_maxpool out", shape, yb, ya, (size_t)t->B * t->O * (OH / 2) * (OW / 2),
              TOL_FP32, 0, 0);
        check("conv2d_relu_maxpool act", shape, ab, aa, (size_t)t->B * t->O * OH * OW, TOL_FP32, 0,
              0);
        free(ya), free(aa), free(yb), free(ab);
        inputs_free(&in);
    }
}

/* Every case under the convolution choice det (ddp_cuda_conv_path) at precision (enum
 * ddp_precision: bf16 runs cuDNN's tensor-core math on fp32 data, as tf32). */
static void t_all(int det, int precision)
{
    char line[480], err[DDP_ERR_LEN];
    if (precision != DDP_PRECISION_FP32 && !ddp_backend_cuda(0, precision, err, sizeof err)) {
        check_true("tf32/bf16 backend", 0, err);
        return;
    }
    ddp_cuda_conv_path(1, det, line, sizeof line);
    printf("convolutions: %s\n", line);
    for (size_t i = 0; i < sizeof g_cases / sizeof *g_cases; i++)
        t_case(&g_cases[i], precision != DDP_PRECISION_FP32);
    if (precision != DDP_PRECISION_FP32)
        ddp_backend_cuda(0, DDP_PRECISION_FP32, err, sizeof err);
}

#endif

int main(void)
{
#if !HAVE_CUDA
    return gt_skip(GT_NO_CUDA);
#else
    char why[DDP_ERR_LEN];
    const int rc = gt_start(DDP_PRECISION_FP32, DDP_CUDA_CONV_RANKED, GT_NHWC,
                            "channels-last convolutions need cuDNN");
    if (rc)
        return rc;
    t_all(DDP_CUDA_CONV_RANKED, DDP_PRECISION_FP32); /* cuDNN's ranking, as without the trainer */
    t_all(1, DDP_PRECISION_FP32); /* timed deterministic ([train] deterministic = true) */
    t_all(0, DDP_PRECISION_FP32); /* timed, any ([train] deterministic = false) */
    t_all(DDP_CUDA_CONV_RANKED, DDP_PRECISION_TF32);
    t_all(DDP_CUDA_CONV_RANKED, DDP_PRECISION_BF16);
    t_choices_text();
    t_conv_relu_pool();
    G->set_layout(DDP_LAYOUT_NCHW, why, sizeof why);
    printf("largest error NHWC vs NCHW: fp32 %.2e, tf32 and bf16 %.2e\n", g_worst[0], g_worst[1]);
    return gt_report("test_cuda_nhwc_conv");
#endif
}

/*
 * test_cuda_ops.c - every op of the CUDA backend against the CPU backend on seeded random data
 * (suite gpu). Exit 0 pass, 1 fail, 77 skipped: no CUDA in this build, or no usable GPU
 * (unless DDP_GPU_REQUIRE=1, as tests/gpu/device-check.sh sets: then a missing GPU fails).
 *
 * The measure is the normalised error ||gpu - cpu|| / ||cpu|| (2-norms over the whole output),
 * which must be <= 1e-6 in fp32. Where the CPU backend's own fp32 rounding is larger than that
 * (long reductions: a conv weight gradient sums over batch x positions), both are also
 * measured against the float64 reference kernels (cpu_ref.h) and the GPU passes when it is no
 * worse than twice the CPU's own error; every line says which rule decided. Outputs that
 * involve no arithmetic (relu, maxpool values and argmax, dropout masks, copies) must match
 * bit for bit. Double results (batchnorm sums, the xent loss) within 1e-10 relative.
 *
 * DDP_TEST_OPS=GROUP,GROUP,... runs only those groups of cases (default: all): elementwise,
 * linear, conv, pool, fusion, residual, batchnorm, xent, sumsq, optim, clip, graph, u8, tf32,
 * bf16; the line after the GPU line names them, and an unknown name fails (exit 1). device-check.sh's
 * racecheck runs the groups that fit its time budget.
 *
 * Built twice: test_cuda_ops (the GPU) and test_cuda_ops_emu (DDP_TEST_EMU: the same kernels
 * compiled for the CPU against tests/gpu/emu, so their logic is tested on every machine).
 *
 * Dimension letters as in backend.h.
 */
#include "ddp_build.h"

#include <math.h>

#include "backend/cpu_ref.h"
#include "job/config.h"
#include "nn/model.h"
#include "data/augment.h"
#include "data/h5data.h"
#ifdef DDP_TEST_EMU_UNUSED
#undef HAVE_CUDA
#define HAVE_CUDA 1
#endif
#include "gpu_test.h"

#if HAVE_CUDA

#define TOL 1e-6      /* normalised fp32 error, GPU vs CPU */
#define TOL_F64 1e-10 /* relative error of double results */

#include "backend_args.h" /* CONV_GEOM, SGD_ARGS, ADAM_ARGS */

static const struct ddp_backend *C;     /* the CPU backend, the reference */
static char g_conv_path[24] = "im2col"; /* the convolution path under test */
static int g_conv_det = 1;              /* its algorithms are deterministic */

/* ---- data -------------------------------------------------------------------------------- */

static float *copy_f(const float *x, size_t n)
{
    float *y = ddp_malloc(sizeof(float) * (n ? n : 1));
    memcpy(y, x, sizeof(float) * n);
    return y;
}

static double *to_f64(const float *x, size_t n)
{
    double *y = ddp_malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        y[i] = x[i];
    return y;
}

static float *dev_f(const float *host, size_t n)
{
    return gt_up(host, sizeof(float) * n);
}

static float *host_of(const float *dev, size_t n)
{
    return gt_down(dev, sizeof(float) * n);
}

/* ---- comparisons ------------------------------------------------------------------------- */

static double norm_diff(const float *a, const float *b, size_t n, double *nb)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - (double)b[i];
        d += e * e;
        s += (double)b[i] * b[i];
    }
    *nb = sqrt(s);
    return sqrt(d);
}

static double norm_diff_ref(const float *a, const double *ref, size_t n)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - ref[i];
        d += e * e;
        s += ref[i] * ref[i];
    }
    return s > 0 ? sqrt(d) / sqrt(s) : sqrt(d);
}

/* Compare a GPU output (device, n floats) with the CPU's (host); ref: float64 reference or
 * NULL; exact: bit for bit. Frees nothing. */
static void check(const char *op, const float *gpu_dev, const float *cpu, const double *ref,
                  size_t n, int exact)
{
    float *gpu = host_of(gpu_dev, n);
    g_checks++;
    int ok;
    char how[160];
    if (exact) {
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < n; i++)
            if (memcmp(&gpu[i], &cpu[i], sizeof(float)) != 0 && !bad++)
                first = i;
        ok = bad == 0;
        if (ok)
            snprintf(how, sizeof how, "bit-identical");
        else
            snprintf(how, sizeof how, "%zu of %zu differ, first at %zu: gpu %.9g cpu %.9g", bad, n,
                     first, gpu[first], cpu[first]);
    } else {
        double ncpu;
        double e = norm_diff(gpu, cpu, n, &ncpu);
        e = ncpu > 0 ? e / ncpu : e;
        ok = e <= TOL;
        if (ok || !ref) {
            snprintf(how, sizeof how, "err %.2e (limit %.0e)", e, TOL);
        } else {
            const double eg = norm_diff_ref(gpu, ref, n), ec = norm_diff_ref(cpu, ref, n);
            const double lim = fmax(TOL, 2 * ec);
            ok = eg <= lim;
            snprintf(how, sizeof how,
                     "err %.2e > %.0e; vs float64: gpu %.2e, cpu %.2e (limit %.2e)", e, TOL, eg, ec,
                     lim);
        }
        if (!isfinite(e))
            ok = 0;
    }
    printf("%-4s %-34s n=%-9zu %s\n", ok ? "ok" : "FAIL", op, n, how);
    if (!ok)
        g_fail++;
    free(gpu);
}

static void check_d(const char *op, const double *gpu, const double *cpu, size_t n)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d += (gpu[i] - cpu[i]) * (gpu[i] - cpu[i]);
        s += cpu[i] * cpu[i];
    }
    const double e = s > 0 ? sqrt(d / s) : sqrt(d);
    const int ok = e <= TOL_F64 && isfinite(e);
    g_checks++;
    printf("%-4s %-34s n=%-9zu err %.2e (limit %.0e, double)\n", ok ? "ok" : "FAIL", op, n, e,
           TOL_F64);
    if (!ok)
        g_fail++;
}

static void check_i(const char *op, long long gpu, long long cpu)
{
    g_checks++;
    printf("%-4s %-34s gpu %lld cpu %lld\n", gpu == cpu ? "ok" : "FAIL", op, gpu, cpu);
    if (gpu != cpu)
        g_fail++;
}

/* ---- cases ------------------------------------------------------------------------------- */

static void t_linear(int B, int Cin, int O)
{
    char name[96];
    const size_t ni = (size_t)B * Cin, nw = (size_t)O * Cin, no = (size_t)B * O;
    float *x = gt_rnd(ni, 1), *w = gt_rnd(nw, 0.1f), *b = gt_rnd((size_t)O, 0.1f),
          *dy = gt_rnd(no, 1);
    float *dw0 = gt_rnd(nw, 0.01f), *db0 = gt_rnd((size_t)O, 0.01f);
    double *x64 = to_f64(x, ni), *w64 = to_f64(w, nw), *b64 = to_f64(b, (size_t)O),
           *dy64 = to_f64(dy, no);
    float *gx = dev_f(x, ni), *gw = dev_f(w, nw), *gb = dev_f(b, (size_t)O), *gdy = dev_f(dy, no);

    for (int with_bias = 1; with_bias >= 0; with_bias--) {
        float *cy = ddp_malloc(sizeof(float) * no);
        double *ry = ddp_malloc(sizeof(double) * no);
        float *gy = G->alloc(sizeof(float) * no);
        C->linear_fwd(cy, x, w, with_bias ? b : NULL, B, Cin, O);
        ddp_cpu_linear_fwd_f64(ry, x64, w64, with_bias ? b64 : NULL, B, Cin, O);
        G->linear_fwd(gy, gx, gw, with_bias ? gb : NULL, B, Cin, O);
        snprintf(name, sizeof name, "linear_fwd %dx%d->%d%s", B, Cin, O,
                 with_bias ? "" : " nobias");
        check(name, gy, cy, ry, no, 0);
        /* the fused linear + relu (model.c uses it for a linear whose only reader is a relu)
         * against the CPU's two ops */
        C->relu_fwd(cy, cy, no);
        for (size_t i = 0; i < no; i++)
            ry[i] = ry[i] > 0 ? ry[i] : 0;
        if (G->linear_relu_fwd) {
            G->zero(gy, no);
            G->linear_relu_fwd(gy, gx, gw, with_bias ? gb : NULL, B, Cin, O);
            snprintf(name, sizeof name, "linear_relu_fwd %dx%d->%d%s", B, Cin, O,
                     with_bias ? "" : " nobias");
            check(name, gy, cy, ry, no, 0);
        }
        free(cy);
        free(ry);
        G->free(gy);
    }

    /* backward adds into dw, db (start from non-zero), overwrites dinp */
    float *cdx = ddp_malloc(sizeof(float) * ni), *cdw = copy_f(dw0, nw),
          *cdb = copy_f(db0, (size_t)O);
    double *rdx = ddp_malloc(sizeof(double) * ni), *rdw = to_f64(dw0, nw),
           *rdb = to_f64(db0, (size_t)O);
    float *gdx = G->alloc(sizeof(float) * ni), *gdw = dev_f(dw0, nw), *gdb = dev_f(db0, (size_t)O);
    C->linear_bwd(cdx, cdw, cdb, dy, x, w, B, Cin, O);
    ddp_cpu_linear_bwd_f64(rdx, rdw, rdb, dy64, x64, w64, B, Cin, O);
    G->linear_bwd(gdx, gdw, gdb, gdy, gx, gw, B, Cin, O);
    snprintf(name, sizeof name, "linear_bwd dinp %dx%d->%d", B, Cin, O);
    check(name, gdx, cdx, rdx, ni, 0);
    snprintf(name, sizeof name, "linear_bwd dw (+=)");
    check(name, gdw, cdw, rdw, nw, 0);
    snprintf(name, sizeof name, "linear_bwd db (+=)");
    check(name, gdb, cdb, rdb, (size_t)O, 0);
    /* first layer: no dinp, no db */
    G->linear_bwd(NULL, gdw, NULL, gdy, gx, gw, B, Cin, O);
    C->linear_bwd(NULL, cdw, NULL, dy, x, w, B, Cin, O);
    ddp_cpu_linear_bwd_f64(NULL, rdw, NULL, dy64, x64, w64, B, Cin, O);
    check("linear_bwd dw, no dinp/db", gdw, cdw, rdw, nw, 0);

    G->free(gx);
    G->free(gw);
    G->free(gb);
    G->free(gdy);
    G->free(gdx);
    G->free(gdw);
    G->free(gdb);
    free(x);
    free(w);
    free(b);
    free(dy);
    free(dw0);
    free(db0);
    free(x64);
    free(w64);
    free(b64);
    free(dy64);
    free(cdx);
    free(cdw);
    free(cdb);
    free(rdx);
    free(rdw);
    free(rdb);
}

static void t_elementwise(size_t n)
{
    float *x = gt_rnd(n, 1), *dy = gt_rnd(n, 1);
    float *gx = dev_f(x, n), *gdy = dev_f(dy, n);
    float *cy = ddp_malloc(sizeof(float) * n), *cdx = ddp_malloc(sizeof(float) * n);
    float *gy = G->alloc(sizeof(float) * n), *gdx = G->alloc(sizeof(float) * n);

    C->relu_fwd(cy, x, n);
    G->relu_fwd(gy, gx, n);
    check("relu_fwd", gy, cy, NULL, n, 1);
    C->relu_bwd(cdx, dy, cy, n);
    G->relu_bwd(gdx, gdy, gy, n);
    check("relu_bwd", gdx, cdx, NULL, n, 1);

    /* dropout: the same hash, so the same mask, bit for bit */
    const float p = 0.3f;
    const uint64_t seed = 0x1234567890abcdefULL;
    float *cm = ddp_malloc(sizeof(float) * n), *gm = G->alloc(sizeof(float) * n);
    C->dropout_fwd(cy, cm, x, n, p, seed);
    G->dropout_fwd(gy, gm, gx, n, p, seed);
    check("dropout_fwd mask", gm, cm, NULL, n, 1);
    check("dropout_fwd out", gy, cy, NULL, n, 1);
    C->dropout_bwd(cdx, dy, cm, n);
    G->dropout_bwd(gdx, gdy, gm, n);
    check("dropout_bwd", gdx, cdx, NULL, n, 1);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        kept += cm[i] != 0;
    g_checks++;
    const double frac = (double)kept / (double)n;
    const int fok = fabs(frac - (1 - p)) < 0.02;
    printf("%-4s %-34s kept %.4f (expected %.2f)\n", fok ? "ok" : "FAIL", "dropout keep rate", frac,
           1 - p);
    g_fail += !fok;

    /* scale, zero, device-to-device copy through upload */
    memcpy(cy, x, sizeof(float) * n);
    C->scale(cy, n, 0.37f);
    G->upload(gy, gx, sizeof(float) * n); /* device -> device, as model.c does */
    check("upload device->device", gy, x, NULL, n, 1);
    G->scale(gy, n, 0.37f);
    check("scale", gy, cy, NULL, n, 1);
    C->zero(cy, n);
    G->zero(gy, n);
    check("zero", gy, cy, NULL, n, 1);

    G->free(gx);
    G->free(gdy);
    G->free(gy);
    G->free(gdx);
    G->free(gm);
    free(x);
    free(dy);
    free(cy);
    free(cdx);
    free(cm);
}

/* conv2d on the path the backend runs now (cuDNN or im2col + cuBLAS, named in the lines),
 * planned for batches of planB and run at B <= planB (the last partial batch), with or without
 * bias. Backward runs twice from the same start: the results must be bit-identical (the
 * algorithms are deterministic). */
static void t_conv_ex(int B, int planB, int Cin, int H, int W, int O, int k, int stride, int pad,
                      int bias)
{
    char name[160], shape[112];
    snprintf(shape, sizeof shape, "%s B%d/%d C%d %dx%d O%d k%d s%d p%d%s", g_conv_path, B, planB,
             Cin, H, W, O, k, stride, pad, bias ? "" : " nobias");
    const int OH = (H + 2 * pad - k) / stride + 1, OW = (W + 2 * pad - k) / stride + 1;
    const size_t ni = (size_t)B * Cin * H * W, nw = (size_t)O * Cin * k * k,
                 no = (size_t)B * O * OH * OW;
    float *x = gt_rnd(ni, 1), *w = gt_rnd(nw, 0.2f), *b = gt_rnd((size_t)O, 0.1f),
          *dy = gt_rnd(no, 1);
    float *dw0 = gt_rnd(nw, 0.01f), *db0 = gt_rnd((size_t)O, 0.01f);
    double *x64 = to_f64(x, ni), *w64 = to_f64(w, nw), *b64 = to_f64(b, (size_t)O),
           *dy64 = to_f64(dy, no);
    const size_t ccol = C->conv_col_elems(B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    const size_t gcol = G->conv_plan
                            ? G->conv_plan(planB, CONV_GEOM(Cin, H, W, O, k, stride, pad))
                            : G->conv_col_elems(planB, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    float *ccolb = ddp_malloc(sizeof(float) * ccol);
    double *rcol = ddp_malloc(sizeof(double) * ccol);
    float *gcolb = gcol ? G->alloc(sizeof(float) * gcol) : NULL;
    float *gx = dev_f(x, ni), *gw = dev_f(w, nw), *gb = dev_f(b, (size_t)O), *gdy = dev_f(dy, no);
    const float *cb_ = bias ? b : NULL, *gb_ = bias ? gb : NULL;
    const double *rb_ = bias ? b64 : NULL;

    float *cy = ddp_malloc(sizeof(float) * no);
    double *ry = ddp_malloc(sizeof(double) * no);
    float *gy = G->alloc(sizeof(float) * no);
    C->conv2d_fwd(cy, ccolb, x, w, cb_, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    ddp_cpu_conv2d_fwd_f64(ry, rcol, x64, w64, rb_, B, Cin, H, W, O, k, stride, pad);
    G->conv2d_fwd(gy, gcolb, gx, gw, gb_, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    snprintf(name, sizeof name, "conv2d_fwd %s", shape);
    check(name, gy, cy, ry, no, 0);
    if (G->conv2d_relu_fwd) { /* the fused conv + relu against the CPU's two ops */
        float *cr = ddp_malloc(sizeof(float) * no);
        double *rr = ddp_malloc(sizeof(double) * no);
        C->relu_fwd(cr, cy, no);
        for (size_t i = 0; i < no; i++)
            rr[i] = ry[i] > 0 ? ry[i] : 0;
        G->zero(gy, no);
        G->conv2d_relu_fwd(gy, gcolb, gx, gw, gb_, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
        snprintf(name, sizeof name, "conv2d_relu_fwd %s", shape);
        check(name, gy, cr, rr, no, 0);
        free(cr);
        free(rr);
    }

    float *cdx = ddp_malloc(sizeof(float) * ni), *cdw = copy_f(dw0, nw),
          *cdb = copy_f(db0, (size_t)O);
    double *rdx = ddp_malloc(sizeof(double) * ni), *rdw = to_f64(dw0, nw),
           *rdb = to_f64(db0, (size_t)O);
    float *gdx = G->alloc(sizeof(float) * ni), *gdw = dev_f(dw0, nw), *gdb = dev_f(db0, (size_t)O);
    float *cdb_ = bias ? cdb : NULL, *gdb_ = bias ? gdb : NULL;
    double *rdb_ = bias ? rdb : NULL;
    C->conv2d_bwd(cdx, cdw, cdb_, ccolb, dy, x, w, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    ddp_cpu_conv2d_bwd_f64(rdx, rdw, rdb_, rcol, dy64, x64, w64, B, Cin, H, W, O, k, stride, pad);
    G->conv2d_bwd(gdx, gdw, gdb_, gcolb, gdy, gx, gw, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    snprintf(name, sizeof name, "conv2d_bwd dinp %s", shape);
    check(name, gdx, cdx, rdx, ni, 0);
    snprintf(name, sizeof name, "conv2d_bwd dw (+=) %s", shape);
    check(name, gdw, cdw, rdw, nw, 0);
    if (bias) {
        snprintf(name, sizeof name, "conv2d_bwd db (+=) %s", shape);
        check(name, gdb, cdb, rdb, (size_t)O, 0);
    }
    /* the same again: bit for bit (deterministic algorithms; the fastest of any kind may sum
     * in a varying order, and is checked against the CPU above only) */
    float *hdx = host_of(gdx, ni), *hdw = host_of(gdw, nw), *hdb = host_of(gdb, (size_t)O);
    G->upload(gdw, dw0, sizeof(float) * nw);
    G->upload(gdb, db0, sizeof(float) * O);
    G->conv2d_bwd(gdx, gdw, gdb_, gcolb, gdy, gx, gw, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    snprintf(name, sizeof name, "conv2d_bwd again %s", shape);
    if (g_conv_det) {
        check(name, gdw, hdw, NULL, nw, 1);
        check(name, gdx, hdx, NULL, ni, 1);
        if (bias)
            check(name, gdb, hdb, NULL, (size_t)O, 1);
    }
    free(hdx);
    free(hdw);
    free(hdb);

    G->free(gx);
    G->free(gw);
    G->free(gb);
    G->free(gdy);
    G->free(gy);
    G->free(gdx);
    G->free(gdw);
    G->free(gdb);
    if (gcolb)
        G->free(gcolb);
    free(x);
    free(w);
    free(b);
    free(dy);
    free(dw0);
    free(db0);
    free(x64);
    free(w64);
    free(b64);
    free(dy64);
    free(ccolb);
    free(rcol);
    free(cy);
    free(ry);
    free(cdx);
    free(cdw);
    free(cdb);
    free(rdx);
    free(rdw);
    free(rdb);
}

static void t_conv(int B, int Cin, int H, int W, int O, int k, int stride, int pad)
{
    t_conv_ex(B, B, Cin, H, W, O, k, stride, pad, 1);
}

/* Every conv case on the path chosen by use_cudnn, with deterministic algorithms (cuDNN's
 * ranking) or the fastest timed ones; the path the backend reports must be the one asked for
 * when want_path is given. */
static void t_conv_relu_pool(int B, int Cin, int H, int W, int O, int k, int pk);

static void t_conv_all(int use_cudnn, int det, const char *want_path)
{
    char line[480];
    const int dnn = ddp_cuda_conv_path(use_cudnn, det, line, sizeof line);
    snprintf(g_conv_path, sizeof g_conv_path, "%s",
             dnn ? (det ? "cudnn" : "cudnn-timed") : "im2col");
    g_conv_det = det;
    printf("convolutions: %s\n", line);
    if (want_path) {
        g_checks++;
        const int ok = strncmp(g_conv_path, want_path, strlen(want_path)) == 0;
        printf("%-4s conv path %s (expected %s)\n", ok ? "ok" : "FAIL", g_conv_path, want_path);
        g_fail += !ok;
    }
    t_conv(5, 3, 13, 13, 8, 3, 1, 1);
    t_conv(4, 2, 11, 9, 6, 4, 2, 1);             /* non-square, stride 2, window overhangs */
    t_conv(3, 1, 28, 28, 32, 5, 1, 0);           /* fashion-cnn's first layer */
    t_conv(48, 16, 32, 32, 16, 5, 1, 2);         /* 409600 col floats a sample: 2 chunks of <= 40 */
    t_conv_ex(7, 7, 5, 9, 7, 3, 1, 1, 0, 1);     /* 1x1, odd sizes */
    t_conv_ex(6, 6, 4, 10, 10, 8, 3, 2, 1, 0);   /* stride 2, no bias */
    t_conv_ex(3, 16, 3, 13, 13, 8, 3, 1, 1, 1);  /* a smaller batch than planned */
    t_conv_ex(16, 16, 3, 13, 13, 8, 3, 1, 1, 1); /* back to the planned batch */
    t_conv_relu_pool(3, 1, 28, 28, 32, 5, 2);    /* fashion-cnn's first block */
    t_conv_relu_pool(2, 3, 11, 12, 5, 3, 2);     /* a pooled row left over */
}

static void t_pools(int B, int Cc, int H, int W, int k)
{
    char name[96];
    const size_t ni = (size_t)B * Cc * H * W, no = (size_t)B * Cc * (H / k) * (W / k);
    float *x = gt_rnd(ni, 1), *dy = gt_rnd(no, 1);
    for (size_t i = 0; i < ni; i++) /* few levels: ties, so the first-maximum rule matters */
        x[i] = roundf(x[i] * 3) / 3;
    float *gx = dev_f(x, ni), *gdy = dev_f(dy, no);
    float *cy = ddp_malloc(sizeof(float) * no), *cdx = ddp_malloc(sizeof(float) * ni);
    int32_t *carg = ddp_malloc(sizeof(int32_t) * no);
    float *gy = G->alloc(sizeof(float) * no), *gdx = G->alloc(sizeof(float) * ni);
    int32_t *garg = G->alloc(sizeof(int32_t) * no);

    C->maxpool_fwd(cy, carg, x, B, Cc, H, W, k);
    G->maxpool_fwd(gy, garg, gx, B, Cc, H, W, k);
    snprintf(name, sizeof name, "maxpool_fwd B%d C%d %dx%d k%d", B, Cc, H, W, k);
    check(name, gy, cy, NULL, no, 1);
    {
        int32_t *h = ddp_malloc(sizeof(int32_t) * no);
        G->download(h, garg, sizeof(int32_t) * no);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < no; i++)
            if (h[i] != carg[i] && !bad++)
                first = i;
        g_checks++;
        if (bad) {
            g_fail++;
            printf("FAIL %-34s %zu of %zu differ, first at %zu: gpu %d cpu %d\n",
                   "maxpool_fwd argmax", bad, no, first, h[first], carg[first]);
        } else
            printf("ok   %-34s n=%-9zu identical\n", "maxpool_fwd argmax", no);
        free(h);
    }
    C->maxpool_bwd(cdx, dy, carg, B, Cc, H, W, k);
    G->maxpool_bwd(gdx, gdy, garg, B, Cc, H, W, k);
    check("maxpool_bwd", gdx, cdx, NULL, ni, 1);

    C->avgpool_fwd(cy, x, B, Cc, H, W, k);
    G->avgpool_fwd(gy, gx, B, Cc, H, W, k);
    snprintf(name, sizeof name, "avgpool_fwd B%d C%d %dx%d k%d", B, Cc, H, W, k);
    check(name, gy, cy, NULL, no, 0);
    C->avgpool_bwd(cdx, dy, B, Cc, H, W, k);
    G->avgpool_bwd(gdx, gdy, B, Cc, H, W, k);
    check("avgpool_bwd", gdx, cdx, NULL, ni, 0);

    G->free(gx);
    G->free(gdy);
    G->free(gy);
    G->free(gdx);
    G->free(garg);
    free(x);
    free(dy);
    free(cy);
    free(cdx);
    free(carg);
}

/* Bit-for-bit comparison of two device arrays of n floats (two GPU paths of one op). */
static void check_same(const char *op, const float *a_dev, const float *b_dev, size_t n)
{
    float *b = host_of(b_dev, n);
    check(op, a_dev, b, NULL, n, 1);
    free(b);
}

/* The fused relu + maxpool ops against relu_fwd, maxpool_fwd, maxpool_bwd and relu_bwd on the
 * GPU and the CPU, bit for bit: pooled values, the byte argmax as the int32 one's place in
 * its window, and the gradient of the relu's input. x has ties and negative windows. */
static void t_relu_pool(int B, int Cc, int H, int W, int k)
{
    char name[96];
    if (!G->relu_maxpool_fwd || !G->maxpool_relu_bwd)
        return;
    const int OH = H / k, OW = W / k;
    const size_t ni = (size_t)B * Cc * H * W, no = (size_t)B * Cc * OH * OW;
    float *x = gt_rnd(ni, 1), *dy = gt_rnd(no, 1);
    for (size_t i = 0; i < ni; i++)
        x[i] = roundf(x[i] * 3) / 3;
    float *gx = dev_f(x, ni), *gdy = dev_f(dy, no), *gr = G->alloc(sizeof(float) * ni);
    float *gy = G->alloc(sizeof(float) * no), *gyf = G->alloc(sizeof(float) * no);
    int32_t *garg = G->alloc(sizeof(int32_t) * no);
    uint8_t *garg8 = G->alloc(no);
    G->relu_fwd(gr, gx, ni); /* the unfused path */
    G->maxpool_fwd(gy, garg, gr, B, Cc, H, W, k);
    G->relu_maxpool_fwd(gyf, garg8, gx, B, Cc, H, W, k);
    snprintf(name, sizeof name, "relu_maxpool_fwd B%d C%d %dx%d k%d", B, Cc, H, W, k);
    check_same(name, gyf, gy, no);
    {
        int32_t *a = ddp_malloc(sizeof(int32_t) * no);
        uint8_t *a8 = ddp_malloc(no);
        G->download(a, garg, sizeof(int32_t) * no);
        G->download(a8, garg8, no);
        size_t bad = 0;
        for (size_t o = 0; o < no; o++) {
            const int r = a[o] / W - (int)((o % ((size_t)OH * OW)) / OW) * k;
            const int c = a[o] % W - (int)(o % OW) * k;
            bad += a8[o] != r * k + c;
        }
        check_i("relu_maxpool_fwd byte argmax wrong", (long long)bad, 0);
        free(a);
        free(a8);
    }
    float *gd = G->alloc(sizeof(float) * ni), *gdf = G->alloc(sizeof(float) * ni);
    G->maxpool_bwd(gd, gdy, garg, B, Cc, H, W, k);
    G->relu_bwd(gd, gd, gr, ni);
    G->maxpool_relu_bwd(gdf, gdy, gyf, garg8, B, Cc, H, W, k);
    check_same("maxpool_relu_bwd vs two ops", gdf, gd, ni);
    { /* and against the CPU's two ops */
        float *cr = ddp_malloc(sizeof(float) * ni), *cy = ddp_malloc(sizeof(float) * no);
        int32_t *carg = ddp_malloc(sizeof(int32_t) * no);
        C->relu_fwd(cr, x, ni);
        C->maxpool_fwd(cy, carg, cr, B, Cc, H, W, k);
        check("relu_maxpool_fwd vs cpu", gyf, cy, NULL, no, 1);
        float *cd = ddp_malloc(sizeof(float) * ni);
        C->maxpool_bwd(cd, dy, carg, B, Cc, H, W, k);
        C->relu_bwd(cd, cd, cr, ni);
        check("maxpool_relu_bwd vs cpu", gdf, cd, NULL, ni, 1);
        free(cr), free(cy), free(carg), free(cd);
    }
    G->free(gx), G->free(gdy), G->free(gr), G->free(gy), G->free(gyf);
    G->free(garg), G->free(garg8), G->free(gd), G->free(gdf);
    free(x), free(dy);
}

/* conv2d_relu_maxpool_fwd against conv2d_relu_fwd + maxpool_fwd on the GPU, bit for bit, on
 * the path that runs (cuDNN adds the bias in the pooling pass, im2col in the GEMM). */
static void t_conv_relu_pool(int B, int Cin, int H, int W, int O, int k, int pk)
{
    char name[128];
    if (!G->conv2d_relu_maxpool_fwd)
        return;
    const struct ddp_conv_geom *g = CONV_GEOM(Cin, H, W, O, k, 1, 0);
    const int OH = H - k + 1, OW = W - k + 1;
    const size_t ni = (size_t)B * Cin * H * W, nw = (size_t)O * Cin * k * k,
                 na = (size_t)B * O * OH * OW, no = (size_t)B * O * (OH / pk) * (OW / pk);
    float *x = gt_rnd(ni, 1), *w = gt_rnd(nw, 0.2f), *b = gt_rnd((size_t)O, 0.1f);
    const size_t col = G->conv_plan ? G->conv_plan(B, g) : G->conv_col_elems(B, g);
    float *gcol = col ? G->alloc(sizeof(float) * col) : NULL;
    float *gx = dev_f(x, ni), *gw = dev_f(w, nw), *gb = dev_f(b, (size_t)O);
    float *ga = G->alloc(sizeof(float) * na), *gact = G->alloc(sizeof(float) * na);
    float *gy = G->alloc(sizeof(float) * no), *gyf = G->alloc(sizeof(float) * no);
    int32_t *garg = G->alloc(sizeof(int32_t) * no);
    uint8_t *garg8 = G->alloc(no);
    for (int bias = 1; bias >= 0; bias--) {
        G->conv2d_relu_fwd(ga, gcol, gx, gw, bias ? gb : NULL, B, g);
        G->maxpool_fwd(gy, garg, ga, B, O, OH, OW, pk);
        G->conv2d_relu_maxpool_fwd(gyf, garg8, gact, gcol, gx, gw, bias ? gb : NULL, B, g, pk);
        snprintf(name, sizeof name, "conv2d_relu_maxpool_fwd %s B%d C%d %dx%d O%d%s", g_conv_path,
                 B, Cin, H, W, O, bias ? "" : " nobias");
        check_same(name, gyf, gy, no);
    }
    G->free(gcol), G->free(gx), G->free(gw), G->free(gb), G->free(ga), G->free(gact);
    G->free(gy), G->free(gyf), G->free(garg), G->free(garg8);
    free(x), free(w), free(b);
}

/* The float4 paths of the element-wise ops against their scalar ones: n odd (a tail), device
 * pointers `off` floats past an allocation (off 1: misaligned, so the scalar kernels run; 0:
 * the vector kernels). Bit for bit against the CPU (relu, add) and the aligned run. */
static void t_vec(size_t n, int off)
{
    char name[96];
    float *x = gt_rnd(n, 1), *x2 = gt_rnd(n, 1), *dy = gt_rnd(n, 1);
    float *cy = ddp_malloc(sizeof(float) * n), *cd = ddp_malloc(sizeof(float) * n);
    float *bx = G->alloc(sizeof(float) * (n + 4)), *bx2 = G->alloc(sizeof(float) * (n + 4));
    float *bdy = G->alloc(sizeof(float) * (n + 4)), *by = G->alloc(sizeof(float) * (n + 4));
    float *gx = bx + off, *gx2 = bx2 + off, *gdy = bdy + off, *gy = by + off;
    G->upload(gx, x, sizeof(float) * n);
    G->upload(gx2, x2, sizeof(float) * n);
    G->upload(gdy, dy, sizeof(float) * n);
    C->relu_fwd(cy, x, n);
    G->relu_fwd(gy, gx, n);
    snprintf(name, sizeof name, "relu_fwd n%zu off%d", n, off);
    check(name, gy, cy, NULL, n, 1);
    C->relu_bwd(cd, dy, cy, n);
    G->relu_bwd(gx2, gdy, gy, n);
    snprintf(name, sizeof name, "relu_bwd n%zu off%d", n, off);
    check(name, gx2, cd, NULL, n, 1);
    G->upload(gx2, x2, sizeof(float) * n);
    C->add(cy, x, x2, n);
    G->add(gy, gx, gx2, n);
    snprintf(name, sizeof name, "add n%zu off%d", n, off);
    check(name, gy, cy, NULL, n, 1);
    C->add(cy, cy, x, n);
    G->add(gy, gy, gx, n);
    check("add in place", gy, cy, NULL, n, 1);
    /* sgd: three steps with momentum, against the CPU */
    float *cp = copy_f(x, n), *cb = ddp_malloc(sizeof(float) * n);
    for (int step = 0; step < 3; step++) {
        C->sgd_step(cp, dy, 0.5f, NULL, cb, n, SGD_ARGS(0.05f, 0.9f, 1e-4f, 0, step == 0));
        G->sgd_step(gx, gdy, 0.5f, NULL, gy, n, SGD_ARGS(0.05f, 0.9f, 1e-4f, 0, step == 0));
    }
    snprintf(name, sizeof name, "sgd_step x3 n%zu off%d", n, off);
    check(name, gx, cp, NULL, n, 0);
    check("sgd_step momentum buffer", gy, cb, NULL, n, 0);
    G->free(bx), G->free(bx2), G->free(bdy), G->free(by);
    free(x), free(x2), free(dy), free(cy), free(cd), free(cp), free(cb);
}

/* The bias + relu epilogue (linear_relu_fwd's and conv2d_relu_fwd's) on float4 against the
 * scalar kernel: the output 1 float past an allocation takes the scalar one. B*O odd, O not
 * a multiple of 4, so vectors cross from one feature's run to the next. */
static void t_vec_bias_relu(int B, int Cin, int O)
{
    const size_t ni = (size_t)B * Cin, nw = (size_t)O * Cin, no = (size_t)B * O;
    float *x = gt_rnd(ni, 1), *w = gt_rnd(nw, 0.1f), *b = gt_rnd((size_t)O, 0.5f);
    float *gx = dev_f(x, ni), *gw = dev_f(w, nw), *gb = dev_f(b, (size_t)O);
    float *ga = G->alloc(sizeof(float) * (no + 4)), *gm = G->alloc(sizeof(float) * (no + 4));
    G->linear_relu_fwd(ga, gx, gw, gb, B, Cin, O);
    G->linear_relu_fwd(gm + 1, gx, gw, gb, B, Cin, O);
    check_same("bias_relu float4 vs misaligned", ga, gm + 1, no);
    float *cy = ddp_malloc(sizeof(float) * no);
    C->linear_fwd(cy, x, w, b, B, Cin, O);
    C->relu_fwd(cy, cy, no);
    check("linear_relu_fwd float4 vs cpu", ga, cy, NULL, no, 0);
    G->free(gx), G->free(gw), G->free(gb), G->free(ga), G->free(gm);
    free(x), free(w), free(b), free(cy);
}

/* The bias gradient's reduction over many rows (B x O, few features): against the CPU and the
 * float64 reference, and the same bits when run again (a fixed order of summation). */
static void t_bias_grad_rows(int B, int O)
{
    char name[96];
    const int Cin = 1;
    const size_t ni = (size_t)B * Cin, no = (size_t)B * O;
    float *x = gt_rnd(ni, 1), *w = gt_rnd((size_t)O, 0.1f), *dy = gt_rnd(no, 1);
    double *x64 = to_f64(x, ni), *w64 = to_f64(w, (size_t)O), *dy64 = to_f64(dy, no);
    float *gx = dev_f(x, ni), *gw = dev_f(w, (size_t)O), *gdy = dev_f(dy, no);
    float *cdw = ddp_malloc(sizeof(float) * O), *cdb = ddp_malloc(sizeof(float) * O);
    double *rdw = ddp_malloc(sizeof(double) * O), *rdb = ddp_malloc(sizeof(double) * O);
    memset(cdw, 0, sizeof(float) * O), memset(cdb, 0, sizeof(float) * O);
    memset(rdw, 0, sizeof(double) * O), memset(rdb, 0, sizeof(double) * O);
    float *gdw = G->alloc(sizeof(float) * O), *gdb = G->alloc(sizeof(float) * O);
    float *gdb2 = G->alloc(sizeof(float) * O);
    C->linear_bwd(NULL, cdw, cdb, dy, x, w, B, Cin, O);
    ddp_cpu_linear_bwd_f64(NULL, rdw, rdb, dy64, x64, w64, B, Cin, O);
    G->linear_bwd(NULL, gdw, gdb, gdy, gx, gw, B, Cin, O);
    G->linear_bwd(NULL, gdw, gdb2, gdy, gx, gw, B, Cin, O);
    snprintf(name, sizeof name, "linear_bwd db %dx%d", B, O);
    check(name, gdb, cdb, rdb, (size_t)O, 0);
    check_same("linear_bwd db run twice", gdb2, gdb, (size_t)O);
    G->free(gx), G->free(gw), G->free(gdy), G->free(gdw), G->free(gdb), G->free(gdb2);
    free(x), free(w), free(dy), free(x64), free(w64), free(dy64);
    free(cdw), free(cdb), free(rdw), free(rdb);
}

/* One training step's logits and gradients of `layers` on backend be (B samples of 1x28x28,
 * labels i % 10), downloaded into logits (B*10) and grads (*np); returns a description. */
static float *model_step(const struct ddp_backend *be, const char *layers, int B, float *logits,
                         size_t *np, char *desc, size_t len)
{
    struct ddp_model m;
    char err[DDP_ERR_LEN];
    const int64_t dims[3] = {1, 28, 28};
    if (ddp_model_create(&m, be, layers, 3, dims, B, err, sizeof err) != 0) {
        printf("FAIL model %s: %s\n", layers, err);
        g_fail++;
        return NULL;
    }
    ddp_model_init(&m, 42);
    { /* off PyTorch's init (batchnorm gamma 1, beta 0), so that no sign is a given */
        float *p = host_of(m.params, m.nparams), *e = gt_rnd(m.nparams, 0.5f);
        for (size_t i = 0; i < m.nparams; i++)
            p[i] += e[i];
        be->upload(m.params, p, sizeof(float) * m.nparams);
        free(p), free(e);
    }
    const size_t nx = (size_t)B * 784;
    float *x = gt_rnd(nx, 1);
    int32_t *lab = ddp_malloc(sizeof(int32_t) * B);
    for (int i = 0; i < B; i++)
        lab[i] = i % 10;
    float *gx = dev_f(x, nx);
    int32_t *glab = gt_up(lab, sizeof(int32_t) * B);
    const float *y = ddp_model_forward(&m, gx, B, 1, 7);
    be->xent(ddp_model_dlogits(&m), NULL, y, glab, B, 10, 1.0f / B, 0);
    ddp_model_backward(&m, gx, B, NULL, NULL);
    be->download(logits, y, sizeof(float) * B * 10);
    y = ddp_model_forward(&m, gx, B, 0, 7); /* evaluation: the running statistics */
    be->download(logits + B * 10, y, sizeof(float) * B * 10);
    float *g = host_of(m.grads, m.nparams);
    *np = m.nparams;
    /* the layers that run fused: 3 (conv2d, relu, maxpool), 5 (relu, maxpool), 6 (batchnorm,
     * relu), 8 (residual join, relu) */
    int fused = 0;
    for (int i = 0; i < m.nlayers; i++)
        fused += m.layers[i].fused == 3   ? 100
                 : m.layers[i].fused == 6 ? 1000
                 : m.layers[i].fused == 8 ? 10000
                                          : m.layers[i].fused == 5;
    snprintf(desc, len, "%d", fused);
    G->free(gx), G->free(glab);
    free(x), free(lab);
    ddp_model_free(&m);
    return g;
}

/* One training step of `layers` (batch B) through G and through plain (G with fused ops
 * removed): logits (train, eval) and gradients bit for bit; the fused layers G reports (a
 * number per kind, model_step) must be `fused`. */
static void model_fused_vs_plain(const char *name, const char *layers, int B,
                                 const struct ddp_backend *plain, int fused)
{
    float lf[180], lp[180];
    size_t nf = 0, np = 0;
    char df[512], dp[512], what[96];
    const uint64_t rng = g_rng;
    float *gf = model_step(G, layers, B, lf, &nf, df, sizeof df);
    g_rng = rng;
    float *gp = model_step(plain, layers, B, lp, &np, dp, sizeof dp);
    g_checks++;
    const int ok = gf && gp && nf == np && memcmp(lf, lp, sizeof(float) * 2 * B * 10) == 0 &&
                   memcmp(gf, gp, sizeof(float) * nf) == 0;
    snprintf(what, sizeof what, "model fused vs unfused %s", name);
    printf("%-4s %-34s n=%-9zu %s (fused layers %s vs %s)\n", ok ? "ok" : "FAIL", what, nf,
           ok ? "logits and gradients bit-identical" : "differ", df, dp);
    snprintf(what, sizeof what, "model layers fused (%s)", name);
    check_i(what, atoi(df), fused);
    g_fail += !ok;
    free(gf), free(gp);
}

/* A model with conv2d -> relu -> maxpool (fashion-cnn's blocks) and batchnorm -> relu ->
 * maxpool: the fused path (conv2d_relu_maxpool_fwd, relu_maxpool_fwd, maxpool_relu_bwd) gives
 * the logits (train, eval) and gradients of the unfused ops (a table without them), bit for
 * bit; conv+relu+pool and relu+pool are fused. */
static void t_model_fusion(void)
{
    if (!G->relu_maxpool_fwd)
        return;
    struct ddp_backend plain = *G;
    plain.relu_maxpool_fwd = NULL;
    plain.maxpool_relu_bwd = NULL;
    plain.conv2d_relu_maxpool_fwd = NULL;
    plain.maxpool_relu_bwd_db = NULL;
    plain.bn_relu_fwd_apply = NULL;
    model_fused_vs_plain("pools",
                         "conv2d(4, 5), relu, maxpool(2), conv2d(6, 3), batchnorm, relu, "
                         "maxpool(2), flatten, linear(16), relu, linear(10)",
                         9, &plain, 102);
    /* fashion-cnn's blocks (odd channels, a floor-mode pool): the pool's backward summing
     * the convolution's bias gradient (maxpool_relu_bwd_db) against conv2d_bwd summing it */
    struct ddp_backend nodb = *G;
    nodb.maxpool_relu_bwd_db = NULL;
    model_fused_vs_plain("pool bias",
                         "conv2d(5, 3), relu, maxpool(2), conv2d(7, 3, pad=1), relu, "
                         "maxpool(3), flatten, linear(16), relu, linear(10)",
                         7, &nodb, 202);
}

/* maxpool_relu_bwd_db's bias gradient against conv2d_bwd's own on the pool's input gradient
 * (the output of a convolution of B*P*CKK > COL_CHUNK_FLOATS: im2col runs it in 3 chunks of
 * samples). On cuDNN's path bit for bit. im2col adds each chunk's double sum into db as a
 * float, the fused op the whole batch's once: each of the 3 additions rounds once, so
 * |db - db'| <= 4 ulp-sized steps of (|db0| + sum |dinp|), 2^-22 of it; dinp bit for bit. */
static void t_pool_bias_chunks(void)
{
    if (!G->maxpool_relu_bwd_db)
        return;
    enum { B = 41, Cin = 160, H = 24, W = 24, O = 3, K = 2 };
    const struct ddp_conv_geom *g = CONV_GEOM(Cin, H, W, O, 3, 1, 1);
    const size_t ncol = G->conv_plan(B, g), nin = (size_t)B * Cin * H * W;
    const size_t ni = (size_t)B * O * H * W, no = (size_t)B * O * (H / K) * (W / K);
    float *x = gt_rnd(ni, 1), *dy = gt_rnd(no, 1), *db0 = gt_rnd(O, 1), *cx = gt_rnd(nin, 1);
    float *w = gt_rnd((size_t)O * Cin * 9, 0.1f);
    float *gx = dev_f(x, ni), *gdy = dev_f(dy, no), *gy = G->alloc(4 * no), *gdx = G->alloc(4 * ni);
    float *gdx2 = G->alloc(4 * ni), *gcx = dev_f(cx, nin), *gw = dev_f(w, (size_t)O * Cin * 9);
    float *gdw = G->alloc(4 * (size_t)O * Cin * 9), *gdb = dev_f(db0, O), *gdb2 = dev_f(db0, O);
    float *col = G->alloc(sizeof(float) * (ncol ? ncol : 1));
    uint8_t *a8 = G->alloc(no);
    G->relu_maxpool_fwd(gy, a8, gx, B, O, H, W, K);
    G->maxpool_relu_bwd(gdx, gdy, gy, a8, B, O, H, W, K);
    G->conv2d_bwd(NULL, gdw, gdb, col, gdx, gcx, gw, B, g);
    G->maxpool_relu_bwd_db(gdx2, gdb2, gdy, gy, a8, B, O, H, W, K);
    check_same("maxpool_relu_bwd_db dinp (3 chunks)", gdx2, gdx, ni);
    float *h = host_of(gdx, ni), *u = host_of(gdb, O), *f = host_of(gdb2, O);
    const int dnn = strncmp(g_conv_path, "cuDNN", 5) == 0;
    int ok = 1, exact = 1;
    for (int c = 0; c < O; c++) {
        double mag = fabs(db0[c]);
        for (int b = 0; b < B; b++)
            for (int p = 0; p < H * W; p++)
                mag += fabs(h[((size_t)b * O + c) * H * W + p]);
        exact &= u[c] == f[c];
        ok &= dnn ? u[c] == f[c] : fabs((double)u[c] - f[c]) <= mag * ldexp(1, -22);
    }
    g_checks++;
    g_fail += !ok;
    printf("%-4s %-34s n=%-9d %s (%s)\n", ok ? "ok" : "FAIL", "maxpool_relu_bwd_db db (3 chunks)",
           O, exact ? "bit for bit" : "within 2^-22 of sum |dinp|", g_conv_path);
    G->free(gx), G->free(gdy), G->free(gy), G->free(gdx), G->free(gdx2), G->free(gcx);
    G->free(gw), G->free(gdw), G->free(gdb), G->free(gdb2), G->free(col), G->free(a8);
    free(x), free(dy), free(db0), free(cx), free(w), free(h), free(u), free(f);
}

/* A model with batchnorm -> relu after a conv2d (ResNet's), in a residual block, after a
 * linear (S = 1) and before a maxpool (which keeps relu + maxpool): the bn_relu ops give the
 * logits (train, eval) and gradients of a table without them, bit for bit; 3 batchnorm+relu,
 * one relu+pool and (in both tables) the block's join+relu fused. */
static void t_model_bn_fusion(void)
{
    if (!G->bn_relu_fwd_apply)
        return;
    struct ddp_backend plain = *G;
    plain.bn_relu_fwd_apply = NULL;
    plain.bn_relu_bwd_sums = NULL;
    plain.bn_relu_bwd_apply = NULL;
    model_fused_vs_plain("batchnorm",
                         "conv2d(4, 3, pad=1), batchnorm, relu, residual(conv2d(4, 3, pad=1, "
                         "bias=false), batchnorm, relu, conv2d(4, 3, pad=1), batchnorm), relu, "
                         "conv2d(6, 3), batchnorm, relu, maxpool(2), flatten, linear(16), "
                         "batchnorm, relu, linear(10)",
                         7, &plain, 13001);
}

/* ResNet blocks, out = relu(body(x) + shortcut(x)): one at the model's input (its shortcut
 * gradient not wanted), one nested in another (the inner join adds into its shortcut's
 * gradient, which the outer join and the inner body also take: acc), a projection shortcut,
 * and a join whose relu feeds a maxpool (which keeps relu + maxpool, the join stays plain):
 * add_relu_fwd and relu_bwd_join give the logits (train, eval) and gradients of a table
 * without them, bit for bit; 4 joins+relu fused (and, in both tables, 2 batchnorm+relu and
 * one relu+pool). */
static void t_model_join_fusion(void)
{
    if (!G->add_relu_fwd)
        return;
    struct ddp_backend plain = *G;
    plain.add_relu_fwd = NULL;
    plain.relu_bwd_join = NULL;
    model_fused_vs_plain("joins",
                         "residual(conv2d(1, 3, pad=1), batchnorm, relu, conv2d(1, 3, pad=1)), "
                         "relu, conv2d(4, 3, pad=1), relu, residual(residual(conv2d(4, 3, pad=1, "
                         "bias=false), batchnorm), relu, conv2d(4, 3, pad=1)), relu, "
                         "residual(conv2d(6, 3, stride=2, pad=1), batchnorm, relu, conv2d(6, 3, "
                         "pad=1)), relu, residual(conv2d(6, 3, pad=1)), relu, maxpool(2), flatten, "
                         "linear(10)",
                         6, &plain, 42001);
}

/* out = d + g (acc) or g, the CPU's way: one join input's gradient, added into or copied. */
static void join_grad_ref(float *out, const float *d, const float *g, int acc, size_t n)
{
    if (acc)
        C->add(out, d, g, n);
    else
        memcpy(out, g, sizeof(float) * n);
}

/* The residual join + relu ops against the CPU's add and relu_fwd, relu_bwd and add (acc) or
 * a copy, bit for bit: pointers off floats past 16-byte alignment (1: the scalar kernels), n
 * not a multiple of 4 (the tail), every accumulate pattern, one gradient NULL, and one buffer
 * for both (overwritten, then added into: twice the gradient). */
static void t_join_relu(size_t n, int off)
{
    char name[96];
    if (!G->add_relu_fwd || !G->relu_bwd_join)
        return;
    float *a = gt_rnd(n, 1), *b = gt_rnd(n, 1), *dy = gt_rnd(n, 1), *d0 = gt_rnd(n, 1),
          *d1 = gt_rnd(n, 1);
    float *cy = ddp_malloc(sizeof(float) * n), *cg = ddp_malloc(sizeof(float) * n);
    float *ca = ddp_malloc(sizeof(float) * n), *cb = ddp_malloc(sizeof(float) * n);
    float *buf[6], *g[6]; /* a, b, dy, y, da, db */
    for (int k = 0; k < 6; k++)
        buf[k] = G->alloc(sizeof(float) * (n + 4)), g[k] = buf[k] + off;
    G->upload(g[0], a, sizeof(float) * n);
    G->upload(g[1], b, sizeof(float) * n);
    G->upload(g[2], dy, sizeof(float) * n);
    C->add(cy, a, b, n);
    C->relu_fwd(cy, cy, n);
    G->add_relu_fwd(g[3], g[0], g[1], n);
    snprintf(name, sizeof name, "add_relu_fwd n%zu off%d", n, off);
    check(name, g[3], cy, NULL, n, 1);
    C->relu_bwd(cg, dy, cy, n);
    for (int acc = 0; acc < 4; acc++) {
        G->upload(g[4], d0, sizeof(float) * n);
        G->upload(g[5], d1, sizeof(float) * n);
        G->relu_bwd_join(g[4], acc & 1, g[5], acc >> 1, g[2], g[3], n);
        join_grad_ref(ca, d0, cg, acc & 1, n);
        join_grad_ref(cb, d1, cg, acc >> 1, n);
        snprintf(name, sizeof name, "relu_bwd_join n%zu off%d acc %d %d", n, off, acc & 1,
                 acc >> 1);
        check(name, g[4], ca, NULL, n, 1);
        check("relu_bwd_join db", g[5], cb, NULL, n, 1);
    }
    G->upload(g[4], d0, sizeof(float) * n);
    G->relu_bwd_join(g[4], 1, NULL, 0, g[2], g[3], n);
    join_grad_ref(ca, d0, cg, 1, n);
    check("relu_bwd_join db NULL", g[4], ca, NULL, n, 1);
    G->relu_bwd_join(NULL, 0, g[5], 0, g[2], g[3], n);
    check("relu_bwd_join da NULL", g[5], cg, NULL, n, 1);
    G->relu_bwd_join(g[4], 0, g[4], 1, g[2], g[3], n);
    C->add(ca, cg, cg, n);
    check("relu_bwd_join da == db", g[4], ca, NULL, n, 1);
    for (int k = 0; k < 6; k++)
        G->free(buf[k]);
    free(a), free(b), free(dy), free(d0), free(d1), free(cy), free(cg), free(ca), free(cb);
}

/* Per-channel statistics of x (B,C,S) on the device into mean, invstd (batch statistics). */
static void dev_bn_stats(float *gmean, float *ginv, const float *gx, int B, int Cc, int S)
{
    const size_t c2 = 2 * (size_t)Cc + 1;
    double *sums = G->alloc(sizeof(double) * c2);
    float *rm = G->alloc(sizeof(float) * 2 * (size_t)Cc);
    G->bn_stats(sums, gx, B, Cc, S);
    G->bn_update(gmean, ginv, rm, rm + Cc, sums, Cc, 1e-5, 0.1);
    G->free(sums);
    G->free(rm);
}

/* Doubles in backend memory equal bit for bit. */
static void check_same_d(const char *op, const double *a_dev, const double *b_dev, size_t n)
{
    double *a = ddp_malloc(sizeof(double) * n), *b = ddp_malloc(sizeof(double) * n);
    G->download(a, a_dev, sizeof(double) * n);
    G->download(b, b_dev, sizeof(double) * n);
    const int ok = memcmp(a, b, sizeof(double) * n) == 0;
    g_checks++;
    printf("%-4s %-34s n=%-9zu %s\n", ok ? "ok" : "FAIL", op, n, ok ? "bit-identical" : "differ");
    g_fail += !ok;
    free(a), free(b);
}

/* The fused batchnorm + relu ops against bn_fwd_apply + relu_fwd (train and eval) and relu_bwd
 * + bn_bwd_sums + bn_bwd_apply on the GPU, bit for bit: out, xhat, the sums, dinp, dgamma,
 * dbeta. gamma has both signs so that the relu's mask differs from xhat's. */
static void t_bn_relu(int B, int Cc, int S)
{
    char name[96];
    if (!G->bn_relu_fwd_apply || !G->bn_relu_bwd_sums || !G->bn_relu_bwd_apply)
        return;
    const size_t n = (size_t)B * Cc * S, c = (size_t)Cc, c2 = 2 * c + 1;
    float *x = gt_rnd(n, 2), *dy = gt_rnd(n, 1), *gamma = gt_rnd(c, 1), *beta = gt_rnd(c, 0.5f);
    float *gx = dev_f(x, n), *gdy = dev_f(dy, n), *ggam = dev_f(gamma, c), *gbet = dev_f(beta, c);
    float *gmean = G->alloc(sizeof(float) * c), *ginv = G->alloc(sizeof(float) * c);
    dev_bn_stats(gmean, ginv, gx, B, Cc, S);
    float *gy = G->alloc(sizeof(float) * n), *gr = G->alloc(sizeof(float) * n),
          *gxh = G->alloc(sizeof(float) * n), *gf = G->alloc(sizeof(float) * n),
          *gxhf = G->alloc(sizeof(float) * n);
    G->bn_fwd_apply(gy, gxh, gx, gmean, ginv, ggam, gbet, B, Cc, S); /* the unfused path */
    G->relu_fwd(gr, gy, n);
    G->bn_relu_fwd_apply(gf, gxhf, gx, gmean, ginv, ggam, gbet, B, Cc, S);
    snprintf(name, sizeof name, "bn_relu_fwd_apply B%d C%d S%d", B, Cc, S);
    check_same(name, gf, gr, n);
    check_same("bn_relu_fwd_apply xhat", gxhf, gxh, n);
    G->bn_relu_fwd_apply(gf, NULL, gx, gmean, ginv, ggam, gbet, B, Cc, S); /* eval */
    check_same("bn_relu_fwd_apply out, no xhat", gf, gr, n);

    double *s1 = G->alloc(sizeof(double) * c2), *s2 = G->alloc(sizeof(double) * c2);
    float *gd = G->alloc(sizeof(float) * n);
    G->relu_bwd(gd, gdy, gr, n);
    G->bn_bwd_sums(s1, gd, gxh, B, Cc, S);
    G->bn_relu_bwd_sums(s2, gdy, gr, gxh, B, Cc, S);
    check_same_d("bn_relu_bwd_sums", s2, s1, c2);
    /* global sums differ from local ones (SyncBatchNorm), the count too */
    double *glob = ddp_malloc(sizeof(double) * c2), *gglob = G->alloc(sizeof(double) * c2);
    G->download(glob, s1, sizeof(double) * c2);
    for (size_t i = 0; i + 1 < c2; i++)
        glob[i] = glob[i] * 1.7 + 0.1;
    glob[c2 - 1] *= 2;
    G->upload(gglob, glob, sizeof(double) * c2);
    float *dg0 = gt_rnd(c, 0.1f), *db0 = gt_rnd(c, 0.1f);
    float *gdx = G->alloc(sizeof(float) * n), *gdg = dev_f(dg0, c), *gdb = dev_f(db0, c);
    float *gdxf = G->alloc(sizeof(float) * n), *gdgf = dev_f(dg0, c), *gdbf = dev_f(db0, c);
    G->bn_bwd_apply(gdx, gdg, gdb, gd, gxh, ginv, ggam, s1, gglob, B, Cc, S);
    G->bn_relu_bwd_apply(gdxf, gdgf, gdbf, gdy, gr, gxh, ginv, ggam, s2, gglob, B, Cc, S);
    check_same("bn_relu_bwd_apply dinp", gdxf, gdx, n);
    check_same("bn_relu_bwd_apply dgamma (+=)", gdgf, gdg, c);
    check_same("bn_relu_bwd_apply dbeta (+=)", gdbf, gdb, c);
    G->bn_relu_bwd_apply(NULL, gdgf, gdbf, gdy, gr, gxh, ginv, ggam, s2, gglob, B, Cc, S);
    G->bn_bwd_apply(NULL, gdg, gdb, gd, gxh, ginv, ggam, s1, gglob, B, Cc, S);
    check_same("bn_relu_bwd_apply dgamma, no dinp", gdgf, gdg, c);
    G->free(gx), G->free(gdy), G->free(ggam), G->free(gbet), G->free(gmean), G->free(ginv);
    G->free(gy), G->free(gr), G->free(gxh), G->free(gf), G->free(gxhf), G->free(s1);
    G->free(s2), G->free(gd), G->free(gglob), G->free(gdx), G->free(gdg), G->free(gdb);
    G->free(gdxf), G->free(gdgf), G->free(gdbf);
    free(x), free(dy), free(gamma), free(beta), free(glob), free(dg0), free(db0);
}

/* bn_update, train (from the sums cs, on the CPU; gsd, the same on the device) and eval:
 * mean, invstd and the running statistics bit for bit (both compute in double). */
static void t_bn_update(const double *cs, const double *gsd, int Cc)
{
    const size_t c = (size_t)Cc;
    float *rm = gt_rnd(c, 1), *rv = gt_rnd(c, 1), *mean = ddp_malloc(sizeof(float) * c),
          *inv = ddp_malloc(sizeof(float) * c);
    for (size_t i = 0; i < c; i++)
        rv[i] = 0.5f + rv[i] * rv[i];
    float *grm = dev_f(rm, c), *grv = dev_f(rv, c), *gmean = G->alloc(sizeof(float) * c),
          *ginv = G->alloc(sizeof(float) * c);
    for (int train = 1; train >= 0; train--) {
        C->bn_update(mean, inv, rm, rv, train ? cs : NULL, Cc, 1e-5, 0.1);
        G->bn_update(gmean, ginv, grm, grv, train ? gsd : NULL, Cc, 1e-5, 0.1);
        check(train ? "bn_update mean" : "bn_update mean, eval", gmean, mean, NULL, c, 0);
        check(train ? "bn_update invstd" : "bn_update invstd, eval", ginv, inv, NULL, c, 0);
        check("bn_update running mean", grm, rm, NULL, c, 0);
        check("bn_update running var", grv, rv, NULL, c, 0);
    }
    G->free(grm);
    G->free(grv);
    G->free(gmean);
    G->free(ginv);
    free(rm);
    free(rv);
    free(mean);
    free(inv);
}

/* Residual blocks' ops: global average pool (fwd, bwd) and the join's add (exact). */
static void t_residual_ops(int B, int Cc, int S)
{
    char name[96];
    const size_t n = (size_t)B * Cc * S, bc = (size_t)B * Cc;
    float *x = gt_rnd(n, 2), *x2 = gt_rnd(n, 2), *dy = gt_rnd(bc, 1);
    float *gx = dev_f(x, n), *gx2 = dev_f(x2, n), *gdy = dev_f(dy, bc);
    float *cy = ddp_malloc(sizeof(float) * n), *cdx = ddp_malloc(sizeof(float) * n);
    float *gy = G->alloc(sizeof(float) * n), *gdx = G->alloc(sizeof(float) * n);
    C->gap_fwd(cy, x, B, Cc, S);
    G->gap_fwd(gy, gx, B, Cc, S);
    snprintf(name, sizeof name, "gap_fwd B%d C%d S%d", B, Cc, S);
    check(name, gy, cy, NULL, bc, 0);
    C->gap_bwd(cdx, dy, B, Cc, S);
    G->gap_bwd(gdx, gdy, B, Cc, S);
    check("gap_bwd", gdx, cdx, NULL, n, 1);
    C->add(cy, x, x2, n);
    G->add(gy, gx, gx2, n);
    check("add", gy, cy, NULL, n, 1);
    C->add(cy, cy, x, n); /* in place, as backward accumulates */
    G->add(gy, gy, gx, n);
    check("add in place", gy, cy, NULL, n, 1);
    G->free(gx);
    G->free(gx2);
    G->free(gdy);
    G->free(gy);
    G->free(gdx);
    free(x), free(x2), free(dy), free(cy), free(cdx);
}

static void t_batchnorm(int B, int Cc, int S)
{
    char name[96];
    const size_t n = (size_t)B * Cc * S, c2 = 2 * (size_t)Cc + 1; /* sums and the count */
    float *x = gt_rnd(n, 2), *dy = gt_rnd(n, 1), *gamma = gt_rnd((size_t)Cc, 1),
          *beta = gt_rnd((size_t)Cc, 1);
    for (size_t i = 0; i < n; i++)
        x[i] += 0.5f; /* a mean away from 0 */
    float *gx = dev_f(x, n), *gdy = dev_f(dy, n), *ggam = dev_f(gamma, (size_t)Cc),
          *gbet = dev_f(beta, (size_t)Cc);
    double *cs = ddp_malloc(sizeof(double) * c2), *gs = ddp_malloc(sizeof(double) * c2);
    double *gsd = G->alloc(sizeof(double) * c2); /* the GPU's sums stay on the device */
    C->bn_stats(cs, x, B, Cc, S);
    G->bn_stats(gsd, gx, B, Cc, S);
    G->download(gs, gsd, sizeof(double) * c2);
    snprintf(name, sizeof name, "bn_stats B%d C%d S%d", B, Cc, S);
    check_d(name, gs, cs, c2);
    t_bn_update(cs, gsd, Cc);

    /* mean and invstd from the CPU's sums, as model.c computes them */
    const double count = (double)B * S;
    float *mean = ddp_malloc(sizeof(float) * (size_t)Cc),
          *inv = ddp_malloc(sizeof(float) * (size_t)Cc);
    for (int c = 0; c < Cc; c++) {
        double mu = cs[c] / count, var = cs[Cc + c] / count - mu * mu;
        mean[c] = (float)mu;
        inv[c] = (float)(1.0 / sqrt((var > 0 ? var : 0) + 1e-5));
    }
    float *gmean = dev_f(mean, (size_t)Cc), *ginv = dev_f(inv, (size_t)Cc);
    float *cy = ddp_malloc(sizeof(float) * n), *cxh = ddp_malloc(sizeof(float) * n);
    float *gy = G->alloc(sizeof(float) * n), *gxh = G->alloc(sizeof(float) * n);
    C->bn_fwd_apply(cy, cxh, x, mean, inv, gamma, beta, B, Cc, S);
    G->bn_fwd_apply(gy, gxh, gx, gmean, ginv, ggam, gbet, B, Cc, S);
    check("bn_fwd_apply out", gy, cy, NULL, n, 0);
    check("bn_fwd_apply xhat", gxh, cxh, NULL, n, 0);
    G->bn_fwd_apply(gy, NULL, gx, gmean, ginv, ggam, gbet, B, Cc, S); /* eval: no xhat */
    check("bn_fwd_apply out, no xhat", gy, cy, NULL, n, 0);

    C->bn_bwd_sums(cs, dy, cxh, B, Cc, S);
    G->bn_bwd_sums(gsd, gdy, gxh, B, Cc, S);
    G->download(gs, gsd, sizeof(double) * c2);
    check_d("bn_bwd_sums", gs, cs, c2);

    /* global sums differ from local ones (SyncBatchNorm), the count too */
    double *glob = ddp_malloc(sizeof(double) * c2);
    for (size_t i = 0; i < c2; i++)
        glob[i] = cs[i] * 1.7 + 0.1;
    glob[c2 - 1] = 2 * count;
    double *gglob = G->alloc(sizeof(double) * c2), *gcs = G->alloc(sizeof(double) * c2);
    G->upload(gglob, glob, sizeof(double) * c2);
    G->upload(gcs, cs, sizeof(double) * c2);
    float *dg0 = gt_rnd((size_t)Cc, 0.1f), *db0 = gt_rnd((size_t)Cc, 0.1f);
    float *cdx = ddp_malloc(sizeof(float) * n), *cdg = copy_f(dg0, (size_t)Cc),
          *cdb = copy_f(db0, (size_t)Cc);
    float *gdx = G->alloc(sizeof(float) * n), *gdg = dev_f(dg0, (size_t)Cc),
          *gdb = dev_f(db0, (size_t)Cc);
    C->bn_bwd_apply(cdx, cdg, cdb, dy, cxh, inv, gamma, cs, glob, B, Cc, S);
    G->bn_bwd_apply(gdx, gdg, gdb, gdy, gxh, ginv, ggam, gcs, gglob, B, Cc, S);
    check("bn_bwd_apply dinp", gdx, cdx, NULL, n, 0);
    check("bn_bwd_apply dgamma (+=)", gdg, cdg, NULL, (size_t)Cc, 0);
    check("bn_bwd_apply dbeta (+=)", gdb, cdb, NULL, (size_t)Cc, 0);
    C->bn_bwd_apply(NULL, cdg, cdb, dy, cxh, inv, gamma, cs, glob, B, Cc, S);
    G->bn_bwd_apply(NULL, gdg, gdb, gdy, gxh, ginv, ggam, gcs, gglob, B, Cc, S);
    check("bn_bwd_apply dgamma, no dinp", gdg, cdg, NULL, (size_t)Cc, 0);
    G->free(gsd);
    G->free(gglob);
    G->free(gcs);

    G->free(gx);
    G->free(gdy);
    G->free(ggam);
    G->free(gbet);
    G->free(gmean);
    G->free(ginv);
    G->free(gy);
    G->free(gxh);
    G->free(gdx);
    G->free(gdg);
    G->free(gdb);
    free(x);
    free(dy);
    free(gamma);
    free(beta);
    free(cs);
    free(gs);
    free(mean);
    free(inv);
    free(cy);
    free(cxh);
    free(glob);
    free(dg0);
    free(db0);
    free(cdx);
    free(cdg);
    free(cdb);
}

/* [optim] clip_grad_norm's sum of squares: the same as the CPU's within 1e-10 relative. */
static void t_sumsq(size_t n)
{
    char name[64];
    float *x = gt_rnd(n, 9), *gx = dev_f(x, n);
    double c = C->sumsq(x, n), g = G->sumsq(gx, n);
    snprintf(name, sizeof name, "sumsq n%zu", n);
    check_d(name, &g, &c, 1);
    G->free(gx);
    free(x);
}

/* [optim] clip_grad_norm on the device (clip_scale): the factor is the host's arithmetic on
 * the device's sum of squares, bit for bit (clipping, and not: max_norm above the norm), and
 * the optimisers reading it from device memory give the bits of passing it by value. */
static void t_clip(size_t n)
{
    if (!G->clip_scale) {
        printf("FAIL clip_scale: missing from the GPU backend\n");
        g_fail++;
        return;
    }
    float *g = gt_rnd(n, 1), *gg = dev_f(g, n), *p = gt_rnd(n, 1);
    const float grad_scale = 0.5f;
    const double norm = sqrt(G->sumsq(gg, n)) * (double)grad_scale;
    const double maxes[2] = {0.25 * norm, 4 * norm};
    float *gs = G->alloc(sizeof(float));
    for (int k = 0; k < 2; k++) {
        G->clip_scale(gs, gg, n, grad_scale, maxes[k]);
        float got;
        G->download(&got, gs, sizeof got);
        const double coef = maxes[k] / (norm + 1e-6);
        const float clip = coef < 1 ? (float)coef : 1.0f;
        const float want = clip == 1.0f ? grad_scale : grad_scale * clip;
        char name[64];
        snprintf(name, sizeof name, "clip_scale %s", k ? "(no clipping)" : "(clips)");
        check(name, gs, &want, NULL, 1, 1);
        float *a = dev_f(p, n), *b = dev_f(p, n), *ba = G->alloc(sizeof(float) * n),
              *bb = G->alloc(sizeof(float) * n), *va = G->alloc(sizeof(float) * n),
              *vb = G->alloc(sizeof(float) * n);
        G->sgd_step(a, gg, 0, gs, ba, n, SGD_ARGS(0.05f, 0.9f, 1e-4f, 1, 1));
        G->sgd_step(b, gg, got, NULL, bb, n, SGD_ARGS(0.05f, 0.9f, 1e-4f, 1, 1));
        float *hb = host_of(b, n);
        check("sgd_step, gscale on the device", a, hb, NULL, n, 1);
        free(hb);
        G->adam_step(a, gg, 0, gs, ba, va, n, ADAM_ARGS(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 1));
        G->adam_step(b, gg, got, NULL, bb, vb, n,
                     ADAM_ARGS(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 1));
        hb = host_of(b, n);
        check("adam_step, gscale on the device", a, hb, NULL, n, 1);
        free(hb);
        G->free(a);
        G->free(b);
        G->free(ba);
        G->free(bb);
        G->free(va);
        G->free(vb);
    }
    G->free(gs);
    G->free(gg);
    free(g);
    free(p);
}

/* uint8 input: u8_to_float against the CPU loader's own conversion (h5data.c) and [data]
 * normalize (augment.c), bit for bit; every byte value occurs. nchan 0: conversion only. */
static void t_u8_to_float(int B, int Cc, int H, int W, int nchan)
{
    char name[96];
    const size_t S = (size_t)H * W, n = (size_t)B * Cc * S;
    uint8_t *u = ddp_malloc(n);
    for (size_t i = 0; i < n; i++)
        u[i] = i < 256 ? (uint8_t)i : (uint8_t)(gt_uniform() * 256);
    struct ddp_augment a;
    memset(&a, 0, sizeof a);
    a.C = Cc;
    a.H = H;
    a.W = W;
    a.nchan = nchan;
    for (int c = 0; c < nchan; c++) { /* torchvision's usual statistics and odd ones */
        a.mean[c] = c == 0 ? 0.2860f : (float)(0.1 + gt_uniform() * 0.8);
        a.std[c] = c == 0 ? 0.3530f : (float)(0.05 + gt_uniform() * 0.5);
    }
    float *cpu = ddp_malloc(sizeof(float) * n), *scratch = ddp_malloc(sizeof(float) * Cc * S);
    int64_t *idx = ddp_calloc((size_t)B, sizeof *idx);
    ddp_h5_u8_to_float(u, cpu, n);
    ddp_augment_apply(&a, cpu, B, idx, 0, scratch);
    snprintf(name, sizeof name, "u8_to_float B%d C%d S%zu norm%d", B, Cc, S, nchan);
    if (!G->u8_to_float) {
        g_checks++;
        g_fail++;
        printf("FAIL %-34s the backend has no u8_to_float\n", name);
    } else {
        uint8_t *gu = gt_up(u, n);
        float *gout = G->alloc(sizeof(float) * n);
        G->u8_to_float(gout, gu, n, Cc, (int)S, a.nchan, a.mean, a.std);
        check(name, gout, cpu, NULL, n, 1);
        G->free(gout);
        G->free(gu);
    }
    free(u);
    free(cpu);
    free(scratch);
    free(idx);
}

static void t_xent(int B, int K, float smoothing)
{
    char name[96];
    const size_t n = (size_t)B * K;
    float *z = gt_rnd(n, 5);
    int32_t *y = ddp_malloc(sizeof(int32_t) * (size_t)B);
    for (int i = 0; i < B; i++)
        y[i] = (int32_t)(gt_uniform() * K);
    if (K > 3) { /* a tie for the maximum in row 0: the first one counts */
        z[1] = z[3] = 100;
        y[0] = 1;
    }
    if (B > 1 && K > 3) {
        z[K + 1] = z[K + 2] = 100;
        y[1] = 2; /* not the first maximum: wrong */
    }
    float *gz = dev_f(z, n);
    int32_t *gy = gt_up(y, sizeof(int32_t) * (size_t)B);
    float *cd = ddp_malloc(sizeof(float) * n), *gd = G->alloc(sizeof(float) * n);
    int64_t cc = -1, gc = -1;
    const float scale = 1.0f / (float)B;
    double cl = C->xent(cd, &cc, z, y, B, K, scale, smoothing);
    double gl = G->xent(gd, &gc, gz, gy, B, K, scale, smoothing);
    snprintf(name, sizeof name, "xent loss B%d K%d smoothing %g", B, K, smoothing);
    check_d(name, &gl, &cl, 1);
    check_i("xent correct", gc, cc);
    check("xent dlogits", gd, cd, NULL, n, 0);
    gc = -1;
    gl = G->xent(NULL, &gc, gz, gy, B, K, 0, smoothing);
    check_d("xent loss, no dlogits", &gl, &cl, 1);
    check_i("xent correct, no dlogits", gc, cc);
    /* the device accumulator: twice the batch on top of (1, 2) */
    const double acc0[2] = {1, 2};
    double acc[2], *gacc = G->alloc(sizeof acc);
    G->upload(gacc, acc0, sizeof acc);
    G->xent_acc(gd, gacc, gz, gy, B, K, scale, smoothing);
    G->xent_acc(NULL, gacc, gz, gy, B, K, scale, smoothing);
    G->download(acc, gacc, sizeof acc);
    const double want = 1 + 2 * cl;
    check_d("xent_acc loss sum (+=)", &acc[0], &want, 1);
    check_i("xent_acc correct (+=)", (long long)acc[1], 2 + 2 * cc);
    check("xent_acc dlogits", gd, cd, NULL, n, 0);
    G->free(gacc);
    G->free(gz);
    G->free(gy);
    G->free(gd);
    free(z);
    free(y);
    free(cd);
}

static void t_optim(size_t n)
{
    char name[96];
    float *p = gt_rnd(n, 1), *g = gt_rnd(n, 1);
    float *gg = dev_f(g, n);
    for (int nesterov = 0; nesterov <= 1; nesterov++) {
        float *cp = copy_f(p, n), *cb = ddp_malloc(sizeof(float) * n);
        float *gpp = dev_f(p, n), *gb = G->alloc(sizeof(float) * n);
        for (int step = 0; step < 3; step++) {
            C->sgd_step(cp, g, 0.5f, NULL, cb, n,
                        SGD_ARGS(0.05f, 0.9f, 1e-4f, nesterov, step == 0));
            G->sgd_step(gpp, gg, 0.5f, NULL, gb, n,
                        SGD_ARGS(0.05f, 0.9f, 1e-4f, nesterov, step == 0));
        }
        snprintf(name, sizeof name, "sgd_step x3 nesterov=%d params", nesterov);
        check(name, gpp, cp, NULL, n, 0);
        check("sgd_step momentum buffer", gb, cb, NULL, n, 0);
        free(cp);
        free(cb);
        G->free(gpp);
        G->free(gb);
    }
    {
        float *cp = copy_f(p, n);
        float *gpp = dev_f(p, n);
        C->sgd_step(cp, g, 1, NULL, NULL, n, SGD_ARGS(0.1f, 0, 0, 0, 1));
        G->sgd_step(gpp, gg, 1, NULL, NULL, n, SGD_ARGS(0.1f, 0, 0, 0, 1));
        check("sgd_step plain", gpp, cp, NULL, n, 0);
        free(cp);
        G->free(gpp);
    }
    for (int decoupled = 0; decoupled <= 1; decoupled++) {
        float *cp = copy_f(p, n), *cm = ddp_malloc(sizeof(float) * n),
              *cv = ddp_malloc(sizeof(float) * n);
        memset(cm, 0, sizeof(float) * n);
        memset(cv, 0, sizeof(float) * n);
        float *gpp = dev_f(p, n), *gm = G->alloc(sizeof(float) * n),
              *gv = G->alloc(sizeof(float) * n);
        for (int64_t t = 1; t <= 3; t++) {
            C->adam_step(cp, g, 0.25f, NULL, cm, cv, n,
                         ADAM_ARGS(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, decoupled, t));
            G->adam_step(gpp, gg, 0.25f, NULL, gm, gv, n,
                         ADAM_ARGS(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, decoupled, t));
        }
        snprintf(name, sizeof name, "adam_step x3 decoupled=%d params", decoupled);
        check(name, gpp, cp, NULL, n, 0);
        check("adam_step m", gm, cm, NULL, n, 0);
        check("adam_step v", gv, cv, NULL, n, 0);
        free(cp);
        free(cm);
        free(cv);
        G->free(gpp);
        G->free(gm);
        G->free(gv);
    }
    G->free(gg);
    free(p);
    free(g);
}

/* One step of a tiny model, the per-step values as a training step passes them. */
struct graph_case {
    float *x, *w, *b, *dy, *y, *yd, *mask, *dx, *dw, *db, *buf, *m, *v;
};

static void graph_ops(const struct ddp_backend *be, const struct graph_case *c, int B, int Cin,
                      int O, const struct ddp_graph_scalars *sc)
{
    const size_t nw = (size_t)O * Cin, no = (size_t)B * O;
    be->zero(c->dw, nw);
    be->zero(c->db, (size_t)O);
    be->linear_fwd(c->y, c->x, c->w, c->b, B, Cin, O);
    be->dropout_fwd(c->yd, c->mask, c->y, no, 0.3f, sc->noise ^ 0xd1b54a32d192ed03ULL);
    be->linear_bwd(c->dx, c->dw, c->db, c->dy, c->x, c->w, B, Cin, O);
    be->sgd_step(c->w, c->dw, 0.5f, NULL, c->buf, nw,
                 SGD_ARGS(sc->lr, sc->momentum, 1e-4f, 1, sc->t == 1));
    be->adam_step(c->b, c->db, 0.5f, NULL, c->m, c->v, (size_t)O,
                  ADAM_ARGS(sc->lr, sc->beta1, 0.999f, 1e-8f, 0.01f, 1, sc->t));
}

static void graph_case_make(const struct ddp_backend *be, struct graph_case *c, const float *x,
                            const float *w, const float *b, const float *dy, int B, int Cin, int O)
{
    const size_t ni = (size_t)B * Cin, nw = (size_t)O * Cin, no = (size_t)B * O;
    const int dev = be != C;
    float **bufs[] = {&c->y, &c->yd, &c->mask, &c->dx, &c->dw, &c->db, &c->buf, &c->m, &c->v};
    const size_t sizes[] = {no, no, no, ni, nw, (size_t)O, nw, (size_t)O, (size_t)O};
    for (int i = 0; i < 9; i++) {
        *bufs[i] = be->alloc(sizeof(float) * sizes[i]);
        if (!dev)
            memset(*bufs[i], 0, sizeof(float) * sizes[i]);
    }
    c->x = dev ? dev_f(x, ni) : copy_f(x, ni);
    c->w = dev ? dev_f(w, nw) : copy_f(w, nw);
    c->b = dev ? dev_f(b, (size_t)O) : copy_f(b, (size_t)O);
    c->dy = dev ? dev_f(dy, no) : copy_f(dy, no);
}

/* CUDA Graphs: a step (linear forward and backward, dropout, SGD with momentum and AdamW)
 * captured once and replayed with another lr, momentum, beta1, t and seed each step equals
 * the same ops run uncaptured on the GPU bit for bit, and the CPU backend's as the ops do. */
static void t_graph(int B, int Cin, int O)
{
    if (!G->graph_launch) {
        printf("FAIL graph: the CUDA backend has no graph ops\n");
        g_fail++;
        return;
    }
    const size_t nw = (size_t)O * Cin, no = (size_t)B * O;
    float *x = gt_rnd((size_t)B * Cin, 1), *w = gt_rnd(nw, 0.1f), *b = gt_rnd((size_t)O, 0.1f),
          *dy = gt_rnd(no, 1);
    struct graph_case cc, gu, gc;
    graph_case_make(C, &cc, x, w, b, dy, B, Cin, O);
    graph_case_make(G, &gu, x, w, b, dy, B, Cin, O);
    graph_case_make(G, &gc, x, w, b, dy, B, Cin, O);
    char err[DDP_ERR_LEN];
    for (int64_t t = 1; t <= 4; t++) {
        const struct ddp_graph_scalars sc = {0.05f * (float)t, 0.9f - 0.01f * (float)t,
                                             0.85f + 0.02f * (float)t, t,
                                             0x1234567ULL * (uint64_t)t};
        graph_ops(C, &cc, B, Cin, O, &sc);
        graph_ops(G, &gu, B, Cin, O, &sc); /* first: the workspace grows outside the capture */
        if (t == 1) {
            if (G->graph_capture_begin(0, &sc, err, sizeof err) != 0 ||
                (graph_ops(G, &gc, B, Cin, O, &sc), G->graph_capture_end(0, err, sizeof err)) !=
                    0) {
                printf("FAIL graph capture: %s\n", err);
                g_fail++;
                return;
            }
        }
        G->graph_launch(0, &sc);
    }
    const float *cpu[] = {cc.w, cc.b, cc.buf, cc.m, cc.v, cc.yd};
    const float *unc[] = {gu.w, gu.b, gu.buf, gu.m, gu.v, gu.yd};
    const float *cap[] = {gc.w, gc.b, gc.buf, gc.m, gc.v, gc.yd};
    const char *what[] = {"weights (sgd)", "bias (adamw)", "momentum",
                          "adam m",        "adam v",       "dropout output"};
    const size_t n[] = {nw, (size_t)O, nw, (size_t)O, (size_t)O, no};
    char name[96];
    for (int i = 0; i < 6; i++) {
        float *u = host_of(unc[i], n[i]);
        snprintf(name, sizeof name, "graph x4 %s = uncaptured", what[i]);
        check(name, cap[i], u, NULL, n[i], 1);
        snprintf(name, sizeof name, "graph x4 %s vs cpu", what[i]);
        check(name, cap[i], cpu[i], NULL, n[i], 0);
        free(u);
    }
    free(x);
    free(w);
    free(b);
    free(dy);
}

/* TF32 GEMMs: a smoke check with a TF32-sized tolerance (10-bit mantissa). */
static void t_tf32(void)
{
    char err[DDP_ERR_LEN];
    if (!ddp_backend_cuda(0, 1, err, sizeof err)) {
        printf("FAIL tf32: %s\n", err);
        g_fail++;
        return;
    }
    const int B = 64, Cin = 512, O = 128;
    const size_t ni = (size_t)B * Cin, nw = (size_t)O * Cin, no = (size_t)B * O;
    float *x = gt_rnd(ni, 1), *w = gt_rnd(nw, 0.1f), *b = gt_rnd((size_t)O, 0.1f);
    float *gx = dev_f(x, ni), *gw = dev_f(w, nw), *gb = dev_f(b, (size_t)O);
    float *cy = ddp_malloc(sizeof(float) * no), *gy = G->alloc(sizeof(float) * no);
    C->linear_fwd(cy, x, w, b, B, Cin, O);
    G->linear_fwd(gy, gx, gw, gb, B, Cin, O);
    float *h = host_of(gy, no);
    double ncpu, e = norm_diff(h, cy, no, &ncpu);
    e /= ncpu;
    const int ok = e < 5e-3 && isfinite(e);
    g_checks++;
    printf("%-4s %-34s n=%-9zu err %.2e (limit 5e-03, tf32)\n", ok ? "ok" : "FAIL",
           "linear_fwd tf32", no, e);
    g_fail += !ok;
    ddp_backend_cuda(0, 0, err, sizeof err); /* back to fp32 */
    G->free(gx);
    G->free(gw);
    G->free(gb);
    G->free(gy);
    free(x);
    free(w);
    free(b);
    free(cy);
    free(h);
}

/* ---- bf16 ([train] precision = bf16) ------------------------------------------------------
 * The GEMMs of linear and conv2d take bf16 operands with fp32 accumulation and results. Each
 * output is checked twice: against the CPU backend fed the GEMM operands rounded to bf16 here
 * (round to nearest even), tight (TOL_BF16_EXACT: the products of bf16 values are exact in
 * fp32, so only the order of the sums differs: this shows the rounding happens exactly, and only,
 * on the operands), and against the plain fp32 CPU, loose (TOL_BF16: bf16's 8-bit mantissa).
 * Bias gradients are sums of the fp32 output gradient: tight against the plain CPU. */

#define TOL_BF16_EXACT 1e-5
#define TOL_BF16 1e-2

static float *bf16_copy(const float *x, size_t n)
{
    float *y = ddp_malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        y[i] = gt_bf16_round(x[i]);
    return y;
}

/* Normalised error of a GPU output (device) against cpu (host), limit tol; what says which. */
static void check_near(const char *op, const float *gpu_dev, const float *cpu, size_t n, double tol,
                       const char *what)
{
    float *gpu = host_of(gpu_dev, n);
    double ncpu, e = norm_diff(gpu, cpu, n, &ncpu);
    e = ncpu > 0 ? e / ncpu : e;
    const int ok = e <= tol && isfinite(e);
    g_checks++;
    printf("%-4s %-34s n=%-9zu err %.2e (limit %.0e, %s)\n", ok ? "ok" : "FAIL", op, n, e, tol,
           what);
    g_fail += !ok;
    free(gpu);
}

/* A GPU output against the CPU's on bf16-rounded operands (tight) and on fp32 ones (loose). */
static void check_bf16(const char *op, const float *gpu_dev, const float *cpu_rounded,
                       const float *cpu_fp32, size_t n)
{
    check_near(op, gpu_dev, cpu_rounded, n, TOL_BF16_EXACT, "bf16 vs cpu on bf16 operands");
    check_near(op, gpu_dev, cpu_fp32, n, TOL_BF16, "bf16 vs cpu fp32");
}

static void t_linear_bf16(int B, int Cin, int O)
{
    char name[96];
    const size_t ni = (size_t)B * Cin, nw = (size_t)O * Cin, no = (size_t)B * O;
    float *x = gt_rnd(ni, 1), *w = gt_rnd(nw, 0.1f), *b = gt_rnd((size_t)O, 0.1f),
          *dy = gt_rnd(no, 1);
    float *dw0 = gt_rnd(nw, 0.01f), *db0 = gt_rnd((size_t)O, 0.01f);
    float *xr = bf16_copy(x, ni), *wr = bf16_copy(w, nw), *dyr = bf16_copy(dy, no);
    float *gx = dev_f(x, ni), *gw = dev_f(w, nw), *gb = dev_f(b, (size_t)O), *gdy = dev_f(dy, no);
    float *cy = ddp_malloc(sizeof(float) * no), *cyr = ddp_malloc(sizeof(float) * no);
    float *gy = G->alloc(sizeof(float) * no);
    C->linear_fwd(cy, x, w, b, B, Cin, O);
    C->linear_fwd(cyr, xr, wr, b, B, Cin, O); /* the bias is added in fp32 */
    G->linear_fwd(gy, gx, gw, gb, B, Cin, O);
    snprintf(name, sizeof name, "bf16 linear_fwd %dx%d->%d", B, Cin, O);
    check_bf16(name, gy, cyr, cy, no);

    float *cdx = ddp_malloc(sizeof(float) * ni), *cdw = copy_f(dw0, nw),
          *cdb = copy_f(db0, (size_t)O);
    float *cdxr = ddp_malloc(sizeof(float) * ni), *cdwr = copy_f(dw0, nw),
          *cdbr = copy_f(db0, (size_t)O);
    float *gdx = G->alloc(sizeof(float) * ni), *gdw = dev_f(dw0, nw), *gdb = dev_f(db0, (size_t)O);
    C->linear_bwd(cdx, cdw, cdb, dy, x, w, B, Cin, O);
    C->linear_bwd(cdxr, cdwr, cdbr, dyr, xr, wr, B, Cin, O);
    G->linear_bwd(gdx, gdw, gdb, gdy, gx, gw, B, Cin, O);
    check_bf16("bf16 linear_bwd dinp", gdx, cdxr, cdx, ni);
    check_bf16("bf16 linear_bwd dw (+=)", gdw, cdwr, cdw, nw);
    check_near("bf16 linear_bwd db (+=)", gdb, cdb, (size_t)O, TOL, "fp32 sum, vs cpu fp32");

    float *dev[] = {gx, gw, gb, gdy, gy, gdx, gdw, gdb};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        G->free(dev[i]);
    float *host[] = {x, w, b, dy, dw0, db0, xr, wr, dyr, cy, cyr, cdx, cdw, cdb, cdxr, cdwr, cdbr};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

static void t_conv_bf16(int B, int Cin, int H, int W, int O, int k, int stride, int pad)
{
    char name[128], shape[96];
    snprintf(shape, sizeof shape, "B%d C%d %dx%d O%d k%d s%d p%d", B, Cin, H, W, O, k, stride, pad);
    const int OH = (H + 2 * pad - k) / stride + 1, OW = (W + 2 * pad - k) / stride + 1;
    const size_t ni = (size_t)B * Cin * H * W, nw = (size_t)O * Cin * k * k,
                 no = (size_t)B * O * OH * OW;
    float *x = gt_rnd(ni, 1), *w = gt_rnd(nw, 0.2f), *b = gt_rnd((size_t)O, 0.1f),
          *dy = gt_rnd(no, 1);
    float *dw0 = gt_rnd(nw, 0.01f), *db0 = gt_rnd((size_t)O, 0.01f);
    float *xr = bf16_copy(x, ni), *wr = bf16_copy(w, nw), *dyr = bf16_copy(dy, no);
    const size_t ccol = C->conv_col_elems(B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    float *ccolb = ddp_malloc(sizeof(float) * ccol);
    float *gcolb =
        G->alloc(sizeof(float) * G->conv_col_elems(B, CONV_GEOM(Cin, H, W, O, k, stride, pad)));
    float *gx = dev_f(x, ni), *gw = dev_f(w, nw), *gb = dev_f(b, (size_t)O), *gdy = dev_f(dy, no);

    float *cy = ddp_malloc(sizeof(float) * no), *cyr = ddp_malloc(sizeof(float) * no);
    float *gy = G->alloc(sizeof(float) * no);
    C->conv2d_fwd(cy, ccolb, x, w, b, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    C->conv2d_fwd(cyr, ccolb, xr, wr, b, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    G->conv2d_fwd(gy, gcolb, gx, gw, gb, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    snprintf(name, sizeof name, "bf16 conv2d_fwd %s", shape);
    check_bf16(name, gy, cyr, cy, no);

    float *cdx = ddp_malloc(sizeof(float) * ni), *cdw = copy_f(dw0, nw),
          *cdb = copy_f(db0, (size_t)O);
    float *cdxr = ddp_malloc(sizeof(float) * ni), *cdwr = copy_f(dw0, nw),
          *cdbr = copy_f(db0, (size_t)O);
    float *gdx = G->alloc(sizeof(float) * ni), *gdw = dev_f(dw0, nw), *gdb = dev_f(db0, (size_t)O);
    C->conv2d_bwd(cdx, cdw, cdb, ccolb, dy, x, w, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    C->conv2d_bwd(cdxr, cdwr, cdbr, ccolb, dyr, xr, wr, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    G->conv2d_bwd(gdx, gdw, gdb, gcolb, gdy, gx, gw, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    check_bf16("bf16 conv2d_bwd dinp", gdx, cdxr, cdx, ni);
    check_bf16("bf16 conv2d_bwd dw (+=)", gdw, cdwr, cdw, nw);
    check_near("bf16 conv2d_bwd db (+=)", gdb, cdb, (size_t)O, TOL, "fp32 sum, vs cpu fp32");

    float *dev[] = {gx, gw, gb, gdy, gy, gdx, gdw, gdb, gcolb};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        G->free(dev[i]);
    float *host[] = {x,     w,  b,   dy,  dw0, db0, xr,   wr,   dyr,
                     ccolb, cy, cyr, cdx, cdw, cdb, cdxr, cdwr, cdbr};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* conv2d under bf16 through cuDNN (tensor-core math, TF32 operands): forward and both
 * gradients against the plain fp32 CPU within TF32's tolerance, when cuDNN runs. */
static void t_conv_bf16_dnn(int B, int Cin, int H, int W, int O, int k, int stride, int pad)
{
    char line[480], name[128];
    if (!ddp_cuda_conv_path(1, 1, line, sizeof line) || !G->conv_plan)
        return; /* no cuDNN: the im2col cases above are the bf16 convolutions */
    const int OH = (H + 2 * pad - k) / stride + 1, OW = (W + 2 * pad - k) / stride + 1;
    const size_t ni = (size_t)B * Cin * H * W, nw = (size_t)O * Cin * k * k,
                 no = (size_t)B * O * OH * OW;
    float *x = gt_rnd(ni, 1), *w = gt_rnd(nw, 0.2f), *b = gt_rnd((size_t)O, 0.1f),
          *dy = gt_rnd(no, 1);
    float *ccolb =
        ddp_malloc(sizeof(float) * C->conv_col_elems(B, CONV_GEOM(Cin, H, W, O, k, stride, pad)));
    float *gcolb =
        G->alloc(sizeof(float) * G->conv_plan(B, CONV_GEOM(Cin, H, W, O, k, stride, pad)));
    float *gx = dev_f(x, ni), *gw = dev_f(w, nw), *gb = dev_f(b, (size_t)O), *gdy = dev_f(dy, no);
    float *cy = ddp_malloc(sizeof(float) * no), *gy = G->alloc(sizeof(float) * no);
    float *cdx = ddp_malloc(sizeof(float) * ni), *cdw = ddp_calloc(nw, sizeof(float));
    float *cdb = ddp_calloc((size_t)O, sizeof(float));
    float *gdx = G->alloc(sizeof(float) * ni), *gdw = G->alloc(sizeof(float) * nw),
          *gdb = G->alloc(sizeof(float) * O);
    G->zero(gdw, nw);
    G->zero(gdb, (size_t)O);
    C->conv2d_fwd(cy, ccolb, x, w, b, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    G->conv2d_fwd(gy, gcolb, gx, gw, gb, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    C->conv2d_bwd(cdx, cdw, cdb, ccolb, dy, x, w, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    G->conv2d_bwd(gdx, gdw, gdb, gcolb, gdy, gx, gw, B, CONV_GEOM(Cin, H, W, O, k, stride, pad));
    const float *got[] = {gy, gdx, gdw}, *want[] = {cy, cdx, cdw};
    const size_t n[] = {no, ni, nw};
    const char *what[] = {"fwd", "bwd dinp", "bwd dw"};
    for (int i = 0; i < 3; i++) {
        float *h = host_of(got[i], n[i]);
        double ncpu, e = norm_diff(h, want[i], n[i], &ncpu);
        e /= ncpu;
        const int ok = e < 5e-3 && isfinite(e);
        g_checks++;
        snprintf(name, sizeof name, "bf16 cudnn conv2d %s", what[i]);
        printf("%-4s %-34s n=%-9zu err %.2e (limit 5e-03, tensor-core math)\n", ok ? "ok" : "FAIL",
               name, n[i], e);
        g_fail += !ok;
        free(h);
    }
    float *dev[] = {gx, gw, gb, gdy, gy, gdx, gdw, gdb, gcolb};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        G->free(dev[i]);
    float *host[] = {x, w, b, dy, ccolb, cy, cdx, cdw, cdb};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* The bf16 cases on the backend switched to bf16, then back to fp32: the convolutions first
 * on the im2col path (bf16 GEMMs, checked exactly against bf16-rounded operands), then through
 * cuDNN. */
static void t_bf16(void)
{
    char err[DDP_ERR_LEN], line[480];
    if (!ddp_backend_cuda(0, DDP_PRECISION_BF16, err, sizeof err)) {
        printf("FAIL bf16: %s\n", err);
        g_fail++;
        return;
    }
    t_linear_bf16(37, 300, 70);
    t_linear_bf16(256, 784, 512); /* fashion-mlp's first layer */
    t_linear_bf16(1, 5, 3);
    ddp_cuda_conv_path(0, 1, line, sizeof line);
    t_conv_bf16(5, 3, 13, 13, 8, 3, 1, 1);
    t_conv_bf16(4, 2, 11, 9, 6, 4, 2, 1);
    t_conv_bf16(3, 1, 28, 28, 32, 5, 1, 0);   /* fashion-cnn's first layer */
    t_conv_bf16(48, 16, 32, 32, 16, 5, 1, 2); /* 2 chunks */
    t_conv_bf16_dnn(8, 16, 14, 14, 32, 3, 1, 1);
    t_conv_bf16_dnn(3, 1, 28, 28, 32, 5, 1, 0);
    ddp_backend_cuda(0, DDP_PRECISION_FP32, err, sizeof err);
}

/* DDP_TEST_OPS: the groups of cases to run (comma-separated; unset or empty: all). */
static const char *const g_groups[] = {"elementwise", "linear",    "conv", "pool",  "fusion",
                                       "residual",    "batchnorm", "xent", "sumsq", "optim",
                                       "clip",        "graph",     "u8",   "tf32",  "bf16"};
static int g_want[sizeof g_groups / sizeof *g_groups];

/* Parses DDP_TEST_OPS into g_want; prints what runs. 0 on an unknown group name. */
static int select_groups(void)
{
    const size_t ng = sizeof g_groups / sizeof *g_groups;
    const char *env = getenv("DDP_TEST_OPS");
    if (!env || !*env) {
        for (size_t i = 0; i < ng; i++)
            g_want[i] = 1;
        printf("groups: all\n");
        return 1;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", env);
    for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok;
         tok = strtok_r(NULL, ", ", &save)) {
        size_t i = 0;
        while (i < ng && strcmp(tok, g_groups[i]) != 0)
            i++;
        if (i == ng) {
            printf("FAIL: DDP_TEST_OPS: unknown group '%s'; expected a comma-separated list of "
                   "elementwise linear conv pool fusion residual batchnorm xent sumsq optim clip "
                   "graph u8 tf32 bf16\n",
                   tok);
            return 0;
        }
        g_want[i] = 1;
    }
    printf("groups (DDP_TEST_OPS):");
    for (size_t i = 0; i < ng; i++)
        if (g_want[i])
            printf(" %s", g_groups[i]);
    printf("\n");
    return 1;
}

static int want(const char *group)
{
    for (size_t i = 0; i < sizeof g_groups / sizeof *g_groups; i++)
        if (strcmp(group, g_groups[i]) == 0)
            return g_want[i];
    return 0;
}

/* The batchnorm group: the ops against the CPU, the fused batchnorm + relu against them. */
static void t_batchnorm_group(void)
{
    t_batchnorm(6, 5, 49);
    t_batchnorm(33, 17, 1);   /* batchnorm after linear: S = 1 */
    t_batchnorm(64, 8, 3136); /* several partial sums per channel */
    t_bn_relu(6, 5, 49);
    t_bn_relu(3, 7, 13);      /* odd shapes */
    t_bn_relu(33, 17, 1);     /* after a linear: S = 1 */
    t_bn_relu(16, 256, 3136); /* many channels, many positions: 12.8 Mi values */
}

#endif /* HAVE_CUDA */

int main(void)
{
#if !HAVE_CUDA
    return gt_skip(GT_NO_CUDA);
#else
    const int rc = gt_start(DDP_PRECISION_FP32, GT_ANY_CONV, 0, NULL);
    if (rc)
        return rc;
    C = ddp_backend_cpu();
    if (C->set_threads)
        C->set_threads(4);

    if (!select_groups())
        return 1;
    if (want("elementwise"))
        t_elementwise(100003);
    if (want("linear")) {
        t_linear(37, 300, 70);
        t_linear(256, 784, 512); /* fashion-mlp's first layer */
        t_linear(1, 5, 3);
    }
    /* cuDNN where it loads (on the twin: unless DDP_EMU_NO_CUDNN=1; DDP_TEST_CONV_PATH names
     * the path expected), then always the im2col fallback */
    if (want("conv")) {
        t_conv_all(1, 1, getenv("DDP_TEST_CONV_PATH"));
        t_conv_all(1, 0, getenv("DDP_TEST_CONV_PATH"));
        t_conv_all(0, 1, "im2col");
    }
    if (want("pool")) {
        t_pools(3, 4, 10, 10, 3); /* floor mode: a row and column left over */
        t_pools(2, 3, 8, 12, 2);
        t_relu_pool(3, 4, 10, 10, 3);
        t_relu_pool(2, 3, 9, 13, 2);
        t_relu_pool(1, 2, 33, 33, 16);     /* the largest window a byte argmax holds */
        t_relu_pool(1, 16, 2049, 2049, 2); /* 16 Mi + outputs: past 65535 blocks of 256 */
    }
    if (want("fusion")) {
        t_model_fusion();
        t_pool_bias_chunks();
        t_model_bn_fusion();
        t_model_join_fusion();
    }
    if (want("elementwise")) {
        t_vec(100003, 0);
        t_vec(100003, 1);
        t_vec(3, 0); /* the tail alone */
        t_vec_bias_relu(37, 20, 13);
    }
    if (want("linear")) {
        t_bias_grad_rows(1 << 20, 3);
        t_bias_grad_rows(65535 * 64 + 100, 1); /* past 65535 blocks of 64 rows in gridDim.y */
        t_bias_grad_rows(7, 1000);
    }
    if (want("residual")) {
        t_residual_ops(5, 16, 49);
        t_residual_ops(3, 64, 16);
        t_join_relu(100003, 0);
        t_join_relu(100003, 1);
        t_join_relu(3, 0); /* the tail alone */
    }
    if (want("batchnorm"))
        t_batchnorm_group();
    if (want("xent")) {
        t_xent(67, 10, 0);
        t_xent(9, 1000, 0); /* K > 32: lanes loop */
        t_xent(1, 2, 0);
        t_xent(20011, 10, 0); /* past one block's rows: the two-level sum */
        t_xent(67, 10, 0.1f); /* label smoothing */
        t_xent(9, 1000, 0.25f);
    }
    if (want("sumsq")) {
        t_sumsq(1);
        t_sumsq(100003);
    }
    if (want("optim"))
        t_optim(10007);
    if (want("clip"))
        t_clip(10007);
    if (want("graph"))
        t_graph(16, 40, 10);
    if (want("u8")) {
        t_u8_to_float(7, 1, 28, 28, 0); /* Fashion-MNIST, no normalize */
        t_u8_to_float(7, 1, 28, 28, 1); /* Fashion-MNIST, normalize = 0.2860, 0.3530 */
        t_u8_to_float(5, 3, 9, 11, 3);  /* per-channel statistics */
    }
    if (want("tf32"))
        t_tf32();
    if (want("bf16"))
        t_bf16();
    return gt_report("test_cuda_ops");
#endif
}

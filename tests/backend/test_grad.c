/*
 * test_grad.c - finite-difference gradient checks of every layer and the loss, in float64
 * (the double variants of the CPU kernels), and float32 kernels against float64 ones.
 *
 * For a layer y = f(x; w) and a random upstream gradient g, L = sum(g * y). The analytic
 * gradients from the backward kernels must match central differences of L within 1e-6
 * (relative to max(1, |grad|)) on sampled coordinates.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_ref.h"
#include "check.h"

#define H 1e-6
#define TOL 1e-6
#define SAMPLES 40 /* coordinates checked per tensor */

static uint64_t g_state = 0x1234567;

static double urand(void) /* [-1, 1) */
{
    g_state = g_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(g_state >> 11) * 0x1.0p-53 * 2 - 1;
}

static double *rnd(size_t n, double scale)
{
    double *v = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++)
        v[i] = urand() * scale;
    return v;
}

/* A layer under test: forward into y from (x, w, b); backward of g into dx, dw, db. */
struct layer_case {
    const char *name;
    size_t nx, nw, nb, ny;
    void (*fwd)(const struct layer_case *c, double *y, const double *x, const double *w,
                const double *b);
    void (*bwd)(const struct layer_case *c, double *dx, double *dw, double *db, const double *g,
                const double *x, const double *w, const double *b);
    int B, C, Hh, Ww, O, k, stride, pad;
};

static double objective(const struct layer_case *c, const double *g, const double *x,
                        const double *w, const double *b)
{
    double *y = calloc(c->ny, sizeof(double));
    c->fwd(c, y, x, w, b);
    double s = 0;
    for (size_t i = 0; i < c->ny; i++)
        s += g[i] * y[i];
    free(y);
    return s;
}

/* Compare analytic grad (an) of tensor t (n elements) with central differences. */
static void fd_check(const struct layer_case *c, const char *what, double *t, size_t n,
                     const double *an, const double *g, const double *x, const double *w,
                     const double *b)
{
    double worst = 0;
    for (int s = 0; s < SAMPLES && n; s++) {
        size_t i = (size_t)((urand() + 1) / 2 * (double)n) % n;
        double keep = t[i];
        t[i] = keep + H;
        double lp = objective(c, g, x, w, b);
        t[i] = keep - H;
        double lm = objective(c, g, x, w, b);
        t[i] = keep;
        double num = (lp - lm) / (2 * H);
        double err = fabs(num - an[i]) / fmax(1.0, fmax(fabs(num), fabs(an[i])));
        if (err > worst)
            worst = err;
    }
    CHECK(worst <= TOL, "%s d%s: worst relative error %.3g > %.1g", c->name, what, worst, TOL);
    printf("  %-28s d%-2s worst rel err %.2e\n", c->name, what, worst);
}

static void run_case(const struct layer_case *c)
{
    double *x = rnd(c->nx, 1), *w = c->nw ? rnd(c->nw, 0.5) : NULL,
           *b = c->nb ? rnd(c->nb, 0.5) : NULL;
    /* keep relu inputs away from the kink, where differences are not gradients */
    for (size_t i = 0; i < c->nx; i++)
        if (fabs(x[i]) < 1e-3)
            x[i] = 0.5;
    double *g = rnd(c->ny, 1);
    double *dx = calloc(c->nx, sizeof(double)), *dw = calloc(c->nw + 1, sizeof(double)),
           *db = calloc(c->nb + 1, sizeof(double));
    c->bwd(c, dx, dw, db, g, x, w, b);
    fd_check(c, "x", x, c->nx, dx, g, x, w, b);
    if (c->nw)
        fd_check(c, "w", w, c->nw, dw, g, x, w, b);
    if (c->nb)
        fd_check(c, "b", b, c->nb, db, g, x, w, b);
    free(x), free(w), free(b), free(g), free(dx), free(dw), free(db);
}

/* ---- layers ---------------------------------------------------------------------------- */

static void lin_f(const struct layer_case *c, double *y, const double *x, const double *w,
                  const double *b)
{
    ddp_cpu_linear_fwd_f64(y, x, w, b, c->B, c->C, c->O);
}
static void lin_b(const struct layer_case *c, double *dx, double *dw, double *db, const double *g,
                  const double *x, const double *w, const double *b)
{
    ddp_cpu_linear_bwd_f64(dx, dw, db, g, x, w, c->B, c->C, c->O);
}

static void relu_f(const struct layer_case *c, double *y, const double *x, const double *w,
                   const double *b)
{
    ddp_cpu_relu_fwd_f64(y, x, c->nx);
}
static void relu_b(const struct layer_case *c, double *dx, double *dw, double *db, const double *g,
                   const double *x, const double *w, const double *b)
{
    double *y = malloc(sizeof(double) * c->nx);
    ddp_cpu_relu_fwd_f64(y, x, c->nx);
    ddp_cpu_relu_bwd_f64(dx, g, y, c->nx);
    free(y);
}

static size_t col_elems(const struct layer_case *c)
{
    int OH = (c->Hh + 2 * c->pad - c->k) / c->stride + 1;
    int OW = (c->Ww + 2 * c->pad - c->k) / c->stride + 1;
    return 2 * (size_t)c->C * c->k * c->k * OH * OW;
}
static void conv_f(const struct layer_case *c, double *y, const double *x, const double *w,
                   const double *b)
{
    double *col = malloc(sizeof(double) * col_elems(c));
    ddp_cpu_conv2d_fwd_f64(y, col, x, w, b, c->B, c->C, c->Hh, c->Ww, c->O, c->k, c->stride,
                           c->pad);
    free(col);
}
static void conv_b(const struct layer_case *c, double *dx, double *dw, double *db, const double *g,
                   const double *x, const double *w, const double *b)
{
    double *col = malloc(sizeof(double) * col_elems(c));
    ddp_cpu_conv2d_bwd_f64(dx, dw, db, col, g, x, w, c->B, c->C, c->Hh, c->Ww, c->O, c->k,
                           c->stride, c->pad);
    free(col);
}

static void maxp_f(const struct layer_case *c, double *y, const double *x, const double *w,
                   const double *b)
{
    int32_t *am = malloc(sizeof(int32_t) * c->ny);
    ddp_cpu_maxpool_fwd_f64(y, am, x, c->B, c->C, c->Hh, c->Ww, c->k);
    free(am);
}
static void maxp_b(const struct layer_case *c, double *dx, double *dw, double *db, const double *g,
                   const double *x, const double *w, const double *b)
{
    int32_t *am = malloc(sizeof(int32_t) * c->ny);
    double *y = malloc(sizeof(double) * c->ny);
    ddp_cpu_maxpool_fwd_f64(y, am, x, c->B, c->C, c->Hh, c->Ww, c->k);
    ddp_cpu_maxpool_bwd_f64(dx, g, am, c->B, c->C, c->Hh, c->Ww, c->k);
    free(am), free(y);
}

static void avgp_f(const struct layer_case *c, double *y, const double *x, const double *w,
                   const double *b)
{
    ddp_cpu_avgpool_fwd_f64(y, x, c->B, c->C, c->Hh, c->Ww, c->k);
}
static void avgp_b(const struct layer_case *c, double *dx, double *dw, double *db, const double *g,
                   const double *x, const double *w, const double *b)
{
    ddp_cpu_avgpool_bwd_f64(dx, g, c->B, c->C, c->Hh, c->Ww, c->k);
}

static void gap_f(const struct layer_case *c, double *y, const double *x, const double *w,
                  const double *b)
{
    ddp_cpu_gap_fwd_f64(y, x, c->B, c->C, c->Hh * c->Ww);
}
static void gap_b(const struct layer_case *c, double *dx, double *dw, double *db, const double *g,
                  const double *x, const double *w, const double *b)
{
    ddp_cpu_gap_bwd_f64(dx, g, c->B, c->C, c->Hh * c->Ww);
}

/* the residual join: y = x + shortcut (a fixed second input); dx = g */
static void add_f(const struct layer_case *c, double *y, const double *x, const double *w,
                  const double *b)
{
    double *s = calloc(c->nx, sizeof(double));
    for (size_t i = 0; i < c->nx; i++)
        s[i] = 0.25 * (double)i - 1;
    ddp_cpu_add_f64(y, x, s, c->nx);
    free(s);
}
static void add_b(const struct layer_case *c, double *dx, double *dw, double *db, const double *g,
                  const double *x, const double *w, const double *b)
{
    double *zero = calloc(c->nx, sizeof(double));
    ddp_cpu_add_f64(dx, g, zero, c->nx);
    free(zero);
}

/* batchnorm in training mode: statistics of x itself (C channels, S = Hh*Ww positions) */
static void bn_stats(const struct layer_case *c, const double *x, double *mean, double *invstd)
{
    int S = c->Hh * c->Ww;
    double sums[64];
    ddp_cpu_bn_stats_f64(sums, x, c->B, c->C, S);
    double n = (double)c->B * S;
    for (int ch = 0; ch < c->C; ch++) {
        mean[ch] = sums[ch] / n;
        double var = sums[c->C + ch] / n - mean[ch] * mean[ch];
        invstd[ch] = 1 / sqrt(var + 1e-5);
    }
}
static void bn_f(const struct layer_case *c, double *y, const double *x, const double *w,
                 const double *b)
{
    double mean[32], invstd[32];
    bn_stats(c, x, mean, invstd);
    ddp_cpu_bn_fwd_apply_f64(y, NULL, x, mean, invstd, w, b, c->B, c->C, c->Hh * c->Ww);
}
static void bn_b(const struct layer_case *c, double *dx, double *dw, double *db, const double *g,
                 const double *x, const double *w, const double *b)
{
    int S = c->Hh * c->Ww;
    double mean[32], invstd[32], sums[64];
    bn_stats(c, x, mean, invstd);
    double *y = malloc(sizeof(double) * c->ny), *xhat = malloc(sizeof(double) * c->ny);
    ddp_cpu_bn_fwd_apply_f64(y, xhat, x, mean, invstd, w, b, c->B, c->C, S);
    ddp_cpu_bn_bwd_sums_f64(sums, g, xhat, c->B, c->C, S);
    ddp_cpu_bn_bwd_apply_f64(dx, dw, db, g, xhat, invstd, w, sums, sums, (double)c->B * S, c->B,
                             c->C, S);
    free(y), free(xhat);
}

static void drop_f(const struct layer_case *c, double *y, const double *x, const double *w,
                   const double *b)
{
    double *mask = malloc(sizeof(double) * c->nx);
    ddp_cpu_dropout_fwd_f64(y, mask, x, c->nx, 0.3, 99);
    free(mask);
}
static void drop_b(const struct layer_case *c, double *dx, double *dw, double *db, const double *g,
                   const double *x, const double *w, const double *b)
{
    double *mask = malloc(sizeof(double) * c->nx), *y = malloc(sizeof(double) * c->nx);
    ddp_cpu_dropout_fwd_f64(y, mask, x, c->nx, 0.3, 99);
    ddp_cpu_dropout_bwd_f64(dx, g, mask, c->nx);
    free(mask), free(y);
}

/* Loss: L = sum over the batch of cross-entropy (label smoothing ls); dlogits with
 * grad_scale 1 against central differences. */
static void check_xent_fd(double ls)
{
    enum { B = 5, K = 7 };
    double *z = rnd(B * K, 3), dz[B * K];
    int32_t y[B] = {0, 6, 3, 3, 1};
    ddp_cpu_xent_f64(dz, NULL, z, y, B, K, 1, ls);
    double worst = 0;
    for (int i = 0; i < B * K; i++) {
        double keep = z[i];
        z[i] = keep + H;
        double lp = ddp_cpu_xent_f64(NULL, NULL, z, y, B, K, 1, ls);
        z[i] = keep - H;
        double lm = ddp_cpu_xent_f64(NULL, NULL, z, y, B, K, 1, ls);
        z[i] = keep;
        double err = fabs((lp - lm) / (2 * H) - dz[i]);
        if (err > worst)
            worst = err;
    }
    CHECK(worst <= TOL, "xent (smoothing %g) dlogits worst error %.3g", ls, worst);
    printf("  %-28s dz  worst abs err %.2e\n",
           ls > 0 ? "cross-entropy, smoothing 0.1" : "cross-entropy", worst);
    /* the value: -sum_j q_j log p_j with q = (1 - ls) onehot + ls / K, directly */
    double ref = 0;
    for (int i = 0; i < B; i++) {
        double m = z[i * K], se = 0;
        for (int j = 1; j < K; j++)
            m = z[i * K + j] > m ? z[i * K + j] : m;
        for (int j = 0; j < K; j++)
            se += exp(z[i * K + j] - m);
        for (int j = 0; j < K; j++) {
            double q = (1 - ls) * (j == y[i]) + ls / K;
            ref -= q * (z[i * K + j] - m - log(se));
        }
    }
    double l = ddp_cpu_xent_f64(NULL, NULL, z, y, B, K, 1, ls);
    CHECK(fabs(l - ref) < 1e-12, "xent (smoothing %g) %.15g != %.15g", ls, l, ref);
    free(z);
}

static void check_xent(void)
{
    enum { B = 5, K = 7 };
    check_xent_fd(0);
    check_xent_fd(0.1);
    double *z = rnd(B * K, 3), dz[B * K];
    int32_t y[B] = {0, 6, 3, 3, 1};
    /* value: uniform logits give log(K) per sample */
    double zero[B * K] = {0};
    double l = ddp_cpu_xent_f64(NULL, NULL, zero, y, B, K, 1, 0);
    CHECK(fabs(l - B * log(K)) < 1e-12, "xent of zero logits %.15g != %.15g", l, B * log(K));
    /* stability: huge logits stay finite */
    z[0] = 1e4;
    l = ddp_cpu_xent_f64(dz, NULL, z, y, B, K, 1, 0);
    CHECK(isfinite(l) && isfinite(dz[0]), "xent not finite for large logits");
    free(z);
}

/* float32 kernels against float64 on the same inputs: normalised error. */
static void check_f32_vs_f64(void)
{
    enum { B = 4, C = 3, Hh = 9, Ww = 9, O = 5, k = 3 };
    int OH = Hh - k + 1, OW = Ww - k + 1;
    size_t nx = (size_t)B * C * Hh * Ww, nw = (size_t)O * C * k * k, ny = (size_t)B * O * OH * OW;
    double *x = rnd(nx, 1), *w = rnd(nw, 0.5), *b = rnd(O, 0.5), *y = malloc(sizeof(double) * ny);
    double *col = malloc(sizeof(double) * 2 * C * k * k * OH * OW);
    float *xf = malloc(sizeof(float) * nx), *wf = malloc(sizeof(float) * nw), bf[O],
          *yf = malloc(sizeof(float) * ny), *colf = malloc(sizeof(float) * 2 * C * k * k * OH * OW);
    for (size_t i = 0; i < nx; i++)
        xf[i] = (float)x[i];
    for (size_t i = 0; i < nw; i++)
        wf[i] = (float)w[i];
    for (int i = 0; i < O; i++)
        bf[i] = (float)b[i];
    /* inputs rounded to float so both see the same numbers */
    for (size_t i = 0; i < nx; i++)
        x[i] = xf[i];
    for (size_t i = 0; i < nw; i++)
        w[i] = wf[i];
    for (int i = 0; i < O; i++)
        b[i] = bf[i];
    ddp_cpu_conv2d_fwd_f64(y, col, x, w, b, B, C, Hh, Ww, O, k, 1, 0);
    ddp_cpu_conv2d_fwd_f32(yf, colf, xf, wf, bf, B, C, Hh, Ww, O, k, 1, 0);
    double num = 0, den = 0;
    for (size_t i = 0; i < ny; i++) {
        num += (y[i] - yf[i]) * (y[i] - yf[i]);
        den += y[i] * y[i];
    }
    double nerr = sqrt(num / den);
    CHECK(nerr < 1e-6, "conv2d f32 vs f64 normalised error %.3g", nerr);
    printf("  %-28s f32 vs f64 normalised err %.2e\n", "conv2d", nerr);
    free(x), free(w), free(b), free(y), free(col), free(xf), free(wf), free(yf), free(colf);
}

int main(void)
{
    struct layer_case cases[] = {
        {"linear 4x7->5", 4 * 7, 5 * 7, 5, 4 * 5, lin_f, lin_b, .B = 4, .C = 7, .O = 5},
        {"relu", 3 * 11, 0, 0, 3 * 11, relu_f, relu_b, .B = 1},
        {"conv2d 3x7x6 k3", 2 * 3 * 7 * 6, 4 * 3 * 3 * 3, 4, 2 * 4 * 5 * 4, conv_f, conv_b, .B = 2,
         .C = 3, .Hh = 7, .Ww = 6, .O = 4, .k = 3, .stride = 1, .pad = 0},
        {"conv2d k3 stride2 pad1", 2 * 2 * 7 * 7, 3 * 2 * 3 * 3, 3, 2 * 3 * 4 * 4, conv_f, conv_b,
         .B = 2, .C = 2, .Hh = 7, .Ww = 7, .O = 3, .k = 3, .stride = 2, .pad = 1},
        {"conv2d k5 pad2", 1 * 1 * 8 * 8, 2 * 25, 2, 1 * 2 * 8 * 8, conv_f, conv_b, .B = 1, .C = 1,
         .Hh = 8, .Ww = 8, .O = 2, .k = 5, .stride = 1, .pad = 2},
        {"maxpool 2 (odd input)", 2 * 3 * 5 * 5, 0, 0, 2 * 3 * 2 * 2, maxp_f, maxp_b, .B = 2,
         .C = 3, .Hh = 5, .Ww = 5, .k = 2},
        {"avgpool 3", 2 * 2 * 6 * 7, 0, 0, 2 * 2 * 2 * 2, avgp_f, avgp_b, .B = 2, .C = 2, .Hh = 6,
         .Ww = 7, .k = 3},
        {"globalavgpool 5x7", 2 * 3 * 5 * 7, 0, 0, 2 * 3, gap_f, gap_b, .B = 2, .C = 3, .Hh = 5,
         .Ww = 7},
        {"residual add", 3 * 10, 0, 0, 3 * 10, add_f, add_b, .B = 1},
        {"batchnorm2d", 4 * 3 * 3 * 2, 3, 3, 4 * 3 * 3 * 2, bn_f, bn_b, .B = 4, .C = 3, .Hh = 3,
         .Ww = 2},
        {"batchnorm1d", 6 * 5, 5, 5, 6 * 5, bn_f, bn_b, .B = 6, .C = 5, .Hh = 1, .Ww = 1},
        {"dropout 0.3", 40, 0, 0, 40, drop_f, drop_b, .B = 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
    check_xent();
    check_f32_vs_f64();

    /* dropout keeps about 1-p and scales kept values by 1/(1-p) */
    enum { N = 100000 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N),
          *mask = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++)
        x[i] = 1;
    ddp_cpu_dropout_fwd_f32(y, mask, x, N, 0.25f, 7);
    int kept = 0;
    for (int i = 0; i < N; i++) {
        kept += y[i] != 0;
        CHECK(y[i] == 0 || fabsf(y[i] - 1 / 0.75f) < 1e-6f, "dropout kept value %g", y[i]);
    }
    CHECK(fabs(kept / (double)N - 0.75) < 0.01, "dropout kept %d of %d", kept, N);
    free(x), free(y), free(mask);
    return check_report("test_grad");
}

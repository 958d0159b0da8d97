/*
 * test_cuda_layout.c - the CUDA backend's channels-last activations (backend.h set_layout) against
 * its NCHW ops (suite gpu; on the GPU twin in suite twin). Exit 0 pass, 1 fail, 77 skipped: no
 * CUDA in this build, no usable GPU, or no cuDNN (channels-last runs only on cuDNN's
 * convolution path), unless DDP_GPU_REQUIRE=1: then each of those fails.
 *
 * Every case runs an op in NCHW on seeded data, the same op in NHWC on the same data permuted
 * on the host, and compares the NHWC result with the NCHW one permuted. Bit for bit: to_nhwc and
 * to_nchw (against the host's permutation), the pools and their argmax (max exact, avgpool's
 * window summed in the same order), gap (positions summed in the same order), and batchnorm's
 * element-wise applies given the same mean, invstd and sums. Batchnorm's sums in double group
 * their additions differently (rows of a (B*S, C) matrix, not channel planes): they must agree
 * within TOL_SUMS (normalised, as test_cuda_ops' doubles), the mean and invstd computed from
 * them within TOL_ULPS units in the last place; the measured worst differences are printed.
 * Where S = 1 both layouts are the same bytes and everything must be bit for bit.
 *
 * Dimension letters as in backend.h.
 */
#include "ddp_build.h"

#include <math.h>

#define GPU_TEST_SEED 0x13198a2e03707344ULL
#include "gpu_test.h"

#if HAVE_CUDA

#define TOL_SUMS 1e-12 /* normalised error of batchnorm's double sums, NHWC vs NCHW */
#define TOL_ULPS 2     /* mean and invstd from those sums: float units in the last place */

static double g_worst_sums; /* the worst normalised sums difference seen */
static int g_worst_ulps;    /* the most ulps a mean or invstd differed by */

/* ---- data -------------------------------------------------------------------------------- */

/* x (B, C, S) of esz-byte elements permuted to (B, S, C) (to 1: back), a new array. */
static void *perm(const void *x, size_t esz, int B, int Cc, int S, int back)
{
    char *y = ddp_malloc(esz * ((size_t)B * Cc * S + 1));
    const char *xc = x;
    for (size_t b = 0; b < (size_t)B; b++)
        for (size_t c = 0; c < (size_t)Cc; c++)
            for (size_t s = 0; s < (size_t)S; s++) {
                const size_t nchw = (b * Cc + c) * S + s, nhwc = (b * S + s) * Cc + c;
                memcpy(y + esz * (back ? nchw : nhwc), xc + esz * (back ? nhwc : nchw), esz);
            }
    return y;
}

/* ---- comparisons ------------------------------------------------------------------------- */

static void verdict(int ok, const char *op, const char *shape, size_t n, const char *how)
{
    gt_count(ok);
    printf("%-4s %-26s %-22s n=%-9zu %s\n", ok ? "ok" : "FAIL", op, shape, n, how);
}

/* The NHWC result (device, (B, S, C)) equals the NCHW one (device, (B, C, S)) permuted, bit
 * for bit; frees neither. */
static void same(const char *op, const char *shape, const void *nhwc_dev, const void *nchw_dev,
                 size_t esz, int B, int Cc, int S)
{
    const size_t n = (size_t)B * Cc * S;
    char *a = gt_down(nhwc_dev, esz * n), *r = gt_down(nchw_dev, esz * n);
    char *p = perm(r, esz, B, Cc, S, 0), how[96] = "bit-identical";
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + esz * i, p + esz * i, esz) != 0 && !bad++)
            first = i;
    if (bad)
        snprintf(how, sizeof how, "%zu differ, first at %zu (NHWC index)", bad, first);
    verdict(!bad, op, shape, n, how);
    free(a), free(r), free(p);
}

/* Device arrays of n floats equal bit for bit (per-channel results: no permutation). */
static void same_flat(const char *op, const char *shape, const void *a_dev, const void *b_dev,
                      size_t bytes)
{
    char *a = gt_down(a_dev, bytes), *b = gt_down(b_dev, bytes);
    const int ok = memcmp(a, b, bytes) == 0;
    verdict(ok, op, shape, bytes / 4, ok ? "bit-identical" : "differ");
    free(a), free(b);
}

/* Batchnorm sums (2C+1 doubles, device): within TOL_SUMS normalised, the count exact; bitwise
 * where exact (S = 1). */
static void near_sums(const char *op, const char *shape, const double *a_dev, const double *b_dev,
                      int Cc, int exact)
{
    const size_t n = 2 * (size_t)Cc + 1;
    double *a = gt_down(a_dev, sizeof(double) * n), *b = gt_down(b_dev, sizeof(double) * n);
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d += (a[i] - b[i]) * (a[i] - b[i]);
        s += b[i] * b[i];
    }
    const double e = s > 0 ? sqrt(d / s) : sqrt(d);
    const int ok = exact ? memcmp(a, b, sizeof(double) * n) == 0
                         : e <= TOL_SUMS && isfinite(e) && a[n - 1] == b[n - 1];
    char how[96];
    snprintf(how, sizeof how, "err %.2e (limit %s)", e, exact ? "bitwise" : "1e-12, double");
    if (e > g_worst_sums)
        g_worst_sums = e;
    verdict(ok, op, shape, n, how);
    free(a), free(b);
}

/* Floats (device, n) within TOL_ULPS units in the last place of each other. */
static void near_ulps(const char *op, const char *shape, const float *a_dev, const float *b_dev,
                      size_t n)
{
    float *a = gt_down(a_dev, sizeof(float) * n), *b = gt_down(b_dev, sizeof(float) * n);
    int worst = 0;
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t ia, ib;
        memcpy(&ia, &a[i], 4);
        memcpy(&ib, &b[i], 4);
        const int u = (ia < 0) != (ib < 0) ? 1 << 30 : abs(ia - ib);
        worst = u > worst ? u : worst;
        differ += u != 0;
    }
    if (worst > g_worst_ulps)
        g_worst_ulps = worst;
    char how[96];
    snprintf(how, sizeof how, "%zu differ, at most %d ulp (limit %d)", differ, worst, TOL_ULPS);
    verdict(worst <= TOL_ULPS, op, shape, n, how);
    free(a), free(b);
}

/* ---- cases ------------------------------------------------------------------------------- */

/* One tensor on the device in both layouts: c (B, C, S) and h (B, S, C). */
struct pair {
    void *c, *h;
};

static struct pair pair_of(const float *x, int B, int Cc, int S)
{
    const size_t bytes = sizeof(float) * B * Cc * S;
    float *p = perm(x, sizeof(float), B, Cc, S, 0);
    struct pair r = {gt_up(x, bytes), gt_up(p, bytes)};
    free(p);
    return r;
}

static struct pair pair_alloc(size_t bytes)
{
    struct pair r = {G->alloc(bytes ? bytes : 4), G->alloc(bytes ? bytes : 4)};
    return r;
}

static void pair_free(struct pair *p)
{
    G->free(p->c);
    G->free(p->h);
}

/* to_nhwc equals the host's permutation, to_nchw takes it back. */
static void t_transpose(int B, int Cc, int S)
{
    char shape[64];
    snprintf(shape, sizeof shape, "B%d C%d S%d", B, Cc, S);
    const size_t n = (size_t)B * Cc * S;
    float *x = gt_rnd(n, 1);
    float *gx = gt_up(x, sizeof(float) * n), *gy = G->alloc(sizeof(float) * n + 4),
          *gz = G->alloc(sizeof(float) * n + 4);
    G->to_nhwc(gy, gx, B, Cc, S);
    G->to_nchw(gz, gy, B, Cc, S);
    same("to_nhwc", shape, gy, gx, sizeof(float), B, Cc, S);
    same_flat("to_nchw (back)", shape, gz, gx, sizeof(float) * n);
    G->free(gx), G->free(gy), G->free(gz);
    free(x);
}

/* maxpool, relu + maxpool and avgpool with k, forward and backward, argmax included. */
static void t_pools(int B, int Cc, int H, int W, int k)
{
    char shape[64];
    snprintf(shape, sizeof shape, "B%d C%d %dx%d k%d", B, Cc, H, W, k);
    const int S = H * W, OS = (H / k) * (W / k);
    const size_t ni = (size_t)B * Cc * S, no = (size_t)B * Cc * OS;
    float *x = gt_rnd(ni, 1), *dy = gt_rnd(no, 1);
    for (size_t i = 0; i < ni; i++) /* few levels: ties, so the first-maximum rule matters */
        x[i] = roundf(x[i] * 3) / 3;
    struct pair X = pair_of(x, B, Cc, S), DY = pair_of(dy, B, Cc, OS);
    struct pair Y = pair_alloc(4 * no), A = pair_alloc(4 * no), Y2 = pair_alloc(4 * no);
    struct pair A8 = pair_alloc(no), DX = pair_alloc(4 * ni), DX2 = pair_alloc(4 * ni);
    struct pair AY = pair_alloc(4 * no), ADX = pair_alloc(4 * ni);
    for (int l = 0; l < 2; l++) {
        gt_layout(l ? DDP_LAYOUT_NHWC : DDP_LAYOUT_NCHW);
#define P(v) (l ? (v).h : (v).c)
        G->maxpool_fwd(P(Y), P(A), P(X), B, Cc, H, W, k);
        G->maxpool_bwd(P(DX), P(DY), P(A), B, Cc, H, W, k);
        G->relu_maxpool_fwd(P(Y2), P(A8), P(X), B, Cc, H, W, k);
        G->maxpool_relu_bwd(P(DX2), P(DY), P(Y2), P(A8), B, Cc, H, W, k);
        G->avgpool_fwd(P(AY), P(X), B, Cc, H, W, k);
        G->avgpool_bwd(P(ADX), P(DY), B, Cc, H, W, k);
#undef P
    }
    gt_layout(DDP_LAYOUT_NCHW);
    same("maxpool_fwd", shape, Y.h, Y.c, 4, B, Cc, OS);
    same("maxpool_fwd argmax", shape, A.h, A.c, 4, B, Cc, OS);
    same("maxpool_bwd", shape, DX.h, DX.c, 4, B, Cc, S);
    same("relu_maxpool_fwd", shape, Y2.h, Y2.c, 4, B, Cc, OS);
    same("relu_maxpool_fwd argmax", shape, A8.h, A8.c, 1, B, Cc, OS);
    same("maxpool_relu_bwd", shape, DX2.h, DX2.c, 4, B, Cc, S);
    same("avgpool_fwd", shape, AY.h, AY.c, 4, B, Cc, OS);
    same("avgpool_bwd", shape, ADX.h, ADX.c, 4, B, Cc, S);
    pair_free(&X), pair_free(&DY), pair_free(&Y), pair_free(&A), pair_free(&Y2);
    pair_free(&A8), pair_free(&DX), pair_free(&DX2), pair_free(&AY), pair_free(&ADX);
    free(x), free(dy);
}

/* The global average pool: out (B, C) and dinp, bit for bit (positions summed in order). */
static void t_gap(int B, int Cc, int S)
{
    char shape[64];
    snprintf(shape, sizeof shape, "B%d C%d S%d", B, Cc, S);
    const size_t n = (size_t)B * Cc * S, bc = (size_t)B * Cc;
    float *x = gt_rnd(n, 1), *dy = gt_rnd(bc, 1);
    struct pair X = pair_of(x, B, Cc, S), DY = pair_of(dy, B, Cc, 1);
    struct pair Y = pair_alloc(4 * bc), DX = pair_alloc(4 * n);
    gt_layout(DDP_LAYOUT_NCHW);
    G->gap_fwd(Y.c, X.c, B, Cc, S);
    G->gap_bwd(DX.c, DY.c, B, Cc, S);
    gt_layout(DDP_LAYOUT_NHWC);
    G->gap_fwd(Y.h, X.h, B, Cc, S);
    G->gap_bwd(DX.h, DY.h, B, Cc, S);
    gt_layout(DDP_LAYOUT_NCHW);
    same_flat("gap_fwd", shape, Y.h, Y.c, 4 * bc);
    same("gap_bwd", shape, DX.h, DX.c, 4, B, Cc, S);
    pair_free(&X), pair_free(&DY), pair_free(&Y), pair_free(&DX);
    free(x), free(dy);
}

/* Batchnorm's backward (plain and fused with relu) from the forward's xhat and relu output Y:
 * the sums within TOL_SUMS; dinp, dgamma and dbeta bit for bit given the same sums. */
static void t_bn_bwd(const char *shape, int B, int Cc, int S, struct pair XH, struct pair Y,
                     const float *ginv, const float *ggam)
{
    const size_t n = (size_t)B * Cc * S, c = (size_t)Cc, c2 = 2 * c + 1;
    float *dy = gt_rnd(n, 1), *dg0 = gt_rnd(c, 0.1f);
    struct pair DY = pair_of(dy, B, Cc, S), LS = pair_alloc(8 * c2), DX = pair_alloc(4 * n);
    struct pair DG = pair_of(dg0, 1, Cc, 1), DB = pair_of(dg0, 1, Cc, 1);
    double *glob = ddp_malloc(sizeof(double) * c2), *gglob = G->alloc(sizeof(double) * c2);
    for (int relu = 0; relu < 2; relu++) {
        for (int l = 0; l < 2; l++) {
            gt_layout(l ? DDP_LAYOUT_NHWC : DDP_LAYOUT_NCHW);
#define P(v) (l ? (v).h : (v).c)
            if (relu)
                G->bn_relu_bwd_sums(P(LS), P(DY), P(Y), P(XH), B, Cc, S);
            else
                G->bn_bwd_sums(P(LS), P(DY), P(XH), B, Cc, S);
        }
        near_sums(relu ? "bn_relu_bwd_sums" : "bn_bwd_sums", shape, LS.h, LS.c, Cc, S == 1);
        /* global sums unlike the local ones (SyncBatchNorm), the count too */
        G->download(glob, LS.c, sizeof(double) * c2);
        for (size_t i = 0; i + 1 < c2; i++)
            glob[i] = glob[i] * 1.7 + 0.1;
        glob[c2 - 1] *= 2;
        G->upload(gglob, glob, sizeof(double) * c2);
        for (int l = 0; l < 2; l++) {
            gt_layout(l ? DDP_LAYOUT_NHWC : DDP_LAYOUT_NCHW);
            if (relu)
                G->bn_relu_bwd_apply(P(DX), P(DG), P(DB), P(DY), P(Y), P(XH), ginv, ggam, LS.c,
                                     gglob, B, Cc, S);
            else
                G->bn_bwd_apply(P(DX), P(DG), P(DB), P(DY), P(XH), ginv, ggam, LS.c, gglob, B, Cc,
                                S);
#undef P
        }
        same(relu ? "bn_relu_bwd_apply dinp" : "bn_bwd_apply dinp", shape, DX.h, DX.c, 4, B, Cc, S);
        same_flat("  dgamma (+=)", shape, DG.h, DG.c, 4 * c);
        same_flat("  dbeta (+=)", shape, DB.h, DB.c, 4 * c);
    }
    gt_layout(DDP_LAYOUT_NCHW);
    pair_free(&DY), pair_free(&LS), pair_free(&DX), pair_free(&DG), pair_free(&DB);
    G->free(gglob);
    free(dy), free(dg0), free(glob);
}

/* Batchnorm: the statistics (within TOL_SUMS; mean and invstd within TOL_ULPS; the NHWC sums
 * the same bits when run again), the applies (plain and fused with relu) bit for bit given
 * NCHW's mean and invstd, then the backward (t_bn_bwd). */
static void t_bn(int B, int Cc, int S)
{
    char shape[64];
    snprintf(shape, sizeof shape, "B%d C%d S%d", B, Cc, S);
    const size_t n = (size_t)B * Cc * S, c = (size_t)Cc, c2 = 2 * c + 1;
    float *x = gt_rnd(n, 2), *gamma = gt_rnd(c, 1), *beta = gt_rnd(c, 0.5f);
    for (size_t i = 0; i < n; i++)
        x[i] += 0.75f; /* a mean far from 0 */
    struct pair X = pair_of(x, B, Cc, S), SUM = pair_alloc(8 * c2), M = pair_alloc(4 * c);
    struct pair IV = pair_alloc(4 * c), RS = pair_alloc(8 * c), Y = pair_alloc(4 * n);
    struct pair XH = pair_alloc(4 * n);
    float *ggam = gt_up(gamma, 4 * c), *gbet = gt_up(beta, 4 * c);
    double *again = G->alloc(8 * c2);
    for (int l = 0; l < 2; l++) {
        gt_layout(l ? DDP_LAYOUT_NHWC : DDP_LAYOUT_NCHW);
#define P(v) (l ? (v).h : (v).c)
        G->bn_stats(P(SUM), P(X), B, Cc, S);
        G->bn_update(P(M), P(IV), P(RS), (float *)P(RS) + c, P(SUM), Cc, 1e-5, 0.1);
    }
    G->bn_stats(again, X.h, B, Cc, S);
    same_flat("bn_stats NHWC run again", shape, again, SUM.h, 8 * c2);
    near_sums("bn_stats", shape, SUM.h, SUM.c, Cc, S == 1);
    near_ulps("bn_update mean", shape, M.h, M.c, c);
    near_ulps("bn_update invstd", shape, IV.h, IV.c, c);
    for (int relu = 0; relu < 2; relu++) { /* relu last: its Y is t_bn_bwd's mask */
        for (int l = 0; l < 2; l++) {
            gt_layout(l ? DDP_LAYOUT_NHWC : DDP_LAYOUT_NCHW);
            if (relu)
                G->bn_relu_fwd_apply(P(Y), P(XH), P(X), M.c, IV.c, ggam, gbet, B, Cc, S);
            else
                G->bn_fwd_apply(P(Y), P(XH), P(X), M.c, IV.c, ggam, gbet, B, Cc, S);
#undef P
        }
        same(relu ? "bn_relu_fwd_apply" : "bn_fwd_apply", shape, Y.h, Y.c, 4, B, Cc, S);
        same("  xhat", shape, XH.h, XH.c, 4, B, Cc, S);
    }
    t_bn_bwd(shape, B, Cc, S, XH, Y, IV.c, ggam);
    pair_free(&X), pair_free(&SUM), pair_free(&M), pair_free(&IV), pair_free(&RS);
    pair_free(&Y), pair_free(&XH);
    G->free(ggam), G->free(gbet), G->free(again);
    free(x), free(gamma), free(beta);
}

#endif /* HAVE_CUDA */

int main(void)
{
#if !HAVE_CUDA
    return gt_skip(GT_NO_CUDA);
#else
    const int rc = gt_start(DDP_PRECISION_FP32, 1, GT_NHWC,
                            "channels-last activations need cuDNN's convolutions");
    if (rc)
        return rc;

    t_transpose(2, 3, 5);
    t_transpose(3, 37, 45); /* neither side a multiple of the tile */
    t_transpose(1, 1, 7);   /* C = 1 and S = 1: copies */
    t_transpose(4, 5, 1);
    t_transpose(2, 64, 1024);
    t_transpose(3, 70, 33 * 33);

    t_pools(3, 1, 10, 10, 3); /* C = 1, floor mode: a row and column left over */
    t_pools(2, 3, 9, 13, 2);  /* odd H and W */
    t_pools(2, 5, 7, 7, 3);
    t_pools(4, 37, 12, 12, 2);
    t_pools(1, 2, 33, 33, 16); /* the largest window a byte argmax holds */
    t_pools(3, 16, 1, 1, 1);   /* S = 1 */
    t_pools(8, 67, 64, 63, 2); /* 2 Mi inputs: many blocks */

    t_gap(3, 5, 49);
    t_gap(2, 1, 9);
    t_gap(4, 70, 1);
    t_gap(16, 130, 64);

    t_bn(4, 3, 25);
    t_bn(2, 1, 49);
    t_bn(3, 37, 13 * 13);
    t_bn(5, 16, 1);        /* S = 1: the same bytes, bit for bit */
    t_bn(64, 3, 32 * 32);  /* 65536 rows of 3 channels */
    t_bn(32, 67, 33 * 33); /* 2.3 Mi: the most splits, channel tiles over 32 */

    printf("worst NHWC vs NCHW: batchnorm sums %.2e normalised, mean/invstd %d ulp\n", g_worst_sums,
           g_worst_ulps);
    return gt_report("test_cuda_layout");
#endif
}

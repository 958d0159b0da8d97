/*
 * test_cuda_act16_norm.c - bf16 activation storage (backend.h set_act_type) of the CUDA
 * backend's batchnorm, pools, global average pool and add (normpool.cu) against the same ops
 * on fp32 storage (suite gpu; on the GPU twin in suite twin). Exit 0 pass, 1 fail, 77 skipped:
 * no CUDA in this build, no usable GPU, or no cuDNN (bf16 activations run only on cuDNN's
 * convolution path), unless DDP_GPU_REQUIRE=1: then each of those fails.
 *
 * Every case draws bf16-representable inputs, runs the op once with fp32 storage on float
 * copies and once with bf16 storage on bf16 copies, and compares bit for bit: each activation
 * the bf16 run stores equals the fp32 run's rounded to bf16 (nearest even); what stays fp32 or
 * double (argmax, batchnorm's sums, mean, invstd, running statistics, dgamma, dbeta) is the
 * same bits in both. Batchnorm's backward saves nothing but reads the forward's xhat and (fused
 * with relu) its output: the fp32 run is fed the bf16 run's, rounded, as the brief of the
 * design says; its sums then equal the bf16 run's exactly, and with them the global sums a
 * SyncBatchNorm all-reduce would hand back (here the local ones scaled, the count doubled).
 *
 * Both layouts (set_layout), each with both storages; DDP_TEST_LAYOUTS=nchw runs NCHW only.
 * Sizes: n % 4 != 0, C not a multiple of 8, floor-mode pools, S = 1 (batchnorm after a flatten,
 * where NHWC runs the NCHW kernels). The bf16 kernels of add and batchnorm's applies take 8
 * values at a time where every pointer is 16-byte aligned, the n % 8 tail and misaligned
 * pointers one at a time: add and batchnorm run again with n = 8k + 3 and tensors 1, 2, 4 or 8
 * elements into their allocations (all of them, or every other one).
 *
 * Dimension letters as in backend.h.
 */
#include <math.h>

#include "gpu_test.h"

#if HAVE_CUDA

static const char *g_layout = "NCHW"; /* the layout in force, for the report */

/* One activation tensor of n values on the device in both storages: f fp32, h bf16; fb, hb
 * their allocations. */
struct act {
    float *f;
    void *h;
    size_t n;
    void *fb, *hb;
};

/* Elements before each activation tensor in its (16-byte aligned) allocation: 0 or 8 keep a
 * bf16 tensor 16-byte aligned (the bf16 kernels' 8-value vectors), 1, 2, 4 do not (their
 * one-element code); with g_mixed only every other tensor is moved (one misaligned pointer
 * among aligned ones). */
static size_t g_off;
static int g_mixed, g_made;

/* A tensor of n values in both storages, g_off elements into its allocations (g_mixed: every
 * other tensor). */
static struct act act_at(size_t n)
{
    const size_t off = g_mixed && (g_made++ & 1) ? 0 : g_off;
    struct act a;
    a.fb = G->alloc(4 * (n + off) + 4);
    a.hb = G->alloc(2 * (n + off) + 4);
    a.f = (float *)a.fb + off;
    a.h = (uint16_t *)a.hb + off;
    a.n = n;
    return a;
}

/* x (n floats, bf16-representable) in both storages. */
static struct act act_up(const float *x, size_t n)
{
    uint16_t *b = ddp_malloc(2 * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        b[i] = gt_bf16_bits(x[i]);
    struct act a = act_at(n);
    if (n) {
        G->upload(a.f, x, 4 * n);
        G->upload(a.h, b, 2 * n);
    }
    free(b);
    return a;
}

static struct act act_alloc(size_t n)
{
    return act_at(n);
}

/* The bf16 tensor's values as an fp32 tensor (the rounded intermediate for the fp32 run). */
static struct act act_rounded(const struct act *a)
{
    uint16_t *b = gt_down(a->h, 2 * a->n);
    float *x = ddp_malloc(4 * (a->n ? a->n : 1));
    for (size_t i = 0; i < a->n; i++)
        x[i] = gt_bf16_float(b[i]);
    struct act r = act_up(x, a->n);
    free(b), free(x);
    return r;
}

static void act_free(struct act *a)
{
    G->free(a->fb);
    G->free(a->hb);
}

/* A pair of fp32 (or other non-activation) device buffers, one per storage run. */
struct two {
    void *f, *h;
};

static struct two two_alloc(size_t bytes)
{
    struct two t = {G->alloc(bytes + 8), G->alloc(bytes + 8)};
    return t;
}

static struct two two_up(const void *host, size_t bytes)
{
    struct two t = {gt_up(host, bytes), gt_up(host, bytes)};
    return t;
}

static void two_free(struct two *t)
{
    G->free(t->f);
    G->free(t->h);
}

/* ---- comparisons ------------------------------------------------------------------------- */

static void verdict(int ok, const char *op, const char *shape, size_t n, const char *how)
{
    gt_count(ok);
    printf("%-4s %-4s %-24s %-20s n=%-8zu %s\n", ok ? "ok" : "FAIL", g_layout, op, shape, n, how);
}

/* The bf16 run's tensor equals the fp32 run's rounded to bf16, bit for bit. */
static void same_act(const char *op, const char *shape, const struct act *a)
{
    float *f = gt_down(a->f, 4 * a->n);
    uint16_t *h = gt_down(a->h, 2 * a->n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < a->n; i++)
        if (h[i] != gt_bf16_bits(f[i]) && !bad++)
            first = i;
    char how[128] = "bf16 = round(fp32), bit for bit";
    if (bad)
        snprintf(how, sizeof how, "%zu differ, first at %zu: bf16 %04x, round(fp32 %.9g) %04x", bad,
                 first, h[first], (double)f[first], gt_bf16_bits(f[first]));
    verdict(!bad, op, shape, a->n, how);
    free(f), free(h);
}

/* Two device buffers of `bytes` bytes hold the same bits (fp32, double or argmax results). */
static void same_bits(const char *op, const char *shape, const void *a_dev, const void *b_dev,
                      size_t bytes, size_t esz)
{
    char *a = gt_down(a_dev, bytes), *b = gt_down(b_dev, bytes);
    const int ok = memcmp(a, b, bytes) == 0;
    verdict(ok, op, shape, bytes / esz, ok ? "the same bits in both" : "differ");
    free(a), free(b);
}

#define SAME2(op, shape, t, bytes, esz) same_bits(op, shape, (t).f, (t).h, bytes, esz)

/* ---- cases ------------------------------------------------------------------------------- */

/* P(v): v's buffer of storage run t. */
#define P(v) (t ? (void *)(v).h : (void *)(v).f)

/* maxpool (int32 argmax), relu + maxpool (byte argmax) and avgpool with k, both ways. */
static void t_pools(int B, int Cc, int H, int W, int k)
{
    char shape[64];
    snprintf(shape, sizeof shape, "B%d C%d %dx%d k%d", B, Cc, H, W, k);
    const size_t ni = (size_t)B * Cc * H * W, no = (size_t)B * Cc * (H / k) * (W / k);
    float *x = gt_rnd_bf16(ni, 1, 0), *dy = gt_rnd_bf16(no, 1, 0);
    for (size_t i = 0; i < ni; i++) /* few levels: ties, so the first-maximum rule matters */
        x[i] = gt_bf16_float(gt_bf16_bits(roundf(x[i] * 3) / 3));
    struct act X = act_up(x, ni), DY = act_up(dy, no), Y = act_alloc(no), Y2 = act_alloc(no);
    struct act DX = act_alloc(ni), DX2 = act_alloc(ni), AY = act_alloc(no), ADX = act_alloc(ni);
    struct two AM = two_alloc(4 * no), A8 = two_alloc(no);
    for (int t = 0; t < 2; t++) {
        gt_storage(t);
        G->maxpool_fwd(P(Y), P(AM), P(X), B, Cc, H, W, k);
        G->maxpool_bwd(P(DX), P(DY), P(AM), B, Cc, H, W, k);
        G->relu_maxpool_fwd(P(Y2), P(A8), P(X), B, Cc, H, W, k);
        G->maxpool_relu_bwd(P(DX2), P(DY), P(Y2), P(A8), B, Cc, H, W, k);
        G->avgpool_fwd(P(AY), P(X), B, Cc, H, W, k);
        G->avgpool_bwd(P(ADX), P(DY), B, Cc, H, W, k);
    }
    gt_storage(0);
    same_act("maxpool_fwd", shape, &Y);
    SAME2("  argmax (int32)", shape, AM, 4 * no, 4);
    same_act("maxpool_bwd", shape, &DX);
    same_act("relu_maxpool_fwd", shape, &Y2);
    SAME2("  argmax (byte)", shape, A8, no, 1);
    same_act("maxpool_relu_bwd", shape, &DX2);
    same_act("avgpool_fwd", shape, &AY);
    same_act("avgpool_bwd", shape, &ADX);
    act_free(&X), act_free(&DY), act_free(&Y), act_free(&Y2), act_free(&DX), act_free(&DX2);
    act_free(&AY), act_free(&ADX), two_free(&AM), two_free(&A8);
    free(x), free(dy);
}

/* relu + maxpool with the bias a convolution left out (conv2d_relu_maxpool_fwd's pass through
 * cuDNN, ddp_cuda_test_relu_maxpool) against bias_relu then maxpool_fwd, conv2d_relu_fwd's
 * epilogue and the pool, in both storages: out and argmax bit for bit (backend.h: the fused op
 * is the two in turn). Under bf16 the unfused pool compares the values bias_relu rounded, so
 * the fused one must round before it compares: values close in fp32 that round alike pick
 * the first of them, where fp32 storage picks the larger (so the argmax of the two storages
 * may differ). Inputs of many levels with a bias that is not bf16: such windows occur. The
 * bf16 outputs are also the fp32 ones rounded. */
static void t_relu_pool_bias(int B, int Cc, int H, int W, int k)
{
    char shape[64];
    snprintf(shape, sizeof shape, "B%d C%d %dx%d k%d", B, Cc, H, W, k);
    const int S = H * W, OH = H / k, OW = W / k, nhwc = g_layout[1] == 'H' && S > 1;
    const size_t ni = (size_t)B * Cc * S, no = (size_t)B * Cc * OH * OW;
    float *x = gt_rnd_bf16(ni, 1, 0.5f), *b = ddp_malloc(4 * (size_t)Cc);
    for (int c = 0; c < Cc; c++)
        b[c] = (float)(0.1 + 0.0137 * c) / 3; /* not bf16-representable */
    float *gb = gt_up(b, 4 * (size_t)Cc);
    struct act X = act_up(x, ni), T = act_up(x, ni), Y = act_alloc(no), YU = act_alloc(no);
    struct two A8 = two_alloc(no), AM = two_alloc(4 * no);
    for (int t = 0; t < 2; t++) {
        gt_storage(t);
        ddp_cuda_test_relu_maxpool(P(Y), P(A8), P(X), gb, B, Cc, H, W, k);
        ddp_cuda_test_bias_relu(P(T), gb, ni, Cc, nhwc ? 1 : S);
        G->maxpool_fwd(P(YU), P(AM), P(T), B, Cc, H, W, k);
    }
    gt_storage(0);
    same_act("relu_maxpool + bias", shape, &Y);
    for (int t = 0; t < 2; t++) {
        uint8_t *a8 = gt_down(t ? A8.h : A8.f, no);
        int32_t *am = gt_down(t ? AM.h : AM.f, 4 * no);
        size_t bad = 0;
        for (size_t o = 0; o < no; o++) { /* o: (b, c, oh, ow), or (b, oh, ow, c) */
            const size_t p = nhwc ? o / (size_t)Cc : o % ((size_t)OH * OW);
            const int oh = (int)(p / (size_t)OW) % OH, ow = (int)(p % (size_t)OW);
            bad += am[o] != (oh * k + a8[o] / k) * W + ow * k + a8[o] % k;
        }
        char how[96] = "the same window places";
        if (bad)
            snprintf(how, sizeof how, "%zu argmax differ", bad);
        verdict(!bad, t ? "  = bias_relu + maxpool bf16" : "  = bias_relu + maxpool fp32", shape,
                no, how);
        free(a8), free(am);
    }
    char *y = gt_down(Y.h, 2 * no), *yu = gt_down(YU.h, 2 * no);
    verdict(memcmp(y, yu, 2 * no) == 0, "  out = unfused, bf16", shape, no,
            memcmp(y, yu, 2 * no) == 0 ? "bit for bit" : "differ");
    act_free(&X), act_free(&T), act_free(&Y), act_free(&YU), two_free(&A8), two_free(&AM);
    G->free(gb);
    free(x), free(b), free(y), free(yu);
}

/* The global average pool, out (B, C) and dinp. */
static void t_gap(int B, int Cc, int S)
{
    char shape[64];
    snprintf(shape, sizeof shape, "B%d C%d S%d", B, Cc, S);
    const size_t n = (size_t)B * Cc * S, bc = (size_t)B * Cc;
    float *x = gt_rnd_bf16(n, 1, 0.25f), *dy = gt_rnd_bf16(bc, 1, 0);
    struct act X = act_up(x, n), DY = act_up(dy, bc), Y = act_alloc(bc), DX = act_alloc(n);
    for (int t = 0; t < 2; t++) {
        gt_storage(t);
        G->gap_fwd(P(Y), P(X), B, Cc, S);
        G->gap_bwd(P(DX), P(DY), B, Cc, S);
    }
    gt_storage(0);
    same_act("gap_fwd", shape, &Y);
    same_act("gap_bwd", shape, &DX);
    act_free(&X), act_free(&DY), act_free(&Y), act_free(&DX);
    free(x), free(dy);
}

/* add, out = a + b: into a third tensor and in place (out = a), from element `off` of each
 * tensor (off 1: no tensor 16-byte aligned, the one-element kernels of both runs; 2, 4: bf16's;
 * 8: every tensor aligned, not at the start of its allocation). */
static void t_add(size_t n, size_t off)
{
    char shape[64];
    snprintf(shape, sizeof shape, "offset %zu", off);
    const size_t m = n + off;
    float *a = gt_rnd_bf16(m, 4, 0), *b = gt_rnd_bf16(m, 4, 0);
    struct act A = act_up(a, m), Bt = act_up(b, m), O = act_alloc(m);
    for (int t = 0; t < 2; t++) {
        gt_storage(t);
        const size_t e = off * (t ? 2 : 4); /* bytes before element `off` */
#define AT(v) (float *)((char *)P(v) + e)
        G->add(AT(O), AT(A), AT(Bt), n);
        G->add(AT(A), AT(A), AT(Bt), n); /* in place */
#undef AT
    }
    gt_storage(0);
    same_act("add", shape, &O);
    same_act("add in place", shape, &A);
    act_free(&A), act_free(&Bt), act_free(&O);
    free(a), free(b);
}

/* Batchnorm's backward, plain and fused with relu: the fp32 run reads the bf16 run's xhat and
 * output (XR, YR: rounded), dout the same values; the local sums the same bits, the dinp
 * applied with global sums unlike them (SyncBatchNorm's all-reduce) rounded, dgamma and dbeta
 * (+=) the same bits. */
static void t_bn_bwd(const char *shape, int B, int Cc, int S, const struct act *XH,
                     const struct act *Y, const struct two *IV, const float *ggam)
{
    const size_t n = (size_t)B * Cc * S, c = (size_t)Cc, c2 = 2 * c + 1;
    float *dy = gt_rnd_bf16(n, 1, 0), *dg0 = gt_rnd_bf16(c, 0.1f, 0);
    struct act DY = act_up(dy, n), DX = act_alloc(n), XR = act_rounded(XH), YR = act_rounded(Y);
    struct two LS = two_alloc(8 * c2), DG = two_up(dg0, 4 * c), DB = two_up(dg0, 4 * c);
    double *glob = ddp_malloc(sizeof(double) * c2), *gglob = G->alloc(sizeof(double) * c2);
    for (int relu = 0; relu < 2; relu++) {
        for (int t = 0; t < 2; t++) {
            gt_storage(t);
            const void *xh = t ? XH->h : XR.f, *y = t ? Y->h : YR.f;
            if (relu)
                G->bn_relu_bwd_sums(P(LS), P(DY), y, xh, B, Cc, S);
            else
                G->bn_bwd_sums(P(LS), P(DY), xh, B, Cc, S);
        }
        SAME2(relu ? "bn_relu_bwd_sums" : "bn_bwd_sums", shape, LS, 8 * c2, 8);
        G->download(glob, LS.f, sizeof(double) * c2);
        for (size_t i = 0; i + 1 < c2; i++)
            glob[i] = glob[i] * 1.7 + 0.1;
        glob[c2 - 1] *= 2;
        G->upload(gglob, glob, sizeof(double) * c2);
        for (int t = 0; t < 2; t++) {
            gt_storage(t);
            const void *xh = t ? XH->h : XR.f, *y = t ? Y->h : YR.f;
            if (relu)
                G->bn_relu_bwd_apply(P(DX), P(DG), P(DB), P(DY), y, xh, P(*IV), ggam, P(LS), gglob,
                                     B, Cc, S);
            else
                G->bn_bwd_apply(P(DX), P(DG), P(DB), P(DY), xh, P(*IV), ggam, P(LS), gglob, B, Cc,
                                S);
        }
        gt_storage(0);
        same_act(relu ? "bn_relu_bwd_apply dinp" : "bn_bwd_apply dinp", shape, &DX);
        SAME2("  dgamma (+=)", shape, DG, 4 * c, 4);
        SAME2("  dbeta (+=)", shape, DB, 4 * c, 4);
    }
    act_free(&DY), act_free(&DX), act_free(&XR), act_free(&YR);
    two_free(&LS), two_free(&DG), two_free(&DB);
    G->free(gglob);
    free(dy), free(dg0), free(glob);
}

/* Batchnorm: the sums (the same bits: bf16 values read exactly, summed in double in the same
 * order), mean, invstd and running statistics; the applies plain (also without xhat, as in
 * evaluation) and fused with relu; then the backward (t_bn_bwd). */
static void t_bn(int B, int Cc, int S)
{
    char shape[64];
    snprintf(shape, sizeof shape, "B%d C%d S%d", B, Cc, S);
    if (g_off)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), " off%zu%s", g_off,
                 g_mixed ? " mixed" : "");
    const size_t n = (size_t)B * Cc * S, c = (size_t)Cc, c2 = 2 * c + 1;
    float *x = gt_rnd_bf16(n, 2, 0.75f), *gamma = gt_rnd_bf16(c, 1, 0),
          *beta = gt_rnd_bf16(c, 0.5f, 0);
    float *run = gt_rnd_bf16(2 * c, 0.5f, 1); /* running mean and variance */
    float *ggam = gt_up(gamma, 4 * c), *gbet = gt_up(beta, 4 * c);
    struct act X = act_up(x, n), Y = act_alloc(n), XH = act_alloc(n), Y0 = act_alloc(n);
    struct two SUM = two_alloc(8 * c2), M = two_alloc(4 * c), IV = two_alloc(4 * c);
    struct two RS = two_up(run, 8 * c);
    for (int t = 0; t < 2; t++) {
        gt_storage(t);
        G->bn_stats(P(SUM), P(X), B, Cc, S);
        G->bn_update(P(M), P(IV), P(RS), (float *)P(RS) + c, P(SUM), Cc, 1e-5, 0.1);
        G->bn_fwd_apply(P(Y0), NULL, P(X), P(M), P(IV), ggam, gbet, B, Cc, S);
    }
    SAME2("bn_stats sums", shape, SUM, 8 * c2, 8);
    SAME2("bn_update mean", shape, M, 4 * c, 4);
    SAME2("bn_update invstd", shape, IV, 4 * c, 4);
    SAME2("bn_update running", shape, RS, 8 * c, 4);
    gt_storage(0);
    same_act("bn_fwd_apply (no xhat)", shape, &Y0);
    for (int relu = 0; relu < 2; relu++) { /* relu last: its Y is t_bn_bwd's mask */
        for (int t = 0; t < 2; t++) {
            gt_storage(t);
            if (relu)
                G->bn_relu_fwd_apply(P(Y), P(XH), P(X), P(M), P(IV), ggam, gbet, B, Cc, S);
            else
                G->bn_fwd_apply(P(Y), P(XH), P(X), P(M), P(IV), ggam, gbet, B, Cc, S);
        }
        gt_storage(0);
        same_act(relu ? "bn_relu_fwd_apply" : "bn_fwd_apply", shape, &Y);
        same_act("  xhat", shape, &XH);
    }
    t_bn_bwd(shape, B, Cc, S, &XH, &Y, &IV, ggam);
    act_free(&X), act_free(&Y), act_free(&XH), act_free(&Y0);
    two_free(&SUM), two_free(&M), two_free(&IV), two_free(&RS);
    G->free(ggam), G->free(gbet);
    free(x), free(gamma), free(beta), free(run);
}

#undef P

/* Batchnorm with n = 8k + 3 (the bf16 kernels' 8-value vectors and their tail) and every
 * activation 1, 2, 4 or 8 elements into its allocation, or every other one (mixed). */
static void t_bn_offsets(void)
{
    const size_t offs[] = {0, 1, 2, 4, 8};
    for (int mixed = 0; mixed < 2; mixed++)
        for (size_t k = mixed; k < sizeof offs / sizeof offs[0] - mixed; k++) {
            g_off = offs[k], g_mixed = mixed, g_made = 0;
            t_bn(1, 11, 9);         /* n = 99, C innermost under NHWC */
            t_bn(3, 1, 73);         /* n = 219 */
            t_bn(1, 5, 8 * 25 + 7); /* n = 1035 */
        }
    g_off = 0, g_mixed = 0;
}

/* Every case in the layout in force. */
static void t_all(void)
{
    t_pools(3, 1, 10, 10, 3); /* C = 1, floor mode: a row and column left over */
    t_pools(2, 3, 9, 13, 2);  /* odd H and W */
    t_pools(2, 5, 7, 7, 3);
    t_pools(4, 37, 12, 12, 2);
    t_pools(1, 2, 33, 33, 16); /* the largest window a byte argmax holds */
    t_pools(3, 13, 1, 1, 1);   /* S = 1 */
    t_pools(2, 19, 31, 30, 2);
    t_relu_pool_bias(2, 5, 7, 7, 3);
    t_relu_pool_bias(4, 13, 32, 32, 2);
    t_relu_pool_bias(3, 16, 1, 1, 1);

    t_gap(3, 5, 49);
    t_gap(2, 1, 9);
    t_gap(4, 70, 1);
    t_gap(5, 13, 64);

    const size_t offs[] = {0, 1, 2, 4, 8};
    for (size_t k = 0; k < sizeof offs / sizeof offs[0]; k++) {
        const size_t off = offs[k];
        t_add(1, off);
        t_add(7, off);
        t_add(8 * 100 + 3, off);
        t_add((1u << 16) + 5, off);
    }

    t_bn(4, 3, 25);
    t_bn(2, 1, 49);
    t_bn(3, 37, 13 * 13);
    t_bn(5, 16, 1); /* S = 1: batchnorm after a flatten */
    t_bn(7, 13, 1);
    t_bn(32, 3, 32 * 32); /* several splits a channel */
    t_bn(9, 11, 33 * 33);
    t_bn_offsets();
}

/* set_layout(l), or fail. */
static void layout(int l)
{
    gt_layout(l);
    g_layout = l == DDP_LAYOUT_NHWC ? "NHWC" : "NCHW";
}

#endif /* HAVE_CUDA */

int main(void)
{
#if !HAVE_CUDA
    return gt_skip(GT_NO_CUDA);
#else
    const int rc = gt_start(DDP_PRECISION_BF16, DDP_CUDA_CONV_RANKED, GT_ACT16 | GT_NHWC,
                            "bf16 activations need cuDNN's convolutions");
    if (rc)
        return rc;
    const char *only = getenv("DDP_TEST_LAYOUTS");
    layout(DDP_LAYOUT_NCHW);
    t_all();
    if (!only || strcmp(only, "nchw") != 0) {
        layout(DDP_LAYOUT_NHWC);
        t_all();
        layout(DDP_LAYOUT_NCHW);
    }
    return gt_report("test_cuda_act16_norm");
#endif
}

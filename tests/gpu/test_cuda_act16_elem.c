/*
 * test_cuda_act16_elem.c - bf16 activation storage (backend.h set_act_type(DDP_ACT_BF16)) of
 * the CUDA backend's element-wise and channels-last kernels (elementwise.cu, layout.cu) against
 * the same kernels on fp32 storage (suite gpu; suite twin on the GPU twin). Exit 0 pass, 1
 * fail, 77 skipped: no CUDA in this build, no usable GPU, or no cuDNN (bf16 activations run
 * only on cuDNN's convolution path), unless DDP_GPU_REQUIRE=1: then each of those fails.
 *
 * The oracle: every op computes in fp32 on the values it reads and rounds what it stores, so
 * on inputs that bf16 represents exactly, the bf16-storage result is the fp32-storage result
 * rounded to bf16 (nearest even), bit for bit. Each case runs the op once on fp32 storage and
 * once on bf16 storage on the same values and compares so. What is not an activation (dropout's
 * mask, a pool's argmax, the double column sums, a bias gradient) must be the same bits in both.
 * Ops: relu_fwd/bwd, add_relu_fwd, relu_bwd_join, dropout_fwd/bwd (also captured in a CUDA
 * graph), the bias broadcast and bias + relu epilogue, to_nhwc/to_nchw, act_from_f32 and
 * act_to_f32 in both layouts, and under NHWC the pools, relu + maxpool with a bias, gap and
 * the column sums (cuda.h's test entries reach the helpers that are no entry of the table).
 * Sizes are odd (n % 4 != 0, C not a multiple of 8) beside even ones. The bf16 kernels take
 * 8 values (16 bytes) at a time where every pointer is 16-byte aligned, the n % 8 tail and
 * misaligned pointers one at a time: the element-wise cases run again (t_offsets) with n = 8k + 3
 * and every tensor 1, 2, 4 or 8 elements into its allocation, or every other one (mixed).
 *
 * Dimension letters as in backend.h.
 */
#include <math.h>

#include "gpu_test.h"

#if HAVE_CUDA

/* ---- data -------------------------------------------------------------------------------- */

/* n values in [-scale, scale), rounded to bf16 (rep) or not. */
static float *rnd(size_t n, float scale, int rep)
{
    return rep ? gt_rnd_bf16(n, scale, 0) : gt_rnd(n, scale);
}

/* Few levels (ties for the first-maximum rule, exact zeros for relu), bf16 exactly. */
static float *levels(size_t n)
{
    float *x = rnd(n, 1, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = roundf(x[i] * 3) / 4;
    return x;
}

/* Elements before each tensor two_of makes (its allocation 16-byte aligned): 0 or 8 keep a bf16
 * tensor 16-byte aligned (the kernels' 8-value vectors), 1, 2, 4 do not (their one-element
 * code); with g_mixed only every other tensor is moved, so that one misaligned pointer among
 * aligned ones must send an op to the one-element code too. */
static size_t g_off;
static int g_mixed, g_made;

/* A device copy of host floats x (n) in storage act16 (x bf16-representable there), `off`
 * elements after the start of its allocation (*base, for free). */
static float *up_at(const float *x, size_t n, int act16, size_t off, float **base)
{
    const size_t esz = act16 ? 2 : 4;
    char *d = G->alloc(esz * (n + off) + 16);
    *base = (float *)d;
    d += esz * off;
    if (!act16) {
        G->upload(d, x, 4 * n);
        return (float *)d;
    }
    uint16_t *h = ddp_malloc(2 * n + 2);
    for (size_t i = 0; i < n; i++)
        h[i] = gt_bf16_bits(x[i]);
    G->upload(d, h, 2 * n);
    free(h);
    return (float *)d;
}

/* up_at at the start of the allocation (freed with G->free). */
static float *up(const float *x, size_t n, int act16)
{
    float *base;
    return up_at(x, n, act16, 0, &base);
}

/* ---- comparisons ------------------------------------------------------------------------- */

static void verdict(int ok, const char *op, const char *shape, size_t n, const char *how)
{
    gt_count(ok);
    printf("%-4s %-30s %-24s n=%-8zu %s\n", ok ? "ok" : "FAIL", op, shape, n, how);
}

/* The bf16 activations b16 (device, n) equal the fp32 ones f32 (device, n) rounded. */
static void oracle(const char *op, const char *shape, const float *f32, const float *b16, size_t n)
{
    float *r = ddp_malloc(4 * n + 4);
    uint16_t *h = ddp_malloc(2 * n + 2);
    if (n) {
        G->download(r, f32, 4 * n);
        G->download(h, b16, 2 * n);
    }
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (h[i] != gt_bf16_bits(r[i]) && !bad++)
            first = i;
    char how[128] = "bf16 = rn(fp32), bit for bit";
    if (bad)
        snprintf(how, sizeof how, "%zu differ, first at %zu: %g, fp32 %g", bad, first,
                 (double)gt_bf16_float(h[first]), (double)r[first]);
    verdict(!bad, op, shape, n, how);
    free(r), free(h);
}

/* Two device arrays of `bytes` bytes the same bits: non-activations of both storages, or a
 * result and its expected value. */
static void same(const char *op, const char *shape, const void *a, const void *b, size_t bytes)
{
    char *x = ddp_malloc(bytes + 1), *y = ddp_malloc(bytes + 1);
    if (bytes) {
        G->download(x, a, bytes);
        G->download(y, b, bytes);
    }
    const int ok = memcmp(x, y, bytes) == 0;
    verdict(ok, op, shape, bytes, ok ? "same bits (n in bytes)" : "differ (n in bytes)");
    free(x), free(y);
}

/* ---- element-wise ------------------------------------------------------------------------ */

/* One tensor in both storages: [0] fp32, [1] bf16; base their allocations. */
struct two {
    float *d[2], *base[2];
};

/* x in both storages, g_off elements into each allocation (every other tensor with g_mixed). */
static struct two two_of(const float *x, size_t n)
{
    const size_t off = g_mixed && (g_made++ & 1) ? 0 : g_off;
    struct two t;
    for (int s = 0; s < 2; s++)
        t.d[s] = up_at(x, n, s, off, &t.base[s]);
    return t;
}

static void two_free(struct two *t)
{
    G->free(t->base[0]);
    G->free(t->base[1]);
}

/* "n<n>", with the offset of the tensors (g_off, g_mixed) where there is one. */
static void shape_n(char *shape, size_t len, size_t n)
{
    if (g_off)
        snprintf(shape, len, "n%zu off%zu%s", n, g_off, g_mixed ? " mixed" : "");
    else
        snprintf(shape, len, "n%zu", n);
}

/* relu, add + relu, relu_bwd and relu_bwd_join (accumulating or not, one input absent). */
static void t_relu(size_t n)
{
    char shape[64];
    shape_n(shape, sizeof shape, n);
    float *x = levels(n), *y = rnd(n, 1, 1), *dy = rnd(n, 2, 1), *d0 = rnd(n, 1, 1);
    struct two X = two_of(x, n), Y = two_of(y, n), DY = two_of(dy, n), O = two_of(d0, n);
    struct two AR = two_of(d0, n), DX = two_of(d0, n), DA = two_of(d0, n), DB = two_of(d0, n);
    struct two DC = two_of(d0, n);
    for (int s = 0; s < 2; s++) {
        gt_storage(s);
        G->relu_fwd(O.d[s], X.d[s], n);
        G->add_relu_fwd(AR.d[s], X.d[s], Y.d[s], n);
        G->relu_bwd(DX.d[s], DY.d[s], X.d[s], n);
        G->relu_bwd_join(DA.d[s], 1, DB.d[s], 0, DY.d[s], Y.d[s], n);
        G->relu_bwd_join(NULL, 0, DC.d[s], 1, DY.d[s], X.d[s], n);
    }
    gt_storage(0);
    oracle("relu_fwd", shape, O.d[0], O.d[1], n);
    oracle("add_relu_fwd", shape, AR.d[0], AR.d[1], n);
    oracle("relu_bwd", shape, DX.d[0], DX.d[1], n);
    oracle("relu_bwd_join da (+=)", shape, DA.d[0], DA.d[1], n);
    oracle("relu_bwd_join db (=)", shape, DB.d[0], DB.d[1], n);
    oracle("relu_bwd_join da NULL, db +=", shape, DC.d[0], DC.d[1], n);
    two_free(&X), two_free(&Y), two_free(&DY), two_free(&O), two_free(&AR);
    two_free(&DX), two_free(&DA), two_free(&DB), two_free(&DC);
    free(x), free(y), free(dy), free(d0);
}

/* dropout forward (the mask fp32, the same in both) and backward. */
static void t_dropout(size_t n, float p)
{
    char shape[64], sn[48];
    shape_n(sn, sizeof sn, n);
    snprintf(shape, sizeof shape, "%s p%.2f", sn, (double)p);
    float *x = rnd(n, 3, 1), *dy = rnd(n, 1, 1);
    struct two X = two_of(x, n), DY = two_of(dy, n), Y = two_of(x, n), DX = two_of(x, n);
    struct two MASK = two_of(x, n); /* fp32 in both runs: [0] for the fp32 run, [1] unused */
    struct two MASK2 = two_of(x, n);
    float *mask[2] = {MASK.d[0], MASK2.d[0]};
    for (int s = 0; s < 2; s++) {
        gt_storage(s);
        G->dropout_fwd(Y.d[s], mask[s], X.d[s], n, p, 0x5eedULL + n);
        G->dropout_bwd(DX.d[s], DY.d[s], mask[s], n);
    }
    gt_storage(0);
    oracle("dropout_fwd", shape, Y.d[0], Y.d[1], n);
    same("dropout_fwd mask (fp32)", shape, mask[0], mask[1], 4 * n);
    oracle("dropout_bwd", shape, DX.d[0], DX.d[1], n);
    two_free(&X), two_free(&DY), two_free(&Y), two_free(&DX), two_free(&MASK), two_free(&MASK2);
    free(x), free(dy);
}

/* The bias broadcast and the bias + relu epilogue (b fp32, not bf16-representable), with
 * `inner` elements a feature run (1: linear; P: conv2d NCHW). */
static void t_bias(int rows, int O, int inner)
{
    char shape[64];
    char sn[48];
    shape_n(sn, sizeof sn, (size_t)rows * O * inner);
    snprintf(shape, sizeof shape, "rows%d O%d inner%d%s", rows, O, inner, sn + strcspn(sn, " "));
    const size_t n = (size_t)rows * O * inner;
    float *b = rnd((size_t)O, 1, 0), *x = levels(n);
    float *gb = G->alloc(4 * (size_t)O);
    G->upload(gb, b, 4 * (size_t)O);
    struct two F = two_of(x, n), R = two_of(x, n), R0 = two_of(x, n);
    for (int s = 0; s < 2; s++) {
        gt_storage(s);
        ddp_cuda_test_fill_bias(F.d[s], gb, n, O, inner);
        ddp_cuda_test_bias_relu(R.d[s], gb, n, O, inner);
        ddp_cuda_test_bias_relu(R0.d[s], NULL, n, O, inner);
    }
    gt_storage(0);
    oracle("fill_bias", shape, F.d[0], F.d[1], n);
    oracle("bias_relu", shape, R.d[0], R.d[1], n);
    oracle("bias_relu (no bias)", shape, R0.d[0], R0.d[1], n);
    two_free(&F), two_free(&R), two_free(&R0);
    G->free(gb);
    free(b), free(x);
}

/* act_from_f32 and act_to_f32's plain cast (NCHW, one sample) of n values, fp32 NOT
 * bf16-representable, the tensors placed as two_of places them: against the host's rounding,
 * and widened back exactly. */
static void t_cast(size_t n)
{
    char shape[64];
    shape_n(shape, sizeof shape, n);
    float *x = rnd(n, 3, 0), *r = ddp_malloc(4 * n + 4);
    for (size_t i = 0; i < n; i++)
        r[i] = gt_bf16_float(gt_bf16_bits(x[i]));
    struct two X = two_of(x, n), W = two_of(r, n), A = two_of(r, n), BK = two_of(x, n);
    gt_storage(1);
    G->act_from_f32(A.d[1], X.d[0], 1, 1, (int)n);
    same("act_from_f32 (cast)", shape, A.d[1], W.d[1], 2 * n);
    G->act_to_f32(BK.d[0], A.d[1], n);
    same("act_to_f32 (cast)", shape, BK.d[0], W.d[0], 4 * n);
    gt_storage(0);
    two_free(&X), two_free(&W), two_free(&A), two_free(&BK);
    free(x), free(r);
}

/* The element-wise cases with every tensor `off` elements into its allocation (mixed: every
 * other one), n = 8k + 3: bf16's 8-value vectors and tail, or the one-element code. */
static void t_offsets(size_t off, int mixed)
{
    g_off = off, g_mixed = mixed, g_made = 0;
    t_relu(8 * 125 + 3);
    t_dropout(8 * 129 + 3, 0.3f);
    t_bias(3, 37, 1);  /* one feature a run (linear; NHWC conv) */
    t_bias(2, 5, 101); /* NCHW conv: n = 1010 */
    t_cast(8 * 70 + 3);
    g_off = 0, g_mixed = 0;
}

/* dropout_fwd captured in a CUDA graph on bf16 storage, replayed with other seeds: equals the
 * uncaptured op with the replay's seed, output and mask. */
static void t_graph(size_t n)
{
    if (!G->graph_capture_begin) {
        verdict(0, "graph dropout", "", n, "the CUDA backend has no graph ops");
        return;
    }
    char err[DDP_ERR_LEN], shape[64];
    snprintf(shape, sizeof shape, "n%zu bf16", n);
    const uint64_t salt = 0xd1b54a32d192ed03ULL;
    float *x = rnd(n, 2, 1);
    float *gx = up(x, n, 1), *yc = G->alloc(2 * n + 4), *yu = G->alloc(2 * n + 4);
    float *mc = G->alloc(4 * n + 4), *mu = G->alloc(4 * n + 4);
    gt_storage(1);
    for (int64_t t = 1; t <= 3; t++) {
        const struct ddp_graph_scalars sc = {0.1f, 0.9f, 0.9f, t, 0x9e3779b9ULL * (uint64_t)t};
        if (t == 1 && (G->graph_capture_begin(0, &sc, err, sizeof err) != 0 ||
                       (G->dropout_fwd(yc, mc, gx, n, 0.4f, sc.noise ^ salt),
                        G->graph_capture_end(0, err, sizeof err)) != 0)) {
            verdict(0, "graph dropout capture", shape, n, err);
            break;
        }
        G->graph_launch(0, &sc);
        G->dropout_fwd(yu, mu, gx, n, 0.4f, sc.noise ^ salt);
        char name[64];
        snprintf(name, sizeof name, "graph dropout step %d", (int)t);
        same(name, shape, yc, yu, 2 * n);
        same("  its mask", shape, mc, mu, 4 * n);
    }
    gt_storage(0);
    G->free(gx), G->free(yc), G->free(yu), G->free(mc), G->free(mu);
    free(x);
}

/* ---- layout ------------------------------------------------------------------------------ */

/* x (B, C, S) permuted to (B, S, C) on the host. */
static float *perm(const float *x, int B, int C, int S)
{
    float *y = ddp_malloc(sizeof(float) * ((size_t)B * C * S + 1));
    for (size_t b = 0; b < (size_t)B; b++)
        for (size_t c = 0; c < (size_t)C; c++)
            for (size_t s = 0; s < (size_t)S; s++)
                y[(b * S + s) * C + c] = x[(b * C + c) * S + s];
    return y;
}

/* to_nhwc and to_nchw on bf16 storage; act_from_f32 (fp32 NOT bf16-representable) in both
 * layouts against the host's rounding (and permutation), act_to_f32 widening it back. */
static void t_convert(int B, int C, int S)
{
    char shape[64];
    snprintf(shape, sizeof shape, "B%d C%d S%d", B, C, S);
    const size_t n = (size_t)B * C * S;
    float *x = rnd(n, 3, 0), *xr = rnd(n, 1, 1);
    float *gx = up(x, n, 0), *back = G->alloc(4 * n + 4);
    struct two T = two_of(xr, n), TN = two_of(xr, n), TB = two_of(xr, n), A = two_of(xr, n);
    for (int s = 0; s < 2; s++) {
        gt_storage(s);
        G->to_nhwc(TN.d[s], T.d[s], B, C, S);
        G->to_nchw(TB.d[s], TN.d[s], B, C, S);
    }
    oracle("to_nhwc", shape, TN.d[0], TN.d[1], n);
    oracle("to_nchw", shape, TB.d[0], TB.d[1], n);
    same("to_nchw back (bf16)", shape, TB.d[1], T.d[1], 2 * n);
    for (int l = 0; l < 2; l++) {
        gt_layout(l ? DDP_LAYOUT_NHWC : DDP_LAYOUT_NCHW);
        float *want = l && S > 1 ? perm(x, B, C, S) : perm(x, (int)n, 1, 1); /* or a copy */
        float *gw = up(want, n, 0), *gwr = up(want, n, 1);
        char op[64];
        for (int s = 0; s < 2; s++) {
            gt_storage(s);
            G->act_from_f32(A.d[s], gx, B, C, S);
        }
        snprintf(op, sizeof op, "act_from_f32 %s", l ? "NHWC" : "NCHW");
        same(op, shape, A.d[0], gw, 4 * n);  /* fp32: the copy or transposition */
        same(op, shape, A.d[1], gwr, 2 * n); /* bf16: that, each value rounded */
        oracle(op, shape, A.d[0], A.d[1], n);
        G->act_to_f32(back, A.d[1], n); /* storage bf16 (s = 1) still in force */
        snprintf(op, sizeof op, "act_to_f32 %s", l ? "NHWC" : "NCHW");
        float *wr = ddp_malloc(4 * n + 4);
        for (size_t i = 0; i < n; i++)
            wr[i] = gt_bf16_float(gt_bf16_bits(want[i]));
        float *gwf = up(wr, n, 0);
        same(op, shape, back, gwf, 4 * n);
        gt_storage(0);
        G->act_to_f32(back, A.d[0], n);
        same("act_to_f32 fp32 (a copy)", shape, back, A.d[0], 4 * n);
        G->free(gw), G->free(gwr), G->free(gwf);
        free(want), free(wr);
    }
    gt_layout(DDP_LAYOUT_NCHW);
    G->free(gx), G->free(back);
    two_free(&T), two_free(&TN), two_free(&TB), two_free(&A);
    free(x), free(xr);
}

/* Under NHWC: maxpool, relu + maxpool (the conv's bias or none), avgpool, forward and
 * backward; argmax the same in both storages. */
static void t_pools(int B, int C, int H, int W, int k)
{
    char shape[64];
    snprintf(shape, sizeof shape, "B%d C%d %dx%d k%d", B, C, H, W, k);
    const size_t ni = (size_t)B * C * H * W, no = (size_t)B * C * (H / k) * (W / k);
    float *x = levels(ni), *dy = rnd(no, 1, 1), *b = rnd((size_t)C, 0.5f, 0), *z = rnd(ni, 1, 1);
    float *gb = G->alloc(4 * (size_t)C + 4);
    G->upload(gb, b, 4 * (size_t)C);
    struct two X = two_of(x, ni), DY = two_of(dy, no), Y = two_of(z, no), DX = two_of(z, ni);
    struct two Y2 = two_of(z, no), Y3 = two_of(z, no), DX2 = two_of(z, ni), AY = two_of(z, no);
    struct two ADX = two_of(z, ni);
    int32_t *am[2] = {G->alloc(4 * no + 4), G->alloc(4 * no + 4)};
    uint8_t *a8[2] = {G->alloc(no + 4), G->alloc(no + 4)},
            *a9[2] = {G->alloc(no + 4), G->alloc(no + 4)};
    gt_layout(DDP_LAYOUT_NHWC);
    for (int s = 0; s < 2; s++) {
        gt_storage(s);
        G->maxpool_fwd(Y.d[s], am[s], X.d[s], B, C, H, W, k);
        G->maxpool_bwd(DX.d[s], DY.d[s], am[s], B, C, H, W, k);
        ddp_cuda_test_relu_maxpool(Y2.d[s], a8[s], X.d[s], gb, B, C, H, W, k);
        G->relu_maxpool_fwd(Y3.d[s], a9[s], X.d[s], B, C, H, W, k);
        G->maxpool_relu_bwd(DX2.d[s], DY.d[s], Y2.d[s], a8[s], B, C, H, W, k);
        G->avgpool_fwd(AY.d[s], X.d[s], B, C, H, W, k);
        G->avgpool_bwd(ADX.d[s], DY.d[s], B, C, H, W, k);
    }
    gt_storage(0);
    gt_layout(DDP_LAYOUT_NCHW);
    oracle("maxpool_fwd", shape, Y.d[0], Y.d[1], no);
    same("  argmax", shape, am[0], am[1], 4 * no);
    oracle("maxpool_bwd", shape, DX.d[0], DX.d[1], ni);
    oracle("relu_maxpool + bias", shape, Y2.d[0], Y2.d[1], no);
    same("  argmax", shape, a8[0], a8[1], no);
    oracle("relu_maxpool_fwd", shape, Y3.d[0], Y3.d[1], no);
    same("  argmax", shape, a9[0], a9[1], no);
    oracle("maxpool_relu_bwd", shape, DX2.d[0], DX2.d[1], ni);
    oracle("avgpool_fwd", shape, AY.d[0], AY.d[1], no);
    oracle("avgpool_bwd", shape, ADX.d[0], ADX.d[1], ni);
    two_free(&X), two_free(&DY), two_free(&Y), two_free(&DX), two_free(&Y2), two_free(&Y3);
    two_free(&DX2), two_free(&AY), two_free(&ADX);
    for (int s = 0; s < 2; s++)
        G->free(am[s]), G->free(a8[s]), G->free(a9[s]);
    G->free(gb);
    free(x), free(dy), free(b), free(z);
}

/* Under NHWC: the global average pool, out (B, C) and dinp (B, S, C). */
static void t_gap(int B, int C, int S)
{
    char shape[64];
    snprintf(shape, sizeof shape, "B%d C%d S%d", B, C, S);
    const size_t n = (size_t)B * C * S, bc = (size_t)B * C;
    float *x = rnd(n, 1, 1), *dy = rnd(bc, 1, 1);
    struct two X = two_of(x, n), DY = two_of(dy, bc), Y = two_of(dy, bc), DX = two_of(x, n);
    gt_layout(DDP_LAYOUT_NHWC);
    for (int s = 0; s < 2; s++) {
        gt_storage(s);
        G->gap_fwd(Y.d[s], X.d[s], B, C, S);
        G->gap_bwd(DX.d[s], DY.d[s], B, C, S);
    }
    gt_storage(0);
    gt_layout(DDP_LAYOUT_NCHW);
    oracle("gap_fwd", shape, Y.d[0], Y.d[1], bc);
    oracle("gap_bwd", shape, DX.d[0], DX.d[1], n);
    two_free(&X), two_free(&DY), two_free(&Y), two_free(&DX);
    free(x), free(dy);
}

/* The column sums of a (rows, C) activation matrix (batchnorm's statistics, its backward's
 * masked sums, a channels-last bias gradient): the same doubles and db in both storages. */
static void t_colsum(size_t rows, int C)
{
    char shape[64];
    snprintf(shape, sizeof shape, "rows%zu C%d", rows, C);
    const size_t n = rows * (size_t)C, np = (size_t)C * 256 * 2;
    float *a = rnd(n, 2, 1), *b = rnd(n, 1, 1), *m = levels(n), *d0 = rnd((size_t)C, 1, 0);
    struct two A = two_of(a, n), Bv = two_of(b, n), M = two_of(m, n);
    double *part[3][2];
    float *db[2];
    size_t splits = 0;
    for (int s = 0; s < 2; s++) {
        gt_storage(s);
        for (int j = 0; j < 3; j++)
            part[j][s] = G->alloc(sizeof(double) * np);
        splits = ddp_cuda_test_colsum(part[0][s], A.d[s], NULL, NULL, rows, C, 1);
        ddp_cuda_test_colsum(part[1][s], A.d[s], NULL, NULL, rows, C, 2);
        ddp_cuda_test_colsum(part[2][s], A.d[s], Bv.d[s], M.d[s], rows, C, 2);
        db[s] = up(d0, (size_t)C, 0);
        ddp_cuda_test_colsum_add(db[s], A.d[s], rows, C);
    }
    gt_storage(0);
    same("colsum np 1", shape, part[0][0], part[0][1], sizeof(double) * C * splits);
    same("colsum a, a^2", shape, part[1][0], part[1][1], sizeof(double) * C * splits * 2);
    same("colsum masked a, a*b", shape, part[2][0], part[2][1], sizeof(double) * C * splits * 2);
    same("colsum_add db (fp32 +=)", shape, db[0], db[1], 4 * (size_t)C);
    for (int s = 0; s < 2; s++) {
        for (int j = 0; j < 3; j++)
            G->free(part[j][s]);
        G->free(db[s]);
    }
    two_free(&A), two_free(&Bv), two_free(&M);
    free(a), free(b), free(m), free(d0);
}

#endif /* HAVE_CUDA */

int main(void)
{
#if !HAVE_CUDA
    return gt_skip(GT_NO_CUDA);
#else
    const int rc = gt_start(DDP_PRECISION_FP32, 1, GT_ACT16 | GT_NHWC,
                            "bf16 activations need cuDNN's convolutions");
    if (rc)
        return rc;

    t_relu(1001); /* n % 4 = 1 */
    t_relu(4096);
    t_relu(3 * 65536 + 2);
    t_dropout(1003, 0.3f);
    t_dropout(8192, 0.5f);
    t_dropout(77, 1.0f); /* keep 0: every output 0 */
    t_bias(5, 7, 1);     /* linear: one feature a run */
    t_bias(3, 37, 1);
    t_bias(4, 5, 49); /* conv2d NCHW: P positions a run */
    t_bias(2, 40, 13 * 13);
    t_graph(4099);
    t_cast(8 * 1000 + 3);
    t_cast(5);
    const size_t offs[] = {0, 1, 2, 4, 8}; /* 8: a bf16 tensor 16-byte aligned, not at the start */
    for (size_t k = 0; k < sizeof offs / sizeof offs[0]; k++)
        t_offsets(offs[k], 0);
    t_offsets(1, 1);
    t_offsets(4, 1);

    t_convert(2, 3, 5);
    t_convert(3, 37, 45); /* neither side a multiple of the tile */
    t_convert(1, 1, 7);   /* C = 1: a copy */
    t_convert(4, 5, 1);   /* S = 1: the same bytes in both layouts */
    t_convert(2, 70, 33 * 33);

    t_pools(3, 1, 10, 10, 3); /* C = 1, floor mode */
    t_pools(2, 3, 9, 13, 2);
    t_pools(4, 37, 12, 12, 2);
    t_pools(1, 2, 33, 33, 16);
    t_pools(8, 67, 32, 31, 2); /* many blocks */

    t_gap(3, 5, 49);
    t_gap(2, 1, 9);
    t_gap(16, 130, 64);

    t_colsum(7, 3);
    t_colsum(25 * 4, 37);
    t_colsum(33 * 33 * 8, 67); /* many splits, channel tiles over 32 */

    return gt_report("test_cuda_act16_elem");
#endif
}

/*
 * test_cuda_pool_bias.c - the CUDA backend's maxpool_relu_bwd_db (backend.h: the backward of
 * relu + maxpool that also sums the convolution's bias gradient) against maxpool_relu_bwd
 * followed by conv2d_bwd's own bias reduction, and a model step with the fusion against one
 * without it (suite gpu; on the GPU twin in suite twin). Exit 0 pass, 1 fail, 77 skipped: no
 * CUDA in this build, no usable GPU, or no cuDNN (the fusion's bits are the cuDNN path's),
 * unless DDP_GPU_REQUIRE=1: then each of those fails.
 *
 * The op: on the same inputs, dinp bit for bit as maxpool_relu_bwd's, and db (added into a
 * db that is not zero) bit for bit as conv2d_bwd's on that dinp as the convolution's output
 * gradient (a 1x1 convolution, so that its output is the pool's input). Both layouts, both
 * activation storages; odd C, odd H and W (floor mode: rows and columns no window holds), S =
 * 1, the largest window (16), and sizes of several splits a channel in both reductions.
 *
 * The model: fashion-cnn's blocks (conv2d + relu + maxpool, a floor-mode pool, odd channel
 * counts), one training step through the backend and through the same table without
 * maxpool_relu_bwd_db: logits and every gradient bit for bit, in both layouts and storages.
 *
 * Dimension letters as in backend.h.
 */
#define GPU_TEST_SEED 0x9e3779b97f4a7c15ULL
#include "gpu_test.h"

#include "nn/model.h"

#include "backend_args.h" /* CONV_GEOM */

#if HAVE_CUDA

static int g_nhwc, g_bf16; /* the layout and storage in force */

/* Bytes of n activations in the storage in force. */
static size_t abytes(size_t n)
{
    return n * (g_bf16 ? 2 : 4);
}

/* x (n floats) on the device as activations in the storage in force. */
static float *act_up(const float *x, size_t n)
{
    void *d = G->alloc(abytes(n) + 4);
    if (!g_bf16) {
        G->upload(d, x, 4 * n);
        return d;
    }
    uint16_t *b = ddp_malloc(2 * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        b[i] = gt_bf16_bits(x[i]);
    G->upload(d, b, 2 * n);
    free(b);
    return d;
}

static float *f32_up(const float *x, size_t n)
{
    float *d = G->alloc(4 * n + 4);
    G->upload(d, x, 4 * n);
    return d;
}

static void verdict(int ok, const char *what, const char *shape, const char *how)
{
    gt_count(ok);
    printf("%-4s %s %s %-34s %-22s %s\n", ok ? "ok" : "FAIL", g_nhwc ? "NHWC" : "NCHW",
           g_bf16 ? "bf16" : "fp32", what, shape, how);
}

/* Two device buffers hold the same bytes. */
static void same(const char *what, const char *shape, const void *a, const void *b, size_t bytes)
{
    char *ha = ddp_malloc(bytes + 1), *hb = ddp_malloc(bytes + 1);
    G->download(ha, a, bytes);
    G->download(hb, b, bytes);
    const int ok = memcmp(ha, hb, bytes) == 0;
    verdict(ok, what, shape, ok ? "bit for bit" : "differ");
    free(ha), free(hb);
}

/* The op on (B, C, H, W) with window k, in the layout and storage in force. */
static void t_op(int B, int C, int H, int W, int k)
{
    char shape[64];
    snprintf(shape, sizeof shape, "B%d C%d %dx%d k%d", B, C, H, W, k);
    const size_t ni = (size_t)B * C * H * W, no = (size_t)B * C * (H / k) * (W / k);
    const struct ddp_conv_geom *g = CONV_GEOM(1, H, W, C, 1, 1, 0); /* out (B, C, H, W) */
    const size_t ncol = G->conv_plan(B, g), nin = (size_t)B * H * W;
    float *x = gt_rnd_bf16(ni, 1, 0.4f), *dy = gt_rnd_bf16(no, 1, 0),
          *db0 = gt_rnd_bf16((size_t)C, 0.5f, 0);
    float *cx = gt_rnd_bf16(nin, 1, 0), *w = gt_rnd_bf16((size_t)C, 1, 0);
    float *gx = act_up(x, ni), *gdy = act_up(dy, no), *gy = act_up(dy, no);
    float *gdx = G->alloc(abytes(ni) + 4), *gdx2 = G->alloc(abytes(ni) + 4);
    float *gcx = act_up(cx, nin), *gcdx = G->alloc(abytes(nin) + 4), *gw = f32_up(w, (size_t)C);
    float *gdw = f32_up(w, (size_t)C), *gdb = f32_up(db0, (size_t)C);
    float *gdb2 = f32_up(db0, (size_t)C), *col = G->alloc(sizeof(float) * (ncol ? ncol : 1));
    uint8_t *a8 = G->alloc(no + 4);
    G->relu_maxpool_fwd(gy, a8, gx, B, C, H, W, k);
    G->maxpool_relu_bwd(gdx, gdy, gy, a8, B, C, H, W, k);
    G->conv2d_bwd(gcdx, gdw, gdb, col, gdx, gcx, gw, B, g);
    G->maxpool_relu_bwd_db(gdx2, gdb2, gdy, gy, a8, B, C, H, W, k);
    same("dinp = maxpool_relu_bwd's", shape, gdx2, gdx, abytes(ni));
    same("db (+=) = conv2d_bwd's", shape, gdb2, gdb, 4 * (size_t)C);
    float *h = ddp_malloc(4 * (size_t)C);
    G->download(h, gdb2, 4 * (size_t)C);
    int moved = 0;
    for (int c = 0; c < C; c++)
        moved += h[c] != db0[c];
    verdict(moved > 0, "db moved", shape, moved ? "some channel's sum non-zero" : "unchanged");
    free(h);
    G->free(gx), G->free(gdy), G->free(gy), G->free(gdx), G->free(gdx2), G->free(gcx);
    G->free(gcdx), G->free(gw), G->free(gdw), G->free(gdb), G->free(gdb2), G->free(col);
    G->free(a8);
    free(x), free(dy), free(db0), free(cx), free(w);
}

/* One training step of layers (B samples of 1x28x28, labels i % 10) on be: logits and the
 * gradients downloaded (fp32); *fused the layers with code 3. NULL on failure. */
static float *model_grads(const struct ddp_backend *be, const char *layers, int B, float *logits,
                          size_t *np, int *fused)
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
    const uint64_t rng = g_rng;
    g_rng = 0x1234;
    float *x = gt_rnd_bf16((size_t)B * 784, 1, 0);
    g_rng = rng;
    int32_t lab[64];
    for (int i = 0; i < B; i++)
        lab[i] = i % 10;
    float *gx = f32_up(x, (size_t)B * 784);
    int32_t *glab = G->alloc(sizeof lab);
    G->upload(glab, lab, sizeof(int32_t) * (size_t)B);
    float *zero = calloc(m.nparams, sizeof(float));
    be->upload(m.grads, zero, sizeof(float) * m.nparams);
    free(zero);
    const float *y = ddp_model_forward(&m, gx, B, 1, 7);
    be->xent(ddp_model_dlogits(&m), NULL, y, glab, B, 10, 1.0f / (float)B, 0);
    ddp_model_backward(&m, gx, B, NULL, NULL);
    be->download(logits, y, sizeof(float) * (size_t)B * 10);
    float *gr = ddp_malloc(sizeof(float) * m.nparams);
    be->download(gr, m.grads, sizeof(float) * m.nparams);
    *np = m.nparams;
    *fused = 0;
    for (int i = 0; i < m.nlayers; i++)
        *fused += m.layers[i].fused == 3;
    G->free(gx), G->free(glab);
    free(x);
    ddp_model_free(&m);
    return gr;
}

/* fashion-cnn's blocks with and without maxpool_relu_bwd_db: logits and gradients alike. */
static void t_model(void)
{
    static const char *layers = "conv2d(5, 3), relu, maxpool(2), conv2d(7, 3, pad=1), relu, "
                                "maxpool(3), flatten, linear(16), relu, linear(10)";
    enum { B = 6 };
    struct ddp_backend plain = *G;
    plain.maxpool_relu_bwd_db = NULL;
    float lf[B * 10], lp[B * 10];
    size_t nf = 0, np = 0;
    int ff = 0, fp = 0;
    float *gf = model_grads(G, layers, B, lf, &nf, &ff);
    float *gp = model_grads(&plain, layers, B, lp, &np, &fp);
    const int ok = gf && gp && nf == np && memcmp(lf, lp, sizeof lf) == 0 &&
                   memcmp(gf, gp, sizeof(float) * nf) == 0;
    char how[96];
    snprintf(how, sizeof how, "%s (%zu gradients, %d conv+relu+pool fused)",
             ok ? "logits and gradients bit for bit" : "differ", nf, ff);
    verdict(ok, "model step fused vs unfused db", "fashion-cnn", how);
    verdict(ff == 2 && fp == 2, "model conv+relu+pool fused", "fashion-cnn",
            ff == 2 && fp == 2 ? "both blocks in both" : "not both blocks");
    free(gf), free(gp);
}

/* Every case in the layout and storage in force. */
static void t_all(void)
{
    t_op(3, 5, 9, 13, 2); /* odd C, H, W: floor mode */
    t_op(2, 7, 10, 10, 3);
    t_op(5, 3, 1, 1, 1); /* S = 1 */
    t_op(1, 2, 33, 33, 16);
    t_op(8, 13, 40, 40, 2); /* several splits a channel, both reductions */
    t_model();
}

/* Layout nhwc and storage bf16 in force, or exit failing. */
static void set(int nhwc, int bf16)
{
    gt_layout(nhwc ? DDP_LAYOUT_NHWC : DDP_LAYOUT_NCHW);
    gt_storage(bf16);
    g_nhwc = nhwc;
    g_bf16 = bf16;
}

#endif /* HAVE_CUDA */

int main(void)
{
#if !HAVE_CUDA
    return gt_skip(GT_NO_CUDA);
#else
    const int rc = gt_start(DDP_PRECISION_FP32, DDP_CUDA_CONV_RANKED, GT_ACT16 | GT_NHWC,
                            "the fused bias gradient's bits are those of cuDNN's convolution path");
    if (rc)
        return rc;
    if (!G->maxpool_relu_bwd_db) {
        printf("FAIL the CUDA backend has no maxpool_relu_bwd_db\n");
        return 1;
    }
    for (int nhwc = 0; nhwc < 2; nhwc++)
        for (int bf16 = 0; bf16 < 2; bf16++) {
            set(nhwc, bf16);
            t_all();
        }
    set(0, 0);
    return gt_report("test_cuda_pool_bias");
#endif
}

/*
 * gpu_test.h - what the CUDA op tests (tests/gpu/test_cuda_*.c, also built for the GPU twin)
 * share: the exit codes (77 skipped, or 1 where DDP_GPU_REQUIRE=1 asks for a GPU), starting
 * the CUDA backend and cuDNN's convolution path, the activations' layout and storage, a seeded
 * random stream and bf16 values on the host, device copies, and the check counters with the
 * closing "N checks, M failed" line. Each test is one translation unit that includes this once;
 * the state (G, g_rng, the counters) is that test's own. What a test compares and how it
 * prints a verdict stay in the test.
 *
 * A test may define GPU_TEST_SEED (its random stream's start) before including this.
 */
#ifndef DDP_TEST_GPU_TEST_H
#define DDP_TEST_GPU_TEST_H

#include "ddp_build.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/hash.h"
#include "core/util.h"
#if HAVE_CUDA
#include "backend/cuda.h"
#endif

/* What a build without CUDA says before it skips. */
#define GT_NO_CUDA "this ddptrain was built without CUDA (nvcc not found at configure time)"

/* DDP_GPU_REQUIRE=1 (tests/gpu/device-check.sh on the GPU machine, the twin suite): a missing
 * GPU or cuDNN is a failure, not a skip. */
static inline int gt_required(void)
{
    const char *req = getenv("DDP_GPU_REQUIRE");
    return req && strcmp(req, "1") == 0;
}

/* Says why the test cannot run; the exit code: 77 (skipped), or 1 (failed) when required. */
static inline int gt_skip(const char *why)
{
    printf("SKIP: %s\n", why);
    return gt_required() ? 1 : 77;
}

#if HAVE_CUDA

#ifndef GPU_TEST_SEED
#define GPU_TEST_SEED 0x243f6a8885a308d3ULL
#endif

static int g_fail, g_checks;           /* checks made and failed, for gt_report */
static const struct ddp_backend *G;    /* the CUDA backend under test (gt_start) */
static uint64_t g_rng = GPU_TEST_SEED; /* the random stream of gt_uniform */

/* ---- start and finish -------------------------------------------------------------------- */

/* gt_start's cudnn_det for a test that runs on either convolution path. */
#define GT_ANY_CONV (-1)

/* What a test on cuDNN's path also needs of the backend (gt_start's wants, or-ed): bf16
 * activations (set_act_type), channels-last activations (set_layout, to_nhwc). */
enum { GT_ACT16 = 1, GT_NHWC = 2 };

/* Whether the backend grants wants (enum above), each tried and then set back to the default
 * (fp32 storage, NCHW); err (len bytes) says why not. */
static inline int gt_grants(int wants, char *err, size_t len)
{
    if ((wants & GT_ACT16) && (!G->set_act_type || G->set_act_type(DDP_ACT_BF16, err, len) != 0 ||
                               G->set_act_type(DDP_ACT_FP32, err, len) != 0))
        return 0;
    if ((wants & GT_NHWC) &&
        (!G->set_layout || !G->to_nhwc || G->set_layout(DDP_LAYOUT_NHWC, err, len) != 0 ||
         G->set_layout(DDP_LAYOUT_NCHW, err, len) != 0))
        return 0;
    return 1;
}

/* The start of a test's main: stdout line-buffered; the CUDA backend of device 0 at precision
 * (enum ddp_precision) into G, the GPU line printed; then, unless cudnn_det is GT_ANY_CONV,
 * cuDNN's convolutions under that choice (ddp_cuda_conv_path's deterministic), their line
 * printed, and what wants asks (gt_grants). 0, or the exit code (gt_skip) where there is no
 * usable GPU, no cuDNN or not what wants asks (need says what needs it) - no cuDNN is also 1
 * where DDP_TEST_CONV_PATH=cudnn says it is expected. */
static inline int gt_start(int precision, int cudnn_det, int wants, const char *need)
{
    char err[DDP_ERR_LEN], why[DDP_ERR_LEN + 160];
    setvbuf(stdout, NULL, _IOLBF, 0);
    G = ddp_backend_cuda(0, precision, err, sizeof err);
    if (!G) {
        snprintf(why, sizeof why, "no GPU: %s", err);
        return gt_skip(why);
    }
    printf("GPU: %s; %s\n", ddp_cuda_device_string(), ddp_cuda_version_string());
    if (cudnn_det == GT_ANY_CONV)
        return 0;
    if (!ddp_cuda_conv_path(1, cudnn_det, err, sizeof err)) {
        const char *path = getenv("DDP_TEST_CONV_PATH");
        snprintf(why, sizeof why, "%s: %s", need, err);
        const int rc = gt_skip(why);
        return path && strcmp(path, "cudnn") == 0 ? 1 : rc;
    }
    printf("convolutions: %s\n", err);
    if (!gt_grants(wants, err, sizeof err)) {
        snprintf(why, sizeof why, "%s: %s", need, err);
        return gt_skip(why);
    }
    return 0;
}

/* One check made: counted, and counted failed unless ok. Returns ok. */
static inline int gt_count(int ok)
{
    g_checks++;
    g_fail += !ok;
    return ok;
}

/* The closing line ("NAME: N checks, M failed"); the exit code: 1 on any failure, else 0. */
static inline int gt_report(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, g_checks, g_fail);
    return g_fail ? 1 : 0;
}

/* Activations in storage act16 (1 bf16, 0 fp32) from now on, or exit failing. */
static inline void gt_storage(int act16)
{
    char err[DDP_ERR_LEN];
    if (G->set_act_type(act16 ? DDP_ACT_BF16 : DDP_ACT_FP32, err, sizeof err) != 0) {
        printf("FAIL set_act_type(%d): %s\n", act16, err);
        exit(1);
    }
}

/* Activations in layout l (enum ddp_layout) from now on, or exit failing. */
static inline void gt_layout(int l)
{
    char err[DDP_ERR_LEN];
    if (G->set_layout(l, err, sizeof err) != 0) {
        printf("FAIL set_layout(%d): %s\n", l, err);
        exit(1);
    }
}

/* ---- data -------------------------------------------------------------------------------- */

/* The next value of the stream, uniform in [0, 1) (53 bits). */
static inline double gt_uniform(void)
{
    return (double)(ddp_splitmix64(&g_rng) >> 11) / 9007199254740992.0;
}

/* n floats uniform in [-scale, scale) (a new array, at least one element). */
static inline float *gt_rnd(size_t n, float scale)
{
    float *x = ddp_malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((2 * gt_uniform() - 1) * scale);
    return x;
}

/* The bf16 bits of f rounded to nearest, ties to even (a NaN stays a NaN). */
static inline uint16_t gt_bf16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The float that bf16 bits h stand for. */
static inline float gt_bf16_float(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* f rounded to bf16 (nearest even) and widened back: what a bf16 store keeps (NaN: f). */
static inline float gt_bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x7fffffffu) > 0x7f800000u ? f : gt_bf16_float(gt_bf16_bits(f));
}

/* n values uniform in [-scale, scale) plus shift, each rounded to bf16 (so representable). */
static inline float *gt_rnd_bf16(size_t n, float scale, float shift)
{
    float *x = ddp_malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        x[i] = gt_bf16_round((float)((2 * gt_uniform() - 1) * scale) + shift);
    return x;
}

/* The normalised error ||got - want|| / ||want|| of n floats (||got - want|| where want is 0);
 * *differ: how many of them differ in their bits. */
static inline double gt_nerr(const float *got, const float *want, size_t n, size_t *differ)
{
    double d = 0, s = 0;
    *differ = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = (double)got[i] - want[i];
        d += e * e;
        s += (double)want[i] * want[i];
        *differ += memcmp(&got[i], &want[i], sizeof(float)) != 0;
    }
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

/* A device copy of bytes of host memory (an allocation of at least 4 bytes); G->free it. */
static inline void *gt_up(const void *host, size_t bytes)
{
    void *d = G->alloc(bytes ? bytes : 4);
    if (bytes)
        G->upload(d, host, bytes);
    return d;
}

/* A host copy of bytes of device memory (at least 4 bytes allocated); free it. */
static inline void *gt_down(const void *dev, size_t bytes)
{
    void *h = ddp_malloc(bytes ? bytes : 4);
    if (bytes)
        G->download(h, dev, bytes);
    return h;
}

/* Bytes of n activations in storage act16 (bf16: 2 each), at least one value's. */
static inline size_t gt_act_bytes(size_t n, int act16)
{
    return (n ? n : 1) * (act16 ? 2 : 4);
}

/* Index in layout nhwc of NCHW element i of a (B, C, S) tensor. */
static inline size_t gt_act_at(size_t i, int C, int S, int nhwc)
{
    const size_t b = i / ((size_t)C * S), c = i / S % C, s = i % S;
    return nhwc ? (b * S + s) * C + c : i;
}

/* A device copy of host x (B, C, S) NCHW, in layout nhwc and storage act16 (bf16: the top
 * 16 bits of each value, exact for bf16 values). */
static inline void *gt_act_up(const float *x, int B, int C, int S, int nhwc, int act16)
{
    const size_t n = (size_t)B * C * S;
    char *t = ddp_malloc(gt_act_bytes(n, 0));
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        const uint16_t h = (uint16_t)(u >> 16);
        memcpy(t + gt_act_at(i, C, S, nhwc) * (act16 ? 2 : 4),
               act16 ? (const void *)&h : (const void *)&u, act16 ? 2 : 4);
    }
    void *d = G->alloc(gt_act_bytes(n, act16));
    if (n)
        G->upload(d, t, gt_act_bytes(n, act16));
    free(t);
    return d;
}

/* Host NCHW float copy of device d (B, C, S) in layout nhwc and storage act16; d freed. */
static inline float *gt_act_down(void *d, int B, int C, int S, int nhwc, int act16)
{
    const size_t n = (size_t)B * C * S;
    char *t = ddp_malloc(gt_act_bytes(n, act16));
    float *h = ddp_malloc(gt_act_bytes(n, 0));
    if (n)
        G->download(t, d, gt_act_bytes(n, act16));
    G->free(d);
    for (size_t i = 0; i < n; i++) {
        const size_t j = gt_act_at(i, C, S, nhwc);
        uint32_t u = 0;
        if (act16) {
            uint16_t v;
            memcpy(&v, t + 2 * j, 2);
            u = (uint32_t)v << 16;
        } else {
            memcpy(&u, t + 4 * j, 4);
        }
        memcpy(&h[i], &u, 4);
    }
    free(t);
    return h;
}

#endif /* HAVE_CUDA */

#endif

/*
 * synth.c - seeded prototype-plus-noise datasets (model and guarantees in synth.h).
 *
 * Randomness is counter based: splitmix64 keyed by (seed, stream, index), so any sample
 * can be made alone and the output never depends on chunking. Noise is a sum of four
 * 16-bit uniforms (Irwin-Hall, scaled to unit variance): integer arithmetic, no libm. Only
 * the prototypes use libm (exp, sqrt), once per run.
 *
 * Legend: K classes, D elements per sample (C*H*W), n samples per chunk.
 */
#include "data/synth.h"

#include "core/hash.h"
#include "core/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reference feature count for the amplitude scaling (MNIST's 28 x 28). */
#define SYNTH_REF_ELEMS 784.0
/* Blobs per channel in an image prototype, and their width range (fraction of max(H, W)). */
#define SYNTH_BLOBS 4
#define SYNTH_BLOB_MIN 0.08
#define SYNTH_BLOB_SPAN 0.17
/* Blob fields correlate across classes (smooth, few degrees of freedom): their linear
 * part needs this much more amplitude for the same linear accuracy as uniform fields. */
#define SYNTH_BLOB_BOOST 2.5

enum { STREAM_TRAIN = 1, STREAM_TEST = 2, STREAM_PROTO = 3 };

struct ddp_synth {
    ddp_synth_spec spec;
    int64_t elems; /* D */
    float *a;      /* (K, D) linear prototypes, zero mean, unit RMS */
    float *q;      /* (K, D) sign-flipped prototypes, zero mean, unit RMS */
    float amp_a, amp_q;
};

/* Key of (seed, stream, index): independent streams for every sample and prototype. */
static uint64_t key3(uint64_t seed, uint64_t stream, uint64_t index)
{
    return ddp_mix64(ddp_mix64(ddp_mix64(seed + DDP_SPLITMIX64_GAMMA) ^ stream) + index);
}

/* Next value of a splitmix64 sequence. */
static uint64_t next64(uint64_t *state)
{
    return ddp_splitmix64(state);
}

/* Uniform double in [0, 1). */
static double uniform(uint64_t *state)
{
    return (double)(next64(state) >> 11) * 0x1p-53;
}

void ddp_synth_defaults(ddp_synth_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    spec->rank = 3;
    spec->dims[0] = 1;
    spec->dims[1] = 28;
    spec->dims[2] = 28;
    spec->classes = 10;
    spec->n_train = 60000;
    spec->n_test = 10000;
    spec->seed = 0;
    spec->dtype = DDP_H5DTYPE_UINT8;
    spec->noise = DDP_SYNTH_NOISE;
}

int ddp_synth_check(const ddp_synth_spec *spec, char *err, size_t errlen)
{
    if (spec->rank != 1 && spec->rank != 3)
        return ddp_err(err, errlen, "--shape must have 1 (D) or 3 (C,H,W) dimensions, not %d",
                       spec->rank);
    int64_t d = 1;
    for (int i = 0; i < spec->rank; i++) {
        if (spec->dims[i] <= 0 || spec->dims[i] > DDP_H5_MAX_SAMPLE_ELEMS ||
            (d *= spec->dims[i]) > DDP_H5_MAX_SAMPLE_ELEMS)
            return ddp_err(err, errlen,
                           "--shape: every dimension must be > 0 and a sample at "
                           "most %lld elements",
                           (long long)DDP_H5_MAX_SAMPLE_ELEMS);
    }
    if (spec->classes < 2 || spec->classes > DDP_H5_MAX_CLASSES)
        return ddp_err(err, errlen, "--classes %d: must be in [2, %d]", spec->classes,
                       DDP_H5_MAX_CLASSES);
    if (spec->n_train < 1 || spec->n_train > DDP_H5_MAX_SAMPLES)
        return ddp_err(err, errlen, "--train %lld: must be in [1, %lld]", (long long)spec->n_train,
                       (long long)DDP_H5_MAX_SAMPLES);
    if (spec->n_test < 1 || spec->n_test > DDP_H5_MAX_SAMPLES)
        return ddp_err(err, errlen, "--test %lld: must be in [1, %lld]", (long long)spec->n_test,
                       (long long)DDP_H5_MAX_SAMPLES);
    if (spec->dtype != DDP_H5DTYPE_UINT8 && spec->dtype != DDP_H5DTYPE_FLOAT32)
        return ddp_err(err, errlen, "--dtype: must be uint8 or float32");
    if (!(spec->noise >= 0 && spec->noise <= DDP_SYNTH_MAX_NOISE))
        return ddp_err(err, errlen, "--noise %g: must be in [0, %g]", spec->noise,
                       DDP_SYNTH_MAX_NOISE);
    if ((int64_t)spec->classes * d > DDP_SYNTH_MAX_PROTO_BYTES / (2 * (int64_t)sizeof(float)))
        return ddp_err(err, errlen,
                       "--classes %d x %lld elements per sample: the prototypes "
                       "would need more than %lld MiB; use fewer classes or smaller samples",
                       spec->classes, (long long)d, (long long)(DDP_SYNTH_MAX_PROTO_BYTES >> 20));
    return 0;
}

/* Zero mean (when D > 1) and unit RMS, in place. */
static void normalise(float *f, int64_t d)
{
    double mean = 0, ss = 0;
    if (d > 1) {
        for (int64_t j = 0; j < d; j++)
            mean += f[j];
        mean /= (double)d;
    }
    for (int64_t j = 0; j < d; j++) {
        f[j] = (float)(f[j] - mean);
        ss += (double)f[j] * f[j];
    }
    double rms = sqrt(ss / (double)d);
    if (rms > 1e-12)
        for (int64_t j = 0; j < d; j++)
            f[j] = (float)(f[j] / rms);
}

/* One prototype field from its own stream: blobs for (C, H, W), uniform values for (D).
 * Blobs are separable Gaussians, so a field costs O(C * blobs * (H + W + H * W)). */
static void make_field(const ddp_synth_spec *sp, uint64_t index, float *f, float *ry, float *rx)
{
    uint64_t st = key3(sp->seed, STREAM_PROTO, index);
    if (sp->rank == 1) {
        for (int64_t j = 0; j < sp->dims[0]; j++)
            f[j] = (float)(2.0 * uniform(&st) - 1.0);
    } else {
        int64_t c = sp->dims[0], h = sp->dims[1], w = sp->dims[2];
        double big = (double)(h > w ? h : w);
        memset(f, 0, (size_t)(c * h * w) * sizeof *f);
        for (int64_t ch = 0; ch < c; ch++) {
            float *fc = f + ch * h * w;
            for (int b = 0; b < SYNTH_BLOBS; b++) {
                double cy = uniform(&st) * (double)h, cx = uniform(&st) * (double)w;
                double s = (SYNTH_BLOB_MIN + SYNTH_BLOB_SPAN * uniform(&st)) * big;
                double amp = 2.0 * uniform(&st) - 1.0;
                for (int64_t y = 0; y < h; y++)
                    ry[y] = (float)(amp * exp(-((double)y - cy) * ((double)y - cy) / (2 * s * s)));
                for (int64_t x = 0; x < w; x++)
                    rx[x] = (float)exp(-((double)x - cx) * ((double)x - cx) / (2 * s * s));
                for (int64_t y = 0; y < h; y++)
                    for (int64_t x = 0; x < w; x++)
                        fc[y * w + x] += ry[y] * rx[x];
            }
        }
    }
    normalise(f, sp->rank == 1 ? sp->dims[0] : sp->dims[0] * sp->dims[1] * sp->dims[2]);
}

ddp_synth *ddp_synth_create(const ddp_synth_spec *spec, char *err, size_t errlen)
{
    if (ddp_synth_check(spec, err, errlen) != 0)
        return NULL;
    ddp_synth *g = ddp_calloc(1, sizeof *g);
    g->spec = *spec;
    g->elems = 1;
    for (int i = 0; i < spec->rank; i++)
        g->elems *= spec->dims[i];
    size_t per = (size_t)g->elems;
    g->a = ddp_malloc((size_t)spec->classes * per * sizeof *g->a);
    g->q = ddp_malloc((size_t)spec->classes * per * sizeof *g->q);
    int64_t hw =
        spec->rank == 3 ? (spec->dims[1] > spec->dims[2] ? spec->dims[1] : spec->dims[2]) : 1;
    float *ry = ddp_malloc((size_t)hw * sizeof *ry), *rx = ddp_malloc((size_t)hw * sizeof *rx);
    for (int k = 0; k < spec->classes; k++) {
        make_field(spec, 2 * (uint64_t)k, g->a + (size_t)k * per, ry, rx);
        make_field(spec, 2 * (uint64_t)k + 1, g->q + (size_t)k * per, ry, rx);
    }
    free(ry);
    free(rx);
    double scale = sqrt(SYNTH_REF_ELEMS / (double)g->elems);
    g->amp_a = (float)(DDP_SYNTH_LINEAR * scale * (spec->rank == 3 ? SYNTH_BLOB_BOOST : 1.0));
    g->amp_q = (float)(DDP_SYNTH_SIGN * (scale > 1.0 ? scale : 1.0));
    return g;
}

void ddp_synth_destroy(ddp_synth *g)
{
    if (!g)
        return;
    free(g->a);
    free(g->q);
    free(g);
}

void ddp_synth_generate(const ddp_synth *g, int split, int64_t first, int64_t n, void *images,
                        int32_t *labels)
{
    const ddp_synth_spec *sp = &g->spec;
    const int64_t d = g->elems;
    const float noise = (float)(sp->noise * sqrt(3.0) / 65536.0); /* Irwin-Hall to unit var */
    for (int64_t i = 0; i < n; i++) {
        uint64_t st = key3(sp->seed, split ? STREAM_TEST : STREAM_TRAIN, (uint64_t)(first + i));
        uint64_t r = next64(&st);
        int y = (int)(r % (uint64_t)sp->classes);
        float sa = g->amp_a, sq = (next64(&st) & 1) ? g->amp_q : -g->amp_q;
        const float *a = g->a + (size_t)y * (size_t)d, *q = g->q + (size_t)y * (size_t)d;
        labels[i] = y;
        uint8_t *u8 = sp->dtype == DDP_H5DTYPE_UINT8 ? (uint8_t *)images + i * d : NULL;
        float *f32 = sp->dtype == DDP_H5DTYPE_FLOAT32 ? (float *)images + i * d : NULL;
        for (int64_t j = 0; j < d; j++) {
            uint64_t z = next64(&st);
            /* sum of four 16-bit uniforms, centred: variance 4 * 65536^2 / 12 */
            int32_t e = (int32_t)(z & 0xffff) + (int32_t)((z >> 16) & 0xffff) +
                        (int32_t)((z >> 32) & 0xffff) + (int32_t)(z >> 48) - 2 * 65535;
            float v = 0.5f + sa * a[j] + sq * q[j] + noise * (float)e;
            v = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
            if (u8)
                u8[j] = (uint8_t)(v * 255.0f + 0.5f);
            else
                f32[j] = v;
        }
    }
}

int ddp_synth_write(const ddp_synth_spec *spec, const char *out_path, char *err, size_t errlen)
{
    ddp_synth *g = ddp_synth_create(spec, err, errlen);
    if (!g)
        return -1;
    int rc = -1;
    size_t esz = spec->dtype == DDP_H5DTYPE_UINT8 ? 1 : sizeof(float);
    size_t row = (size_t)g->elems * esz;
    size_t cb = spec->chunk_bytes ? spec->chunk_bytes : DDP_SYNTH_CHUNK_BYTES;
    int64_t per = (int64_t)(cb / row);
    int64_t nmax = spec->n_train > spec->n_test ? spec->n_train : spec->n_test;
    if (per < 1)
        per = 1;
    if (per > nmax)
        per = nmax;
    void *img = ddp_malloc((size_t)per * row);
    int32_t *lab = ddp_malloc((size_t)per * sizeof *lab);
    char source[256], shape[96];
    if (spec->rank == 1)
        snprintf(shape, sizeof shape, "%lld", (long long)spec->dims[0]);
    else
        snprintf(shape, sizeof shape, "%lld,%lld,%lld", (long long)spec->dims[0],
                 (long long)spec->dims[1], (long long)spec->dims[2]);
    snprintf(source, sizeof source,
             "ddptrain data synth --shape %s --classes %d --seed %llu "
             "--noise %g --dtype %s",
             shape, spec->classes, (unsigned long long)spec->seed, spec->noise,
             ddp_h5dtype_name(spec->dtype));
    ddp_h5writer *w = ddp_h5writer_create(out_path, source, err, errlen);
    if (!w)
        goto fail;
    for (int split = 0; split < 2; split++) {
        int64_t n = split ? spec->n_test : spec->n_train;
        if (ddp_h5writer_begin(w, split ? "/test" : "/train", n, spec->rank, spec->dims,
                               spec->dtype, spec->classes, err, errlen) != 0)
            goto fail;
        for (int64_t at = 0; at < n; at += per) {
            int64_t k = n - at < per ? n - at : per;
            ddp_synth_generate(g, split, at, k, img, lab);
            if (ddp_h5writer_append(w, img, lab, k, err, errlen) != 0)
                goto fail;
        }
        if (ddp_h5writer_end(w, err, errlen) != 0)
            goto fail;
    }
    if (ddp_h5writer_commit(w, err, errlen) != 0)
        goto fail;
    rc = 0;
fail:
    ddp_h5writer_destroy(w);
    free(img);
    free(lab);
    ddp_synth_destroy(g);
    return rc;
}

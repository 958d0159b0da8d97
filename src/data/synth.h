/*
 * synth.h - synthetic, learnable classification datasets in the HDF5 layout of h5data.h,
 * for tests, benchmarks and trying the trainer without downloading anything.
 *
 * Model. From the seed, each class k gets two prototype fields over the sample shape,
 * A_k and Q_k (zero mean, unit RMS; smooth Gaussian blobs for (C, H, W), independent
 * uniform values for (D)). Sample i of a split draws its label y, a sign s = +-1 and noise:
 *     x = clamp(0.5 + a * A_y + s * b * Q_y + noise * e, 0, 1),   e ~ unit variance
 * with a = DDP_SYNTH_LINEAR * sqrt(784 / D) (x2.5 for blobs) and b = DDP_SYNTH_SIGN *
 * max(1, sqrt(784 / D)). The A part is visible to a linear model, which therefore does
 * well above chance; the Q part appears with a random sign, so its class mean is zero and
 * only a non-linear model (an MLP: |<x, Q_k>|) can use it, which it does, scoring much
 * higher. With the defaults (20000 samples, 5 epochs of SGD, numpy): softmax regression
 * 48-73% test accuracy across (784), (1,28,28), (3,32,32), (64); a one-hidden-layer MLP of
 * 256 units 99-100%. A larger --noise makes both harder.
 *
 * Determinism: sample i of a split depends only on (seed, split, i), never on the chunk
 * size or the order of generation: the same arguments give the same bytes with the same
 * build (the prototypes use libm's exp, which another C library may round differently in
 * the last bit). Train and test share the prototypes but not the samples. Memory: the prototypes (2 * classes * D floats, bounded
 * by DDP_SYNTH_MAX_PROTO_BYTES) plus one chunk, whatever N is.
 *
 * Not here: augmentation, class imbalance, regression targets.
 */
#ifndef DDP_SYNTH_H
#define DDP_SYNTH_H

#include "data/h5data.h"

#include <stddef.h>
#include <stdint.h>

/* Per-element amplitude of the linear part at 784 features (see the model above). */
#define DDP_SYNTH_LINEAR 0.02
/* Per-element amplitude of the sign-flipped part (at least this, more when D < 784). */
#define DDP_SYNTH_SIGN 0.1
/* Default noise standard deviation per element (values live in [0, 1]). */
#define DDP_SYNTH_NOISE 0.3
/* Largest --noise: beyond this the data is noise however many samples there are. */
#define DDP_SYNTH_MAX_NOISE 10.0
/* Prototypes live in memory: 1 GiB is e.g. 1000 classes of 3x224x224. */
#define DDP_SYNTH_MAX_PROTO_BYTES ((int64_t)1 << 30)
/* Rows are generated and written in pieces of about this size (bounded memory). */
#define DDP_SYNTH_CHUNK_BYTES ((size_t)32 << 20)

typedef struct ddp_synth_spec {
    int rank;        /* 1: (N, D); 3: (N, C, H, W) */
    int64_t dims[3]; /* D, or C, H, W */
    int classes;     /* 2 .. DDP_H5_MAX_CLASSES */
    int64_t n_train; /* 1 .. DDP_H5_MAX_SAMPLES */
    int64_t n_test;  /* 1 .. DDP_H5_MAX_SAMPLES */
    uint64_t seed;
    enum ddp_h5dtype dtype; /* uint8 (stored round(255 x)) or float32 */
    double noise;           /* 0 .. DDP_SYNTH_MAX_NOISE */
    size_t chunk_bytes;     /* 0: DDP_SYNTH_CHUNK_BYTES (tests use small values) */
} ddp_synth_spec;

/* Fill the defaults: (1, 28, 28), 10 classes, 60000/10000 samples, seed 0, uint8, noise. */
void ddp_synth_defaults(ddp_synth_spec *spec);
/* Check a spec against the bounds; -1 with one line naming the bad option and its range.
 * Errors here are usage errors (exit 2). */
int ddp_synth_check(const ddp_synth_spec *spec, char *err, size_t errlen);

typedef struct ddp_synth ddp_synth; /* the prototypes of one spec */

/* Build the prototypes (checks the spec first; NULL with err when it is bad). */
ddp_synth *ddp_synth_create(const ddp_synth_spec *spec, char *err, size_t errlen);
void ddp_synth_destroy(ddp_synth *g); /* accepts NULL */
/* Samples [first, first + n) of split 0 (train) or 1 (test): images n * D elements of the
 * spec's dtype (uint8_t or float), labels n values. */
void ddp_synth_generate(const ddp_synth *g, int split, int64_t first, int64_t n, void *images,
                        int32_t *labels);

/* Generate both splits into out_path (via OUT.tmp and rename), chunk by chunk. Returns 0,
 * or -1 with err: a bad spec (see ddp_synth_check) or a file that cannot be written. */
int ddp_synth_write(const ddp_synth_spec *spec, const char *out_path, char *err, size_t errlen);

#endif

/*
 * cpu_ref.h - the CPU kernels in both precisions, for tests: the float variants are what the
 * CPU backend table points at; the double variants are the float64 reference that gradient
 * checks and precision comparisons run against. Shapes and conventions: backend.h.
 */
#ifndef DDP_CPU_REF_H
#define DDP_CPU_REF_H

#include <stddef.h>
#include <stdint.h>

/* Uniform double in [0,1) from a counter-based hash of (seed, i): dropout masks need no
 * stored RNG state, so a resumed run draws exactly the masks an uninterrupted one would. */
double ddp_cpu_uniform(uint64_t seed, uint64_t i);

#define DDP_CPU_DECLARE(REAL, SFX)                                                                 \
    void ddp_cpu_linear_fwd##SFX(REAL *out, const REAL *inp, const REAL *w, const REAL *b, int B,  \
                                 int C, int O);                                                    \
    void ddp_cpu_linear_bwd##SFX(REAL *dinp, REAL *dw, REAL *db, const REAL *dout,                 \
                                 const REAL *inp, const REAL *w, int B, int C, int O);             \
    void ddp_cpu_relu_fwd##SFX(REAL *out, const REAL *inp, size_t n);                              \
    void ddp_cpu_relu_bwd##SFX(REAL *dinp, const REAL *dout, const REAL *out, size_t n);           \
    void ddp_cpu_conv2d_fwd##SFX(REAL *out, REAL *col, const REAL *inp, const REAL *w,             \
                                 const REAL *b, int B, int C, int H, int W, int O, int k,          \
                                 int stride, int pad);                                             \
    void ddp_cpu_conv2d_bwd##SFX(REAL *dinp, REAL *dw, REAL *db, REAL *col, const REAL *dout,      \
                                 const REAL *inp, const REAL *w, int B, int C, int H, int W,       \
                                 int O, int k, int stride, int pad);                               \
    void ddp_cpu_maxpool_fwd##SFX(REAL *out, int32_t *argmax, const REAL *inp, int B, int C,       \
                                  int H, int W, int k);                                            \
    void ddp_cpu_maxpool_bwd##SFX(REAL *dinp, const REAL *dout, const int32_t *argmax, int B,      \
                                  int C, int H, int W, int k);                                     \
    void ddp_cpu_avgpool_fwd##SFX(REAL *out, const REAL *inp, int B, int C, int H, int W, int k);  \
    void ddp_cpu_avgpool_bwd##SFX(REAL *dinp, const REAL *dout, int B, int C, int H, int W,        \
                                  int k);                                                          \
    void ddp_cpu_gap_fwd##SFX(REAL *out, const REAL *inp, int B, int C, int S);                    \
    void ddp_cpu_gap_bwd##SFX(REAL *dinp, const REAL *dout, int B, int C, int S);                  \
    void ddp_cpu_add##SFX(REAL *out, const REAL *a, const REAL *b, size_t n);                      \
    void ddp_cpu_bn_stats##SFX(double *sums, const REAL *inp, int B, int C, int S);                \
    void ddp_cpu_bn_fwd_apply##SFX(REAL *out, REAL *xhat, const REAL *inp, const REAL *mean,       \
                                   const REAL *invstd, const REAL *gamma, const REAL *beta, int B, \
                                   int C, int S);                                                  \
    void ddp_cpu_bn_bwd_sums##SFX(double *sums, const REAL *dout, const REAL *xhat, int B, int C,  \
                                  int S);                                                          \
    void ddp_cpu_bn_bwd_apply##SFX(REAL *dinp, REAL *dgamma, REAL *dbeta, const REAL *dout,        \
                                   const REAL *xhat, const REAL *invstd, const REAL *gamma,        \
                                   const double *local_sums, const double *global_sums,            \
                                   double count, int B, int C, int S);                             \
    void ddp_cpu_dropout_fwd##SFX(REAL *out, REAL *mask, const REAL *inp, size_t n, REAL p,        \
                                  uint64_t seed);                                                  \
    void ddp_cpu_dropout_bwd##SFX(REAL *dinp, const REAL *dout, const REAL *mask, size_t n);       \
    double ddp_cpu_xent##SFX(REAL *dlogits, int64_t *correct, const REAL *logits,                  \
                             const int32_t *labels, int B, int K, REAL grad_scale,                 \
                             REAL smoothing);                                                      \
    void ddp_cpu_sgd_step##SFX(REAL *p, const REAL *g, REAL gscale, REAL *buf, size_t n, REAL lr,  \
                               REAL momentum, REAL weight_decay, int nesterov, int first_step);    \
    void ddp_cpu_adam_step##SFX(REAL *p, const REAL *g, REAL gscale, REAL *m, REAL *v, size_t n,   \
                                REAL lr, REAL b1, REAL b2, REAL eps, REAL weight_decay,            \
                                int decoupled, int64_t t);

DDP_CPU_DECLARE(float, _f32)
DDP_CPU_DECLARE(double, _f64)

#endif

/*
 * test_batchnorm.c - batchnorm's statistics on the CPU backend against PyTorch's formulas, in
 * batches small enough that biased and unbiased variance differ by a third or a half.
 *
 * Dimension letters: B batch, C channels, S spatial positions per channel (H*W); n = B*S
 * values per channel.
 *
 * Train: bn_stats then bn_update give mean = sum x / n, invstd = 1 / sqrt(var + eps) with the
 * biased var = sum (x - mean)^2 / n, and move the running statistics by momentum m:
 * running_mean = (1 - m) running_mean + m mean, running_var = (1 - m) running_var + m var n /
 * (n - 1) (the unbiased variance, as torch.nn.BatchNorm2d). With n = 3 or 4, n / (n - 1) is
 * 1.5 or 1.33, so the biased variance in running_var is a third off, not float32 noise.
 * Eval (no sums): mean = running_mean, invstd = 1 / sqrt(running_var + eps).
 * Expected values are computed here in double from the float inputs; ddptrain rounds each
 * result to float once, so they must agree to a float32 rounding (2^-23 relative).
 */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"

#define C 2
#define NMAX 8
#define EPS 1e-5
#define MOMENTUM 0.1

/* Relative agreement of a float result with its double formula: one float rounding. */
static int close_to(float got, double want)
{
    return fabs((double)got - want) <= 0x1p-23 * fabs(want) + 1e-30;
}

/* One train update of (B, C, S) values x from running statistics rm0, rv0, checked value by
 * value against the formulas in the header. */
static void check_train(const struct ddp_backend *be, const float *x, int B, int S)
{
    const int n = B * S;
    double *sums = be->alloc(sizeof(double) * (2 * C + 1));
    float mean[C], invstd[C], rm[C] = {0.25f, -1.0f}, rv[C] = {1.0f, 2.0f};
    const float rm0[C] = {0.25f, -1.0f}, rv0[C] = {1.0f, 2.0f};
    be->bn_stats(sums, x, B, C, S);
    CHECK(sums[2 * C] == n, "B %d S %d: count %g, want B*S = %d", B, S, sums[2 * C], n);
    be->bn_update(mean, invstd, rm, rv, sums, C, EPS, MOMENTUM);
    for (int c = 0; c < C; c++) {
        double mu = 0, var = 0;
        for (int b = 0; b < B; b++)
            for (int s = 0; s < S; s++)
                mu += x[(b * C + c) * S + s];
        mu /= n;
        for (int b = 0; b < B; b++)
            for (int s = 0; s < S; s++) {
                double d = x[(b * C + c) * S + s] - mu;
                var += d * d;
            }
        var /= n;
        const double want_rv = (1 - MOMENTUM) * rv0[c] + MOMENTUM * var * n / (n - 1);
        const double want_rm = (1 - MOMENTUM) * rm0[c] + MOMENTUM * mu;
        CHECK(close_to(mean[c], mu), "n %d channel %d: mean %.9g, want %.9g", n, c, mean[c], mu);
        CHECK(close_to(invstd[c], 1 / sqrt(var + EPS)), "n %d channel %d: invstd %.9g, want %.9g",
              n, c, invstd[c], 1 / sqrt(var + EPS));
        CHECK(close_to(rm[c], want_rm), "n %d channel %d: running_mean %.9g, want %.9g", n, c,
              rm[c], want_rm);
        CHECK(close_to(rv[c], want_rv),
              "n %d channel %d: running_var %.9g, want %.9g (unbiased, n/(n-1) = %.3g; with the "
              "biased variance it would be %.9g)",
              n, c, rv[c], want_rv, n / (n - 1.0), (1 - MOMENTUM) * rv0[c] + MOMENTUM * var);
    }
    be->free(sums);
}

/* Eval: the running statistics are used as they are and left alone. */
static void check_eval(const struct ddp_backend *be)
{
    float mean[C], invstd[C], rm[C] = {0.5f, -2.0f}, rv[C] = {0.25f, 3.0f};
    be->bn_update(mean, invstd, rm, rv, NULL, C, EPS, MOMENTUM);
    for (int c = 0; c < C; c++) {
        CHECK(mean[c] == rm[c], "eval channel %d: mean %g, want running_mean %g", c, mean[c],
              rm[c]);
        CHECK(close_to(invstd[c], 1 / sqrt((double)rv[c] + EPS)), "eval channel %d: invstd %.9g", c,
              invstd[c]);
    }
    CHECK(rm[0] == 0.5f && rm[1] == -2.0f && rv[0] == 0.25f && rv[1] == 3.0f,
          "eval moved the running statistics");
}

int main(void)
{
    const struct ddp_backend *be = ddp_backend_cpu();
    /* (B, C, S) values, channel 1 of a larger spread than channel 0 */
    static const float x[NMAX * C] = {0.5f,  -1.25f, 2.0f,  3.5f,  0.75f, -4.0f, 1.5f,  6.25f,
                                      -0.5f, 1.0f,   0.25f, -2.5f, 1.75f, 0.5f,  -1.0f, 3.0f};
    check_train(be, x, 3, 1); /* BatchNorm1d, n = 3: n/(n-1) = 1.5 */
    check_train(be, x, 2, 2); /* BatchNorm2d, n = B*S = 4: 1.33 */
    check_train(be, x, 1, 3); /* one sample, n = S = 3 */
    check_train(be, x, 4, 2); /* n = 8: 1.14 */
    check_eval(be);
    return check_report("test_batchnorm");
}

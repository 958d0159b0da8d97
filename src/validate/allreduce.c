/*
 * allreduce.c - the all-reduce sweep of `ddptrain validate`: in-place f32 sums
 * through the comm layer over sizes from min_bytes to max_bytes (factor 2), every element of
 * every checked result compared with the exact value, timed as nccl-tests times. See
 * validate.h.
 *
 * Dimension letters: n elements of one size, W ranks.
 * Exact data: rank r element i = w_r * (i % 7 + 1) with integer weights w_r, so every partial
 * sum, in any order the backend adds them, is an integer below 2^24 and exact in float.
 * The timed calls run on zeros (which stay zeros, and are checked to), so the values never
 * grow however many calls are timed.
 * What it leaves to others: judging and attributing failures (validate.c), deadlines (comm).
 */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "validate/validate.h"

/* Most calls in one timed block: small sizes take microseconds each. */
#define AR_MAX_ITERS 1000

/* Weights: r + 1 for up to 64 ranks (then repeating), or all 1 on worlds so large that
 * 7 * sum(w) would pass 2^24. */
static float weight_of(int rank, int world_size)
{
    return world_size <= 70000 ? (float)(rank % 64 + 1) : 1.0f;
}

static double weight_sum(int world_size)
{
    double s = 0;
    for (int r = 0; r < world_size; r++)
        s += weight_of(r, world_size);
    return s;
}

static void fill(float *buf, int64_t n, float w)
{
    for (int64_t i = 0; i < n; i++)
        buf[i] = w * (float)(i % 7 + 1);
}

/* Count elements that differ from w * (i % 7 + 1) (w = 0: from zero); remember the first. */
static int64_t check(const float *buf, int64_t n, float w, int64_t *first, double *got,
                     double *want)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const float e = w * (float)(i % 7 + 1);
        if (buf[i] != e) {
            if (bad++ == 0 && *first < 0) {
                *first = i;
                *got = buf[i];
                *want = e;
            }
        }
    }
    return bad;
}

/* Seconds per call over iters calls, the slowest rank's (every rank returns the same). */
static double time_block(ddp_comm *c, float *buf, int64_t n, int iters)
{
    ddp_comm_barrier(c);
    const double t0 = ddp_now();
    for (int it = 0; it < iters; it++)
        ddp_comm_allreduce(c, buf, (size_t)n, DDP_F32);
    double dt = (ddp_now() - t0) / iters;
    ddp_comm_allreduce_max(c, &dt, 1, DDP_F64);
    return dt;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int ddp_validate_allreduce_sweep(ddp_comm *c, const struct ddp_validate_ar_opts *o,
                                 struct ddp_validate_ar_row *rows)
{
    const int W = ddp_comm_size(c), rank = ddp_comm_rank(c);
    const float w = weight_of(rank, W), S = (float)weight_sum(W);
    const double busf = ddp_comm_busbw_factor(W);
    int64_t lo = o->min_bytes < 4 ? 4 : o->min_bytes;
    int64_t hi = o->max_bytes < lo ? lo : o->max_bytes;
    if (hi > DDP_VALIDATE_MAX_BYTES)
        hi = DDP_VALIDATE_MAX_BYTES;
    const int blocks = o->blocks > 0 ? o->blocks : 1;
    float *buf = ddp_malloc_aligned((size_t)hi); /* (n) at the largest size */
    double *t = ddp_malloc(sizeof(double) * (size_t)blocks);
    int nrows = 0;
    for (int64_t bytes = lo; bytes <= hi && nrows < DDP_VALIDATE_MAX_SIZES; bytes *= 2) {
        struct ddp_validate_ar_row *row = &rows[nrows++];
        const int64_t n = bytes / (int64_t)sizeof(float);
        memset(row, 0, sizeof *row);
        row->bytes = n * (int64_t)sizeof(float);
        row->count = n;
        row->first_bad = -1;

        /* the checked call: known inputs, every element of the result compared */
        fill(buf, n, w);
        if (o->corrupt) {
            uint32_t bits;
            memcpy(&bits, &buf[n / 2], sizeof bits);
            bits ^= 1u << 22; /* the top mantissa bit: 2 <-> 3, 4 <-> 6, ... */
            memcpy(&buf[n / 2], &bits, sizeof bits);
        }
        int64_t in_first = -1;
        double in_got, in_want;
        row->input_bad = check(buf, n, w, &in_first, &in_got, &in_want) != 0;
        double chk = ddp_now();
        ddp_comm_allreduce(c, buf, (size_t)n, DDP_F32);
        chk = ddp_now() - chk;
        row->bad_elems = check(buf, n, S, &row->first_bad, &row->got, &row->want);

        /* timing on zeros: warm-up, a short block to size the blocks (a quarter of one, by
         * the checked call's time), then the blocks */
        memset(buf, 0, (size_t)row->bytes);
        ddp_comm_allreduce(c, buf, (size_t)n, DDP_F32);
        ddp_comm_allreduce_max(c, &chk, 1, DDP_F64);
        double k = chk > 0 ? 0.25 * o->block_s / chk : 100;
        double one = time_block(c, buf, n, k < 1 ? 1 : k > 100 ? 100 : (int)k);
        int iters = one > 0 ? (int)(o->block_s / one) : AR_MAX_ITERS;
        iters = iters < 1 ? 1 : iters > AR_MAX_ITERS ? AR_MAX_ITERS : iters;
        for (int b = 0; b < blocks; b++)
            t[b] = time_block(c, buf, n, iters);
        qsort(t, (size_t)blocks, sizeof(double), cmp_double);
        row->time_s = blocks % 2 ? t[blocks / 2] : 0.5 * (t[blocks / 2 - 1] + t[blocks / 2]);
        row->iters = iters;
        row->blocks = blocks;
        row->algbw = (double)row->bytes / row->time_s / 1e9;
        row->busbw = row->algbw * busf;
        row->bad_elems += check(buf, n, 0, &row->first_bad, &row->got, &row->want);
    }
    free(t);
    free(buf);
    return nrows;
}

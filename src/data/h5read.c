/*
 * h5read.c - reading a split's samples (h5data.h ddp_h5split_cache, _read, _read_raw): the
 * whole split into memory, or rows by pread where the file holds them contiguously, else by
 * unions of hyperslabs; float32 images checked for NaN and infinity as they are read.
 *
 * Legend: N samples, D elements per sample (C*H*W for images), n samples per read.
 */
#include "data/h5data.h"

#include "core/util.h"
#include "data/h5_impl.h"

#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Largest single H5Dread when filling the cache: some POSIX read paths stop at 2 GiB. */
#define H5_CACHE_READ_BYTES ((size_t)256 << 20)
/* Runs of rows per H5Dread on the HDF5 path: HDF5 1.10's union of hyperslabs costs
 * O(runs^2) to build (a 4096-run union: ~150 ms), so unions are kept this small. */
#define H5_UNION_RUNS 256

/* H5 memory type of the stored element. */
static hid_t mem_type(const ddp_h5split *s)
{
    return s->dtype == DDP_H5DTYPE_UINT8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
}

/* Select rows [r0, r0 + k) of the images file space with operation op. */
static herr_t select_rows(ddp_h5split *s, H5S_seloper_t op, int64_t r0, int64_t k)
{
    hsize_t start[4] = {(hsize_t)r0, 0, 0, 0}, count[4] = {1, 1, 1, 1}, block[4];
    block[0] = (hsize_t)k;
    for (int i = 1; i < s->file_rank; i++)
        block[i] = (hsize_t)s->dims[i - 1];
    return H5Sselect_hyperslab(s->fspace, op, start, NULL, count, block);
}

/* Block of floats scanned per pass of the finite check: small enough to stay in L1. */
#define FINITE_BLOCK 1024

/* Index of the first NaN or infinity among v[0..n), or -1. A value is non-finite when its bits
 * without the sign are >= those of +inf; the largest of them over a block, kept in 16 lanes so
 * that GCC's -O2 cost model vectorises the loop (0.3 ns a value on the build machine, as much
 * as a memcpy), is all that is looked at unless the block holds one. */
static int64_t first_nonfinite(const float *v, size_t n)
{
    const uint32_t inf = 0x7f800000u, abs = 0x7fffffffu;
    for (size_t at = 0; at < n; at += FINITE_BLOCK) {
        size_t k = n - at < FINITE_BLOCK ? n - at : FINITE_BLOCK, j = 0;
        const uint32_t *u = (const uint32_t *)(const void *)(v + at);
        uint32_t mx[16] = {0}, top = 0;
        for (; j + 16 <= k; j += 16)
            for (int l = 0; l < 16; l++) {
                uint32_t a = u[j + l] & abs;
                mx[l] = a > mx[l] ? a : mx[l];
            }
        for (; j < k; j++)
            top = (u[j] & abs) > top ? u[j] & abs : top;
        for (int l = 0; l < 16; l++)
            top = mx[l] > top ? mx[l] : top;
        if (top < inf)
            continue;
        for (j = 0; j < k; j++)
            if ((u[j] & abs) >= inf)
                return (int64_t)(at + j);
    }
    return -1;
}

/* One line naming file, dataset, sample and element of a non-finite float image value. */
static int nonfinite_err(const ddp_h5split *s, int64_t sample, int64_t elem, float v, char *err,
                         size_t errlen)
{
    return ddp_err(err, errlen,
                   "%s: %s/images: sample %lld holds %s at element %lld; float32 "
                   "images must be finite, fix or drop that sample",
                   s->path, s->group, (long long)sample,
                   isnan(v) ? "NaN"
                   : v > 0  ? "+inf"
                            : "-inf",
                   (long long)elem);
}

/* For float32 images, check rows [r0, r0 + k) at buf (as stored) for non-finite values. */
static int check_rows_finite(const ddp_h5split *s, const uint8_t *buf, int64_t r0, int64_t k,
                             char *err, size_t errlen)
{
    if (s->dtype != DDP_H5DTYPE_FLOAT32)
        return 0;
    const float *v = (const float *)(const void *)buf;
    int64_t bad = first_nonfinite(v, (size_t)k * (size_t)s->elems);
    if (bad < 0)
        return 0;
    return nonfinite_err(s, r0 + bad / s->elems, bad % s->elems, v[bad], err, errlen);
}

int ddp_h5split_cache(ddp_h5split *s, size_t max_bytes, char *err, size_t errlen)
{
    if (s->cache)
        return 1;
    if ((uint64_t)s->n > (uint64_t)SIZE_MAX / s->row_bytes)
        return 0;
    size_t total = (size_t)s->n * s->row_bytes;
    if (total > max_bytes || total > ddp_mem_available(NULL) / 2)
        return 0; /* stream: a cache that takes most of the free memory would swap or die */
    uint8_t *buf = malloc(total); /* not ddp_malloc: failure means stream, not die */
    if (!buf)
        return 0;
    h5_quiet q;
    h5_quiet_on(&q);
    int64_t per = (int64_t)(H5_CACHE_READ_BYTES / s->row_bytes);
    if (per < 1)
        per = 1;
    hid_t msp = H5I_INVALID_HID;
    for (int64_t at = 0; at < s->n; at += per) {
        int64_t k = s->n - at < per ? s->n - at : per;
        hsize_t mcount = (hsize_t)k * (hsize_t)s->elems;
        msp = H5Screate_simple(1, &mcount, NULL);
        if (msp < 0 || select_rows(s, H5S_SELECT_SET, at, k) < 0 ||
            H5Dread(s->images, mem_type(s), msp, s->fspace, H5P_DEFAULT,
                    buf + (size_t)at * s->row_bytes) < 0) {
            char why[256];
            ddp_err(err, errlen,
                    "%s: %s/images: read of rows %lld..%lld failed (%s); the file "
                    "may be truncated or corrupt, re-create it",
                    s->path, s->group, (long long)at, (long long)(at + k - 1),
                    h5_reason(why, sizeof why));
            if (msp >= 0)
                H5Sclose(msp);
            free(buf);
            h5_quiet_off(&q);
            return -1;
        }
        H5Sclose(msp);
        if (check_rows_finite(s, buf + (size_t)at * s->row_bytes, at, k, err, errlen) != 0) {
            free(buf);
            h5_quiet_off(&q);
            return -1;
        }
    }
    h5_quiet_off(&q);
    s->cache = buf;
    return 1;
}

/* uint8 pixels to v / 255.0f (the same bits as a table of the 256 values), 16 at a time so that
 * GCC's default cost model vectorises the loop: a 784-pixel row in about 0.1 us instead of
 * 0.6 us through a table. */
void ddp_h5_u8_to_float(const uint8_t *restrict src, float *restrict out, size_t n)
{
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; k++)
            out[j + k] = (float)src[j + k] / 255.0f;
    for (; j < n; j++)
        out[j] = (float)src[j] / 255.0f;
}

/* Convert one stored row to float32 at out. */
static void convert_row(const ddp_h5split *s, const uint8_t *src, float *out)
{
    if (s->dtype == DDP_H5DTYPE_UINT8)
        ddp_h5_u8_to_float(src, out, (size_t)s->elems);
    else
        memcpy(out, src, s->row_bytes);
}

/* Sample i of a batch at out: converted to float32, or as stored when raw. */
static void put_row(const ddp_h5split *s, const uint8_t *src, void *out, int64_t i, int raw)
{
    if (raw)
        memcpy((uint8_t *)out + (size_t)i * s->row_bytes, src, s->row_bytes);
    else
        convert_row(s, src, (float *)out + (size_t)i * (size_t)s->elems);
}

/* Order of row_req by row, then by position (a total order: qsort is then deterministic). */
static int cmp_req(const void *a, const void *b)
{
    const row_req *x = a, *y = b;
    if (x->row != y->row)
        return x->row < y->row ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Grow the scratch for n requests; the memory space is re-made only when it grows. */
static int ensure_scratch(ddp_h5split *s, int n, char *err, size_t errlen)
{
    if (n <= s->cap_reqs)
        return 0;
    free(s->reqs);
    free(s->rows);
    s->reqs = ddp_malloc((size_t)n * sizeof *s->reqs);
    s->rows = ddp_malloc((size_t)n * s->row_bytes);
    s->cap_reqs = s->cap_rows = n;
    if (s->mspace >= 0)
        H5Sclose(s->mspace);
    hsize_t m = (hsize_t)n * (hsize_t)s->elems;
    s->mspace = H5Screate_simple(1, &m, NULL);
    if (s->mspace < 0) {
        s->cap_reqs = s->cap_rows = 0;
        char why[256];
        return ddp_err(err, errlen, "%s: %s/images: cannot make a memory space of %d rows (%s)",
                       s->path, s->group, n, h5_reason(why, sizeof why));
    }
    return 0;
}

/* Fast path: rows [r0, r0 + k) straight from the file into buf (whole, despite EINTR
 * and short reads). */
static int pread_rows(ddp_h5split *s, int64_t r0, int64_t k, uint8_t *buf, char *err, size_t errlen)
{
    size_t want = (size_t)k * s->row_bytes, got = 0;
    off_t at = (off_t)(s->offset + r0 * (int64_t)s->row_bytes);
    while (got < want) {
        size_t piece = want - got < (size_t)INT_MAX ? want - got : (size_t)INT_MAX;
        ssize_t r = pread(s->fd, buf + got, piece, at + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return ddp_err(err, errlen,
                           "%s: %s/images: read of rows %lld..%lld failed: %s; the "
                           "file may be truncated, re-create it",
                           s->path, s->group, (long long)r0, (long long)(r0 + k - 1),
                           r < 0 ? strerror(errno) : "end of file");
        got += (size_t)r;
    }
    return 0;
}

/* Float32 rows just read into s->rows (`rows` distinct rows of the n sorted requests, in file
 * order): a non-finite value is an error naming its sample. */
static int check_read_finite(const ddp_h5split *s, int n, int rows, char *err, size_t errlen)
{
    if (s->dtype != DDP_H5DTYPE_FLOAT32)
        return 0;
    const float *v = (const float *)(const void *)s->rows;
    int64_t e = s->elems, bad = first_nonfinite(v, (size_t)rows * (size_t)e);
    if (bad < 0)
        return 0;
    int64_t want = bad / e, row = -1, at = -1;
    for (int i = 0; i < n && at < want; i++)
        if (s->reqs[i].row != row) {
            row = s->reqs[i].row;
            at++;
        }
    return nonfinite_err(s, row, bad % e, v[bad], err, errlen);
}

/* ddp_h5split_read and ddp_h5split_read_raw: samples as float32, or as stored when raw. */
static int read_samples(ddp_h5split *s, const int64_t *idx, int n, void *out, int raw, char *err,
                        size_t errlen)
{
    if (n < 0)
        return ddp_err(err, errlen, "%s: %s: read of %d samples; the count must be >= 0", s->path,
                       s->group, n);
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= s->n)
            return ddp_err(err, errlen,
                           "%s: %s: sample index %lld (position %d of the batch) "
                           "is outside [0, %lld)",
                           s->path, s->group, (long long)idx[i], i, (long long)s->n);
    if (n == 0)
        return 0;
    size_t e = (size_t)s->elems;
    if (s->cache) {
        for (int i = 0; i < n; i++) {
            if (i + 1 < n) { /* the next row is a random one: start fetching it now */
                const uint8_t *next = s->cache + (size_t)idx[i + 1] * s->row_bytes;
                for (size_t o = 0; o < s->row_bytes && o < 4096; o += 64)
                    __builtin_prefetch(next + o);
            }
            put_row(s, s->cache + (size_t)idx[i] * s->row_bytes, out, i, raw);
        }
        return 0;
    }

    int rc = -1;
    h5_quiet q;
    h5_quiet_on(&q);
    if (ensure_scratch(s, n, err, errlen) != 0)
        goto out;
    for (int i = 0; i < n; i++) {
        s->reqs[i].row = idx[i];
        s->reqs[i].pos = i;
    }
    qsort(s->reqs, (size_t)n, sizeof *s->reqs, cmp_req);

    /* Runs of adjacent distinct rows, in file order, land in s->rows one after another:
     * by pread on the fast path, else by unions of up to H5_UNION_RUNS hyperslabs. */
    int slot = 0, group_slot = 0, group_runs = 0;
    for (int i = 0; i < n;) {
        int64_t r0 = s->reqs[i].row, r = r0;
        int j = i + 1;
        while (j < n && s->reqs[j].row <= r + 1) {
            if (s->reqs[j].row == r + 1)
                r++;
            j++;
        }
        int64_t k = r - r0 + 1;
        if (s->fd >= 0) {
            if (pread_rows(s, r0, k, s->rows + (size_t)slot * s->row_bytes, err, errlen) != 0)
                goto out;
        } else {
            if (select_rows(s, group_runs ? H5S_SELECT_OR : H5S_SELECT_SET, r0, k) < 0)
                goto h5fail;
            group_runs++;
        }
        slot += (int)k;
        i = j;
        if (s->fd < 0 && (group_runs == H5_UNION_RUNS || i == n)) {
            hsize_t m0 = (hsize_t)group_slot * (hsize_t)e;
            hsize_t mcount = (hsize_t)(slot - group_slot) * (hsize_t)e;
            if (H5Sselect_hyperslab(s->mspace, H5S_SELECT_SET, &m0, NULL, &mcount, NULL) < 0 ||
                H5Dread(s->images, mem_type(s), s->mspace, s->fspace, H5P_DEFAULT, s->rows) < 0)
                goto h5fail;
            group_slot = slot;
            group_runs = 0;
        }
    }

    /* Float rows from the file are checked once here (cached ones were checked on caching). */
    if (check_read_finite(s, n, slot, err, errlen) != 0)
        goto out;

    /* Rows arrived in file order, one per distinct index: scatter to the batch order. */
    slot = -1;
    int64_t prev = -1;
    for (int i = 0; i < n; i++) {
        if (s->reqs[i].row != prev) {
            slot++;
            prev = s->reqs[i].row;
        }
        put_row(s, s->rows + (size_t)slot * s->row_bytes, out, s->reqs[i].pos, raw);
    }
    rc = 0;
    goto out;
h5fail : {
    char why[256];
    ddp_err(err, errlen,
            "%s: %s/images: read of %d samples failed (%s); the file may be "
            "truncated or corrupt, re-create it",
            s->path, s->group, n, h5_reason(why, sizeof why));
}
out:
    h5_quiet_off(&q);
    return rc;
}

int ddp_h5split_read(ddp_h5split *s, const int64_t *idx, int n, float *out, char *err,
                     size_t errlen)
{
    return read_samples(s, idx, n, out, 0, err, errlen);
}

int ddp_h5split_read_raw(ddp_h5split *s, const int64_t *idx, int n, void *out, char *err,
                         size_t errlen)
{
    return read_samples(s, idx, n, out, 1, err, errlen);
}

/*
 * import_npy.c - `ddptrain data npy` and `data npz` (import.h): NumPy arrays (npy.h) into
 * the HDF5 layout. Images stream from the array; labels are read whole (int32 in memory).
 *
 * Legend: N samples, C channels, H rows, W columns, D features.
 */
#include "data/import.h"

#include "core/util.h"
#include "data/npy.h"

#include <stdlib.h>
#include <string.h>

/* Labels are converted in pieces of this many values. */
#define NPY_LABEL_PIECE 65536

/* Sample shape of an images array: (N,H,W) -> (1,H,W), (N,C,H,W), (N,D); dtype uint8 or
 * float32. */
static int image_layout(ddp_import_split *s, ddp_npy *a, char *err, size_t errlen)
{
    const int64_t *sh = ddp_npy_shape(a);
    const int r = ddp_npy_rank(a);
    const char k = ddp_npy_kind(a);
    const int isz = ddp_npy_itemsize(a);
    if (k == 'u' && isz == 1)
        s->dtype = DDP_H5DTYPE_UINT8;
    else if (k == 'f' && isz == 4)
        s->dtype = DDP_H5DTYPE_FLOAT32;
    else
        return ddp_err(err, errlen,
                       "%s: images have dtype '%s'; expected uint8 or float32, "
                       "convert them (a.astype(numpy.float32))",
                       ddp_npy_name(a), ddp_npy_descr(a));
    if (r < 2)
        return ddp_err(err, errlen,
                       "%s: images have rank %d; expected (N, H, W), "
                       "(N, C, H, W) or (N, D)",
                       ddp_npy_name(a), r);
    s->n = sh[0];
    int64_t elems = 1;
    for (int i = 0; i < r; i++)
        if (sh[i] <= 0)
            return ddp_err(err, errlen,
                           "%s: images shape has a dimension of 0; expected at "
                           "least one sample of at least one element",
                           ddp_npy_name(a));
    for (int i = 1; i < r; i++)
        elems *= sh[i]; /* no overflow: the file holds N * elems bytes */
    if (s->n > DDP_H5_MAX_SAMPLES || elems > DDP_H5_MAX_SAMPLE_ELEMS)
        return ddp_err(err, errlen,
                       "%s: %lld samples of %lld elements; at most %lld samples "
                       "of %lld elements",
                       ddp_npy_name(a), (long long)s->n, (long long)elems,
                       (long long)DDP_H5_MAX_SAMPLES, (long long)DDP_H5_MAX_SAMPLE_ELEMS);
    s->rank = r == 2 ? 1 : 3;
    if (r == 3) {
        s->dims[0] = 1, s->dims[1] = sh[1], s->dims[2] = sh[2];
    } else {
        for (int i = 1; i < r; i++)
            s->dims[i - 1] = sh[i];
    }
    return 0;
}

/* Read a labels array (N,) or (N, 1) of bool/int/uint into int32, N matching the images. */
static int32_t *read_labels(ddp_npy *a, int64_t n, char *err, size_t errlen)
{
    const int64_t *sh = ddp_npy_shape(a);
    const int r = ddp_npy_rank(a), isz = ddp_npy_itemsize(a);
    const char k = ddp_npy_kind(a);
    if (k != 'u' && k != 'i' && k != 'b') {
        ddp_err(err, errlen,
                "%s: labels have dtype '%s'; expected integers, convert them "
                "(y.astype(numpy.int64))",
                ddp_npy_name(a), ddp_npy_descr(a));
        return NULL;
    }
    if (!(r == 1 || (r == 2 && sh[1] == 1)) || sh[0] != n) {
        ddp_err(err, errlen,
                "%s: labels have shape (%lld%s); expected (%lld,) to match the "
                "images",
                ddp_npy_name(a), (long long)sh[0], r == 1 ? "," : ", ...", (long long)n);
        return NULL;
    }
    int32_t *lab = ddp_malloc((size_t)n * sizeof *lab);
    unsigned char *buf = ddp_malloc((size_t)NPY_LABEL_PIECE * 8);
    for (int64_t done = 0; done < n; done += NPY_LABEL_PIECE) {
        int64_t m = n - done < NPY_LABEL_PIECE ? n - done : NPY_LABEL_PIECE;
        if (ddp_npy_read(a, buf, (size_t)m * (size_t)isz, err, errlen) != 0)
            goto fail;
        for (int64_t i = 0; i < m; i++) {
            const unsigned char *p = buf + i * isz;
            uint64_t u = 0;
            for (int b = isz - 1; b >= 0; b--)
                u = u << 8 | p[b];
            int64_t v = k == 'i' && isz < 8 && (u >> (8 * isz - 1))
                            ? (int64_t)(u | ~(uint64_t)0 << (8 * isz))
                            : (int64_t)u;
            if ((k == 'u' && u > INT32_MAX) || v < 0 || v > INT32_MAX) {
                ddp_err(err, errlen,
                        "%s: label %lld at index %lld is negative or beyond int32; "
                        "labels must be class numbers from 0",
                        ddp_npy_name(a), (long long)v, (long long)(done + i));
                goto fail;
            }
            lab[done + i] = (int32_t)v;
        }
    }
    if (ddp_npy_finish(a, err, errlen) != 0)
        goto fail;
    free(buf);
    return lab;
fail:
    free(buf);
    free(lab);
    return NULL;
}

/* ddp_import_rows_fn over an images array. */
static int read_rows(void *ctx, void *buf, int64_t n, char *err, size_t errlen)
{
    ddp_npy *a = ctx;
    int64_t elems = 1;
    for (int i = 1; i < ddp_npy_rank(a); i++)
        elems *= ddp_npy_shape(a)[i];
    return ddp_npy_read(a, buf, (size_t)(n * elems * ddp_npy_itemsize(a)), err, errlen);
}

/* Arrays of the splits: img[k], lab[k] for k < nsplits, already open; again, when o holds
 * out a test fraction (nsplits 1), the train images opened a second time. Reads the labels,
 * writes, checks every array ended where it should. */
static int import_arrays(ddp_npy *img[2], ddp_npy *lab[2], int nsplits, ddp_npy *again,
                         const ddp_import_opts *o, ddp_import_summary *sum, char *err,
                         size_t errlen)
{
    static const char *const group[2] = {"/train", "/test"};
    ddp_import_split s[2];
    int32_t *labels[2] = {NULL, NULL};
    int rc = -1;
    memset(s, 0, sizeof s);
    for (int k = 0; k < nsplits; k++) /* every header before any data */
        if (image_layout(&s[k], img[k], err, errlen) != 0)
            goto out;
    for (int k = 0; k < nsplits; k++) {
        if (!(labels[k] = read_labels(lab[k], s[k].n, err, errlen)))
            goto out;
        s[k].group = group[k];
        s[k].images_name = ddp_npy_name(img[k]);
        s[k].labels_name = ddp_npy_name(lab[k]);
        s[k].labels = labels[k];
        s[k].read = read_rows;
        s[k].ctx = img[k];
    }
    /* The images' last read checks their CRC-32 before OUT is committed. */
    if (again)
        rc = ddp_import_write_held_out(o, &s[0], read_rows, again, sum, err, errlen);
    else
        rc = ddp_import_write(o, s, nsplits, sum, err, errlen);
out:
    free(labels[0]);
    free(labels[1]);
    return rc;
}

int ddp_import_npy(const char *images, const char *labels, const char *test_images,
                   const char *test_labels, const ddp_import_opts *o, ddp_import_summary *sum,
                   char *err, size_t errlen)
{
    ddp_npy *img[2] = {NULL, NULL}, *lab[2] = {NULL, NULL}, *again = NULL;
    const int nsplits = test_images ? 2 : 1;
    int rc = -1;
    if (!(img[0] = ddp_npy_open(images, err, errlen)) ||
        !(lab[0] = ddp_npy_open(labels, err, errlen)))
        goto out;
    if (nsplits == 2 && (!(img[1] = ddp_npy_open(test_images, err, errlen)) ||
                         !(lab[1] = ddp_npy_open(test_labels, err, errlen))))
        goto out;
    if (o->test_fraction > 0 && !(again = ddp_npy_open(images, err, errlen)))
        goto out;
    rc = import_arrays(img, lab, nsplits, again, o, sum, err, errlen);
out:
    for (int k = 0; k < 2; k++) {
        ddp_npy_close(img[k]);
        ddp_npy_close(lab[k]);
    }
    ddp_npy_close(again);
    return rc;
}

int ddp_import_npz(const char *path, const char *const keys[4], int need_test,
                   const ddp_import_opts *o, ddp_import_summary *sum, char *err, size_t errlen)
{
    ddp_npy *img[2] = {NULL, NULL}, *lab[2] = {NULL, NULL}, *again = NULL;
    int rc = -1;
    ddp_npz *z = ddp_npz_open(path, err, errlen);
    if (!z)
        return -1;
    const int nsplits = need_test || ddp_npz_has(z, keys[2]) ? 2 : 1;
    if (nsplits == 2 && o->test_fraction > 0) {
        ddp_err(err, errlen,
                "%s: holds test arrays (%s), so --test-fraction does not apply; leave it out, "
                "or give --images-key and --labels-key of one set to split",
                path, keys[2]);
        goto out;
    }
    for (int k = 0; k < nsplits; k++)
        if (!(img[k] = ddp_npz_member(z, keys[2 * k], err, errlen)) ||
            !(lab[k] = ddp_npz_member(z, keys[2 * k + 1], err, errlen)))
            goto out;
    if (o->test_fraction > 0 && !(again = ddp_npz_member(z, keys[0], err, errlen)))
        goto out;
    rc = import_arrays(img, lab, nsplits, again, o, sum, err, errlen);
out:
    for (int k = 0; k < 2; k++) {
        ddp_npy_close(img[k]);
        ddp_npy_close(lab[k]);
    }
    ddp_npy_close(again);
    ddp_npz_close(z);
    return rc;
}

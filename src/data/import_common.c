/*
 * import_common.c - the write half shared by the importers (import.h): labels checked and
 * counted into `classes`, samples streamed in pieces through ddp_h5writer, float32 samples
 * checked finite. The formats' readers are import_npy.c, import_csv.c, import_image.c.
 *
 * Legend: N samples, D elements per sample.
 */
#include "data/import.h"

#include "core/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Index of the first non-finite value in x[0..n), or -1. */
static int64_t first_nonfinite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return -1;
}

/* Stream one split's samples into w. Returns 0, -1 for a bad input, -2 when the output
 * cannot be written. */
static int write_split(ddp_h5writer *w, const ddp_import_split *s, int classes, char *const *names,
                       char *err, size_t errlen)
{
    int64_t elems = 1;
    for (int i = 0; i < s->rank; i++)
        elems *= s->dims[i];
    const size_t row = (size_t)elems * (s->dtype == DDP_H5DTYPE_UINT8 ? 1 : sizeof(float));
    int64_t per = (int64_t)(DDP_IMPORT_CHUNK_BYTES / row);
    per = per < 1 ? 1 : per > s->n ? s->n : per;
    void *buf = ddp_malloc((size_t)per * row);
    int rc = -2;
    if (ddp_h5writer_begin(w, s->group, s->n, s->rank, s->dims, s->dtype, classes, err, errlen) ||
        (names && ddp_h5writer_class_names(w, names, classes, err, errlen)))
        goto out;
    for (int64_t done = 0; done < s->n; done += per) {
        int64_t n = s->n - done < per ? s->n - done : per;
        rc = -1; /* an input, until the append */
        if (s->read(s->ctx, buf, n, err, errlen) != 0)
            goto out;
        if (s->dtype == DDP_H5DTYPE_FLOAT32) {
            int64_t bad = first_nonfinite(buf, n * elems);
            if (bad >= 0) {
                ddp_err(err, errlen,
                        "%s: sample %lld holds %s at element %lld; images must be "
                        "finite, fix or drop that sample",
                        s->images_name, (long long)(done + bad / elems),
                        isnan(((float *)buf)[bad]) ? "NaN" : "an infinity",
                        (long long)(bad % elems));
                goto out;
            }
        }
        rc = -2;
        if (ddp_h5writer_append(w, buf, s->labels + done, n, err, errlen) != 0)
            goto out;
    }
    rc = ddp_h5writer_end(w, err, errlen) != 0 ? -2 : 0;
out:
    free(buf);
    return rc;
}

/* Labels of every split: in range, and their smallest and largest into s. */
static int check_labels(const ddp_import_split *splits, int nsplits, int classes,
                        ddp_import_summary *s, char *err, size_t errlen)
{
    for (int k = 0; k < nsplits; k++) {
        const ddp_import_split *p = &splits[k];
        s->n[k] = p->n;
        s->label_min[k] = INT32_MAX;
        s->label_max[k] = 0;
        for (int64_t i = 0; i < p->n; i++) {
            int32_t l = p->labels[i];
            if (l < 0 || l >= DDP_H5_MAX_CLASSES || (classes > 0 && l >= classes))
                return ddp_err(err, errlen,
                               "%s: label %d of sample %lld is outside [0, %d); "
                               "%s",
                               p->labels_name, (int)l, (long long)i,
                               classes > 0 ? classes : DDP_H5_MAX_CLASSES,
                               classes > 0 ? "raise --classes or leave it out (largest label + 1)"
                                           : "labels must be class numbers from 0");
            s->label_min[k] = l < s->label_min[k] ? l : s->label_min[k];
            s->label_max[k] = l > s->label_max[k] ? l : s->label_max[k];
        }
        if (k > 0 && (p->rank != splits[0].rank || p->dtype != splits[0].dtype ||
                      memcmp(p->dims, splits[0].dims, sizeof p->dims) != 0))
            return ddp_err(err, errlen,
                           "%s: samples differ in shape or dtype from those of %s; "
                           "train and test must come from the same set",
                           p->images_name, splits[0].images_name);
    }
    return 0;
}

int ddp_import_write(const ddp_import_opts *o, const ddp_import_split *splits, int nsplits,
                     ddp_import_summary *sum, char *err, size_t errlen)
{
    ddp_import_summary s = {.nsplits = nsplits, .rank = splits[0].rank, .dtype = splits[0].dtype};
    memcpy(s.dims, splits[0].dims, sizeof s.dims);
    if (check_labels(splits, nsplits, o->names ? 0 : o->classes, &s, err, errlen) != 0)
        return -1;
    int32_t maxl =
        s.label_max[0] > s.label_max[nsplits - 1] ? s.label_max[0] : s.label_max[nsplits - 1];
    if (o->names && maxl + 1 != o->nnames) {
        ddp_err(err, errlen,
                "--classes names %d classes, but the labels of %s%s%s hold %d (0..%d); give "
                "one name per class, in label order",
                o->nnames, splits[0].labels_name, nsplits > 1 ? " and " : "",
                nsplits > 1 ? splits[1].labels_name : "", (int)maxl + 1, (int)maxl);
        return DDP_IMPORT_BAD_NAMES;
    }
    s.classes = o->names ? o->nnames : o->classes > 0 ? o->classes : maxl + 1;
    ddp_h5writer *w = ddp_h5writer_create(o->out, o->source, err, errlen);
    int rc = w ? 0 : -2;
    for (int k = 0; k < nsplits && rc == 0; k++)
        rc = write_split(w, &splits[k], s.classes, o->names, err, errlen);
    if (rc == 0 && ddp_h5writer_commit(w, err, errlen) != 0)
        rc = -2;
    ddp_h5writer_destroy(w);
    if (rc == 0 && sum)
        *sum = s;
    return rc;
}

/* The rows of one split of a held-out source: reads the source in pieces, keeps the rows
 * whose mask is `want`, and reads the source to its end once the split is complete. */
typedef struct {
    ddp_import_rows_fn read;
    void *ctx;
    const uint8_t *mask; /* (total) 1: /test */
    uint8_t want;
    int64_t total, pos; /* source rows; rows loaded so far */
    int64_t left;       /* rows of the split still to give */
    size_t row;         /* bytes a row */
    uint8_t *buf;       /* (per, row) */
    int64_t per, have, at;
} held_out;

/* Load the next piece of the source into h->buf. */
static int load_piece(held_out *h, char *err, size_t errlen)
{
    h->have = h->total - h->pos < h->per ? h->total - h->pos : h->per;
    h->at = 0;
    h->pos += h->have;
    return h->read(h->ctx, h->buf, h->have, err, errlen);
}

/* ddp_import_rows_fn over held_out. */
static int read_held_out(void *ctx, void *buf, int64_t n, char *err, size_t errlen)
{
    held_out *h = ctx;
    uint8_t *out = buf;
    for (int64_t k = 0; k < n;) {
        if (h->at == h->have && load_piece(h, err, errlen) != 0)
            return -1;
        int64_t row = h->pos - h->have + h->at;
        if (h->mask[row] == h->want)
            memcpy(out + (size_t)k++ * h->row, h->buf + (size_t)h->at * h->row, h->row);
        h->at++;
    }
    h->left -= n;
    while (h->left == 0 && h->pos < h->total) /* the rest, for its checks */
        if (load_piece(h, err, errlen) != 0)
            return -1;
    return 0;
}

int ddp_import_write_held_out(const ddp_import_opts *o, const ddp_import_split *all,
                              ddp_import_rows_fn again, void *ctx_again, ddp_import_summary *sum,
                              char *err, size_t errlen)
{
    const int64_t n = all->n;
    ddp_import_summary range;
    if (check_labels(all, 1, o->names ? 0 : o->classes, &range, err, errlen) != 0)
        return -1; /* each label in [0, DDP_H5_MAX_CLASSES) from here */
    const int64_t classes = (int64_t)range.label_max[0] + 1;
    /* Of each class's rows in order, the last round(F n_c) go to /test (as imagefolder). */
    int64_t *count = ddp_calloc((size_t)classes, sizeof *count);
    uint8_t *mask = ddp_malloc((size_t)n);
    for (int64_t i = 0; i < n; i++)
        count[all->labels[i]]++;
    for (int64_t c = 0; c < classes; c++)
        count[c] = count[c] - (int64_t)llround((double)count[c] * o->test_fraction); /* train */
    int64_t nt = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t l = all->labels[i];
        mask[i] = count[l] > 0 ? 0 : 1;
        count[l] -= count[l] > 0;
        nt += mask[i];
    }
    free(count);
    int32_t *lab[2] = {ddp_malloc((size_t)(n - nt + 1) * sizeof(int32_t)),
                       ddp_malloc((size_t)(nt + 1) * sizeof(int32_t))};
    int64_t fill[2] = {0, 0};
    for (int64_t i = 0; i < n; i++)
        lab[mask[i]][fill[mask[i]]++] = all->labels[i];
    int64_t elems = all->dims[0] * (all->rank == 3 ? all->dims[1] * all->dims[2] : 1);
    const size_t row = (size_t)elems * (all->dtype == DDP_H5DTYPE_UINT8 ? 1 : sizeof(float));
    held_out h[2];
    ddp_import_split s[2];
    for (int k = 0; k < 2; k++) {
        int64_t per = (int64_t)(DDP_IMPORT_CHUNK_BYTES / row);
        per = per < 1 ? 1 : per > n ? n : per;
        h[k] = (held_out){.read = k ? again : all->read,
                          .ctx = k ? ctx_again : all->ctx,
                          .mask = mask,
                          .want = (uint8_t)k,
                          .total = n,
                          .left = fill[k],
                          .row = row,
                          .buf = ddp_malloc((size_t)per * row),
                          .per = per};
        s[k] = *all;
        s[k].group = k ? "/test" : "/train";
        s[k].n = fill[k];
        s[k].labels = lab[k];
        s[k].read = read_held_out;
        s[k].ctx = &h[k];
    }
    int rc = fill[0] == 0 ? ddp_err(err, errlen,
                                    "%s: no training rows left (test fraction %g); lower "
                                    "--test-fraction",
                                    all->labels_name, o->test_fraction)
                          : ddp_import_write(o, s, nt > 0 ? 2 : 1, sum, err, errlen);
    for (int k = 0; k < 2; k++) {
        free(h[k].buf);
        free(lab[k]);
    }
    free(mask);
    return rc;
}

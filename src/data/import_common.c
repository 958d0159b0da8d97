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
static int write_split(ddp_h5writer *w, const ddp_import_split *s, int classes, char *err,
                       size_t errlen)
{
    int64_t elems = 1;
    for (int i = 0; i < s->rank; i++)
        elems *= s->dims[i];
    const size_t row = (size_t)elems * (s->dtype == DDP_H5DTYPE_UINT8 ? 1 : sizeof(float));
    int64_t per = (int64_t)(DDP_IMPORT_CHUNK_BYTES / row);
    per = per < 1 ? 1 : per > s->n ? s->n : per;
    void *buf = ddp_malloc((size_t)per * row);
    int rc = -2;
    if (ddp_h5writer_begin(w, s->group, s->n, s->rank, s->dims, s->dtype, classes, err, errlen))
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

int ddp_import_write(const char *out, const char *source, const ddp_import_split *splits,
                     int nsplits, int classes, ddp_import_summary *sum, char *err, size_t errlen)
{
    ddp_import_summary s = {.nsplits = nsplits, .rank = splits[0].rank, .dtype = splits[0].dtype};
    memcpy(s.dims, splits[0].dims, sizeof s.dims);
    int32_t maxl = 0;
    for (int k = 0; k < nsplits; k++) {
        const ddp_import_split *p = &splits[k];
        s.n[k] = p->n;
        s.label_min[k] = INT32_MAX;
        s.label_max[k] = 0;
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
            s.label_min[k] = l < s.label_min[k] ? l : s.label_min[k];
            s.label_max[k] = l > s.label_max[k] ? l : s.label_max[k];
        }
        maxl = s.label_max[k] > maxl ? s.label_max[k] : maxl;
        if (k > 0 && (p->rank != splits[0].rank || p->dtype != splits[0].dtype ||
                      memcmp(p->dims, splits[0].dims, sizeof p->dims) != 0))
            return ddp_err(err, errlen,
                           "%s: samples differ in shape or dtype from those of %s; "
                           "train and test must come from the same set",
                           p->images_name, splits[0].images_name);
    }
    s.classes = classes > 0 ? classes : maxl + 1;
    ddp_h5writer *w = ddp_h5writer_create(out, source, err, errlen);
    int rc = w ? 0 : -2;
    for (int k = 0; k < nsplits && rc == 0; k++)
        rc = write_split(w, &splits[k], s.classes, err, errlen);
    if (rc == 0 && ddp_h5writer_commit(w, err, errlen) != 0)
        rc = -2;
    ddp_h5writer_destroy(w);
    if (rc == 0 && sum)
        *sum = s;
    return rc;
}

/*
 * cmd_predict.c - batch inference into an HDF5 file. See predict.h.
 *
 * Dimension letters: N samples, B batch, K classes, E elements of one sample.
 */
#include "cli/predict.h"

#include <hdf5.h>
#include <stdlib.h>
#include <string.h>

#include "job/config.h"
#include "data/augment.h"
#include "data/h5data.h"
#include "nn/weights.h"
#include "core/fileio.h"
#include "core/util.h"

/* Write a 1-D or 2-D dataset of type (float or int32) into file. 0 or -1. */
static int write_ds(hid_t file, const char *name, hid_t type, int rank, const hsize_t *dims,
                    const void *data)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t ds =
        sp < 0 ? -1 : H5Dcreate2(file, name, type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = ds >= 0 && H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0 ? 0 : -1;
    if (ds >= 0)
        H5Dclose(ds);
    if (sp >= 0)
        H5Sclose(sp);
    return rc;
}

/* A 1-D dataset of n variable-length UTF-8 strings v[i] into file. 0 or -1. */
static int write_strings(hid_t file, const char *name, const char *const *v, hsize_t n)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    int rc = t >= 0 && H5Tset_size(t, H5T_VARIABLE) >= 0 && H5Tset_cset(t, H5T_CSET_UTF8) >= 0
                 ? write_ds(file, name, t, 1, &n, v)
                 : -1;
    if (t >= 0)
        H5Tclose(t);
    return rc;
}

/* The class names of the predicted classes: those of the input group, else those of the
 * job's training split (the model's classes). NULL when neither has names; *from names the
 * file. Names of another count than the model's K are an error (-1 with err). */
static int class_names(const ddp_h5split *s, const struct ddp_job *job, const char *input,
                       const char *group, int K, ddp_h5split **train, const char *const **names,
                       char *err, size_t errlen)
{
    char e2[DDP_ERR_LEN];
    const char *file = input, *grp = group;
    *names = ddp_h5split_class_names(s);
    int n = ddp_h5split_class_name_count(s);
    if (!*names && job->data_file[0] &&
        (*train = ddp_h5split_open_images(job->data_file, job->data_train, e2, sizeof e2))) {
        *names = ddp_h5split_class_names(*train);
        n = ddp_h5split_class_name_count(*train);
        file = job->data_file, grp = job->data_train;
    }
    if (*names && n != K)
        return ddp_err(err, errlen,
                       "%s: %s/class_names holds %d names but the model has %d classes; "
                       "predict data of the model's classes (or delete the names)",
                       file, grp, n, K);
    return 0;
}

/* logits (N, K) and predictions (N) to output, atomically; with names (K), also
 * /class_names and /predicted_names (N), the name of each prediction. */
static int save(const char *output, const float *logits, const int32_t *pred, int64_t N, int K,
                const char *const *names, char *err, size_t errlen)
{
    char tmp[DDP_PATH_MAX + 8], why[256];
    snprintf(tmp, sizeof tmp, "%s.tmp", output);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t d2[2] = {(hsize_t)N, (hsize_t)K};
    int rc = f < 0 ? -1 : 0;
    if (!rc)
        rc = write_ds(f, "logits", H5T_NATIVE_FLOAT, 2, d2, logits);
    if (!rc)
        rc = write_ds(f, "predictions", H5T_NATIVE_INT32, 1, d2, pred);
    if (!rc && names) {
        const char **pn = ddp_malloc(sizeof *pn * (size_t)N);
        for (int64_t i = 0; i < N; i++)
            pn[i] = names[pred[i]];
        rc = write_strings(f, "class_names", names, (hsize_t)K) ||
             write_strings(f, "predicted_names", pn, (hsize_t)N);
        free(pn);
    }
    if (rc)
        ddp_h5_error_reason(why, sizeof why);
    if (f >= 0 && H5Fclose(f) < 0 && !rc) {
        rc = -1;
        ddp_h5_error_reason(why, sizeof why);
    }
    if (rc) {
        remove(tmp);
        return ddp_err(err, errlen, "%s: cannot write predictions: %s", output, why);
    }
    return ddp_file_commit(tmp, output, err, errlen);
}

/* Forward every sample of s in batches of B, normalised by norm; logits (N, K) on the host. */
static int run(struct ddp_model *m, ddp_h5split *s, const struct ddp_augment *norm, int B,
               float *logits, char *err, size_t errlen)
{
    int64_t N = ddp_h5split_count(s);
    size_t E = m->in_elems, K = (size_t)m->classes;
    float *x = ddp_malloc(sizeof(float) * (size_t)B * E);
    int64_t *idx = ddp_malloc(sizeof(int64_t) * (size_t)B);
    int cpu = strcmp(m->be->name, "cpu") == 0;
    float *dev = cpu ? NULL : m->be->alloc(sizeof(float) * (size_t)B * E);
    float *scratch = ddp_malloc(sizeof(float) * E);
    int rc = 0;
    for (int64_t i = 0; i < N && !rc; i += B) {
        int n = (int)(N - i < B ? N - i : B);
        for (int j = 0; j < n; j++)
            idx[j] = i + j;
        if (ddp_h5split_read(s, idx, n, x, err, errlen) != 0) {
            rc = -1;
            break;
        }
        ddp_augment_apply(norm, x, n, idx, 0, scratch);
        if (dev)
            m->be->upload(dev, x, sizeof(float) * (size_t)n * E);
        const float *out = ddp_model_forward(m, dev ? dev : x, n, 0, 0);
        m->be->download(logits + (size_t)i * K, out, sizeof(float) * (size_t)n * K);
    }
    if (dev)
        m->be->free(dev);
    free(scratch);
    free(x);
    free(idx);
    return rc;
}

/* One log line: how many samples went to each class, by name (the first 10 classes). */
static void log_by_name(const char *const *names, const int32_t *pred, int64_t N, int K)
{
    int64_t *count = ddp_calloc((size_t)K, sizeof *count);
    for (int64_t i = 0; i < N; i++)
        count[pred[i]]++;
    char line[1024];
    size_t o = 0;
    for (int k = 0; k < K && k < 10 && o < sizeof line; k++)
        o += (size_t)snprintf(line + o, sizeof line - o, "%s%d %s: %lld", k ? ", " : "", k,
                              names[k], (long long)count[k]);
    ddp_log("predicted classes: %s%s", line, K > 10 ? ", ..." : "");
    free(count);
}

int ddp_predict(struct ddp_model *m, const struct ddp_job *job, const char *input,
                const char *group, const char *output, int batch, char *err, size_t errlen)
{
    ddp_h5split *s = ddp_h5split_open_images(input, group, err, errlen);
    if (!s)
        return DDP_EXIT_DATA;
    int64_t dims[3], N = ddp_h5split_count(s);
    int nd = ddp_h5split_shape(s, dims), K = m->classes, rc = 0;
    int same = nd == m->in_ndim;
    for (int d = 0; d < nd && same; d++)
        same = dims[d] == m->ishape[d];
    if (!same) {
        ddp_h5split_close(s);
        ddp_err(err, errlen,
                "%s: %s holds samples of another shape than the model's input "
                "(the job's [data] file); give data in the same layout",
                input, group);
        return DDP_EXIT_DATA;
    }
    ddp_h5split *train = NULL; /* the job's training split, when its names are used */
    float *logits = ddp_malloc(sizeof(float) * (size_t)N * (size_t)K);
    int32_t *pred = ddp_malloc(sizeof(int32_t) * (size_t)N);
    struct ddp_augment norm;
    ddp_augment_init(&norm, job, nd, dims, 0);
    if (run(m, s, &norm, batch, logits, err, errlen) != 0) {
        rc = DDP_EXIT_DATA;
        goto done;
    }
    const int32_t *labels = ddp_h5split_labels(s); /* NULL: images only */
    const char *const *names = NULL;
    if (class_names(s, job, input, group, K, &train, &names, err, errlen) != 0) {
        rc = DDP_EXIT_DATA;
        goto done;
    }
    int64_t right = 0;
    for (int64_t i = 0; i < N; i++) {
        const float *row = logits + (size_t)i * (size_t)K;
        int best = 0;
        for (int k = 1; k < K; k++)
            if (row[k] > row[best])
                best = k;
        pred[i] = best;
        right += labels && best == labels[i];
    }
    if (save(output, logits, pred, N, K, names, err, errlen) != 0) {
        rc = DDP_EXIT_RUNTIME;
        goto done;
    }
    if (labels)
        ddp_log("predicted %lld samples of %s %s into %s (accuracy against its labels %.4f)",
                (long long)N, input, group, output, (double)right / (double)N);
    else
        ddp_log("predicted %lld samples of %s %s into %s (no labels there: no accuracy)",
                (long long)N, input, group, output);
    if (names)
        log_by_name(names, pred, N, K);
done:
    free(logits);
    free(pred);
    ddp_h5split_close(train);
    ddp_h5split_close(s);
    return rc;
}

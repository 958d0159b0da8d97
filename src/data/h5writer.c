/*
 * h5writer.c - the HDF5 dataset writer (h5data.h ddp_h5writer_*): splits written into a
 * temporary file, renamed into place on commit. HDF5's own error printing is silenced for each
 * call and one line of its own reported, as in h5data.c.
 *
 * Legend: N samples, D elements per sample (C*H*W for images).
 */
#include "data/h5data.h"

#include "core/fileio.h"
#include "core/h5attr.h"
#include "core/util.h"
#include "data/h5_impl.h"

#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ddp_h5writer {
    char *path, *tmp;
    hid_t file;
    int committed;
    /* current group, when begun */
    char group[DDP_H5_MAX_GROUP_LEN + 2];
    hid_t g, images, labels;
    int file_rank;
    int64_t count, written, elems;
    int64_t dims[3];
    size_t row_bytes;
    enum ddp_h5dtype dtype;
    int classes;
    void *lbuf; /* label conversion scratch (uint8 when classes <= 256) */
    int64_t lcap;
};

/* Close the current group's handles (if any). */
static void close_group(ddp_h5writer *w)
{
    if (w->images >= 0)
        H5Dclose(w->images);
    if (w->labels >= 0)
        H5Dclose(w->labels);
    if (w->g >= 0)
        H5Gclose(w->g);
    w->images = w->labels = w->g = H5I_INVALID_HID;
    w->group[0] = '\0';
}

ddp_h5writer *ddp_h5writer_create(const char *path, const char *source, char *err, size_t errlen)
{
    h5_quiet q;
    h5_quiet_on(&q);
    ddp_h5writer *w = ddp_calloc(1, sizeof *w);
    w->file = w->g = w->images = w->labels = H5I_INVALID_HID;
    w->path = ddp_strdup(path);
    w->tmp = ddp_file_tmp_path(path);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    /* Lock if the file system can, carry on if it cannot (Lustre without flock). */
    H5Pset_file_locking(fapl, 1, 1);
    errno = 0;
    w->file = H5Fcreate(w->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (w->file < 0) { /* errno from open(2) when that is what failed, else HDF5's reason */
        char why[256];
        int e = errno;
        ddp_err(err, errlen,
                "%s: cannot create: %s; check that the directory exists and is "
                "writable",
                w->tmp, e ? strerror(e) : h5_reason(why, sizeof why));
    }
    H5Pclose(fapl);
    if (w->file < 0)
        goto fail;
    if (ddp_h5attr_write_vstr(w->file, "source", source ? source : "") != 0) {
        char why[256];
        ddp_err(err, errlen, "%s: cannot write attribute `source` (%s)", w->tmp,
                h5_reason(why, sizeof why));
        goto fail;
    }
    h5_quiet_off(&q);
    return w;
fail:
    h5_quiet_off(&q);
    ddp_h5writer_destroy(w);
    return NULL;
}

int ddp_h5writer_begin(ddp_h5writer *w, const char *group, int64_t count, int rank,
                       const int64_t dims[3], enum ddp_h5dtype dtype, int classes, char *err,
                       size_t errlen)
{
    h5_quiet q;
    h5_quiet_on(&q);
    hid_t sp = H5I_INVALID_HID, dcpl = H5I_INVALID_HID, ft = H5I_INVALID_HID;
    char gp[DDP_H5_MAX_GROUP_LEN + 2];
    if (w->g >= 0) {
        ddp_err(err, errlen, "%s: group %s still open; end it before starting %s", w->tmp, w->group,
                group);
        goto fail;
    }
    if (h5_group_path(group, gp, sizeof gp) != 0) {
        ddp_err(err, errlen, "%s: bad group name `%s`", w->tmp, group ? group : "");
        goto fail;
    }
    if (count <= 0 || count > DDP_H5_MAX_SAMPLES || (rank != 1 && rank != 3) || classes <= 0 ||
        classes > DDP_H5_MAX_CLASSES ||
        (dtype != DDP_H5DTYPE_UINT8 && dtype != DDP_H5DTYPE_FLOAT32)) {
        ddp_err(err, errlen,
                "%s: %s: bad layout (count %lld, rank %d, classes %d); expected "
                "1..%lld samples, rank 1 or 3, 1..%d classes",
                w->tmp, gp, (long long)count, rank, classes, (long long)DDP_H5_MAX_SAMPLES,
                DDP_H5_MAX_CLASSES);
        goto fail;
    }
    hsize_t fd[4];
    fd[0] = (hsize_t)count;
    w->elems = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] <= 0 || dims[i] > DDP_H5_MAX_SAMPLE_ELEMS ||
            (w->elems *= dims[i]) > DDP_H5_MAX_SAMPLE_ELEMS) {
            ddp_err(err, errlen,
                    "%s: %s: sample shape must have dimensions > 0 and at most "
                    "%lld elements",
                    w->tmp, gp, (long long)DDP_H5_MAX_SAMPLE_ELEMS);
            goto fail;
        }
        fd[i + 1] = (hsize_t)dims[i];
        w->dims[i] = dims[i];
    }
    snprintf(w->group, sizeof w->group, "%s", gp);
    w->file_rank = rank + 1;
    w->count = count;
    w->written = 0;
    w->dtype = dtype;
    w->classes = classes;
    w->row_bytes = (size_t)w->elems * (dtype == DDP_H5DTYPE_UINT8 ? 1 : sizeof(float));

    w->g = H5Gcreate2(w->file, gp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (w->g < 0 || ddp_h5attr_write(w->g, "classes", H5T_STD_I32LE, H5T_NATIVE_INT, &classes) != 0)
        goto h5fail;
    /* Contiguous, no fill pass: every row is written exactly once by append. */
    dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (dcpl < 0 || H5Pset_layout(dcpl, H5D_CONTIGUOUS) < 0 ||
        H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) < 0 ||
        H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) < 0)
        goto h5fail;
    sp = H5Screate_simple(w->file_rank, fd, NULL);
    ft = dtype == DDP_H5DTYPE_UINT8 ? H5T_STD_U8LE : H5T_IEEE_F32LE;
    w->images = sp >= 0 ? H5Dcreate2(w->g, "images", ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT) : -1;
    if (w->images < 0)
        goto h5fail;
    H5Sclose(sp);
    sp = H5Screate_simple(1, fd, NULL);
    w->labels = sp >= 0 ? H5Dcreate2(w->g, "labels", classes <= 256 ? H5T_STD_U8LE : H5T_STD_I32LE,
                                     sp, H5P_DEFAULT, dcpl, H5P_DEFAULT)
                        : -1;
    if (w->labels < 0)
        goto h5fail;
    H5Sclose(sp);
    H5Pclose(dcpl);
    h5_quiet_off(&q);
    return 0;
h5fail : {
    char why[256];
    ddp_err(err, errlen,
            "%s: %s: cannot create the group's datasets (%s); check free disk "
            "space",
            w->tmp, gp, h5_reason(why, sizeof why));
}
    close_group(w);
fail:
    if (sp >= 0)
        H5Sclose(sp);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    h5_quiet_off(&q);
    return -1;
}

int ddp_h5writer_append(ddp_h5writer *w, const void *images, const int32_t *labels, int64_t n,
                        char *err, size_t errlen)
{
    if (w->g < 0)
        return ddp_err(err, errlen, "%s: append with no group begun", w->tmp);
    if (n < 0 || n > w->count - w->written)
        return ddp_err(err, errlen,
                       "%s: %s: appending %lld samples to %lld of %lld would "
                       "overflow the group",
                       w->tmp, w->group, (long long)n, (long long)w->written, (long long)w->count);
    if (n == 0)
        return 0;
    for (int64_t i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= w->classes)
            return ddp_err(err, errlen, "%s: %s: label %d of sample %lld is outside [0, %d)",
                           w->tmp, w->group, (int)labels[i], (long long)(w->written + i),
                           w->classes);
    if (n > w->lcap) {
        free(w->lbuf);
        w->lbuf = ddp_malloc((size_t)n * sizeof(int32_t));
        w->lcap = n;
    }
    const void *lsrc = labels;
    hid_t lmt = H5T_NATIVE_INT32;
    if (w->classes <= 256) { /* convert here: HDF5 would allocate a conversion buffer */
        uint8_t *u = w->lbuf;
        for (int64_t i = 0; i < n; i++)
            u[i] = (uint8_t)labels[i];
        lsrc = u;
        lmt = H5T_NATIVE_UINT8;
    }

    h5_quiet q;
    h5_quiet_on(&q);
    int rc = -1;
    hid_t fsp = H5I_INVALID_HID, msp = H5I_INVALID_HID;
    hsize_t start[4] = {(hsize_t)w->written, 0, 0, 0}, count[4] = {1, 1, 1, 1}, block[4];
    block[0] = (hsize_t)n;
    for (int i = 1; i < w->file_rank; i++)
        block[i] = (hsize_t)w->dims[i - 1];
    hsize_t m = (hsize_t)n * (hsize_t)w->elems;
    fsp = H5Dget_space(w->images);
    msp = H5Screate_simple(1, &m, NULL);
    if (fsp < 0 || msp < 0 ||
        H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, block) < 0 ||
        H5Dwrite(w->images, w->dtype == DDP_H5DTYPE_UINT8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT,
                 msp, fsp, H5P_DEFAULT, images) < 0)
        goto h5fail;
    H5Sclose(fsp);
    H5Sclose(msp);
    m = (hsize_t)n;
    fsp = H5Dget_space(w->labels);
    msp = H5Screate_simple(1, &m, NULL);
    if (fsp < 0 || msp < 0 ||
        H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, block) < 0 ||
        H5Dwrite(w->labels, lmt, msp, fsp, H5P_DEFAULT, lsrc) < 0)
        goto h5fail;
    w->written += n;
    rc = 0;
    goto out;
h5fail : {
    char why[256];
    ddp_err(err, errlen,
            "%s: %s: write of samples %lld..%lld failed (%s); check free disk "
            "space",
            w->tmp, w->group, (long long)w->written, (long long)(w->written + n - 1),
            h5_reason(why, sizeof why));
}
out:
    if (fsp >= 0)
        H5Sclose(fsp);
    if (msp >= 0)
        H5Sclose(msp);
    h5_quiet_off(&q);
    return rc;
}

int ddp_h5writer_class_names(ddp_h5writer *w, char *const *names, int n, char *err, size_t errlen)
{
    if (w->g < 0 || n != w->classes)
        return ddp_err(err, errlen, "%s: %d class names for a group of %d classes", w->tmp, n,
                       w->classes);
    h5_quiet q;
    h5_quiet_on(&q);
    int rc = h5_write_class_names(w->g, names, n);
    if (rc) {
        char why[256];
        ddp_err(err, errlen, "%s: %s: cannot write class_names (%s); check free disk space", w->tmp,
                w->group, h5_reason(why, sizeof why));
    }
    h5_quiet_off(&q);
    return rc;
}

int ddp_h5writer_end(ddp_h5writer *w, char *err, size_t errlen)
{
    if (w->g < 0)
        return ddp_err(err, errlen, "%s: end with no group begun", w->tmp);
    if (w->written != w->count)
        return ddp_err(err, errlen, "%s: %s: %lld of %lld samples written", w->tmp, w->group,
                       (long long)w->written, (long long)w->count);
    h5_quiet q;
    h5_quiet_on(&q);
    close_group(w);
    h5_quiet_off(&q);
    return 0;
}

int ddp_h5writer_commit(ddp_h5writer *w, char *err, size_t errlen)
{
    if (w->g >= 0)
        return ddp_err(err, errlen, "%s: group %s not ended", w->tmp, w->group);
    h5_quiet q;
    h5_quiet_on(&q);
    herr_t r = H5Fclose(w->file);
    w->file = H5I_INVALID_HID;
    h5_quiet_off(&q);
    if (r < 0) {
        char why[256];
        return ddp_err(err, errlen, "%s: closing failed (%s); check free disk space", w->tmp,
                       h5_reason(why, sizeof why));
    }
    if (ddp_file_commit(w->tmp, w->path, err, errlen) != 0)
        return -1;
    w->committed = 1;
    return 0;
}

void ddp_h5writer_destroy(ddp_h5writer *w)
{
    if (!w)
        return;
    h5_quiet q;
    h5_quiet_on(&q);
    close_group(w);
    if (w->file >= 0)
        H5Fclose(w->file);
    h5_quiet_off(&q);
    if (!w->committed)
        unlink(w->tmp);
    free(w->lbuf);
    free(w->path);
    free(w->tmp);
    free(w);
}

/*
 * h5data.c - HDF5 splits opened and checked (layout, storage, labels, memory), their
 * accessors, and the listing of a file's splits; reading samples is h5read.c's, the
 * tmp-then-rename writer h5writer.c's. See h5data.h for the layout and the contracts.
 *
 * Every public function silences HDF5's own error printing for its duration (the setting
 * is per thread in a thread-safe HDF5, so the prefetch thread needs it too) and reports
 * one line of its own, with HDF5's innermost message appended where it helps.
 *
 * Legend: N samples, D elements per sample (C*H*W for images), n samples per read.
 */
#include "data/h5data.h"

#include "core/fileio.h"
#include "core/h5attr.h"
#include "core/util.h"
#include "data/h5_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Labels are converted in pieces of this many values (bounded temporary memory). */
#define H5_LABEL_CHUNK ((int64_t)1 << 20)

/* ------------------------------------------------------------------------------------ */
/* HDF5 error handling                                                                   */

/* Turn off HDF5's stack printing for this thread; quiet_off restores it. */
void h5_quiet_on(h5_quiet *q)
{
    q->func = NULL;
    q->data = NULL;
    H5Eget_auto2(H5E_DEFAULT, &q->func, &q->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void h5_quiet_off(const h5_quiet *q)
{
    H5Eset_auto2(H5E_DEFAULT, q->func, q->data);
}

typedef struct {
    char *buf;
    size_t len;
} h5_msg;

/* Error stack walker: keep the innermost (first, walking upward) description. */
static herr_t walk_first(unsigned n, const H5E_error2_t *e, void *data)
{
    h5_msg *m = data;
    if (n == 0 && e->desc)
        snprintf(m->buf, m->len, "%s", e->desc);
    return 0;
}

/* HDF5's innermost error description for the current thread. Call it right after the
 * failing call: every HDF5 API call clears the stack. */
const char *h5_reason(char *buf, size_t len)
{
    h5_msg m = {buf, len};
    snprintf(buf, len, "HDF5 gave no detail");
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_first, &m);
    for (char *p = buf; *p; p++)
        if (*p == '\n')
            *p = ' ';
    return buf;
}

/* Name of an HDF5 datatype in numpy words ("uint8", "int16", "float64", "string", ...). */
static void type_name(hid_t t, char *buf, size_t len)
{
    H5T_class_t cls = H5Tget_class(t);
    size_t sz = H5Tget_size(t);
    switch (cls) {
    case H5T_INTEGER:
        snprintf(buf, len, "%sint%zu", H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "", 8 * sz);
        break;
    case H5T_FLOAT:
        snprintf(buf, len, "float%zu", 8 * sz);
        break;
    case H5T_STRING:
        snprintf(buf, len, "string");
        break;
    case H5T_COMPOUND:
        snprintf(buf, len, "compound");
        break;
    case H5T_ENUM:
        snprintf(buf, len, "enum");
        break;
    case H5T_ARRAY:
        snprintf(buf, len, "array");
        break;
    case H5T_BITFIELD:
        snprintf(buf, len, "bitfield");
        break;
    case H5T_OPAQUE:
        snprintf(buf, len, "opaque");
        break;
    case H5T_REFERENCE:
        snprintf(buf, len, "reference");
        break;
    case H5T_VLEN:
        snprintf(buf, len, "vlen");
        break;
    default:
        snprintf(buf, len, "unknown type");
        break;
    }
}

/* "60000x28x28" into buf. */
static void shape_str(const hsize_t *d, int rank, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < rank && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%llu", i ? "x" : "", (unsigned long long)d[i]);
    if (rank == 0)
        snprintf(buf, len, "scalar");
}

const char *ddp_h5dtype_name(enum ddp_h5dtype t)
{
    return t == DDP_H5DTYPE_UINT8 ? "uint8" : t == DDP_H5DTYPE_FLOAT32 ? "float32" : "?";
}

/* Normalise "train" to "/train" into buf; -1 when empty or too long. */
int h5_group_path(const char *group, char *buf, size_t len)
{
    if (!group || !group[0])
        return -1;
    int k = snprintf(buf, len, "%s%s", group[0] == '/' ? "" : "/", group);
    return (k < 0 || (size_t)k >= len) ? -1 : 0;
}

/* 1 if every component of the absolute link path exists as a link under file. */
static int path_exists(hid_t file, const char *gpath)
{
    char tmp[DDP_H5_MAX_GROUP_LEN + 2];
    snprintf(tmp, sizeof tmp, "%s", gpath);
    for (char *p = tmp + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (strcmp(tmp, "/") != 0 && H5Lexists(file, tmp, H5P_DEFAULT) <= 0)
                return 0;
            *p = c;
            if (c == '\0')
                return 1;
        }
    }
}

/* Open path read-only with file locking off; fills err naming the file on failure.
 * Distinguishes a missing file, a non-HDF5 file and an HDF5 file that will not open. */
static hid_t open_readonly(const char *path, char *err, size_t errlen)
{
    struct stat st;
    char why[256];
    if (stat(path, &st) != 0) {
        int e = errno;
        char cwd[1024];
        if (path[0] != '/' && getcwd(cwd, sizeof cwd))
            ddp_err(err, errlen,
                    "%s: cannot open: %s; relative paths are taken from the "
                    "working directory (%s): give an absolute path, or make the dataset there "
                    "with `ddptrain data idx`",
                    path, strerror(e), cwd);
        else
            ddp_err(err, errlen,
                    "%s: cannot open: %s; give the path of an HDF5 dataset "
                    "(make one with `ddptrain data idx` or `ddptrain data synth`)",
                    path, strerror(e));
        return H5I_INVALID_HID;
    }
    if (!S_ISREG(st.st_mode)) {
        ddp_err(err, errlen, "%s: not a regular file; give the path of an HDF5 dataset", path);
        return H5I_INVALID_HID;
    }
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0) {
        ddp_err(err, errlen,
                "%s: not an HDF5 file (no HDF5 signature); convert it with "
                "`ddptrain data idx` or write it with h5py",
                path);
        return H5I_INVALID_HID;
    }
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) {
        ddp_err(err, errlen, "%s: HDF5 property list: %s", path, h5_reason(why, sizeof why));
        return H5I_INVALID_HID;
    }
    /* Locking off: readers on shared file systems (Lustre, NFS) must not need flock. */
    H5Pset_file_locking(fapl, 0, 1);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (f < 0) /* before any other H5 call: each one clears the error stack */
        ddp_err(err, errlen,
                "%s: HDF5 cannot open it (%s); the file may be truncated or "
                "corrupt, re-create it",
                path, h5_reason(why, sizeof why));
    H5Pclose(fapl);
    return f;
}

/* ------------------------------------------------------------------------------------ */
/* Reader                                                                                */

/* Enable the pread fast path when the rows lie in the file as the bytes we want: a
 * contiguous, allocated, non-external dataset whose stored type is the memory type
 * (any 8-bit unsigned integer; float32 in native byte order), in a file opened by the
 * sec2 (POSIX) driver, whose descriptor we then borrow. Otherwise s->fd stays -1. */
static void find_fast_path(ddp_h5split *s, hid_t itype)
{
    hid_t dcpl = H5Dget_create_plist(s->images), fapl = H5Fget_access_plist(s->file);
    int raw = s->dtype == DDP_H5DTYPE_UINT8
                  ? H5Tget_precision(itype) == 8 && H5Tget_offset(itype) == 0
                  : H5Tequal(itype, H5T_NATIVE_FLOAT) > 0;
    if (dcpl >= 0 && fapl >= 0 && raw && H5Pget_layout(dcpl) == H5D_CONTIGUOUS &&
        H5Pget_external_count(dcpl) == 0 && H5Pget_driver(fapl) == H5FD_SEC2) {
        haddr_t off = H5Dget_offset(s->images);
        void *handle = NULL;
        if (off != HADDR_UNDEF && off <= (haddr_t)INT64_MAX &&
            H5Fget_vfd_handle(s->file, fapl, &handle) >= 0 && handle) {
            s->fd = *(int *)handle;
            s->offset = (int64_t)off;
        }
    }
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (fapl >= 0)
        H5Pclose(fapl);
}

/* Read the optional integer attribute `classes` of group g into *classes (0 when absent).
 * Present but not one integer in [1, DDP_H5_MAX_CLASSES] (e.g. negative) is an error. */
static int read_classes_attr(ddp_h5split *s, hid_t g, int *classes, char *err, size_t errlen)
{
    *classes = 0;
    int64_t v = 0;
    const int got = ddp_h5attr_read_int(g, "classes", &v);
    if (got > 0)
        return 0;
    const int ok = got == 0;
    if (!ok)
        return ddp_err(err, errlen,
                       "%s: %s attribute `classes` is not one integer; expected the "
                       "number of classes (1 to %d), or delete the attribute",
                       s->path, s->group, DDP_H5_MAX_CLASSES);
    if (v < 1 || v > DDP_H5_MAX_CLASSES)
        return ddp_err(err, errlen,
                       "%s: %s attribute `classes` is %lld; expected the number of "
                       "classes, 1 to %d (fix it, or delete the attribute)",
                       s->path, s->group, (long long)v, DDP_H5_MAX_CLASSES);
    *classes = (int)v;
    return 0;
}

/* Does dataset d (N rows of row_bytes) hold data for every row it declares? A chunked dataset
 * must have every chunk written (unwritten chunks read as fill values: a file of 85 KB can
 * declare 2^28 samples), a contiguous one its whole extent allocated and inside the file.
 * Checked before anything of size N is allocated. External storage is not checked. */
static int check_storage(ddp_h5split *s, hid_t d, const char *name, size_t row_bytes, char *err,
                         size_t errlen)
{
    hid_t dcpl = H5Dget_create_plist(d), sp = H5Dget_space(d);
    int rc = 0, rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    hsize_t dims[H5S_MAX_RANK], cdims[H5S_MAX_RANK];
    if (dcpl < 0 || rank < 1 || rank > H5S_MAX_RANK ||
        H5Sget_simple_extent_dims(sp, dims, NULL) < 0 || H5Pget_external_count(dcpl) > 0)
        goto out;
    H5D_layout_t layout = H5Pget_layout(dcpl);
    if (layout == H5D_CHUNKED && H5Pget_chunk(dcpl, rank, cdims) == rank) {
        hsize_t want = 1, have = 0;
        for (int i = 0; i < rank; i++)
            want *= cdims[i] ? (dims[i] + cdims[i] - 1) / cdims[i] : 1;
        if (H5Dget_num_chunks(d, sp, &have) >= 0 && have < want)
            rc = ddp_err(err, errlen,
                         "%s: %s/%s declares %llu samples but only %llu of its %llu "
                         "chunks were ever written (the rest would read as fill values); the "
                         "file is incomplete, re-create it",
                         s->path, s->group, name, (unsigned long long)dims[0],
                         (unsigned long long)have, (unsigned long long)want);
    } else if (layout == H5D_CONTIGUOUS) {
        double need = (double)dims[0] * (double)row_bytes;
        double got = (double)H5Dget_storage_size(d);
        haddr_t off = H5Dget_offset(d);
        hsize_t fsize = 0;
        if (got < need)
            rc = ddp_err(err, errlen,
                         "%s: %s/%s declares %llu samples (%.0f bytes) but the "
                         "file holds %.0f bytes of it; the file is incomplete, re-create it",
                         s->path, s->group, name, (unsigned long long)dims[0], need, got);
        else if (off != HADDR_UNDEF && H5Fget_filesize(s->file, &fsize) >= 0 &&
                 (double)off + need > (double)fsize)
            rc = ddp_err(err, errlen,
                         "%s: %s/%s declares %llu samples that end at byte %.0f, "
                         "but the file has %llu bytes: it is truncated, re-create or re-copy it",
                         s->path, s->group, name, (unsigned long long)dims[0], (double)off + need,
                         (unsigned long long)fsize);
    }
out:
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (sp >= 0)
        H5Sclose(sp);
    return rc;
}

/* Memory that a split of n samples needs before any image is read: its labels (int32) and a
 * sampler order (int64) per sample, plus the label read buffer. Refused (-1, err) when the
 * machine does not have it. */
static int check_split_memory(const ddp_h5split *s, char *err, size_t errlen)
{
    const char *which = NULL;
    size_t avail = ddp_mem_available(&which);
    double need = (double)s->n * (sizeof(int32_t) + sizeof(int64_t)) +
                  (double)H5_LABEL_CHUNK * sizeof(long long);
    if (need <= (double)avail)
        return 0;
    char a[32], b[32];
    return ddp_err(err, errlen,
                   "%s: %s declares %lld samples, whose labels and sampler need %s "
                   "but this machine has %s available (%s); use a smaller split",
                   s->path, s->group, (long long)s->n, ddp_fmt_bytes(need, a, sizeof a),
                   ddp_fmt_bytes((double)avail, b, sizeof b), which);
}

/* Read labels dataset `lab` (rank 1, integer, n values) into s->labels as int32, in pieces,
 * rejecting values that do not fit int32. */
static int read_labels(ddp_h5split *s, hid_t lab, char *err, size_t errlen)
{
    int rc = -1;
    char why[256];
    int64_t chunk = s->n < H5_LABEL_CHUNK ? s->n : H5_LABEL_CHUNK;
    long long *tmp = ddp_malloc((size_t)chunk * sizeof *tmp);
    hid_t fsp = H5Dget_space(lab);
    hid_t msp = H5I_INVALID_HID;
    if (fsp < 0)
        goto h5fail;
    s->labels = ddp_malloc((size_t)s->n * sizeof *s->labels);
    for (int64_t at = 0; at < s->n; at += chunk) {
        int64_t k = s->n - at < chunk ? s->n - at : chunk;
        hsize_t start = (hsize_t)at, count = (hsize_t)k;
        msp = H5Screate_simple(1, &count, NULL);
        if (msp < 0 || H5Sselect_hyperslab(fsp, H5S_SELECT_SET, &start, NULL, &count, NULL) < 0 ||
            H5Dread(lab, H5T_NATIVE_LLONG, msp, fsp, H5P_DEFAULT, tmp) < 0)
            goto h5fail;
        H5Sclose(msp);
        msp = H5I_INVALID_HID;
        for (int64_t i = 0; i < k; i++) {
            if (tmp[i] < INT32_MIN || tmp[i] > INT32_MAX) {
                ddp_err(err, errlen,
                        "%s: %s/labels: value %lld at index %lld does not fit "
                        "int32; labels must be class numbers in [0, classes)",
                        s->path, s->group, tmp[i], (long long)(at + i));
                goto fail;
            }
            s->labels[at + i] = (int32_t)tmp[i];
        }
    }
    rc = 0;
    goto fail;
h5fail:
    ddp_err(err, errlen,
            "%s: %s/labels: read failed (%s); the file may be truncated or "
            "corrupt, re-create it",
            s->path, s->group, h5_reason(why, sizeof why));
fail:
    if (msp >= 0)
        H5Sclose(msp);
    if (fsp >= 0)
        H5Sclose(fsp);
    free(tmp);
    return rc;
}

/* Open dataset `name` in group g, or fill err: missing, or not a dataset. */
static hid_t open_member(hid_t g, const char *path, const char *group, const char *name,
                         const char *expect, char *err, size_t errlen)
{
    if (H5Lexists(g, name, H5P_DEFAULT) <= 0) {
        ddp_err(err, errlen, "%s: %s has no dataset `%s`; expected %s (see docs/data.md)", path,
                group, name, expect);
        return H5I_INVALID_HID;
    }
    H5O_info_t oi;
    if (H5Oget_info_by_name(g, name, &oi, H5P_DEFAULT) < 0 || oi.type != H5O_TYPE_DATASET) {
        ddp_err(err, errlen, "%s: %s/%s is not a dataset; expected %s (see docs/data.md)", path,
                group, name, expect);
        return H5I_INVALID_HID;
    }
    hid_t d = H5Dopen2(g, name, H5P_DEFAULT);
    if (d < 0) {
        char why[256];
        ddp_err(err, errlen, "%s: %s/%s: cannot open (%s); the file may be corrupt, re-create it",
                path, group, name, h5_reason(why, sizeof why));
    }
    return d;
}

/* The split's HDF5 calls failed for no reason of the layout: one line, return -1. */
static int h5_failed(const ddp_h5split *s, const char *path, char *err, size_t errlen)
{
    char why[256];
    return ddp_err(err, errlen,
                   "%s: %s: HDF5 error (%s); the file may be truncated or "
                   "corrupt, re-create it",
                   path, s->group, h5_reason(why, sizeof why));
}

/* g/images: rank 2 or 4, uint8 or float32, each dimension > 0, bounded sample size. Fills the
 * split's shape, count, dtype and fast path. */
static int open_images(ddp_h5split *s, hid_t g, const char *path, char *err, size_t errlen)
{
    hid_t itype = H5I_INVALID_HID;
    int rc = -1;
    s->images = open_member(g, path, s->group, "images", "images of shape (N, C, H, W) or (N, D)",
                            err, errlen);
    if (s->images < 0)
        goto fail;
    s->fspace = H5Dget_space(s->images);
    int r = s->fspace >= 0 ? H5Sget_simple_extent_ndims(s->fspace) : -1;
    hsize_t d[H5S_MAX_RANK];
    char shp[128], tn[32];
    if (r < 0 || r > H5S_MAX_RANK || H5Sget_simple_extent_dims(s->fspace, d, NULL) < 0) {
        ddp_err(err, errlen, "%s: %s/images: cannot read its shape; re-create the file", path,
                s->group);
        goto fail;
    }
    shape_str(d, r, shp, sizeof shp);
    if (r != 2 && r != 4) {
        ddp_err(err, errlen,
                "%s: %s/images has rank %d (shape %s); expected (N, C, H, W) or "
                "(N, D), e.g. reshape (N, H, W) to (N, 1, H, W)",
                path, s->group, r, shp);
        goto fail;
    }
    s->file_rank = r;
    s->rank = r == 2 ? 1 : 3;
    s->elems = 1;
    for (int i = 0; i < r; i++) {
        if (d[i] == 0 && i > 0) {
            ddp_err(err, errlen,
                    "%s: %s/images has shape %s; every sample dimension must be "
                    "> 0",
                    path, s->group, shp);
            goto fail;
        }
        if (i > 0) {
            if (d[i] > (hsize_t)DDP_H5_MAX_SAMPLE_ELEMS ||
                (s->elems *= (int64_t)d[i]) > DDP_H5_MAX_SAMPLE_ELEMS) {
                ddp_err(err, errlen,
                        "%s: %s/images has shape %s; a sample may hold at most "
                        "%lld elements",
                        path, s->group, shp, (long long)DDP_H5_MAX_SAMPLE_ELEMS);
                goto fail;
            }
            s->dims[i - 1] = (int64_t)d[i];
        }
    }
    if (d[0] == 0) {
        ddp_err(err, errlen,
                "%s: %s/images is empty (shape %s); a split needs at least one "
                "sample",
                path, s->group, shp);
        goto fail;
    }
    if (d[0] > (hsize_t)DDP_H5_MAX_SAMPLES) {
        ddp_err(err, errlen, "%s: %s/images has %llu samples; at most %lld are supported", path,
                s->group, (unsigned long long)d[0], (long long)DDP_H5_MAX_SAMPLES);
        goto fail;
    }
    s->n = (int64_t)d[0];
    itype = H5Dget_type(s->images);
    if (itype < 0) {
        h5_failed(s, path, err, errlen);
        goto fail;
    }
    if (H5Tget_class(itype) == H5T_INTEGER && H5Tget_size(itype) == 1 &&
        H5Tget_sign(itype) == H5T_SGN_NONE) {
        s->dtype = DDP_H5DTYPE_UINT8;
        s->row_bytes = (size_t)s->elems;
    } else if (H5Tget_class(itype) == H5T_FLOAT && H5Tget_size(itype) == 4) {
        s->dtype = DDP_H5DTYPE_FLOAT32;
        s->row_bytes = (size_t)s->elems * sizeof(float);
    } else {
        type_name(itype, tn, sizeof tn);
        ddp_err(err, errlen,
                "%s: %s/images has dtype %s; expected uint8 (pixels 0..255) or "
                "float32, convert it (e.g. numpy .astype('float32'))",
                path, s->group, tn);
        goto fail;
    }

    find_fast_path(s, itype);

    rc = 0;
fail:
    if (itype >= 0)
        H5Tclose(itype);
    return rc;
}

/* g/labels: rank 1, integer, the images' N; then the classes attribute, the storage and
 * memory checks, and the labels read into memory. */
static int open_labels(ddp_h5split *s, hid_t g, const char *path, char *err, size_t errlen)
{
    hid_t lab = H5I_INVALID_HID, ltype = H5I_INVALID_HID, lspace = H5I_INVALID_HID;
    hsize_t d[H5S_MAX_RANK];
    char shp[128];
    int rc = -1;
    lab = open_member(g, path, s->group, "labels", "labels of shape (N,), an integer type", err,
                      errlen);
    if (lab < 0)
        goto fail;
    ltype = H5Dget_type(lab);
    lspace = H5Dget_space(lab);
    if (ltype < 0 || lspace < 0)
        goto h5fail;
    type_name(ltype, s->labels_type, sizeof s->labels_type);
    if (H5Tget_class(ltype) != H5T_INTEGER) {
        ddp_err(err, errlen,
                "%s: %s/labels has dtype %s; expected an integer type (class "
                "numbers), convert it (e.g. numpy .astype('int32'))",
                path, s->group, s->labels_type);
        goto fail;
    }
    int r = H5Sget_simple_extent_ndims(lspace);
    if (r < 0 || r > H5S_MAX_RANK || H5Sget_simple_extent_dims(lspace, d, NULL) < 0)
        goto h5fail;
    shape_str(d, r, shp, sizeof shp);
    if (r != 1) {
        ddp_err(err, errlen,
                "%s: %s/labels has rank %d (shape %s); expected shape (N,), one "
                "class number per sample",
                path, s->group, r, shp);
        goto fail;
    }
    if ((int64_t)d[0] != s->n) {
        ddp_err(err, errlen,
                "%s: %s: images has %lld samples but labels has %llu; both must "
                "have the same N",
                path, s->group, (long long)s->n, (unsigned long long)d[0]);
        goto fail;
    }
    if (read_classes_attr(s, g, &s->classes, err, errlen) != 0 ||
        check_storage(s, s->images, "images", s->row_bytes, err, errlen) != 0 ||
        check_storage(s, lab, "labels", H5Tget_size(ltype), err, errlen) != 0 ||
        check_split_memory(s, err, errlen) != 0 || read_labels(s, lab, err, errlen) != 0)
        goto fail;

    rc = 0;
    goto done;
h5fail:
    h5_failed(s, path, err, errlen);
fail:
done:
    if (ltype >= 0)
        H5Tclose(ltype);
    if (lspace >= 0)
        H5Sclose(lspace);
    if (lab >= 0)
        H5Dclose(lab);
    return rc;
}

/* A group without `labels` (labels optional): the checks of open_labels that concern the
 * images; s->labels stays NULL. */
static int open_unlabelled(ddp_h5split *s, hid_t g, const char *path, char *err, size_t errlen)
{
    if (read_classes_attr(s, g, &s->classes, err, errlen) != 0 ||
        check_storage(s, s->images, "images", s->row_bytes, err, errlen) != 0)
        return -1;
    return 0;
}

/* Both opens; need_labels = 0 accepts a group without `labels`. */
static ddp_h5split *open_split(const char *path, const char *group, int need_labels, char *err,
                               size_t errlen)
{
    h5_quiet q;
    h5_quiet_on(&q);
    ddp_h5split *s = ddp_calloc(1, sizeof *s);
    hid_t g = H5I_INVALID_HID;
    s->file = s->images = s->fspace = s->mspace = H5I_INVALID_HID;
    s->fd = -1;
    s->path = ddp_strdup(path ? path : "");

    if (!path || !path[0]) {
        ddp_err(err, errlen, "no dataset file given; set [data] file to an HDF5 dataset");
        goto fail;
    }
    if (h5_group_path(group, s->group, sizeof s->group) != 0) {
        ddp_err(err, errlen,
                "%s: group name `%s` is empty or longer than %d characters; "
                "give a group such as /train",
                path, group ? group : "", DDP_H5_MAX_GROUP_LEN);
        goto fail;
    }
    s->file = open_readonly(path, err, errlen);
    if (s->file < 0)
        goto fail;
    if (!path_exists(s->file, s->group)) {
        ddp_err(err, errlen,
                "%s: no group %s; `ddptrain data info %s` lists the groups, "
                "set [data] train/test to one of them",
                path, s->group, path);
        goto fail;
    }
    g = H5Gopen2(s->file, s->group, H5P_DEFAULT);
    if (g < 0) {
        ddp_err(err, errlen,
                "%s: %s is not a group; expected a group holding `images` and "
                "`labels`",
                path, s->group);
        goto fail;
    }

    int labelled = need_labels || H5Lexists(g, "labels", H5P_DEFAULT) > 0;
    if (open_images(s, g, path, err, errlen) != 0 ||
        (labelled ? open_labels(s, g, path, err, errlen)
                  : open_unlabelled(s, g, path, err, errlen)) != 0 ||
        h5_read_class_names(s, g, err, errlen) != 0)
        goto fail;
    H5Gclose(g);
    h5_quiet_off(&q);
    return s;
fail:
    if (g >= 0)
        H5Gclose(g);
    ddp_h5split_close(s);
    h5_quiet_off(&q);
    return NULL;
}

ddp_h5split *ddp_h5split_open(const char *path, const char *group, char *err, size_t errlen)
{
    return open_split(path, group, 1, err, errlen);
}

ddp_h5split *ddp_h5split_open_images(const char *path, const char *group, char *err, size_t errlen)
{
    return open_split(path, group, 0, err, errlen);
}

void ddp_h5split_close(ddp_h5split *s)
{
    if (!s)
        return;
    h5_quiet q;
    h5_quiet_on(&q);
    if (s->mspace >= 0)
        H5Sclose(s->mspace);
    if (s->fspace >= 0)
        H5Sclose(s->fspace);
    if (s->images >= 0)
        H5Dclose(s->images);
    if (s->file >= 0)
        H5Fclose(s->file);
    h5_quiet_off(&q);
    free(s->path);
    free(s->labels);
    free(s->cache);
    free(s->reqs);
    free(s->rows);
    ddp_class_names_free(s->class_names, s->nclass_names);
    free(s);
}

int64_t ddp_h5split_count(const ddp_h5split *s)
{
    return s->n;
}

int ddp_h5split_shape(const ddp_h5split *s, int64_t dims[3])
{
    for (int i = 0; i < 3; i++)
        dims[i] = i < s->rank ? s->dims[i] : 0;
    return s->rank;
}

const char *ddp_h5split_shape_text(const ddp_h5split *s, char *buf, size_t len)
{
    int64_t d[3];
    if (ddp_h5split_shape(s, d) == 1)
        snprintf(buf, len, "(%lld)", (long long)d[0]);
    else
        snprintf(buf, len, "(%lld, %lld, %lld)", (long long)d[0], (long long)d[1], (long long)d[2]);
    return buf;
}

int64_t ddp_h5split_sample_elems(const ddp_h5split *s)
{
    return s->elems;
}
enum ddp_h5dtype ddp_h5split_dtype(const ddp_h5split *s)
{
    return s->dtype;
}
int ddp_h5split_classes(const ddp_h5split *s)
{
    return s->classes;
}
const char *ddp_h5split_labels_type(const ddp_h5split *s)
{
    return s->labels_type;
}
const int32_t *ddp_h5split_labels(const ddp_h5split *s)
{
    return s->labels;
}

int ddp_h5split_check_labels(const ddp_h5split *s, int classes, char *err, size_t errlen)
{
    if (classes <= 0)
        return ddp_err(err, errlen, "%s: %s: number of classes %d must be > 0", s->path, s->group,
                       classes);
    for (int64_t i = 0; i < s->n; i++) {
        if (s->labels[i] < 0 || s->labels[i] >= classes)
            return ddp_err(err, errlen,
                           "%s: %s/labels: label %d at index %lld is outside "
                           "[0, %d); fix the labels or raise the model's number of classes",
                           s->path, s->group, (int)s->labels[i], (long long)i, classes);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Whole-file helpers                                                                    */

typedef struct {
    char **names;
    int count, cap;
} name_list;

/* H5Literate callback: collect the names of groups. */
static herr_t collect_group(hid_t loc, const char *name, const H5L_info_t *info, void *data)
{
    name_list *l = data;
    H5O_info_t oi;
    if (info->type != H5L_TYPE_HARD || H5Oget_info_by_name(loc, name, &oi, H5P_DEFAULT) < 0 ||
        oi.type != H5O_TYPE_GROUP)
        return 0;
    if (l->count == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 8;
        l->names = ddp_realloc(l->names, (size_t)l->cap * sizeof *l->names);
    }
    size_t len = strlen(name) + 2;
    l->names[l->count] = ddp_malloc(len);
    snprintf(l->names[l->count], len, "/%s", name);
    l->count++;
    return 0;
}

int ddp_h5data_groups(const char *path, char ***names, char *err, size_t errlen)
{
    h5_quiet q;
    h5_quiet_on(&q);
    name_list l = {0};
    *names = NULL;
    hid_t f = open_readonly(path, err, errlen);
    if (f < 0) {
        h5_quiet_off(&q);
        return -1;
    }
    hsize_t at = 0;
    if (H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, &at, collect_group, &l) < 0) {
        char why[256];
        ddp_err(err, errlen, "%s: cannot list its groups (%s); the file may be corrupt", path,
                h5_reason(why, sizeof why));
        ddp_h5data_free_names(l.names, l.count);
        H5Fclose(f);
        h5_quiet_off(&q);
        return -1;
    }
    H5Fclose(f);
    h5_quiet_off(&q);
    *names = l.names;
    return l.count;
}

void ddp_h5data_free_names(char **names, int count)
{
    if (!names)
        return;
    for (int i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

int ddp_h5data_source(const char *path, char *buf, size_t len, char *err, size_t errlen)
{
    h5_quiet q;
    h5_quiet_on(&q);
    int rc = -1;
    buf[0] = '\0';
    hid_t f = open_readonly(path, err, errlen);
    if (f >= 0) {
        char why[256];
        const int got = ddp_h5attr_read_str(f, "source", buf, len);
        if (got == -2)
            ddp_err(err, errlen, "%s: attribute `source` is not a string; write it as text", path);
        else if (got == -1)
            ddp_err(err, errlen, "%s: attribute `source`: read failed (%s)", path,
                    h5_reason(why, sizeof why));
        else
            rc = 0;
        H5Fclose(f);
    }
    h5_quiet_off(&q);
    return rc;
}

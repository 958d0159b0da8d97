/*
 * h5data.c - HDF5 dataset reader (validation, labels, cache, hyperslab row reads) and the
 * tmp-then-rename writer. See h5data.h for the layout and the contracts.
 *
 * Every public function silences HDF5's own error printing for its duration (the setting
 * is per thread in a thread-safe HDF5, so the prefetch thread needs it too) and reports
 * one line of its own, with HDF5's innermost message appended where it helps.
 *
 * Legend: N samples, D elements per sample (C*H*W for images), n samples per read.
 */
#include "data/h5data.h"

#include "core/fileio.h"
#include "core/util.h"

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

/* Largest single H5Dread when filling the cache: some POSIX read paths stop at 2 GiB. */
#define H5_CACHE_READ_BYTES ((size_t)256 << 20)
/* Labels are converted in pieces of this many values (bounded temporary memory). */
#define H5_LABEL_CHUNK ((int64_t)1 << 20)
/* Runs of rows per H5Dread on the HDF5 path: HDF5 1.10's union of hyperslabs costs
 * O(runs^2) to build (a 4096-run union: ~150 ms), so unions are kept this small. */
#define H5_UNION_RUNS 256
/* Longest `source` attribute read back; the rest is cut (it is a description). */
#define H5_MAX_SOURCE_LEN 4096

/* ------------------------------------------------------------------------------------ */
/* HDF5 error handling                                                                   */

typedef struct {
    H5E_auto2_t func;
    void *data;
} h5_quiet;

/* Turn off HDF5's stack printing for this thread; quiet_off restores it. */
static void quiet_on(h5_quiet *q)
{
    q->func = NULL;
    q->data = NULL;
    H5Eget_auto2(H5E_DEFAULT, &q->func, &q->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void quiet_off(const h5_quiet *q)
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
static const char *h5_reason(char *buf, size_t len)
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
static int group_path(const char *group, char *buf, size_t len)
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

/* One requested sample: which row, and where it goes in the output. */
typedef struct {
    int64_t row;
    int64_t pos;
} row_req;

struct ddp_h5split {
    char *path;
    char group[DDP_H5_MAX_GROUP_LEN + 2];
    hid_t file, images;
    hid_t fspace;     /* images file space, re-selected by each streamed read */
    hid_t mspace;     /* (cap_rows * D) memory space of the row buffer */
    int rank;         /* 1 for (N,D), 3 for (N,C,H,W) */
    int file_rank;    /* 2 or 4 */
    int64_t n;        /* N */
    int64_t dims[3];  /* D, or C,H,W */
    int64_t elems;    /* D */
    size_t row_bytes; /* D * sizeof(stored element) */
    int fd;           /* fast path: HDF5's own descriptor of the file, or -1 */
    int64_t offset;   /* fast path: file offset of row 0 (H5Dget_offset) */
    enum ddp_h5dtype dtype;
    int classes; /* `classes` attribute, 0 when absent */
    char labels_type[32];
    int32_t *labels; /* (N) */
    uint8_t *cache;  /* (N, D) as stored, or NULL */
    row_req *reqs;   /* (cap_reqs) scratch: requests sorted by row */
    int cap_reqs;
    uint8_t *rows; /* (cap_rows, D) scratch: distinct rows in file order */
    int cap_rows;
};

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
    if (H5Aexists(g, "classes") <= 0)
        return 0;
    hid_t a = H5Aopen(g, "classes", H5P_DEFAULT);
    if (a < 0)
        return 0;
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    long long v = 0;
    int ok = t >= 0 && sp >= 0 && H5Tget_class(t) == H5T_INTEGER &&
             H5Sget_simple_extent_npoints(sp) == 1 && H5Aread(a, H5T_NATIVE_LLONG, &v) >= 0;
    if (t >= 0)
        H5Tclose(t);
    if (sp >= 0)
        H5Sclose(sp);
    H5Aclose(a);
    if (!ok)
        return ddp_err(err, errlen,
                       "%s: %s attribute `classes` is not one integer; expected the "
                       "number of classes (1 to %d), or delete the attribute",
                       s->path, s->group, DDP_H5_MAX_CLASSES);
    if (v < 1 || v > DDP_H5_MAX_CLASSES)
        return ddp_err(err, errlen,
                       "%s: %s attribute `classes` is %lld; expected the number of "
                       "classes, 1 to %d (fix it, or delete the attribute)",
                       s->path, s->group, v, DDP_H5_MAX_CLASSES);
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

ddp_h5split *ddp_h5split_open(const char *path, const char *group, char *err, size_t errlen)
{
    h5_quiet q;
    quiet_on(&q);
    ddp_h5split *s = ddp_calloc(1, sizeof *s);
    hid_t g = H5I_INVALID_HID;
    s->file = s->images = s->fspace = s->mspace = H5I_INVALID_HID;
    s->fd = -1;
    s->path = ddp_strdup(path ? path : "");

    if (!path || !path[0]) {
        ddp_err(err, errlen, "no dataset file given; set [data] file to an HDF5 dataset");
        goto fail;
    }
    if (group_path(group, s->group, sizeof s->group) != 0) {
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

    if (open_images(s, g, path, err, errlen) != 0 || open_labels(s, g, path, err, errlen) != 0)
        goto fail;
    H5Gclose(g);
    quiet_off(&q);
    return s;
fail:
    if (g >= 0)
        H5Gclose(g);
    ddp_h5split_close(s);
    quiet_off(&q);
    return NULL;
}

void ddp_h5split_close(ddp_h5split *s)
{
    if (!s)
        return;
    h5_quiet q;
    quiet_on(&q);
    if (s->mspace >= 0)
        H5Sclose(s->mspace);
    if (s->fspace >= 0)
        H5Sclose(s->fspace);
    if (s->images >= 0)
        H5Dclose(s->images);
    if (s->file >= 0)
        H5Fclose(s->file);
    quiet_off(&q);
    free(s->path);
    free(s->labels);
    free(s->cache);
    free(s->reqs);
    free(s->rows);
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
    quiet_on(&q);
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
            quiet_off(&q);
            return -1;
        }
        H5Sclose(msp);
        if (check_rows_finite(s, buf + (size_t)at * s->row_bytes, at, k, err, errlen) != 0) {
            free(buf);
            quiet_off(&q);
            return -1;
        }
    }
    quiet_off(&q);
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
    quiet_on(&q);
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
    quiet_off(&q);
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
    quiet_on(&q);
    name_list l = {0};
    *names = NULL;
    hid_t f = open_readonly(path, err, errlen);
    if (f < 0) {
        quiet_off(&q);
        return -1;
    }
    hsize_t at = 0;
    if (H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, &at, collect_group, &l) < 0) {
        char why[256];
        ddp_err(err, errlen, "%s: cannot list its groups (%s); the file may be corrupt", path,
                h5_reason(why, sizeof why));
        ddp_h5data_free_names(l.names, l.count);
        H5Fclose(f);
        quiet_off(&q);
        return -1;
    }
    H5Fclose(f);
    quiet_off(&q);
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
    quiet_on(&q);
    int rc = -1;
    hid_t a = H5I_INVALID_HID, t = H5I_INVALID_HID, mt = H5I_INVALID_HID;
    buf[0] = '\0';
    hid_t f = open_readonly(path, err, errlen);
    if (f < 0)
        goto fail;
    if (H5Aexists(f, "source") <= 0) {
        rc = 0;
        goto fail;
    }
    a = H5Aopen(f, "source", H5P_DEFAULT);
    t = a >= 0 ? H5Aget_type(a) : H5I_INVALID_HID;
    if (t < 0 || H5Tget_class(t) != H5T_STRING) {
        ddp_err(err, errlen, "%s: attribute `source` is not a string; write it as text", path);
        goto fail;
    }
    mt = H5Tcopy(H5T_C_S1);
    H5Tset_cset(mt, H5Tget_cset(t)); /* HDF5 will not convert between ASCII and UTF-8 */
    if (H5Tis_variable_str(t) > 0) {
        char *v = NULL;
        H5Tset_size(mt, H5T_VARIABLE);
        if (H5Aread(a, mt, &v) < 0)
            goto h5fail;
        snprintf(buf, len, "%s", v ? v : "");
        H5free_memory(v);
    } else {
        size_t sz = H5Tget_size(t);
        if (sz > H5_MAX_SOURCE_LEN)
            sz = H5_MAX_SOURCE_LEN;
        char *v = ddp_calloc(1, sz + 1);
        H5Tset_size(mt, sz + 1);
        if (H5Aread(a, mt, v) < 0) {
            free(v);
            goto h5fail;
        }
        snprintf(buf, len, "%s", v);
        free(v);
    }
    rc = 0;
    goto fail;
h5fail : {
    char why[256];
    ddp_err(err, errlen, "%s: attribute `source`: read failed (%s)", path,
            h5_reason(why, sizeof why));
}
fail:
    if (mt >= 0)
        H5Tclose(mt);
    if (t >= 0)
        H5Tclose(t);
    if (a >= 0)
        H5Aclose(a);
    if (f >= 0)
        H5Fclose(f);
    quiet_off(&q);
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Writer                                                                                */

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

/* Write a scalar int attribute. */
static herr_t write_int_attr(hid_t loc, const char *name, int v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = sp >= 0 ? H5Acreate2(loc, name, H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT) : -1;
    herr_t r = a >= 0 ? H5Awrite(a, H5T_NATIVE_INT, &v) : -1;
    if (a >= 0)
        H5Aclose(a);
    if (sp >= 0)
        H5Sclose(sp);
    return r;
}

/* Write a variable-length UTF-8 string attribute (h5py reads it as str). */
static herr_t write_str_attr(hid_t loc, const char *name, const char *v)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(loc, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = a >= 0 ? H5Awrite(a, t, &v) : -1;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    return r;
}

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
    quiet_on(&q);
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
    if (write_str_attr(w->file, "source", source ? source : "") < 0) {
        char why[256];
        ddp_err(err, errlen, "%s: cannot write attribute `source` (%s)", w->tmp,
                h5_reason(why, sizeof why));
        goto fail;
    }
    quiet_off(&q);
    return w;
fail:
    quiet_off(&q);
    ddp_h5writer_destroy(w);
    return NULL;
}

int ddp_h5writer_begin(ddp_h5writer *w, const char *group, int64_t count, int rank,
                       const int64_t dims[3], enum ddp_h5dtype dtype, int classes, char *err,
                       size_t errlen)
{
    h5_quiet q;
    quiet_on(&q);
    hid_t sp = H5I_INVALID_HID, dcpl = H5I_INVALID_HID, ft = H5I_INVALID_HID;
    char gp[DDP_H5_MAX_GROUP_LEN + 2];
    if (w->g >= 0) {
        ddp_err(err, errlen, "%s: group %s still open; end it before starting %s", w->tmp, w->group,
                group);
        goto fail;
    }
    if (group_path(group, gp, sizeof gp) != 0) {
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
    if (w->g < 0 || write_int_attr(w->g, "classes", classes) < 0)
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
    quiet_off(&q);
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
    quiet_off(&q);
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
    quiet_on(&q);
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
    quiet_off(&q);
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
    quiet_on(&q);
    close_group(w);
    quiet_off(&q);
    return 0;
}

int ddp_h5writer_commit(ddp_h5writer *w, char *err, size_t errlen)
{
    if (w->g >= 0)
        return ddp_err(err, errlen, "%s: group %s not ended", w->tmp, w->group);
    h5_quiet q;
    quiet_on(&q);
    herr_t r = H5Fclose(w->file);
    w->file = H5I_INVALID_HID;
    quiet_off(&q);
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
    quiet_on(&q);
    close_group(w);
    if (w->file >= 0)
        H5Fclose(w->file);
    quiet_off(&q);
    if (!w->committed)
        unlink(w->tmp);
    free(w->lbuf);
    free(w->path);
    free(w->tmp);
    free(w);
}

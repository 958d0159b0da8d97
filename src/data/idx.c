/*
 * idx.c - sequential IDX reader over zlib (gzip or raw) and the IDX -> HDF5 import.
 * See idx.h. Header first, bounds before allocation, one error line per failure.
 *
 * Legend: N records, H rows, W columns, C channels.
 */
#include "data/idx.h"

#include "data/h5data.h"
#include "core/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

/* Largest single gzread: its length is an unsigned int and its result an int. */
#define IDX_READ_PIECE ((int64_t)1 << 30)
#define IDX_TYPE_UBYTE 0x08

struct ddp_idx {
    char *path;
    gzFile gz;
    int ndims;
    int64_t dims[DDP_IDX_MAX_DIMS];
    int64_t record_bytes;
    int64_t next; /* records read so far */
};

/* Name of an IDX element type byte. */
static const char *idx_type_name(int t)
{
    switch (t) {
    case 0x08:
        return "unsigned byte";
    case 0x09:
        return "signed byte";
    case 0x0B:
        return "int16";
    case 0x0C:
        return "int32";
    case 0x0D:
        return "float32";
    case 0x0E:
        return "float64";
    default:
        return "unknown";
    }
}

/* Read exactly len bytes; returns bytes read (< len at end of data) or -1 on a zlib error. */
static int64_t gz_read_full(gzFile gz, void *buf, int64_t len)
{
    int64_t got = 0;
    while (got < len) {
        int64_t want = len - got < IDX_READ_PIECE ? len - got : IDX_READ_PIECE;
        int r = gzread(gz, (char *)buf + got, (unsigned)want);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += r;
    }
    return got;
}

/* zlib's description of the stream's last error ("" when none), without the path that
 * zlib puts in front (our messages name the file already). */
static const char *gz_reason(gzFile gz, const char *path)
{
    int code = Z_OK;
    const char *m = gzerror(gz, &code);
    if (code == Z_ERRNO)
        return strerror(errno);
    if (!m)
        return "";
    size_t n = strlen(path);
    if (strncmp(m, path, n) == 0 && m[n] == ':' && m[n + 1] == ' ')
        m += n + 2;
    return m;
}

/* 1 when the stream's error is corrupt compressed data (not a plain end of data). */
static int gz_corrupt(gzFile gz)
{
    int code = Z_OK;
    gzerror(gz, &code);
    return code == Z_DATA_ERROR || code == Z_STREAM_ERROR || code == Z_MEM_ERROR;
}

/* The header's sizes after the magic: f->dims and f->record_bytes, each bounded. */
static int read_dims(ddp_idx *f, char *err, size_t errlen)
{
    const char *path = f->path;
    int64_t got;
    uint8_t hd[4 * DDP_IDX_MAX_DIMS];
    got = gz_read_full(f->gz, hd, 4 * f->ndims);
    if (got < 0 || got < 4 * f->ndims) {
        ddp_err(err, errlen,
                "%s: truncated or corrupt header (%d sizes expected%s%s); download "
                "the file again",
                path, f->ndims, got < 0 ? ", zlib: " : "",
                got < 0 ? gz_reason(f->gz, f->path) : "");
        return -1;
    }
    f->record_bytes = 1;
    for (int i = 0; i < f->ndims; i++) {
        const uint8_t *b = hd + 4 * i;
        f->dims[i] =
            (int64_t)((uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]);
        if (f->dims[i] == 0) {
            ddp_err(err, errlen,
                    "%s: dimension %d is 0; an IDX file must hold at least one "
                    "record of at least one byte",
                    path, i);
            return -1;
        }
        if (i == 0 && f->dims[0] > DDP_IDX_MAX_RECORDS) {
            ddp_err(err, errlen, "%s: header declares %lld records; at most %lld are supported",
                    path, (long long)f->dims[0], (long long)DDP_IDX_MAX_RECORDS);
            return -1;
        }
        if (i > 0) {
            if (f->dims[i] > DDP_IDX_MAX_RECORD_BYTES ||
                (f->record_bytes *= f->dims[i]) > DDP_IDX_MAX_RECORD_BYTES) {
                ddp_err(err, errlen,
                        "%s: header declares records of more than %lld bytes; "
                        "not an MNIST-style file?",
                        path, (long long)DDP_IDX_MAX_RECORD_BYTES);
                return -1;
            }
        }
    }
    return 0;
}

ddp_idx *ddp_idx_open(const char *path, char *err, size_t errlen)
{
    ddp_idx *f = ddp_calloc(1, sizeof *f);
    f->path = ddp_strdup(path);
    struct stat st;
    if (stat(path, &st) != 0) {
        ddp_err(err, errlen,
                "%s: cannot open: %s; give an IDX file such as "
                "train-images-idx3-ubyte.gz",
                path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        ddp_err(err, errlen, "%s: not a regular file; give an IDX file", path);
        goto fail;
    }
    f->gz = gzopen(path, "rb");
    if (!f->gz) {
        ddp_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    uint8_t magic[4];
    int64_t got = gz_read_full(f->gz, magic, 4);
    if (got < 0) {
        ddp_err(err, errlen, "%s: corrupt gzip data (zlib: %s); download the file again", path,
                gz_reason(f->gz, f->path));
        goto fail;
    }
    if (got < 4) {
        ddp_err(err, errlen,
                "%s: truncated: %lld bytes, shorter than the 4-byte IDX magic; "
                "download the file again",
                path, (long long)got);
        goto fail;
    }
    uint32_t m =
        (uint32_t)magic[0] << 24 | (uint32_t)magic[1] << 16 | (uint32_t)magic[2] << 8 | magic[3];
    if (magic[0] != 0 || magic[1] != 0) {
        ddp_err(err, errlen,
                "%s: bad magic 0x%08x; expected an IDX file (0x00000803 images, "
                "0x00000801 labels), raw or gzip",
                path, (unsigned)m);
        goto fail;
    }
    if (magic[2] != IDX_TYPE_UBYTE) {
        ddp_err(err, errlen,
                "%s: IDX element type 0x%02x (%s) in magic 0x%08x; only unsigned "
                "byte (0x08) files are supported",
                path, magic[2], idx_type_name(magic[2]), (unsigned)m);
        goto fail;
    }
    f->ndims = magic[3];
    if (f->ndims < 1 || f->ndims > DDP_IDX_MAX_DIMS) {
        ddp_err(err, errlen,
                "%s: magic 0x%08x declares %d dimensions; expected 1 (labels) to "
                "%d (images)",
                path, (unsigned)m, f->ndims, DDP_IDX_MAX_DIMS);
        goto fail;
    }
    if (read_dims(f, err, errlen) != 0)
        goto fail;
    if (gzdirect(f->gz)) { /* raw: the size is known now, check it before any data read */
        int64_t want = 4 + 4 * (int64_t)f->ndims + f->dims[0] * f->record_bytes;
        int64_t have = (int64_t)st.st_size;
        if (have < want) {
            ddp_err(err, errlen,
                    "%s: truncated: %lld bytes but the header promises %lld "
                    "(%lld records of %lld bytes); download the file again",
                    path, (long long)have, (long long)want, (long long)f->dims[0],
                    (long long)f->record_bytes);
            goto fail;
        }
        if (have > want) {
            ddp_err(err, errlen,
                    "%s: %lld bytes of trailing data after %lld records; the "
                    "header's count is wrong or the file is corrupt",
                    path, (long long)(have - want), (long long)f->dims[0]);
            goto fail;
        }
    }
    return f;
fail:
    ddp_idx_close(f);
    return NULL;
}

void ddp_idx_close(ddp_idx *f)
{
    if (!f)
        return;
    if (f->gz)
        gzclose(f->gz);
    free(f->path);
    free(f);
}

int ddp_idx_shape(const ddp_idx *f, int64_t dims[DDP_IDX_MAX_DIMS])
{
    for (int i = 0; i < DDP_IDX_MAX_DIMS; i++)
        dims[i] = i < f->ndims ? f->dims[i] : 0;
    return f->ndims;
}

int64_t ddp_idx_count(const ddp_idx *f)
{
    return f->dims[0];
}
int64_t ddp_idx_record_bytes(const ddp_idx *f)
{
    return f->record_bytes;
}
const char *ddp_idx_path(const ddp_idx *f)
{
    return f->path;
}

int ddp_idx_read(ddp_idx *f, uint8_t *out, int64_t n, char *err, size_t errlen)
{
    if (n < 0 || n > f->dims[0] - f->next)
        return ddp_err(err, errlen, "%s: read of %lld records past record %lld of %lld", f->path,
                       (long long)n, (long long)f->next, (long long)f->dims[0]);
    int64_t want = n * f->record_bytes;
    int64_t got = gz_read_full(f->gz, out, want);
    if (got < 0 || (got < want && gz_corrupt(f->gz)))
        return ddp_err(err, errlen,
                       "%s: corrupt gzip data near record %lld (zlib: %s); "
                       "download the file again",
                       f->path, (long long)f->next, gz_reason(f->gz, f->path));
    if (got < want)
        return ddp_err(err, errlen,
                       "%s: truncated: holds %lld of the %lld records its header "
                       "declares; download the file again",
                       f->path, (long long)(f->next + got / f->record_bytes),
                       (long long)f->dims[0]);
    f->next += n;
    if (f->next == f->dims[0] && n > 0) {
        /* Past the last record: must be the end, and gzip checks its CRC here. */
        uint8_t extra;
        int r = gzread(f->gz, &extra, 1);
        if (r < 0 || gz_corrupt(f->gz))
            return ddp_err(err, errlen,
                           "%s: corrupt gzip data at the end (zlib: %s); download "
                           "the file again",
                           f->path, gz_reason(f->gz, f->path));
        if (r > 0)
            return ddp_err(err, errlen,
                           "%s: trailing data after %lld records; the header's "
                           "count is wrong or the file is corrupt",
                           f->path, (long long)f->dims[0]);
    }
    return 0;
}

/* "dir/name" or "dir/name.gz" into out, whichever exists (raw first); -1 if neither. */
static int find_one(const char *dir, const char *name, char *out, size_t len)
{
    static const char *const suffix[] = {"", ".gz"};
    struct stat st;
    for (int i = 0; i < 2; i++) {
        int k = snprintf(out, len, "%s/%s%s", dir, name, suffix[i]);
        if (k > 0 && (size_t)k < len && stat(out, &st) == 0 && S_ISREG(st.st_mode))
            return 0;
    }
    return -1;
}

int ddp_idx_find(const char *dir, ddp_idx_files *files, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return ddp_err(err, errlen,
                       "%s: cannot open: %s; give the directory holding the four "
                       "IDX files",
                       dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return ddp_err(err, errlen,
                       "%s: not a directory; give the directory holding the four "
                       "IDX files",
                       dir);
    struct {
        const char *name;
        char *out;
    } want[4] = {{"train-images-idx3-ubyte", files->train_images},
                 {"train-labels-idx1-ubyte", files->train_labels},
                 {"t10k-images-idx3-ubyte", files->test_images},
                 {"t10k-labels-idx1-ubyte", files->test_labels}};
    for (int i = 0; i < 4; i++)
        if (find_one(dir, want[i].name, want[i].out, DDP_IDX_MAX_PATH) != 0)
            return ddp_err(err, errlen,
                           "%s: no %s[.gz]; the directory must hold "
                           "train-images-idx3-ubyte, train-labels-idx1-ubyte, "
                           "t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (raw or .gz)",
                           dir, want[i].name);
    return 0;
}

/* "28x28": the record shape of f (sizes after the count). */
static void shape_text(const ddp_idx *f, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 1; i < f->ndims && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i > 1 ? "x" : "", (long long)f->dims[i]);
}

/* Check an images file's dimension count and map its shape to the HDF5 sample shape. */
static int image_shape(const ddp_idx *f, int *rank, int64_t dims[3], char *err, size_t errlen)
{
    int64_t d[DDP_IDX_MAX_DIMS];
    int nd = ddp_idx_shape(f, d);
    if (nd == 2) {
        *rank = 1;
        dims[0] = d[1];
    } else if (nd == 3) {
        *rank = 3;
        dims[0] = 1;
        dims[1] = d[1];
        dims[2] = d[2];
    } else if (nd == 4) {
        *rank = 3;
        dims[0] = d[1];
        dims[1] = d[2];
        dims[2] = d[3];
    } else {
        return ddp_err(err, errlen,
                       "%s: an images file was expected (magic 0x00000803, "
                       "(N, rows, cols)) but the header has %d dimension%s (a labels file?); "
                       "check the order of the files",
                       f->path, nd, nd == 1 ? "" : "s");
    }
    return 0;
}

/* Check a labels file's dimension count and that it matches its images file's count. */
static int check_label_file(const ddp_idx *lab, const ddp_idx *img, char *err, size_t errlen)
{
    int64_t d[DDP_IDX_MAX_DIMS];
    int nd = ddp_idx_shape(lab, d);
    if (nd != 1)
        return ddp_err(err, errlen,
                       "%s: a labels file was expected (magic 0x00000801, (N)) "
                       "but the header has %d dimensions (an images file?); check the order "
                       "of the files",
                       ddp_idx_path(lab), nd);
    if (d[0] != ddp_idx_count(img))
        return ddp_err(err, errlen,
                       "%s: %lld labels but %s holds %lld images; the two files "
                       "must come from the same set",
                       ddp_idx_path(lab), (long long)d[0], ddp_idx_path(img),
                       (long long)ddp_idx_count(img));
    return 0;
}

/* Write one split: images streamed from img in chunks, labels from memory. Returns 0, -1 when
 * img cannot be read, -2 when the output cannot be written. */
static int write_split(ddp_h5writer *w, const char *group, ddp_idx *img, const uint8_t *labels,
                       int rank, const int64_t dims[3], int classes, char *const *names, char *err,
                       size_t errlen)
{
    int64_t n = ddp_idx_count(img), rb = ddp_idx_record_bytes(img);
    int64_t per = (int64_t)DDP_IDX_CHUNK_BYTES / rb;
    if (per < 1)
        per = 1;
    if (per > n)
        per = n;
    uint8_t *buf = ddp_malloc((size_t)(per * rb));
    int32_t *lab = ddp_malloc((size_t)per * sizeof *lab);
    int rc = -2;
    if (ddp_h5writer_begin(w, group, n, rank, dims, DDP_H5DTYPE_UINT8, classes, err, errlen) != 0 ||
        (names && ddp_h5writer_class_names(w, names, classes, err, errlen) != 0))
        goto fail;
    for (int64_t at = 0; at < n; at += per) {
        int64_t k = n - at < per ? n - at : per;
        if (ddp_idx_read(img, buf, k, err, errlen) != 0) {
            rc = -1;
            goto fail;
        }
        for (int64_t i = 0; i < k; i++)
            lab[i] = labels[at + i];
        if (ddp_h5writer_append(w, buf, lab, k, err, errlen) != 0)
            goto fail;
    }
    rc = ddp_h5writer_end(w, err, errlen) != 0 ? -2 : 0;
fail:
    free(buf);
    free(lab);
    return rc;
}

/* Smallest and largest label of each split into s; *classes the largest + 1 when 0, else
 * every label must lie below it; named (names given): the largest + 1 must be *classes.
 * Returns 0, -1 with err, or DDP_IDX_BAD_NAMES with err. */
static int label_range(const ddp_idx_files *files, const uint8_t *tlab, const uint8_t *vlab,
                       ddp_idx_summary *s, int *classes, int named, char *err, size_t errlen)
{
    int maxl = 0;
    for (int k = 0; k < 2; k++) {
        const uint8_t *l = k ? vlab : tlab;
        int64_t n = k ? s->n_test : s->n_train;
        s->label_min[k] = 255;
        s->label_max[k] = 0;
        for (int64_t i = 0; i < n; i++) {
            if (l[i] < s->label_min[k])
                s->label_min[k] = l[i];
            if (l[i] > s->label_max[k])
                s->label_max[k] = l[i];
        }
        if (s->label_max[k] > maxl)
            maxl = s->label_max[k];
    }
    if (*classes > 0 && !named) {
        for (int k = 0; k < 2; k++) {
            const uint8_t *l = k ? vlab : tlab;
            int64_t n = k ? s->n_test : s->n_train;
            for (int64_t i = 0; i < n; i++)
                if (l[i] >= *classes) {
                    ddp_err(err, errlen,
                            "%s: label %d at index %lld is not below --classes %d; "
                            "raise --classes or leave it out (largest label + 1)",
                            k ? files->test_labels : files->train_labels, l[i], (long long)i,
                            *classes);
                    return -1;
                }
        }
    } else if (!named) {
        *classes = maxl + 1;
    }
    if (named && maxl + 1 != *classes) {
        ddp_err(err, errlen,
                "--classes names %d classes, but the labels of %s and %s hold %d (0..%d); give "
                "one name per class, in label order",
                *classes, files->train_labels, files->test_labels, maxl + 1, maxl);
        return DDP_IDX_BAD_NAMES;
    }
    return 0;
}

int ddp_idx_import(const ddp_idx_files *files, const char *out_path, int classes,
                   const char *source, ddp_idx_summary *sum, char *err, size_t errlen)
{
    return ddp_idx_import_names(files, out_path, classes, NULL, source, sum, err, errlen);
}

int ddp_idx_import_names(const ddp_idx_files *files, const char *out_path, int classes,
                         char *const *names, const char *source, ddp_idx_summary *sum, char *err,
                         size_t errlen)
{
    ddp_idx *ti = NULL, *tl = NULL, *vi = NULL, *vl = NULL;
    uint8_t *tlab = NULL, *vlab = NULL;
    ddp_h5writer *w = NULL;
    int rc = -1;
    int rank = 0, vrank = 0;
    int64_t dims[3] = {0}, vdims[3] = {0};
    ddp_idx_summary s = {0};

    /* All four headers first: a wrong file fails before any data is read. */
    if (!(ti = ddp_idx_open(files->train_images, err, errlen)) ||
        !(tl = ddp_idx_open(files->train_labels, err, errlen)) ||
        !(vi = ddp_idx_open(files->test_images, err, errlen)) ||
        !(vl = ddp_idx_open(files->test_labels, err, errlen)))
        goto fail;
    if (image_shape(ti, &rank, dims, err, errlen) != 0 ||
        image_shape(vi, &vrank, vdims, err, errlen) != 0 ||
        check_label_file(tl, ti, err, errlen) != 0 || check_label_file(vl, vi, err, errlen) != 0)
        goto fail;
    if (rank != vrank || memcmp(dims, vdims, sizeof dims) != 0) {
        char a[64], b[64];
        shape_text(vi, a, sizeof a);
        shape_text(ti, b, sizeof b);
        ddp_err(err, errlen,
                "%s: sample shape %s differs from %s in %s; train and test must "
                "come from the same set",
                files->test_images, a, b, files->train_images);
        goto fail;
    }

    s.n_train = ddp_idx_count(ti);
    s.n_test = ddp_idx_count(vi);
    tlab = ddp_malloc((size_t)s.n_train);
    vlab = ddp_malloc((size_t)s.n_test);
    if (ddp_idx_read(tl, tlab, s.n_train, err, errlen) != 0 ||
        ddp_idx_read(vl, vlab, s.n_test, err, errlen) != 0)
        goto fail;
    int lr = label_range(files, tlab, vlab, &s, &classes, names != NULL, err, errlen);
    if (lr != 0) {
        rc = lr;
        goto fail;
    }
    s.classes = classes;
    s.rank = rank;
    memcpy(s.dims, dims, sizeof dims);

    rc = -2; /* from here on, a failure is the output's unless write_split says otherwise */
    w = ddp_h5writer_create(out_path, source, err, errlen);
    if (!w)
        goto fail;
    int ws = write_split(w, "/train", ti, tlab, rank, dims, classes, names, err, errlen);
    if (!ws)
        ws = write_split(w, "/test", vi, vlab, rank, dims, classes, names, err, errlen);
    if (ws) {
        rc = ws;
        goto fail;
    }
    if (ddp_h5writer_commit(w, err, errlen) != 0)
        goto fail;
    if (sum)
        *sum = s;
    rc = 0;
fail:
    ddp_h5writer_destroy(w);
    free(tlab);
    free(vlab);
    ddp_idx_close(ti);
    ddp_idx_close(tl);
    ddp_idx_close(vi);
    ddp_idx_close(vl);
    return rc;
}

/*
 * import.h - the importers of `ddptrain data npy|npz|csv|imagefolder`: read a dataset in
 * another format, streaming, and write the HDF5 layout of h5data.h (docs/data.md).
 *
 * Every importer checks its inputs' headers (shapes, types, sizes against the files'
 * lengths; for images, the folder tree and the first image) before writing anything, holds the labels in memory (int32, 4 bytes a sample)
 * and streams the samples in pieces of DDP_IMPORT_CHUNK_BYTES through ddp_h5writer, so a
 * source larger than memory imports and OUT appears (renamed from OUT.tmp) only when
 * complete. Errors are one line in err naming the file (and line or member), what was
 * expected and the fix; the caller maps them to exit 3. Nothing prints or exits.
 *
 * Legend: N samples, C channels, H rows, W columns, D features (C*H*W for images).
 */
#ifndef DDP_IMPORT_H
#define DDP_IMPORT_H

#include "data/h5data.h"

#include <stddef.h>
#include <stdint.h>

/* Samples are read and written in pieces of about this size. */
#define DDP_IMPORT_CHUNK_BYTES ((size_t)16 << 20)

/* Where the rows of one split come from: read the next n samples (in order) into buf. */
typedef int (*ddp_import_rows_fn)(void *ctx, void *buf, int64_t n, char *err, size_t errlen);

/* One split to write. */
typedef struct {
    const char *group;       /* "/train" */
    const char *images_name; /* file named in messages about samples */
    const char *labels_name; /* file named in messages about labels */
    int64_t n;
    int rank; /* 1: (N, D); 3: (N, C, H, W) */
    int64_t dims[3];
    enum ddp_h5dtype dtype;
    const int32_t *labels; /* (N,), each >= 0 */
    ddp_import_rows_fn read;
    void *ctx;
} ddp_import_split;

/* What was written, for the summary line. */
typedef struct {
    int nsplits;
    int classes;
    int64_t n[2];
    int rank; /* sample shape, as in ddp_import_split */
    int64_t dims[3];
    enum ddp_h5dtype dtype;
    int32_t label_min[2], label_max[2];
} ddp_import_summary;

/* What every importer is asked besides its inputs. */
typedef struct {
    const char *out;    /* OUT.h5 */
    const char *source; /* the file attribute `source` */
    int classes;        /* 0: the largest label + 1 */
    char **names;       /* NULL, or nnames class names (index = label): nnames is the classes */
    int nnames;
    double test_fraction; /* [0, 1): /test holds out the last round(F n_c) rows of each class
                           * c (n_c its rows, in file order); 0: none. Not with a test input. */
} ddp_import_opts;

/* Return of the importers for names that do not match the labels: a usage error. */
#define DDP_IMPORT_BAD_NAMES (-3)

/* Write splits[0..nsplits) (1 or 2, same sample shape and dtype) to o->out. o->classes 0: the
 * largest label + 1; else every label must lie below it. With o->names the labels' classes
 * (largest + 1) must be o->nnames, else DDP_IMPORT_BAD_NAMES with err naming --classes.
 * float32 samples must be finite. Returns 0, -1 with err for a bad input, -2 when out cannot
 * be written (a full disk); no out.tmp is left. */
int ddp_import_write(const ddp_import_opts *o, const ddp_import_split *splits, int nsplits,
                     ddp_import_summary *sum, char *err, size_t errlen);

/* The same for one source split `all` held out by o->test_fraction (> 0) into /train and
 * /test: all->read reads the rows for /train, again(ctx_again) reads the same rows from the
 * start for /test; each keeps its split's rows, reads the source to its end (so a member's
 * CRC-32 is checked) and never holds more than a piece. Both readers are the caller's. */
int ddp_import_write_held_out(const ddp_import_opts *o, const ddp_import_split *all,
                              ddp_import_rows_fn again, void *ctx_again, ddp_import_summary *sum,
                              char *err, size_t errlen);

/* NumPy: images and labels .npy files for /train and, when test_images is not NULL, /test.
 * Images uint8 or float32 of shape (N, H, W), (N, C, H, W) or (N, D); labels an integer
 * (or bool) array of shape (N,) or (N, 1). */
int ddp_import_npy(const char *images, const char *labels, const char *test_images,
                   const char *test_labels, const ddp_import_opts *o, ddp_import_summary *sum,
                   char *err, size_t errlen);
/* The same from an .npz: arrays keys[0], keys[1] (train) and keys[2], keys[3] (test, used
 * when the archive holds keys[2]; required when need_test). */
int ddp_import_npz(const char *path, const char *const keys[4], int need_test,
                   const ddp_import_opts *o, ddp_import_summary *sum, char *err, size_t errlen);

/* CSV: one sample a line, numeric feature columns (float32) and one integer label column
 * (`label_column`: a header name, or a 0-based index). A first line with a cell that is
 * not a number is the header. /train from `train`, /test from `test` (may be NULL). */
int ddp_import_csv(const char *train, const char *test, const char *label_column,
                   const ddp_import_opts *o, ddp_import_summary *sum, char *err, size_t errlen);

/* ImageFolder: DIR/train/<class>/<image> (and DIR/test/<class>/... when present), or one
 * tree DIR/<class>/<image> whose last test_fraction of each class's files (in name order)
 * becomes /test. Classes are the folder names sorted bytewise, numbered from 0; the folder
 * names are written as `class_names`. */
typedef struct {
    const char *dir;
    double test_fraction;   /* one tree only; 0: no /test */
    int channels;           /* 1 or 3; 0: from the first image (greyscale file: 1, else 3) */
    int resize_h, resize_w; /* 0: every image must have the first one's size */
} ddp_imagefolder_spec;
int ddp_import_imagefolder(const ddp_imagefolder_spec *spec, const ddp_import_opts *o,
                           ddp_import_summary *sum, char *err, size_t errlen);

#endif

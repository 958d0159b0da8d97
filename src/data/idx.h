/*
 * idx.h - reader for IDX files (the MNIST / Fashion-MNIST / EMNIST distribution format),
 * gzip-compressed or raw, and their import into the HDF5 layout of h5data.h.
 *
 * IDX: a 4-byte magic 0x00 0x00 TYPE NDIMS, NDIMS big-endian uint32 sizes, then the
 * records (dims[0] of them, each the product of the other sizes) in row-major order.
 * Images are magic 0x00000803 (N, H, W), labels 0x00000801 (N). Only TYPE 0x08 (unsigned
 * byte) is supported: it is what every MNIST-style set uses; other types are rejected by
 * name. zlib's gzopen reads both .gz and raw files, so the caller need not know which.
 *
 * The reader is sequential: open validates the header (magic, type, dimension count and
 * sizes against the named bounds, and for raw files the file size) before anything is
 * allocated; read returns the next records and reports truncation, corrupt gzip data and
 * trailing bytes. It does not seek or memory-map. Errors are one line in the caller's
 * `err` buffer naming the file, what was expected and the fix; nothing prints or exits.
 *
 * Import streams images in chunks (memory bounded by DDP_IDX_CHUNK_BYTES plus the labels)
 * and writes through ddp_h5writer, so OUT appears only when complete.
 */
#ifndef DDP_IDX_H
#define DDP_IDX_H

#include <stddef.h>
#include <stdint.h>

/* IDX allows up to 255 dimensions; MNIST-style files use 1 (labels) to 3 (images), and 4
 * covers (N, C, H, W). More is rejected rather than guessed at. */
#define DDP_IDX_MAX_DIMS 4
/* Records per file: labels are held in memory (1 byte each); EMNIST has 814k. */
#define DDP_IDX_MAX_RECORDS ((int64_t)1 << 28)
/* One record (image) at most 64 MiB: 4096 x 4096 x 4 bytes, far above any IDX set. */
#define DDP_IDX_MAX_RECORD_BYTES ((int64_t)1 << 26)
/* Import reads and writes images in pieces of about this size. */
#define DDP_IDX_CHUNK_BYTES ((size_t)16 << 20)
/* Longest path the importer builds from --dir. */
#define DDP_IDX_MAX_PATH 4096

typedef struct ddp_idx ddp_idx; /* one open IDX file */

/* Open and validate the header of an IDX file (.gz or raw). NULL with err on failure:
 * missing file, bad magic, element type other than unsigned byte, 0 or more than
 * DDP_IDX_MAX_DIMS dimensions, a size of 0 or beyond the bounds above, or (raw files) a
 * file size that does not match the header. */
ddp_idx *ddp_idx_open(const char *path, char *err, size_t errlen);
void ddp_idx_close(ddp_idx *f); /* accepts NULL */

/* dims[0..ndims) with dims[0] = number of records; returns ndims. */
int ddp_idx_shape(const ddp_idx *f, int64_t dims[DDP_IDX_MAX_DIMS]);
int64_t ddp_idx_count(const ddp_idx *f);        /* dims[0] */
int64_t ddp_idx_record_bytes(const ddp_idx *f); /* product of dims[1..] (1 for labels) */
const char *ddp_idx_path(const ddp_idx *f);

/* Read the next n records into out (n * record_bytes). Reading the last record also checks
 * that the file ends there (and, for gzip, that its checksum holds). Returns 0, or -1 with
 * err on truncation, corrupt gzip data, trailing data or reading past the last record. */
int ddp_idx_read(ddp_idx *f, uint8_t *out, int64_t n, char *err, size_t errlen);

/* The four files of an MNIST-style set. */
typedef struct ddp_idx_files {
    char train_images[DDP_IDX_MAX_PATH];
    char train_labels[DDP_IDX_MAX_PATH];
    char test_images[DDP_IDX_MAX_PATH];
    char test_labels[DDP_IDX_MAX_PATH];
} ddp_idx_files;

/* Find train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
 * t10k-labels-idx1-ubyte in dir, each raw or with .gz (raw preferred when both exist).
 * Returns 0, or -1 with err naming the first one missing. */
int ddp_idx_find(const char *dir, ddp_idx_files *files, char *err, size_t errlen);

/* What an import wrote (for the caller's report). */
typedef struct ddp_idx_summary {
    int64_t n_train, n_test;
    int rank;        /* 1: (N, D); 3: (N, C, H, W) */
    int64_t dims[3]; /* D, or C, H, W */
    int classes;
    int label_min[2], label_max[2]; /* [0] train, [1] test */
} ddp_idx_summary;

/* Import the four files into out_path (groups /train and /test, images uint8, labels uint8
 * or int32, `classes` = the given value or, when classes <= 0, the largest label + 1;
 * file attribute `source`). Image files of 2, 3 or 4 dimensions map to (N, D),
 * (N, 1, H, W) and (N, C, H, W); train and test must agree on the sample shape; each
 * labels file must hold as many records as its images file. Returns 0 and fills sum (may
 * be NULL), or -1 with err when an input is bad, -2 when OUT cannot be written (a full
 * disk); OUT is then untouched and no OUT.tmp is left. */
int ddp_idx_import(const ddp_idx_files *files, const char *out_path, int classes,
                   const char *source, ddp_idx_summary *sum, char *err, size_t errlen);
/* The same with class names: names (classes of them, index = label) are written as each
 * group's `class_names`, and the labels' largest + 1 must be classes, else
 * DDP_IDX_BAD_NAMES with err naming --classes (a usage error). names NULL: as above. */
#define DDP_IDX_BAD_NAMES (-3)
int ddp_idx_import_names(const ddp_idx_files *files, const char *out_path, int classes,
                         char *const *names, const char *source, ddp_idx_summary *sum, char *err,
                         size_t errlen);

#endif

/*
 * h5data.h - the HDF5 dataset layout of ddptrain: the training reader and the writer that
 * `ddptrain data` uses to produce it (docs/data.md).
 *
 * Layout. A file holds groups (normally /train and /test); each group holds
 *   images  (N, C, H, W) or (N, D), uint8 (read as v / 255.0f, as torchvision's ToTensor)
 *           or float32 (read as is); any storage layout, contiguous is fastest;
 *   labels  (N,), any integer type, values in [0, classes);
 * a group attribute `classes` (int) and a file attribute `source` (string); optionally
 *   class_names  (classes,) strings, the name of label k at index k (UTF-8, 1 to 255 bytes,
 *           no control characters; absent in older files and in most written by hand).
 *
 * Reader (ddp_h5split_*): opens one group read-only with HDF5 file locking off (shared file
 * systems), validates the layout before allocating anything that depends on it, keeps all
 * labels in memory (int32) and reads images either from an optional in-memory copy
 * (ddp_h5split_cache) or row by row from the file by hyperslab selection, so a dataset
 * larger than memory still trains. It does NOT shuffle, shard or prefetch (sampler.c,
 * loader.c do), and it never prints or exits: input errors come back as -1/NULL plus one
 * line in the caller's `err` buffer naming the file, group/dataset, what was expected and
 * the fix. One thread at a time per split; distinct splits may be used from distinct
 * threads (the HDF5 library is a thread-safe build and serialises its own calls).
 *
 * Writer (ddp_h5writer_*): writes OUT to "OUT.tmp" and renames it over OUT only on commit,
 * so a failed or interrupted write never leaves a half-written OUT. Images are written
 * contiguous and uncompressed (random row reads are fastest), labels as uint8 when
 * classes <= 256 else int32. Rows are appended in chunks: memory use is the caller's chunk.
 *
 * Ownership: a split owns its labels, cache and scratch; ddp_h5split_labels() points into
 * it and lives until ddp_h5split_close(). Strings returned by ddp_h5data_groups() belong
 * to the caller (ddp_h5data_free_names()).
 */
#ifndef DDP_H5DATA_H
#define DDP_H5DATA_H

#include <stddef.h>
#include <stdint.h>

/* Bounds checked on open and on write, before any allocation that depends on them. */
/* Labels live in memory as int32: 2^32 samples = 16 GiB of labels, far beyond any
 * public image dataset (ImageNet-21k: 14M). */
#define DDP_H5_MAX_SAMPLES ((int64_t)1 << 32)
/* One sample must fit a batch buffer many times over: 2^28 elements = 1 GiB as float32. */
#define DDP_H5_MAX_SAMPLE_ELEMS ((int64_t)1 << 28)
/* Largest value of the `classes` attribute / label bound (the model's last layer width). */
#define DDP_H5_MAX_CLASSES (1 << 24)
/* Longest class name, in bytes (a folder name of most file systems). */
#define DDP_H5_MAX_CLASS_NAME 255
/* Bound on the memory of a group's class names (2^24 names of 15 bytes). */
#define DDP_H5_MAX_CLASS_NAMES_BYTES ((size_t)512 << 20)
/* Longest group path accepted ("/train", "/imagenet/val"). */
#define DDP_H5_MAX_GROUP_LEN 256

/* Element type of `images` as stored. */
enum ddp_h5dtype {
    DDP_H5DTYPE_UINT8 = 1,   /* scaled to [0, 1] by v / 255.0f on read */
    DDP_H5DTYPE_FLOAT32 = 2, /* copied */
};

/* "uint8" / "float32". */
const char *ddp_h5dtype_name(enum ddp_h5dtype t);

/* ------------------------------------------------------------------------------------ */
/* Reader                                                                                */

typedef struct ddp_h5split ddp_h5split; /* one group: images + labels */

/* Open group `group` (e.g. "/train"; the leading '/' is optional) of `path` read-only with
 * HDF5 file locking off. Validates before returning: file exists and is HDF5, group exists,
 * `images` and `labels` exist and are datasets, images rank 2 or 4 with every dimension
 * > 0 and a sample of at most DDP_H5_MAX_SAMPLE_ELEMS, dtype uint8 or float32 (other types
 * are rejected by name), labels rank 1 and an integer type, same N, 0 < N <=
 * DDP_H5_MAX_SAMPLES, every label fits int32. Reads all labels into memory as int32.
 * Returns NULL with one line in err naming file, group/dataset and the expectation. */
ddp_h5split *ddp_h5split_open(const char *path, const char *group, char *err, size_t errlen);
/* The same for inference (`ddptrain predict`): the group may have no `labels` (then
 * ddp_h5split_labels() is NULL); when it has them they are checked as above. */
ddp_h5split *ddp_h5split_open_images(const char *path, const char *group, char *err, size_t errlen);
void ddp_h5split_close(ddp_h5split *s); /* accepts NULL */

int64_t ddp_h5split_count(const ddp_h5split *s); /* N */
/* Sample shape without N: returns 1 with dims[0]=D for (N,D), or 3 with dims = C,H,W. */
int ddp_h5split_shape(const ddp_h5split *s, int64_t dims[3]);
/* The sample shape as text for messages, "(D)" or "(C, H, W)"; returns buf. */
const char *ddp_h5split_shape_text(const ddp_h5split *s, char *buf, size_t len);
int64_t ddp_h5split_sample_elems(const ddp_h5split *s); /* D or C*H*W */
enum ddp_h5dtype ddp_h5split_dtype(const ddp_h5split *s);
/* The group's `classes` attribute, or 0 when the group has none (or it is not an integer). */
int ddp_h5split_classes(const ddp_h5split *s);
/* The group's class names (ddp_h5split_class_name_count() of them, index = label), owned
 * by s; NULL when the group has no `class_names`. Checked on open: one per class (when the
 * group has `classes`), each UTF-8 of 1 to DDP_H5_MAX_CLASS_NAME bytes. */
const char *const *ddp_h5split_class_names(const ddp_h5split *s);
int ddp_h5split_class_name_count(const ddp_h5split *s);
/* NULL when name is a good class name (1 to DDP_H5_MAX_CLASS_NAME bytes of UTF-8 without
 * control characters), else what is wrong ("is empty", "is not valid UTF-8", ...). */
const char *ddp_class_name_problem(const char *name);
/* Free n names and the array (ddp_import_*'s and the command line's). Accepts NULL. */
void ddp_class_names_free(char **names, int n);
/* Name of the stored labels type ("uint8", "int64", ...), owned by s. */
const char *ddp_h5split_labels_type(const ddp_h5split *s);
const int32_t *ddp_h5split_labels(const ddp_h5split *s); /* N labels owned by s, or NULL */

/* Check every label is in [0, classes); on failure one line naming file, group, the first
 * bad index and value. */
int ddp_h5split_check_labels(const ddp_h5split *s, int classes, char *err, size_t errlen);

/* Load the whole images dataset into memory if it needs <= max_bytes (as stored: uint8
 * stays uint8). Returns 1 if cached (also when already cached), 0 if too large or the
 * memory cannot be had (reads then stream from the file), -1 on a read error. */
int ddp_h5split_cache(ddp_h5split *s, size_t max_bytes, char *err, size_t errlen);

/* Read samples idx[0..n) (any order, duplicates allowed) into out, n * sample_elems
 * float32: uint8 as v / 255.0f, float32 copied. From the cache if present, else from the
 * file: the needed rows are sorted, duplicates dropped and adjacent rows coalesced into
 * runs, read in file order, then scattered to the requested order. A contiguous dataset
 * stored in the memory type (what ddptrain writes) is read with one pread(2) per run at
 * the dataset's file offset (H5Dget_offset): HDF5 costs ~3 us per row selection. Other
 * layouts (chunked, compressed, big-endian float) go through HDF5 hyperslab selections,
 * at most 256 runs per H5Dread (HDF5 1.10 builds a union in O(runs^2)). No allocation
 * after the first call for a given n (scratch is kept in s and only grows). An index
 * outside [0, N) is an error. Returns 0, or -1 with err. */
int ddp_h5split_read(ddp_h5split *s, const int64_t *idx, int n, float *out, char *err,
                     size_t errlen);

/* The same samples as stored: n * sample_elems uint8 (bytes, unscaled) or float32 (the
 * training loader's uint8 slots for a device that converts on its side). */
int ddp_h5split_read_raw(ddp_h5split *s, const int64_t *idx, int n, void *out, char *err,
                         size_t errlen);

/* uint8 pixels to float32 as every read does: out[i] = (float)src[i] / 255.0f. */
void ddp_h5_u8_to_float(const uint8_t *src, float *out, size_t n);

/* ------------------------------------------------------------------------------------ */
/* Whole-file helpers (for `ddptrain data info`)                                        */

/* Names ("/train", ...) of the top-level groups of `path`, in HDF5 name order. Returns the
 * count (>= 0) with *names a caller-owned array (ddp_h5data_free_names), or -1 with err. */
int ddp_h5data_groups(const char *path, char ***names, char *err, size_t errlen);
void ddp_h5data_free_names(char **names, int count);
/* The file attribute `source` into buf ("" when absent). Returns 0 or -1 with err. */
int ddp_h5data_source(const char *path, char *buf, size_t len, char *err, size_t errlen);

/* ------------------------------------------------------------------------------------ */
/* Writer                                                                                */

typedef struct ddp_h5writer ddp_h5writer;

/* Create "<path>.tmp" (truncating a stale one) and write the file attribute `source`.
 * Returns NULL with err when the file cannot be created. */
ddp_h5writer *ddp_h5writer_create(const char *path, const char *source, char *err, size_t errlen);
/* Start group `group` of `count` samples of shape dims[0..rank) (rank 1: D; rank 3: C,H,W),
 * element type `dtype`, labels in [0, classes). One group at a time. */
int ddp_h5writer_begin(ddp_h5writer *w, const char *group, int64_t count, int rank,
                       const int64_t dims[3], enum ddp_h5dtype dtype, int classes, char *err,
                       size_t errlen);
/* Append the next n samples: images n * sample_elems of the group's dtype (uint8_t or
 * float), labels n values, each checked to be in [0, classes). */
int ddp_h5writer_append(ddp_h5writer *w, const void *images, const int32_t *labels, int64_t n,
                        char *err, size_t errlen);
/* Write the begun group's `class_names`: n names (n = its classes), index = label. */
int ddp_h5writer_class_names(ddp_h5writer *w, char *const *names, int n, char *err, size_t errlen);
/* Finish the group; an error if fewer than `count` samples were appended. */
int ddp_h5writer_end(ddp_h5writer *w, char *err, size_t errlen);
/* Close, fsync and rename "<path>.tmp" to path. After success destroy only frees. */
int ddp_h5writer_commit(ddp_h5writer *w, char *err, size_t errlen);
/* Free; when not committed, close and remove "<path>.tmp". Accepts NULL. */
void ddp_h5writer_destroy(ddp_h5writer *w);

#endif

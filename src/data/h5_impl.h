/*
 * h5_impl.h - what the HDF5 files of data/ share and nothing else includes: a split's state
 * (opened and checked by h5data.c, read by h5read.c), HDF5's error printing silenced per call,
 * its innermost message, a group's path (also h5writer.c's).
 */
#ifndef DDP_H5_IMPL_H
#define DDP_H5_IMPL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "data/h5data.h"

/* HDF5's error printing of this thread, as h5_quiet_on found it. */
typedef struct {
    H5E_auto2_t func;
    void *data;
} h5_quiet;

/* Turn off HDF5's stack printing for this thread; h5_quiet_off restores it. */
void h5_quiet_on(h5_quiet *q);
void h5_quiet_off(const h5_quiet *q);
/* HDF5's innermost error message of this thread into buf (for a line of our own). */
const char *h5_reason(char *buf, size_t len);
/* "/name" of group (with or without its leading slash) into buf; 0, or -1 when empty or too
 * long. */
int h5_group_path(const char *group, char *buf, size_t len);

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
    char **class_names; /* (nclass_names) the group's `class_names`, or NULL */
    int nclass_names;
};

/* Read and check the optional dataset `class_names` of group g into s (classnames.c): 0
 * (also when absent), -1 with err. Call after s->classes is known. */
int h5_read_class_names(ddp_h5split *s, hid_t g, char *err, size_t errlen);
/* Write `class_names` (n variable-length UTF-8 strings) into group g: 0 or -1. */
int h5_write_class_names(hid_t g, char *const *names, int n);

#endif

/*
 * h5attr.h - scalar HDF5 attributes, written and read: the one set of helpers of the files
 * ddptrain writes and reads (checkpoints in train/ckpt.c, datasets in data/h5data.c and
 * data/h5writer.c).
 *
 * Writers make a new attribute (an existing one of that name is an HDF5 error). Strings are
 * written two ways, because readers elsewhere expect each: fixed-length NUL-terminated ASCII
 * (checkpoints) or variable-length UTF-8 (datasets: h5py reads it as str). The reader takes
 * either. Nothing here prints; HDF5's own error stack is the caller's to silence.
 */
#ifndef DDP_CORE_H5ATTR_H
#define DDP_CORE_H5ATTR_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

/* Scalar attribute `name` of file type ftype, from the value at v of memory type mtype.
 * 0 or -1. */
int ddp_h5attr_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype, const void *v);
/* A little-endian int64 (H5T_STD_I64LE). 0 or -1. */
int ddp_h5attr_write_i64(hid_t loc, const char *name, int64_t v);
/* A fixed-length ASCII string (strlen + 1 bytes, NUL-terminated). 0 or -1. */
int ddp_h5attr_write_str(hid_t loc, const char *name, const char *v);
/* A variable-length UTF-8 string. 0 or -1. */
int ddp_h5attr_write_vstr(hid_t loc, const char *name, const char *v);

/* Scalar (one-element) integer attribute into *v: 0; 1 absent (or unopenable); -1 present
 * but not one integer, or unreadable. */
int ddp_h5attr_read_int(hid_t loc, const char *name, int64_t *v);
/* A float64 (or any number HDF5 converts to one) into *v: 0; 1 absent; -1 unreadable. */
int ddp_h5attr_read_f64(hid_t loc, const char *name, double *v);
/* A string attribute (fixed or variable length, ASCII or UTF-8) into buf, cut to len - 1
 * bytes: 0; 1 absent; -2 present but not a string; -1 unreadable. */
int ddp_h5attr_read_str(hid_t loc, const char *name, char *buf, size_t len);
/* The stored size in bytes of a fixed-length string attribute (its NUL included); 0 when
 * absent, variable length or not a string. */
size_t ddp_h5attr_str_size(hid_t loc, const char *name);

#endif

/*
 * npy.h - sequential reader for NumPy arrays: .npy files and the members of .npz archives
 * (zip files, members stored or deflated), for the importers of import.h.
 *
 * A .npy file is the magic "\x93NUMPY", a version (1.0, 2.0 or 3.0), a little-endian header
 * length (2 bytes in version 1, 4 in 2 and 3), a Python dict literal with exactly the keys
 * 'descr', 'fortran_order' and 'shape', then the data. The header is parsed as hostile
 * text, never evaluated: an unknown key, a missing one, big-endian or Fortran order, a
 * structured or object dtype, a rank beyond DDP_NPY_MAX_RANK, a size that overflows or
 * data that is not exactly what the shape promises (truncated or trailing bytes) is an
 * error, found before anything of the array's size is allocated.
 *
 * An .npz is read through its central directory (zip64 included); each member is streamed
 * from its own file handle, inflated with zlib when deflated, and its CRC-32 checked when
 * read to the end. Nothing is memory-mapped or loaded whole: ddp_npy_read hands out the
 * data in order, so an array may exceed memory.
 *
 * Errors are one line in the caller's err naming the file (and the member, "F.npz: member
 * x_train.npy"), what was expected and the fix; nothing prints or exits.
 * Ownership: every handle is the caller's (close/destroy accept NULL); strings returned by
 * the accessors live as long as the handle.
 */
#ifndef DDP_NPY_H
#define DDP_NPY_H

#include <stddef.h>
#include <stdint.h>

/* Ranks beyond 4 are no image layout (N, C, H, W); refused rather than guessed at. */
#define DDP_NPY_MAX_RANK 4
/* numpy writes headers of a few hundred bytes; 1 MiB bounds what a lying length costs. */
#define DDP_NPY_MAX_HEADER ((uint32_t)1 << 20)
/* Central directory of an .npz: numpy writes one entry per array; 64 MiB bounds a lie. */
#define DDP_NPZ_MAX_DIRECTORY ((uint64_t)64 << 20)

typedef struct ddp_npy ddp_npy; /* one array being read */
typedef struct ddp_npz ddp_npz; /* one open archive */

/* Open a .npy file and validate its header and size against the file's length. */
ddp_npy *ddp_npy_open(const char *path, char *err, size_t errlen);
/* Next `bytes` bytes of the array's data, in C order. -1 with err when the data ends early
 * or is corrupt; the read that reaches the end also checks a member's CRC-32. */
int ddp_npy_read(ddp_npy *a, void *buf, size_t bytes, char *err, size_t errlen);
/* After the last read: the data must end here (and a member's CRC-32 match). */
int ddp_npy_finish(ddp_npy *a, char *err, size_t errlen);
void ddp_npy_close(ddp_npy *a);

/* "X.npy" or "F.npz: member x_train.npy", for messages. */
const char *ddp_npy_name(const ddp_npy *a);
/* numpy's type string as written ("|u1", "<f4", ...) and its kind ('u', 'i', 'f', 'b', ...). */
const char *ddp_npy_descr(const ddp_npy *a);
char ddp_npy_kind(const ddp_npy *a);
int ddp_npy_itemsize(const ddp_npy *a);
/* Rank (1..DDP_NPY_MAX_RANK) and shape. */
int ddp_npy_rank(const ddp_npy *a);
const int64_t *ddp_npy_shape(const ddp_npy *a);

/* Open an .npz and read its central directory. */
ddp_npz *ddp_npz_open(const char *path, char *err, size_t errlen);
/* 1 when the archive holds KEY.npy. */
int ddp_npz_has(const ddp_npz *z, const char *key);
/* Open member KEY.npy (KEY as np.savez names it) and validate its header and sizes. */
ddp_npy *ddp_npz_member(const ddp_npz *z, const char *key, char *err, size_t errlen);
/* The member names without ".npy", comma-separated, for "holds: ..." messages. */
const char *ddp_npz_keys(const ddp_npz *z);
void ddp_npz_close(ddp_npz *z);

#endif

/*
 * fileio.h - the one way ddptrain replaces a file: write PATH.tmp, then ddp_file_commit
 * (fsync the data, rename over PATH, fsync the directory so the rename itself survives a
 * crash). A reader sees the old file or the new one, never a part. Weights, checkpoints,
 * datasets, job.ini, validate's JSON report and reference files all go through here.
 *
 * What it leaves to others: what is written (HDF5 writers create their own PATH.tmp with
 * ddp_file_tmp_path and commit it here), messages that name the key to fix (callers add it).
 * No fixed-size path buffers: any path the system takes works.
 */
#ifndef DDP_FILEIO_H
#define DDP_FILEIO_H

#include <stddef.h>
#include <stdio.h>

/* "PATH.tmp", allocated (free it). */
char *ddp_file_tmp_path(const char *path);

/* Durable replace: fsync tmp's data, rename it to final, fsync final's directory. Returns 0,
 * or -1 with one line in err; then tmp is removed (a failed replace leaves nothing behind). */
int ddp_file_commit(const char *tmp, const char *final, char *err, size_t errlen);

/* Before any work: can a command write PATH (given as option opt, e.g. "--json")? Refuses an
 * empty path, one ending in '/', a directory or other non-regular file, and a directory that
 * does not exist or cannot be written (where PATH.tmp would go). Returns 0, or -1 with one line
 * in err: "OPT PATH: why; fix". Exit code 2 (usage) for the caller; a write that fails later
 * (a full disk) is a runtime failure, exit 1. */
int ddp_file_check_output(const char *opt, const char *path, char *err, size_t errlen);

/* 1 when a and b name the same existing file (device and inode: a symlink, a hard link or
 * another spelling of the path counts), else 0. An output is never written over an input. */
int ddp_file_same(const char *a, const char *b);

/* A text file being written as PATH.tmp. */
struct ddp_atomic_file {
    FILE *f;    /* write here */
    char *tmp;  /* PATH.tmp */
    char *path; /* PATH */
};

/* Open PATH.tmp for writing. Returns a.f, or NULL with errno set (nothing to clean up). */
FILE *ddp_atomic_open(struct ddp_atomic_file *a, const char *path);

/* Finish: flush, check for write errors, close (checked), commit. Returns 0; -1 when writing
 * failed (err: "PATH.tmp: cannot write: REASON", e.g. a full disk) or -2 when the commit did
 * (err: its line); then PATH.tmp is removed and PATH is as it was. Frees a's allocations
 * either way. */
int ddp_atomic_close(struct ddp_atomic_file *a, char *err, size_t errlen);

/* Give up: close and remove PATH.tmp, free a's allocations. */
void ddp_atomic_abort(struct ddp_atomic_file *a);

#endif

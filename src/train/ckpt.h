/*
 * ckpt.h - checkpoints: `<output>/checkpoints/ckpt-<step>.h5`, written by rank 0.
 *
 * Layout (HDF5): `/model` as in weights.h (PyTorch names), `/optim/state1`, `/optim/state2`
 * (flat float32 optimiser state in the parameter layout, absent when the optimiser keeps none),
 * and root attributes: `format` = "ddptrain-checkpoint", `version` = 1, `epoch`, `step`,
 * `cursor` (global samples consumed in `epoch`), `optim_t`, `optimizer`, `world_size`,
 * `global_batch`, `seed`, `job` (the effective job, as job.ini holds it: every key with
 * defaults and --set overrides applied; older versions stored the bare job file) and
 * `checksum`: CRC-32 over every tensor's bytes and the position, checked on load, so a torn or
 * bit-flipped file is never trusted. Model selection on the validation split adds `best`
 * (float64, NaN before the first evaluation), `best_epoch` and `since_best` (train/valsel.h),
 * read as "no evaluation yet" when absent. A GPU run with cuDNN adds `conv_algorithms`: the
 * convolution algorithms every rank ran (rank 0's choice), which a resumed run adopts where
 * the device and cuDNN are the same, so that it computes the same bits.
 *
 * The training position is all that resuming needs: the sampler's order is a function of
 * (seed, epoch), dropout masks of (seed, step, rank, layer), so no generator state is stored.
 *
 * Writes go to a temporary name, are fsynced and renamed, and the directory fsynced; the
 * newest `keep` checkpoints are kept. A crash at any moment leaves every older checkpoint
 * intact and at most a stray `*.tmp`, which loading ignores.
 */
#ifndef DDP_CKPT_H
#define DDP_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "nn/model.h"
#include "train/optim.h"

#define DDP_CKPT_VERSION 1

struct ddp_ckpt_pos {
    int64_t epoch;      /* epoch to continue (0-based) */
    int64_t step;       /* global optimiser steps done */
    int64_t cursor;     /* global samples of `epoch` already consumed */
    int64_t world_size; /* of the run that saved (informative) */
    int64_t global_batch;
    int64_t seed;
    int64_t train_ms;   /* training wall time of every start up to here (0 if not recorded) */
    double best;        /* model selection (valsel.h): best validation value, NaN if none */
    int64_t best_epoch; /* its epoch (1-based), 0 if none */
    int64_t since_best; /* evaluations since without improvement */
    /* save only: the GPU's convolution algorithms (backend/select.h ddp_backend_conv_choices)
     * for attribute `conv_algorithms`; NULL or "": none */
    const char *conv_algorithms;
};

/* The most bytes of `conv_algorithms` written and read (an HDF5 attribute stays compact). */
#define DDP_CKPT_CONV_MAX 60000

/* Write a checkpoint of m, o and pos into dir (created if needed); path_out gets its name.
 * Then delete all but the newest keep. */
int ddp_ckpt_save(const char *dir, const struct ddp_model *m, const struct ddp_optim *o,
                  const struct ddp_ckpt_pos *pos, const char *job_text, int keep, char *path_out,
                  size_t path_len, char *err, size_t errlen);

/* Load path into m, o (both built for the current job) and pos, after verifying format,
 * version, shapes and checksum. -1 with one line naming the file and what is wrong. */
int ddp_ckpt_load(const char *path, struct ddp_model *m, struct ddp_optim *o,
                  struct ddp_ckpt_pos *pos, char *err, size_t errlen);

/* The `job` attribute of path (malloc'd into *job_text) and its `global_batch` (0 when
 * absent), without verifying the rest of the file: resume compares the job before loading.
 * -1 with one line when the file or the attribute cannot be read. */
int ddp_ckpt_read_job(const char *path, char **job_text, int64_t *global_batch, char *err,
                      size_t errlen);

/* The `conv_algorithms` attribute of path (malloc'd), or NULL when absent or unreadable: the
 * algorithms are advice (ddp_backend_conv_adopt checks each), not part of the checksum. */
char *ddp_ckpt_read_conv(const char *path);

/* The weights of path into m for `ddptrain eval`: a checkpoint is verified as resume verifies
 * it (format, version, shapes and the CRC over tensors, optimiser state and position, whatever
 * optimiser saved it); a file without the checkpoint format attribute (model.h5, h5py) is read
 * as plain weights. -1 with one line naming the file and what is wrong. */
int ddp_ckpt_load_weights(const char *path, struct ddp_model *m, char *err, size_t errlen);

/* Checkpoints in dir, newest (highest step) first. Returns the count (0 if none or no dir);
 * *paths is an array of malloc'd strings, freed with ddp_ckpt_free_list. */
int ddp_ckpt_list(const char *dir, char ***paths);
void ddp_ckpt_free_list(char **paths, int n);

#endif

/*
 * weights.h - model tensors in HDF5, in the `/model` layout of docs/checkpoints.md:
 * one float32 dataset per tensor, `/model/<index>.weight`, `/model/<index>.bias`, ... with
 * PyTorch's names and shapes for nn.Sequential (Linear (out, in); Conv2d (out, in, kh, kw);
 * batchnorm running_mean, running_var and a scalar int64 num_batches_tracked), so that
 *   sd = {k: torch.from_numpy(v[()]) for k, v in h5py.File(p)["model"].items()}
 *   net.load_state_dict(sd)
 * works in PyTorch.
 *
 * Files are written to "<path>.tmp", flushed, fsynced, renamed, and the directory fsynced,
 * so a reader sees the old file or the new one, never half of one.
 *
 * Reading checks every tensor's presence and shape before touching the model, and names the
 * first culprit (file, dataset, expected and found shape); like PyTorch's strict
 * load_state_dict it refuses a /model entry that is not one of the model's tensors (the file
 * belongs to a different model), naming it. float64 datasets are converted.
 */
#ifndef DDP_WEIGHTS_H
#define DDP_WEIGHTS_H

#include <hdf5.h>
#include <stddef.h>

#include "nn/model.h"

/* Group "/model" in an open file (checkpoints add their own groups beside it). */
int ddp_weights_write_group(hid_t file, const struct ddp_model *m, char *err, size_t errlen);
int ddp_weights_read_group(hid_t file, const char *path, struct ddp_model *m, char *err,
                           size_t errlen);

/* Whole files holding only /model (final weights, `[model] init`). */
int ddp_weights_save(const char *path, const struct ddp_model *m, char *err, size_t errlen);
int ddp_weights_load(const char *path, struct ddp_model *m, char *err, size_t errlen);

/* Open an HDF5 file read-only with file locking off; -1 with one line naming path and `what`
 * ("weights", "checkpoint") when it is missing, not a regular file (a directory, FIFO or
 * device is refused without blocking on it), not HDF5 or damaged. */
hid_t ddp_h5_open_read(const char *path, const char *what, char *err, size_t errlen);

/* Why the last HDF5 call failed, for a message: the system error when HDF5 saw one
 * ("No space left on device"), else HDF5's innermost description. Call it right after the
 * failing call (the next HDF5 call clears the error stack). Returns buf. */
const char *ddp_h5_error_reason(char *buf, size_t len);

#endif

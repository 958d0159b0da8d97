/*
 * jobdiff.h - is a checkpoint's job this job? Compares the effective job stored in a checkpoint
 * (its `job` attribute, the text of job.ini) with the current one, key by key, on parsed and
 * re-formatted values (so `lr = 0.050` equals `lr = 5e-2`; blanks in [model] layers do not count),
 * and lists the keys that differ.
 *
 * Keys that neither change the result nor only extend the run may differ: [job] name and
 * output, [data] test and cache_mb, [train] epochs, max_steps, log_every, eval_every, threads
 * and device, every [checkpoint] key, and [dist] keys except sync_bn. [data] batch_size is
 * compared as the global batch (batch_size x world size), so a run may resume on another
 * number of ranks with the same global batch.
 *
 * It does not read files (ckpt.c does) nor decide what to do about a difference (train.c).
 */
#ifndef DDP_JOBDIFF_H
#define DDP_JOBDIFF_H

#include <stddef.h>
#include <stdint.h>

#include "job/config.h"

/* 1 when text is an effective job (starts like job.ini), 0 for the bare job-file text that
 * older ddptrain versions stored (which lacks --set overrides: cannot be compared). */
int ddp_jobdiff_is_effective(const char *text);

/* Compare job (run with global_batch samples per step) with stored, the effective job text of
 * a checkpoint saved with stored_global_batch (0: unknown). Returns the number of keys that
 * differ and may not (0: the same job), with "optim.lr 0.05 -> 0.2, ..." in out; -1 when stored
 * is not an effective job. */
int ddp_jobdiff(const struct ddp_job *job, int64_t global_batch, const char *stored,
                int64_t stored_global_batch, char *out, size_t outlen);

#endif

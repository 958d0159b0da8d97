/*
 * outdir.h - the run's output directory ([job] output): Slurm filename patterns in its name,
 * the lock that keeps two runs out of one directory, moving an earlier run's files aside, and
 * the effective job written to job.ini.
 *
 * Patterns (as sbatch --output; docs/checkpoints.md): %j job id, %A array master job id, %a array
 * task id, %x job name, %u user name, %N first node of the job, %% a percent sign; a width
 * (%4a) zero-pads the numeric ones. Outside Slurm %j and %A become "local", %a "0", %x the
 * [job] name, %N this host's short name. Any other %-pattern is an error.
 *
 * The lock is flock(2) on DIR/.ddptrain.lock, held by rank 0 from setup to exit (the kernel
 * drops it when the process ends, however it ends). The holder records host, pid, Slurm job
 * and start time in the file so that a refused run can name it; a clean exit empties the file.
 *
 * This module does not decide when to move files or what a run may resume: train.c does.
 * Messages are one line without the "where" prefix; the caller names the key.
 */
#ifndef DDP_OUTDIR_H
#define DDP_OUTDIR_H

#include <stddef.h>

#include "job/config.h"

#define DDP_OUTDIR_LOCK ".ddptrain.lock"

/* Expand the patterns of pattern into out (len bytes) from the environment; job_name stands
 * in for %x outside Slurm. 0, or -1 with why (what was found, what is expected). */
int ddp_outdir_expand(const char *pattern, const char *job_name, char *out, size_t len, char *why,
                      size_t whylen);

/* Under Slurm, when pattern holds %j: how many directories the pattern gives for other job ids
 * (%j as any digits, the other patterns as for this job) that hold a run of the job named
 * job_name with checkpoints/, other than mine; the last of them by name goes to other. Such a
 * run cannot be resumed by this job: %j changes with every sbatch. 0 outside Slurm, without
 * %j, or when the pattern cannot be expanded. */
int ddp_outdir_other_jobs(const char *pattern, const char *job_name, const char *mine, char *other,
                          size_t len);

/* Create dir (mkdir -p) and take its lock (after the checks that ddp_outdir_probe makes too:
 * each name in dir within the file system's limit, each part that exists a directory). Returns the lock's descriptor (>= 0), -1 when dir
 * cannot be created or the lock file opened (why says so), or -2 when another process holds
 * the lock (why names it, from its record). */
int ddp_outdir_lock(const char *dir, char *why, size_t whylen);
/* What ddp_outdir_lock would say, without creating or locking anything (`ddptrain check`):
 * 0 when the lock could be taken, -1 when dir could not be created, -2 when held (why). */
int ddp_outdir_probe(const char *dir, char *why, size_t whylen);
/* A resumed run appends to dir's metrics.jsonl, (tensorboard) adds events to dir/tb and
 * replaces job.ini, model.h5, best.h5 and report.html: each must be absent or of the right
 * kind (a file, a directory). 0, or -1 with why naming the path and the fix. Touches nothing:
 * `check` and the run both ask. */
int ddp_outdir_check_resume(const char *dir, int tensorboard, char *why, size_t whylen);
/* Empty the holder record and release the lock; accepts -1. */
void ddp_outdir_unlock(int fd);

/* 1 when dir holds files of an earlier run (job.ini, metrics.jsonl, model.h5, checkpoints/,
 * report.html), else 0. */
int ddp_outdir_has_run(const char *dir);
/* Move those files into dir/previous-YYYYmmdd-HHMMSS[-N]/ (new, never merged); moved_to gets
 * that path. 1 moved, 0 nothing to move, -1 with why. */
int ddp_outdir_move_aside(const char *dir, char *moved_to, size_t len, char *why, size_t whylen);

/* The effective job as job.ini holds it (ddp_job_write); malloc'd, the caller frees. */
char *ddp_outdir_job_text(const struct ddp_job *job);
/* Write text to dir/job.ini atomically (temporary file, fsync, rename). 0, or -1 with why. */
int ddp_outdir_write_job(const char *dir, const char *text, char *why, size_t whylen);

#endif

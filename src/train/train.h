/*
 * train.h - the training run: job file + environment -> a trained model, metrics.jsonl and
 * model.h5 in the job's output directory (rank 0 writes; every rank computes).
 *
 * Setup failures on any rank (job, dataset, weights, output directory) are agreed on by all
 * ranks before training starts, so one rank's bad file never leaves the others waiting: the
 * failing rank prints its one-line reason, rank 0 names the failing rank, and every rank exits
 * with that rank's code.
 */
#ifndef DDP_TRAIN_H
#define DDP_TRAIN_H

#include "core/config.h"

/* Train on job (loaded, overrides applied, validated: cli/train.c), or with eval_only, the
 * path of a checkpoint or weights file, evaluate that on the job's test split. Takes the
 * job's allocations (job is left empty). Returns the exit code. */
int ddp_train_run(struct ddp_job *job, const char *eval_only);

#endif

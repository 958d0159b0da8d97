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

#include "cli/run_args.h"
#include "core/config.h"

/* Train on job (loaded, overrides applied, validated: cli/train.c), or in the mode of args
 * (eval: the checkpoint on the job's test split; check: setup only, then a summary; export,
 * predict: setup with the checkpoint's weights, then the ONNX file or the logits). Takes the
 * job's allocations (job is left empty). Returns the exit code. */
int ddp_train_run(struct ddp_job *job, const struct ddp_run_args *args);

#endif

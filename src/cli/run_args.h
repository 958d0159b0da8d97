/*
 * run_args.h - the arguments that `eval`, `check`, `export` and `predict` add to the trainer's
 * command line (train.c parses JOB.ini and --set; these modes then reuse its whole setup),
 * and the last act of export and predict once setup has built the model with the weights.
 */
#ifndef DDP_RUN_ARGS_H
#define DDP_RUN_ARGS_H

#include <stddef.h>

#include "job/config.h"
#include "nn/model.h"
#include "train/train.h" /* struct ddp_run_args, the modes */

/* If argv[*i] is an option of the mode named by argv[0], consume it (and its value) and
 * return 1; else 0. A missing value sets bad and prints why. */
int ddp_run_args_option(struct ddp_run_args *a, int argc, char **argv, int *i);
/* Set the mode from the subcommand name and check that its required options are there;
 * -1 after printing what is missing. */
int ddp_run_args_check(struct ddp_run_args *a, const char *subcommand);
/* export and predict: refuse an output (--onnx, --output, or its PATH.tmp written first) that
 * is one of the command's inputs (the job file, [data] file, [model] init, --checkpoint,
 * --input), compared by device and inode, so that no spelling of a path or symlink replaces
 * an input. -1 with one line in err naming both (the caller exits DDP_EXIT_USAGE); 0 for the
 * other modes. */
int ddp_run_args_check_files(const struct ddp_run_args *a, const char *subcommand,
                             const char *job_path, const struct ddp_job *job, char *err,
                             size_t errlen);
/* export: write the ONNX file; predict: write the logits. Rank 0 only (others return 0).
 * Returns an exit code, after printing any error. ddp_run_args_check sets it as a->finish. */
int ddp_run_args_finish(const struct ddp_run_args *a, struct ddp_model *m,
                        const struct ddp_job *job, char *err, size_t errlen);

#endif

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

/* `ddptrain [train] JOB.ini [--set SECTION.KEY=VALUE ...]`; returns the exit code. */
int ddp_cmd_train(int argc, char **argv);

/* Catch the default preemption signals (USR1, TERM) from the first moment of main, so one
 * that arrives while the job is still starting is not lost: it stops the run at its first step
 * boundary with a checkpoint. */
void ddp_train_catch_early_signals(void);

#endif

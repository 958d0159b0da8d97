/*
 * signals.h - preemption signals: Slurm sends one (USR1 by --signal, TERM on scancel or at
 * the time limit) before it kills a job; the trainer then stops at its next step boundary with
 * a checkpoint and exits 75 (docs/checkpoints.md). The handlers only set a flag; the training
 * loop reads it (ddp_signals_stop_requested) and the ranks agree on it.
 */
#ifndef DDP_SIGNALS_H
#define DDP_SIGNALS_H

#include <stddef.h>

#include "job/config.h"

/* Catch the default preemption signals (USR1, TERM) from the first moment of main, so one
 * that arrives while the job is still starting is not lost: it stops the run at its first step
 * boundary with a checkpoint. */
void ddp_train_catch_early_signals(void);

/* Parse "[checkpoint] signals" ("USR1, TERM"); with install, set the handlers (again after
 * MPI_Init, which may have replaced them); the default ones the job did not name get their
 * default action back. Returns 0, or -1 with one line in err naming the key. */
int ddp_signals_install(const struct ddp_job *job, int install, char *err, size_t errlen);

/* The signal that asked to stop, or 0. */
int ddp_signals_stop_requested(void);

/* "USR1" for SIGUSR1: the name [checkpoint] signals uses; "?" for others. */
const char *ddp_signal_name(int sig);

#endif

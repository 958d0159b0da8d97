/*
 * testhooks.h - the test hooks of ddptrain: environment variables, all named DDP_TEST_*,
 * that make a run misbehave on purpose or record what it did, so that tests can watch the
 * failure paths and the data order. They are read once, at the start of a command
 * (ddp_test_hooks), and the struct is passed to whoever acts on them; nothing reads the
 * environment inside the step loop. Unset variables leave a hook off. None is for users.
 *
 *   DDP_TEST_TRACE=FILE              trainer: rank 0 writes the first step's bucket trace
 *                                    (ddp_sync_write_trace) to FILE
 *   DDP_TEST_SAMPLE_LOG=PREFIX       trainer: every rank appends "EPOCH INDEX" per sample it
 *                                    trains on to PREFIX.RANK
 *   DDP_TEST_FLIP_BIT=RANK:STEP      trainer: RANK flips bit 3 of its first parameter after
 *                                    STEP (the replica check must notice)
 *   DDP_TEST_FAULT=RANK:STEP:exit:CODE | RANK:STEP:stall:SECONDS
 *                                    trainer: after STEP, RANK leaves at once with CODE (no
 *                                    abort of the job, as a crash would) or stalls SECONDS
 *   DDP_TEST_VALIDATE_FAULT=LIST     validate: the faults of validate.h (parsed there)
 *   DDP_TEST_FAKE_GPUS=N             env, launch: pretend the driver sees N GPUs (binding.h)
 */
#ifndef DDP_TESTHOOKS_H
#define DDP_TESTHOOKS_H

struct ddp_test_hooks {
    const char *trace;      /* DDP_TEST_TRACE, or NULL */
    const char *sample_log; /* DDP_TEST_SAMPLE_LOG, or NULL */
    long long flip_rank;    /* DDP_TEST_FLIP_BIT; -1 when off */
    long long flip_step;
    long long fault_rank; /* DDP_TEST_FAULT; -1 when off */
    long long fault_step;
    char fault_action[8];       /* "exit" or "stall" */
    double fault_arg;           /* exit code or seconds */
    const char *validate_fault; /* DDP_TEST_VALIDATE_FAULT, or NULL */
    const char *fake_gpus;      /* DDP_TEST_FAKE_GPUS, or NULL */
};

/* The hooks of this process, read from the environment at the first call. */
const struct ddp_test_hooks *ddp_test_hooks(void);

#endif

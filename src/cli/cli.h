/*
 * cli.h - the subcommands of ddptrain, as main.c's table lists them. Each takes the arguments
 * from the subcommand's name on (argv[0] is the subcommand, or the program for
 * `ddptrain JOB.ini`), handles its own options and --help, and returns a process exit code
 * (core/util.h). One file in src/cli/ per subcommand's arguments; the work is done by the
 * module named.
 */
#ifndef DDP_CLI_H
#define DDP_CLI_H

/* `ddptrain [train] JOB.ini [--set SECTION.KEY=VALUE ...]` and `ddptrain eval JOB.ini
 * --checkpoint PATH` (train.c; runs train/train.h). */
int ddp_cmd_train(int argc, char **argv);

/* `ddptrain validate [--quick] [--json FILE] ...` (validate.c; runs validate/validate.h). */
int ddp_cmd_validate(int argc, char **argv);

/* `ddptrain launch --nproc-per-node N JOB.ini ...` (launch.c; runs launch/launcher.h). */
int ddp_cmd_launch(int argc, char **argv);

/* `ddptrain env`: how each rank sees the world (env.c). */
int ddp_cmd_env(int argc, char **argv);

/* `ddptrain hostlist EXPR`: expand a Slurm hostlist (env.c). */
int ddp_cmd_hostlist(int argc, char **argv);

/* `ddptrain bootstrap-test [--via auto|pmi2|mpi|tcp] [--len N] [--timeout S] [--delay S]`
 * (env.c, hidden from --help): rank 0 publishes len random bytes (default 128, the size of an
 * NCCL id) through the bootstrap, and every rank prints one line
 * "rank=R world_size=W host=H master=ADDR:PORT via=KIND len=N hash=FNV1A64 ms=T" for tests to
 * compare. --delay makes the ranks other than 0 wait S seconds first. Exit 0, 2 (usage) or 4
 * (bootstrap failed). */
int ddp_cmd_bootstrap_test(int argc, char **argv);

/* `ddptrain data ...`: import or synthesise HDF5 datasets (data.c). */
int ddp_cmd_data(int argc, char **argv);

/* `ddptrain --version`: the version and the backends built in (version.c). */
int ddp_cmd_version(int argc, char **argv);

/* `ddptrain --job-reference`: every job-file key as Markdown (version.c). */
int ddp_cmd_job_reference(int argc, char **argv);

#endif

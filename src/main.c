/*
 * main.c - the ddptrain command: one table of subcommands, nothing else. Each subcommand takes
 * the arguments from its own name on (argv[0] is the subcommand), parses them itself (src/cli/)
 * and returns an exit code from core/util.h; nothing below main calls exit() for bad input.
 * `ddptrain JOB.ini ...` (no subcommand) trains.
 */
#include <hdf5.h>
#include <stdio.h>
#include <string.h>

#include "ddp_build.h"
#include "backend/blas_core.h"
#include "cli/cli.h"
#include "report/report.h"
#include "core/util.h"
#include "train/signals.h"

struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    int early_signals; /* a training run may follow: catch preemption signals from the start */
    const char *usage; /* after "ddptrain "; NULL: not listed in --help */
    const char *summary;
};

static int cmd_help(int argc, char **argv);

static const struct subcommand COMMANDS[] = {
    {"train", ddp_cmd_train, 1, "JOB.ini [--set SECTION.KEY=VALUE ...]",
     "train (also: ddptrain train ...)"},
    {"eval", ddp_cmd_train, 1, "eval JOB.ini --checkpoint PATH",
     "test loss/accuracy of a checkpoint"},
    {"env", ddp_cmd_env, 0, "env", "how each rank sees the world"},
    {"hostlist", ddp_cmd_hostlist, 0, "hostlist EXPR", "expand a Slurm hostlist"},
    {"data", ddp_cmd_data, 0, "data ...", "import or synthesise HDF5 datasets"},
    {"validate", ddp_cmd_validate, 0, "validate [--quick] [--json FILE]",
     "node validation for admins"},
    {"launch", ddp_cmd_launch, 0, "launch --nproc-per-node N JOB.ini ...",
     "start N local ranks (torchrun-like)"},
    {"check", ddp_cmd_train, 1, "check JOB.ini [--set ...]", "everything before the first step"},
    {"profile", ddp_cmd_train, 1, "profile JOB.ini [--steps N] [--json FILE]",
     "a training step's time per layer"},
    {"report", ddp_cmd_report, 0, "report RUN_DIR [RUN_DIR...]", "RUN_DIR/report.html: the curves"},
    {"export", ddp_cmd_train, 1, "export JOB.ini --checkpoint F --onnx OUT", "the model as ONNX"},
    {"predict", ddp_cmd_train, 1, "predict JOB.ini --checkpoint F --input X --output Y",
     "logits of X.h5's samples into Y.h5"},
    {"--version", ddp_cmd_version, 0, "--version", "version and backends built in"},
    {"version", ddp_cmd_version, 0, NULL, NULL},
    {"--job-reference", ddp_cmd_job_reference, 0, "--job-reference",
     "every job-file key (Markdown)"},
    {"--help", cmd_help, 0, NULL, NULL},
    {"-h", cmd_help, 0, NULL, NULL},
    {"help", cmd_help, 0, NULL, NULL},
    {"bootstrap-test", ddp_cmd_bootstrap_test, 1, NULL, NULL}, /* exercises the bootstrap */
};
#define NCOMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static void print_help(FILE *f)
{
    fprintf(f, "ddptrain %s - data-parallel training for Slurm clusters\n\nusage:\n", DDP_VERSION);
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (COMMANDS[i].usage)
            fprintf(f, "  ddptrain %-39s %s\n", COMMANDS[i].usage, COMMANDS[i].summary);
    fprintf(f,
            "\nRun several ranks with srun (CPU: srun --mpi=pmix) or mpirun. Docs: man ddptrain, "
            "README.md, docs/.\n");
}

static int cmd_help(int argc, char **argv)
{
    print_help(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    ddp_blas_core_choose(argv); /* may execute argv again with OpenBLAS's kernels for this CPU */
    /* No HDF5 clean-up at exit: every file is closed explicitly, and after a failed close
     * (a full disk) HDF5 1.10's exit handler walks the half-closed file and crashes. */
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* we report HDF5 failures ourselves, in one line */
    if (argc < 2) {
        print_help(stderr);
        return DDP_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (strcmp(cmd, COMMANDS[i].name) != 0)
            continue;
        if (COMMANDS[i].early_signals)
            ddp_train_catch_early_signals();
        return COMMANDS[i].run(argc - 1, argv + 1);
    }
    if (cmd[0] == '-') {
        ddp_warn("unknown option '%s'; see ddptrain --help", cmd);
        return DDP_EXIT_USAGE;
    }
    /* `ddptrain JOB.ini ...`: train; argv[0] stands in for the subcommand name */
    ddp_train_catch_early_signals();
    return ddp_cmd_train(argc, argv);
}

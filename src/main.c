/*
 * main.c - the ddptrain command: subcommand dispatch, --help, --version. Every subcommand
 * returns an exit code from util.h; nothing below main calls exit() for bad input.
 */
#include <cblas.h>
#include <hdf5.h>
#include <stdio.h>
#include <string.h>

#include "ddp_build.h"
#include "cli.h"
#include "config.h"
#include "launch/launcher.h"
#include "report/report.h"
#include "validate.h"
#include "train.h"
#include "util.h"
#if HAVE_MPI
#include <mpi.h>
#endif
#if HAVE_CUDA
#include "backend/cuda.h"
#endif
#if HAVE_NCCL
#include "comm/comm_nccl.h"
#endif

char *openblas_get_config(void);

static void print_help(FILE *f)
{
    fprintf(f,
            "ddptrain %s - data-parallel training for Slurm clusters\n\n"
            "usage:\n"
            "  ddptrain JOB.ini [--set SECTION.KEY=VALUE ...]   train (also: ddptrain train ...)\n"
            "  ddptrain eval JOB.ini --checkpoint PATH          test loss/accuracy of a checkpoint\n"
            "  ddptrain env                                     how each rank sees the world\n"
            "  ddptrain hostlist EXPR                           expand a Slurm hostlist\n"
            "  ddptrain data ...                                import or synthesise HDF5 datasets\n"
            "  ddptrain validate [--quick] [--json FILE]        node validation for admins\n"
            "  ddptrain launch --nproc-per-node N JOB.ini ...   start N local ranks (torchrun-like)\n"
            "  ddptrain check JOB.ini [--set ...]               everything before the first step\n"
            "  ddptrain report RUN_DIR [RUN_DIR...]             RUN_DIR/report.html: the curves\n"
            "  ddptrain export JOB.ini --checkpoint F --onnx O  the model as ONNX\n"
            "  ddptrain predict JOB.ini --checkpoint F --input X.h5 --output Y.h5\n"
            "                                                   logits of X's samples into Y.h5\n"
            "  ddptrain --version                               version and backends built in\n"
            "  ddptrain --job-reference                         every job-file key (Markdown)\n\n"
            "Run several ranks with srun (CPU: srun --mpi=pmix) or mpirun. Docs: README.md, "
            "docs/.\n",
            DDP_VERSION);
}

static int print_version(void)
{
    unsigned maj, min, rel;
    H5get_libversion(&maj, &min, &rel);
    printf("ddptrain %s\n", DDP_VERSION);
    printf("compute backends: cpu (%s)", openblas_get_config());
#if HAVE_CUDA
    printf(", cuda (%s)", ddp_cuda_version_string());
#endif
    printf("\n");
    printf("comm backends: self");
#if HAVE_MPI
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    char *nl = strchr(lib, ',');
    if (nl)
        *nl = '\0';
    printf(", mpi (%s)", lib);
#endif
#if HAVE_NCCL
    printf(", nccl (%s)", ddp_nccl_version_string());
#endif
    printf("\nbootstrap: %s\n", HAVE_PMI2 ? "pmi2, mpi, tcp" : "mpi, tcp");
    printf("hdf5: %u.%u.%u\n", maj, min, rel);
    return 0;
}

int main(int argc, char **argv)
{
    /* No HDF5 clean-up at exit: every file is closed explicitly, and after a failed close
     * (a full disk) HDF5 1.10's exit handler walks the half-closed file and crashes. */
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* we report HDF5 failures ourselves, in one line */
    if (argc > 1 && strcmp(argv[1], "env") && strcmp(argv[1], "hostlist") &&
        strcmp(argv[1], "data") && strcmp(argv[1], "launch") && strcmp(argv[1], "validate") &&
        strcmp(argv[1], "report") && argv[1][0] != '-')
        ddp_train_catch_early_signals();
    if (argc < 2) {
        print_help(stderr);
        return DDP_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        print_help(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version"))
        return print_version();
    if (!strcmp(cmd, "--job-reference")) {
        ddp_job_write_reference(stdout);
        return 0;
    }
    if (!strcmp(cmd, "train") || !strcmp(cmd, "eval") || !strcmp(cmd, "check") ||
        !strcmp(cmd, "export") || !strcmp(cmd, "predict"))
        return ddp_cmd_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "report"))
        return ddp_cmd_report(argc - 1, argv + 1);
    if (!strcmp(cmd, "env"))
        return ddp_cmd_env(argc - 1, argv + 1);
    if (!strcmp(cmd, "hostlist"))
        return ddp_cmd_hostlist(argc - 1, argv + 1);
    if (!strcmp(cmd, "data"))
        return ddp_cmd_data(argc - 1, argv + 1);
    if (!strcmp(cmd, "validate"))
        return ddp_cmd_validate(argc - 1, argv + 1);
    if (!strcmp(cmd, "launch"))
        return ddp_cmd_launch(argc - 1, argv + 1);
    if (!strcmp(cmd, "bootstrap-test")) /* hidden: exercises the bootstrap in tests */
        return ddp_cmd_bootstrap_test(argc - 1, argv + 1);
    if (cmd[0] == '-') {
        ddp_warn("unknown option '%s'; see ddptrain --help", cmd);
        return DDP_EXIT_USAGE;
    }
    /* `ddptrain JOB.ini ...`: train; argv[0] stands in for the subcommand name */
    return ddp_cmd_train(argc, argv);
}

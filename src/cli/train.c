/*
 * cli/train.c - the arguments of `ddptrain [train] JOB.ini`, `eval`, `check`, `export` and
 * `predict`: the job file, --set overrides (applied after the file), and the options of the
 * mode (cli/run_args.h). Loads and validates the
 * job, then hands it to the trainer (train/train.h).
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/run_args.h"
#include "core/util.h"
#include "job/config.h"
#include "job/recipe.h"
#include "train/train.h"

#define MAX_SETS 256 /* --set options per command line; more is a runaway script */

static void usage(FILE *f)
{
    fprintf(f, "usage: ddptrain [train] JOB.ini [--set SECTION.KEY=VALUE ...]\n"
               "       ddptrain eval JOB.ini --checkpoint PATH [--set ...]\n"
               "       ddptrain check JOB.ini [--set ...]\n"
               "       ddptrain export JOB.ini --checkpoint PATH --onnx OUT.onnx [--set ...]\n"
               "       ddptrain predict JOB.ini --checkpoint PATH --input X.h5 --output Y.h5 "
               "[--group G]\n"
               "  JOB.ini  job file (docs/job-file.md); --set overrides any key\n"
               "  PATH     a checkpoint or model.h5: its /model weights are evaluated on the\n"
               "           job's test split, on any number of ranks\n");
}

struct train_args {
    const char *job_path;
    struct ddp_run_args run; /* eval, check, export, predict (cli/run_args.h) */
    const char *sets[MAX_SETS];
    int nsets;
};

/* Returns -1 to go on, else the exit code (0 for --help). */
static int parse(int argc, char **argv, struct train_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--set") == 0 || strcmp(arg, "-s") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ddptrain: --set needs SECTION.KEY=VALUE\n");
                return DDP_EXIT_USAGE;
            }
            arg = argv[++i];
        } else if (strncmp(arg, "--set=", 6) == 0) {
            arg += 6;
        } else if (arg[0] == '-' && ddp_run_args_option(&a->run, argc, argv, &i)) {
            if (a->run.bad)
                return DDP_EXIT_USAGE;
            continue;
        } else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (arg[0] == '-') {
            ddp_warn("unknown option '%s'", arg);
            usage(stderr);
            return DDP_EXIT_USAGE;
        } else {
            if (a->job_path) {
                ddp_warn("two job files given ('%s' and '%s'); give one", a->job_path, arg);
                return DDP_EXIT_USAGE;
            }
            a->job_path = arg;
            continue;
        }
        if (a->nsets == MAX_SETS) {
            fprintf(stderr, "ddptrain: too many --set options\n");
            return DDP_EXIT_USAGE;
        }
        a->sets[a->nsets++] = arg;
    }
    if (ddp_run_args_check(&a->run, argv[0]) != 0) {
        usage(stderr);
        return DDP_EXIT_USAGE;
    }
    if (!a->job_path) {
        fprintf(stderr, "ddptrain: no job file given\n");
        usage(stderr);
        return DDP_EXIT_USAGE;
    }
    return -1;
}

int ddp_cmd_train(int argc, char **argv)
{
    static struct train_args a;
    memset(&a, 0, sizeof a);
    int rc = parse(argc, argv, &a);
    if (rc >= 0)
        return rc;
    char err[DDP_ERR_LEN * 2];
    struct ddp_job job;
    ddp_job_defaults(&job);
    if (ddp_job_load(&job, a.job_path, err, sizeof err) != 0)
        goto usage_error;
    for (int i = 0; i < a.nsets; i++)
        if (ddp_job_set(&job, a.sets[i], err, sizeof err) != 0)
            goto usage_error;
    if (ddp_job_validate(&job, err, sizeof err) != 0)
        goto usage_error;
    if (ddp_run_args_check_files(&a.run, argv[0], a.job_path, &job, err, sizeof err) != 0)
        goto usage_error;
    return ddp_train_run(&job, &a.run);
usage_error:
    ddp_warn("%s", err);
    ddp_job_free(&job);
    return DDP_EXIT_USAGE;
}

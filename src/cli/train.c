/*
 * cli/train.c - the arguments of `ddptrain [train] JOB.ini`, `eval`, `check`, `export`,
 * `predict` and `profile`: the job file, --set overrides (applied after the file), and the options of the
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

/* Each mode's own usage, by the subcommand's name (argv[0]; the program's name is train). */
static const struct {
    const char *name, *text;
} g_usage[] = {
    {"train",
     "usage: ddptrain [train] JOB.ini [--set SECTION.KEY=VALUE ...]\n"
     "Train the job's model on its data (docs/training.md), on as many ranks as the\n"
     "launcher starts (srun, mpirun, ddptrain launch).\n"
     "  JOB.ini           job file (docs/job-file.md, man ddptrain-job)\n"
     "  --set, -s S.K=V   override key K of section [S] after the file (repeatable)\n"
     "Exit 0 done, 1 runtime failure, 2 bad job or usage, 3 bad data or checkpoint, 4 launch,\n"
     "5 a peer failed, 75 stopped by a signal after a checkpoint (requeue).\n"},
    {"eval", "usage: ddptrain eval JOB.ini --checkpoint PATH [--set SECTION.KEY=VALUE ...]\n"
             "Test loss and accuracy of a checkpoint's weights on the job's test split, on any\n"
             "number of ranks.\n"
             "  --checkpoint PATH a checkpoint or model.h5: its /model weights\n"
             "  --set, -s S.K=V   override a job key (docs/job-file.md)\n"},
    {"check", "usage: ddptrain check JOB.ini [--set SECTION.KEY=VALUE ...]\n"
              "Everything before the first step: read and check the job, the data and the\n"
              "model, plan the memory, and print what a run would do; trains nothing.\n"
              "  --set, -s S.K=V   override a job key (docs/job-file.md)\n"},
    {"export", "usage: ddptrain export JOB.ini --checkpoint PATH --onnx OUT.onnx\n"
               "                       [--onnx-input uint8|float] [--set ...]\n"
               "Write the job's model with a checkpoint's weights as ONNX (docs/report.md).\n"
               "  --checkpoint PATH a checkpoint or model.h5: its /model weights\n"
               "  --onnx OUT.onnx   the file to write (never one of the inputs)\n"
               "  --onnx-input T    uint8: raw pixels, the graph divides by 255 and applies\n"
               "                    [data] normalize; float: samples already scaled and\n"
               "                    normalised. Default: uint8 when the job's images are\n"
               "                    stored as uint8, float when stored as float32\n"
               "  --set, -s S.K=V   override a job key (docs/job-file.md)\n"},
    {"predict", "usage: ddptrain predict JOB.ini --checkpoint PATH --input X.h5 --output Y.h5\n"
                "                        [--group G] [--set ...]\n"
                "Run a checkpoint's model over the samples of X.h5 and write their logits and\n"
                "predicted classes into Y.h5; with labels in G, also print the accuracy.\n"
                "  --checkpoint PATH a checkpoint or model.h5: its /model weights\n"
                "  --input X.h5      the samples: G/images, G/labels optional (default G: the\n"
                "                    job's test split name)\n"
                "  --output Y.h5     the file to write (never one of the inputs)\n"
                "  --group G         the group of X.h5 to read\n"
                "  --set, -s S.K=V   override a job key (docs/job-file.md)\n"},
    {"profile",
     "usage: ddptrain profile JOB.ini [--steps N] [--warmup N] [--json FILE] [--set ...]\n"
     "Where a training step's time goes, per layer: the job's model on this rank's\n"
     "device, as a run would choose it, on a random batch of the data's sample shape\n"
     "(only the data file's shape and classes are read). One process (docs/training.md).\n"
     "  --steps N         timed steps (default 10; medians)\n"
     "  --warmup N        untimed steps first (default 3)\n"
     "  --json FILE       the same numbers as JSON\n"
     "  --set, -s S.K=V   override a job key (docs/job-file.md)\n"
     "Exit 0 done, 1 runtime failure, 2 bad job or usage, 3 bad data, 4 launch.\n"},
};

static void usage(FILE *f, const char *subcommand)
{
    for (size_t i = 1; i < sizeof g_usage / sizeof g_usage[0]; i++)
        if (strcmp(subcommand, g_usage[i].name) == 0) {
            fputs(g_usage[i].text, f);
            return;
        }
    fputs(g_usage[0].text, f);
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
            usage(stdout, argv[0]);
            return 0;
        } else if (arg[0] == '-') {
            ddp_warn("unknown option '%s'", arg);
            usage(stderr, argv[0]);
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
        usage(stderr, argv[0]);
        return DDP_EXIT_USAGE;
    }
    if (!a->job_path) {
        fprintf(stderr, "ddptrain: no job file given\n");
        usage(stderr, argv[0]);
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

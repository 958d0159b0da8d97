/* run_args.c - options and final acts of eval, check, export and predict. See run_args.h. */
#include "cli/run_args.h"

#include <stdio.h>
#include <string.h>

#include "cli/predict.h"
#include "dist/world.h"
#include "report/onnx.h"
#include "core/util.h"

static const struct {
    const char *name;
    enum ddp_run_mode mode;
    size_t off;
} g_opts[] = {
    {"--checkpoint", DDP_RUN_EVAL, offsetof(struct ddp_run_args, checkpoint)},
    {"--checkpoint", DDP_RUN_EXPORT, offsetof(struct ddp_run_args, checkpoint)},
    {"--checkpoint", DDP_RUN_PREDICT, offsetof(struct ddp_run_args, checkpoint)},
    {"--onnx", DDP_RUN_EXPORT, offsetof(struct ddp_run_args, onnx)},
    {"--input", DDP_RUN_PREDICT, offsetof(struct ddp_run_args, input)},
    {"--output", DDP_RUN_PREDICT, offsetof(struct ddp_run_args, output)},
    {"--group", DDP_RUN_PREDICT, offsetof(struct ddp_run_args, group)},
};

static enum ddp_run_mode mode_of(const char *subcommand)
{
    static const char *names[] = {"train", "eval", "check", "export", "predict"};
    for (int i = 0; i < 5; i++)
        if (strcmp(subcommand, names[i]) == 0)
            return (enum ddp_run_mode)i;
    return DDP_RUN_TRAIN;
}

int ddp_run_args_option(struct ddp_run_args *a, int argc, char **argv, int *i)
{
    enum ddp_run_mode mode = mode_of(argv[0]);
    for (size_t k = 0; k < sizeof g_opts / sizeof g_opts[0]; k++) {
        if (g_opts[k].mode != mode || strcmp(argv[*i], g_opts[k].name) != 0)
            continue;
        if (*i + 1 >= argc) {
            ddp_warn("%s needs a value", g_opts[k].name);
            a->bad = 1;
            return 1;
        }
        *(const char **)((char *)a + g_opts[k].off) = argv[++*i];
        return 1;
    }
    return 0;
}

int ddp_run_args_check(struct ddp_run_args *a, const char *subcommand)
{
    a->mode = mode_of(subcommand);
    if (a->mode == DDP_RUN_EXPORT || a->mode == DDP_RUN_PREDICT)
        a->finish = ddp_run_args_finish;
    const char *need = NULL;
    if (a->mode == DDP_RUN_EVAL || a->mode == DDP_RUN_EXPORT || a->mode == DDP_RUN_PREDICT)
        need = a->checkpoint ? NULL : "--checkpoint PATH";
    if (!need && a->mode == DDP_RUN_EXPORT && !a->onnx)
        need = "--onnx OUT.onnx";
    if (!need && a->mode == DDP_RUN_PREDICT && !a->input)
        need = "--input X.h5";
    if (!need && a->mode == DDP_RUN_PREDICT && !a->output)
        need = "--output Y.h5";
    if (!need)
        return 0;
    ddp_warn("%s needs %s", subcommand, need);
    return -1;
}

int ddp_run_args_finish(const struct ddp_run_args *a, struct ddp_model *m,
                        const struct ddp_job *job, char *err, size_t errlen)
{
    if (ddp_log_rank() > 0)
        return 0;
    int rc = 0;
    if (a->mode == DDP_RUN_EXPORT) {
        if (ddp_onnx_write(m, a->onnx, job->name, err, errlen) != 0)
            rc = DDP_EXIT_USAGE;
        else
            ddp_log("exported %s (%zu parameters) to %s", a->checkpoint, m->nparams, a->onnx);
    } else if (a->mode == DDP_RUN_PREDICT) {
        const char *group = a->group ? a->group : (job->data_test[0] ? job->data_test : "/test");
        rc = ddp_predict(m, job, a->input, group, a->output, (int)job->batch_size, err, errlen);
    }
    if (rc)
        ddp_warn("%s", err);
    return rc;
}

/* run_args.c - options and final acts of eval, check, export and predict. See run_args.h. */
#include "cli/run_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/predict.h"
#include "core/fileio.h"
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

/* A file a command reads, as the user named it, for messages. */
struct input_file {
    const char *what; /* "--input", "the job file", ... */
    const char *path;
};

/* The first of the n inputs that is the file at path (same device and inode, so a symlink or
 * another spelling of the path counts), or NULL (also when path does not exist). */
static const struct input_file *same_as(const char *path, const struct input_file *in, int n)
{
    struct stat o, i;
    if (stat(path, &o) != 0)
        return NULL;
    for (int k = 0; k < n; k++)
        if (in[k].path && in[k].path[0] && stat(in[k].path, &i) == 0 && i.st_dev == o.st_dev &&
            i.st_ino == o.st_ino)
            return &in[k];
    return NULL;
}

int ddp_run_args_check_files(const struct ddp_run_args *a, const char *subcommand,
                             const char *job_path, const struct ddp_job *job, char *err,
                             size_t errlen)
{
    const char *opt = a->mode == DDP_RUN_EXPORT ? "--onnx" : "--output";
    const char *out = a->mode == DDP_RUN_EXPORT ? a->onnx : a->output;
    if ((a->mode != DDP_RUN_EXPORT && a->mode != DDP_RUN_PREDICT) || !out)
        return 0;
    const struct input_file in[] = {
        {"the job file", job_path},
        {"[data] file", job->data_file},
        {"[model] init", strcmp(job->init, "pytorch") == 0 ? NULL : job->init},
        {"--checkpoint", a->checkpoint},
        {"--input", a->mode == DDP_RUN_PREDICT ? a->input : NULL},
    };
    const int n = (int)(sizeof in / sizeof in[0]);
    const struct input_file *hit = same_as(out, in, n);
    if (hit)
        return ddp_err(err, errlen,
                       "%s: %s %s is the same file as %s %s; %s would replace its own input: "
                       "give another %s path",
                       subcommand, opt, out, hit->what, hit->path, subcommand, opt);
    /* the output is written first as OUT.tmp (truncated, then renamed): that must not be an
     * input either */
    char *tmp = ddp_file_tmp_path(out);
    hit = same_as(tmp, in, n);
    int rc = hit ? ddp_err(err, errlen,
                           "%s: %s %s is written first as %s, the same file as %s %s; %s would "
                           "replace its own input: give another %s path",
                           subcommand, opt, out, tmp, hit->what, hit->path, subcommand, opt)
                 : 0;
    free(tmp);
    if (rc == 0 && ddp_file_check_output(opt, out, err, errlen) != 0) {
        char line[DDP_ERR_LEN + DDP_PATH_MAX];
        snprintf(line, sizeof line, "%s: %s", subcommand, err);
        rc = ddp_err(err, errlen, "%s", line);
    }
    return rc;
}

int ddp_run_args_finish(const struct ddp_run_args *a, struct ddp_model *m,
                        const struct ddp_job *job, char *err, size_t errlen)
{
    if (ddp_log_rank() > 0)
        return 0;
    int rc = 0;
    if (a->mode == DDP_RUN_EXPORT) {
        if (ddp_onnx_write(m, a->onnx, job->name, err, errlen) != 0)
            rc = DDP_EXIT_RUNTIME; /* the path was checked up front: the write failed */
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

/* run_args.c - options and final acts of eval, check, export and predict. See run_args.h. */
#include "cli/run_args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/predict.h"
#include "data/augment.h"
#include "data/h5data.h"
#include "core/fileio.h"
#include "dist/world.h"
#include "report/onnx.h"
#include "core/util.h"
#include "train/profile.h" /* DDP_PROFILE_STEPS_MAX */

static const struct {
    const char *name;
    enum ddp_run_mode mode;
    size_t off;
} g_opts[] = {
    {"--checkpoint", DDP_RUN_EVAL, offsetof(struct ddp_run_args, checkpoint)},
    {"--checkpoint", DDP_RUN_EXPORT, offsetof(struct ddp_run_args, checkpoint)},
    {"--checkpoint", DDP_RUN_PREDICT, offsetof(struct ddp_run_args, checkpoint)},
    {"--onnx", DDP_RUN_EXPORT, offsetof(struct ddp_run_args, onnx)},
    {"--onnx-input", DDP_RUN_EXPORT, offsetof(struct ddp_run_args, onnx_input)},
    {"--input", DDP_RUN_PREDICT, offsetof(struct ddp_run_args, input)},
    {"--output", DDP_RUN_PREDICT, offsetof(struct ddp_run_args, output)},
    {"--group", DDP_RUN_PREDICT, offsetof(struct ddp_run_args, group)},
    {"--steps", DDP_RUN_PROFILE, offsetof(struct ddp_run_args, steps_text)},
    {"--warmup", DDP_RUN_PROFILE, offsetof(struct ddp_run_args, warmup_text)},
    {"--json", DDP_RUN_PROFILE, offsetof(struct ddp_run_args, json)},
};

static enum ddp_run_mode mode_of(const char *subcommand)
{
    static const char *names[] = {"train", "eval", "check", "export", "predict", "profile"};
    _Static_assert(sizeof names / sizeof *names == DDP_RUN_PROFILE + 1, "one name per mode");
    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
        if (strcmp(subcommand, names[i]) == 0)
            return (enum ddp_run_mode)i;
    return DDP_RUN_TRAIN;
}

/* profile's --steps (--warmup): text as a count in [lo, DDP_PROFILE_STEPS_MAX] into *out, else
 * -1 after one line naming the option. */
static int parse_count(const char *opt, const char *text, int lo, int *out)
{
    char *end;
    errno = 0;
    const long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > DDP_PROFILE_STEPS_MAX) {
        ddp_warn("profile: %s %s: expected a whole number from %d to %d", opt, text, lo,
                 DDP_PROFILE_STEPS_MAX);
        return -1;
    }
    *out = (int)v;
    return 0;
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
        const char *v = argv[++*i];
        *(const char **)((char *)a + g_opts[k].off) = v;
        const int is_steps = strcmp(g_opts[k].name, "--steps") == 0;
        if ((is_steps || strcmp(g_opts[k].name, "--warmup") == 0) &&
            parse_count(g_opts[k].name, v, is_steps ? 1 : 0, is_steps ? &a->steps : &a->warmup) !=
                0)
            a->bad = 1; /* one line, no usage: the value is wrong, not the command */
        return 1;
    }
    return 0;
}

int ddp_run_args_check(struct ddp_run_args *a, const char *subcommand)
{
    a->mode = mode_of(subcommand);
    if (a->mode == DDP_RUN_PROFILE) { /* the counts were parsed as they came */
        a->steps = a->steps_text ? a->steps : 10;
        a->warmup = a->warmup_text ? a->warmup : 3;
        return 0;
    }
    if (a->mode == DDP_RUN_EXPORT || a->mode == DDP_RUN_PREDICT)
        a->finish = ddp_run_args_finish;
    const char *need = NULL;
    if (a->mode == DDP_RUN_EVAL || a->mode == DDP_RUN_EXPORT || a->mode == DDP_RUN_PREDICT)
        need = a->checkpoint ? NULL : "--checkpoint PATH";
    if (!need && a->mode == DDP_RUN_EXPORT && !a->onnx)
        need = "--onnx OUT.onnx";
    if (!need && a->onnx_input && strcmp(a->onnx_input, "uint8") != 0 &&
        strcmp(a->onnx_input, "float") != 0) {
        ddp_warn("%s: --onnx-input %s: expected uint8 (raw pixels, scaled and normalised in the "
                 "graph) or float (samples already scaled and normalised)",
                 subcommand, a->onnx_input);
        return -1;
    }
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
    for (int k = 0; k < n; k++)
        if (ddp_file_same(path, in[k].path))
            return &in[k];
    return NULL;
}

int ddp_run_args_check_files(const struct ddp_run_args *a, const char *subcommand,
                             const char *job_path, const struct ddp_job *job, char *err,
                             size_t errlen)
{
    const char *opt = a->mode == DDP_RUN_EXPORT    ? "--onnx"
                      : a->mode == DDP_RUN_PROFILE ? "--json"
                                                   : "--output";
    const char *out = a->mode == DDP_RUN_EXPORT    ? a->onnx
                      : a->mode == DDP_RUN_PROFILE ? a->json
                                                   : a->output;
    if ((a->mode != DDP_RUN_EXPORT && a->mode != DDP_RUN_PREDICT && a->mode != DDP_RUN_PROFILE) ||
        !out)
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

/* The ONNX graph's input for export: --onnx-input, else by the dtype of the job's training
 * images (uint8: raw pixels; float32: float as stored). Logs the choice; an exit code. */
static int onnx_input_of(const struct ddp_run_args *a, const struct ddp_job *job,
                         struct ddp_onnx_input *in, char *err, size_t errlen)
{
    ddp_h5split *s = ddp_h5split_open_images(job->data_file, job->data_train, err, errlen);
    if (!s)
        return DDP_EXIT_DATA;
    int64_t dims[3];
    int nd = ddp_h5split_shape(s, dims);
    int stored_u8 = ddp_h5split_dtype(s) == DDP_H5DTYPE_UINT8;
    ddp_h5split_close(s);
    memset(in, 0, sizeof *in);
    in->uint8 = a->onnx_input ? strcmp(a->onnx_input, "uint8") == 0 : stored_u8;
    if (in->uint8 && !stored_u8)
        return ddp_err(err, errlen,
                       "export: --onnx-input uint8, but %s %s stores float32 images, which "
                       "ddptrain reads as they are (no division by 255); give --onnx-input "
                       "float or leave it out",
                       job->data_file, job->data_train);
    struct ddp_augment norm;
    ddp_augment_init(&norm, job, nd, dims, 0);
    const char *nm = norm.nchan ? " and normalised by [data] normalize" : "";
    if (in->uint8) {
        in->nchan = norm.nchan;
        memcpy(in->mean, norm.mean, sizeof in->mean);
        memcpy(in->std, norm.std, sizeof in->std);
        ddp_log("ONNX input: uint8 pixels as %s stores them, divided by 255%s inside the "
                "graph as the trainer does (--onnx-input float for float32 samples)",
                job->data_file, nm);
    } else if (!stored_u8) {
        ddp_log("ONNX input: float32, as %s stores its images; feed them as stored%s",
                job->data_file, norm.nchan ? ", normalised by [data] normalize" : "");
    } else {
        ddp_log("ONNX input: float32 samples, already divided by 255%s (--onnx-input float)", nm);
    }
    return 0;
}

int ddp_run_args_finish(const struct ddp_run_args *a, struct ddp_model *m,
                        const struct ddp_job *job, char *err, size_t errlen)
{
    if (ddp_log_rank() > 0)
        return 0;
    int rc = 0;
    if (a->mode == DDP_RUN_EXPORT) {
        struct ddp_onnx_input in;
        rc = onnx_input_of(a, job, &in, err, errlen);
        if (rc == -1)
            rc = DDP_EXIT_USAGE;
        if (!rc && ddp_onnx_write(m, a->onnx, job->name, &in, err, errlen) != 0)
            rc = DDP_EXIT_RUNTIME; /* the path was checked up front: the write failed */
        else if (!rc)
            ddp_log("exported %s (%zu parameters) to %s", a->checkpoint, m->nparams, a->onnx);
    } else if (a->mode == DDP_RUN_PREDICT) {
        const char *group = a->group ? a->group : (job->data_test[0] ? job->data_test : "/test");
        rc = ddp_predict(m, job, a->input, group, a->output, (int)job->batch_size, err, errlen);
    }
    if (rc)
        ddp_warn("%s", err);
    return rc;
}

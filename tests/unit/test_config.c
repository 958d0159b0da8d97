/*
 * test_config.c - the job schema (job/config.h, job/recipe.h): defaults, a job file over them,
 * --set overrides and their precedence, where a value came from, the effective job written
 * and read back unchanged, continuation lines of [model] layers located by line and column,
 * and the cross-key checks refused with the key named.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "job/config.h"
#include "job/recipe.h"

static char g_dir[] = "/tmp/test_config.XXXXXX";

static const char *write_job(const char *name, const char *body)
{
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    fputs(body, f);
    fclose(f);
    return path;
}

static const char JOB[] = "[job]\nname = t\nseed = 7\n"
                          "[data]\nfile = d.h5\nbatch_size = 32\nnormalize = 0.5, 0.25\n"
                          "[model]\nlayers = flatten,\n"
                          "         linear(16), relu,\n"
                          "         linear(10)\n"
                          "[optim]\nname = adam\nlr = 0.003\n"
                          "[train]\nepochs = 3\n";

static void test_load_and_set(void)
{
    struct ddp_job job;
    char err[512] = "", where[256];
    ddp_job_defaults(&job);
    const int64_t default_batch = job.batch_size;
    const char *path = write_job("a.ini", JOB);
    CHECK(ddp_job_load(&job, path, err, sizeof err) == 0, "load: %s", err);
    CHECK(job.batch_size == 32 && job.seed == 7 && job.epochs == 3 && job.lr == 0.003,
          "values: batch %lld seed %lld epochs %lld lr %g", (long long)job.batch_size,
          (long long)job.seed, (long long)job.epochs, job.lr);
    CHECK(default_batch != 32, "test needs a non-default batch size");
    CHECK(job.optim == DDP_OPTIM_ADAM, "optim %d", job.optim);
    CHECK(strstr(job.layers, "linear(16)") && strstr(job.layers, "linear(10)"), "layers '%s'",
          job.layers);
    ddp_job_where(&job, "data", "batch_size", where, sizeof where);
    CHECK(strstr(where, "a.ini:6") && strstr(where, "[data] batch_size"), "where: %s", where);
    ddp_job_where(&job, "train", "log_every", where, sizeof where);
    CHECK(strstr(where, "default"), "default where: %s", where);

    /* the third piece of layers starts on line 11, column 10 */
    int off = (int)(strstr(job.layers, "linear(10)") - job.layers);
    ddp_job_where_layers(&job, off, where, sizeof where);
    CHECK(strstr(where, "a.ini:11:10"), "layers where: %s", where);

    CHECK(ddp_job_set(&job, "data.batch_size=64", err, sizeof err) == 0, "set: %s", err);
    CHECK(job.batch_size == 64, "set batch %lld", (long long)job.batch_size);
    ddp_job_where(&job, "data", "batch_size", where, sizeof where);
    CHECK(strstr(where, "--set"), "where after --set: %s", where);
    CHECK(ddp_job_set(&job, "data.batch_sise=64", err, sizeof err) == -1 &&
              strstr(err, "batch_size"),
          "typo in --set: %s", err);
    CHECK(ddp_job_set(&job, "optim.lr", err, sizeof err) == -1 && strstr(err, "="),
          "--set without '=': %s", err);
    CHECK(ddp_job_set(&job, "optim.lr=-1", err, sizeof err) == -1 && strstr(err, "lr"),
          "negative lr: %s", err);
    ddp_job_free(&job);
}

/* The effective job written out loads back to the same values. */
static void test_round_trip(void)
{
    struct ddp_job a, b;
    char err[512] = "", path[600];
    ddp_job_defaults(&a);
    CHECK(ddp_job_load(&a, write_job("b.ini", JOB), err, sizeof err) == 0, "load: %s", err);
    CHECK(ddp_job_set(&a, "optim.weight_decay=0.01", err, sizeof err) == 0, "set: %s", err);
    snprintf(path, sizeof path, "%s/effective.ini", g_dir);
    FILE *f = fopen(path, "w");
    ddp_job_write(&a, f);
    fclose(f);
    ddp_job_defaults(&b);
    CHECK(ddp_job_load(&b, path, err, sizeof err) == 0, "reload: %s", err);
    CHECK(a.batch_size == b.batch_size && a.lr == b.lr && a.weight_decay == b.weight_decay &&
              a.optim == b.optim && a.epochs == b.epochs && a.seed == b.seed,
          "values differ after the round trip");
    CHECK(!strcmp(a.layers, b.layers) && !strcmp(a.normalize, b.normalize) &&
              !strcmp(a.data_file, b.data_file),
          "text values differ: '%s' / '%s'", a.layers, b.layers);
    ddp_job_free(&a);
    ddp_job_free(&b);
}

/* A job that loads but breaks a cross-key rule: ddp_job_validate names the key. */
static void refused(const char *set, const char *frag)
{
    struct ddp_job job;
    char err[512] = "";
    ddp_job_defaults(&job);
    int rc = ddp_job_load(&job, write_job("c.ini", JOB), err, sizeof err);
    CHECK(rc == 0, "load: %s", err);
    if (set)
        rc = ddp_job_set(&job, set, err, sizeof err);
    if (rc == 0)
        rc = ddp_job_validate(&job, err, sizeof err);
    CHECK(rc == -1, "accepted: %s", set ? set : "(file)");
    CHECK(strstr(err, frag) && !strchr(err, '\n'), "%s: message '%s' lacks '%s'", set, err, frag);
    ddp_job_free(&job);
}

static void test_validate(void)
{
    struct ddp_job job;
    char err[512] = "";
    ddp_job_defaults(&job);
    CHECK(ddp_job_load(&job, write_job("d.ini", JOB), err, sizeof err) == 0, "load: %s", err);
    CHECK(ddp_job_validate(&job, err, sizeof err) == 0, "valid job refused: %s", err);
    CHECK(job.norm_channels == 1, "normalize parsed into %d channels", job.norm_channels);
    ddp_job_free(&job);

    refused("data.normalize=0.5", "normalize");
    refused("data.normalize=0.5, 0", "normalize");
    refused("data.augment=hflip, hflip", "augment");
    refused("data.augment=random_crop(pad=-1)", "random_crop");
    refused("optim.schedule=multistep", "milestones");
    refused("optim.milestones=3, 2", "milestones");
}

int main(void)
{
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_load_and_set();
    test_round_trip();
    test_validate();
    return check_report_dir("test_config", g_dir);
}

/*
 * test_ckpt.c - checkpoints (train/ckpt.h) written and read back in a scratch directory: the
 * round trip is exact, the newest `keep` survive, a stray temporary file is ignored, and a
 * flipped tensor byte, a torn file, another model's checkpoint or a missing file are refused
 * with one line naming the file.
 */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "check.h"
#include "job/config.h"
#include "nn/model.h"
#include "train/ckpt.h"
#include "train/optim.h"

#define LAYERS "conv2d(4, 3, pad=1), batchnorm, relu, flatten, linear(3)"

static char g_dir[] = "/tmp/test_ckpt.XXXXXX";

struct net {
    struct ddp_model m;
    struct ddp_optim o;
    struct ddp_job job;
};

static void net_make(struct net *n, const char *layers, uint64_t seed)
{
    char err[512];
    const int64_t dims[3] = {1, 6, 6};
    memset(n, 0, sizeof *n);
    ddp_job_defaults(&n->job);
    CHECK(ddp_job_set(&n->job, "optim.momentum=0.9", err, sizeof err) == 0, "%s", err);
    CHECK(ddp_model_create(&n->m, ddp_backend_cpu(), layers, 3, dims, 4, err, sizeof err) == 0,
          "model: %s", err);
    ddp_model_init(&n->m, seed);
    ddp_optim_init(&n->o, n->m.be, &n->job, n->m.nparams, 1);
    for (size_t i = 0; i < n->m.nparams; i++)
        n->o.state1[i] = (float)sin((double)i + (double)seed);
    for (size_t i = 0; i < n->m.nbuffers; i++)
        n->m.buffers[i] = (float)(0.5 + 0.01 * (double)i);
    n->o.t = 17;
}

static void net_free(struct net *n)
{
    ddp_optim_free(&n->o);
    ddp_model_free(&n->m);
    ddp_job_free(&n->job);
}

static struct ddp_ckpt_pos pos_at(int64_t step)
{
    struct ddp_ckpt_pos p = {.epoch = 2,
                             .step = step,
                             .cursor = 96,
                             .world_size = 2,
                             .global_batch = 8,
                             .seed = 1234,
                             .train_ms = 5000,
                             .best = 0.875,
                             .best_epoch = 2,
                             .since_best = 1};
    return p;
}

static void save(struct net *n, const char *dir, int64_t step, int keep, char *path, size_t len)
{
    char err[512];
    struct ddp_ckpt_pos p = pos_at(step);
    CHECK(ddp_ckpt_save(dir, &n->m, &n->o, &p, "[job]\nname = t\n", keep, path, len, err,
                        sizeof err) == 0,
          "save: %s", err);
}

static void test_round_trip(void)
{
    struct net a, b;
    char path[600], err[512];
    net_make(&a, LAYERS, 1);
    net_make(&b, LAYERS, 2);
    save(&a, g_dir, 40, 3, path, sizeof path);
    struct ddp_ckpt_pos got;
    CHECK(ddp_ckpt_load(path, &b.m, &b.o, &got, err, sizeof err) == 0, "load: %s", err);
    CHECK(!memcmp(a.m.params, b.m.params, a.m.nparams * sizeof(float)), "params differ");
    CHECK(!memcmp(a.m.buffers, b.m.buffers, a.m.nbuffers * sizeof(float)), "buffers differ");
    CHECK(!memcmp(a.o.state1, b.o.state1, a.m.nparams * sizeof(float)), "momentum differs");
    CHECK(b.o.t == 17, "optimiser steps %lld", (long long)b.o.t);
    struct ddp_ckpt_pos want = pos_at(40);
    CHECK(got.epoch == want.epoch && got.step == 40 && got.cursor == want.cursor &&
              got.world_size == 2 && got.global_batch == 8 && got.seed == 1234,
          "position %lld %lld %lld", (long long)got.epoch, (long long)got.step,
          (long long)got.cursor);
    CHECK(got.best == 0.875 && got.best_epoch == 2 && got.since_best == 1, "model selection");

    char *job = NULL;
    int64_t gb = 0;
    CHECK(ddp_ckpt_read_job(path, &job, &gb, err, sizeof err) == 0 && job &&
              strstr(job, "name = t") && gb == 8,
          "read_job: %s", err);
    free(job);

    struct net c;
    net_make(&c, LAYERS, 3);
    CHECK(ddp_ckpt_load_weights(path, &c.m, err, sizeof err) == 0, "load_weights: %s", err);
    CHECK(!memcmp(a.m.params, c.m.params, a.m.nparams * sizeof(float)), "weights differ");
    net_free(&a);
    net_free(&b);
    net_free(&c);
}

static void test_keep(void)
{
    struct net a;
    char dir[700], path[800];
    snprintf(dir, sizeof dir, "%s/keep", g_dir);
    net_make(&a, LAYERS, 1);
    for (int64_t s = 10; s <= 50; s += 10)
        save(&a, dir, s, 2, path, sizeof path);
    snprintf(path, sizeof path, "%s/ckpt-00000099.h5.tmp", dir);
    FILE *f = fopen(path, "w");
    fputs("torn", f);
    fclose(f);
    char **paths = NULL;
    int n = ddp_ckpt_list(dir, &paths);
    CHECK(n == 2, "%d checkpoints kept, want 2", n);
    CHECK(n >= 2 && strstr(paths[0], "ckpt-00000050.h5") && strstr(paths[1], "ckpt-00000040.h5"),
          "newest first: %s, %s", n > 0 ? paths[0] : "-", n > 1 ? paths[1] : "-");
    ddp_ckpt_free_list(paths, n);
    CHECK(ddp_ckpt_list("/nonexistent/dir", &paths) == 0, "a missing directory lists none");
    net_free(&a);
}

/* Add 1 to the first float of the dataset name in path, through HDF5. */
static void poke(const char *path, const char *name)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    CHECK(f >= 0 && d >= 0, "open %s in %s", name, path);
    hid_t sp = H5Dget_space(d);
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    float *v = malloc(sizeof(float) * (size_t)n);
    H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    v[0] += 1.0f;
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    free(v);
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(f);
}

/* load must fail with a message naming path and holding frag. */
static void refused(struct net *n, const char *path, const char *frag, const char *what)
{
    char err[512] = "";
    struct ddp_ckpt_pos got;
    CHECK(ddp_ckpt_load(path, &n->m, &n->o, &got, err, sizeof err) == -1, "%s: loaded", what);
    CHECK(strstr(err, path) && strstr(err, frag), "%s: message '%s' lacks the file or '%s'", what,
          err, frag);
    CHECK(!strchr(err, '\n'), "%s: message is not one line", what);
}

static void test_damage(void)
{
    struct net a;
    char dir[700], path[800], copy[900], cmd[2000];
    snprintf(dir, sizeof dir, "%s/damage", g_dir);
    net_make(&a, LAYERS, 1);
    save(&a, dir, 10, 3, path, sizeof path);

    snprintf(copy, sizeof copy, "%s/flipped.h5", dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, copy);
    CHECK(system(cmd) == 0, "%s", cmd);
    poke(copy, "/model/4.weight");
    refused(&a, copy, "checksum", "a changed weight");

    snprintf(copy, sizeof copy, "%s/torn.h5", dir);
    snprintf(cmd, sizeof cmd, "head -c 3000 '%s' > '%s'", path, copy);
    CHECK(system(cmd) == 0, "%s", cmd);
    refused(&a, copy, "", "a torn file");

    snprintf(copy, sizeof copy, "%s/absent.h5", dir);
    refused(&a, copy, "", "a missing file");

    struct net other;
    net_make(&other, "conv2d(4, 3, pad=1), batchnorm, relu, flatten, linear(5)", 1);
    refused(&other, path, "4.weight", "another model's checkpoint");
    char err[512] = "";
    CHECK(ddp_ckpt_load_weights(path, &other.m, err, sizeof err) == -1 && strstr(err, path),
          "another model's weights: %s", err);
    net_free(&other);
    net_free(&a);
}

int main(void)
{
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    test_round_trip();
    test_keep();
    test_damage();
    return check_report_dir("test_ckpt", g_dir);
}

/*
 * test_binding.c - the GPU binding doctor (binding.h) against a table of layouts: local rank
 * and size, the variables Slurm or the user set, the device count a driver would report.
 * Includes the layouts seen on the test cluster (tests/slurm/cases/20-gpu-binding.sh runs
 * the same rules under a real srun). No GPU and no process environment are used.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/binding.h"
#include "core/util.h"
#include "check.h"

#define MAXVARS 8
struct row {
    const char *what;
    int local_rank, local_size, driver, require;
    const char *kv[MAXVARS][2];
    int device;          /* expected device when ok (-1 = cpu) */
    const char *visible; /* expected visible_list */
    const char *err1;    /* NULL: must succeed; else the error must contain err1 ... */
    const char *err2;    /* ... and err2 (when given) */
    int per_task;        /* expected per_task flag when ok */
};

static const char *lookup(void *ctx, const char *name)
{
    const struct row *r = ctx;
    for (int i = 0; i < MAXVARS && r->kv[i][0]; i++)
        if (strcmp(r->kv[i][0], name) == 0)
            return r->kv[i][1];
    return NULL;
}

#define SLURM                \
    {                        \
        "SLURM_STEP_ID", "0" \
    }
#define NONE       \
    {              \
        NULL, NULL \
    }

static const struct row ROWS[] = {
    /* no GPU anywhere */
    {"cpu build, nothing visible", 0, 1, -1, 0, {NONE}, -1, "none", NULL, NULL, 0},
    {"cpu build, 4 ranks, nothing visible", 3, 4, -1, 0, {NONE}, -1, "none", NULL, NULL, 0},
    {"driver sees none, GPU required",
     0,
     2,
     0,
     1,
     {NONE},
     -1,
     "none",
     "no GPU visible",
     "backend = mpi",
     0},
    {"empty CUDA_VISIBLE_DEVICES under Slurm, required",
     1,
     2,
     0,
     1,
     {{"CUDA_VISIBLE_DEVICES", ""}, SLURM, NONE},
     -1,
     "none",
     "no GPU visible",
     "srun --gres=gpu:2",
     0},
    {"empty CUDA_VISIBLE_DEVICES, not required",
     0,
     2,
     0,
     0,
     {{"CUDA_VISIBLE_DEVICES", ""}, NONE},
     -1,
     "none",
     NULL,
     NULL,
     0},

    /* every task sees all GPUs: local rank L -> device L */
    {"srun --gres=gpu:4 --ntasks-per-node=4, rank L=0",
     0,
     4,
     4,
     1,
     {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"},
      {"SLURM_STEP_GPUS", "0,1,2,3"},
      {"SLURM_GPUS_ON_NODE", "4"},
      SLURM,
      NONE},
     0,
     "0,1,2,3",
     NULL,
     NULL,
     0},
    {"srun --gres=gpu:4 --ntasks-per-node=4, rank L=3",
     3,
     4,
     4,
     1,
     {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"},
      {"SLURM_STEP_GPUS", "0,1,2,3"},
      {"SLURM_GPUS_ON_NODE", "4"},
      SLURM,
      NONE},
     3,
     "0,1,2,3",
     NULL,
     NULL,
     0},
    {"cpu build still computes the would-be binding",
     2,
     4,
     -1,
     0,
     {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}, NONE},
     2,
     "0,1,2,3",
     NULL,
     NULL,
     0},
    {"no CUDA_VISIBLE_DEVICES, driver sees 8",
     5,
     8,
     8,
     1,
     {NONE},
     5,
     "0,1,2,3,4,5,6,7",
     NULL,
     NULL,
     0},
    {"fewer ranks than GPUs: the rest stay idle",
     1,
     2,
     4,
     1,
     {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}, SLURM, NONE},
     1,
     "0,1,2,3",
     NULL,
     NULL,
     0},
    {"a subset of the node's GPUs",
     1,
     2,
     2,
     1,
     {{"CUDA_VISIBLE_DEVICES", "1,3"}, NONE},
     1,
     "1,3",
     NULL,
     NULL,
     0},
    {"UUIDs",
     1,
     2,
     -1,
     0,
     {{"CUDA_VISIBLE_DEVICES", "GPU-8e2a6a44-0001,GPU-8e2a6a44-0002"}, NONE},
     1,
     "GPU-8e2a6a44-0001,GPU-8e2a6a44-0002",
     NULL,
     NULL,
     0},

    /* one GPU per task (--gpus-per-task=1): each binds its only device */
    {"srun --gpus-per-task=1, task 2 of 3 on n1",
     2,
     3,
     1,
     1,
     {{"CUDA_VISIBLE_DEVICES", "2"},
      {"SLURM_STEP_GPUS", "2"},
      {"SLURM_GPUS_ON_NODE", "3"},
      SLURM,
      NONE},
     0,
     "2",
     NULL,
     NULL,
     1},
    {"srun --gpus-per-task=1, only task on n2",
     0,
     1,
     1,
     1,
     {{"CUDA_VISIBLE_DEVICES", "0"},
      {"SLURM_STEP_GPUS", "0"},
      {"SLURM_GPUS_ON_NODE", "1"},
      SLURM,
      NONE},
     0,
     "0",
     NULL,
     NULL,
     0},
    {"--gpus-per-task=2 with SLURM_GPUS_PER_TASK",
     1,
     2,
     2,
     1,
     {{"CUDA_VISIBLE_DEVICES", "2,3"}, {"SLURM_GPUS_PER_TASK", "2"}, SLURM, NONE},
     0,
     "2,3",
     NULL,
     NULL,
     1},
    {"--gpus-per-task=2 seen through SLURM_GPUS_ON_NODE",
     1,
     3,
     2,
     1,
     {{"CUDA_VISIBLE_DEVICES", "2,3"}, {"SLURM_GPUS_ON_NODE", "6"}, SLURM, NONE},
     0,
     "2,3",
     NULL,
     NULL,
     1},

    /* two local ranks on one device */
    {"srun -n 2 --gres=gpu:1: both see device 0",
     1,
     2,
     1,
     1,
     {{"CUDA_VISIBLE_DEVICES", "0"},
      {"SLURM_STEP_GPUS", "0"},
      {"SLURM_GPUS_ON_NODE", "1"},
      SLURM,
      NONE},
     -1,
     "0",
     "share device 0",
     "srun --gpus-per-task=1",
     0},
    {"launch --nproc-per-node 2 with one visible GPU",
     0,
     2,
     1,
     1,
     {{"CUDA_VISIBLE_DEVICES", "0"}, NONE},
     -1,
     "0",
     "share device 0",
     "--nproc-per-node 1",
     0},

    /* more local ranks than visible devices */
    {"srun -N 2 -n 8 --gres=gpu:4 packs 7 tasks on n1",
     6,
     7,
     4,
     1,
     {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"},
      {"SLURM_STEP_GPUS", "0,1,2,3"},
      {"SLURM_GPUS_ON_NODE", "4"},
      SLURM,
      NONE},
     -1,
     "0,1,2,3",
     "more local ranks (7) than visible GPUs (4",
     "--ntasks-per-node",
     0},
    {"... and local rank 0 of those 7 fails alike",
     0,
     7,
     4,
     1,
     {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}, {"SLURM_GPUS_ON_NODE", "4"}, SLURM, NONE},
     -1,
     "0,1,2,3",
     "local ranks 4-6 would share",
     NULL,
     0},
    {"subset too small outside Slurm",
     0,
     3,
     2,
     1,
     {{"CUDA_VISIBLE_DEVICES", "1,3"}, NONE},
     -1,
     "1,3",
     "more local ranks (3)",
     "ddptrain launch --nproc-per-node",
     0},
    {"one rank too many is named alone",
     0,
     3,
     2,
     1,
     {{"CUDA_VISIBLE_DEVICES", "1,3"}, NONE},
     -1,
     "1,3",
     "this node: local rank 2 would share a device;",
     NULL,
     0},
    {"cpu build: a conflict is still reported (caller ignores it)",
     1,
     2,
     -1,
     0,
     {{"CUDA_VISIBLE_DEVICES", "0"}, NONE},
     -1,
     "0",
     "share device 0",
     NULL,
     0},

    /* SLURM_STEP_GPUS without CUDA_VISIBLE_DEVICES */
    {"step GPUs 2,3, driver sees all 4 (no cgroup)",
     1,
     2,
     4,
     1,
     {{"SLURM_STEP_GPUS", "2,3"}, {"SLURM_GPUS_ON_NODE", "2"}, SLURM, NONE},
     3,
     "2,3",
     NULL,
     NULL,
     0},
    {"step GPUs 2,3, driver sees 2 (cgroup)",
     1,
     2,
     2,
     1,
     {{"SLURM_STEP_GPUS", "2,3"}, {"SLURM_GPUS_ON_NODE", "2"}, SLURM, NONE},
     1,
     "2,3",
     NULL,
     NULL,
     0},
    {"step GPUs unreadable",
     0,
     1,
     4,
     1,
     {{"SLURM_STEP_GPUS", "gpu2"}, SLURM, NONE},
     -1,
     "gpu2",
     "SLURM_STEP_GPUS",
     "CUDA_VISIBLE_DEVICES",
     0},

    /* the driver reports fewer than listed: CUDA stopped at a bad entry */
    {"listed 3, driver 2",
     1,
     2,
     2,
     1,
     {{"CUDA_VISIBLE_DEVICES", "0,1,7"}, NONE},
     1,
     "0,1,7",
     NULL,
     NULL,
     0},
    {"listed 3, driver 1, two ranks",
     1,
     2,
     1,
     1,
     {{"CUDA_VISIBLE_DEVICES", "0,9,1"}, NONE},
     -1,
     "0,9,1",
     "share device 0",
     NULL,
     0},

    /* bad calls */
    {"local rank out of range", 2, 2, 4, 1, {NONE}, -1, "none", "internal error", NULL, 0},
};

static void table(void)
{
    for (size_t i = 0; i < sizeof ROWS / sizeof *ROWS; i++) {
        const struct row *r = &ROWS[i];
        struct ddp_binding b;
        char err[DDP_ERR_LEN] = "";
        int rc = ddp_binding_compute(r->local_rank, r->local_size, r->driver, r->require, lookup,
                                     (void *)r, &b, err, sizeof err);
        if (getenv("DDP_TEST_VERBOSE"))
            printf("%-52s -> rc=%d device=%d visible=%s %s\n", r->what, rc, b.device,
                   b.visible_list, err);
        CHECK(strcmp(b.visible_list, r->visible) == 0, "%s: visible '%s', want '%s'", r->what,
              b.visible_list, r->visible);
        if (!r->err1) {
            CHECK(rc == 0, "%s: unexpected error: %s", r->what, err);
            CHECK(b.device == r->device, "%s: device %d, want %d", r->what, b.device, r->device);
            CHECK(b.per_task == r->per_task, "%s: per_task %d, want %d", r->what, b.per_task,
                  r->per_task);
        } else {
            CHECK(rc == -1, "%s: accepted (device %d), want an error with '%s'", r->what, b.device,
                  r->err1);
            CHECK(err[0] && !strchr(err, '\n'), "%s: error is not one line: '%s'", r->what, err);
            CHECK(strstr(err, r->err1) != NULL, "%s: error '%s' lacks '%s'", r->what, err, r->err1);
            if (r->err2)
                CHECK(strstr(err, r->err2) != NULL, "%s: error '%s' lacks '%s'", r->what, err,
                      r->err2);
            CHECK(b.device == -1, "%s: device %d on error", r->what, b.device);
        }
    }
}

/* The note when the driver reports fewer devices than listed. */
static void note(void)
{
    struct row r = {"note", 0,  1,    2,    1, {{"CUDA_VISIBLE_DEVICES", "0,1,7"}, NONE},
                    0,      "", NULL, NULL, 0};
    struct ddp_binding b;
    char err[DDP_ERR_LEN] = "";
    CHECK(ddp_binding_compute(0, 1, 2, 1, lookup, &r, &b, err, sizeof err) == 0, "note: %s", err);
    CHECK(strstr(b.note, "lists 3") && strstr(b.note, "reports 2"), "note '%s'", b.note);
    CHECK(ddp_binding_compute(0, 1, 3, 1, lookup, &r, &b, err, sizeof err) == 0 &&
              b.note[0] == '\0',
          "no note when the counts agree: '%s'", b.note);
}

/* A list longer than the field is cut with "...". */
static void long_list(void)
{
    char list[600];
    int k = 0;
    for (int i = 0; i < 128; i++)
        k += snprintf(list + k, sizeof list - (size_t)k, "%s%d", i ? "," : "", i);
    struct row r = {"long", 0,  1,    -1,   0, {{"CUDA_VISIBLE_DEVICES", list}, NONE},
                    0,      "", NULL, NULL, 0};
    struct ddp_binding b;
    char err[DDP_ERR_LEN];
    CHECK(ddp_binding_compute(5, 128, -1, 0, lookup, &r, &b, err, sizeof err) == 0 &&
              b.device == 5 && b.visible == 128,
          "128 listed devices: device %d visible %d (%s)", b.device, b.visible, err);
    size_t n = strlen(b.visible_list);
    CHECK(n == sizeof b.visible_list - 1 && strcmp(b.visible_list + n - 3, "...") == 0,
          "long list not cut with ...: '%s'", b.visible_list);
}

static void fake_driver(void)
{
    static const struct {
        int node;
        const char *cvd;
        int want;
    } T[] = {
        {4, NULL, 4},    {4, "0,1,2,3", 4}, {4, "", 0},          {4, "1,7,2", 1}, {4, "0,0", 1},
        {4, "GPU-x", 0}, {0, NULL, 0},      {4, " 1 , 2 ", 2},   {4, "3,", 1},    {4, "2", 1},
        {8, "7,6,5", 3}, {4, "-1", 0},      {4, "0,1,2,3,4", 4}, {-1, NULL, 0},
    };
    for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
        int got = ddp_binding_fake_driver_count(T[i].node, T[i].cvd);
        CHECK(got == T[i].want, "fake driver: %d GPUs, CUDA_VISIBLE_DEVICES=%s: %d, want %d",
              T[i].node, T[i].cvd ? T[i].cvd : "(unset)", got, T[i].want);
    }
}

int main(void)
{
    table();
    note();
    long_list();
    fake_driver();
    printf("binding: %d checks, %d failed\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}

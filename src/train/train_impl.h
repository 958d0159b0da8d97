/*
 * train_impl.h - what the trainer's two files share and nothing else includes: the trainer's
 * state (struct trainer), built by train.c's setup and driven by train_loop.c's epoch loop,
 * and the functions one file offers the other.
 */
#ifndef DDP_TRAIN_IMPL_H
#define DDP_TRAIN_IMPL_H

#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "ddp_build.h"
#include "backend/backend.h"
#include "backend/blas_core.h"
#include "backend/select.h"
#include "comm/comm.h"
#include "comm/liveness.h"
#include "train/ckpt.h"
#include "job/config.h"
#include "data/h5data.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "train/grad_sync.h"
#include "train/graph.h"
#include "dist/bootstrap.h"
#include "dist/world.h"
#include "train/metrics.h"
#include "nn/model.h"
#include "nn/weights.h"
#include "train/optim.h"
#include "train/outdir.h"
#include "train/jobdiff.h"
#include "train/signals.h"
#include "train/step.h"
#include "train/profile.h"
#include "train/summary.h"
#include "train/valsel.h"
#include "job/recipe.h"
#include "data/augment.h"
#include "report/report.h"
#include "core/testhooks.h"
#include "core/util.h"
#include "train/train.h"

#define HOST_FIELD DDP_HOST_MAX /* bytes per rank in the gathered host table */

struct loop;

struct trainer {
    struct ddp_job job;
    struct ddp_world world;
    ddp_comm *comm;
    const struct ddp_backend *be;
    int threads;
    char *hosts; /* (W, HOST_FIELD) */
    ddp_h5split *train, *test;
    struct ddp_sampler train_sampler, test_sampler;
    ddp_loader *train_loader, *test_loader;
    ddp_h5split *val;                       /* [data] val's split; NULL: none or val_fraction */
    struct ddp_sampler val_sampler;         /* over val, or over the held-out part of train */
    ddp_loader *val_loader;                 /* NULL: no validation split */
    int64_t *train_part, *val_part;         /* val_fraction: the train split's two parts */
    int64_t ntrain, nval;                   /* samples trained on, validated on */
    struct ddp_augment aug_train, aug_eval; /* [data] augment and normalize */
    struct ddp_valsel valsel;               /* best validation value so far */
    struct ddp_model model;
    struct ddp_sync sync;
    struct ddp_optim optim;
    struct ddp_metrics metrics;
    int64_t steps_per_epoch;
    const char *eval_only;    /* eval, export, predict: the checkpoint or weights file */
    struct ddp_run_args args; /* the mode and its options (train.h) */
    ddp_liveness *liveness;   /* names dead peers when a collective fails */
    ddp_comm *boot_comm;      /* MPI, only to carry the NCCL id when the bootstrap is mpi */
    char device[160];         /* "cpu" or "cuda:N (name)" */
    char conv_path[768];      /* the GPU's convolution path and why; "" on the CPU */
    char *conv_ckpt;          /* rank 0: the resumed checkpoint's conv_algorithms, or NULL */
    int lock_fd;              /* rank 0: the output directory's lock (outdir.h); else -1 */
    char *job_text;           /* the effective job: job.ini and every checkpoint's `job` */
    int resumed;              /* a checkpoint was loaded */
    float *dev_x;             /* (B, in_elems) batch in device memory; NULL on the CPU */
    int32_t *dev_y;           /* (B) labels in device memory */

    /* NCCL only: how its id travels (pmi2, mpi or tcp) and why, for the banner ("" otherwise) */
    enum ddp_bootstrap_kind bootstrap;
    char bootstrap_why[256];

    /* The device step (backends with upload_batch and xent_acc; docs/gpu.md): batches go up
     * asynchronously into two alternating device sets (dev_x, dev_y and these), the loss and
     * correct count accumulate in acc on the device and are read at log steps. */
    float *dev_x2;
    int32_t *dev_y2;
    int dev_set;            /* the set the next upload fills */
    double *acc;            /* (2) backend memory: loss sum, correct count since the last log */
    struct ddp_graph graph; /* [train] cuda_graph: the step as a CUDA graph */
    /* uint8 training images on a backend with u8_to_float: they go up as bytes into
     * the set's dev_u8 and are converted (and normalised) into its dev_x on the device */
    uint8_t *dev_u8[2];
    struct {
        float *dx;
        const uint8_t *du;
        size_t elems;                   /* 0: nothing pending */
    } u8_pending;                       /* the uploaded uint8 batch the step's prologue converts */
    struct ddp_mem_info mem_start;      /* device memory once the backend was made (mem_info) */
    const struct ddp_test_hooks *hooks; /* read once at start */
    struct loop *lp;                    /* the training loop's position, while it runs */
    char output_pattern[DDP_PATH_MAX];  /* [job] output as written, before its %-patterns */
};

/* train_loop.c's, for the setup: `check`'s summary after setup, evaluation of a loader, one
 * metrics event, the resume point, SyncBatchNorm's all-reduce hook, the training loader, and
 * the loop itself from start. */
int trainer_check_summary(struct trainer *t, const struct ddp_ckpt_pos *start, double t_setup);
void trainer_evaluate(struct trainer *t, ddp_loader *loader, double *loss, double *acc);
void trainer_log_event(struct trainer *t, const char *kind, int64_t epoch, int64_t step,
                       const char *signal);
int trainer_resume(struct trainer *t, struct ddp_ckpt_pos *pos, char *err, size_t errlen);
void trainer_sync_sums(void *ctx, double *buf, size_t n);
ddp_loader *trainer_loader_create(struct trainer *t);
int trainer_loop(struct trainer *t, const struct ddp_ckpt_pos *start);
/* train.c's, for the loop: every rank's agreement on one outcome (code, msg), and rank's
 * host name. */
int trainer_agree(struct trainer *t, int code, const char *msg);
const char *trainer_host_of(const struct trainer *t, int rank);

#endif

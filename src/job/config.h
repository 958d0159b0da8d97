/*
 * config.h - the job file: one schema table (section, key, type, default, range, doc) drives
 * parsing, `--set SECTION.KEY=VALUE` overrides, validation, the effective job written to the
 * output directory, and docs/job-file.md.
 *
 * Errors: ddp_job_load and ddp_job_set return -1 with ONE line in err of the form
 *   "FILE:LINE: [section] key: what was wrong; expected ...". main exits DDP_EXIT_USAGE.
 * This module does not open datasets or interpret [model] layers (nn/model.c does; it asks
 * ddp_job_where for the line to blame).
 */
#ifndef DDP_CONFIG_H
#define DDP_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/ini.h"

#define DDP_PATH_MAX 1024
#define DDP_LAYERS_MAX 4096      /* characters of [model] layers, continuation lines joined */
#define DDP_JOB_KEYS_MAX 80      /* schema rows; the table in config.c has fewer */
#define DDP_MILESTONES_MAX 32    /* [optim] milestones */
#define DDP_NORM_CHANNELS_MAX 16 /* [data] normalize: channels */

/* The job's own choices; each has its name table in config.c, in this order. The choices of
 * [train] device and precision, [dist] backend and [dist] bootstrap belong to their modules
 * (backend/select.h, backend/backend.h, comm/comm.h, dist/bootstrap.h); the schema names them. */
enum ddp_optim_kind { DDP_OPTIM_SGD, DDP_OPTIM_ADAM, DDP_OPTIM_ADAMW, DDP_OPTIM_COUNT };
enum ddp_schedule {
    DDP_SCHEDULE_CONSTANT,
    DDP_SCHEDULE_STEP,
    DDP_SCHEDULE_COSINE,
    DDP_SCHEDULE_MULTISTEP,
    DDP_SCHEDULE_ONECYCLE,
    DDP_SCHEDULE_COUNT
};
enum ddp_lr_scaling {
    DDP_LR_SCALING_NONE,
    DDP_LR_SCALING_LINEAR,
    DDP_LR_SCALING_SQRT,
    DDP_LR_SCALING_COUNT
};
/* [train] cuda_graph: capture the steady-state step as a CUDA graph (train/graph.h) */
enum ddp_cuda_graph {
    DDP_CUDA_GRAPH_AUTO,
    DDP_CUDA_GRAPH_ON,
    DDP_CUDA_GRAPH_OFF,
    DDP_CUDA_GRAPH_COUNT
};
/* [checkpoint] keep_best: which validation metric selects best.h5 */
enum ddp_keep_best {
    DDP_KEEP_BEST_NONE,
    DDP_KEEP_BEST_ACC,
    DDP_KEEP_BEST_LOSS,
    DDP_KEEP_BEST_COUNT
};

struct ddp_job {
    char path[DDP_PATH_MAX]; /* the job file as given */
    char *text;              /* the job file's bytes (owned; kept for checkpoints) */

    /* [job] */
    char name[128];
    int64_t seed;
    char output[DDP_PATH_MAX];
    int report;      /* write report.html at the end */
    int tensorboard; /* write tb/events.out.tfevents.* */
    /* [data] */
    char data_file[DDP_PATH_MAX];
    char data_train[256];
    char data_test[256];
    int64_t batch_size; /* per rank */
    int shuffle;
    int drop_last;
    int64_t cache_mb;    /* keep a split in memory when its images need at most this */
    char data_val[256];  /* validation group, or "" */
    double val_fraction; /* share of the training split held out for validation (0: none) */
    char augment[256];   /* text; parsed into crop_pad, hflip (job/recipe.h) */
    char normalize[512]; /* text; parsed into norm_* (job/recipe.h) */
    int crop_pad;        /* random_crop(pad=P): P; 0 without random_crop (the same) */
    int hflip;           /* random horizontal flip, p = 0.5 */
    int norm_channels;   /* 0: no normalisation */
    float norm_mean[DDP_NORM_CHANNELS_MAX], norm_std[DDP_NORM_CHANNELS_MAX];
    /* [model] */
    char layers[DDP_LAYERS_MAX];
    struct ddp_ini_pieces layers_at; /* where in the file each line of layers came from */
    char init[DDP_PATH_MAX];         /* "pytorch" or a path */
    /* [optim] */
    int optim; /* enum ddp_optim_kind */
    double lr, momentum, weight_decay, beta1, beta2, eps, gamma, warmup_epochs;
    int nesterov;
    int lr_scaling; /* enum ddp_lr_scaling */
    int schedule;   /* enum ddp_schedule */
    int64_t step_epochs;
    double clip_grad_norm; /* 0: off */
    char milestones_text[256];
    int64_t milestones[DDP_MILESTONES_MAX]; /* multistep: epochs, increasing */
    int nmilestones;
    double pct_start, div_factor, final_div_factor; /* onecycle */
    /* [train] */
    int64_t epochs, log_every, eval_every, threads /* 0 = auto */, max_steps /* 0 = all */;
    int precision;          /* enum ddp_precision (backend/backend.h) */
    int device;             /* enum ddp_device (backend/select.h): auto, cpu, cuda */
    int conv;               /* enum ddp_conv (backend/select.h): auto, im2col */
    int deterministic;      /* GPU convolutions: deterministic cuDNN algorithms only */
    int layout;             /* enum ddp_layout_choice (backend/select.h): auto, nchw, nhwc */
    int activations;        /* enum ddp_act_choice (backend/select.h): auto, fp32, bf16 */
    int cudnn_api;          /* enum ddp_cudnn_api (backend/select.h): auto, legacy */
    int64_t accumulate;     /* micro-batches per optimiser step */
    double label_smoothing; /* nn.CrossEntropyLoss(label_smoothing=) */
    int64_t early_stop;     /* evaluations on val without improvement that end the run; 0 off */
    int cuda_graph;         /* enum ddp_cuda_graph */
    /* [checkpoint] */
    int64_t ckpt_every_epochs, ckpt_every_steps, ckpt_keep;
    char resume[DDP_PATH_MAX];
    char signals[128];
    int keep_best; /* enum ddp_keep_best */
    /* [dist] */
    int backend;   /* enum ddp_comm_backend (comm/comm.h): auto, nccl, mpi, none */
    int bootstrap; /* enum ddp_bootstrap_kind (dist/bootstrap.h): auto, pmi2, mpi, tcp */
    double bucket_mb, timeout_s;
    int64_t port, check_every;
    int sync_bn;

    /* Where each schema key got its value: 0 default, -1 --set, else the file's line. */
    int key_line[DDP_JOB_KEYS_MAX];
};

/* Defaults for every key (no file). */
void ddp_job_defaults(struct ddp_job *job);
/* Parse path over the defaults. */
int ddp_job_load(struct ddp_job *job, const char *path, char *err, size_t errlen);
/* Apply one "section.key=value" override (from --set); blamed as "--set". */
int ddp_job_set(struct ddp_job *job, const char *assignment, char *err, size_t errlen);
/* ddp_job_where for [model] layers, naming the column of character off of the value
 * ("FILE:LINE:COL: [model] layers") where the file gave it; off < 0: no column. */
const char *ddp_job_where_layers(const struct ddp_job *job, int off, char *buf, size_t len);
/* "FILE:LINE: [section] key" (or "--set section.key", or "[section] key (default)"), for
 * modules that find a value wrong later. Returns buf. */
const char *ddp_job_where(const struct ddp_job *job, const char *section, const char *key,
                          char *buf, size_t len);
/* Write every key with its effective value, as a loadable INI file. */
void ddp_job_write(const struct ddp_job *job, FILE *f);
/* The effective job as one line per section ("  [optim] name=sgd lr=0.1 ..."), for the log. */
void ddp_job_log_lines(const struct ddp_job *job, void (*emit)(const char *line));
/* The schema as Markdown (docs/job-file.md is generated from it). */
void ddp_job_write_reference(FILE *f);
void ddp_job_free(struct ddp_job *job); /* frees text; accepts a zeroed job */
/* [train] precision's name ("fp32", "tf32", "bf16"), as the job file spells it. */
const char *ddp_job_precision_name(int precision);

#endif

/*
 * validate_impl.h - what the files of `ddptrain validate`'s run share and nothing else
 * includes: what each rank tells the others (struct rank_info), one run's state (struct vrun),
 * rank 0's report of failures and warnings, and the functions that pass between
 *   settings.c     the [validate] settings and the fault hooks
 *   inventory.c    the node and GPU inventory, measurement turns, the machine lock
 *   checks.c       the checks in order: rates in rounds, all-reduce sweep, burn, golden run
 *   judge.c        statistics (medians, MADs, load) and the verdicts
 *   gpu.c          the GPU's own measurements (bandwidth, GEMM rates, copies, pattern test)
 *   tables.c       the human tables
 *   report_json.c  the --json writer (its reader: report/report_validate.c)
 *   expect.c       expectation files, read and (--record-expect) written
 *   validate.c     the run itself: settings, world, reference, checks, judgement, cleanup
 */
#ifndef DDP_VALIDATE_IMPL_H
#define DDP_VALIDATE_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "comm/liveness.h"
#include "job/config.h"
#include "core/nvml.h"
#include "core/util.h"
#include "dist/world.h"
#include "validate/validate.h"

#define CPU_MODEL_LEN 96
#define BOOT_ID_LEN 48
#define CPUSET_BYTES 128 /* 1024 CPUs: as much as glibc's cpu_set_t holds */
#define REASON_LEN 512
/* Measurement rounds at most: a rank below the threshold after the first is measured again
 * with all the others, twice; its best round counts. */
#define RATE_ROUNDS 3

/* ---- what each rank tells the others ------------------------------------------------------ */

/* A rank's GPU measurements (gpu.c; all 0 where the rank runs on the CPU). */
struct gpu_meas {
    int32_t measured;         /* 1: the rank validated a GPU and measured it */
    int32_t twin;             /* the GPU twin (tests/twin): tiny sizes */
    char pci_bus_id[32];      /* "00000000:3B:00.0" */
    double copy, triad;       /* device-memory bandwidth, GB/s (read + write, as STREAM) */
    double sgemm, tf32, bf16; /* TFLOP/s */
    double h2d, d2h;          /* page-locked copies, GB/s */
    int64_t hbm_bytes, pcie_bytes, pat_bytes; /* per array, per copy, pattern-tested */
    int32_t gemm_n;
    int64_t pat_words, pat_bad; /* words checked (both passes) and wrong */
};

struct rank_info {
    int32_t rank, threads, cpus_online, cpus_allowed;
    int64_t mem_total, mem_avail; /* bytes */
    double gemm, triad;           /* GFLOP/s, GB/s (triad -1: wrong values) */
    int32_t triad_bad;            /* wrong triad values in any round so far */
    char host[DDP_HOST_MAX];
    char cpu_model[CPU_MODEL_LEN];
    char boot_id[BOOT_ID_LEN];
    unsigned char cpuset[CPUSET_BYTES];
    int32_t gpu_count;             /* devices the CUDA driver reports; 0 on CPU builds */
    int32_t device;                /* the GPU this rank validates on, -1: the CPU */
    char where[DDP_HOST_MAX + 16]; /* "host", or "host GPU d": how failures name the rank */
    char gpu_driver[96];           /* CUDA versions, or "none" */
    char gpu_name[96];             /* the device's name and memory, or "none" */
    double busy_s, own_s, wall_s;  /* over this rank's own measurements: machine busy CPU-s
                                      (-1: unknown), this rank's CPU-s, wall seconds */
    int32_t turns;                 /* its machine's ranks measured in turns */
    double wait_share;             /* of the measuring thread: run-queue wait / (run + wait),
                                      -1: unknown */
    double burn_gflops, burn_min;  /* level long: sustained and slowest-second GEMM rate */
    int64_t burn_calls, burn_bad;  /* GEMMs of the burn, and those whose result differed */
    struct gpu_meas gm;            /* the GPU's measurements (gpu.c) */
};

/* ---- GPU health (gpu_health.c): what each rank tells rank 0 ---------------------------- */

/* GPUs one rank reports at most: its own, or under --slurm-health its node's. */
#define GH_MAX_GPUS 16

struct gh_gpu {
    int32_t ordinal;         /* CUDA's device number in this process */
    char cuda_bus[32];       /* CUDA's PCI address of it */
    char status[160];        /* "" or why NVML reports nothing for it */
    struct ddp_nvml_state s; /* read after the checks */
    int64_t reasons_seen;    /* DDP_NVML_CLOCKS_* sampled during the checks, -1: none */
    int32_t temp_max;        /* the highest temperature sampled, -1: none */
    int32_t nxid;            /* XID events during the run, -1: not reported */
    uint32_t xid[DDP_NVML_MAX_XIDS];
    int32_t samples;
};

struct gh_rank {
    int32_t ngpu; /* 0: the rank ran on the CPU */
    struct gh_gpu gpu[GH_MAX_GPUS];
};

/* The sizes and lengths of one run: the level's settings, with the GEMM side and triad size
 * of the expectation file (its floors are for them). */
struct level {
    const char *name;
    int gemm_n, gemm_reps, triad_reps, ar_blocks, golden_steps;
    double gemm_s, triad_s, burn_s; /* burn_s 0: no burn */
    int64_t triad_mib, ar_max;
};

/* One validation run: what its phases share. */
struct vrun {
    const struct ddp_validate_args *a;
    double t_start;
    struct ddp_validate_config cfg;
    struct ddp_validate_faults faults;
    struct ddp_world w;
    const struct ddp_backend *be;
    int device; /* CUDA ordinal, -1 on the CPU */
    ddp_comm *c;
    ddp_comm *boot; /* MPI, only to carry the NCCL id where MPI started the process */
    ddp_liveness *live;
    int W, me, threads, lock;
    struct ddp_validate_ref ref;
    int have_ref;
    char ref_path[DDP_PATH_MAX + 64], rec_path[DDP_PATH_MAX + 64];
    char no_ref[2 * DDP_ERR_LEN + DDP_PATH_MAX];
    struct rank_info mine, *all;        /* all: (W) */
    struct ddp_validate_ar_row *rows;   /* (DDP_VALIDATE_MAX_SIZES) this rank's sweep */
    struct ddp_validate_ar_row *ar_all; /* (W, nsizes) everybody's */
    int nsizes, steps;
    struct ddp_validate_golden g;
    struct level L;
    struct ddp_validate_expect expect;
    int have_expect;
    double rec_gemm, rec_triad; /* --record-expect: the worst rates of every round and rank */
    int rec_rounds;
    double sched_run, sched_wait; /* this rank's measuring thread over its measurements; run
                                     -1: unknown */
    struct gh_run *gh;            /* GPU health (gpu_health.c) */
};

/* ---- judging (rank 0) -------------------------------------------------------------------- */

struct failure {
    int rank;   /* -1: the run as a whole (an all-reduce floor) */
    int retest; /* fell short while other processes loaded the node: not a fault found */
    char check[16];
    char reason[REASON_LEN];
};

struct report {
    int W;
    const struct rank_info *ri;
    struct failure *fail; /* failures and retests */
    int nfail, capfail;
    int nhard, nretest;
    char (*warn)[REASON_LEN];
    int nwarn, capwarn;
    const struct gh_rank *gh; /* (W) GPU health; NULL: no rank has a GPU */
};

struct golden_verdict {
    char verdict[8]; /* PASS, FAIL, WARN */
    char reason[REASON_LEN];
    char ref_path[1024]; /* "" if none */
    int ref_steps, compared;
    double max_rel;
    int hash_match;
    uint64_t hash;
};

struct run_facts {
    const char *level;
    int nsizes, gemm_n, steps;
    int64_t triad_mib;
    const char *launcher, *comm, *backend;
    double med_gemm, med_triad, elapsed;
    int nnodes;
    const char *expect; /* --expect FILE, or NULL */
    int ar_measured;    /* the all-reduce sweep ran (not on one rank) */
    int retest_exit;    /* the exit code of a retest: 6, or 0 under --slurm-health */
};

/* inventory.c */
void inventory(struct rank_info *ri, const struct ddp_world *w, int threads);
int choose_threads(const struct ddp_validate_config *cfg, const struct ddp_world *w);
/* judge.c: the median of v[0..n) (sorted in place); 0 when n is 0. */
double median_sort(double *v, int n);
int measurement_turns(const struct rank_info *all, int W, int me, int *mine, int *shared);
int machine_lock(void);
void machine_unlock(int fd);
void vrun_inventory(struct vrun *v);

/* judge.c */
void add_failure(struct report *rep, int rank, const char *check, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void add_warning(struct report *rep, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *verdict_of(const struct report *rep, int rank);
double median_of(const struct rank_info *ri, int W, int triad);
double machine_load(const struct rank_info *ri, int W, int r);
double rank_load(const struct rank_info *ri, int W, int r, int memory);
int rates_shortfalls(const struct vrun *v, const struct rank_info *ri);
void judge_rates(struct report *rep, const struct vrun *v);
void judge_node(struct report *rep, const struct vrun *v);
void judge_busbw(struct report *rep, const struct vrun *v, const struct ddp_validate_ar_row *ar,
                 int nsizes);
int judge_allreduce(struct report *rep, const struct ddp_validate_ar_row *rows, int nsizes);
void judge_golden(struct report *rep, const struct ddp_validate_golden *g,
                  const struct ddp_validate_ref *ref, const char *ref_path, const char *no_ref,
                  double rtol, int recording, struct golden_verdict *out);

/* tables.c */
int group_hosts(const struct rank_info *ri, int W, int *host_of, int *first_rank);
void print_report(const struct report *rep, const struct run_facts *rf,
                  const struct ddp_validate_ar_row *ar, const struct golden_verdict *gv,
                  const struct ddp_validate_golden *g, const int *host_of, const int *first_rank,
                  double frac);

/* report_json.c */
int write_json(const char *path, const struct report *rep, const struct run_facts *rf,
               const struct ddp_validate_config *cfg, const struct ddp_validate_ar_row *ar,
               const struct golden_verdict *gv, const struct ddp_validate_golden *g,
               const int *host_of, const int *first_rank, char *err, size_t errlen);

/* gpu_health.c: start before the checks (opens NVML, samples on a thread), finish after them
 * (collective: everybody's readings to everybody), free in the cleanup (accepts none) */
void gpu_health_start(struct vrun *v);
void gpu_health_finish(struct vrun *v);
void gpu_health_free(struct vrun *v);
/* rank 0: the rules (docs/validate.md) into rep, and rep->gh for the table and the JSON */
void judge_gpu_health(struct report *rep, const struct vrun *v);
void print_gpu_health(const struct report *rep);
/* "PASS", "WARN", "FAIL" or "n/a" (not reported) of rank r's GPU k */
const char *gpu_health_verdict(const struct report *rep, int r, int k);
/* The names of the clock event reasons in bits whose rule is level or stricter (1 FAIL,
 * 0 WARN, -1 any), comma separated, into out; returns how many. */
int gpu_health_reasons(int64_t bits, int level, char *out, size_t len);
/* gpu.c: the GPU measurements of every rank to everybody (collective; ranks without a GPU
 * measure nothing), rank 0's verdicts, table, JSON member and --record-expect floors */
void vrun_gpu(struct vrun *v);
void judge_gpu(struct report *rep, const struct vrun *v);
void print_gpus(const struct report *rep, double frac);
void json_gpus(FILE *f, const struct report *rep);
void write_expect_gpu(FILE *f, const struct vrun *v, double keep);

/* checks.c: 0 or the exit code every rank agrees on */
int vrun_checks(struct vrun *v);

/* expect.c: --record-expect's file (rank 0); 0 or -1 with err */
int write_expect(const struct vrun *v, const struct ddp_validate_ar_row *ar, char *err,
                 size_t errlen);

#endif

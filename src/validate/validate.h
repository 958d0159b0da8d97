/*
 * validate.h - `ddptrain validate`: node validation for admins (docs/validate.md), run like
 * training (srun, mpirun, or one process). Every rank measures itself; rank 0 judges, prints
 * the tables and writes the JSON report; every rank exits with the same code (0: all passed,
 * 1: a check failed, 2 usage, 4 launch, 5 a peer stopped answering, 6 retest: only shortfalls
 * that other processes' load explains). Levels quick, standard, long (burn); --expect adds
 * absolute floors per node type (expect.c); --slurm-health runs one process per node within a
 * time budget and may drain the node (health.c).
 *
 * Checks, in order:
 *  inventory   host, CPU model, CPUs (online, allowed), threads, memory; GPU fields "none" on
 *              CPU builds, else the device count and CUDA versions the driver reports.
 *  gemm        square f32 GEMM (N x N x N) through the backend's linear_fwd (cblas_sgemm on
 *              the CPU backend) with the rank's threads, in GFLOP/s = 2N^3/t, the median call
 *              of a window of a few seconds that all ranks measuring together share.
 *  triad       a[i] = b[i] + s * c[i] on doubles (STREAM's triad), the rank's threads, the
 *              median pass, GB/s = 3 * 8 * n / t (no write-allocate traffic counted, as
 *              STREAM).
 *              gemm and triad fall short below the expectation's floor, or as outliers:
 *              below min_fraction (0.8) of the median of the other ranks and outlier_mads
 *              (5) scaled MADs below it; a shortfall measures every rank again (rounds, 3)
 *              and the round with the fewest shortfalls counts. A shortfall on a rank whose
 *              measuring thread waited for other processes' CPUs (foreign_load_max) and that
 *              the load explains is "retest", not a failure.
 *              Ranks of one machine (same kernel boot id) whose threads exceed its CPUs
 *              take turns, so that they do not measure each other;
 *              such a run holds a machine-wide lock (/tmp/ddptrain-validate.lock) from its
 *              first turn to its end, so that two of them on one machine (job steps in
 *              parallel) do not disturb each other's measurements either.
 *  gpu         (ranks that validate a GPU: the CUDA backend, also on the GPU twin; gpu.c,
 *              device code in backend/cuda/vcheck.cu) all GPUs at once, the median of timed
 *              calls between CUDA events: HBM bandwidth (STREAM copy and triad kernels on float
 *              arrays far beyond L2, by level 256 MiB / 1 GiB / 2 GiB, GB/s counting bytes read
 *              and written as STREAM), SGEMM, TF32 and BF16 tensor-core GEMMs (cublasGemmEx,
 *              N 4096 quick else 8192, TFLOP/s = 2N^3/t), page-locked H2D and D2H copies
 *              (256 MiB quick else 1 GiB), and a device-memory pattern test (address-dependent
 *              words and their complement written, read back and compared on the device; 2 GiB
 *              quick, 8 GiB standard, 90% of free memory long), all within the free memory
 *              and tiny on the twin. A rate falls short below the expectation's [gpu] floor
 *              (hbm_min_gbs, sgemm_min_tflops, tf32_min_tflops, bf16_min_tflops, h2d_min_gbs,
 *              d2h_min_gbs) or as an outlier among the other GPUs (as gemm/triad; rounds, best
 *              counts; never retest); any wrong word fails (checks gpu_hbm, gpu_gemm,
 *              gpu_pcie, gpu_mem, naming rank, host, GPU and PCI bus id).
 *  allreduce   in-place f32 sum through the comm layer over a sweep of sizes (8 B .. 256 MiB,
 *              factor 2; --quick up to 16 MiB). Rank r sends w_r * (i % 7 + 1) with integer
 *              weights w_r small enough that every partial sum is exact in float; every
 *              element of the result is checked on every rank, and each rank also checks the
 *              input it really passed (which tells a bad contribution from a bad transport).
 *              Timing as nccl-tests: median over blocks of the slowest rank's time per call;
 *              algbw = bytes / time, busbw = algbw * 2 (n - 1) / n.
 *  golden      a fixed training run: synthetic data (ddp_synth), a fixed small CNN, SGD with
 *              momentum, fixed seed and per-rank batch, through the real model / ddp buckets /
 *              optimizer path. Each step records the global loss, each rank's local loss and
 *              local gradient norm (before the all-reduce) and a hash of the parameters; the
 *              parameters are re-hashed before the next step (a change at rest = corruption on
 *              that rank). The final hashes must agree on every rank, and the trajectory must
 *              match a reference for the backend and world size within golden.rtol (a missing
 *              reference is a warning, not a failure).
 *
 * Fault injection (test hooks, DDP_TEST_VALIDATE_FAULT=KIND:RANK[,KIND:RANK...]):
 *   slow_gemm:R      rank R spins 99 times as long as each timed GEMM took (a hundredth of
 *                    the rate)
 *   slow_triad:R     the same for the triad
 *   bad_allreduce:R  rank R flips a bit of one element of every all-reduce input it builds
 *   flip_param:R     rank R flips one parameter bit at rest half way through the golden run
 *   bad_grad:R       rank R scales its local gradients by 1.01 at one step of the golden run
 *   bad_burn:R       rank R changes one element of the first result its burn reads back
 *   loaded:R         rank R reports that other processes held its CPUs all the time it
 *                    measured (a shortfall of its rates is then a retest)
 *   slow_hbm:R       rank R reports its GPU's copy and triad bandwidth at a hundredth
 *   slow_tensor:R    rank R reports its TF32 and BF16 GEMM rates at a hundredth
 *   bad_devmem:R     rank R flips a bit of 3 words of its GPU pattern test after writing
 *
 *  burn        (level long) sustained GEMMs, every result compared with the first.
 *  gpu health  on GPUs, around all of the above (gpu_health.c): the rank's GPU (--slurm-health:
 *              the node's) as NVML reports it (core/nvml.h, libnvidia-ml.so.1 opened at run
 *              time), matched by PCI address; clock event reasons and temperature sampled
 *              during the checks, XID events registered before them, counters read after.
 *              FAIL: uncorrected volatile ECC errors, a row remapping pending ("reset the
 *              GPU") or failed, a page retirement pending, XID events, clocks held by HW
 *              slowdown / HW thermal / HW power brake, temperature at the slowdown threshold;
 *              WARN: SW thermal slowdown; lifetime corrected ECC errors are reported only.
 *              What NVML does not report is "not reported", never a failure.
 *
 * Not here: GPU utilisation by other processes, NVML health, reading the job file.
 */
#ifndef DDP_VALIDATE_H
#define DDP_VALIDATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/util.h"

/* DDP_EXIT_RETEST (6, core/util.h) is the exit code of a run whose only shortfalls came while
 * other processes loaded the node (the "retest" verdict): not 1, so that nothing drains a node
 * for it; 6 is the first code that 0-5 and 75 (requeue) leave free and is no shell, signal or
 * sysexits code. */

/* Levels, as DCGM's: quick (prologs), standard, long (burn-in: sustained GEMM with result
 * comparison and the full all-reduce sweep). */
enum ddp_validate_level { DDP_VALIDATE_QUICK, DDP_VALIDATE_STANDARD, DDP_VALIDATE_LONG };

/* The command line of `ddptrain validate` (cli/validate.c). */
struct ddp_validate_args {
    const char *json;          /* --json FILE, or NULL */
    const char *config;        /* --config FILE, or NULL */
    const char *record;        /* --record FILE|DIR, or NULL */
    const char *reference;     /* --reference FILE|DIR, or NULL */
    const char *expect;        /* --expect FILE: absolute floors, or NULL */
    const char *record_expect; /* --record-expect FILE, or NULL */
    double margin;             /* --margin: floors = worst measured x (1 - margin) */
    int level;                 /* enum ddp_validate_level; --quick = quick */
    int slurm_health;          /* --slurm-health: one process per node, budget, exit 0/1 */
    double budget_s;           /* --budget-s (slurm-health) */
    int drain;                 /* --drain (slurm-health): scontrol drains a failing node */
};

/* Run the validation; returns the exit code. */
int ddp_validate_run(const struct ddp_validate_args *a);

/* ---- settings (configs/validate.ini; every key has a built-in default) ------------------ */

/* Sizes of the sweep: at most this many (8 B .. 256 MiB by factor 2 is 26). */
#define DDP_VALIDATE_MAX_SIZES 64
/* Largest all-reduce of the sweep: 1 GiB of floats keeps element counts far below INT_MAX. */
#define DDP_VALIDATE_MAX_BYTES ((int64_t)1 << 30)
/* Largest GEMM side: 3 matrices of 16384^2 floats are 3 GiB. */
#define DDP_VALIDATE_MAX_GEMM_N 16384
/* Largest golden run: the trajectory stays small enough to gather and store. */
#define DDP_VALIDATE_MAX_STEPS 10000

struct ddp_validate_config {
    /* [validate] */
    double min_fraction;     /* an outlier must also be below this fraction of the median */
    double outlier_mads;     /* ... and this many scaled MADs below it (of the other ranks) */
    double foreign_load_max; /* share of a node's CPUs other processes may use: more, and a
                                shortfall there is "retest" */
    int rounds;              /* rate rounds at most (a shortfall measures everybody again) */
    int threads;             /* compute threads per rank, 0 = as training chooses them */
    double timeout_s;        /* deadline of every collective */
    /* [gemm] */
    int gemm_n, gemm_n_quick, gemm_reps, gemm_reps_quick;
    double gemm_s, gemm_s_quick; /* timing window (the median call counts) */
    /* [triad] */
    int64_t triad_mib, triad_mib_quick; /* MiB per array (three arrays) */
    int triad_reps, triad_reps_quick;
    double triad_s, triad_s_quick;
    /* [allreduce] */
    int64_t ar_min_bytes, ar_max_bytes, ar_max_bytes_quick, ar_max_bytes_long;
    int ar_blocks, ar_blocks_quick; /* timed blocks per size (median reported) */
    double ar_block_ms;             /* target length of one block */
    /* [golden] */
    int golden_steps, golden_steps_quick;
    double golden_rtol;   /* relative tolerance of losses and gradient norms */
    char reference[1024]; /* file or directory; "" = the shipped references */
    /* [burn] (level long) */
    double burn_s; /* sustained GEMM (gemm n), every result compared with the first */
};

void ddp_validate_config_defaults(struct ddp_validate_config *c);
/* Read an INI file over the defaults. -1 with "FILE:LINE: [section] key: ..." in err. */
int ddp_validate_config_load(struct ddp_validate_config *c, const char *path, char *err,
                             size_t errlen);

/* ---- expectations per node type (--expect FILE; configs/expect-*.ini) ---------------- */

#define DDP_VALIDATE_EXPECT_SIZES 16

struct ddp_validate_expect {
    char path[1024];
    /* [node] */
    char type[128];   /* the node type the floors are for */
    char source[256]; /* how they were obtained ("measured ...", "data sheet, unmeasured") */
    /* [gpu] */
    int gpu_count;       /* -1: not checked */
    char gpu_model[128]; /* a substring of the device name; "": not checked */
    /* [gemm] [triad]: floors per rank, at this size (the run measures at it); 0: none */
    int gemm_n;
    double gemm_min_gflops;
    int64_t triad_mib;
    double triad_min_gbs;
    /* [gpu] floors per GPU at the level's sizes (gpu.c); 0: none */
    double hbm_min_gbs;      /* device-memory copy and triad */
    double sgemm_min_tflops; /* fp32 SGEMM */
    double tf32_min_tflops, bf16_min_tflops;
    double h2d_min_gbs, d2h_min_gbs; /* page-locked copies */
    /* [allreduce] */
    int ar_ranks;      /* floors apply to runs of this many ranks (0: any) */
    char ar_text[512]; /* min_busbw_gbs = SIZE:GBS, ... (SIZE in bytes, K/M/G allowed) */
    int nbusbw;
    int64_t busbw_bytes[DDP_VALIDATE_EXPECT_SIZES];
    double busbw_min[DDP_VALIDATE_EXPECT_SIZES];
};

/* Read an expectation file (core/ini.h: -1 with one line in err; the caller exits 2). */
int ddp_validate_expect_load(struct ddp_validate_expect *e, const char *path, char *err,
                             size_t errlen);

/* ---- fault injection (test hooks) ------------------------------------------------------- */

enum ddp_validate_fault_kind {
    DDP_VALIDATE_FAULT_SLOW_GEMM,
    DDP_VALIDATE_FAULT_SLOW_TRIAD,
    DDP_VALIDATE_FAULT_BAD_ALLREDUCE,
    DDP_VALIDATE_FAULT_FLIP_PARAM,
    DDP_VALIDATE_FAULT_BAD_GRAD,
    DDP_VALIDATE_FAULT_BAD_BURN,
    DDP_VALIDATE_FAULT_LOADED,
    DDP_VALIDATE_FAULT_SLOW_HBM,
    DDP_VALIDATE_FAULT_SLOW_TENSOR,
    DDP_VALIDATE_FAULT_BAD_DEVMEM,
    DDP_VALIDATE_FAULT_KINDS
};

/* Longest HOST of a fault's "@HOST" (the host a run names a rank by: a Slurm node name). */
#define DDP_VALIDATE_FAULT_HOST_MAX 64

/* rank[k] = the rank that injects fault k, or -1; host[k] = the only host where it does
 * ("" = any host). */
struct ddp_validate_faults {
    int rank[DDP_VALIDATE_FAULT_KINDS];
    char host[DDP_VALIDATE_FAULT_KINDS][DDP_VALIDATE_FAULT_HOST_MAX];
};

/* Parse "KIND:RANK[@HOST][,KIND:RANK[@HOST]...]" (NULL or "" = none). -1 with a reason in
 * err. @HOST plants the fault on rank RANK of that host only: under --slurm-health every node
 * runs one process of rank 0, so KIND:0@n2 is how a fault lands on one node. */
int ddp_validate_faults_parse(struct ddp_validate_faults *f, const char *text, char *err,
                              size_t errlen);
/* Drop the faults planted on hosts other than `host` (this process's, as the run names it;
 * call once the world is known). */
void ddp_validate_faults_locate(struct ddp_validate_faults *f, const char *host);
/* Whether this rank injects fault k. */
int ddp_validate_fault_here(const struct ddp_validate_faults *f, enum ddp_validate_fault_kind k,
                            int rank);

/* ---- measurements (bench.c) ------------------------------------------------------ */

/* GFLOP/s of a square N GEMM through be->linear_fwd; GB/s of the triad over three arrays of
 * mib MiB each on threads threads (-1 when an element of the result is wrong: memory that
 * does not hold what was written). After the warm-up each calls sync(sync_ctx) (NULL: none;
 * validate passes a barrier, which every rank not measuring calls as well), then times calls
 * for `seconds` between guard bands of two calls (at least reps counted) and returns the
 * median.
 * slow: spin 99 times as long as each call took (fault injection). */
double ddp_validate_gemm(const struct ddp_backend *be, int n, int reps, double seconds, int slow,
                         void (*sync)(void *), void *sync_ctx);
double ddp_validate_triad(int64_t mib, int reps, double seconds, int threads, int slow,
                          void (*sync)(void *), void *sync_ctx);
/* At most this many seconds per measurement from here on (0: no cap): --slurm-health's budget.
 * A capped measurement counts what calls fit (the first one if none other does). */
void ddp_validate_bench_cap(double seconds);

/* Level long: GEMMs of side n back to back for `seconds` through the backend, each result
 * compared bit for bit with the first (same inputs, same kernel: any difference is a fault
 * under sustained load, as gpu-burn). corrupt: change one element of the first result read
 * back (fault injection). */
struct ddp_validate_burn_result {
    long calls, mismatches;
    double seconds, gflops, min_gflops; /* overall, and the slowest second */
};
void ddp_validate_burn(const struct ddp_backend *be, int n, double seconds, int corrupt,
                       struct ddp_validate_burn_result *res);

/* ---- the all-reduce sweep (allreduce.c) ------------------------------------------ */

struct ddp_validate_ar_row {
    int64_t bytes, count; /* count f32 elements */
    double time_s;        /* median over blocks of the slowest rank's time per call */
    double algbw, busbw;  /* GB/s (1e9 bytes) */
    int iters, blocks;    /* calls per block, blocks */
    int64_t bad_elems;    /* elements of this rank's result that were wrong (all checks) */
    int64_t first_bad;    /* first wrong element index on this rank, -1 if none */
    double got, want;     /* its value and the exact value */
    int input_bad;        /* this rank's own input did not hold the pattern */
};

struct ddp_validate_ar_opts {
    int64_t min_bytes, max_bytes; /* powers of two from min to max */
    int blocks;
    double block_s;
    int corrupt; /* fault: flip a bit of one element of this rank's input */
};

/* Run the sweep (collective: every rank calls it with the same options). rows holds
 * DDP_VALIDATE_MAX_SIZES entries; returns the number of sizes. Timings are the same on every
 * rank; the check fields are this rank's own. */
int ddp_validate_allreduce_sweep(ddp_comm *c, const struct ddp_validate_ar_opts *o,
                                 struct ddp_validate_ar_row *rows);

/* ---- the golden run (golden.c) --------------------------------------------------- */

/* What the golden run is; written into references, which must match it. */
#define DDP_VALIDATE_GOLDEN_SPEC                                                            \
    "synth(1x12x12,4 classes,seed 7) conv2d(6,3,pad=1),relu,maxpool(2),flatten,linear(32)," \
    "relu,linear(4) init 1234 sgd(lr 0.05,momentum 0.9,wd 1e-4) batch 16/rank bucket 0.004MB"

/* Per-rank trajectory of one golden run of `steps` steps. */
struct ddp_validate_golden {
    int steps, world_size;
    double *loss;         /* (steps) global mean loss, the same on every rank */
    double *local;        /* (steps, W, 2) every rank's local loss and local gradient norm */
    uint64_t *hash;       /* (steps, W) every rank's parameter hash after each step */
    int *at_rest;         /* (W) first step before which a rank's parameters changed at rest,
                             -1 if never */
    uint64_t *final_hash; /* (W) */
};

/* The faults a golden run injects on this rank (the caller asks ddp_validate_fault_here). */
#define DDP_VALIDATE_GOLDEN_FLIP_PARAM 1u /* a parameter flipped at rest mid-run */
#define DDP_VALIDATE_GOLDEN_BAD_GRAD 2u   /* a wrong local gradient */

/* Run it (collective; the backend's threads are the caller's to set). faults: this rank's
 * DDP_VALIDATE_GOLDEN_* bits, 0 for none. Returns 0 or -1 with err (a setup failure). */
int ddp_validate_golden_run(ddp_comm *c, const struct ddp_backend *be, int steps, unsigned faults,
                            struct ddp_validate_golden *g, char *err, size_t errlen);
void ddp_validate_golden_free(struct ddp_validate_golden *g); /* accepts a zeroed struct */

/* A recorded trajectory (configs/validate-ref/<backend>-w<W>.ref). */
struct ddp_validate_ref {
    char backend[32];
    char spec[512];
    int world_size, steps;
    double *loss;  /* (steps) */
    double *local; /* (steps, W, 2) */
};

/* Write g as a reference for backend to path (via path.tmp and rename). */
int ddp_validate_ref_write(const struct ddp_validate_golden *g, const char *backend,
                           const char *path, char *err, size_t errlen);
/* Read a reference; -1 with err naming the file and line when it is malformed. */
int ddp_validate_ref_read(struct ddp_validate_ref *r, const char *path, char *err, size_t errlen);
void ddp_validate_ref_free(struct ddp_validate_ref *r); /* accepts a zeroed struct */

/* Compare g with r over the steps both have. Returns the worst relative difference of the
 * global loss, and in *first_step / *ranks (W flags) the first step where any value (the
 * global loss, or a rank's local loss or gradient norm) differs by more than rtol, and the
 * ranks whose local values do there (none flagged: only the global loss does). *first_step
 * is -1 when everything is within rtol. */
double ddp_validate_ref_compare(const struct ddp_validate_golden *g,
                                const struct ddp_validate_ref *r, double rtol, int *first_step,
                                int *ranks);

/* ---- the node around the measurements (health.c) -------------------------------------- */

/* CPU-seconds the whole machine has been busy (/proc/stat: all but idle and iowait), -1 if
 * unknown; CPU-seconds of this process (all its threads). Their differences over a window,
 * summed over the ranks of a machine, tell the CPU time other processes took. */
double ddp_validate_machine_busy_s(void);
double ddp_validate_own_cpu_s(void);
/* The calling thread's time on a CPU and waiting for one on the run queue, so far
 * (/proc/thread-self/schedstat). Over a window, wait / (run + wait) is the share of the time
 * it wanted a CPU that others held: the load that slowed it down. -1 where the kernel does
 * not keep these. */
int ddp_validate_sched_s(double *run_s, double *wait_s);

/* --slurm-health's hard budget: after `seconds` the process writes which phase it was in and
 * exits 0 (no verdict: a slow node under load is not drained). Phases: 0 start, 1 rates,
 * 2 all-reduce, 3 golden run, 4 verdict. */
void ddp_validate_budget_arm(double seconds);
void ddp_validate_budget_phase(int phase);
void ddp_validate_budget_disarm(void);

/* --drain: `scontrol update nodename=NODE state=drain reason=REASON` for this node
 * ($SLURMD_NODENAME, else the short host name, into node), waited for at most 15 s. Returns 0,
 * or -1 with one line in err. */
int ddp_validate_drain(const char *reason, char *node, size_t nodelen, char *err, size_t errlen);

#endif

/*
 * validate.c - `ddptrain validate`: settings, fault hooks, the order of the
 * checks, and rank 0's judgement, tables and JSON report. See validate.h for the checks and
 * docs/validate.md for the user's version.
 *
 * Every rank measures itself and sends its numbers to everybody (allgather); rank 0 judges,
 * attributes each failure to a rank and its host, prints, and broadcasts the exit code so that
 * every rank returns the same one. The measurements live in bench.c, allreduce.c and
 * golden.c (this directory); the command line in cli/validate.c.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ddp_build.h"
#include "backend/backend.h"
#include "backend/select.h"
#include "comm/comm.h"
#include "comm/liveness.h"
#include "job/config.h"
#include "core/ini.h"
#include "dist/world.h"
#include "core/fileio.h"
#include "core/paths.h"
#include "core/testhooks.h"
#include "core/util.h"
#include "validate/validate.h"
#if HAVE_CUDA
#include "backend/cuda.h"
#endif

/* The GPU is validated where NCCL can reduce on it. */
#if HAVE_NCCL
#define GPU_DEVICE DDP_DEVICE_AUTO
#else
#define GPU_DEVICE DDP_DEVICE_CPU
#endif

#define CPU_MODEL_LEN 96
#define BOOT_ID_LEN 48
#define CPUSET_BYTES 128 /* 1024 CPUs: as much as glibc's cpu_set_t holds */
#define REASON_LEN 512
/* Measurement rounds at most: a rank below the threshold after the first is measured again
 * with all the others, twice; its best round counts. */
#define RATE_ROUNDS 3

/* ---- settings ---------------------------------------------------------------------------- */

void ddp_validate_config_defaults(struct ddp_validate_config *c)
{
    memset(c, 0, sizeof *c);
    c->min_fraction = 0.8;
    c->outlier_mads = 5;
    c->foreign_load_max = 0.1;
    c->rounds = 3;
    c->threads = 0;
    c->timeout_s = 120;
    c->gemm_n = 2048;
    c->gemm_n_quick = 1024;
    c->gemm_reps = 5;
    c->gemm_reps_quick = 3;
    c->gemm_s = 3;
    c->gemm_s_quick = 1;
    c->triad_mib = 256;
    c->triad_mib_quick = 64;
    c->triad_reps = 10;
    c->triad_reps_quick = 5;
    c->triad_s = 2;
    c->triad_s_quick = 0.5;
    c->ar_min_bytes = 8;
    c->ar_max_bytes = (int64_t)256 << 20;
    c->ar_max_bytes_quick = (int64_t)16 << 20;
    c->ar_max_bytes_long = DDP_VALIDATE_MAX_BYTES;
    c->ar_blocks = 5;
    c->ar_blocks_quick = 3;
    c->ar_block_ms = 20;
    c->golden_steps = 100;
    c->golden_steps_quick = 30;
    c->golden_rtol = 1e-3;
    c->burn_s = 120;
}

#define F(field) \
    offsetof(struct ddp_validate_config, field), sizeof(((struct ddp_validate_config *)0)->field)
#define K(sec, name, type, field, lo, hi)          \
    {                                              \
        sec, name, type, F(field), lo, hi, NULL, 0 \
    }
#define MAXB ((double)DDP_VALIDATE_MAX_BYTES)
static const struct ddp_ini_key g_keys[] = {
    K("validate", "min_fraction", DDP_INI_FLOAT, min_fraction, 0, 1),
    K("validate", "outlier_mads", DDP_INI_FLOAT, outlier_mads, 0, 1000),
    K("validate", "foreign_load_max", DDP_INI_FLOAT, foreign_load_max, 0, 1),
    K("validate", "rounds", DDP_INI_INT, rounds, 1, 10),
    K("validate", "threads", DDP_INI_INT, threads, 0, 4096),
    K("validate", "timeout_s", DDP_INI_FLOAT, timeout_s, 1, 1e6),
    K("gemm", "n", DDP_INI_INT, gemm_n, 16, DDP_VALIDATE_MAX_GEMM_N),
    K("gemm", "n_quick", DDP_INI_INT, gemm_n_quick, 16, DDP_VALIDATE_MAX_GEMM_N),
    K("gemm", "reps", DDP_INI_INT, gemm_reps, 1, 1000),
    K("gemm", "reps_quick", DDP_INI_INT, gemm_reps_quick, 1, 1000),
    K("gemm", "seconds", DDP_INI_FLOAT, gemm_s, 0, 3600),
    K("gemm", "seconds_quick", DDP_INI_FLOAT, gemm_s_quick, 0, 3600),
    K("triad", "mib", DDP_INI_INT, triad_mib, 1, 1 << 16),
    K("triad", "mib_quick", DDP_INI_INT, triad_mib_quick, 1, 1 << 16),
    K("triad", "reps", DDP_INI_INT, triad_reps, 1, 1000),
    K("triad", "reps_quick", DDP_INI_INT, triad_reps_quick, 1, 1000),
    K("triad", "seconds", DDP_INI_FLOAT, triad_s, 0, 3600),
    K("triad", "seconds_quick", DDP_INI_FLOAT, triad_s_quick, 0, 3600),
    K("allreduce", "min_bytes", DDP_INI_INT, ar_min_bytes, 4, MAXB),
    K("allreduce", "max_bytes", DDP_INI_INT, ar_max_bytes, 4, MAXB),
    K("allreduce", "max_bytes_quick", DDP_INI_INT, ar_max_bytes_quick, 4, MAXB),
    K("allreduce", "max_bytes_long", DDP_INI_INT, ar_max_bytes_long, 4, MAXB),
    K("allreduce", "blocks", DDP_INI_INT, ar_blocks, 1, 101),
    K("allreduce", "blocks_quick", DDP_INI_INT, ar_blocks_quick, 1, 101),
    K("allreduce", "block_ms", DDP_INI_FLOAT, ar_block_ms, 0.01, 60000),
    K("golden", "steps", DDP_INI_INT, golden_steps, 1, DDP_VALIDATE_MAX_STEPS),
    K("golden", "steps_quick", DDP_INI_INT, golden_steps_quick, 1, DDP_VALIDATE_MAX_STEPS),
    K("golden", "rtol", DDP_INI_FLOAT, golden_rtol, 0, 1),
    K("golden", "reference", DDP_INI_STR, reference, 0, 0),
    K("burn", "seconds", DDP_INI_FLOAT, burn_s, 0, 86400),
};
#undef K
#undef F
#undef MAXB
#define NKEYS ((int)(sizeof g_keys / sizeof g_keys[0]))

int ddp_validate_config_load(struct ddp_validate_config *c, const char *path, char *err,
                             size_t errlen)
{
    static const struct ddp_ini_schema schema = {g_keys, NKEYS, "validate settings file",
                                                 "configs/validate.ini", 0};
    int key_line[NKEYS] = {0};
    if (ddp_ini_load(&schema, path, c, key_line, NULL, err, errlen) != 0)
        return -1;
    if (c->ar_max_bytes < c->ar_min_bytes || c->ar_max_bytes_quick < c->ar_min_bytes ||
        c->ar_max_bytes_long < c->ar_min_bytes)
        return ddp_err(err, errlen,
                       "%s: [allreduce] max_bytes, max_bytes_quick and max_bytes_long must be at "
                       "least min_bytes (%lld)",
                       path, (long long)c->ar_min_bytes);
    return 0;
}

/* ---- fault hooks ------------------------------------------------------------------------- */

static const char *const g_fault_names[DDP_VALIDATE_FAULT_KINDS] = {
    "slow_gemm", "slow_triad", "bad_allreduce", "flip_param", "bad_grad", "bad_burn"};

int ddp_validate_faults_parse(struct ddp_validate_faults *f, const char *text, char *err,
                              size_t errlen)
{
    for (int k = 0; k < DDP_VALIDATE_FAULT_KINDS; k++)
        f->rank[k] = -1;
    if (!text || !*text)
        return 0;
    char buf[512], *save = NULL;
    if (strlen(text) >= sizeof buf)
        return ddp_err(err, errlen, "DDP_TEST_VALIDATE_FAULT is too long");
    snprintf(buf, sizeof buf, "%s", text);
    for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        char *colon = strchr(tok, ':');
        int64_t r;
        int kind = -1;
        if (colon) {
            *colon = '\0';
            for (int k = 0; k < DDP_VALIDATE_FAULT_KINDS; k++)
                if (!strcmp(tok, g_fault_names[k]))
                    kind = k;
        }
        if (kind < 0 || ddp_parse_i64(colon + 1, &r) != 0 || r < 0 || r >= DDP_WORLD_SIZE_MAX)
            return ddp_err(err, errlen,
                           "DDP_TEST_VALIDATE_FAULT: '%s%s%s': expected KIND:RANK with KIND one of "
                           "slow_gemm, slow_triad, bad_allreduce, flip_param, bad_grad, bad_burn",
                           tok, colon ? ":" : "", colon ? colon + 1 : "");
        f->rank[kind] = (int)r;
    }
    return 0;
}

int ddp_validate_fault_here(const struct ddp_validate_faults *f, enum ddp_validate_fault_kind k,
                            int rank)
{
    return f && k < DDP_VALIDATE_FAULT_KINDS && f->rank[k] == rank;
}

/* ---- what each rank tells the others ------------------------------------------------------ */

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
};

/* Copy the value of "key<blank>:" from a /proc file into out; 0 if found. */
static int proc_field(const char *path, const char *key, char *out, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[512];
    size_t klen = strlen(key);
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) != 0)
            continue;
        char *p = line + klen;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p != ':')
            continue;
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        p[strcspn(p, "\n")] = '\0';
        snprintf(out, len, "%s", p);
        rc = 0;
        break;
    }
    fclose(f);
    return rc;
}

static int64_t meminfo_bytes(const char *key)
{
    char v[64];
    if (proc_field("/proc/meminfo", key, v, sizeof v) != 0)
        return 0;
    return (int64_t)strtoll(v, NULL, 10) * 1024; /* "16325012 kB" */
}

static void inventory(struct rank_info *ri, const struct ddp_world *w, int threads)
{
    memset(ri, 0, sizeof *ri);
    ri->rank = w->rank;
    ri->threads = threads;
    snprintf(ri->host, sizeof ri->host, "%s", w->host);
    snprintf(ri->where, sizeof ri->where, "%s", w->host);
    ri->device = -1;
    if (proc_field("/proc/cpuinfo", "model name", ri->cpu_model, sizeof ri->cpu_model) != 0 &&
        proc_field("/proc/cpuinfo", "Model", ri->cpu_model, sizeof ri->cpu_model) != 0)
        snprintf(ri->cpu_model, sizeof ri->cpu_model, "unknown");
    ri->cpus_online = (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        ri->cpus_allowed = CPU_COUNT(&set);
        memcpy(ri->cpuset, &set, sizeof set < CPUSET_BYTES ? sizeof set : CPUSET_BYTES);
    } else {
        ri->cpus_allowed = ri->cpus_online;
        memset(ri->cpuset, 0xff, CPUSET_BYTES);
    }
    ri->mem_total = meminfo_bytes("MemTotal");
    ri->mem_avail = meminfo_bytes("MemAvailable");
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f || !fgets(ri->boot_id, sizeof ri->boot_id, f))
        snprintf(ri->boot_id, sizeof ri->boot_id, "host:%.*s", BOOT_ID_LEN - 6, w->host);
    ri->boot_id[strcspn(ri->boot_id, "\n")] = '\0';
    if (f)
        fclose(f);
    snprintf(ri->gpu_driver, sizeof ri->gpu_driver, "none");
#if HAVE_CUDA
    /* what the driver sees, without binding a device: the checks run on the CPU backend */
    int n = ddp_cuda_device_count();
    ri->gpu_count = n > 0 ? n : 0;
    if (n >= 0)
        snprintf(ri->gpu_driver, sizeof ri->gpu_driver, "%s", ddp_cuda_version_string());
#endif
}

/* Threads per rank: [validate] threads, else as training: SLURM_CPUS_PER_TASK, else the CPUs
 * this process may use, shared among the node's ranks unless the launcher bound it already. */
static int choose_threads(const struct ddp_validate_config *cfg, const struct ddp_world *w)
{
    if (cfg->threads > 0)
        return cfg->threads;
    return ddp_world_default_threads(w);
}

/* Turns for the rate measurements: ranks of one machine (same boot id) whose threads exceed
 * the CPUs they may use between them would measure each other, so they take turns, one rank
 * of each such machine at a time. Returns the number of turns; *mine is this rank's, *shared
 * whether this rank's machine is one of those. */
static int measurement_turns(const struct rank_info *all, int W, int me, int *mine, int *shared)
{
    int turns = 1;
    *mine = 0;
    *shared = 0;
    for (int r = 0; r < W; r++) {
        int first = 1, count = 0, threads = 0, pos_me = -1;
        for (int q = 0; q < r && first; q++)
            if (!strcmp(all[q].boot_id, all[r].boot_id))
                first = 0;
        if (!first)
            continue;
        unsigned char u[CPUSET_BYTES] = {0};
        for (int q = 0; q < W; q++) {
            if (strcmp(all[q].boot_id, all[r].boot_id) != 0)
                continue;
            if (q == me)
                pos_me = count;
            count++;
            threads += all[q].threads;
            for (int b = 0; b < CPUSET_BYTES; b++)
                u[b] |= all[q].cpuset[b];
        }
        int cpus = 0;
        for (int b = 0; b < CPUSET_BYTES; b++)
            cpus += __builtin_popcount(u[b]);
        if (cpus > all[r].cpus_online && all[r].cpus_online > 0)
            cpus = all[r].cpus_online;
        if (threads <= cpus)
            continue;
        if (count > turns)
            turns = count;
        if (pos_me >= 0) {
            *mine = pos_me;
            *shared = 1;
        }
    }
    return turns;
}

/* Machine-wide lock of a run whose ranks take turns (a machine with more threads than CPUs),
 * taken by the first rank there before the first turn and held to the end of the run, so that
 * another such run on the machine (a job step in parallel: the nodes of a test cluster share
 * one machine) neither measures while this one does nor loads the machine with its all-reduce
 * sweep while this one measures. Returns the descriptor (closed at exit, which releases it),
 * or -1: no lock (/tmp not writable, or held by another process for MACHINE_LOCK_WAIT_S, after
 * which this run just measures alongside, as two runs without the lock would). */
#define MACHINE_LOCK_PATH "/tmp/ddptrain-validate.lock"
#define MACHINE_LOCK_WAIT_S 60.0
static int machine_lock(void)
{
    int fd = open(MACHINE_LOCK_PATH, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return -1;
    fchmod(fd, 0666); /* umask: let other users' runs take it too */
    const double t0 = ddp_now();
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            close(fd);
            return -1;
        }
        if (ddp_now() - t0 > MACHINE_LOCK_WAIT_S) {
            ddp_warn("validate: %s held for over %.0f s by another process; measuring anyway",
                     MACHINE_LOCK_PATH, MACHINE_LOCK_WAIT_S);
            close(fd);
            return -1;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return fd;
}

static void machine_unlock(int fd)
{
    if (fd >= 0) {
        flock(fd, LOCK_UN);
        close(fd);
    }
}

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
};

static void add_result(struct report *rep, int rank, int retest, const char *check, const char *fmt,
                       va_list ap)
{
    if (rep->nfail == rep->capfail) {
        rep->capfail = rep->capfail ? 2 * rep->capfail : 16;
        rep->fail = ddp_realloc(rep->fail, sizeof *rep->fail * (size_t)rep->capfail);
    }
    struct failure *f = &rep->fail[rep->nfail++];
    f->rank = rank;
    f->retest = retest;
    rep->nhard += !retest;
    rep->nretest += retest;
    snprintf(f->check, sizeof f->check, "%s", check);
    vsnprintf(f->reason, sizeof f->reason, fmt, ap);
}

static void add_failure(struct report *rep, int rank, const char *check, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_failure(struct report *rep, int rank, const char *check, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    add_result(rep, rank, 0, check, fmt, ap);
    va_end(ap);
}

static void add_retest(struct report *rep, int rank, const char *check, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_retest(struct report *rep, int rank, const char *check, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    add_result(rep, rank, 1, check, fmt, ap);
    va_end(ap);
}

static void add_warning(struct report *rep, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add_warning(struct report *rep, const char *fmt, ...)
{
    if (rep->nwarn == rep->capwarn) {
        rep->capwarn = rep->capwarn ? 2 * rep->capwarn : 8;
        rep->warn = ddp_realloc(rep->warn, sizeof *rep->warn * (size_t)rep->capwarn);
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->warn[rep->nwarn++], REASON_LEN, fmt, ap);
    va_end(ap);
}

/* "FAIL", "RETEST" or "PASS" for a rank (-2: the run as a whole). */
static const char *verdict_of(const struct report *rep, int rank)
{
    int hard = 0, re = 0;
    for (int i = 0; i < rep->nfail; i++)
        if (rank == -2 || rep->fail[i].rank == rank) {
            hard |= !rep->fail[i].retest;
            re |= rep->fail[i].retest;
        }
    return hard ? "FAIL" : re ? "RETEST" : "PASS";
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (sorted in place); 0 when n is 0. */
static double median_sort(double *v, int n)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median of the positive values among W (0 when none), skipping rank `skip` (-1: none). */
static double median_but(const struct rank_info *ri, int W, int triad, int skip)
{
    double *v = ddp_malloc(sizeof(double) * (size_t)W);
    int n = 0;
    for (int r = 0; r < W; r++) {
        double x = triad ? ri[r].triad : ri[r].gemm;
        if (x > 0 && r != skip)
            v[n++] = x;
    }
    double m = median_sort(v, n);
    free(v);
    return m;
}

static double median_of(const struct rank_info *ri, int W, int triad)
{
    return median_but(ri, W, triad, -1);
}

/* Rates are compared on a log scale (a rank at half the rate is as far below as one at twice
 * is above): the median of log(rate) of the positive values of the ranks but `skip` in *lm,
 * and their median absolute deviation from it. */
static double log_mad_but(const struct rank_info *ri, int W, int triad, int skip, double *lm)
{
    double *v = ddp_malloc(sizeof(double) * (size_t)W);
    int n = 0;
    for (int r = 0; r < W; r++) {
        double x = triad ? ri[r].triad : ri[r].gemm;
        if (x > 0 && r != skip)
            v[n++] = log(x);
    }
    *lm = median_sort(v, n);
    for (int i = 0; i < n; i++)
        v[i] = fabs(v[i] - *lm);
    double d = median_sort(v, n);
    free(v);
    return d;
}

/* The share (0..1) of the CPUs of rank r's machine (ranks with its boot id) that other
 * processes used while rank r measured: the machine's busy time less what rank r used (in
 * turns: the others only wait then), or less what every rank there used (they measured at
 * the same time). */
static double machine_load(const struct rank_info *ri, int W, int r)
{
    double own = ri[r].own_s;
    if (!ri[r].turns)
        for (int q = 0; q < W; q++)
            if (q != r && !strcmp(ri[q].boot_id, ri[r].boot_id))
                own += ri[q].own_s;
    if (ri[r].busy_s < 0 || ri[r].wall_s <= 0 || ri[r].cpus_online <= 0)
        return 0;
    double f = (ri[r].busy_s - own) / (ri[r].wall_s * ri[r].cpus_online);
    return f < 0 ? 0 : f > 1 ? 1 : f;
}

/* The load that slowed rank r while it measured: for compute (GEMM, all-reduce), the share of
 * the time its measuring thread wanted a CPU that others held (run-queue wait): a rank slow by
 * itself (a throttled CPU) does not wait for a CPU. For memory bandwidth (the triad), also the
 * share of its machine's CPUs that other processes used, which takes bandwidth and caches
 * without taking its CPU. */
static double rank_load(const struct rank_info *ri, int W, int r, int memory)
{
    const double wait = ri[r].wait_share >= 0 ? ri[r].wait_share : machine_load(ri, W, r);
    return memory ? fmax(wait, machine_load(ri, W, r)) : wait;
}

/* Why a rank's rate fell short, if it did. */
struct shortfall {
    double x, limit; /* the rate and the line it fell below */
    double median;   /* of the other ranks (outliers) */
    double load;     /* the load that counts (rank_load): the rank's own (floors), or its excess
                        over the other ranks' (outliers, which compare ranks) */
    int by_floor;    /* 1: the expectation file's floor, 0: an outlier among the ranks */
};

/* Whether rank r's GEMM (triad 0) or triad rate is short: below the expectation's floor, or an
 * outlier among the ranks - below min_fraction x the median of the others AND, on a log scale,
 * outlier_mads scaled MADs (1.4826 MAD: a standard deviation for normal noise) below their
 * median. Every rank computes it alike from the same numbers. A rate <= 0 is not judged
 * here. */
static int rate_short(const struct vrun *v, const struct rank_info *ri, int r, int triad,
                      struct shortfall *s)
{
    const int W = v->W;
    memset(s, 0, sizeof *s);
    s->x = triad ? ri[r].triad : ri[r].gemm;
    const double floor = !v->have_expect ? 0
                         : triad         ? v->expect.triad_min_gbs
                                         : v->expect.gemm_min_gflops;
    if (s->x <= 0)
        return 0;
    if (floor > 0 && s->x < floor) {
        s->limit = floor;
        s->by_floor = 1;
        s->load = rank_load(ri, W, r, triad);
        return 1;
    }
    const double m = median_but(ri, W, triad, r);
    if (m <= 0)
        return 0; /* no other rank to compare with */
    double lm;
    const double lmad = log_mad_but(ri, W, triad, r, &lm);
    const double a = v->cfg.min_fraction * m, b = exp(lm - v->cfg.outlier_mads * 1.4826 * lmad);
    s->limit = a < b ? a : b;
    s->median = m;
    if (!(s->limit > 0 && s->x < s->limit))
        return 0;
    double *loads = ddp_malloc(sizeof(double) * (size_t)W);
    int n = 0;
    for (int q = 0; q < W; q++)
        if (q != r)
            loads[n++] = rank_load(ri, W, q, triad);
    s->load = rank_load(ri, W, r, triad) - median_sort(loads, n);
    free(loads);
    return 1;
}

/* Shortfalls of a round (rates <= 0 and wrong triad values count): 0 means it passes. */
static int rates_shortfalls(const struct vrun *v, const struct rank_info *ri)
{
    int n = 0;
    struct shortfall s;
    for (int r = 0; r < v->W; r++)
        for (int t = 0; t < 2; t++)
            n += (t ? ri[r].triad : ri[r].gemm) <= 0 || rate_short(v, ri, r, t, &s);
    return n;
}

/* A shortfall the load explains (retest): the load is at least foreign_load_max and the rate
 * at least a quarter of what the CPU share left to us would give at the limit,
 * limit x (1 - load) / 4 (a GEMM whose threads wait for each other suffers more than its
 * share). A rank slower than that is slow whatever the load. */
static int load_explains(const struct vrun *v, const struct shortfall *s)
{
    return s->load >= v->cfg.foreign_load_max && v->cfg.foreign_load_max > 0 &&
           s->x >= 0.25 * s->limit * (1 - s->load);
}

/* One rate's verdict for rank r (triad 0: GEMM). */
static void judge_rate(struct report *rep, const struct vrun *v, int r, int triad)
{
    const struct rank_info *x = &rep->ri[r];
    const char *check = triad ? "triad" : "gemm", *unit = triad ? "GB/s" : "GFLOP/s";
    char what[REASON_LEN], load[200] = "";
    struct shortfall s;
    if (!rate_short(v, rep->ri, r, triad, &s))
        return;
    if (s.by_floor)
        snprintf(what, sizeof what, "%s %.1f %s is below the floor %.1f of %.200s (%.100s)",
                 triad ? "triad" : "sgemm", s.x, unit, s.limit, v->expect.path,
                 v->expect.type[0] ? v->expect.type : "no node type");
    else
        snprintf(what, sizeof what,
                 "%s %.1f %s is %.2f x the median %.1f of the other ranks (an outlier: below "
                 "%.2f x and %g MADs)",
                 triad ? "triad" : "sgemm", s.x, unit, s.x / s.median, s.median,
                 v->cfg.min_fraction, v->cfg.outlier_mads);
    if (s.load > 0.005)
        snprintf(load, sizeof load, "; load from other processes %.0f%% (%s)%s", 100 * s.load,
                 triad ? "of the machine's CPUs, or of its time waiting for a CPU"
                       : "of its time waiting for a CPU they held",
                 s.by_floor ? "" : " above the other ranks'");
    if (load_explains(v, &s))
        add_retest(rep, r, check, "rank %d on %s: %s%s: run again when the node is idle", r,
                   x->where, what, load);
    else
        add_failure(rep, r, check, "rank %d on %s: %s%s", r, x->where, what, load);
}

static void judge_rates(struct report *rep, const struct vrun *v)
{
    for (int r = 0; r < rep->W; r++) {
        const struct rank_info *x = &rep->ri[r];
        if (x->gemm <= 0)
            add_failure(rep, r, "gemm", "rank %d on %s: the GEMM did not run", r, x->where);
        else
            judge_rate(rep, v, r, 0);
        if (x->triad < 0)
            add_failure(rep, r, "triad",
                        "rank %d on %s: the triad read back wrong values (memory does not hold "
                        "what was written)",
                        r, x->where);
        else
            judge_rate(rep, v, r, 1);
    }
}

/* The expectation's GPU count and model, and the burn's results, per rank. */
static void judge_node(struct report *rep, const struct vrun *v)
{
    const struct ddp_validate_expect *e = &v->expect;
    for (int r = 0; r < rep->W; r++) {
        const struct rank_info *x = &rep->ri[r];
        if (v->have_expect && e->gpu_count >= 0 && x->gpu_count != e->gpu_count)
            add_failure(rep, r, "gpu", "rank %d on %s: the driver reports %d GPU%s, %s expects %d",
                        r, x->where, x->gpu_count, x->gpu_count == 1 ? "" : "s", e->path,
                        e->gpu_count);
        if (v->have_expect && e->gpu_model[0] && !strcasestr(x->gpu_name, e->gpu_model))
            add_failure(rep, r, "gpu", "rank %d on %s: device '%s', %s expects a '%s'", r, x->where,
                        x->gpu_name, e->path, e->gpu_model);
        if (x->burn_bad)
            add_failure(rep, r, "burn",
                        "rank %d on %s: %lld of %lld GEMM results of the burn differed from the "
                        "first (same inputs): the device computes wrong under sustained load",
                        r, x->where, (long long)x->burn_bad, (long long)x->burn_calls);
    }
}

/* The expectation's bus bandwidth floors, for the run as a whole (rank -1). */
static void judge_busbw(struct report *rep, const struct vrun *v,
                        const struct ddp_validate_ar_row *rows, int nsizes)
{
    const struct ddp_validate_expect *e = &v->expect;
    if (!v->have_expect || !e->nbusbw || v->W < 2)
        return;
    if (e->ar_ranks && e->ar_ranks != v->W) {
        add_warning(rep, "%s: all-reduce floors are for %d ranks, this run has %d: not checked",
                    e->path, e->ar_ranks, v->W);
        return;
    }
    double load = 0;
    for (int r = 0; r < v->W; r++) {
        double f = rank_load(rep->ri, v->W, r, 0);
        load = f > load ? f : load;
    }
    for (int i = 0; i < e->nbusbw; i++) {
        int s = 0;
        while (s < nsizes && rows[s].bytes != e->busbw_bytes[i])
            s++;
        if (s == nsizes) {
            add_warning(rep, "%s: no all-reduce of %lld bytes at level %s: floor not checked",
                        e->path, (long long)e->busbw_bytes[i], v->L.name);
            continue;
        }
        const double x = rows[s].busbw, lim = e->busbw_min[i];
        if (x >= lim)
            continue;
        struct shortfall sf = {x, lim, 0, load, 1};
        (load_explains(v, &sf) ? add_retest : add_failure)(
            rep, -1, "allreduce",
            "all %d ranks: busbw %.3f GB/s at %lld bytes is below the floor %.3f of %s%s", v->W, x,
            (long long)e->busbw_bytes[i], lim, e->path,
            load_explains(v, &sf) ? " while other processes loaded a node: run again" : "");
    }
}

/* rows: (W, nsizes) every rank's checks. A rank whose own input was wrong explains wrong sums
 * everywhere at that size; without one, the ranks that received wrong sums are named. */
static int judge_allreduce(struct report *rep, const struct ddp_validate_ar_row *rows, int nsizes)
{
    const int W = rep->W;
    int *blamed = ddp_calloc((size_t)W, sizeof(int));
    int bad = 0;
    for (int s = 0; s < nsizes; s++) {
        int inputs = 0, results = 0;
        for (int r = 0; r < W; r++) {
            inputs += rows[(size_t)r * nsizes + s].input_bad != 0;
            results += rows[(size_t)r * nsizes + s].bad_elems != 0;
        }
        if (!inputs && !results)
            continue;
        bad = 1;
        for (int r = 0; r < W; r++) {
            const struct ddp_validate_ar_row *x = &rows[(size_t)r * nsizes + s];
            if (blamed[r])
                continue;
            if (inputs && x->input_bad) {
                blamed[r] = 1;
                add_failure(rep, r, "allreduce",
                            "rank %d on %s: its all-reduce input of %lld bytes did not hold the "
                            "values it wrote (sums on all ranks were wrong%s): bad memory or "
                            "compute on this rank",
                            r, rep->ri[r].where, (long long)x->bytes,
                            results ? "" : " but were not checked");
            } else if (!inputs && x->bad_elems) {
                blamed[r] = 1;
                add_failure(rep, r, "allreduce",
                            "rank %d on %s: all-reduce of %lld bytes returned %lld wrong "
                            "element%s (first: [%lld] = %g, exact %g)%s",
                            r, rep->ri[r].where, (long long)x->bytes, (long long)x->bad_elems,
                            x->bad_elems == 1 ? "" : "s", (long long)x->first_bad, x->got, x->want,
                            results == W ? " on every rank: the reduction itself, or the "
                                           "network, is faulty"
                                         : "");
            }
        }
    }
    free(blamed);
    return bad;
}

struct golden_verdict {
    char verdict[8]; /* PASS, FAIL, WARN */
    char reason[REASON_LEN];
    char ref_path[1024]; /* "" if none */
    int ref_steps, compared;
    double max_rel;
    int hash_match;
    uint64_t hash;
};

/* The golden run's final parameter hashes: the value a strict majority holds is right; the
 * ranks that differ are marked in bad and failed. Returns the new count of bad ranks. */
static int judge_hashes(struct report *rep, const struct ddp_validate_golden *g,
                        struct golden_verdict *gv, int *bad, int nbad)
{
    const int W = rep->W, S = g->steps;
    int best = 0, best_count = 0;
    for (int r = 0; r < W; r++) {
        int c = 0;
        for (int q = 0; q < W; q++)
            c += g->final_hash[q] == g->final_hash[r];
        if (c > best_count) {
            best_count = c;
            best = r;
        }
    }
    gv->hash = g->final_hash[best];
    gv->hash_match = best_count == W;
    if (!gv->hash_match) {
        /* first step at which any rank's hash differs from rank `best`'s */
        int first = S - 1;
        for (int s = 0; s < S && first == S - 1; s++)
            for (int r = 0; r < W; r++)
                if (g->hash[(size_t)s * W + r] != g->hash[(size_t)s * W + best]) {
                    first = s;
                    break;
                }
        if (2 * best_count > W) {
            for (int r = 0; r < W; r++)
                if (!bad[r] && g->final_hash[r] != gv->hash) {
                    bad[r] = 1;
                    nbad++;
                    add_failure(rep, r, "golden",
                                "rank %d on %s: golden run parameters differ from those of %d of "
                                "%d ranks (from step %d on)",
                                r, rep->ri[r].where, best_count, W, first);
                }
        } else if (!nbad) {
            for (int r = 0; r < W; r++) {
                bad[r] = 1;
                add_failure(rep, r, "golden",
                            "rank %d on %s: golden run parameters differ between ranks from "
                            "step %d on and no majority tells which are right",
                            r, rep->ri[r].where, first);
            }
            nbad = W;
        }
    }
    return nbad;
}

static void judge_golden(struct report *rep, const struct ddp_validate_golden *g,
                         const struct ddp_validate_ref *ref, const char *ref_path,
                         const char *no_ref_why, double rtol, int recording,
                         struct golden_verdict *gv)
{
    const int W = rep->W, S = g->steps;
    memset(gv, 0, sizeof *gv);
    snprintf(gv->verdict, sizeof gv->verdict, "PASS");
    int *bad = ddp_calloc((size_t)W, sizeof(int));
    int nbad = 0;
    /* 1. parameters changed at rest */
    for (int r = 0; r < W; r++)
        if (g->at_rest[r] >= 0) {
            bad[r] = 1;
            nbad++;
            add_failure(rep, r, "golden",
                        "rank %d on %s: golden run parameters changed in memory between steps "
                        "%d and %d while nothing wrote them (silent data corruption)",
                        r, rep->ri[r].where, g->at_rest[r] - 1, g->at_rest[r]);
        }
    nbad = judge_hashes(rep, g, gv, bad, nbad);
    /* 3. the trajectory against the reference */
    if (recording) {
        snprintf(gv->reason, sizeof gv->reason, "recorded as a reference");
    } else if (!ref) {
        snprintf(gv->verdict, sizeof gv->verdict, "WARN");
        snprintf(gv->reason, sizeof gv->reason, "no reference: %s", no_ref_why);
        add_warning(rep, "golden run: no reference: %s", no_ref_why);
    } else {
        snprintf(gv->ref_path, sizeof gv->ref_path, "%s", ref_path);
        gv->ref_steps = ref->steps;
        gv->compared = S < ref->steps ? S : ref->steps;
        int first, *flag = ddp_calloc((size_t)W, sizeof(int));
        gv->max_rel = ddp_validate_ref_compare(g, ref, rtol, &first, flag);
        if (first >= 0 && nbad) {
            snprintf(gv->reason, sizeof gv->reason,
                     "trajectory differs from %s from step %d on (after the replica failure)",
                     ref_path, first);
        } else if (first >= 0) {
            int nflag = 0;
            for (int r = 0; r < W; r++)
                if (flag[r]) {
                    const size_t k = ((size_t)first * W + r) * 2;
                    nflag++;
                    bad[r] = 1;
                    add_failure(rep, r, "golden",
                                "rank %d on %s: golden run step %d: local loss %.7g and gradient "
                                "norm %.7g, reference %.7g and %.7g (%s, relative tolerance %g)",
                                r, rep->ri[r].where, first, g->local[k], g->local[k + 1],
                                ref->local[k], ref->local[k + 1], ref_path, rtol);
                }
            if (!nflag)
                for (int r = 0; r < W; r++) {
                    bad[r] = 1;
                    add_failure(rep, r, "golden",
                                "rank %d on %s: golden run loss at step %d is %.7g, reference "
                                "%.7g (%s, relative tolerance %g)",
                                r, rep->ri[r].where, first, g->loss[first], ref->loss[first],
                                ref_path, rtol);
                }
            snprintf(gv->reason, sizeof gv->reason,
                     "trajectory differs from %s from step %d on (%d rank%s)", ref_path, first,
                     nflag ? nflag : W, (nflag ? nflag : W) == 1 ? "" : "s");
            nbad++;
        } else {
            snprintf(gv->reason, sizeof gv->reason,
                     "%d steps within %g of %s (largest loss difference %.2g)", gv->compared, rtol,
                     ref_path, gv->max_rel);
        }
        free(flag);
    }
    if (nbad) {
        snprintf(gv->verdict, sizeof gv->verdict, "FAIL");
        if (!gv->reason[0] || recording)
            snprintf(gv->reason, sizeof gv->reason, "parameters differ between ranks");
    }
    free(bad);
}

/* ---- printing ---------------------------------------------------------------------------- */

/* "0-3,5" from the ranks on one host. */
static void rank_ranges(const int *ranks, int n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used + 24 < len; i++) {
        int j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
            j++;
        used += (size_t)snprintf(buf + used, len - used, "%s%d", used ? "," : "", ranks[i]);
        if (j > i)
            used += (size_t)snprintf(buf + used, len - used, "-%d", ranks[j]);
        i = j;
    }
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* A finite number or null. */
static void json_num(FILE *f, double v, const char *fmt)
{
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

struct run_facts {
    const char *level;
    int nsizes, gemm_n, steps;
    int64_t triad_mib;
    const char *launcher, *comm, *backend;
    double med_gemm, med_triad, elapsed;
    int nnodes;
    const char *expect; /* --expect FILE, or NULL */
};

/* Unique hosts in rank order; hosts_of[r] = index of rank r's host. */
static int group_hosts(const struct rank_info *ri, int W, int *host_of, int *first_rank)
{
    int n = 0;
    for (int r = 0; r < W; r++) {
        int h = -1;
        for (int k = 0; k < n && h < 0; k++)
            if (!strcmp(ri[first_rank[k]].host, ri[r].host))
                h = k;
        if (h < 0) {
            h = n++;
            first_rank[h] = r;
        }
        host_of[r] = h;
    }
    return n;
}

static void print_report(const struct report *rep, const struct run_facts *rf,
                         const struct ddp_validate_ar_row *ar, const struct golden_verdict *gv,
                         const struct ddp_validate_golden *g, const int *host_of,
                         const int *first_rank, double frac)
{
    const int W = rep->W;
    printf("\nranks (%s backend, level %s)\n", rf->backend, rf->level);
    printf("%4s  %-16s %-28s %9s %7s %9s %5s %9s %6s %7s %6s %6s  %s\n", "rank", "host", "cpu",
           "cpus", "threads", "memory", "gpu", "sgemm", "ratio", "triad", "ratio", "wait",
           "verdict");
    printf("%4s  %-16s %-28s %9s %7s %9s %5s %9s %6s %7s %6s %6s  %s\n", "", "", "", "(allowed)",
           "", "(GiB)", "", "(GFLOP/s)", "(x)", "(GB/s)", "(x)", "(%)", "");
    for (int r = 0; r < W; r++) {
        const struct rank_info *x = &rep->ri[r];
        char cpus[32];
        snprintf(cpus, sizeof cpus, "%d/%d", x->cpus_allowed, x->cpus_online);
        char gpus[16] = "none";
        if (x->gpu_count > 0)
            snprintf(gpus, sizeof gpus, "%d", x->gpu_count);
        printf("%4d  %-16.16s %-28.28s %9s %7d %9.1f %5s %9.1f %6.2f %7.1f %6.2f %6.0f  %s\n", r,
               x->host, x->cpu_model, cpus, x->threads, (double)x->mem_total / (1 << 30), gpus,
               x->gemm, rf->med_gemm > 0 ? x->gemm / rf->med_gemm : 0, x->triad,
               rf->med_triad > 0 ? x->triad / rf->med_triad : 0, 100 * rank_load(rep->ri, W, r, 0),
               verdict_of(rep, r));
    }
    printf("%4s  %-16s %-28s %9s %7s %9s %5s %9.1f %6s %7.1f %6s %6s  (an outlier below %.2f x "
           "the median of the others fails; wait: for CPUs other processes held)\n",
           "", "median", "", "", "", "", "", rf->med_gemm, "", rf->med_triad, "", "", frac);

    printf("\nall-reduce: in-place sum of float32 over %d rank%s through comm %s; time = median "
           "of timed blocks of the slowest rank; busbw = algbw x 2(n-1)/n\n",
           W, W == 1 ? "" : "s", rf->comm);
    printf("%12s %11s %11s %9s %9s %6s %10s\n", "size", "count", "time", "algbw", "busbw", "iters",
           "wrong");
    printf("%12s %11s %11s %9s %9s %6s %10s\n", "(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)", "",
           "(elements)");
    for (int s = 0; s < rf->nsizes; s++) {
        int64_t wrong = 0;
        for (int r = 0; r < W; r++)
            wrong += ar[(size_t)r * rf->nsizes + s].bad_elems;
        const struct ddp_validate_ar_row *x = &ar[s];
        printf("%12lld %11lld %11.2f %9.3f %9.3f %6d %10lld\n", (long long)x->bytes,
               (long long)x->count, x->time_s * 1e6, x->algbw, x->busbw, x->iters,
               (long long)wrong);
    }

    printf("\ngolden run: %d steps on %d rank%s (%s)\n", g->steps, W, W == 1 ? "" : "s",
           DDP_VALIDATE_GOLDEN_SPEC);
    printf("  loss %.6f at step 0, %.6f at step %d; parameter hash %016llx %s\n", g->loss[0],
           g->loss[g->steps - 1], g->steps - 1, (unsigned long long)gv->hash,
           gv->hash_match ? "on every rank" : "on the majority (ranks differ)");
    printf("  %s: %s\n", gv->verdict, gv->reason);

    printf("\n%-20s %-12s %-7s %s\n", "node", "ranks", "verdict", "reason");
    int nh = rf->nnodes;
    int *list = ddp_malloc(sizeof(int) * (size_t)W);
    for (int h = 0; h < nh; h++) {
        int n = 0;
        for (int r = 0; r < W; r++)
            if (host_of[r] == h)
                list[n++] = r;
        char rr[64];
        rank_ranges(list, n, rr, sizeof rr);
        int printed = 0;
        const char *hv = "PASS";
        for (int i = 0; i < rep->nfail; i++)
            if (rep->fail[i].rank >= 0 && host_of[rep->fail[i].rank] == h)
                hv = !rep->fail[i].retest ? "FAIL" : strcmp(hv, "FAIL") ? "RETEST" : hv;
        for (int i = 0; i < rep->nfail; i++)
            if (rep->fail[i].rank >= 0 && host_of[rep->fail[i].rank] == h) {
                printf("%-20.20s %-12s %-7s %s\n", printed ? "" : rep->ri[first_rank[h]].host,
                       printed ? "" : rr, printed ? "" : hv, rep->fail[i].reason);
                printed = 1;
            }
        if (!printed)
            printf("%-20.20s %-12s %-7s %s\n", rep->ri[first_rank[h]].host, rr, "PASS", "");
    }
    free(list);
    for (int i = 0; i < rep->nwarn; i++)
        printf("WARN: %s\n", rep->warn[i]);
    if (rep->nfail == 0) {
        printf("validate: PASS (%d rank%s on %d node%s, %.1f s)\n", W, W == 1 ? "" : "s", nh,
               nh == 1 ? "" : "s", rf->elapsed);
    } else if (rep->nhard) {
        printf("validate: FAIL on %d check%s:\n", rep->nhard, rep->nhard == 1 ? "" : "s");
    } else {
        printf("validate: RETEST: %d check%s fell short while other processes loaded the node; "
               "no fault found, run again when it is idle (exit %d)\n",
               rep->nretest, rep->nretest == 1 ? "" : "s", DDP_EXIT_RETEST);
    }
    for (int i = 0; i < rep->nfail; i++)
        printf("%s %s: %s\n", rep->fail[i].retest ? "RETEST" : "FAIL", rep->fail[i].check,
               rep->fail[i].reason);
    fflush(stdout);
}

/* The "ranks" array's members: one object per rank. */
static void json_ranks(FILE *f, const struct report *rep, const struct run_facts *rf)
{
    const int W = rep->W;
    for (int r = 0; r < W; r++) {
        const struct rank_info *x = &rep->ri[r];
        fprintf(f, "%s\n    {\"rank\": %d, \"host\": ", r ? "," : "", r);
        json_str(f, x->host);
        fprintf(f, ", \"cpu_model\": ");
        json_str(f, x->cpu_model);
        fprintf(f,
                ", \"cpus_online\": %d, \"cpus_allowed\": %d, \"threads\": %d, "
                "\"mem_total_bytes\": %lld, \"mem_available_bytes\": %lld, \"gpu\": \"%s\", "
                "\"gpu_count\": %d, \"gpu_memory_bytes\": \"none\", \"gpu_driver\": ",
                x->cpus_online, x->cpus_allowed, x->threads, (long long)x->mem_total,
                (long long)x->mem_avail, x->gpu_count > 0 ? "cuda" : "none", x->gpu_count);
        json_str(f, x->gpu_driver);
        fprintf(f, ", \"gemm_gflops\": ");
        json_num(f, x->gemm, "%.3f");
        fprintf(f, ", \"gemm_ratio\": ");
        json_num(f, rf->med_gemm > 0 ? x->gemm / rf->med_gemm : NAN, "%.4f");
        fprintf(f, ", \"triad_gbs\": ");
        json_num(f, x->triad, "%.3f");
        fprintf(f, ", \"triad_ratio\": ");
        json_num(f, rf->med_triad > 0 ? x->triad / rf->med_triad : NAN, "%.4f");
        fprintf(f, ", \"cpu_wait_share\": %.3f, \"foreign_cpu_share\": %.3f, \"verdict\": \"%s\"}",
                rank_load(rep->ri, W, r, 0), machine_load(rep->ri, W, r), verdict_of(rep, r));
    }
}

/* The "allreduce" object, after the ranks: the sweep's rows with everybody's wrong elements. */
static void json_allreduce(FILE *f, const struct report *rep, const struct run_facts *rf,
                           const struct ddp_validate_ar_row *ar)
{
    const int W = rep->W;
    int ar_bad = 0;
    for (int i = 0; i < rep->nfail; i++)
        ar_bad |= !strcmp(rep->fail[i].check, "allreduce");
    fprintf(f,
            "\n  ],\n  \"allreduce\": {\"op\": \"sum\", \"dtype\": \"float32\", "
            "\"in_place\": true, \"ranks\": %d, \"busbw_factor\": %.6g, \"verdict\": \"%s\", "
            "\"rows\": [",
            W, ddp_comm_busbw_factor(W), ar_bad ? "FAIL" : "PASS");
    for (int s = 0; s < rf->nsizes; s++) {
        int64_t wrong = 0;
        for (int r = 0; r < W; r++)
            wrong += ar[(size_t)r * rf->nsizes + s].bad_elems;
        const struct ddp_validate_ar_row *x = &ar[s];
        fprintf(f, "%s\n    {\"bytes\": %lld, \"count\": %lld, \"time_us\": ", s ? "," : "",
                (long long)x->bytes, (long long)x->count);
        json_num(f, x->time_s * 1e6, "%.6g");
        fprintf(f, ", \"algbw_gbs\": ");
        json_num(f, x->algbw, "%.6g");
        fprintf(f, ", \"busbw_gbs\": ");
        json_num(f, x->busbw, "%.6g");
        fprintf(f, ", \"iters\": %d, \"blocks\": %d, \"wrong_elements\": %lld}", x->iters,
                x->blocks, (long long)wrong);
    }
}

static int write_json(const char *path, const struct report *rep, const struct run_facts *rf,
                      const struct ddp_validate_config *cfg, const struct ddp_validate_ar_row *ar,
                      const struct golden_verdict *gv, const struct ddp_validate_golden *g,
                      const int *host_of, const int *first_rank, char *err, size_t errlen)
{
    const int W = rep->W;
    struct ddp_atomic_file af;
    FILE *f = ddp_atomic_open(&af, path);
    if (!f)
        return ddp_err(err, errlen, "--json %s.tmp: cannot write: %s", path, strerror(errno));
    fprintf(f, "{\n  \"format\": \"ddptrain-validate-1\",\n  \"version\": \"%s\",\n", DDP_VERSION);
    fprintf(f,
            "  \"verdict\": \"%s\",\n  \"exit_code\": %d,\n  \"quick\": %s,\n  \"level\": "
            "\"%s\",\n",
            verdict_of(rep, -2),
            rep->nhard     ? 1
            : rep->nretest ? DDP_EXIT_RETEST
                           : 0,
            strcmp(rf->level, "quick") ? "false" : "true", rf->level);
    fprintf(f,
            "  \"world_size\": %d,\n  \"nodes_count\": %d,\n  \"launcher\": \"%s\",\n"
            "  \"comm\": \"%s\",\n  \"backend\": \"%s\",\n  \"elapsed_s\": %.3f,\n",
            W, rf->nnodes, rf->launcher, rf->comm, rf->backend, rf->elapsed);
    fprintf(f, "  \"expect\": ");
    if (rf->expect)
        json_str(f, rf->expect);
    else
        fputs("null", f);
    fprintf(f, ",\n  \"failures\": [");
    for (int i = 0; i < rep->nfail; i++) {
        const struct failure *x = &rep->fail[i];
        fprintf(f, "%s\n    {\"rank\": %d, \"host\": ", i ? "," : "", x->rank);
        if (x->rank >= 0)
            json_str(f, rep->ri[x->rank].host);
        else
            fputs("null", f);
        fprintf(f, ", \"check\": \"%s\", \"verdict\": \"%s\", \"reason\": ", x->check,
                x->retest ? "RETEST" : "FAIL");
        json_str(f, x->reason);
        fputc('}', f);
    }
    fprintf(f, "%s],\n  \"warnings\": [", rep->nfail ? "\n  " : "");
    for (int i = 0; i < rep->nwarn; i++) {
        fprintf(f, "%s", i ? ", " : "");
        json_str(f, rep->warn[i]);
    }
    fprintf(f, "],\n  \"gemm\": {\"n\": %d, \"unit\": \"GFLOP/s\", \"median\": ", rf->gemm_n);
    json_num(f, rf->med_gemm, "%.3f");
    fprintf(f, ", \"min_fraction\": %g},\n", cfg->min_fraction);
    fprintf(f, "  \"triad\": {\"mib_per_array\": %lld, \"unit\": \"GB/s\", \"median\": ",
            (long long)rf->triad_mib);
    json_num(f, rf->med_triad, "%.3f");
    fprintf(f, ", \"min_fraction\": %g},\n  \"ranks\": [", cfg->min_fraction);
    json_ranks(f, rep, rf);
    json_allreduce(f, rep, rf, ar);
    fprintf(f, "\n  ]},\n  \"golden\": {\"verdict\": \"%s\", \"reason\": ", gv->verdict);
    json_str(f, gv->reason);
    fprintf(f, ", \"steps\": %d, \"world_size\": %d, \"spec\": ", g->steps, W);
    json_str(f, DDP_VALIDATE_GOLDEN_SPEC);
    fprintf(f, ", \"hash\": \"%016llx\", \"hash_match\": %s, \"reference\": ",
            (unsigned long long)gv->hash, gv->hash_match ? "true" : "false");
    if (gv->ref_path[0])
        json_str(f, gv->ref_path);
    else
        fputs("null", f);
    fprintf(f,
            ", \"reference_steps\": %d, \"compared_steps\": %d, \"max_rel_diff\": ", gv->ref_steps,
            gv->compared);
    json_num(f, gv->ref_path[0] ? gv->max_rel : NAN, "%.3g");
    fprintf(f, ", \"tolerance\": %g, \"losses\": [", cfg->golden_rtol);
    for (int s = 0; s < g->steps; s++) {
        fprintf(f, "%s", s ? ", " : "");
        json_num(f, g->loss[s], "%.9g");
    }
    fprintf(f, "]},\n  \"nodes\": [");
    int *list = ddp_malloc(sizeof(int) * (size_t)W);
    for (int h = 0; h < rf->nnodes; h++) {
        fprintf(f, "%s\n    {\"host\": ", h ? "," : "");
        json_str(f, rep->ri[first_rank[h]].host);
        fprintf(f, ", \"ranks\": [");
        int n = 0, failed = 0;
        for (int r = 0; r < W; r++)
            if (host_of[r] == h) {
                fprintf(f, "%s%d", n ? ", " : "", r);
                list[n++] = r;
            }
        fprintf(f, "], \"reasons\": [");
        const char *hv = "PASS";
        for (int i = 0; i < rep->nfail; i++)
            if (rep->fail[i].rank >= 0 && host_of[rep->fail[i].rank] == h) {
                fprintf(f, "%s", failed++ ? ", " : "");
                json_str(f, rep->fail[i].reason);
                hv = !rep->fail[i].retest ? "FAIL" : strcmp(hv, "FAIL") ? "RETEST" : hv;
            }
        fprintf(f, "], \"verdict\": \"%s\"}", hv);
    }
    free(list);
    fprintf(f, "\n  ]\n}\n");
    char why[DDP_ERR_LEN];
    if (ddp_atomic_close(&af, why, sizeof why) != 0)
        return ddp_err(err, errlen, "--json %s", why);
    return 0;
}

/* ---- references -------------------------------------------------------------------------- */

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The reference for backend and W: an explicit FILE or DIR, else the shipped directory
 * (core/paths.h: the install's or the build tree's) or the one under the working directory.
 * Returns 1 with path filled, 0 with the places looked at in why. */
static int find_reference(const char *given, const char *backend, int W, char *path, size_t len,
                          char *why, size_t whylen)
{
    char name[64];
    snprintf(name, sizeof name, "%s-w%d.ref", backend, W);
    if (given && given[0]) {
        if (is_dir(given))
            snprintf(path, len, "%s/%s", given, name);
        else
            snprintf(path, len, "%s", given);
        if (is_file(path))
            return 1;
        ddp_err(why, whylen, "%s does not exist", path);
        return 0;
    }
    char rel[128], shipped[DDP_PATH_MAX];
    snprintf(rel, sizeof rel, "configs/validate-ref/%s", name);
    if (ddp_paths_find(rel, path, len)) /* the install's, or the source tree's */
        return 1;
    snprintf(shipped, sizeof shipped, "%s", path);
    snprintf(path, len, "configs/validate-ref/%s", name);
    if (is_file(path))
        return 1;
    ddp_err(why, whylen,
            "none for the %s backend on %d rank%s (%s not found, nor in ./configs/validate-ref/); "
            "record one on a trusted node with --record",
            backend, W, W == 1 ? "" : "s", shipped);
    return 0;
}

/* ---- the command ------------------------------------------------------------------------- */

static void barrier_cb(void *c)
{
    ddp_comm_barrier(c);
}

/* Every rank learns whether all succeeded; returns the lowest failing rank's code. */
static int agree(ddp_comm *c, int code)
{
    int W = ddp_comm_size(c);
    int64_t mine = code, *all = ddp_malloc(sizeof(int64_t) * (size_t)W);
    ddp_comm_allgather(c, &mine, all, sizeof mine);
    int rc = 0;
    for (int r = 0; r < W && !rc; r++)
        rc = (int)all[r];
    free(all);
    return rc;
}

/* The backend and collectives this rank validates with: where the build has CUDA and NCCL
 * and the driver reports GPUs (as training with device = auto), the rank's bound GPU
 * (dist/binding.h) and NCCL, so the GEMM, the all-reduces and the golden run exercise the
 * GPU path; else the CPU backend and comm auto. *device: the CUDA ordinal, -1 for the CPU.
 * Returns 0, or -1 with one line in err (exit DDP_EXIT_LAUNCH). */
static int choose_device(const struct ddp_world *w, double timeout_s, const struct ddp_backend **be,
                         struct ddp_comm_opts *o, int *device, char *err, size_t errlen)
{
    struct ddp_device_choice dev;
    *o = ddp_comm_opts_of(DDP_COMM_AUTO, timeout_s);
    if (ddp_backend_select(GPU_DEVICE, 0, 0, w->local_rank, w->local_size, &dev, err, errlen) != 0)
        return -1;
    *be = dev.be;
    *device = dev.device;
    if (dev.device >= 0) {
        o->backend = DDP_COMM_NCCL;
        o->device = dev.device;
    }
    return 0;
}

/* The collectives of options o: on GPUs the NCCL id goes as `[dist] bootstrap = auto` sends
 * it for training (dist/bootstrap.h ddp_bootstrap_decide), over an MPI communicator made for
 * it alone where MPI started the process; a verdict every rank reaches alike (ddp_comm_check:
 * the build, the launcher) is printed once, by rank 0. Returns 0 or an exit code. */
static int vrun_comm(struct vrun *v, struct ddp_comm_opts *o)
{
    char err[DDP_ERR_LEN * 2];
    const struct ddp_world *w = &v->w;
    if (o->backend == DDP_COMM_NCCL && ddp_bootstrap_wants_mpi(o->bootstrap, w, NULL, 0)) {
        struct ddp_comm_opts mo = ddp_comm_opts_of(DDP_COMM_MPI, o->timeout_s);
        v->boot = ddp_comm_create(&mo, w, err, sizeof err);
        if (!v->boot) {
            ddp_warn("%s", err);
            return DDP_EXIT_LAUNCH;
        }
        o->bootstrap = DDP_BOOTSTRAP_MPI;
        o->boot_comm = v->boot;
    }
    if (ddp_comm_check(o, w, err, sizeof err) != 0) {
        if (w->rank == 0)
            ddp_warn("%s", err);
        return DDP_EXIT_LAUNCH;
    }
    v->c = ddp_comm_create(o, w, err, sizeof err);
    if (!v->c) {
        ddp_warn("%s", err);
        return DDP_EXIT_LAUNCH;
    }
    return 0;
}

/* The level's settings (see struct level). */
static void level_of(const struct vrun *v, struct level *L)
{
    const struct ddp_validate_config *c = &v->cfg;
    const int q = v->a->level == DDP_VALIDATE_QUICK, lg = v->a->level == DDP_VALIDATE_LONG;
    L->name = q ? "quick" : lg ? "long" : "standard";
    L->gemm_n = q ? c->gemm_n_quick : c->gemm_n;
    L->gemm_reps = q ? c->gemm_reps_quick : c->gemm_reps;
    L->gemm_s = q ? c->gemm_s_quick : c->gemm_s;
    L->triad_mib = q ? c->triad_mib_quick : c->triad_mib;
    L->triad_reps = q ? c->triad_reps_quick : c->triad_reps;
    L->triad_s = q ? c->triad_s_quick : c->triad_s;
    L->ar_max = q ? c->ar_max_bytes_quick : lg ? c->ar_max_bytes_long : c->ar_max_bytes;
    L->ar_blocks = q ? c->ar_blocks_quick : c->ar_blocks;
    L->golden_steps = v->a->record || !q ? c->golden_steps : c->golden_steps_quick;
    L->burn_s = lg ? c->burn_s : 0;
    if (v->have_expect && v->expect.gemm_n)
        L->gemm_n = v->expect.gemm_n;
    if (v->have_expect && v->expect.triad_mib)
        L->triad_mib = v->expect.triad_mib;
}

/* --slurm-health: one process per node whatever a prolog's environment says (slurmd runs it
 * outside any job step): the launchers' variables are hidden from world detection. */
static const char *env_single(void *ctx, const char *name)
{
    (void)ctx;
    static const char *const hidden[] = {"SLURM_", "OMPI_",      "PMI",         "PMIX",
                                         "RANK",   "WORLD_SIZE", "LOCAL_",      "MASTER_",
                                         "GROUP_", "ROLE_",      "TORCHELASTIC"};
    for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++)
        if (!strncmp(name, hidden[i], strlen(hidden[i])))
            return NULL;
    return getenv(name);
}

/* Settings, expectations and faults; usage errors. Returns 0 or DDP_EXIT_USAGE (printed). */
static int vrun_settings(struct vrun *v)
{
    const struct ddp_validate_args *a = v->a;
    char err[DDP_ERR_LEN * 2];
    ddp_validate_config_defaults(&v->cfg);
    if (a->config && ddp_validate_config_load(&v->cfg, a->config, err, sizeof err) != 0) {
        fprintf(stderr, "ddptrain: validate: %s\n", err);
        return DDP_EXIT_USAGE;
    }
    if (a->expect) {
        if (ddp_validate_expect_load(&v->expect, a->expect, err, sizeof err) != 0) {
            fprintf(stderr, "ddptrain: validate: --expect %s\n", err);
            return DDP_EXIT_USAGE;
        }
        v->have_expect = 1;
    }
    if (a->reference && a->record) {
        fprintf(stderr, "ddptrain: validate: --record and --reference exclude each other\n");
        return DDP_EXIT_USAGE;
    }
    if (a->expect && a->record_expect) {
        fprintf(stderr, "ddptrain: validate: --expect and --record-expect exclude each other\n");
        return DDP_EXIT_USAGE;
    }
    if (ddp_validate_faults_parse(&v->faults, ddp_test_hooks()->validate_fault, err, sizeof err) !=
        0) {
        fprintf(stderr, "ddptrain: validate: %s\n", err);
        return DDP_EXIT_USAGE;
    }
    if (a->slurm_health && v->cfg.rounds > 2)
        v->cfg.rounds = 2; /* the budget is short: one retry */
    level_of(v, &v->L);
    return 0;
}

/* Settings, faults, world and collectives (as training sets them up), the liveness watch and
 * threads. Returns 0 or an exit code (the reason printed). */
static int vrun_start(struct vrun *v)
{
    char err[DDP_ERR_LEN * 2];
    int rc = vrun_settings(v);
    if (rc)
        return rc;
    struct ddp_world *w = &v->w;
    if (ddp_world_detect(w, v->a->slurm_health ? env_single : NULL, NULL, 0, err, sizeof err) !=
        0) {
        fprintf(stderr, "ddptrain: %s\n", err);
        return DDP_EXIT_LAUNCH;
    }
    ddp_log_set_identity(w->host, w->rank, w->world_size);
    if (w->warning[0] && w->rank == 0)
        ddp_warn("%s", w->warning);
    struct ddp_comm_opts copts;
    if (choose_device(w, v->cfg.timeout_s, &v->be, &copts, &v->device, err, sizeof err) != 0) {
        ddp_warn("%s", err);
        return DDP_EXIT_LAUNCH;
    }
    rc = vrun_comm(v, &copts);
    if (rc)
        return rc;
    /* a dead peer stops every rank within seconds (liveness.h) */
    v->live = w->world_size > 1 ? ddp_liveness_create(v->c, w->host) : NULL;
    if (v->live)
        ddp_comm_set_peer_probe(v->c, ddp_liveness_probe, v->live);
    v->W = w->world_size;
    v->me = w->rank;
    v->threads = choose_threads(&v->cfg, w);
    if (v->be->set_threads)
        v->be->set_threads(v->threads);
    return 0;
}

/* Rank 0 finds and reads the reference now: a bad file is a usage error before any work.
 * Returns the code every rank agrees on. */
static int vrun_reference(struct vrun *v)
{
    const char *record = v->a->record;
    const char *given = v->a->reference       ? v->a->reference
                        : v->cfg.reference[0] ? v->cfg.reference
                                              : NULL;
    char err[DDP_ERR_LEN * 2];
    int code = 0;
    if (v->me == 0 && !record) {
        if (find_reference(given, v->be->name, v->W, v->ref_path, sizeof v->ref_path, v->no_ref,
                           sizeof v->no_ref)) {
            if (ddp_validate_ref_read(&v->ref, v->ref_path, err, sizeof err) != 0) {
                ddp_warn("validate: %s", err);
                code = DDP_EXIT_USAGE;
            } else if (strcmp(v->ref.spec, DDP_VALIDATE_GOLDEN_SPEC) != 0 ||
                       strcmp(v->ref.backend, v->be->name) != 0) {
                snprintf(v->no_ref, sizeof v->no_ref,
                         "%s was recorded for another golden run or backend (%s: %s)", v->ref_path,
                         v->ref.backend, v->ref.spec);
                ddp_validate_ref_free(&v->ref);
            } else if (v->ref.world_size != v->W) {
                snprintf(v->no_ref, sizeof v->no_ref, "%s is for %d rank%s, this run has %d",
                         v->ref_path, v->ref.world_size, v->ref.world_size == 1 ? "" : "s", v->W);
                ddp_validate_ref_free(&v->ref);
            } else {
                v->have_ref = 1;
            }
        } else if (given) {
            ddp_warn("validate: reference %s", v->no_ref);
            code = DDP_EXIT_USAGE;
        }
    }
    if (v->me == 0 && record) {
        if (is_dir(record))
            snprintf(v->rec_path, sizeof v->rec_path, "%s/%s-w%d.ref", record, v->be->name, v->W);
        else
            snprintf(v->rec_path, sizeof v->rec_path, "%s", record);
    }
    return agree(v->c, code);
}

/* The most seconds one rate measurement with a window of `seconds` may take: four windows
 * (two seconds at least), so that a very slow rank is measured in bounded time; with
 * --slurm-health also at most 15% of the budget. */
static double measure_cap(const struct vrun *v, double seconds)
{
    double cap = fmax(2.0, 4 * seconds);
    return v->a->slurm_health ? fmin(cap, 0.15 * v->a->budget_s) : cap;
}

/* The counters of the load at a moment (health.c). */
struct load_mark {
    double busy, own, t, run, wait; /* busy -1, run -1: unknown */
};

static void load_mark(struct load_mark *m)
{
    m->busy = ddp_validate_machine_busy_s();
    m->own = ddp_validate_own_cpu_s();
    m->t = ddp_now();
    if (ddp_validate_sched_s(&m->run, &m->wait) != 0)
        m->run = -1;
}

/* Add the load since m0 to this rank's: only its own measurements count (in turns, the load
 * while the others measured is theirs). */
static void load_add(struct vrun *v, const struct load_mark *m0)
{
    struct load_mark m1;
    load_mark(&m1);
    struct rank_info *mine = &v->mine;
    mine->busy_s =
        m0->busy < 0 || m1.busy < 0 || mine->busy_s < 0 ? -1 : mine->busy_s + m1.busy - m0->busy;
    mine->own_s += m1.own - m0->own;
    mine->wall_s += m1.t - m0->t;
    if (m0->run < 0 || m1.run < 0 || v->sched_run < 0) {
        v->sched_run = -1;
        mine->wait_share = -1;
        return;
    }
    v->sched_run += m1.run - m0->run;
    v->sched_wait += m1.wait - m0->wait;
    mine->wait_share =
        v->sched_run + v->sched_wait > 0 ? v->sched_wait / (v->sched_run + v->sched_wait) : -1;
}

/* One round of rates: each turn's ranks measure, the others meet them in the kernels' sync;
 * then everybody's results into v->all. */
static void rates_round(struct vrun *v, int turns, int my_turn, int *triad_bad)
{
    const struct level *L = &v->L;
    struct rank_info *mine = &v->mine;
    mine->gemm = mine->triad = 0;
    for (int t = 0; t < turns; t++) {
        if (t != my_turn) {
            ddp_comm_barrier(v->c);
            ddp_comm_barrier(v->c);
            continue;
        }
        struct load_mark m0;
        load_mark(&m0);
        ddp_validate_bench_cap(measure_cap(v, L->gemm_s));
        mine->gemm = ddp_validate_gemm(
            v->be, L->gemm_n, L->gemm_reps, L->gemm_s,
            ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_SLOW_GEMM, v->me), barrier_cb,
            v->c);
        ddp_validate_bench_cap(measure_cap(v, L->triad_s));
        mine->triad = ddp_validate_triad(
            L->triad_mib, L->triad_reps, L->triad_s, v->threads,
            ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_SLOW_TRIAD, v->me), barrier_cb,
            v->c);
        *triad_bad |= mine->triad < 0;
        load_add(v, &m0);
    }
    mine->triad_bad = *triad_bad;
    ddp_comm_allgather(v->c, mine, v->all, sizeof *mine);
}

/* The inventory of every rank, to everybody. */
static void vrun_inventory(struct vrun *v)
{
    v->all = ddp_calloc((size_t)v->W, sizeof *v->all);
    inventory(&v->mine, &v->w, v->threads);
    snprintf(v->mine.gpu_name, sizeof v->mine.gpu_name, "none");
    if (v->device >= 0) {
        v->mine.device = v->device;
        snprintf(v->mine.where, sizeof v->mine.where, "%s GPU %d", v->w.host, v->device);
#if HAVE_CUDA
        snprintf(v->mine.gpu_name, sizeof v->mine.gpu_name, "%s", ddp_cuda_device_string());
#endif
    }
    ddp_comm_allgather(v->c, &v->mine, v->all, sizeof v->mine);
}

/* The worst rates of a round, for --record-expect. */
static void record_worst(struct vrun *v)
{
    for (int r = 0; r < v->W; r++) {
        if (v->rec_rounds == 0 || v->all[r].gemm < v->rec_gemm)
            v->rec_gemm = v->all[r].gemm;
        if (v->rec_rounds == 0 || v->all[r].triad < v->rec_triad)
            v->rec_triad = v->all[r].triad;
        v->rec_rounds += r == 0;
    }
}

/* Inventory, then the rates, in turns where ranks would share CPUs, in rounds: when a rate
 * falls short (rate_short), everybody measures again under the same conditions (a passing
 * burst of noise clears; a slow rank stays slow). Each rank's best rate of the rounds is
 * judged: every rank gets the same number of tries, so best is compared with best. Wrong
 * triad values in any round stay wrong. --record-expect measures every round. */
static void vrun_rates(struct vrun *v)
{
    const int W = v->W;
    vrun_inventory(v);
    int my_turn, shared, turns = measurement_turns(v->all, W, v->me, &my_turn, &shared);
    ddp_log("ddptrain %s validate --level %s: %d rank%s, launcher %s, comm %s, backend %s, %d "
            "thread%s per rank%s",
            DDP_VERSION, v->L.name, W, W == 1 ? "" : "s", ddp_launcher_name(v->w.launcher),
            ddp_comm_name(v->c), v->be->name, v->threads, v->threads == 1 ? "" : "s",
            turns > 1 ? "; ranks sharing CPUs measure their rates in turns" : "");
    if (shared && my_turn == 0)
        v->lock = machine_lock();
    v->mine.turns = shared;
    int rounds = 0, triad_bad = 0;
    const int nrounds = v->a->record_expect && v->cfg.rounds < 5 ? 5 : v->cfg.rounds;
    struct rank_info *best = ddp_calloc((size_t)W, sizeof *best);
    for (int round = 0; round < nrounds; round++) {
        rates_round(v, turns, my_turn, &triad_bad);
        rounds++;
        record_worst(v);
        for (int r = 0; r < W; r++) {
            const double g = fmax(best[r].gemm, v->all[r].gemm);
            const double t = fmax(best[r].triad, v->all[r].triad);
            best[r] = v->all[r]; /* the load so far, and everything else as now */
            best[r].gemm = g;
            best[r].triad = v->all[r].triad_bad ? -1 : t;
        }
        if (rates_shortfalls(v, best) == 0 && !v->a->record_expect)
            break;
    }
    memcpy(v->all, best, sizeof *v->all * (size_t)W);
    free(best);
    ddp_log("rates measured in %d round%s (%.1f s)", rounds, rounds == 1 ? "" : "s",
            ddp_now() - v->t_start);
}

/* The all-reduce sweep; every rank's checks to everybody. */
static void vrun_sweep(struct vrun *v)
{
    const struct ddp_validate_config *cfg = &v->cfg;
    struct ddp_validate_ar_opts ao = {
        cfg->ar_min_bytes, v->L.ar_max, v->L.ar_blocks, cfg->ar_block_ms / 1e3,
        ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_BAD_ALLREDUCE, v->me)};
    v->rows = ddp_calloc(DDP_VALIDATE_MAX_SIZES, sizeof *v->rows);
    v->nsizes = ddp_validate_allreduce_sweep(v->c, &ao, v->rows);
    v->ar_all = ddp_calloc((size_t)v->W * (size_t)v->nsizes, sizeof *v->ar_all);
    ddp_comm_allgather(v->c, v->rows, v->ar_all, sizeof *v->rows * (size_t)v->nsizes);
    ddp_log("all-reduce sweep done (%.1f s)", ddp_now() - v->t_start);
}

/* Level long: every rank burns at once (the node's full load), then everybody's results. */
static void vrun_burn(struct vrun *v)
{
    if (v->L.burn_s <= 0)
        return;
    struct ddp_validate_burn_result b;
    ddp_comm_barrier(v->c);
    ddp_validate_burn(v->be, v->L.gemm_n, v->L.burn_s,
                      ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_BAD_BURN, v->me), &b);
    v->mine.burn_gflops = b.gflops;
    v->mine.burn_min = b.min_gflops;
    v->mine.burn_calls = b.calls;
    v->mine.burn_bad = b.mismatches;
    struct rank_info *got = ddp_calloc((size_t)v->W, sizeof *got);
    ddp_comm_allgather(v->c, &v->mine, got, sizeof v->mine);
    for (int r = 0; r < v->W; r++) {
        v->all[r].burn_gflops = got[r].burn_gflops;
        v->all[r].burn_min = got[r].burn_min;
        v->all[r].burn_calls = got[r].burn_calls;
        v->all[r].burn_bad = got[r].burn_bad;
    }
    free(got);
    ddp_log("burn: %.0f s of GEMMs (n %d), %.1f GFLOP/s sustained on rank 0, slowest second "
            "%.1f (%.1f s)",
            v->L.burn_s, v->L.gemm_n, v->all[0].burn_gflops, v->all[0].burn_min,
            ddp_now() - v->t_start);
}

/* The golden run; returns the code every rank agrees on. */
static int vrun_golden(struct vrun *v)
{
    char err[DDP_ERR_LEN * 2];
    v->steps = v->L.golden_steps;
    int code =
        ddp_validate_golden_run(v->c, v->be, v->steps, &v->faults, &v->g, err, sizeof err) != 0
            ? DDP_EXIT_RUNTIME
            : 0;
    if (code)
        ddp_warn("validate: %s", err);
    return agree(v->c, code);
}

/* --record-expect: floors from the worst rates of every round and rank, less the margin; the
 * bus bandwidth at 1 MiB and the largest size on runs of 2+ ranks. Rank 0. */
static int write_expect(const struct vrun *v, const struct ddp_validate_ar_row *ar, char *err,
                        size_t errlen)
{
    const char *path = v->a->record_expect;
    const double keep = 1 - v->a->margin;
    const struct rank_info *x = &v->all[0];
    char when[64];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M", localtime(&now));
    struct ddp_atomic_file af;
    FILE *f = ddp_atomic_open(&af, path);
    if (!f)
        return ddp_err(err, errlen, "--record-expect %s.tmp: cannot write: %s", path,
                       strerror(errno));
    fprintf(f,
            "; expectations of ddptrain validate --expect (docs/validate.md): floors are the worst "
            "of %d rounds on %d rank%s x %d thread%s, less %.0f%%\n[node]\ntype = %s\n"
            "source = measured on %s, %s, level %s, %s backend, margin %g\n\n[gpu]\ncount = %d\n",
            v->rec_rounds, v->W, v->W == 1 ? "" : "s", v->threads, v->threads == 1 ? "" : "s",
            100 * v->a->margin, x->device >= 0 ? x->gpu_name : x->cpu_model, x->host, when,
            v->L.name, v->be->name, v->a->margin, x->gpu_count);
    if (x->device >= 0)
        fprintf(f, "model = %s\n", x->gpu_name);
    fprintf(f, "\n[gemm]\nn = %d\nmin_gflops = %.1f\n\n[triad]\nmib = %lld\nmin_gbs = %.1f\n",
            v->L.gemm_n, v->rec_gemm * keep, (long long)v->L.triad_mib, v->rec_triad * keep);
    if (v->W >= 2 && v->nsizes > 0) {
        fprintf(f, "\n[allreduce]\nranks = %d\nmin_busbw_gbs = ", v->W);
        for (int s = 0; s < v->nsizes; s++)
            if (ar[s].bytes == (1 << 20) && s != v->nsizes - 1)
                fprintf(f, "%lld:%.3f, ", (long long)ar[s].bytes, ar[s].busbw * keep);
        fprintf(f, "%lld:%.3f\n", (long long)ar[v->nsizes - 1].bytes,
                ar[v->nsizes - 1].busbw * keep);
    }
    char why[DDP_ERR_LEN];
    if (ddp_atomic_close(&af, why, sizeof why) != 0)
        return ddp_err(err, errlen, "--record-expect %s", why);
    return 0;
}

/* After the verdict: --record-expect writes its file (only from a clean run on an idle node),
 * --slurm-health --drain drains a failing node. Returns the exit code. */
static int vrun_after(struct vrun *v, struct report *rep, int verdict)
{
    char err[DDP_ERR_LEN * 2];
    if (v->a->record_expect && !rep->nhard) {
        double load = 0;
        for (int r = 0; r < v->W; r++)
            load = fmax(load, rank_load(v->all, v->W, r, 1));
        if (load >= v->cfg.foreign_load_max && v->cfg.foreign_load_max > 0) {
            ddp_warn("validate: not recorded: other processes held the CPU %.0f%% of the time "
                     "it was measuring; record expectations on an idle node",
                     100 * load);
            return DDP_EXIT_RETEST;
        }
        if (write_expect(v, v->ar_all, err, sizeof err) != 0) {
            ddp_warn("%s", err);
            return DDP_EXIT_RUNTIME;
        }
        ddp_log("recorded expectations (%d rounds, margin %g) in %s", v->rec_rounds, v->a->margin,
                v->a->record_expect);
    }
    if (v->a->slurm_health && verdict == DDP_EXIT_RETEST)
        verdict = 0; /* a loaded node is never drained, and a prolog must not fail for it */
    if (v->a->slurm_health && v->a->drain && rep->nhard) {
        const struct failure *f = rep->fail;
        while (f->retest)
            f++;
        char reason[REASON_LEN + 64], node[256];
        snprintf(reason, sizeof reason, "ddptrain validate: %s: %s", f->check, f->reason);
        if (ddp_validate_drain(reason, node, sizeof node, err, sizeof err) != 0)
            ddp_warn("validate: %s", err);
        else
            ddp_log("drained node %s: %.200s", node, reason);
    }
    return verdict;
}

/* Rank 0 judges, records, prints and writes the report. Returns its verdict (exit code). */
static int vrun_judge(struct vrun *v)
{
    const int W = v->W;
    const char *record = v->a->record;
    char err[DDP_ERR_LEN * 2];
    struct report rep = {.W = W, .ri = v->all};
    double med_gemm = median_of(v->all, W, 0), med_triad = median_of(v->all, W, 1);
    judge_node(&rep, v);
    judge_rates(&rep, v);
    judge_allreduce(&rep, v->ar_all, v->nsizes);
    judge_busbw(&rep, v, v->ar_all, v->nsizes);
    if (W == 1 && !v->have_expect)
        add_warning(&rep, "one rank: its rates were compared with nothing; give --expect FILE "
                          "for absolute floors (configs/expect-*.ini)");
    struct golden_verdict gv;
    judge_golden(&rep, &v->g, v->have_ref ? &v->ref : NULL, v->ref_path, v->no_ref,
                 v->cfg.golden_rtol, record != NULL, &gv);
    int *host_of = ddp_malloc(sizeof(int) * (size_t)W);
    int *first_rank = ddp_malloc(sizeof(int) * (size_t)W);
    struct run_facts rf = {v->L.name,
                           v->nsizes,
                           v->L.gemm_n,
                           v->steps,
                           v->L.triad_mib,
                           ddp_launcher_name(v->w.launcher),
                           ddp_comm_name(v->c),
                           v->be->name,
                           med_gemm,
                           med_triad,
                           0,
                           0,
                           NULL};
    rf.nnodes = group_hosts(v->all, W, host_of, first_rank);
    rf.expect = v->have_expect ? v->expect.path : NULL;
    if (record && !strcmp(gv.verdict, "PASS")) {
        if (ddp_validate_ref_write(&v->g, v->be->name, v->rec_path, err, sizeof err) != 0)
            add_failure(&rep, 0, "record", "rank 0 on %s: %s", v->all[0].host, err);
        else
            ddp_log("recorded the golden run (%d steps, %d rank%s) as a reference: %s", v->steps, W,
                    W == 1 ? "" : "s", v->rec_path);
    } else if (record) {
        add_warning(&rep, "no reference recorded: the golden run failed");
    }
    rf.elapsed = ddp_now() - v->t_start;
    print_report(&rep, &rf, v->ar_all, &gv, &v->g, host_of, first_rank, v->cfg.min_fraction);
    int verdict = rep.nhard ? DDP_EXIT_RUNTIME : rep.nretest ? DDP_EXIT_RETEST : 0;
    if (v->a->json && write_json(v->a->json, &rep, &rf, &v->cfg, v->ar_all, &gv, &v->g, host_of,
                                 first_rank, err, sizeof err) != 0) {
        ddp_warn("%s", err);
        verdict = DDP_EXIT_RUNTIME;
    }
    verdict = vrun_after(v, &rep, verdict);
    free(host_of);
    free(first_rank);
    free(rep.fail);
    free(rep.warn);
    return verdict;
}

/* The checks in order; --slurm-health skips what its budget leaves no room for (the all-reduce
 * of one process, a golden run when less than GOLDEN_RESERVE_S remain). */
#define GOLDEN_RESERVE_S 4.0
static int vrun_checks(struct vrun *v)
{
    const int health = v->a->slurm_health;
    ddp_validate_budget_phase(1);
    vrun_rates(v);
    ddp_validate_budget_phase(2);
    if (!health) {
        vrun_sweep(v);
    } else {
        v->rows = ddp_calloc(DDP_VALIDATE_MAX_SIZES, sizeof *v->rows);
        v->ar_all = ddp_calloc(1, sizeof *v->ar_all);
    }
    vrun_burn(v);
    ddp_validate_budget_phase(3);
    if (health && v->a->budget_s - (ddp_now() - v->t_start) < GOLDEN_RESERVE_S) {
        ddp_log("--slurm-health: %.1f s of the budget left: no golden run",
                v->a->budget_s - (ddp_now() - v->t_start));
        v->L.golden_steps = 1;
    }
    return vrun_golden(v);
}

int ddp_validate_run(const struct ddp_validate_args *a)
{
    static struct vrun run; /* large; one per process */
    struct vrun *v = &run;
    memset(v, 0, sizeof *v);
    v->a = a;
    v->t_start = ddp_now();
    v->lock = -1;
    if (a->slurm_health)
        ddp_validate_budget_arm(a->budget_s);
    int rc = vrun_start(v);
    if (!rc)
        rc = vrun_reference(v);
    if (!rc)
        rc = vrun_checks(v);
    if (!rc) {
        ddp_validate_budget_phase(4);
        int64_t verdict = v->me == 0 ? vrun_judge(v) : 0;
        ddp_comm_broadcast(v->c, &verdict, sizeof verdict, 0);
        rc = (int)verdict;
    }
    ddp_validate_budget_disarm();
    /* the one cleanup path */
    ddp_validate_golden_free(&v->g);
    free(v->rows);
    free(v->ar_all);
    free(v->all);
    machine_unlock(v->lock);
    ddp_validate_ref_free(&v->ref);
    ddp_comm_destroy(v->c);
    ddp_comm_destroy(v->boot);
    ddp_liveness_destroy(v->live); /* goodbye after the last collective */
    return rc;
}

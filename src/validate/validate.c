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
#include <ini.h>
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
#include "core/config.h"
#include "dist/world.h"
#include "core/fileio.h"
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
    c->min_fraction = 0.9;
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
    c->ar_blocks = 5;
    c->ar_blocks_quick = 3;
    c->ar_block_ms = 20;
    c->golden_steps = 100;
    c->golden_steps_quick = 30;
    c->golden_rtol = 1e-3;
}

enum key_type { KEY_INT, KEY_I64, KEY_F64, KEY_STR };

struct key {
    const char *section, *name;
    enum key_type type;
    size_t off;
    double lo, hi;
};

#define K(sec, name, type, field, lo, hi)                                    \
    {                                                                        \
        sec, name, type, offsetof(struct ddp_validate_config, field), lo, hi \
    }
static const struct key g_keys[] = {
    K("validate", "min_fraction", KEY_F64, min_fraction, 0, 1),
    K("validate", "threads", KEY_INT, threads, 0, 4096),
    K("validate", "timeout_s", KEY_F64, timeout_s, 1, 1e6),
    K("gemm", "n", KEY_INT, gemm_n, 16, DDP_VALIDATE_MAX_GEMM_N),
    K("gemm", "n_quick", KEY_INT, gemm_n_quick, 16, DDP_VALIDATE_MAX_GEMM_N),
    K("gemm", "reps", KEY_INT, gemm_reps, 1, 1000),
    K("gemm", "reps_quick", KEY_INT, gemm_reps_quick, 1, 1000),
    K("gemm", "seconds", KEY_F64, gemm_s, 0, 3600),
    K("gemm", "seconds_quick", KEY_F64, gemm_s_quick, 0, 3600),
    K("triad", "mib", KEY_I64, triad_mib, 1, 1 << 16),
    K("triad", "mib_quick", KEY_I64, triad_mib_quick, 1, 1 << 16),
    K("triad", "reps", KEY_INT, triad_reps, 1, 1000),
    K("triad", "reps_quick", KEY_INT, triad_reps_quick, 1, 1000),
    K("triad", "seconds", KEY_F64, triad_s, 0, 3600),
    K("triad", "seconds_quick", KEY_F64, triad_s_quick, 0, 3600),
    K("allreduce", "min_bytes", KEY_I64, ar_min_bytes, 4, (double)DDP_VALIDATE_MAX_BYTES),
    K("allreduce", "max_bytes", KEY_I64, ar_max_bytes, 4, (double)DDP_VALIDATE_MAX_BYTES),
    K("allreduce", "max_bytes_quick", KEY_I64, ar_max_bytes_quick, 4,
      (double)DDP_VALIDATE_MAX_BYTES),
    K("allreduce", "blocks", KEY_INT, ar_blocks, 1, 101),
    K("allreduce", "blocks_quick", KEY_INT, ar_blocks_quick, 1, 101),
    K("allreduce", "block_ms", KEY_F64, ar_block_ms, 0.01, 60000),
    K("golden", "steps", KEY_INT, golden_steps, 1, DDP_VALIDATE_MAX_STEPS),
    K("golden", "steps_quick", KEY_INT, golden_steps_quick, 1, DDP_VALIDATE_MAX_STEPS),
    K("golden", "rtol", KEY_F64, golden_rtol, 0, 1),
    K("golden", "reference", KEY_STR, reference, 0, 0),
};
#undef K
#define NKEYS (sizeof g_keys / sizeof g_keys[0])

struct ini_ctx {
    struct ddp_validate_config *c;
    const char *path;
    FILE *f;
    int line; /* of the line inih is handling */
    char *err;
    size_t errlen;
    int failed;
};

/* ini_reader: one line at a time, counted, so that errors can name it. */
static char *read_line(char *str, int num, void *stream)
{
    struct ini_ctx *x = stream;
    if (!fgets(str, num, x->f))
        return NULL;
    x->line++;
    return str;
}

/* inih handler: one key; on error fills err once and stops the parse (returns 0). */
static int on_ini(void *user, const char *section, const char *name, const char *value)
{
    struct ini_ctx *x = user;
    const int lineno = x->line;
    if (x->failed)
        return 0;
    for (size_t i = 0; i < NKEYS; i++) {
        const struct key *k = &g_keys[i];
        if (strcmp(section, k->section) != 0 || strcmp(name, k->name) != 0)
            continue;
        char *field = (char *)x->c + k->off;
        if (k->type == KEY_STR) {
            if (strlen(value) >= sizeof x->c->reference) {
                ddp_err(x->err, x->errlen, "%s:%d: [%s] %s: path too long", x->path, lineno,
                        section, name);
                x->failed = 1;
                return 0;
            }
            snprintf(field, sizeof x->c->reference, "%s", value);
            return 1;
        }
        double v;
        int64_t iv = 0;
        int ok =
            k->type == KEY_F64 ? ddp_parse_f64(value, &v) == 0 : ddp_parse_i64(value, &iv) == 0;
        if (k->type != KEY_F64)
            v = (double)iv;
        if (!ok || !(v >= k->lo && v <= k->hi)) {
            ddp_err(x->err, x->errlen, "%s:%d: [%s] %s: '%s'; expected %s from %g to %g", x->path,
                    lineno, section, name, value, k->type == KEY_F64 ? "a number" : "an integer",
                    k->lo, k->hi);
            x->failed = 1;
            return 0;
        }
        if (k->type == KEY_INT)
            *(int *)field = (int)iv;
        else if (k->type == KEY_I64)
            *(int64_t *)field = iv;
        else
            *(double *)field = v;
        return 1;
    }
    if (!section[0])
        ddp_err(x->err, x->errlen, "%s:%d: key %s before any [section]", x->path, lineno, name);
    else
        ddp_err(x->err, x->errlen, "%s:%d: unknown key [%s] %s (configs/validate.ini lists them)",
                x->path, lineno, section, name);
    x->failed = 1;
    return 0;
}

int ddp_validate_config_load(struct ddp_validate_config *c, const char *path, char *err,
                             size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return ddp_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct ini_ctx x = {c, path, f, 0, err, errlen, 0};
    int rc = ini_parse_stream(read_line, &x, on_ini, &x);
    fclose(f);
    if (x.failed)
        return -1;
    if (rc != 0)
        return ddp_err(err, errlen, "%s:%d: not INI syntax (expected [section] or key = value)",
                       path, rc);
    if (c->ar_max_bytes < c->ar_min_bytes || c->ar_max_bytes_quick < c->ar_min_bytes)
        return ddp_err(err, errlen,
                       "%s: [allreduce] max_bytes and max_bytes_quick must be at "
                       "least min_bytes (%lld)",
                       path, (long long)c->ar_min_bytes);
    return 0;
}

/* ---- fault hooks ------------------------------------------------------------------------- */

static const char *const g_fault_names[DDP_VALIDATE_FAULT_KINDS] = {
    "slow_gemm", "slow_triad", "bad_allreduce", "flip_param", "bad_grad"};

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
                           "slow_gemm, slow_triad, bad_allreduce, flip_param, bad_grad",
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

/* ---- judging (rank 0) -------------------------------------------------------------------- */

struct failure {
    int rank;
    char check[16];
    char reason[REASON_LEN];
};

struct report {
    int W;
    const struct rank_info *ri;
    struct failure *fail;
    int nfail, capfail;
    char (*warn)[REASON_LEN];
    int nwarn, capwarn;
};

static void add_failure(struct report *rep, int rank, const char *check, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_failure(struct report *rep, int rank, const char *check, const char *fmt, ...)
{
    if (rep->nfail == rep->capfail) {
        rep->capfail = rep->capfail ? 2 * rep->capfail : 16;
        rep->fail = ddp_realloc(rep->fail, sizeof *rep->fail * (size_t)rep->capfail);
    }
    struct failure *f = &rep->fail[rep->nfail++];
    f->rank = rank;
    snprintf(f->check, sizeof f->check, "%s", check);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->reason, sizeof f->reason, fmt, ap);
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

static int rank_failed(const struct report *rep, int rank)
{
    for (int i = 0; i < rep->nfail; i++)
        if (rep->fail[i].rank == rank)
            return 1;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of the positive values among W (0 when none). */
static double median_of(const struct rank_info *ri, int W, int triad)
{
    double *v = ddp_malloc(sizeof(double) * (size_t)W);
    int n = 0;
    for (int r = 0; r < W; r++) {
        double x = triad ? ri[r].triad : ri[r].gemm;
        if (x > 0)
            v[n++] = x;
    }
    double m = 0;
    if (n) {
        qsort(v, (size_t)n, sizeof(double), cmp_double);
        m = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    }
    free(v);
    return m;
}

/* The lowest ratio of a rank's GEMM or triad rate to the median of the ranks (0 for wrong
 * triad values): a round passes when it is at least min_fraction (every rank computes it
 * alike from the same numbers). */
static double rates_score(const struct rank_info *ri, int W)
{
    double mg = median_of(ri, W, 0), mt = median_of(ri, W, 1), score = 1e300;
    for (int r = 0; r < W; r++) {
        double g = mg > 0 ? ri[r].gemm / mg : 0, t = mt > 0 ? ri[r].triad / mt : 0;
        if (ri[r].triad < 0)
            t = 0;
        score = g < score ? g : score;
        score = t < score ? t : score;
    }
    return score;
}

static void judge_rates(struct report *rep, double frac, double med_gemm, double med_triad)
{
    for (int r = 0; r < rep->W; r++) {
        const struct rank_info *x = &rep->ri[r];
        if (x->gemm <= 0)
            add_failure(rep, r, "gemm", "rank %d on %s: the GEMM did not run", r, x->where);
        else if (x->gemm < frac * med_gemm)
            add_failure(rep, r, "gemm",
                        "rank %d on %s: sgemm %.1f GFLOP/s is %.2f x the median %.1f of the "
                        "ranks (minimum %.2f)",
                        r, x->where, x->gemm, x->gemm / med_gemm, med_gemm, frac);
        if (x->triad < 0)
            add_failure(rep, r, "triad",
                        "rank %d on %s: the triad read back wrong values (memory does not hold "
                        "what was written)",
                        r, x->where);
        else if (x->triad < frac * med_triad)
            add_failure(rep, r, "triad",
                        "rank %d on %s: triad %.1f GB/s is %.2f x the median %.1f of the ranks "
                        "(minimum %.2f)",
                        r, x->where, x->triad, x->triad / med_triad, med_triad, frac);
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
    int quick, nsizes, gemm_n, steps;
    int64_t triad_mib;
    const char *launcher, *comm, *backend;
    double med_gemm, med_triad, elapsed;
    int nnodes;
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
    printf("\nranks (%s backend, %s%s)\n", rf->backend, rf->quick ? "quick: " : "",
           rf->quick ? "fewer and smaller tests" : "full tests");
    printf("%4s  %-16s %-28s %9s %7s %9s %5s %9s %6s %7s %6s  %s\n", "rank", "host", "cpu", "cpus",
           "threads", "memory", "gpu", "sgemm", "ratio", "triad", "ratio", "verdict");
    printf("%4s  %-16s %-28s %9s %7s %9s %5s %9s %6s %7s %6s  %s\n", "", "", "", "(allowed)", "",
           "(GiB)", "", "(GFLOP/s)", "(x)", "(GB/s)", "(x)", "");
    for (int r = 0; r < W; r++) {
        const struct rank_info *x = &rep->ri[r];
        char cpus[32];
        snprintf(cpus, sizeof cpus, "%d/%d", x->cpus_allowed, x->cpus_online);
        char gpus[16] = "none";
        if (x->gpu_count > 0)
            snprintf(gpus, sizeof gpus, "%d", x->gpu_count);
        printf("%4d  %-16.16s %-28.28s %9s %7d %9.1f %5s %9.1f %6.2f %7.1f %6.2f  %s\n", r, x->host,
               x->cpu_model, cpus, x->threads, (double)x->mem_total / (1 << 30), gpus, x->gemm,
               rf->med_gemm > 0 ? x->gemm / rf->med_gemm : 0, x->triad,
               rf->med_triad > 0 ? x->triad / rf->med_triad : 0,
               rank_failed(rep, r) ? "FAIL" : "PASS");
    }
    printf("%4s  %-16s %-28s %9s %7s %9s %5s %9.1f %6s %7.1f %6s  (a rank below %.2f x the "
           "median fails)\n",
           "", "median", "", "", "", "", "", rf->med_gemm, "", rf->med_triad, "", frac);

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
        for (int i = 0; i < rep->nfail; i++)
            if (host_of[rep->fail[i].rank] == h) {
                printf("%-20.20s %-12s %-7s %s\n", printed ? "" : rep->ri[first_rank[h]].host,
                       printed ? "" : rr, printed ? "" : "FAIL", rep->fail[i].reason);
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
    } else {
        printf("validate: FAIL on %d check%s:\n", rep->nfail, rep->nfail == 1 ? "" : "s");
        for (int i = 0; i < rep->nfail; i++)
            printf("FAIL %s: %s\n", rep->fail[i].check, rep->fail[i].reason);
    }
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
        fprintf(f, ", \"verdict\": \"%s\"}", rank_failed(rep, r) ? "FAIL" : "PASS");
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
    fprintf(f, "  \"verdict\": \"%s\",\n  \"exit_code\": %d,\n  \"quick\": %s,\n",
            rep->nfail ? "FAIL" : "PASS", rep->nfail ? 1 : 0, rf->quick ? "true" : "false");
    fprintf(f,
            "  \"world_size\": %d,\n  \"nodes_count\": %d,\n  \"launcher\": \"%s\",\n"
            "  \"comm\": \"%s\",\n  \"backend\": \"%s\",\n  \"elapsed_s\": %.3f,\n",
            W, rf->nnodes, rf->launcher, rf->comm, rf->backend, rf->elapsed);
    fprintf(f, "  \"failures\": [");
    for (int i = 0; i < rep->nfail; i++) {
        fprintf(f, "%s\n    {\"rank\": %d, \"host\": ", i ? "," : "", rep->fail[i].rank);
        json_str(f, rep->ri[rep->fail[i].rank].host);
        fprintf(f, ", \"check\": \"%s\", \"reason\": ", rep->fail[i].check);
        json_str(f, rep->fail[i].reason);
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
        for (int i = 0; i < rep->nfail; i++)
            if (host_of[rep->fail[i].rank] == h) {
                fprintf(f, "%s", failed++ ? ", " : "");
                json_str(f, rep->fail[i].reason);
            }
        fprintf(f, "], \"verdict\": \"%s\"}", failed ? "FAIL" : "PASS");
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
 * next to the executable (build tree or install) or under the working directory. Returns 1
 * with path filled, 0 with the places looked at in why. */
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
    char exe[DDP_PATH_MAX] = "", dir[DDP_PATH_MAX] = ".";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(dir, sizeof dir, "%s", exe);
        }
    }
    const char *rel[] = {"/../configs/validate-ref", "/../share/ddptrain/validate-ref",
                         "/../../configs/validate-ref", "/../../../configs/validate-ref"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        snprintf(path, len, "%s%s/%s", dir, rel[i], name);
        if (is_file(path)) {
            char *real = realpath(path, NULL);
            if (real) {
                snprintf(path, len, "%s", real);
                free(real);
            }
            return 1;
        }
    }
    snprintf(path, len, "configs/validate-ref/%s", name);
    if (is_file(path))
        return 1;
    ddp_err(why, whylen,
            "none for the %s backend on %d rank%s (%s not found next to %s/../configs/ nor in "
            "./configs/validate-ref/); record one on a trusted node with --record",
            backend, W, W == 1 ? "" : "s", name, dir);
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
};

/* Settings, faults, world and collectives (as training sets them up), the liveness watch and
 * threads. Returns 0 or an exit code (the reason printed). */
static int vrun_start(struct vrun *v)
{
    const struct ddp_validate_args *a = v->a;
    char err[DDP_ERR_LEN * 2];
    ddp_validate_config_defaults(&v->cfg);
    if (a->config && ddp_validate_config_load(&v->cfg, a->config, err, sizeof err) != 0) {
        fprintf(stderr, "ddptrain: validate: %s\n", err);
        return DDP_EXIT_USAGE;
    }
    if (a->reference && a->record) {
        fprintf(stderr, "ddptrain: validate: --record and --reference exclude each other\n");
        return DDP_EXIT_USAGE;
    }
    if (ddp_validate_faults_parse(&v->faults, ddp_test_hooks()->validate_fault, err, sizeof err) !=
        0) {
        fprintf(stderr, "ddptrain: validate: %s\n", err);
        return DDP_EXIT_USAGE;
    }
    struct ddp_world *w = &v->w;
    if (ddp_world_detect(w, NULL, NULL, 0, err, sizeof err) != 0) {
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
    v->c = ddp_comm_create(&copts, w, err, sizeof err);
    if (!v->c) {
        ddp_warn("%s", err);
        return DDP_EXIT_LAUNCH;
    }
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

/* One round of rates: each turn's ranks measure, the others meet them in the kernels' sync;
 * then everybody's results into v->all. */
static void rates_round(struct vrun *v, int turns, int my_turn, int *triad_bad)
{
    const struct ddp_validate_config *cfg = &v->cfg;
    const int quick = v->a->quick;
    struct rank_info *mine = &v->mine;
    mine->gemm = mine->triad = 0;
    for (int t = 0; t < turns; t++) {
        if (t != my_turn) {
            ddp_comm_barrier(v->c);
            ddp_comm_barrier(v->c);
            continue;
        }
        mine->gemm = ddp_validate_gemm(
            v->be, quick ? cfg->gemm_n_quick : cfg->gemm_n,
            quick ? cfg->gemm_reps_quick : cfg->gemm_reps, quick ? cfg->gemm_s_quick : cfg->gemm_s,
            ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_SLOW_GEMM, v->me), barrier_cb,
            v->c);
        mine->triad = ddp_validate_triad(
            quick ? cfg->triad_mib_quick : cfg->triad_mib,
            quick ? cfg->triad_reps_quick : cfg->triad_reps,
            quick ? cfg->triad_s_quick : cfg->triad_s, v->threads,
            ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_SLOW_TRIAD, v->me), barrier_cb,
            v->c);
        *triad_bad |= mine->triad < 0;
    }
    mine->triad_bad = *triad_bad;
    ddp_comm_allgather(v->c, mine, v->all, sizeof *mine);
}

/* Inventory, then the rates, in turns where ranks would share CPUs, in rounds: when a rank
 * falls below the threshold, everybody measures again under the same conditions (a passing
 * burst of noise clears; a slow rank stays slow). The round that comes closest to passing is
 * judged, whole: mixing rounds would pit one rank's lucky moment against another's unlucky
 * one. Wrong triad values in any round stay wrong. */
static void vrun_rates(struct vrun *v)
{
    const int W = v->W, quick = v->a->quick;
    v->all = ddp_calloc((size_t)W, sizeof *v->all);
    inventory(&v->mine, &v->w, v->threads);
    if (v->device >= 0) {
        v->mine.device = v->device;
        snprintf(v->mine.where, sizeof v->mine.where, "%s GPU %d", v->w.host, v->device);
    }
    ddp_comm_allgather(v->c, &v->mine, v->all, sizeof v->mine);
    int my_turn, shared, turns = measurement_turns(v->all, W, v->me, &my_turn, &shared);
    ddp_log("ddptrain %s validate%s: %d rank%s, launcher %s, comm %s, backend %s, %d thread%s "
            "per rank%s",
            DDP_VERSION, quick ? " --quick" : "", W, W == 1 ? "" : "s",
            ddp_launcher_name(v->w.launcher), ddp_comm_name(v->c), v->be->name, v->threads,
            v->threads == 1 ? "" : "s",
            turns > 1 ? "; ranks sharing CPUs measure their rates in turns" : "");
    if (shared && my_turn == 0)
        v->lock = machine_lock();
    int rounds = 0, triad_bad = 0;
    struct rank_info *kept = ddp_calloc((size_t)W, sizeof *kept);
    double kept_score = -1;
    for (int round = 0; round < RATE_ROUNDS; round++) {
        rates_round(v, turns, my_turn, &triad_bad);
        rounds++;
        const double score = rates_score(v->all, W);
        if (score > kept_score) {
            kept_score = score;
            memcpy(kept, v->all, sizeof *v->all * (size_t)W);
        }
        if (score >= v->cfg.min_fraction)
            break;
    }
    for (int r = 0; r < W; r++)
        if (v->all[r].triad_bad)
            kept[r].triad = -1;
    memcpy(v->all, kept, sizeof *v->all * (size_t)W);
    free(kept);
    ddp_log("rates measured in %d round%s (%.1f s); all-reduce sweep", rounds,
            rounds == 1 ? "" : "s", ddp_now() - v->t_start);
}

/* The all-reduce sweep; every rank's checks to everybody. */
static void vrun_sweep(struct vrun *v)
{
    const struct ddp_validate_config *cfg = &v->cfg;
    const int quick = v->a->quick;
    struct ddp_validate_ar_opts ao = {
        cfg->ar_min_bytes, quick ? cfg->ar_max_bytes_quick : cfg->ar_max_bytes,
        quick ? cfg->ar_blocks_quick : cfg->ar_blocks, cfg->ar_block_ms / 1e3,
        ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_BAD_ALLREDUCE, v->me)};
    v->rows = ddp_calloc(DDP_VALIDATE_MAX_SIZES, sizeof *v->rows);
    v->nsizes = ddp_validate_allreduce_sweep(v->c, &ao, v->rows);
    v->ar_all = ddp_calloc((size_t)v->W * (size_t)v->nsizes, sizeof *v->ar_all);
    ddp_comm_allgather(v->c, v->rows, v->ar_all, sizeof *v->rows * (size_t)v->nsizes);
    ddp_log("all-reduce sweep done (%.1f s); golden run", ddp_now() - v->t_start);
}

/* The golden run; returns the code every rank agrees on. */
static int vrun_golden(struct vrun *v)
{
    char err[DDP_ERR_LEN * 2];
    v->steps = v->a->record || !v->a->quick ? v->cfg.golden_steps : v->cfg.golden_steps_quick;
    int code =
        ddp_validate_golden_run(v->c, v->be, v->steps, &v->faults, &v->g, err, sizeof err) != 0
            ? DDP_EXIT_RUNTIME
            : 0;
    if (code)
        ddp_warn("validate: %s", err);
    return agree(v->c, code);
}

/* Rank 0 judges, records, prints and writes the report. Returns its verdict (exit code). */
static int vrun_judge(struct vrun *v)
{
    const int W = v->W;
    const char *record = v->a->record;
    char err[DDP_ERR_LEN * 2];
    int verdict = 0;
    struct report rep = {.W = W, .ri = v->all};
    double med_gemm = median_of(v->all, W, 0), med_triad = median_of(v->all, W, 1);
    judge_rates(&rep, v->cfg.min_fraction, med_gemm, med_triad);
    judge_allreduce(&rep, v->ar_all, v->nsizes);
    struct golden_verdict gv;
    judge_golden(&rep, &v->g, v->have_ref ? &v->ref : NULL, v->ref_path, v->no_ref,
                 v->cfg.golden_rtol, record != NULL, &gv);
    int *host_of = ddp_malloc(sizeof(int) * (size_t)W);
    int *first_rank = ddp_malloc(sizeof(int) * (size_t)W);
    const int quick = v->a->quick;
    struct run_facts rf = {quick,
                           v->nsizes,
                           quick ? v->cfg.gemm_n_quick : v->cfg.gemm_n,
                           v->steps,
                           quick ? v->cfg.triad_mib_quick : v->cfg.triad_mib,
                           ddp_launcher_name(v->w.launcher),
                           ddp_comm_name(v->c),
                           v->be->name,
                           med_gemm,
                           med_triad,
                           0,
                           0};
    rf.nnodes = group_hosts(v->all, W, host_of, first_rank);
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
    if (v->a->json && write_json(v->a->json, &rep, &rf, &v->cfg, v->ar_all, &gv, &v->g, host_of,
                                 first_rank, err, sizeof err) != 0) {
        ddp_warn("%s", err);
        verdict = DDP_EXIT_RUNTIME;
    }
    if (rep.nfail)
        verdict = DDP_EXIT_RUNTIME;
    free(host_of);
    free(first_rank);
    free(rep.fail);
    free(rep.warn);
    return verdict;
}

int ddp_validate_run(const struct ddp_validate_args *a)
{
    static struct vrun run; /* large; one per process */
    struct vrun *v = &run;
    memset(v, 0, sizeof *v);
    v->a = a;
    v->t_start = ddp_now();
    v->lock = -1;
    int rc = vrun_start(v);
    if (!rc)
        rc = vrun_reference(v);
    if (!rc) {
        vrun_rates(v);
        vrun_sweep(v);
        rc = vrun_golden(v);
    }
    if (!rc) {
        int64_t verdict = v->me == 0 ? vrun_judge(v) : 0;
        ddp_comm_broadcast(v->c, &verdict, sizeof verdict, 0);
        rc = (int)verdict;
    }
    /* the one cleanup path */
    ddp_validate_golden_free(&v->g);
    free(v->rows);
    free(v->ar_all);
    free(v->all);
    machine_unlock(v->lock);
    ddp_validate_ref_free(&v->ref);
    ddp_comm_destroy(v->c);
    ddp_liveness_destroy(v->live); /* goodbye after the last collective */
    return rc;
}

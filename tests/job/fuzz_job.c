/*
 * fuzz_job.c - a deterministic fuzzer for the job file and the `[model] layers` grammar:
 * mutants of the shipped configs (configs/ *.ini) through what `ddptrain check` does,
 * in-process (the input under test is always in WORKDIR/current.ini first); with --train N,
 * tiny trainings of accepted ones. Exit 0 when nothing crashed, hung or drew a sanitizer
 * report, 1 otherwise, 2 for usage errors. docs/testing.md describes the mutations, the
 * options and how to run it longer.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "job/config.h"
#include "job/recipe.h"
#include "core/util.h"
#include "data/augment.h"
#include "data/synth.h"
#include "nn/model.h"
#include "train/optim.h"
#include "dist/world.h"
#include "train/ckpt.h"
#include "train/outdir.h"
#include "train/summary.h"

#define INPUT_MAX (64 << 10) /* bytes of one mutant; the shipped configs are ~3 KiB */
#define SEEDS_MAX 64         /* seed files read */
#define POOL_MAX 512         /* accepted mutants kept as further starting points */
#define TRAIN_QUEUE_MAX 8192 /* accepted mutants waiting for a training */
#define TRAIN_MEM_MAX 256e6  /* bytes: bigger accepted models are not trained (kept tiny) */
#define TRAIN_FLOPS_MAX 2e8  /* forward FLOPs per sample a training may cost */
#define JOBS_MAX 16          /* concurrent training processes */
#define SAMPLES 16           /* per split of the synthetic datasets */
#define REFILL_MAX 100000    /* iterations spent looking for one more trainable mutant */
#define NSHAPES 3

struct shape {
    const char *name, *file;
    int nd;
    int64_t dims[3];
    enum ddp_h5dtype dtype;
};

static const struct shape shapes[NSHAPES] = {
    {"1x28x28", "synth-1x28x28.h5", 3, {1, 28, 28}, DDP_H5DTYPE_UINT8},
    {"3x32x32", "synth-3x32x32.h5", 3, {3, 32, 32}, DDP_H5DTYPE_UINT8},
    {"784", "synth-784.h5", 1, {784, 0, 0}, DDP_H5DTYPE_FLOAT32},
};

/* Grammar and job-file tokens the mutator inserts. */
static const char *const tokens[] = {
    "residual(",
    ")",
    "(",
    ",",
    "=",
    " ",
    "\n",
    "stride=65536",
    "stride=32768",
    "stride=0",
    "stride=-1",
    "pad=",
    "pad=65536",
    "bias=false",
    "bias=true",
    "bias=",
    "conv2d(",
    "linear(",
    "maxpool(",
    "avgpool(",
    "dropout(",
    "batchnorm",
    "relu",
    "flatten",
    "globalavgpool",
    "conv2d(4,1,stride=65536)",
    "residual(relu)",
    "residual(",
    "2147483647",
    "2147483648",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "-1",
    "0",
    "1e308",
    "-1e308",
    "1e-300",
    "1e-45",
    "nan",
    "inf",
    "0x10",
    "1.5",
    "\n[model]\nlayers = ",
    "\n[data]\n",
    "\n[train]\n",
    "\n[optim]\n",
    "\n[job]\n",
    "\n[checkpoint]\n",
    "\n[dist]\n",
    "[",
    "]",
    ";",
    "#",
    "\t",
    "\\",
    "\"",
    "%",
    "%N",
    "%u",
    "%j",
    "batch_size = ",
    "epochs = ",
    "accumulate = ",
    "max_steps = ",
    "augment = random_crop(padding=4), hflip",
    "augment = random_crop(4)",
    "normalize = 0.5, 1e-300",
    "normalize = ",
    "schedule = onecycle",
    "schedule = multistep",
    "pct_start = 0.001",
    "milestones = 1, 2",
    "val_fraction = 0.5",
    "label_smoothing = ",
    "lr = ",
    "warmup_epochs = ",
    "clip_grad_norm = ",
    "early_stop = ",
    "keep_best = acc",
    "val = ",
    "precision = bf16",
    "device = cuda",
    "threads = ",
    "cache_mb = ",
    "bucket_mb = ",
    "step_epochs = ",
    "gamma = ",
    "div_factor = 0",
    "final_div_factor = ",
    "eval_every = ",
    "log_every = ",
    "ckpt_every_steps = 1",
    "keep = 0",
    "output = ",
    "name = ",
    "seed = ",
    "drop_last = true",
    "shuffle = false",
    "sync_bn = true",
    "residual(residual(residual(",
    "linear(2)",
    "linear(4096)",
    "conv2d(64,7,stride=2,pad=3)",
    "maxpool(3,stride=2,pad=1)",
    "avgpool(65536)",
    "dropout(1)",
    "dropout(0.99999)",
    "\xff",
    "\xc3\xa9",
    "\x1b[31m",
};
#define NTOKENS (sizeof tokens / sizeof tokens[0])

/* Numbers that sit at edges of int, size_t, float and the grammar's bounds. */
static const char *const numbers[] = {
    "0",
    "1",
    "2",
    "3",
    "-1",
    "255",
    "256",
    "1024",
    "65535",
    "65536",
    "1048576",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "18446744073709551616",
    "1e9",
    "1e18",
    "1e308",
    "1e-300",
    "0.0",
    "-0",
    "nan",
    "inf",
    "1e400",
    "0.5",
};
#define NNUMBERS (sizeof numbers / sizeof numbers[0])

struct buf {
    size_t n;
    char *b;
};

struct trainee {
    char *text;
    size_t n;
    int shape, batch;
};

struct opts {
    double seconds, train_seconds, train_timeout;
    long iterations;
    long train;
    int jobs, strict, verbose;
    uint64_t seed;
    const char *ddptrain, *workdir, *corpus[SEEDS_MAX];
    int ncorpus;
};

struct stats {
    long iterations, accepted, rejected, models, bad_messages;
    long trainings, train_skipped, check_refused, crashes, hangs, sanitizer, disagree;
    long exit_codes[256];
};

static struct buf seeds[SEEDS_MAX];
static int nseeds;
static struct buf pool[POOL_MAX];
static int npool;
static struct trainee queue[TRAIN_QUEUE_MAX];
static int nqueue;
static struct stats st;
static uint64_t rng_state;
static struct buf cur;                  /* the input under test */
static char current[DDP_PATH_MAX + 16]; /* its file: WORKDIR/current.ini */
static int summarize;                   /* print check's summary (while stdout goes to /dev/null) */

/* splitmix64: the one source of randomness, seeded by --seed. */
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static size_t below(size_t n)
{
    return n ? (size_t)(rnd() % n) : 0;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "fuzz_job: out of memory\n");
        exit(1);
    }
    return p;
}

/* ---- mutations: each edits b in place, keeping b->n <= INPUT_MAX ---------------------- */

static void insert_bytes(struct buf *b, size_t at, const char *s, size_t n)
{
    if (b->n + n > INPUT_MAX)
        return;
    memmove(b->b + at + n, b->b + at, b->n - at);
    memcpy(b->b + at, s, n);
    b->n += n;
}

static void delete_bytes(struct buf *b, size_t at, size_t n)
{
    if (at + n > b->n)
        n = b->n - at;
    memmove(b->b + at, b->b + at + n, b->n - at - n);
    b->n -= n;
}

/* [start, end) of the line holding byte at. */
static void line_of(const struct buf *b, size_t at, size_t *start, size_t *end)
{
    size_t s = at, e = at;
    while (s > 0 && b->b[s - 1] != '\n')
        s--;
    while (e < b->n && b->b[e] != '\n')
        e++;
    *start = s;
    *end = e < b->n ? e + 1 : e;
}

/* A position inside the layers value when there is one (most mutations aim there). */
static size_t aim(const struct buf *b)
{
    if (b->n == 0)
        return 0;
    if (rnd() % 2 == 0) {
        const char *p = memmem(b->b, b->n, "layers", 6);
        if (p) {
            size_t s = (size_t)(p - b->b), e = s;
            while (e < b->n && b->b[e] != '[')
                e++;
            return s + below(e - s + 1);
        }
    }
    return below(b->n + 1);
}

/* A run of digits near at replaced by an edge number. */
static void replace_number(struct buf *b)
{
    size_t at = aim(b), s;
    while (at < b->n && !(b->b[at] >= '0' && b->b[at] <= '9'))
        at++;
    if (at >= b->n)
        return;
    for (s = at; s < b->n && b->b[s] >= '0' && b->b[s] <= '9';)
        s++;
    delete_bytes(b, at, s - at);
    const char *num = numbers[below(NNUMBERS)];
    insert_bytes(b, at, num, strlen(num));
}

static void splice_seed(struct buf *b)
{
    const struct buf *o = &seeds[below((size_t)nseeds)];
    size_t cut = below(b->n + 1), from = below(o->n + 1);
    if (cut + (o->n - from) > INPUT_MAX)
        return;
    memcpy(b->b + cut, o->b + from, o->n - from);
    b->n = cut + (o->n - from);
}

static void line_op(struct buf *b, int dup)
{
    if (b->n == 0)
        return;
    size_t s, e;
    line_of(b, below(b->n), &s, &e);
    if (!dup) {
        delete_bytes(b, s, e - s);
        return;
    }
    char *copy = xmalloc(e - s);
    memcpy(copy, b->b + s, e - s);
    insert_bytes(b, below(2) ? e : s, copy, e - s);
    free(copy);
}

static void mutate_once(struct buf *b)
{
    static const char grammar[] = "(),=\n []; #0123456789.-xe";
    switch (rnd() % 10) {
    case 0: /* bit flip */
        if (b->n)
            b->b[below(b->n)] ^= (char)(1u << (rnd() % 8));
        break;
    case 1: { /* a byte of the grammar overwritten */
        if (b->n)
            b->b[aim(b) % b->n] = grammar[below(sizeof grammar - 1)];
        break;
    }
    case 2:
    case 3: { /* a token inserted */
        const char *t = tokens[below(NTOKENS)];
        insert_bytes(b, aim(b), t, strlen(t));
        break;
    }
    case 4: /* a short deletion */
        if (b->n) {
            size_t at = aim(b) % b->n;
            delete_bytes(b, at, 1 + below(rnd() % 4 ? 4 : 64));
        }
        break;
    case 5:
        replace_number(b);
        break;
    case 6:
        splice_seed(b);
        break;
    case 7:
        line_op(b, 1);
        break;
    case 8:
        line_op(b, 0);
        break;
    default: { /* a random byte inserted */
        char c = (char)rnd();
        insert_bytes(b, aim(b), &c, 1);
        break;
    }
    }
}

/* The next input: each seed as it is, then a seed or an accepted mutant mutated 1-4 times. */
static void next_input(struct buf *b)
{
    if (st.iterations < nseeds) { /* the seeds themselves first */
        memcpy(b->b, seeds[st.iterations].b, seeds[st.iterations].n);
        b->n = seeds[st.iterations].n;
        return;
    }
    const struct buf *from =
        npool && rnd() % 3 == 0 ? &pool[below((size_t)npool)] : &seeds[below((size_t)nseeds)];
    memcpy(b->b, from->b, from->n);
    b->n = from->n;
    int k = 1 + (int)below(4);
    for (int i = 0; i < k; i++)
        mutate_once(b);
}

/* ---- the in-process check -------------------------------------------------------------- */

/* The backend check builds models on: the CPU backend's sizes and name (so the memory check
 * runs as in `check`), with allocations of one float each, never touched by a build. */
static struct ddp_backend stub_be;

static void *stub_alloc(size_t bytes)
{
    (void)bytes;
    void *p = calloc(1, sizeof(double));
    if (!p)
        abort();
    return p;
}

static void stub_free(void *p)
{
    free(p);
}

static void no_line(const char *line)
{
    (void)line;
}

static int write_file(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(text, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* A refusal must be one non-empty line. */
static void check_message(const char *what, const char *err, const struct opts *o)
{
    if (err[0] && !strchr(err, '\n'))
        return;
    st.bad_messages++;
    if (st.bad_messages <= 5 || o->verbose)
        fprintf(stderr, "fuzz_job: %s refused with %s message: \"%s\"\n", what,
                err[0] ? "a multi-line" : "an empty", err);
}

/* check's summary of the job and model m (on stdout, which the fuzzer sends to /dev/null
 * while it checks), for a world of 1 to 4096 ranks. */
static void print_summary(const struct ddp_job *job, const struct ddp_model *m, int64_t steps)
{
    static const int sizes[] = {1, 2, 8, 4096};
    struct ddp_world w;
    memset(&w, 0, sizeof w);
    w.world_size = sizes[below(4)];
    w.num_nodes = 1;
    struct ddp_ckpt_pos start;
    memset(&start, 0, sizeof start);
    struct ddp_check_facts f = {job,     &w,    "cpu",  "self", 1,   1, m, SAMPLES,
                                SAMPLES, steps, &start, 0,      0.0, 0, ""};
    ddp_check_print(&f);
}

/* The model of job for samples of shape s, as check builds it; 0 when it builds. Sets
 * *trainable when it is small enough for a tiny training. */
static int check_model(const struct ddp_job *job, const struct shape *s, int *trainable,
                       const struct opts *o)
{
    char err[DDP_ERR_LEN * 2] = "";
    if (ddp_recipe_check_data(job, s->nd, s->nd == 3 ? (int)s->dims[0] : 1, err, sizeof err)) {
        check_message("the recipe", err, o);
        return -1;
    }
    struct ddp_augment aug;
    ddp_augment_init(&aug, job, s->nd, s->dims, 1);
    ddp_augment_init(&aug, job, s->nd, s->dims, 0);
    struct ddp_model m;
    err[0] = 0;
    if (ddp_model_create(&m, &stub_be, job->layers, s->nd, s->dims, (int)job->batch_size, err,
                         sizeof err) != 0) {
        check_message("the model", err, o);
        ddp_model_free(&m);
        return -1;
    }
    st.models++;
    struct ddp_model_mem mm;
    ddp_model_memory(&m, (int)job->batch_size, &mm);
    char desc[4096];
    ddp_model_describe(&m, desc, sizeof desc);
    double flops = ddp_model_flops_per_sample(&m);
    int64_t steps = (SAMPLES + job->batch_size - 1) / job->batch_size;
    steps = (steps + job->accumulate - 1) / job->accumulate;
    err[0] = 0;
    int rc = ddp_optim_check_schedule(job, steps < 1 ? 1 : steps, err, sizeof err);
    if (rc)
        check_message("the schedule", err, o);
    *trainable = !rc && mm.total < TRAIN_MEM_MAX && flops < TRAIN_FLOPS_MAX;
    if (!rc && summarize)
        print_summary(job, &m, steps);
    ddp_model_free(&m);
    return rc;
}

/* Slurm's variables as a job might see them, set or unset at random, some malformed. */
static void random_slurm_env(void)
{
    static const char *const nodes[] = {NULL,   "node[01-04]",   "gpu[1-2],cpu[3-5]",
                                        "n[1-", "a[3-1]",        "",
                                        "[]",   "x[0-99999999]", "h[1-2]x[3-4]"};
    static const char *const ids[] = {NULL, "123", "12a", "99999999999999999999999", ""};
    static const char *const names[] = {NULL, "%u%u%u", "job", "a/b", "\x1b[31m"};
    const char *v;
    if ((v = nodes[below(9)]))
        setenv("SLURM_JOB_NODELIST", v, 1);
    else
        unsetenv("SLURM_JOB_NODELIST");
    if ((v = ids[below(5)]))
        setenv("SLURM_JOB_ID", v, 1);
    else
        unsetenv("SLURM_JOB_ID");
    if ((v = ids[below(5)]))
        setenv("SLURM_ARRAY_TASK_ID", v, 1);
    else
        unsetenv("SLURM_ARRAY_TASK_ID");
    if ((v = names[below(5)]))
        setenv("SLURM_JOB_NAME", v, 1);
    else
        unsetenv("SLURM_JOB_NAME");
}

/* [job] output's patterns expanded as check does, and the effective job's text. */
static void expand_output(const struct ddp_job *job, const struct opts *o)
{
    char out[DDP_PATH_MAX], why[DDP_ERR_LEN] = "";
    random_slurm_env();
    if (ddp_outdir_expand(job->output, job->name, out, sizeof out, why, sizeof why) != 0)
        check_message("[job] output", why, o);
    free(ddp_outdir_job_text(job));
}

/* Load, validate and build the job in path; returns the shapes (bit mask) whose model builds
 * and is small enough to train. sets: --set overrides applied after the file. */
static int check_job(const char *path, const char *const *sets, int nsets, int *built,
                     const struct opts *o)
{
    char err[DDP_ERR_LEN * 2] = "";
    struct ddp_job job;
    int trainable = 0;
    *built = 0;
    ddp_job_defaults(&job);
    int rc = ddp_job_load(&job, path, err, sizeof err);
    for (int i = 0; !rc && i < nsets; i++)
        rc = ddp_job_set(&job, sets[i], err, sizeof err);
    if (!rc)
        rc = ddp_job_validate(&job, err, sizeof err);
    if (rc) {
        check_message("the job", err, o);
        ddp_job_free(&job);
        return 0;
    }
    FILE *null = fopen("/dev/null", "w");
    if (null) {
        ddp_job_write(&job, null);
        fclose(null);
    }
    ddp_job_log_lines(&job, no_line);
    expand_output(&job, o);
    char where[DDP_PATH_MAX + 64];
    ddp_job_where(&job, "model", "layers", where, sizeof where);
    for (int i = 0; i < NSHAPES; i++) {
        int small = 0;
        if (check_model(&job, &shapes[i], &small, o) == 0) {
            *built |= 1 << i;
            trainable |= small << i;
        }
    }
    ddp_job_free(&job);
    return trainable;
}

/* One time in four, a --set from a line of b with a section in front ("model." + "layers =
 * ..."); returns the number of sets (0 or 1). */
static int random_set(const struct buf *b, char *set, size_t len)
{
    static const char *const sections[] = {"job.",   "data.",       "model.", "optim.",
                                           "train.", "checkpoint.", "dist.",  ""};
    if (b->n == 0 || rnd() % 4)
        return 0;
    size_t s, e;
    line_of(b, below(b->n), &s, &e);
    const char *sec = sections[below(8)];
    size_t n = e - s < len - 64 ? e - s : len - 64;
    snprintf(set, len, "%s%.*s", sec, (int)n, b->b + s);
    for (char *p = set; *p; p++)
        if (*p == '\n')
            *p = ' ';
    return 1;
}

/* One fuzz iteration: returns 1 when check accepted the mutant for some shape. */
static int fuzz_one(struct buf *b, const char *path, const struct opts *o)
{
    next_input(b);
    if (write_file(path, b->b, b->n) != 0) {
        fprintf(stderr, "fuzz_job: cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    int built;
    char set[512];
    const char *sets[1] = {set};
    int nsets = random_set(b, set, sizeof set);
    int trainable = check_job(path, sets, nsets, &built, o);
    st.iterations++;
    if (!built) {
        st.rejected++;
        return 0;
    }
    st.accepted++;
    struct buf *slot = npool < POOL_MAX ? &pool[npool++] : &pool[below(POOL_MAX)];
    memcpy(slot->b, b->b, b->n);
    slot->n = b->n;
    if (trainable && o->train && nqueue < TRAIN_QUEUE_MAX) {
        int pick = 0;
        for (int i = 0, seen = 0; i < NSHAPES; i++)
            if (trainable & (1 << i) && below((size_t)++seen) == 0)
                pick = i;
        struct trainee *t = &queue[nqueue++];
        t->text = xmalloc(b->n);
        memcpy(t->text, b->b, b->n);
        t->n = b->n;
        t->shape = pick;
        static const int batches[] = {1, 2, 3, 4, 5, 8, 16};
        t->batch = batches[below(7)];
    }
    return 1;
}

/* ---- tiny trainings in subprocesses -------------------------------------------------- */

enum phase { PHASE_IDLE, PHASE_CHECK, PHASE_TRAIN };

struct slot {
    pid_t pid;
    enum phase phase;
    double start;
    long k; /* the training's number */
    int shape, batch;
    char ini[DDP_PATH_MAX], log[DDP_PATH_MAX], out[DDP_PATH_MAX];
};

/* The overrides that make any accepted job a tiny training on the synthetic set of shape s
 * (s < 0: without [data] file, for the in-process check), batches of batch (1 to 16), into
 * the output directory out. */
#define NSETS 11
static void train_sets(const struct opts *o, int s, int batch, const char *out,
                       char sets[NSETS][512])
{
    snprintf(sets[0], 512, "job.output=%s", out);
    snprintf(sets[1], 512, "train.max_steps=1");
    snprintf(sets[2], 512, "train.epochs=1");
    snprintf(sets[3], 512, "train.threads=1");
    snprintf(sets[4], 512, "data.batch_size=%d", batch);
    snprintf(sets[5], 512, "data.train=train");
    snprintf(sets[6], 512, "data.test=test");
    snprintf(sets[7], 512, "model.init=pytorch");
    snprintf(sets[8], 512, "checkpoint.resume=never");
    snprintf(sets[9], 512, "train.device=cpu");
    if (s >= 0)
        snprintf(sets[10], 512, "data.file=%s/%s", o->workdir, shapes[s].file);
    else
        snprintf(sets[10], 512, "data.file=%s", shapes[0].file);
}

static void spawn(struct slot *sl, const struct opts *o, const char *mode)
{
    char sets[NSETS][512];
    train_sets(o, sl->shape, sl->batch, sl->out, sets);
    char *argv[3 + 2 * NSETS + 1];
    int a = 0;
    argv[a++] = (char *)o->ddptrain;
    argv[a++] = (char *)mode;
    argv[a++] = sl->ini;
    for (int i = 0; i < NSETS; i++) {
        argv[a++] = "--set";
        argv[a++] = sets[i];
    }
    argv[a] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fuzz_job: fork");
        exit(1);
    }
    if (pid == 0) {
        setpgid(0, 0);
        /* not under Slurm: the in-process check sets these at random */
        unsetenv("SLURM_JOB_NODELIST");
        unsetenv("SLURM_JOB_ID");
        unsetenv("SLURM_ARRAY_TASK_ID");
        unsetenv("SLURM_JOB_NAME");
        FILE *f = freopen(sl->log, strcmp(mode, "check") ? "a" : "w", stdout);
        if (!f || dup2(fileno(stdout), 2) < 0)
            _exit(127);
        execv(o->ddptrain, argv);
        _exit(127);
    }
    setpgid(pid, pid);
    sl->pid = pid;
    sl->start = ddp_now();
    sl->phase = mode[0] == 'c' ? PHASE_CHECK : PHASE_TRAIN;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_tree(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* 1 when the log holds a sanitizer's report. */
static int sanitizer_report(const char *log)
{
    FILE *f = fopen(log, "rb");
    if (!f)
        return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, "Sanitizer") || strstr(line, "runtime error:");
    fclose(f);
    return found;
}

/* Keep the failing input and its log under WORKDIR/failures; say why once. */
static void keep_failure(const struct slot *sl, const char *why, const struct opts *o)
{
    char dir[DDP_PATH_MAX + 16], to[DDP_PATH_MAX * 2];
    snprintf(dir, sizeof dir, "%s/failures", o->workdir);
    mkdir(dir, 0777);
    snprintf(to, sizeof to, "%s/%ld.ini", dir, sl->k);
    rename(sl->ini, to);
    snprintf(to, sizeof to, "%s/%ld.log", dir, sl->k);
    rename(sl->log, to);
    fprintf(stderr, "fuzz_job: training %ld (%s): %s; input and log in %s/%ld.{ini,log}\n", sl->k,
            shapes[sl->shape].name, why, dir, sl->k);
}

/* The process of slot sl ended with wait status ws (timed_out: killed by us). */
static void finished(struct slot *sl, int ws, int timed_out, const struct opts *o)
{
    int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    int san = sanitizer_report(sl->log);
    char why[128] = "";
    if (timed_out) {
        st.hangs++;
        snprintf(why, sizeof why, "%s hung (killed after %.0f s)",
                 sl->phase == PHASE_CHECK ? "check" : "training", o->train_timeout);
    } else if (WIFSIGNALED(ws)) {
        st.crashes++;
        snprintf(why, sizeof why, "%s died of signal %d%s",
                 sl->phase == PHASE_CHECK ? "check" : "training", WTERMSIG(ws),
                 san ? " with a sanitizer report" : "");
    }
    if (san) {
        st.sanitizer++;
        if (!why[0])
            snprintf(why, sizeof why, "a sanitizer report, exit %d", code);
    }
    if (!why[0] && sl->phase == PHASE_CHECK && code == 0) {
        spawn(sl, o, "train");
        return;
    }
    if (sl->phase == PHASE_CHECK) {
        st.check_refused++;
    } else {
        st.trainings++;
        st.exit_codes[code < 0 ? 255 : code]++;
        if (!why[0] && code != 0 && code != DDP_EXIT_REQUEUE) {
            st.disagree++;
            snprintf(why, sizeof why, "check accepted it, training exited %d", code);
        }
    }
    if (why[0])
        keep_failure(sl, why, o);
    unlink(sl->ini);
    unlink(sl->log);
    rm_tree(sl->out);
    sl->phase = PHASE_IDLE;
}

/* Start the next queued mutant that the in-process check accepts with the overrides in a
 * free slot, fuzzing on when the queue is empty; 0 when no mutant was found. */
static int start_next(struct slot *sl, long *next, const struct opts *o)
{
    for (long tries = 0; *next >= nqueue && tries < REFILL_MAX; tries++)
        fuzz_one(&cur, current, o); /* the queue ran dry: more mutants */
    while (*next < nqueue) {
        struct trainee *t = &queue[(*next)++];
        sl->k = *next - 1;
        snprintf(sl->ini, sizeof sl->ini, "%s/train-%ld.ini", o->workdir, sl->k);
        snprintf(sl->log, sizeof sl->log, "%s/train-%ld.log", o->workdir, sl->k);
        snprintf(sl->out, sizeof sl->out, "%s/run-%ld", o->workdir, sl->k);
        if (write_file(sl->ini, t->text, t->n) != 0)
            continue;
        char sets[NSETS][512];
        const char *p[NSETS];
        train_sets(o, -1, t->batch, sl->out, sets);
        for (int i = 0; i < NSETS; i++)
            p[i] = sets[i];
        int built, ok = check_job(sl->ini, p, NSETS, &built, o);
        if (!(ok & (1 << t->shape))) {
            st.train_skipped++;
            unlink(sl->ini);
            continue;
        }
        sl->shape = t->shape;
        sl->batch = t->batch;
        spawn(sl, o, "check");
        return 1;
    }
    return 0;
}

/* Wait for one slot's process (polling for timeouts); handles its end. */
static void reap(struct slot *slots, int n, const struct opts *o)
{
    for (;;) {
        int ws;
        pid_t pid = waitpid(-1, &ws, WNOHANG);
        for (int i = 0; pid > 0 && i < n; i++)
            if (slots[i].phase != PHASE_IDLE && slots[i].pid == pid) {
                finished(&slots[i], ws, 0, o);
                return;
            }
        double now = ddp_now();
        for (int i = 0; i < n; i++)
            if (slots[i].phase != PHASE_IDLE && now - slots[i].start > o->train_timeout) {
                kill(-slots[i].pid, SIGKILL);
                waitpid(slots[i].pid, &ws, 0);
                finished(&slots[i], ws, 1, o);
                return;
            }
        if (pid <= 0)
            usleep(10000);
    }
}

static int make_datasets(const struct opts *o)
{
    for (int i = 0; i < NSHAPES; i++) {
        ddp_synth_spec spec;
        ddp_synth_defaults(&spec);
        spec.rank = shapes[i].nd;
        memcpy(spec.dims, shapes[i].dims, sizeof spec.dims);
        spec.classes = 2;
        spec.n_train = spec.n_test = SAMPLES;
        spec.dtype = shapes[i].dtype;
        char path[DDP_PATH_MAX + 64], err[DDP_ERR_LEN];
        snprintf(path, sizeof path, "%s/%s", o->workdir, shapes[i].file);
        if (ddp_synth_write(&spec, path, err, sizeof err) != 0) {
            fprintf(stderr, "fuzz_job: %s\n", err);
            return -1;
        }
    }
    return 0;
}

/* Up to o->train trainings of the queue, o->jobs at a time, until o->train_seconds. */
static void run_trainings(const struct opts *o)
{
    if (make_datasets(o) != 0) {
        st.crashes++; /* counted as a failure: the harness could not run */
        return;
    }
    setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1", 0);
    setenv("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1", 0);
    struct slot slots[JOBS_MAX];
    memset(slots, 0, sizeof slots);
    double t0 = ddp_now();
    long next = 0;
    int running = 0;
    for (;;) {
        for (int i = 0; i < o->jobs && ddp_now() - t0 < o->train_seconds; i++)
            if (slots[i].phase == PHASE_IDLE && st.trainings + running < o->train) {
                if (!start_next(&slots[i], &next, o))
                    break;
                running++;
            }
        if (!running)
            break;
        reap(slots, o->jobs, o);
        running = 0;
        for (int i = 0; i < o->jobs; i++)
            running += slots[i].phase != PHASE_IDLE;
    }
}

/* ---- seeds, options, the run ------------------------------------------------------------ */

static void add_seed(const char *path)
{
    if (nseeds == SEEDS_MAX)
        return;
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    struct buf *b = &seeds[nseeds];
    b->b = xmalloc(INPUT_MAX);
    b->n = fread(b->b, 1, INPUT_MAX, f);
    fclose(f);
    nseeds++;
}

/* A file, or every *.ini of a directory (sorted, so that runs repeat). */
static void add_corpus(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        add_seed(path);
        return;
    }
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]->d_name);
        if (len > 4 && strcmp(names[i]->d_name + len - 4, ".ini") == 0) {
            char full[DDP_PATH_MAX * 2];
            snprintf(full, sizeof full, "%s/%s", path, names[i]->d_name);
            add_seed(full);
        }
        free(names[i]);
    }
    free(names);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fuzz_job [--seconds S] [--iterations N] [--seed X] [--verbose] [--strict]\n"
               "                [--train N --ddptrain PATH [--train-seconds S] [--jobs J]\n"
               "                 [--train-timeout S]] [--workdir DIR] [SEED.ini|DIR ...]\n"
               "  seeds default to $DDP_SRC/configs (else ./configs); see docs/testing.md\n");
}

static int num_opt(int argc, char **argv, int *i, const char *name, double *v)
{
    const char *val;
    int r = ddp_opt_value(argc, argv, i, name, &val);
    if (r == 0)
        return 0;
    if (r < 0 || ddp_parse_f64(val, v) != 0 || *v < 0) {
        fprintf(stderr, "fuzz_job: %s needs a number >= 0\n", name);
        exit(2);
    }
    return 1;
}

static void parse(int argc, char **argv, struct opts *o)
{
    double v;
    for (int i = 1; i < argc; i++) {
        const char *val;
        if (num_opt(argc, argv, &i, "--seconds", &o->seconds) ||
            num_opt(argc, argv, &i, "--train-seconds", &o->train_seconds) ||
            num_opt(argc, argv, &i, "--train-timeout", &o->train_timeout))
            continue;
        if (num_opt(argc, argv, &i, "--iterations", &v))
            o->iterations = (long)v;
        else if (num_opt(argc, argv, &i, "--train", &v))
            o->train = (long)v;
        else if (num_opt(argc, argv, &i, "--jobs", &v))
            o->jobs = v < 1 ? 1 : v > JOBS_MAX ? JOBS_MAX : (int)v;
        else if (num_opt(argc, argv, &i, "--seed", &v))
            o->seed = (uint64_t)v;
        else if (ddp_opt_value(argc, argv, &i, "--ddptrain", &val) > 0)
            o->ddptrain = val;
        else if (ddp_opt_value(argc, argv, &i, "--workdir", &val) > 0)
            o->workdir = val;
        else if (!strcmp(argv[i], "--strict"))
            o->strict = 1;
        else if (!strcmp(argv[i], "--verbose"))
            o->verbose = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            usage(stdout), exit(0);
        else if (argv[i][0] == '-')
            usage(stderr), exit(2);
        else if (o->ncorpus < SEEDS_MAX)
            o->corpus[o->ncorpus++] = argv[i];
    }
    if (o->train && !o->ddptrain) {
        fprintf(stderr, "fuzz_job: --train needs --ddptrain PATH (or $DDPTRAIN)\n");
        exit(2);
    }
}

static void report(const struct opts *o, long phase1, double secs, double train_secs)
{
    printf("fuzz_job: %ld job files through check (%ld in %.1f s, %.0f/s, before any "
           "training), seed %llu: %ld accepted, %ld refused, %ld models built, %ld refusals "
           "not one line\n",
           st.iterations, phase1, secs, phase1 / (secs > 0 ? secs : 1), (unsigned long long)o->seed,
           st.accepted, st.rejected, st.models, st.bad_messages);
    if (o->train) {
        printf("fuzz_job: %ld trainings in %.1f s (%d at a time), %ld refused by `ddptrain "
               "check`, %ld skipped (too big with the overrides); exits:",
               st.trainings, train_secs, o->jobs, st.check_refused, st.train_skipped);
        for (int c = 0; c < 256; c++)
            if (st.exit_codes[c])
                printf(" %s%d x%ld", c == 255 ? "signal-or-timeout/" : "", c, st.exit_codes[c]);
        printf("\n");
    }
    printf("fuzz_job: %ld crashes, %ld sanitizer reports, %ld hangs, %ld check/train "
           "disagreements\n",
           st.crashes, st.sanitizer, st.hangs, st.disagree);
}

int main(int argc, char **argv)
{
    struct opts o = {.seconds = -1,
                     .train_seconds = 60,
                     .train_timeout = 120,
                     .jobs = 1,
                     .iterations = -1,
                     .ddptrain = getenv("DDPTRAIN")};
    parse(argc, argv, &o);
    if (o.seconds < 0)
        o.seconds = o.iterations >= 0 ? 1e30 : 10;
    rng_state = o.seed;
    stub_be = *ddp_backend_cpu();
    stub_be.alloc = stub_alloc;
    stub_be.free = stub_free;
    char tmpl[] = "/tmp/ddp-fuzz-XXXXXX";
    int own_dir = !o.workdir;
    if (own_dir && !(o.workdir = mkdtemp(tmpl))) {
        perror("fuzz_job: mkdtemp");
        return 1;
    }
    mkdir(o.workdir, 0777);
    const char *src = getenv("DDP_SRC");
    char def[DDP_PATH_MAX];
    snprintf(def, sizeof def, "%s/configs", src ? src : ".");
    for (int i = 0; i < o.ncorpus; i++)
        add_corpus(o.corpus[i]);
    if (!o.ncorpus)
        add_corpus(def);
    if (!nseeds) {
        fprintf(stderr, "fuzz_job: no seed job files (give files or a directory of *.ini)\n");
        return 2;
    }
    for (int i = 0; i < POOL_MAX; i++)
        pool[i].b = xmalloc(INPUT_MAX);
    cur.b = xmalloc(INPUT_MAX);
    snprintf(current, sizeof current, "%s/current.ini", o.workdir);
    fprintf(stderr,
            "fuzz_job: %d seeds; each input is in %s while it is checked (after a crash "
            "it is the culprit)\n",
            nseeds, current);
    fflush(stdout);
    int saved = dup(1), null = open("/dev/null", O_WRONLY);
    if (saved < 0 || null < 0 || dup2(null, 1) < 0) {
        perror("fuzz_job: /dev/null");
        return 1;
    }
    close(null);
    summarize = 1;
    double t0 = ddp_now();
    while ((o.iterations < 0 || st.iterations < o.iterations) && ddp_now() - t0 < o.seconds)
        fuzz_one(&cur, current, &o);
    double secs = ddp_now() - t0;
    long phase1 = st.iterations;
    fflush(stdout);
    summarize = 0;
    dup2(saved, 1);
    close(saved);
    t0 = ddp_now();
    if (o.train)
        run_trainings(&o);
    unlink(current);
    report(&o, phase1, secs, ddp_now() - t0);
    int bad =
        st.crashes || st.sanitizer || st.hangs || (o.strict && (st.disagree || st.bad_messages));
    if (own_dir && !bad)
        rm_tree(o.workdir);
    return bad ? 1 : 0;
}

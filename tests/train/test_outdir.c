/*
 * test_outdir.c - the output directory (src/outdir.c) and resume compatibility
 * (src/jobdiff.c) without a run: [job] output patterns under a Slurm-like environment and
 * outside Slurm, the directory lock taken twice, moving an earlier run aside, and job
 * differences that do and do not matter.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "core/fileio.h"
#include "job/config.h"
#include "train/jobdiff.h"
#include "train/outdir.h"
#include "core/util.h"

static const char *const g_slurm_vars[] = {
    "SLURM_JOB_ID",   "SLURM_JOBID",        "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
    "SLURM_JOB_NAME", "SLURM_JOB_NODELIST", "SLURM_NODELIST"};

static void clear_slurm(void)
{
    for (size_t i = 0; i < sizeof g_slurm_vars / sizeof g_slurm_vars[0]; i++)
        unsetenv(g_slurm_vars[i]);
}

/* expand pattern and compare with want (NULL: must fail with why containing err_part) */
static void expect(const char *pattern, const char *want, const char *err_part)
{
    char out[DDP_PATH_MAX], why[DDP_ERR_LEN] = "";
    int rc = ddp_outdir_expand(pattern, "myjob", out, sizeof out, why, sizeof why);
    if (want) {
        CHECK(rc == 0, "%s: failed: %s", pattern, why);
        if (rc == 0)
            CHECK(strcmp(out, want) == 0, "%s: got '%s', want '%s'", pattern, out, want);
    } else {
        CHECK(rc != 0, "%s: expanded to '%s', want an error", pattern, out);
        CHECK(strstr(why, err_part) != NULL, "%s: error '%s' lacks '%s'", pattern, why, err_part);
    }
}

static void test_patterns(void)
{
    char user[256], host[256];
    snprintf(user, sizeof user, "%s", getenv("USER") ? getenv("USER") : "");
    clear_slurm();
    setenv("SLURM_JOB_ID", "1234", 1);
    setenv("SLURM_ARRAY_JOB_ID", "1230", 1);
    setenv("SLURM_ARRAY_TASK_ID", "4", 1);
    setenv("SLURM_JOB_NAME", "sweep", 1);
    setenv("SLURM_JOB_NODELIST", "gpu[07-09],login1", 1);
    expect("runs/%x-%A_%a", "runs/sweep-1230_4", NULL);
    expect("runs/%j/%N", "runs/1234/gpu07", NULL);
    expect("r/%3a-%5j-%%-100%%", "r/004-01234-%-100%", NULL);
    expect("r/%12a", "r/0000000004", NULL); /* width at most 10, as Slurm */
    expect("plain/dir", "plain/dir", NULL);
    expect("r/%t", NULL, "unknown pattern %t");
    expect("r/%3q", NULL, "unknown pattern %3q");
    expect("r/50%", NULL, "lone %");
    setenv("SLURM_ARRAY_TASK_ID", "4/../..", 1);
    expect("r/%a", NULL, "SLURM_ARRAY_TASK_ID");
    /* a job that is not an array: %A is the job id, %a 0 */
    unsetenv("SLURM_ARRAY_JOB_ID");
    unsetenv("SLURM_ARRAY_TASK_ID");
    expect("r/%A_%a", "r/1234_0", NULL);
    /* a malformed node list: the hostlist's own reason, not "empty" */
    setenv("SLURM_JOB_NODELIST", "n[1-", 1);
    expect("r/%N", NULL, "SLURM_JOB_NODELIST for %N: hostlist \"n[1-\": '[' is never closed");
    setenv("SLURM_JOB_NODELIST", "gpu[07-09],login1", 1);
    /* a pattern that expands too far: quoted cut, so that the reason still fits the message */
    char many[601] = "";
    for (int i = 0; i < 300; i++)
        strcat(many, "%u");
    expect(many, NULL, "(600 characters) expands to more than 1023 characters");
    /* outside Slurm */
    clear_slurm();
    expect("r/%j-%A-%a-%x", "r/local-local-0-myjob", NULL);
    char out[DDP_PATH_MAX], why[DDP_ERR_LEN];
    CHECK(ddp_outdir_expand("%N|%u", "x", out, sizeof out, why, sizeof why) == 0, "%s", why);
    gethostname(host, sizeof host);
    host[strcspn(host, ".")] = '\0';
    char *bar = strchr(out, '|');
    CHECK(bar && strncmp(out, host, (size_t)(bar - out)) == 0, "%%N outside Slurm: '%s' for %s",
          out, host);
    CHECK(bar && bar[1] && (!user[0] || strcmp(bar + 1, user) == 0), "%%u: '%s'", out);
}

static void test_lock(const char *dir)
{
    char why[DDP_ERR_LEN], sub[DDP_PATH_MAX], pid[32];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    int fd = ddp_outdir_lock(sub, why, sizeof why);
    CHECK(fd >= 0, "first lock: %s", why);
    int again = ddp_outdir_lock(sub, why, sizeof why); /* another open file: flock conflicts */
    snprintf(pid, sizeof pid, "pid %ld,", (long)getpid());
    CHECK(again == -2, "second lock: %d (%s)", again, why);
    CHECK(strstr(why, "in use by another ddptrain run") && strstr(why, pid) &&
              strstr(why, "use another [job] output"),
          "holder not named: %s", why);
    ddp_outdir_unlock(fd);
    fd = ddp_outdir_lock(sub, why, sizeof why);
    CHECK(fd >= 0, "lock after unlock: %s", why);
    ddp_outdir_unlock(fd);
}

static void touch(const char *dir, const char *name)
{
    char p[DDP_PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(name, f);
        fclose(f);
    }
}

static void test_move_aside(const char *dir)
{
    char run[DDP_PATH_MAX], moved[DDP_PATH_MAX], moved2[DDP_PATH_MAX], why[DDP_ERR_LEN], p[2048];
    snprintf(run, sizeof run, "%s/run", dir);
    ddp_mkdir_p(run);
    touch(run, "slurm-1.out"); /* not a file of the run: stays */
    CHECK(ddp_outdir_has_run(run) == 0, "empty run dir seen as a run");
    CHECK(ddp_outdir_move_aside(run, moved, sizeof moved, why, sizeof why) == 0, "moved nothing");
    snprintf(p, sizeof p, "%s/checkpoints", run);
    ddp_mkdir_p(p);
    touch(p, "ckpt-00000001.h5");
    touch(run, "metrics.jsonl");
    touch(run, "job.ini");
    CHECK(ddp_outdir_has_run(run) == 1, "run files not seen");
    CHECK(ddp_outdir_move_aside(run, moved, sizeof moved, why, sizeof why) == 1, "%s", why);
    struct stat st;
    snprintf(p, sizeof p, "%s/checkpoints/ckpt-00000001.h5", moved);
    CHECK(stat(p, &st) == 0, "%s missing", p);
    snprintf(p, sizeof p, "%s/metrics.jsonl", moved);
    CHECK(stat(p, &st) == 0, "%s missing", p);
    snprintf(p, sizeof p, "%s/slurm-1.out", run);
    CHECK(stat(p, &st) == 0, "%s was moved", p);
    CHECK(ddp_outdir_has_run(run) == 0, "files left behind");
    touch(run, "model.h5"); /* the same second: a new previous-* directory, never a merge */
    CHECK(ddp_outdir_move_aside(run, moved2, sizeof moved2, why, sizeof why) == 1, "%s", why);
    CHECK(strcmp(moved, moved2) != 0, "moved twice into %s", moved);
}

/* d of job b against the effective text of a: "" when the same */
static int diff_of(struct ddp_job *a, int64_t ga, struct ddp_job *b, int64_t gb, char *d,
                   size_t len)
{
    char *text = ddp_outdir_job_text(a);
    int n = ddp_jobdiff(b, gb, text, ga, d, len);
    free(text);
    return n;
}

/* dir/sub as a run of job name with checkpoints/ (ckpt 1) or without (ckpt 0). */
static void fake_run(const char *dir, const char *sub, const char *name, int ckpt)
{
    char p[DDP_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    mkdir(p, 0755);
    FILE *f = fopen(strcat(p, "/job.ini"), "w");
    if (f) {
        fprintf(f, "[job]\nname = %s\n[optim]\nname = sgd\n", name);
        fclose(f);
    }
    snprintf(p, sizeof p, "%s/%s/checkpoints", dir, sub);
    if (ckpt)
        mkdir(p, 0755);
}

/* Other job ids' directories of a %j pattern: counted only under Slurm, only with %j, only
 * with checkpoints of the same job name, never this job's own; glob characters in the
 * pattern's literal text are literal. */
static void test_other_jobs(const char *dir)
{
    char base[DDP_PATH_MAX], pat[DDP_PATH_MAX + 32], mine[DDP_PATH_MAX + 32], other[DDP_PATH_MAX];
    snprintf(base, sizeof base, "%s/jobs[1]", dir);
    mkdir(base, 0755);
    fake_run(base, "r-101", "train", 1);
    fake_run(base, "r-102", "train", 1);
    fake_run(base, "r-103", "train", 0);  /* no checkpoints: nothing to resume */
    fake_run(base, "r-104", "sweep", 1);  /* another job name */
    fake_run(base, "r-x105", "train", 1); /* not a job id */
    clear_slurm();
    snprintf(pat, sizeof pat, "%s/r-%%j", base);
    snprintf(mine, sizeof mine, "%s/r-102", base);
    other[0] = '\0';
    CHECK(ddp_outdir_other_jobs(pat, "train", mine, other, sizeof other) == 0,
          "outside Slurm: other jobs counted");
    setenv("SLURM_JOB_ID", "102", 1);
    int n = ddp_outdir_other_jobs(pat, "train", mine, other, sizeof other);
    snprintf(mine, sizeof mine, "%s/r-101", base);
    CHECK(n == 1 && strcmp(other, mine) == 0, "%%j: %d other job(s), last '%s', want 1, '%s'", n,
          other, mine);
    CHECK(ddp_outdir_other_jobs(pat, "sweep", mine, other, sizeof other) == 1,
          "%%j: job name sweep: want 1 (r-104)");
    snprintf(pat, sizeof pat, "%s/r-%%x", base);
    CHECK(ddp_outdir_other_jobs(pat, "train", mine, other, sizeof other) == 0,
          "without %%j: other jobs counted");
    clear_slurm();
}

static void set(struct ddp_job *j, const char *kv)
{
    char err[DDP_ERR_LEN];
    CHECK(ddp_job_set(j, kv, err, sizeof err) == 0, "--set %s: %s", kv, err);
}

static void test_jobdiff(void)
{
    static struct ddp_job a, b;
    char d[DDP_ERR_LEN];
    ddp_job_defaults(&a);
    set(&a, "optim.lr=0.05");
    set(&a, "model.layers=flatten, linear(32), relu, linear(10)");
    ddp_job_defaults(&b);
    set(&b, "optim.lr=5e-2"); /* the same value, written otherwise */
    set(&b, "model.layers=flatten,  linear(32), relu, linear(10)");
    set(&b, "train.epochs=50");
    set(&b, "train.max_steps=7");
    set(&b, "train.log_every=3");
    set(&b, "checkpoint.every_steps=9");
    set(&b, "dist.timeout_s=20");
    set(&b, "train.threads=2");
    set(&b, "train.layout=nhwc");
    set(&b, "train.activations=bf16"); /* a checkpoint is fp32 whatever the storage */
    set(&b, "job.output=elsewhere");
    set(&b, "data.test=");
    set(&b, "data.batch_size=32"); /* 2 ranks x 32 = 1 rank x 64 */
    int n = diff_of(&a, 64, &b, 64, d, sizeof d);
    CHECK(n == 0, "allowed differences refused (%d): %s", n, d);
    set(&b, "optim.lr=0.2");
    set(&b, "job.seed=9");
    n = diff_of(&a, 64, &b, 64, d, sizeof d);
    CHECK(n == 2 && strstr(d, "optim.lr 0.05 -> 0.2") && strstr(d, "job.seed 1234 -> 9"),
          "lr and seed: %d '%s'", n, d);
    set(&b, "optim.lr=0.05");
    set(&b, "job.seed=1234");
    n = diff_of(&a, 64, &b, 32, d, sizeof d);
    CHECK(n == 1 && strstr(d, "global batch (data.batch_size x ranks) 64 -> 32"), "batch: '%s'", d);
    set(&b, "model.layers=flatten, linear(10)");
    set(&b, "dist.sync_bn=true");
    n = diff_of(&a, 64, &b, 64, d, sizeof d);
    CHECK(n == 2 && strstr(d, "model.layers") && strstr(d, "dist.sync_bn false -> true"),
          "layers, sync_bn: '%s'", d);
    /* the bare job file text older versions stored: cannot be compared */
    CHECK(ddp_jobdiff(&b, 64, "[optim]\nlr = 0.1\n", 64, d, sizeof d) == -1, "legacy text");
    /* a stored key this version does not know is ignored; a value it rejects is a difference */
    char *text = ddp_outdir_job_text(&a), *bad = ddp_malloc(strlen(text) + 64);
    snprintf(bad, strlen(text) + 64, "%s\n[future]\nknob = 3\n", text);
    ddp_job_defaults(&b);
    set(&b, "optim.lr=0.05");
    set(&b, "model.layers=flatten, linear(32), relu, linear(10)");
    CHECK(ddp_jobdiff(&b, 64, bad, 64, d, sizeof d) == 0, "unknown stored key: '%s'", d);
    char *lr = strstr(text, "lr = 0.05");
    if (lr) {
        memcpy(lr, "lr = x.xx", 9);
        CHECK(ddp_jobdiff(&b, 64, text, 64, d, sizeof d) == 1 && strstr(d, "optim.lr x.xx"),
              "rejected stored value: '%s'", d);
    }
    free(bad);
    free(text);
}

/* The recipe keys change what is trained: each must match on resume; early_stop (when
 * to stop, as epochs) and keep_best (a [checkpoint] key) may differ. */
static void test_jobdiff_recipe(void)
{
    static struct ddp_job a, b;
    static const char *const must[] = {
        "data.augment=hflip",    "data.normalize=0.5, 0.2",   "data.val=/val",
        "data.val_fraction=0.1", "optim.clip_grad_norm=1",    "optim.schedule=onecycle",
        "optim.pct_start=0.25",  "optim.div_factor=10",       "optim.final_div_factor=100",
        "train.accumulate=4",    "train.label_smoothing=0.1", "optim.milestones=3, 6",
    };
    char d[DDP_ERR_LEN];
    ddp_job_defaults(&a);
    for (size_t i = 0; i < sizeof must / sizeof *must; i++) {
        ddp_job_defaults(&b);
        set(&b, must[i]);
        char key[64];
        snprintf(key, sizeof key, "%.*s ", (int)strcspn(must[i], "="), must[i]);
        int n = diff_of(&a, 64, &b, 64, d, sizeof d);
        CHECK(n == 1 && strstr(d, key), "%s: %d '%s'", must[i], n, d);
    }
    ddp_job_defaults(&b);
    set(&b, "train.early_stop=3");
    set(&b, "checkpoint.keep_best=val_loss");
    int n = diff_of(&a, 64, &b, 64, d, sizeof d);
    CHECK(n == 0, "early_stop and keep_best refused (%d): %s", n, d);
}

/* A commit (rename) that fails removes its PATH.tmp: nothing is left behind. */
static void test_commit_cleans(const char *dir)
{
    char final[DDP_PATH_MAX], inside[DDP_PATH_MAX + 8], err[DDP_ERR_LEN];
    snprintf(final, sizeof final, "%s/full", dir); /* a non-empty directory: rename fails */
    snprintf(inside, sizeof inside, "%s/x", final);
    mkdir(final, 0700);
    FILE *f = fopen(inside, "w");
    if (f)
        fclose(f);
    struct ddp_atomic_file a;
    CHECK(ddp_atomic_open(&a, final) != NULL, "cannot open %s.tmp", final);
    if (!a.f)
        return;
    char *tmp = ddp_strdup(a.tmp);
    fputs("data\n", a.f);
    CHECK(ddp_atomic_close(&a, err, sizeof err) != 0, "a rename over a directory succeeded");
    CHECK(access(tmp, F_OK) != 0, "%s left behind after: %s", tmp, err);
    /* the same through ddp_file_commit, which HDF5 writers call */
    f = fopen(tmp, "w");
    if (f)
        fclose(f);
    CHECK(ddp_file_commit(tmp, final, err, sizeof err) != 0, "commit over a directory succeeded");
    CHECK(access(tmp, F_OK) != 0, "%s left behind by ddp_file_commit: %s", tmp, err);
    free(tmp);
    /* an output path that cannot work is refused before any work */
    CHECK(ddp_file_check_output("-o", "", err, sizeof err) != 0 && strstr(err, "empty path"),
          "-o '': %s", err);
    CHECK(ddp_file_check_output("--json", final, err, sizeof err) != 0 &&
              strstr(err, "is a directory"),
          "a directory: %s", err);
    snprintf(inside, sizeof inside, "%s/no/x", dir);
    CHECK(ddp_file_check_output("--json", inside, err, sizeof err) != 0 &&
              strstr(err, "its directory"),
          "a missing directory: %s", err);
    snprintf(inside, sizeof inside, "%s/new.json", dir);
    CHECK(ddp_file_check_output("--json", inside, err, sizeof err) == 0, "%s", err);
    unlink(inside);
    snprintf(inside, sizeof inside, "%s/x", final);
    unlink(inside);
    rmdir(final);
}

int main(void)
{
    char dir[] = "/tmp/test_outdir.XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    test_patterns();
    test_lock(dir);
    test_move_aside(dir);
    test_other_jobs(dir);
    test_jobdiff();
    test_jobdiff_recipe();
    test_commit_cleans(dir);
    return check_report_dir("test_outdir", dir);
}

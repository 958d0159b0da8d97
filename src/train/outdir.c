/* outdir.c - the output directory: patterns, lock, previous runs, job.ini. See outdir.h. */
#include "train/outdir.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dist/hostlist.h"
#include "nn/weights.h"
#include "core/fileio.h"
#include "core/util.h"

#define WIDTH_MAX 10       /* as Slurm: a wider field is cut to 10 digits of padding */
#define HOLDER_MAX 400     /* bytes of the holder record read back (host, pid, job, time) */
#define PREVIOUS_TRIES 100 /* previous-<time>-N suffixes tried before giving up */

/* The files of a run, as this program writes them (nothing else is moved aside). */
static const char *const g_run_files[] = {"job.ini",     "metrics.jsonl", "model.h5",
                                          "checkpoints", "report.html",   "tb"};
#define NRUNFILES ((int)(sizeof g_run_files / sizeof g_run_files[0]))

/* 1 when s is a non-empty string of decimal digits. */
static int all_digits(const char *s)
{
    if (!s || !*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

static const char *env_either(const char *a, const char *b)
{
    const char *v = getenv(a);
    return v && *v ? v : (b ? getenv(b) : NULL);
}

/* A Slurm id from the environment; NULL when unset; -1 (why set) when not a number. */
static int slurm_id(const char *var, const char *alt, const char **val, char *why, size_t whylen)
{
    *val = env_either(var, alt);
    if (*val && !*val[0])
        *val = NULL;
    if (*val && !all_digits(*val))
        return ddp_err(why, whylen,
                       "%s='%.40s' is not a Slurm id; expected digits (it is set by "
                       "Slurm: do not set it by hand)",
                       var, *val);
    return 0;
}

static void user_name(char *out, size_t len)
{
    struct passwd *pw = getpwuid(getuid());
    const char *u = pw && pw->pw_name ? pw->pw_name : getenv("USER");
    if (u && *u)
        snprintf(out, len, "%s", u);
    else
        snprintf(out, len, "%u", (unsigned)getuid());
}

/* %N: the first node of the job's node list, else this host's short name. */
static int first_node(char *out, size_t len, char *why, size_t whylen)
{
    const char *nl = env_either("SLURM_JOB_NODELIST", "SLURM_NODELIST");
    if (nl && *nl) {
        char **hosts = NULL, sub[DDP_ERR_LEN];
        int n = 0;
        int rc = ddp_hostlist_expand(nl, &hosts, &n, sub, sizeof sub);
        if (rc != 0 || n < 1) {
            ddp_hostlist_free(hosts, n);
            return ddp_err(why, whylen, "SLURM_JOB_NODELIST for %%N: %s", rc != 0 ? sub : "empty");
        }
        snprintf(out, len, "%s", hosts[0]);
        ddp_hostlist_free(hosts, n);
        return 0;
    }
    if (gethostname(out, len) != 0)
        snprintf(out, len, "localhost");
    out[len - 1] = '\0';
    out[strcspn(out, ".")] = '\0';
    return 0;
}

/* The value of pattern letter c (after '%'). 0, 1 for an unknown letter, -1 with why. */
static int pattern_value(char c, const char *job_name, char *v, size_t len, char *why,
                         size_t whylen)
{
    const char *job, *array_job, *task;
    if (slurm_id("SLURM_JOB_ID", "SLURM_JOBID", &job, why, whylen) < 0 ||
        slurm_id("SLURM_ARRAY_JOB_ID", NULL, &array_job, why, whylen) < 0 ||
        slurm_id("SLURM_ARRAY_TASK_ID", NULL, &task, why, whylen) < 0)
        return -1;
    const char *name = env_either("SLURM_JOB_NAME", NULL);
    switch (c) {
    case 'j':
        snprintf(v, len, "%s", job ? job : "local");
        return 0;
    case 'A':
        snprintf(v, len, "%s", array_job ? array_job : job ? job : "local");
        return 0;
    case 'a':
        snprintf(v, len, "%s", task ? task : "0");
        return 0;
    case 'x':
        snprintf(v, len, "%s", job && name && *name ? name : job_name);
        return 0;
    case 'u':
        user_name(v, len);
        return 0;
    case 'N':
        return first_node(v, len, why, whylen);
    case '%':
        snprintf(v, len, "%%");
        return 0;
    default:
        return 1;
    }
}

/* Characters of a pattern quoted in a message: a longer one is cut ("...") so that the
 * reason after it is never cut off. */
#define QUOTE_MAX 48

int ddp_outdir_expand(const char *pattern, const char *job_name, char *out, size_t len, char *why,
                      size_t whylen)
{
    const int qn = (int)(strlen(pattern) > QUOTE_MAX ? QUOTE_MAX : strlen(pattern));
    const char *more = strlen(pattern) > QUOTE_MAX ? "..." : "";
    size_t n = 0;
    for (const char *p = pattern; *p; p++) {
        char v[DDP_PATH_MAX];
        if (*p != '%') {
            v[0] = *p;
            v[1] = '\0';
        } else {
            const char *start = p++;
            int width = 0;
            for (; *p >= '0' && *p <= '9'; p++) {
                width = width * 10 + (*p - '0');
                if (width > WIDTH_MAX)
                    width = WIDTH_MAX;
            }
            if (!*p)
                return ddp_err(why, whylen,
                               "'%.*s%s' ends in a lone %%; write %%%% for a percent "
                               "sign",
                               qn, pattern, more);
            int rc = pattern_value(*p, job_name, v, sizeof v, why, whylen);
            if (rc < 0)
                return -1;
            if (rc > 0)
                return ddp_err(why, whylen,
                               "'%.*s%s': unknown pattern %.*s; expected %%j %%A %%a "
                               "%%x %%u %%N or %%%% (see docs/checkpoints.md)",
                               qn, pattern, more, (int)(p - start + 1), start);
            if (width > 0 && all_digits(v) && strlen(v) < (size_t)width) {
                char padded[DDP_PATH_MAX];
                snprintf(padded, sizeof padded, "%0*d%s", width - (int)strlen(v), 0, v);
                snprintf(v, sizeof v, "%s", padded);
            }
        }
        size_t add = strlen(v);
        if (n + add >= len)
            return ddp_err(why, whylen,
                           "'%.*s%s' (%zu characters) expands to more than %zu characters; "
                           "shorten [job] output",
                           qn, pattern, more, strlen(pattern), len - 1);
        memcpy(out + n, v, add + 1);
        n += add;
    }
    out[n] = '\0';
    return 0;
}

/* The glob(3) pattern of a [job] output pattern with %j as any job id into out: the pattern
 * with each %j (of any width) marked, expanded as usual, glob's special characters escaped and
 * the marks made "[0-9]*". 1 when the pattern holds %j, 0 when not, -1 when it cannot expand. */
static int glob_of_pattern(const char *pattern, const char *job_name, char *out, size_t len)
{
    char marked[DDP_PATH_MAX], expanded[DDP_PATH_MAX], why[DDP_ERR_LEN];
    size_t n = 0;
    int has_j = 0;
    for (const char *p = pattern; *p && n + 2 < sizeof marked; p++) {
        const char *q = p + (*p == '%');
        while (*p == '%' && *q >= '0' && *q <= '9')
            q++;
        if (*p == '%' && *q == 'j') { /* \001: a byte no path pattern holds */
            marked[n++] = '\001';
            has_j = 1;
            p = q;
        } else {
            marked[n++] = *p;
            if (*p == '%' && *q == '%') /* keep %% whole: its second % starts nothing */
                marked[n++] = *p++;
        }
    }
    marked[n] = '\0';
    if (ddp_outdir_expand(marked, job_name, expanded, sizeof expanded, why, sizeof why) != 0)
        return -1;
    n = 0;
    for (const char *c = expanded; *c; c++) {
        if (n + 8 >= len)
            return -1;
        if (*c == '\001') {
            memcpy(out + n, "[0-9]*", 6);
            n += 6;
            continue;
        }
        if (strchr("*?[\\", *c))
            out[n++] = '\\';
        out[n++] = *c;
    }
    out[n] = '\0';
    return has_j;
}

/* 1 when dir holds checkpoints/ and a job.ini whose [job] name is job_name. */
static int holds_run_of(const char *dir, const char *job_name)
{
    char path[DDP_PATH_MAX + 32], line[DDP_PATH_MAX + 16], want[DDP_PATH_MAX + 16];
    struct stat st;
    snprintf(path, sizeof path, "%s/checkpoints", dir);
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0;
    snprintf(path, sizeof path, "%s/job.ini", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    snprintf(want, sizeof want, "name = %s\n", job_name);
    int found = 0, in_job = 0;
    while (!found && fgets(line, sizeof line, f)) {
        if (line[0] == '[')
            in_job = strncmp(line, "[job]", 5) == 0;
        else
            found = in_job && strcmp(line, want) == 0;
    }
    fclose(f);
    return found;
}

int ddp_outdir_other_jobs(const char *pattern, const char *job_name, const char *mine, char *other,
                          size_t len)
{
    char g[2 * DDP_PATH_MAX];
    const char *job = env_either("SLURM_JOB_ID", "SLURM_JOBID");
    if (!job || !*job || glob_of_pattern(pattern, job_name, g, sizeof g) != 1)
        return 0;
    glob_t gl;
    int count = 0;
    if (glob(g, GLOB_ONLYDIR, NULL, &gl) != 0)
        return 0;
    for (size_t i = 0; i < gl.gl_pathc; i++) {
        const char *d = gl.gl_pathv[i];
        if (strcmp(d, mine) != 0 && holds_run_of(d, job_name)) {
            snprintf(other, len, "%s", d);
            count++;
        }
    }
    globfree(&gl);
    return count;
}

/* One line naming this process: host, pid, Slurm job (array task), start time. */
static void holder_record(char *buf, size_t len)
{
    char host[256] = "?", when[64] = "?", job[96] = "none";
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S%z", &tm);
    const char *id = env_either("SLURM_JOB_ID", "SLURM_JOBID");
    const char *aj = getenv("SLURM_ARRAY_JOB_ID"), *at = getenv("SLURM_ARRAY_TASK_ID");
    if (id && all_digits(id) && all_digits(aj) && all_digits(at))
        snprintf(job, sizeof job, "%s (array %s_%s)", id, aj, at);
    else if (id && all_digits(id))
        snprintf(job, sizeof job, "%s", id);
    snprintf(buf, len, "host %s, pid %ld, Slurm job %s, since %s", host, (long)getpid(), job, when);
}

/* The message for a lock held by another run, from its holder record rec. Returns -2. */
static int in_use(const char *dir, char *rec, char *why, size_t whylen)
{
    rec[strcspn(rec, "\n")] = '\0';
    ddp_err(why, whylen,
            "%s is in use by another ddptrain run (%s); wait for that run to "
            "end, or use another [job] output",
            dir, rec[0] ? rec : "the holder left no record of itself");
    return -2;
}

/* What a file of mode m is, for messages. */
static const char *kind_of(mode_t m)
{
    return S_ISREG(m)    ? "a regular file"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISSOCK(m) ? "a socket"
           : S_ISDIR(m)  ? "a directory"
                         : "not a regular file";
}

/* What mkdir -p of dir would fail on, found without creating anything: a name longer than
 * the file system allows (NAME_MAX, from the nearest part that exists), a part that exists and
 * is not a directory. 0, or -1 with why. */
static int check_path(const char *dir, char *why, size_t whylen)
{
    char path[DDP_PATH_MAX + 32];
    struct stat st;
    long name_max = NAME_MAX;
    size_t end = 0;
    const size_t len = strlen(dir);
    while (end < len) {
        size_t start = end + strspn(dir + end, "/");
        end = start + strcspn(dir + start, "/");
        if (end - start > (size_t)name_max)
            return ddp_err(why, whylen,
                           "cannot create directory %.60s...: its name '%.20s...' has %zu bytes, "
                           "more than the %ld a name may have there; use a shorter [job] output",
                           dir, dir + start, end - start, name_max);
        snprintf(path, sizeof path, "%.*s", (int)end, dir);
        if (stat(path, &st) != 0)
            continue; /* nothing there yet: mkdir makes it */
        if (!S_ISDIR(st.st_mode))
            return ddp_err(why, whylen,
                           "cannot create directory %s: %s exists and is %s, not a directory; "
                           "use another [job] output",
                           dir, path, kind_of(st.st_mode));
        long nm = pathconf(path, _PC_NAME_MAX);
        if (nm > 0)
            name_max = nm;
    }
    return 0;
}

int ddp_outdir_check_resume(const char *dir, int tensorboard, char *why, size_t whylen)
{
    char path[DDP_PATH_MAX + 32];
    struct stat st;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return ddp_err(why, whylen,
                       "%s is %s, not a regular file, and a resumed run appends its metrics "
                       "there; move it away, or start afresh with [checkpoint] resume = never",
                       path, kind_of(st.st_mode));
    snprintf(path, sizeof path, "%s/tb", dir);
    if (tensorboard && stat(path, &st) == 0 && !S_ISDIR(st.st_mode))
        return ddp_err(why, whylen,
                       "%s is %s, not a directory, and TensorBoard's events ([job] tensorboard) "
                       "go there; move it away, or set [job] tensorboard = false",
                       path, kind_of(st.st_mode));
    /* the files a resumed run replaces (via NAME.tmp and a rename) at its start or end: a
     * directory there would fail the run only after all its training */
    static const char *const replaced[] = {"job.ini", "model.h5", "best.h5", "report.html"};
    for (size_t i = 0; i < sizeof replaced / sizeof replaced[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, replaced[i]);
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
            return ddp_err(why, whylen,
                           "%s is %s, not a regular file, and a resumed run replaces it; move "
                           "it away, or start afresh with [checkpoint] resume = never",
                           path, kind_of(st.st_mode));
    }
    return 0;
}

int ddp_outdir_probe(const char *dir, char *why, size_t whylen)
{
    if (check_path(dir, why, whylen) != 0)
        return -1;
    char path[DDP_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s", dir);
    while (access(path, F_OK) != 0) { /* the nearest directory that exists must be writable */
        char *slash = strrchr(path, '/');
        if (!slash || slash == path) {
            snprintf(path, sizeof path, "%s", slash == path ? "/" : ".");
            break;
        }
        *slash = '\0';
    }
    if (access(path, W_OK) != 0)
        return ddp_err(why, whylen, "cannot create directory %s: %s is not writable", dir, path);
    snprintf(path, sizeof path, "%s/%s", dir, DDP_OUTDIR_LOCK);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int rc = 0;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        char rec[HOLDER_MAX + 1];
        ssize_t got = pread(fd, rec, HOLDER_MAX, 0);
        rec[got > 0 ? got : 0] = '\0';
        rc = in_use(dir, rec, why, whylen);
    }
    close(fd);
    return rc;
}

int ddp_outdir_lock(const char *dir, char *why, size_t whylen)
{
    char path[DDP_PATH_MAX + 32];
    if (check_path(dir, why, whylen) != 0)
        return -1;
    if (ddp_mkdir_p(dir) != 0)
        return ddp_err(why, whylen, "cannot create directory %s: %s", dir, strerror(errno));
    snprintf(path, sizeof path, "%s/%s", dir, DDP_OUTDIR_LOCK);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return ddp_err(why, whylen, "cannot open the lock file %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char rec[HOLDER_MAX + 1];
        ssize_t got = e == EWOULDBLOCK ? pread(fd, rec, HOLDER_MAX, 0) : -1;
        close(fd);
        if (e != EWOULDBLOCK)
            return ddp_err(why, whylen, "cannot lock %s: %s", path, strerror(e));
        rec[got > 0 ? got : 0] = '\0';
        return in_use(dir, rec, why, whylen);
    }
    char rec[HOLDER_MAX];
    holder_record(rec, sizeof rec - 1);
    strcat(rec, "\n");
    if (ftruncate(fd, 0) != 0 || pwrite(fd, rec, strlen(rec), 0) != (ssize_t)strlen(rec)) {
        int e = errno;
        close(fd);
        return ddp_err(why, whylen, "cannot write the lock file %s: %s", path, strerror(e));
    }
    return fd;
}

void ddp_outdir_unlock(int fd)
{
    if (fd < 0)
        return;
    if (ftruncate(fd, 0) != 0) { /* a stale record only misnames a holder; the lock is free */
    }
    close(fd);
}

int ddp_outdir_has_run(const char *dir)
{
    char path[DDP_PATH_MAX + 32];
    struct stat st;
    for (int i = 0; i < NRUNFILES; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, g_run_files[i]);
        if (lstat(path, &st) == 0)
            return 1;
    }
    return 0;
}

/* Create dir/previous-<local time>[-N] (a new directory, never one that exists). */
static int make_previous(const char *dir, char *out, size_t len, char *why, size_t whylen)
{
    char stamp[32] = "unknown";
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm))
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    for (int i = 1; i <= PREVIOUS_TRIES; i++) {
        if (i == 1)
            snprintf(out, len, "%s/previous-%s", dir, stamp);
        else
            snprintf(out, len, "%s/previous-%s-%d", dir, stamp, i);
        if (mkdir(out, 0755) == 0)
            return 0;
        if (errno != EEXIST)
            return ddp_err(why, whylen, "cannot create %s: %s", out, strerror(errno));
    }
    return ddp_err(why, whylen, "%s/previous-%s-1..%d all exist; remove some", dir, stamp,
                   PREVIOUS_TRIES);
}

int ddp_outdir_move_aside(const char *dir, char *moved_to, size_t len, char *why, size_t whylen)
{
    if (!ddp_outdir_has_run(dir))
        return 0;
    if (make_previous(dir, moved_to, len, why, whylen) != 0)
        return -1;
    char from[DDP_PATH_MAX + 32], to[DDP_PATH_MAX + 96];
    struct stat st;
    for (int i = 0; i < NRUNFILES; i++) {
        snprintf(from, sizeof from, "%s/%s", dir, g_run_files[i]);
        if (lstat(from, &st) != 0)
            continue;
        snprintf(to, sizeof to, "%s/%s", moved_to, g_run_files[i]);
        if (rename(from, to) != 0)
            return ddp_err(why, whylen, "cannot move %s to %s: %s", from, to, strerror(errno));
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 1;
}

char *ddp_outdir_job_text(const struct ddp_job *job)
{
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f)
        ddp_die("open_memstream: %s", strerror(errno));
    ddp_job_write(job, f);
    if (fclose(f) != 0 || !text)
        ddp_die("cannot format the effective job: %s", strerror(errno));
    return text;
}

int ddp_outdir_write_job(const char *dir, const char *text, char *why, size_t whylen)
{
    char path[DDP_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/job.ini", dir);
    struct ddp_atomic_file a;
    if (!ddp_atomic_open(&a, path))
        return ddp_err(why, whylen, "%s.tmp: cannot write: %s", path, strerror(errno));
    fwrite(text, 1, strlen(text), a.f);
    int rc = ddp_atomic_close(&a, why, whylen);
    if (rc == -1) { /* writing failed: a full disk, most likely */
        size_t n = strlen(why);
        snprintf(why + n, whylen - n, "; free space there or set [job] output elsewhere");
    }
    return rc ? -1 : 0;
}

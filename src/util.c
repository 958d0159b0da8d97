/*
 * util.c - logging with host/rank identity, the single die path, allocation wrappers and
 * strict number parsing. See util.h.
 */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char g_host[256] = "";
static int g_rank = 0;
static int g_world_size = 1;
static void (*g_abort_hook)(int code);

void ddp_log_set_identity(const char *host, int rank, int world_size)
{
    snprintf(g_host, sizeof g_host, "%s", host ? host : "");
    g_rank = rank;
    g_world_size = world_size;
}

int ddp_log_rank(void) { return g_rank; }

/* "host rank N: " when the world has more than one rank or a host is known. */
static void print_prefix(FILE *f)
{
    if (g_host[0] == '\0') {
        char h[256];
        if (gethostname(h, sizeof h) == 0) {
            h[sizeof h - 1] = '\0';
            snprintf(g_host, sizeof g_host, "%s", h);
        }
    }
    if (g_world_size > 1)
        fprintf(f, "ddptrain: %s rank %d: ", g_host, g_rank);
    else
        fprintf(f, "ddptrain: ");
}

/* Local wall-clock time as ISO 8601 to the second with the UTC offset, as `date -Is` prints
 * it ("2026-12-03T10:15:02+01:00"), so a job log can be read against other logs. */
static void iso_time(char *buf, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    char z[8];
    if (localtime_r(&now, &tm) == NULL || strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm) == 0 ||
        strftime(z, sizeof z, "%z", &tm) != 5) {
        snprintf(buf, len, "%lld", (long long)now);
        return;
    }
    size_t n = strlen(buf);
    snprintf(buf + n, len - n, "%.3s:%.2s", z, z + 3); /* +0100 -> +01:00 */
}

void ddp_log(const char *fmt, ...)
{
    if (g_rank != 0)
        return;
    char ts[40];
    iso_time(ts, sizeof ts);
    fputs(ts, stdout);
    fputc(' ', stdout);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

void ddp_warn(const char *fmt, ...)
{
    va_list ap;
    print_prefix(stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
}

void ddp_set_abort_hook(void (*hook)(int code)) { g_abort_hook = hook; }

void ddp_die_at(const char *file, int line, int code, const char *fmt, ...)
{
    va_list ap;
    print_prefix(stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (%s:%d)\n", file, line);
    fflush(stderr);
    void (*hook)(int) = g_abort_hook;
    g_abort_hook = NULL; /* never recurse */
    if (hook)
        hook(code);
    exit(code);
}

void *ddp_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        ddp_die("out of memory allocating %zu bytes", n);
    return p;
}

void *ddp_calloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        ddp_die("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *ddp_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        ddp_die("out of memory reallocating %zu bytes", n);
    return q;
}

char *ddp_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = ddp_malloc(n);
    memcpy(d, s, n);
    return d;
}

void *ddp_malloc_aligned(size_t n)
{
    void *p = NULL;
    size_t sz = (n + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, sz ? sz : 64) != 0)
        ddp_die("out of memory allocating %zu bytes", n);
    return p;
}

int ddp_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

double ddp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* True if s holds only blanks from here on. */
static int rest_blank(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return *s == '\0';
}

int ddp_parse_i64(const char *s, int64_t *out)
{
    if (!s)
        return -1;
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s == '\0')
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || !rest_blank(end))
        return -1;
    *out = (int64_t)v;
    return 0;
}

int ddp_parse_f64(const char *s, double *out)
{
    if (!s)
        return -1;
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s == '\0')
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !rest_blank(end) || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

int ddp_mkdir_p(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return -1;
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

int ddp_opt_value(int argc, char **argv, int *i, const char *name, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0')
        return 0;
    if (*i + 1 >= argc)
        return -1;
    *val = argv[++*i];
    return 1;
}

/*
 * util.c - logging with host/rank identity, the single die path, allocation wrappers and
 * strict number parsing. See util.h.
 */
#define _POSIX_C_SOURCE 200809L
#include "core/util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ddp_build.h"

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

int ddp_log_rank(void)
{
    return g_rank;
}

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

/* Longest message line; longer ones are cut (the effective-job log lines are the longest). */
#define LINE_MAX_BYTES 8192

/* Length of the valid UTF-8 sequence at s (2..4), or 0 when s does not start one. */
static int utf8_len(const unsigned char *s)
{
    int n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (s[0] > 0xf4)
        n = 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (n == 4 && s[0] == 0xf0 && s[1] < 0x90) ||
        (n == 4 && s[0] == 0xf4 && s[1] > 0x8f) || (n == 3 && s[0] == 0xed && s[1] > 0x9f))
        return 0; /* overlong, beyond U+10FFFF, surrogates */
    return n;
}

char *ddp_escape(const char *text, char *out, size_t outlen)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)(text ? text : "");
    size_t o = 0;
    if (outlen == 0)
        return out;
    while (*s) {
        int n = *s >= 0x80 ? utf8_len(s) : 1;
        int c1 = n == 2 && s[0] == 0xc2 && s[1] < 0xa0; /* U+0080..U+009F */
        int bad = *s < 0x20 || *s == 0x7f || n == 0 || c1;
        int take = bad ? (c1 ? 2 : 1) : n, need = bad ? 4 * take : n;
        if (o + (size_t)need >= outlen)
            break;
        for (int i = 0; i < take; i++, s++) {
            if (bad) {
                out[o++] = '\\';
                out[o++] = 'x';
                out[o++] = hex[*s >> 4];
                out[o++] = hex[*s & 15];
            } else {
                out[o++] = (char)*s;
            }
        }
    }
    out[o] = '\0';
    return out;
}

/* Print prefix (or nothing), the formatted message escaped, then tail and a newline. */
static void emit(FILE *f, int prefix, const char *tail, const char *fmt, va_list ap)
{
    char raw[LINE_MAX_BYTES], safe[4 * LINE_MAX_BYTES];
    vsnprintf(raw, sizeof raw, fmt, ap);
    ddp_escape(raw, safe, sizeof safe);
    if (prefix)
        print_prefix(f);
    fprintf(f, "%s%s\n", safe, tail ? tail : "");
    fflush(f);
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
    emit(stdout, 0, NULL, fmt, ap);
    va_end(ap);
}

void ddp_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit(stderr, 1, NULL, fmt, ap);
    va_end(ap);
}

void ddp_set_abort_hook(void (*hook)(int code))
{
    g_abort_hook = hook;
}

void ddp_die_at(const char *file, int line, int code, const char *fmt, ...)
{
    va_list ap;
    char where[300] = "";
#if DDP_DEBUG_LOCATIONS /* source paths mean nothing to a user: debug builds only */
    snprintf(where, sizeof where, " (%s:%d)", file, line);
#else
    (void)file, (void)line;
#endif
    va_start(ap, fmt);
    emit(stderr, 1, where, fmt, ap);
    va_end(ap);
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

/* s past its leading blanks, or NULL when s is NULL or holds nothing else. */
static const char *number_start(const char *s)
{
    if (!s)
        return NULL;
    while (*s == ' ' || *s == '\t')
        s++;
    return *s ? s : NULL;
}

int ddp_parse_i64(const char *s, int64_t *out)
{
    if (!(s = number_start(s)))
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
    if (!(s = number_start(s)))
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

int ddp_open_regular(const char *path, const char **kind)
{
    const char *k = "file";
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        if (errno == EISDIR) /* opening a directory is allowed; O_RDONLY just in case */
            k = "directory";
        if (kind)
            *kind = k;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        k = S_ISDIR(st.st_mode)    ? "directory"
            : S_ISFIFO(st.st_mode) ? "FIFO"
            : S_ISCHR(st.st_mode)  ? "character device"
            : S_ISBLK(st.st_mode)  ? "block device"
            : S_ISSOCK(st.st_mode) ? "socket"
                                   : "special file";
        if (kind)
            *kind = k;
        close(fd);
        errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (kind)
        *kind = k;
    return fd;
}

/* First number after `key` in text file path, times scale; -1 when absent. */
static double read_number(const char *path, const char *key, double scale)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char line[512];
    double v = -1;
    size_t klen = key ? strlen(key) : 0;
    while (fgets(line, sizeof line, f)) {
        if (klen && strncmp(line, key, klen) != 0)
            continue;
        char *end;
        double x = strtod(line + klen, &end);
        if (end != line + klen)
            v = x * scale;
        break;
    }
    fclose(f);
    return v;
}

/* Least (limit - usage) over the cgroup v2 hierarchy of this process, v1 as a fallback;
 * -1 when no limit is set. */
static double cgroup_room(void)
{
    double room = -1;
    char rel[1024] = "", path[1400];
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (f) {
        char line[1024];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "0::", 3) == 0) {
                snprintf(rel, sizeof rel, "%.1000s", line + 3);
                rel[strcspn(rel, "\n")] = '\0';
            }
        fclose(f);
    }
    for (;;) { /* v2: this cgroup and its ancestors */
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", rel);
        double max = read_number(path, NULL, 1);
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", rel);
        double cur = read_number(path, NULL, 1);
        if (max > 0 && cur >= 0 && (room < 0 || max - cur < room))
            room = max - cur > 0 ? max - cur : 0;
        char *slash = strrchr(rel, '/');
        if (!slash || rel[0] == '\0')
            break;
        *slash = '\0';
    }
    double lim = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes", NULL, 1);
    double use = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes", NULL, 1);
    if (lim > 0 && lim < 1e18 && use >= 0 && (room < 0 || lim - use < room))
        room = lim - use > 0 ? lim - use : 0;
    return room;
}

size_t ddp_mem_available(const char **which)
{
    double best = -1;
    const char *name = "none";
    double avail = read_number("/proc/meminfo", "MemAvailable:", 1024);
    if (avail >= 0) {
        best = avail;
        name = "MemAvailable";
    }
    double cg = cgroup_room();
    if (cg >= 0 && (best < 0 || cg < best)) {
        best = cg;
        name = "cgroup memory limit";
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        double used = read_number("/proc/self/status", "VmSize:", 1024);
        double room = (double)rl.rlim_cur - (used > 0 ? used : 0);
        if (room < 0)
            room = 0;
        if (best < 0 || room < best) {
            best = room;
            name = "RLIMIT_AS (ulimit -v)";
        }
    }
    if (which)
        *which = name;
    if (best < 0 || best >= (double)SIZE_MAX)
        return SIZE_MAX;
    return (size_t)best;
}

const char *ddp_fmt_bytes(double bytes, char *buf, size_t len)
{
    static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (bytes >= 1024 && u < 5) {
        bytes /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%.0f bytes", bytes);
    else
        snprintf(buf, len, "%.1f %s", bytes, unit[u]);
    return buf;
}

double ddp_wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *ddp_json_str(const char *s, char *out, size_t len)
{
    size_t o = 0;
    for (; *s && o + 7 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20) {
            o += (size_t)snprintf(out + o, len - o, "\\u%04x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    if (len)
        out[o < len ? o : len - 1] = '\0';
    return out;
}

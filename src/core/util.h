/*
 * util.h - exit codes, logging, allocation and string helpers shared by every module.
 *
 * Two tiers of errors (docs/architecture.md, "Errors"):
 *  - input errors (job file, environment, hostlist, dataset, checkpoint) are returned up to
 *    main as a status plus a one-line message in a caller-supplied buffer; parsers never exit;
 *  - fatal runtime errors (out of memory, libc, HDF5, BLAS, MPI) go through ddp_die(), which
 *    prints host, rank, file:line, aborts the communicator (so no peer hangs) and exits.
 *
 * Allocation wrappers never return NULL: they die on failure.
 */
#ifndef DDP_UTIL_H
#define DDP_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Exit codes: the documented contract (README.md, "Exit codes"; docs/checkpoints.md). */
enum ddp_exit {
    DDP_EXIT_OK = 0,
    DDP_EXIT_RUNTIME = 1,  /* runtime failure */
    DDP_EXIT_USAGE = 2,    /* usage or job-file error */
    DDP_EXIT_DATA = 3,     /* dataset or checkpoint file error */
    DDP_EXIT_LAUNCH = 4,   /* launch, binding or bootstrap error */
    DDP_EXIT_PEER = 5,     /* a peer failed or a collective timed out */
    DDP_EXIT_RETEST = 6,   /* validate: no fault found, but a check fell short while other
                              processes loaded the node: run it again when idle */
    DDP_EXIT_REQUEUE = 75, /* stopped by a signal after a checkpoint: requeue me */
};

/* Size of the message buffers that input parsers fill on error. */
#define DDP_ERR_LEN 512

/* Identity used to prefix log and error lines ("host rank N: ..."); set once at start. */
void ddp_log_set_identity(const char *host, int rank, int world_size);
int ddp_log_rank(void);

/* Rank-0 log line on stdout, after the local time in ISO 8601 to the second with its UTC
 * offset ("2026-12-03T10:15:02+01:00 epoch 1/5 ..."); other ranks print nothing. */
void ddp_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Warning or error on stderr from any rank, prefixed "ddptrain: host rank N: ". */
void ddp_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Hook run by ddp_die before exiting (the trainer points it at comm abort). */
void ddp_set_abort_hook(void (*hook)(int code));
/* Fatal runtime error: the message (with file:line in debug builds only), abort hook,
 * exit(code). */
void ddp_die_at(const char *file, int line, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), noreturn));
#define ddp_die(...) ddp_die_at(__FILE__, __LINE__, DDP_EXIT_RUNTIME, __VA_ARGS__)

void *ddp_malloc(size_t n);
void *ddp_calloc(size_t count, size_t size);
void *ddp_realloc(void *p, size_t n);
char *ddp_strdup(const char *s);
#define DDP_FREE(p) \
    do {            \
        free(p);    \
        (p) = NULL; \
    } while (0)

/* Cache-line aligned allocation for numeric buffers (free with free()). */
void *ddp_malloc_aligned(size_t n);

/* snprintf into err (may be NULL); always returns -1 so parsers can `return ddp_err(...)`. */
int ddp_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Monotonic seconds. */
double ddp_now(void);

/* Strict integer/float parsing of a whole string (leading/trailing blanks allowed).
 * Return 0 on success, -1 if the text is not a number or out of range. */
int ddp_parse_i64(const char *s, int64_t *out);
int ddp_parse_f64(const char *s, double *out);

/* Match command-line option `name` at argv[*i] as "--name VALUE" or "--name=VALUE": sets *val
 * and advances *i past a separate value. Returns 1 matched, 0 not this option, -1 when the
 * value is missing (the caller says so). */
int ddp_opt_value(int argc, char **argv, int *i, const char *name, const char **val);

/* Copy text into out (always NUL-terminated) with every byte that could steer a terminal made
 * visible: C0 controls and DEL as \xNN (tab too), C1 controls (U+0080..U+009F) and bytes
 * that are not UTF-8 as \xNN; other UTF-8 passes. Every line that ddp_log, ddp_warn and
 * ddp_die print goes through it, so messages may quote user text (job-file keys, paths,
 * dataset names) as they are. Returns out. */
char *ddp_escape(const char *text, char *out, size_t outlen);

/* Open path for reading without blocking (O_NONBLOCK, then fstat) and insist on a regular
 * file: a FIFO, a device, a socket or a directory fails with errno EINVAL / EISDIR instead of
 * blocking or reading forever. Returns the descriptor (blocking again, close-on-exec) or -1
 * with errno; *kind (may be NULL) gets "directory", "FIFO", "device", ... for the message. */
int ddp_open_regular(const char *path, const char **kind);

/* Bytes this process may still allocate: the least of MemAvailable (/proc/meminfo), the
 * cgroup's memory limit minus its usage (v2 memory.max/current, v1 limit/usage) and
 * RLIMIT_AS minus the address space in use. *which (may be NULL) names the limit that
 * binds ("MemAvailable", "cgroup memory.max", "RLIMIT_AS"). SIZE_MAX when none is known. */
size_t ddp_mem_available(const char **which);
/* "1.5 GiB", "12.0 MiB", "512 bytes" into buf; returns buf. */
const char *ddp_fmt_bytes(double bytes, char *buf, size_t len);

/* mkdir -p; returns 0 or -1 with errno set. */
int ddp_mkdir_p(const char *path);

/* Seconds since the epoch (wall clock, for records that outlive the process). */
double ddp_wall_time(void);
/* s as the inside of a JSON string (quotes, backslashes and control bytes escaped), cut to
 * fit out; returns out. */
const char *ddp_json_str(const char *s, char *out, size_t len);

#endif

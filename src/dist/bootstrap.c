/*
 * bootstrap.c - the bootstrap interface (bootstrap.h): argument checks, the choice behind
 * `auto`, the job token, the call counter, and the MPI way (one broadcast). The PMI2 and TCP
 * ways live in pmi.c and rendezvous.c.
 */
#include "dist/bootstrap_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* Upper bound of timeout_s (about 115 days), as for the communicator: larger is a typo. */
#define BOOTSTRAP_MAX_TIMEOUT_S 1e7

/* Calls made so far in this process: every rank numbers its calls the same way. */
static unsigned g_seq;

const char *const ddp_bootstrap_names[DDP_BOOTSTRAP_COUNT] = {"auto", "pmi2", "mpi", "tcp"};
#define KIND_NAMES ddp_bootstrap_names
_Static_assert(sizeof ddp_bootstrap_names / sizeof *ddp_bootstrap_names == DDP_BOOTSTRAP_COUNT,
               "one name per bootstrap kind");

const char *ddp_bootstrap_name(enum ddp_bootstrap_kind k)
{
    return (unsigned)k < DDP_BOOTSTRAP_COUNT ? KIND_NAMES[k] : "unknown";
}

int ddp_bootstrap_parse(const char *s, enum ddp_bootstrap_kind *out, char *err, size_t errlen)
{
    for (unsigned i = 0; s && i < DDP_BOOTSTRAP_COUNT; i++)
        if (strcmp(s, KIND_NAMES[i]) == 0) {
            *out = (enum ddp_bootstrap_kind)i;
            return 0;
        }
    return ddp_err(err, errlen, "unknown bootstrap '%.40s' (expected auto, pmi2, mpi or tcp)",
                   s ? s : "");
}

/* The value of name through env (getenv when NULL), NULL when unset. */
static const char *env_get(ddp_env_fn env, void *ctx, const char *name)
{
    return env ? env(ctx, name) : getenv(name);
}

/* 1 when PMI_FD (read through env, getenv when NULL) is a file descriptor number: srun
 * --mpi=pmi2 started this process. */
static int pmi_fd_set(ddp_env_fn env, void *ctx)
{
    int64_t fd;
    const char *v = env_get(env, ctx, "PMI_FD");
    return v && *v && ddp_parse_i64(v, &fd) == 0 && fd >= 0 && fd < INT32_MAX;
}

int ddp_bootstrap_pmi2_live(void)
{
    return HAVE_PMI2 && pmi_fd_set(NULL, NULL);
}

enum ddp_bootstrap_kind ddp_bootstrap_decide(enum ddp_bootstrap_kind asked,
                                             const struct ddp_world *w, ddp_env_fn env, void *ctx,
                                             int pmi2_built, int mpi_built, char *why,
                                             size_t whylen)
{
    char none[1];
    if (!why || whylen == 0) {
        why = none;
        whylen = sizeof none;
    }
    if (asked != DDP_BOOTSTRAP_AUTO) {
        snprintf(why, whylen, "[dist] bootstrap = %s", ddp_bootstrap_name(asked));
        return asked;
    }
    const int pmi_fd = pmi_fd_set(env, ctx);
    if (w->world_size <= 1) {
        snprintf(why, whylen, "auto: one rank, nothing to share");
        return DDP_BOOTSTRAP_TCP;
    }
    if (pmi2_built && pmi_fd) {
        snprintf(why, whylen, "auto: srun --mpi=pmi2 started this process (PMI_FD is set)");
        return DDP_BOOTSTRAP_PMI2;
    }
    char by[96];
    if (w->launcher == DDP_LAUNCHER_OMPI)
        snprintf(by, sizeof by, "mpirun (OMPI_COMM_WORLD_SIZE is set)");
    else {
        const char *t = env_get(env, ctx, "SLURM_MPI_TYPE");
        snprintf(by, sizeof by, "srun --mpi=%.32s", t && *t ? t : "pmix");
    }
    if (w->mpi_launched && mpi_built) {
        snprintf(why, whylen, "auto: %s started this process and this ddptrain has MPI", by);
        return DDP_BOOTSTRAP_MPI;
    }
    const char *addr = w->master_addr[0] ? w->master_addr : "(unknown)";
    if (w->mpi_launched)
        snprintf(why, whylen,
                 "auto: %s started this process, but this ddptrain was built without MPI; TCP "
                 "rendezvous at %s:%d",
                 by, addr, w->master_port);
    else if (pmi_fd)
        snprintf(why, whylen,
                 "auto: PMI_FD is set, but this ddptrain was built without libpmi2; TCP "
                 "rendezvous at %s:%d",
                 addr, w->master_port);
    else
        snprintf(why, whylen,
                 "auto: neither PMI2 nor MPI started this process (launcher %s); TCP "
                 "rendezvous at %s:%d",
                 ddp_launcher_name(w->launcher), addr, w->master_port);
    return DDP_BOOTSTRAP_TCP;
}

int ddp_bootstrap_wants_mpi(enum ddp_bootstrap_kind asked, const struct ddp_world *w, char *why,
                            size_t whylen)
{
    return ddp_bootstrap_decide(asked, w, NULL, NULL, HAVE_PMI2, HAVE_MPI, why, whylen) ==
           DDP_BOOTSTRAP_MPI;
}

enum ddp_bootstrap_kind ddp_bootstrap_choose(enum ddp_bootstrap_kind kind,
                                             const struct ddp_bootstrap_bcast *bcast)
{
    if (kind != DDP_BOOTSTRAP_AUTO)
        return kind;
    if (ddp_bootstrap_pmi2_live())
        return DDP_BOOTSTRAP_PMI2;
    if (bcast && bcast->fn)
        return DDP_BOOTSTRAP_MPI;
    return DDP_BOOTSTRAP_TCP;
}

void ddp_bootstrap_token(const struct ddp_world *w, char *tok, size_t toklen)
{
    const char *t = getenv("DDP_BOOTSTRAP_TOKEN");
    size_t cap = toklen - 1 < DDP_BOOTSTRAP_TOKEN_MAX ? toklen - 1 : DDP_BOOTSTRAP_TOKEN_MAX;
    if (t && *t)
        snprintf(tok, cap + 1, "%s", t);
    else if (w->job_id >= 0 && w->step_id >= 0 && w->launcher != DDP_LAUNCHER_OMPI)
        snprintf(tok, cap + 1, "slurm:%lld.%lld", (long long)w->job_id, (long long)w->step_id);
    else if (w->job_id >= 0)
        snprintf(tok, cap + 1, "slurm:%lld", (long long)w->job_id);
    else
        snprintf(tok, cap + 1, "world:%d@%s:%d", w->world_size, w->master_addr, w->master_port);
    /* The token travels in a fixed field and appears in error lines: printable ASCII only. */
    for (char *p = tok; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            *p = '?';
}

void ddp_bootstrap_hex_encode(const unsigned char *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Value of one hex digit, or -1. */
static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int ddp_bootstrap_hex_decode(const char *in, unsigned char *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = in[2 * i] ? hexval(in[2 * i]) : -1;
        int lo = hi >= 0 && in[2 * i + 1] ? hexval(in[2 * i + 1]) : -1;
        if (lo < 0)
            return -1;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return in[2 * n] == '\0' ? 0 : -1;
}

int ddp_bootstrap_format_ranks(const unsigned char *missing, int n, char *out, size_t outlen)
{
    int count = 0;
    size_t used = 0;
    int cut = 0;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (!missing[i])
            continue;
        int j = i;
        while (j + 1 < n && missing[j + 1])
            j++;
        count += j - i + 1;
        if (!cut) {
            char item[32];
            if (j == i)
                snprintf(item, sizeof item, "%s%d", used ? ", " : "", i);
            else
                snprintf(item, sizeof item, "%s%d-%d", used ? ", " : "", i, j);
            /* keep room for ", ..." */
            if (used + strlen(item) + 6 <= outlen) {
                memcpy(out + used, item, strlen(item) + 1);
                used += strlen(item);
            } else {
                cut = 1;
                if (used + 6 <= outlen)
                    snprintf(out + used, outlen - used, ", ...");
            }
        }
        i = j;
    }
    return count;
}

/* MPI way: one broadcast from rank 0 through the collective the caller offers. */
static int share_mpi(const struct ddp_world *w, const struct ddp_bootstrap_bcast *bcast, void *blob,
                     size_t len, char *err, size_t errlen)
{
    if (!bcast || !bcast->fn)
        return ddp_err(err, errlen,
                       "bootstrap = mpi needs the MPI communicator, but %s: start "
                       "with mpirun or srun --mpi=pmix, or use bootstrap = tcp or pmi2",
                       bcast ? bcast->why_not : "none exists yet");
    if (bcast->size != w->world_size || bcast->rank != w->rank)
        return ddp_err(err, errlen,
                       "bootstrap = mpi: the communicator has rank %d of %d but "
                       "the launcher says rank %d of %d; the launch mixes two jobs",
                       bcast->rank, bcast->size, w->rank, w->world_size);
    bcast->fn(bcast->ctx, blob, len);
    return 0;
}

int ddp_bootstrap_share(const struct ddp_world *w, enum ddp_bootstrap_kind kind,
                        const struct ddp_bootstrap_bcast *bcast, void *blob, size_t len,
                        double timeout_s, char *err, size_t errlen)
{
    if (!w || !blob || len == 0 || len > DDP_BOOTSTRAP_MAX_LEN)
        return ddp_err(err, errlen, "internal error: bootstrap of %zu bytes (expected 1..%d)", len,
                       DDP_BOOTSTRAP_MAX_LEN);
    if (!(timeout_s > 0) || timeout_s > BOOTSTRAP_MAX_TIMEOUT_S)
        return ddp_err(err, errlen, "[dist] timeout_s must be in (0, %g] seconds (got %g)",
                       BOOTSTRAP_MAX_TIMEOUT_S, timeout_s);
    if (w->world_size < 1 || w->rank < 0 || w->rank >= w->world_size)
        return ddp_err(err, errlen, "internal error: rank %d of a world of %d", w->rank,
                       w->world_size);
    unsigned seq = g_seq++;
    if (w->world_size == 1)
        return 0;

    switch (ddp_bootstrap_choose(kind, bcast)) {
    case DDP_BOOTSTRAP_PMI2:
#if HAVE_PMI2
        if (!ddp_bootstrap_pmi2_live())
            return ddp_err(err, errlen,
                           "bootstrap = pmi2, but PMI_FD is not set: this process "
                           "was not started by srun --mpi=pmi2; start it so, or use bootstrap "
                           "= auto or tcp");
        return ddp_bootstrap_pmi2(w, seq, blob, len, timeout_s, err, errlen);
#else
        return ddp_err(err, errlen,
                       "bootstrap = pmi2, but this ddptrain was built without "
                       "libpmi2: install libpmi2-0-dev and rebuild, or use bootstrap = auto or "
                       "tcp");
#endif
    case DDP_BOOTSTRAP_MPI:
        return share_mpi(w, bcast, blob, len, err, errlen);
    case DDP_BOOTSTRAP_COUNT:
        break;
    case DDP_BOOTSTRAP_TCP:
    case DDP_BOOTSTRAP_AUTO: {
        char token[DDP_BOOTSTRAP_TOKEN_MAX + 1];
        ddp_bootstrap_token(w, token, sizeof token);
        return ddp_bootstrap_tcp(w, token, seq, blob, len, timeout_s, err, errlen);
    }
    }
    return ddp_err(err, errlen, "internal error: bootstrap kind %d", (int)kind);
}

void ddp_bootstrap_finalize(void)
{
#if HAVE_PMI2
    ddp_bootstrap_pmi2_finalize();
#endif
}

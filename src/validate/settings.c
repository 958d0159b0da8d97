/*
 * settings.c - the [validate] settings of `ddptrain validate --config` (read through
 * core/ini.h) and the fault hooks that tests inject. See validate.h.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ini.h"
#include "core/util.h"
#include "validate/validate.h"

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
    "slow_gemm", "slow_triad", "bad_allreduce", "flip_param",  "bad_grad",
    "bad_burn",  "loaded",     "slow_hbm",      "slow_tensor", "bad_devmem"};

/* One "KIND:RANK[@HOST]" (modified in place) into f; -1 with a reason in err. */
static int fault_parse_one(struct ddp_validate_faults *f, char *tok, char *err, size_t errlen)
{
    char *colon = strchr(tok, ':'), *at = colon ? strchr(colon + 1, '@') : NULL;
    int64_t r;
    int kind = -1;
    if (colon) {
        *colon = '\0';
        for (int k = 0; k < DDP_VALIDATE_FAULT_KINDS; k++)
            if (!strcmp(tok, g_fault_names[k]))
                kind = k;
    }
    if (at)
        *at = '\0';
    const int bad_host =
        at && (!at[1] || strchr(at + 1, '@') || strlen(at + 1) >= DDP_VALIDATE_FAULT_HOST_MAX);
    if (kind < 0 || bad_host || ddp_parse_i64(colon + 1, &r) != 0 || r < 0 ||
        r >= DDP_WORLD_SIZE_MAX)
        return ddp_err(err, errlen,
                       "DDP_TEST_VALIDATE_FAULT: '%s%s%s%s%s': expected KIND:RANK[@HOST] with "
                       "KIND one of slow_gemm, slow_triad, bad_allreduce, flip_param, bad_grad, "
                       "bad_burn, loaded, slow_hbm, slow_tensor, bad_devmem and HOST a host name "
                       "of at most %d characters",
                       tok, colon ? ":" : "", colon ? colon + 1 : "", at ? "@" : "",
                       at ? at + 1 : "", DDP_VALIDATE_FAULT_HOST_MAX - 1);
    f->rank[kind] = (int)r;
    snprintf(f->host[kind], sizeof f->host[kind], "%s", at ? at + 1 : "");
    return 0;
}

int ddp_validate_faults_parse(struct ddp_validate_faults *f, const char *text, char *err,
                              size_t errlen)
{
    memset(f, 0, sizeof *f);
    for (int k = 0; k < DDP_VALIDATE_FAULT_KINDS; k++)
        f->rank[k] = -1;
    if (!text || !*text)
        return 0;
    char buf[512], *save = NULL;
    if (strlen(text) >= sizeof buf)
        return ddp_err(err, errlen, "DDP_TEST_VALIDATE_FAULT is too long");
    snprintf(buf, sizeof buf, "%s", text);
    for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
        if (fault_parse_one(f, tok, err, errlen) != 0)
            return -1;
    return 0;
}

void ddp_validate_faults_locate(struct ddp_validate_faults *f, const char *host)
{
    for (int k = 0; k < DDP_VALIDATE_FAULT_KINDS; k++)
        if (f->host[k][0] && (!host || strcmp(f->host[k], host) != 0))
            f->rank[k] = -1; /* another host's */
}

int ddp_validate_fault_here(const struct ddp_validate_faults *f, enum ddp_validate_fault_kind k,
                            int rank)
{
    return f && k < DDP_VALIDATE_FAULT_KINDS && f->rank[k] == rank;
}

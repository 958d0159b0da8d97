/*
 * expect.c - expectation files of `ddptrain validate --expect` (absolute floors per node type,
 * read through core/ini.h) and what --record-expect writes. See validate.h and
 * docs/validate.md.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/fileio.h"
#include "core/ini.h"
#include "core/util.h"
#include "dist/world.h"
#include "validate/validate_impl.h"

#define F(field) \
    offsetof(struct ddp_validate_expect, field), sizeof(((struct ddp_validate_expect *)0)->field)
#define K(sec, name, type, field, lo, hi)          \
    {                                              \
        sec, name, type, F(field), lo, hi, NULL, 0 \
    }
static const struct ddp_ini_key g_expect_keys[] = {
    K("node", "type", DDP_INI_STR, type, 0, 0),
    K("node", "source", DDP_INI_STR, source, 0, 0),
    K("gpu", "count", DDP_INI_INT, gpu_count, 0, 4096),
    K("gpu", "model", DDP_INI_STR, gpu_model, 0, 0),
    K("gpu", "hbm_min_gbs", DDP_INI_FLOAT, hbm_min_gbs, 0, 1e6),
    K("gpu", "sgemm_min_tflops", DDP_INI_FLOAT, sgemm_min_tflops, 0, 1e5),
    K("gpu", "tf32_min_tflops", DDP_INI_FLOAT, tf32_min_tflops, 0, 1e5),
    K("gpu", "bf16_min_tflops", DDP_INI_FLOAT, bf16_min_tflops, 0, 1e5),
    K("gpu", "h2d_min_gbs", DDP_INI_FLOAT, h2d_min_gbs, 0, 1e5),
    K("gpu", "d2h_min_gbs", DDP_INI_FLOAT, d2h_min_gbs, 0, 1e5),
    K("gemm", "n", DDP_INI_INT, gemm_n, 16, DDP_VALIDATE_MAX_GEMM_N),
    K("gemm", "min_gflops", DDP_INI_FLOAT, gemm_min_gflops, 0, 1e9),
    K("triad", "mib", DDP_INI_INT, triad_mib, 1, 1 << 16),
    K("triad", "min_gbs", DDP_INI_FLOAT, triad_min_gbs, 0, 1e7),
    K("allreduce", "ranks", DDP_INI_INT, ar_ranks, 0, DDP_WORLD_SIZE_MAX),
    K("allreduce", "min_busbw_gbs", DDP_INI_STR, ar_text, 0, 0),
};
#undef K
#undef F
#define NKEYS ((int)(sizeof g_expect_keys / sizeof g_expect_keys[0]))

/* "16M" -> 16 << 20; 0 or -1 */
static int parse_size(const char *s, int64_t *out)
{
    char num[32];
    size_t n = strlen(s);
    int shift = 0;
    if (n == 0 || n >= sizeof num)
        return -1;
    memcpy(num, s, n + 1);
    const char last = num[n - 1];
    if (last == 'K' || last == 'k' || last == 'M' || last == 'm' || last == 'G' || last == 'g') {
        shift = last == 'K' || last == 'k' ? 10 : last == 'M' || last == 'm' ? 20 : 30;
        num[n - 1] = '\0';
    }
    int64_t v;
    if (ddp_parse_i64(num, &v) != 0 || v < 1 || v > (DDP_VALIDATE_MAX_BYTES >> shift) ||
        (v << shift) < 4)
        return -1;
    *out = v << shift;
    return 0;
}

/* [allreduce] min_busbw_gbs = SIZE:GBS, ... into e->busbw_*. */
static int parse_busbw(struct ddp_validate_expect *e, int line, char *err, size_t errlen)
{
    char buf[sizeof e->ar_text], *save = NULL;
    snprintf(buf, sizeof buf, "%s", e->ar_text);
    e->nbusbw = 0;
    for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        char *colon = strchr(tok, ':');
        double gbs;
        int64_t bytes;
        if (colon)
            *colon = '\0';
        if (!colon || parse_size(tok, &bytes) != 0 || ddp_parse_f64(colon + 1, &gbs) != 0 ||
            !(gbs >= 0) || e->nbusbw == DDP_VALIDATE_EXPECT_SIZES)
            return ddp_err(err, errlen,
                           "%s:%d: [allreduce] min_busbw_gbs: '%s%s%s'; expected SIZE:GB/s "
                           "pairs such as 1M:5, 256M:40 (SIZE 4 B to 1 GiB, K/M/G allowed; at "
                           "most %d pairs)",
                           e->path, line, tok, colon ? ":" : "", colon ? colon + 1 : "",
                           DDP_VALIDATE_EXPECT_SIZES);
        e->busbw_bytes[e->nbusbw] = bytes;
        e->busbw_min[e->nbusbw++] = gbs;
    }
    return 0;
}

int ddp_validate_expect_load(struct ddp_validate_expect *e, const char *path, char *err,
                             size_t errlen)
{
    static const struct ddp_ini_schema schema = {g_expect_keys, NKEYS, "node expectation file",
                                                 "docs/validate.md, Expectations", 0};
    int key_line[NKEYS] = {0};
    memset(e, 0, sizeof *e);
    e->gpu_count = -1;
    snprintf(e->path, sizeof e->path, "%s", path);
    if (ddp_ini_load(&schema, path, e, key_line, NULL, err, errlen) != 0)
        return -1;
    const int k_gemm = ddp_ini_find(&schema, "gemm", "min_gflops");
    const int k_triad = ddp_ini_find(&schema, "triad", "min_gbs");
    if (key_line[k_gemm] > 0 && !e->gemm_n)
        return ddp_err(err, errlen,
                       "%s:%d: [gemm] min_gflops needs [gemm] n (the GEMM side the "
                       "floor is for)",
                       path, key_line[k_gemm]);
    if (key_line[k_triad] > 0 && !e->triad_mib)
        return ddp_err(err, errlen, "%s:%d: [triad] min_gbs needs [triad] mib (MiB per array)",
                       path, key_line[k_triad]);
    return parse_busbw(e, key_line[ddp_ini_find(&schema, "allreduce", "min_busbw_gbs")], err,
                       errlen);
}

/* --record-expect: floors from the worst rates of every round and rank, less the margin; the
 * bus bandwidth at 1 MiB and the largest size on runs of 2+ ranks. Rank 0. */
int write_expect(const struct vrun *v, const struct ddp_validate_ar_row *ar, char *err,
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
    write_expect_gpu(f, v, keep);
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

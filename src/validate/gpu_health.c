/*
 * gpu_health.c - the GPU health check of `ddptrain validate` (docs/validate.md), read from NVML
 * (core/nvml.h) as DCGM reads it. Each rank opens its own GPU (matched by PCI address; under
 * --slurm-health every GPU its process sees: the node's), registers for XID events and samples
 * the clock event reasons and the temperature every SAMPLE_MS on a thread of its own while the
 * checks load the GPU (rates, all-reduce, burn, golden run); after them it reads every counter
 * once and polls the XID events, and everybody's readings go to rank 0, which judges them:
 *   ecc          uncorrected volatile ECC errors > 0                               FAIL
 *   remap        a row remapping pending (reset the GPU) or failed                 FAIL
 *   retire       a page retirement pending (reset the GPU)                         FAIL
 *   xid          XID events during the run                                         FAIL
 *   clocks       HW slowdown, HW thermal slowdown or HW power brake seen          FAIL
 *                SW thermal slowdown seen                                          WARN
 *   temperature  at or above the slowdown threshold                                FAIL
 * Aggregate (lifetime) corrected ECC errors, power and clocks are reported, not judged. What
 * NVML does not report (no library, an older driver, a GPU without ECC) is "not reported" and
 * never fails a GPU. The rows print in tables.c's report, the JSON in report_json.c.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddp_build.h"
#include "core/nvml.h"
#include "core/util.h"
#include "validate/validate_impl.h"

#if HAVE_CUDA
#include "backend/cuda.h"
#endif

#define SAMPLE_MS 100 /* DCGM's diagnostics sample about as often */

/* This rank's open GPUs and the sampling thread. */
struct gh_run {
    int n;
    ddp_nvml_gpu *gpu[GH_MAX_GPUS];
    struct gh_rank mine;
    struct gh_rank *all; /* (W) gathered; rank 0 judges them */
    pthread_t thread;
    int sampling;
    atomic_int stop;
    pthread_mutex_t mu; /* mine's samples: the thread writes, finish reads */
};

/* Fold one sample of every open GPU into mine. */
static void sample_all(struct gh_run *h)
{
    pthread_mutex_lock(&h->mu);
    for (int k = 0; k < h->n; k++) {
        if (!h->gpu[k])
            continue;
        struct gh_gpu *g = &h->mine.gpu[k];
        int64_t reasons;
        int32_t temp;
        ddp_nvml_sample(h->gpu[k], &reasons, &temp);
        if (reasons >= 0)
            g->reasons_seen = (g->reasons_seen < 0 ? 0 : g->reasons_seen) | reasons;
        if (temp > g->temp_max)
            g->temp_max = temp;
        g->samples++;
    }
    pthread_mutex_unlock(&h->mu);
}

/* The sampling thread: every SAMPLE_MS until told to stop. */
static void *sampler(void *arg)
{
    struct gh_run *h = arg;
    const struct timespec ts = {0, SAMPLE_MS * 1000000L};
    while (!atomic_load(&h->stop)) {
        sample_all(h);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* Open GPU k (CUDA ordinal) into slot k of h; a GPU NVML cannot report keeps its reason. */
static void open_gpu(struct gh_run *h, int k, int ordinal)
{
    struct gh_gpu *g = &h->mine.gpu[k];
    g->ordinal = ordinal;
    g->reasons_seen = -1;
    g->temp_max = -1;
    g->nxid = -1;
    g->s.index = -1;
    char err[256];
#if HAVE_CUDA
    if (ddp_cuda_pci_bus_id(ordinal, g->cuda_bus, sizeof g->cuda_bus) != 0) {
        snprintf(g->status, sizeof g->status, "no PCI address from CUDA for device %d", ordinal);
        return;
    }
    h->gpu[k] = ddp_nvml_gpu_open(g->cuda_bus, err, sizeof err);
    if (!h->gpu[k])
        snprintf(g->status, sizeof g->status, "%.*s", (int)sizeof g->status - 1, err);
#else
    (void)err;
    snprintf(g->status, sizeof g->status, "a build without CUDA");
#endif
}

void gpu_health_start(struct vrun *v)
{
    struct gh_run *h = ddp_calloc(1, sizeof *h);
    v->gh = h;
    pthread_mutex_init(&h->mu, NULL);
    if (v->device < 0)
        return; /* the CPU: nothing to report */
    int n = 1;
#if HAVE_CUDA
    if (v->a->slurm_health) /* one process per node: every GPU of the node */
        n = ddp_cuda_device_count();
#endif
    h->n = n < 1 ? 1 : n > GH_MAX_GPUS ? GH_MAX_GPUS : n;
    h->mine.ngpu = h->n;
    for (int k = 0; k < h->n; k++)
        open_gpu(h, k, h->n == 1 ? v->device : k);
    atomic_store(&h->stop, 0);
    h->sampling = pthread_create(&h->thread, NULL, sampler, h) == 0;
}

/* The last reading of every open GPU, and the XID events since the open. */
static void read_all(struct gh_run *h)
{
    for (int k = 0; k < h->n; k++) {
        if (!h->gpu[k])
            continue;
        struct gh_gpu *g = &h->mine.gpu[k];
        ddp_nvml_read(h->gpu[k], &g->s);
        g->nxid = ddp_nvml_xids(h->gpu[k], g->xid, DDP_NVML_MAX_XIDS);
    }
}

void gpu_health_finish(struct vrun *v)
{
    struct gh_run *h = v->gh;
    if (h->sampling) {
        atomic_store(&h->stop, 1);
        pthread_join(h->thread, NULL);
        h->sampling = 0;
    }
    sample_all(h); /* at least one sample right after the load */
    read_all(h);
    h->all = ddp_calloc((size_t)v->W, sizeof *h->all);
    ddp_comm_allgather(v->c, &h->mine, h->all, sizeof h->mine);
    int reported = 0, gpus = 0;
    for (int k = 0; k < h->n; k++)
        reported += h->gpu[k] != NULL;
    for (int r = 0; r < v->W; r++)
        gpus += h->all[r].ngpu;
    if (gpus > 0 && v->me == 0)
        ddp_log("gpu health read (%d GPU%s on this rank reported by NVML, %d sample%s)", reported,
                reported == 1 ? "" : "s", h->n ? h->mine.gpu[0].samples : 0,
                h->n && h->mine.gpu[0].samples == 1 ? "" : "s");
}

void gpu_health_free(struct vrun *v)
{
    struct gh_run *h = v->gh;
    if (!h)
        return;
    if (h->sampling) {
        atomic_store(&h->stop, 1);
        pthread_join(h->thread, NULL);
    }
    for (int k = 0; k < h->n; k++)
        ddp_nvml_gpu_close(h->gpu[k]);
    pthread_mutex_destroy(&h->mu);
    free(h->all);
    free(h);
    v->gh = NULL;
}

/* ---- judging (rank 0) ----------------------------------------------------------------------- */

static const struct {
    uint64_t bit;
    const char *name;
    int fail; /* 1 FAIL, 0 WARN, -1 reported only */
} CLOCK_REASONS[] = {
    {DDP_NVML_CLOCKS_HW_SLOWDOWN, "hw slowdown", 1},
    {DDP_NVML_CLOCKS_HW_THERMAL, "hw thermal slowdown", 1},
    {DDP_NVML_CLOCKS_HW_POWER_BRAKE, "hw power brake", 1},
    {DDP_NVML_CLOCKS_SW_THERMAL, "sw thermal slowdown", 0},
    {DDP_NVML_CLOCKS_SW_POWER_CAP, "sw power cap", -1},
    {DDP_NVML_CLOCKS_IDLE, "idle", -1},
    {DDP_NVML_CLOCKS_APP_SETTING, "application clocks", -1},
    {DDP_NVML_CLOCKS_SYNC_BOOST, "sync boost", -1},
};
#define NREASONS (int)(sizeof CLOCK_REASONS / sizeof CLOCK_REASONS[0])

int gpu_health_reasons(int64_t bits, int level, char *out, size_t len)
{
    size_t used = 0;
    int n = 0;
    out[0] = '\0';
    for (int i = 0; i < NREASONS && bits > 0; i++)
        if ((bits & (int64_t)CLOCK_REASONS[i].bit) && CLOCK_REASONS[i].fail >= level &&
            used + 1 < len) {
            used += (size_t)snprintf(out + used, len - used, "%s%s", n ? ", " : "",
                                     CLOCK_REASONS[i].name);
            n++;
        }
    return n;
}

/* What one GPU's readings say: 2 FAIL, 1 WARN, 0 PASS; each finding into rep when rep is not
 * NULL (a failure of rank r, or a warning). */
static int findings(const struct gh_gpu *g, const char *host, int r, struct report *rep)
{
    if (g->status[0])
        return 0;
    const struct ddp_nvml_state *s = &g->s;
    char on[128], names[160];
    snprintf(on, sizeof on, "GPU %d (%s) of %s", s->index, s->bus_id, host);
    int worst = 0;
#define FINDING(level, ...)                                 \
    do {                                                    \
        worst = worst > (level) ? worst : (level);          \
        if (rep && (level) == 2)                            \
            add_failure(rep, r, "gpu health", __VA_ARGS__); \
        else if (rep)                                       \
            add_warning(rep, __VA_ARGS__);                  \
    } while (0)
    if (s->ecc_unc_vol > 0)
        FINDING(2, "ecc: %lld uncorrected volatile error%s on %s", (long long)s->ecc_unc_vol,
                s->ecc_unc_vol == 1 ? "" : "s", on);
    if (s->remap_pending == 1)
        FINDING(2, "remap: a row remapping is pending on %s: reset the GPU", on);
    if (s->remap_failed == 1)
        FINDING(2, "remap: a row remapping failed on %s: the GPU needs service", on);
    if (s->retire_pending == 1)
        FINDING(2, "retire: a page retirement is pending on %s: reset the GPU", on);
    if (g->nxid > 0) {
        char list[96] = "";
        for (int i = 0, u = 0; i < g->nxid && i < DDP_NVML_MAX_XIDS; i++)
            u += snprintf(list + u, sizeof list - (size_t)u, "%s%u", i ? ", " : "", g->xid[i]);
        FINDING(2, "xid: %d XID event%s during the run on %s: XID %s", g->nxid,
                g->nxid == 1 ? "" : "s", on, list);
    }
    if (gpu_health_reasons(g->reasons_seen, 1, names, sizeof names))
        FINDING(2, "clocks: held down by %s during the run on %s", names, on);
    if (g->reasons_seen >= 0 &&
        gpu_health_reasons(g->reasons_seen & (int64_t)DDP_NVML_CLOCKS_SW_THERMAL, 0, names,
                           sizeof names))
        FINDING(1, "clocks: held down by %s during the run on %s", names, on);
    const int32_t t = g->temp_max > s->temp_c ? g->temp_max : s->temp_c;
    if (t >= 0 && s->temp_slowdown_c > 0 && t >= s->temp_slowdown_c)
        FINDING(2, "temperature: %d C, at or above the slowdown threshold of %d C, on %s", t,
                s->temp_slowdown_c, on);
#undef FINDING
    return worst;
}

const char *gpu_health_verdict(const struct report *rep, int r, int k)
{
    const struct gh_gpu *g = &rep->gh[r].gpu[k];
    if (g->status[0])
        return "n/a";
    static const char *const v[] = {"PASS", "WARN", "FAIL"};
    return v[findings(g, rep->ri[r].host, r, NULL)];
}

void judge_gpu_health(struct report *rep, const struct vrun *v)
{
    const struct gh_rank *all = v->gh ? v->gh->all : NULL;
    int gpus = 0, unreported = 0;
    const char *why = "";
    for (int r = 0; all && r < v->W; r++)
        for (int k = 0; k < all[r].ngpu; k++) {
            gpus++;
            if (all[r].gpu[k].status[0]) {
                unreported++;
                why = all[r].gpu[k].status;
            }
            findings(&all[r].gpu[k], v->all[r].host, r, rep);
        }
    rep->gh = gpus ? all : NULL;
    if (unreported)
        add_warning(rep, "gpu health: not reported for %d of %d GPU%s (%s)", unreported, gpus,
                    gpus == 1 ? "" : "s", why);
}

/* "-" or the number, into buf. */
static const char *num(char *buf, size_t len, long long x, const char *fmt)
{
    if (x < 0)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, fmt, x);
    return buf;
}

void print_gpu_health(const struct report *rep)
{
    if (!rep->gh)
        return;
    printf("\ngpu health (NVML): ECC errors volatile / aggregate; remapped rows for corrected / "
           "uncorrected errors; clock event reasons seen during the run\n");
    printf("%4s  %-16s %3s %-16s %8s %8s %7s %-7s %4s %-24s %9s %9s %7s  %s\n", "rank", "host",
           "gpu", "bus", "ecc unc", "ecc cor", "remap", "pending", "xid", "clocks held by", "temp",
           "power", "sm", "verdict");
    printf("%4s  %-16s %3s %-16s %8s %8s %7s %-7s %4s %-24s %9s %9s %7s  %s\n", "", "", "", "",
           "(vol/agg)", "(agg)", "(c/u)", "", "", "", "(C/slow)", "(W/limit)", "(MHz)", "");
    for (int r = 0; r < rep->W; r++)
        for (int k = 0; k < rep->gh[r].ngpu; k++) {
            const struct gh_gpu *g = &rep->gh[r].gpu[k];
            const struct ddp_nvml_state *s = &g->s;
            if (g->status[0]) {
                printf("%4d  %-16.16s %3d %-16s not reported: %s\n", r, rep->ri[r].host, g->ordinal,
                       g->cuda_bus, g->status);
                continue;
            }
            char a[24], b[24], c[24], d[24], e[24], f[24], ecc[48], remap[48], temp[48];
            char power[48], reasons[160];
            snprintf(ecc, sizeof ecc, "%s/%s", num(a, 24, s->ecc_unc_vol, "%lld"),
                     num(b, 24, s->ecc_unc_agg, "%lld"));
            snprintf(remap, sizeof remap, "%s/%s", num(c, 24, s->remap_cor, "%lld"),
                     num(d, 24, s->remap_unc, "%lld"));
            snprintf(temp, sizeof temp, "%s/%s",
                     num(e, 24, g->temp_max > s->temp_c ? g->temp_max : s->temp_c, "%lld"),
                     num(f, 24, s->temp_slowdown_c, "%lld"));
            snprintf(power, sizeof power, "%s/%s",
                     num(a, 24, s->power_mw < 0 ? -1 : s->power_mw / 1000, "%lld"),
                     num(b, 24, s->power_limit_mw < 0 ? -1 : s->power_limit_mw / 1000, "%lld"));
            if (g->reasons_seen < 0)
                snprintf(reasons, sizeof reasons, "-");
            else if (!gpu_health_reasons(g->reasons_seen, -1, reasons, sizeof reasons))
                snprintf(reasons, sizeof reasons, "none");
            printf("%4d  %-16.16s %3d %-16s %8s %8s %7s %-7s %4s %-24.24s %9s %9s %7s  %s\n", r,
                   rep->ri[r].host, s->index, s->bus_id, ecc, num(c, 24, s->ecc_cor_agg, "%lld"),
                   remap,
                   s->remap_pending == 1 || s->retire_pending == 1 ? "reset"
                   : s->remap_failed == 1                          ? "failed"
                                                                   : "no",
                   num(d, 24, g->nxid, "%lld"), reasons, temp, power, num(e, 24, s->sm_mhz, "%lld"),
                   gpu_health_verdict(rep, r, k));
        }
}

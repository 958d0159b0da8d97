/*
 * report_json.c - the --json file of `ddptrain validate` (format ddptrain-validate-1, written
 * atomically by rank 0; docs/validate.md). Its reader is report/report_validate.c (`ddptrain
 * report FILE.json`): a member renamed here is renamed there.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_build.h"
#include "core/fileio.h"
#include "core/util.h"
#include "validate/validate_impl.h"

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* A finite number or null. */
static void json_num(FILE *f, double v, const char *fmt)
{
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

/* The "ranks" array, opened here: one object per rank. */
static void json_ranks(FILE *f, const struct report *rep, const struct run_facts *rf)
{
    const int W = rep->W;
    fprintf(f, "  \"ranks\": [");
    for (int r = 0; r < W; r++) {
        const struct rank_info *x = &rep->ri[r];
        fprintf(f, "%s\n    {\"rank\": %d, \"host\": ", r ? "," : "", r);
        json_str(f, x->host);
        fprintf(f, ", \"cpu_model\": ");
        json_str(f, x->cpu_model);
        fprintf(f,
                ", \"cpus_online\": %d, \"cpus_allowed\": %d, \"threads\": %d, "
                "\"mem_total_bytes\": %lld, \"mem_available_bytes\": %lld, \"gpu\": \"%s\", "
                "\"gpu_count\": %d, \"gpu_memory_bytes\": \"none\", \"gpu_driver\": ",
                x->cpus_online, x->cpus_allowed, x->threads, (long long)x->mem_total,
                (long long)x->mem_avail, x->gpu_count > 0 ? "cuda" : "none", x->gpu_count);
        json_str(f, x->gpu_driver);
        fprintf(f, ", \"gemm_gflops\": ");
        json_num(f, x->gemm, "%.3f");
        fprintf(f, ", \"gemm_ratio\": ");
        json_num(f, rf->med_gemm > 0 ? x->gemm / rf->med_gemm : NAN, "%.4f");
        fprintf(f, ", \"triad_gbs\": ");
        json_num(f, x->triad, "%.3f");
        fprintf(f, ", \"triad_ratio\": ");
        json_num(f, rf->med_triad > 0 ? x->triad / rf->med_triad : NAN, "%.4f");
        fprintf(f, ", \"cpu_wait_share\": %.3f, \"foreign_cpu_share\": %.3f, \"verdict\": \"%s\"}",
                rank_load(rep->ri, W, r, 0), machine_load(rep->ri, W, r), verdict_of(rep, r));
    }
}

/* The "allreduce" object, after the ranks: the sweep's rows with everybody's wrong elements. */
static void json_allreduce(FILE *f, const struct report *rep, const struct run_facts *rf,
                           const struct ddp_validate_ar_row *ar)
{
    const int W = rep->W;
    int ar_bad = 0;
    for (int i = 0; i < rep->nfail; i++)
        ar_bad |= !strcmp(rep->fail[i].check, "allreduce");
    fprintf(f,
            "\n  ],\n  \"allreduce\": {\"op\": \"sum\", \"dtype\": \"float32\", "
            "\"in_place\": true, \"ranks\": %d, \"measured\": %s, \"busbw_factor\": %.6g, "
            "\"verdict\": \"%s\", \"rows\": [",
            W, rf->ar_measured ? "true" : "false", ddp_comm_busbw_factor(W),
            ar_bad ? "FAIL" : "PASS");
    for (int s = 0; s < rf->nsizes; s++) {
        int64_t wrong = 0;
        for (int r = 0; r < W; r++)
            wrong += ar[(size_t)r * rf->nsizes + s].bad_elems;
        const struct ddp_validate_ar_row *x = &ar[s];
        fprintf(f, "%s\n    {\"bytes\": %lld, \"count\": %lld, \"time_us\": ", s ? "," : "",
                (long long)x->bytes, (long long)x->count);
        json_num(f, x->time_s * 1e6, "%.6g");
        fprintf(f, ", \"algbw_gbs\": ");
        json_num(f, x->algbw, "%.6g");
        fprintf(f, ", \"busbw_gbs\": ");
        json_num(f, x->busbw, "%.6g");
        fprintf(f, ", \"iters\": %d, \"blocks\": %d, \"wrong_elements\": %lld}", x->iters,
                x->blocks, (long long)wrong);
    }
}

/* A count or null (-1: not reported). */
static void json_count(FILE *f, const char *key, long long x)
{
    if (x < 0)
        fprintf(f, ", \"%s\": null", key);
    else
        fprintf(f, ", \"%s\": %lld", key, x);
}

/* One GPU's health (gpu_health.c): NVML's numbers, null where it does not report them. */
static void json_gpu(FILE *f, const struct report *rep, int r, int k)
{
    const struct gh_gpu *g = &rep->gh[r].gpu[k];
    const struct ddp_nvml_state *s = &g->s;
    fprintf(f, "\n    {\"rank\": %d, \"host\": ", r);
    json_str(f, rep->ri[r].host);
    fprintf(f, ", \"cuda_device\": %d, \"cuda_bus_id\": ", g->ordinal);
    json_str(f, g->cuda_bus);
    fprintf(f, ", \"reported\": %s, \"status\": ", g->status[0] ? "false" : "true");
    json_str(f, g->status[0] ? g->status : "reported");
    fprintf(f, ", \"verdict\": \"%s\"", gpu_health_verdict(rep, r, k));
    if (g->status[0]) {
        fputc('}', f);
        return;
    }
    fprintf(f, ", \"gpu\": %d, \"bus_id\": ", s->index);
    json_str(f, s->bus_id);
    json_count(f, "ecc_uncorrected_volatile", s->ecc_unc_vol);
    json_count(f, "ecc_corrected_volatile", s->ecc_cor_vol);
    json_count(f, "ecc_uncorrected_aggregate", s->ecc_unc_agg);
    json_count(f, "ecc_corrected_aggregate", s->ecc_cor_agg);
    json_count(f, "remapped_rows_corrected", s->remap_cor);
    json_count(f, "remapped_rows_uncorrected", s->remap_unc);
    json_count(f, "remap_pending", s->remap_pending);
    json_count(f, "remap_failed", s->remap_failed);
    json_count(f, "retired_pages", s->retired_pages);
    json_count(f, "retire_pending", s->retire_pending);
    json_count(f, "xid_events", g->nxid);
    fprintf(f, ", \"xids\": [");
    for (int i = 0; i < g->nxid && i < DDP_NVML_MAX_XIDS; i++)
        fprintf(f, "%s%u", i ? ", " : "", g->xid[i]);
    char names[256];
    gpu_health_reasons(g->reasons_seen, -1, names, sizeof names);
    fprintf(f, "], \"clock_event_reasons\": ");
    if (g->reasons_seen < 0)
        fputs("null", f);
    else
        json_str(f, names);
    json_count(f, "temperature_c", s->temp_c);
    json_count(f, "temperature_max_c", g->temp_max);
    json_count(f, "slowdown_c", s->temp_slowdown_c);
    json_count(f, "sm_clock_mhz", s->sm_mhz);
    json_count(f, "power_mw", s->power_mw);
    json_count(f, "power_limit_mw", s->power_limit_mw);
    fputc('}', f);
}

/* "gpu_health": one entry per GPU of each rank, [] when no rank has a GPU. */
static void json_gpu_health(FILE *f, const struct report *rep)
{
    int n = 0;
    fprintf(f, "  \"gpu_health\": [");
    for (int r = 0; rep->gh && r < rep->W; r++)
        for (int k = 0; k < rep->gh[r].ngpu; k++) {
            fprintf(f, "%s", n++ ? "," : "");
            json_gpu(f, rep, r, k);
        }
    fprintf(f, "%s],\n", n ? "\n  " : "");
}

/* "nodes": each host's ranks, verdict and reasons. */
static void json_nodes(FILE *f, const struct report *rep, const struct run_facts *rf,
                       const int *host_of, const int *first_rank)
{
    const int W = rep->W;
    fprintf(f, "  \"nodes\": [");
    int *list = ddp_malloc(sizeof(int) * (size_t)W);
    for (int h = 0; h < rf->nnodes; h++) {
        fprintf(f, "%s\n    {\"host\": ", h ? "," : "");
        json_str(f, rep->ri[first_rank[h]].host);
        fprintf(f, ", \"ranks\": [");
        int n = 0, failed = 0;
        for (int r = 0; r < W; r++)
            if (host_of[r] == h) {
                fprintf(f, "%s%d", n ? ", " : "", r);
                list[n++] = r;
            }
        fprintf(f, "], \"reasons\": [");
        const char *hv = "PASS";
        for (int i = 0; i < rep->nfail; i++)
            if (rep->fail[i].rank >= 0 && host_of[rep->fail[i].rank] == h) {
                fprintf(f, "%s", failed++ ? ", " : "");
                json_str(f, rep->fail[i].reason);
                hv = !rep->fail[i].retest ? "FAIL" : strcmp(hv, "FAIL") ? "RETEST" : hv;
            }
        fprintf(f, "], \"verdict\": \"%s\"}", hv);
    }
    free(list);
}

int write_json(const char *path, const struct report *rep, const struct run_facts *rf,
               const struct ddp_validate_config *cfg, const struct ddp_validate_ar_row *ar,
               const struct golden_verdict *gv, const struct ddp_validate_golden *g,
               const int *host_of, const int *first_rank, char *err, size_t errlen)
{
    const int W = rep->W;
    struct ddp_atomic_file af;
    FILE *f = ddp_atomic_open(&af, path);
    if (!f)
        return ddp_err(err, errlen, "--json %s.tmp: cannot write: %s", path, strerror(errno));
    fprintf(f, "{\n  \"format\": \"ddptrain-validate-1\",\n  \"version\": \"%s\",\n", DDP_VERSION);
    fprintf(f,
            "  \"verdict\": \"%s\",\n  \"exit_code\": %d,\n  \"quick\": %s,\n  \"level\": "
            "\"%s\",\n",
            verdict_of(rep, -2),
            rep->nhard     ? 1
            : rep->nretest ? rf->retest_exit
                           : 0,
            strcmp(rf->level, "quick") ? "false" : "true", rf->level);
    fprintf(f,
            "  \"world_size\": %d,\n  \"nodes_count\": %d,\n  \"launcher\": \"%s\",\n"
            "  \"comm\": \"%s\",\n  \"backend\": \"%s\",\n  \"elapsed_s\": %.3f,\n",
            W, rf->nnodes, rf->launcher, rf->comm, rf->backend, rf->elapsed);
    fprintf(f, "  \"expect\": ");
    if (rf->expect)
        json_str(f, rf->expect);
    else
        fputs("null", f);
    fprintf(f, ",\n  \"failures\": [");
    for (int i = 0; i < rep->nfail; i++) {
        const struct failure *x = &rep->fail[i];
        fprintf(f, "%s\n    {\"rank\": %d, \"host\": ", i ? "," : "", x->rank);
        if (x->rank >= 0)
            json_str(f, rep->ri[x->rank].host);
        else
            fputs("null", f);
        fprintf(f, ", \"check\": \"%s\", \"verdict\": \"%s\", \"reason\": ", x->check,
                x->retest ? "RETEST" : "FAIL");
        json_str(f, x->reason);
        fputc('}', f);
    }
    fprintf(f, "%s],\n  \"warnings\": [", rep->nfail ? "\n  " : "");
    for (int i = 0; i < rep->nwarn; i++) {
        fprintf(f, "%s", i ? ", " : "");
        json_str(f, rep->warn[i]);
    }
    fprintf(f, "],\n  \"gemm\": {\"n\": %d, \"unit\": \"GFLOP/s\", \"median\": ", rf->gemm_n);
    json_num(f, rf->med_gemm, "%.3f");
    fprintf(f, ", \"min_fraction\": %g},\n", cfg->min_fraction);
    fprintf(f, "  \"triad\": {\"mib_per_array\": %lld, \"unit\": \"GB/s\", \"median\": ",
            (long long)rf->triad_mib);
    json_num(f, rf->med_triad, "%.3f");
    fprintf(f, ", \"min_fraction\": %g},\n", cfg->min_fraction);
    json_gpus(f, rep); /* gpu.c: "gpus": [...], */
    json_ranks(f, rep, rf);
    json_allreduce(f, rep, rf, ar);
    fprintf(f, "\n  ]},\n  \"golden\": {\"verdict\": \"%s\", \"reason\": ", gv->verdict);
    json_str(f, gv->reason);
    fprintf(f, ", \"steps\": %d, \"world_size\": %d, \"spec\": ", g->steps, W);
    json_str(f, DDP_VALIDATE_GOLDEN_SPEC);
    fprintf(f, ", \"hash\": \"%016llx\", \"hash_match\": %s, \"reference\": ",
            (unsigned long long)gv->hash, gv->hash_match ? "true" : "false");
    if (gv->ref_path[0])
        json_str(f, gv->ref_path);
    else
        fputs("null", f);
    fprintf(f,
            ", \"reference_steps\": %d, \"compared_steps\": %d, \"max_rel_diff\": ", gv->ref_steps,
            gv->compared);
    json_num(f, gv->ref_path[0] ? gv->max_rel : NAN, "%.3g");
    fprintf(f, ", \"tolerance\": %g, \"losses\": [", cfg->golden_rtol);
    for (int s = 0; s < g->steps; s++) {
        fprintf(f, "%s", s ? ", " : "");
        json_num(f, g->loss[s], "%.9g");
    }
    fprintf(f, "]},\n");
    json_gpu_health(f, rep);
    json_nodes(f, rep, rf, host_of, first_rank);
    fprintf(f, "\n  ]\n}\n");
    char why[DDP_ERR_LEN];
    if (ddp_atomic_close(&af, why, sizeof why) != 0)
        return ddp_err(err, errlen, "--json %s", why);
    return 0;
}

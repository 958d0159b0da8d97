/*
 * gpu.c - the GPU's own measurements in `ddptrain validate`, on every rank that validates a
 * GPU (the CUDA backend is selected; the GPU twin too): device-memory bandwidth (STREAM's copy
 * and triad), SGEMM, TF32 and BF16 tensor-core GEMM rates, page-locked host<->device copies
 * and a device-memory pattern test (backend/cuda.h, vcheck.cu does the device work). Ranks
 * measure at the same time (each its own GPU; the host links they share carry what they would
 * carry in training), in rounds while one falls short, best round counted as for the CPU
 * rates; the pattern test runs in the first round only. Rank 0 judges each GPU against the
 * expectation's [gpu] floors and against the other GPUs (an outlier below min_fraction of their
 * median and outlier_mads scaled MADs below it), prints the GPU table and writes the JSON
 * "gpus" member. The CPU's gemm and triad rows (bench.c) measure the host and stay as they are.
 *
 * Sizes by level (named constants below; capped by the device's free memory; tiny on the
 * twin, which runs the kernels on the CPU). What it does not do: NVML health (ECC, remapped
 * rows, XIDs, throttling), which is not its concern.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_build.h"
#include "core/util.h"
#include "validate/validate_impl.h"
#if HAVE_CUDA
#include "backend/cuda.h"
#endif

#define MIB ((int64_t)1 << 20)
/* Per array of the bandwidth kernels: far beyond any L2 (H100 50 MiB, B200 126 MiB). */
#define HBM_MIB_QUICK 256
#define HBM_MIB_STANDARD 1024
#define HBM_MIB_LONG 2048
/* GEMM sides: 8192 reaches an H100's rates; 4096 is within a few per cent of them. */
#define GEMM_N_QUICK 4096
#define GEMM_N_STANDARD 8192
/* One page-locked copy. */
#define PCIE_MIB_QUICK 256
#define PCIE_MIB_STANDARD 1024
/* Pattern test: quick and standard a few GiB; long most of the free memory. */
#define PAT_MIB_QUICK 2048
#define PAT_MIB_STANDARD 8192
#define PAT_LONG_SHARE 0.9
/* Device memory left free at least (the driver, cuBLAS workspaces, the backend's buffers). */
#define HEADROOM_MIB 512

/* The twin: every size tiny (its kernels run on the CPU; quick must stay fast there). */
#define TWIN_MIB 4
#define TWIN_GEMM_N 128
/* Timed calls per measurement at levels quick, standard, long. */
static const int g_reps[3] = {5, 20, 40};
/* Fault injection: a slow GPU's rate is a hundredth (bench.c's factor), on the twin too (its
 * events count the CPU time its stream workers ran, not time they waited for a core). */
#define SLOW_DIVISOR 100.0

/* ---- measuring ----------------------------------------------------------------------------- */

#if HAVE_CUDA
/* The sizes of this rank's measurements at level `level`, within the device's free memory. */
static void gpu_sizes(struct gpu_meas *m, const struct ddp_cuda_vinfo *vi, int level)
{
    const int q = level == DDP_VALIDATE_QUICK, lg = level == DDP_VALIDATE_LONG;
    const int64_t avail = (int64_t)vi->free_bytes - HEADROOM_MIB * MIB;
    const int64_t usable = avail > 64 * MIB ? avail : 64 * MIB;
    m->hbm_bytes = (q ? HBM_MIB_QUICK : lg ? HBM_MIB_LONG : HBM_MIB_STANDARD) * MIB;
    m->gemm_n = q ? GEMM_N_QUICK : GEMM_N_STANDARD;
    m->pcie_bytes = (q ? PCIE_MIB_QUICK : PCIE_MIB_STANDARD) * MIB;
    m->pat_bytes = lg ? (int64_t)(PAT_LONG_SHARE * (double)usable)
                      : (q ? PAT_MIB_QUICK : PAT_MIB_STANDARD) * MIB;
    if (vi->twin) {
        m->hbm_bytes = m->pcie_bytes = m->pat_bytes = TWIN_MIB * MIB;
        m->gemm_n = TWIN_GEMM_N;
    }
    while (3 * m->hbm_bytes > usable && m->hbm_bytes > MIB)
        m->hbm_bytes /= 2;
    while (5 * (int64_t)m->gemm_n * m->gemm_n * 4 > usable && m->gemm_n > 256)
        m->gemm_n /= 2;
    while (m->pcie_bytes > usable / 2 && m->pcie_bytes > MIB)
        m->pcie_bytes /= 2;
    if (m->pat_bytes > usable)
        m->pat_bytes = usable & ~(int64_t)4095;
}

/* One round on this rank's GPU: the rates, and the pattern test when `pattern`. */
static void gpu_measure(struct vrun *v, struct gpu_meas *m, int pattern)
{
    const int reps = g_reps[v->a->level], me = v->me;
    const double slow_hbm =
        ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_SLOW_HBM, me) ? SLOW_DIVISOR : 1;
    const double slow_tc =
        ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_SLOW_TENSOR, me) ? SLOW_DIVISOR : 1;
    m->copy = ddp_cuda_vcheck_stream(0, (size_t)m->hbm_bytes, reps) / slow_hbm;
    m->triad = ddp_cuda_vcheck_stream(1, (size_t)m->hbm_bytes, reps) / slow_hbm;
    const int greps = reps < 10 ? reps : reps / 2;
    m->sgemm = ddp_cuda_vcheck_gemm(DDP_CUDA_VGEMM_SGEMM, m->gemm_n, greps);
    m->tf32 = ddp_cuda_vcheck_gemm(DDP_CUDA_VGEMM_TF32, m->gemm_n, greps) / slow_tc;
    m->bf16 = ddp_cuda_vcheck_gemm(DDP_CUDA_VGEMM_BF16, m->gemm_n, greps) / slow_tc;
    m->h2d = ddp_cuda_vcheck_pcie(0, (size_t)m->pcie_bytes, reps);
    m->d2h = ddp_cuda_vcheck_pcie(1, (size_t)m->pcie_bytes, reps);
    if (pattern)
        m->pat_bad = ddp_cuda_vcheck_pattern(
            (size_t)m->pat_bytes,
            ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_BAD_DEVMEM, me), &m->pat_words);
}
#endif

/* The rates of gpu_meas, for loops over them. */
enum { M_COPY, M_TRIAD, M_SGEMM, M_TF32, M_BF16, M_H2D, M_D2H, NMETRIC };
static const struct metric {
    const char *name, *unit, *check;
    size_t off;        /* of the rate in struct gpu_meas */
    size_t floor_off;  /* of its floor in struct ddp_validate_expect */
    const char *floor; /* the expectation key */
} g_metric[NMETRIC] = {
    {"HBM copy", "GB/s", "gpu_hbm", offsetof(struct gpu_meas, copy),
     offsetof(struct ddp_validate_expect, hbm_min_gbs), "hbm_min_gbs"},
    {"HBM triad", "GB/s", "gpu_hbm", offsetof(struct gpu_meas, triad),
     offsetof(struct ddp_validate_expect, hbm_min_gbs), "hbm_min_gbs"},
    {"SGEMM", "TFLOP/s", "gpu_gemm", offsetof(struct gpu_meas, sgemm),
     offsetof(struct ddp_validate_expect, sgemm_min_tflops), "sgemm_min_tflops"},
    {"TF32 GEMM", "TFLOP/s", "gpu_gemm", offsetof(struct gpu_meas, tf32),
     offsetof(struct ddp_validate_expect, tf32_min_tflops), "tf32_min_tflops"},
    {"BF16 GEMM", "TFLOP/s", "gpu_gemm", offsetof(struct gpu_meas, bf16),
     offsetof(struct ddp_validate_expect, bf16_min_tflops), "bf16_min_tflops"},
    {"H2D copy", "GB/s", "gpu_pcie", offsetof(struct gpu_meas, h2d),
     offsetof(struct ddp_validate_expect, h2d_min_gbs), "h2d_min_gbs"},
    {"D2H copy", "GB/s", "gpu_pcie", offsetof(struct gpu_meas, d2h),
     offsetof(struct ddp_validate_expect, d2h_min_gbs), "d2h_min_gbs"},
};

static double rate_of(const struct gpu_meas *m, int k)
{
    return *(const double *)((const char *)m + g_metric[k].off);
}

static double *rate_at(struct gpu_meas *m, int k)
{
    return (double *)((char *)m + g_metric[k].off);
}

static double floor_of(const struct vrun *v, int k)
{
    return v->have_expect ? *(const double *)((const char *)&v->expect + g_metric[k].floor_off) : 0;
}

/* Median of metric k over the measured GPUs but rank `skip` (-1: none), and in *lmad the
 * median absolute deviation of their logarithms (about *lm, the median logarithm). */
static double median_gpus(const struct rank_info *ri, int W, int k, int skip, double *lm,
                          double *lmad)
{
    double *x = ddp_malloc(sizeof(double) * (size_t)(W ? W : 1));
    double *l = ddp_malloc(sizeof(double) * (size_t)(W ? W : 1));
    int n = 0;
    for (int r = 0; r < W; r++)
        if (r != skip && ri[r].gm.measured && rate_of(&ri[r].gm, k) > 0) {
            x[n] = rate_of(&ri[r].gm, k);
            l[n] = log(x[n]);
            n++;
        }
    const double m = median_sort(x, n);
    const double mlog = median_sort(l, n);
    for (int i = 0; i < n; i++)
        l[i] = fabs(l[i] - mlog);
    if (lm)
        *lm = mlog;
    if (lmad)
        *lmad = median_sort(l, n);
    free(x);
    free(l);
    return m;
}

/* Whether rank r's metric k falls short: below the floor (*by_floor 1), or an outlier among
 * the other GPUs (*median their median). *limit: the line it fell below. */
static int gpu_short(const struct vrun *v, const struct rank_info *ri, int r, int k, double *limit,
                     double *median, int *by_floor)
{
    const double x = rate_of(&ri[r].gm, k), fl = floor_of(v, k);
    *by_floor = 0;
    *median = 0;
    *limit = fl;
    if (x <= 0)
        return 1; /* did not run */
    if (fl > 0 && x < fl) {
        *by_floor = 1;
        return 1;
    }
    double lm, lmad;
    const double m = median_gpus(ri, v->W, k, r, &lm, &lmad);
    if (m <= 0)
        return 0; /* no other GPU to compare with */
    const double a = v->cfg.min_fraction * m, b = exp(lm - v->cfg.outlier_mads * 1.4826 * lmad);
    *limit = a < b ? a : b;
    *median = m;
    return *limit > 0 && x < *limit;
}

/* Shortfalls of the rates of every measured GPU: 0 means the round passes. */
static int gpu_shortfalls(const struct vrun *v, const struct rank_info *ri)
{
    int n = 0, f;
    double lim, med;
    for (int r = 0; r < v->W; r++)
        for (int k = 0; k < NMETRIC && ri[r].gm.measured; k++)
            n += gpu_short(v, ri, r, k, &lim, &med, &f);
    return n;
}

void vrun_gpu(struct vrun *v)
{
    const int W = v->W;
    int any = v->device >= 0;
    for (int r = 0; r < W; r++)
        any |= v->all[r].device >= 0;
    if (!any)
        return; /* no rank has a GPU: nothing to gather either */
    struct gpu_meas *got = ddp_calloc((size_t)W, sizeof *got);
    struct gpu_meas *best = ddp_calloc((size_t)W, sizeof *best);
    struct gpu_meas mine = {0};
#if HAVE_CUDA
    struct ddp_cuda_vinfo vi;
    if (v->device >= 0 && ddp_cuda_vcheck_info(&vi) == 0) {
        mine.measured = 1;
        mine.twin = vi.twin;
        snprintf(mine.pci_bus_id, sizeof mine.pci_bus_id, "%s", vi.pci_bus_id);
        gpu_sizes(&mine, &vi, v->a->level);
    }
#endif
    /* twin GPUs are the host's CPUs: measured one rank at a time, like CPU rates in turns */
    int32_t *twin = ddp_calloc((size_t)W, sizeof *twin), tw = 0, me_twin = mine.twin;
    ddp_comm_allgather(v->c, &me_twin, twin, sizeof me_twin);
    for (int r = 0; r < W; r++)
        tw |= twin[r];
    free(twin);
    int round = 0;
    for (; round < v->cfg.rounds; round++) {
        for (int t = 0; t < (tw ? W : 1); t++) {
            ddp_comm_barrier(v->c); /* every GPU at once, or one at a time on the twin */
#if HAVE_CUDA
            if (mine.measured && (!tw || t == v->me))
                gpu_measure(v, &mine, round == 0);
#endif
        }
        ddp_comm_allgather(v->c, &mine, got, sizeof mine);
        for (int r = 0; r < W; r++) {
            if (round == 0)
                best[r] = got[r]; /* sizes, pattern test */
            for (int k = 0; k < NMETRIC; k++)
                *rate_at(&best[r], k) = fmax(rate_of(&best[r], k), rate_of(&got[r], k));
            v->all[r].gm = best[r];
        }
        if (gpu_shortfalls(v, v->all) == 0)
            break;
    }
    free(got);
    free(best);
    ddp_log("GPU rates measured in %d round%s (%.1f s)", round + (round < v->cfg.rounds),
            round + (round < v->cfg.rounds) == 1 ? "" : "s", ddp_now() - v->t_start);
}

/* ---- judging, tables, JSON, expectations (rank 0) -------------------------------------------- */

void judge_gpu(struct report *rep, const struct vrun *v)
{
    for (int r = 0; r < rep->W; r++) {
        const struct rank_info *x = &rep->ri[r];
        const struct gpu_meas *m = &x->gm;
        if (!m->measured)
            continue;
        for (int k = 0; k < NMETRIC; k++) {
            double lim, med;
            int by_floor;
            if (!gpu_short(v, rep->ri, r, k, &lim, &med, &by_floor))
                continue;
            const double y = rate_of(m, k);
            if (y <= 0)
                add_failure(rep, r, g_metric[k].check, "rank %d on %s (PCI %s): the %s did not run",
                            r, x->where, m->pci_bus_id, g_metric[k].name);
            else if (by_floor)
                add_failure(rep, r, g_metric[k].check,
                            "rank %d on %s (PCI %s): %s %.4g %s is below the floor [gpu] %s = "
                            "%.4g of %.200s",
                            r, x->where, m->pci_bus_id, g_metric[k].name, y, g_metric[k].unit,
                            g_metric[k].floor, lim, v->expect.path);
            else
                add_failure(rep, r, g_metric[k].check,
                            "rank %d on %s (PCI %s): %s %.4g %s is %.2f x the median %.4g of the "
                            "other GPUs (an outlier: below %.3g x and %g MADs)",
                            r, x->where, m->pci_bus_id, g_metric[k].name, y, g_metric[k].unit,
                            y / med, med, v->cfg.min_fraction, v->cfg.outlier_mads);
        }
        char b[32];
        if (m->pat_bad)
            add_failure(rep, r, "gpu_mem",
                        "rank %d on %s (PCI %s): the device-memory pattern test found %lld wrong "
                        "word%s of %lld checked (%s): device memory does not hold what was "
                        "written",
                        r, x->where, m->pci_bus_id, (long long)m->pat_bad,
                        m->pat_bad == 1 ? "" : "s", (long long)m->pat_words,
                        ddp_fmt_bytes((double)m->pat_bytes, b, sizeof b));
    }
}

/* "PASS" or "FAIL" for rank r's GPU checks. */
static const char *gpu_verdict(const struct report *rep, int r)
{
    for (int i = 0; i < rep->nfail; i++)
        if (rep->fail[i].rank == r && !strncmp(rep->fail[i].check, "gpu_", 4))
            return "FAIL";
    return "PASS";
}

void print_gpus(const struct report *rep, double frac)
{
    const int W = rep->W;
    int first = -1;
    for (int r = W - 1; r >= 0; r--)
        if (rep->ri[r].gm.measured)
            first = r;
    if (first < 0)
        return;
    const struct gpu_meas *f = &rep->ri[first].gm;
    char hbm[32], pcie[32], pat[32];
    printf("\nGPUs: HBM copy and triad over %s arrays (GB/s: bytes read + written, as STREAM); "
           "GEMMs %d^3 (TFLOP/s = 2N^3/t); page-locked copies of %s; pattern test over %s%s\n",
           ddp_fmt_bytes((double)f->hbm_bytes, hbm, sizeof hbm), f->gemm_n,
           ddp_fmt_bytes((double)f->pcie_bytes, pcie, sizeof pcie),
           ddp_fmt_bytes((double)f->pat_bytes, pat, sizeof pat),
           f->twin ? " (GPU twin: tiny sizes)" : "");
    printf("%4s  %-16s %4s %-16s %8s %8s %8s %8s %8s %7s %7s %9s  %s\n", "rank", "host", "gpu",
           "pci", "copy", "triad", "sgemm", "tf32", "bf16", "h2d", "d2h", "pattern", "verdict");
    printf("%4s  %-16s %4s %-16s %8s %8s %8s %8s %8s %7s %7s %9s  %s\n", "", "", "", "", "(GB/s)",
           "(GB/s)", "(TFLOP/s)", "(TFLOP/s)", "(TFLOP/s)", "(GB/s)", "(GB/s)", "(wrong)", "");
    for (int r = 0; r < W; r++) {
        const struct rank_info *x = &rep->ri[r];
        const struct gpu_meas *m = &x->gm;
        if (!m->measured)
            continue;
        printf("%4d  %-16.16s %4d %-16.16s %8.1f %8.1f %8.2f %8.2f %8.2f %7.2f %7.2f %9lld  %s\n",
               r, x->host, x->device, m->pci_bus_id, m->copy, m->triad, m->sgemm, m->tf32, m->bf16,
               m->h2d, m->d2h, (long long)m->pat_bad, gpu_verdict(rep, r));
    }
    double med[NMETRIC];
    for (int k = 0; k < NMETRIC; k++)
        med[k] = median_gpus(rep->ri, W, k, -1, NULL, NULL);
    printf("%4s  %-16s %4s %-16s %8.1f %8.1f %8.2f %8.2f %8.2f %7.2f %7.2f %9s  (a GPU below "
           "%.2f x the median of the others fails)\n",
           "", "median", "", "", med[M_COPY], med[M_TRIAD], med[M_SGEMM], med[M_TF32], med[M_BF16],
           med[M_H2D], med[M_D2H], "", frac);
}

void json_gpus(FILE *f, const struct report *rep)
{
    static const char *const key[NMETRIC] = {"hbm_copy_gbs",     "hbm_triad_gbs",    "sgemm_tflops",
                                             "tf32_gemm_tflops", "bf16_gemm_tflops", "h2d_gbs",
                                             "d2h_gbs"};
    int n = 0;
    fprintf(f, "  \"gpus\": [");
    for (int r = 0; r < rep->W; r++) {
        const struct rank_info *x = &rep->ri[r];
        const struct gpu_meas *m = &x->gm;
        if (!m->measured)
            continue;
        fprintf(f,
                "%s\n    {\"rank\": %d, \"host\": \"%s\", \"device\": %d, \"pci_bus_id\": "
                "\"%s\", \"twin\": %s",
                n++ ? "," : "", r, x->host, x->device, m->pci_bus_id, m->twin ? "true" : "false");
        for (int k = 0; k < NMETRIC; k++)
            fprintf(f, ", \"%s\": %.4g", key[k], rate_of(m, k));
        fprintf(f,
                ", \"hbm_bytes_per_array\": %lld, \"gemm_n\": %d, \"copy_bytes\": %lld, "
                "\"pattern_bytes\": %lld, \"pattern_words\": %lld, \"pattern_wrong_words\": %lld, "
                "\"verdict\": \"%s\"}",
                (long long)m->hbm_bytes, m->gemm_n, (long long)m->pcie_bytes,
                (long long)m->pat_bytes, (long long)m->pat_words, (long long)m->pat_bad,
                gpu_verdict(rep, r));
    }
    fprintf(f, "%s],\n", n ? "\n  " : "");
}

void write_expect_gpu(FILE *f, const struct vrun *v, double keep)
{
    double worst[NMETRIC];
    int n = 0;
    for (int r = 0; r < v->W; r++) {
        const struct gpu_meas *m = &v->all[r].gm;
        if (!m->measured)
            continue;
        for (int k = 0; k < NMETRIC; k++)
            worst[k] = n == 0 || rate_of(m, k) < worst[k] ? rate_of(m, k) : worst[k];
        n++;
    }
    if (!n)
        return;
    fprintf(f,
            "hbm_min_gbs = %.1f\nsgemm_min_tflops = %.2f\ntf32_min_tflops = %.2f\n"
            "bf16_min_tflops = %.2f\nh2d_min_gbs = %.2f\nd2h_min_gbs = %.2f\n",
            fmin(worst[M_COPY], worst[M_TRIAD]) * keep, worst[M_SGEMM] * keep, worst[M_TF32] * keep,
            worst[M_BF16] * keep, worst[M_H2D] * keep, worst[M_D2H] * keep);
}

/*
 * judge.c - rank 0's judgement of `ddptrain validate`: the statistics (medians, scaled MADs,
 * the load other processes put on a node) and the verdict of each check, collected in a
 * struct report (failures, retests, warnings). Printing is tables.c's and report_json.c's.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "validate/validate_impl.h"

static void add_result(struct report *rep, int rank, int retest, const char *check, const char *fmt,
                       va_list ap)
{
    if (rep->nfail == rep->capfail) {
        rep->capfail = rep->capfail ? 2 * rep->capfail : 16;
        rep->fail = ddp_realloc(rep->fail, sizeof *rep->fail * (size_t)rep->capfail);
    }
    struct failure *f = &rep->fail[rep->nfail++];
    f->rank = rank;
    f->retest = retest;
    rep->nhard += !retest;
    rep->nretest += retest;
    snprintf(f->check, sizeof f->check, "%s", check);
    vsnprintf(f->reason, sizeof f->reason, fmt, ap);
}

void add_failure(struct report *rep, int rank, const char *check, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    add_result(rep, rank, 0, check, fmt, ap);
    va_end(ap);
}

static void add_retest(struct report *rep, int rank, const char *check, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_retest(struct report *rep, int rank, const char *check, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    add_result(rep, rank, 1, check, fmt, ap);
    va_end(ap);
}

void add_warning(struct report *rep, const char *fmt, ...)
{
    if (rep->nwarn == rep->capwarn) {
        rep->capwarn = rep->capwarn ? 2 * rep->capwarn : 8;
        rep->warn = ddp_realloc(rep->warn, sizeof *rep->warn * (size_t)rep->capwarn);
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->warn[rep->nwarn++], REASON_LEN, fmt, ap);
    va_end(ap);
}

/* "FAIL", "RETEST" or "PASS" for a rank (-2: the run as a whole). */
const char *verdict_of(const struct report *rep, int rank)
{
    int hard = 0, re = 0;
    for (int i = 0; i < rep->nfail; i++)
        if (rank == -2 || rep->fail[i].rank == rank) {
            hard |= !rep->fail[i].retest;
            re |= rep->fail[i].retest;
        }
    return hard ? "FAIL" : re ? "RETEST" : "PASS";
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double median_sort(double *v, int n)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median of the positive values among W (0 when none), skipping rank `skip` (-1: none). */
static double median_but(const struct rank_info *ri, int W, int triad, int skip)
{
    double *v = ddp_malloc(sizeof(double) * (size_t)W);
    int n = 0;
    for (int r = 0; r < W; r++) {
        double x = triad ? ri[r].triad : ri[r].gemm;
        if (x > 0 && r != skip)
            v[n++] = x;
    }
    double m = median_sort(v, n);
    free(v);
    return m;
}

double median_of(const struct rank_info *ri, int W, int triad)
{
    return median_but(ri, W, triad, -1);
}

/* Rates are compared on a log scale (a rank at half the rate is as far below as one at twice
 * is above): the median of log(rate) of the positive values of the ranks but `skip` in *lm,
 * and their median absolute deviation from it. */
static double log_mad_but(const struct rank_info *ri, int W, int triad, int skip, double *lm)
{
    double *v = ddp_malloc(sizeof(double) * (size_t)W);
    int n = 0;
    for (int r = 0; r < W; r++) {
        double x = triad ? ri[r].triad : ri[r].gemm;
        if (x > 0 && r != skip)
            v[n++] = log(x);
    }
    *lm = median_sort(v, n);
    for (int i = 0; i < n; i++)
        v[i] = fabs(v[i] - *lm);
    double d = median_sort(v, n);
    free(v);
    return d;
}

/* The share (0..1) of the CPUs of rank r's machine (ranks with its boot id) that other
 * processes used while rank r measured: the machine's busy time less what rank r used (in
 * turns: the others only wait then), or less what every rank there used (they measured at
 * the same time). */
double machine_load(const struct rank_info *ri, int W, int r)
{
    double own = ri[r].own_s;
    if (!ri[r].turns)
        for (int q = 0; q < W; q++)
            if (q != r && !strcmp(ri[q].boot_id, ri[r].boot_id))
                own += ri[q].own_s;
    if (ri[r].busy_s < 0 || ri[r].wall_s <= 0 || ri[r].cpus_online <= 0)
        return 0;
    double f = (ri[r].busy_s - own) / (ri[r].wall_s * ri[r].cpus_online);
    return f < 0 ? 0 : f > 1 ? 1 : f;
}

/* The load that slowed rank r while it measured: for compute (GEMM, all-reduce), the share of
 * the time its measuring thread wanted a CPU that others held (run-queue wait): a rank slow by
 * itself (a throttled CPU) does not wait for a CPU. For memory bandwidth (the triad), also the
 * share of its machine's CPUs that other processes used, which takes bandwidth and caches
 * without taking its CPU. */
double rank_load(const struct rank_info *ri, int W, int r, int memory)
{
    const double wait = ri[r].wait_share >= 0 ? ri[r].wait_share : machine_load(ri, W, r);
    return memory ? fmax(wait, machine_load(ri, W, r)) : wait;
}

/* Why a rank's rate fell short, if it did. */
struct shortfall {
    double x, limit; /* the rate and the line it fell below */
    double median;   /* of the other ranks (outliers) */
    double load;     /* the load that counts (rank_load): the rank's own (floors), or its excess
                        over the other ranks' (outliers, which compare ranks) */
    int by_floor;    /* 1: the expectation file's floor, 0: an outlier among the ranks */
};

/* Whether rank r's GEMM (triad 0) or triad rate is short: below the expectation's floor, or an
 * outlier among the ranks - below min_fraction x the median of the others AND, on a log scale,
 * outlier_mads scaled MADs (1.4826 MAD: a standard deviation for normal noise) below their
 * median. Every rank computes it alike from the same numbers. A rate <= 0 is not judged
 * here. */
static int rate_short(const struct vrun *v, const struct rank_info *ri, int r, int triad,
                      struct shortfall *s)
{
    const int W = v->W;
    memset(s, 0, sizeof *s);
    s->x = triad ? ri[r].triad : ri[r].gemm;
    const double floor = !v->have_expect ? 0
                         : triad         ? v->expect.triad_min_gbs
                                         : v->expect.gemm_min_gflops;
    if (s->x <= 0)
        return 0;
    if (floor > 0 && s->x < floor) {
        s->limit = floor;
        s->by_floor = 1;
        s->load = rank_load(ri, W, r, triad);
        return 1;
    }
    const double m = median_but(ri, W, triad, r);
    if (m <= 0)
        return 0; /* no other rank to compare with */
    double lm;
    const double lmad = log_mad_but(ri, W, triad, r, &lm);
    const double a = v->cfg.min_fraction * m, b = exp(lm - v->cfg.outlier_mads * 1.4826 * lmad);
    s->limit = a < b ? a : b;
    s->median = m;
    if (!(s->limit > 0 && s->x < s->limit))
        return 0;
    double *loads = ddp_malloc(sizeof(double) * (size_t)W);
    int n = 0;
    for (int q = 0; q < W; q++)
        if (q != r)
            loads[n++] = rank_load(ri, W, q, triad);
    s->load = rank_load(ri, W, r, triad) - median_sort(loads, n);
    free(loads);
    return 1;
}

/* Shortfalls of a round (rates <= 0 and wrong triad values count): 0 means it passes. */
int rates_shortfalls(const struct vrun *v, const struct rank_info *ri)
{
    int n = 0;
    struct shortfall s;
    for (int r = 0; r < v->W; r++)
        for (int t = 0; t < 2; t++)
            n += (t ? ri[r].triad : ri[r].gemm) <= 0 || rate_short(v, ri, r, t, &s);
    return n;
}

/* A shortfall the load explains (retest): the load is at least foreign_load_max and the rate
 * at least a quarter of what the CPU share left to us would give at the limit,
 * limit x (1 - load) / 4 (a GEMM whose threads wait for each other suffers more than its
 * share). A rank slower than that is slow whatever the load. */
static int load_explains(const struct vrun *v, const struct shortfall *s)
{
    return s->load >= v->cfg.foreign_load_max && v->cfg.foreign_load_max > 0 &&
           s->x >= 0.25 * s->limit * (1 - s->load);
}

/* One rate's verdict for rank r (triad 0: GEMM). */
static void judge_rate(struct report *rep, const struct vrun *v, int r, int triad)
{
    const struct rank_info *x = &rep->ri[r];
    const char *check = triad ? "triad" : "gemm", *unit = triad ? "GB/s" : "GFLOP/s";
    char what[REASON_LEN], load[200] = "";
    struct shortfall s;
    if (!rate_short(v, rep->ri, r, triad, &s))
        return;
    if (s.by_floor)
        snprintf(what, sizeof what, "%s %.1f %s is below the floor %.1f of %.200s (%.100s)",
                 triad ? "triad" : "sgemm", s.x, unit, s.limit, v->expect.path,
                 v->expect.type[0] ? v->expect.type : "no node type");
    else
        snprintf(what, sizeof what,
                 "%s %.1f %s is %.2f x the median %.1f of the other ranks (an outlier: below "
                 "%.2f x and %g MADs)",
                 triad ? "triad" : "sgemm", s.x, unit, s.x / s.median, s.median,
                 v->cfg.min_fraction, v->cfg.outlier_mads);
    if (s.load > 0.005)
        snprintf(load, sizeof load, "; load from other processes %.0f%% (%s)%s", 100 * s.load,
                 triad ? "of the machine's CPUs, or of its time waiting for a CPU"
                       : "of its time waiting for a CPU they held",
                 s.by_floor ? "" : " above the other ranks'");
    if (load_explains(v, &s))
        add_retest(rep, r, check, "rank %d on %s: %s%s: run again when the node is idle", r,
                   x->where, what, load);
    else
        add_failure(rep, r, check, "rank %d on %s: %s%s", r, x->where, what, load);
}

void judge_rates(struct report *rep, const struct vrun *v)
{
    for (int r = 0; r < rep->W; r++) {
        const struct rank_info *x = &rep->ri[r];
        if (x->gemm <= 0)
            add_failure(rep, r, "gemm", "rank %d on %s: the GEMM did not run", r, x->where);
        else
            judge_rate(rep, v, r, 0);
        if (x->triad < 0)
            add_failure(rep, r, "triad",
                        "rank %d on %s: the triad read back wrong values (memory does not hold "
                        "what was written)",
                        r, x->where);
        else
            judge_rate(rep, v, r, 1);
    }
}

/* The expectation's GPU count and model, and the burn's results, per rank. */
void judge_node(struct report *rep, const struct vrun *v)
{
    const struct ddp_validate_expect *e = &v->expect;
    for (int r = 0; r < rep->W; r++) {
        const struct rank_info *x = &rep->ri[r];
        if (v->have_expect && e->gpu_count >= 0 && x->gpu_count != e->gpu_count)
            add_failure(rep, r, "gpu", "rank %d on %s: the driver reports %d GPU%s, %s expects %d",
                        r, x->where, x->gpu_count, x->gpu_count == 1 ? "" : "s", e->path,
                        e->gpu_count);
        if (v->have_expect && e->gpu_model[0] && !strcasestr(x->gpu_name, e->gpu_model))
            add_failure(rep, r, "gpu", "rank %d on %s: device '%s', %s expects a '%s'", r, x->where,
                        x->gpu_name, e->path, e->gpu_model);
        if (x->burn_bad)
            add_failure(rep, r, "burn",
                        "rank %d on %s: %lld of %lld GEMM results of the burn differed from the "
                        "first (same inputs): the device computes wrong under sustained load",
                        r, x->where, (long long)x->burn_bad, (long long)x->burn_calls);
    }
}

/* The expectation's bus bandwidth floors, for the run as a whole (rank -1). */
void judge_busbw(struct report *rep, const struct vrun *v, const struct ddp_validate_ar_row *rows,
                 int nsizes)
{
    const struct ddp_validate_expect *e = &v->expect;
    if (!v->have_expect || !e->nbusbw || v->W < 2)
        return;
    if (e->ar_ranks && e->ar_ranks != v->W) {
        add_warning(rep, "%s: all-reduce floors are for %d ranks, this run has %d: not checked",
                    e->path, e->ar_ranks, v->W);
        return;
    }
    double load = 0;
    for (int r = 0; r < v->W; r++) {
        double f = rank_load(rep->ri, v->W, r, 0);
        load = f > load ? f : load;
    }
    for (int i = 0; i < e->nbusbw; i++) {
        int s = 0;
        while (s < nsizes && rows[s].bytes != e->busbw_bytes[i])
            s++;
        if (s == nsizes) {
            add_warning(rep, "%s: no all-reduce of %lld bytes at level %s: floor not checked",
                        e->path, (long long)e->busbw_bytes[i], v->L.name);
            continue;
        }
        const double x = rows[s].busbw, lim = e->busbw_min[i];
        if (x >= lim)
            continue;
        struct shortfall sf = {x, lim, 0, load, 1};
        (load_explains(v, &sf) ? add_retest : add_failure)(
            rep, -1, "allreduce",
            "all %d ranks: busbw %.3f GB/s at %lld bytes is below the floor %.3f of %s%s", v->W, x,
            (long long)e->busbw_bytes[i], lim, e->path,
            load_explains(v, &sf) ? " while other processes loaded a node: run again" : "");
    }
}

/* rows: (W, nsizes) every rank's checks. A rank whose own input was wrong explains wrong sums
 * everywhere at that size; without one, the ranks that received wrong sums are named. */
int judge_allreduce(struct report *rep, const struct ddp_validate_ar_row *rows, int nsizes)
{
    const int W = rep->W;
    int *blamed = ddp_calloc((size_t)W, sizeof(int));
    int bad = 0;
    for (int s = 0; s < nsizes; s++) {
        int inputs = 0, results = 0;
        for (int r = 0; r < W; r++) {
            inputs += rows[(size_t)r * nsizes + s].input_bad != 0;
            results += rows[(size_t)r * nsizes + s].bad_elems != 0;
        }
        if (!inputs && !results)
            continue;
        bad = 1;
        for (int r = 0; r < W; r++) {
            const struct ddp_validate_ar_row *x = &rows[(size_t)r * nsizes + s];
            if (blamed[r])
                continue;
            if (inputs && x->input_bad) {
                blamed[r] = 1;
                add_failure(rep, r, "allreduce",
                            "rank %d on %s: its all-reduce input of %lld bytes did not hold the "
                            "values it wrote (sums on all ranks were wrong%s): bad memory or "
                            "compute on this rank",
                            r, rep->ri[r].where, (long long)x->bytes,
                            results ? "" : " but were not checked");
            } else if (!inputs && x->bad_elems) {
                blamed[r] = 1;
                add_failure(rep, r, "allreduce",
                            "rank %d on %s: all-reduce of %lld bytes returned %lld wrong "
                            "element%s (first: [%lld] = %g, exact %g)%s",
                            r, rep->ri[r].where, (long long)x->bytes, (long long)x->bad_elems,
                            x->bad_elems == 1 ? "" : "s", (long long)x->first_bad, x->got, x->want,
                            results == W ? " on every rank: the reduction itself, or the "
                                           "network, is faulty"
                                         : "");
            }
        }
    }
    free(blamed);
    return bad;
}

/* The golden run's final parameter hashes: the value a strict majority holds is right; the
 * ranks that differ are marked in bad and failed. Returns the new count of bad ranks. */
static int judge_hashes(struct report *rep, const struct ddp_validate_golden *g,
                        struct golden_verdict *gv, int *bad, int nbad)
{
    const int W = rep->W, S = g->steps;
    int best = 0, best_count = 0;
    for (int r = 0; r < W; r++) {
        int c = 0;
        for (int q = 0; q < W; q++)
            c += g->final_hash[q] == g->final_hash[r];
        if (c > best_count) {
            best_count = c;
            best = r;
        }
    }
    gv->hash = g->final_hash[best];
    gv->hash_match = best_count == W;
    if (!gv->hash_match) {
        /* first step at which any rank's hash differs from rank `best`'s */
        int first = S - 1;
        for (int s = 0; s < S && first == S - 1; s++)
            for (int r = 0; r < W; r++)
                if (g->hash[(size_t)s * W + r] != g->hash[(size_t)s * W + best]) {
                    first = s;
                    break;
                }
        if (2 * best_count > W) {
            for (int r = 0; r < W; r++)
                if (!bad[r] && g->final_hash[r] != gv->hash) {
                    bad[r] = 1;
                    nbad++;
                    add_failure(rep, r, "golden",
                                "rank %d on %s: golden run parameters differ from those of %d of "
                                "%d ranks (from step %d on)",
                                r, rep->ri[r].where, best_count, W, first);
                }
        } else if (!nbad) {
            for (int r = 0; r < W; r++) {
                bad[r] = 1;
                add_failure(rep, r, "golden",
                            "rank %d on %s: golden run parameters differ between ranks from "
                            "step %d on and no majority tells which are right",
                            r, rep->ri[r].where, first);
            }
            nbad = W;
        }
    }
    return nbad;
}

void judge_golden(struct report *rep, const struct ddp_validate_golden *g,
                  const struct ddp_validate_ref *ref, const char *ref_path, const char *no_ref_why,
                  double rtol, int recording, struct golden_verdict *gv)
{
    const int W = rep->W, S = g->steps;
    memset(gv, 0, sizeof *gv);
    snprintf(gv->verdict, sizeof gv->verdict, "PASS");
    int *bad = ddp_calloc((size_t)W, sizeof(int));
    int nbad = 0;
    /* 1. parameters changed at rest */
    for (int r = 0; r < W; r++)
        if (g->at_rest[r] >= 0) {
            bad[r] = 1;
            nbad++;
            add_failure(rep, r, "golden",
                        "rank %d on %s: golden run parameters changed in memory between steps "
                        "%d and %d while nothing wrote them (silent data corruption)",
                        r, rep->ri[r].where, g->at_rest[r] - 1, g->at_rest[r]);
        }
    nbad = judge_hashes(rep, g, gv, bad, nbad);
    /* 3. the trajectory against the reference */
    if (recording) {
        snprintf(gv->reason, sizeof gv->reason, "recorded as a reference");
    } else if (!ref) {
        snprintf(gv->verdict, sizeof gv->verdict, "WARN");
        snprintf(gv->reason, sizeof gv->reason, "no reference: %s", no_ref_why);
        add_warning(rep, "golden run: no reference: %s", no_ref_why);
    } else {
        snprintf(gv->ref_path, sizeof gv->ref_path, "%s", ref_path);
        gv->ref_steps = ref->steps;
        gv->compared = S < ref->steps ? S : ref->steps;
        int first, *flag = ddp_calloc((size_t)W, sizeof(int));
        gv->max_rel = ddp_validate_ref_compare(g, ref, rtol, &first, flag);
        if (first >= 0 && nbad) {
            snprintf(gv->reason, sizeof gv->reason,
                     "trajectory differs from %s from step %d on (after the replica failure)",
                     ref_path, first);
        } else if (first >= 0) {
            int nflag = 0;
            for (int r = 0; r < W; r++)
                if (flag[r]) {
                    const size_t k = ((size_t)first * W + r) * 2;
                    nflag++;
                    bad[r] = 1;
                    add_failure(rep, r, "golden",
                                "rank %d on %s: golden run step %d: local loss %.7g and gradient "
                                "norm %.7g, reference %.7g and %.7g (%s, relative tolerance %g)",
                                r, rep->ri[r].where, first, g->local[k], g->local[k + 1],
                                ref->local[k], ref->local[k + 1], ref_path, rtol);
                }
            if (!nflag)
                for (int r = 0; r < W; r++) {
                    bad[r] = 1;
                    add_failure(rep, r, "golden",
                                "rank %d on %s: golden run loss at step %d is %.7g, reference "
                                "%.7g (%s, relative tolerance %g)",
                                r, rep->ri[r].where, first, g->loss[first], ref->loss[first],
                                ref_path, rtol);
                }
            snprintf(gv->reason, sizeof gv->reason,
                     "trajectory differs from %s from step %d on (%d rank%s)", ref_path, first,
                     nflag ? nflag : W, (nflag ? nflag : W) == 1 ? "" : "s");
            nbad++;
        } else {
            snprintf(gv->reason, sizeof gv->reason,
                     "%d steps within %g of %s (largest loss difference %.2g)", gv->compared, rtol,
                     ref_path, gv->max_rel);
        }
        free(flag);
    }
    if (nbad) {
        snprintf(gv->verdict, sizeof gv->verdict, "FAIL");
        if (!gv->reason[0] || recording)
            snprintf(gv->reason, sizeof gv->reason, "parameters differ between ranks");
    }
    free(bad);
}

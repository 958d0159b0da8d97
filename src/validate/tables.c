/*
 * tables.c - the human tables of `ddptrain validate` (rank 0, stdout): ranks, all-reduce,
 * golden run, nodes and the verdict, with a units row. The same numbers go out as JSON in
 * report_json.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "validate/validate_impl.h"

/* "0-3,5" from the ranks on one host. */
static void rank_ranges(const int *ranks, int n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used + 24 < len; i++) {
        int j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
            j++;
        used += (size_t)snprintf(buf + used, len - used, "%s%d", used ? "," : "", ranks[i]);
        if (j > i)
            used += (size_t)snprintf(buf + used, len - used, "-%d", ranks[j]);
        i = j;
    }
}

/* Unique hosts in rank order; hosts_of[r] = index of rank r's host. */
int group_hosts(const struct rank_info *ri, int W, int *host_of, int *first_rank)
{
    int n = 0;
    for (int r = 0; r < W; r++) {
        int h = -1;
        for (int k = 0; k < n && h < 0; k++)
            if (!strcmp(ri[first_rank[k]].host, ri[r].host))
                h = k;
        if (h < 0) {
            h = n++;
            first_rank[h] = r;
        }
        host_of[r] = h;
    }
    return n;
}

/* The all-reduce table: its rows with everybody's wrong elements; one line when the sweep did
 * not run (one rank: nothing moves, its figures would mean nothing). */
static void print_allreduce(const struct run_facts *rf, const struct ddp_validate_ar_row *ar, int W)
{
    if (!rf->ar_measured) {
        printf("\nall-reduce: not measured (one rank)\n");
        return;
    }
    printf("\nall-reduce: in-place sum of float32 over %d rank%s through comm %s; time = median "
           "of timed blocks of the slowest rank; busbw = algbw x 2(n-1)/n\n",
           W, W == 1 ? "" : "s", rf->comm);
    printf("%12s %11s %11s %9s %9s %6s %10s\n", "size", "count", "time", "algbw", "busbw", "iters",
           "wrong");
    printf("%12s %11s %11s %9s %9s %6s %10s\n", "(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)", "",
           "(elements)");
    for (int s = 0; s < rf->nsizes; s++) {
        int64_t wrong = 0;
        for (int r = 0; r < W; r++)
            wrong += ar[(size_t)r * rf->nsizes + s].bad_elems;
        const struct ddp_validate_ar_row *x = &ar[s];
        printf("%12lld %11lld %11.2f %9.3f %9.3f %6d %10lld\n", (long long)x->bytes,
               (long long)x->count, x->time_s * 1e6, x->algbw, x->busbw, x->iters,
               (long long)wrong);
    }
}

void print_report(const struct report *rep, const struct run_facts *rf,
                  const struct ddp_validate_ar_row *ar, const struct golden_verdict *gv,
                  const struct ddp_validate_golden *g, const int *host_of, const int *first_rank,
                  double frac)
{
    const int W = rep->W;
    printf("\nranks (%s backend, level %s)\n", rf->backend, rf->level);
    printf("%4s  %-16s %-28s %9s %7s %9s %5s %9s %6s %7s %6s %6s  %s\n", "rank", "host", "cpu",
           "cpus", "threads", "memory", "gpu", "sgemm", "ratio", "triad", "ratio", "wait",
           "verdict");
    printf("%4s  %-16s %-28s %9s %7s %9s %5s %9s %6s %7s %6s %6s  %s\n", "", "", "", "(allowed)",
           "", "(GiB)", "", "(GFLOP/s)", "(x)", "(GB/s)", "(x)", "(%)", "");
    for (int r = 0; r < W; r++) {
        const struct rank_info *x = &rep->ri[r];
        char cpus[32];
        snprintf(cpus, sizeof cpus, "%d/%d", x->cpus_allowed, x->cpus_online);
        char gpus[16] = "none";
        if (x->gpu_count > 0)
            snprintf(gpus, sizeof gpus, "%d", x->gpu_count);
        printf("%4d  %-16.16s %-28.28s %9s %7d %9.1f %5s %9.1f %6.2f %7.1f %6.2f %6.0f  %s\n", r,
               x->host, x->cpu_model, cpus, x->threads, (double)x->mem_total / (1 << 30), gpus,
               x->gemm, rf->med_gemm > 0 ? x->gemm / rf->med_gemm : 0, x->triad,
               rf->med_triad > 0 ? x->triad / rf->med_triad : 0, 100 * rank_load(rep->ri, W, r, 0),
               verdict_of(rep, r));
    }
    printf("%4s  %-16s %-28s %9s %7s %9s %5s %9.1f %6s %7.1f %6s %6s  (an outlier below %.2f x "
           "the median of the others fails; wait: for CPUs other processes held)\n",
           "", "median", "", "", "", "", "", rf->med_gemm, "", rf->med_triad, "", "", frac);

    print_gpus(rep, frac); /* gpu.c: ranks with a GPU */
    print_allreduce(rf, ar, W);

    printf("\ngolden run: %d steps on %d rank%s (%s)\n", g->steps, W, W == 1 ? "" : "s",
           DDP_VALIDATE_GOLDEN_SPEC);
    printf("  loss %.6f at step 0, %.6f at step %d; parameter hash %016llx %s\n", g->loss[0],
           g->loss[g->steps - 1], g->steps - 1, (unsigned long long)gv->hash,
           gv->hash_match ? "on every rank" : "on the majority (ranks differ)");
    printf("  %s: %s\n", gv->verdict, gv->reason);

    print_gpu_health(rep);

    printf("\n%-20s %-12s %-7s %s\n", "node", "ranks", "verdict", "reason");
    int nh = rf->nnodes;
    int *list = ddp_malloc(sizeof(int) * (size_t)W);
    for (int h = 0; h < nh; h++) {
        int n = 0;
        for (int r = 0; r < W; r++)
            if (host_of[r] == h)
                list[n++] = r;
        char rr[64];
        rank_ranges(list, n, rr, sizeof rr);
        int printed = 0;
        const char *hv = "PASS";
        for (int i = 0; i < rep->nfail; i++)
            if (rep->fail[i].rank >= 0 && host_of[rep->fail[i].rank] == h)
                hv = !rep->fail[i].retest ? "FAIL" : strcmp(hv, "FAIL") ? "RETEST" : hv;
        for (int i = 0; i < rep->nfail; i++)
            if (rep->fail[i].rank >= 0 && host_of[rep->fail[i].rank] == h) {
                printf("%-20.20s %-12s %-7s %s\n", printed ? "" : rep->ri[first_rank[h]].host,
                       printed ? "" : rr, printed ? "" : hv, rep->fail[i].reason);
                printed = 1;
            }
        if (!printed)
            printf("%-20.20s %-12s %-7s %s\n", rep->ri[first_rank[h]].host, rr, "PASS", "");
    }
    free(list);
    for (int i = 0; i < rep->nwarn; i++)
        printf("WARN: %s\n", rep->warn[i]);
    if (rep->nfail == 0) {
        printf("validate: PASS (%d rank%s on %d node%s, %.1f s)\n", W, W == 1 ? "" : "s", nh,
               nh == 1 ? "" : "s", rf->elapsed);
    } else if (rep->nhard) {
        printf("validate: FAIL on %d check%s:\n", rep->nhard, rep->nhard == 1 ? "" : "s");
    } else {
        printf("validate: RETEST: %d check%s fell short while other processes loaded the node; "
               "no fault found, run again when it is idle (exit %d%s)\n",
               rep->nretest, rep->nretest == 1 ? "" : "s", rf->retest_exit,
               rf->retest_exit ? "" : ": --slurm-health never fails a node for its load");
    }
    for (int i = 0; i < rep->nfail; i++)
        printf("%s %s: %s\n", rep->fail[i].retest ? "RETEST" : "FAIL", rep->fail[i].check,
               rep->fail[i].reason);
    fflush(stdout);
}

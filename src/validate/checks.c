/*
 * checks.c - the checks of `ddptrain validate` in order, on every rank: the rates (GEMM and
 * triad, in turns where ranks share CPUs, in rounds while one falls short), the all-reduce
 * sweep, level long's burn and the golden run; every rank's results to everybody. The
 * measurements themselves live in bench.c, allreduce.c and golden.c; judging in judge.c.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_build.h"
#include "core/util.h"
#include "validate/validate_impl.h"

static void barrier_cb(void *c)
{
    ddp_comm_barrier(c);
}

/* The most seconds one rate measurement with a window of `seconds` may take: four windows
 * (two seconds at least), so that a very slow rank is measured in bounded time; with
 * --slurm-health also at most 15% of the budget. */
static double measure_cap(const struct vrun *v, double seconds)
{
    double cap = fmax(2.0, 4 * seconds);
    return v->a->slurm_health ? fmin(cap, 0.15 * v->a->budget_s) : cap;
}

/* The counters of the load at a moment (health.c). */
struct load_mark {
    double busy, own, t, run, wait; /* busy -1, run -1: unknown */
};

static void load_mark(struct load_mark *m)
{
    m->busy = ddp_validate_machine_busy_s();
    m->own = ddp_validate_own_cpu_s();
    m->t = ddp_now();
    if (ddp_validate_sched_s(&m->run, &m->wait) != 0)
        m->run = -1;
}

/* Add the load since m0 to this rank's: only its own measurements count (in turns, the load
 * while the others measured is theirs). */
static void load_add(struct vrun *v, const struct load_mark *m0)
{
    struct load_mark m1;
    load_mark(&m1);
    struct rank_info *mine = &v->mine;
    mine->busy_s =
        m0->busy < 0 || m1.busy < 0 || mine->busy_s < 0 ? -1 : mine->busy_s + m1.busy - m0->busy;
    mine->own_s += m1.own - m0->own;
    mine->wall_s += m1.t - m0->t;
    if (m0->run < 0 || m1.run < 0 || v->sched_run < 0) {
        v->sched_run = -1;
        mine->wait_share = -1;
        return;
    }
    v->sched_run += m1.run - m0->run;
    v->sched_wait += m1.wait - m0->wait;
    mine->wait_share =
        v->sched_run + v->sched_wait > 0 ? v->sched_wait / (v->sched_run + v->sched_wait) : -1;
}

/* One round of rates: each turn's ranks measure, the others meet them in the kernels' sync;
 * then everybody's results into v->all. */
static void rates_round(struct vrun *v, int turns, int my_turn, int *triad_bad)
{
    const struct level *L = &v->L;
    struct rank_info *mine = &v->mine;
    mine->gemm = mine->triad = 0;
    for (int t = 0; t < turns; t++) {
        if (t != my_turn) {
            ddp_comm_barrier(v->c);
            ddp_comm_barrier(v->c);
            continue;
        }
        struct load_mark m0;
        load_mark(&m0);
        ddp_validate_bench_cap(measure_cap(v, L->gemm_s));
        mine->gemm = ddp_validate_gemm(
            v->be, L->gemm_n, L->gemm_reps, L->gemm_s,
            ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_SLOW_GEMM, v->me), barrier_cb,
            v->c);
        ddp_validate_bench_cap(measure_cap(v, L->triad_s));
        mine->triad = ddp_validate_triad(
            L->triad_mib, L->triad_reps, L->triad_s, v->threads,
            ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_SLOW_TRIAD, v->me), barrier_cb,
            v->c);
        *triad_bad |= mine->triad < 0;
        load_add(v, &m0);
        if (ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_LOADED, v->me))
            mine->wait_share = 1; /* as if other processes held its CPUs all the time */
    }
    mine->triad_bad = *triad_bad;
    ddp_comm_allgather(v->c, mine, v->all, sizeof *mine);
}

/* The worst rates of a round, for --record-expect. */
static void record_worst(struct vrun *v)
{
    for (int r = 0; r < v->W; r++) {
        if (v->rec_rounds == 0 || v->all[r].gemm < v->rec_gemm)
            v->rec_gemm = v->all[r].gemm;
        if (v->rec_rounds == 0 || v->all[r].triad < v->rec_triad)
            v->rec_triad = v->all[r].triad;
        v->rec_rounds += r == 0;
    }
}

/* Inventory, then the rates, in turns where ranks would share CPUs, in rounds: when a rate
 * falls short (rate_short), everybody measures again under the same conditions (a passing
 * burst of noise clears; a slow rank stays slow). Each rank's best rate of the rounds is
 * judged: every rank gets the same number of tries, so best is compared with best. Wrong
 * triad values in any round stay wrong. --record-expect measures every round. */
static void vrun_rates(struct vrun *v)
{
    const int W = v->W;
    vrun_inventory(v);
    int my_turn, shared, turns = measurement_turns(v->all, W, v->me, &my_turn, &shared);
    ddp_log("ddptrain %s validate --level %s: %d rank%s, launcher %s, comm %s, backend %s, %d "
            "thread%s per rank%s",
            DDP_VERSION, v->L.name, W, W == 1 ? "" : "s", ddp_launcher_name(v->w.launcher),
            ddp_comm_name(v->c), v->be->name, v->threads, v->threads == 1 ? "" : "s",
            turns > 1 ? "; ranks sharing CPUs measure their rates in turns" : "");
    if (shared && my_turn == 0)
        v->lock = machine_lock();
    v->mine.turns = shared;
    int rounds = 0, triad_bad = 0;
    const int nrounds = v->a->record_expect && v->cfg.rounds < 5 ? 5 : v->cfg.rounds;
    struct rank_info *best = ddp_calloc((size_t)W, sizeof *best);
    for (int round = 0; round < nrounds; round++) {
        rates_round(v, turns, my_turn, &triad_bad);
        rounds++;
        record_worst(v);
        for (int r = 0; r < W; r++) {
            const double g = fmax(best[r].gemm, v->all[r].gemm);
            const double t = fmax(best[r].triad, v->all[r].triad);
            best[r] = v->all[r]; /* the load so far, and everything else as now */
            best[r].gemm = g;
            best[r].triad = v->all[r].triad_bad ? -1 : t;
        }
        if (rates_shortfalls(v, best) == 0 && !v->a->record_expect)
            break;
    }
    memcpy(v->all, best, sizeof *v->all * (size_t)W);
    free(best);
    ddp_log("rates measured in %d round%s (%.1f s)", rounds, rounds == 1 ? "" : "s",
            ddp_now() - v->t_start);
}

/* The all-reduce sweep; every rank's checks to everybody. */
static void vrun_sweep(struct vrun *v)
{
    const struct ddp_validate_config *cfg = &v->cfg;
    struct ddp_validate_ar_opts ao = {
        cfg->ar_min_bytes, v->L.ar_max, v->L.ar_blocks, cfg->ar_block_ms / 1e3,
        ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_BAD_ALLREDUCE, v->me)};
    v->rows = ddp_calloc(DDP_VALIDATE_MAX_SIZES, sizeof *v->rows);
    v->nsizes = ddp_validate_allreduce_sweep(v->c, &ao, v->rows);
    v->ar_all = ddp_calloc((size_t)v->W * (size_t)v->nsizes, sizeof *v->ar_all);
    ddp_comm_allgather(v->c, v->rows, v->ar_all, sizeof *v->rows * (size_t)v->nsizes);
    ddp_log("all-reduce sweep done (%.1f s)", ddp_now() - v->t_start);
}

/* Level long: every rank burns at once (the node's full load), then everybody's results. */
static void vrun_burn(struct vrun *v)
{
    if (v->L.burn_s <= 0)
        return;
    struct ddp_validate_burn_result b;
    ddp_comm_barrier(v->c);
    ddp_validate_burn(v->be, v->L.gemm_n, v->L.burn_s,
                      ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_BAD_BURN, v->me), &b);
    v->mine.burn_gflops = b.gflops;
    v->mine.burn_min = b.min_gflops;
    v->mine.burn_calls = b.calls;
    v->mine.burn_bad = b.mismatches;
    struct rank_info *got = ddp_calloc((size_t)v->W, sizeof *got);
    ddp_comm_allgather(v->c, &v->mine, got, sizeof v->mine);
    for (int r = 0; r < v->W; r++) {
        v->all[r].burn_gflops = got[r].burn_gflops;
        v->all[r].burn_min = got[r].burn_min;
        v->all[r].burn_calls = got[r].burn_calls;
        v->all[r].burn_bad = got[r].burn_bad;
    }
    free(got);
    ddp_log("burn: %.0f s of GEMMs (n %d), %.1f GFLOP/s sustained on rank 0, slowest second "
            "%.1f (%.1f s)",
            v->L.burn_s, v->L.gemm_n, v->all[0].burn_gflops, v->all[0].burn_min,
            ddp_now() - v->t_start);
}

/* The golden run; returns the code every rank agrees on. */
static int vrun_golden(struct vrun *v)
{
    char err[DDP_ERR_LEN * 2];
    v->steps = v->L.golden_steps;
    const unsigned faults =
        (ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_FLIP_PARAM, v->me)
             ? DDP_VALIDATE_GOLDEN_FLIP_PARAM
             : 0u) |
        (ddp_validate_fault_here(&v->faults, DDP_VALIDATE_FAULT_BAD_GRAD, v->me)
             ? DDP_VALIDATE_GOLDEN_BAD_GRAD
             : 0u);
    int code = ddp_validate_golden_run(v->c, v->be, v->steps, faults, &v->g, err, sizeof err) != 0
                   ? DDP_EXIT_RUNTIME
                   : 0;
    if (code)
        ddp_warn("validate: %s", err);
    return ddp_comm_agree(v->c, code, NULL);
}

/* The checks in order, GPU health read around them (gpu_health.c); --slurm-health skips what
 * its budget leaves no room for (the all-reduce of one process, a golden run when less than
 * GOLDEN_RESERVE_S remain). */
#define GOLDEN_RESERVE_S 4.0
int vrun_checks(struct vrun *v)
{
    const int health = v->a->slurm_health;
    gpu_health_start(v);
    ddp_validate_budget_phase(1);
    vrun_rates(v);
    vrun_gpu(v); /* gpu.c: the GPUs' own rates and pattern test */
    ddp_validate_budget_phase(2);
    if (!health && v->W > 1) {
        vrun_sweep(v);
    } else {
        v->rows = ddp_calloc(DDP_VALIDATE_MAX_SIZES, sizeof *v->rows);
        v->ar_all = ddp_calloc(1, sizeof *v->ar_all);
    }
    vrun_burn(v);
    ddp_validate_budget_phase(3);
    if (health && v->a->budget_s - (ddp_now() - v->t_start) < GOLDEN_RESERVE_S) {
        ddp_log("--slurm-health: %.1f s of the budget left: no golden run",
                v->a->budget_s - (ddp_now() - v->t_start));
        v->L.golden_steps = 1;
    }
    int code = vrun_golden(v);
    gpu_health_finish(v);
    return code;
}

/*
 * validate.c - `ddptrain validate`: the run itself: settings, world and collectives, the
 * golden run's reference, the checks (checks.c), rank 0's judgement (judge.c) printed
 * (tables.c, report_json.c), and the one cleanup path. See validate.h for the checks,
 * validate_impl.h for how the files divide the work, docs/validate.md for the user's version.
 *
 * Every rank measures itself and sends its numbers to everybody (allgather); rank 0 judges,
 * attributes each failure to a rank and its host, prints, and broadcasts the exit code so that
 * every rank returns the same one. The measurements live in bench.c, allreduce.c and
 * golden.c (this directory); the command line in cli/validate.c.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ddp_build.h"
#include "backend/backend.h"
#include "backend/select.h"
#include "comm/comm.h"
#include "comm/liveness.h"
#include "core/ini.h"
#include "dist/world.h"
#include "core/fileio.h"
#include "core/paths.h"
#include "core/testhooks.h"
#include "core/util.h"
#include "validate/validate_impl.h"
#if HAVE_CUDA
#include "backend/cuda.h"
#endif

/* The GPU is validated where NCCL can reduce on it. */
#if HAVE_NCCL
#define GPU_DEVICE DDP_DEVICE_AUTO
#else
#define GPU_DEVICE DDP_DEVICE_CPU
#endif

/* ---- references -------------------------------------------------------------------------- */

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The reference for backend and W: an explicit FILE or DIR, else the shipped directory
 * (core/paths.h: the install's or the build tree's) or the one under the working directory.
 * Returns 1 with path filled, 0 with the places looked at in why. */
static int find_reference(const char *given, const char *backend, int W, char *path, size_t len,
                          char *why, size_t whylen)
{
    char name[64];
    snprintf(name, sizeof name, "%s-w%d.ref", backend, W);
    if (given && given[0]) {
        if (is_dir(given))
            snprintf(path, len, "%s/%s", given, name);
        else
            snprintf(path, len, "%s", given);
        if (is_file(path))
            return 1;
        struct stat st;
        if (stat(path, &st) != 0)
            ddp_err(why, whylen, "%s does not exist", path);
        else /* a FIFO would block the read for good: named for what it is */
            ddp_err(why, whylen,
                    "%s is a %s, not a reference file; give a file recorded with --record", path,
                    S_ISFIFO(st.st_mode)   ? "FIFO"
                    : S_ISCHR(st.st_mode)  ? "character device"
                    : S_ISSOCK(st.st_mode) ? "socket"
                                           : "special file");
        return 0;
    }
    char rel[128], shipped[DDP_PATH_MAX];
    snprintf(rel, sizeof rel, "configs/validate-ref/%s", name);
    if (ddp_paths_find(rel, path, len)) /* the install's, or the source tree's */
        return 1;
    snprintf(shipped, sizeof shipped, "%s", path);
    snprintf(path, len, "configs/validate-ref/%s", name);
    if (is_file(path))
        return 1;
    ddp_err(why, whylen,
            "none for the %s backend on %d rank%s (%s not found, nor in ./configs/validate-ref/); "
            "record one on a trusted node with --record",
            backend, W, W == 1 ? "" : "s", shipped);
    return 0;
}

/* ---- the command ------------------------------------------------------------------------- */

/* The backend and collectives this rank validates with: where the build has CUDA and NCCL
 * and the driver reports GPUs (as training with device = auto), the rank's bound GPU
 * (dist/binding.h) and NCCL, so the GEMM, the all-reduces and the golden run exercise the
 * GPU path; else the CPU backend and comm auto. *device: the CUDA ordinal, -1 for the CPU.
 * Returns 0, or -1 with one line in err (exit DDP_EXIT_LAUNCH). */
static int choose_device(const struct ddp_world *w, double timeout_s, const struct ddp_backend **be,
                         struct ddp_comm_opts *o, int *device, char *err, size_t errlen)
{
    struct ddp_device_choice dev;
    *o = ddp_comm_opts_of(DDP_COMM_AUTO, timeout_s);
    if (ddp_backend_select(GPU_DEVICE, 0, 0, w->local_rank, w->local_size, &dev, err, errlen) != 0)
        return -1;
    *be = dev.be;
    *device = dev.device;
    if (dev.device >= 0) {
        o->backend = DDP_COMM_NCCL;
        o->device = dev.device;
    }
    return 0;
}

/* The collectives of options o: on GPUs the NCCL id goes as `[dist] bootstrap = auto` sends
 * it for training (dist/bootstrap.h ddp_bootstrap_decide), over an MPI communicator made for
 * it alone where MPI started the process; a verdict every rank reaches alike (ddp_comm_check:
 * the build, the launcher) is printed once, by rank 0. Returns 0 or an exit code. */
static int vrun_comm(struct vrun *v, struct ddp_comm_opts *o)
{
    char err[DDP_ERR_LEN * 2];
    const struct ddp_world *w = &v->w;
    if (o->backend == DDP_COMM_NCCL && ddp_bootstrap_wants_mpi(o->bootstrap, w, NULL, 0)) {
        struct ddp_comm_opts mo = ddp_comm_opts_of(DDP_COMM_MPI, o->timeout_s);
        v->boot = ddp_comm_create(&mo, w, err, sizeof err);
        if (!v->boot) {
            ddp_warn("%s", err);
            return DDP_EXIT_LAUNCH;
        }
        o->bootstrap = DDP_BOOTSTRAP_MPI;
        o->boot_comm = v->boot;
    }
    if (ddp_comm_check(o, w, err, sizeof err) != 0) {
        if (w->rank == 0)
            ddp_warn("%s", err);
        return DDP_EXIT_LAUNCH;
    }
    v->c = ddp_comm_create(o, w, err, sizeof err);
    if (!v->c) {
        ddp_warn("%s", err);
        return DDP_EXIT_LAUNCH;
    }
    return 0;
}

/* The level's settings (see struct level). */
static void level_of(const struct vrun *v, struct level *L)
{
    const struct ddp_validate_config *c = &v->cfg;
    const int q = v->a->level == DDP_VALIDATE_QUICK, lg = v->a->level == DDP_VALIDATE_LONG;
    L->name = q ? "quick" : lg ? "long" : "standard";
    L->gemm_n = q ? c->gemm_n_quick : c->gemm_n;
    L->gemm_reps = q ? c->gemm_reps_quick : c->gemm_reps;
    L->gemm_s = q ? c->gemm_s_quick : c->gemm_s;
    L->triad_mib = q ? c->triad_mib_quick : c->triad_mib;
    L->triad_reps = q ? c->triad_reps_quick : c->triad_reps;
    L->triad_s = q ? c->triad_s_quick : c->triad_s;
    L->ar_max = q ? c->ar_max_bytes_quick : lg ? c->ar_max_bytes_long : c->ar_max_bytes;
    L->ar_blocks = q ? c->ar_blocks_quick : c->ar_blocks;
    L->golden_steps = v->a->record || !q ? c->golden_steps : c->golden_steps_quick;
    L->burn_s = lg ? c->burn_s : 0;
    if (v->have_expect && v->expect.gemm_n)
        L->gemm_n = v->expect.gemm_n;
    if (v->have_expect && v->expect.triad_mib)
        L->triad_mib = v->expect.triad_mib;
}

/* The triad's three buffers of L->triad_mib MiB fit in the memory this process may still
 * allocate: a [triad] mib beyond it is a settings error now, not an out-of-memory death
 * mid-run. Returns 0 or DDP_EXIT_USAGE (printed). */
static int check_triad_memory(const struct vrun *v)
{
    const char *which = NULL;
    const double need = 3.0 * (double)v->L.triad_mib * 1048576.0;
    const size_t avail = ddp_mem_available(&which);
    if (avail == SIZE_MAX || need <= (double)avail)
        return 0;
    const int from_expect = v->have_expect && v->expect.triad_mib;
    const char *src = from_expect ? "--expect " : v->a->config ? "--config " : "";
    const char *file = from_expect ? v->expect.path : v->a->config ? v->a->config : "settings";
    char b1[32], b2[32];
    ddp_warn("validate: %s%s: [triad] mib = %lld asks for 3 buffers of %lld MiB (%s) but this "
             "process has %s available (%s); lower [triad] mib",
             src, file, (long long)v->L.triad_mib, (long long)v->L.triad_mib,
             ddp_fmt_bytes(need, b1, sizeof b1), ddp_fmt_bytes((double)avail, b2, sizeof b2),
             which ? which : "MemAvailable");
    return DDP_EXIT_USAGE;
}

/* --slurm-health: one process per node whatever a prolog's environment says (slurmd runs it
 * outside any job step): the launchers' variables are hidden from world detection. */
static const char *env_single(void *ctx, const char *name)
{
    (void)ctx;
    static const char *const hidden[] = {"SLURM_", "OMPI_",      "PMI",         "PMIX",
                                         "RANK",   "WORLD_SIZE", "LOCAL_",      "MASTER_",
                                         "GROUP_", "ROLE_",      "TORCHELASTIC"};
    for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++)
        if (!strncmp(name, hidden[i], strlen(hidden[i])))
            return NULL;
    return getenv(name);
}

/* Settings, expectations and faults; usage errors. Returns 0 or DDP_EXIT_USAGE (printed). */
static int vrun_settings(struct vrun *v)
{
    const struct ddp_validate_args *a = v->a;
    char err[DDP_ERR_LEN * 2];
    ddp_validate_config_defaults(&v->cfg);
    if (a->config && ddp_validate_config_load(&v->cfg, a->config, err, sizeof err) != 0) {
        fprintf(stderr, "ddptrain: validate: %s\n", err);
        return DDP_EXIT_USAGE;
    }
    if (a->expect) {
        if (ddp_validate_expect_load(&v->expect, a->expect, err, sizeof err) != 0) {
            fprintf(stderr, "ddptrain: validate: --expect %s\n", err);
            return DDP_EXIT_USAGE;
        }
        v->have_expect = 1;
    }
    if (a->reference && a->record) {
        fprintf(stderr, "ddptrain: validate: --record and --reference exclude each other\n");
        return DDP_EXIT_USAGE;
    }
    if (a->expect && a->record_expect) {
        fprintf(stderr, "ddptrain: validate: --expect and --record-expect exclude each other\n");
        return DDP_EXIT_USAGE;
    }
    if (ddp_validate_faults_parse(&v->faults, ddp_test_hooks()->validate_fault, err, sizeof err) !=
        0) {
        fprintf(stderr, "ddptrain: validate: %s\n", err);
        return DDP_EXIT_USAGE;
    }
    if (a->slurm_health && v->cfg.rounds > 2)
        v->cfg.rounds = 2; /* the budget is short: one retry */
    level_of(v, &v->L);
    return check_triad_memory(v);
}

/* Settings, faults, world and collectives (as training sets them up), the liveness watch and
 * threads. Returns 0 or an exit code (the reason printed). */
static int vrun_start(struct vrun *v)
{
    char err[DDP_ERR_LEN * 2];
    int rc = vrun_settings(v);
    if (rc)
        return rc;
    struct ddp_world *w = &v->w;
    if (ddp_world_detect(w, v->a->slurm_health ? env_single : NULL, NULL, 0, err, sizeof err) !=
        0) {
        fprintf(stderr, "ddptrain: %s\n", err);
        return DDP_EXIT_LAUNCH;
    }
    ddp_log_set_identity(w->host, w->rank, w->world_size);
    ddp_validate_faults_locate(&v->faults, w->host);
    if (w->warning[0] && w->rank == 0)
        ddp_warn("%s", w->warning);
    struct ddp_comm_opts copts;
    if (choose_device(w, v->cfg.timeout_s, &v->be, &copts, &v->device, err, sizeof err) != 0) {
        ddp_warn("%s", err);
        return DDP_EXIT_LAUNCH;
    }
    rc = vrun_comm(v, &copts);
    if (rc)
        return rc;
    /* a dead peer stops every rank within seconds (liveness.h) */
    v->live = w->world_size > 1 ? ddp_liveness_create(v->c, w->host) : NULL;
    if (v->live)
        ddp_comm_set_peer_probe(v->c, ddp_liveness_probe, v->live);
    v->W = w->world_size;
    v->me = w->rank;
    v->threads = choose_threads(&v->cfg, w);
    if (v->be->set_threads)
        v->be->set_threads(v->threads);
    return 0;
}

/* Rank 0, before any measurement: the files the run will write (--json, --record,
 * --record-expect) can be written, so that a bad path is a usage error now, not a failed check
 * after minutes of work. Returns 0 or DDP_EXIT_USAGE (printed). */
static int check_outputs(struct vrun *v)
{
    const struct ddp_validate_args *a = v->a;
    const char *opt[] = {"--json", "--record", "--record-expect"};
    const char *path[] = {a->json, a->record ? v->rec_path : NULL, a->record_expect};
    char err[DDP_ERR_LEN + DDP_PATH_MAX];
    const char *in_opt[] = {"--config", "--expect", "--reference"};
    const char *in[] = {a->config, a->expect, a->record ? NULL : a->reference};
    for (int i = 0; i < 3; i++) {
        if (path[i] && ddp_file_check_output(opt[i], path[i], err, sizeof err) != 0) {
            ddp_warn("validate: %s", err);
            return DDP_EXIT_USAGE;
        }
        for (int k = 0; k < 3; k++)
            if (path[i] && ddp_file_same(path[i], in[k])) {
                ddp_warn("validate: %s %s is %s %s: validate never writes over its input; "
                         "give another %s",
                         opt[i], path[i], in_opt[k], in[k], opt[i]);
                return DDP_EXIT_USAGE;
            }
    }
    return 0;
}

/* Rank 0 finds and reads the reference now: a bad file is a usage error before any work.
 * Returns the code every rank agrees on. */
static int vrun_reference(struct vrun *v)
{
    const char *record = v->a->record;
    const char *given = v->a->reference       ? v->a->reference
                        : v->cfg.reference[0] ? v->cfg.reference
                                              : NULL;
    char err[DDP_ERR_LEN * 2];
    int code = 0;
    if (v->me == 0 && !record) {
        if (find_reference(given, v->be->name, v->W, v->ref_path, sizeof v->ref_path, v->no_ref,
                           sizeof v->no_ref)) {
            if (ddp_validate_ref_read(&v->ref, v->ref_path, err, sizeof err) != 0) {
                ddp_warn("validate: %s", err);
                code = DDP_EXIT_USAGE;
            } else if (strcmp(v->ref.spec, DDP_VALIDATE_GOLDEN_SPEC) != 0 ||
                       strcmp(v->ref.backend, v->be->name) != 0) {
                snprintf(v->no_ref, sizeof v->no_ref,
                         "%s was recorded for another golden run or backend (%s: %s)", v->ref_path,
                         v->ref.backend, v->ref.spec);
                ddp_validate_ref_free(&v->ref);
            } else if (v->ref.world_size != v->W) {
                snprintf(v->no_ref, sizeof v->no_ref, "%s is for %d rank%s, this run has %d",
                         v->ref_path, v->ref.world_size, v->ref.world_size == 1 ? "" : "s", v->W);
                ddp_validate_ref_free(&v->ref);
            } else {
                v->have_ref = 1;
            }
        } else if (given) {
            ddp_warn("validate: reference %s", v->no_ref);
            code = DDP_EXIT_USAGE;
        }
    }
    if (v->me == 0 && record) {
        if (is_dir(record))
            snprintf(v->rec_path, sizeof v->rec_path, "%s/%s-w%d.ref", record, v->be->name, v->W);
        else
            snprintf(v->rec_path, sizeof v->rec_path, "%s", record);
    }
    if (v->me == 0 && !code)
        code = check_outputs(v);
    return ddp_comm_agree(v->c, code, NULL);
}

/* After the verdict: --record-expect writes its file (only from a clean run on an idle node),
 * --slurm-health --drain drains a failing node. Returns the exit code. */
static int vrun_after(struct vrun *v, struct report *rep, int verdict)
{
    char err[DDP_ERR_LEN * 2];
    if (v->a->record_expect && !rep->nhard) {
        double load = 0;
        for (int r = 0; r < v->W; r++)
            load = fmax(load, rank_load(v->all, v->W, r, 1));
        if (load >= v->cfg.foreign_load_max && v->cfg.foreign_load_max > 0) {
            ddp_warn("validate: not recorded: other processes held the CPU %.0f%% of the time "
                     "it was measuring; record expectations on an idle node",
                     100 * load);
            return DDP_EXIT_RETEST;
        }
        if (write_expect(v, v->ar_all, err, sizeof err) != 0) {
            ddp_warn("%s", err);
            return DDP_EXIT_RUNTIME;
        }
        ddp_log("recorded expectations (%d rounds, margin %g) in %s", v->rec_rounds, v->a->margin,
                v->a->record_expect);
    }
    if (v->a->slurm_health && verdict == DDP_EXIT_RETEST)
        verdict = 0; /* a loaded node is never drained, and a prolog must not fail for it */
    if (v->a->slurm_health && v->a->drain && rep->nhard) {
        const struct failure *f = rep->fail;
        while (f->retest)
            f++;
        char reason[REASON_LEN + 64], node[256];
        snprintf(reason, sizeof reason, "ddptrain validate: %s: %s", f->check, f->reason);
        if (ddp_validate_drain(reason, node, sizeof node, err, sizeof err) != 0)
            ddp_warn("validate: %s", err);
        else
            ddp_log("drained node %s: %.200s", node, reason);
    }
    return verdict;
}

/* Rank 0 judges, records, prints and writes the report. Returns its verdict (exit code). */
static int vrun_judge(struct vrun *v)
{
    const int W = v->W;
    const char *record = v->a->record;
    char err[DDP_ERR_LEN * 2];
    struct report rep = {.W = W, .ri = v->all};
    double med_gemm = median_of(v->all, W, 0), med_triad = median_of(v->all, W, 1);
    judge_node(&rep, v);
    judge_rates(&rep, v);
    judge_gpu(&rep, v); /* gpu.c */
    judge_allreduce(&rep, v->ar_all, v->nsizes);
    judge_busbw(&rep, v, v->ar_all, v->nsizes);
    judge_gpu_health(&rep, v);
    if (W == 1 && !v->have_expect)
        add_warning(&rep, "one rank: its rates were compared with nothing; give --expect FILE "
                          "for absolute floors (configs/expect-*.ini)");
    struct golden_verdict gv;
    judge_golden(&rep, &v->g, v->have_ref ? &v->ref : NULL, v->ref_path, v->no_ref,
                 v->cfg.golden_rtol, record != NULL, &gv);
    int *host_of = ddp_malloc(sizeof(int) * (size_t)W);
    int *first_rank = ddp_malloc(sizeof(int) * (size_t)W);
    struct run_facts rf = {v->L.name,
                           v->nsizes,
                           v->L.gemm_n,
                           v->steps,
                           v->L.triad_mib,
                           ddp_launcher_name(v->w.launcher),
                           ddp_comm_name(v->c),
                           v->be->name,
                           med_gemm,
                           med_triad,
                           0,
                           0,
                           NULL,
                           0,
                           0};
    rf.nnodes = group_hosts(v->all, W, host_of, first_rank);
    rf.expect = v->have_expect ? v->expect.path : NULL;
    rf.ar_measured = v->nsizes > 0;
    rf.retest_exit = v->a->slurm_health ? 0 : DDP_EXIT_RETEST;
    if (record && !strcmp(gv.verdict, "PASS")) {
        if (ddp_validate_ref_write(&v->g, v->be->name, v->rec_path, err, sizeof err) != 0)
            add_failure(&rep, 0, "record", "rank 0 on %s: %s", v->all[0].host, err);
        else
            ddp_log("recorded the golden run (%d steps, %d rank%s) as a reference: %s", v->steps, W,
                    W == 1 ? "" : "s", v->rec_path);
    } else if (record) {
        add_warning(&rep, "no reference recorded: the golden run failed");
    }
    rf.elapsed = ddp_now() - v->t_start;
    print_report(&rep, &rf, v->ar_all, &gv, &v->g, host_of, first_rank, v->cfg.min_fraction);
    int verdict = rep.nhard ? DDP_EXIT_RUNTIME : rep.nretest ? DDP_EXIT_RETEST : 0;
    if (v->a->json && write_json(v->a->json, &rep, &rf, &v->cfg, v->ar_all, &gv, &v->g, host_of,
                                 first_rank, err, sizeof err) != 0) {
        ddp_warn("%s", err);
        verdict = DDP_EXIT_RUNTIME;
    }
    verdict = vrun_after(v, &rep, verdict);
    free(host_of);
    free(first_rank);
    free(rep.fail);
    free(rep.warn);
    return verdict;
}

int ddp_validate_run(const struct ddp_validate_args *a)
{
    static struct vrun run; /* large; one per process */
    struct vrun *v = &run;
    memset(v, 0, sizeof *v);
    v->a = a;
    v->t_start = ddp_now();
    v->lock = -1;
    if (a->slurm_health)
        ddp_validate_budget_arm(a->budget_s);
    int rc = vrun_start(v);
    if (!rc)
        rc = vrun_reference(v);
    if (!rc)
        rc = vrun_checks(v);
    if (!rc) {
        ddp_validate_budget_phase(4);
        int64_t verdict = v->me == 0 ? vrun_judge(v) : 0;
        ddp_comm_broadcast(v->c, &verdict, sizeof verdict, 0);
        rc = (int)verdict;
    }
    ddp_validate_budget_disarm();
    /* the one cleanup path */
    ddp_validate_golden_free(&v->g);
    gpu_health_free(v);
    free(v->rows);
    free(v->ar_all);
    free(v->all);
    machine_unlock(v->lock);
    ddp_validate_ref_free(&v->ref);
    ddp_comm_destroy(v->c);
    ddp_comm_destroy(v->boot);
    ddp_liveness_destroy(v->live); /* goodbye after the last collective */
    return rc;
}

/*
 * cli/env.c - the `ddptrain hostlist`, `ddptrain env` and hidden `ddptrain bootstrap-test`
 * subcommands (cli.h): thin wrappers that print what dist/ (hostlist.c, world.c, binding.c,
 * bootstrap.c) computes. Argument handling only; the rules
 * live in those modules.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "cli/cli.h"
#include "ddp_build.h"
#include "comm/comm.h"
#include "dist/binding.h"
#include "dist/bootstrap.h"
#include "dist/hostlist.h"
#include "launch/launcher.h"
#include "dist/world.h"
#include "core/testhooks.h"
#include "core/hash.h"
#include "core/util.h"
#if HAVE_CUDA
#include "backend/cuda.h"
#endif

/* Most fake GPUs DDP_TEST_FAKE_GPUS may claim (tests only): the binding module's own bound. */
#define FAKE_GPUS_MAX DDP_BINDING_MAX_DEVICES
/* Defaults and bounds of bootstrap-test: an NCCL id is 128 bytes. */
#define BT_DEFAULT_LEN 128
#define BT_DEFAULT_TIMEOUT_S 60.0
#define BT_MAX_DELAY_S 3600.0

static const char HOSTLIST_USAGE[] =
    "usage: ddptrain hostlist [--] EXPR\n"
    "Expand a Slurm hostlist (e.g. 'gpu[01-04],login1') and print one host a line,\n"
    "as `scontrol show hostnames` does. Exit 0, or 2 with the reason on stderr.\n";

static const char ENV_USAGE[] =
    "usage: ddptrain env\n"
    "Print how this process sees the job, one line of key=value fields:\n"
    "rank local_rank world_size local_size node_id num_nodes host master_host master_addr\n"
    "master_port device gpus_visible launcher job_id step_id mpi cpus_per_task.\n"
    "device is the GPU this rank would bind (cuda:N) or cpu; gpus_visible lists what\n"
    "CUDA_VISIBLE_DEVICES (or SLURM_STEP_GPUS) shows it, or none.\n"
    "Run it under the launcher (srun ddptrain env, mpirun ddptrain env). Exit 0, or 4 with\n"
    "the reason on stderr (a bad launch environment, or GPUs that cannot be bound).\n";

static const char BT_USAGE[] =
    "usage: ddptrain bootstrap-test [--via auto|pmi2|mpi|tcp] [--len N] [--timeout S]\n"
    "                               [--delay S]\n"
    "Rank 0 publishes N random bytes (default 128, an NCCL id) through the bootstrap; every\n"
    "rank prints rank=R world_size=W host=H master=ADDR:PORT via=KIND len=N hash=X ms=T;\n"
    "all hashes must agree.\n"
    "--delay S: ranks other than 0 wait S seconds before joining. Exit 0, 2 or 4.\n";

static int is_help(const char *a)
{
    return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0;
}

int ddp_cmd_hostlist(int argc, char **argv)
{
    int i = 1;
    if (argc == 2 && is_help(argv[1])) {
        fputs(HOSTLIST_USAGE, stdout);
        return DDP_EXIT_OK;
    }
    if (i < argc && strcmp(argv[i], "--") == 0)
        i++;
    if (argc - i != 1) {
        ddp_warn("hostlist: expected exactly one EXPR argument, got %d; quote the expression, "
                 "e.g. ddptrain hostlist 'n[1-4]'",
                 argc - i);
        fputs(HOSTLIST_USAGE, stderr);
        return DDP_EXIT_USAGE;
    }
    char err[DDP_ERR_LEN];
    char **hosts;
    int n;
    if (ddp_hostlist_expand(argv[i], &hosts, &n, err, sizeof err) < 0) {
        ddp_warn("%s", err);
        return DDP_EXIT_USAGE;
    }
    for (int k = 0; k < n; k++)
        puts(hosts[k]);
    ddp_hostlist_free(hosts, n);
    if (fflush(stdout) != 0) {
        ddp_warn("hostlist: cannot write to standard output");
        return DDP_EXIT_RUNTIME;
    }
    return DDP_EXIT_OK;
}

/* This process's world, with its identity set for log lines and any warning printed.
 * Returns 0, or -1 with the reason printed (exit DDP_EXIT_LAUNCH). */
static int detect_world(struct ddp_world *w)
{
    char err[DDP_ERR_LEN];
    if (ddp_world_detect(w, NULL, NULL, 0, err, sizeof err) < 0) {
        ddp_warn("%s", err);
        return -1;
    }
    ddp_log_set_identity(w->host, w->rank, w->world_size);
    if (w->warning[0])
        ddp_warn("warning: %s", w->warning);
    return 0;
}

int ddp_cmd_env(int argc, char **argv)
{
    if (argc == 2 && is_help(argv[1])) {
        fputs(ENV_USAGE, stdout);
        return DDP_EXIT_OK;
    }
    if (argc != 1) {
        ddp_warn("env: unexpected argument '%s'; ddptrain env takes none", argv[1]);
        fputs(ENV_USAGE, stderr);
        return DDP_EXIT_USAGE;
    }
    struct ddp_world w;
    char err[DDP_ERR_LEN];
    if (detect_world(&w) != 0)
        return DDP_EXIT_LAUNCH;

    /* GPU binding: the driver's device count comes from DDP_TEST_FAKE_GPUS=N (tests: N devices
     * on this node), else from the CUDA backend where one is built (-1 without a usable
     * driver). Without either the rank runs on the CPU and only the visible list is shown. */
    int driver = -1;
    const char *fake = ddp_test_hooks()->fake_gpus;
    if (fake && *fake) {
        int64_t nf;
        if (ddp_parse_i64(fake, &nf) < 0 || nf < 0 || nf > FAKE_GPUS_MAX) {
            ddp_warn("DDP_TEST_FAKE_GPUS=\"%.20s\" is not a device count in 0..%d; unset it (it "
                     "is for tests)",
                     fake, FAKE_GPUS_MAX);
            return DDP_EXIT_LAUNCH;
        }
        driver = ddp_binding_fake_driver_count((int)nf, getenv("CUDA_VISIBLE_DEVICES"));
    }
#if HAVE_CUDA
    else {
        driver = ddp_cuda_device_count();
    }
#endif
    struct ddp_binding b;
    char device[32] = "cpu";
    int brc =
        ddp_binding_compute(w.local_rank, w.local_size, driver, 0, NULL, NULL, &b, err, sizeof err);
    if (driver >= 0) {
        if (brc < 0) {
            ddp_warn("%s", err);
            return DDP_EXIT_LAUNCH;
        }
        if (b.note[0])
            ddp_warn("warning: %s", b.note);
        if (b.device >= 0)
            snprintf(device, sizeof device, "cuda:%d", b.device);
    }
    printf("rank=%d local_rank=%d world_size=%d local_size=%d node_id=%d num_nodes=%d host=%s "
           "master_host=%s master_addr=%s master_port=%d device=%s gpus_visible=%s launcher=%s "
           "job_id=%" PRId64 " step_id=%" PRId64 " mpi=%d cpus_per_task=%d\n",
           w.rank, w.local_rank, w.world_size, w.local_size, w.node_id, w.num_nodes, w.host,
           w.master_host, w.master_addr, w.master_port, device, b.visible_list,
           ddp_launcher_name(w.launcher), w.job_id, w.step_id, w.mpi_launched, w.cpus_per_task);
    if (fflush(stdout) != 0) {
        ddp_warn("env: cannot write to standard output");
        return DDP_EXIT_RUNTIME;
    }
    return DDP_EXIT_OK;
}

int ddp_cmd_bootstrap_test(int argc, char **argv)
{
    enum ddp_bootstrap_kind kind = DDP_BOOTSTRAP_AUTO;
    double timeout_s = BT_DEFAULT_TIMEOUT_S, delay_s = 0;
    int64_t len = BT_DEFAULT_LEN;
    char err[DDP_ERR_LEN];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (is_help(a)) {
            fputs(BT_USAGE, stdout);
            return DDP_EXIT_OK;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = !v;
        if (!bad && strcmp(a, "--via") == 0)
            bad = ddp_bootstrap_parse(v, &kind, err, sizeof err) < 0;
        else if (!bad && strcmp(a, "--len") == 0)
            bad = ddp_parse_i64(v, &len) < 0 || len < 1 || len > DDP_BOOTSTRAP_MAX_LEN;
        else if (!bad && strcmp(a, "--timeout") == 0)
            bad = ddp_parse_f64(v, &timeout_s) < 0 || !(timeout_s > 0) || timeout_s > 1e6;
        else if (!bad && strcmp(a, "--delay") == 0)
            bad = ddp_parse_f64(v, &delay_s) < 0 || !(delay_s >= 0) || delay_s > BT_MAX_DELAY_S;
        else
            bad = 1;
        if (bad) {
            ddp_warn("bootstrap-test: bad argument '%.40s%s%.40s' (--len 1..%d, --timeout and "
                     "--delay in seconds)",
                     a, v ? " " : "", v ? v : "", DDP_BOOTSTRAP_MAX_LEN);
            fputs(BT_USAGE, stderr);
            return DDP_EXIT_USAGE;
        }
        i++;
    }

    struct ddp_world w;
    if (detect_world(&w) != 0)
        return DDP_EXIT_LAUNCH;

    /* The MPI way needs the communicator; auto takes it where the trainer would
     * (ddp_bootstrap_decide). */
    ddp_comm *comm = NULL;
    if (ddp_bootstrap_wants_mpi(kind, &w, NULL, 0)) {
        struct ddp_comm_opts o = ddp_comm_opts_of(DDP_COMM_MPI, timeout_s);
        comm = ddp_comm_create(&o, &w, err, sizeof err);
        if (!comm) {
            ddp_warn("%s", err);
            return DDP_EXIT_LAUNCH;
        }
    }

    unsigned char *blob = ddp_calloc((size_t)len, 1);
    if (w.rank == 0 && getrandom(blob, (size_t)len, 0) != (ssize_t)len)
        for (int64_t i = 0; i < len; i++) /* never expected: getrandom of <= 64 KiB */
            blob[i] = (unsigned char)(rand() ^ i);
    if (w.rank != 0 && delay_s > 0) {
        struct timespec ts = {(time_t)delay_s, (long)((delay_s - (double)(time_t)delay_s) * 1e9)};
        nanosleep(&ts, NULL);
    }
    struct ddp_bootstrap_bcast bb;
    const struct ddp_bootstrap_bcast *bcast = ddp_comm_bootstrap_bcast(comm, &bb);
    enum ddp_bootstrap_kind used = ddp_bootstrap_choose(kind, bcast);
    double t0 = ddp_now();
    if (ddp_bootstrap_share(&w, kind, bcast, blob, (size_t)len, timeout_s, err, sizeof err) < 0) {
        ddp_warn("%s", err);
        free(blob);
        if (comm)
            ddp_comm_abort(comm, DDP_EXIT_LAUNCH);
        return DDP_EXIT_LAUNCH;
    }
    double ms = (ddp_now() - t0) * 1e3;
    printf("rank=%d world_size=%d host=%s master=%s:%d via=%s len=%" PRId64 " hash=%016" PRIx64
           " ms=%.1f\n",
           w.rank, w.world_size, w.host, w.master_addr, w.master_port, ddp_bootstrap_name(used),
           len, ddp_fnv1a64(DDP_FNV1A64_INIT, blob, (size_t)len), ms);
    free(blob);
    int rc = fflush(stdout) != 0 ? DDP_EXIT_RUNTIME : DDP_EXIT_OK;
    ddp_comm_destroy(comm);
    ddp_bootstrap_finalize();
    return rc;
}

/*
 * cmd_launch.c - the `ddptrain hostlist` and `ddptrain env` subcommands (cli.h): thin
 * wrappers that print what hostlist.c and world.c compute. Argument handling only; the rules
 * live in those modules.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "launch/hostlist.h"
#include "launch/world.h"
#include "util.h"

static const char HOSTLIST_USAGE[] =
    "usage: ddptrain hostlist [--] EXPR\n"
    "Expand a Slurm hostlist (e.g. 'gpu[01-04],login1') and print one host a line,\n"
    "as `scontrol show hostnames` does. Exit 0, or 2 with the reason on stderr.\n";

static const char ENV_USAGE[] =
    "usage: ddptrain env\n"
    "Print how this process sees the job, one line of key=value fields:\n"
    "rank local_rank world_size local_size node_id num_nodes host master_host master_addr\n"
    "master_port device launcher job_id step_id mpi cpus_per_task.\n"
    "Run it under the launcher (srun ddptrain env, mpirun ddptrain env). Exit 0, or 4 with\n"
    "the reason on stderr.\n";

static int is_help(const char *a) { return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0; }

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
                 "e.g. ddptrain hostlist 'n[1-4]'", argc - i);
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
    if (ddp_world_detect(&w, NULL, NULL, 0, err, sizeof err) < 0) {
        ddp_warn("%s", err);
        return DDP_EXIT_LAUNCH;
    }
    ddp_log_set_identity(w.host, w.rank, w.world_size);
    if (w.warning[0])
        ddp_warn("warning: %s", w.warning);
    printf("rank=%d local_rank=%d world_size=%d local_size=%d node_id=%d num_nodes=%d host=%s "
           "master_host=%s master_addr=%s master_port=%d device=cpu launcher=%s job_id=%" PRId64
           " step_id=%" PRId64 " mpi=%d cpus_per_task=%d\n",
           w.rank, w.local_rank, w.world_size, w.local_size, w.node_id, w.num_nodes, w.host,
           w.master_host, w.master_addr, w.master_port, ddp_launcher_name(w.launcher), w.job_id,
           w.step_id, w.mpi_launched, w.cpus_per_task);
    if (fflush(stdout) != 0) {
        ddp_warn("env: cannot write to standard output");
        return DDP_EXIT_RUNTIME;
    }
    return DDP_EXIT_OK;
}

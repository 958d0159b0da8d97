/*
 * cli/launch.c - the arguments of `ddptrain launch` (launch/launcher.h parses them into
 * struct ddp_launch_opts and runs the launch).
 */
#include <stdio.h>

#include "cli/cli.h"
#include "core/util.h"
#include "launch/launcher.h"

static const char USAGE[] =
    "usage: ddptrain launch --nproc-per-node N [--nnodes M --node-rank R --master-addr A\n"
    "                       --master-port P] [--spawn auto|env|mpirun] [--grace S]\n"
    "                       JOB.ini [ARGS...]\n"
    "Start N ranks on this node as torch.distributed.launch does (one launcher per node).\n"
    "Each rank runs `ddptrain JOB.ini ARGS...` with RANK, WORLD_SIZE, LOCAL_RANK,\n"
    "LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set. CPU ranks on one node run under\n"
    "mpirun (--spawn auto); --spawn env starts them directly. SIGINT, SIGTERM and SIGUSR1\n"
    "are forwarded; when a rank fails the others are stopped (SIGTERM, SIGKILL after S\n"
    "seconds, default 10) and its exit code is returned. See docs/launch.md.\n";

int ddp_cmd_launch(int argc, char **argv)
{
    struct ddp_launch_opts o;
    char err[DDP_ERR_LEN];
    int prc = ddp_launch_parse(argc, argv, &o, err, sizeof err);
    if (prc == 1) {
        fputs(USAGE, stdout);
        return DDP_EXIT_OK;
    }
    if (prc < 0) {
        fprintf(stderr, "ddptrain: %s\n", err);
        fputs(USAGE, stderr);
        return DDP_EXIT_USAGE;
    }
    return ddp_launch_run(&o, argc, argv);
}

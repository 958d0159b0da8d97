/*
 * launcher.h - `ddptrain launch`: start the ranks of one node without Slurm, the way
 * torch.distributed.launch / torchrun do, and `ddptrain bootstrap-test`, which checks the
 * bootstrap under any launcher. docs/launch.md is the user's manual.
 *
 *   ddptrain launch --nproc-per-node N [--nnodes M --node-rank R --master-addr A
 *                   --master-port P] [--spawn auto|env|mpirun] [--grace S] JOB.ini [ARGS...]
 *
 * Two ways to start the N local ranks (--spawn):
 *   env     fork N children, each with its own environment: RANK = R*N + l, WORLD_SIZE = M*N,
 *           LOCAL_RANK = l, LOCAL_WORLD_SIZE = N, GROUP_RANK = R, GROUP_WORLD_SIZE = M,
 *           MASTER_ADDR, MASTER_PORT, DDP_BOOTSTRAP_TOKEN (one per launch); argv = this
 *           binary (/proc/self/exe) followed by JOB.ini and ARGS. Each child gets its own
 *           process group and dies with the launcher (PR_SET_PDEATHSIG). SIGINT, SIGTERM,
 *           SIGUSR1 and SIGUSR2 are forwarded to every child. When a child exits non-zero
 *           (other than 75, "requeue me", which every rank may give after a signal) the
 *           launcher names its rank, sends SIGTERM to the others and SIGKILL to what is left
 *           after the grace period, and exits with that child's code (128 + signal for a
 *           child killed by one).
 *   mpirun  `mpirun -n N --oversubscribe --bind-to none` (plus --allow-run-as-root as root)
 *           runs the same argv, with MASTER_ADDR, MASTER_PORT and DDP_BOOTSTRAP_TOKEN in the
 *           environment: CPU ranks need MPI for their collectives. SIGUSR1/SIGUSR2 go to
 *           mpirun, which forwards them; SIGINT/SIGTERM go straight to the ranks (mpirun
 *           itself would abort the job at once, before a checkpoint). mpirun names a failing
 *           rank itself and ends the others (SIGTERM, SIGKILL 1 s later: --grace does not
 *           apply) as soon as any rank exits non-zero, 75 included; its exit code is the
 *           launcher's.
 *   auto    mpirun when --nnodes is 1, N > 1 and the ranks run on the CPU (no NCCL in this
 *           build, or its CUDA driver reports no device; DDP_TEST_FAKE_GPUS=N stands in for the
 *           driver in tests); env otherwise.
 * The children's environment drops what belongs to an outer launcher (SLURM_PROCID,
 * SLURM_LOCALID, SLURM_NODEID, SLURM_GTIDS, SLURM_STEP_ID, PMI_*, PMIX_*, OMPI_COMM_WORLD_*,
 * torchrun's variables), so `srun ... ddptrain launch` works: the children see only the
 * launch.
 * Port: --master-port, else MASTER_PORT, else with one node a free port picked now and held
 * by the launcher until it ends (rank 0's rendezvous can still listen on it; nothing else can
 * take it meanwhile), else 29500. Master: --master-addr, required with several nodes;
 * 127.0.0.1 with one.
 * The launcher prints nothing but its own errors; the children print their own lines.
 *
 * What it does not do: restart failed ranks (no elastic mode), pin CPUs, start other nodes
 * (run one launcher per node).
 */
#ifndef DDP_LAUNCH_LAUNCHER_H
#define DDP_LAUNCH_LAUNCHER_H

#include <stddef.h>

#include "dist/world.h"

/* Most local ranks: far above any node's GPU or core count; bounds the launcher's tables. */
#define DDP_LAUNCH_MAX_NPROC 1024
/* Default grace between SIGTERM and SIGKILL after a rank failed, in seconds. */
#define DDP_LAUNCH_GRACE_S 10.0

enum ddp_launch_spawn { DDP_SPAWN_AUTO, DDP_SPAWN_ENV, DDP_SPAWN_MPIRUN };

struct ddp_launch_opts {
    int nproc_per_node, nnodes, node_rank;
    int master_port;                /* 0: not given (MASTER_PORT, a free port or 29500 later) */
    char master_addr[DDP_HOST_MAX]; /* "" when not given */
    enum ddp_launch_spawn spawn;
    double grace_s;
    int first_arg; /* index in argv of JOB.ini (the children's first argument) */
};

/* Parse `launch` arguments (argv[0] is "launch"). Returns 0; 1 when --help was asked (usage
 * printed); -1 with one line in err (caller exits DDP_EXIT_USAGE). */
int ddp_launch_parse(int argc, char **argv, struct ddp_launch_opts *o, char *err, size_t errlen);

/* The environment of local rank local_rank in env mode (local_rank -1: the mpirun
 * environment, without per-rank variables): base (NULL-terminated, e.g. environ) minus an
 * outer launcher's variables, plus the launch's. master_addr/master_port must be final.
 * Returns a NULL-terminated array owned by the caller (ddp_launch_env_free). */
char **ddp_launch_child_env(char *const *base, const struct ddp_launch_opts *o, int local_rank,
                            const char *token);
void ddp_launch_env_free(char **env);

/* Run the launch of o (parsed from argv by ddp_launch_parse; the master's port is settled
 * here): start the ranks, forward signals, wait. Returns the launcher's exit code. */
int ddp_launch_run(struct ddp_launch_opts *o, int argc, char **argv);

#endif

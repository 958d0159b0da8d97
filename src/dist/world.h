/*
 * world.h - who am I in this job: launcher, ranks, sizes, node, the master (host running
 * rank 0) and the port the ranks meet on, read from the environment the launcher left.
 *
 * Detection order (docs/launch.md has the user's version):
 *  1. OpenMPI's mpirun inside a Slurm allocation: OMPI_COMM_WORLD_* present and
 *     SLURM_MPI_TYPE not pmix. The ranks inherit the SLURM_PROCID/NTASKS of the orted step
 *     that mpirun started, so Slurm's numbers are ignored and OpenMPI wins.
 *  2. Slurm step: SLURM_STEP_ID and SLURM_PROCID present. Reads SLURM_PROCID, SLURM_LOCALID,
 *     SLURM_NTASKS, SLURM_NODEID, SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE ("4(x2),3"),
 *     SLURM_STEP_NUM_NODES, and cross-checks them (and SLURM_GTIDS, SLURMD_NODENAME when set).
 *  3. OpenMPI (mpirun): OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE (NODE_RANK is
 *     OpenMPI's per-node rank, validated only). OpenMPI exports no node index: node_id and
 *     num_nodes come from OpenMPI 4's OMPI_MCA_orte_local_daemon_uri / orte_num_nodes when
 *     they parse, else are estimated as rank / local_size and ceil(world_size / local_size).
 *  4. torchrun style: RANK, WORLD_SIZE (both required), LOCAL_RANK, LOCAL_WORLD_SIZE (both or
 *     neither; neither means one rank per node, with a warning), GROUP_RANK / GROUP_WORLD_SIZE
 *     for the node when set, MASTER_ADDR (required when WORLD_SIZE > 1), MASTER_PORT.
 *  5. Single process. Inside an sbatch or salloc shell (SLURM_JOB_ID without SLURM_STEP_ID)
 *     SLURM_NTASKS describes the allocation, not processes that exist: we run as one process
 *     and, when the allocation has several tasks or nodes, put the advice to start the
 *     program with srun into w->warning. We never wait for peers that were never started.
 * Two launchers' variables that disagree on rank or world size are an error naming both,
 * except case 1. A variable set to the empty string counts as unset.
 *
 * Master: MASTER_ADDR when set. Else, under Slurm, the node of rank 0: the first node of
 * SLURM_STEP_NODELIST whose SLURM_STEP_TASKS_PER_NODE entry is > 0 (block, cyclic and plane
 * distributions all put task 0 there); with SLURM_DISTRIBUTION=arbitrary MASTER_ADDR is
 * required. The name is resolved with getaddrinfo (IPv4 preferred) to master_addr; a name
 * that does not resolve is an error. Single process: this host, 127.0.0.1. OpenMPI without
 * MASTER_ADDR: unknown ("" and port 0 unless given).
 *
 * Port, first that applies: port_override ([dist] port), MASTER_PORT, then, when the master
 * is known: under Slurm 20000 + 10 * (job_id % 1000) + (step_id % 10) (a step id of -1
 * counts as 0; under mpirun the step is ignored, as its ranks inherit different steps), so jobs whose ids differ by less than 1000 and concurrent steps 0-9 of one
 * job never share a port, and ports stay in 20000-29999, below Linux's ephemeral range
 * (32768-60999); outside Slurm DDP_WORLD_PORT_DEFAULT (PyTorch's 29500).
 *
 * What it does not do: talk to peers, bind sockets, pick a GPU (device module), print
 * (w->warning is for main to print). Reads the environment only through the ddp_env_fn given
 * (getenv when NULL), plus gethostname() for this host's name outside Slurm and getaddrinfo()
 * for the master. Allocates nothing that outlives the call.
 */
#ifndef DDP_LAUNCH_WORLD_H
#define DDP_LAUNCH_WORLD_H

#include <stddef.h>
#include <stdint.h>

enum ddp_launcher {
    DDP_LAUNCHER_SINGLE,
    DDP_LAUNCHER_SLURM,
    DDP_LAUNCHER_OMPI,
    DDP_LAUNCHER_TORCHRUN
};

#define DDP_HOST_MAX 256

/* Largest world size, local size or node count accepted from the environment: far above
 * any job this tool targets, and keeps every product of them exact in int. */
#define DDP_WORLD_SIZE_MAX (1 << 20)
/* Base and width of the derived port range: 20000-29999 avoids well-known ports and Linux's
 * default ephemeral range 32768-60999, where outgoing connections take their ports. */
#define DDP_WORLD_PORT_BASE 20000
#define DDP_WORLD_PORT_SPAN 10000
/* Port when nothing else gives one and no Slurm job id is known: PyTorch's default. */
#define DDP_WORLD_PORT_DEFAULT 29500

struct ddp_world {
    enum ddp_launcher launcher;
    int rank, local_rank, world_size, local_size, node_id, num_nodes;
    char host[DDP_HOST_MAX];        /* this rank's host name */
    char master_host[DDP_HOST_MAX]; /* host running rank 0 ("" if unknown) */
    char master_addr[64];           /* numeric address of master_host, "" if unknown */
    int master_port;                /* 0 if unknown */
    int64_t job_id, step_id;        /* -1 when not under Slurm */
    int mpi_launched;               /* 1: MPI_Init is safe (mpirun/OMPI env, or srun --mpi=pmix) */
    int cpus_per_task;              /* SLURM_CPUS_PER_TASK, 0 if unset */
    char warning[512];              /* non-fatal note for the user ("" if none), printed by main */
};

/* Environment accessor: returns the value of name or NULL. */
typedef const char *(*ddp_env_fn)(void *ctx, const char *name); /* NULL ctx fn => getenv */

/* Fill *w from the environment. port_override: [dist] port from the job file (0 = none).
 * Returns 0, or -1 with one line in err naming the variable, what was expected and the fix
 * (caller exits 4). On failure *w is left zeroed except for what was read before the error. */
int ddp_world_detect(struct ddp_world *w, ddp_env_fn env, void *ctx, int port_override, char *err,
                     size_t errlen);

/* The derived port for a Slurm job and step (step_id -1 = none), as described above. */
int ddp_world_derive_port(int64_t job_id, int64_t step_id);

/* Compute threads for this rank when the job does not say: SLURM_CPUS_PER_TASK, else the
 * CPUs this process may run on, divided among the node's ranks unless the launcher already
 * bound the process to fewer CPUs than the node has. At least 1. */
int ddp_world_default_threads(const struct ddp_world *w);

const char *ddp_launcher_name(enum ddp_launcher l); /* "single","slurm","ompi","torchrun" */

#endif

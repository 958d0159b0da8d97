/*
 * test_world.c - ddp_world_detect against tables of environments given through the
 * ddp_env_fn callback (the process environment is never read): every launcher, the sbatch
 * shell without srun, master and port derivation, mixed launchers and each bad-input rule.
 * Node names that must resolve are "localhost"; names that must not end in ".invalid"
 * (RFC 6761: never resolves, answered without a network). Exit 0 if all checks pass.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/world.h"
#include "core/util.h"
#include "check.h"

static int g_cases;

#define MAXVARS 32
struct env {
    const char *kv[MAXVARS][2]; /* terminated by a NULL name */
};

static const char *lookup(void *ctx, const char *name)
{
    const struct env *e = ctx;
    for (int i = 0; i < MAXVARS && e->kv[i][0]; i++)
        if (strcmp(e->kv[i][0], name) == 0)
            return e->kv[i][1];
    return NULL;
}

static char g_host[DDP_HOST_MAX];

/* Detect with env; expect success. */
static int ok(const char *what, const struct env *e, int port_override, struct ddp_world *w)
{
    char err[DDP_ERR_LEN] = "";
    g_cases++;
    int rc = ddp_world_detect(w, lookup, (void *)e, port_override, err, sizeof err);
    CHECK(rc == 0, "%s: unexpected error: %s", what, err);
    return rc == 0;
}

/* Detect with env; expect failure whose one-line message contains each of want[]. */
static void bad(const char *what, const struct env *e, int port_override, const char *want1,
                const char *want2)
{
    struct ddp_world w;
    char err[DDP_ERR_LEN] = "";
    g_cases++;
    int rc = ddp_world_detect(&w, lookup, (void *)e, port_override, err, sizeof err);
    if (getenv("DDP_TEST_VERBOSE"))
        printf("%-36s -> %s\n", what, err);
    CHECK(rc == -1, "%s: accepted, want an error naming %s", what, want1);
    CHECK(err[0] && !strchr(err, '\n'), "%s: error is not one line: \"%s\"", what, err);
    CHECK(strstr(err, want1) != NULL, "%s: error \"%s\" does not name %s", what, err, want1);
    if (want2)
        CHECK(strstr(err, want2) != NULL, "%s: error \"%s\" lacks \"%s\"", what, err, want2);
}

/* A two-node Slurm step, 8 tasks as 4(x2), job 1234 step 0; this is rank 5 on node 1. */
#define SLURM_STEP_BASE                                                                 \
    {"SLURM_JOB_ID", "1234"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "8"},            \
        {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_STEP_NODELIST", "localhost,n2.invalid"}, \
    {                                                                                   \
        "SLURM_STEP_TASKS_PER_NODE", "4(x2)"                                            \
    }
#define RANK5                                      \
    {"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"}, \
    {                                              \
        "SLURM_NODEID", "1"                        \
    }

static void single(void)
{
    struct ddp_world w;
    struct env e0 = {{{NULL, NULL}}};
    if (ok("empty environment", &e0, 0, &w)) {
        CHECK(w.launcher == DDP_LAUNCHER_SINGLE, "launcher %d", w.launcher);
        CHECK(w.rank == 0 && w.local_rank == 0 && w.world_size == 1 && w.local_size == 1 &&
                  w.node_id == 0 && w.num_nodes == 1,
              "single layout");
        CHECK(strcmp(w.host, g_host) == 0, "host %s want %s", w.host, g_host);
        CHECK(strcmp(w.master_host, g_host) == 0, "master_host %s", w.master_host);
        CHECK(strcmp(w.master_addr, "127.0.0.1") == 0, "master_addr %s", w.master_addr);
        CHECK(w.master_port == DDP_WORLD_PORT_DEFAULT, "port %d", w.master_port);
        CHECK(w.job_id == -1 && w.step_id == -1, "ids");
        CHECK(w.mpi_launched == 0 && w.cpus_per_task == 0 && w.warning[0] == '\0', "flags");
        CHECK(strcmp(ddp_launcher_name(w.launcher), "single") == 0, "name");
    }
    if (ok("single, port override", &e0, 12345, &w))
        CHECK(w.master_port == 12345, "port %d", w.master_port);
    struct env e1 = {{{"MASTER_PORT", "23456"}, {"SLURM_CPUS_PER_TASK", "4"}, {NULL, NULL}}};
    if (ok("single, MASTER_PORT", &e1, 0, &w))
        CHECK(w.master_port == 23456 && w.cpus_per_task == 4, "port %d cpus %d", w.master_port,
              w.cpus_per_task);
    if (ok("single, override beats MASTER_PORT", &e1, 12345, &w))
        CHECK(w.master_port == 12345, "port %d", w.master_port);
    /* empty values count as unset */
    struct env e2 = {{{"SLURM_STEP_ID", ""}, {"RANK", ""}, {"MASTER_PORT", ""}, {NULL, NULL}}};
    if (ok("empty values", &e2, 0, &w))
        CHECK(w.launcher == DDP_LAUNCHER_SINGLE && w.master_port == DDP_WORLD_PORT_DEFAULT,
              "empty values");
}

static void sbatch(void)
{
    struct ddp_world w;
    /* sbatch -N 2 -n 8 script running ddptrain without srun: batch step variables */
    struct env e = {{{"SLURM_JOB_ID", "1234"},
                     {"SLURM_NTASKS", "8"},
                     {"SLURM_JOB_NUM_NODES", "2"},
                     {"SLURM_NNODES", "2"},
                     {"SLURM_PROCID", "0"},
                     {"SLURM_LOCALID", "0"},
                     {"SLURM_NODEID", "0"},
                     {"SLURM_JOB_NODELIST", "n[1-2]"},
                     {"SLURM_TASKS_PER_NODE", "4(x2)"},
                     {"SLURM_CPUS_PER_TASK", "2"},
                     {NULL, NULL}}};
    if (ok("sbatch without srun", &e, 0, &w)) {
        CHECK(w.launcher == DDP_LAUNCHER_SINGLE && w.world_size == 1 && w.rank == 0,
              "must run as one process, got launcher %d world %d", w.launcher, w.world_size);
        CHECK(strstr(w.warning, "srun") != NULL && strstr(w.warning, "ONE process") != NULL,
              "warning \"%s\"", w.warning);
        CHECK(w.job_id == 1234 && w.step_id == -1, "ids %lld %lld", (long long)w.job_id,
              (long long)w.step_id);
        CHECK(w.master_port == ddp_world_derive_port(1234, -1) && w.master_port == 22340, "port %d",
              w.master_port);
        CHECK(strcmp(w.master_addr, "127.0.0.1") == 0 && w.cpus_per_task == 2, "master");
        CHECK(w.mpi_launched == 0, "mpi");
    }
    /* one task, one node: nothing to warn about */
    struct env e1 = {
        {{"SLURM_JOB_ID", "77"}, {"SLURM_NTASKS", "1"}, {"SLURM_NNODES", "1"}, {NULL, NULL}}};
    if (ok("sbatch, one task", &e1, 0, &w))
        CHECK(w.warning[0] == '\0' && w.job_id == 77, "warning \"%s\"", w.warning);
    /* sbatch -N 2 without -n: no SLURM_NTASKS, several nodes */
    struct env e2 = {{{"SLURM_JOB_ID", "77"}, {"SLURM_NNODES", "2"}, {NULL, NULL}}};
    if (ok("sbatch, two nodes", &e2, 0, &w))
        CHECK(strstr(w.warning, "srun") != NULL, "warning \"%s\"", w.warning);
    struct env e3 = {{{"SLURM_JOB_ID", "77"}, {"SLURM_NTASKS", "eight"}, {NULL, NULL}}};
    bad("sbatch, bad SLURM_NTASKS", &e3, 0, "SLURM_NTASKS", "eight");
}

static void slurm(void)
{
    struct ddp_world w;
    struct env e = {{SLURM_STEP_BASE, RANK5, {NULL, NULL}}};
    if (ok("slurm rank 5", &e, 0, &w)) {
        CHECK(w.launcher == DDP_LAUNCHER_SLURM, "launcher %d", w.launcher);
        CHECK(w.rank == 5 && w.local_rank == 1 && w.world_size == 8 && w.local_size == 4 &&
                  w.node_id == 1 && w.num_nodes == 2,
              "layout %d %d %d %d %d %d", w.rank, w.local_rank, w.world_size, w.local_size,
              w.node_id, w.num_nodes);
        CHECK(strcmp(w.host, "n2.invalid") == 0, "host %s", w.host);
        CHECK(strcmp(w.master_host, "localhost") == 0, "master_host %s", w.master_host);
        CHECK(strcmp(w.master_addr, "127.0.0.1") == 0, "master_addr %s", w.master_addr);
        CHECK(w.job_id == 1234 && w.step_id == 0, "ids");
        CHECK(w.master_port == 20000 + 234 * 10 + 0, "port %d", w.master_port);
        CHECK(w.mpi_launched == 0 && w.warning[0] == '\0', "mpi %d warning %s", w.mpi_launched,
              w.warning);
        CHECK(strcmp(ddp_launcher_name(w.launcher), "slurm") == 0, "name");
    }
    /* rank 0 itself, with SLURM_GTIDS and SLURMD_NODENAME consistent */
    struct env e0 = {{SLURM_STEP_BASE,
                      {"SLURM_PROCID", "0"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_NODEID", "0"},
                      {"SLURM_GTIDS", "0,1,2,3"},
                      {"SLURMD_NODENAME", "localhost"},
                      {NULL, NULL}}};
    if (ok("slurm rank 0", &e0, 0, &w))
        CHECK(w.rank == 0 && w.node_id == 0 && strcmp(w.host, "localhost") == 0 &&
                  strcmp(w.master_host, "localhost") == 0,
              "rank 0");
    /* pmix makes MPI_Init safe; pmi2 or none does not */
    const char *types[][2] = {{"pmix", "1"}, {"pmix_v4", "1"}, {"pmix_v3", "1"},
                              {"pmi2", "0"}, {"none", "0"},    {"pmixx", "0"}};
    for (int i = 0; i < 6; i++) {
        struct env ep = {{SLURM_STEP_BASE, RANK5, {"SLURM_MPI_TYPE", types[i][0]}, {NULL, NULL}}};
        if (ok("slurm mpi type", &ep, 0, &w))
            CHECK(w.mpi_launched == atoi(types[i][1]), "SLURM_MPI_TYPE=%s mpi %d", types[i][0],
                  w.mpi_launched);
    }
    /* srun -N 2 -n 4 fills the first node: 3,1; the last rank is alone on node 1 */
    struct env eu = {{{"SLURM_JOB_ID", "99"},
                      {"SLURM_STEP_ID", "3"},
                      {"SLURM_NTASKS", "4"},
                      {"SLURM_STEP_NUM_NODES", "2"},
                      {"SLURM_STEP_NODELIST", "localhost,x.invalid"},
                      {"SLURM_STEP_TASKS_PER_NODE", "3,1"},
                      {"SLURM_PROCID", "3"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_NODEID", "1"},
                      {"SLURM_GTIDS", "3"},
                      {NULL, NULL}}};
    if (ok("slurm uneven 3,1", &eu, 0, &w))
        CHECK(w.local_size == 1 && w.node_id == 1 && w.master_port == 20000 + 99 * 10 + 3,
              "uneven: local %d port %d", w.local_size, w.master_port);
    /* old names and SLURM_TASKS_PER_NODE fallback; bracketed nodelist; no SLURM_STEP_NUM_NODES */
    struct env eo = {{{"SLURM_JOBID", "5"},
                      {"SLURM_STEPID", "1"},
                      {"SLURM_STEP_NUM_TASKS", "3"},
                      {"SLURM_STEP_NODELIST", "localhost,n[1-2].invalid"},
                      {"SLURM_TASKS_PER_NODE", "1(x3)"},
                      {"SLURM_PROCID", "2"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_NODEID", "2"},
                      {NULL, NULL}}};
    if (ok("slurm fallbacks", &eo, 0, &w))
        CHECK(w.world_size == 3 && w.num_nodes == 3 && strcmp(w.host, "n2.invalid") == 0 &&
                  w.job_id == 5 && w.step_id == 1,
              "fallbacks: %d %d %s", w.world_size, w.num_nodes, w.host);
    /* rank 0 on the first node that has tasks, not blindly the first name */
    struct env ez = {{{"SLURM_JOB_ID", "5"},
                      {"SLURM_STEP_ID", "0"},
                      {"SLURM_NTASKS", "2"},
                      {"SLURM_STEP_NODELIST", "idle.invalid,localhost"},
                      {"SLURM_STEP_TASKS_PER_NODE", "0,2"},
                      {"SLURM_PROCID", "1"},
                      {"SLURM_LOCALID", "1"},
                      {"SLURM_NODEID", "1"},
                      {NULL, NULL}}};
    if (ok("slurm, first node without tasks", &ez, 0, &w))
        CHECK(strcmp(w.master_host, "localhost") == 0, "master %s", w.master_host);
    /* MASTER_ADDR wins; explicit ports win, override first */
    struct env em = {{SLURM_STEP_BASE,
                      RANK5,
                      {"MASTER_ADDR", "127.0.0.1"},
                      {"MASTER_PORT", "29400"},
                      {NULL, NULL}}};
    if (ok("slurm, MASTER_ADDR", &em, 0, &w))
        CHECK(strcmp(w.master_host, "127.0.0.1") == 0 && strcmp(w.master_addr, "127.0.0.1") == 0 &&
                  w.master_port == 29400,
              "master %s %s %d", w.master_host, w.master_addr, w.master_port);
    if (ok("slurm, port override", &em, 31000, &w))
        CHECK(w.master_port == 31000, "port %d", w.master_port);
    /* with MASTER_ADDR even an unresolvable node list and arbitrary distribution are fine */
    struct env ea = {{{"SLURM_JOB_ID", "5"},
                      {"SLURM_STEP_ID", "0"},
                      {"SLURM_NTASKS", "2"},
                      {"SLURM_STEP_NODELIST", "a.invalid,b.invalid"},
                      {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
                      {"SLURM_PROCID", "0"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_NODEID", "1"},
                      {"SLURM_DISTRIBUTION", "arbitrary"},
                      {"MASTER_ADDR", "localhost"},
                      {NULL, NULL}}};
    if (ok("slurm arbitrary + MASTER_ADDR", &ea, 0, &w))
        CHECK(strcmp(w.master_host, "localhost") == 0, "master %s", w.master_host);
    /* agreeing OpenMPI (pmix direct launch) and torchrun-style values are fine */
    struct env eg = {{SLURM_STEP_BASE,
                      RANK5,
                      {"SLURM_MPI_TYPE", "pmix"},
                      {"OMPI_COMM_WORLD_RANK", "5"},
                      {"OMPI_COMM_WORLD_SIZE", "8"},
                      {"RANK", "5"},
                      {"WORLD_SIZE", "8"},
                      {NULL, NULL}}};
    if (ok("slurm + agreeing others", &eg, 0, &w))
        CHECK(w.launcher == DDP_LAUNCHER_SLURM && w.mpi_launched == 1, "launcher %d", w.launcher);
}

static void ports(void)
{
    /* two jobs, two steps on one node: different ports, all in the documented range */
    int p1 = ddp_world_derive_port(1234, 0), p2 = ddp_world_derive_port(1235, 0);
    int p3 = ddp_world_derive_port(1234, 1), p4 = ddp_world_derive_port(1235, 1);
    CHECK(p1 != p2 && p1 != p3 && p2 != p4 && p3 != p4 && p1 != p4 && p2 != p3, "ports %d %d %d %d",
          p1, p2, p3, p4);
    for (int64_t j = 0; j < 3000; j += 7)
        for (int64_t s = -1; s < 12; s++) {
            int p = ddp_world_derive_port(j, s);
            CHECK(p >= DDP_WORLD_PORT_BASE && p < DDP_WORLD_PORT_BASE + DDP_WORLD_PORT_SPAN &&
                      p < 32768,
                  "port %d out of range", p);
        }
    /* jobs within 1000 of each other, steps 0-9: never equal */
    int dup = 0;
    for (int64_t j = 5000; j < 5999 && !dup; j++)
        for (int64_t s = 0; s < 10; s++)
            if (ddp_world_derive_port(j, s) == ddp_world_derive_port(j + 1, s) ||
                (s < 9 && ddp_world_derive_port(j, s) == ddp_world_derive_port(j, s + 1)))
                dup = 1;
    CHECK(!dup, "neighbouring jobs or steps share a port");
    CHECK(ddp_world_derive_port(4294967295LL, 4294967295LL) == 20000 + 295 * 10 + 5, "max ids");

    /* through detection: two job ids, two step ids on one node */
    struct ddp_world a, b, c;
    struct env ea = {{{"SLURM_JOB_ID", "1234"},
                      {"SLURM_STEP_ID", "0"},
                      {"SLURM_NTASKS", "2"},
                      {"SLURM_STEP_NODELIST", "localhost"},
                      {"SLURM_STEP_TASKS_PER_NODE", "2"},
                      {"SLURM_PROCID", "1"},
                      {"SLURM_LOCALID", "1"},
                      {"SLURM_NODEID", "0"},
                      {NULL, NULL}}};
    struct env eb = ea, ec = ea;
    eb.kv[0][1] = "1235";
    ec.kv[1][1] = "1";
    if (ok("port job a", &ea, 0, &a) && ok("port job b", &eb, 0, &b) && ok("port step", &ec, 0, &c))
        CHECK(a.master_port != b.master_port && a.master_port != c.master_port &&
                  b.master_port != c.master_port,
              "ports %d %d %d", a.master_port, b.master_port, c.master_port);
}

static void ompi(void)
{
    struct ddp_world w;
    struct env e = {{{"OMPI_COMM_WORLD_RANK", "3"},
                     {"OMPI_COMM_WORLD_SIZE", "4"},
                     {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                     {"OMPI_COMM_WORLD_NODE_RANK", "1"},
                     {NULL, NULL}}};
    if (ok("ompi", &e, 0, &w)) {
        CHECK(w.launcher == DDP_LAUNCHER_OMPI && w.rank == 3 && w.world_size == 4 &&
                  w.local_rank == 1 && w.local_size == 2 && w.node_id == 1 && w.num_nodes == 2,
              "ompi layout");
        CHECK(w.master_host[0] == '\0' && w.master_addr[0] == '\0' && w.master_port == 0,
              "ompi master must be unknown: %s %s %d", w.master_host, w.master_addr, w.master_port);
        CHECK(w.mpi_launched == 1 && w.job_id == -1 && strcmp(w.host, g_host) == 0, "ompi");
        CHECK(strcmp(ddp_launcher_name(w.launcher), "ompi") == 0, "name");
    }
    if (ok("ompi port override", &e, 30001, &w))
        CHECK(w.master_port == 30001 && w.master_addr[0] == '\0', "port %d", w.master_port);
    struct env em = {{{"OMPI_COMM_WORLD_RANK", "0"},
                      {"OMPI_COMM_WORLD_SIZE", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                      {"MASTER_ADDR", "localhost"},
                      {"SLURM_JOB_ID", "42"},
                      {NULL, NULL}}};
    if (ok("ompi + MASTER_ADDR in a job", &em, 0, &w))
        CHECK(strcmp(w.master_addr, "127.0.0.1") == 0 && w.master_port == 20420 && w.job_id == 42,
              "master %s port %d", w.master_addr, w.master_port);
    /* mpirun inside an allocation: orted step's SLURM_PROCID/NTASKS are inherited, OMPI wins */
    struct env es = {{{"SLURM_JOB_ID", "50"},
                      {"SLURM_STEP_ID", "0"},
                      {"SLURM_PROCID", "1"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_NODEID", "1"},
                      {"SLURM_NTASKS", "2"},
                      {"SLURM_STEP_NODELIST", "n[1-2]"},
                      {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
                      {"OMPI_COMM_WORLD_RANK", "6"},
                      {"OMPI_COMM_WORLD_SIZE", "8"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                      {NULL, NULL}}};
    if (ok("mpirun inside Slurm", &es, 0, &w))
        CHECK(w.launcher == DDP_LAUNCHER_OMPI && w.rank == 6 && w.world_size == 8 &&
                  w.node_id == 1 && w.job_id == 50 && w.step_id == 0 && w.mpi_launched == 1,
              "launcher %d rank %d", w.launcher, w.rank);
    /* OpenMPI 4 hints, as seen under mpirun -n 4 on 2 nodes filled 3+1: rank 3 on node 1 */
    struct env eh = {{{"OMPI_COMM_WORLD_RANK", "3"},
                      {"OMPI_COMM_WORLD_SIZE", "4"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
                      {"OMPI_MCA_orte_num_nodes", "2"},
                      {"OMPI_MCA_orte_local_daemon_uri", "2146893824.1;tcp://10.77.0.12:35539"},
                      {"SLURM_JOB_ID", "5"},
                      {"SLURM_STEP_ID", "0"},
                      {"SLURM_PROCID", "0"},
                      {"MASTER_ADDR", "localhost"},
                      {NULL, NULL}}};
    if (ok("ompi with ORTE hints", &eh, 0, &w))
        CHECK(w.node_id == 1 && w.num_nodes == 2 && w.master_port == 20050,
              "node %d/%d port %d (step must not count under mpirun)", w.node_id, w.num_nodes,
              w.master_port);
    eh.kv[5][1] = "garbage";
    if (ok("ompi with a bad ORTE hint", &eh, 0, &w))
        CHECK(w.node_id == 3 && w.num_nodes == 4, "fallback node %d/%d (rank / local_size)",
              w.node_id, w.num_nodes);
    /* the same with pmix: a Slurm direct launch, whose numbers must then agree */
    struct env ep = es;
    ep.kv[12][0] = "SLURM_MPI_TYPE";
    ep.kv[12][1] = "pmix";
    bad("pmix step vs OMPI rank", &ep, 0, "OMPI_COMM_WORLD_RANK", "SLURM_PROCID");
    struct env et = {{{"OMPI_COMM_WORLD_RANK", "1"},
                      {"OMPI_COMM_WORLD_SIZE", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                      {"RANK", "0"},
                      {NULL, NULL}}};
    bad("ompi vs torchrun", &et, 0, "RANK", "OMPI_COMM_WORLD_RANK");
    struct env e1 = {{{"OMPI_COMM_WORLD_RANK", "1"},
                      {"OMPI_COMM_WORLD_SIZE", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                      {NULL, NULL}}};
    bad("ompi missing LOCAL_SIZE", &e1, 0, "OMPI_COMM_WORLD_LOCAL_SIZE", "not set");
    struct env e2 = {{{"OMPI_COMM_WORLD_RANK", "2"},
                      {"OMPI_COMM_WORLD_SIZE", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
                      {NULL, NULL}}};
    bad("ompi rank >= size", &e2, 0, "OMPI_COMM_WORLD_RANK", "not below");
    struct env e3 = {{{"OMPI_COMM_WORLD_RANK", "1"},
                      {"OMPI_COMM_WORLD_SIZE", "4"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                      {NULL, NULL}}};
    bad("ompi local rank >= local size", &e3, 0, "OMPI_COMM_WORLD_LOCAL_RANK", "not below");
    struct env e4 = {{{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {NULL, NULL}}};
    bad("ompi non-numeric", &e4, 0, "OMPI_COMM_WORLD_RANK", "not an integer");
    struct env e5 = {{{"OMPI_COMM_WORLD_RANK", "0"},
                      {"OMPI_COMM_WORLD_SIZE", "1"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
                      {"MASTER_ADDR", "nowhere.invalid"},
                      {NULL, NULL}}};
    bad("ompi unresolvable MASTER_ADDR", &e5, 0, "MASTER_ADDR", "does not resolve");
}

static void torch(void)
{
    struct ddp_world w;
    struct env e = {{{"RANK", "5"},
                     {"WORLD_SIZE", "8"},
                     {"LOCAL_RANK", "1"},
                     {"LOCAL_WORLD_SIZE", "4"},
                     {"MASTER_ADDR", "localhost"},
                     {"MASTER_PORT", "29400"},
                     {NULL, NULL}}};
    if (ok("torchrun", &e, 0, &w)) {
        CHECK(w.launcher == DDP_LAUNCHER_TORCHRUN && w.rank == 5 && w.world_size == 8 &&
                  w.local_rank == 1 && w.local_size == 4 && w.node_id == 1 && w.num_nodes == 2,
              "torch layout");
        CHECK(strcmp(w.master_host, "localhost") == 0 && strcmp(w.master_addr, "127.0.0.1") == 0 &&
                  w.master_port == 29400,
              "torch master %s %s %d", w.master_host, w.master_addr, w.master_port);
        CHECK(w.mpi_launched == 0 && strcmp(ddp_launcher_name(w.launcher), "torchrun") == 0,
              "torch");
    }
    struct env eg = {{{"RANK", "5"},
                      {"WORLD_SIZE", "8"},
                      {"LOCAL_RANK", "1"},
                      {"LOCAL_WORLD_SIZE", "4"},
                      {"GROUP_RANK", "3"},
                      {"GROUP_WORLD_SIZE", "4"},
                      {"MASTER_ADDR", "127.0.0.1"},
                      {NULL, NULL}}};
    if (ok("torchrun GROUP_RANK", &eg, 0, &w))
        CHECK(w.node_id == 3 && w.num_nodes == 4 && w.master_port == DDP_WORLD_PORT_DEFAULT,
              "node %d/%d port %d", w.node_id, w.num_nodes, w.master_port);
    struct env en = {
        {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "localhost"}, {NULL, NULL}}};
    if (ok("torchrun without LOCAL_*", &en, 0, &w))
        CHECK(w.local_rank == 0 && w.local_size == 1 && w.node_id == 1 && w.num_nodes == 2 &&
                  strstr(w.warning, "LOCAL_RANK"),
              "warning %s", w.warning);
    struct env e1 = {{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {NULL, NULL}}};
    if (ok("torchrun world 1 without master", &e1, 0, &w))
        CHECK(strcmp(w.master_addr, "127.0.0.1") == 0 && w.master_port == DDP_WORLD_PORT_DEFAULT,
              "addr %s", w.master_addr);
    struct env ej = {{{"RANK", "0"},
                      {"WORLD_SIZE", "2"},
                      {"LOCAL_RANK", "0"},
                      {"LOCAL_WORLD_SIZE", "2"},
                      {"MASTER_ADDR", "localhost"},
                      {"SLURM_JOB_ID", "1234"},
                      {NULL, NULL}}};
    if (ok("torchrun in a Slurm job, no MASTER_PORT", &ej, 0, &w))
        CHECK(w.master_port == 22340, "port %d", w.master_port);
    struct env b1 = {{{"RANK", "1"},
                      {"WORLD_SIZE", "2"},
                      {"LOCAL_RANK", "0"},
                      {"LOCAL_WORLD_SIZE", "1"},
                      {NULL, NULL}}};
    bad("torchrun without MASTER_ADDR", &b1, 0, "MASTER_ADDR", "not set");
    struct env b2 = {{{"RANK", "1"}, {NULL, NULL}}};
    bad("RANK without WORLD_SIZE", &b2, 0, "WORLD_SIZE", "not set");
    struct env b3 = {{{"RANK", "1"},
                      {"WORLD_SIZE", "2"},
                      {"LOCAL_RANK", "0"},
                      {"MASTER_ADDR", "localhost"},
                      {NULL, NULL}}};
    bad("LOCAL_RANK without LOCAL_WORLD_SIZE", &b3, 0, "LOCAL_WORLD_SIZE", "LOCAL_RANK");
    struct env b4 = {{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {NULL, NULL}}};
    bad("RANK >= WORLD_SIZE", &b4, 0, "RANK", "not below");
    struct env b5 = {
        {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "no.such.invalid"}, {NULL, NULL}}};
    bad("torchrun unresolvable master", &b5, 0, "MASTER_ADDR", "does not resolve");
    struct env b6 = {{{"RANK", "0"},
                      {"WORLD_SIZE", "2"},
                      {"MASTER_ADDR", "localhost"},
                      {"MASTER_PORT", "70000"},
                      {NULL, NULL}}};
    bad("MASTER_PORT out of range", &b6, 0, "MASTER_PORT", "1..65535");
    struct env b7 = {{{"RANK", "0"},
                      {"WORLD_SIZE", "2"},
                      {"MASTER_ADDR", "localhost"},
                      {"MASTER_PORT", "http"},
                      {NULL, NULL}}};
    bad("MASTER_PORT not a number", &b7, 0, "MASTER_PORT", "http");
    struct env b8 = {{{"RANK", "0"},
                      {"WORLD_SIZE", "4"},
                      {"LOCAL_RANK", "0"},
                      {"LOCAL_WORLD_SIZE", "2"},
                      {"GROUP_RANK", "2"},
                      {"MASTER_ADDR", "localhost"},
                      {NULL, NULL}}};
    bad("GROUP_RANK beyond nodes", &b8, 0, "GROUP_RANK", "not below");
}

/* Every malformed Slurm step value. */
static void slurm_bad(void)
{
    struct {
        const char *what, *var, *val, *want1, *want2;
    } cases[] = {
        {"PROCID non-numeric", "SLURM_PROCID", "five", "SLURM_PROCID", "not an integer"},
        {"PROCID negative", "SLURM_PROCID", "-1", "SLURM_PROCID", "not an integer"},
        {"PROCID trailing junk", "SLURM_PROCID", "5x", "SLURM_PROCID", "5x"},
        {"PROCID >= NTASKS", "SLURM_PROCID", "8", "SLURM_PROCID", "SLURM_NTASKS=8"},
        {"PROCID with a newline", "SLURM_PROCID", "5\nrm -rf", "SLURM_PROCID", "5?rm -rf"},
        {"PROCID very long", "SLURM_PROCID",
         "1111111111111111111111111111111111111111111111111111111111111111111111111111111",
         "SLURM_PROCID", "..."},
        {"NTASKS zero", "SLURM_NTASKS", "0", "SLURM_NTASKS", "not an integer"},
        {"NTASKS huge", "SLURM_NTASKS", "99999999999", "SLURM_NTASKS", "not an integer"},
        {"LOCALID >= tasks on node", "SLURM_LOCALID", "4", "SLURM_LOCALID", "not below"},
        {"LOCALID non-numeric", "SLURM_LOCALID", "one", "SLURM_LOCALID", NULL},
        {"NODEID >= nodes", "SLURM_NODEID", "2", "SLURM_NODEID", "not below"},
        {"NODEID negative", "SLURM_NODEID", "-2", "SLURM_NODEID", NULL},
        {"nodelist unparsable", "SLURM_STEP_NODELIST", "n[3-1]", "SLURM_STEP_NODELIST",
         "backwards"},
        {"nodelist unclosed", "SLURM_STEP_NODELIST", "n[1-2", "SLURM_STEP_NODELIST",
         "never closed"},
        {"nodelist blank", "SLURM_STEP_NODELIST", " , ", "SLURM_STEP_NODELIST", "no host"},
        {"nodelist count vs tasks-per-node", "SLURM_STEP_NODELIST", "localhost,n[2-3]",
         "SLURM_STEP_TASKS_PER_NODE", "gives 2 nodes"},
        {"tasks-per-node sum", "SLURM_STEP_TASKS_PER_NODE", "4,3", "SLURM_STEP_TASKS_PER_NODE",
         "adds up to 7"},
        {"tasks-per-node malformed", "SLURM_STEP_TASKS_PER_NODE", "4(x2",
         "SLURM_STEP_TASKS_PER_NODE", "malformed"},
        {"tasks-per-node empty item", "SLURM_STEP_TASKS_PER_NODE", "4,,4",
         "SLURM_STEP_TASKS_PER_NODE", "empty item"},
        {"STEP_NUM_NODES mismatch", "SLURM_STEP_NUM_NODES", "3", "SLURM_STEP_NUM_NODES", "3"},
        {"STEP_NUM_NODES junk", "SLURM_STEP_NUM_NODES", "2 nodes", "SLURM_STEP_NUM_NODES", NULL},
        {"SLURMD_NODENAME mismatch", "SLURMD_NODENAME", "localhost", "SLURMD_NODENAME",
         "SLURM_NODEID=1"},
        {"GTIDS without our rank", "SLURM_GTIDS", "4,6,7,8", "SLURM_GTIDS", "SLURM_PROCID=5"},
        {"GTIDS wrong count", "SLURM_GTIDS", "4,5", "SLURM_GTIDS", NULL},
        {"GTIDS junk", "SLURM_GTIDS", "4,5,x,7", "SLURM_GTIDS", NULL},
        {"JOB_ID junk", "SLURM_JOB_ID", "12a", "SLURM_JOB_ID", NULL},
        {"STEP_ID junk", "SLURM_STEP_ID", "-3", "SLURM_STEP_ID", NULL},
        {"CPUS_PER_TASK zero", "SLURM_CPUS_PER_TASK", "0", "SLURM_CPUS_PER_TASK", NULL},
        {"CPUS_PER_TASK junk", "SLURM_CPUS_PER_TASK", "two", "SLURM_CPUS_PER_TASK", NULL},
        {"master unresolvable", "SLURM_STEP_NODELIST", "gone.invalid,localhost", "gone.invalid",
         "does not resolve"},
        {"arbitrary distribution", "SLURM_DISTRIBUTION", "arbitrary", "SLURM_DISTRIBUTION",
         "MASTER_ADDR"},
        {"MASTER_ADDR unresolvable", "MASTER_ADDR", "nope.invalid", "MASTER_ADDR",
         "does not resolve"},
        {"torchrun disagrees", "RANK", "4", "RANK", "SLURM_PROCID"},
        {"torchrun world disagrees", "WORLD_SIZE", "16", "WORLD_SIZE", "SLURM_NTASKS"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        struct env e = {{SLURM_STEP_BASE, RANK5, {NULL, NULL}}};
        int k = 0, found = 0;
        for (; e.kv[k][0]; k++)
            if (strcmp(e.kv[k][0], cases[i].var) == 0) {
                e.kv[k][1] = cases[i].val;
                found = 1;
            }
        if (!found) {
            e.kv[k][0] = cases[i].var;
            e.kv[k][1] = cases[i].val;
            e.kv[k + 1][0] = NULL;
        }
        bad(cases[i].what, &e, 0, cases[i].want1, cases[i].want2);
    }
    /* missing required variables, one at a time */
    const char *req[] = {"SLURM_LOCALID",
                         "SLURM_NODEID",
                         "SLURM_NTASKS",
                         "SLURM_STEP_NODELIST",
                         "SLURM_STEP_TASKS_PER_NODE",
                         "SLURM_JOB_ID"};
    for (int i = 0; i < 6; i++) {
        struct env e = {{SLURM_STEP_BASE, RANK5, {NULL, NULL}}};
        for (int k = 0; e.kv[k][0]; k++)
            if (strcmp(e.kv[k][0], req[i]) == 0)
                e.kv[k][1] = NULL; /* unset */
        char what[128];
        snprintf(what, sizeof what, "missing %s", req[i]);
        bad(what, &e, 0, req[i], "not set");
    }
    /* rank 0 reported on a node the layout does not give it */
    struct env e0 = {{SLURM_STEP_BASE,
                      {"SLURM_PROCID", "0"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_NODEID", "1"},
                      {NULL, NULL}}};
    bad("rank 0 on the wrong node", &e0, 0, "rank 0", "MASTER_ADDR");
    struct env eg = {{SLURM_STEP_BASE, RANK5, {"SLURM_GTIDS", "0,5,6,7"}, {NULL, NULL}}};
    bad("GTIDS put task 0 on node 1", &eg, 0, "rank 0", "MASTER_ADDR");
    /* step id without a rank; bad port override */
    struct env es = {{{"SLURM_JOB_ID", "1"}, {"SLURM_STEP_ID", "0"}, {NULL, NULL}}};
    bad("STEP_ID without PROCID", &es, 0, "SLURM_STEP_ID", "SLURM_PROCID");
    struct env e_empty = {{{NULL, NULL}}};
    bad("override too large", &e_empty, 70000, "[dist] port", "1..65535");
    bad("override negative", &e_empty, -1, "[dist] port", "1..65535");
    struct env ep = {{SLURM_STEP_BASE, RANK5, {"MASTER_PORT", "0"}, {NULL, NULL}}};
    bad("MASTER_PORT zero", &ep, 0, "MASTER_PORT", NULL);
}

/* A NULL accessor reads the real environment. */
static void real_env(void)
{
    struct ddp_world w;
    char err[DDP_ERR_LEN];
    clearenv();
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "localhost", 1);
    g_cases++;
    CHECK(ddp_world_detect(&w, NULL, NULL, 0, err, sizeof err) == 0 &&
              w.launcher == DDP_LAUNCHER_TORCHRUN && w.rank == 1,
          "getenv path: %s", err);
    CHECK(strcmp(ddp_launcher_name((enum ddp_launcher)99), "unknown") == 0, "unknown name");
}

int main(void)
{
    if (gethostname(g_host, sizeof g_host) != 0)
        strcpy(g_host, "localhost");
    g_host[sizeof g_host - 1] = '\0';
    single();
    sbatch();
    slurm();
    ports();
    ompi();
    torch();
    slurm_bad();
    real_env();
    printf("world: %d detection cases, %d checks, %d failed\n", g_cases, check_count,
           check_failures);
    return check_failures ? 1 : 0;
}

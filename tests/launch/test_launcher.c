/*
 * test_launcher.c - `ddptrain launch` option parsing and the children's environment
 * (launcher.h) as tables; starting processes is tested by test_launch.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch/launcher.h"
#include "core/util.h"
#include "check.h"

#define MAXARGS 16
struct prow {
    const char *what;
    const char *argv[MAXARGS]; /* after "launch", NULL-terminated */
    int rc;                    /* 0 ok, 1 help, -1 error */
    const char *err;           /* substring of the error */
    int nproc, nnodes, node_rank, port, first_arg;
    const char *addr;
    enum ddp_launch_spawn spawn;
    double grace;
};

static const struct prow P[] = {
    {"minimal",
     {"--nproc-per-node", "4", "job.ini"},
     0,
     NULL,
     4,
     1,
     0,
     0,
     3,
     "",
     DDP_SPAWN_AUTO,
     DDP_LAUNCH_GRACE_S},
    {"= forms and job args",
     {"--nproc-per-node=2", "--spawn=env", "--grace=2.5", "job.ini", "--set", "train.epochs=1"},
     0,
     NULL,
     2,
     1,
     0,
     0,
     4,
     "",
     DDP_SPAWN_ENV,
     2.5},
    {"torch spelling",
     {"--nproc_per_node", "8", "--nnodes", "2", "--node_rank", "1", "--master_addr", "10.0.0.1",
      "--master_port", "29400", "job.ini"},
     0,
     NULL,
     8,
     2,
     1,
     29400,
     11,
     "10.0.0.1",
     DDP_SPAWN_AUTO,
     DDP_LAUNCH_GRACE_S},
    {"-- ends the options",
     {"--nproc-per-node", "1", "--", "--weird-name.ini"},
     0,
     NULL,
     1,
     1,
     0,
     0,
     4,
     "",
     DDP_SPAWN_AUTO,
     DDP_LAUNCH_GRACE_S},
    {"subcommand as the program",
     {"--nproc-per-node", "3", "--spawn", "mpirun", "env"},
     0,
     NULL,
     3,
     1,
     0,
     0,
     5,
     "",
     DDP_SPAWN_MPIRUN,
     DDP_LAUNCH_GRACE_S},
    {"help", {"--help"}, 1, NULL, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"no nproc", {"job.ini"}, -1, "--nproc-per-node N is required", 0, 0, 0, 0, 0, NULL, 0, 0},
    {"no job", {"--nproc-per-node", "2"}, -1, "no JOB.ini", 0, 0, 0, 0, 0, NULL, 0, 0},
    {"nproc 0", {"--nproc-per-node", "0", "j"}, -1, "1..1024", 0, 0, 0, 0, 0, NULL, 0, 0},
    {"nproc text", {"--nproc-per-node", "four", "j"}, -1, "'four'", 0, 0, 0, 0, 0, NULL, 0, 0},
    {"value missing", {"--nproc-per-node"}, -1, "needs a value", 0, 0, 0, 0, 0, NULL, 0, 0},
    {"unknown option",
     {"--nproc-per-node", "2", "--standalone", "j"},
     -1,
     "unknown option '--standalone'",
     0,
     0,
     0,
     0,
     0,
     NULL,
     0,
     0},
    {"node rank too big",
     {"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2", "--master-addr", "h", "j"},
     -1,
     "not below --nnodes 2",
     0,
     0,
     0,
     0,
     0,
     NULL,
     0,
     0},
    {"nodes without master",
     {"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "0", "j"},
     -1,
     "--master-addr",
     0,
     0,
     0,
     0,
     0,
     NULL,
     0,
     0},
    {"nodes without node rank",
     {"--nproc-per-node", "2", "--nnodes", "2", "--master-addr", "h", "j"},
     -1,
     "--node-rank",
     0,
     0,
     0,
     0,
     0,
     NULL,
     0,
     0},
    {"mpirun across nodes",
     {"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "0", "--master-addr", "h", "--spawn",
      "mpirun", "j"},
     -1,
     "this node only",
     0,
     0,
     0,
     0,
     0,
     NULL,
     0,
     0},
    {"bad port",
     {"--nproc-per-node", "2", "--master-port", "70000", "j"},
     -1,
     "1..65535",
     0,
     0,
     0,
     0,
     0,
     NULL,
     0,
     0},
    {"bad spawn",
     {"--nproc-per-node", "2", "--spawn", "ssh", "j"},
     -1,
     "auto, env or mpirun",
     0,
     0,
     0,
     0,
     0,
     NULL,
     0,
     0},
    {"bad grace",
     {"--nproc-per-node", "2", "--grace", "-1", "j"},
     -1,
     "--grace",
     0,
     0,
     0,
     0,
     0,
     NULL,
     0,
     0},
    {"world too big",
     {"--nproc-per-node", "1024", "--nnodes", "2048", "--node-rank", "0", "--master-addr", "h",
      "j"},
     -1,
     "exceeds",
     0,
     0,
     0,
     0,
     0,
     NULL,
     0,
     0},
};

static void parse(void)
{
    for (size_t i = 0; i < sizeof P / sizeof *P; i++) {
        const struct prow *r = &P[i];
        char *argv[MAXARGS + 1];
        int argc = 0;
        argv[argc++] = "launch";
        for (int k = 0; r->argv[k]; k++)
            argv[argc++] = (char *)r->argv[k];
        argv[argc] = NULL;
        struct ddp_launch_opts o;
        char err[DDP_ERR_LEN] = "";
        int rc = ddp_launch_parse(argc, argv, &o, err, sizeof err);
        CHECK(rc == r->rc, "%s: rc %d want %d (%s)", r->what, rc, r->rc, err);
        if (rc != r->rc)
            continue;
        if (rc < 0) {
            CHECK(strstr(err, r->err) && !strchr(err, '\n'), "%s: error '%s' lacks '%s'", r->what,
                  err, r->err);
            continue;
        }
        if (rc == 1)
            continue;
        CHECK(o.nproc_per_node == r->nproc && o.nnodes == r->nnodes &&
                  o.node_rank == r->node_rank && o.master_port == r->port &&
                  o.first_arg == r->first_arg && strcmp(o.master_addr, r->addr) == 0 &&
                  o.spawn == r->spawn && o.grace_s == r->grace,
              "%s: nproc %d nnodes %d node_rank %d port %d first %d addr '%s' spawn %d grace %g",
              r->what, o.nproc_per_node, o.nnodes, o.node_rank, o.master_port, o.first_arg,
              o.master_addr, (int)o.spawn, o.grace_s);
    }
}

static const char *find(char **env, const char *name)
{
    size_t n = strlen(name);
    const char *hit = NULL;
    int count = 0;
    for (size_t i = 0; env[i]; i++)
        if (strncmp(env[i], name, n) == 0 && env[i][n] == '=') {
            hit = env[i] + n + 1;
            count++;
        }
    return count == 1 ? hit : count ? "(twice)" : NULL;
}

static void child_env(void)
{
    char *base[] = {"PATH=/usr/bin",
                    "HOME=/root",
                    "RANK=7",
                    "WORLD_SIZE=9",
                    "MASTER_PORT=1",
                    "SLURM_JOB_ID=55",
                    "SLURM_PROCID=3",
                    "SLURM_LOCALID=1",
                    "SLURM_NODEID=1",
                    "SLURM_STEP_ID=0",
                    "SLURM_GTIDS=2,3",
                    "SLURM_CPUS_PER_TASK=4",
                    "PMI_FD=5",
                    "PMI_RANK=3",
                    "PMIX_RANK=3",
                    "OMPI_COMM_WORLD_RANK=3",
                    "OMPI_MCA_btl=self,tcp",
                    "DDP_BOOTSTRAP_TOKEN=old",
                    "RANKING=keep",
                    NULL};
    struct ddp_launch_opts o;
    memset(&o, 0, sizeof o);
    o.nproc_per_node = 4;
    o.nnodes = 2;
    o.node_rank = 1;
    o.master_port = 29400;
    snprintf(o.master_addr, sizeof o.master_addr, "10.0.0.1");
    char **env = ddp_launch_child_env(base, &o, 2, "launch:abc");
    static const char *const want[][2] = {
        {"PATH", "/usr/bin"},
        {"HOME", "/root"},
        {"RANK", "6"},
        {"WORLD_SIZE", "8"},
        {"LOCAL_RANK", "2"},
        {"LOCAL_WORLD_SIZE", "4"},
        {"GROUP_RANK", "1"},
        {"GROUP_WORLD_SIZE", "2"},
        {"MASTER_ADDR", "10.0.0.1"},
        {"MASTER_PORT", "29400"},
        {"DDP_BOOTSTRAP_TOKEN", "launch:abc"},
        {"SLURM_JOB_ID", "55"},
        {"SLURM_CPUS_PER_TASK", "4"},
        {"OMPI_MCA_btl", "self,tcp"},
        {"RANKING", "keep"},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const char *v = find(env, want[i][0]);
        CHECK(v && strcmp(v, want[i][1]) == 0, "child env %s=%s, want %s", want[i][0],
              v ? v : "(unset)", want[i][1]);
    }
    static const char *const gone[] = {"SLURM_PROCID",  "SLURM_LOCALID", "SLURM_NODEID",
                                       "SLURM_STEP_ID", "SLURM_GTIDS",   "PMI_FD",
                                       "PMI_RANK",      "PMIX_RANK",     "OMPI_COMM_WORLD_RANK"};
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
        CHECK(find(env, gone[i]) == NULL, "child env keeps %s", gone[i]);
    ddp_launch_env_free(env);

    /* mpirun's environment: no per-rank variables */
    env = ddp_launch_child_env(base, &o, -1, "launch:abc");
    CHECK(find(env, "RANK") == NULL && find(env, "LOCAL_RANK") == NULL &&
              find(env, "WORLD_SIZE") == NULL,
          "mpirun env has per-rank variables");
    CHECK(find(env, "MASTER_ADDR") && strcmp(find(env, "MASTER_PORT"), "29400") == 0,
          "mpirun env lacks the master");
    ddp_launch_env_free(env);
    ddp_launch_env_free(NULL);
}

int main(void)
{
    parse();
    child_env();
    printf("launcher: %d checks, %d failed\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}

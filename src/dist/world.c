/*
 * world.c - launcher detection, rank layout, master and port (contract in world.h).
 *
 * Every value comes through one accessor (the caller's ddp_env_fn or getenv), is parsed
 * strictly and cross-checked against the others before it is trusted; any inconsistency is
 * an error line naming the variable, because a wrong rank or master makes peers wait on each
 * other until a timeout instead of failing at once. Leaves binding, sockets and printing to
 * others.
 */
#include "dist/world.h"

#include <inttypes.h>
#include <netdb.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dist/hostlist.h"
#include "core/util.h"

/* Largest Slurm job or step id accepted: Slurm keeps both in 32 bits. */
#define ID_MAX 4294967295LL
/* How much of a bad value an error line echoes, and the buffer that holds it. */
#define VALUE_QUOTE_MAX 40
#define SHOWN_LEN (VALUE_QUOTE_MAX + 4)

/* The accessor plus the advice for each family of variables. */
struct envr {
    ddp_env_fn fn;
    void *ctx;
};

static const char FIX_SLURM[] = "these are set by srun; start ddptrain with srun and do not set "
                                "or edit SLURM_* variables by hand";
static const char FIX_OMPI[] = "these are set by mpirun; do not set OMPI_COMM_WORLD_* by hand";
static const char FIX_TORCH[] = "set RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, "
                                "MASTER_ADDR, MASTER_PORT consistently (torchrun or ddptrain "
                                "launch do)";

const char *ddp_launcher_name(enum ddp_launcher l)
{
    switch (l) {
    case DDP_LAUNCHER_SINGLE:
        return "single";
    case DDP_LAUNCHER_SLURM:
        return "slurm";
    case DDP_LAUNCHER_OMPI:
        return "ompi";
    case DDP_LAUNCHER_TORCHRUN:
        return "torchrun";
    }
    return "unknown";
}

int ddp_world_derive_port(int64_t job_id, int64_t step_id)
{
    int64_t job = job_id < 0 ? 0 : job_id % 1000;
    int64_t step = step_id < 0 ? 0 : step_id % 10;
    return DDP_WORLD_PORT_BASE + (int)(job * 10 + step);
}

/* s cut to VALUE_QUOTE_MAX bytes ("..." appended when cut) with control and non-ASCII bytes
 * shown as '?', so that an error line quoting an environment value stays one line. */
static const char *shown(const char *s, char *buf, size_t buflen)
{
    size_t n = 0;
    for (; s[n] && n < VALUE_QUOTE_MAX && n + 4 < buflen; n++)
        buf[n] = (unsigned char)s[n] >= 0x20 && (unsigned char)s[n] < 0x7f ? s[n] : '?';
    buf[n] = '\0';
    if (s[n])
        snprintf(buf + n, buflen - n, "...");
    return buf;
}

/* Value of name, or NULL when unset or empty. */
static const char *get(const struct envr *e, const char *name)
{
    const char *v = e->fn ? e->fn(e->ctx, name) : getenv(name);
    return (v && *v) ? v : NULL;
}

/* Read name as an integer in [lo, hi]. Unset: *out = dflt and 0 unless required.
 * fix is the advice appended to the error line. */
static int get_int(const struct envr *e, const char *name, int64_t lo, int64_t hi, int required,
                   int64_t dflt, int64_t *out, const char *fix, char *err, size_t errlen)
{
    char sb[SHOWN_LEN];
    const char *v = get(e, name);
    if (!v) {
        if (required)
            return ddp_err(err, errlen,
                           "%s is not set; expected an integer in %" PRId64 "..%" PRId64 "; %s",
                           name, lo, hi, fix);
        *out = dflt;
        return 0;
    }
    int64_t x;
    if (ddp_parse_i64(v, &x) < 0 || x < lo || x > hi)
        return ddp_err(err, errlen, "%s=\"%s\" is not an integer in %" PRId64 "..%" PRId64 "; %s",
                       name, shown(v, sb, sizeof sb), lo, hi, fix);
    *out = x;
    return 0;
}

/* Like get_int for an int-sized value. */
static int get_i(const struct envr *e, const char *name, int64_t lo, int64_t hi, int required,
                 int dflt, int *out, const char *fix, char *err, size_t errlen)
{
    int64_t x;
    if (get_int(e, name, lo, hi, required, dflt, &x, fix, err, errlen) < 0)
        return -1;
    *out = (int)x;
    return 0;
}

/* 1 when SLURM_MPI_TYPE names PMIx ("pmix", "pmix_v3", ...). */
static int is_pmix(const char *t)
{
    return t && (strcmp(t, "pmix") == 0 || strncmp(t, "pmix_v", 6) == 0);
}

/* Numeric address of name (IPv4 preferred) into addr. Returns 0, or -1 with the resolver's
 * reason in why. */
static int resolve(const char *name, char *addr, size_t addrlen, char *why, size_t whylen)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(name, NULL, &hints, &res);
    if (rc != 0 || !res) {
        snprintf(why, whylen, "%s", rc ? gai_strerror(rc) : "no address");
        return -1;
    }
    struct addrinfo *pick = res;
    for (struct addrinfo *a = res; a; a = a->ai_next)
        if (a->ai_family == AF_INET) {
            pick = a;
            break;
        }
    rc = getnameinfo(pick->ai_addr, pick->ai_addrlen, addr, (socklen_t)addrlen, NULL, 0,
                     NI_NUMERICHOST);
    freeaddrinfo(res);
    if (rc != 0) {
        snprintf(why, whylen, "%s", gai_strerror(rc));
        return -1;
    }
    return 0;
}

/* This machine's host name (never fails: "localhost" if the kernel will not say). */
static void own_hostname(char *dst, size_t dstlen)
{
    char h[DDP_HOST_MAX + 1];
    if (gethostname(h, sizeof h) != 0 || h[0] == '\0')
        snprintf(h, sizeof h, "localhost");
    h[sizeof h - 1] = '\0';
    snprintf(dst, dstlen, "%.*s", (int)dstlen - 1, h);
}

/* Fail when variable `name` of another launcher is set and differs from `mine`. */
static int agree(const struct envr *e, const char *name, int mine, const char *my_name,
                 const char *other, char *err, size_t errlen)
{
    char sb[SHOWN_LEN];
    const char *v = get(e, name);
    if (!v)
        return 0;
    int64_t x;
    if (ddp_parse_i64(v, &x) < 0 || x != mine)
        return ddp_err(err, errlen,
                       "mixed launchers: %s=%d but %s=\"%s\" (%s); start ddptrain with one "
                       "launcher, or unset the other launcher's variables",
                       my_name, mine, name, shown(v, sb, sizeof sb), other);
    return 0;
}

/* Check a rank layout read from any launcher. */
static int check_layout(const struct ddp_world *w, const char *rank_var, const char *size_var,
                        const char *lrank_var, const char *lsize_var, const char *fix, char *err,
                        size_t errlen)
{
    if (w->rank >= w->world_size)
        return ddp_err(err, errlen, "%s=%d is not below %s=%d; expected a rank in 0..%d; %s",
                       rank_var, w->rank, size_var, w->world_size, w->world_size - 1, fix);
    if (w->local_size > w->world_size)
        return ddp_err(err, errlen, "%s=%d is larger than %s=%d; %s", lsize_var, w->local_size,
                       size_var, w->world_size, fix);
    if (w->local_rank >= w->local_size)
        return ddp_err(err, errlen, "%s=%d is not below the %d ranks on this node (%s); %s",
                       lrank_var, w->local_rank, w->local_size, lsize_var, fix);
    return 0;
}

/* Strict "a,b,c" list of non-negative ints (SLURM_GTIDS). Returns count, or -1. */
static int parse_int_list(const char *s, int *v, int cap)
{
    int n = 0;
    const char *p = s;
    for (;;) {
        const char *q = p;
        int64_t x = 0;
        while (*q >= '0' && *q <= '9' && q - p < 10)
            x = x * 10 + (*q++ - '0');
        if (q == p || x >= DDP_WORLD_SIZE_MAX || n == cap)
            return -1;
        v[n++] = (int)x;
        if (*q == '\0')
            return n;
        if (*q != ',')
            return -1;
        p = q + 1;
    }
}

/* Slurm step, after the layout: SLURM_GTIDS (when given) must hold this task, and the master
 * is the node of rank 0 (unless MASTER_ADDR is set: the caller's). hosts and tpn: the step's
 * nodes and tasks per node (ntpn of each). */
static int slurm_master(struct ddp_world *w, const struct envr *e, char **hosts, const int *tpn,
                        int ntpn, char *err, size_t errlen)
{
    char sb[SHOWN_LEN];
    int *gtids = NULL;
    /* Global task ids on this node, when given: one per local task, and ours among them. */
    int holds_rank0 = w->rank == 0;
    const char *gv = get(e, "SLURM_GTIDS");
    if (gv) {
        gtids = ddp_malloc((size_t)w->local_size * sizeof *gtids);
        int ng = parse_int_list(gv, gtids, w->local_size);
        int mine = 0;
        for (int i = 0; i < ng; i++) {
            mine |= gtids[i] == w->rank;
            holds_rank0 |= gtids[i] == 0;
        }
        if (ng != w->local_size || !mine) {
            ddp_err(err, errlen,
                    "SLURM_GTIDS=\"%s\" is not a list of the %d task ids on this "
                    "node including SLURM_PROCID=%d; %s",
                    shown(gv, sb, sizeof sb), w->local_size, w->rank, FIX_SLURM);
            goto fail;
        }
    }

    /* Master: the node of rank 0, unless MASTER_ADDR says otherwise (caller handles it). */
    if (!get(e, "MASTER_ADDR")) {
        const char *dist = get(e, "SLURM_DISTRIBUTION");
        if (dist && strncmp(dist, "arbitrary", 9) == 0) {
            ddp_err(err, errlen,
                    "SLURM_DISTRIBUTION=arbitrary: the node of rank 0 cannot be "
                    "derived from the step layout; set MASTER_ADDR to the host of the first "
                    "task in SLURM_HOSTFILE");
            goto fail;
        }
        int m = 0;
        while (m < ntpn && tpn[m] == 0)
            m++; /* sum == world_size >= 1, so some node has tasks */
        if (holds_rank0 && w->node_id != m) {
            ddp_err(err, errlen,
                    "rank 0 runs on this node (%s, SLURM_NODEID=%d) but the step "
                    "layout puts task 0 on %s; the task distribution is not one ddptrain can "
                    "derive: set MASTER_ADDR to the host of rank 0",
                    w->host, w->node_id, hosts[m]);
            goto fail;
        }
        snprintf(w->master_host, sizeof w->master_host, "%s", hosts[m]);
    }
    free(gtids);
    return 0;
fail:
    free(gtids);
    return -1;
}

/* This task's own node, as slurmd names it, must be the one SLURM_NODEID points at; copies it
 * into w->host. */
static int slurm_own_node(struct ddp_world *w, const struct envr *e, char **hosts, char *err,
                          size_t errlen)
{
    char sb[SHOWN_LEN];
    const char *nodename = get(e, "SLURMD_NODENAME");
    if (nodename && strcmp(nodename, hosts[w->node_id]) != 0)
        return ddp_err(err, errlen,
                       "SLURMD_NODENAME=%s but SLURM_NODEID=%d is %s in "
                       "SLURM_STEP_NODELIST; %s",
                       shown(nodename, sb, sizeof sb), w->node_id, hosts[w->node_id], FIX_SLURM);
    snprintf(w->host, sizeof w->host, "%s", hosts[w->node_id]);
    return 0;
}

/* Slurm step: fills rank layout, host and master_host (unless MASTER_ADDR is set). */
static int detect_slurm(struct ddp_world *w, const struct envr *e, char *err, size_t errlen)
{
    const int64_t M = DDP_WORLD_SIZE_MAX;
    char **hosts = NULL;
    int *tpn = NULL, nhosts = 0, ntpn = 0, rc = -1;
    char sub[DDP_ERR_LEN], sb[SHOWN_LEN];

    if (get_i(e, "SLURM_PROCID", 0, M - 1, 1, 0, &w->rank, FIX_SLURM, err, errlen) < 0 ||
        get_i(e, "SLURM_LOCALID", 0, M - 1, 1, 0, &w->local_rank, FIX_SLURM, err, errlen) < 0 ||
        get_i(e, "SLURM_NODEID", 0, M - 1, 1, 0, &w->node_id, FIX_SLURM, err, errlen) < 0)
        goto out;
    const char *ntasks_var = !get(e, "SLURM_NTASKS") && get(e, "SLURM_STEP_NUM_TASKS")
                                 ? "SLURM_STEP_NUM_TASKS"
                                 : "SLURM_NTASKS";
    if (get_i(e, ntasks_var, 1, M, 1, 0, &w->world_size, FIX_SLURM, err, errlen) < 0)
        goto out;
    if (w->rank >= w->world_size) {
        ddp_err(err, errlen, "SLURM_PROCID=%d is not below %s=%d; expected a rank in 0..%d; %s",
                w->rank, ntasks_var, w->world_size, w->world_size - 1, FIX_SLURM);
        goto out;
    }

    const char *nl = get(e, "SLURM_STEP_NODELIST");
    if (!nl) {
        ddp_err(err, errlen,
                "SLURM_STEP_NODELIST is not set inside a Slurm step (SLURM_STEP_ID "
                "is); expected the step's hostlist, e.g. n[1-2]; %s",
                FIX_SLURM);
        goto out;
    }
    if (ddp_hostlist_expand(nl, &hosts, &nhosts, sub, sizeof sub) < 0) {
        ddp_err(err, errlen, "SLURM_STEP_NODELIST: %s", sub);
        goto out;
    }
    if (nhosts == 0) {
        ddp_err(err, errlen, "SLURM_STEP_NODELIST holds no host name; %s", FIX_SLURM);
        goto out;
    }
    const char *tpn_var =
        get(e, "SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
    const char *tv = get(e, tpn_var);
    if (!tv) {
        ddp_err(err, errlen,
                "SLURM_STEP_TASKS_PER_NODE is not set inside a Slurm step; expected "
                "counts like 4(x2); %s",
                FIX_SLURM);
        goto out;
    }
    if (ddp_hostlist_expand_counts(tv, &tpn, &ntpn, sub, sizeof sub) < 0) {
        ddp_err(err, errlen, "%s: %s", tpn_var, sub);
        goto out;
    }
    if (ntpn != nhosts) {
        ddp_err(err, errlen,
                "%s=\"%s\" gives %d nodes but SLURM_STEP_NODELIST names %d; "
                "expected one count per node; %s",
                tpn_var, shown(tv, sb, sizeof sb), ntpn, nhosts, FIX_SLURM);
        goto out;
    }
    int64_t sum = 0;
    for (int i = 0; i < ntpn; i++)
        sum += tpn[i];
    if (sum != w->world_size) {
        ddp_err(err, errlen, "%s=\"%s\" adds up to %" PRId64 " tasks but %s=%d; %s", tpn_var,
                shown(tv, sb, sizeof sb), sum, ntasks_var, w->world_size, FIX_SLURM);
        goto out;
    }
    if (get_i(e, "SLURM_STEP_NUM_NODES", 1, M, 0, nhosts, &w->num_nodes, FIX_SLURM, err, errlen) <
        0)
        goto out;
    if (w->num_nodes != nhosts) {
        ddp_err(err, errlen, "SLURM_STEP_NUM_NODES=%d but SLURM_STEP_NODELIST names %d nodes; %s",
                w->num_nodes, nhosts, FIX_SLURM);
        goto out;
    }
    if (w->node_id >= w->num_nodes) {
        ddp_err(err, errlen, "SLURM_NODEID=%d is not below the step's %d nodes; %s", w->node_id,
                w->num_nodes, FIX_SLURM);
        goto out;
    }
    w->local_size = tpn[w->node_id];
    if (w->local_rank >= w->local_size) {
        ddp_err(err, errlen,
                "SLURM_LOCALID=%d is not below the %d tasks that %s gives node %d "
                "(%s); %s",
                w->local_rank, w->local_size, tpn_var, w->node_id, hosts[w->node_id], FIX_SLURM);
        goto out;
    }

    if (slurm_own_node(w, e, hosts, err, errlen) < 0)
        goto out;
    if (slurm_master(w, e, hosts, tpn, ntpn, err, errlen) < 0)
        goto out;
    rc = 0;
out:
    ddp_hostlist_free(hosts, nhosts);
    free(tpn);
    return rc;
}

/* OpenMPI (mpirun): rank layout; host and master are the caller's. */
static int detect_ompi(struct ddp_world *w, const struct envr *e, char *err, size_t errlen)
{
    const int64_t M = DDP_WORLD_SIZE_MAX;
    int node_rank;
    if (get_i(e, "OMPI_COMM_WORLD_RANK", 0, M - 1, 1, 0, &w->rank, FIX_OMPI, err, errlen) < 0 ||
        get_i(e, "OMPI_COMM_WORLD_SIZE", 1, M, 1, 0, &w->world_size, FIX_OMPI, err, errlen) < 0 ||
        get_i(e, "OMPI_COMM_WORLD_LOCAL_RANK", 0, M - 1, 1, 0, &w->local_rank, FIX_OMPI, err,
              errlen) < 0 ||
        get_i(e, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, M, 1, 0, &w->local_size, FIX_OMPI, err, errlen) <
            0 ||
        get_i(e, "OMPI_COMM_WORLD_NODE_RANK", 0, M - 1, 0, 0, &node_rank, FIX_OMPI, err, errlen) <
            0)
        return -1;
    if (check_layout(w, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", FIX_OMPI, err,
                     errlen) < 0)
        return -1;
    /* OpenMPI exports no node index. OpenMPI 4 (ORTE) leaves two hints: the node count in
     * OMPI_MCA_orte_num_nodes and the local daemon's id ("JOBID.VPID;uri", VPID = node index
     * in mpirun's list) in OMPI_MCA_orte_local_daemon_uri. These are internals, so a hint
     * that does not parse is ignored and we fall back on mpirun's default node-by-node
     * mapping: node = rank / local_size. */
    w->num_nodes = (w->world_size + w->local_size - 1) / w->local_size;
    w->node_id = w->rank / w->local_size;
    int64_t nn, vpid;
    const char *hint = get(e, "OMPI_MCA_orte_num_nodes");
    const char *uri = get(e, "OMPI_MCA_orte_local_daemon_uri");
    const char *dot = uri ? strchr(uri, '.') : NULL;
    char vbuf[16];
    size_t vlen = dot ? strcspn(dot + 1, ";") : 0;
    if (hint && ddp_parse_i64(hint, &nn) == 0 && nn >= 1 && nn <= w->world_size && vlen > 0 &&
        vlen < sizeof vbuf) {
        memcpy(vbuf, dot + 1, vlen);
        vbuf[vlen] = '\0';
        if (ddp_parse_i64(vbuf, &vpid) == 0 && vpid >= 0 && vpid < nn) {
            w->num_nodes = (int)nn;
            w->node_id = (int)vpid;
        }
    }
    if (w->node_id >= w->num_nodes)
        w->node_id = w->num_nodes - 1;
    return 0;
}

/* torchrun style: rank layout; master is the caller's. */
static int detect_torch(struct ddp_world *w, const struct envr *e, char *err, size_t errlen)
{
    const int64_t M = DDP_WORLD_SIZE_MAX;
    if (get_i(e, "RANK", 0, M - 1, 1, 0, &w->rank, FIX_TORCH, err, errlen) < 0 ||
        get_i(e, "WORLD_SIZE", 1, M, 1, 0, &w->world_size, FIX_TORCH, err, errlen) < 0)
        return -1;
    int has_lr = get(e, "LOCAL_RANK") != NULL, has_ls = get(e, "LOCAL_WORLD_SIZE") != NULL;
    if (has_lr != has_ls)
        return ddp_err(err, errlen, "%s is set but %s is not; expected both or neither; %s",
                       has_lr ? "LOCAL_RANK" : "LOCAL_WORLD_SIZE",
                       has_lr ? "LOCAL_WORLD_SIZE" : "LOCAL_RANK", FIX_TORCH);
    if (has_lr) {
        if (get_i(e, "LOCAL_RANK", 0, M - 1, 1, 0, &w->local_rank, FIX_TORCH, err, errlen) < 0 ||
            get_i(e, "LOCAL_WORLD_SIZE", 1, M, 1, 0, &w->local_size, FIX_TORCH, err, errlen) < 0)
            return -1;
    } else {
        w->local_rank = 0;
        w->local_size = 1;
        if (w->world_size > 1)
            snprintf(w->warning, sizeof w->warning,
                     "LOCAL_RANK and LOCAL_WORLD_SIZE are not set: assuming one rank per node; "
                     "set them (torchrun does) when several ranks share a node");
    }
    if (check_layout(w, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", FIX_TORCH, err,
                     errlen) < 0)
        return -1;
    int64_t dflt_nodes = (w->world_size + w->local_size - 1) / w->local_size;
    if (get_i(e, "GROUP_WORLD_SIZE", 1, M, 0, (int)dflt_nodes, &w->num_nodes, FIX_TORCH, err,
              errlen) < 0 ||
        get_i(e, "GROUP_RANK", 0, M - 1, 0, w->rank / w->local_size, &w->node_id, FIX_TORCH, err,
              errlen) < 0)
        return -1;
    if (w->node_id >= w->num_nodes)
        return ddp_err(err, errlen,
                       "node rank %d (GROUP_RANK, or RANK / LOCAL_WORLD_SIZE) is "
                       "not below the %d nodes (GROUP_WORLD_SIZE, or WORLD_SIZE / "
                       "LOCAL_WORLD_SIZE); %s",
                       w->node_id, w->num_nodes, FIX_TORCH);
    if (w->world_size > 1 && !get(e, "MASTER_ADDR"))
        return ddp_err(err, errlen,
                       "MASTER_ADDR is not set but WORLD_SIZE=%d; expected the host "
                       "of rank 0; %s",
                       w->world_size, FIX_TORCH);
    return 0;
}

/* Warning (or error) for a Slurm allocation shell without a step: one process only. */
static int detect_batch(struct ddp_world *w, const struct envr *e, char *err, size_t errlen)
{
    const int64_t M = DDP_WORLD_SIZE_MAX;
    int ntasks, nnodes;
    const char *nn_var = get(e, "SLURM_JOB_NUM_NODES") ? "SLURM_JOB_NUM_NODES" : "SLURM_NNODES";
    if (get_i(e, "SLURM_NTASKS", 1, M, 0, 1, &ntasks, FIX_SLURM, err, errlen) < 0 ||
        get_i(e, nn_var, 1, M, 0, 1, &nnodes, FIX_SLURM, err, errlen) < 0)
        return -1;
    if (ntasks > 1 || nnodes > 1)
        snprintf(w->warning, sizeof w->warning,
                 "running as ONE process: this Slurm job has %d task(s) on %d node(s), but "
                 "no srun step started them (SLURM_STEP_ID unset); use `srun ddptrain ...` "
                 "in the batch script to run one rank per task",
                 ntasks, nnodes);
    return 0;
}

/* Master address and port, after the launcher's detection: MASTER_ADDR wins, else what the
 * launcher gave (Slurm: node of rank 0); the port from [dist] port, MASTER_PORT, the job, or
 * the default (0 if the master is unknown). */
static int master_address(struct ddp_world *w, const struct envr *e, int port_override, char *err,
                          size_t errlen)
{
    char why[256], sb[SHOWN_LEN];
    /* Master: MASTER_ADDR wins; else what the launcher gave (Slurm: node of rank 0). */
    const char *ma = get(e, "MASTER_ADDR");
    if (ma && w->launcher != DDP_LAUNCHER_SINGLE) {
        if (strlen(ma) >= sizeof w->master_host)
            return ddp_err(err, errlen,
                           "MASTER_ADDR is longer than %d characters; expected a "
                           "host name or address",
                           (int)sizeof w->master_host - 1);
        snprintf(w->master_host, sizeof w->master_host, "%s", ma);
        if (resolve(ma, w->master_addr, sizeof w->master_addr, why, sizeof why) < 0)
            return ddp_err(err, errlen,
                           "MASTER_ADDR=%s does not resolve (%s); set it to a "
                           "host name or address every node can reach",
                           shown(ma, sb, sizeof sb), why);
    } else if (w->launcher == DDP_LAUNCHER_SLURM) {
        if (resolve(w->master_host, w->master_addr, sizeof w->master_addr, why, sizeof why) < 0)
            return ddp_err(err, errlen,
                           "master host %s (node of rank 0 in SLURM_STEP_NODELIST) "
                           "does not resolve (%s); set MASTER_ADDR to its address",
                           w->master_host, why);
    }

    /* Port: [dist] port, MASTER_PORT, derived from the job, default; 0 if master unknown. */
    int mp = 0;
    if (get_i(e, "MASTER_PORT", 1, 65535, 0, 0, &mp,
              "expected a TCP port; unset it to derive "
              "one from the job",
              err, errlen) < 0)
        return -1;
    if (port_override > 0)
        w->master_port = port_override;
    else if (mp > 0)
        w->master_port = mp;
    else if (w->master_host[0] == '\0')
        w->master_port = 0;
    else if (w->job_id >= 0)
        /* under mpirun the ranks inherit different steps (none next to mpirun, the orted
         * step elsewhere): only the job id is common to all of them */
        w->master_port =
            ddp_world_derive_port(w->job_id, w->launcher == DDP_LAUNCHER_OMPI ? -1 : w->step_id);
    else
        w->master_port = DDP_WORLD_PORT_DEFAULT;
    return 0;
}

int ddp_world_detect(struct ddp_world *w, ddp_env_fn env, void *ctx, int port_override, char *err,
                     size_t errlen)
{
    struct envr e = {env, ctx};
    memset(w, 0, sizeof *w);
    w->job_id = w->step_id = -1;
    w->local_size = w->world_size = w->num_nodes = 1;

    if (port_override < 0 || port_override > 65535)
        return ddp_err(err, errlen,
                       "[dist] port = %d is outside 1..65535; use 0 to derive the "
                       "port from the job",
                       port_override);

    /* Slurm ids and CPU count, whatever the launcher (mpirun and torchrun may run in a job). */
    const char *job_var = get(&e, "SLURM_JOB_ID") ? "SLURM_JOB_ID" : "SLURM_JOBID";
    const char *step_var = get(&e, "SLURM_STEP_ID") ? "SLURM_STEP_ID" : "SLURM_STEPID";
    if (get_int(&e, job_var, 0, ID_MAX, 0, -1, &w->job_id, FIX_SLURM, err, errlen) < 0 ||
        get_int(&e, step_var, 0, ID_MAX, 0, -1, &w->step_id, FIX_SLURM, err, errlen) < 0 ||
        get_i(&e, "SLURM_CPUS_PER_TASK", 1, DDP_HOSTLIST_COUNT_MAX, 0, 0, &w->cpus_per_task,
              FIX_SLURM, err, errlen) < 0)
        return -1;

    int slurm_step = w->step_id >= 0 && get(&e, "SLURM_PROCID") != NULL;
    int ompi = get(&e, "OMPI_COMM_WORLD_SIZE") || get(&e, "OMPI_COMM_WORLD_RANK");
    int torch = get(&e, "RANK") || get(&e, "WORLD_SIZE");
    int pmix = is_pmix(get(&e, "SLURM_MPI_TYPE"));

    if (ompi && !(slurm_step && pmix)) {
        /* mpirun, possibly inside an allocation whose orted step's SLURM_* we ignore */
        w->launcher = DDP_LAUNCHER_OMPI;
        if (detect_ompi(w, &e, err, errlen) < 0 ||
            agree(&e, "RANK", w->rank, "OMPI_COMM_WORLD_RANK", "torchrun style", err, errlen) < 0 ||
            agree(&e, "WORLD_SIZE", w->world_size, "OMPI_COMM_WORLD_SIZE", "torchrun style", err,
                  errlen) < 0)
            return -1;
        w->mpi_launched = 1;
        own_hostname(w->host, sizeof w->host);
    } else if (slurm_step) {
        w->launcher = DDP_LAUNCHER_SLURM;
        if (w->job_id < 0)
            return ddp_err(err, errlen,
                           "SLURM_JOB_ID is not set inside a Slurm step "
                           "(SLURM_STEP_ID is); %s",
                           FIX_SLURM);
        if (detect_slurm(w, &e, err, errlen) < 0 ||
            agree(&e, "OMPI_COMM_WORLD_RANK", w->rank, "SLURM_PROCID", "OpenMPI", err, errlen) <
                0 ||
            agree(&e, "OMPI_COMM_WORLD_SIZE", w->world_size, "SLURM_NTASKS", "OpenMPI", err,
                  errlen) < 0 ||
            agree(&e, "RANK", w->rank, "SLURM_PROCID", "torchrun style", err, errlen) < 0 ||
            agree(&e, "WORLD_SIZE", w->world_size, "SLURM_NTASKS", "torchrun style", err, errlen) <
                0)
            return -1;
        w->mpi_launched = pmix;
    } else if (torch) {
        w->launcher = DDP_LAUNCHER_TORCHRUN;
        if (detect_torch(w, &e, err, errlen) < 0)
            return -1;
        own_hostname(w->host, sizeof w->host);
        if (!get(&e, "MASTER_ADDR")) { /* world size 1 (detect_torch checked) */
            snprintf(w->master_host, sizeof w->master_host, "%s", w->host);
            snprintf(w->master_addr, sizeof w->master_addr, "127.0.0.1");
        }
    } else {
        w->launcher = DDP_LAUNCHER_SINGLE;
        if (w->step_id >= 0)
            return ddp_err(err, errlen,
                           "%s is set but SLURM_PROCID is not; expected both "
                           "inside an srun step; %s",
                           step_var, FIX_SLURM);
        if (w->job_id >= 0 && detect_batch(w, &e, err, errlen) < 0)
            return -1;
        own_hostname(w->host, sizeof w->host);
        snprintf(w->master_host, sizeof w->master_host, "%s", w->host);
        snprintf(w->master_addr, sizeof w->master_addr, "127.0.0.1");
    }

    return master_address(w, &e, port_override, err, errlen);
}

int ddp_world_default_threads(const struct ddp_world *w)
{
    if (w->cpus_per_task > 0)
        return w->cpus_per_task;
    cpu_set_t set;
    int allowed = 1;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        allowed = CPU_COUNT(&set);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int local = w->local_size > 0 ? w->local_size : 1;
    int n = allowed;
    if (online > 0 && allowed >= online) /* not bound by the launcher: share the node */
        n = allowed / local;
    return n > 0 ? n : 1;
}

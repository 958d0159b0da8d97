/*
 * launcher.c - `ddptrain launch` (contract in launcher.h, manual in docs/launch.md): parse
 * the options, build each child's environment, start the children (or mpirun), forward
 * signals, and turn the first failure into the launcher's exit code.
 *
 * One thread, one loop: the signals the launcher handles are blocked and read from a
 * signalfd together with SIGCHLD, so forwarding, reaping and the SIGKILL deadline are all
 * decided in one place without async-signal-safety concerns. Leaves rank detection to
 * world.c (the children read the variables set here) and printing to the children.
 */
#include "launch/launcher.h"

#include <errno.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp_build.h"
#include "dist/bootstrap.h"
#include "core/testhooks.h"
#include "core/util.h"
#if HAVE_CUDA
#include "backend/cuda.h"
#endif

extern char **environ;

/* Longest grace accepted: an hour; more is a typo. */
#define GRACE_MAX_S 3600.0
/* Exit code a rank gives after a checkpoint on a signal (DDP_EXIT_REQUEUE): not a failure. */
#define REQUEUE_CODE 75
/* Exit code of a child whose exec failed (as the shells use). */
#define EXEC_FAILED 127

/* Variables of an outer launcher that would confuse the children's world detection. */
// clang-format off
static const char *const STRIP_EXACT[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DDP_BOOTSTRAP_TOKEN",
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_GTIDS", "SLURM_STEP_ID", "SLURM_STEPID",
    "PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_JOBID", "PMI_SPAWNED",
};
// clang-format on
static const char *const STRIP_PREFIX[] = {"OMPI_COMM_WORLD_", "PMIX_"};

/* Parse an integer option value in [lo, hi]. */
static int opt_int(const char *name, const char *v, int lo, int hi, int *out, char *err,
                   size_t errlen)
{
    int64_t x;
    if (!v || ddp_parse_i64(v, &x) < 0 || x < lo || x > hi)
        return ddp_err(err, errlen, "launch: %s needs an integer in %d..%d (got '%.40s')", name, lo,
                       hi, v ? v : "");
    *out = (int)x;
    return 0;
}

/* "--name" or "--name=value" (also with '_' for '-', as torch.distributed.launch spells
 * them): returns 1 and sets *val (NULL when the value is the next argument). */
static int opt_is(const char *arg, const char *name, const char **val)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < n; i++) {
        char a = arg[i], b = name[i];
        if (a != b && !(a == '_' && b == '-' && i > 2))
            return 0;
    }
    if (arg[n] == '\0') {
        *val = NULL;
        return 1;
    }
    if (arg[n] == '=') {
        *val = arg + n + 1;
        return 1;
    }
    return 0;
}

/* The option combinations that parse alone cannot refuse; i is the first non-option. */
static int launch_check(const struct ddp_launch_opts *o, int argc, int have_rank, char *err,
                        size_t errlen)
{
    int i = o->first_arg;
    if (o->nproc_per_node == 0)
        return ddp_err(err, errlen,
                       "launch: --nproc-per-node N is required (ranks to start on "
                       "this node)");
    if (i >= argc)
        return ddp_err(err, errlen,
                       "launch: no JOB.ini given; usage: ddptrain launch "
                       "--nproc-per-node N JOB.ini");
    if ((int64_t)o->nnodes * o->nproc_per_node > DDP_WORLD_SIZE_MAX)
        return ddp_err(err, errlen, "launch: --nnodes %d x --nproc-per-node %d exceeds %d ranks",
                       o->nnodes, o->nproc_per_node, DDP_WORLD_SIZE_MAX);
    if (o->node_rank >= o->nnodes)
        return ddp_err(err, errlen, "launch: --node-rank %d is not below --nnodes %d", o->node_rank,
                       o->nnodes);
    if (o->nnodes > 1 && (!o->master_addr[0] || !have_rank))
        return ddp_err(err, errlen,
                       "launch: with --nnodes %d every node needs --node-rank and "
                       "the same --master-addr (the host of node rank 0)",
                       o->nnodes);
    if (o->nnodes > 1 && o->spawn == DDP_SPAWN_MPIRUN)
        return ddp_err(err, errlen,
                       "launch: --spawn mpirun starts ranks on this node only; "
                       "with --nnodes %d use --spawn env, or mpirun / srun yourself",
                       o->nnodes);
    return 0;
}

int ddp_launch_parse(int argc, char **argv, struct ddp_launch_opts *o, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    o->nnodes = 1;
    o->grace_s = DDP_LAUNCH_GRACE_S;
    o->spawn = DDP_SPAWN_AUTO;
    int i = 1, have_rank = 0;
    for (; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
            return 1;
        if (a[0] != '-' || a[1] == '\0')
            break;
        static const char *const WITH_VALUE[] = {"--nproc-per-node", "--nnodes",      "--node-rank",
                                                 "--master-addr",    "--master-port", "--spawn",
                                                 "--grace"};
        int k = -1;
        for (int j = 0; j < (int)(sizeof WITH_VALUE / sizeof *WITH_VALUE); j++)
            if (opt_is(a, WITH_VALUE[j], &v)) {
                k = j;
                break;
            }
        if (k < 0)
            return ddp_err(err, errlen,
                           "launch: unknown option '%.60s'; see ddptrain launch "
                           "--help",
                           a);
        if (!v) {
            if (i + 1 >= argc)
                return ddp_err(err, errlen, "launch: %s needs a value", WITH_VALUE[k]);
            v = argv[++i];
        }
        int rc = 0;
        switch (k) {
        case 0:
            rc = opt_int("--nproc-per-node", v, 1, DDP_LAUNCH_MAX_NPROC, &o->nproc_per_node, err,
                         errlen);
            break;
        case 1:
            rc = opt_int("--nnodes", v, 1, DDP_WORLD_SIZE_MAX, &o->nnodes, err, errlen);
            break;
        case 2:
            rc = opt_int("--node-rank", v, 0, DDP_WORLD_SIZE_MAX - 1, &o->node_rank, err, errlen);
            have_rank = 1;
            break;
        case 3:
            if (!*v || strlen(v) >= sizeof o->master_addr)
                return ddp_err(err, errlen,
                               "launch: --master-addr needs a host name or "
                               "address (at most %d characters)",
                               (int)sizeof o->master_addr - 1);
            snprintf(o->master_addr, sizeof o->master_addr, "%s", v);
            break;
        case 4:
            rc = opt_int("--master-port", v, 1, 65535, &o->master_port, err, errlen);
            break;
        case 5:
            if (strcmp(v, "auto") == 0)
                o->spawn = DDP_SPAWN_AUTO;
            else if (strcmp(v, "env") == 0)
                o->spawn = DDP_SPAWN_ENV;
            else if (strcmp(v, "mpirun") == 0)
                o->spawn = DDP_SPAWN_MPIRUN;
            else
                return ddp_err(err, errlen,
                               "launch: --spawn must be auto, env or mpirun (got "
                               "'%.40s')",
                               v);
            break;
        case 6:
            if (ddp_parse_f64(v, &o->grace_s) < 0 || !(o->grace_s >= 0) || o->grace_s > GRACE_MAX_S)
                return ddp_err(err, errlen,
                               "launch: --grace needs seconds in 0..%g (got "
                               "'%.40s')",
                               GRACE_MAX_S, v);
            break;
        }
        if (rc < 0)
            return -1;
    }
    o->first_arg = i;
    return launch_check(o, argc, have_rank, err, errlen);
}

/* 1 when "NAME=..." entry kv belongs to an outer launcher. */
static int stripped(const char *kv)
{
    size_t n = strcspn(kv, "=");
    for (size_t i = 0; i < sizeof STRIP_EXACT / sizeof *STRIP_EXACT; i++)
        if (strlen(STRIP_EXACT[i]) == n && strncmp(kv, STRIP_EXACT[i], n) == 0)
            return 1;
    for (size_t i = 0; i < sizeof STRIP_PREFIX / sizeof *STRIP_PREFIX; i++)
        if (strncmp(kv, STRIP_PREFIX[i], strlen(STRIP_PREFIX[i])) == 0)
            return 1;
    return 0;
}

/* "NAME=value" as a new string. */
static char *kv_int(const char *name, int v)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s=%d", name, v);
    return ddp_strdup(buf);
}

static char *kv_str(const char *name, const char *v)
{
    size_t n = strlen(name) + strlen(v) + 2;
    char *s = ddp_malloc(n);
    snprintf(s, n, "%s=%s", name, v);
    return s;
}

char **ddp_launch_child_env(char *const *base, const struct ddp_launch_opts *o, int local_rank,
                            const char *token)
{
    size_t nb = 0;
    while (base && base[nb])
        nb++;
    char **env = ddp_calloc(nb + 12, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < nb; i++)
        if (!stripped(base[i]))
            env[k++] = ddp_strdup(base[i]);
    env[k++] = kv_str("MASTER_ADDR", o->master_addr);
    env[k++] = kv_int("MASTER_PORT", o->master_port);
    env[k++] = kv_str("DDP_BOOTSTRAP_TOKEN", token);
    if (local_rank >= 0) {
        int world = o->nnodes * o->nproc_per_node;
        env[k++] = kv_int("RANK", o->node_rank * o->nproc_per_node + local_rank);
        env[k++] = kv_int("WORLD_SIZE", world);
        env[k++] = kv_int("LOCAL_RANK", local_rank);
        env[k++] = kv_int("LOCAL_WORLD_SIZE", o->nproc_per_node);
        env[k++] = kv_int("GROUP_RANK", o->node_rank);
        env[k++] = kv_int("GROUP_WORLD_SIZE", o->nnodes);
    }
    env[k] = NULL;
    return env;
}

void ddp_launch_env_free(char **env)
{
    if (!env)
        return;
    for (size_t i = 0; env[i]; i++)
        free(env[i]);
    free(env);
}

/* A free TCP port on this host, held in *fd until the launch ends, or 0 (*fd -1). A port
 * bound and released at once goes back to the pool: anyone's bind to port 0 or outgoing
 * connection could take it before rank 0 listens on it. This one stays bound, with
 * SO_REUSEADDR and not listening, so the kernel hands it to no one else, while rank 0's
 * rendezvous, which sets SO_REUSEADDR too, can still listen on it. */
static int reserve_port(int *fd)
{
    *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*fd < 0)
        return 0;
    int one = 1;
    setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t sl = sizeof a;
    if (bind(*fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(*fd, (struct sockaddr *)&a, &sl) == 0)
        return ntohs(a.sin_port);
    close(*fd);
    *fd = -1;
    return 0;
}

/* Full path of an executable name found in PATH into out; 0, or -1 when not found. */
static int find_in_path(const char *name, char *out, size_t outlen)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t n = strcspn(path, ":");
        if (n > 0 && (size_t)snprintf(out, outlen, "%.*s/%s", (int)n, path, name) < outlen &&
            access(out, X_OK) == 0)
            return 0;
        path += n + (path[n] == ':');
    }
    return -1;
}

/* The token that keeps other jobs out of this launch's TCP rendezvous. */
static void make_token(const struct ddp_launch_opts *o, char *tok, size_t toklen)
{
    const char *given = getenv("DDP_BOOTSTRAP_TOKEN");
    if (given && *given) {
        snprintf(tok, toklen, "%s", given);
        return;
    }
    if (o->nnodes > 1) { /* every node's launcher must come to the same token */
        snprintf(tok, toklen, "launch:%.64s:%d:%dx%d", o->master_addr, o->master_port, o->nnodes,
                 o->nproc_per_node);
        return;
    }
    unsigned char r[8] = {0};
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        uint64_t x = (uint64_t)getpid() << 32 ^ (uint64_t)(ddp_now() * 1e9);
        memcpy(r, &x, sizeof r);
    }
    snprintf(tok, toklen, "launch:%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2], r[3], r[4],
             r[5], r[6], r[7]);
}

/* 1 when the ranks of this node will run on GPUs: a build with NCCL whose CUDA driver reports
 * a device (after CUDA_VISIBLE_DEVICES), or DDP_TEST_FAKE_GPUS=N > 0 standing in for it in tests.
 * Otherwise they are CPU ranks, which need MPI for their collectives. */
static int gpu_ranks(void)
{
#if HAVE_NCCL && HAVE_CUDA
    const char *fake = ddp_test_hooks()->fake_gpus;
    int64_t n;
    if (fake && *fake)
        return ddp_parse_i64(fake, &n) == 0 && n > 0;
    return ddp_cuda_device_count() > 0;
#else
    return 0;
#endif
}

/* Exit code of a wait status: the code, or 128 + signal. */
static int status_code(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return DDP_EXIT_RUNTIME;
}

/* What ended a child, for the failure line. */
static void describe(int st, char *out, size_t outlen)
{
    if (WIFSIGNALED(st))
        snprintf(out, outlen, "was killed by signal %d (%s)", WTERMSIG(st),
                 strsignal(WTERMSIG(st)));
    else if (WEXITSTATUS(st) == EXEC_FAILED)
        snprintf(out, outlen, "exited with code %d (could not be started?)", EXEC_FAILED);
    else
        snprintf(out, outlen, "exited with code %d", WEXITSTATUS(st));
}

struct child {
    pid_t pid; /* 0 once reaped */
    int rank, local_rank;
};

/* Fork one child running exe with argv and env; it gets its own process group, the
 * launcher's original signal mask and dies with the launcher (pdeath). Returns its pid, or
 * -1 with errno. */
static pid_t spawn(const char *exe, char *const *argv, char *const *env, const sigset_t *mask,
                   int pdeath)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0) {
        if (pid > 0)
            setpgid(pid, pid); /* also done by the child: whichever runs first */
        return pid;
    }
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, pdeath);
    if (getppid() != parent) /* the launcher died before prctl took effect */
        _exit(DDP_EXIT_LAUNCH);
    sigprocmask(SIG_SETMASK, mask, NULL);
    execve(exe, argv, env);
    fprintf(stderr, "ddptrain launch: cannot run %s: %s\n", exe, strerror(errno));
    _exit(EXEC_FAILED);
}

/* Signal the children of pid (the ranks under mpirun) with sig; returns how many. Reads
 * /proc/PID/task/TID/children: only processes whose parent is pid, found by id. */
static int signal_children_of(pid_t pid, int sig)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char cp[96];
        snprintf(cp, sizeof cp, "/proc/%d/task/%.16s/children", (int)pid, e->d_name);
        FILE *f = fopen(cp, "r");
        if (!f)
            continue;
        int c;
        while (fscanf(f, "%d", &c) == 1)
            if (c > 1 && kill(c, sig) == 0)
                n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

/* Read every pending signal from sfd into the caller's handling: returns a bitmask of
 * 1 << signo for those that arrived (SIGCHLD included). */
static unsigned long read_signals(int sfd)
{
    unsigned long got = 0;
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
        if (si.ssi_signo < 8 * sizeof got)
            got |= 1UL << si.ssi_signo;
    return got;
}

static const int FORWARDED[] = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2};

/* The env mode loop: children[] are running. Returns the launcher's exit code. */
static int supervise_env(struct child *ch, int n, int sfd, double grace_s)
{
    int live = n, first_code = 0, requeue = 0, stopping = 0;
    double kill_at = -1;
    while (live > 0) {
        int ms = -1;
        if (kill_at >= 0) {
            double left = kill_at - ddp_now();
            ms = left <= 0 ? 0 : (int)(left * 1e3) + 1;
        }
        struct pollfd p = {sfd, POLLIN, 0};
        int rc = poll(&p, 1, ms);
        if (rc < 0 && errno != EINTR)
            ddp_die("launch: poll failed: %s", strerror(errno));
        unsigned long got = rc > 0 ? read_signals(sfd) : 0;
        for (size_t s = 0; s < sizeof FORWARDED / sizeof *FORWARDED; s++) {
            int sig = FORWARDED[s];
            if (!(got & (1UL << sig)))
                continue;
            for (int i = 0; i < n; i++)
                if (ch[i].pid > 0)
                    kill(ch[i].pid, sig);
            if (sig == SIGINT || sig == SIGTERM)
                stopping = 1;
        }
        /* reap (SIGCHLD may merge several exits into one signal: loop until none) */
        for (;;) {
            int st;
            pid_t pid = waitpid(-1, &st, WNOHANG);
            if (pid <= 0)
                break;
            int i = 0;
            while (i < n && ch[i].pid != pid)
                i++;
            if (i == n)
                continue;
            ch[i].pid = 0;
            live--;
            int code = status_code(st);
            if (code == REQUEUE_CODE) {
                requeue = 1;
            } else if (code != 0 && first_code == 0) {
                char how[96];
                describe(st, how, sizeof how);
                first_code = code;
                if (live > 0)
                    fprintf(stderr,
                            "ddptrain launch: rank %d (local rank %d, pid %d) %s; "
                            "stopping the other %d rank%s (SIGTERM, SIGKILL after %g s)\n",
                            ch[i].rank, ch[i].local_rank, (int)pid, how, live, live > 1 ? "s" : "",
                            grace_s);
                else
                    fprintf(stderr, "ddptrain launch: rank %d (local rank %d, pid %d) %s\n",
                            ch[i].rank, ch[i].local_rank, (int)pid, how);
                for (int j = 0; j < n && !stopping; j++)
                    if (ch[j].pid > 0)
                        kill(ch[j].pid, SIGTERM);
                kill_at = ddp_now() + grace_s;
            }
        }
        if (kill_at >= 0 && ddp_now() >= kill_at) {
            for (int i = 0; i < n; i++)
                if (ch[i].pid > 0)
                    kill(-ch[i].pid, SIGKILL); /* its process group: it and its helpers */
            kill_at = -1;
        }
    }
    return first_code ? first_code : requeue ? REQUEUE_CODE : 0;
}

/* The mpirun mode loop: one child, mpirun. Returns the launcher's exit code. */
static int supervise_mpirun(pid_t mpirun, int sfd)
{
    for (;;) {
        struct pollfd p = {sfd, POLLIN, 0};
        int rc = poll(&p, 1, -1);
        if (rc < 0 && errno != EINTR)
            ddp_die("launch: poll failed: %s", strerror(errno));
        unsigned long got = rc > 0 ? read_signals(sfd) : 0;
        for (size_t s = 0; s < sizeof FORWARDED / sizeof *FORWARDED; s++) {
            int sig = FORWARDED[s];
            if (!(got & (1UL << sig)))
                continue;
            /* mpirun forwards USR1/USR2; on INT/TERM it would abort the job at once, so
             * those go to the ranks themselves (mpirun's children) */
            if ((sig == SIGUSR1 || sig == SIGUSR2) || signal_children_of(mpirun, sig) == 0)
                kill(mpirun, sig);
        }
        int st;
        pid_t pid = waitpid(mpirun, &st, WNOHANG);
        if (pid == mpirun) {
            int code = status_code(st);
            if (code != 0 && code != REQUEUE_CODE) {
                char how[96];
                describe(st, how, sizeof how);
                fprintf(stderr,
                        "ddptrain launch: mpirun %s (it names the failing rank "
                        "above)\n",
                        how);
            }
            return code;
        }
    }
}

/* The master's address and port, final before any child starts: --master-port, else
 * MASTER_PORT, else on one node a free port (held in *hold until the launch ends, else -1),
 * else the default. Returns 0 or an exit code. */
static int resolve_master(struct ddp_launch_opts *o, int *hold)
{
    *hold = -1;
    if (!o->master_addr[0])
        snprintf(o->master_addr, sizeof o->master_addr, "127.0.0.1");
    if (o->master_port != 0)
        return 0;
    const char *mp = getenv("MASTER_PORT");
    int64_t x;
    if (mp && *mp) {
        if (ddp_parse_i64(mp, &x) < 0 || x < 1 || x > 65535) {
            fprintf(stderr,
                    "ddptrain: launch: MASTER_PORT=\"%.20s\" is not a port in "
                    "1..65535; unset it or pass --master-port\n",
                    mp);
            return DDP_EXIT_USAGE;
        }
        o->master_port = (int)x;
    } else if (o->nnodes == 1) {
        o->master_port = reserve_port(hold);
    }
    if (o->master_port == 0)
        o->master_port = DDP_WORLD_PORT_DEFAULT;
    return 0;
}

/* The children's argv: [mpirun options...] exe JOB.ini ARGS... (NULL-terminated; the strings
 * are mpirun's, exe's, np's and argv's). */
static char **child_argv(const struct ddp_launch_opts *o, int argc, char **argv, char *mpirun,
                         char *exe, char *np, size_t nplen)
{
    int nargs = argc - o->first_arg;
    char **cargv = ddp_calloc((size_t)nargs + 32, sizeof *cargv);
    int k = 0;
    if (mpirun) {
        static const char *const OPTS[] = {"--oversubscribe", "--bind-to", "none",
                                           /* this node only, even inside a Slurm allocation */
                                           "--mca", "plm", "isolated", "--mca", "ras", "^slurm",
                                           "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x",
                                           "DDP_BOOTSTRAP_TOKEN"};
        snprintf(np, nplen, "%d", o->nproc_per_node);
        cargv[k++] = mpirun;
        cargv[k++] = "-n";
        cargv[k++] = np;
        for (size_t j = 0; j < 3; j++)
            cargv[k++] = (char *)OPTS[j];
        if (geteuid() == 0)
            cargv[k++] = "--allow-run-as-root";
        for (size_t j = 3; j < sizeof OPTS / sizeof *OPTS; j++)
            cargv[k++] = (char *)OPTS[j];
    }
    cargv[k++] = exe;
    for (int i = o->first_arg; i < argc; i++)
        cargv[k++] = argv[i];
    cargv[k] = NULL;
    return cargv;
}

/* Env mode: start every local rank, then supervise them. Returns the exit code. */
static int run_env(const struct ddp_launch_opts *o, char *exe, char **cargv, const char *token,
                   const sigset_t *old, int sfd)
{
    struct child *ch = ddp_calloc((size_t)o->nproc_per_node, sizeof *ch);
    int started = 0, code;
    for (int l = 0; l < o->nproc_per_node; l++) {
        char **env = ddp_launch_child_env(environ, o, l, token);
        pid_t pid = spawn(exe, cargv, env, old, SIGKILL);
        ddp_launch_env_free(env);
        if (pid < 0) {
            fprintf(stderr, "ddptrain: launch: cannot start local rank %d: %s\n", l,
                    strerror(errno));
            break;
        }
        ch[l] = (struct child){pid, o->node_rank * o->nproc_per_node + l, l};
        started++;
    }
    if (started < o->nproc_per_node) {
        for (int l = 0; l < started; l++)
            kill(-ch[l].pid, SIGKILL);
        for (int l = 0; l < started; l++)
            waitpid(ch[l].pid, NULL, 0);
        code = DDP_EXIT_LAUNCH;
    } else {
        code = supervise_env(ch, started, sfd, o->grace_s);
    }
    free(ch);
    return code;
}

/* Start the children (or mpirun) with the handled signals arriving through a signalfd (the
 * children get the original mask back), supervise them. Returns the exit code. */
static int run_children(const struct ddp_launch_opts *o, char *mpirun, char *exe, char **cargv,
                        const char *token)
{
    /* SIGCHLD must not be ignored (inherited SIG_IGN would reap the children for us). */
    signal(SIGCHLD, SIG_DFL);
    sigset_t set, old;
    sigemptyset(&set);
    for (size_t s = 0; s < sizeof FORWARDED / sizeof *FORWARDED; s++)
        sigaddset(&set, FORWARDED[s]);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, &old);
    int sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        fprintf(stderr, "ddptrain: launch: signalfd failed: %s\n", strerror(errno));
        sigprocmask(SIG_SETMASK, &old, NULL);
        return DDP_EXIT_LAUNCH;
    }
    int code;
    if (mpirun) {
        char **env = ddp_launch_child_env(environ, o, -1, token);
        pid_t pid = spawn(mpirun, cargv, env, &old, SIGTERM);
        ddp_launch_env_free(env);
        if (pid < 0) {
            fprintf(stderr, "ddptrain: launch: cannot start mpirun: %s\n", strerror(errno));
            code = DDP_EXIT_LAUNCH;
        } else {
            code = supervise_mpirun(pid, sfd);
        }
    } else {
        code = run_env(o, exe, cargv, token, &old, sfd);
    }
    close(sfd);
    sigprocmask(SIG_SETMASK, &old, NULL);
    return code;
}

/* ddp_launch_run once the master is settled. */
static int launch_run(struct ddp_launch_opts *o, int argc, char **argv)
{
    int use_mpirun =
        o->spawn == DDP_SPAWN_MPIRUN ||
        (o->spawn == DDP_SPAWN_AUTO && o->nnodes == 1 && o->nproc_per_node > 1 && !gpu_ranks());
    char mpirun[4096];
    if (use_mpirun) {
        if (!HAVE_MPI || find_in_path("mpirun", mpirun, sizeof mpirun) < 0) {
            fprintf(stderr,
                    "ddptrain: launch: %d CPU ranks talk through MPI, but %s: install "
                    "OpenMPI (openmpi-bin) and rebuild, or pass --spawn env for programs that "
                    "need no collectives\n",
                    o->nproc_per_node,
                    HAVE_MPI ? "mpirun is not in PATH" : "this ddptrain was built without MPI");
            return DDP_EXIT_LAUNCH;
        }
    }
    char exe[4096];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el <= 0) {
        fprintf(stderr, "ddptrain: launch: cannot find this program (/proc/self/exe): %s\n",
                strerror(errno));
        return DDP_EXIT_LAUNCH;
    }
    exe[el] = '\0';
    char token[DDP_BOOTSTRAP_TOKEN_MAX + 1], np[16];
    make_token(o, token, sizeof token);
    char **cargv = child_argv(o, argc, argv, use_mpirun ? mpirun : NULL, exe, np, sizeof np);
    int code = run_children(o, use_mpirun ? mpirun : NULL, exe, cargv, token);
    free(cargv);
    return code;
}

int ddp_launch_run(struct ddp_launch_opts *o, int argc, char **argv)
{
    int hold;
    int code = resolve_master(o, &hold);
    if (code == 0)
        code = launch_run(o, argc, argv);
    if (hold >= 0)
        close(hold);
    return code;
}

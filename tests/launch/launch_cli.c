/*
 * launch_cli.c - test driver: `launch_cli hostlist|env|launch|bootstrap-test ...` call the
 * same functions that `ddptrain hostlist|env|launch|bootstrap-test` dispatch to, so the
 * command-line behaviour is tested whatever state src/main.c is in. `launch` re-runs this
 * driver (/proc/self/exe) as its children, so two helpers exist for them:
 *   launch_cli probe [--fail RANK:CODE] [--ignore-term] [--sleep S]
 *       prints "probe rank=R local_rank=L world_size=W pid=P pgid=G", then waits up to S
 *       seconds (default 20) for SIGINT/SIGTERM/SIGUSR1/SIGUSR2: prints "probe rank=R
 *       signal=N" and exits 75 (a checkpoint-and-requeue stand-in). Rank RANK instead exits
 *       CODE after 0.3 s (CODE < 0: dies of signal -CODE). --ignore-term: SIGTERM is noted
 *       but the probe keeps waiting.
 *   launch_cli port-check   (a launch's child) exits 0 when MASTER_PORT is held, i.e. another
 *       program's plain bind to it fails with EADDRINUSE; prints "port-check port=P held".
 *   launch_cli hold-port PORT S     listens on PORT (0: a free one; all addresses) for S
 *       seconds; prints "holding PORT" once listening.
 */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "launch/launcher.h"

static volatile sig_atomic_t g_sig;

static void on_signal(int s)
{
    g_sig = s;
}

static int env_int(const char *a, const char *b)
{
    const char *v = getenv(a);
    if (!v || !*v)
        v = getenv(b);
    return v && *v ? atoi(v) : -1;
}

static int probe(int argc, char **argv)
{
    int fail_rank = -1, fail_code = 0, ignore_term = 0;
    double sleep_s = 20;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--fail") == 0 && i + 1 < argc &&
            sscanf(argv[i + 1], "%d:%d", &fail_rank, &fail_code) == 2)
            i++;
        else if (strcmp(argv[i], "--ignore-term") == 0)
            ignore_term = 1;
        else if (strcmp(argv[i], "--sleep") == 0 && i + 1 < argc)
            sleep_s = atof(argv[++i]);
        else {
            fprintf(stderr, "probe: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    int rank = env_int("RANK", "OMPI_COMM_WORLD_RANK");
    int lrank = env_int("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK");
    int world = env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    printf("probe rank=%d local_rank=%d world_size=%d pid=%d pgid=%d\n", rank, lrank, world,
           (int)getpid(), (int)getpgrp());
    fflush(stdout);
    if (rank == fail_rank) {
        usleep(300000);
        if (fail_code < 0) {
            signal(-fail_code, SIG_DFL);
            raise(-fail_code);
        }
        return fail_code;
    }
    for (double t = 0; t < sleep_s; t += 0.01) {
        if (g_sig && !(ignore_term && g_sig == SIGTERM)) {
            printf("probe rank=%d signal=%d\n", rank, (int)g_sig);
            fflush(stdout);
            return 75;
        }
        if (g_sig == SIGTERM) {
            printf("probe rank=%d ignored=%d\n", rank, SIGTERM);
            fflush(stdout);
            g_sig = 0;
        }
        usleep(10000);
    }
    return 0;
}

static int port_check(void)
{
    const char *v = getenv("MASTER_PORT");
    int port = v ? atoi(v) : 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    if (port <= 0 || fd < 0) {
        fprintf(stderr, "port-check: MASTER_PORT \"%s\" or socket\n", v ? v : "");
        return 2;
    }
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        printf("port-check port=%d free: another program could take it\n", port);
        return 1;
    }
    int e = errno;
    close(fd);
    printf("port-check port=%d %s\n", port, e == EADDRINUSE ? "held" : strerror(e));
    return e == EADDRINUSE ? 0 : 1;
}

static int hold_port(int port, double s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    socklen_t sl = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &sl) != 0) {
        perror("hold-port");
        return 1;
    }
    printf("holding %d\n", ntohs(a.sin_port));
    fflush(stdout);
    usleep((useconds_t)(s * 1e6));
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    const char *c = argc >= 2 ? argv[1] : "";
    if (strcmp(c, "hostlist") == 0)
        return ddp_cmd_hostlist(argc - 1, argv + 1);
    if (strcmp(c, "env") == 0)
        return ddp_cmd_env(argc - 1, argv + 1);
    if (strcmp(c, "launch") == 0)
        return ddp_cmd_launch(argc - 1, argv + 1);
    if (strcmp(c, "bootstrap-test") == 0)
        return ddp_cmd_bootstrap_test(argc - 1, argv + 1);
    if (strcmp(c, "probe") == 0)
        return probe(argc - 1, argv + 1);
    if (strcmp(c, "port-check") == 0)
        return port_check();
    if (strcmp(c, "hold-port") == 0 && argc == 4)
        return hold_port(atoi(argv[2]), atof(argv[3]));
    fprintf(stderr, "usage: launch_cli hostlist|env|launch|bootstrap-test|probe|port-check|"
                    "hold-port ...\n");
    return 2;
}

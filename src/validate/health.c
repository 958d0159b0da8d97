/*
 * health.c - what `ddptrain validate` needs from the node beyond its measurements: the CPU
 * time other processes use while it measures (/proc/stat against our own rusage), the time
 * budget of --slurm-health, and --drain (scontrol). See validate.h.
 */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "validate/validate.h"

extern char **environ;

double ddp_validate_machine_busy_s(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    unsigned long long v[8] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 4)
        return -1;
    /* user nice system idle iowait irq softirq steal: all but idle and iowait is busy */
    const unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    return (double)busy / (double)sysconf(_SC_CLK_TCK);
}

double ddp_validate_own_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

int ddp_validate_sched_s(double *run_s, double *wait_s)
{
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    if (!f)
        return -1;
    unsigned long long run = 0, wait = 0;
    int n = fscanf(f, "%llu %llu", &run, &wait);
    fclose(f);
    if (n != 2)
        return -1;
    *run_s = (double)run * 1e-9;
    *wait_s = (double)wait * 1e-9;
    return 0;
}

/* ---- the time budget of --slurm-health ---------------------------------------------------- */

static volatile sig_atomic_t g_phase; /* index into g_phases: what ran when the budget ended */
static const char *const g_phases[] = {"start", "rates", "all-reduce", "golden run", "verdict"};

static void on_budget(int sig)
{
    (void)sig;
    static const char a[] = "ddptrain: validate --slurm-health: time budget spent during the ";
    static const char b[] = "; no verdict, the node is left as it is (exit 0)\n";
    ssize_t rc = write(2, a, sizeof a - 1);
    const char *p = g_phases[g_phase];
    rc = write(2, p, strlen(p));
    rc = write(2, b, sizeof b - 1);
    (void)rc;
    _exit(0);
}

void ddp_validate_budget_arm(double seconds)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_budget;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 0}, {(time_t)seconds, (long)((seconds - (long)seconds) * 1e6)}};
    setitimer(ITIMER_REAL, &it, NULL);
}

void ddp_validate_budget_phase(int phase)
{
    if (phase >= 0 && phase < (int)(sizeof g_phases / sizeof g_phases[0]))
        g_phase = phase;
}

void ddp_validate_budget_disarm(void)
{
    struct itimerval it = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &it, NULL);
}

/* ---- --drain ---------------------------------------------------------------------------- */

#define DRAIN_WAIT_S 15.0

int ddp_validate_drain(const char *reason, char *node, size_t nodelen, char *err, size_t errlen)
{
    const char *env = getenv("SLURMD_NODENAME");
    char host[256] = "";
    if (env && *env)
        snprintf(host, sizeof host, "%s", env);
    else if (gethostname(host, sizeof host - 1) == 0)
        host[strcspn(host, ".")] = '\0'; /* Slurm's node names are short host names */
    if (!host[0])
        return ddp_err(err, errlen, "--drain: no node name (SLURMD_NODENAME unset, no hostname)");
    snprintf(node, nodelen, "%s", host);
    char a_node[300], a_reason[300];
    snprintf(a_node, sizeof a_node, "nodename=%s", host);
    snprintf(a_reason, sizeof a_reason, "reason=%.200s", reason);
    char *argv[] = {"scontrol", "update", a_node, "state=drain", a_reason, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "scontrol", NULL, NULL, argv, environ);
    if (rc != 0)
        return ddp_err(err, errlen, "--drain: cannot run scontrol: %s", strerror(rc));
    const double t0 = ddp_now();
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR)
            return ddp_err(err, errlen, "--drain: waiting for scontrol: %s", strerror(errno));
        if (ddp_now() - t0 > DRAIN_WAIT_S) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return ddp_err(err, errlen, "--drain: scontrol did not answer within %.0f s",
                           DRAIN_WAIT_S);
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return ddp_err(err, errlen,
                       "--drain: scontrol update nodename=%s state=drain failed "
                       "(exit %d)",
                       host, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}

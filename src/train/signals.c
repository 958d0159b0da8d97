/*
 * signals.c - stop requests by signal (signals.h): a flag that the handlers set and the
 * training loop reads at step boundaries.
 */
#include "train/signals.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/util.h"

static volatile sig_atomic_t g_stop_signal;

static void on_stop_signal(int sig)
{
    g_stop_signal = sig;
}

void ddp_train_catch_early_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* The signals [checkpoint] signals may name. */
static const struct {
    const char *name;
    int sig;
} known[] = {
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"INT", SIGINT},
    {"HUP", SIGHUP},   {"QUIT", SIGQUIT}, {"XCPU", SIGXCPU},
};

/* "USR1" for SIGUSR1: the name [checkpoint] signals uses; "?" for others. */
const char *ddp_signal_name(int sig)
{
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (known[i].sig == sig)
            return known[i].name;
    return "?";
}

/* Parse "[checkpoint] signals" ("USR1, TERM"); with install, set the handlers (again after
 * MPI_Init, which may have replaced them). Other signals get their default action back. */
int ddp_signals_install(const struct ddp_job *job, int install, char *err, size_t errlen)
{
    char buf[sizeof job->signals], where[DDP_PATH_MAX + 64], *save = NULL;
    int usr1 = 0, term = 0;
    snprintf(buf, sizeof buf, "%s", job->signals);
    for (char *tok = strtok_r(buf, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
        if (!strcasecmp(tok, "none"))
            continue;
        const char *name = strncasecmp(tok, "SIG", 3) == 0 ? tok + 3 : tok;
        int sig = 0;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            if (!strcasecmp(name, known[i].name))
                sig = known[i].sig;
        if (!sig)
            return ddp_err(err, errlen,
                           "%s: unknown signal '%s'; expected names such as USR1, "
                           "USR2, TERM, INT, HUP, XCPU, or none",
                           ddp_job_where(job, "checkpoint", "signals", where, sizeof where), tok);
        usr1 |= sig == SIGUSR1;
        term |= sig == SIGTERM;
        if (!install)
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sig, &sa, NULL);
    }
    if (install && !usr1) /* main caught these early; the job did not ask for them */
        signal(SIGUSR1, SIG_DFL);
    if (install && !term)
        signal(SIGTERM, SIG_DFL);
    return 0;
}

int ddp_signals_stop_requested(void)
{
    return g_stop_signal;
}

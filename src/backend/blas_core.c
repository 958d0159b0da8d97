/*
 * blas_core.c - choose OpenBLAS's kernels by the CPU's features when OpenBLAS's own table does
 * not know the CPU (see blas_core.h).
 */
#include "backend/blas_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

char *openblas_get_corename(void);

/* Marks the process that ddptrain executed again, with the core OpenBLAS had chosen. */
#define FROM_VAR "DDP_BLAS_CORE_FROM"

/* Cores that OpenBLAS falls back to for a CPU it does not know (or genuinely old ones). */
static int weak_core(const char *name)
{
    static const char *const WEAK[] = {"prescott",   "core2",     "penryn",  "dunnington",
                                       "nehalem",    "atom",      "banias",  "katmai",
                                       "coppermine", "northwood", "generic", "unknown"};
    for (size_t i = 0; i < sizeof WEAK / sizeof *WEAK; i++)
        if (strcasecmp(name, WEAK[i]) == 0)
            return 1;
    return 0;
}

/* The OpenBLAS core the CPU's features call for; NULL when none is better than the fallback. */
static const char *core_for_cpu(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#endif
    return NULL;
}

static int under_valgrind(void)
{
    const char *pre = getenv("LD_PRELOAD");
    return pre && strstr(pre, "vgpreload") != NULL;
}

void ddp_blas_core_choose(char **argv)
{
    const char *keep = getenv("DDP_BLAS_CORE");
    if (getenv("OPENBLAS_CORETYPE") || getenv(FROM_VAR) || (keep && strcmp(keep, "keep") == 0) ||
        under_valgrind())
        return;
    const char *have = openblas_get_corename();
    const char *want = core_for_cpu();
    if (!have || !want || !weak_core(have))
        return;
    char from[32];
    snprintf(from, sizeof from, "%s", have);
    if (setenv("OPENBLAS_CORETYPE", want, 1) != 0 || setenv(FROM_VAR, from, 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    /* no /proc (or no exec rights): go on with the library's choice */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(FROM_VAR);
}

const char *ddp_blas_core_describe(void)
{
    static char buf[128];
    const char *core = openblas_get_corename();
    const char *from = getenv(FROM_VAR);
    if (from && getenv("OPENBLAS_CORETYPE"))
        snprintf(buf, sizeof buf, "%s (chosen by ddptrain; OpenBLAS took this CPU for %s)",
                 core ? core : "?", from);
    else
        snprintf(buf, sizeof buf, "%s", core ? core : "?");
    return buf;
}

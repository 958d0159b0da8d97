/*
 * blas_core.c - choose OpenBLAS's kernels by the CPU's features when OpenBLAS's own table
 * chose kernels below what the CPU can run (see blas_core.h).
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

/* The instruction-set level of an OpenBLAS core's kernels: 0 for the fallbacks OpenBLAS takes for
 * a CPU it does not know (or genuinely old ones), 2 AVX, 3 AVX2 + FMA, 4 AVX-512; -1 for a name
 * not listed here (a core newer than this table: OpenBLAS's choice is kept). */
static int core_level(const char *name)
{
    static const struct {
        const char *name;
        int level;
    } CORES[] = {{"prescott", 0},      {"core2", 0},      {"penryn", 0},       {"dunnington", 0},
                 {"nehalem", 0},       {"atom", 0},       {"banias", 0},       {"katmai", 0},
                 {"coppermine", 0},    {"northwood", 0},  {"generic", 0},      {"unknown", 0},
                 {"barcelona", 0},     {"opteron", 0},    {"opteron_sse3", 0}, {"sandybridge", 2},
                 {"bulldozer", 2},     {"piledriver", 2}, {"steamroller", 2},  {"excavator", 2},
                 {"haswell", 3},       {"zen", 3},        {"skylakex", 4},     {"cooperlake", 4},
                 {"sapphirerapids", 4}};
    for (size_t i = 0; i < sizeof CORES / sizeof *CORES; i++)
        if (strcasecmp(name, CORES[i].name) == 0)
            return CORES[i].level;
    return -1;
}

const char *ddp_blas_core_pick(const char *have, int isa)
{
    static const char *const WANT[] = {NULL, NULL, "Sandybridge", "Haswell", "SkylakeX"};
    if (!have || isa < 2 || isa > 4)
        return NULL;
    int lv = core_level(have);
    return lv >= 0 && lv < isa ? WANT[isa] : NULL;
}

/* The CPU's instruction-set level, as core_level counts: AVX-512 (F, BW, DQ, VL) 4, AVX2 + FMA 3,
 * AVX 2, else 0. */
static int cpu_level(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return 4;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return 3;
    if (__builtin_cpu_supports("avx"))
        return 2;
#endif
    return 0;
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
    const char *want = ddp_blas_core_pick(have, cpu_level());
    if (!want)
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

static const char *isa_name(int level)
{
    return level == 4 ? "AVX-512" : level == 3 ? "AVX2 and FMA" : level == 2 ? "AVX" : "features";
}

const char *ddp_blas_core_describe(void)
{
    static char buf[160];
    const char *core = openblas_get_corename();
    const char *from = getenv(FROM_VAR);
    if (from && getenv("OPENBLAS_CORETYPE"))
        snprintf(buf, sizeof buf,
                 "%s (chosen by ddptrain for this CPU's %s; OpenBLAS took this CPU for %s)",
                 core ? core : "?", isa_name(cpu_level()), from);
    else
        snprintf(buf, sizeof buf, "%s", core ? core : "?");
    return buf;
}

/*
 * cli/validate.c - the arguments of `ddptrain validate` (validate/validate.h runs it).
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "core/paths.h"
#include "core/util.h"
#include "validate/validate.h"

static void usage(FILE *f)
{
    fprintf(
        f, "usage: ddptrain validate [--level quick|standard|long] [--quick] [--json FILE]\n"
           "                         [--config validate.ini] [--expect FILE]\n"
           "                         [--record-expect FILE [--margin F]]\n"
           "                         [--record FILE|DIR] [--reference FILE|DIR]\n"
           "       ddptrain validate --slurm-health [--budget-s S] [--drain] [--expect FILE]\n"
           "Node validation: inventory, GEMM and memory bandwidth against absolute floors\n"
           "(--expect) and against the other ranks (outliers by median and MAD), an all-reduce\n"
           "sweep with every element checked, and a golden training run (parameters identical\n"
           "on every rank, losses as in a reference). Run it like training: srun, mpirun, or one\n"
           "process. Exit 0: every check passed; 1: a check failed; 6: retest (a check fell\n"
           "short while other processes loaded the node: no fault found, run again when idle).\n"
           "  --level L        quick (prologs, health checks), standard (default), long (burn-in:\n"
           "                   minutes of GEMMs with every result compared, the full sweep)\n"
           "  --quick          the same as --level quick\n"
           "  --json FILE      write the report as JSON (rank 0)\n"
           "  --config FILE    settings (configs/validate.ini lists every key)\n"
           "  --expect FILE    absolute floors for this node type (configs/expect-*.ini); a\n"
           "                   name such as h100-sxm picks the shipped expect-NAME.ini\n"
           "  --record-expect FILE  measure this (trusted, idle) node several times and write\n"
           "                   floors: the worst rate less --margin (default 0.2)\n"
           "  --record FILE    write the golden run's trajectory as a reference (on a trusted\n"
           "                   node; a directory gets <backend>-w<ranks>.ref)\n"
           "  --reference FILE check the golden run against FILE (or DIR/<backend>-w<ranks>.ref)\n"
           "                   instead of the shipped configs/validate-ref/ (installed:\n"
           "                   PREFIX/share/ddptrain/configs/validate-ref/)\n"
           "  --slurm-health   Slurm HealthCheckProgram or prolog: one process for the node, the\n"
           "                   quick level within --budget-s (default 20), exit 0 or 1 (a retest\n"
           "                   and a spent budget exit 0)\n"
           "  --drain          with --slurm-health: drain this node on a failure (scontrol update\n"
           "                   nodename=$SLURMD_NODENAME|hostname state=drain reason=...)\n"
           "Test hooks: DDP_TEST_VALIDATE_FAULT=slow_gemm:R,slow_triad:R,bad_allreduce:R,\n"
           "flip_param:R,bad_grad:R,bad_burn:R injects a fault on rank R (docs/validate.md).\n");
}

/* --level, --margin, --budget-s: their values. Returns 0 or -1 (printed). */
static int option_value(struct ddp_validate_args *a, const char *opt, const char *val)
{
    double d;
    if (!strcmp(opt, "--level")) {
        static const char *const names[] = {"quick", "standard", "long"};
        for (int i = 0; i < 3; i++)
            if (!strcmp(val, names[i])) {
                a->level = i;
                return 0;
            }
        fprintf(stderr, "ddptrain: validate: --level %s: expected quick, standard or long\n", val);
        return -1;
    }
    const int margin = !strcmp(opt, "--margin");
    if (ddp_parse_f64(val, &d) != 0 || (margin ? !(d >= 0 && d < 1) : !(d >= 1 && d <= 3600))) {
        fprintf(stderr, "ddptrain: validate: %s %s: expected %s\n", opt, val,
                margin ? "a fraction from 0 to below 1, e.g. 0.2"
                       : "seconds from 1 to 3600, e.g. 20");
        return -1;
    }
    if (margin)
        a->margin = d;
    else
        a->budget_s = d;
    return 0;
}

/* A flag; 1 if arg is one. */
static int flag(struct ddp_validate_args *a, const char *arg)
{
    if (!strcmp(arg, "--quick"))
        a->level = DDP_VALIDATE_QUICK;
    else if (!strcmp(arg, "--slurm-health"))
        a->slurm_health = 1;
    else if (!strcmp(arg, "--drain"))
        a->drain = 1;
    else
        return 0;
    return 1;
}

/* --expect NAME (no '/', not a file here): the shipped configs/expect-NAME.ini, NAME.ini or
 * NAME of the data directory (core/paths.h), the first that exists; else the name as given,
 * for validate to report. */
static const char *shipped_expect(const char *given, char *buf, size_t len)
{
    struct stat st;
    if (!given || strchr(given, '/') || stat(given, &st) == 0)
        return given;
    static const char *const forms[] = {"configs/expect-%s.ini", "configs/%s.ini", "configs/%s"};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, forms[i], given);
        if (ddp_paths_find(rel, buf, len))
            return buf;
    }
    return given;
}

int ddp_cmd_validate(int argc, char **argv)
{
    struct ddp_validate_args a = {0};
    const char *level = NULL, *margin = NULL, *budget = NULL;
    a.level = DDP_VALIDATE_STANDARD;
    a.margin = 0.2;
    a.budget_s = 20;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int r;
        if (flag(&a, arg))
            continue;
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            usage(stdout);
            return 0;
        }
        if ((r = ddp_opt_value(argc, argv, &i, "--json", &a.json)) ||
            (r = ddp_opt_value(argc, argv, &i, "--config", &a.config)) ||
            (r = ddp_opt_value(argc, argv, &i, "--record", &a.record)) ||
            (r = ddp_opt_value(argc, argv, &i, "--reference", &a.reference)) ||
            (r = ddp_opt_value(argc, argv, &i, "--expect", &a.expect)) ||
            (r = ddp_opt_value(argc, argv, &i, "--record-expect", &a.record_expect)) ||
            (r = ddp_opt_value(argc, argv, &i, "--level", &level)) ||
            (r = ddp_opt_value(argc, argv, &i, "--margin", &margin)) ||
            (r = ddp_opt_value(argc, argv, &i, "--budget-s", &budget))) {
            if (r < 0) {
                fprintf(stderr, "ddptrain: validate: %s needs a value\n", arg);
                return DDP_EXIT_USAGE;
            }
            continue;
        }
        fprintf(stderr, "ddptrain: validate: unknown argument '%s'\n", arg);
        usage(stderr);
        return DDP_EXIT_USAGE;
    }
    if ((level && option_value(&a, "--level", level)) ||
        (margin && option_value(&a, "--margin", margin)) ||
        (budget && option_value(&a, "--budget-s", budget)))
        return DDP_EXIT_USAGE;
    if (a.slurm_health && (level || a.record || a.record_expect)) {
        fprintf(stderr, "ddptrain: validate: --slurm-health runs the quick level and records "
                        "nothing; drop --level, --record and --record-expect\n");
        return DDP_EXIT_USAGE;
    }
    if (margin && !a.record_expect) {
        fprintf(stderr,
                "ddptrain: validate: --margin %s applies to --record-expect only (the "
                "floors it writes); drop it or add --record-expect FILE\n",
                margin);
        return DDP_EXIT_USAGE;
    }
    if ((a.drain || budget) && !a.slurm_health) {
        fprintf(stderr, "ddptrain: validate: %s applies to --slurm-health only\n",
                a.drain ? "--drain" : "--budget-s");
        return DDP_EXIT_USAGE;
    }
    if (a.slurm_health)
        a.level = DDP_VALIDATE_QUICK;
    char expect[PATH_MAX];
    a.expect = shipped_expect(a.expect, expect, sizeof expect);
    return ddp_validate_run(&a);
}

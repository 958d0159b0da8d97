/*
 * cli/validate.c - the arguments of `ddptrain validate` (validate/validate.h runs it).
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "core/util.h"
#include "validate/validate.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ddptrain validate [--quick] [--json FILE] [--config validate.ini]\n"
            "                         [--record FILE|DIR] [--reference FILE|DIR]\n"
            "Node validation: inventory, GEMM and memory bandwidth against the median of the\n"
            "ranks, an all-reduce sweep with every element checked, and a golden training run\n"
            "(parameters identical on every rank, losses as in a reference). Run it like\n"
            "training: srun, mpirun, or one process. Exit 0 only if every check passed.\n"
            "  --quick          fewer and smaller tests (under 30 s: prologs, health checks)\n"
            "  --json FILE      write the report as JSON (rank 0)\n"
            "  --config FILE    settings (configs/validate.ini lists every key)\n"
            "  --record FILE    write the golden run's trajectory as a reference (on a trusted\n"
            "                   node; a directory gets <backend>-w<ranks>.ref)\n"
            "  --reference FILE check the golden run against FILE (or DIR/<backend>-w<ranks>.ref)\n"
            "                   instead of the shipped configs/validate-ref/\n"
            "Test hooks: DDP_TEST_VALIDATE_FAULT=slow_gemm:R,slow_triad:R,bad_allreduce:R,\n"
            "flip_param:R,bad_grad:R injects a fault on rank R (docs/validate.md).\n");
}

int ddp_cmd_validate(int argc, char **argv)
{
    struct ddp_validate_args a = {0};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int r;
        if (!strcmp(arg, "--quick")) {
            a.quick = 1;
            continue;
        }
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            usage(stdout);
            return 0;
        }
        if ((r = ddp_opt_value(argc, argv, &i, "--json", &a.json)) ||
            (r = ddp_opt_value(argc, argv, &i, "--config", &a.config)) ||
            (r = ddp_opt_value(argc, argv, &i, "--record", &a.record)) ||
            (r = ddp_opt_value(argc, argv, &i, "--reference", &a.reference))) {
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
    return ddp_validate_run(&a);
}

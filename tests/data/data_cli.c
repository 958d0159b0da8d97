/* data_cli.c - `ddptrain data ...` as its own program: data_cli data SUBCOMMAND ... */
#include "cli/cli.h"
#include "core/util.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "data") != 0) {
        fprintf(stderr, "usage: data_cli data SUBCOMMAND ...\n");
        return DDP_EXIT_USAGE;
    }
    return ddp_cmd_data(argc - 1, argv + 1);
}

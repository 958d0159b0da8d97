/*
 * launch_cli.c - test driver: `launch_cli hostlist ...` and `launch_cli env ...` call the
 * same ddp_cmd_hostlist / ddp_cmd_env that `ddptrain hostlist|env` dispatch to, so the
 * command-line behaviour is tested whatever state src/main.c is in.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "hostlist") == 0)
        return ddp_cmd_hostlist(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "env") == 0)
        return ddp_cmd_env(argc - 1, argv + 1);
    fprintf(stderr, "usage: launch_cli hostlist|env ...\n");
    return 2;
}

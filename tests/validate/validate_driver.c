/*
 * validate_driver.c - `ddptrain validate` as a program of its own, for the tests in this
 * directory while (or where) the ddptrain binary lacks the subcommand:
 *   validate_driver [validate] [--quick] [--json FILE] ...
 */
#include <string.h>

#include "cli/cli.h"

int main(int argc, char **argv)
{
    static char name[] = "validate";
    if (argc > 1 && !strcmp(argv[1], "validate")) {
        argc--;
        argv++;
    }
    argv[0] = name;
    return ddp_cmd_validate(argc, argv);
}

/*
 * cli.h - subcommands implemented outside main.c. Each takes the arguments after the
 * subcommand name (argv[0] is the subcommand) and returns a process exit code (util.h).
 */
#ifndef DDP_CLI_H
#define DDP_CLI_H

int ddp_cmd_hostlist(int argc, char **argv); /* src/launch/cmd_launch.c */
int ddp_cmd_env(int argc, char **argv);      /* src/launch/cmd_launch.c */
int ddp_cmd_data(int argc, char **argv);     /* src/data/cmd_data.c */
int ddp_cmd_train(int argc, char **argv);    /* src/train.c */

#endif

/*
 * data_import.h - the importer subcommands of `ddptrain data` (npy, npz, csv, imagefolder):
 * argument parsing, exit codes (2 usage, 3 bad input or unwritable output) and the summary
 * line. cli/data.c dispatches to them; the work is in data/import.h.
 */
#ifndef DDP_CLI_DATA_IMPORT_H
#define DDP_CLI_DATA_IMPORT_H

#include <stddef.h>

/* argv[0] is the subcommand's name; each returns an exit code. */
int ddp_data_cmd_npy(int argc, char **argv);
int ddp_data_cmd_npz(int argc, char **argv);
int ddp_data_cmd_csv(int argc, char **argv);
int ddp_data_cmd_imagefolder(int argc, char **argv);

/* `--classes NAME,NAME,...` into *names (*count of them, ddp_class_names_free): 0, or -1 with
 * msg naming the option and the bad name (empty, not UTF-8, over 255 bytes). */
int ddp_data_class_names(const char *v, char ***names, int *count, char *msg, size_t len);

#endif

/*
 * data_import.h - the importer subcommands of `ddptrain data` (npy, npz, csv, imagefolder):
 * argument parsing, exit codes (2 usage, 3 bad input or unwritable output) and the summary
 * line. cli/data.c dispatches to them; the work is in data/import.h.
 */
#ifndef DDP_CLI_DATA_IMPORT_H
#define DDP_CLI_DATA_IMPORT_H

/* argv[0] is the subcommand's name; each returns an exit code. */
int ddp_data_cmd_npy(int argc, char **argv);
int ddp_data_cmd_npz(int argc, char **argv);
int ddp_data_cmd_csv(int argc, char **argv);
int ddp_data_cmd_imagefolder(int argc, char **argv);

#endif

/* cli.h - the `gpusrv` command: its subcommand table and shared helpers. */
#ifndef GS_CLI_H
#define GS_CLI_H

#include "cli/options.h"

#include <stdio.h>

/* Exit statuses of every subcommand (DESIGN.md). */
enum { GS_EXIT_OK = 0, GS_EXIT_FAILED = 1, GS_EXIT_USAGE = 2 };

/* A subcommand. Its help (`gpusrv help NAME`, `gpusrv NAME --help`) is
 * written from `usage`, `about` and the options table, then `notes`; a
 * command whose settings come from elsewhere gives `help_fn` instead. */
typedef struct gs_cli_command {
  const char *name;
  const char *usage;   /* "gpusrv jobs [OPTIONS]" lines, without "Usage: " */
  const char *about;   /* what it does, a paragraph */
  const gs_cli_option *options; /* its flags, GS_CLI_OPTIONS_END-terminated */
  const char *notes;   /* optional text after the options */
  int min_args, max_args; /* how many words besides options (max -1: any) */
  bool takes_command;  /* a command to run follows "--" */
  const char *(*help_fn)(void); /* or this, for text built at run time */
  int (*run)(int argc, char **argv); /* argv[0] is the subcommand's name */
} gs_cli_command;

/* Every subcommand, in the order `gpusrv --help` lists them, with the
 * executable that runs it: `gpusrv` itself runs those that only talk to a
 * daemon (it links the client library alone); it execs gpusrv-engine for
 * those that need the engine or the HAL (cli_index.c). */
typedef struct gs_cli_entry {
  const char *name;
  const char *summary; /* one line */
  bool engine;         /* run by gpusrv-engine */
} gs_cli_entry;
extern const gs_cli_entry gs_cli_index[]; /* ends with a NULL name */

/* The commands this executable runs, NULL-terminated (cli_client.c in
 * `gpusrv`, cli_engine.c in gpusrv-engine), and which one it is. */
extern const gs_cli_command *const gs_cli_commands[];
extern const bool gs_cli_is_engine;

/* Prints "gpusrv: <what>: <why>" style errors to stderr. */
void gs_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints an error and the command's usage line to stderr; returns GS_EXIT_USAGE. */
int gs_cli_usage_error(const gs_cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Every subcommand, for `gpusrv --help` in the order listed there. */
extern const gs_cli_command gs_cli_smi;
extern const gs_cli_command gs_cli_model;
extern const gs_cli_command gs_cli_serve;
extern const gs_cli_command gs_cli_models;
extern const gs_cli_command gs_cli_infer;
extern const gs_cli_command gs_cli_submit;
extern const gs_cli_command gs_cli_images;
extern const gs_cli_command gs_cli_cdi;
extern const gs_cli_command gs_cli_slurm;
extern const gs_cli_command gs_cli_jobs;
extern const gs_cli_command gs_cli_top;
extern const gs_cli_command gs_cli_job;
extern const gs_cli_command gs_cli_cancel;
extern const gs_cli_command gs_cli_logs;
extern const gs_cli_command gs_cli_wait;
extern const gs_cli_command gs_cli_tenant;
extern const gs_cli_command gs_cli_usage;
extern const gs_cli_command gs_cli_batch;
extern const gs_cli_command gs_cli_bench;

/* A command's help text, however it is made. */
const char *gs_cli_help_text(const gs_cli_command *cmd);

#endif

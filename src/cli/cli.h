/* cli.h - the `gpusrv` command: its subcommand table and shared helpers. */
#ifndef GS_CLI_H
#define GS_CLI_H

#include <stdio.h>

/* Exit statuses of every subcommand (DESIGN.md). */
enum { GS_EXIT_OK = 0, GS_EXIT_FAILED = 1, GS_EXIT_USAGE = 2 };

typedef struct gs_cli_command {
  const char *name;
  const char *summary; /* one line for `gpusrv --help` */
  const char *help;    /* the text of `gpusrv help NAME` and `gpusrv NAME --help` */
  const char *(*help_fn)(void); /* or this, for text built at run time */
  int (*run)(int argc, char **argv); /* argv[0] is the subcommand's name */
} gs_cli_command;

/* Prints "gpusrv: <what>: <why>" style errors to stderr. */
void gs_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints an error and the command's usage line to stderr; returns GS_EXIT_USAGE. */
int gs_cli_usage_error(const gs_cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

extern const gs_cli_command gs_cli_smi;
extern const gs_cli_command gs_cli_model;
extern const gs_cli_command gs_cli_serve;
extern const gs_cli_command gs_cli_models;
extern const gs_cli_command gs_cli_infer;
extern const gs_cli_command gs_cli_submit;
extern const gs_cli_command gs_cli_jobs;
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

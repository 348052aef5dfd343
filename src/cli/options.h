/* options.h - a subcommand's flags declared as one table, parsed by one
 * function, and its --help written from the same table (git's
 * parse-options is the model). Each row names a field of the command's own
 * options struct by offset, as the settings table of `gpusrv serve` does. */
#ifndef GS_CLI_OPTIONS_H
#define GS_CLI_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
  GS_OPT_BOOL,     /* bool: --name sets it */
  GS_OPT_STRING,   /* const char *: --name V or --name=V (points into argv or a copy) */
  GS_OPT_INT,      /* long long, within [min, max] */
  GS_OPT_REAL,     /* double, finite, within [min, max] */
  GS_OPT_BYTES,    /* uint64_t: "512M", "16G", bytes */
  GS_OPT_DURATION, /* int64_t seconds: "90s", "2h", "HH:MM:SS" */
  GS_OPT_LIST,     /* gs_cli_list: repeatable, each value appended */
} gs_cli_opt_type;

#define GS_CLI_LIST_MAX 32

typedef struct gs_cli_list {
  int n;
  const char *items[GS_CLI_LIST_MAX];
} gs_cli_list;

typedef struct gs_cli_option {
  const char *name;     /* "gpu-mem": --gpu-mem V and --gpu-mem=V */
  char short_name;      /* 'i': -i V, or 0 */
  gs_cli_opt_type type;
  size_t offset;        /* of the field in the command's options struct */
  const char *metavar;  /* "SIZE" in the help; NULL for GS_OPT_BOOL */
  const char *help;
  double min, max;      /* bounds of INT and REAL (both 0: none) */
} gs_cli_option;

/* How a daemon-facing command reaches the daemon: every one takes these the
 * same way. `token` comes from --token (moved out of argv at once, with a
 * warning that it was visible there), --token-file, or GPUSRV_TOKEN. */
typedef struct gs_cli_daemon_opts {
  const char *url;
  const char *token;
  const char *token_file;
  bool json;
} gs_cli_daemon_opts;

#define GS_CLI_OPT(long_name, type, st, field, metavar, help) \
  {long_name, 0, type, offsetof(st, field), metavar, help, 0, 0}
#define GS_CLI_OPT_RANGE(long_name, type, st, field, metavar, help, lo, hi) \
  {long_name, 0, type, offsetof(st, field), metavar, help, lo, hi}
/* The rows of --url, --token and --token-file; a struct holding a
 * gs_cli_daemon_opts `daemon` puts this in its table. */
#define GS_CLI_DAEMON_ROWS(st)                                                               \
  GS_CLI_OPT("url", GS_OPT_STRING, st, daemon.url, "URL",                                    \
             "The daemon (default: GPUSRV_URL, else http://127.0.0.1:8000)"),                \
  GS_CLI_OPT("token", GS_OPT_STRING, st, daemon.token, "TOKEN",                             \
             "Bearer token (default: GPUSRV_TOKEN); others can read it on a command line"),  \
  GS_CLI_OPT("token-file", GS_OPT_STRING, st, daemon.token_file, "FILE",                   \
             "Read the bearer token from the first line of FILE")
/* ... and --json, for the commands that print a daemon's answer. */
#define GS_CLI_JSON_ROW(st) \
  GS_CLI_OPT("json", GS_OPT_BOOL, st, daemon.json, NULL, "Print the daemon's answer as JSON")
#define GS_CLI_OPTIONS_END {NULL, 0, 0, 0, NULL, NULL, 0, 0}

#define GS_CLI_MAX_WORDS 16

/* What is left of argv once the options are taken out. */
typedef struct gs_cli_args {
  int n;                               /* words that are not options, in order */
  char *words[GS_CLI_MAX_WORDS];       /* into argv */
  int n_after;                         /* words after "--", for a command that runs one */
  char **after;
  uint64_t given;                      /* bit i: row i of the table was given */
} gs_cli_args;

/* Parses argv[1..argc) (argv[0] is the subcommand's name) against the
 * command's table into `opts`. Options may stand before, between or after
 * the other words, whose count must be within the command's min_args and
 * max_args; "--" ends them, and what follows is `after` for a command that
 * takes_command, else a usage error. A --token is copied and blanked in
 * argv at once (it is visible in /proc/PID/cmdline), with a warning; a
 * --token-file, when no --token was given, is read into the token's field.
 * Returns 0, or prints "gpusrv: NAME: why" (with the usage line for a
 * usage error) and returns 2 (GS_EXIT_USAGE) or 1. */
struct gs_cli_command;
int gs_cli_parse(const struct gs_cli_command *cmd, int argc, char **argv, void *opts,
                 gs_cli_args *out);

/* Whether the option `name` of the command's table was given. */
bool gs_cli_given(const struct gs_cli_command *cmd, const gs_cli_args *args, const char *name);

/* The options' help lines, from the table. */
void gs_cli_print_options(const gs_cli_option *table, FILE *out);

#endif

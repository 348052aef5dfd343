/* main.c - `gpusrv SUBCOMMAND ...`: dispatches to the subcommands, and
 * prints help and the version. */
#include "cli/cli.h"

#include <stdarg.h>
#include <string.h>

#ifndef GS_VERSION
#define GS_VERSION "0.0.0-dev"
#endif

static const gs_cli_command *const commands[] = {
    &gs_cli_serve, &gs_cli_smi,    &gs_cli_model, &gs_cli_models, &gs_cli_infer,
    &gs_cli_submit, &gs_cli_jobs,  &gs_cli_job,   &gs_cli_cancel, &gs_cli_logs,
    &gs_cli_wait,  &gs_cli_tenant, &gs_cli_usage, &gs_cli_batch,
    &gs_cli_bench,  NULL};

void gs_cli_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("gpusrv: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

const char *gs_cli_help_text(const gs_cli_command *cmd) {
  return cmd->help_fn ? cmd->help_fn() : cmd->help;
}

/* The usage line is the first line of the help text. */
int gs_cli_usage_error(const gs_cli_command *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "gpusrv: %s: ", cmd->name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  const char *help = gs_cli_help_text(cmd);
  const char *nl = strchr(help, '\n');
  fprintf(stderr, "%.*s\nRun 'gpusrv help %s' for more.\n",
          (int)(nl ? nl - help : (long)strlen(help)), help, cmd->name);
  return GS_EXIT_USAGE;
}

static void print_overview(FILE *out) {
  fprintf(out,
          "Usage: gpusrv COMMAND [OPTIONS]\n"
          "\n"
          "gpusrv turns a machine with accelerators into a shared, monitored compute service.\n"
          "\n"
          "Commands:\n");
  for (int i = 0; commands[i]; i++)
    fprintf(out, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
  fprintf(out, "  %-10s %s\n", "help", "Show the help of a command");
  fprintf(out,
          "\n"
          "Options:\n"
          "  -h, --help     Show this help\n"
          "  --version      Show the version\n"
          "\n"
          "Environment:\n"
          "  GPUSRV_BACKENDS     Comma-separated backends to load (cpu,opencl,cuda); default all\n"
          "  GPUSRV_PLUGIN_PATH  Colon-separated directories to load backend plugins from\n"
          "  GPUSRV_LOG          Log level: error, warn (default), info, debug\n"
          "  GPUSRV_URL          The daemon that models and infer talk to\n"
          "  GPUSRV_TOKEN        Bearer token for the daemon\n");
}

static const gs_cli_command *find(const char *name) {
  for (int i = 0; commands[i]; i++)
    if (strcmp(commands[i]->name, name) == 0)
      return commands[i];
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    print_overview(stderr);
    return GS_EXIT_USAGE;
  }
  const char *arg = argv[1];
  if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
    print_overview(stdout);
    return GS_EXIT_OK;
  }
  if (strcmp(arg, "--version") == 0 || strcmp(arg, "version") == 0) {
    printf("gpusrv %s\n", GS_VERSION);
    return GS_EXIT_OK;
  }
  if (strcmp(arg, "help") == 0) {
    if (argc < 3) {
      print_overview(stdout);
      return GS_EXIT_OK;
    }
    const gs_cli_command *cmd = find(argv[2]);
    if (!cmd) {
      gs_cli_error("help: unknown command '%s'", argv[2]);
      return GS_EXIT_USAGE;
    }
    fputs(gs_cli_help_text(cmd), stdout);
    return GS_EXIT_OK;
  }
  if (arg[0] == '-') {
    gs_cli_error("unknown option '%s'", arg);
    fprintf(stderr, "Usage: gpusrv COMMAND [OPTIONS]   (gpusrv --help lists the commands)\n");
    return GS_EXIT_USAGE;
  }
  const gs_cli_command *cmd = find(arg);
  if (!cmd) {
    gs_cli_error("unknown command '%s'", arg);
    fprintf(stderr, "Usage: gpusrv COMMAND [OPTIONS]   (gpusrv --help lists the commands)\n");
    return GS_EXIT_USAGE;
  }
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0)
      break;
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(gs_cli_help_text(cmd), stdout);
      return GS_EXIT_OK;
    }
  }
  return cmd->run(argc - 1, argv + 1);
}

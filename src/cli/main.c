/* main.c - `gpusrv SUBCOMMAND ...`: runs the subcommands this executable
 * has, execs the other executable for the rest (git-style: `gpusrv` links
 * only the client library, gpusrv-engine the engine and the HAL), and
 * prints help and the version. Built into both. */
#include "cli/cli.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef GS_VERSION
#define GS_VERSION "0.0.0-dev"
#endif

void gs_cli_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("gpusrv: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

const char *gs_cli_help_text(const gs_cli_command *cmd) {
  if (cmd->help_fn)
    return cmd->help_fn();
  static char text[8192];
  FILE *f = fmemopen(text, sizeof text - 1, "w");
  if (!f)
    return cmd->usage;
  fprintf(f, "Usage: ");
  for (const char *line = cmd->usage; *line;) { /* continuation lines indented */
    size_t n = strcspn(line, "\n");
    fprintf(f, "%s%.*s\n", line == cmd->usage ? "" : "       ", (int)n, line);
    line += n + (line[n] == '\n');
  }
  fprintf(f, "\n%s\n", cmd->about);
  if (cmd->options && cmd->options->name) {
    fprintf(f, "\nOptions:\n");
    gs_cli_print_options(cmd->options, f);
  }
  if (cmd->notes)
    fprintf(f, "\n%s", cmd->notes);
  fclose(f);
  return text;
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
  for (const gs_cli_entry *e = gs_cli_index; e->name; e++)
    fprintf(out, "  %-10s %s\n", e->name, e->summary);
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

static const gs_cli_command *find_here(const char *name) {
  for (int i = 0; gs_cli_commands[i]; i++)
    if (strcmp(gs_cli_commands[i]->name, name) == 0)
      return gs_cli_commands[i];
  return NULL;
}

static const gs_cli_entry *find_anywhere(const char *name) {
  for (const gs_cli_entry *e = gs_cli_index; e->name; e++)
    if (strcmp(e->name, name) == 0)
      return e;
  return NULL;
}

/* Runs the other executable with the same arguments. It lies beside this
 * one in the build tree; installed, gpusrv-engine is in ../lib/gpusrv
 * (beside the job supervisor and the plugins) and gpusrv in ../../bin. */
static int exec_other(char **argv) {
  char exe[PATH_MAX], path[PATH_MAX + 64];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    gs_cli_error("cannot find this executable: %s", strerror(errno));
    return GS_EXIT_FAILED;
  }
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash)
    *slash = '\0';
  const char *name = gs_cli_is_engine ? "gpusrv" : "gpusrv-engine";
  const char *const places[] = {"", gs_cli_is_engine ? "/../../bin" : "/../lib/gpusrv"};
  for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
    snprintf(path, sizeof path, "%s%s/%s", exe, places[i], name);
    if (access(path, X_OK) == 0) {
      execv(path, argv);
      gs_cli_error("cannot run %s: %s", path, strerror(errno));
      return GS_EXIT_FAILED;
    }
  }
  gs_cli_error("'%s' needs %s, which is neither in %s nor in %s%s (is gpusrv installed whole?)",
               argv[1], name, exe, exe, places[1]);
  return GS_EXIT_FAILED;
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
  bool help = strcmp(arg, "help") == 0;
  if (help && argc < 3) {
    print_overview(stdout);
    return GS_EXIT_OK;
  }
  const char *name = help ? argv[2] : arg;
  const gs_cli_command *cmd = find_here(name);
  if (!cmd && find_anywhere(name))
    return exec_other(argv);
  if (!cmd) {
    if (help) {
      gs_cli_error("help: unknown command '%s'", name);
      return GS_EXIT_USAGE;
    }
    gs_cli_error(arg[0] == '-' ? "unknown option '%s'" : "unknown command '%s'", arg);
    fprintf(stderr, "Usage: gpusrv COMMAND [OPTIONS]   (gpusrv --help lists the commands)\n");
    return GS_EXIT_USAGE;
  }
  if (help) {
    fputs(gs_cli_help_text(cmd), stdout);
    return GS_EXIT_OK;
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

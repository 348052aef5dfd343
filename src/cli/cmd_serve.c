/* cmd_serve.c - `gpusrv serve`: settings from the config table (defaults,
 * then --config FILE, then flags), then the server. */
#include "api/api.h"
#include "cli/cli.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

static char serve_help[4096];

/* The help text, written from the settings table (built once, at first use). */
static const char *build_help(void) {
  if (serve_help[0])
    return serve_help;
  FILE *f = fmemopen(serve_help, sizeof serve_help - 1, "w");
  if (!f)
    return "Usage: gpusrv serve [--config FILE] [--SETTING=VALUE ...]\n";
  fprintf(f, "Usage: gpusrv serve [--config FILE] [--SETTING=VALUE ...]\n\n"
             "Serves the models of the repository over HTTP with the KServe v2 inference\n"
             "protocol (tritonclient, perf_analyzer and curl work against it). Stops on\n"
             "SIGINT or SIGTERM after the requests in flight finish.\n\n"
             "Settings (flags override the config file, a JSON object of the same names):\n"
             "  %-30s %s\n", "--config=FILE", "Read settings from FILE first");
  gs_config_print_help(gs_serve_options, f);
  fclose(f);
  return serve_help;
}

static int serve_run(int argc, char **argv) {
  gs_serve_settings s;
  if (gs_config_defaults(gs_serve_options, &s) < 0) {
    gs_cli_error("serve: %s", gs_error_detail());
    return GS_EXIT_FAILED;
  }
  /* The config file first, wherever --config stands, so that flags win. */
  for (int i = 1; i < argc; i++) {
    const char *file = NULL;
    if (strncmp(argv[i], "--config=", 9) == 0)
      file = argv[i] + 9;
    else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
      file = argv[++i];
    if (file && gs_config_load_file(gs_serve_options, &s, file) < 0) {
      gs_cli_error("serve: %s", gs_error_detail());
      return GS_EXIT_USAGE;
    }
  }
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--config") == 0) {
      i++;
      continue;
    }
    if (strncmp(arg, "--config=", 9) == 0)
      continue;
    if (strncmp(arg, "--", 2) != 0)
      return gs_cli_usage_error(&gs_cli_serve, "unexpected argument '%s'", arg);
    char name[64];
    const char *eq = strchr(arg, '='), *value;
    size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    if (n >= sizeof name)
      return gs_cli_usage_error(&gs_cli_serve, "unknown option '%s'", arg);
    memcpy(name, arg + 2, n);
    name[n] = '\0';
    const gs_config_option *opt = gs_config_find(gs_serve_options, name);
    if (eq)
      value = eq + 1;
    else if (opt && opt->type == GS_CFG_BOOL)
      value = "true"; /* a flag alone */
    else if (i + 1 < argc)
      value = argv[++i];
    else
      return gs_cli_usage_error(&gs_cli_serve, "option '--%s' needs a value", name);
    if (gs_config_set(gs_serve_options, &s, name, value) < 0)
      return gs_cli_usage_error(&gs_cli_serve, "%s", gs_error_detail());
  }
  if (gs_serve(&s) < 0) {
    gs_cli_error("serve: %s", gs_error_detail());
    return GS_EXIT_FAILED;
  }
  return GS_EXIT_OK;
}

const gs_cli_command gs_cli_serve = {
    .name = "serve",
    .help_fn = build_help,
    .run = serve_run,
};

/* cmd_models.c - `gpusrv models`: the models of a running daemon, their
 * versions and states, and why a model is not ready. */
#include "cli/cli.h"
#include "cli/daemon.h"
#include "cli/table.h"

#include "base/error.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char models_help[] =
    "Usage: gpusrv models [--url URL] [--token TOKEN] [--json]\n"
    "\n"
    "Lists the models of a running `gpusrv serve`: name, version, state, and the reason\n"
    "a model is not ready.\n"
    "\n"
    "Options:\n"
    "  --url URL        The daemon (default: GPUSRV_URL, else http://127.0.0.1:8000)\n"
    "  --token TOKEN    Bearer token (default: GPUSRV_TOKEN)\n"
    "  --json           Print the daemon's answer as JSON\n";

static int models_run(int argc, char **argv) {
  const char *url = NULL, *token = NULL;
  bool json_out = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json_out = true;
    else if (!strcmp(argv[i], "--url") && i + 1 < argc)
      url = argv[++i];
    else if (!strncmp(argv[i], "--url=", 6))
      url = argv[i] + 6;
    else if (!strcmp(argv[i], "--token") && i + 1 < argc)
      token = argv[++i];
    else if (!strncmp(argv[i], "--token=", 8))
      token = argv[i] + 8;
    else
      return gs_cli_usage_error(&gs_cli_models, "unknown option '%s'", argv[i]);
  }
  gs_client *client = gs_cli_client("models", url, token);
  char *text = NULL;
  if (!client)
    return GS_EXIT_FAILED;
  if (gs_client_models(client, &text) != GS_OK) {
    gs_cli_error("models: %s", gs_client_last_error(client));
    gs_client_close(client);
    return GS_EXIT_FAILED;
  }
  gs_client_close(client);
  json_t *list = json_loads(text, 0, NULL);
  free(text);
  if (!json_is_array(list)) {
    gs_cli_error("models: the daemon's answer is not a list");
    json_decref(list);
    return GS_EXIT_FAILED;
  }
  if (json_out) {
    json_dumpf(list, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    putchar('\n');
  } else {
    static const char *const heads[] = {"Model", "Version", "State", "Reason"};
    gs_table_t *t = gs_table_new(4, heads, NULL);
    size_t i;
    json_t *m;
    json_array_foreach(list, i, m) {
      const char *row[] = {json_string_value(json_object_get(m, "name")),
                           json_string_value(json_object_get(m, "version")),
                           json_string_value(json_object_get(m, "state")),
                           json_string_value(json_object_get(m, "reason"))};
      if (t)
        gs_table_add_row(t, row);
    }
    if (t)
      gs_table_print(t, stdout);
    gs_table_free(t);
  }
  json_decref(list);
  return GS_EXIT_OK;
}

const gs_cli_command gs_cli_models = {
    .name = "models",
    .summary = "List the models of a running daemon and their states",
    .help = models_help,
    .run = models_run,
};

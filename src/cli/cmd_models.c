/* cmd_models.c - `gpusrv models`: the models of a running daemon, their
 * versions and states, and why a model is not ready. */
#include "cli/cli.h"
#include "cli/daemon.h"
#include "cli/table.h"

#include "base/error.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct models_opts {
  gs_cli_daemon_opts daemon;
} models_opts;

static const gs_cli_option models_options[] = {
    GS_CLI_DAEMON_ROWS(models_opts),
    GS_CLI_JSON_ROW(models_opts),
    GS_CLI_OPTIONS_END,
};

static int models_run(int argc, char **argv) {
  models_opts o = {0};
  gs_cli_args args;
  int rc = gs_cli_parse(&gs_cli_models, argc, argv, &o, &args);
  if (rc != GS_EXIT_OK)
    return rc;
  bool json_out = o.daemon.json;
  gs_client *client = gs_cli_client("models", o.daemon.url, o.daemon.token);
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
    .usage = "gpusrv models [--url URL] [--token TOKEN] [--json]",
    .about = "Lists the models of a running `gpusrv serve`: name, version, state, and the reason\n"
             "a model is not ready.",
    .options = models_options,
    .run = models_run,
};

/* cmd_images.c - `gpusrv images`: the local images the caller's tenant may
 * run jobs in (`gpusrv submit --image`). */
#include "cli/cli.h"
#include "cli/daemon.h"
#include "cli/table.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct images_opts {
  gs_cli_daemon_opts daemon;
} images_opts;

static const gs_cli_option images_options[] = {
    GS_CLI_DAEMON_ROWS(images_opts),
    GS_CLI_JSON_ROW(images_opts),
    GS_CLI_OPTIONS_END,
};

static void print_table(json_t *list) {
  static const char *const heads[] = {"Image", "ID", "Size", "Created"};
  static const bool right[] = {false, false, true, false};
  gs_table_t *t = gs_table_new(4, heads, right);
  size_t i;
  json_t *img;
  json_array_foreach(list, i, img) {
    char id[16], size[32], created[32];
    snprintf(id, sizeof id, "%.12s", json_string_value(json_object_get(img, "id")) ?: "");
    snprintf(size, sizeof size, "%.1f MB",
             (double)json_integer_value(json_object_get(img, "size")) / 1e6);
    time_t when = (time_t)json_number_value(json_object_get(img, "created"));
    struct tm tm;
    if (!localtime_r(&when, &tm) || !strftime(created, sizeof created, "%Y-%m-%d %H:%M", &tm))
      snprintf(created, sizeof created, "-");
    const char *name = json_string_value(json_object_get(img, "name"));
    const char *row[] = {name ? name : "-", id, size, created};
    if (t)
      gs_table_add_row(t, row);
  }
  if (t)
    gs_table_print(t, stdout);
  gs_table_free(t);
}

static int images_run(int argc, char **argv) {
  images_opts o = {0};
  gs_cli_args args;
  int rc = gs_cli_parse(&gs_cli_images, argc, argv, &o, &args);
  if (rc != GS_EXIT_OK)
    return rc;
  gs_client *client = gs_cli_client("images", o.daemon.url, o.daemon.token);
  if (!client)
    return GS_EXIT_FAILED;
  char *text = NULL;
  if (gs_client_images(client, &text) != GS_OK) {
    gs_cli_error("images: %s", gs_client_last_error(client));
    gs_client_close(client);
    return GS_EXIT_FAILED;
  }
  gs_client_close(client);
  json_t *reply = json_loads(text, 0, NULL);
  free(text);
  json_t *list = json_object_get(reply, "images");
  if (!json_is_array(list)) {
    gs_cli_error("images: the daemon's answer has no list of images");
    json_decref(reply);
    return GS_EXIT_FAILED;
  }
  if (o.daemon.json) {
    json_dumpf(list, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    putchar('\n');
  } else {
    print_table(list);
  }
  json_decref(reply);
  return GS_EXIT_OK;
}

const gs_cli_command gs_cli_images = {
    .name = "images",
    .usage = "gpusrv images [--url URL] [--token TOKEN] [--json]",
    .about = "Lists the local OCI images your jobs may run in (gpusrv submit --image): your Unix\n"
             "user's podman images that the daemon's allowed-images permits.",
    .options = images_options,
    .run = images_run,
};

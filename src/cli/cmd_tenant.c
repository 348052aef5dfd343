/* cmd_tenant.c - `gpusrv tenant add|list|remove|token` (admin) and
 * `gpusrv usage`: the daemon's tenants and their accounting. */
#include "cli/cli.h"
#include "cli/daemon.h"
#include "cli/table.h"

#include "base/error.h"
#include "base/units.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DAEMON_OPTIONS                                                             \
  "  --url URL        The daemon (default: GPUSRV_URL, else http://127.0.0.1:8000)\n" \
  "  --token TOKEN    Bearer token (default: GPUSRV_TOKEN); tenant needs an admin's\n"

static const char tenant_help[] =
    "Usage: gpusrv tenant add NAME --user USER [OPTIONS]\n"
    "       gpusrv tenant list [--json]\n"
    "       gpusrv tenant remove NAME\n"
    "       gpusrv tenant token NAME\n"
    "\n"
    "Manages the daemon's tenants (an admin token is needed). `add` and `token` print a\n"
    "new bearer token for the tenant; only its salted hash is kept, so keep it safe.\n"
    "\n"
    "Options of add:\n"
    "  --user USER      The Unix user its jobs run as (required)\n"
    "  --group GROUP    Their group (default: the user's primary group)\n"
    "  --weight W       Its weight in fair share (default 1)\n"
    "  --max-priority P Highest priority its jobs may ask for (default 0)\n"
    "  --allow-root     Its jobs may run as root (never otherwise)\n"
    "  --admin          It may manage tenants and see every job\n"
    "  --max-gpus N     Quotas (default none): devices held at once,\n"
    "  --max-gpu-mem S    device memory, --max-jobs N jobs running at once,\n"
    "  --max-cpus N       CPU cores, --max-mem S host memory\n" DAEMON_OPTIONS
    "  --json           (list) Print the daemon's answer as JSON\n";

static int tenant_run(int argc, char **argv) {
  const gs_cli_command *me = &gs_cli_tenant;
  if (argc < 2)
    return gs_cli_usage_error(me, "add, list, remove or token?");
  const char *verb = argv[1], *name = NULL, *url = NULL, *token = NULL;
  bool json_out = false;
  json_t *body = json_object(), *quotas = json_object();
  json_object_set_new(body, "quotas", quotas);
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    uint64_t bytes;
    char *end = NULL;
    if (!strcmp(a, "--json")) {
      json_out = true;
    } else if (!strcmp(a, "--allow-root") || !strcmp(a, "--admin")) {
      json_object_set_new(body, a[2] == 'a' && a[3] == 'l' ? "allow_root" : "admin", json_true());
    } else if (a[0] != '-' && !name) {
      name = a;
    } else if (!v) {
      json_decref(body);
      return gs_cli_usage_error(me, "unexpected '%s'", a);
    } else {
      i++;
      if (!strcmp(a, "--url"))
        url = v;
      else if (!strcmp(a, "--token"))
        token = v;
      else if (!strcmp(a, "--user") || !strcmp(a, "--group"))
        json_object_set_new(body, a + 2, json_string(v));
      else if (!strcmp(a, "--weight") || !strcmp(a, "--max-gpus") || !strcmp(a, "--max-cpus") ||
               !strcmp(a, "--max-jobs") || !strcmp(a, "--max-priority")) {
        double n = strtod(v, &end);
        if (end == v || *end || !(n >= 0 || !strcmp(a, "--max-priority"))) {
          json_decref(body);
          return gs_cli_usage_error(me, "bad value '%s' for %s", v, a);
        }
        if (!strcmp(a, "--weight"))
          json_object_set_new(body, "weight", json_real(n));
        else if (!strcmp(a, "--max-priority"))
          json_object_set_new(body, "max_priority", json_integer((json_int_t)n));
        else if (!strcmp(a, "--max-jobs"))
          json_object_set_new(quotas, "jobs", json_integer((json_int_t)n));
        else
          json_object_set_new(quotas, a[6] == 'g' ? "devices" : "cpus", json_real(n));
      } else if (!strcmp(a, "--max-gpu-mem") || !strcmp(a, "--max-mem")) {
        if (gs_parse_bytes(v, &bytes) < 0) {
          json_decref(body);
          return gs_cli_usage_error(me, "bad value '%s' for %s", v, a);
        }
        json_object_set_new(quotas, a[6] == 'g' ? "device_mem" : "mem",
                            json_integer((json_int_t)bytes));
      } else {
        json_decref(body);
        return gs_cli_usage_error(me, "unknown option '%s'", a);
      }
    }
  }
  json_t *answer = NULL;
  char path[200];
  int rc;
  if (!strcmp(verb, "list")) {
    rc = gs_cli_call_json("tenant list", url, token, "GET", "/api/v1/tenants", NULL, &answer);
  } else if (!name) {
    json_decref(body);
    return gs_cli_usage_error(me, "which tenant? (give its name)");
  } else if (!strcmp(verb, "add")) {
    json_object_set_new(body, "name", json_string(name));
    rc = gs_cli_call_json("tenant add", url, token, "POST", "/api/v1/tenants", body, &answer);
  } else if (!strcmp(verb, "remove")) {
    snprintf(path, sizeof path, "/api/v1/tenants/%s", name);
    rc = gs_cli_call_json("tenant remove", url, token, "DELETE", path, NULL, &answer);
  } else if (!strcmp(verb, "token")) {
    snprintf(path, sizeof path, "/api/v1/tenants/%s/tokens", name);
    rc = gs_cli_call_json("tenant token", url, token, "POST", path, NULL, &answer);
  } else {
    json_decref(body);
    return gs_cli_usage_error(me, "unknown action '%s' (add, list, remove or token)", verb);
  }
  json_decref(body);
  if (rc != GS_EXIT_OK)
    return rc;
  if (json_object_get(answer, "token")) {
    printf("%s\n", json_string_value(json_object_get(answer, "token")));
  } else if (!strcmp(verb, "list") && !json_out) {
    static const char *const heads[] = {"Tenant", "Weight", "User", "Admin", "Running", "Pending",
                                        "Quotas"};
    gs_table_t *t = gs_table_new(7, heads, NULL);
    size_t k;
    json_t *tn;
    json_array_foreach(json_object_get(answer, "tenants"), k, tn) {
      char w[32], run[16], pend[16];
      char *q = json_dumps(json_object_get(tn, "quotas"), JSON_COMPACT);
      snprintf(w, sizeof w, "%g", json_number_value(json_object_get(tn, "weight")));
      snprintf(run, sizeof run, "%lld", (long long)json_integer_value(json_object_get(tn, "running")));
      snprintf(pend, sizeof pend, "%lld", (long long)json_integer_value(json_object_get(tn, "pending")));
      const char *row[] = {json_string_value(json_object_get(tn, "name")), w,
                           json_string_value(json_object_get(tn, "user")),
                           json_is_true(json_object_get(tn, "admin")) ? "yes" : "no", run, pend,
                           q ? q : ""};
      if (t)
        gs_table_add_row(t, row);
      free(q);
    }
    if (t)
      gs_table_print(t, stdout);
    gs_table_free(t);
  } else if (json_out) {
    json_dumpf(answer, stdout, JSON_INDENT(2));
    putchar('\n');
  }
  json_decref(answer);
  return GS_EXIT_OK;
}

const gs_cli_command gs_cli_tenant = {
    .name = "tenant",
    .summary = "Manage tenants and their tokens (admin)",
    .help = tenant_help,
    .run = tenant_run,
};

static const char usage_help[] =
    "Usage: gpusrv usage [--tenant T] [--since DATE] [--url URL] [--token TOKEN] [--json]\n"
    "\n"
    "Accounting of ended jobs per tenant: jobs, device-seconds, device-memory GiB-hours,\n"
    "CPU-seconds and wall time. A tenant sees its own; an admin everyone's.\n"
    "\n"
    "Options:\n"
    "  --tenant T       Only tenant T (admin)\n"
    "  --since DATE     Jobs that ended since DATE (YYYY-MM-DD, or Unix seconds)\n" DAEMON_OPTIONS
    "  --json           Print the daemon's answer as JSON\n";

static int usage_run(int argc, char **argv) {
  const char *url = NULL, *token = NULL, *tenant = NULL, *since = NULL;
  bool json_out = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--json"))
      json_out = true;
    else if (v && !strcmp(a, "--url"))
      url = argv[++i];
    else if (v && !strcmp(a, "--token"))
      token = argv[++i];
    else if (v && !strcmp(a, "--tenant"))
      tenant = argv[++i];
    else if (v && !strcmp(a, "--since"))
      since = argv[++i];
    else
      return gs_cli_usage_error(&gs_cli_usage, "unexpected '%s'", a);
  }
  double since_s = 0;
  if (since) {
    struct tm tm = {0};
    char *end = NULL;
    const char *rest = strptime(since, "%Y-%m-%d", &tm);
    if (rest && *rest == '\0') {
      tm.tm_isdst = -1;
      since_s = (double)mktime(&tm);
    } else {
      since_s = strtod(since, &end);
      if (end == since || *end)
        return gs_cli_usage_error(&gs_cli_usage, "--since '%s' is not YYYY-MM-DD or Unix seconds",
                                  since);
    }
  }
  char path[300];
  snprintf(path, sizeof path, "/api/v1/usage?since=%.0f%s%s", since_s, tenant ? "&tenant=" : "",
           tenant ? tenant : "");
  json_t *answer = NULL;
  int rc = gs_cli_call_json("usage", url, token, "GET", path, NULL, &answer);
  if (rc != GS_EXIT_OK)
    return rc;
  json_t *rows = json_object_get(answer, "usage");
  if (json_out) {
    json_dumpf(rows, stdout, JSON_INDENT(2));
    putchar('\n');
  } else {
    static const char *const heads[] = {"Tenant", "Jobs", "Device-s", "Device GiB-h", "CPU-s",
                                        "Wall-s"};
    static const bool right[] = {false, true, true, true, true, true};
    gs_table_t *t = gs_table_new(6, heads, right);
    size_t k;
    json_t *u;
    json_array_foreach(rows, k, u) {
      char jobs[32], dev[32], mem[32], cpu[32], wall[32];
      snprintf(jobs, sizeof jobs, "%lld", (long long)json_integer_value(json_object_get(u, "jobs")));
      snprintf(dev, sizeof dev, "%.1f", json_number_value(json_object_get(u, "device_seconds")));
      snprintf(mem, sizeof mem, "%.3f",
               json_number_value(json_object_get(u, "device_memory_byte_seconds")) /
                   (1024.0 * 1024 * 1024 * 3600));
      snprintf(cpu, sizeof cpu, "%.1f", json_number_value(json_object_get(u, "cpu_seconds")));
      snprintf(wall, sizeof wall, "%.1f", json_number_value(json_object_get(u, "wall_seconds")));
      const char *row[] = {json_string_value(json_object_get(u, "tenant")), jobs, dev, mem, cpu,
                           wall};
      if (t)
        gs_table_add_row(t, row);
    }
    if (t)
      gs_table_print(t, stdout);
    gs_table_free(t);
  }
  json_decref(answer);
  return GS_EXIT_OK;
}

const gs_cli_command gs_cli_usage = {
    .name = "usage",
    .summary = "Accounting per tenant: device, memory and CPU time of ended jobs",
    .help = usage_help,
    .run = usage_run,
};

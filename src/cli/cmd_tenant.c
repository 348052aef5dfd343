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

typedef struct tenant_opts {
  const char *user, *group;
  double weight, max_gpus, max_cpus;
  long long max_priority, max_jobs;
  uint64_t max_gpu_mem, max_mem;
  bool allow_root, admin;
  gs_cli_daemon_opts daemon;
} tenant_opts;

static const gs_cli_option tenant_options[] = {
    GS_CLI_OPT("user", GS_OPT_STRING, tenant_opts, user, "USER",
               "(add) The Unix user its jobs run as (required)"),
    GS_CLI_OPT("group", GS_OPT_STRING, tenant_opts, group, "GROUP",
               "(add) Their group (default: the user's primary group)"),
    GS_CLI_OPT_RANGE("weight", GS_OPT_REAL, tenant_opts, weight, "W",
                     "(add) Its weight in fair share (default 1)", 0, 1e6),
    GS_CLI_OPT_RANGE("max-priority", GS_OPT_INT, tenant_opts, max_priority, "P",
                     "(add) Highest priority its jobs may ask for (default 0)", -1000, 1000),
    GS_CLI_OPT("allow-root", GS_OPT_BOOL, tenant_opts, allow_root, NULL,
               "(add) Its jobs may run as root (never otherwise)"),
    GS_CLI_OPT("admin", GS_OPT_BOOL, tenant_opts, admin, NULL,
               "(add) It may manage tenants and see every job"),
    GS_CLI_OPT_RANGE("max-gpus", GS_OPT_REAL, tenant_opts, max_gpus, "N",
                     "(add) Quota: devices held at once (default: none)", 0, 1e6),
    GS_CLI_OPT("max-gpu-mem", GS_OPT_BYTES, tenant_opts, max_gpu_mem, "SIZE",
               "(add) Quota: device memory"),
    GS_CLI_OPT_RANGE("max-jobs", GS_OPT_INT, tenant_opts, max_jobs, "N",
                     "(add) Quota: jobs running at once", 0, 1e9),
    GS_CLI_OPT_RANGE("max-cpus", GS_OPT_REAL, tenant_opts, max_cpus, "N",
                     "(add) Quota: CPU cores", 0, 1e6),
    GS_CLI_OPT("max-mem", GS_OPT_BYTES, tenant_opts, max_mem, "SIZE", "(add) Quota: host memory"),
    GS_CLI_DAEMON_ROWS(tenant_opts),
    GS_CLI_OPT("json", GS_OPT_BOOL, tenant_opts, daemon.json, NULL,
               "(list) Print the daemon's answer as JSON"),
    GS_CLI_OPTIONS_END,
};

/* The body of `tenant add`: only what was given, the daemon's defaults
 * for the rest. */
static json_t *tenant_body(const tenant_opts *o, const gs_cli_args *args, const char *name) {
  const gs_cli_command *me = &gs_cli_tenant;
  json_t *body = json_pack("{s:s}", "name", name), *quotas = json_object();
  if (o->user)
    json_object_set_new(body, "user", json_string(o->user));
  if (o->group)
    json_object_set_new(body, "group", json_string(o->group));
  if (gs_cli_given(me, args, "weight"))
    json_object_set_new(body, "weight", json_real(o->weight));
  if (gs_cli_given(me, args, "max-priority"))
    json_object_set_new(body, "max_priority", json_integer(o->max_priority));
  if (o->allow_root)
    json_object_set_new(body, "allow_root", json_true());
  if (o->admin)
    json_object_set_new(body, "admin", json_true());
  if (gs_cli_given(me, args, "max-gpus"))
    json_object_set_new(quotas, "devices", json_real(o->max_gpus));
  if (gs_cli_given(me, args, "max-gpu-mem"))
    json_object_set_new(quotas, "device_mem", json_integer((json_int_t)o->max_gpu_mem));
  if (gs_cli_given(me, args, "max-jobs"))
    json_object_set_new(quotas, "jobs", json_integer(o->max_jobs));
  if (gs_cli_given(me, args, "max-cpus"))
    json_object_set_new(quotas, "cpus", json_real(o->max_cpus));
  if (gs_cli_given(me, args, "max-mem"))
    json_object_set_new(quotas, "mem", json_integer((json_int_t)o->max_mem));
  json_object_set_new(body, "quotas", quotas);
  return body;
}

static int tenant_run(int argc, char **argv) {
  const gs_cli_command *me = &gs_cli_tenant;
  tenant_opts o = {0};
  gs_cli_args args;
  int rc = gs_cli_parse(me, argc, argv, &o, &args);
  if (rc != GS_EXIT_OK)
    return rc;
  const char *verb = args.words[0], *name = args.n > 1 ? args.words[1] : NULL;
  const char *url = o.daemon.url, *token = o.daemon.token;
  bool json_out = o.daemon.json;
  json_t *body = NULL;
  json_t *answer = NULL;
  char path[200];
  if (!strcmp(verb, "list")) {
    rc = gs_cli_call_json("tenant list", url, token, "GET", "/api/v1/tenants", NULL, &answer);
  } else if (!name) {
    return gs_cli_usage_error(me, "which tenant? (give its name)");
  } else if (!strcmp(verb, "add")) {
    body = tenant_body(&o, &args, name);
    rc = gs_cli_call_json("tenant add", url, token, "POST", "/api/v1/tenants", body, &answer);
  } else if (!strcmp(verb, "remove")) {
    snprintf(path, sizeof path, "/api/v1/tenants/%s", name);
    rc = gs_cli_call_json("tenant remove", url, token, "DELETE", path, NULL, &answer);
  } else if (!strcmp(verb, "token")) {
    snprintf(path, sizeof path, "/api/v1/tenants/%s/tokens", name);
    rc = gs_cli_call_json("tenant token", url, token, "POST", path, NULL, &answer);
  } else {
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
    .usage = "gpusrv tenant add NAME --user USER [OPTIONS]\n"
             "gpusrv tenant list [--json]\n"
             "gpusrv tenant remove NAME\n"
             "gpusrv tenant token NAME",
    .about = "Manages the daemon's tenants (an admin token is needed). `add` and `token` print a\n"
             "new bearer token for the tenant; only its salted hash is kept, so keep it safe.",
    .options = tenant_options,
    .min_args = 1,
    .max_args = 2,
    .run = tenant_run,
};

typedef struct usage_opts {
  const char *tenant, *since;
  gs_cli_daemon_opts daemon;
} usage_opts;

static const gs_cli_option usage_options[] = {
    GS_CLI_OPT("tenant", GS_OPT_STRING, usage_opts, tenant, "T", "Only tenant T (admin)"),
    GS_CLI_OPT("since", GS_OPT_STRING, usage_opts, since, "DATE",
               "Jobs that ended since DATE (YYYY-MM-DD, or Unix seconds)"),
    GS_CLI_DAEMON_ROWS(usage_opts),
    GS_CLI_JSON_ROW(usage_opts),
    GS_CLI_OPTIONS_END,
};

static int usage_run(int argc, char **argv) {
  usage_opts o = {0};
  gs_cli_args args;
  int rc = gs_cli_parse(&gs_cli_usage, argc, argv, &o, &args);
  if (rc != GS_EXIT_OK)
    return rc;
  const char *url = o.daemon.url, *token = o.daemon.token, *tenant = o.tenant, *since = o.since;
  bool json_out = o.daemon.json;
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
  rc = gs_cli_call_json("usage", url, token, "GET", path, NULL, &answer);
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
    .usage = "gpusrv usage [--tenant T] [--since DATE] [--url URL] [--json]",
    .about = "Accounting of ended jobs per tenant: jobs, device-seconds, device-memory GiB-hours,\n"
             "CPU-seconds and wall time. A tenant sees its own; an admin everyone's.",
    .options = usage_options,
    .run = usage_run,
};

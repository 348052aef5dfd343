/* cmd_smi.c - `gpusrv smi`: the devices of every backend with their memory,
 * utilization, temperature and power, as a table, JSON or CSV. */
#include "cli/cli.h"
#include "cli/daemon.h"
#include "cli/table.h"
#include "hal/hal.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef GS_VERSION
#define GS_VERSION "0.0.0-dev"
#endif

/* ---- query fields -------------------------------------------------------------- */

typedef enum {
  F_INDEX, F_ID, F_BACKEND, F_NAME, F_MEM_TOTAL, F_MEM_USED, F_MEM_FREE, F_UTIL, F_TEMP, F_POWER,
  F_UUID, F_PCI_BUS, F_UTIL_MEM, F_POWER_LIMIT, F_CLOCK_SM, F_CLOCK_MEM, F_PCIE_GEN,
  F_PCIE_WIDTH, F_ECC_CORRECTED, F_ECC_UNCORRECTED, F_COUNT
} field_id;

/* The names --query takes: gpusrv's own, then nvidia-smi's --query-gpu
 * names where they mean the same, with nvidia-smi's units. */
typedef struct field_name {
  const char *name;
  field_id id;
  const char *unit; /* for the CSV header and values; NULL: none */
} field_name;

static const field_name fields[] = {
    {"index", F_INDEX, NULL},
    {"id", F_ID, NULL},
    {"backend", F_BACKEND, NULL},
    {"name", F_NAME, NULL},
    {"memory.total", F_MEM_TOTAL, "MiB"},
    {"memory.used", F_MEM_USED, "MiB"},
    {"memory.free", F_MEM_FREE, "MiB"},
    {"utilization", F_UTIL, "%"},
    {"temperature", F_TEMP, "C"},
    {"power", F_POWER, "W"},
    /* nvidia-smi's */
    {"uuid", F_UUID, NULL},
    {"pci.bus_id", F_PCI_BUS, NULL},
    {"utilization.gpu", F_UTIL, "%"},
    {"utilization.memory", F_UTIL_MEM, "%"},
    {"temperature.gpu", F_TEMP, NULL},
    {"power.draw", F_POWER, "W"},
    {"power.limit", F_POWER_LIMIT, "W"},
    {"clocks.sm", F_CLOCK_SM, "MHz"},
    {"clocks.current.sm", F_CLOCK_SM, "MHz"},
    {"clocks.mem", F_CLOCK_MEM, "MHz"},
    {"clocks.current.memory", F_CLOCK_MEM, "MHz"},
    {"pcie.link.gen.current", F_PCIE_GEN, NULL},
    {"pcie.link.width.current", F_PCIE_WIDTH, NULL},
    {"ecc.errors.corrected.volatile.total", F_ECC_CORRECTED, NULL},
    {"ecc.errors.uncorrected.volatile.total", F_ECC_UNCORRECTED, NULL},
};
#define N_FIELD_NAMES ((int)(sizeof fields / sizeof fields[0]))

#define MIB(b) ((unsigned long long)((b) >> 20))

/* One device's figures, read once per refresh. */
typedef struct sample {
  gs_device_t *device;
  const gs_device_info *info;
  gs_telemetry t;
  int proc_rc; /* 0, or GS_ENOTSUP when the backend cannot list processes */
  int proc_count;
  gs_process_info procs[32];
} sample;

/* Writes a field's value without unit into buf; returns false if not
 * available. */
static bool field_value(const sample *s, field_id f, char *buf, size_t cap) {
  const gs_telemetry *t = &s->t;
  bool mem = t->valid & GS_TM_MEMORY;
  switch (f) {
  case F_INDEX: snprintf(buf, cap, "%d", s->info->index); return true;
  case F_ID: snprintf(buf, cap, "%s", s->info->id); return true;
  case F_BACKEND: snprintf(buf, cap, "%s", s->info->backend); return true;
  case F_NAME: snprintf(buf, cap, "%s", s->info->name); return true;
  case F_MEM_TOTAL: snprintf(buf, cap, "%llu", MIB(t->memory_total_bytes)); return mem;
  case F_MEM_USED: snprintf(buf, cap, "%llu", MIB(t->memory_used_bytes)); return mem;
  case F_MEM_FREE: snprintf(buf, cap, "%llu", MIB(t->memory_free_bytes)); return mem;
  case F_UTIL:
    snprintf(buf, cap, "%.0f", t->utilization_percent);
    return t->valid & GS_TM_UTILIZATION;
  case F_TEMP:
    snprintf(buf, cap, "%.0f", t->temperature_c);
    return t->valid & GS_TM_TEMPERATURE;
  case F_POWER:
    snprintf(buf, cap, "%.2f", t->power_w);
    return t->valid & GS_TM_POWER;
  case F_CLOCK_SM:
    snprintf(buf, cap, "%.0f", t->sm_clock_mhz);
    return t->valid & GS_TM_CLOCKS;
  case F_CLOCK_MEM:
    snprintf(buf, cap, "%.0f", t->memory_clock_mhz);
    return t->valid & GS_TM_CLOCKS;
  case F_PCIE_GEN:
    snprintf(buf, cap, "%d", t->pcie_generation);
    return t->valid & GS_TM_PCIE;
  case F_PCIE_WIDTH:
    snprintf(buf, cap, "%d", t->pcie_width);
    return t->valid & GS_TM_PCIE;
  case F_ECC_CORRECTED:
    snprintf(buf, cap, "%llu", (unsigned long long)t->ecc_corrected);
    return t->valid & GS_TM_ECC;
  case F_ECC_UNCORRECTED:
    snprintf(buf, cap, "%llu", (unsigned long long)t->ecc_uncorrected);
    return t->valid & GS_TM_ECC;
  case F_UUID: snprintf(buf, cap, "%s", s->info->uuid); return s->info->uuid[0] != '\0';
  case F_PCI_BUS:
    snprintf(buf, cap, "%s", s->info->pci_bus_id);
    return s->info->pci_bus_id[0] != '\0';
  case F_UTIL_MEM:
    snprintf(buf, cap, "%.0f", t->memory_utilization_percent);
    return t->valid & GS_TM_MEMORY_UTILIZATION;
  case F_POWER_LIMIT:
    snprintf(buf, cap, "%.2f", t->power_limit_w);
    return t->valid & GS_TM_POWER_LIMIT;
  case F_COUNT: break;
  }
  return false;
}

/* Parses "a,b,c" into indexes of `names`. Returns the count, or -1 after
 * naming the unknown field and listing the valid ones. */
static int parse_list(const char *flag, const char *spec, const char *const *names, int n_names,
                      int *out, int max) {
  int n = 0;
  const char *p = spec;
  while (*p) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    while (len && *p == ' ') {
      p++;
      len--;
    }
    int found = -1;
    for (int f = 0; f < n_names; f++)
      if (strlen(names[f]) == len && strncmp(names[f], p, len) == 0)
        found = f;
    if (found < 0 || n == max) {
      fprintf(stderr, "gpusrv: smi: unknown %s field '%.*s'; valid fields:", flag, (int)len, p);
      for (int f = 0; f < n_names; f++)
        fprintf(stderr, "%s%s", f ? "," : " ", names[f]);
      fputc('\n', stderr);
      return -1;
    }
    out[n++] = found;
    p += len + (comma ? 1 : 0);
    if (comma && !*p) {
      fprintf(stderr, "gpusrv: smi: empty %s field after the last ','\n", flag);
      return -1;
    }
  }
  if (n == 0) {
    fprintf(stderr, "gpusrv: smi: %s needs at least one field\n", flag);
    return -1;
  }
  return n;
}

static int parse_query(const char *flag, const char *spec, int *out, int max) {
  const char *names[N_FIELD_NAMES];
  for (int f = 0; f < N_FIELD_NAMES; f++)
    names[f] = fields[f].name;
  return parse_list(flag, spec, names, N_FIELD_NAMES, out, max);
}

/* --query-compute-apps: nvidia-smi's names for a process on a device. */
enum { APP_PID, APP_NAME, APP_MEMORY, APP_GPU_NAME, APP_DEVICE, APP_COUNT };
static const char *const app_names[APP_COUNT] = {"pid", "process_name", "used_memory",
                                                 "gpu_name", "gpu_id"};

/* ---- output -------------------------------------------------------------------- */

static void print_csv(const sample *s, int n, const int *q, int nq, bool header, bool units) {
  if (header)
    for (int i = 0; i < nq; i++) {
      const char *unit = fields[q[i]].unit;
      printf("%s%s", i ? ", " : "", fields[q[i]].name);
      if (units && unit)
        printf(" [%s]", unit);
      if (i == nq - 1)
        putchar('\n');
    }
  for (int d = 0; d < n; d++)
    for (int i = 0; i < nq; i++) {
      char v[160];
      const char *unit = fields[q[i]].unit;
      bool ok = field_value(&s[d], fields[q[i]].id, v, sizeof v);
      printf("%s", i ? ", " : "");
      if (!ok)
        printf("[N/A]");
      else if (units && unit)
        printf("%s %s", v, unit);
      else
        printf("%s", v);
      if (i == nq - 1)
        putchar('\n');
    }
}

static json_t *json_num_or_null(bool ok, double v) { return ok ? json_real(v) : json_null(); }

static int print_json(const sample *s, int n) {
  json_t *root = json_object(), *devs = json_array(), *skipped = json_array();
  for (int d = 0; d < n; d++) {
    const gs_telemetry *t = &s[d].t;
    bool mem = t->valid & GS_TM_MEMORY;
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(s[d].info->index));
    json_object_set_new(o, "id", json_string(s[d].info->id));
    json_object_set_new(o, "backend", json_string(s[d].info->backend));
    json_object_set_new(o, "name", json_string(s[d].info->name));
    json_object_set_new(o, "compute_units", json_integer(s[d].info->compute_units));
    json_object_set_new(o, "memory_total_bytes",
                        mem ? json_integer((json_int_t)t->memory_total_bytes) : json_null());
    json_object_set_new(o, "memory_used_bytes",
                        mem ? json_integer((json_int_t)t->memory_used_bytes) : json_null());
    json_object_set_new(o, "memory_free_bytes",
                        mem ? json_integer((json_int_t)t->memory_free_bytes) : json_null());
    json_object_set_new(o, "utilization_percent",
                        json_num_or_null(t->valid & GS_TM_UTILIZATION, t->utilization_percent));
    json_object_set_new(o, "temperature_c",
                        json_num_or_null(t->valid & GS_TM_TEMPERATURE, t->temperature_c));
    json_object_set_new(o, "power_w", json_num_or_null(t->valid & GS_TM_POWER, t->power_w));
    json_object_set_new(o, "power_limit_w",
                        json_num_or_null(t->valid & GS_TM_POWER_LIMIT, t->power_limit_w));
    json_object_set_new(o, "memory_utilization",
                        json_num_or_null(t->valid & GS_TM_MEMORY_UTILIZATION,
                                         t->memory_utilization_percent));
    json_object_set_new(o, "clocks_mhz",
                        t->valid & GS_TM_CLOCKS ? json_pack("{s:f, s:f}", "sm", t->sm_clock_mhz,
                                                            "memory", t->memory_clock_mhz)
                                                : json_null());
    json_object_set_new(o, "pcie",
                        t->valid & GS_TM_PCIE
                            ? json_pack("{s:i, s:i, s:i}", "generation", t->pcie_generation,
                                        "width", t->pcie_width, "max_width", t->pcie_max_width)
                            : json_null());
    json_object_set_new(o, "ecc_errors",
                        t->valid & GS_TM_ECC
                            ? json_pack("{s:I, s:I}", "corrected", (json_int_t)t->ecc_corrected,
                                        "uncorrected", (json_int_t)t->ecc_uncorrected)
                            : json_null());
    json_object_set_new(o, "health", t->valid & GS_TM_HEALTH
                                         ? json_string(gs_health_name(t->health))
                                         : json_null());
    json_object_set_new(o, "health_reason", t->valid & GS_TM_HEALTH && t->health_reason[0]
                                                ? json_string(t->health_reason)
                                                : json_null());
    if (s[d].proc_rc == 0) {
      json_t *procs = json_array();
      for (int i = 0; i < s[d].proc_count && i < 32; i++) {
        json_t *p = json_object();
        json_object_set_new(p, "pid", json_integer(s[d].procs[i].pid));
        json_object_set_new(p, "name", json_string(s[d].procs[i].name));
        json_object_set_new(p, "memory_used_bytes",
                            json_integer((json_int_t)s[d].procs[i].memory_used_bytes));
        json_array_append_new(procs, p);
      }
      json_object_set_new(o, "processes", procs);
    } else {
      json_object_set_new(o, "processes", json_null()); /* not available */
    }
    json_array_append_new(devs, o);
  }
  for (int i = 0; i < gs_hal_skipped_count(); i++) {
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(gs_hal_skipped(i)->name));
    json_object_set_new(o, "reason", json_string(gs_hal_skipped(i)->reason));
    json_array_append_new(skipped, o);
  }
  json_object_set_new(root, "devices", devs);
  json_object_set_new(root, "skipped_backends", skipped);
  int rc = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  fputc('\n', stdout);
  json_decref(root);
  return rc == 0 ? GS_EXIT_OK : GS_EXIT_FAILED;
}

static void print_table(const sample *s, int n) {
  char when[64];
  time_t now = time(NULL);
  struct tm tm;
  strftime(when, sizeof when, "%a %b %e %H:%M:%S %Y", localtime_r(&now, &tm));
  printf("gpusrv smi %s    %s\n", GS_VERSION, when);

  static const char *const heads[] = {"Idx", "ID", "Backend", "Name", "Memory-Usage", "Util",
                                      "Temp", "Power"};
  static const bool right[] = {true, false, false, false, true, true, true, true};
  gs_table_t *t = gs_table_new(8, heads, right);
  for (int d = 0; t && d < n; d++) {
    char idx[16], mem[64], util[16], temp[16], power[24], name[41], v[160];
    field_value(&s[d], F_INDEX, idx, sizeof idx);
    snprintf(name, sizeof name, "%s", s[d].info->name); /* long names are cut at 40 */
    if (s[d].t.valid & GS_TM_MEMORY)
      snprintf(mem, sizeof mem, "%lluMiB / %lluMiB", MIB(s[d].t.memory_used_bytes),
               MIB(s[d].t.memory_total_bytes));
    else
      snprintf(mem, sizeof mem, "N/A");
    snprintf(util, sizeof util, "%s", field_value(&s[d], F_UTIL, v, sizeof v) ? strcat(v, "%") : "N/A");
    snprintf(temp, sizeof temp, "%s", field_value(&s[d], F_TEMP, v, sizeof v) ? strcat(v, "C") : "N/A");
    snprintf(power, sizeof power, "%s", field_value(&s[d], F_POWER, v, sizeof v) ? strcat(v, "W") : "N/A");
    const char *row[] = {idx, s[d].info->id, s[d].info->backend, name, mem, util, temp, power};
    gs_table_add_row(t, row);
  }
  if (t)
    gs_table_print(t, stdout);
  gs_table_free(t);

  printf("\nProcesses:\n");
  static const char *const pheads[] = {"Device", "PID", "Process name", "Memory"};
  static const bool pright[] = {false, true, false, true};
  gs_table_t *pt = gs_table_new(4, pheads, pright);
  for (int d = 0; pt && d < n; d++) {
    if (s[d].proc_rc < 0) {
      const char *row[] = {s[d].info->id, "-", "(not reported by this backend)", "-"};
      gs_table_add_row(pt, row);
      continue;
    }
    if (s[d].proc_count == 0) {
      const char *row[] = {s[d].info->id, "-", "(none)", "-"};
      gs_table_add_row(pt, row);
    }
    for (int i = 0; i < s[d].proc_count && i < 32; i++) {
      char pid[16], mem[32];
      snprintf(pid, sizeof pid, "%d", s[d].procs[i].pid);
      snprintf(mem, sizeof mem, "%lluMiB", MIB(s[d].procs[i].memory_used_bytes));
      const char *row[] = {s[d].info->id, pid, s[d].procs[i].name, mem};
      gs_table_add_row(pt, row);
    }
  }
  if (pt)
    gs_table_print(pt, stdout);
  gs_table_free(pt);

  if (gs_hal_skipped_count() > 0) {
    printf("\nBackends not loaded:\n");
    for (int i = 0; i < gs_hal_skipped_count(); i++)
      printf("  %-8s %s\n", gs_hal_skipped(i)->name, gs_hal_skipped(i)->reason);
  }
}

/* ---- the command ----------------------------------------------------------------- */

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) {
  (void)sig;
  interrupted = 1;
}

typedef struct smi_options {
  bool json, list, bookings;
  const char *query, *query_gpu, *query_apps, *format, *device;
  double loop_seconds; /* 0: once */
  gs_cli_daemon_opts daemon; /* for --bookings */
} smi_options;

static const gs_cli_option smi_options_table[] = {
    GS_CLI_OPT("json", GS_OPT_BOOL, smi_options, json, NULL, "Print {\"devices\": [...]} as JSON"),
    {"query", 'q', GS_OPT_STRING, offsetof(smi_options, query), "FIELDS",
     "Print the comma-separated FIELDS of each device as CSV", 0, 0},
    GS_CLI_OPT("query-gpu", GS_OPT_STRING, smi_options, query_gpu, "FIELDS",
               "The same, as nvidia-smi spells it (its field names work in both)"),
    GS_CLI_OPT("query-compute-apps", GS_OPT_STRING, smi_options, query_apps, "FIELDS",
               "Print the processes using each device as CSV: pid, process_name, used_memory, "
               "gpu_name, gpu_id"),
    GS_CLI_OPT("format", GS_OPT_STRING, smi_options, format, "FORMAT",
               "With a query: csv, optionally with noheader and nounits"),
    {"list-gpus", 'L', GS_OPT_BOOL, offsetof(smi_options, list), NULL,
     "List the devices, one line each, as nvidia-smi -L does", 0, 0},
    {"id", 'i', GS_OPT_STRING, offsetof(smi_options, device), "ID",
     "Only this device (its id such as cpu0, or its index)", 0, 0},
    {"loop", 'l', GS_OPT_REAL, offsetof(smi_options, loop_seconds), "SECONDS",
     "Repeat every SECONDS until interrupted", 0.001, 86400},
    GS_CLI_OPT("bookings", GS_OPT_BOOL, smi_options, bookings, NULL,
               "Also list what the daemon's ledger holds of each device: model instances, jobs, "
               "Slurm's jobs (its /api/v1/bookings)"),
    GS_CLI_DAEMON_ROWS(smi_options),
    GS_CLI_OPTIONS_END,
};

static int parse_options(int argc, char **argv, smi_options *o) {
  gs_cli_args args;
  int rc = gs_cli_parse(&gs_cli_smi, argc, argv, o, &args);
  if (rc != GS_EXIT_OK)
    return rc;
  if (o->query && o->query_gpu)
    return gs_cli_usage_error(&gs_cli_smi, "--query and --query-gpu are the same: give one");
  if (o->query_gpu)
    o->query = o->query_gpu;
  int views = (o->json ? 1 : 0) + (o->query ? 1 : 0) + (o->query_apps ? 1 : 0) + (o->list ? 1 : 0);
  if (views > 1)
    return gs_cli_usage_error(&gs_cli_smi, "--json, --query, --query-compute-apps and -L cannot "
                                           "be combined");
  if (o->bookings && views)
    return gs_cli_usage_error(&gs_cli_smi, "--bookings is for the table view");
  if (o->format && !o->query && !o->query_apps)
    return gs_cli_usage_error(&gs_cli_smi, "--format applies to a query only");
  return 0;
}

static int parse_format(const char *spec, bool *header, bool *units) {
  *header = true;
  *units = true;
  if (!spec)
    return 0;
  char buf[128];
  snprintf(buf, sizeof buf, "%s", spec);
  bool csv = false;
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ')
      tok++;
    if (strcmp(tok, "csv") == 0)
      csv = true;
    else if (strcmp(tok, "noheader") == 0)
      *header = false;
    else if (strcmp(tok, "nounits") == 0)
      *units = false;
    else
      return gs_cli_usage_error(&gs_cli_smi,
                                "unknown format '%s' (expected csv, noheader, nounits)", tok);
  }
  if (!csv)
    return gs_cli_usage_error(&gs_cli_smi, "--format must include csv, got '%s'", spec);
  return 0;
}

/* --query-compute-apps: one row per process on each device that can list
 * them (a device that cannot has no rows, as in nvidia-smi). */
static void print_apps_csv(const sample *s, int n, const int *q, int nq, bool header, bool units) {
  for (int i = 0; header && i < nq; i++)
    printf("%s%s%s%s", i ? ", " : "", app_names[q[i]],
           units && q[i] == APP_MEMORY ? " [MiB]" : "", i == nq - 1 ? "\n" : "");
  for (int d = 0; d < n; d++)
    for (int k = 0; s[d].proc_rc == 0 && k < s[d].proc_count && k < 32; k++) {
      const gs_process_info *pi = &s[d].procs[k];
      for (int i = 0; i < nq; i++) {
        printf("%s", i ? ", " : "");
        switch (q[i]) {
        case APP_PID: printf("%d", pi->pid); break;
        case APP_NAME: printf("%s", pi->name); break;
        case APP_MEMORY: printf("%llu%s", MIB(pi->memory_used_bytes), units ? " MiB" : ""); break;
        case APP_GPU_NAME: printf("%s", s[d].info->name); break;
        default: printf("%s", s[d].info->id); break;
        }
      }
      putchar('\n');
    }
}

/* -L: "GPU 0: NAME (UUID: ...)" as nvidia-smi prints it, with gpusrv's id;
 * the HAL does not report UUIDs yet. */
static void print_list(const sample *s, int n) {
  for (int d = 0; d < n; d++)
    printf("GPU %d: %s (UUID: [N/A], id: %s, backend: %s)\n", s[d].info->index, s[d].info->name,
           s[d].info->id, s[d].info->backend);
}

/* The daemon's ledger, a row per device of each booking, as nvidia-smi
 * lists processes. */
static int print_bookings(const smi_options *o) {
  gs_client *c = gs_cli_client("smi", o->daemon.url, o->daemon.token);
  if (!c)
    return GS_EXIT_FAILED;
  char *text = NULL;
  if (gs_client_request(c, "GET", "/api/v1/bookings", NULL, &text) != GS_OK) {
    gs_cli_error("smi: bookings: %s", gs_client_last_error(c));
    gs_client_close(c);
    return GS_EXIT_FAILED;
  }
  gs_client_close(c);
  json_t *all = json_loads(text, 0, NULL), *b, *part;
  free(text);
  printf("\nBookings:\n");
  static const char *const heads[] = {"Device", "Owner", "Memory", "Compute"};
  static const bool right[] = {false, false, true, true};
  gs_table_t *t = gs_table_new(4, heads, right);
  size_t i, k;
  int rows = 0;
  json_array_foreach(json_object_get(all, "bookings"), i, b) {
    json_array_foreach(json_object_get(b, "devices"), k, part) {
      char mem[32], share[16];
      snprintf(mem, sizeof mem, "%lluMiB",
               MIB((uint64_t)json_integer_value(json_object_get(part, "memory"))));
      snprintf(share, sizeof share, "%lld%%",
               (long long)json_integer_value(json_object_get(part, "share")));
      const char *row[] = {json_string_value(json_object_get(part, "device")) ?: "?",
                           json_string_value(json_object_get(b, "owner")) ?: "?", mem, share};
      if (t)
        gs_table_add_row(t, row);
      rows++;
    }
  }
  if (t && rows == 0) {
    const char *row[] = {"-", "(none)", "-", "-"};
    gs_table_add_row(t, row);
  }
  if (t)
    gs_table_print(t, stdout);
  gs_table_free(t);
  json_decref(all);
  return GS_EXIT_OK;
}

static int refresh(sample *s, int n, const smi_options *o, const int *q, int nq, bool header,
                   bool units) {
  for (int d = 0; d < n; d++) {
    gs_device_telemetry(s[d].device, &s[d].t);
    s[d].proc_rc = gs_device_processes(s[d].device, s[d].procs, 32, &s[d].proc_count);
  }
  if (o->json)
    return print_json(s, n);
  if (o->query)
    print_csv(s, n, q, nq, header, units);
  else if (o->query_apps)
    print_apps_csv(s, n, q, nq, header, units);
  else if (o->list)
    print_list(s, n);
  else
    print_table(s, n);
  return o->bookings ? print_bookings(o) : GS_EXIT_OK;
}

static int smi_run(int argc, char **argv) {
  smi_options o = {0};
  int rc = parse_options(argc, argv, &o);
  if (rc)
    return rc;
  int q[N_FIELD_NAMES * 4];
  int nq = 0, max = (int)(sizeof q / sizeof q[0]);
  bool header, units;
  if (o.query && (nq = parse_query(o.query_gpu ? "--query-gpu" : "--query", o.query, q, max)) < 0)
    return GS_EXIT_USAGE;
  if (o.query_apps && (nq = parse_list("--query-compute-apps", o.query_apps, app_names, APP_COUNT,
                                       q, max)) < 0)
    return GS_EXIT_USAGE;
  if ((rc = parse_format(o.format, &header, &units)) != 0)
    return rc;

  if (gs_hal_init() < 0) {
    gs_cli_error("smi: %s", gs_error_detail());
    for (int i = 0; i < gs_hal_skipped_count(); i++)
      fprintf(stderr, "  %s: %s\n", gs_hal_skipped(i)->name, gs_hal_skipped(i)->reason);
    gs_hal_shutdown();
    return GS_EXIT_FAILED;
  }
  int n = 0;
  sample *s = calloc((size_t)gs_hal_device_count() + 1, sizeof *s);
  if (!s) {
    gs_hal_shutdown();
    gs_cli_error("smi: out of memory");
    return GS_EXIT_FAILED;
  }
  if (o.device) {
    gs_device_t *d = gs_hal_device_find(o.device);
    if (!d) {
      gs_cli_error("smi: no device '%s' (run 'gpusrv smi' to list them)", o.device);
      free(s);
      gs_hal_shutdown();
      return GS_EXIT_FAILED;
    }
    s[n].device = d;
    s[n++].info = gs_device_get_info(d);
  } else {
    for (int i = 0; i < gs_hal_device_count(); i++) {
      s[n].device = gs_hal_device(i);
      s[n].info = gs_device_get_info(s[n].device);
      n++;
    }
  }

  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  rc = refresh(s, n, &o, q, nq, header, units);
  while (rc == GS_EXIT_OK && o.loop_seconds > 0 && !interrupted) {
    fflush(stdout);
    struct timespec ts = {.tv_sec = (time_t)o.loop_seconds,
                          .tv_nsec = (long)((o.loop_seconds - (double)(time_t)o.loop_seconds) * 1e9)};
    /* A signal cuts the sleep short (no SA_RESTART), and the loop ends. */
    if (nanosleep(&ts, NULL) != 0 || interrupted)
      break;
    if (!o.json && !o.query && !o.query_apps && !o.list)
      printf("\n");
    rc = refresh(s, n, &o, q, nq, header, units);
  }
  fflush(stdout);
  free(s);
  gs_hal_shutdown();
  return rc;
}

const gs_cli_command gs_cli_smi = {
    .name = "smi",
    .usage = "gpusrv smi [--json | -L | --query[-gpu]=FIELDS | --query-compute-apps=FIELDS]\n"
             "[--format=csv[,noheader][,nounits]] [-i ID] [-l SECONDS]",
    .about = "Shows every device that gpusrv can use: memory, utilization, temperature and power.\n"
             "A figure the machine does not expose is shown as N/A (null in JSON), never as 0.",
    .options = smi_options_table,
    .notes = "Query fields: index, id, backend, name, memory.total, memory.used, memory.free,\n"
             "utilization, temperature, power. Memory is in MiB, utilization in %, temperature\n"
             "in degrees C, power in W. nvidia-smi's names work too: uuid, pci.bus_id,\n"
             "utilization.gpu, utilization.memory, temperature.gpu, power.draw, power.limit,\n"
             "clocks.sm, clocks.mem, pcie.link.gen.current, pcie.link.width.current,\n"
             "ecc.errors.corrected.volatile.total, ecc.errors.uncorrected.volatile.total.\n"
             "A field the backend cannot report prints [N/A] (on the CPU: uuid, pci.bus_id,\n"
             "utilization.memory, power.limit, the clocks, the link and the ECC errors).\n",
    .run = smi_run,
};

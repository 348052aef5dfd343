/* cmd_jobs.c - the front desk's commands: `gpusrv submit`, `jobs`, `job`,
 * `cancel`, `logs`, `wait`, `tenant` and `usage`, all talking to a running
 * daemon's /api/v1 routes. */
#include "cli/cli.h"
#include "cli/daemon.h"
#include "cli/table.h"

#include "base/error.h"
#include "base/units.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DAEMON_OPTIONS                                                             \
  "  --url URL        The daemon (default: GPUSRV_URL, else http://127.0.0.1:8000)\n" \
  "  --token TOKEN    Bearer token (default: GPUSRV_TOKEN)\n"

/* Options every one of these commands takes. */
typedef struct common {
  const char *url, *token;
  bool json;
} common;

/* Consumes --url, --token and --json at argv[*i]; true if it was one. */
static bool common_option(int argc, char **argv, int *i, common *o) {
  const char *a = argv[*i];
  if (!strcmp(a, "--json"))
    o->json = true;
  else if (!strcmp(a, "--url") && *i + 1 < argc)
    o->url = argv[++*i];
  else if (!strncmp(a, "--url=", 6))
    o->url = a + 6;
  else if (!strcmp(a, "--token") && *i + 1 < argc)
    o->token = argv[++*i];
  else if (!strncmp(a, "--token=", 8))
    o->token = a + 8;
  else
    return false;
  return true;
}

static int call(const char *what, const common *o, const char *method, const char *path,
                json_t *body, json_t **out) {
  return gs_cli_call_json(what, o->url, o->token, method, path, body, out);
}

static void print_json(json_t *j) {
  json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  putchar('\n');
}

static bool parse_id(const char *text, long long *id) {
  char *end = NULL;
  *id = strtoll(text, &end, 10);
  return end != text && *end == '\0' && *id > 0;
}

static const char *str(json_t *o, const char *key) {
  const char *s = json_string_value(json_object_get(o, key));
  return s ? s : "";
}

/* "1:02:03" or "45s" since `since` (until `until` if set, else now). */
static void elapsed(json_t *job, char *buf, size_t cap) {
  double start = json_number_value(json_object_get(job, "start_time"));
  double end = json_number_value(json_object_get(job, "end_time"));
  if (start <= 0) {
    snprintf(buf, cap, "-");
    return;
  }
  if (end <= 0)
    end = (double)time(NULL);
  long s = end > start ? (long)(end - start) : 0;
  if (s >= 3600)
    snprintf(buf, cap, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    snprintf(buf, cap, "%ld:%02ld", s / 60, s % 60);
}

/* ---- submit ------------------------------------------------------------------------- */

static const char submit_help[] =
    "Usage: gpusrv submit [OPTIONS] -- COMMAND [ARGS...]\n"
    "\n"
    "Queues a process job with the daemon and prints its id. The job runs as the tenant's\n"
    "Unix user in its own process group and cgroup, with CUDA_VISIBLE_DEVICES,\n"
    "GPUSRV_VISIBLE_DEVICES, GPUSRV_JOB_ID and GPUSRV_TENANT set; its output goes to logs\n"
    "(`gpusrv logs ID`).\n"
    "\n"
    "Options:\n"
    "  --gpus N         Whole devices (all their memory and compute), booked together\n"
    "  --gpu-mem SIZE   Instead: memory on one device (such as 16G) ...\n"
    "  --gpu-share PCT  ... and this percentage of its compute (0-100)\n"
    "  --cpus N         CPU cores, fractions allowed (default: the daemon's, 1)\n"
    "  --mem SIZE       Host memory limit (such as 4G; default: none)\n"
    "  --time LIMIT     Time limit: 90s, 30m, 2h, HH:MM:SS, D-HH:MM:SS (default: none)\n"
    "  --priority P     Higher runs first (-1000 to 1000, default 0)\n"
    "  --name NAME      A name for listings (default: the command)\n"
    "  --requeue        Queue it again if it is lost (its processes vanished in a restart)\n"
    "  --env NAME=VAL   Set a variable in the job's environment (repeatable)\n"
    "  --chdir DIR      Working directory (default: the job's own, owned by its user)\n"
    DAEMON_OPTIONS
    "  --json           Print the queued job as JSON instead of its id\n";

static int submit_run(int argc, char **argv) {
  const gs_cli_command *me = &gs_cli_submit;
  common o = {0};
  json_t *body = json_object(), *env = json_array();
  int i = 1;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (common_option(argc, argv, &i, &o))
      continue;
    if (!strcmp(a, "--requeue")) {
      json_object_set_new(body, "requeue", json_true());
      continue;
    }
    if (!v || a[0] != '-') {
      json_decref(body);
      json_decref(env);
      return gs_cli_usage_error(me, v ? "unexpected '%s' (put the command after --)"
                                      : "option '%s' needs a value", a);
    }
    i++;
    char *end = NULL;
    uint64_t bytes;
    int64_t secs;
    if (!strcmp(a, "--gpus") || !strcmp(a, "--gpu-share") || !strcmp(a, "--priority")) {
      long n = strtol(v, &end, 10);
      if (end == v || *end)
        goto bad_value;
      json_object_set_new(body, !strcmp(a, "--gpus") ? "gpus" : !strcmp(a, "--gpu-share")
                                                                   ? "gpu_share" : "priority",
                          json_integer(n));
    } else if (!strcmp(a, "--cpus")) {
      double n = strtod(v, &end);
      if (end == v || *end || !(n > 0) || !isfinite(n))
        goto bad_value;
      json_object_set_new(body, "cpus", json_real(n));
    } else if (!strcmp(a, "--gpu-mem") || !strcmp(a, "--mem")) {
      if (gs_parse_bytes(v, &bytes) < 0)
        goto bad_value;
      json_object_set_new(body, a[2] == 'g' ? "gpu_mem" : "mem", json_integer((json_int_t)bytes));
    } else if (!strcmp(a, "--time")) {
      if (gs_parse_duration(v, &secs) < 0)
        goto bad_value;
      json_object_set_new(body, "time_limit", json_integer(secs));
    } else if (!strcmp(a, "--name")) {
      json_object_set_new(body, "name", json_string(v));
    } else if (!strcmp(a, "--chdir")) {
      json_object_set_new(body, "chdir", json_string(v));
    } else if (!strcmp(a, "--env")) {
      if (!strchr(v, '=') || v[0] == '=')
        goto bad_value;
      json_array_append_new(env, json_string(v));
    } else {
      json_decref(body);
      json_decref(env);
      return gs_cli_usage_error(me, "unknown option '%s'", a);
    }
    continue;
  bad_value:
    json_decref(body);
    json_decref(env);
    return gs_cli_usage_error(me, "bad value '%s' for %s", v, a);
  }
  if (i + 1 >= argc) {
    json_decref(body);
    json_decref(env);
    return gs_cli_usage_error(me, "no command (give it after --)");
  }
  json_t *cmd = json_array();
  for (i++; i < argc; i++)
    json_array_append_new(cmd, json_string(argv[i]));
  json_object_set_new(body, "command", cmd);
  json_object_set_new(body, "env", env);
  json_t *job = NULL;
  int rc = call("submit", &o, "POST", "/api/v1/jobs", body, &job);
  json_decref(body);
  if (rc != GS_EXIT_OK)
    return rc;
  if (o.json)
    print_json(job);
  else
    printf("%lld\n", (long long)json_integer_value(json_object_get(job, "id")));
  json_decref(job);
  return GS_EXIT_OK;
}

const gs_cli_command gs_cli_submit = {
    .name = "submit",
    .summary = "Queue a process job (a command) with the daemon",
    .help = submit_help,
    .run = submit_run,
};

/* ---- jobs, job ------------------------------------------------------------------------- */

static const char jobs_help[] =
    "Usage: gpusrv jobs [--all] [--tenant T] [--url URL] [--token TOKEN] [--json]\n"
    "\n"
    "Lists your pending and running jobs (an admin sees everyone's): id, name, tenant,\n"
    "state, why it waits or how it ended, devices and time. --all adds ended jobs.\n"
    "\n"
    "Options:\n"
    "  --all            Ended jobs too (the newest 1000)\n"
    "  --tenant T       Only tenant T's (admin)\n" DAEMON_OPTIONS
    "  --json           Print the daemon's answer as JSON\n";

static int jobs_run(int argc, char **argv) {
  common o = {0};
  bool all = false;
  const char *tenant = NULL;
  for (int i = 1; i < argc; i++) {
    if (common_option(argc, argv, &i, &o))
      continue;
    if (!strcmp(argv[i], "--all"))
      all = true;
    else if (!strcmp(argv[i], "--tenant") && i + 1 < argc)
      tenant = argv[++i];
    else
      return gs_cli_usage_error(&gs_cli_jobs, "unknown option '%s'", argv[i]);
  }
  char path[300];
  snprintf(path, sizeof path, "/api/v1/jobs?all=%d%s%s", all, tenant ? "&tenant=" : "",
           tenant ? tenant : "");
  json_t *answer = NULL;
  int rc = call("jobs", &o, "GET", path, NULL, &answer);
  if (rc != GS_EXIT_OK)
    return rc;
  json_t *jobs = json_object_get(answer, "jobs");
  if (o.json) {
    print_json(jobs);
  } else {
    static const char *const heads[] = {"ID", "Name", "Tenant", "State", "Reason", "Devices",
                                        "Time"};
    static const bool right[] = {true, false, false, false, false, false, true};
    gs_table_t *t = gs_table_new(7, heads, right);
    size_t k;
    json_t *j;
    json_array_foreach(jobs, k, j) {
      char id[32], took[32];
      snprintf(id, sizeof id, "%lld", (long long)json_integer_value(json_object_get(j, "id")));
      elapsed(j, took, sizeof took);
      const char *row[] = {id, str(j, "name"), str(j, "tenant"), str(j, "state"),
                           str(j, "reason"), str(j, "devices"), took};
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

const gs_cli_command gs_cli_jobs = {
    .name = "jobs",
    .summary = "List jobs: pending, running, and with --all ended ones",
    .help = jobs_help,
    .run = jobs_run,
};

static const char job_help[] =
    "Usage: gpusrv job ID [--url URL] [--token TOKEN] [--json]\n"
    "\n"
    "Shows one job: what it asked for, its state and why, its devices, times, exit code,\n"
    "accounting, and every change of state with its time.\n"
    "\n"
    "Options:\n" DAEMON_OPTIONS "  --json           Print the daemon's answer as JSON\n";

/* Parses "CMD ID [common options]" for job, cancel and wait. */
static int id_and_options(const gs_cli_command *me, int argc, char **argv, long long *id,
                          common *o) {
  bool have = false;
  for (int i = 1; i < argc; i++) {
    if (common_option(argc, argv, &i, o))
      continue;
    if (argv[i][0] != '-' && !have) {
      if (!parse_id(argv[i], id))
        return gs_cli_usage_error(me, "'%s' is not a job id", argv[i]);
      have = true;
    } else {
      return gs_cli_usage_error(me, "unexpected '%s'", argv[i]);
    }
  }
  return have ? GS_EXIT_OK : gs_cli_usage_error(me, "which job? (give its id)");
}

static int job_run(int argc, char **argv) {
  common o = {0};
  long long id;
  int rc = id_and_options(&gs_cli_job, argc, argv, &id, &o);
  if (rc != GS_EXIT_OK)
    return rc;
  char path[64];
  snprintf(path, sizeof path, "/api/v1/jobs/%lld", id);
  json_t *j = NULL;
  if ((rc = call("job", &o, "GET", path, NULL, &j)) != GS_EXIT_OK)
    return rc;
  if (o.json) {
    print_json(j);
    json_decref(j);
    return GS_EXIT_OK;
  }
  char took[32], *cmd = json_dumps(json_object_get(j, "command"), JSON_COMPACT);
  elapsed(j, took, sizeof took);
  printf("Job %lld: %s\n", id, str(j, "name"));
  printf("  Tenant:    %s\n", str(j, "tenant"));
  printf("  State:     %s%s%s\n", str(j, "state"), str(j, "reason")[0] ? " - " : "",
         str(j, "reason"));
  printf("  Command:   %s\n", cmd ? cmd : "");
  printf("  Asked for: %lld gpus, gpu_mem %lld, gpu_share %lld%%, %g cpus, mem %lld, time limit "
         "%lld s, priority %lld\n",
         (long long)json_integer_value(json_object_get(j, "gpus")),
         (long long)json_integer_value(json_object_get(j, "gpu_mem")),
         (long long)json_integer_value(json_object_get(j, "gpu_share")),
         json_number_value(json_object_get(j, "cpus")),
         (long long)json_integer_value(json_object_get(j, "mem")),
         (long long)json_integer_value(json_object_get(j, "time_limit")),
         (long long)json_integer_value(json_object_get(j, "priority")));
  printf("  Devices:   %s\n", str(j, "devices")[0] ? str(j, "devices") : "-");
  printf("  Time:      %s\n", took);
  json_t *ec = json_object_get(j, "exit_code");
  if (json_is_integer(ec))
    printf("  Exit code: %lld\n", (long long)json_integer_value(ec));
  printf("  CPU time:  %.2f s\n", json_number_value(json_object_get(j, "cpu_seconds")));
  printf("  Events:\n");
  size_t k;
  json_t *e;
  json_array_foreach(json_object_get(j, "events"), k, e) {
    time_t t = (time_t)json_number_value(json_object_get(e, "time"));
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
    printf("    %s  %-13s %s\n", when, str(e, "state"), str(e, "reason"));
  }
  free(cmd);
  json_decref(j);
  return GS_EXIT_OK;
}

const gs_cli_command gs_cli_job = {
    .name = "job",
    .summary = "Show one job in detail, with its history",
    .help = job_help,
    .run = job_run,
};

/* ---- cancel, wait -------------------------------------------------------------------------- */

static const char cancel_help[] =
    "Usage: gpusrv cancel ID [--url URL] [--token TOKEN]\n"
    "\n"
    "Cancels a job: a pending one at once; a running one gets SIGTERM, then SIGKILL after\n"
    "the daemon's grace period, and every process it started goes with it.\n"
    "\n"
    "Options:\n" DAEMON_OPTIONS;

static int cancel_run(int argc, char **argv) {
  common o = {0};
  long long id;
  int rc = id_and_options(&gs_cli_cancel, argc, argv, &id, &o);
  if (rc != GS_EXIT_OK)
    return rc;
  char path[64];
  snprintf(path, sizeof path, "/api/v1/jobs/%lld", id);
  return call("cancel", &o, "DELETE", path, NULL, NULL);
}

const gs_cli_command gs_cli_cancel = {
    .name = "cancel",
    .summary = "Cancel a job",
    .help = cancel_help,
    .run = cancel_run,
};

static const char wait_help[] =
    "Usage: gpusrv wait ID [--url URL] [--token TOKEN]\n"
    "\n"
    "Waits until the job has ended and exits with its exit code (128+N if a signal N\n"
    "ended it; 1 if it ended without one, such as CANCELLED before it started or LOST).\n"
    "\n"
    "Options:\n" DAEMON_OPTIONS;

static int wait_run(int argc, char **argv) {
  common o = {0};
  long long id;
  int rc = id_and_options(&gs_cli_wait, argc, argv, &id, &o);
  if (rc != GS_EXIT_OK)
    return rc;
  json_t *j = gs_cli_await_job("wait", o.url, o.token, id);
  if (!j)
    return GS_EXIT_FAILED;
  json_t *code = json_object_get(j, "exit_code"), *sig = json_object_get(j, "signal");
  rc = json_is_integer(sig) ? 128 + (int)json_integer_value(sig)
       : json_is_integer(code) ? (int)json_integer_value(code)
                               : GS_EXIT_FAILED;
  if (strcmp(str(j, "state"), "COMPLETED") != 0)
    fprintf(stderr, "gpusrv: job %lld %s%s%s\n", id, str(j, "state"),
            str(j, "reason")[0] ? ": " : "", str(j, "reason"));
  json_decref(j);
  return rc;
}

const gs_cli_command gs_cli_wait = {
    .name = "wait",
    .summary = "Wait for a job to end; exit with its exit code",
    .help = wait_help,
    .run = wait_run,
};

/* ---- logs ------------------------------------------------------------------------------------ */

static const char logs_help[] =
    "Usage: gpusrv logs ID [-f] [--stderr] [--url URL] [--token TOKEN]\n"
    "\n"
    "Prints a job's standard output (or its standard error) as logged so far.\n"
    "\n"
    "Options:\n"
    "  -f, --follow     Keep printing as the job writes, until it ends\n"
    "  --stderr         The job's standard error instead\n" DAEMON_OPTIONS;

static int logs_run(int argc, char **argv) {
  common o = {0};
  long long id = 0;
  bool follow = false, have = false;
  const char *stream = "stdout";
  for (int i = 1; i < argc; i++) {
    if (common_option(argc, argv, &i, &o))
      continue;
    if (!strcmp(argv[i], "-f") || !strcmp(argv[i], "--follow"))
      follow = true;
    else if (!strcmp(argv[i], "--stderr"))
      stream = "stderr";
    else if (argv[i][0] != '-' && !have && parse_id(argv[i], &id))
      have = true;
    else
      return gs_cli_usage_error(&gs_cli_logs, "unexpected '%s'", argv[i]);
  }
  if (!have)
    return gs_cli_usage_error(&gs_cli_logs, "which job? (give its id)");
  gs_client *client = gs_cli_client("logs", o.url, o.token);
  if (!client)
    return GS_EXIT_FAILED;
  int rc = gs_client_job_logs(client, id, !strcmp(stream, "stderr"), follow, gs_cli_write_to,
                              stdout);
  if (rc != GS_OK)
    gs_cli_error("logs: %s", gs_client_last_error(client));
  gs_client_close(client);
  return rc == GS_OK ? GS_EXIT_OK : GS_EXIT_FAILED;
}

const gs_cli_command gs_cli_logs = {
    .name = "logs",
    .summary = "Print (or follow) a job's output",
    .help = logs_help,
    .run = logs_run,
};

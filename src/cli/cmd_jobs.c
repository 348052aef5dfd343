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

/* The options of the commands that take only the daemon's and a job id. */
typedef struct daemon_only {
  gs_cli_daemon_opts daemon;
} daemon_only;

static const gs_cli_option daemon_only_options[] = {
    GS_CLI_DAEMON_ROWS(daemon_only),
    GS_CLI_OPTIONS_END,
};

static const gs_cli_option daemon_json_options[] = {
    GS_CLI_DAEMON_ROWS(daemon_only),
    GS_CLI_JSON_ROW(daemon_only),
    GS_CLI_OPTIONS_END,
};

static int call(const char *what, const gs_cli_daemon_opts *o, const char *method,
                const char *path, json_t *body, json_t **out) {
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


/* ---- submit ------------------------------------------------------------------------- */

typedef struct submit_opts {
  long long gpus, gpu_share, priority, nodes, gpus_per_node, ntasks_per_node;
  uint64_t gpu_mem, mem;
  double cpus;
  int64_t time_limit;
  const char *name, *chdir, *image, *network, *partition;
  bool requeue, writable_root, mpi;
  gs_cli_list env, mounts;
  gs_cli_daemon_opts daemon;
} submit_opts;

static const gs_cli_option submit_options[] = {
    GS_CLI_OPT_RANGE("gpus", GS_OPT_INT, submit_opts, gpus, "N",
                     "Whole devices (all their memory and compute), booked together", 0, 64),
    GS_CLI_OPT("gpu-mem", GS_OPT_BYTES, submit_opts, gpu_mem, "SIZE",
               "Instead: memory on one device (such as 16G) ..."),
    GS_CLI_OPT_RANGE("gpu-share", GS_OPT_INT, submit_opts, gpu_share, "PCT",
                     "... and this percentage of its compute (0-100)", 0, 100),
    GS_CLI_OPT_RANGE("cpus", GS_OPT_REAL, submit_opts, cpus, "N",
                     "CPU cores, fractions allowed (default: the daemon's, 1)", 0.001, 1e6),
    GS_CLI_OPT("mem", GS_OPT_BYTES, submit_opts, mem, "SIZE",
               "Host memory limit (such as 4G; default: the daemon's)"),
    GS_CLI_OPT("time", GS_OPT_DURATION, submit_opts, time_limit, "LIMIT",
               "Time limit: 90s, 30m, 2h, HH:MM:SS, D-HH:MM:SS (default: none)"),
    GS_CLI_OPT_RANGE("priority", GS_OPT_INT, submit_opts, priority, "P",
                     "Higher runs first (-1000 to 1000, default 0)", -1000, 1000),
    GS_CLI_OPT("name", GS_OPT_STRING, submit_opts, name, "NAME",
               "A name for listings (default: the command)"),
    GS_CLI_OPT("requeue", GS_OPT_BOOL, submit_opts, requeue, NULL,
               "Queue it again if it is lost (its processes vanished in a restart)"),
    GS_CLI_OPT("env", GS_OPT_LIST, submit_opts, env, "NAME=VAL",
               "Set a variable in the job's environment (repeatable)"),
    GS_CLI_OPT("chdir", GS_OPT_STRING, submit_opts, chdir, "DIR",
               "Working directory (default: the job's own, owned by its user; in a container, "
               "/job, the same directory)"),
    GS_CLI_OPT("image", GS_OPT_STRING, submit_opts, image, "IMAGE",
               "Run in a container of this local OCI image (podman, as the job's user; the "
               "daemon's allowed-images decides which)"),
    GS_CLI_OPT("mount", GS_OPT_LIST, submit_opts, mounts, "SRC:DST[:ro]",
               "Bind-mount a host path into the container (repeatable)"),
    GS_CLI_OPT("network", GS_OPT_STRING, submit_opts, network, "NET",
               "The container's network: none (default) or host, where the daemon allows it"),
    GS_CLI_OPT("writable-root", GS_OPT_BOOL, submit_opts, writable_root, NULL,
               "Make the container's root filesystem writable (read-only by default)"),
    GS_CLI_OPT_RANGE("nodes", GS_OPT_INT, submit_opts, nodes, "N",
                     "Run on N nodes: the daemon hands the job to Slurm (slurmrestd), which "
                     "starts the command once per task with srun", 1, 100000),
    GS_CLI_OPT_RANGE("gpus-per-node", GS_OPT_INT, submit_opts, gpus_per_node, "G",
                     "With --nodes: GPUs on each node (default none)", 0, 4096),
    GS_CLI_OPT_RANGE("ntasks-per-node", GS_OPT_INT, submit_opts, ntasks_per_node, "T",
                     "With --nodes: tasks on each node (default 1)", 1, 4096),
    GS_CLI_OPT("partition", GS_OPT_STRING, submit_opts, partition, "P",
               "With --nodes: the Slurm partition (default: Slurm's)"),
    GS_CLI_OPT("mpi", GS_OPT_BOOL, submit_opts, mpi, NULL,
               "With --nodes: launch through srun --mpi=pmix, for MPI programs"),
    GS_CLI_DAEMON_ROWS(submit_opts),
    GS_CLI_OPT("json", GS_OPT_BOOL, submit_opts, daemon.json, NULL,
               "Print the queued job as JSON instead of its id"),
    GS_CLI_OPTIONS_END,
};

static int submit_run(int argc, char **argv) {
  const gs_cli_command *me = &gs_cli_submit;
  submit_opts o = {0};
  gs_cli_args args;
  int rc = gs_cli_parse(me, argc, argv, &o, &args);
  if (rc != GS_EXIT_OK)
    return rc;
  const char *env[GS_CLI_LIST_MAX + 1] = {0};
  for (int i = 0; i < o.env.n; i++) {
    if (!strchr(o.env.items[i], '=') || o.env.items[i][0] == '=')
      return gs_cli_usage_error(me, "bad value '%s' for --env (NAME=VALUE)", o.env.items[i]);
    env[i] = o.env.items[i];
  }
  const char *mounts[GS_CLI_LIST_MAX + 1] = {0};
  for (int i = 0; i < o.mounts.n; i++)
    mounts[i] = o.mounts.items[i];
  /* Sizes and times travel as text the daemon reads back exactly. */
  char gpu_mem[32], mem[32], limit[32];
  snprintf(gpu_mem, sizeof gpu_mem, "%llu", (unsigned long long)o.gpu_mem);
  snprintf(mem, sizeof mem, "%llu", (unsigned long long)o.mem);
  snprintf(limit, sizeof limit, "%llds", (long long)o.time_limit);
  gs_client_job_spec spec = {
      .argv = (const char *const *)args.after, .name = o.name, .gpus = (int)o.gpus,
      .gpu_mem = o.gpu_mem ? gpu_mem : NULL, .gpu_share = (int)o.gpu_share, .cpus = o.cpus,
      .mem = o.mem ? mem : NULL, .time_limit = o.time_limit ? limit : NULL,
      .priority = (int)o.priority, .requeue = o.requeue, .env = env, .chdir = o.chdir,
      .image = o.image, .mounts = o.mounts.n ? mounts : NULL, .network = o.network,
      .writable_root = o.writable_root, .nodes = (int)o.nodes,
      .gpus_per_node = (int)o.gpus_per_node, .ntasks_per_node = (int)o.ntasks_per_node,
      .partition = o.partition, .mpi = o.mpi};
  gs_client *client = gs_cli_client("submit", o.daemon.url, o.daemon.token);
  if (!client)
    return GS_EXIT_FAILED;
  int64_t id = 0;
  char *job = NULL;
  if (gs_client_job_submit(client, &spec, &id, o.daemon.json ? &job : NULL) != GS_OK) {
    gs_cli_error("submit: %s", gs_client_last_error(client));
    gs_client_close(client);
    return GS_EXIT_FAILED;
  }
  gs_client_close(client);
  if (o.daemon.json) {
    json_t *j = json_loads(job, 0, NULL);
    print_json(j);
    json_decref(j);
  } else {
    printf("%lld\n", (long long)id);
  }
  free(job);
  return GS_EXIT_OK;
}

const gs_cli_command gs_cli_submit = {
    .name = "submit",
    .usage = "gpusrv submit [OPTIONS] -- COMMAND [ARGS...]",
    .about = "Queues a process job with the daemon and prints its id. The job runs as the tenant's\n"
             "Unix user in its own process group and cgroup, with CUDA_VISIBLE_DEVICES,\n"
             "GPUSRV_VISIBLE_DEVICES, GPUSRV_JOB_ID and GPUSRV_TENANT set; its output goes to logs\n"
             "(`gpusrv logs ID`).",
    .options = submit_options,
    .max_args = 0,
    .takes_command = true,
    .run = submit_run,
};

/* ---- jobs, job ------------------------------------------------------------------------- */

typedef struct jobs_opts {
  bool all;
  const char *tenant;
  gs_cli_daemon_opts daemon;
} jobs_opts;

static const gs_cli_option jobs_options[] = {
    GS_CLI_OPT("all", GS_OPT_BOOL, jobs_opts, all, NULL, "Ended jobs too (the newest 1000)"),
    GS_CLI_OPT("tenant", GS_OPT_STRING, jobs_opts, tenant, "T", "Only tenant T's (admin)"),
    GS_CLI_DAEMON_ROWS(jobs_opts),
    GS_CLI_JSON_ROW(jobs_opts),
    GS_CLI_OPTIONS_END,
};

static int jobs_run(int argc, char **argv) {
  jobs_opts opts = {0};
  gs_cli_args args;
  int rc = gs_cli_parse(&gs_cli_jobs, argc, argv, &opts, &args);
  if (rc != GS_EXIT_OK)
    return rc;
  bool all = opts.all;
  const char *tenant = opts.tenant;
  const gs_cli_daemon_opts o = opts.daemon;
  char path[300];
  snprintf(path, sizeof path, "/api/v1/jobs?all=%d%s%s", all, tenant ? "&tenant=" : "",
           tenant ? tenant : "");
  json_t *answer = NULL;
  rc = call("jobs", &o, "GET", path, NULL, &answer);
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
      gs_cli_job_elapsed(j, took, sizeof took);
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
    .usage = "gpusrv jobs [--all] [--tenant T] [--url URL] [--json]",
    .about = "Lists your pending and running jobs (an admin sees everyone's): id, name, tenant,\n"
             "state, why it waits or how it ended, devices and time. --all adds ended jobs.",
    .options = jobs_options,
    .run = jobs_run,
};

/* Parses "CMD ID [options]" for job, cancel, wait and logs. */
static int id_and_options(const gs_cli_command *me, int argc, char **argv, long long *id,
                          void *opts) {
  gs_cli_args args;
  int rc = gs_cli_parse(me, argc, argv, opts, &args);
  if (rc != GS_EXIT_OK)
    return rc;
  if (!parse_id(args.words[0], id))
    return gs_cli_usage_error(me, "'%s' is not a job id", args.words[0]);
  return GS_EXIT_OK;
}

/* What a job handed to Slurm asked for, and where it runs. */
static void print_slurm_part(json_t *j) {
  printf("  Slurm:     job %lld, %lld nodes x %lld tasks, %lld GPUs per node, partition %s%s, "
         "time limit %lld s\n",
         (long long)json_integer_value(json_object_get(j, "slurm_job_id")),
         (long long)json_integer_value(json_object_get(j, "nodes")),
         (long long)json_integer_value(json_object_get(j, "ntasks_per_node")),
         (long long)json_integer_value(json_object_get(j, "gpus_per_node")),
         str(j, "partition")[0] ? str(j, "partition") : "(Slurm's default)",
         json_is_true(json_object_get(j, "mpi")) ? ", MPI (PMIx)" : "",
         (long long)json_integer_value(json_object_get(j, "time_limit")));
  printf("  Nodes:     %s\n", str(j, "node_list")[0] ? str(j, "node_list") : "-");
}

static int job_run(int argc, char **argv) {
  daemon_only opts = {0};
  long long id;
  int rc = id_and_options(&gs_cli_job, argc, argv, &id, &opts);
  const gs_cli_daemon_opts o = opts.daemon;
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
  gs_cli_job_elapsed(j, took, sizeof took);
  printf("Job %lld: %s\n", id, str(j, "name"));
  printf("  Tenant:    %s\n", str(j, "tenant"));
  printf("  State:     %s%s%s\n", str(j, "state"), str(j, "reason")[0] ? " - " : "",
         str(j, "reason"));
  printf("  Command:   %s\n", cmd ? cmd : "");
  if (json_is_integer(json_object_get(j, "slurm_job_id")))
    print_slurm_part(j);
  else
    printf("  Asked for: %lld gpus, gpu_mem %lld, gpu_share %lld%%, %g cpus, mem %lld, time limit "
         "%lld s, priority %lld\n",
         (long long)json_integer_value(json_object_get(j, "gpus")),
         (long long)json_integer_value(json_object_get(j, "gpu_mem")),
         (long long)json_integer_value(json_object_get(j, "gpu_share")),
         json_number_value(json_object_get(j, "cpus")),
         (long long)json_integer_value(json_object_get(j, "mem")),
         (long long)json_integer_value(json_object_get(j, "time_limit")),
         (long long)json_integer_value(json_object_get(j, "priority")));
  if (!json_is_integer(json_object_get(j, "slurm_job_id")))
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
    .usage = "gpusrv job ID [--url URL] [--json]",
    .about = "Shows one job: what it asked for, its state and why, its devices, times, exit code,\n"
             "accounting, and every change of state with its time.",
    .options = daemon_json_options,
    .min_args = 1,
    .max_args = 1,
    .run = job_run,
};

/* ---- cancel, wait -------------------------------------------------------------------------- */

static int cancel_run(int argc, char **argv) {
  daemon_only opts = {0};
  long long id;
  int rc = id_and_options(&gs_cli_cancel, argc, argv, &id, &opts);
  const gs_cli_daemon_opts o = opts.daemon;
  if (rc != GS_EXIT_OK)
    return rc;
  char path[64];
  snprintf(path, sizeof path, "/api/v1/jobs/%lld", id);
  return call("cancel", &o, "DELETE", path, NULL, NULL);
}

const gs_cli_command gs_cli_cancel = {
    .name = "cancel",
    .usage = "gpusrv cancel ID [--url URL]",
    .about = "Cancels a job: a pending one at once; a running one gets SIGTERM, then SIGKILL after\n"
             "the daemon's grace period, and every process it started goes with it.",
    .options = daemon_only_options,
    .min_args = 1,
    .max_args = 1,
    .run = cancel_run,
};

static int wait_run(int argc, char **argv) {
  daemon_only opts = {0};
  long long id;
  int rc = id_and_options(&gs_cli_wait, argc, argv, &id, &opts);
  const gs_cli_daemon_opts o = opts.daemon;
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
    .usage = "gpusrv wait ID [--url URL]",
    .about = "Waits until the job has ended and exits with its exit code (128+N if a signal N\n"
             "ended it; 1 if it ended without one, such as CANCELLED before it started or LOST).",
    .options = daemon_only_options,
    .min_args = 1,
    .max_args = 1,
    .run = wait_run,
};

/* ---- logs ------------------------------------------------------------------------------------ */

typedef struct logs_opts {
  bool follow, stderr_stream;
  gs_cli_daemon_opts daemon;
} logs_opts;

static const gs_cli_option logs_options[] = {
    {"follow", 'f', GS_OPT_BOOL, offsetof(logs_opts, follow), NULL,
     "Keep printing as the job writes, until it ends", 0, 0},
    GS_CLI_OPT("stderr", GS_OPT_BOOL, logs_opts, stderr_stream, NULL,
               "The job's standard error instead"),
    GS_CLI_DAEMON_ROWS(logs_opts),
    GS_CLI_OPTIONS_END,
};

static int logs_run(int argc, char **argv) {
  logs_opts opts = {0};
  long long id;
  int rc = id_and_options(&gs_cli_logs, argc, argv, &id, &opts);
  if (rc != GS_EXIT_OK)
    return rc;
  const gs_cli_daemon_opts o = opts.daemon;
  gs_client *client = gs_cli_client("logs", o.url, o.token);
  if (!client)
    return GS_EXIT_FAILED;
  rc = gs_client_job_logs(client, id, opts.stderr_stream, opts.follow, gs_cli_write_to, stdout);
  if (rc != GS_OK)
    gs_cli_error("logs: %s", gs_client_last_error(client));
  gs_client_close(client);
  return rc == GS_OK ? GS_EXIT_OK : GS_EXIT_FAILED;
}

const gs_cli_command gs_cli_logs = {
    .name = "logs",
    .usage = "gpusrv logs ID [-f] [--stderr] [--url URL]",
    .about = "Prints a job's standard output (or its standard error) as logged so far.",
    .options = logs_options,
    .min_args = 1,
    .max_args = 1,
    .run = logs_run,
};

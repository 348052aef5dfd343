/* cmd_slurm.c - `gpusrv slurm`: this node's devices in Slurm's own terms,
 * so that slurmd and gpusrv's ledger agree on them.
 *   gres  the node's gres.conf lines: each GPU with a device node as
 *         Name=gpu, a Type made from its name and File=/dev/nvidiaN; every
 *         other device as a typed GRES named after its backend, with a
 *         Count per type.
 *   node  slurm.conf's GresTypes line and the node's NodeName line: CPUs,
 *         RealMemory (MiB, 1% below what slurmd -C counts) and Gres.
 *   prolog, epilog
 *         slurmd's Prolog and Epilog: book the job's GPUs (SLURM_JOB_GPUS)
 *         with the daemon for the job's lifetime, and release them
 *         (sched/holds.h says how they survive a restart). */
#include "cli/cli.h"
#include "cli/daemon.h"

#include "base/error.h"
#include "hal/hal.h"
#include "sched/slurm_gpus.h"
#include "sched/sched.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef struct slurm_opts {
  const char *node_name;
  gs_cli_daemon_opts daemon;
} slurm_opts;

static const gs_cli_option slurm_options[] = {
    GS_CLI_OPT("node-name", GS_OPT_STRING, slurm_opts, node_name, "NAME",
               "The NodeName to write (default: the short host name)"),
    GS_CLI_DAEMON_ROWS(slurm_opts),
    GS_CLI_OPTIONS_END,
};

#define MAX_GRES 64

/* One gres.conf line: a CUDA GPU of its own, or every device of one
 * (name, type). */
typedef struct gres_line {
  char name[16];
  char type[64];
  char file[64]; /* the device node; "" for a counted line */
  int count;
} gres_line;

/* A Type Slurm can take from a device's name: lower case letters, digits
 * and '_', without the vendor's prefix on NVIDIA's ("NVIDIA H200" ->
 * "h200"); "unknown" if nothing is left. */
static void gres_type(const char *device_name, char *out, size_t cap) {
  const char *s = device_name;
  if (strncasecmp(s, "NVIDIA ", 7) == 0)
    s += 7;
  size_t n = 0;
  for (; *s && n + 1 < cap; s++) {
    unsigned char ch = (unsigned char)*s;
    if (isalnum(ch))
      out[n++] = (char)tolower(ch);
    else if (n > 0 && out[n - 1] != '_')
      out[n++] = '_';
  }
  while (n > 0 && out[n - 1] == '_')
    n--;
  out[n] = '\0';
  if (n == 0)
    snprintf(out, cap, "unknown");
}

/* The GRES name of a backend's devices other than GPUs (those are "gpu"):
 * a name that no Slurm resource has for the CPU ("cpu" is a TRES). */
static const char *gres_name(const char *backend) {
  if (strcmp(backend, "cpu") == 0)
    return "cpudev";
  return backend;
}

/* Adds one device to lines[] (n of them so far, room for MAX_GRES); the
 * new count. Other devices than GPUs add up per (name, type); each GPU
 * keeps a line of its own, so that Slurm numbers them in gs_slurm_gpus'
 * order, which the prolog's SLURM_JOB_GPUS indices are read in. */
static int add_gres(gres_line *lines, int n, const gres_line *g, bool own_line) {
  for (int k = 0; k < n && !own_line; k++)
    if (strcmp(lines[k].name, g->name) == 0 && strcmp(lines[k].type, g->type) == 0) {
      lines[k].count += g->count;
      return n;
    }
  if (n == MAX_GRES) {
    fprintf(stderr, "gpusrv slurm: more than %d lines; %s:%s left out\n", MAX_GRES, g->name,
            g->type);
    return n;
  }
  lines[n] = *g;
  return n + 1;
}

/* The GPUs' lines, each with its device node as File: slurmd drops a GPU
 * without one ("file-less GPU"), so GPUs with no node are left to
 * collect_gres, as a typed GRES of their backend. */
static int gpu_lines(gres_line *lines) {
  gs_device_t *gpus[MAX_GRES];
  int n = gs_slurm_gpus(gpus, MAX_GRES), out = 0;
  if (n > MAX_GRES) {
    fprintf(stderr, "gpusrv slurm: %d GPUs; only the first %d are written\n", n, MAX_GRES);
    n = MAX_GRES;
  }
  for (int i = 0; i < n; i++) {
    const gs_device_info *info = gs_device_get_info(gpus[i]);
    gres_line g = {.count = 1, .name = "gpu"};
    gres_type(info->name, g.type, sizeof g.type);
    snprintf(g.file, sizeof g.file, "%s", info->dev_node);
    out = add_gres(lines, out, &g, true);
  }
  return out;
}

/* The node's GRES, into lines[MAX_GRES]; how many: the GPUs, then every
 * other device as a typed GRES named after its backend. */
static int collect_gres(gres_line *lines) {
  int n = gpu_lines(lines);
  for (int i = 0; i < gs_hal_device_count(); i++) {
    const gs_device_info *info = gs_device_get_info(gs_hal_device(i));
    if (gs_slurm_seen_twice(info)) {
      fprintf(stderr, "gpusrv slurm: %s is a CUDA device seen again through OpenCL; left out\n",
              info->id);
      continue;
    }
    if (info->type == GS_DEVICE_GPU && info->dev_node[0])
      continue; /* a line of its own above */
    if (info->type == GS_DEVICE_GPU)
      fprintf(stderr, "gpusrv slurm: %s is a GPU without a device node: written as a %s GRES "
              "with a Count, which the prolog cannot book\n", info->id,
              gres_name(info->backend));
    gres_line g = {.count = 1};
    snprintf(g.name, sizeof g.name, "%s", gres_name(info->backend));
    gres_type(info->name, g.type, sizeof g.type);
    n = add_gres(lines, n, &g, false);
  }
  return n;
}

static void print_gres_conf(const gres_line *lines, int n, const char *node) {
  printf("# gres.conf for %s, written by gpusrv slurm gres\n", node);
  for (int i = 0; i < n; i++) {
    printf("NodeName=%s Name=%s Type=%s", node, lines[i].name, lines[i].type);
    if (lines[i].file[0])
      printf(" File=%s\n", lines[i].file);
    else
      printf(" Count=%d\n", lines[i].count);
  }
}

/* The node's memory in MiB as slurmd counts it (MemTotal), less 1%: a
 * kernel that later keeps a few MiB more for itself would otherwise have
 * slurmctld drain the node for "Low RealMemory". */
static unsigned long long real_memory_mib(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0)
    return 1;
  unsigned long long mib = (unsigned long long)pages * (unsigned long long)page >> 20;
  return mib - mib / 100;
}

/* GresTypes (each name once) and the NodeName line. Same-typed GPU lines
 * add up to one Gres entry. */
static void print_node_conf(const gres_line *lines, int n, const char *node) {
  if (n > 0)
    printf("GresTypes=");
  for (int i = 0, first = 1; i < n; i++) {
    int seen = 0;
    for (int k = 0; k < i; k++)
      seen |= strcmp(lines[k].name, lines[i].name) == 0;
    if (!seen) {
      printf("%s%s", first ? "" : ",", lines[i].name);
      first = 0;
    }
  }
  if (n > 0)
    printf("\n");
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  printf("NodeName=%s CPUs=%ld RealMemory=%llu", node, cpus > 0 ? cpus : 1, real_memory_mib());
  for (int i = 0, first = 1; i < n; i++) {
    int count = 0, seen = 0;
    for (int k = 0; k < n; k++)
      if (strcmp(lines[k].name, lines[i].name) == 0 && strcmp(lines[k].type, lines[i].type) == 0) {
        seen |= k < i;
        count += lines[k].count;
      }
    if (!seen) {
      printf("%s%s:%s:%d", first ? " Gres=" : ",", lines[i].name, lines[i].type, count);
      first = 0;
    }
  }
  printf("\n");
}

/* Above any GPU index a node has: what the daemon takes too. */
#define MAX_GPU_INDEX (1 << 20)

/* SLURM_JOB_GPUS ("0,1", or "0-3,6"): Slurm's indices into gpus[max];
 * how many, or -1 when it is malformed. */
static int parse_gpus(const char *text, int *gpus, int max) {
  int n = 0;
  for (const char *p = text; *p;) {
    char *end;
    errno = 0;
    long lo = strtol(p, &end, 10), hi = lo;
    if (end == p || lo < 0 || lo > MAX_GPU_INDEX || errno)
      return -1;
    if (*end == '-') {
      p = end + 1;
      hi = strtol(p, &end, 10);
      if (end == p || hi < lo || hi > MAX_GPU_INDEX || errno)
        return -1;
    }
    for (long g = lo; g <= hi; g++) {
      if (n == max)
        return -1;
      gpus[n++] = (int)g;
    }
    if ((*end != ',' && *end != '\0') || (*end == ',' && end[1] == '\0'))
      return -1;
    p = *end ? end + 1 : end;
  }
  return n;
}

/* The prolog: books the job's GPUs with the daemon. slurmd gives the job's
 * id, user and GPUs in the environment. */
static int run_prolog(const slurm_opts *o, long long job) {
  const char *user = getenv("SLURM_JOB_USER"), *gpus_text = getenv("SLURM_JOB_GPUS");
  int gpus[GS_BOOKING_MAX_PARTS];
  int n = gpus_text ? parse_gpus(gpus_text, gpus, GS_BOOKING_MAX_PARTS) : 0;
  if (n < 0) {
    gs_cli_error("slurm prolog: SLURM_JOB_GPUS '%s' is not a list of GPU indices", gpus_text);
    return GS_EXIT_FAILED;
  }
  if (n == 0)
    return GS_EXIT_OK; /* no GPUs: nothing of gpusrv's to book */
  json_t *list = json_array();
  for (int k = 0; k < n; k++)
    json_array_append_new(list, json_integer(gpus[k]));
  json_t *body = json_pack("{s:s, s:I, s:s, s:o}", "scheduler", "slurm", "job", (json_int_t)job,
                           "user", user && *user ? user : "unknown", "gpus", list);
  int rc = gs_cli_call_json("slurm prolog", o->daemon.url, o->daemon.token, "POST",
                            "/api/v1/holds", body, NULL);
  json_decref(body);
  return rc;
}

/* The epilog: releases the job's booking; one that has none is fine (the
 * job had no GPUs, or the epilog runs twice). GS_EIO is fine too, with a
 * warning: a daemon that cannot be reached drops the booking when it starts
 * again and squeue no longer lists the job, and one that answered 500
 * released it and could not write its file, which the same start mends;
 * failing the epilog would have Slurm drain the node for it. A refused
 * token or request fails. */
static int run_epilog(const slurm_opts *o, long long job) {
  gs_client *c = gs_cli_client("slurm epilog", o->daemon.url, o->daemon.token);
  if (!c)
    return GS_EXIT_FAILED;
  char path[64];
  snprintf(path, sizeof path, "/api/v1/holds/slurm/%lld", job);
  int rc = gs_client_request(c, "DELETE", path, NULL, NULL);
  bool unreachable = rc == GS_EIO || rc == GS_ETIMEDOUT;
  if (rc != GS_OK && rc != GS_ENOENT)
    gs_cli_error("slurm epilog: %s%s", gs_client_last_error(c),
                 unreachable ? " (the booking goes when the daemon next starts)" : "");
  gs_client_close(c);
  return rc == GS_OK || rc == GS_ENOENT || unreachable ? GS_EXIT_OK : GS_EXIT_FAILED;
}

static int run_job_hook(const slurm_opts *o, const char *action) {
  const char *id = getenv("SLURM_JOB_ID");
  char *end = NULL;
  long long job = id ? strtoll(id, &end, 10) : 0;
  if (!id || end == id || *end || job <= 0) {
    gs_cli_error("slurm %s: SLURM_JOB_ID is not a job id: run it as slurmd's %s", action,
                 strcmp(action, "prolog") == 0 ? "Prolog" : "Epilog");
    return GS_EXIT_FAILED;
  }
  return strcmp(action, "prolog") == 0 ? run_prolog(o, job) : run_epilog(o, job);
}

static int slurm_run(int argc, char **argv) {
  slurm_opts o = {0};
  gs_cli_args args;
  int rc = gs_cli_parse(&gs_cli_slurm, argc, argv, &o, &args);
  if (rc != GS_EXIT_OK)
    return rc;
  const char *action = args.words[0];
  if (strcmp(action, "prolog") == 0 || strcmp(action, "epilog") == 0)
    return run_job_hook(&o, action);
  if (strcmp(action, "gres") != 0 && strcmp(action, "node") != 0)
    return gs_cli_usage_error(&gs_cli_slurm, "unknown action '%s' (gres, node, prolog, epilog)",
                              action);
  char host[256] = "";
  if (o.node_name) {
    snprintf(host, sizeof host, "%s", o.node_name);
  } else if (gethostname(host, sizeof host - 1) == 0) {
    host[strcspn(host, ".")] = '\0'; /* slurmd -C writes the short name */
  }
  if (!host[0] || strpbrk(host, " \t\n=,#[]:"))
    return gs_cli_usage_error(&gs_cli_slurm, "no usable node name ('%s'): give --node-name", host);
  if (gs_hal_init() < 0) {
    gs_cli_error("slurm: %s", gs_error_detail());
    gs_hal_shutdown();
    return GS_EXIT_FAILED;
  }
  gres_line lines[MAX_GRES];
  int n = collect_gres(lines);
  gs_hal_shutdown();
  if (strcmp(action, "gres") == 0)
    print_gres_conf(lines, n, host);
  else
    print_node_conf(lines, n, host);
  return fflush(stdout) == 0 ? GS_EXIT_OK : GS_EXIT_FAILED;
}

const gs_cli_command gs_cli_slurm = {
    .name = "slurm",
    .usage = "gpusrv slurm gres [--node-name NAME]\n"
             "gpusrv slurm node [--node-name NAME]\n"
             "gpusrv slurm prolog|epilog [--url URL] [--token-file FILE]",
    .about = "This node's devices in Slurm's terms. `gres` prints its gres.conf lines: each\n"
             "GPU with a device node as Name=gpu, a Type from its name and File=/dev/nvidiaN, every\n"
             "other device as a typed GRES named after its backend (opencl, cpudev) with a\n"
             "Count. `node` prints slurm.conf's GresTypes line and the node's NodeName line\n"
             "(CPUs, RealMemory in MiB 1% below MemTotal, Gres). GresTypes must name every\n"
             "node's GRES. An OpenCL device that is a CUDA GPU seen again is left out.",
    .notes = "prolog and epilog are slurmd's Prolog and Epilog (as root, with an admin token:\n"
             "--token-file): they read SLURM_JOB_ID, SLURM_JOB_USER and SLURM_JOB_GPUS and\n"
             "book the job's GPUs with the daemon (\"slurm job N (user)\" in its bookings)\n"
             "until the epilog. A prolog the daemon cannot answer fails, and Slurm drains\n"
             "the node; an epilog that cannot reach it warns and succeeds (the daemon drops\n"
             "the booking when it starts again and squeue no longer lists the job).",
    .options = slurm_options,
    .min_args = 1,
    .max_args = 1,
    .run = slurm_run,
};

/* cmd_slurm.c - `gpusrv slurm gres|node`: this node's devices in Slurm's
 * own terms, so that slurmd and gpusrv's ledger agree on them.
 *   gres  the node's gres.conf lines: each CUDA GPU as Name=gpu with a Type
 *         made from its name and File=/dev/nvidiaN where the driver gives
 *         the minor number; every other device as a typed GRES named after
 *         its backend (opencl, cpudev, ...) with a Count per type.
 *   node  slurm.conf's GresTypes line and the node's NodeName line: CPUs,
 *         RealMemory (MiB, 1% below what slurmd -C counts) and Gres.
 * Prolog and epilog bookings are not built yet: the command says so. */
#include "cli/cli.h"
#include "cli/device_nodes.h"

#include "base/error.h"
#include "hal/hal.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef struct slurm_opts {
  const char *node_name;
} slurm_opts;

static const gs_cli_option slurm_options[] = {
    GS_CLI_OPT("node-name", GS_OPT_STRING, slurm_opts, node_name, "NAME",
               "The NodeName to write (default: the short host name)"),
    GS_CLI_OPTIONS_END,
};

#define MAX_GRES 64

/* One gres.conf line: a CUDA GPU of its own, or every device of one
 * (name, type). */
typedef struct gres_line {
  char name[16];
  char type[64];
  char file[32]; /* "" where the node is not known */
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

/* The GRES name of a backend's devices: Slurm's own "gpu" for CUDA, and a
 * name that no Slurm resource has for the CPU ("cpu" is a TRES). */
static const char *gres_name(const char *backend) {
  if (strcmp(backend, "cuda") == 0)
    return "gpu";
  if (strcmp(backend, "cpu") == 0)
    return "cpudev";
  return backend;
}

/* Whether an OpenCL device is a CUDA device seen again through NVIDIA's
 * OpenCL driver (same name): Slurm must not get one card twice. */
static bool cuda_seen_again(const gs_device_info *info) {
  if (strcmp(info->backend, "opencl") != 0)
    return false;
  for (int i = 0; i < gs_hal_device_count(); i++) {
    const gs_device_info *o = gs_device_get_info(gs_hal_device(i));
    if (strcmp(o->backend, "cuda") == 0 && strcmp(o->name, info->name) == 0)
      return true;
  }
  return false;
}

/* Adds one device to lines[] (n of them so far, room for MAX_GRES); the
 * new count. Lines without a File add up per (name, type). */
static int add_gres(gres_line *lines, int n, const gres_line *g) {
  for (int k = 0; k < n; k++)
    if (!lines[k].file[0] && !g->file[0] && strcmp(lines[k].name, g->name) == 0 &&
        strcmp(lines[k].type, g->type) == 0) {
      lines[k].count += g->count;
      return n;
    }
  if (n == MAX_GRES) {
    fprintf(stderr, "gpusrv slurm: more than %d kinds of device; %s:%s left out\n", MAX_GRES,
            g->name, g->type);
    return n;
  }
  lines[n] = *g;
  return n + 1;
}

/* The node's GRES, into lines[]; how many. Slurm refuses a gres.conf in
 * which some GPUs have a File and others not: where the driver names no
 * minor number for one GPU, none gets a File, and they are counted. */
static int collect_gres(gres_line *lines) {
  gres_line found[MAX_GRES * 4];
  int n_found = 0;
  bool every_gpu_has_node = true;
  for (int i = 0; i < gs_hal_device_count() && n_found < MAX_GRES * 4; i++) {
    const gs_device_info *info = gs_device_get_info(gs_hal_device(i));
    if (cuda_seen_again(info)) {
      fprintf(stderr, "gpusrv slurm: %s is a CUDA device seen again through OpenCL; "
              "left out\n", info->id);
      continue;
    }
    gres_line *g = &found[n_found++];
    *g = (gres_line){.count = 1};
    snprintf(g->name, sizeof g->name, "%s", gres_name(info->backend));
    gres_type(info->name, g->type, sizeof g->type);
    if (strcmp(info->backend, "cuda") != 0)
      continue;
    int minor = gs_nvidia_minor(info->pci_bus_id);
    if (minor >= 0) {
      snprintf(g->file, sizeof g->file, "/dev/nvidia%d", minor);
    } else {
      every_gpu_has_node = false;
      fprintf(stderr, "gpusrv slurm: %s: the NVIDIA driver names no minor number for %s; "
              "the GPUs are counted, without File\n", info->id, info->pci_bus_id);
    }
  }
  int n = 0;
  for (int i = 0; i < n_found; i++) {
    if (!every_gpu_has_node)
      found[i].file[0] = '\0';
    n = add_gres(lines, n, &found[i]);
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

static int slurm_run(int argc, char **argv) {
  slurm_opts o = {0};
  gs_cli_args args;
  int rc = gs_cli_parse(&gs_cli_slurm, argc, argv, &o, &args);
  if (rc != GS_EXIT_OK)
    return rc;
  const char *action = args.words[0];
  if (strcmp(action, "prolog") == 0 || strcmp(action, "epilog") == 0) {
    gs_cli_error("slurm %s: not supported yet: Slurm jobs are not booked in the ledger", action);
    return GS_EXIT_FAILED;
  }
  if (strcmp(action, "gres") != 0 && strcmp(action, "node") != 0)
    return gs_cli_usage_error(&gs_cli_slurm, "unknown action '%s' (gres, node)", action);
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
             "gpusrv slurm node [--node-name NAME]",
    .about = "This node's devices in Slurm's terms. `gres` prints its gres.conf lines: each\n"
             "CUDA GPU as Name=gpu with a Type from its name and File=/dev/nvidiaN, and every\n"
             "other device as a typed GRES named after its backend (opencl, cpudev) with a\n"
             "Count. `node` prints slurm.conf's GresTypes line and the node's NodeName line\n"
             "(CPUs, RealMemory in MiB 1% below MemTotal, Gres). GresTypes must name every\n"
             "node's GRES. An OpenCL device that is a CUDA GPU seen again is left out.",
    .notes = "Not built yet: `gpusrv slurm prolog|epilog` (Slurm jobs booked in the ledger).",
    .options = slurm_options,
    .min_args = 1,
    .max_args = 1,
    .run = slurm_run,
};

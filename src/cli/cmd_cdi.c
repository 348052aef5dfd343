/* cmd_cdi.c - `gpusrv cdi generate`: a CDI spec (the Container Device
 * Interface's JSON form) naming, for each of this machine's devices that
 * has device nodes, what a container needs to use it: an NVIDIA GPU's
 * /dev/nvidiaN (its minor number from the driver's /proc entry for its PCI
 * address) and its DRM nodes (cardN and renderDN under /dev/dri, from
 * sysfs), the control nodes the GPUs share, and the driver's user-space
 * libraries, mounted read-only. podman resolves `--device KIND=ID` from
 * it; the daemon gives a container job the entries of its booked devices
 * (--cdi-spec). */
#include "cli/cli.h"
#include "hal/device_nodes.h"

#include "base/error.h"
#include "hal/hal.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CDI_KIND "gpusrv.dev/device"

typedef struct cdi_opts {
  const char *output;
} cdi_opts;

static const gs_cli_option cdi_options[] = {
    GS_CLI_OPT("output", GS_OPT_STRING, cdi_opts, output, "FILE",
               "Write the spec here (such as /etc/cdi/gpusrv.json) instead of standard output"),
    GS_CLI_OPTIONS_END,
};

static void add_node(json_t *nodes, const char *path) {
  if (access(path, F_OK) == 0)
    json_array_append_new(nodes, json_pack("{s:s}", "path", path));
}

/* The DRM nodes (/dev/dri/cardN, renderDN) of the device at `pci`, which
 * sysfs lists under the PCI device. */
static void add_drm_nodes(json_t *nodes, const char *pci) {
  char addr[64], dir[200];
  if (!gs_sysfs_pci(pci, addr, sizeof addr))
    return;
  snprintf(dir, sizeof dir, "/sys/bus/pci/devices/%s/drm", addr);
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (strncmp(e->d_name, "card", 4) != 0 && strncmp(e->d_name, "renderD", 7) != 0)
      continue;
    char node[300];
    snprintf(node, sizeof node, "/dev/dri/%s", e->d_name);
    add_node(nodes, node);
  }
  if (d)
    closedir(d);
}

/* The driver's libraries a CUDA program loads, where this machine has them. */
static json_t *driver_mounts(void) {
  static const char *const dirs[] = {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"};
  static const char *const libs[] = {"libcuda.so.1", "libnvidia-ml.so.1",
                                     "libnvidia-ptxjitcompiler.so.1", "libnvidia-nvvm.so.4",
                                     "libcudadebugger.so.1"};
  json_t *mounts = json_array();
  for (size_t l = 0; l < sizeof libs / sizeof libs[0]; l++)
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
      char path[300];
      snprintf(path, sizeof path, "%s/%s", dirs[d], libs[l]);
      if (access(path, R_OK) != 0)
        continue;
      json_array_append_new(mounts, json_pack("{s:s, s:s, s:[s,s,s]}", "hostPath", path,
                                              "containerPath", path, "options", "ro", "nosuid",
                                              "bind"));
      break;
    }
  return mounts;
}

/* The spec for this machine's devices; what is left out goes to stderr. */
static json_t *make_spec(void) {
  json_t *devices = json_array(), *common = json_array();
  bool any_nvidia = false;
  for (int i = 0; i < gs_hal_device_count(); i++) {
    const gs_device_info *info = gs_device_get_info(gs_hal_device(i));
    bool cuda = strcmp(info->backend, "cuda") == 0;
    if (!info->dev_node[0]) {
      fprintf(stderr, "gpusrv: cdi: %s (%s) left out: %s\n", info->id, info->name,
              cuda ? "the NVIDIA driver names no minor number for its PCI address"
                   : "no device node of its own");
      continue;
    }
    json_t *nodes = json_array();
    add_node(nodes, info->dev_node);
    add_drm_nodes(nodes, info->pci_bus_id);
    json_array_append_new(devices, json_pack("{s:s, s:{s:o}}", "name", info->id,
                                             "containerEdits", "deviceNodes", nodes));
    any_nvidia |= cuda;
  }
  if (any_nvidia) {
    add_node(common, "/dev/nvidiactl");
    add_node(common, "/dev/nvidia-uvm");
    add_node(common, "/dev/nvidia-uvm-tools");
  }
  json_t *edits = json_pack("{s:o}", "deviceNodes", common);
  if (any_nvidia)
    json_object_set_new(edits, "mounts", driver_mounts());
  return json_pack("{s:s, s:s, s:o, s:o}", "cdiVersion", "0.5.0", "kind", CDI_KIND, "devices",
                   devices, "containerEdits", edits);
}

static int cdi_run(int argc, char **argv) {
  cdi_opts o = {0};
  gs_cli_args args;
  int rc = gs_cli_parse(&gs_cli_cdi, argc, argv, &o, &args);
  if (rc != GS_EXIT_OK)
    return rc;
  if (strcmp(args.words[0], "generate") != 0)
    return gs_cli_usage_error(&gs_cli_cdi, "unknown action '%s' (generate)", args.words[0]);
  if (gs_hal_init() < 0) {
    gs_cli_error("cdi: %s", gs_error_detail());
    gs_hal_shutdown();
    return GS_EXIT_FAILED;
  }
  json_t *spec = make_spec();
  gs_hal_shutdown();
  int failed = !spec;
  if (!failed && o.output) {
    failed = json_dump_file(spec, o.output, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0;
    if (failed)
      gs_cli_error("cdi: cannot write %s", o.output);
  } else if (!failed) {
    json_dumpf(spec, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    putchar('\n');
  }
  json_decref(spec);
  return failed ? GS_EXIT_FAILED : GS_EXIT_OK;
}

const gs_cli_command gs_cli_cdi = {
    .name = "cdi",
    .usage = "gpusrv cdi generate [--output FILE]",
    .about = "Writes a CDI spec (kind " CDI_KIND ") naming each device's nodes and the driver's\n"
             "libraries, so that podman can give a container job its booked devices (gpusrv\n"
             "serve --cdi-spec reads it). Devices without nodes of their own (CPUs, PoCL) are\n"
             "left out, and stderr says so.",
    .options = cdi_options,
    .min_args = 1,
    .max_args = 1,
    .run = cdi_run,
};

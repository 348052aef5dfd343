/* fakegpu.c - a test plugin: the CPU backend's implementation under the name
 * "fakegpu", whose devices report the processes using them with figures read
 * from the file named by GPUSRV_TEST_PROCESSES ("PID BYTES" per line), as
 * NVML would report a GPU's processes, and GPU telemetry from the file named
 * by GPUSRV_TEST_TELEMETRY (lines "clocks SM MEM", "pcie GEN WIDTH MAX",
 * "ecc CORRECTED UNCORRECTED", "xid N", "memutil PERCENT", "powerlimit WATTS",
 * "health 0|1|2 REASON..."); with
 * GPUSRV_TEST_FAKE_GPU_TYPE its devices are GPUs with a UUID and a PCI
 * address made from their index. Lets the front
 * desk's watch of per-process device memory, and the way smi and /metrics
 * show a GPU's clocks, link, errors and health, be tested without a GPU. */
#include "hal/hal_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const uint32_t gs_plugin_api_version = GS_HAL_API_VERSION;

static gs_backend_iface iface;

static int fake_processes(gs_device_t *device, gs_process_info *out, int max, int *count) {
  (void)device;
  const char *path = getenv("GPUSRV_TEST_PROCESSES");
  FILE *f = path ? fopen(path, "r") : NULL;
  *count = 0;
  if (!f)
    return GS_OK;
  long long pid, bytes;
  while (fscanf(f, "%lld %lld", &pid, &bytes) == 2) {
    if (*count < max) {
      out[*count].pid = (int)pid;
      snprintf(out[*count].name, sizeof out[*count].name, "fake");
      out[*count].memory_used_bytes = (uint64_t)bytes;
    }
    (*count)++;
  }
  fclose(f);
  return GS_OK;
}

static int fake_telemetry(gs_device_t *device, gs_telemetry *out) {
  int rc = gs__cpu_backend_iface.device_telemetry(device, out);
  const char *path = getenv("GPUSRV_TEST_TELEMETRY");
  FILE *f = path ? fopen(path, "r") : NULL;
  char line[256];
  while (rc == 0 && f && fgets(line, sizeof line, f)) {
    int a, b, c, n = 0;
    unsigned long long x, y;
    if (sscanf(line, "clocks %d %d", &a, &b) == 2) {
      out->valid |= GS_TM_CLOCKS;
      out->sm_clock_mhz = a;
      out->memory_clock_mhz = b;
    } else if (sscanf(line, "pcie %d %d %d", &a, &b, &c) == 3) {
      out->valid |= GS_TM_PCIE;
      out->pcie_generation = a;
      out->pcie_width = b;
      out->pcie_max_width = c;
    } else if (sscanf(line, "ecc %llu %llu", &x, &y) == 2) {
      out->valid |= GS_TM_ECC;
      out->ecc_corrected = x;
      out->ecc_uncorrected = y;
    } else if (sscanf(line, "memutil %d", &a) == 1) {
      out->valid |= GS_TM_MEMORY_UTILIZATION;
      out->memory_utilization_percent = a;
    } else if (sscanf(line, "powerlimit %d", &a) == 1) {
      out->valid |= GS_TM_POWER_LIMIT;
      out->power_limit_w = a;
    } else if (sscanf(line, "xid %d", &a) == 1) {
      out->valid |= GS_TM_XID;
      out->last_xid = (unsigned)a;
    } else if (sscanf(line, "health %d %n", &a, &n) == 1) {
      out->valid |= GS_TM_HEALTH;
      out->health = (gs_health)a;
      snprintf(out->health_reason, sizeof out->health_reason, "%s", line + n);
      out->health_reason[strcspn(out->health_reason, "\n")] = '\0';
    }
  }
  if (f)
    fclose(f);
  return rc;
}

/* With GPUSRV_TEST_FAKE_GPU_TYPE set, its devices say they are GPUs (what
 * /metrics exports under dcgm-exporter's names); otherwise CPUs, as the
 * front desk's tests expect. The info lives in the HAL's device, which a
 * test plugin may change during init. */
static int fake_init(gs_backend_t *backend) {
  /* GPUSRV_TEST_FAKE_GPUS=N: N devices (default 1), for the tests that
   * need a machine of several GPUs. */
  const char *count = getenv("GPUSRV_TEST_FAKE_GPUS");
  int n = count ? atoi(count) : 1, rc = GS_OK;
  for (int i = 0; rc == 0 && i < (n > 0 && n <= 8 ? n : 1); i++)
    rc = gs__cpu_init_devices(backend);
  for (int i = 0; rc == 0 && getenv("GPUSRV_TEST_FAKE_GPU_TYPE") &&
                  i < gs__backend_device_count(backend); i++) {
    gs_device_info *info = (gs_device_info *)gs_device_get_info(gs__backend_device(backend, i));
    info->type = GS_DEVICE_GPU;
    unsigned char uuid[16] = {0xfa, 0x4e, [15] = (unsigned char)i};
    gs__format_uuid(uuid, "GPU-", info->uuid, sizeof info->uuid);
    snprintf(info->pci_bus_id, sizeof info->pci_bus_id, "00000000:%02X:00.0", 0x3b + i);
    /* GPUSRV_TEST_FAKE_DEV_NODES=PATH,PATH,...: the devices' nodes, in turn. */
    const char *nodes = getenv("GPUSRV_TEST_FAKE_DEV_NODES");
    for (int k = 0; nodes && *nodes && k < i; k++)
      nodes = strchr(nodes, ',') ? strchr(nodes, ',') + 1 : "";
    if (nodes && *nodes)
      snprintf(info->dev_node, sizeof info->dev_node, "%.*s", (int)strcspn(nodes, ","), nodes);
  }
  return rc;
}

int gs_plugin_init(const gs_backend_iface **out) {
  iface = gs__cpu_backend_iface;
  iface.name = "fakegpu";
  iface.init = fake_init; /* no op kernels, as before the HAL had them */
  iface.device_processes = fake_processes;
  iface.device_telemetry = fake_telemetry;
  *out = &iface;
  return GS_OK;
}

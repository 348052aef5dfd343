/* fakegpu.c - a test plugin: the CPU backend's implementation under the name
 * "fakegpu", whose devices report the processes using them with figures read
 * from the file named by GPUSRV_TEST_PROCESSES ("PID BYTES" per line), as
 * NVML would report a GPU's processes. Lets the front desk's watch of
 * per-process device memory be tested without a GPU. */
#include "hal/hal_impl.h"

#include <stdio.h>
#include <stdlib.h>

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

int gs_plugin_init(const gs_backend_iface **out) {
  iface = gs__cpu_backend_iface;
  iface.name = "fakegpu";
  iface.device_processes = fake_processes;
  *out = &iface;
  return GS_OK;
}

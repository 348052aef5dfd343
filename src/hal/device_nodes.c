/* device_nodes.c - see device_nodes.h. */
#include "hal/device_nodes.h"

#include <stdio.h>

bool gs_sysfs_pci(const char *pci, char *out, size_t cap) {
  unsigned domain, bus, slot, function;
  if (sscanf(pci, "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4)
    return false;
  snprintf(out, cap, "%04x:%02x:%02x.%x", domain, bus, slot, function);
  return true;
}

int gs_nvidia_minor(const char *pci) {
  char path[200], addr[64];
  if (!gs_sysfs_pci(pci, addr, sizeof addr))
    return -1;
  snprintf(path, sizeof path, "/proc/driver/nvidia/gpus/%s/information", addr);
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  char line[256];
  int minor = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Device Minor: %d", &minor) == 1)
      break;
  fclose(f);
  return minor;
}

/* device_nodes.h - where a device's nodes under /dev are, as the NVIDIA
 * driver and sysfs tell it: the CUDA backend's dev_node, and the CDI
 * spec's DRM nodes (cmd_cdi.c). */
#ifndef GS_HAL_DEVICE_NODES_H
#define GS_HAL_DEVICE_NODES_H

#include <stdbool.h>
#include <stddef.h>

/* A PCI address as sysfs and the driver's /proc entries spell it
 * ("0000:3b:00.0"), from the HAL's ("00000000:3B:00.0"); false if none. */
bool gs_sysfs_pci(const char *pci, char *out, size_t cap);

/* The NVIDIA driver's minor number for the GPU at `pci` (so its node is
 * /dev/nvidiaN), from /proc/driver/nvidia/gpus/PCI/information; -1 if
 * unknown. */
int gs_nvidia_minor(const char *pci);

#endif

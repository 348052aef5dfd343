/* device_nodes.h - where a device's nodes under /dev are, as the NVIDIA
 * driver and sysfs tell it: for the CDI spec (cmd_cdi.c) and Slurm's
 * gres.conf (cmd_slurm.c). */
#ifndef GS_CLI_DEVICE_NODES_H
#define GS_CLI_DEVICE_NODES_H

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

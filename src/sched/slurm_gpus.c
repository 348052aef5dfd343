/* slurm_gpus.c - see slurm_gpus.h. */
#include "sched/slurm_gpus.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

bool gs_slurm_seen_twice(const gs_device_info *info) {
  if (strcmp(info->backend, "opencl") != 0)
    return false;
  for (int i = 0; i < gs_hal_device_count(); i++) {
    const gs_device_info *o = gs_device_get_info(gs_hal_device(i));
    if (strcmp(o->backend, "cuda") == 0 && strcmp(o->name, info->name) == 0)
      return true;
  }
  return false;
}

/* Where the trailing number of a device node starts. */
static size_t number_at(const char *node) {
  size_t n = strlen(node);
  while (n > 0 && isdigit((unsigned char)node[n - 1]))
    n--;
  return n;
}

/* Device nodes in Slurm's order: the same text before a trailing number,
 * then that number ("/dev/nvidia2" before "/dev/nvidia10"). */
static int node_order(const char *a, const char *b) {
  size_t pa = number_at(a), pb = number_at(b);
  if (pa != pb || strncmp(a, b, pa) != 0)
    return strcmp(a, b);
  long long x = strtoll(a + pa, NULL, 10), y = strtoll(b + pb, NULL, 10);
  return (x > y) - (x < y);
}

int gs_slurm_gpus(gs_device_t **out, int max) {
  gs_device_t *all[256];
  int n = 0;
  for (int i = 0; i < gs_hal_device_count() && n < 256; i++) {
    const gs_device_info *info = gs_device_get_info(gs_hal_device(i));
    if (info->type != GS_DEVICE_GPU || !info->dev_node[0] || gs_slurm_seen_twice(info))
      continue;
    int k = n++; /* insertion by node: Slurm numbers its GPUs by their File */
    while (k > 0 && node_order(gs_device_get_info(all[k - 1])->dev_node, info->dev_node) > 0) {
      all[k] = all[k - 1];
      k--;
    }
    all[k] = gs_hal_device(i);
  }
  for (int i = 0; i < n && i < max; i++)
    out[i] = all[i];
  return n;
}

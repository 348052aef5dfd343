/* hal_internal.h - the HAL's own object layouts and limits, shared by hal.c,
 * stream.c, pool.c and plugin.c. Backends use hal_impl.h instead. */
#ifndef GS_HAL_INTERNAL_H
#define GS_HAL_INTERNAL_H

#include "hal/hal_impl.h"

#include <stdarg.h>
#include <stdatomic.h>

#define GS_MAX_BACKENDS 8
#define GS_MAX_DEVICES 64
#define GS_MAX_SKIPPED 16

typedef struct gs_kernel_slot {
  char name[48]; /* empty: unused slot */
  const void *kernel;
} gs_kernel_slot;

struct gs_backend {
  gs_backend_iface iface; /* with the defaults filled in */
  void *ctx;
  void *dl_handle; /* NULL for the built-in backend */
  int first_device;
  int device_count;
  gs_device_t *devices[GS_MAX_DEVICES];
  gs_kernel_slot *kernels; /* hash table, kernel_cap slots */
  size_t kernel_cap, kernel_count;
};

struct gs_device {
  gs_device_info info;
  gs_device_caps caps;
  gs_backend_t *backend;
  void *ctx;
  gs_pool_t *default_pools[GS_MEM_KIND_COUNT];
  pthread_mutex_t pools_lock; /* guards the list of pools */
  gs_pool_t *pools;
  /* Made on first use, for copies staged out of this device's memory
   * (gs_stream_copy_peer), one at a time under staging_lock. */
  pthread_mutex_t staging_lock;
  gs_stream_t *staging_stream;
  /* gs_device_get_copy_stats: host to device, then device to host */
  _Atomic uint64_t copies[2], copy_bytes[2];
};

struct gs_stream {
  gs_device_t *device;
  void *ctx;
};

struct gs_event {
  gs_device_t *device;
  void *ctx;
  bool recorded;
};

/* hal.c */
int gs__hal_register_backend(const gs_backend_iface *iface, void *dl_handle);
void gs__hal_skip(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool gs__hal_backend_wanted(const char *name);

/* plugin.c */
void gs__plugins_load(void);
void gs__plugin_unload(void *dl_handle);

/* pool.c: the device's list of pools */
void gs__pool_link(gs_pool_t *pool, gs_pool_t **head);
void gs__pool_unlink(gs_pool_t *pool, gs_pool_t **head);
gs_pool_t *gs__pool_next(const gs_pool_t *pool);

#endif

/* hal.c - the backend registry, devices, and the defaults for optional
 * interface slots. Streams and events are in stream.c, pools in pool.c,
 * plugin loading in plugin.c. */
#include "hal/hal_internal.h"

#include <stdarg.h>

#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The registry: written during gs_hal_init(), read-only afterwards. */
static struct {
  bool initialized;
  int backend_count;
  gs_backend_t *backends[GS_MAX_BACKENDS];
  int device_count;
  gs_device_t *devices[GS_MAX_DEVICES];
  int skipped_count;
  gs_skipped_backend skipped[GS_MAX_SKIPPED];
} reg;

/* ---- defaults for optional slots ---------------------------------------- */

static int default_event_elapsed(void *start, void *end, uint64_t *ns) {
  (void)start;
  (void)end;
  (void)ns;
  return gs_error(GS_ENOTSUP, "this backend's events carry no timestamps");
}
static int default_telemetry(gs_device_t *device, gs_telemetry *out) {
  (void)device;
  memset(out, 0, sizeof *out);
  return GS_OK;
}
static bool default_kernel_supports(const void *kernel, const void *params, size_t size) {
  (void)kernel;
  (void)params;
  (void)size;
  return true;
}
static int default_processes(gs_device_t *device, gs_process_info *out, int max, int *count) {
  (void)out;
  (void)max;
  *count = 0;
  return gs_error(GS_ENOTSUP, "backend %s cannot list the processes using %s",
                  device->info.backend, device->info.id);
}

/* Checks the required slots and fills the optional ones. Returns 0, or
 * GS_EINVAL naming the first missing required slot. */
static int iface_complete(const gs_backend_iface *in, gs_backend_iface *out) {
  *out = *in;
#define REQUIRE(slot)                                                                   \
  if (!out->slot)                                                                      \
    return gs_error(GS_EINVAL, "backend %s does not implement the required slot " #slot, \
                    in->name ? in->name : "(unnamed)");
  REQUIRE(name)
  REQUIRE(init)
  REQUIRE(shutdown)
  REQUIRE(segment_alloc)
  REQUIRE(segment_free)
  REQUIRE(stream_create)
  REQUIRE(stream_destroy)
  REQUIRE(stream_copy)
  REQUIRE(stream_memset)
  REQUIRE(stream_launch)
  REQUIRE(stream_host_func)
  REQUIRE(stream_synchronize)
  REQUIRE(event_create)
  REQUIRE(event_destroy)
  REQUIRE(event_record)
  REQUIRE(stream_wait_event)
  REQUIRE(event_synchronize)
  REQUIRE(event_query)
  REQUIRE(stream_mark)
  REQUIRE(stream_passed)
#undef REQUIRE
  if (!out->event_elapsed_ns)
    out->event_elapsed_ns = default_event_elapsed;
  if (!out->device_telemetry)
    out->device_telemetry = default_telemetry;
  if (!out->device_processes)
    out->device_processes = default_processes;
  if (!out->kernel_supports)
    out->kernel_supports = default_kernel_supports;
  return GS_OK;
}

/* ---- registration -------------------------------------------------------- */

void gs__hal_skip(const char *name, const char *fmt, ...) {
  char reason[sizeof reg.skipped[0].reason];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  GS_LOGI("hal", "backend %s skipped: %s", name, reason);
  if (reg.skipped_count == GS_MAX_SKIPPED)
    return;
  gs_skipped_backend *s = &reg.skipped[reg.skipped_count++];
  snprintf(s->name, sizeof s->name, "%s", name);
  snprintf(s->reason, sizeof s->reason, "%s", reason);
}

/* Whether GPUSRV_BACKENDS (a comma-separated list) lets `name` load. */
bool gs__hal_backend_wanted(const char *name) {
  const char *list = getenv("GPUSRV_BACKENDS");
  if (!list || !*list)
    return true;
  size_t len = strlen(name);
  for (const char *p = list; *p;) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    if (n == len && strncmp(p, name, n) == 0)
      return true;
    p += n + (comma ? 1 : 0);
  }
  return false;
}

/* Undoes a backend: its default pools (which need the backend alive), then
 * the backend's own state, then the HAL's records of it. */
static void backend_discard(gs_backend_t *be) {
  for (int i = 0; i < be->device_count; i++) {
    gs_device_t *d = be->devices[i];
    if (d->staging_stream)
      gs_stream_destroy(d->staging_stream);
    d->staging_stream = NULL;
    for (int k = 0; k < GS_MEM_KIND_COUNT; k++) {
      gs_pool_destroy(d->default_pools[k]);
      d->default_pools[k] = NULL;
    }
    /* Pools the caller created and did not destroy go too. */
    while (d->pools) {
      GS_LOGW("hal", "%s: a pool was still alive at shutdown; destroying it", d->info.id);
      gs_pool_destroy(d->pools);
    }
  }
  be->iface.shutdown(be);
  for (int i = 0; i < be->device_count; i++) {
    pthread_mutex_destroy(&be->devices[i]->pools_lock);
    pthread_mutex_destroy(&be->devices[i]->staging_lock);
    free(be->devices[i]);
  }
  free(be->kernels);
  free(be);
}

int gs__hal_register_backend(const gs_backend_iface *iface, void *dl_handle) {
  const char *name = iface->name ? iface->name : "(unnamed)";
  if (gs_hal_backend_by_name(name)) {
    gs__hal_skip(name, "a backend with this name is already loaded");
    return GS_EEXIST;
  }
  if (reg.backend_count == GS_MAX_BACKENDS) {
    gs__hal_skip(name, "too many backends (at most %d)", GS_MAX_BACKENDS);
    return GS_ERANGE;
  }
  gs_backend_t *be = calloc(1, sizeof *be);
  if (!be)
    return gs_error(GS_ENOMEM, "out of memory registering backend %s", name);
  int rc = iface_complete(iface, &be->iface);
  if (rc < 0) {
    gs__hal_skip(name, "%s", gs_error_detail());
    free(be);
    return rc;
  }
  be->dl_handle = dl_handle;
  be->first_device = reg.device_count;
  rc = be->iface.init(be);
  if (rc < 0) {
    gs__hal_skip(name, "%s", gs_error_detail());
    backend_discard(be);
    return rc;
  }
  if (be->device_count == 0) {
    gs__hal_skip(name, "no device found");
    backend_discard(be);
    return GS_ENOENT;
  }
  /* Default pools once the devices exist, without limits. */
  for (int i = 0; i < be->device_count; i++) {
    gs_device_t *d = be->devices[i];
    for (int k = 0; k < GS_MEM_KIND_COUNT; k++) {
      rc = gs__pool_init(&d->default_pools[k], d, (gs_mem_kind)k, 0);
      if (rc < 0) {
        gs__hal_skip(name, "%s", gs_error_detail());
        backend_discard(be);
        return rc;
      }
    }
  }
  for (int i = 0; i < be->device_count; i++)
    reg.devices[reg.device_count++] = be->devices[i];
  reg.backends[reg.backend_count++] = be;
  GS_LOGI("hal", "backend %s loaded with %d device(s)", name, be->device_count);
  return GS_OK;
}

int gs__backend_add_device(gs_backend_t *be, const gs_device_info *info,
                           const gs_device_caps *caps, void *ctx, gs_device_t **out) {
  int index = be->first_device + be->device_count;
  if (index >= GS_MAX_DEVICES || be->device_count >= GS_MAX_DEVICES)
    return gs_error(GS_ERANGE, "too many devices (at most %d)", GS_MAX_DEVICES);
  gs_device_t *d = calloc(1, sizeof *d);
  if (!d)
    return gs_error(GS_ENOMEM, "out of memory adding a device to backend %s", be->iface.name);
  d->info = *info;
  d->info.index = index;
  snprintf(d->info.id, sizeof d->info.id, "%s%d", be->iface.name, be->device_count);
  snprintf(d->info.backend, sizeof d->info.backend, "%s", be->iface.name);
  d->caps = *caps;
  if (d->caps.min_alignment == 0)
    d->caps.min_alignment = 256;
  d->backend = be;
  d->ctx = ctx;
  pthread_mutex_init(&d->pools_lock, NULL);
  pthread_mutex_init(&d->staging_lock, NULL);
  be->devices[be->device_count++] = d;
  if (out)
    *out = d;
  return GS_OK;
}

int gs_hal_init(void) {
  if (reg.initialized)
    return gs_error(GS_ESTATE, "the HAL is already initialized");
  memset(&reg, 0, sizeof reg); /* the skipped list of an earlier failed start */
  reg.initialized = true;
  if (gs__hal_backend_wanted(gs__cpu_backend_iface.name))
    gs__hal_register_backend(&gs__cpu_backend_iface, NULL);
  else
    gs__hal_skip(gs__cpu_backend_iface.name, "not listed in GPUSRV_BACKENDS");
  gs__plugins_load();
  if (reg.backend_count == 0) {
    /* Nothing to shut down; the skipped list stays readable for the caller. */
    reg.initialized = false;
    return gs_error(GS_ENOENT, "no backend could be started (%d skipped)", reg.skipped_count);
  }
  return GS_OK;
}

void gs_hal_shutdown(void) {
  for (int i = reg.backend_count - 1; i >= 0; i--) {
    void *dl = reg.backends[i]->dl_handle;
    backend_discard(reg.backends[i]);
    gs__plugin_unload(dl);
  }
  memset(&reg, 0, sizeof reg);
}

/* ---- lookups -------------------------------------------------------------- */

int gs_hal_backend_count(void) { return reg.backend_count; }
gs_backend_t *gs_hal_backend(int i) {
  return i >= 0 && i < reg.backend_count ? reg.backends[i] : NULL;
}
gs_backend_t *gs_hal_backend_by_name(const char *name) {
  for (int i = 0; i < reg.backend_count; i++)
    if (strcmp(reg.backends[i]->iface.name, name) == 0)
      return reg.backends[i];
  return NULL;
}
const char *gs_backend_name(const gs_backend_t *be) { return be->iface.name; }

int gs_hal_device_count(void) { return reg.device_count; }
gs_device_t *gs_hal_device(int i) {
  return i >= 0 && i < reg.device_count ? reg.devices[i] : NULL;
}
gs_device_t *gs_hal_device_find(const char *s) {
  if (!s || !*s)
    return NULL;
  char *end;
  long idx = strtol(s, &end, 10);
  if (*end == '\0')
    return gs_hal_device((int)(idx < 0 || idx > GS_MAX_DEVICES ? -1 : idx));
  for (int i = 0; i < reg.device_count; i++)
    if (strcmp(reg.devices[i]->info.id, s) == 0)
      return reg.devices[i];
  return NULL;
}

int gs_hal_skipped_count(void) { return reg.skipped_count; }
const gs_skipped_backend *gs_hal_skipped(int i) {
  return i >= 0 && i < reg.skipped_count ? &reg.skipped[i] : NULL;
}

/* ---- devices ------------------------------------------------------------- */

const gs_device_info *gs_device_get_info(const gs_device_t *d) { return &d->info; }
const gs_device_caps *gs_device_get_caps(const gs_device_t *d) { return &d->caps; }

void gs_device_get_copy_stats(const gs_device_t *d, gs_device_copy_stats *out) {
  gs_device_t *dev = (gs_device_t *)d; /* atomics read through a const object */
  *out = (gs_device_copy_stats){.h2d = atomic_load(&dev->copies[0]),
                                .h2d_bytes = atomic_load(&dev->copy_bytes[0]),
                                .d2h = atomic_load(&dev->copies[1]),
                                .d2h_bytes = atomic_load(&dev->copy_bytes[1])};
}
gs_backend_t *gs_device_backend(const gs_device_t *d) { return d->backend; }
void *gs__device_ctx(const gs_device_t *d) { return d->ctx; }
const gs_backend_iface *gs__device_iface(const gs_device_t *d) { return &d->backend->iface; }
void *gs__backend_ctx(const gs_backend_t *be) { return be->ctx; }
void gs__backend_set_ctx(gs_backend_t *be, void *ctx) { be->ctx = ctx; }
int gs__backend_device_count(const gs_backend_t *be) { return be->device_count; }
gs_device_t *gs__backend_device(const gs_backend_t *be, int i) {
  return i >= 0 && i < be->device_count ? be->devices[i] : NULL;
}

void gs__format_uuid(const unsigned char b[16], const char *prefix, char *out, size_t cap) {
  snprintf(out, cap,
           "%s%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", prefix,
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
           b[14], b[15]);
}

const char *gs_health_name(gs_health h) {
  return h == GS_HEALTH_UNHEALTHY ? "unhealthy" : h == GS_HEALTH_DEGRADED ? "degraded" : "healthy";
}

int gs_device_telemetry(gs_device_t *d, gs_telemetry *out) {
  memset(out, 0, sizeof *out);
  return d->backend->iface.device_telemetry(d, out);
}

int gs_device_processes(gs_device_t *d, gs_process_info *out, int max, int *count) {
  if (max < 0 || (max > 0 && !out) || !count)
    return gs_error(GS_EINVAL, "gs_device_processes: bad output array");
  *count = 0;
  return d->backend->iface.device_processes(d, out, max, count);
}

gs_pool_t *gs_device_pool(gs_device_t *d, gs_mem_kind kind) {
  return (unsigned)kind < GS_MEM_KIND_COUNT ? d->default_pools[kind] : NULL;
}

void gs__device_add_pool(gs_device_t *d, gs_pool_t *pool) {
  pthread_mutex_lock(&d->pools_lock);
  gs__pool_link(pool, &d->pools);
  pthread_mutex_unlock(&d->pools_lock);
}

void gs__device_remove_pool(gs_device_t *d, gs_pool_t *pool) {
  pthread_mutex_lock(&d->pools_lock);
  gs__pool_unlink(pool, &d->pools);
  pthread_mutex_unlock(&d->pools_lock);
}

void gs__device_for_each_pool(gs_device_t *d, void (*fn)(gs_pool_t *, void *), void *arg) {
  pthread_mutex_lock(&d->pools_lock);
  for (gs_pool_t *p = d->pools; p; p = gs__pool_next(p))
    fn(p, arg);
  pthread_mutex_unlock(&d->pools_lock);
}

int gs__stream_mark(gs_stream_t *s, uint64_t *ticket) {
  return s->device->backend->iface.stream_mark(s->ctx, ticket);
}

int gs__stream_passed(gs_stream_t *s, uint64_t ticket) {
  return s->device->backend->iface.stream_passed(s->ctx, ticket);
}

/* ---- kernel table ----------------------------------------------------------- */

/* FNV-1a: the table is an open-addressed hash of op names, so that a launch
 * by name costs one hash and, usually, one string compare. */
static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static gs_kernel_slot *kernel_slot(const gs_backend_t *be, const char *name) {
  if (be->kernel_cap == 0)
    return NULL;
  size_t mask = be->kernel_cap - 1;
  for (size_t i = name_hash(name) & mask;; i = (i + 1) & mask) {
    gs_kernel_slot *slot = &be->kernels[i];
    if (slot->name[0] == '\0' || strcmp(slot->name, name) == 0)
      return slot;
  }
}

int gs__backend_register_kernel(gs_backend_t *be, const char *name, const void *kernel) {
  if (!name || !*name || strlen(name) >= sizeof be->kernels[0].name || !kernel)
    return gs_error(GS_EINVAL, "kernel name must be 1..%zu characters and the kernel non-NULL",
                    sizeof be->kernels[0].name - 1);
  /* Keep the table at most half full so probing stays short. */
  if (2 * (be->kernel_count + 1) > be->kernel_cap) {
    size_t cap = be->kernel_cap ? 2 * be->kernel_cap : 64;
    gs_kernel_slot *old = be->kernels;
    size_t old_cap = be->kernel_cap;
    be->kernels = calloc(cap, sizeof *be->kernels);
    if (!be->kernels) {
      be->kernels = old;
      return gs_error(GS_ENOMEM, "out of memory growing the kernel table of %s", be->iface.name);
    }
    be->kernel_cap = cap;
    for (size_t i = 0; i < old_cap; i++)
      if (old[i].name[0])
        *kernel_slot(be, old[i].name) = old[i];
    free(old);
  }
  gs_kernel_slot *slot = kernel_slot(be, name);
  if (slot->name[0] == '\0') {
    snprintf(slot->name, sizeof slot->name, "%s", name);
    be->kernel_count++;
  }
  slot->kernel = kernel;
  return GS_OK;
}

const void *gs__backend_find_kernel(const gs_backend_t *be, const char *name) {
  gs_kernel_slot *slot = kernel_slot(be, name);
  return slot && slot->name[0] ? slot->kernel : NULL;
}

bool gs_device_supports_op(const gs_device_t *d, const char *op) {
  return op && gs__backend_find_kernel(d->backend, op) != NULL;
}

bool gs_device_supports_launch(const gs_device_t *d, const char *op, const void *params,
                               size_t params_size) {
  const void *kernel = op ? gs__backend_find_kernel(d->backend, op) : NULL;
  return kernel && d->backend->iface.kernel_supports(kernel, params, params_size);
}

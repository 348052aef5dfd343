/* hal_impl.h - what a backend implements, and the HAL's internal objects.
 * Included by hal.c, pool.c and the backends (built in or plugins); never by
 * code above the HAL, which sees only the opaque handles of hal.h. */
#ifndef GS_HAL_IMPL_H
#define GS_HAL_IMPL_H

#include "hal/hal.h"

#include <pthread.h>

/* A block of memory obtained from the device: the unit a pool caches. */
typedef struct gs_segment {
  void *native;   /* the backend's handle: a host pointer, a cl_mem, a CUdeviceptr */
  void *host_ptr; /* host address of the segment's start, or NULL if not host-visible */
  size_t size;
  /* Owned by the pool: the first block of this segment, in address order. */
  struct gs_buffer *first;
  struct gs_segment *prev, *next;
  bool small; /* serves the small size classes */
} gs_segment;

/* A buffer is a block of a segment. Live blocks are what users hold; free
 * blocks sit in the pool's bins. Fields past `requested` belong to pool.c. */
struct gs_buffer {
  gs_pool_t *pool;
  gs_segment *segment;
  size_t offset;    /* from the segment's start */
  size_t size;      /* rounded to the size class */
  size_t requested; /* as asked for */
  struct gs_buffer *seg_prev, *seg_next;   /* neighbours in the segment */
  struct gs_buffer *bin_prev, *bin_next;   /* in a free bin */
  gs_stream_t *free_stream; /* stream the block was freed on, until it passes... */
  uint64_t free_ticket;     /* ...this point (see stream_mark) */
  int bin;                  /* bin index while free, else -1 */
  bool is_free;
};

/* The interface a backend implements. Slots marked optional may be NULL;
 * gs__backend_iface_defaults() in hal.c fills them, in one place. */
typedef struct gs_backend_iface {
  const char *name; /* "cpu"; devices are named <name><n> */

  /* Discovers devices and adds each with gs__backend_add_device(). A failure
   * (no driver, no device) skips the backend; gs_error() says why. */
  int (*init)(gs_backend_t *backend);
  void (*shutdown)(gs_backend_t *backend);

  /* Memory: one segment of at least `size` bytes of `kind`. */
  int (*segment_alloc)(gs_device_t *device, gs_mem_kind kind, size_t size, gs_segment *out);
  void (*segment_free)(gs_device_t *device, gs_mem_kind kind, gs_segment *segment);

  /* Streams. `stream` arguments are the backend's own context pointers. */
  int (*stream_create)(gs_device_t *device, unsigned flags, void **stream);
  void (*stream_destroy)(void *stream); /* after synchronize */
  /* One copy; exactly one side may be a host pointer (NULL buffer). */
  int (*stream_copy)(void *stream, gs_buffer_t *dst, size_t dst_offset, void *dst_host,
                     gs_buffer_t *src, size_t src_offset, const void *src_host, size_t bytes);
  int (*stream_memset)(void *stream, gs_buffer_t *dst, size_t offset, uint8_t value,
                       size_t bytes);
  /* `kernel` is what the backend registered for the op. */
  int (*stream_launch)(void *stream, const void *kernel, const gs_kernel_args *args);
  int (*stream_host_func)(void *stream, gs_host_fn fn, void *arg);
  int (*stream_synchronize)(void *stream);

  /* A ticket for "everything queued so far", and whether the stream has
   * passed it, without blocking and without consuming the stream's error.
   * Pools use these to reuse memory that was freed in stream order. */
  int (*stream_mark)(void *stream, uint64_t *ticket);
  int (*stream_passed)(void *stream, uint64_t ticket); /* 1, 0 or GS_E code */

  int (*event_create)(gs_device_t *device, void **event);
  void (*event_destroy)(void *event);
  int (*event_record)(void *event, void *stream);
  int (*stream_wait_event)(void *stream, void *event);
  int (*event_synchronize)(void *event);
  int (*event_query)(void *event);
  /* Optional: default GS_ENOTSUP. */
  int (*event_elapsed_ns)(void *start, void *end, uint64_t *ns);

  /* Optional: default reports nothing as available. */
  int (*device_telemetry)(gs_device_t *device, gs_telemetry *out);
  /* Optional: default GS_ENOTSUP. */
  int (*device_processes)(gs_device_t *device, gs_process_info *out, int max, int *count);
  /* Optional: whether `kernel` runs a launch with these parameters (the
   * types and shapes it covers); default: every launch. */
  bool (*kernel_supports)(const void *kernel, const void *params, size_t params_size);
  /* Optional: a copy from a device buffer of another device of this backend
   * into one of the stream's device, in the stream's order. GS_ENOTSUP (or
   * none): the HAL stages it through host memory. */
  int (*stream_copy_peer)(void *stream, gs_buffer_t *dst, size_t dst_offset, gs_buffer_t *src,
                          size_t src_offset, size_t bytes);
  /* Optional, all four or none: collectives over devices of this backend
   * (gs_group_*). group_create's GS_ENOTSUP: the HAL stages them instead.
   * `streams` are the backend's stream contexts, one per device. */
  int (*group_create)(gs_device_t *const *devices, int n, void **group);
  void (*group_destroy)(void *group);
  int (*group_all_reduce_sum_f32)(void *group, void *const *streams, gs_buffer_t *const *bufs,
                                  size_t count);
  int (*group_broadcast)(void *group, void *const *streams, gs_buffer_t *const *bufs,
                         size_t bytes, int root);
  /* Optional: the stream's kernels use up to `threads` host threads (at
   * least 1); default: ignored. */
  void (*stream_set_threads)(void *stream, int threads);
} gs_backend_iface;

/* ---- plugins ------------------------------------------------------------ */

/* A plugin gpusrv-<name>.so exports these two symbols. The HAL reads the
 * version first and refuses a plugin whose version differs from its own.
 * The init function returns the plugin's interface, or a GS_E code with a
 * reason left through gs_error() when the plugin cannot run here. The
 * plugin may call the gs_ and gs__ functions of the host executable. */
#define GS_PLUGIN_VERSION_SYMBOL "gs_plugin_api_version"
#define GS_PLUGIN_INIT_SYMBOL "gs_plugin_init"
typedef int (*gs_plugin_init_fn)(const gs_backend_iface **out);

/* ---- for backends ------------------------------------------------------ */

/* Adds a device to `backend` during its init. `info->index`, `info->id` and
 * `info->backend` are filled by the HAL. `ctx` is the backend's device state,
 * freed by the backend's shutdown. */
/* 16 bytes as "PREFIX8-4-4-4-12" lowercase hex digits, nvidia-smi's UUID form
 * with the prefix "GPU-"; into out (cap of 48 is enough). */
void gs__format_uuid(const unsigned char bytes[16], const char *prefix, char *out, size_t cap);
int gs__backend_add_device(gs_backend_t *backend, const gs_device_info *info,
                           const gs_device_caps *caps, void *ctx, gs_device_t **out);
void *gs__device_ctx(const gs_device_t *device);
void *gs__backend_ctx(const gs_backend_t *backend);
void gs__backend_set_ctx(gs_backend_t *backend, void *ctx);
int gs__backend_device_count(const gs_backend_t *backend);
gs_device_t *gs__backend_device(const gs_backend_t *backend, int index);

/* Registers `kernel` (the backend's own kernel object) for op `name`. Done
 * during start-up; a second registration of a name replaces the first. */
int gs__backend_register_kernel(gs_backend_t *backend, const char *name, const void *kernel);

/* The kernel registered for op `name`, or NULL. */
const void *gs__backend_find_kernel(const gs_backend_t *backend, const char *name);

/* The backend's context pointer of a stream or event. */
void *gs__stream_ctx(const gs_stream_t *stream);

/* The built-in CPU backend's interface (src/hal/cpu/cpu_backend.c), whose
 * init also registers the op kernels (src/hal/cpu/ops/); and that init
 * without them, for test plugins that stand for a backend lacking kernels. */
extern const gs_backend_iface gs__cpu_backend_iface;
int gs__cpu_init_devices(gs_backend_t *backend);

/* ---- between hal.c and pool.c ------------------------------------------ */

int gs__pool_init(gs_pool_t **out, gs_device_t *device, gs_mem_kind kind, uint64_t limit);
/* Called when `stream` is destroyed: blocks freed on it become free for all. */
void gs__pool_forget_stream(gs_pool_t *pool, gs_stream_t *stream);
const gs_backend_iface *gs__device_iface(const gs_device_t *device);
/* Every pool of the device, including its defaults; for stream destruction. */
void gs__device_for_each_pool(gs_device_t *device, void (*fn)(gs_pool_t *, void *), void *arg);
void gs__device_add_pool(gs_device_t *device, gs_pool_t *pool);
void gs__device_remove_pool(gs_device_t *device, gs_pool_t *pool);
int gs__stream_mark(gs_stream_t *stream, uint64_t *ticket);
int gs__stream_passed(gs_stream_t *stream, uint64_t ticket);

#endif

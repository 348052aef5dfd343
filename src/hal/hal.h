/* hal.h - the hardware abstraction layer: backends, devices, memory pools,
 * buffers, streams, events, op kernels and telemetry, behind one interface.
 *
 * Objects and their lifetimes:
 *   backend  - one per kind of hardware (cpu, cuda, opencl); registered by
 *              gs_hal_init() and owned by the HAL until gs_hal_shutdown().
 *   device   - one accelerator (cpu0, cuda0, ...); owned by its backend.
 *   pool     - a caching allocator over one kind of memory of one device.
 *              Each device has a default pool per kind; more can be created.
 *   buffer   - an allocation from a pool; freed with gs_buffer_free().
 *   stream   - an in-order queue of copies, memsets, kernels, host callbacks
 *              and event records, executed asynchronously.
 *   event    - a point in a stream, with the time the stream reached it.
 *
 * Every function that can fail returns 0 or a negative GS_E code and leaves the
 * reason in gs_error_detail() (base/error.h). Nothing is half-done on failure.
 * gs_hal_init() and gs_hal_shutdown() are not thread-safe; everything else is,
 * except that one object must not be destroyed while another thread uses it. */
#ifndef GS_HAL_H
#define GS_HAL_H

#include "base/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Plugins built against a different version are refused at load. It covers
 * this header, hal_impl.h and the op ABI (hal/op/: the tensor descriptor,
 * gs_op_call, the attribute blocks). */
#define GS_HAL_API_VERSION 10u

typedef struct gs_backend gs_backend_t;
typedef struct gs_device gs_device_t;
typedef struct gs_pool gs_pool_t;
typedef struct gs_buffer gs_buffer_t;
typedef struct gs_stream gs_stream_t;
typedef struct gs_event gs_event_t;

/* ---- start-up and the registry ----------------------------------------- */

/* Registers the built-in CPU backend and loads plugins (gpusrv-<name>.so)
 * from GPUSRV_PLUGIN_PATH (colon-separated directories), else from the
 * directory of the running executable and ../lib/gpusrv beside it.
 * GPUSRV_BACKENDS=cpu,opencl restricts which backends load. A plugin that is
 * skipped is logged with its reason and listed by gs_hal_skipped(). Returns 0,
 * or GS_ENOENT if no backend at all could be started (then nothing needs
 * shutting down, and the skipped list says why). Calling it twice without
 * gs_hal_shutdown() in between is an error (GS_ESTATE). */
int gs_hal_init(void);
/* Destroys every device and pool (pools still alive are logged). Streams and
 * events must have been destroyed by their owners first. */
void gs_hal_shutdown(void);

int gs_hal_backend_count(void);
gs_backend_t *gs_hal_backend(int index);
gs_backend_t *gs_hal_backend_by_name(const char *name);
const char *gs_backend_name(const gs_backend_t *backend);

/* Devices of all backends, numbered 0.. in registration order. */
int gs_hal_device_count(void);
gs_device_t *gs_hal_device(int index);
/* By id ("cpu0") or by global index written as a number ("0"); NULL if none. */
gs_device_t *gs_hal_device_find(const char *id_or_index);

/* A backend that was not loaded, and why. */
typedef struct gs_skipped_backend {
  char name[32];     /* "cuda", or the plugin's file name if it has no name */
  char reason[256];  /* plain words: "libcuda.so.1 not found (no NVIDIA driver)" */
} gs_skipped_backend;
int gs_hal_skipped_count(void);
const gs_skipped_backend *gs_hal_skipped(int index);

/* ---- devices ------------------------------------------------------------ */

typedef enum { GS_DEVICE_CPU, GS_DEVICE_GPU, GS_DEVICE_ACCELERATOR } gs_device_type;

typedef struct gs_device_info {
  int index;                  /* global index, as in gs_hal_device() */
  char id[32];                /* "cpu0", "cuda1" */
  char backend[32];           /* "cpu" */
  char name[128];             /* model name, "AMD EPYC 7763" */
  gs_device_type type;
  int compute_units;          /* cores, SMs, compute units */
  uint64_t memory_total_bytes;
  /* "" where the backend cannot tell (the CPU). CUDA writes them as
   * nvidia-smi does: "GPU-8-4-4-4-12" hex digits, "00000000:3B:00.0". */
  char uuid[48];
  char pci_bus_id[32];
  /* The device's node under /dev that a process opens to use it
   * ("/dev/nvidia0"): what Slurm's gres.conf and a container are given.
   * "" where it has none (the CPU) or the backend cannot tell. */
  char dev_node[64];
} gs_device_info;

/* Capabilities are data; callers never test a backend's name. */
typedef struct gs_device_caps {
  bool host_visible_device_memory; /* gs_buffer_host_ptr() works on device buffers */
  bool pinned_host_locked;         /* the pinned pool's pages are locked (mlock or driver) */
  bool pinned_faster_than_pageable; /* H2D/D2H from pinned memory beat pageable memory */
  bool event_timing;               /* gs_event_elapsed_ns() is available */
  bool process_list;               /* gs_device_processes() lists processes */
  bool inline_streams;             /* GS_STREAM_INLINE runs work in the calling thread */
  bool half_precision;             /* engine plans may keep tensors in float16/bfloat16 */
  bool packed_products;            /* Gemm and MatMul take a constant B packed (op_packed.h) */
  /* Its Conv kernels can keep activations channel-blocked between them
   * (gs_conv_attrs.src_blocked), in blocks of this many channels: a plan
   * blocks only tensors whose channels are a multiple of it. 0: never. A
   * plan still asks the device (gs_device_supports_launch) whether its Conv
   * takes each blocked or residual call. */
  int conv_channel_block;
  /* Its elementwise kernels (unary, Clip, and binary arithmetic) may write
   * their output over an input of the output's shape and type: each element
   * is read before it is written, and by the same index (the CPU's
   * k_elementwise.c, and devops' op_kernels.h for OpenCL and CUDA). */
  bool elementwise_in_place;
  size_t min_alignment;            /* every buffer starts at a multiple of this */
} gs_device_caps;

const gs_device_info *gs_device_get_info(const gs_device_t *device);
const gs_device_caps *gs_device_get_caps(const gs_device_t *device);
/* Copies between host memory and the device's own since start (counted as
 * they are queued on the device's streams): how many, and their bytes. What
 * a served model or an ensemble sends over the bus shows here. */
typedef struct gs_device_copy_stats {
  uint64_t h2d, h2d_bytes, d2h, d2h_bytes;
} gs_device_copy_stats;
void gs_device_get_copy_stats(const gs_device_t *device, gs_device_copy_stats *out);
gs_backend_t *gs_device_backend(const gs_device_t *device);

/* Live figures. A field the machine does not expose is not available: its
 * bit in `valid` is clear and its value must not be read. Never a fake 0. */
enum {
  GS_TM_MEMORY = 1u << 0,      /* memory_total/used/free_bytes */
  GS_TM_UTILIZATION = 1u << 1, /* utilization_percent */
  GS_TM_TEMPERATURE = 1u << 2, /* temperature_c */
  GS_TM_POWER = 1u << 3,       /* power_w */
  GS_TM_CLOCKS = 1u << 4,      /* sm_clock_mhz, memory_clock_mhz */
  GS_TM_PCIE = 1u << 5,        /* pcie_generation, pcie_width, pcie_max_width */
  GS_TM_ECC = 1u << 6,         /* ecc_corrected, ecc_uncorrected */
  GS_TM_HEALTH = 1u << 7,      /* health, health_reason */
  GS_TM_XID = 1u << 8,         /* last_xid: the backend watches NVIDIA's Xid errors */
  GS_TM_MEMORY_UTILIZATION = 1u << 9, /* memory_utilization_percent */
  GS_TM_POWER_LIMIT = 1u << 10,       /* power_limit_w */
};
typedef enum { GS_HEALTH_HEALTHY = 0, GS_HEALTH_DEGRADED, GS_HEALTH_UNHEALTHY } gs_health;
const char *gs_health_name(gs_health h); /* "healthy", "degraded", "unhealthy" */

typedef struct gs_telemetry {
  uint32_t valid;
  uint64_t memory_total_bytes;
  uint64_t memory_used_bytes;
  uint64_t memory_free_bytes;
  double utilization_percent; /* over the interval since the previous call, 0..100 */
  double temperature_c;
  double power_w;             /* average since the previous call */
  double power_limit_w;       /* what the driver enforces */
  double memory_utilization_percent; /* time the memory was read or written, 0..100 (NVML's) */
  double sm_clock_mhz, memory_clock_mhz;
  int pcie_generation, pcie_width, pcie_max_width; /* the link now, and its widest */
  uint64_t ecc_corrected, ecc_uncorrected;         /* since the driver loaded */
  gs_health health;
  char health_reason[160]; /* why not healthy ("" when healthy) */
  unsigned last_xid;       /* the latest Xid error's number since the backend started, 0: none */
} gs_telemetry;

/* Reads telemetry. Utilization and power are averages over the time since the
 * previous call on this device; the first call takes a short sample itself. */
int gs_device_telemetry(gs_device_t *device, gs_telemetry *out);

typedef struct gs_process_info {
  int pid;
  char name[64];
  uint64_t memory_used_bytes;
} gs_process_info;
/* Fills up to `max` processes using the device; *count gets how many exist.
 * GS_ENOTSUP when the backend cannot list processes (caps.process_list). */
int gs_device_processes(gs_device_t *device, gs_process_info *out, int max, int *count);

/* ---- memory pools and buffers ------------------------------------------- */

typedef enum {
  GS_MEM_DEVICE,      /* memory the device computes on */
  GS_MEM_PINNED_HOST, /* host memory for fast transfers; always host-visible */
  GS_MEM_KIND_COUNT
} gs_mem_kind;

typedef struct gs_pool_stats {
  uint64_t allocated_bytes;      /* in live buffers (rounded to the size class) */
  uint64_t requested_bytes;      /* in live buffers, as asked for */
  uint64_t reserved_bytes;       /* obtained from the device, cached or in use */
  uint64_t peak_allocated_bytes;
  uint64_t peak_reserved_bytes;
  uint64_t limit_bytes;          /* 0: no limit */
  uint64_t alloc_count;          /* allocations served since creation */
  uint64_t live_count;           /* buffers not yet freed */
  uint64_t segment_count;        /* device allocations currently held */
  uint64_t cache_hits;           /* allocations served without a device allocation */
  uint64_t largest_free_block;   /* biggest free block in the cache */
  double fragmentation;          /* 1 - largest free block / free cached bytes; 0 when none free */
} gs_pool_stats;

/* The device's default pool of `kind`; owned by the device. */
gs_pool_t *gs_device_pool(gs_device_t *device, gs_mem_kind kind);
/* A new pool of `kind` on `device` that caches at most `limit_bytes`
 * (0: no limit). The caller destroys it with gs_pool_destroy(). */
int gs_pool_create(gs_device_t *device, gs_mem_kind kind, uint64_t limit_bytes, gs_pool_t **out);
/* Frees the pool's cached memory; its live buffers must have been freed. */
void gs_pool_destroy(gs_pool_t *pool);
/* Limit on reserved bytes (0: none). Cached free memory is released to make
 * room before an allocation fails with GS_ENOMEM. */
int gs_pool_set_limit(gs_pool_t *pool, uint64_t limit_bytes);
/* Returns cached segments that hold no live buffer to the device. */
void gs_pool_trim(gs_pool_t *pool);
void gs_pool_get_stats(gs_pool_t *pool, gs_pool_stats *out);
gs_device_t *gs_pool_device(const gs_pool_t *pool);
gs_mem_kind gs_pool_kind(const gs_pool_t *pool);

/* Allocates `size` bytes (0 is allowed and gives a valid, empty buffer) for
 * use on `stream` (NULL: any stream, after synchronisation). Memory freed on
 * the same stream is reused at once; memory freed on another stream only
 * after that stream has passed the point of the free. The caller frees the
 * buffer with gs_buffer_free(). GS_ENOMEM says the size and what is free. */
int gs_pool_alloc(gs_pool_t *pool, size_t size, gs_stream_t *stream, gs_buffer_t **out);
/* Returns the buffer to its pool. With a stream, the memory is reused only
 * after the work queued on that stream so far has run; with NULL, the caller
 * promises no queued work still uses it. NULL buffer is a no-op. */
void gs_buffer_free(gs_buffer_t *buffer, gs_stream_t *stream);
size_t gs_buffer_size(const gs_buffer_t *buffer);
gs_pool_t *gs_buffer_pool(const gs_buffer_t *buffer);
/* Host address of the buffer's memory, or NULL if it is not host-visible
 * (see caps.host_visible_device_memory; pinned host buffers always are). */
void *gs_buffer_host_ptr(const gs_buffer_t *buffer);

/* ---- streams and events ----------------------------------------------- */

/* Creates a stream on `device`; the caller destroys it. */
int gs_stream_create(gs_device_t *device, gs_stream_t **out);

/* An inline stream runs each operation in the calling thread, during the
 * call that queues it, where the backend can (caps.inline_streams: the host
 * itself is the device). It saves the hand-off to a worker thread, which
 * dominates short request-response work; it gives up overlapping the
 * caller with the work. Elsewhere the flag is ignored. */
#define GS_STREAM_INLINE 1u
int gs_stream_create_ex(gs_device_t *device, unsigned flags, gs_stream_t **out);
/* How many threads the stream's kernels may use at once, where the backend
 * runs them on host threads (the CPU); 0 restores the default, the
 * device's compute_units (the cores of the process's cpuset). Kernels
 * queued afterwards use it. Elsewhere it is accepted and changes nothing.
 * GS_EINVAL for a negative count. */
int gs_stream_set_threads(gs_stream_t *stream, int threads);
/* Waits for queued work, then destroys the stream. */
void gs_stream_destroy(gs_stream_t *stream);
gs_device_t *gs_stream_device(const gs_stream_t *stream);

/* Queue operations: they return once queued; the work runs in order. Host
 * memory handed to a copy must stay valid until the copy has run. Ranges are
 * checked when queued: past the end of a buffer is GS_EINVAL. */
int gs_stream_copy_h2d(gs_stream_t *s, gs_buffer_t *dst, size_t dst_offset, const void *src,
                       size_t bytes);
int gs_stream_copy_d2h(gs_stream_t *s, void *dst, gs_buffer_t *src, size_t src_offset,
                       size_t bytes);
int gs_stream_copy_d2d(gs_stream_t *s, gs_buffer_t *dst, size_t dst_offset, gs_buffer_t *src,
                       size_t src_offset, size_t bytes);
int gs_stream_memset(gs_stream_t *s, gs_buffer_t *dst, size_t offset, uint8_t value,
                     size_t bytes);
/* Copies from a buffer of another device (the exchange between devices) to
 * `dst`, on s's device, in s's order; the caller orders src's producer
 * before it (an event the stream waits for, or a synchronize). From memory
 * the host addresses, as an H2D copy; between devices of one backend that
 * can, directly (CUDA: cuMemcpyPeerAsync, over P2P where the GPUs have
 * it); else staged through host memory, the read from src then done,
 * synchronously, before this returns. */
int gs_stream_copy_peer(gs_stream_t *s, gs_buffer_t *dst, size_t dst_offset, gs_buffer_t *src,
                        size_t src_offset, size_t bytes);

/* ---- device groups: collectives for the exchange between devices -------- */

/* Devices that reduce and broadcast together, one buffer and one stream
 * each, index i for devices[i]: through the backend's collectives where
 * every device is of one backend that has them (CUDA: NCCL, where
 * libnccl.so.2 loads), else staged through host memory (then the call
 * returns when the collective is done, and each stream has been waited
 * for first). */
typedef struct gs_group gs_group_t;
int gs_group_create(gs_device_t *const *devices, int n, gs_group_t **out);
void gs_group_destroy(gs_group_t *group);
/* What the group's collectives go through: "staged", or the name of the
 * backend whose own they are ("cuda": NCCL). */
const char *gs_group_method(const gs_group_t *group);
/* bufs[i] (its first count float32 elements) becomes the sum of all of
 * them, in the order of streams[i]. */
int gs_group_all_reduce_sum_f32(gs_group_t *group, gs_stream_t *const *streams,
                                gs_buffer_t *const *bufs, size_t count);
/* bufs[i] (its first `bytes`) becomes bufs[root]'s. */
int gs_group_broadcast(gs_group_t *group, gs_stream_t *const *streams, gs_buffer_t *const *bufs,
                       size_t bytes, int root);

/* Runs fn(arg) on a host thread when the stream reaches this point. A non-zero
 * return is recorded as the stream's error. fn must not queue on `s`. */
typedef int (*gs_host_fn)(void *arg);
int gs_stream_host_func(gs_stream_t *s, gs_host_fn fn, void *arg);

/* Waits until everything queued so far has run. Returns the first error an
 * asynchronous operation hit since the last synchronize (and clears it). */
int gs_stream_synchronize(gs_stream_t *s);

/* ---- op kernels ------------------------------------------------------- */

#define GS_KERNEL_MAX_BUFFERS 64
#define GS_KERNEL_MAX_PARAMS 256

/* A kernel launch: buffers (with byte offsets) and a small parameter block,
 * copied when queued. What the buffers and parameters mean is the op's
 * contract, shared by every backend's kernel for that op. A NULL buffer
 * stands for an omitted optional operand. */
typedef struct gs_kernel_args {
  int buffer_count;
  gs_buffer_t *buffers[GS_KERNEL_MAX_BUFFERS];
  size_t offsets[GS_KERNEL_MAX_BUFFERS];
  size_t params_size;
  const void *params;
} gs_kernel_args;

/* True when the device's backend has a kernel registered under `op`. */
bool gs_device_supports_op(const gs_device_t *device, const char *op);
/* ... and whether that kernel runs a launch with these parameters (a
 * backend's kernel may cover some types or shapes of an op only). */
bool gs_device_supports_launch(const gs_device_t *device, const char *op, const void *params,
                               size_t params_size);
/* Queues the kernel registered under `op`. GS_ENOTSUP if there is none.
 * Arguments the kernel rejects (sizes past a buffer) fail either this call,
 * where the backend checks before queueing (CUDA), or the stream's next
 * synchronize, where it checks when the work runs (CPU, OpenCL). */
int gs_stream_launch(gs_stream_t *s, const char *op, const gs_kernel_args *args);

/* Op kernels run now, on the calling thread, over host memory: the built-in
 * CPU backend's, for constant folding and for a plan step its device has no
 * kernel for. A handle stays valid until gs_hal_shutdown(). */
typedef struct gs_host_kernel gs_host_kernel;
/* The host kernel of `op`, or NULL when the CPU backend has none or is not loaded. */
const gs_host_kernel *gs_host_kernel_find(const char *op);
/* Runs it over `n_buffers` host pointers (inputs, then outputs; NULL for an
 * omitted input) with the launch's parameter block. Returns the kernel's
 * result: 0 or a GS_E code with gs_error detail. */
int gs_host_kernel_run(const gs_host_kernel *kernel, const void *params, size_t params_size,
                       void *const *ptrs, int n_buffers);

/* Parameters of the built-in test kernel "axpy_f32": y[i] += alpha * x[i]
 * for i < n, with buffers[0] = x and buffers[1] = y. */
typedef struct gs_axpy_params {
  uint64_t n;
  float alpha;
} gs_axpy_params;

/* Events. Created unrecorded; gs_event_record() (re)arms one at the current
 * end of a stream. The caller destroys it. */
int gs_event_create(gs_device_t *device, gs_event_t **out);
void gs_event_destroy(gs_event_t *event);
int gs_event_record(gs_event_t *event, gs_stream_t *stream);
/* Makes `stream` wait, without blocking the caller, until `event` has happened. */
int gs_stream_wait_event(gs_stream_t *stream, gs_event_t *event);
/* Blocks until the event has happened (GS_ESTATE if never recorded). */
int gs_event_synchronize(gs_event_t *event);
/* 1 if the event has happened, 0 if not yet, or a GS_E code. */
int gs_event_query(gs_event_t *event);
/* Nanoseconds between two events that have both happened, end after start. */
int gs_event_elapsed_ns(gs_event_t *start, gs_event_t *end, uint64_t *ns);

#endif

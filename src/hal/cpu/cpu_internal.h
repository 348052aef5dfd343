/* cpu_internal.h - shared between the files of the CPU backend, and visible
 * to its unit tests: stream worker, events and the telemetry readers. */
#ifndef GS_HAL_CPU_INTERNAL_H
#define GS_HAL_CPU_INTERNAL_H

#include "hal/hal_impl.h"
#include "hal/cpu/cpu_kernel.h"

#include <pthread.h>

/* ---- telemetry (cpu_telemetry.c) ----------------------------------------- */

#define GS_CPU_MAX_RAPL 8

/* Where /proc and /sys are ("/proc" and "/sys" on a live machine; a fixture
 * tree in tests), and the previous samples that rates are computed from. */
typedef struct gs_cpu_telemetry_state {
  char proc_root[256];
  char sys_root[256];
  pthread_mutex_t lock;
  bool have_prev;
  uint64_t prev_time_ns;
  uint64_t prev_busy, prev_total;
  bool have_util;   /* a utilization was measured: */
  double last_util; /* it, for a call that comes before the next clock tick */
  int rapl_count; /* package domains found, 0: power not available */
  bool rapl_discovered;
  uint64_t prev_energy_time_ns;
  uint64_t prev_energy_uj[GS_CPU_MAX_RAPL];
  uint64_t max_energy_uj[GS_CPU_MAX_RAPL];
  char rapl_dir[GS_CPU_MAX_RAPL][300];
} gs_cpu_telemetry_state;

void gs__cpu_telemetry_init(gs_cpu_telemetry_state *st, const char *proc_root,
                            const char *sys_root);
void gs__cpu_telemetry_destroy(gs_cpu_telemetry_state *st);
/* Reads every figure; rates over the time since the previous call (the first
 * call samples for `first_interval_ns`). Always returns 0: missing sources
 * leave their fields not available. */
int gs__cpu_telemetry_read(gs_cpu_telemetry_state *st, uint64_t first_interval_ns,
                           gs_telemetry *out);

/* Pure parsers, unit-tested on fixture text. */
int gs__cpu_parse_stat(const char *text, uint64_t *busy, uint64_t *total);
int gs__cpu_parse_meminfo(const char *text, uint64_t *total_bytes, uint64_t *available_bytes);
/* The cgroup path of `controller` ("memory"; "" for the v2 unified line) in
 * /proc/self/cgroup text. Returns 0 and fills `path`, or GS_ENOENT. */
int gs__cpu_parse_cgroup(const char *text, const char *controller, char *path, size_t cap);
/* Counter delta across at most one wrap of a counter whose range is `range`. */
uint64_t gs__energy_delta(uint64_t prev, uint64_t cur, uint64_t range);
/* Memory limit and use of the process's cgroup, v2 or v1. Returns 0 when a
 * limit is set, GS_ENOENT when there is none or no cgroup is readable. */
int gs__cpu_cgroup_memory(const char *proc_root, const char *sys_root, uint64_t *limit,
                          uint64_t *used);

/* ---- host facts (cpu_backend.c) ------------------------------------------ */

void gs__cpu_model_name(const char *proc_root, char *out, size_t cap);
int gs__cpu_core_count(void);

/* ---- streams and events (cpu_stream.c) ----------------------------------- */

int gs__cpu_stream_create(gs_device_t *device, unsigned flags, void **out);
void gs__cpu_stream_destroy(void *stream);
int gs__cpu_stream_copy(void *stream, gs_buffer_t *dst, size_t dst_offset, void *dst_host,
                        gs_buffer_t *src, size_t src_offset, const void *src_host, size_t bytes);
int gs__cpu_stream_memset(void *stream, gs_buffer_t *dst, size_t offset, uint8_t value,
                          size_t bytes);
int gs__cpu_stream_launch(void *stream, const void *kernel, const gs_kernel_args *args);
int gs__cpu_stream_host_func(void *stream, gs_host_fn fn, void *arg);
/* Queues fn(arg) in order with the stream's other work, then free(arg): the
 * way a backend that drives its device from the host (OpenCL) reuses these
 * worker streams. Takes arg even on failure. */
int gs__cpu_stream_call(void *stream, gs_host_fn fn, void *arg);
int gs__cpu_stream_synchronize(void *stream);
void gs__cpu_stream_set_threads(void *stream, int threads);
int gs__cpu_stream_mark(void *stream, uint64_t *ticket);
int gs__cpu_stream_passed(void *stream, uint64_t ticket);
int gs__cpu_event_create(gs_device_t *device, void **out);
void gs__cpu_event_destroy(void *event);
int gs__cpu_event_record(void *event, void *stream);
int gs__cpu_stream_wait_event(void *stream, void *event);
int gs__cpu_event_synchronize(void *event);
int gs__cpu_event_query(void *event);
int gs__cpu_event_elapsed_ns(void *start, void *end, uint64_t *ns);

#endif

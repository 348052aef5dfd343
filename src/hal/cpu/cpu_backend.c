/* cpu_backend.c - the built-in CPU backend: one device for the host, its
 * memory (plain and page-locked), and its kernel table. Streams and events
 * are in cpu_stream.c, telemetry in cpu_telemetry.c. */
#include "hal/cpu/cpu_internal.h"
#include "hal/cpu/ops/dnnl_conv.h"
#include "hal/cpu/ops/kernels.h"

#include "base/fileutil.h"
#include "base/log.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

typedef struct cpu_device {
  gs_cpu_telemetry_state telemetry;
  bool can_lock;           /* mlock worked when probed */
  bool lock_failure_logged;
} cpu_device;

/* ---- host facts --------------------------------------------------------------- */

void gs__cpu_model_name(const char *proc_root, char *out, size_t cap) {
  static const char *const keys[] = {"model name", "Hardware", "cpu model", "Model", NULL};
  char path[512], *text = malloc(1 << 16);
  snprintf(path, sizeof path, "%s/cpuinfo", proc_root);
  if (text && gs_read_text_file(path, text, 1 << 16) >= 0) {
    for (int k = 0; keys[k]; k++) {
      size_t klen = strlen(keys[k]);
      for (char *line = text; line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, keys[k], klen) != 0)
          continue;
        char *colon = strchr(line, ':');
        char *eol = strchr(line, '\n');
        if (!colon || (eol && colon > eol))
          continue;
        colon++;
        while (*colon == ' ' || *colon == '\t')
          colon++;
        size_t n = eol ? (size_t)(eol - colon) : strlen(colon);
        if (n == 0)
          continue;
        snprintf(out, cap, "%.*s", (int)n, colon);
        free(text);
        return;
      }
    }
  }
  free(text);
  struct utsname u;
  snprintf(out, cap, "%s CPU", uname(&u) == 0 ? u.machine : "unknown");
}

/* Cores this process may run on (affinity, cpusets), not all the machine has. */
int gs__cpu_core_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

/* ---- memory ------------------------------------------------------------------ */

static int cpu_segment_alloc(gs_device_t *device, gs_mem_kind kind, size_t size, gs_segment *out) {
  cpu_device *cd = gs__device_ctx(device);
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return gs_error(GS_ENOMEM, "%s: cannot map %zu bytes: %s", gs_device_get_info(device)->id,
                    size, strerror(errno));
  /* Large tensors are walked linearly: huge pages spare the TLB (where the
   * kernel offers them; THP in "madvise" mode needs this hint). */
  if (size >= ((size_t)2 << 20))
    madvise(p, size, MADV_HUGEPAGE);
  if (kind == GS_MEM_PINNED_HOST && cd->can_lock && mlock(p, size) != 0 &&
      !cd->lock_failure_logged) {
    /* Past RLIMIT_MEMLOCK: the memory still works, it is only pageable. */
    cd->lock_failure_logged = true;
    GS_LOGW("cpu", "mlock of %zu bytes failed (%s): pinned buffers beyond this are pageable",
            size, strerror(errno));
  }
  out->native = p;
  out->host_ptr = p;
  return GS_OK;
}

static void cpu_segment_free(gs_device_t *device, gs_mem_kind kind, gs_segment *seg) {
  (void)device;
  (void)kind;
  munmap(seg->native, seg->size); /* also unlocks */
}

/* ---- kernels ------------------------------------------------------------------ */

/* The HAL's test kernel: y += alpha * x over n floats. */
static int axpy_f32(const gs_cpu_kernel_call *c) {
  if (c->buffer_count != 2 || c->params_size != sizeof(gs_axpy_params))
    return gs_error(GS_EINVAL, "axpy_f32: expects 2 buffers and gs_axpy_params");
  const gs_axpy_params *p = c->params;
  if (p->n > c->bytes[0] / sizeof(float) || p->n > c->bytes[1] / sizeof(float))
    return gs_error(GS_EINVAL, "axpy_f32: n = %llu floats exceeds a buffer (%zu and %zu bytes)",
                    (unsigned long long)p->n, c->bytes[0], c->bytes[1]);
  const float *x = c->ptr[0];
  float *y = c->ptr[1];
  for (uint64_t i = 0; i < p->n; i++)
    y[i] += p->alpha * x[i];
  return GS_OK;
}
static const gs_cpu_kernel axpy_f32_kernel = {.fn = axpy_f32};

/* ---- the backend ---------------------------------------------------------------- */

static bool probe_mlock(void) {
  size_t len = (size_t)sysconf(_SC_PAGESIZE);
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return false;
  bool ok = mlock(p, len) == 0;
  munmap(p, len);
  return ok;
}

static int cpu_init(gs_backend_t *backend) {
  cpu_device *cd = calloc(1, sizeof *cd);
  if (!cd)
    return gs_error(GS_ENOMEM, "out of memory starting the cpu backend");
  gs__cpu_telemetry_init(&cd->telemetry, "/proc", "/sys");
  cd->can_lock = probe_mlock();

  gs_device_info info = {.type = GS_DEVICE_CPU, .compute_units = gs__cpu_core_count()};
  gs__cpu_model_name("/proc", info.name, sizeof info.name);
  /* Memory total only: telemetry's first read samples utilization, which
   * start-up does not need. */
  uint64_t limit, used;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  info.memory_total_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  if (gs__cpu_cgroup_memory("/proc", "/sys", &limit, &used) == 0 &&
      limit < info.memory_total_bytes)
    info.memory_total_bytes = limit;

  gs_device_caps caps = {
      .host_visible_device_memory = true,
      .pinned_host_locked = cd->can_lock,
      .pinned_faster_than_pageable = false, /* both are a memcpy on the host */
      .event_timing = true,
      .process_list = false,
      .inline_streams = true,
      /* 16-bit tensors in memory; each kernel computes in float32. */
      .half_precision = true,
      .packed_products = true,
      .conv_channel_block = gs__dnnl_channel_block(),
      .elementwise_in_place = true, /* k_elementwise.c */
      .min_alignment = 64,
  };
  int rc = gs__backend_add_device(backend, &info, &caps, cd, NULL);
  if (rc < 0) {
    gs__cpu_telemetry_destroy(&cd->telemetry);
    free(cd);
    return rc;
  }
  return gs__backend_register_kernel(backend, "axpy_f32", &axpy_f32_kernel);
}

int gs__cpu_init_devices(gs_backend_t *backend) {
  return cpu_init(backend);
}

/* The built-in backend also runs the engine's ops (hal/cpu/ops/). */
static int cpu_init_with_ops(gs_backend_t *backend) {
  int rc = cpu_init(backend);
  return rc < 0 ? rc : gs__cpu_register_ops(backend);
}

static void cpu_shutdown(gs_backend_t *backend) {
  for (int i = 0; i < gs__backend_device_count(backend); i++) {
    cpu_device *cd = gs__device_ctx(gs__backend_device(backend, i));
    gs__cpu_telemetry_destroy(&cd->telemetry);
    free(cd);
  }
}

static int cpu_telemetry(gs_device_t *device, gs_telemetry *out) {
  cpu_device *cd = gs__device_ctx(device);
  return gs__cpu_telemetry_read(&cd->telemetry, 100 * 1000 * 1000, out);
}

const gs_backend_iface gs__cpu_backend_iface = {
    .name = "cpu",
    .init = cpu_init_with_ops,
    .shutdown = cpu_shutdown,
    .segment_alloc = cpu_segment_alloc,
    .segment_free = cpu_segment_free,
    .stream_create = gs__cpu_stream_create,
    .stream_destroy = gs__cpu_stream_destroy,
    .stream_copy = gs__cpu_stream_copy,
    .stream_memset = gs__cpu_stream_memset,
    .stream_launch = gs__cpu_stream_launch,
    .stream_host_func = gs__cpu_stream_host_func,
    .stream_synchronize = gs__cpu_stream_synchronize,
    .stream_set_threads = gs__cpu_stream_set_threads,
    .stream_mark = gs__cpu_stream_mark,
    .stream_passed = gs__cpu_stream_passed,
    .event_create = gs__cpu_event_create,
    .event_destroy = gs__cpu_event_destroy,
    .event_record = gs__cpu_event_record,
    .stream_wait_event = gs__cpu_stream_wait_event,
    .event_synchronize = gs__cpu_event_synchronize,
    .event_query = gs__cpu_event_query,
    .event_elapsed_ns = gs__cpu_event_elapsed_ns,
    .device_telemetry = cpu_telemetry,
    /* device_processes: left NULL, the CPU backend cannot tell which
     * processes "use" the host; the HAL's default says so. */
};

/* cuda_backend.c - the CUDA backend, a plugin (gpusrv-cuda.so) for NVIDIA
 * GPUs: the driver API through dlopen (cuda_driver.h), each device's primary
 * context, device memory from cuMemAlloc and pinned host memory from
 * cuMemHostAlloc as segments that the HAL's caching pools sub-allocate (so
 * nothing is allocated from the driver on a hot path), non-blocking streams,
 * events with timing, stream-ordered reuse through recorded events, kernels
 * from a fatbin embedded at build time, and telemetry and per-process memory
 * from NVML (nvml.h). Without a driver, with a driver older than the headers,
 * with a driver whose library and kernel module disagree, or without a
 * device, the plugin is skipped with that reason and gpusrv carries on. */
#include "hal/cuda/cuda_internal.h"

#include "base/log.h"
#include "hal/device_nodes.h"
#include "cuda_kernels.h"   /* generated from kernels.cu: gs_cuda_kernels_fatbin */
#include "cuda_kernels64.h" /* the same with GS_REAL_F64: gs_cuda_kernels64_fatbin */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const uint32_t gs_plugin_api_version = GS_HAL_API_VERSION;

#define MARKS GS_CUDA_MARKS
#define cu gs__cu

gs_cuda_driver gs__cu;
gs_cublas gs__cublas;
bool gs__have_cublas;
gs_cufft gs__cufft;
bool gs__have_cufft;
static gs_nvml nvml;
static bool have_nvml;

typedef struct cu_event {
  cu_device *d;
  CUevent ev;
} cu_event;

/* A driver failure as a GS_E code with the driver's own words. */
int gs__cu_fail(CUresult r, const char *what) {
  const char *name = NULL, *text = NULL;
  if (cu.cuGetErrorName(r, &name) != CUDA_SUCCESS)
    name = NULL;
  if (cu.cuGetErrorString(r, &text) != CUDA_SUCCESS)
    text = NULL;
  int code = r == CUDA_ERROR_OUT_OF_MEMORY ? GS_ENOMEM
             : r == CUDA_ERROR_INVALID_VALUE ? GS_EINVAL
                                             : GS_EDEVICE;
  if (r == CUDA_ERROR_STUB_LIBRARY)
    return gs_error(GS_ENOENT, "%s: libcuda.so.1 is the CUDA toolkit's stub library, not a "
                               "driver (CUDA_ERROR_STUB_LIBRARY)", what);
  return gs_error(code, "%s: %s (CUDA error %d%s%s)", what, name ? name : "CUDA error", (int)r,
                  text ? ": " : "", text ? text : "");
}

/* Driver calls act on the calling thread's current context. */
static int use(const cu_device *d) {
  CUresult r = cu.cuCtxSetCurrent(d->ctx);
  return r == CUDA_SUCCESS ? GS_OK : gs__cu_fail(r, "cuCtxSetCurrent");
}

/* ---- memory --------------------------------------------------------------------------- */

static int cu_segment_alloc(gs_device_t *device, gs_mem_kind kind, size_t size, gs_segment *out) {
  cu_device *d = gs__device_ctx(device);
  int rc = use(d);
  if (rc < 0)
    return rc;
  CUresult r;
  out->size = size;
  if (kind == GS_MEM_PINNED_HOST) {
    void *p = NULL;
    r = cu.cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE);
    if (r != CUDA_SUCCESS)
      return gs__cu_fail(r, "cuMemHostAlloc");
    out->native = p;
    out->host_ptr = p;
    return GS_OK;
  }
  CUdeviceptr p = 0;
  r = cu.cuMemAlloc(&p, size);
  if (r != CUDA_SUCCESS)
    return gs__cu_fail(r, "cuMemAlloc");
  out->native = (void *)(uintptr_t)p;
  out->host_ptr = NULL;
  return GS_OK;
}

static void cu_segment_free(gs_device_t *device, gs_mem_kind kind, gs_segment *seg) {
  cu_device *d = gs__device_ctx(device);
  if (use(d) < 0)
    return;
  if (kind == GS_MEM_PINNED_HOST)
    cu.cuMemFreeHost(seg->native);
  else
    cu.cuMemFree((CUdeviceptr)(uintptr_t)seg->native);
}

/* Where a buffer's bytes are: a host address (pinned), else a device one. */
static void *host_side(gs_buffer_t *b, size_t offset) {
  return b && b->segment->host_ptr ? (char *)b->segment->host_ptr + b->offset + offset : NULL;
}

static CUdeviceptr device_side(gs_buffer_t *b, size_t offset) {
  return (CUdeviceptr)(uintptr_t)b->segment->native + b->offset + offset;
}

/* ---- host work in stream order ------------------------------------------------------------ */

typedef struct host_call {
  cu_stream *s;
  gs_host_fn fn;
  void *arg;
  bool free_arg;
} host_call;

/* Runs on the driver's callback thread, in stream order; never calls CUDA. */
static void CUDA_CB run_host_call(void *p) {
  host_call *h = p;
  int rc = h->fn(h->arg);
  if (rc != 0) {
    pthread_mutex_lock(&h->s->error_lock);
    if (h->s->error == 0) {
      h->s->error = rc < 0 ? rc : GS_EINTERNAL;
      snprintf(h->s->error_detail, sizeof h->s->error_detail, "%s",
               rc < 0 ? gs_error_detail() : "a host function failed");
    }
    pthread_mutex_unlock(&h->s->error_lock);
  }
  if (h->free_arg)
    free(h->arg);
  free(h);
}

static int queue_host_call(cu_stream *s, gs_host_fn fn, void *arg, bool free_arg) {
  host_call *h = malloc(sizeof *h);
  if (!h) {
    if (free_arg)
      free(arg);
    return gs_error(GS_ENOMEM, "out of memory queueing a host function");
  }
  *h = (host_call){.s = s, .fn = fn, .arg = arg, .free_arg = free_arg};
  CUresult r = cu.cuLaunchHostFunc(s->s, run_host_call, h);
  if (r != CUDA_SUCCESS) {
    if (free_arg)
      free(arg);
    free(h);
    return gs__cu_fail(r, "cuLaunchHostFunc");
  }
  return GS_OK;
}

typedef struct host_copy {
  void *dst;
  const void *src;
  size_t bytes;
  int value; /* >= 0: a memset of dst */
} host_copy;

static int run_host_copy(void *p) {
  host_copy *c = p;
  if (c->value >= 0)
    memset(c->dst, c->value, c->bytes);
  else
    memmove(c->dst, c->src, c->bytes);
  return 0;
}

static int queue_host_copy(cu_stream *s, void *dst, const void *src, size_t bytes, int value) {
  host_copy *c = malloc(sizeof *c);
  if (!c)
    return gs_error(GS_ENOMEM, "out of memory queueing a copy");
  *c = (host_copy){dst, src, bytes, value};
  return queue_host_call(s, run_host_copy, c, true);
}

/* ---- streams ---------------------------------------------------------------------------- */

static int cu_stream_create(gs_device_t *device, unsigned flags, void **out) {
  (void)flags; /* no inline execution: the device is not the host */
  cu_device *d = gs__device_ctx(device);
  int rc = use(d);
  if (rc < 0)
    return rc;
  cu_stream *s = calloc(1, sizeof *s);
  if (!s)
    return gs_error(GS_ENOMEM, "out of memory creating a stream");
  s->d = d;
  pthread_mutex_init(&s->lock, NULL);
  pthread_mutex_init(&s->error_lock, NULL);
  pthread_mutex_init(&s->ops_lock, NULL);
  const char *what = "cuStreamCreate";
  CUresult r = cu.cuStreamCreate(&s->s, CU_STREAM_NON_BLOCKING);
  if (r == CUDA_SUCCESS)
    what = "cuEventCreate";
  for (int i = 0; r == CUDA_SUCCESS && i < MARKS; i++)
    r = cu.cuEventCreate(&s->marks[i].ev, CU_EVENT_DISABLE_TIMING);
  if (r == CUDA_SUCCESS) {
    what = "cuMemAlloc(status)";
    r = cu.cuMemAlloc(&s->status, sizeof(gs_devops_status));
    if (r == CUDA_SUCCESS) /* on the stream: ordered before its kernels */
      r = cu.cuMemsetD8Async(s->status, 0, sizeof(gs_devops_status), s->s);
  }
  if (r != CUDA_SUCCESS) {
    if (s->status)
      cu.cuMemFree(s->status);
    for (int i = 0; i < MARKS; i++)
      if (s->marks[i].ev)
        cu.cuEventDestroy(s->marks[i].ev);
    if (s->s)
      cu.cuStreamDestroy(s->s);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->error_lock);
    pthread_mutex_destroy(&s->ops_lock);
    free(s);
    return gs__cu_fail(r, what);
  }
  *out = s;
  return GS_OK;
}

static void cu_stream_destroy(void *stream) {
  cu_stream *s = stream;
  if (use(s->d) == 0) {
    cu.cuStreamSynchronize(s->s);
    if (s->blas)
      gs__cublas.cublasDestroy(s->blas);
    for (int i = 0; i < GS_CUDA_FFT_PLANS; i++)
      if (s->fft[i].made)
        gs__cufft.cufftDestroy(s->fft[i].handle);
    for (int i = 0; i < MARKS; i++)
      cu.cuEventDestroy(s->marks[i].ev);
    cu.cuMemFree(s->status);
    if (s->scratch)
      cu.cuMemFree(s->scratch);
    cu.cuStreamDestroy(s->s);
  }
  pthread_mutex_destroy(&s->lock);
  pthread_mutex_destroy(&s->error_lock);
  pthread_mutex_destroy(&s->ops_lock);
  free(s);
}

static int cu_stream_copy(void *stream, gs_buffer_t *dst, size_t dst_offset, void *dst_host,
                          gs_buffer_t *src, size_t src_offset, const void *src_host, size_t bytes) {
  cu_stream *s = stream;
  if (bytes == 0)
    return GS_OK;
  int rc = use(s->d);
  if (rc < 0)
    return rc;
  void *dh = dst ? host_side(dst, dst_offset) : dst_host;
  const void *sh = src ? host_side(src, src_offset) : src_host;
  CUresult r;
  if (dh && sh) /* host to host: in stream order, on the callback thread */
    return queue_host_copy(s, dh, sh, bytes, -1);
  if (!dh && !sh)
    r = cu.cuMemcpyDtoDAsync(device_side(dst, dst_offset), device_side(src, src_offset), bytes,
                             s->s);
  else if (!dh)
    r = cu.cuMemcpyHtoDAsync(device_side(dst, dst_offset), sh, bytes, s->s);
  else
    r = cu.cuMemcpyDtoHAsync(dh, device_side(src, src_offset), bytes, s->s);
  return r == CUDA_SUCCESS ? GS_OK : gs__cu_fail(r, "copy");
}

static int cu_stream_memset(void *stream, gs_buffer_t *dst, size_t offset, uint8_t value,
                            size_t bytes) {
  cu_stream *s = stream;
  if (bytes == 0)
    return GS_OK;
  int rc = use(s->d);
  if (rc < 0)
    return rc;
  void *h = host_side(dst, offset);
  if (h)
    return queue_host_copy(s, h, NULL, bytes, value);
  CUresult r = cu.cuMemsetD8Async(device_side(dst, offset), value, bytes, s->s);
  return r == CUDA_SUCCESS ? GS_OK : gs__cu_fail(r, "cuMemsetD8Async");
}

/* From another GPU: cuMemcpyPeerAsync, direct over P2P (NVLink or PCIe)
 * where cu_init enabled it for the pair, staged by the driver otherwise.
 * Pinned host memory on either side is the HAL's to copy (GS_ENOTSUP). */
static int cu_copy_peer(void *stream, gs_buffer_t *dst, size_t dst_offset, gs_buffer_t *src,
                        size_t src_offset, size_t bytes) {
  cu_stream *s = stream;
  if (host_side(dst, dst_offset) || host_side(src, src_offset))
    return GS_ENOTSUP;
  int rc = use(s->d);
  if (rc < 0)
    return rc;
  cu_device *from = gs__device_ctx(gs_pool_device(src->pool));
  CUresult r = cu.cuMemcpyPeerAsync(device_side(dst, dst_offset), s->d->ctx,
                                    device_side(src, src_offset), from->ctx, bytes, s->s);
  return r == CUDA_SUCCESS ? GS_OK : gs__cu_fail(r, "cuMemcpyPeerAsync");
}

static int cu_host_func(void *stream, gs_host_fn fn, void *arg) {
  cu_stream *s = stream;
  int rc = use(s->d);
  return rc < 0 ? rc : queue_host_call(s, fn, arg, false);
}

/* After a synchronize: whether a kernel that can fail did (devops.h); the
 * status is cleared (on the stream, before anything queued later). */
static int check_status(cu_stream *s) {
  pthread_mutex_lock(&s->lock);
  gs_devops_status st = {0};
  CUresult r = s->tags.armed ? cu.cuMemcpyDtoH(&st, s->status, sizeof st) : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS && st.code)
    r = cu.cuMemsetD8Async(s->status, 0, sizeof st, s->s);
  int rc = r == CUDA_SUCCESS ? gs_devops_tags_error(&s->tags, &st)
                             : gs__cu_fail(r, "reading or clearing the kernels' status");
  s->tags.armed = false;
  pthread_mutex_unlock(&s->lock);
  return rc;
}

static int cu_synchronize(void *stream) {
  cu_stream *s = stream;
  int rc = use(s->d);
  if (rc < 0)
    return rc;
  CUresult r = cu.cuStreamSynchronize(s->s);
  pthread_mutex_lock(&s->error_lock);
  int err = s->error;
  char detail[sizeof s->error_detail];
  memcpy(detail, s->error_detail, sizeof detail);
  s->error = 0;
  s->error_detail[0] = '\0';
  pthread_mutex_unlock(&s->error_lock);
  /* The status is read and cleared whenever the stream drained, even if a
   * host function failed, so that no run inherits an earlier one's failure;
   * a kernel's failure is the cause of what a CPU step after it then did,
   * so it is the one reported. */
  int status = r == CUDA_SUCCESS ? check_status(s) : GS_OK;
  if (r != CUDA_SUCCESS)
    return gs__cu_fail(r, "cuStreamSynchronize");
  if (status < 0)
    return status;
  return err < 0 ? gs_error(err, "%s", detail) : GS_OK;
}

/* Tickets: an event recorded per mark, from a ring; reusing the oldest
 * waits for it first (outside the lock: pools ask cu_passed meanwhile),
 * which makes its ticket passed. */
static int cu_mark(void *stream, uint64_t *ticket) {
  cu_stream *s = stream;
  int rc = use(s->d);
  if (rc < 0)
    return rc;
  pthread_mutex_lock(&s->lock);
  int at = s->next_mark;
  s->next_mark = (at + 1) % MARKS; /* the slot is this call's */
  uint64_t old = s->marks[at].ticket;
  CUresult r = CUDA_SUCCESS;
  if (old > s->passed) {
    pthread_mutex_unlock(&s->lock);
    r = cu.cuEventSynchronize(s->marks[at].ev);
    pthread_mutex_lock(&s->lock);
    if (r == CUDA_SUCCESS && old > s->passed)
      s->passed = old;
  }
  if (r == CUDA_SUCCESS)
    r = cu.cuEventRecord(s->marks[at].ev, s->s);
  if (r == CUDA_SUCCESS)
    s->marks[at].ticket = *ticket = ++s->issued;
  pthread_mutex_unlock(&s->lock);
  return r == CUDA_SUCCESS ? GS_OK : gs__cu_fail(r, "recording a stream mark");
}

static int cu_passed(void *stream, uint64_t ticket) {
  cu_stream *s = stream;
  int rc = use(s->d);
  if (rc < 0)
    return rc;
  pthread_mutex_lock(&s->lock);
  int result = ticket <= s->passed ? 1 : 0;
  for (int i = 0; !result && i < MARKS; i++) {
    if (s->marks[i].ticket < ticket || s->marks[i].ticket <= s->passed)
      continue;
    CUresult r = cu.cuEventQuery(s->marks[i].ev);
    if (r == CUDA_SUCCESS) {
      s->passed = s->marks[i].ticket;
      result = 1;
    } else if (r != CUDA_ERROR_NOT_READY) {
      result = gs__cu_fail(r, "cuEventQuery");
    }
  }
  pthread_mutex_unlock(&s->lock);
  return result;
}

/* ---- events ------------------------------------------------------------------------------ */

static int cu_event_create(gs_device_t *device, void **out) {
  cu_device *d = gs__device_ctx(device);
  int rc = use(d);
  if (rc < 0)
    return rc;
  cu_event *e = calloc(1, sizeof *e);
  if (!e)
    return gs_error(GS_ENOMEM, "out of memory creating an event");
  e->d = d;
  CUresult r = cu.cuEventCreate(&e->ev, CU_EVENT_DEFAULT);
  if (r != CUDA_SUCCESS) {
    free(e);
    return gs__cu_fail(r, "cuEventCreate");
  }
  *out = e;
  return GS_OK;
}

static void cu_event_destroy(void *event) {
  cu_event *e = event;
  if (use(e->d) == 0)
    cu.cuEventDestroy(e->ev);
  free(e);
}

static int cu_event_record(void *event, void *stream) {
  cu_event *e = event;
  cu_stream *s = stream;
  if (e->d != s->d)
    return gs_error(GS_EINVAL, "a CUDA event is recorded on a stream of its own device only");
  int rc = use(s->d);
  if (rc < 0)
    return rc;
  CUresult r = cu.cuEventRecord(e->ev, s->s);
  return r == CUDA_SUCCESS ? GS_OK : gs__cu_fail(r, "cuEventRecord");
}

static int cu_wait_event(void *stream, void *event) {
  cu_stream *s = stream;
  cu_event *e = event;
  int rc = use(s->d);
  if (rc < 0)
    return rc;
  CUresult r = cu.cuStreamWaitEvent(s->s, e->ev, 0);
  return r == CUDA_SUCCESS ? GS_OK : gs__cu_fail(r, "cuStreamWaitEvent");
}

static int cu_event_synchronize(void *event) {
  cu_event *e = event;
  int rc = use(e->d);
  if (rc < 0)
    return rc;
  CUresult r = cu.cuEventSynchronize(e->ev);
  return r == CUDA_SUCCESS ? GS_OK : gs__cu_fail(r, "cuEventSynchronize");
}

static int cu_event_query(void *event) {
  cu_event *e = event;
  int rc = use(e->d);
  if (rc < 0)
    return rc;
  CUresult r = cu.cuEventQuery(e->ev);
  return r == CUDA_SUCCESS ? 1 : r == CUDA_ERROR_NOT_READY ? 0 : gs__cu_fail(r, "cuEventQuery");
}

static int cu_elapsed(void *start, void *end, uint64_t *ns) {
  cu_event *a = start, *b = end;
  int rc = use(a->d);
  if (rc < 0)
    return rc;
  float ms = 0;
  CUresult r = cu.cuEventElapsedTime(&ms, a->ev, b->ev);
  if (r == CUDA_ERROR_NOT_READY) /* the HAL's contract, as the other backends answer */
    return gs_error(GS_ESTATE, "event_elapsed: an event has not completed yet");
  if (r != CUDA_SUCCESS)
    return gs__cu_fail(r, "cuEventElapsedTime");
  *ns = ms > 0 ? (uint64_t)((double)ms * 1e6) : 0;
  return GS_OK;
}

/* ---- kernels ------------------------------------------------------------------------------- */

static int cu_stream_launch(void *stream, const void *kernel, const gs_kernel_args *args) {
  cu_stream *s = stream;
  const cu_kernel *k = kernel;
  int rc = use(s->d);
  return rc < 0 ? rc : k->launch(k, s, args);
}

static bool cu_kernel_supports(const void *kernel, const void *params, size_t params_size) {
  const cu_kernel *k = kernel;
  return !k->supports || k->supports(k, params, params_size);
}

int gs__cu_device_ptr(gs_buffer_t *b, size_t offset, CUdeviceptr *out) {
  if (!b || host_side(b, offset))
    return gs_error(GS_EINVAL, "a CUDA kernel's operand must be a device buffer");
  *out = device_side(b, offset);
  return GS_OK;
}

int gs__cu_launch_1d(cu_stream *s, CUfunction fn, unsigned long long n, void **params) {
  if (n == 0)
    return GS_OK;
  unsigned threads = 256;
  unsigned long long want = (n + threads - 1) / threads;
  unsigned blocks = want > 65535 ? 65535 : (unsigned)want; /* the kernels stride over the rest */
  CUresult r = cu.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, s->s, params, NULL);
  return r == CUDA_SUCCESS ? GS_OK : gs__cu_fail(r, "cuLaunchKernel");
}

/* y += alpha * x: the HAL's test kernel. Device buffers only. */
static int launch_axpy(const cu_kernel *k, cu_stream *s, const gs_kernel_args *a) {
  (void)k;
  if (a->buffer_count != 2 || !a->buffers[0] || !a->buffers[1] ||
      a->params_size != sizeof(gs_axpy_params))
    return gs_error(GS_EINVAL, "axpy_f32: expects 2 buffers and gs_axpy_params");
  gs_axpy_params p;
  memcpy(&p, a->params, sizeof p);
  gs_buffer_t *xb = a->buffers[0], *yb = a->buffers[1];
  size_t xbytes = xb->requested - a->offsets[0], ybytes = yb->requested - a->offsets[1];
  if (p.n > xbytes / sizeof(float) || p.n > ybytes / sizeof(float))
    return gs_error(GS_EINVAL, "axpy_f32: n = %llu floats exceeds a buffer (%zu and %zu bytes)",
                    (unsigned long long)p.n, xbytes, ybytes);
  if (host_side(xb, 0) || host_side(yb, 0))
    return gs_error(GS_EINVAL, "axpy_f32: operands must be device buffers");
  if (a->offsets[0] % sizeof(float) || a->offsets[1] % sizeof(float))
    return gs_error(GS_EINVAL, "axpy_f32: operands must start at a multiple of 4 bytes");
  CUdeviceptr x = device_side(xb, a->offsets[0]), y = device_side(yb, a->offsets[1]);
  unsigned long long n = p.n;
  float alpha = p.alpha;
  void *params[] = {&x, &y, &n, &alpha};
  return gs__cu_launch_1d(s, s->d->axpy, n, params);
}

static const cu_kernel axpy_kernel = {"axpy_f32", NULL, NULL, launch_axpy};

/* ---- telemetry ---------------------------------------------------------------------------------- */

/* Xid errors: NVML queues them as events on one set for every device;
 * telemetry reads what has arrived (no thread waits on it). */
static gs_nvml_event_set xid_events;
static pthread_mutex_t xid_lock = PTHREAD_MUTEX_INITIALIZER;

static void watch_xids(gs_backend_t *backend) {
  if (nvml.event_set_create(&xid_events) != GS_NVML_SUCCESS) {
    xid_events = NULL;
    return;
  }
  int watched = 0;
  for (int i = 0; i < gs__backend_device_count(backend); i++) {
    cu_device *d = gs__device_ctx(gs__backend_device(backend, i));
    /* Not every GPU reports them (NOT_SUPPORTED): its health then goes without. */
    if (d->nvml && nvml.register_events(d->nvml, GS_NVML_EVENT_XID_CRITICAL, xid_events) ==
                       GS_NVML_SUCCESS)
      watched++;
  }
  if (!watched) {
    nvml.event_set_free(xid_events);
    xid_events = NULL;
  }
}

static void read_xids(gs_backend_t *backend) {
  gs_nvml_event ev;
  pthread_mutex_lock(&xid_lock);
  while (xid_events && nvml.event_set_wait(xid_events, &ev, 0) == GS_NVML_SUCCESS) {
    if (!(ev.type & GS_NVML_EVENT_XID_CRITICAL))
      continue;
    for (int i = 0; i < gs__backend_device_count(backend); i++) {
      cu_device *d = gs__device_ctx(gs__backend_device(backend, i));
      if (d->nvml == ev.device) {
        gs_xid_note(&d->xids, (unsigned)ev.data, time(NULL));
        GS_LOGW("cuda", "%s: Xid %llu", gs_device_get_info(gs__backend_device(backend, i))->id,
                ev.data);
      }
    }
  }
  pthread_mutex_unlock(&xid_lock);
}

/* Healthy, degraded or unhealthy, with the reason: a GPU NVML has lost
 * (fallen off the bus), an Xid error that needs a reset (or, for a while,
 * one to watch), uncorrectable memory errors, or a PCIe link running
 * narrower than it can. */
static void judge_health(cu_device *d, gs_telemetry *t) {
  gs_nvml_memory m;
  t->valid |= GS_TM_HEALTH;
  t->health = GS_HEALTH_HEALTHY;
  t->health_reason[0] = '\0';
  char xid_reason[sizeof t->health_reason];
  pthread_mutex_lock(&xid_lock);
  gs_health xid = gs_xid_health(&d->xids, time(NULL), xid_reason, sizeof xid_reason);
  if (xid_events) {
    t->valid |= GS_TM_XID;
    t->last_xid = d->xids.last_xid;
  }
  pthread_mutex_unlock(&xid_lock);
  if (nvml.memory(d->nvml, &m) == GS_NVML_ERROR_GPU_IS_LOST) {
    t->health = GS_HEALTH_UNHEALTHY;
    snprintf(t->health_reason, sizeof t->health_reason,
             "the GPU is lost (NVML_ERROR_GPU_IS_LOST: fell off the bus; reset or reboot)");
  } else if (xid == GS_HEALTH_UNHEALTHY) {
    t->health = xid;
    snprintf(t->health_reason, sizeof t->health_reason, "%s", xid_reason);
  } else if ((t->valid & GS_TM_ECC) && t->ecc_uncorrected > 0) {
    t->health = GS_HEALTH_UNHEALTHY;
    snprintf(t->health_reason, sizeof t->health_reason,
             "%llu uncorrectable ECC errors since the driver loaded",
             (unsigned long long)t->ecc_uncorrected);
  } else if ((t->valid & GS_TM_PCIE) && t->pcie_width < t->pcie_max_width) {
    t->health = GS_HEALTH_DEGRADED;
    snprintf(t->health_reason, sizeof t->health_reason, "PCIe link at x%d of x%d",
             t->pcie_width, t->pcie_max_width);
  } else if (xid == GS_HEALTH_DEGRADED) {
    t->health = xid;
    snprintf(t->health_reason, sizeof t->health_reason, "%s", xid_reason);
  }
}

static int cu_telemetry(gs_device_t *device, gs_telemetry *out) {
  cu_device *d = gs__device_ctx(device);
  memset(out, 0, sizeof *out);
  if (d->nvml) {
    read_xids(gs_device_backend(device));
    gs_nvml_memory m;
    gs_nvml_utilization u;
    unsigned int t, mw;
    if (nvml.memory(d->nvml, &m) == GS_NVML_SUCCESS) {
      out->valid |= GS_TM_MEMORY;
      out->memory_total_bytes = m.total;
      out->memory_used_bytes = m.used;
      out->memory_free_bytes = m.free;
    }
    if (nvml.utilization(d->nvml, &u) == GS_NVML_SUCCESS) {
      out->valid |= GS_TM_UTILIZATION | GS_TM_MEMORY_UTILIZATION;
      out->utilization_percent = u.gpu;
      out->memory_utilization_percent = u.memory;
    }
    if (nvml.temperature(d->nvml, GS_NVML_TEMPERATURE_GPU, &t) == GS_NVML_SUCCESS) {
      out->valid |= GS_TM_TEMPERATURE;
      out->temperature_c = t;
    }
    if (nvml.power(d->nvml, &mw) == GS_NVML_SUCCESS) {
      out->valid |= GS_TM_POWER;
      out->power_w = mw / 1000.0;
    }
    if (nvml.power_limit(d->nvml, &mw) == GS_NVML_SUCCESS) {
      out->valid |= GS_TM_POWER_LIMIT;
      out->power_limit_w = mw / 1000.0;
    }
    unsigned int sm, mem, gen, width, max_width;
    if (nvml.clock(d->nvml, GS_NVML_CLOCK_SM, &sm) == GS_NVML_SUCCESS &&
        nvml.clock(d->nvml, GS_NVML_CLOCK_MEM, &mem) == GS_NVML_SUCCESS) {
      out->valid |= GS_TM_CLOCKS;
      out->sm_clock_mhz = sm;
      out->memory_clock_mhz = mem;
    }
    if (nvml.pcie_gen(d->nvml, &gen) == GS_NVML_SUCCESS &&
        nvml.pcie_width(d->nvml, &width) == GS_NVML_SUCCESS &&
        nvml.pcie_max_width(d->nvml, &max_width) == GS_NVML_SUCCESS) {
      out->valid |= GS_TM_PCIE;
      out->pcie_generation = (int)gen;
      out->pcie_width = (int)width;
      out->pcie_max_width = (int)max_width;
    }
    unsigned long long corrected, uncorrected; /* not supported without ECC memory */
    if (nvml.ecc_errors(d->nvml, GS_NVML_ECC_CORRECTED, GS_NVML_VOLATILE_ECC, &corrected) ==
            GS_NVML_SUCCESS &&
        nvml.ecc_errors(d->nvml, GS_NVML_ECC_UNCORRECTED, GS_NVML_VOLATILE_ECC, &uncorrected) ==
            GS_NVML_SUCCESS) {
      out->valid |= GS_TM_ECC;
      out->ecc_corrected = corrected;
      out->ecc_uncorrected = uncorrected;
    }
    judge_health(d, out);
    return GS_OK;
  }
  /* Without NVML: memory from the driver, nothing else. */
  size_t free_b = 0, total_b = 0;
  if (use(d) == 0 && cu.cuMemGetInfo(&free_b, &total_b) == CUDA_SUCCESS) {
    out->valid |= GS_TM_MEMORY;
    out->memory_total_bytes = total_b;
    out->memory_free_bytes = free_b;
    out->memory_used_bytes = total_b - free_b;
  }
  return GS_OK;
}

static int cu_processes(gs_device_t *device, gs_process_info *out, int max, int *count) {
  cu_device *d = gs__device_ctx(device);
  if (!d->nvml)
    return gs_error(GS_ENOTSUP, "%s: NVML is not available to list processes",
                    gs_device_get_info(device)->id);
  gs_nvml_process few[64], *procs = few;
  unsigned int n = 64;
  gs_nvml_return r = nvml.processes(d->nvml, &n, procs);
  if (r == GS_NVML_ERROR_INSUFFICIENT_SIZE) { /* n says how many there are: room for more */
    n += 16;
    if (!(procs = malloc(n * sizeof *procs)))
      return gs_error(GS_ENOMEM, "out of memory listing processes");
    r = nvml.processes(d->nvml, &n, procs);
  }
  if (r != GS_NVML_SUCCESS) {
    if (procs != few)
      free(procs);
    return gs_error(GS_EDEVICE, "%s: listing processes: %s", gs_device_get_info(device)->id,
                    nvml.error_string(r));
  }
  *count = (int)n;
  for (int i = 0; i < (int)n && i < max; i++) {
    out[i] = (gs_process_info){.pid = (int)procs[i].pid};
    out[i].memory_used_bytes = procs[i].used_gpu_memory == ~0ULL ? 0 : procs[i].used_gpu_memory;
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/comm", procs[i].pid);
    FILE *f = fopen(path, "r");
    if (f) {
      if (fgets(out[i].name, sizeof out[i].name, f))
        out[i].name[strcspn(out[i].name, "\n")] = '\0';
      fclose(f);
    }
  }
  if (procs != few)
    free(procs);
  return GS_OK;
}

/* ---- devices -------------------------------------------------------------------------------------- */

static void release_device(cu_device *d) {
  if ((d->module || d->module64) && use(d) == 0) {
    if (d->module)
      cu.cuModuleUnload(d->module);
    if (d->module64)
      cu.cuModuleUnload(d->module64);
  }
  if (d->ctx)
    cu.cuDevicePrimaryCtxRelease(d->dev);
  free(d);
}

static int attribute(CUdevice dev, CUdevice_attribute a) {
  int v = 0;
  cu.cuDeviceGetAttribute(&v, a, dev);
  return v;
}

static int add_device(gs_backend_t *backend, int ordinal) {
  cu_device *d = calloc(1, sizeof *d);
  if (!d)
    return gs_error(GS_ENOMEM, "out of memory");
  gs_device_info info = {.type = GS_DEVICE_GPU};
  CUresult r = cu.cuDeviceGet(&d->dev, ordinal);
  if (r == CUDA_SUCCESS)
    r = cu.cuDeviceGetName(info.name, (int)sizeof info.name - 1, d->dev);
  size_t total = 0;
  if (r == CUDA_SUCCESS)
    r = cu.cuDeviceTotalMem(&total, d->dev);
  if (r == CUDA_SUCCESS)
    r = cu.cuDeviceGetPCIBusId(d->pci_bus_id, (int)sizeof d->pci_bus_id, d->dev);
  if (r == CUDA_SUCCESS)
    r = cu.cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
  if (r != CUDA_SUCCESS) {
    int rc = gs__cu_fail(r, "device setup");
    release_device(d);
    return rc;
  }
  info.memory_total_bytes = total;
  info.compute_units = attribute(d->dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  CUuuid uuid;
  if (cu.cuDeviceGetUuid(&uuid, d->dev) == CUDA_SUCCESS)
    gs__format_uuid((const unsigned char *)uuid.bytes, "GPU-", info.uuid, sizeof info.uuid);
  /* The driver writes "0000:3b:00.0"; nvidia-smi, an 8-digit domain in capitals. */
  unsigned domain, bus, slot, function;
  if (sscanf(d->pci_bus_id, "%x:%x:%x.%x", &domain, &bus, &slot, &function) == 4)
    snprintf(info.pci_bus_id, sizeof info.pci_bus_id, "%08X:%02X:%02X.%X", domain, bus, slot,
             function);
  int minor = gs_nvidia_minor(info.pci_bus_id);
  if (minor >= 0)
    snprintf(info.dev_node, sizeof info.dev_node, "/dev/nvidia%d", minor);
  int rc = use(d);
  if (rc == 0 && (r = cu.cuModuleLoadData(&d->module, gs_cuda_kernels_fatbin)) != CUDA_SUCCESS)
    rc = gs__cu_fail(r, "loading the kernels (is this GPU older than sm_80?)");
  if (rc == 0 && (r = cu.cuModuleLoadData(&d->module64, gs_cuda_kernels64_fatbin)) != CUDA_SUCCESS) {
    /* float64 then runs on the CPU; the device keeps its float32 kernels */
    GS_LOGW("cuda", "%s: the float64 kernels did not load (%d): float64 runs on the CPU",
            info.name, (int)r);
    d->module64 = NULL;
    gs__cuda_every_device_fp64 = false;
  }
  if (rc == 0 && (r = cu.cuModuleGetFunction(&d->axpy, d->module, "axpy_f32")) != CUDA_SUCCESS)
    rc = gs__cu_fail(r, "cuModuleGetFunction(axpy_f32)");
  if (rc == 0)
    rc = gs__cuda_find_op_functions(d);
  if (rc == 0 && have_nvml && nvml.by_pci_bus_id(d->pci_bus_id, &d->nvml) != GS_NVML_SUCCESS)
    d->nvml = NULL; /* telemetry then says "not available" */
  gs_device_caps caps = {
      .host_visible_device_memory = false,
      .pinned_host_locked = true, /* cuMemHostAlloc: page-locked */
      .pinned_faster_than_pageable = true,
      .event_timing = true,
      .process_list = d->nvml != NULL,
      .inline_streams = false,
      .half_precision = true, /* float16 kernels (devops); bfloat16 runs on the CPU */
      .elementwise_in_place = true, /* op_kernels.h: element i read, then written */
      .min_alignment = 256,    /* cuMemAlloc's alignment */
  };
  gs_device_t *dev = NULL;
  if (rc == 0)
    rc = gs__backend_add_device(backend, &info, &caps, d, &dev);
  if (rc < 0) {
    release_device(d);
    return rc;
  }
  GS_LOGI("cuda", "%s: %s, %d SMs (sm_%d%d), %zu MiB, PCI %s", gs_device_get_info(dev)->id,
          info.name, info.compute_units,
          attribute(d->dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
          attribute(d->dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), total >> 20,
          d->pci_bus_id);
  return GS_OK;
}

/* Every pair of GPUs that can reach each other's memory directly (NVLink,
 * or PCIe under one switch) gets P2P for its peer copies. */
static void enable_peer_access(gs_backend_t *backend) {
  int n = gs__backend_device_count(backend);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      cu_device *a = gs__device_ctx(gs__backend_device(backend, i));
      cu_device *b = gs__device_ctx(gs__backend_device(backend, j));
      int can = 0;
      if (i == j || cu.cuDeviceCanAccessPeer(&can, a->dev, b->dev) != CUDA_SUCCESS || !can)
        continue;
      CUresult r = cu.cuCtxSetCurrent(a->ctx);
      if (r == CUDA_SUCCESS)
        r = cu.cuCtxEnablePeerAccess(b->ctx, 0);
      if (r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
        GS_LOGI("cuda", "%s reads and writes %s's memory directly (P2P)",
                gs_device_get_info(gs__backend_device(backend, i))->id,
                gs_device_get_info(gs__backend_device(backend, j))->id);
      else
        GS_LOGW("cuda", "%s -> %s: P2P not enabled: %s",
                gs_device_get_info(gs__backend_device(backend, i))->id,
                gs_device_get_info(gs__backend_device(backend, j))->id,
                gs__cu_fail(r, "cuCtxEnablePeerAccess") ? gs_error_detail() : "");
    }
}

static int cu_init(gs_backend_t *backend) {
  int rc = gs_cuda_driver_load(&cu);
  if (rc < 0)
    return rc;
  CUresult r = cu.cuInit(0);
  if (r != CUDA_SUCCESS) {
    rc = r == CUDA_ERROR_NO_DEVICE ? gs_error(GS_ENOENT, "no CUDA device (cuInit: "
                                                         "CUDA_ERROR_NO_DEVICE)")
         : r == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH || r == CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
             ? gs_error(GS_EVERSION, "the NVIDIA driver is too old for CUDA %d.%d (cuInit)",
                        CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10)
             : gs__cu_fail(r, "cuInit");
    gs_cuda_driver_unload(&cu);
    return rc;
  }
  rc = gs_nvml_load(&nvml);
  if (rc == GS_EVERSION) { /* the driver is broken until reloaded: say so, run nothing */
    gs_cuda_driver_unload(&cu);
    return rc;
  }
  have_nvml = rc == GS_OK;
  if (!have_nvml)
    GS_LOGW("cuda", "telemetry not available: %s", gs_error_detail());
  int n = 0;
  cu.cuDeviceGetCount(&n);
  int added = 0;
  for (int i = 0; i < n; i++) {
    if (add_device(backend, i) < 0) {
      GS_LOGW("cuda", "device %d skipped: %s", i, gs_error_detail());
      continue;
    }
    added++;
  }
  if (added == 0) {
    rc = gs_error(GS_ENOENT, n == 0 ? "no CUDA device" : "no usable CUDA device (of %d)", n);
    if (have_nvml)
      gs_nvml_unload(&nvml);
    gs_cuda_driver_unload(&cu);
    return rc;
  }
  gs__have_cublas = gs_cublas_load(&gs__cublas) == GS_OK;
  if (!gs__have_cublas)
    GS_LOGW("cuda", "no cuBLAS, GEMM by a plain kernel, much slower: %s", gs_error_detail());
  gs__have_cufft = gs_cufft_load(&gs__cufft) == GS_OK;
  if (!gs__have_cufft)
    GS_LOGW("cuda", "no cuFFT, DFT and STFT run on the CPU: %s", gs_error_detail());
  if (have_nvml)
    watch_xids(backend);
  enable_peer_access(backend);
  rc = gs__backend_register_kernel(backend, "axpy_f32", &axpy_kernel);
  return rc < 0 ? rc : gs__cuda_register_ops(backend);
}

static void cu_shutdown(gs_backend_t *backend) {
  for (int i = 0; i < gs__backend_device_count(backend); i++)
    release_device(gs__device_ctx(gs__backend_device(backend, i)));
  gs__cu_groups_shutdown();
  if (xid_events)
    nvml.event_set_free(xid_events);
  xid_events = NULL;
  if (have_nvml)
    gs_nvml_unload(&nvml);
  if (gs__have_cublas)
    gs_cublas_unload(&gs__cublas);
  if (gs__have_cufft)
    gs_cufft_unload(&gs__cufft);
  gs_cuda_driver_unload(&cu);
}

static const gs_backend_iface iface = {
    .name = "cuda",
    .init = cu_init,
    .shutdown = cu_shutdown,
    .segment_alloc = cu_segment_alloc,
    .segment_free = cu_segment_free,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .stream_copy = cu_stream_copy,
    .stream_memset = cu_stream_memset,
    .stream_launch = cu_stream_launch,
    .stream_host_func = cu_host_func,
    .stream_synchronize = cu_synchronize,
    .stream_mark = cu_mark,
    .stream_passed = cu_passed,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .stream_wait_event = cu_wait_event,
    .event_synchronize = cu_event_synchronize,
    .event_query = cu_event_query,
    .event_elapsed_ns = cu_elapsed,
    .device_telemetry = cu_telemetry,
    .device_processes = cu_processes,
    .kernel_supports = cu_kernel_supports,
    .stream_copy_peer = cu_copy_peer,
    .group_create = gs__cu_group_create,
    .group_destroy = gs__cu_group_destroy,
    .group_all_reduce_sum_f32 = gs__cu_group_all_reduce_sum_f32,
    .group_broadcast = gs__cu_group_broadcast,
};

int gs_plugin_init(const gs_backend_iface **out) {
  *out = &iface;
  return GS_OK;
}

/* opencl_backend.c - the OpenCL backend, a plugin (gpusrv-opencl.so): every
 * device of every platform the ICD loader finds; device memory as cl_mem
 * segments that the HAL's caching pools sub-allocate; pinned host memory as
 * CL_MEM_ALLOC_HOST_PTR buffers mapped once; streams as the HAL's worker
 * streams (cpu_stream.c) that drive one in-order command queue each, so that
 * host functions, events and stream-ordered reuse behave exactly as on the
 * CPU; kernels in OpenCL C (kernels.cl, embedded at build time) built once
 * per device at start (hal/devops' kernels with them). Telemetry: memory
 * only (size, and this process's use). */
#include "hal/opencl/opencl_internal.h"
#ifdef GS_HAVE_VKFFT
#include "hal/opencl/opencl_fft.h"
#endif

#include "base/clock.h"
#include "base/log.h"
#include "opencl_kernels.h" /* generated from kernels.cl: gs_opencl_kernels_source */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const uint32_t gs_plugin_api_version = GS_HAL_API_VERSION;

#define MAX_DEVICES 16

static const char *cl_error_name(cl_int e) {
  switch (e) {
  case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
  case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
  case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
  case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
  case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
  case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
  case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
  case CL_INVALID_MEM_OBJECT: return "CL_INVALID_MEM_OBJECT";
  case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
  case -1001: return "CL_PLATFORM_NOT_FOUND_KHR (no OpenCL driver installed)";
  default: return "an OpenCL error";
  }
}

int gs__ocl_fail(cl_int e, const char *what) {
  int code = e == CL_OUT_OF_RESOURCES || e == CL_OUT_OF_HOST_MEMORY ||
                     e == CL_MEM_OBJECT_ALLOCATION_FAILURE
                 ? GS_ENOMEM
                 : GS_EDEVICE;
  return gs_error(code, "%s: %s (%d)", what, cl_error_name(e), (int)e);
}

/* ---- memory --------------------------------------------------------------------------- */

static int ocl_segment_alloc(gs_device_t *device, gs_mem_kind kind, size_t size, gs_segment *out) {
  ocl_device *d = gs__device_ctx(device);
  cl_int err;
  cl_mem_flags flags = CL_MEM_READ_WRITE | (kind == GS_MEM_PINNED_HOST ? CL_MEM_ALLOC_HOST_PTR : 0);
  if (size > d->max_alloc)
    return gs_error(GS_ENOMEM, "%s: %zu bytes in one allocation; the device allows %zu",
                    gs_device_get_info(device)->id, size, d->max_alloc);
  cl_mem mem = clCreateBuffer(d->ctx, flags, size, NULL, &err);
  if (!mem)
    return gs__ocl_fail(err, "clCreateBuffer");
  out->native = mem;
  out->host_ptr = NULL;
  out->size = size;
  if (kind == GS_MEM_PINNED_HOST) {
    /* Mapped for good: pinned buffers are host memory to the HAL. */
    void *p = clEnqueueMapBuffer(d->admin, mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, size, 0,
                                 NULL, NULL, &err);
    if (!p) {
      clReleaseMemObject(mem);
      return gs__ocl_fail(err, "clEnqueueMapBuffer");
    }
    out->host_ptr = p;
  } else {
    d->device_bytes += size;
  }
  return GS_OK;
}

static void ocl_segment_free(gs_device_t *device, gs_mem_kind kind, gs_segment *seg) {
  ocl_device *d = gs__device_ctx(device);
  (void)kind;
  if (seg->host_ptr) {
    clEnqueueUnmapMemObject(d->admin, seg->native, seg->host_ptr, 0, NULL, NULL);
    clFinish(d->admin);
  } else {
    d->device_bytes -= seg->size;
  }
  clReleaseMemObject(seg->native);
}

/* Host address of a buffer that lives in host memory (pinned), else NULL. */
static void *host_side(gs_buffer_t *b, size_t offset) {
  return b && b->segment->host_ptr ? (char *)b->segment->host_ptr + b->offset + offset : NULL;
}

/* ---- streams: operations run by the worker --------------------------------------------- */

typedef struct copy_op {
  ocl_stream *s;
  cl_mem dst, src;         /* device sides (NULL: host) */
  size_t dst_off, src_off; /* within the cl_mem */
  void *dst_host;
  const void *src_host;
  size_t bytes;
} copy_op;

static int run_copy(void *arg) {
  copy_op *c = arg;
  cl_int err = CL_SUCCESS;
  if (c->bytes == 0)
    return GS_OK;
  if (!c->dst && !c->src) {
    memmove(c->dst_host, c->src_host, c->bytes);
    return GS_OK;
  }
  if (c->dst && c->src)
    err = clEnqueueCopyBuffer(c->s->queue, c->src, c->dst, c->src_off, c->dst_off, c->bytes, 0,
                              NULL, NULL);
  else if (c->dst)
    err = clEnqueueWriteBuffer(c->s->queue, c->dst, CL_FALSE, c->dst_off, c->bytes, c->src_host,
                               0, NULL, NULL);
  else
    err = clEnqueueReadBuffer(c->s->queue, c->src, CL_FALSE, c->src_off, c->bytes, c->dst_host, 0,
                              NULL, NULL);
  if (err == CL_SUCCESS)
    err = clFinish(c->s->queue);
  return err == CL_SUCCESS ? GS_OK : gs__ocl_fail(err, "copy");
}

static int ocl_stream_copy(void *stream, gs_buffer_t *dst, size_t dst_offset, void *dst_host,
                           gs_buffer_t *src, size_t src_offset, const void *src_host,
                           size_t bytes) {
  ocl_stream *s = stream;
  copy_op *c = calloc(1, sizeof *c);
  if (!c)
    return gs_error(GS_ENOMEM, "out of memory queueing a copy");
  *c = (copy_op){.s = s, .bytes = bytes, .dst_host = dst_host, .src_host = src_host};
  if (dst && !(c->dst_host = host_side(dst, dst_offset))) {
    c->dst = dst->segment->native;
    c->dst_off = dst->offset + dst_offset;
  }
  if (src && !(c->src_host = host_side(src, src_offset))) {
    c->src = src->segment->native;
    c->src_off = src->offset + src_offset;
  }
  return gs__cpu_stream_call(s->worker, run_copy, c);
}

typedef struct fill_op {
  ocl_stream *s;
  cl_mem mem;
  void *host;
  size_t offset, bytes;
  uint8_t value;
} fill_op;

static int run_fill(void *arg) {
  fill_op *f = arg;
  if (f->bytes == 0)
    return GS_OK;
  if (f->host) {
    memset(f->host, f->value, f->bytes);
    return GS_OK;
  }
  cl_int err = clEnqueueFillBuffer(f->s->queue, f->mem, &f->value, 1, f->offset, f->bytes, 0,
                                   NULL, NULL);
  if (err == CL_SUCCESS)
    err = clFinish(f->s->queue);
  return err == CL_SUCCESS ? GS_OK : gs__ocl_fail(err, "clEnqueueFillBuffer");
}

static int ocl_stream_memset(void *stream, gs_buffer_t *dst, size_t offset, uint8_t value,
                             size_t bytes) {
  ocl_stream *s = stream;
  fill_op *f = calloc(1, sizeof *f);
  if (!f)
    return gs_error(GS_ENOMEM, "out of memory queueing a memset");
  *f = (fill_op){.s = s, .value = value, .bytes = bytes, .host = host_side(dst, offset)};
  if (!f->host) {
    f->mem = dst->segment->native;
    f->offset = dst->offset + offset;
  }
  return gs__cpu_stream_call(s->worker, run_fill, f);
}

/* ---- kernels ----------------------------------------------------------------------------- */

static int run_launch(void *arg) {
  launch_op *l = arg;
  return l->k->run(l);
}

static int ocl_stream_launch(void *stream, const void *kernel, const gs_kernel_args *args) {
  ocl_stream *s = stream;
  launch_op *l = calloc(1, sizeof *l);
  if (!l)
    return gs_error(GS_ENOMEM, "out of memory queueing a kernel");
  l->s = s;
  l->k = kernel;
  l->n = args->buffer_count;
  if (args->params_size > sizeof l->params) {
    free(l);
    return gs_error(GS_EINVAL, "kernel parameters of %zu bytes", args->params_size);
  }
  for (int i = 0; i < args->buffer_count; i++) {
    gs_buffer_t *b = args->buffers[i];
    if (!b)
      continue;
    operand *o = &l->ops[i];
    o->present = true;
    o->bytes = b->requested - args->offsets[i];
    if ((o->host = host_side(b, args->offsets[i])) == NULL) {
      o->mem = b->segment->native;
      o->offset = b->offset + args->offsets[i];
    }
  }
  l->params_size = args->params_size;
  if (args->params_size)
    memcpy(l->params, args->params, args->params_size);
  return gs__cpu_stream_call(s->worker, run_launch, l);
}

/* y += alpha * x: the HAL's test kernel. Device buffers only. */
static int run_axpy(const launch_op *l) {
  if (l->n != 2 || l->params_size != sizeof(gs_axpy_params) || !l->ops[0].present ||
      !l->ops[1].present)
    return gs_error(GS_EINVAL, "axpy_f32: expects 2 buffers and gs_axpy_params");
  gs_axpy_params p;
  memcpy(&p, l->params, sizeof p);
  const operand *xo_ = &l->ops[0], *yo_ = &l->ops[1];
  if (p.n > xo_->bytes / sizeof(float) || p.n > yo_->bytes / sizeof(float))
    return gs_error(GS_EINVAL, "axpy_f32: n = %llu floats exceeds a buffer (%zu and %zu bytes)",
                    (unsigned long long)p.n, xo_->bytes, yo_->bytes);
  if (!xo_->mem || !yo_->mem)
    return gs_error(GS_EINVAL, "axpy_f32: operands must be device buffers");
  if (xo_->offset % sizeof(float) || yo_->offset % sizeof(float))
    return gs_error(GS_EINVAL, "axpy_f32: operands must start at a multiple of 4 bytes");
  if (p.n == 0)
    return GS_OK;
  ocl_stream *s = l->s;
  ocl_device *d = s->dev;
  cl_mem x = xo_->mem, y = yo_->mem;
  cl_ulong xo = xo_->offset / sizeof(float), yo = yo_->offset / sizeof(float), n = p.n;
  cl_float alpha = p.alpha;
  /* One kernel object per device: arguments and enqueue under its lock. */
  pthread_mutex_lock(&d->kernel_lock);
  cl_int err = clSetKernelArg(d->axpy, 0, sizeof x, &x);
  err |= clSetKernelArg(d->axpy, 1, sizeof xo, &xo);
  err |= clSetKernelArg(d->axpy, 2, sizeof y, &y);
  err |= clSetKernelArg(d->axpy, 3, sizeof yo, &yo);
  err |= clSetKernelArg(d->axpy, 4, sizeof n, &n);
  err |= clSetKernelArg(d->axpy, 5, sizeof alpha, &alpha);
  size_t global = (size_t)n;
  if (err == CL_SUCCESS)
    err = clEnqueueNDRangeKernel(s->queue, d->axpy, 1, NULL, &global, NULL, 0, NULL, NULL);
  pthread_mutex_unlock(&d->kernel_lock);
  return err == CL_SUCCESS ? GS_OK : gs__ocl_fail(err, "axpy_f32");
}

static const ocl_kernel axpy_kernel = {"axpy_f32", NULL, NULL, run_axpy};

static bool ocl_kernel_supports(const void *kernel, const void *params, size_t params_size) {
  const ocl_kernel *k = kernel;
  return !k->supports || k->supports(k, params, params_size);
}

/* ---- streams and events: the worker streams' own ------------------------------------------------ */

/* A stream's kernel status (devops.h) as it starts, and after each failure is read. */
static const cl_long status_zeros[4] = {0};

static int ocl_stream_create(gs_device_t *device, unsigned flags, void **out) {
  (void)flags; /* no inline execution: the device is not the host */
  ocl_stream *s = calloc(1, sizeof *s);
  if (!s)
    return gs_error(GS_ENOMEM, "out of memory creating a stream");
  s->dev = gs__device_ctx(device);
  cl_int err;
  s->queue = clCreateCommandQueue(s->dev->ctx, s->dev->id, 0, &err);
  if (!s->queue) {
    free(s);
    return gs__ocl_fail(err, "clCreateCommandQueue");
  }
  s->status = clCreateBuffer(s->dev->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                             sizeof status_zeros, (void *)status_zeros, &err);
  int rc = s->status ? gs__cpu_stream_create(device, 0, &s->worker)
                     : gs__ocl_fail(err, "clCreateBuffer(status)");
  if (rc < 0) {
    if (s->status)
      clReleaseMemObject(s->status);
    clReleaseCommandQueue(s->queue);
    free(s);
    return rc;
  }
  *out = s;
  return GS_OK;
}

static void ocl_stream_destroy(void *stream) {
  ocl_stream *s = stream;
  gs__cpu_stream_destroy(s->worker);
  clFinish(s->queue);
  clReleaseMemObject(s->status);
  if (s->scratch)
    clReleaseMemObject(s->scratch);
  clReleaseCommandQueue(s->queue);
  free(s);
}

/* Kernels are queued without waiting (the queue is in order; copies wait
 * for it to drain, as they end with clFinish). What the HAL promises about
 * everything queued before - a host function runs after it, a recorded
 * event or a stream mark is passed after it, synchronize returns after it -
 * needs the device done too: these go behind a drain of the queue. */
static int drain(void *arg) {
  ocl_stream *s = arg;
  cl_int err = clFinish(s->queue);
  if (err != CL_SUCCESS)
    return gs__ocl_fail(err, "a kernel queued earlier");
  if (!s->tags.armed)
    return GS_OK;
  /* A kernel that can fail ran since the last drain: did it? */
  gs_devops_status st;
  err = clEnqueueReadBuffer(s->queue, s->status, CL_TRUE, 0, sizeof st, &st, 0, NULL, NULL);
  if (err != CL_SUCCESS)
    return gs__ocl_fail(err, "reading the kernels' status");
  if (st.code) {
    err = clEnqueueWriteBuffer(s->queue, s->status, CL_TRUE, 0, sizeof status_zeros,
                               status_zeros, 0, NULL, NULL);
    if (err != CL_SUCCESS)
      return gs__ocl_fail(err, "clearing the kernels' status");
  }
  return gs_devops_tags_error(&s->tags, &st);
}

static int queue_drain(ocl_stream *s) { return gs__cpu_stream_host_func(s->worker, drain, s); }

static int ocl_host_func(void *stream, gs_host_fn fn, void *arg) {
  ocl_stream *s = stream;
  int rc = queue_drain(s);
  return rc < 0 ? rc : gs__cpu_stream_host_func(s->worker, fn, arg);
}
static int ocl_synchronize(void *stream) {
  ocl_stream *s = stream;
  int rc = queue_drain(s);
  int sync = gs__cpu_stream_synchronize(s->worker);
  return rc < 0 ? rc : sync;
}
static int ocl_mark(void *stream, uint64_t *ticket) {
  ocl_stream *s = stream;
  int rc = queue_drain(s); /* memory freed now is reusable once the device is past it */
  return rc < 0 ? rc : gs__cpu_stream_mark(s->worker, ticket);
}
static int ocl_passed(void *stream, uint64_t ticket) {
  return gs__cpu_stream_passed(((ocl_stream *)stream)->worker, ticket);
}
static int ocl_event_record(void *event, void *stream) {
  ocl_stream *s = stream;
  int rc = queue_drain(s);
  return rc < 0 ? rc : gs__cpu_event_record(event, s->worker);
}
static int ocl_wait_event(void *stream, void *event) {
  return gs__cpu_stream_wait_event(((ocl_stream *)stream)->worker, event);
}

/* ---- devices ---------------------------------------------------------------------------------- */

/* The float64 program: the same source, its `real` double (op_kernels.h). */
static int build_program64(ocl_device *d, const char *dev_name) {
  static const char prefix[] = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
                               "#define GS_REAL_F64 1\n";
  size_t n = strlen(gs_opencl_kernels_source);
  char *source = malloc(sizeof prefix + n);
  if (!source)
    return gs_error(GS_ENOMEM, "out of memory");
  memcpy(source, prefix, sizeof prefix - 1);
  memcpy(source + sizeof prefix - 1, gs_opencl_kernels_source, n + 1);
  int rc = gs__ocl_build_program(d, dev_name, source, &d->program64);
  free(source);
  return rc;
}

/* The kernels; the float64 program where fp64 is set and it builds (a
 * driver that names cl_khr_fp64 but cannot build it loses float64 only:
 * *fp64 is cleared). */
static int build_kernels(ocl_device *d, const char *dev_name, bool *fp64) {
  cl_int err;
  int rc = gs__ocl_build_program(d, dev_name, gs_opencl_kernels_source, &d->program);
  if (rc == 0 && *fp64 && build_program64(d, dev_name) < 0) {
    GS_LOGW("opencl", "%s: no float64 kernels, float64 runs on the CPU: %s", dev_name,
            gs_error_detail());
    *fp64 = false;
  }
  if (rc < 0)
    return rc;
  d->axpy = clCreateKernel(d->program, "axpy_f32", &err);
  if (!d->axpy)
    return gs__ocl_fail(err, "clCreateKernel(axpy_f32)");
  return gs__ocl_create_op_kernels(d);
}

static void release_device(ocl_device *d) {
#ifdef GS_HAVE_VKFFT
  gs__ocl_fft_release(d);
#endif
  gs__ocl_release_op_kernels(d);
  if (d->axpy)
    clReleaseKernel(d->axpy);
  if (d->program)
    clReleaseProgram(d->program);
  if (d->program64)
    clReleaseProgram(d->program64);
  if (d->admin)
    clReleaseCommandQueue(d->admin);
  if (d->ctx)
    clReleaseContext(d->ctx);
  pthread_mutex_destroy(&d->kernel_lock);
  free(d);
}

static int add_device(gs_backend_t *backend, cl_device_id id) {
  ocl_device *d = calloc(1, sizeof *d);
  if (!d)
    return gs_error(GS_ENOMEM, "out of memory");
  pthread_mutex_init(&d->kernel_lock, NULL);
  d->id = id;
  gs_device_info info = {0};
  cl_device_type type = 0;
  cl_ulong mem = 0, max_alloc = 0;
  cl_uint units = 0, align_bits = 0;
  char ext[4096] = "";
  clGetDeviceInfo(id, CL_DEVICE_NAME, sizeof info.name - 1, info.name, NULL);
  clGetDeviceInfo(id, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  clGetDeviceInfo(id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
  clGetDeviceInfo(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
  d->max_alloc = max_alloc ? (size_t)max_alloc : (size_t)mem;
  /* A work-group per long row where items are many and cheap (GPUs); on a
   * CPU device an item per row is faster (measured on PoCL), unless
   * GPUSRV_ROW_GROUPS=1 asks otherwise (the tests run both). */
  const char *row_groups = getenv("GPUSRV_ROW_GROUPS");
  d->row_groups = row_groups ? strcmp(row_groups, "1") == 0 : !(type & CL_DEVICE_TYPE_CPU);
  clGetDeviceInfo(id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
  clGetDeviceInfo(id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, NULL);
  clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, NULL);
  info.type = type & CL_DEVICE_TYPE_GPU ? GS_DEVICE_GPU
              : type & CL_DEVICE_TYPE_CPU ? GS_DEVICE_CPU
                                          : GS_DEVICE_ACCELERATOR;
  info.compute_units = (int)units;
  info.memory_total_bytes = mem;
  unsigned char uuid[16];
  if (strstr(ext, "cl_khr_device_uuid") &&
      clGetDeviceInfo(id, CL_DEVICE_UUID_KHR, sizeof uuid, uuid, NULL) == CL_SUCCESS)
    gs__format_uuid(uuid, "", info.uuid, sizeof info.uuid);
  cl_int err;
  d->ctx = clCreateContext(NULL, 1, &id, NULL, NULL, &err);
  int rc = d->ctx ? GS_OK : gs__ocl_fail(err, "clCreateContext");
  if (rc == 0 && !(d->admin = clCreateCommandQueue(d->ctx, id, 0, &err)))
    rc = gs__ocl_fail(err, "clCreateCommandQueue");
  /* GPUSRV_OPENCL_FP64=0 leaves float64 to the CPU, as on a device without fp64. */
  const char *fp64_env = getenv("GPUSRV_OPENCL_FP64");
  bool fp64 = strstr(ext, "cl_khr_fp64") && !(fp64_env && strcmp(fp64_env, "0") == 0);
  if (rc == 0)
    rc = build_kernels(d, info.name, &fp64);
  if (rc == 0 && !fp64)
    gs__ocl_every_device_fp64 = false;
  if (rc == 0 && (type & CL_DEVICE_TYPE_CPU))
    gs__ocl_fft_max_bytes = GS_OCL_CPU_FFT_MAX_BYTES;
#ifdef GS_HAVE_VKFFT
  if (rc == 0)
    rc = gs__ocl_fft_init(d);
#endif
  d->align = align_bits >= 8 ? align_bits / 8 : 128;
  gs_device_caps caps = {
      .host_visible_device_memory = false, /* a cl_mem is not a host address */
      /* CL_MEM_ALLOC_HOST_PTR is page-locked by GPU drivers; a CPU device's
       * is ordinary memory. */
      .pinned_host_locked = info.type != GS_DEVICE_CPU,
      .pinned_faster_than_pageable = info.type == GS_DEVICE_GPU,
      .event_timing = true,
      .process_list = false,
      .inline_streams = false,
      .half_precision = true, /* float16 kernels (devops); bfloat16 runs on the CPU */
      .elementwise_in_place = true, /* op_kernels.h: element i read, then written */
      .min_alignment = d->align < 64 ? 64 : d->align,
  };
  gs_device_t *dev = NULL;
  if (rc == 0)
    rc = gs__backend_add_device(backend, &info, &caps, d, &dev);
  if (rc < 0) {
    release_device(d);
    return rc;
  }
  size_t max_group = 0;
  clGetDeviceInfo(id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_group, &max_group, NULL);
  GS_LOGI("opencl", "%s: %s (%s), %u compute units, %llu MiB, work groups up to %zu, "
          "fp16 arithmetic %s (float16 tensors either way), float64 kernels %s",
          gs_device_get_info(dev)->id, info.name,
          info.type == GS_DEVICE_GPU ? "GPU" : info.type == GS_DEVICE_CPU ? "CPU" : "accelerator",
          units, (unsigned long long)(mem >> 20), max_group,
          strstr(ext, "cl_khr_fp16") ? "yes" : "no", fp64 ? "yes" : "no (on the CPU)");
  return GS_OK;
}

static int ocl_init(gs_backend_t *backend) {
  cl_uint n_platforms = 0;
  cl_platform_id platforms[8];
  cl_int err = clGetPlatformIDs(8, platforms, &n_platforms);
  if (err != CL_SUCCESS || n_platforms == 0)
    return gs_error(GS_ENOENT, "no OpenCL platform: %s",
                    err == CL_SUCCESS ? "the ICD loader lists none (install an OpenCL driver, "
                                        "such as pocl-opencl-icd)"
                                      : cl_error_name(err));
  int added = 0;
  for (cl_uint p = 0; p < n_platforms && p < 8; p++) {
    cl_device_id ids[MAX_DEVICES];
    cl_uint n = 0;
    if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, ids, &n) != CL_SUCCESS)
      continue;
    for (cl_uint i = 0; i < n && i < MAX_DEVICES; i++) {
      if (add_device(backend, ids[i]) < 0) {
        GS_LOGW("opencl", "device skipped: %s", gs_error_detail());
        continue;
      }
      added++;
    }
  }
  if (added == 0)
    return gs_error(GS_ENOENT, "no usable OpenCL device");
  int rc = gs__backend_register_kernel(backend, "axpy_f32", &axpy_kernel);
  return rc < 0 ? rc : gs__ocl_register_ops(backend);
}

static void ocl_shutdown(gs_backend_t *backend) {
  for (int i = 0; i < gs__backend_device_count(backend); i++)
    release_device(gs__device_ctx(gs__backend_device(backend, i)));
}

/* OpenCL tells a device's memory size and nothing of its use: "used" is
 * what this process's pools hold on it, "free" the rest (other processes'
 * use is not seen). Utilization, temperature, power and the others: not
 * available. */
static int ocl_telemetry(gs_device_t *device, gs_telemetry *out) {
  ocl_device *d = gs__device_ctx(device);
  memset(out, 0, sizeof *out);
  out->valid = GS_TM_MEMORY;
  out->memory_total_bytes = gs_device_get_info(device)->memory_total_bytes;
  uint64_t used = d->device_bytes;
  out->memory_used_bytes = used;
  out->memory_free_bytes = used < out->memory_total_bytes ? out->memory_total_bytes - used : 0;
  return GS_OK;
}

static const gs_backend_iface iface = {
    .name = "opencl",
    .init = ocl_init,
    .shutdown = ocl_shutdown,
    .segment_alloc = ocl_segment_alloc,
    .segment_free = ocl_segment_free,
    .stream_create = ocl_stream_create,
    .stream_destroy = ocl_stream_destroy,
    .stream_copy = ocl_stream_copy,
    .stream_memset = ocl_stream_memset,
    .stream_launch = ocl_stream_launch,
    .stream_host_func = ocl_host_func,
    .stream_synchronize = ocl_synchronize,
    .stream_mark = ocl_mark,
    .stream_passed = ocl_passed,
    .event_create = gs__cpu_event_create,
    .event_destroy = gs__cpu_event_destroy,
    .event_record = ocl_event_record,
    .stream_wait_event = ocl_wait_event,
    .event_synchronize = gs__cpu_event_synchronize,
    .event_query = gs__cpu_event_query,
    .event_elapsed_ns = gs__cpu_event_elapsed_ns,
    .device_telemetry = ocl_telemetry,
    .kernel_supports = ocl_kernel_supports,
};

int gs_plugin_init(const gs_backend_iface **out) {
  *out = &iface;
  return GS_OK;
}

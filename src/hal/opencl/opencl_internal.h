/* opencl_internal.h - what the OpenCL plugin's files share: devices,
 * streams, a launch with its operands resolved, and the kernels. */
#ifndef GS_HAL_OPENCL_INTERNAL_H
#define GS_HAL_OPENCL_INTERNAL_H

#define CL_TARGET_OPENCL_VERSION 120
#include "hal/cpu/cpu_internal.h"
#include "hal/devops/devops.h"

#include <CL/cl.h>
#include <CL/cl_ext.h> /* cl_khr_device_uuid */

typedef struct ocl_device {
  cl_device_id id;
  cl_context ctx;
  cl_command_queue admin; /* for mapping pinned memory */
  cl_program program;
  /* The same source built with GS_REAL_F64 (its float kernels in float64),
   * where the device has cl_khr_fp64; else NULL. */
  cl_program program64;
  /* Kernel objects, one per function: arguments set and the launch queued
   * under kernel_lock. */
  cl_kernel axpy;
  cl_kernel ops[GS_DK_COUNT];   /* the engine's ops (devops.h) */
  cl_kernel ops64[GS_DK_COUNT]; /* from program64, for launches with float64 operands */
  pthread_mutex_t kernel_lock;
  size_t align;
  size_t max_alloc; /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
  bool row_groups;  /* devops' *_rows kernels: GPUs, or GPUSRV_ROW_GROUPS=1 */
  bool groups_fit;  /* the device runs those kernels in groups of GS_DK_GROUP */
  bool groups_fit64; /* and those of program64 */
  _Atomic uint64_t device_bytes; /* device memory this process holds (segments) */
  struct ocl_fft_plans *fft;      /* VkFFT's plans (opencl_fft.c), each made on first use */
} ocl_device;

/* How many FFT plans (sizes) a device keeps. */
#define GS_OCL_FFT_PLANS 8

typedef struct ocl_stream {
  void *worker; /* the HAL worker stream that runs our operations in order */
  cl_command_queue queue;
  ocl_device *dev;
  /* Kernels that can fail write here (devops.h); read at the next drain.
   * Used on the worker thread only. */
  cl_mem status;
  gs_devops_tags tags;
  cl_mem scratch;                  /* devops' scratch (im2col), grown on demand */
  size_t scratch_bytes;
} ocl_stream;

/* A launch's operands, resolved when it is queued (the caller may free a
 * buffer right after queueing; its memory is reused only in stream order). */
typedef struct operand {
  cl_mem mem;      /* NULL: a host (pinned) buffer, or an omitted operand */
  void *host;      /* the host address of a pinned buffer */
  size_t offset;   /* bytes from the start of mem */
  size_t bytes;    /* from offset to the end of the buffer */
  bool present;
} operand;

typedef struct launch_op {
  ocl_stream *s;
  const struct ocl_kernel *k;
  int n;
  operand ops[GS_KERNEL_MAX_BUFFERS];
  size_t params_size;
  uint8_t params[GS_KERNEL_MAX_PARAMS];
} launch_op;

/* A kernel registered for an op: which launches it runs (NULL: all), and
 * how to run one on the stream's worker. An engine op's is devops.c's
 * (dop), queued through this plugin's gs_devops_target. */
typedef struct ocl_kernel {
  const char *name;
  const gs_devop *dop;
  bool (*supports)(const struct ocl_kernel *k, const void *params, size_t params_size);
  int (*run)(const launch_op *l);
} ocl_kernel;

int gs__ocl_fail(cl_int e, const char *what);
/* The kernels' program for a device, from the on-disk binary cache when it
 * has one for this device, driver and source, else built (opencl_cache.c). */
int gs__ocl_build_program(ocl_device *d, const char *dev_name, const char *source,
                          cl_program *out);
/* Registers the engine's ops (opencl_ops.c); makes and releases their
 * kernel objects per device. */
int gs__ocl_register_ops(gs_backend_t *backend);
/* Whether every device of the backend has the float64 program: the ops'
 * `supports` answers for all of them alike (it is not told the device). */
extern bool gs__ocl_every_device_fp64;
/* The largest transform (its complex values' bytes, as VkFFT pads it) the
 * backend's devices run, alike for all of them: unlimited, or, where one is
 * a CPU device, GS_OCL_CPU_FFT_MAX_BYTES. PoCL 3.1 keeps a work-group's
 * values on its worker's stack, and VkFFT's single-pass kernel of 1 MiB
 * (65536 float64 points) overflowed it on an AVX-512 Xeon: a segfault. The
 * larger ones run on the CPU (FFTW), said in the plan's report. */
#define GS_OCL_CPU_FFT_MAX_BYTES (512u << 10)
extern uint64_t gs__ocl_fft_max_bytes;
int gs__ocl_create_op_kernels(ocl_device *d);
void gs__ocl_release_op_kernels(ocl_device *d);

#endif

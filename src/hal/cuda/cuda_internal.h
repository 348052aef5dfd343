/* cuda_internal.h - what the CUDA plugin's files share: its devices,
 * streams and kernels, the driver and cuBLAS tables, and small helpers. */
#ifndef GS_HAL_CUDA_INTERNAL_H
#define GS_HAL_CUDA_INTERNAL_H

#include "hal/cuda/cuda_blas.h"
#include "hal/cuda/cuda_fft.h"
#include "hal/cuda/cuda_driver.h"
#include "hal/cuda/nvml.h"
#include "hal/cuda/xid.h"
#include "hal/devops/devops.h"
#include "hal/hal_impl.h"

#define GS_CUDA_MARKS 64 /* recorded events per stream for stream-ordered reuse */

extern gs_cuda_driver gs__cu;
extern gs_cublas gs__cublas;
extern bool gs__have_cublas;
extern gs_cufft gs__cufft;
extern bool gs__have_cufft;

/* A cuFFT plan a stream keeps (cuda_ops.c): batch transforms of n points. */
typedef struct cu_fft_plan {
  cufftHandle handle;
  int64_t n, batch;
  bool f64, made;
  uint64_t used; /* by the stream's fft_clock */
} cu_fft_plan;
#define GS_CUDA_FFT_PLANS 4

typedef struct cu_device {
  CUdevice dev;
  CUcontext ctx;
  char pci_bus_id[32];
  gs_nvml_device nvml; /* NULL without NVML */
  gs_xid_record xids;  /* Xid errors NVML reported (under the backend's xid lock) */
  CUmodule module;
  CUmodule module64; /* the same kernels with `real` double (op_kernels.h's GS_REAL_F64) */
  CUfunction axpy;
  CUfunction ops[GS_DK_COUNT];   /* the engine's ops (devops.h) */
  CUfunction ops64[GS_DK_COUNT]; /* from module64, for launches with float64 operands */
} cu_device;

typedef struct cu_stream {
  cu_device *d;
  CUstream s;
  pthread_mutex_t lock;       /* the marks, and the cuBLAS handle's creation; never held
                               * while waiting on the device */
  pthread_mutex_t error_lock; /* error, error_detail: host functions set them */
  /* One devops op queued at a time (from any thread): they share the
   * scratch buffer and the FFT plans. May be held while the stream drains
   * (a larger scratch buffer, a plan replaced). */
  pthread_mutex_t ops_lock;
  uint64_t issued, passed; /* tickets handed out, and the last one known passed */
  struct {
    uint64_t ticket;
    CUevent ev;
  } marks[GS_CUDA_MARKS];
  int next_mark;
  int error; /* the first failure of a host function, until synchronize */
  char error_detail[256];
  cublasHandle_t blas; /* made on first use, bound to this stream */
  cu_fft_plan fft[GS_CUDA_FFT_PLANS]; /* cuFFT's, bound to this stream, the oldest replaced */
  uint64_t fft_clock;
  /* Kernels that can fail write here (devops.h); read at synchronize.
   * Under lock. */
  CUdeviceptr status;
  gs_devops_tags tags;
  CUdeviceptr scratch;              /* devops' scratch (im2col), grown on demand */
  size_t scratch_bytes;
} cu_stream;

/* A kernel registered for an op: whether it runs a launch (types, shapes),
 * and how to queue one. An engine op's is devops.c's (dop), queued through
 * this plugin's gs_devops_target. */
typedef struct cu_kernel {
  const char *name;
  const gs_devop *dop;
  bool (*supports)(const struct cu_kernel *k, const void *params, size_t params_size);
  int (*launch)(const struct cu_kernel *k, cu_stream *s, const gs_kernel_args *args);
} cu_kernel;

/* A driver failure as a GS_E code with the driver's own words. */
int gs__cu_fail(CUresult r, const char *what);
/* Where a buffer's bytes are on the device; GS_EINVAL for host (pinned) ones. */
int gs__cu_device_ptr(gs_buffer_t *b, size_t offset, CUdeviceptr *out);
/* Queues `fn` over n elements with a grid that strides over the rest. */
int gs__cu_launch_1d(cu_stream *s, CUfunction fn, unsigned long long n, void **params);

/* Collectives across GPUs through NCCL (cuda_group.c; gs_backend_iface's
 * group_*); the library is opened on the first group and closed here. */
int gs__cu_group_create(gs_device_t *const *devices, int n, void **group);
void gs__cu_group_destroy(void *group);
int gs__cu_group_all_reduce_sum_f32(void *group, void *const *streams, gs_buffer_t *const *bufs,
                                    size_t count);
int gs__cu_group_broadcast(void *group, void *const *streams, gs_buffer_t *const *bufs,
                           size_t bytes, int root);
void gs__cu_groups_shutdown(void);

/* The engine's ops on CUDA (cuda_ops.c): registers them with the backend. */
int gs__cuda_register_ops(gs_backend_t *backend);
/* Looks up the ops' functions in a device's module. */
int gs__cuda_find_op_functions(cu_device *d);
/* Whether every device loaded the float64 module: the ops' `supports`
 * answers for all of them alike (it is not told the device). */
extern bool gs__cuda_every_device_fp64;

#endif

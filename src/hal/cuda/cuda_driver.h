/* cuda_driver.h - the CUDA driver API as the plugin reaches it: through
 * dlopen("libcuda.so.1"), never by linking, so that the plugin loads (and
 * says why it cannot run) on machines without a driver. One X-macro list of
 * entry points makes both the table of function pointers and the loop that
 * looks them up. cuda.h supplies the types; its macros give the versioned
 * symbol names (cuMemAlloc is cuMemAlloc_v2), and the lookup uses them. */
#ifndef GS_HAL_CUDA_DRIVER_H
#define GS_HAL_CUDA_DRIVER_H

#include <cuda.h>

#define GS_CUDA_DRIVER_FUNCS(X)                                                              \
  X(cuInit)                                                                                  \
  X(cuDriverGetVersion)                                                                      \
  X(cuGetErrorName)                                                                          \
  X(cuGetErrorString)                                                                        \
  X(cuDeviceGetCount)                                                                        \
  X(cuDeviceGet)                                                                             \
  X(cuDeviceGetName)                                                                         \
  X(cuDeviceTotalMem)                                                                        \
  X(cuDeviceGetAttribute)                                                                    \
  X(cuDeviceGetPCIBusId)                                                                     \
  X(cuDeviceGetUuid)                                                                         \
  X(cuDeviceCanAccessPeer)                                                                   \
  X(cuDevicePrimaryCtxRetain)                                                                \
  X(cuDevicePrimaryCtxRelease)                                                               \
  X(cuCtxSetCurrent)                                                                         \
  X(cuCtxEnablePeerAccess)                                                                   \
  X(cuMemAlloc)                                                                              \
  X(cuMemFree)                                                                               \
  X(cuMemHostAlloc)                                                                          \
  X(cuMemFreeHost)                                                                           \
  X(cuMemGetInfo)                                                                            \
  X(cuMemcpyHtoDAsync)                                                                       \
  X(cuMemcpyDtoHAsync)                                                                       \
  X(cuMemcpyDtoDAsync)                                                                       \
  X(cuMemcpyPeerAsync)                                                                       \
  X(cuMemcpyDtoH)                                                                            \
  X(cuMemsetD8Async)                                                                         \
  X(cuStreamCreate)                                                                          \
  X(cuStreamDestroy)                                                                         \
  X(cuStreamSynchronize)                                                                     \
  X(cuStreamWaitEvent)                                                                       \
  X(cuLaunchHostFunc)                                                                        \
  X(cuEventCreate)                                                                           \
  X(cuEventDestroy)                                                                          \
  X(cuEventRecord)                                                                           \
  X(cuEventSynchronize)                                                                      \
  X(cuEventQuery)                                                                            \
  X(cuEventElapsedTime)                                                                      \
  X(cuModuleLoadData)                                                                        \
  X(cuModuleUnload)                                                                          \
  X(cuModuleGetFunction)                                                                     \
  X(cuLaunchKernel)

/* The driver's entry points, each a pointer of its own declared type. */
typedef struct gs_cuda_driver {
  void *library;
#define GS__CUDA_FIELD(fn) __typeof__(&fn) fn;
  GS_CUDA_DRIVER_FUNCS(GS__CUDA_FIELD)
#undef GS__CUDA_FIELD
} gs_cuda_driver;

/* Opens libcuda.so.1 and finds every entry point. GS_ENOENT (no driver) or
 * GS_EVERSION (a driver older than these headers) with the reason. */
int gs_cuda_driver_load(gs_cuda_driver *d);
void gs_cuda_driver_unload(gs_cuda_driver *d);

#endif

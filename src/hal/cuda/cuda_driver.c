/* cuda_driver.c - finds the driver's entry points (cuda_driver.h). */
#include "hal/cuda/cuda_driver.h"

#include "base/error.h"

#include <dlfcn.h>
#include <string.h>

#define GS__STR(x) #x
#define GS__NAME(x) GS__STR(x) /* after cuda.h's macros: "cuMemAlloc_v2" */

int gs_cuda_driver_load(gs_cuda_driver *d) {
  memset(d, 0, sizeof *d);
  d->library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!d->library)
    return gs_error(GS_ENOENT, "no NVIDIA driver: libcuda.so.1 cannot be loaded (%s)", dlerror());
  const char *missing = NULL;
#define GS__CUDA_LOOKUP(fn)                                                  \
  if (!missing && !(*(void **)&d->fn = dlsym(d->library, GS__NAME(fn))))   \
    missing = GS__NAME(fn);
  GS_CUDA_DRIVER_FUNCS(GS__CUDA_LOOKUP)
#undef GS__CUDA_LOOKUP
  if (missing) {
    gs_cuda_driver_unload(d);
    return gs_error(GS_EVERSION, "the NVIDIA driver is older than this build of gpusrv needs: "
                                 "libcuda.so.1 lacks %s (built with CUDA %d.%d headers)",
                    missing, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
  }
  return GS_OK;
}

void gs_cuda_driver_unload(gs_cuda_driver *d) {
  if (d->library)
    dlclose(d->library);
  memset(d, 0, sizeof *d);
}

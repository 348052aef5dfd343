/* cuda_blas.c - finds cuBLAS's entry points (cuda_blas.h). */
#include "hal/cuda/cuda_blas.h"

#include "base/error.h"

#include <dlfcn.h>
#include <string.h>

#define GS__STR(x) #x
#define GS__NAME(x) GS__STR(x) /* after cublas_v2.h's macros: "cublasSgemm_v2" */

int gs_cublas_load(gs_cublas *b) {
  memset(b, 0, sizeof *b);
  static const char soname[] = "libcublas.so." GS__NAME(CUBLAS_VER_MAJOR);
  b->library = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!b->library)
    return gs_error(GS_ENOENT, "%s cannot be loaded (%s)", soname, dlerror());
  const char *missing = NULL;
#define GS__CUBLAS_LOOKUP(fn)                                                \
  if (!missing && !(*(void **)&b->fn = dlsym(b->library, GS__NAME(fn))))   \
    missing = GS__NAME(fn);
  GS_CUBLAS_FUNCS(GS__CUBLAS_LOOKUP)
#undef GS__CUBLAS_LOOKUP
  if (missing) {
    gs_cublas_unload(b);
    return gs_error(GS_ENOENT, "%s lacks %s", soname, missing);
  }
  return GS_OK;
}

void gs_cublas_unload(gs_cublas *b) {
  if (b->library)
    dlclose(b->library);
  memset(b, 0, sizeof *b);
}

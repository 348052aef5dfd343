/* cuda_fft.c - finds cuFFT's entry points (cuda_fft.h). */
#include "hal/cuda/cuda_fft.h"

#include "base/error.h"

#include <dlfcn.h>
#include <string.h>

#define GS__STR(x) #x
#define GS__NAME(x) GS__STR(x)

int gs_cufft_load(gs_cufft *f) {
  memset(f, 0, sizeof *f);
  static const char soname[] = "libcufft.so." GS__NAME(CUFFT_VER_MAJOR);
  f->library = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!f->library)
    return gs_error(GS_ENOENT, "%s cannot be loaded (%s)", soname, dlerror());
  const char *missing = NULL;
#define GS__CUFFT_LOOKUP(fn)                                                 \
  if (!missing && !(*(void **)&f->fn = dlsym(f->library, GS__NAME(fn))))   \
    missing = GS__NAME(fn);
  GS_CUFFT_FUNCS(GS__CUFFT_LOOKUP)
#undef GS__CUFFT_LOOKUP
  if (missing) {
    gs_cufft_unload(f);
    return gs_error(GS_ENOENT, "%s lacks %s", soname, missing);
  }
  return GS_OK;
}

void gs_cufft_unload(gs_cufft *f) {
  if (f->library)
    dlclose(f->library);
  memset(f, 0, sizeof *f);
}

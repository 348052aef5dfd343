/* cuda_fft.c - finds cuFFT's entry points (cuda_fft.h). */
#include "hal/cuda/cuda_fft.h"

#include "hal/cuda/dl_table.h"

#include <dlfcn.h>
#include <string.h>

#define GS__STR(x) #x
#define GS__NAME(x) GS__STR(x)

int gs_cufft_load(gs_cufft *f) {
  memset(f, 0, sizeof *f);
#define GS__CUFFT_ENTRY(fn) {#fn, (void **)&f->fn},
  const gs_dl_entry entries[] = {GS_CUFFT_FUNCS(GS__CUFFT_ENTRY)};
#undef GS__CUFFT_ENTRY
  int rc = gs_dl_load("libcufft.so." GS__NAME(CUFFT_VER_MAJOR), "cuFFT", entries,
                      (int)(sizeof entries / sizeof entries[0]), &f->library);
  if (rc < 0)
    memset(f, 0, sizeof *f);
  return rc;
}

void gs_cufft_unload(gs_cufft *f) {
  if (f->library)
    dlclose(f->library);
  memset(f, 0, sizeof *f);
}

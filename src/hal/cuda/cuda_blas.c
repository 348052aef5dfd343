/* cuda_blas.c - finds cuBLAS's entry points (cuda_blas.h). */
#include "hal/cuda/cuda_blas.h"

#include "hal/cuda/dl_table.h"

#include <dlfcn.h>
#include <string.h>

#define GS__STR(x) #x
#define GS__NAME(x) GS__STR(x) /* after cublas_v2.h's macros: "cublasSgemm_v2" */

int gs_cublas_load(gs_cublas *b) {
  memset(b, 0, sizeof *b);
#define GS__CUBLAS_ENTRY(fn) {GS__NAME(fn), (void **)&b->fn},
  const gs_dl_entry entries[] = {GS_CUBLAS_FUNCS(GS__CUBLAS_ENTRY)};
#undef GS__CUBLAS_ENTRY
  int rc = gs_dl_load("libcublas.so." GS__NAME(CUBLAS_VER_MAJOR), "cuBLAS", entries,
                      (int)(sizeof entries / sizeof entries[0]), &b->library);
  if (rc < 0)
    memset(b, 0, sizeof *b);
  return rc;
}

void gs_cublas_unload(gs_cublas *b) {
  if (b->library)
    dlclose(b->library);
  memset(b, 0, sizeof *b);
}

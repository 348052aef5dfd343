/* cuda_blas.h - cuBLAS as the CUDA plugin reaches it: through dlopen of the
 * toolkit's libcublas (the soname of the CUDA version it was built with),
 * so that a machine with a driver but no CUDA libraries still runs the
 * plugin, with GEMM falling back to the CPU. One X-macro list makes the
 * table and the lookup; cublas_v2.h supplies types and versioned names. */
#ifndef GS_HAL_CUDA_BLAS_H
#define GS_HAL_CUDA_BLAS_H

#include <cublas_v2.h>

#define GS_CUBLAS_FUNCS(X)                                                                   \
  X(cublasCreate)                                                                            \
  X(cublasDestroy)                                                                           \
  X(cublasSetStream)                                                                         \
  X(cublasSetAtomicsMode)                                                                    \
  X(cublasSgemm)                                                                             \
  X(cublasSgemmStridedBatched)                                                               \
  X(cublasGemmEx)                                                                            \
  X(cublasGemmStridedBatchedEx)

typedef struct gs_cublas {
  void *library;
#define GS__CUBLAS_FIELD(fn) __typeof__(&fn) fn;
  GS_CUBLAS_FUNCS(GS__CUBLAS_FIELD)
#undef GS__CUBLAS_FIELD
} gs_cublas;

/* GS_ENOENT with the reason when libcublas cannot be loaded or lacks a call. */
int gs_cublas_load(gs_cublas *b);
void gs_cublas_unload(gs_cublas *b);

#endif

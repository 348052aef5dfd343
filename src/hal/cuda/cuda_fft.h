/* cuda_fft.h - cuFFT as the CUDA plugin reaches it: through dlopen of the
 * toolkit's libcufft (the soname of the CUDA version it was built with), as
 * cuBLAS is (cuda_blas.h), so that a machine without it runs DFT and STFT
 * on the CPU. cufft.h supplies the types. */
#ifndef GS_HAL_CUDA_FFT_H
#define GS_HAL_CUDA_FFT_H

#include <cufft.h>

#define GS_CUFFT_FUNCS(X) X(cufftPlanMany) X(cufftSetStream) X(cufftExecC2C) X(cufftExecZ2Z) \
  X(cufftDestroy)

typedef struct gs_cufft {
  void *library;
#define GS__CUFFT_FIELD(fn) __typeof__(&fn) fn;
  GS_CUFFT_FUNCS(GS__CUFFT_FIELD)
#undef GS__CUFFT_FIELD
} gs_cufft;

/* GS_ENOENT with the reason when libcufft cannot be loaded or lacks a call. */
int gs_cufft_load(gs_cufft *f);
void gs_cufft_unload(gs_cufft *f);

#endif

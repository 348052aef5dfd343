/* opencl_fft.h - batched complex FFTs on an OpenCL device through VkFFT
 * (Debian's libvkfft-dev, header only), for devops' DFT and STFT. VkFFT
 * generates and builds OpenCL kernels for each size when it plans it (about
 * a second on PoCL), so each device keeps its last few plans. */
#ifndef GS_HAL_OPENCL_FFT_H
#define GS_HAL_OPENCL_FFT_H

#include "hal/opencl/opencl_internal.h"

/* `batch` transforms of n complex values, (real, imaginary) float32 or
 * with f64 float64, in place in buf from its start; inverse: the positive
 * exponent; unscaled both ways. Queued on q in order. */
int gs__ocl_fft(ocl_device *d, cl_command_queue q, cl_mem buf, int64_t n, int64_t batch,
                bool inverse, bool f64);
/* The device's (empty) table of plans, at device creation. */
int gs__ocl_fft_init(ocl_device *d);
/* Releases the device's plans (at device release). */
void gs__ocl_fft_release(ocl_device *d);

#endif

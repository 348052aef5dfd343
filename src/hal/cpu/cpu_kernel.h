/* cpu_kernel.h - the form of an op kernel of the CPU backend. The engine
 * registers its CPU kernels in this form; the stream worker calls them. */
#ifndef GS_HAL_CPU_KERNEL_H
#define GS_HAL_CPU_KERNEL_H

#include "hal/hal.h"

/* One launch, with buffers resolved to host addresses. bytes[i] is how much
 * of buffer i lies past its offset, so a kernel can check its reach. */
typedef struct gs_cpu_kernel_call {
  int buffer_count;
  void *ptr[GS_KERNEL_MAX_BUFFERS];
  size_t bytes[GS_KERNEL_MAX_BUFFERS];
  const void *params;
  size_t params_size;
} gs_cpu_kernel_call;

/* Returns 0 or a GS_E code (with gs_error detail), recorded as the stream's error. */
typedef int (*gs_cpu_kernel_fn)(const gs_cpu_kernel_call *call);

/* What gs__backend_register_kernel() stores for the CPU backend. */
typedef struct gs_cpu_kernel {
  gs_cpu_kernel_fn fn;
} gs_cpu_kernel;

#endif

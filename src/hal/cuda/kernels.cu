// kernels.cu - the CUDA plugin's device kernels, compiled by nvcc into a
// fatbin (sm_80, sm_90 and PTX for later GPUs) embedded in the plugin and
// loaded with cuModuleLoadData. extern "C": looked up by plain name. The
// engine's ops come from hal/devops/op_kernels.h, shared with OpenCL; this
// file is their prelude (the words CUDA spells its own way).
#include <cuda_fp16.h>
#include <math.h>

#define KERNEL extern "C" __global__ void
#define GLOBAL
#define DEVFN static __device__ __forceinline__
#define FOR_EACH(i, n)                                                                           \
  for (ulong i = blockIdx.x * (ulong)blockDim.x + threadIdx.x; i < (n);                          \
       i += (ulong)gridDim.x * blockDim.x)
typedef unsigned long ulong; // 64 bits on the LP64 hosts CUDA supports, as in OpenCL C
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef signed char schar;
typedef __half half_t;
// Kernels that reduce a row with a block of GROUP_SIZE threads (the plugin
// launches every kernel with blocks of 256).
#define GROUP_SIZE 256
#define LOCAL_MEM __shared__
#define LOCAL_PTR
#define BARRIER() __syncthreads()
#define LOCAL_ID ((ulong)threadIdx.x)
#define GROUP_ID ((ulong)blockIdx.x)
#define NUM_GROUPS ((ulong)gridDim.x)
// True for the one thread that turns *p from 0 to v.
#define CLAIM(p, v) (atomicCAS((int *)(p), 0, (v)) == 0)
static_assert(sizeof(long) == 8, "the kernels' long is 64 bits, as OpenCL's and the host's (LP64)");
#define LOAD_F16(p, i) __half2float((p)[i])
#define STORE_F16(v, p, i) ((p)[i] = __float2half_rn(v))

// y[i] += alpha * x[i]: the HAL's test kernel (conformance suite).
KERNEL axpy_f32(const float *x, float *y, ulong n, float alpha) {
  FOR_EACH(i, n) { y[i] += alpha * x[i]; }
}

#include "hal/devops/op_codes.h"
#include "hal/devops/op_kernels.h"

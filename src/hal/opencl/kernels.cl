/* kernels.cl - the OpenCL backend's kernels, built once per device when the
 * backend starts (twice where the device has fp64: the float64 program) (embedded into the plugin at build time, followed by the
 * engine's ops in hal/devops/op_kernels.h, for which this file is also the
 * prelude: the words that OpenCL C and CUDA spell differently). Offsets are
 * in elements, so that buffers sub-allocated from one cl_mem need no
 * sub-buffer objects (whose alignment rules are the device's). */

#define KERNEL __kernel void
#define GLOBAL __global
#define DEVFN static inline
#define FOR_EACH(i, n) for (ulong i = get_global_id(0); i < (n); i += get_global_size(0))
/* float16 in memory through vload_half/vstore_half, which every OpenCL 1.2
 * device has: the arithmetic is float32, with or without cl_khr_fp16. */
#define half_t half
#define LOAD_F16(p, i) vload_half((i), (p))
#define STORE_F16(v, p, i) vstore_half((v), (i), (p))
typedef char schar;
/* Kernels that reduce a row with a work-group of GROUP_SIZE items (devops
 * launches them with that local size). */
#define GROUP_SIZE 256
#define LOCAL_MEM __local
#define LOCAL_PTR __local
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define LOCAL_ID ((ulong)get_local_id(0))
#define GROUP_ID ((ulong)get_group_id(0))
#define NUM_GROUPS ((ulong)get_num_groups(0))
/* True for the one item that turns *p from 0 to v (OpenCL 1.1 atomics). */
#define CLAIM(p, v) (atomic_cmpxchg((volatile GLOBAL int *)(p), 0, (v)) == 0)

/* y[yo + i] += alpha * x[xo + i]: the HAL's test kernel. */
__kernel void axpy_f32(__global const float *x, ulong xo, __global float *y, ulong yo, ulong n,
                       float alpha) {
  size_t i = get_global_id(0);
  if (i < n)
    y[yo + i] += alpha * x[xo + i];
}


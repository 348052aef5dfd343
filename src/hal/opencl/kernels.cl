/* kernels.cl - the OpenCL backend's kernels, built once per device when the
 * backend starts (embedded into the plugin at build time). Offsets are in
 * elements, so that buffers sub-allocated from one cl_mem need no
 * sub-buffer objects (whose alignment rules are the device's). */

/* y[yo + i] += alpha * x[xo + i]: the HAL's test kernel. */
__kernel void axpy_f32(__global const float *x, ulong xo, __global float *y, ulong yo, ulong n,
                       float alpha) {
  size_t i = get_global_id(0);
  if (i < n)
    y[yo + i] += alpha * x[xo + i];
}

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

/* The engine's elementwise ops on float32, numbered as opencl_ops.c numbers them. */
#define UNARY_RELU 0
#define UNARY_SIGMOID 1
#define UNARY_TANH 2
#define BINARY_ADD 0
#define BINARY_SUB 1
#define BINARY_MUL 2
#define BINARY_DIV 3

__kernel void unary_f32(__global const float *x, ulong xo, __global float *y, ulong yo, ulong n,
                        int op) {
  size_t i = get_global_id(0);
  if (i >= n)
    return;
  float v = x[xo + i];
  y[yo + i] = op == UNARY_RELU ? fmax(v, 0.0f) : op == UNARY_SIGMOID ? 1.0f / (1.0f + exp(-v))
                                                                      : tanh(v);
}

/* NumPy broadcasting: the output's dimensions and, per operand, the stride
 * of each output dimension in elements (0 where the operand is broadcast). */
typedef struct broadcast {
  long rank;
  long dims[8];
  long a_strides[8], b_strides[8];
} broadcast;

__kernel void binary_f32(__global const float *a, ulong ao, __global const float *b, ulong bo,
                         __global float *y, ulong yo, ulong n, int op, broadcast s) {
  size_t i = get_global_id(0);
  if (i >= n)
    return;
  ulong rest = i;
  long ia = 0, ib = 0;
  for (int d = (int)s.rank - 1; d >= 0; d--) {
    long at = (long)(rest % (ulong)s.dims[d]);
    rest /= (ulong)s.dims[d];
    ia += at * s.a_strides[d];
    ib += at * s.b_strides[d];
  }
  float u = a[ao + ia], v = b[bo + ib];
  y[yo + i] = op == BINARY_ADD ? u + v : op == BINARY_SUB ? u - v : op == BINARY_MUL ? u * v
                                                                                      : u / v;
}

/* Every row of y (rows x n) starts as the bias: GEMM then adds onto it. */
__kernel void bias_rows_f32(__global const float *bias, ulong bo, __global float *y, ulong yo,
                            ulong rows, ulong n) {
  size_t i = get_global_id(0);
  if (i < rows * n)
    y[yo + i] = bias[bo + i % n];
}

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
#define UNARY_LEAKY 3
#define UNARY_GELU_ERF 4
#define UNARY_GELU_TANH 5
#define UNARY_ERF 6
#define UNARY_SQRT 7
#define UNARY_EXP 8
#define UNARY_LOG 9
#define UNARY_NEG 10
#define UNARY_ABS 11
#define BINARY_ADD 0
#define BINARY_SUB 1
#define BINARY_MUL 2
#define BINARY_DIV 3

__kernel void unary_f32(__global const float *x, ulong xo, __global float *y, ulong yo, ulong n,
                        int op, float alpha) {
  size_t i = get_global_id(0);
  if (i >= n)
    return;
  float v = x[xo + i], r;
  switch (op) {
  case UNARY_RELU: r = fmax(v, 0.0f); break;
  case UNARY_SIGMOID: r = 1.0f / (1.0f + exp(-v)); break;
  case UNARY_TANH: r = tanh(v); break;
  case UNARY_LEAKY: r = v >= 0.0f ? v : alpha * v; break;
  case UNARY_GELU_ERF: r = 0.5f * v * (1.0f + erf(v * 0.70710678f)); break;
  case UNARY_GELU_TANH: r = 0.5f * v * (1.0f + tanh(0.7978845608f * (v + 0.044715f * v * v * v))); break;
  case UNARY_ERF: r = erf(v); break;
  case UNARY_SQRT: r = sqrt(v); break;
  case UNARY_EXP: r = exp(v); break;
  case UNARY_LOG: r = log(v); break;
  case UNARY_NEG: r = -v; break;
  default: r = fabs(v); break;
  }
  y[yo + i] = r;
}

/* LayerNormalization over the last `inner` elements of each of `rows` rows,
 * one work item per row; bias optional (has_bias 0). */
__kernel void layernorm_f32(__global const float *x, ulong xo, __global const float *scale,
                            ulong so, __global const float *bias, ulong bo, int has_bias,
                            __global float *y, ulong yo, ulong rows, ulong inner, float eps) {
  size_t r = get_global_id(0);
  if (r >= rows)
    return;
  __global const float *xr = x + xo + r * inner;
  __global float *yr = y + yo + r * inner;
  float sum = 0.0f;
  for (ulong i = 0; i < inner; i++)
    sum += xr[i];
  float mean = sum / (float)inner, sq = 0.0f;
  for (ulong i = 0; i < inner; i++)
    sq += (xr[i] - mean) * (xr[i] - mean);
  float inv = 1.0f / sqrt(sq / (float)inner + eps);
  for (ulong i = 0; i < inner; i++)
    yr[i] = (xr[i] - mean) * inv * scale[so + i] + (has_bias ? bias[bo + i] : 0.0f);
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

/* y = x's values at the output's shape (NumPy broadcasting: a's strides). */
__kernel void broadcast_f32(__global const float *x, ulong xo, __global float *y, ulong yo,
                            ulong n, broadcast s) {
  size_t i = get_global_id(0);
  if (i >= n)
    return;
  ulong rest = i;
  long ix = 0;
  for (int d = (int)s.rank - 1; d >= 0; d--) {
    ix += (long)(rest % (ulong)s.dims[d]) * s.a_strides[d];
    rest /= (ulong)s.dims[d];
  }
  y[yo + i] = x[xo + ix];
}

/* Softmax (or LogSoftmax) along one axis: x as [outer, len, inner], one
 * work item per (outer, inner) pair. */
__kernel void softmax_f32(__global const float *x, ulong xo, __global float *y, ulong yo,
                          ulong outer, ulong len, ulong inner, int log_out) {
  size_t id = get_global_id(0);
  if (id >= outer * inner)
    return;
  ulong o = id / inner, in = id % inner;
  __global const float *xs = x + xo + o * len * inner + in;
  __global float *ys = y + yo + o * len * inner + in;
  float mx = -INFINITY;
  for (ulong i = 0; i < len; i++)
    mx = fmax(mx, xs[i * inner]);
  float sum = 0.0f;
  for (ulong i = 0; i < len; i++)
    sum += exp(xs[i * inner] - mx);
  if (log_out) {
    float ls = log(sum);
    for (ulong i = 0; i < len; i++)
      ys[i * inner] = xs[i * inner] - mx - ls;
  } else {
    float inv = 1.0f / sum;
    for (ulong i = 0; i < len; i++)
      ys[i * inner] = exp(xs[i * inner] - mx) * inv;
  }
}

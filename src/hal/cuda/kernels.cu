// kernels.cu - the CUDA plugin's device kernels, compiled by nvcc into a
// fatbin (sm_80, sm_90 and PTX for later GPUs) embedded in the plugin and
// loaded with cuModuleLoadData. extern "C": looked up by plain name.

// y[i] += alpha * x[i]: the HAL's test kernel (conformance suite).
extern "C" __global__ void axpy_f32(const float *x, float *y, unsigned long long n, float alpha) {
  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (; i < n; i += stride)
    y[i] += alpha * x[i];
}

// The engine's elementwise ops on float32. Ops are numbered as the plugin's
// launchers number them (cuda_ops.c).
enum {
  UNARY_RELU, UNARY_SIGMOID, UNARY_TANH, UNARY_LEAKY, UNARY_GELU_ERF, UNARY_GELU_TANH,
  UNARY_ERF, UNARY_SQRT, UNARY_EXP, UNARY_LOG, UNARY_NEG, UNARY_ABS
};
enum { BINARY_ADD, BINARY_SUB, BINARY_MUL, BINARY_DIV };

extern "C" __global__ void unary_f32(const float *x, float *y, unsigned long long n, int op,
                                     float alpha) {
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float v = x[i], r;
    switch (op) {
    case UNARY_RELU: r = v > 0.0f ? v : 0.0f; break;
    case UNARY_SIGMOID: r = 1.0f / (1.0f + expf(-v)); break;
    case UNARY_TANH: r = tanhf(v); break;
    case UNARY_LEAKY: r = v >= 0.0f ? v : alpha * v; break;
    case UNARY_GELU_ERF: r = 0.5f * v * (1.0f + erff(v * 0.70710678f)); break;
    case UNARY_GELU_TANH:
      r = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
      break;
    case UNARY_ERF: r = erff(v); break;
    case UNARY_SQRT: r = sqrtf(v); break;
    case UNARY_EXP: r = expf(v); break;
    case UNARY_LOG: r = logf(v); break;
    case UNARY_NEG: r = -v; break;
    default: r = fabsf(v); break;
    }
    y[i] = r;
  }
}

// LayerNormalization over the last `inner` elements of each of `rows` rows,
// one thread per row; bias may be null.
extern "C" __global__ void layernorm_f32(const float *x, const float *scale, const float *bias,
                                         float *y, unsigned long long rows,
                                         unsigned long long inner, float eps) {
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long r = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
       r < rows; r += stride) {
    const float *xr = x + r * inner;
    float *yr = y + r * inner;
    float sum = 0.0f;
    for (unsigned long long i = 0; i < inner; i++)
      sum += xr[i];
    float mean = sum / (float)inner, sq = 0.0f;
    for (unsigned long long i = 0; i < inner; i++)
      sq += (xr[i] - mean) * (xr[i] - mean);
    float inv = rsqrtf(sq / (float)inner + eps);
    for (unsigned long long i = 0; i < inner; i++)
      yr[i] = (xr[i] - mean) * inv * scale[i] + (bias ? bias[i] : 0.0f);
  }
}

// NumPy broadcasting: the output's shape and, per operand, the stride of
// each output dimension in elements (0 where the operand is broadcast).
struct broadcast {
  int rank;
  long long dims[8];
  long long a_strides[8], b_strides[8];
};

extern "C" __global__ void binary_f32(const float *a, const float *b, float *y,
                                      unsigned long long n, int op, broadcast s) {
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += stride) {
    unsigned long long rest = i;
    long long ia = 0, ib = 0;
    for (int d = s.rank - 1; d >= 0; d--) {
      long long at = (long long)(rest % (unsigned long long)s.dims[d]);
      rest /= (unsigned long long)s.dims[d];
      ia += at * s.a_strides[d];
      ib += at * s.b_strides[d];
    }
    float u = a[ia], v = b[ib];
    y[i] = op == BINARY_ADD ? u + v : op == BINARY_SUB ? u - v : op == BINARY_MUL ? u * v : u / v;
  }
}

// Every row of y (rows x n) starts as the bias: GEMM then adds onto it.
extern "C" __global__ void bias_rows_f32(const float *bias, float *y, unsigned long long rows,
                                         unsigned long long n) {
  unsigned long long total = rows * n, stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
       i < total; i += stride)
    y[i] = bias[i % n];
}

// y = x's values at the output's shape (NumPy broadcasting: a's strides).
extern "C" __global__ void broadcast_f32(const float *x, float *y, unsigned long long n,
                                         broadcast s) {
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += stride) {
    unsigned long long rest = i;
    long long ix = 0;
    for (int d = s.rank - 1; d >= 0; d--) {
      ix += (long long)(rest % (unsigned long long)s.dims[d]) * s.a_strides[d];
      rest /= (unsigned long long)s.dims[d];
    }
    y[i] = x[ix];
  }
}

// Softmax (or LogSoftmax) along one axis: x as [outer, len, inner], one
// thread per (outer, inner) pair.
extern "C" __global__ void softmax_f32(const float *x, float *y, unsigned long long outer,
                                       unsigned long long len, unsigned long long inner,
                                       int log_out) {
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long id = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
       id < outer * inner; id += stride) {
    unsigned long long o = id / inner, in = id % inner;
    const float *xs = x + o * len * inner + in;
    float *ys = y + o * len * inner + in;
    float mx = -INFINITY;
    for (unsigned long long i = 0; i < len; i++)
      mx = fmaxf(mx, xs[i * inner]);
    float sum = 0.0f;
    for (unsigned long long i = 0; i < len; i++)
      sum += expf(xs[i * inner] - mx);
    if (log_out) {
      float ls = logf(sum);
      for (unsigned long long i = 0; i < len; i++)
        ys[i * inner] = xs[i * inner] - mx - ls;
    } else {
      float inv = 1.0f / sum;
      for (unsigned long long i = 0; i < len; i++)
        ys[i * inner] = expf(xs[i * inner] - mx) * inv;
    }
  }
}

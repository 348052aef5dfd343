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

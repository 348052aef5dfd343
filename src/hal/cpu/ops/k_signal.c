/* k_signal.c - CPU kernels of the signal ops (engine/ops/ops_signal.c):
 * the window functions, as ONNX (and torch) define them. */
#include "hal/cpu/ops/kernels.h"

typedef enum { W_HANN, W_HAMMING, W_BLACKMAN } window_kind;

static int run_window(const gs_cpu_kernel_call *k, window_kind kind) {
  const gs_op_call *c = gs_kcall(k);
  const gs_index_attrs *a = c->attrs;
  int64_t n = c->out[0].shape.dims[0];
  double period = (double)(a->periodic ? n : n - 1);
  for (int64_t i = 0; i < n; i++) {
    double x = 2 * M_PI * (double)i / period, v;
    switch (kind) {
    case W_HANN: v = 0.5 - 0.5 * cos(x); break;
    case W_HAMMING: v = 25.0 / 46.0 - 21.0 / 46.0 * cos(x); break;
    default: v = 0.42 - 0.5 * cos(x) + 0.08 * cos(2 * x); break;
    }
    gs_st(c->out[0].dtype, k->ptr[1], i, v);
  }
  return 0;
}

static int k_hann(const gs_cpu_kernel_call *k) { return run_window(k, W_HANN); }
static int k_hamming(const gs_cpu_kernel_call *k) { return run_window(k, W_HAMMING); }
static int k_blackman(const gs_cpu_kernel_call *k) { return run_window(k, W_BLACKMAN); }

static const gs_cpu_kernel_entry kernels[] = {
    GS_CPU_KERNEL("HannWindow", k_hann),
    GS_CPU_KERNEL("HammingWindow", k_hamming),
    GS_CPU_KERNEL("BlackmanWindow", k_blackman),
};

int gs__cpu_register_signal(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

/* k_signal.c - CPU kernels of the signal ops (engine/ops/ops_signal.c):
 * the window functions, as ONNX (and torch) define them; DFT and STFT
 * through FFTW, in float32 and float64; MelWeightMatrix. */
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/parallel.h"

#include <fftw3.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* FFTW plans are made and destroyed under this lock; executing them is
 * thread-safe. */
static pthread_mutex_t fft_lock = PTHREAD_MUTEX_INITIALIZER;

#define REAL float
#define FFTW(name) fftwf_##name
#define SUFFIX _f32
#include "hal/cpu/ops/k_fft_lines.h"
#undef REAL
#undef FFTW
#undef SUFFIX

#define REAL double
#define FFTW(name) fftw_##name
#define SUFFIX _f64
#include "hal/cpu/ops/k_fft_lines.h"
#undef REAL
#undef FFTW
#undef SUFFIX

static int run_fft(const gs_cpu_kernel_call *k, bool stft) {
  const gs_op_call *c = gs_kcall(k);
  return c->in[0].dtype == GS_DT_FLOAT64 ? run_transform_f64(c, k->ptr, stft)
                                         : run_transform_f32(c, k->ptr, stft);
}
static int k_dft(const gs_cpu_kernel_call *k) { return run_fft(k, false); }
static int k_stft(const gs_cpu_kernel_call *k) { return run_fft(k, true); }

/* x // d as numpy divides floats: the floor of the exact quotient, which
 * x / d rounded may overshoot at a whole number. */
static int64_t floor_divide(double x, double d) {
  double mod = fmod(x, d), div = (x - mod) / d;
  if (mod != 0 && (d < 0) != (mod < 0))
    div -= 1;
  double f = floor(div);
  return (int64_t)(div - f > 0.5 ? f + 1 : f);
}

/* MelWeightMatrix as the ONNX reference computes it: num_mel_bins + 2
 * points evenly spaced on the mel scale between the edges (the step divides
 * by the count of points, not of gaps, as the reference does), mapped to DFT
 * bins, and a triangle of weights per mel bin between its neighbours. */
static int k_mel(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_mel_attrs *a = c->attrs;
  int64_t bins = a->mel_bins, rows = a->dft_length / 2 + 1;
  double rate = gs_ld(c->in[2].dtype, k->ptr[2], 0);
  double lo = gs_ld(c->in[3].dtype, k->ptr[3], 0), hi = gs_ld(c->in[4].dtype, k->ptr[4], 0);
  if (!(rate > 0) || !(lo >= 0) || !(hi > lo) || !isfinite(rate) || !isfinite(hi))
    return gs_error(GS_EINVAL, "node %s (MelWeightMatrix): sample_rate (%g) must be positive "
                    "and 0 <= lower_edge_hertz (%g) < upper_edge_hertz (%g)", c->node_name, rate,
                    lo, hi);
  int64_t *edge = malloc(sizeof *edge * (size_t)(bins + 2));
  if (!edge)
    return gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name);
  double mel_lo = 2595 * log10(1 + lo / 700), mel_hi = 2595 * log10(1 + hi / 700);
  double step = (mel_hi - mel_lo) / (double)(bins + 2);
  for (int64_t i = 0; i < bins + 2; i++) {
    double hz = 700 * (pow(10, ((double)i * step + mel_lo) / 2595) - 1);
    edge[i] = floor_divide((double)(a->dft_length + 1) * hz, rate);
  }
  /* The triangles reach the centre of the last bin and stop short of its
   * right edge: those must be rows of the table. */
  if (edge[bins] >= rows || edge[bins + 1] > rows) {
    int64_t last = edge[bins + 1] - 1 > edge[bins] ? edge[bins + 1] - 1 : edge[bins];
    free(edge);
    return gs_error(GS_EINVAL, "node %s (MelWeightMatrix): upper_edge_hertz %g maps to DFT bin "
                    "%lld, past the %lld bins of a %lld-point DFT at %g Hz", c->node_name, hi,
                    (long long)last, (long long)rows, (long long)a->dft_length, rate);
  }
  gs_dtype dt = c->out[0].dtype;
  void *y = k->ptr[c->n_in];
  for (int64_t i = 0; i < rows * bins; i++)
    gs_st(dt, y, i, 0);
  for (int64_t m = 0; m < bins; m++) {
    int64_t left = edge[m], center = edge[m + 1], right = edge[m + 2];
    if (center == left)
      gs_st(dt, y, center * bins + m, 1);
    for (int64_t j = left; center > left && j <= center; j++)
      gs_st(dt, y, j * bins + m, (double)(j - left) / (double)(center - left));
    for (int64_t j = center; j < right; j++)
      gs_st(dt, y, j * bins + m, (double)(right - j) / (double)(right - center));
  }
  free(edge);
  return 0;
}

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
    GS_CPU_KERNEL("DFT", k_dft),
    GS_CPU_KERNEL("STFT", k_stft),
    GS_CPU_KERNEL("MelWeightMatrix", k_mel),
};

int gs__cpu_register_signal(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

/* k_squeeze.c - SqueezeExcite (op_attrs.h), the CPU kernel of the
 * squeeze-excitation blocks the plan fuses (plan_squeeze.c): the channel
 * means of x, two small products through oneDNN's GEMM (a batch of images
 * makes them GEMMs of that many rows), the gate, then x scaled by it. y
 * may be x itself (the plan lets the step write over an x that dies
 * there): every mean is taken before anything is written, and each
 * element is read before it is written. */
#include "base/error.h"
#include "hal/cpu/ops/fastmath.h"
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/lane_sum.h"
#include "hal/cpu/ops/parallel.h"
#include "hal/op/op_attrs.h"

#include <stdlib.h>

/* Planes [lo, hi) of NCHW x, `size` positions each: their means. */
static void plane_means(const float *x, float *mean, int64_t size, int64_t lo, int64_t hi) {
  for (int64_t p = lo; p < hi; p++)
    mean[p] = (float)(gs_lane_sum(x + p * size, size) / (double)size);
}

/* Rows [lo, hi) of v [rows, n]: the bias added, then the activation or the
 * gate (as the ops the plan took out compute them: fastmath's sigmoid,
 * HardSigmoid's clamp). */
GS_VECTOR_CLONES static void bias_rows(float *v, const float *bias, int64_t n, int64_t lo,
                                       int64_t hi) {
  if (!bias)
    return;
  for (int64_t r = lo; r < hi; r++)
    for (int64_t i = 0; i < n; i++)
      v[r * n + i] += bias[i];
}

GS_VECTOR_CLONES static void gate_range(const gs_squeeze_excite_attrs *a, float *g, int64_t lo,
                                        int64_t hi) {
  if (a->gate == GS_GATE_SIGMOID) {
    for (int64_t i = lo; i < hi; i++)
      g[i] = gs_fast_sigmoidf(g[i]);
    return;
  }
  float alpha = a->gate_alpha, beta = a->gate_beta;
  for (int64_t i = lo; i < hi; i++) {
    float v = alpha * g[i] + beta;
    g[i] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
  }
}

/* Runs [lo, hi) of `width` channels by `size` positions (a plane of NCHW
 * when width is 1, a block of the blocked layout otherwise): each scaled
 * by its channel's gate. Run r's gates start at gate[r * width] in both
 * layouts. The block's width is a constant in each loop, which the
 * compiler then keeps in vector registers. */
#define SCALE_RUNS(W)                                                          \
  for (int64_t r = lo; r < hi; r++) {                                          \
    const float *xr = x + r * size * (W), *g = gate + r * (W);                \
    float *yr = y + r * size * (W);                                            \
    for (int64_t i = 0; i < size; i++)                                         \
      for (int l = 0; l < (W); l++)                                            \
        yr[i * (W) + l] = xr[i * (W) + l] * g[l];                              \
  }

GS_VECTOR_CLONES static void scale_runs(const float *x, const float *gate, float *y,
                                        int64_t size, int width, int64_t lo, int64_t hi) {
  if (width == 16) {
    SCALE_RUNS(16)
  } else if (width == 8) {
    SCALE_RUNS(8)
  } else {
    SCALE_RUNS(1)
  }
}
#undef SCALE_RUNS

/* The gate of each image and channel, [n, channels], from their means
 * (gs__cpu_sgemm keeps a small product on one thread itself). */
static void gates(const gs_op_call *c, const float *const *p, int64_t n, int64_t channels,
                  float *mean, float *hidden, float *gate) {
  const gs_squeeze_excite_attrs *a = c->attrs;
  int64_t r = a->squeezed;
  const float *b1 = gs_op_given(c, 2) ? p[2] : NULL, *b2 = gs_op_given(c, 4) ? p[4] : NULL;
  gs__cpu_sgemm(false, true, n, r, channels, 1.0f, mean, channels, p[1], channels, 0.0f, hidden, r);
  bias_rows(hidden, b1, r, 0, n);
  gs__cpu_act_range(a->act, a->act_lo, a->act_hi, hidden, 0, n * r);
  gs__cpu_sgemm(false, true, n, channels, r, 1.0f, hidden, r, p[3], r, 0.0f, gate, channels);
  bias_rows(gate, b2, channels, 0, n);
  gate_range(a, gate, 0, n * channels);
}

static int k_squeeze_excite(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_squeeze_excite_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape;
  int64_t n = xs->dims[0], channels = xs->dims[1], total = gs_shape_numel(xs);
  int width = a->block ? a->block : 1;
  if (total == 0)
    return GS_OK;
  if (c->in[0].dtype != GS_DT_FLOAT32 || a->squeezed < 1 || channels % width != 0 ||
      (width != 1 && width != 8 && width != 16))
    return gs_error(GS_EINVAL, "node %s: no SqueezeExcite of %s with %lld channels in blocks "
                    "of %d", c->node_name, gs_dtype_name(c->in[0].dtype),
                    (long long)channels, width);
  int64_t size = total / (n * channels), runs = n * channels / width;
  float *mean = malloc(sizeof(float) * (size_t)(2 * n * channels + n * a->squeezed));
  if (!mean)
    return gs_error(GS_ENOMEM, "out of memory in node %s (SqueezeExcite)", c->node_name);
  float *gate = mean + n * channels, *hidden = gate + n * channels;
  const float *const *p = (const float *const *)k->ptr;
  const float *x = p[0];
  float *y = k->ptr[c->n_in];
  int64_t grain = GS_PARALLEL_GRAIN / (size * width) + 1;
  if (width == 1)
    GS_PARALLEL_RANGES(runs, grain, lo, hi, plane_means(x, mean, size, lo, hi));
  else
    GS_PARALLEL_RANGES(runs, grain, lo, hi, gs__cpu_blocked_mean(x, mean, width, size, lo, hi));
  gates(c, p, n, channels, mean, hidden, gate);
  GS_PARALLEL_RANGES(runs, grain, lo, hi, scale_runs(x, gate, y, size, width, lo, hi));
  free(mean);
  return GS_OK;
}

static const gs_cpu_kernel_entry kernels[] = {GS_CPU_KERNEL("SqueezeExcite", k_squeeze_excite)};

int gs__cpu_register_squeeze(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

/* softmax_row.h - the two passes of a softmax along one contiguous row,
 * for the Softmax kernel (k_nn.c) and attention's scores (k_attention.c).
 * The max and the sum are kept in SOFTMAX_LANES lanes, which the compiler
 * keeps in one vector register: a single running max or sum waits on each
 * value in turn (12 heads of 128 x 128 scores took nine times onnxruntime's
 * time so). Always inlined, so that each caller's vector clones get their
 * own (a call from a clone goes to the baseline build). */
#ifndef GS_HAL_CPU_OPS_SOFTMAX_ROW_H
#define GS_HAL_CPU_OPS_SOFTMAX_ROW_H

#include "hal/cpu/ops/fastmath.h"

#include <math.h>
#include <stdint.h>

#define SOFTMAX_LANES 16 /* an AVX-512 register of floats */

/* The largest of x[0..n) (-inf for none; NaN is passed over). */
static inline __attribute__((always_inline)) float gs_softmax_max(const float *x, int64_t n) {
  float lane[SOFTMAX_LANES], mx = -INFINITY;
  int64_t whole = n / SOFTMAX_LANES * SOFTMAX_LANES;
  for (int l = 0; l < SOFTMAX_LANES; l++)
    lane[l] = -INFINITY;
  for (int64_t i = 0; i < whole; i += SOFTMAX_LANES)
    for (int l = 0; l < SOFTMAX_LANES; l++)
      lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
  for (int64_t i = whole; i < n; i++)
    mx = x[i] > mx ? x[i] : mx;
  for (int l = 0; l < SOFTMAX_LANES; l++)
    mx = lane[l] > mx ? lane[l] : mx;
  return mx;
}

/* The sum of exp(x[i] - mx), each also written to y[i]; y is x, or apart
 * from it (said with restrict in the callers below, so that the loop is
 * vectorised without a run-time check of the overlap, which in place
 * would send it down the scalar loop). */
#define GS_SOFTMAX_EXP_SUM(x, y, n, mx)                                   \
  do {                                                                    \
    float lane_[SOFTMAX_LANES] = {0};                                     \
    int64_t whole_ = (n) / SOFTMAX_LANES * SOFTMAX_LANES;                 \
    for (int64_t i_ = 0; i_ < whole_; i_ += SOFTMAX_LANES)                \
      for (int l_ = 0; l_ < SOFTMAX_LANES; l_++) {                        \
        float e_ = gs_fast_expf((x)[i_ + l_] - (mx));                     \
        (y)[i_ + l_] = e_;                                                \
        lane_[l_] += e_;                                                  \
      }                                                                   \
    for (int64_t i_ = whole_; i_ < (n); i_++) {                           \
      float e_ = gs_fast_expf((x)[i_] - (mx));                            \
      (y)[i_] = e_;                                                       \
      sum_ += e_;                                                         \
    }                                                                     \
    for (int l_ = 0; l_ < SOFTMAX_LANES; l_++)                            \
      sum_ += lane_[l_];                                                  \
  } while (0)

/* exp(x[i] - mx) into y[i], which is apart from x; returns their sum. */
static inline __attribute__((always_inline)) float
gs_softmax_exp_sum(const float *restrict x, float *restrict y, int64_t n, float mx) {
  float sum_ = 0;
  GS_SOFTMAX_EXP_SUM(x, y, n, mx);
  return sum_;
}

/* The same in place: w[i] = exp(w[i] - mx). */
static inline __attribute__((always_inline)) float gs_softmax_exp_sum_in_place(float *w,
                                                                              int64_t n,
                                                                              float mx) {
  float sum_ = 0;
  GS_SOFTMAX_EXP_SUM(w, w, n, mx);
  return sum_;
}

#endif

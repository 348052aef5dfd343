/* lane_sum.h - sums of float32 runs in double, over 8 lanes that the
 * compiler keeps in vector registers: one running sum waits on each add in
 * turn (LayerNorm over ConvNeXt's 96 channels was six times slower than a
 * pass over the row should be, ReduceMean over ShuffleNet's 7x7 planes
 * fourteen times). The order is fixed whatever the threads, so results do
 * not change with them. Used by the normalisations and the reductions. */
#ifndef GS_HAL_CPU_OPS_LANE_SUM_H
#define GS_HAL_CPU_OPS_LANE_SUM_H

#include <stdint.h>

#define GS_SUM_LANES 8

static inline double gs_lane_sum(const float *x, int64_t n) {
  double acc[GS_SUM_LANES] = {0}, s = 0;
  int64_t i = 0;
  for (; i + GS_SUM_LANES <= n; i += GS_SUM_LANES)
    for (int l = 0; l < GS_SUM_LANES; l++)
      acc[l] += x[i + l];
  for (; i < n; i++)
    s += x[i];
  for (int l = 0; l < GS_SUM_LANES; l++)
    s += acc[l];
  return s;
}

/* The sum of (x - centre)^2, the difference taken in float32. */
static inline double gs_lane_sum_sq(const float *x, int64_t n, float centre) {
  double acc[GS_SUM_LANES] = {0}, s = 0;
  int64_t i = 0;
  for (; i + GS_SUM_LANES <= n; i += GS_SUM_LANES)
    for (int l = 0; l < GS_SUM_LANES; l++) {
      double d = (double)(x[i + l] - centre);
      acc[l] += d * d;
    }
  for (; i < n; i++) {
    double d = (double)(x[i] - centre);
    s += d * d;
  }
  for (int l = 0; l < GS_SUM_LANES; l++)
    s += acc[l];
  return s;
}

#endif

/* latency.c - the latency histogram's buckets and quantiles (latency.h). */
#include "api/latency.h"

#include <math.h>

double gs_latency_bound_us(int bucket) {
  return bucket >= GS_LATENCY_BUCKETS - 1 ? INFINITY : 50.0 * ldexp(1.0, bucket);
}

int gs_latency_bucket(uint64_t ns) {
  int b = 0;
  while (b < GS_LATENCY_BUCKETS - 1 && (double)ns / 1e3 > gs_latency_bound_us(b))
    b++;
  return b;
}

double gs_latency_quantile_us(const uint64_t *counts, double q) {
  uint64_t total = 0;
  for (int b = 0; b < GS_LATENCY_BUCKETS; b++)
    total += counts[b];
  if (total == 0)
    return NAN;
  double rank = q * (double)total, below = 0;
  for (int b = 0; b < GS_LATENCY_BUCKETS; b++) {
    if (counts[b] > 0 && below + (double)counts[b] >= rank) {
      double lo = b ? gs_latency_bound_us(b - 1) : 0, hi = gs_latency_bound_us(b);
      if (isinf(hi))
        return lo;
      return lo + (hi - lo) * (rank - below) / (double)counts[b];
    }
    below += (double)counts[b];
  }
  return gs_latency_bound_us(GS_LATENCY_BUCKETS - 2);
}

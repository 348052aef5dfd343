/* bench_timing.h - what the stand-alone peer programs (dnnl_matmul.c,
 * fftw_direct.c) need to time runs without linking gpusrv: a monotonic
 * clock in seconds and a comparison for qsort to find the median. */
#ifndef GS_BENCH_TIMING_H
#define GS_BENCH_TIMING_H

#include <time.h>

static inline double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#endif

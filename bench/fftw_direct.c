/* fftw_direct.c - `gs-bench-fftw N BATCH THREADS [SECONDS]`: FFTW called
 * directly, as a program that needs only FFTs would: BATCH complex float32
 * transforms of N points (one fftwf_plan_many_dft, FFTW_MEASURE, out of
 * place), the batch split over THREADS threads as gpusrv splits it.
 * Prints one JSON line with the median time of a batch and its GFLOP/s
 * (5 N log2 N per transform). bench/fft.py runs it beside gpusrv's DFT. */
#include <fftw3.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include "bench_timing.h"

int main(int argc, char **argv) {
  if (argc < 4 || atoi(argv[1]) < 1 || atoi(argv[2]) < 1 || atoi(argv[3]) < 1) {
    fprintf(stderr, "usage: gs-bench-fftw N BATCH THREADS [SECONDS]\n");
    return 2;
  }
  int n = atoi(argv[1]), batch = atoi(argv[2]), threads = atoi(argv[3]);
  double seconds = argc > 4 ? atof(argv[4]) : 2.0;
  if (threads > batch)
    threads = batch;
  size_t total = (size_t)n * (size_t)batch;
  fftwf_complex *in = fftwf_alloc_complex(total), *out = fftwf_alloc_complex(total);
  if (!in || !out)
    return 1;
  /* One plan per thread's share of the batch (FFTW_MEASURE overwrites the
   * arrays: the data is written after planning). */
  int share = (batch + threads - 1) / threads;
  fftwf_plan *plans = calloc((size_t)threads, sizeof *plans);
  for (int t = 0; t < threads; t++) {
    int first = t * share, count = batch - first < share ? batch - first : share;
    if (count > 0)
      plans[t] = fftwf_plan_many_dft(1, &n, count, in + (size_t)first * n, NULL, 1, n,
                                     out + (size_t)first * n, NULL, 1, n, FFTW_FORWARD,
                                     FFTW_MEASURE);
  }
  for (size_t i = 0; i < total; i++) {
    in[i][0] = (float)(i % 7) - 3.0f;
    in[i][1] = (float)(i % 5) - 2.0f;
  }
  omp_set_num_threads(threads);
  enum { MAX_RUNS = 100000 };
  static double times[MAX_RUNS];
  int runs = 0;
  double start = now_s();
  while (runs < MAX_RUNS && (runs < 5 || now_s() - start < seconds)) {
    double t0 = now_s();
#pragma omp parallel for schedule(static)
    for (int t = 0; t < threads; t++)
      if (plans[t])
        fftwf_execute(plans[t]);
    times[runs++] = now_s() - t0;
  }
  qsort(times, (size_t)runs, sizeof times[0], cmp_double);
  double median = times[runs / 2];
  double flop = 5.0 * n * log2((double)n) * batch;
  printf("{\"n\": %d, \"batch\": %d, \"threads\": %d, \"runs\": %d, \"median_us\": %.3f, "
         "\"gflops\": %.3f}\n", n, batch, threads, runs, median * 1e6, flop / median * 1e-9);
  for (int t = 0; t < threads; t++)
    if (plans[t])
      fftwf_destroy_plan(plans[t]);
  free(plans);
  fftwf_free(in);
  fftwf_free(out);
  return 0;
}

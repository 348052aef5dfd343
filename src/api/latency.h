/* latency.h - a model's request latencies as a histogram of fixed buckets
 * (Prometheus' way): cheap to count under the stats lock, and percentiles
 * over any interval from the difference of two readings. */
#ifndef GS_API_LATENCY_H
#define GS_API_LATENCY_H

#include <stdint.h>

/* Bucket i holds latencies up to gs_latency_bound_us(i): 50 us doubling to
 * some 52 s; the last bucket has no bound. */
#define GS_LATENCY_BUCKETS 22
double gs_latency_bound_us(int bucket); /* INFINITY for the last */
int gs_latency_bucket(uint64_t ns);

/* The q-quantile (0..1) of the requests counted in counts[] (per bucket,
 * not cumulative), in microseconds, interpolated linearly within its
 * bucket as Prometheus' histogram_quantile does (the last bucket answers
 * its lower bound); NAN when nothing is counted. */
double gs_latency_quantile_us(const uint64_t *counts, double q);

#endif

/* dnnl_matmul.c - `gs-bench-dnnl-matmul N THREADS [SECONDS]`: oneDNN's fp32
 * matmul primitive called directly on N x N by N x N, on THREADS OpenMP
 * threads; prints one JSON line with the median time of one product and
 * its GFLOP/s. bench/models.py runs it beside gpusrv's MatMul of the same
 * size, as the peer that gpusrv's GEMM is measured against. */
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include "bench_timing.h"

#define CHECK(x)                                                   \
  do {                                                             \
    dnnl_status_t st_ = (x);                                       \
    if (st_ != dnnl_success) {                                     \
      fprintf(stderr, "gs-bench-dnnl-matmul: %s: status %d\n", #x, \
              (int)st_);                                           \
      return 1;                                                    \
    }                                                              \
  } while (0)

int main(int argc, char **argv) {
  if (argc < 3 || atol(argv[1]) < 1 || atoi(argv[2]) < 1) {
    fprintf(stderr, "usage: gs-bench-dnnl-matmul N THREADS [SECONDS]\n");
    return 2;
  }
  dnnl_dim_t n = atol(argv[1]);
  double seconds = argc > 3 ? atof(argv[3]) : 2.0;
  omp_set_num_threads(atoi(argv[2]));
  float *a = malloc(sizeof(float) * (size_t)(n * n)), *b = malloc(sizeof(float) * (size_t)(n * n)),
        *c = malloc(sizeof(float) * (size_t)(n * n));
  if (!a || !b || !c)
    return 1;
  for (dnnl_dim_t i = 0; i < n * n; i++) {
    a[i] = (float)(i % 7) - 3.0f;
    b[i] = (float)(i % 5) - 2.0f;
  }
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  CHECK(dnnl_engine_create(&engine, dnnl_cpu, 0));
  CHECK(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags));
  dnnl_dims_t dims = {n, n};
  dnnl_memory_desc_t md;
  CHECK(dnnl_memory_desc_init_by_tag(&md, 2, dims, dnnl_f32, dnnl_ab));
  dnnl_matmul_desc_t desc;
  CHECK(dnnl_matmul_desc_init(&desc, &md, &md, NULL, &md));
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t prim;
  CHECK(dnnl_primitive_desc_create(&pd, &desc, NULL, engine, NULL));
  CHECK(dnnl_primitive_create(&prim, pd));
  dnnl_memory_t ma, mb, mc;
  CHECK(dnnl_memory_create(&ma, &md, engine, a));
  CHECK(dnnl_memory_create(&mb, &md, engine, b));
  CHECK(dnnl_memory_create(&mc, &md, engine, c));
  dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  enum { MAX_RUNS = 10000 };
  static double times[MAX_RUNS];
  int runs = 0;
  for (int w = 0; w < 3; w++)
    CHECK(dnnl_primitive_execute(prim, stream, 3, args));
  CHECK(dnnl_stream_wait(stream));
  double start = now_s();
  while (runs < 5 || (runs < MAX_RUNS && now_s() - start < seconds)) {
    double t0 = now_s();
    CHECK(dnnl_primitive_execute(prim, stream, 3, args));
    CHECK(dnnl_stream_wait(stream));
    times[runs++] = now_s() - t0;
  }
  qsort(times, (size_t)runs, sizeof times[0], cmp_double);
  double median = times[runs / 2];
  printf("{\"n\": %lld, \"threads\": %d, \"runs\": %d, \"p50_us\": %.1f, \"gflops\": %.1f}\n",
         (long long)n, omp_get_max_threads(), runs, median * 1e6,
         2.0 * (double)n * (double)n * (double)n / median / 1e9);
  dnnl_primitive_destroy(prim);
  dnnl_primitive_desc_destroy(pd);
  dnnl_memory_destroy(ma);
  dnnl_memory_destroy(mb);
  dnnl_memory_destroy(mc);
  dnnl_stream_destroy(stream);
  dnnl_engine_destroy(engine);
  free(a);
  free(b);
  free(c);
  return 0;
}

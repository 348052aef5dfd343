/* k_linalg.c - CPU kernels of the linear-algebra ops (engine/ops/ops_linalg.c):
 * Det by LU factorisation with partial pivoting, in double whatever the
 * tensor's type (M^3/3 operations a matrix: the exported models' matrices
 * are small, and a determinant loses digits fast in float32). */
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/parallel.h"

#include <stdatomic.h>
#include <stdlib.h>

/* The determinant of the m x m matrix in a (row-major, overwritten). */
static double lu_determinant(double *a, int64_t m) {
  for (int64_t i = 0; i < m * m; i++)
    if (a[i] != a[i])
      return NAN; /* as numpy: a NaN anywhere, whatever the pivots */
  double det = 1;
  for (int64_t k = 0; k < m; k++) {
    int64_t pivot = k;
    for (int64_t i = k + 1; i < m; i++)
      if (fabs(a[i * m + k]) > fabs(a[pivot * m + k]))
        pivot = i;
    if (a[pivot * m + k] == 0)
      return 0;
    if (pivot != k) {
      for (int64_t j = 0; j < m; j++) {
        double t = a[k * m + j];
        a[k * m + j] = a[pivot * m + j];
        a[pivot * m + j] = t;
      }
      det = -det;
    }
    double d = a[k * m + k];
    det *= d;
    for (int64_t i = k + 1; i < m; i++) {
      double f = a[i * m + k] / d;
      for (int64_t j = k + 1; j < m; j++)
        a[i * m + j] -= f * a[k * m + j];
    }
  }
  return det;
}

static int det_range(const gs_op_call *c, const void *x, void *y, int64_t m, int64_t lo,
                     int64_t hi) {
  double *a = malloc(sizeof(double) * (size_t)(m > 0 ? m * m : 1));
  if (!a)
    return -1;
  gs_dtype dt = c->in[0].dtype;
  for (int64_t b = lo; b < hi; b++) {
    for (int64_t i = 0; i < m * m; i++)
      a[i] = gs_ld(dt, x, b * m * m + i);
    gs_st(dt, y, b, lu_determinant(a, m));
  }
  free(a);
  return 0;
}

static int k_det(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_shape *xs = &c->in[0].shape;
  int64_t m = xs->dims[xs->rank - 1], count = gs_shape_numel(&c->out[0].shape);
  atomic_int failed = 0;
  GS_PARALLEL_RANGES(count, GS_PARALLEL_GRAIN / (m * m * m + 1) + 1, lo, hi,
                     if (det_range(c, k->ptr[0], k->ptr[1], m, lo, hi) < 0) failed = 1);
  return failed ? gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name) : 0;
}

static const gs_cpu_kernel_entry kernels[] = {
    GS_CPU_KERNEL("Det", k_det),
};

int gs__cpu_register_linalg(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

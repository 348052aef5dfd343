/* k_normalize.c - CPU kernels of LRN, GroupNormalization (and
 * InstanceNormalization through it), MeanVarianceNormalization and
 * LpNormalization (engine/ops/ops_normalize.c), in double. */
#include "hal/cpu/ops/kernels.h"
#include "hal/op/op_launch.h"

#include "base/error.h"

#include <stdlib.h>

/* Planes of [N, C, spatial...]: N, C and the spatial size. */
static void nc_split(const gs_shape *s, int64_t *n, int64_t *ch, int64_t *sp) {
  *n = s->dims[0];
  *ch = s->dims[1];
  *sp = 1;
  for (int d = 2; d < s->rank; d++)
    *sp *= s->dims[d];
}

static int k_lrn(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_normalize_attrs *a = c->attrs;
  gs_dtype dt = c->in[0].dtype;
  int64_t N, C, S;
  nc_split(&c->in[0].shape, &N, &C, &S);
  int64_t before = (a->size - 1) / 2, after = a->size - 1 - before;
  for (int64_t n = 0; n < N; n++)
    for (int64_t ch = 0; ch < C; ch++)
      for (int64_t s = 0; s < S; s++) {
        double sum = 0;
        int64_t lo = ch - before > 0 ? ch - before : 0, hi = ch + after < C ? ch + after : C - 1;
        for (int64_t j = lo; j <= hi; j++) { /* the window inside the channels */
          double v = gs_ld(dt, k->ptr[0], (n * C + j) * S + s);
          sum += v * v;
        }
        int64_t i = (n * C + ch) * S + s;
        double scale = pow(a->bias + a->alpha / (double)a->size * sum, a->beta);
        gs_st(dt, k->ptr[1], i, gs_ld(dt, k->ptr[0], i) / scale);
      }
  return 0;
}

static int k_group_norm(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_normalize_attrs *a = c->attrs;
  gs_dtype dt = c->in[0].dtype;
  int64_t N, C, S;
  nc_split(&c->in[0].shape, &N, &C, &S);
  int64_t per = C / a->groups, len = per * S;
  for (int64_t n = 0; n < N; n++)
    for (int64_t g = 0; g < a->groups; g++) {
      int64_t base = (n * C + g * per) * S;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < len; i++)
        mean += gs_ld(dt, k->ptr[0], base + i);
      mean /= (double)(len ? len : 1);
      for (int64_t i = 0; i < len; i++) {
        double d = gs_ld(dt, k->ptr[0], base + i) - mean;
        var += d * d;
      }
      double inv = 1.0 / sqrt(var / (double)(len ? len : 1) + a->epsilon);
      for (int64_t i = 0; i < len; i++) {
        int64_t p = a->per_channel ? g * per + i / S : g;
        double y = (gs_ld(dt, k->ptr[0], base + i) - mean) * inv;
        gs_st(dt, k->ptr[3], base + i, y * gs_ld(dt, k->ptr[1], p) + gs_ld(dt, k->ptr[2], p));
      }
    }
  return 0;
}

/* (x - mean) / (std + 1e-9) over the marked axes, as ONNX's function body. */
static int k_mvn(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_normalize_attrs *a = c->attrs;
  const gs_shape *s = &c->in[0].shape;
  gs_dtype dt = c->in[0].dtype;
  int64_t n = gs_shape_numel(s), groups = 1, count = 1;
  for (int d = 0; d < s->rank; d++)
    if (a->reduce[d])
      count *= s->dims[d];
    else
      groups *= s->dims[d];
  double *sum = calloc((size_t)(groups ? groups : 1), sizeof(double));
  double *sq = calloc((size_t)(groups ? groups : 1), sizeof(double));
  if (!sum || !sq) {
    free(sum);
    free(sq);
    return gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name);
  }
  /* The group of element i: its index over the kept dims. */
  for (int pass = 0; pass < 2; pass++)
    for (int64_t i = 0; i < n; i++) {
      int64_t rest = i, g = 0, mul = 1;
      for (int d = s->rank - 1; d >= 0; d--) {
        int64_t at = rest % s->dims[d];
        rest /= s->dims[d];
        if (!a->reduce[d]) {
          g += at * mul;
          mul *= s->dims[d];
        }
      }
      double v = gs_ld(dt, k->ptr[0], i);
      if (pass == 0) {
        sum[g] += v;
        sq[g] += v * v;
      } else {
        double mean = sum[g] / (double)count, var = sq[g] / (double)count - mean * mean;
        gs_st(dt, k->ptr[1], i, (v - mean) / (sqrt(var > 0 ? var : 0) + 1e-9));
      }
    }
  free(sum);
  free(sq);
  return 0;
}

/* Each lane along the axis over its p-norm (a zero norm gives what the
 * division gives, as the reference's). */
static int k_lp_norm(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_normalize_attrs *a = c->attrs;
  gs_dtype dt = c->in[0].dtype;
  int64_t outer, len, inner;
  gs_launch_split_axis(&c->in[0].shape, a->axis, &outer, &len, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      int64_t base = o * len * inner + in;
      double norm = 0;
      for (int64_t j = 0; j < len; j++) {
        double v = gs_ld(dt, k->ptr[0], base + j * inner);
        norm += a->p == 1 ? fabs(v) : v * v;
      }
      norm = a->p == 1 ? norm : sqrt(norm);
      for (int64_t j = 0; j < len; j++)
        gs_st(dt, k->ptr[1], base + j * inner, gs_ld(dt, k->ptr[0], base + j * inner) / norm);
    }
  return 0;
}

static const gs_cpu_kernel_entry kernels[] = {
    GS_CPU_KERNEL("LRN", k_lrn),
    GS_CPU_KERNEL("GroupNormalization", k_group_norm),
    GS_CPU_KERNEL("InstanceNormalization", k_group_norm), /* a group per channel */
    GS_CPU_KERNEL("MeanVarianceNormalization", k_mvn),
    GS_CPU_KERNEL("LpNormalization", k_lp_norm),
};

int gs__cpu_register_normalize(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

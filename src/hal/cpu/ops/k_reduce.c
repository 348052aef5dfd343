/* k_reduce.c - CPU kernels of the reductions: ReduceMean, ReduceSum and
 * ReduceMax over any set of axes, ArgMax and TopK along one axis. */
#include "hal/cpu/ops/kernels.h"
#include "hal/op/op_launch.h"

#include "base/error.h"

#include <stdlib.h>

typedef enum { R_SUM, R_MEAN, R_MAX } reduce_op;

static int run_reduce(const gs_cpu_kernel_call *k, reduce_op op) {
  const gs_op_call *c = gs_kcall(k);
  const gs_reduce_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape;
  gs_dtype dt = c->in[0].dtype;
  int64_t n_out = gs_shape_numel(&c->out[0].shape), n_in = gs_shape_numel(xs);
  void *y = k->ptr[c->n_in];
  /* Output element strides along the input's dims (0 where reduced). */
  int64_t ostride[GS_MAX_DIMS], s = 1, count = 1;
  for (int d = xs->rank - 1; d >= 0; d--) {
    ostride[d] = a->reduce[d] ? 0 : s;
    if (!a->reduce[d])
      s *= xs->dims[d];
    else
      count *= xs->dims[d];
  }
  bool is_int = gs_is_int(dt);
  double *acc = malloc(sizeof(double) * (size_t)(n_out ? n_out : 1));
  int64_t *iacc = malloc(sizeof(int64_t) * (size_t)(n_out ? n_out : 1));
  if (!acc || !iacc) {
    free(acc);
    free(iacc);
    return gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name);
  }
  for (int64_t i = 0; i < n_out; i++) {
    acc[i] = op == R_MAX ? -INFINITY : 0.0;
    iacc[i] = op == R_MAX ? INT64_MIN : 0;
  }
  int64_t idx[GS_MAX_DIMS] = {0}, o = 0;
  for (int64_t i = 0; i < n_in; i++) {
    if (is_int) {
      int64_t v = gs_ldi(dt, k->ptr[0], i);
      iacc[o] = op == R_MAX ? (v > iacc[o] ? v : iacc[o]) : (int64_t)((uint64_t)iacc[o] + (uint64_t)v);
    } else {
      double v = gs_ld(dt, k->ptr[0], i);
      acc[o] = op == R_MAX ? (v > acc[o] || v != v ? v : acc[o]) : acc[o] + v;
    }
    /* Advance the input index and the matching output offset. */
    for (int d = xs->rank - 1; d >= 0; d--) {
      idx[d]++;
      o += ostride[d];
      if (idx[d] < xs->dims[d])
        break;
      o -= ostride[d] * idx[d];
      idx[d] = 0;
    }
  }
  for (int64_t i = 0; i < n_out; i++) {
    if (is_int)
      gs_sti(dt, y, i, op == R_MEAN && count ? iacc[i] / count : iacc[i]);
    else
      gs_st(dt, y, i, op == R_MEAN ? acc[i] / (double)count : acc[i]);
  }
  free(acc);
  free(iacc);
  return 0;
}

static int k_reduce_sum(const gs_cpu_kernel_call *k) { return run_reduce(k, R_SUM); }
static int k_reduce_mean(const gs_cpu_kernel_call *k) { return run_reduce(k, R_MEAN); }
static int k_reduce_max(const gs_cpu_kernel_call *k) { return run_reduce(k, R_MAX); }

static int k_argmax(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_reduce_attrs *a = c->attrs;
  int axis = 0;
  while (!a->reduce[axis])
    axis++;
  int64_t outer, len, inner;
  gs_launch_split_axis(&c->in[0].shape, axis, &outer, &len, &inner);
  gs_dtype dt = c->in[0].dtype;
  int64_t *y = k->ptr[1];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      int64_t base = o * len * inner + in, best = 0;
      double bv = gs_ld(dt, k->ptr[0], base);
      for (int64_t i = 1; i < len; i++) {
        double v = gs_ld(dt, k->ptr[0], base + i * inner);
        if (v > bv || (a->select_last && v == bv) || (v != v && bv == bv)) {
          bv = v;
          best = i;
        }
      }
      y[o * inner + in] = best;
    }
  return 0;
}

typedef struct entry {
  double v;
  int64_t i;
} entry;

static int cmp_largest(const void *x, const void *y) {
  const entry *a = x, *b = y;
  if (a->v != b->v)
    return a->v > b->v ? -1 : 1;
  return (a->i > b->i) - (a->i < b->i);
}

static int cmp_smallest(const void *x, const void *y) {
  const entry *a = x, *b = y;
  if (a->v != b->v)
    return a->v < b->v ? -1 : 1;
  return (a->i > b->i) - (a->i < b->i);
}

static int k_topk(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_topk_attrs *a = c->attrs;
  int64_t outer, len, inner;
  gs_launch_split_axis(&c->in[0].shape, a->axis, &outer, &len, &inner);
  gs_dtype dt = c->in[0].dtype;
  entry *e = malloc(sizeof *e * (size_t)(len ? len : 1));
  if (!e)
    return gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name);
  void *values = k->ptr[2];
  int64_t *indices = c->n_out > 1 ? k->ptr[3] : NULL;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      int64_t base = o * len * inner + in;
      for (int64_t i = 0; i < len; i++)
        e[i] = (entry){gs_ld(dt, k->ptr[0], base + i * inner), i};
      /* Ties keep the lower index first, as ONNX asks. */
      qsort(e, (size_t)len, sizeof *e, a->largest ? cmp_largest : cmp_smallest);
      for (int64_t j = 0; j < a->k; j++) {
        int64_t out = o * a->k * inner + j * inner + in;
        if (gs_is_int(dt))
          gs_sti(dt, values, out, gs_ldi(dt, k->ptr[0], base + e[j].i * inner));
        else
          gs_st(dt, values, out, e[j].v);
        if (indices)
          indices[out] = e[j].i;
      }
    }
  free(e);
  return 0;
}

#define KERNEL GS_CPU_KERNEL
static const gs_cpu_kernel_entry kernels[] = {
    KERNEL("ReduceSum", k_reduce_sum), KERNEL("ReduceMean", k_reduce_mean),
    KERNEL("ReduceMax", k_reduce_max), KERNEL("ArgMax", k_argmax),
    KERNEL("TopK", k_topk),
};

int gs__cpu_register_reduce(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

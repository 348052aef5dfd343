/* k_reduce.c - CPU kernels of the reductions: the Reduce* family over any
 * set of axes, ArgMax, ArgMin and TopK along one axis. */
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/lane_sum.h"
#include "hal/cpu/ops/parallel.h"
#include "hal/op/op_launch.h"

#include "base/error.h"

#include <stdlib.h>

typedef enum {
  R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_LOGSUM, R_LOGSUMEXP, R_SUMSQUARE
} reduce_op;

/* What each element adds to its accumulator, and what the accumulator
 * starts at: an empty reduction gives that start (after finish()). */
static inline double reduce_start(reduce_op op) {
  return op == R_MAX ? -INFINITY : op == R_MIN ? INFINITY : op == R_PROD ? 1.0 : 0.0;
}

static inline double reduce_step(reduce_op op, double acc, double v) {
  switch (op) {
  case R_MAX: return v > acc || v != v ? v : acc;
  case R_MIN: return v < acc || v != v ? v : acc;
  case R_PROD: return acc * v;
  case R_L1: return acc + fabs(v);
  case R_L2:
  case R_SUMSQUARE: return acc + v * v;
  case R_LOGSUMEXP: return acc + exp(v);
  default: return acc + v;
  }
}

static inline double reduce_finish(reduce_op op, double acc, int64_t count) {
  switch (op) {
  case R_MEAN: return acc / (double)count;
  case R_L2: return sqrt(acc);
  case R_LOGSUM:
  case R_LOGSUMEXP: return log(acc);
  default: return acc;
  }
}

static inline int64_t reduce_step_int(reduce_op op, int64_t acc, int64_t v, bool u64) {
  uint64_t ua = (uint64_t)acc, uv = (uint64_t)v;
  switch (op) {
  case R_MAX: return u64 ? (uv > ua ? v : acc) : v > acc ? v : acc;
  case R_MIN: return u64 ? (uv < ua ? v : acc) : v < acc ? v : acc;
  case R_PROD: return (int64_t)(ua * uv);
  case R_L1: return (int64_t)(ua + (v < 0 ? 0 - uv : uv));
  case R_SUMSQUARE: return (int64_t)(ua + uv * uv);
  default: return (int64_t)(ua + uv);
  }
}

/* Outputs [lo, hi) of a reduction whose output i reduces inputs
 * [i count, (i + 1) count). */
static void reduce_runs(reduce_op op, gs_dtype dt, bool is_int, const void *x, int64_t count,
                        double *acc, int64_t *iacc, int64_t lo, int64_t hi) {
  for (int64_t o = lo; o < hi; o++)
    for (int64_t i = o * count; i < (o + 1) * count; i++) {
      if (is_int)
        iacc[o] = reduce_step_int(op, iacc[o], gs_ldi(dt, x, i), gs_is_u64(dt));
      else
        acc[o] = reduce_step(op, acc[o], gs_ld(dt, x, i));
    }
}

/* float32 runs of `count` values into float32 outputs [lo, hi), for the
 * reductions whose sums vectorise (the generic walk reads each value
 * through a type switch, into one serial sum). In double, as that walk. */
GS_VECTOR_CLONES static void reduce_runs_f32(reduce_op op, const float *x, int64_t count,
                                             float *y, int64_t lo, int64_t hi) {
  for (int64_t o = lo; o < hi; o++) {
    const float *run = x + o * count;
    double acc = op == R_SUMSQUARE || op == R_L2 ? gs_lane_sum_sq(run, count, 0.0f)
                                                 : gs_lane_sum(run, count);
    y[o] = (float)reduce_finish(op, acc, count);
  }
}

static bool fast_f32(reduce_op op, gs_dtype dt) {
  return dt == GS_DT_FLOAT32 &&
         (op == R_SUM || op == R_MEAN || op == R_SUMSQUARE || op == R_L2);
}

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
  /* Reduced dims all after the kept ones: output i reduces the i-th run of
   * `count` inputs, in the order the walks below take them, so runs spread
   * over the threads give the same sums. */
  bool trailing = true;
  for (int d = 1; d < xs->rank; d++)
    trailing = trailing && !(a->reduce[d - 1] && !a->reduce[d]);
  if (trailing && n_in > 0 && fast_f32(op, dt)) {
    GS_PARALLEL_RANGES(n_out, GS_PARALLEL_GRAIN / (count ? count : 1), lo, hi,
                       reduce_runs_f32(op, k->ptr[0], count, y, lo, hi));
    return 0;
  }
  /* L2, LogSum and LogSumExp go through double for every type. */
  bool is_int = gs_is_int(dt) && op != R_L2 && op != R_LOGSUM && op != R_LOGSUMEXP;
  double *acc = malloc(sizeof(double) * (size_t)(n_out ? n_out : 1));
  int64_t *iacc = malloc(sizeof(int64_t) * (size_t)(n_out ? n_out : 1));
  if (!acc || !iacc) {
    free(acc);
    free(iacc);
    return gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name);
  }
  for (int64_t i = 0; i < n_out; i++) {
    acc[i] = reduce_start(op);
    /* uint64 rides in int64 bits: its extremes are 0 and all ones. */
    bool u = gs_is_u64(dt);
    iacc[i] = op == R_MAX   ? (u ? 0 : INT64_MIN)
              : op == R_MIN ? (u ? -1 : INT64_MAX)
              : op == R_PROD ? 1
                             : 0;
  }
  if (trailing && n_in > 0) {
    GS_PARALLEL_RANGES(n_out, GS_PARALLEL_GRAIN / (count ? count : 1), lo, hi,
                       reduce_runs(op, dt, is_int, k->ptr[0], count, acc, iacc, lo, hi));
    n_in = 0; /* done */
  }
  int64_t idx[GS_MAX_DIMS] = {0}, o = 0;
  for (int64_t i = 0; i < n_in; i++) {
    if (is_int)
      iacc[o] = reduce_step_int(op, iacc[o], gs_ldi(dt, k->ptr[0], i), gs_is_u64(dt));
    else
      acc[o] = reduce_step(op, acc[o], gs_ld(dt, k->ptr[0], i));
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
      gs_st(dt, y, i, reduce_finish(op, acc[i], count));
  }
  free(acc);
  free(iacc);
  return 0;
}

static int k_reduce_sum(const gs_cpu_kernel_call *k) { return run_reduce(k, R_SUM); }
static int k_reduce_mean(const gs_cpu_kernel_call *k) { return run_reduce(k, R_MEAN); }
static int k_reduce_max(const gs_cpu_kernel_call *k) { return run_reduce(k, R_MAX); }
static int k_reduce_min(const gs_cpu_kernel_call *k) { return run_reduce(k, R_MIN); }
static int k_reduce_prod(const gs_cpu_kernel_call *k) { return run_reduce(k, R_PROD); }
static int k_reduce_l1(const gs_cpu_kernel_call *k) { return run_reduce(k, R_L1); }
static int k_reduce_l2(const gs_cpu_kernel_call *k) { return run_reduce(k, R_L2); }
static int k_reduce_logsum(const gs_cpu_kernel_call *k) { return run_reduce(k, R_LOGSUM); }
static int k_reduce_logsumexp(const gs_cpu_kernel_call *k) { return run_reduce(k, R_LOGSUMEXP); }
static int k_reduce_sumsquare(const gs_cpu_kernel_call *k) { return run_reduce(k, R_SUMSQUARE); }

/* ArgMax (smallest false) and ArgMin: NaN wins, as the first NaN seen. */
static int run_arg(const gs_cpu_kernel_call *k, bool smallest) {
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
        bool better = smallest ? v < bv : v > bv;
        if (better || (a->select_last && v == bv) || (v != v && bv == bv)) {
          bv = v;
          best = i;
        }
      }
      y[o * inner + in] = best;
    }
  return 0;
}

static int k_argmax(const gs_cpu_kernel_call *k) { return run_arg(k, false); }
static int k_argmin(const gs_cpu_kernel_call *k) { return run_arg(k, true); }

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
    KERNEL("TopK", k_topk), KERNEL("ArgMin", k_argmin),
    KERNEL("ReduceMin", k_reduce_min), KERNEL("ReduceProd", k_reduce_prod),
    KERNEL("ReduceL1", k_reduce_l1), KERNEL("ReduceL2", k_reduce_l2),
    KERNEL("ReduceLogSum", k_reduce_logsum), KERNEL("ReduceLogSumExp", k_reduce_logsumexp),
    KERNEL("ReduceSumSquare", k_reduce_sumsquare),
};

int gs__cpu_register_reduce(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

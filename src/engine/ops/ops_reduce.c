/* ops_reduce.c - definitions of the reductions: the Reduce* family,
 * ArgMax, ArgMin and TopK. */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

#include <string.h>

/* The shape left after reducing the marked dims (kept as 1 with keepdims). */
static gs_shape reduced_shape(const gs_shape *x, const gs_reduce_attrs *a) {
  gs_shape out = {.rank = 0};
  for (int i = 0; i < x->rank; i++)
    if (!a->reduce[i])
      out.dims[out.rank++] = x->dims[i];
    else if (a->keepdims)
      out.dims[out.rank++] = 1;
  return out;
}

/* Axes come from the attribute (older opsets) or from input 1 (ReduceSum
 * from opset 13, the others from 18). */
static int infer_reduce(gs_op_call *c, const gs_node *n) {
  bool minmax = !strcmp(c->op_type, "ReduceMax") || !strcmp(c->op_type, "ReduceMin");
  int rc = gs_op_want_dtype(c, 0, GS_DTM_NUMERIC | (minmax ? GS_DTM(GS_DT_BOOL) : 0));
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape;
  gs_reduce_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  a->keepdims = gs_attr_int(n, "keepdims", 1) != 0;
  int64_t axes[GS_MAX_DIMS];
  int k = gs_attr_ints(n, "axes", axes, GS_MAX_DIMS);
  if (c->n_in > 1 && c->in[1].dtype != GS_DT_INVALID) {
    if (k >= 0)
      return gs_op_fail(c, "axes given both as attribute and as input");
    if ((k = gs_op_const_ints(c, 1, axes, GS_MAX_DIMS)) < 0)
      return k;
  }
  if (k > GS_MAX_DIMS)
    return gs_op_fail(c, "%d axes for rank %d", k, x->rank);
  if (k <= 0) { /* no axes: all, unless noop_with_empty_axes */
    bool noop = gs_attr_int(n, "noop_with_empty_axes", 0) != 0;
    for (int i = 0; i < x->rank; i++)
      a->reduce[i] = !noop;
  }
  for (int i = 0; i < k; i++) {
    int ax;
    if ((rc = gs_axis_normalize(axes[i], x->rank, &ax)) < 0)
      return gs_op_fail(c, "%s", gs_error_detail());
    if (a->reduce[ax])
      return gs_op_fail(c, "axis %d is listed twice", ax);
    a->reduce[ax] = true;
  }
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = reduced_shape(x, a);
  return GS_OK;
}

static int infer_argmax(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_NUMERIC);
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape;
  gs_reduce_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  int axis;
  if ((rc = gs_axis_normalize(gs_attr_int(n, "axis", 0), x->rank, &axis)) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  if (x->dims[axis] == 0)
    return gs_op_fail(c, "%s over an empty dimension has no value", c->op_type);
  a->reduce[axis] = true;
  a->keepdims = gs_attr_int(n, "keepdims", 1) != 0;
  a->select_last = gs_attr_int(n, "select_last_index", 0) != 0;
  c->out[0].dtype = GS_DT_INT64;
  c->out[0].shape = reduced_shape(x, a);
  return GS_OK;
}

static int infer_topk(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_NUMERIC);
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape;
  gs_topk_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  if ((rc = gs_axis_normalize(gs_attr_int(n, "axis", -1), x->rank, &a->axis)) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  int64_t k;
  if ((rc = gs_op_const_ints(c, 1, &k, 1)) < 0)
    return rc;
  if (rc != 1 || k < 0 || k > x->dims[a->axis])
    return gs_op_fail(c, "K must be one value in [0, %lld]", (long long)x->dims[a->axis]);
  a->k = k;
  a->largest = gs_attr_int(n, "largest", 1) != 0;
  a->sorted = gs_attr_int(n, "sorted", 1) != 0;
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = *x;
  c->out[0].shape.dims[a->axis] = k;
  if (c->n_out > 1) {
    c->out[1].dtype = GS_DT_INT64;
    c->out[1].shape = c->out[0].shape;
  }
  return GS_OK;
}

static const char *const reduce_attrs[] = {"axes", "keepdims", "noop_with_empty_axes", NULL};
static const char *const argmax_attrs[] = {"axis", "keepdims", "select_last_index", NULL};
static const char *const topk_attrs[] = {"axis", "largest", "sorted", NULL};

#define REDUCE(op) \
  {.name = op, .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1, .attrs = reduce_attrs, \
   .infer = infer_reduce}

const gs_op_def gs__ops_reduce[] = {
    REDUCE("ReduceMean"),
    REDUCE("ReduceSum"),
    REDUCE("ReduceMax"),
    REDUCE("ReduceMin"),
    REDUCE("ReduceProd"),
    REDUCE("ReduceL1"),
    REDUCE("ReduceL2"),
    REDUCE("ReduceLogSum"),
    REDUCE("ReduceLogSumExp"),
    REDUCE("ReduceSumSquare"),
    {.name = "ArgMax", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = argmax_attrs, .infer = infer_argmax},
    {.name = "ArgMin", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = argmax_attrs, .infer = infer_argmax},
    {.name = "TopK", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 2, .attrs = topk_attrs,
     .infer = infer_topk},
    {.name = NULL},
};

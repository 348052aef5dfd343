/* ops_normalize.c - definitions of the normalizations beside the common
 * ones of ops_nn.c: LRN, GroupNormalization, InstanceNormalization,
 * MeanVarianceNormalization and LpNormalization. */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

#include <string.h>

static gs_normalize_attrs *norm_attrs(gs_op_call *c, int min_rank) {
  if (gs_op_want_dtype(c, 0, GS_DTM_FLOATS) < 0)
    return NULL;
  if (c->in[0].shape.rank < min_rank) {
    gs_op_fail(c, "the input must have rank %d or more", min_rank);
    return NULL;
  }
  gs_normalize_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    gs_error(GS_ENOMEM, "out of memory planning node %s", c->node_name);
  c->out[0] = c->in[0];
  return a;
}

static int infer_lrn(gs_op_call *c, const gs_node *n) {
  gs_normalize_attrs *a = norm_attrs(c, 3);
  if (!a)
    return gs_error_code();
  a->alpha = gs_attr_float(n, "alpha", 1e-4f);
  a->beta = gs_attr_float(n, "beta", 0.75f);
  a->bias = gs_attr_float(n, "bias", 1.0f);
  a->size = gs_attr_int(n, "size", 0);
  if (a->size < 1)
    return gs_op_fail(c, "size must be at least 1");
  return GS_OK;
}

static int infer_group_norm(gs_op_call *c, const gs_node *n) {
  gs_normalize_attrs *a = norm_attrs(c, 2);
  if (!a)
    return gs_error_code();
  int64_t C = c->in[0].shape.dims[1];
  a->epsilon = gs_attr_float(n, "epsilon", 1e-5f);
  a->groups = gs_attr_int(n, "num_groups", 0);
  if (a->groups < 1 || C % a->groups)
    return gs_op_fail(c, "num_groups %lld must divide the %lld channels", (long long)a->groups,
                      (long long)C);
  /* Opset 21 gives scale and bias per channel, opset 18 per group. */
  int64_t k = gs_shape_numel(&c->in[1].shape);
  if (k != C && k != a->groups)
    return gs_op_fail(c, "scale has %lld values (channels %lld, groups %lld)", (long long)k,
                      (long long)C, (long long)a->groups);
  a->per_channel = k == C;
  for (int i = 1; i < 3; i++)
    if (c->in[i].dtype != c->in[0].dtype || gs_shape_numel(&c->in[i].shape) != k)
      return gs_op_fail(c, "scale and bias must match, of the input's type");
  return GS_OK;
}

/* InstanceNormalization: GroupNormalization with a group per channel. */
static int infer_instance_norm(gs_op_call *c, const gs_node *n) {
  gs_normalize_attrs *a = norm_attrs(c, 3);
  if (!a)
    return gs_error_code();
  int64_t C = c->in[0].shape.dims[1];
  a->epsilon = gs_attr_float(n, "epsilon", 1e-5f);
  a->groups = C;
  a->per_channel = true;
  for (int i = 1; i < 3; i++)
    if (c->in[i].dtype != c->in[0].dtype || gs_shape_numel(&c->in[i].shape) != C)
      return gs_op_fail(c, "scale and B must hold one value per channel (%lld)", (long long)C);
  return GS_OK;
}

static int infer_mvn(gs_op_call *c, const gs_node *n) {
  gs_normalize_attrs *a = norm_attrs(c, 1);
  if (!a)
    return gs_error_code();
  int64_t axes[GS_MAX_DIMS] = {0, 2, 3};
  int k = gs_attr_ints(n, "axes", axes, GS_MAX_DIMS);
  if (k < 0)
    k = 3;
  for (int i = 0; i < k && i < GS_MAX_DIMS; i++) {
    int ax;
    if (gs_axis_normalize(axes[i], c->in[0].shape.rank, &ax) < 0)
      return gs_op_fail(c, "%s", gs_error_detail());
    a->reduce[ax] = true;
  }
  return GS_OK;
}

/* x / the p-norm of its lane along axis (p 1 or 2). */
static int infer_lp_norm(gs_op_call *c, const gs_node *n) {
  gs_normalize_attrs *a = norm_attrs(c, 1);
  if (!a)
    return gs_error_code();
  if (gs_axis_normalize(gs_attr_int(n, "axis", -1), c->in[0].shape.rank, &a->axis) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  int64_t p = gs_attr_int(n, "p", 2);
  if (p != 1 && p != 2)
    return gs_op_fail(c, "p must be 1 or 2, not %lld", (long long)p);
  a->p = (int)p;
  return GS_OK;
}

static const char *const lrn_attrs[] = {"alpha", "beta", "bias", "size", NULL};
static const char *const group_norm_attrs[] = {"epsilon", "num_groups", "stash_type", NULL};
static const char *const mvn_attrs[] = {"axes", NULL};
static const char *const lp_norm_attrs[] = {"axis", "p", NULL};
static const char *const epsilon_attrs[] = {"epsilon", NULL};

const gs_op_def gs__ops_normalize[] = {
    {.name = "LRN", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .attrs = lrn_attrs,
     .infer = infer_lrn},
    {.name = "GroupNormalization", .min_in = 3, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = group_norm_attrs, .infer = infer_group_norm},
    {.name = "InstanceNormalization", .min_in = 3, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = epsilon_attrs, .infer = infer_instance_norm},
    {.name = "MeanVarianceNormalization", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = mvn_attrs, .infer = infer_mvn},
    {.name = "LpNormalization", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = lp_norm_attrs, .infer = infer_lp_norm},
    {.name = NULL},
};

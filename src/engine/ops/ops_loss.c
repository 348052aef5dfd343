/* ops_loss.c - definitions of the loss ops that exporters leave in
 * evaluation graphs: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss
 * (scores [N, C, d1..dk], targets [N, d1..dk], optional class weights [C]). */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

#include <string.h>

static int infer_loss(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, GS_DTM(GS_DT_INT32) | GS_DTM(GS_DT_INT64));
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape, *t = &c->in[1].shape;
  bool ok = x->rank >= 2 && t->rank == x->rank - 1 && t->dims[0] == x->dims[0];
  for (int i = 2; ok && i < x->rank; i++)
    ok = t->dims[i - 1] == x->dims[i];
  if (!ok)
    return gs_op_fail(c, "scores must be [N, C, d1..dk] and targets [N, d1..dk]");
  if (c->n_in > 2 && c->in[2].dtype != GS_DT_INVALID &&
      (c->in[2].dtype != c->in[0].dtype || c->in[2].shape.rank != 1 ||
       c->in[2].shape.dims[0] != x->dims[1]))
    return gs_op_fail(c, "weights must be [C] of the scores' type");
  gs_loss_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  const char *r = gs_attr_string(n, "reduction", "mean");
  if (!strcmp(r, "none"))
    a->reduction = GS_LOSS_NONE;
  else if (!strcmp(r, "sum"))
    a->reduction = GS_LOSS_SUM;
  else if (!strcmp(r, "mean"))
    a->reduction = GS_LOSS_MEAN;
  else
    return gs_op_fail(c, "reduction=\"%s\" (expected none, sum or mean)", r);
  a->has_ignore = gs_node_attr(n, "ignore_index") != NULL;
  a->ignore_index = gs_attr_int(n, "ignore_index", 0);
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = a->reduction == GS_LOSS_NONE ? *t : (gs_shape){.rank = 0};
  if (c->n_out > 1) /* SoftmaxCrossEntropyLoss's log_prob */
    c->out[1] = c->in[0];
  return GS_OK;
}

static const char *const loss_attrs[] = {"reduction", "ignore_index", NULL};

const gs_op_def gs__ops_loss[] = {
    {.name = "NegativeLogLikelihoodLoss", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = loss_attrs, .infer = infer_loss},
    {.name = "SoftmaxCrossEntropyLoss", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 2,
     .attrs = loss_attrs, .infer = infer_loss},
    {.name = NULL},
};

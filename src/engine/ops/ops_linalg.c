/* ops_linalg.c - definitions of the linear-algebra ops beside MatMul and
 * Einsum: Det, the determinants of a batch of square matrices. */
#include "engine/op.h"
#include "engine/ops/ops.h"

#include "base/error.h"

/* Det: [*, M, M] -> [*]. */
static int infer_det(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = gs_op_want_dtype(c, 0, GS_DTM_F32ISH | GS_DTM(GS_DT_FLOAT64));
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape;
  char buf[160];
  if (x->rank < 2 || x->dims[x->rank - 1] != x->dims[x->rank - 2])
    return gs_op_fail(c, "expects square matrices [*, M, M], got %s",
                      gs_shape_str(x, buf, sizeof buf));
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = *x;
  c->out[0].shape.rank -= 2;
  return GS_OK;
}

static const char *const no_attrs[] = {NULL};

const gs_op_def gs__ops_linalg[] = {
    {.name = "Det", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .attrs = no_attrs,
     .infer = infer_det},
    {.name = NULL},
};

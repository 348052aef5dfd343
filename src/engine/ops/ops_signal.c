/* ops_signal.c - definitions of the signal ops: the window functions
 * HannWindow, HammingWindow and BlackmanWindow. */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

static int infer_window(gs_op_call *c, const gs_node *n) {
  int64_t size;
  int rc = gs_op_const_ints(c, 0, &size, 1);
  if (rc < 0)
    return rc;
  if (rc != 1 || size < 0 || size > (1ll << 32))
    return gs_op_fail(c, "size must be one value from 0 to 2^32");
  gs_dtype dt = gs_dtype_from_onnx((int)gs_attr_int(n, "output_datatype", 1));
  if (dt == GS_DT_INVALID || dt == GS_DT_BYTES || dt == GS_DT_BOOL)
    return gs_op_fail(c, "output_datatype %lld is not supported",
                      (long long)gs_attr_int(n, "output_datatype", 1));
  gs_index_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  a->periodic = gs_attr_int(n, "periodic", 1) != 0;
  c->out[0].dtype = dt;
  c->out[0].shape = (gs_shape){.rank = 1, .dims = {size}};
  return GS_OK;
}

static const char *const window_attrs[] = {"output_datatype", "periodic", NULL};

#define WINDOW(op) \
  {.name = op, .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .attrs = window_attrs, \
   .infer = infer_window}

const gs_op_def gs__ops_signal[] = {
    WINDOW("HannWindow"),
    WINDOW("HammingWindow"),
    WINDOW("BlackmanWindow"),
    {.name = NULL},
};

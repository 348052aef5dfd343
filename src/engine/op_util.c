/* op_util.c - helpers that op definitions share: attribute lookups, known
 * input values, type checks and error messages. */
#include "engine/op.h"

#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t gs_attr_int(const gs_node *n, const char *name, int64_t dflt) {
  const gs_attr *a = gs_node_attr(n, name);
  return a && a->type == GS_ATTR_INT ? a->i : dflt;
}

float gs_attr_float(const gs_node *n, const char *name, float dflt) {
  const gs_attr *a = gs_node_attr(n, name);
  if (a && a->type == GS_ATTR_FLOAT)
    return a->f;
  if (a && a->type == GS_ATTR_INT)
    return (float)a->i;
  return dflt;
}

const char *gs_attr_string(const gs_node *n, const char *name, const char *dflt) {
  const gs_attr *a = gs_node_attr(n, name);
  return a && a->type == GS_ATTR_STRING ? a->s : dflt;
}

int gs_attr_ints(const gs_node *n, const char *name, int64_t *out, int max) {
  const gs_attr *a = gs_node_attr(n, name);
  if (!a || a->type != GS_ATTR_INTS)
    return -1;
  for (int i = 0; i < a->n && i < max; i++)
    out[i] = a->ints[i];
  return a->n;
}

int gs_op_fail(const gs_op_call *c, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return gs_error(GS_EINVAL, "node %s (%s): %s", c->node_name, c->op_type, msg);
}

/* The input whose values the last failing infer on this thread needed. */
static __thread int wanted_input = -1;

int gs_op_need_values(const gs_op_call *c, int input) {
  if (c->in_data[input])
    return GS_OK;
  wanted_input = input;
  return gs_op_fail(c, "input %d must be known before running: a constant, computed from "
                       "constants and shapes, or a model input whose values the caller gives "
                       "when planning", input);
}

int gs_op_wanted_input(void) {
  int w = wanted_input;
  wanted_input = -1;
  return w;
}

int gs_op_const_ints(const gs_op_call *c, int input, int64_t *out, int max) {
  if (input >= c->n_in || c->in[input].dtype == GS_DT_INVALID)
    return gs_op_fail(c, "input %d is missing", input);
  int rc = gs_op_need_values(c, input);
  if (rc < 0)
    return rc;
  const void *data = c->in_data[input];
  gs_dtype dt = c->in[input].dtype;
  if (dt != GS_DT_INT64 && dt != GS_DT_INT32)
    return gs_op_fail(c, "input %d must be int64 or int32, got %s", input, gs_dtype_name(dt));
  int64_t n = gs_shape_numel(&c->in[input].shape);
  if (c->in[input].shape.rank > 1 || n > max)
    return gs_op_fail(c, "input %d must be a list of at most %d values", input, max);
  for (int64_t i = 0; i < n; i++)
    out[i] = dt == GS_DT_INT64 ? ((const int64_t *)data)[i] : ((const int32_t *)data)[i];
  return (int)n;
}

int gs_op_const_scalar(const gs_op_call *c, int input, double *out) {
  int rc = gs_op_need_values(c, input);
  if (rc < 0)
    return rc;
  if (gs_shape_numel(&c->in[input].shape) != 1)
    return gs_op_fail(c, "input %d must hold one value", input);
  gs_dtype dt = c->in[input].dtype;
  if (dt == GS_DT_BYTES || gs_dtype_size(dt) == 0)
    return gs_op_fail(c, "input %d has type %s", input, gs_dtype_name(dt));
  *out = gs_elem_as_double(dt, c->in_data[input], 0);
  return GS_OK;
}

int gs_op_want_dtype(const gs_op_call *c, int input, uint32_t mask) {
  gs_dtype dt = c->in[input].dtype;
  if (dt == GS_DT_INVALID || !(mask & GS_DTM(dt)))
    return gs_op_fail(c, "input %d has type %s, which this op does not take", input,
                      gs_dtype_name(dt));
  return GS_OK;
}

void *gs_op_attrs(gs_op_call *c, size_t size) {
  free(c->attrs);
  c->attrs = calloc(1, size);
  if (!c->attrs)
    gs_error(GS_ENOMEM, "out of memory for the attributes of node %s", c->node_name);
  return c->attrs;
}

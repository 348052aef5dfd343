/* ops.c - the registry of op definitions: every family's table, looked up by
 * ONNX op_type. */
#include "engine/ops/ops.h"

#include <string.h>

static const gs_op_def *const tables[] = {gs__ops_elementwise, gs__ops_nn, gs__ops_reduce,
                                          gs__ops_shape, gs__ops_index, gs__ops_loss,
                                          gs__ops_normalize, gs__ops_signal, gs__ops_quant, gs__ops_qoperator,
                                          gs__ops_einsum, gs__ops_linalg, gs__ops_rnn,
                                          gs__ops_detect, gs__ops_control, gs__ops_attention};

static bool is_default_domain(const char *domain) {
  return !domain || !*domain || strcmp(domain, "ai.onnx") == 0;
}

const gs_op_def *gs_op_find(const char *domain, const char *name) {
  bool want_default = is_default_domain(domain);
  for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
    for (const gs_op_def *d = tables[t]; d->name; d++)
      if (strcmp(d->name, name) == 0 &&
          (want_default ? !d->domain : d->domain && strcmp(d->domain, domain) == 0))
        return d;
  return NULL;
}

bool gs_op_moves_bytes(const char *name) {
  static const char *const movers[] = {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
                                       "Transpose", "Concat", "Split", "Slice", "Gather",
                                       "Expand", "Shape"};
  for (size_t i = 0; i < sizeof movers / sizeof movers[0]; i++)
    if (strcmp(movers[i], name) == 0)
      return true;
  return false;
}

int gs_op_list(const gs_op_def **out, int max) {
  int n = 0;
  for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
    for (const gs_op_def *d = tables[t]; d->name; d++) {
      if (n < max)
        out[n] = d;
      n++;
    }
  return n;
}

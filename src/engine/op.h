/* op.h - the backend-neutral definition of an op: which inputs, outputs and
 * attributes it takes, how it checks them, and how it infers the types and
 * shapes of its outputs into the HAL's gs_op_call (hal/op/op_call.h).
 * Kernels live in the HAL beside each backend, registered under the op's
 * name when the backend starts (src/hal/cpu/ops/ for the CPU). */
#ifndef GS_ENGINE_OP_H
#define GS_ENGINE_OP_H

#include "engine/model.h"
#include "hal/op/op_call.h"

typedef struct gs_op_def {
  const char *name; /* ONNX op_type */
  /* NULL: the default ONNX domain; else the node's domain, e.g.
   * "com.microsoft" for the ops onnxruntime's quantiser writes. */
  const char *domain;
  int min_in, max_in, min_out, max_out;
  /* Attribute names the op understands; NULL-terminated, NULL for none. Any
   * other attribute on a node makes the model unsupported. */
  const char *const *attrs;
  /* Optional: checks attribute values that cannot be supported, at load. */
  int (*check)(const gs_node *node);
  /* Validates the inputs (types, shapes, known values), fills out[] and
   * attrs. Errors name the node and say what was expected and what came. */
  int (*infer)(gs_op_call *call, const gs_node *node);
  /* Optional: computes output 0 without its inputs' values, from shapes and
   * attributes alone (Shape, Constant). `out` has room for out[0]. */
  int (*fold)(const gs_op_call *call, const gs_node *node, void *out);
  /* The planner runs the node itself, choosing among its graph attributes
   * while running (If, Loop, Scan): it cuts the plan around it (plan_stages.h). */
  bool runs_graphs;
} gs_op_def;

/* The op named `name` in `domain` ("", "ai.onnx" and NULL: the default
 * ONNX domain), or NULL. */
const gs_op_def *gs_op_find(const char *domain, const char *name);
/* The op a node names, or NULL. */
static inline const gs_op_def *gs_op_of(const gs_node *n) {
  return gs_op_find(n->domain, n->op_type);
}
/* Whether op `name` takes BYTES (string) tensors: it moves elements
 * without reading them (Identity, the reshapes, Transpose, Concat, Split,
 * Slice, Gather, Expand, Shape), so a string record is 16 opaque bytes. */
bool gs_op_moves_bytes(const char *name);
/* Every op, for listings: fills up to max, returns the total. */
int gs_op_list(const gs_op_def **out, int max);

/* ---- helpers for op definitions (op_util.c) --------------------------------- */

int64_t gs_attr_int(const gs_node *n, const char *name, int64_t dflt);
float gs_attr_float(const gs_node *n, const char *name, float dflt);
const char *gs_attr_string(const gs_node *n, const char *name, const char *dflt);
/* The ints of an INTS attribute: count, or -1 when absent; fills up to max. */
int gs_attr_ints(const gs_node *n, const char *name, int64_t *out, int max);

/* GS_OK when input i's values are known while planning; else fails naming
 * the input, and remembers it for gs_op_wanted_input(). */
int gs_op_need_values(const gs_op_call *c, int input);
/* The input whose values the last gs_op_need_values() on this thread
 * missed, or -1; reading it clears it. The planner uses it to learn which
 * model inputs it must plan with their values (engine.h). */
int gs_op_wanted_input(void);
/* Reads a known int64/int32 input (shapes, axes, ...) into out. Returns the
 * count, or a GS_E code when the input is unknown before running or too long. */
int gs_op_const_ints(const gs_op_call *c, int input, int64_t *out, int max);
/* Reads a known one-element input of any numeric type (Range's bounds, a
 * Pad constant, OneHot's depth) as a double. */
int gs_op_const_scalar(const gs_op_call *c, int input, double *out);
/* Sets the error "node N (Op): <message>" and returns GS_EINVAL. */
int gs_op_fail(const gs_op_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Requires input i to have one of the dtypes in mask (1u << dtype). */
int gs_op_want_dtype(const gs_op_call *c, int input, uint32_t mask);
/* Allocates the zeroed attrs block of `size` bytes into c->attrs. */
void *gs_op_attrs(gs_op_call *c, size_t size);

#define GS_DTM(dt) (1u << (dt))
#define GS_DTM_FLOATS \
  (GS_DTM(GS_DT_FLOAT16) | GS_DTM(GS_DT_BFLOAT16) | GS_DTM(GS_DT_FLOAT32) | GS_DTM(GS_DT_FLOAT64))
/* float32 and the 16-bit floats computed in float32 (no float64). */
#define GS_DTM_F32ISH (GS_DTM(GS_DT_FLOAT16) | GS_DTM(GS_DT_BFLOAT16) | GS_DTM(GS_DT_FLOAT32))
#define GS_DTM_INTS                                                                  \
  (GS_DTM(GS_DT_UINT8) | GS_DTM(GS_DT_INT8) | GS_DTM(GS_DT_INT16) | GS_DTM(GS_DT_INT32) | \
   GS_DTM(GS_DT_INT64) | GS_DTM(GS_DT_UINT16) | GS_DTM(GS_DT_UINT32) | GS_DTM(GS_DT_UINT64))
#define GS_DTM_NUMERIC (GS_DTM_FLOATS | GS_DTM_INTS)
#define GS_DTM_ALL (GS_DTM_NUMERIC | GS_DTM(GS_DT_BOOL))
/* What ops that only move elements take: strings too (gs_op_moves_bytes). */
#define GS_DTM_MOVABLE (GS_DTM_ALL | GS_DTM(GS_DT_BYTES))

#endif

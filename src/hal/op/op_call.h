/* op_call.h - the op ABI between the engine and every backend's kernels:
 * what one node's launch describes (operand types and shapes, the op's
 * parsed attributes, the kernel's kept state). Covered by
 * GS_HAL_API_VERSION: a plugin built against another layout is refused.
 *
 * A kernel receives, as its only parameter, a pointer to the gs_op_call of
 * its node, and its buffers in the order inputs then outputs (NULL for an
 * omitted optional input). The attribute blocks are in op_attrs.h; helpers
 * every backend's kernels share are in op_launch.h. */
#ifndef GS_HAL_OP_CALL_H
#define GS_HAL_OP_CALL_H

#include "hal/op/tensor.h"

/* Inputs plus outputs of one node, bounded by the HAL's kernel buffers. */
#define GS_OP_MAX_IO 64

typedef struct gs_tensor_desc {
  gs_dtype dtype; /* GS_DT_INVALID: an omitted optional operand */
  gs_shape shape;
} gs_tensor_desc;

/* What a kernel keeps between runs of one plan step (a oneDNN primitive,
 * reordered weights); freed with the plan through `free`. */
typedef struct gs_kernel_state {
  void *ptr;
  void (*free)(void *ptr);
} gs_kernel_state;

typedef struct gs_op_call {
  const char *op_type;   /* the ONNX op_type, which names the kernel */
  const char *node_name; /* for messages */
  bool owns_node_name;   /* steps the plan adds name themselves */
  int n_in, n_out;
  gs_tensor_desc in[GS_OP_MAX_IO];
  gs_tensor_desc out[GS_OP_MAX_IO];
  /* Set by the op's shape inference: its parsed attributes, one flat
   * malloc'd block that the plan frees. Kernels read it; its layout is in
   * op_attrs.h. */
  void *attrs;
  /* During inference only: the values of inputs known before running
   * (constants and folded results), NULL where unknown. */
  const void *in_data[GS_OP_MAX_IO];
  /* Set by the plan for the steps it runs (NULL while folding). */
  gs_kernel_state *state;
} gs_op_call;

/* Whether input i is there: within the node's inputs and not left out (""). */
static inline bool gs_op_given(const gs_op_call *c, int i) {
  return i < c->n_in && c->in[i].dtype != GS_DT_INVALID;
}

#endif

/* op_launch.h - for every backend's kernels of the engine's ops: what
 * they read from a launch's gs_op_call, written once for all of them. Header
 * only (static inline): plugins resolve only the HAL's symbols from their
 * host, and the HAL's conformance runner has no engine at all. */
#ifndef GS_HAL_OP_LAUNCH_H
#define GS_HAL_OP_LAUNCH_H

#include "hal/op/op_call.h"
#include "hal/op/op_attrs.h"

/* The node's call from a launch's (or a kernel_supports query's) params:
 * the plan passes a pointer to its gs_op_call pointer. NULL otherwise. */
static inline const gs_op_call *gs_launch_call(const void *params, size_t size) {
  return size == sizeof(const gs_op_call *) ? *(const gs_op_call *const *)params : NULL;
}

static inline int64_t gs_launch_numel(const gs_shape *s) {
  int64_t n = 1;
  for (int d = 0; d < s->rank; d++)
    n *= s->dims[d];
  return n;
}

/* Bytes per element, as gs_dtype_size says (0: none). */
static inline size_t gs_launch_element_size(gs_dtype dt) {
  switch (dt) {
  case GS_DT_BOOL: case GS_DT_UINT8: case GS_DT_INT8: return 1;
  case GS_DT_INT16: case GS_DT_UINT16: case GS_DT_FLOAT16: case GS_DT_BFLOAT16: return 2;
  case GS_DT_INT32: case GS_DT_UINT32: case GS_DT_FLOAT32: return 4;
  case GS_DT_INT64: case GS_DT_UINT64: case GS_DT_FLOAT64: return 8;
  case GS_DT_BYTES: return sizeof(gs_bytes_ref);
  default: return 0;
  }
}

/* NumPy broadcasting: the stride, in elements, of `in` along each of the
 * output's dimensions (0 where `in` is broadcast). */
static inline void gs_launch_broadcast_strides(const gs_shape *in, const gs_shape *out,
                                               int64_t *strides) {
  int64_t stride = 1;
  for (int d = out->rank - 1; d >= 0; d--) {
    int di = d - (out->rank - in->rank);
    if (di >= 0 && in->dims[di] > 1) {
      strides[d] = stride;
      stride *= in->dims[di];
    } else {
      strides[d] = 0;
    }
  }
}

/* A dense row-major shape's stride, in elements, along each dimension. */
static inline void gs_launch_contiguous_strides(const gs_shape *s, int64_t *strides) {
  int64_t stride = 1;
  for (int d = s->rank - 1; d >= 0; d--) {
    strides[d] = stride;
    stride *= s->dims[d];
  }
}

/* Transpose: the input's stride along each output dimension. */
static inline void gs_launch_transpose_strides(const gs_op_call *c, int64_t *strides) {
  const gs_transpose_attrs *a = c->attrs;
  int64_t in_strides[GS_MAX_DIMS] = {0};
  gs_launch_contiguous_strides(&c->in[0].shape, in_strides);
  for (int d = 0; d < c->out[0].shape.rank; d++)
    strides[d] = in_strides[a->perm[d]];
}

/* A shape as [outer, len, inner] around one axis. */
static inline void gs_launch_split_axis(const gs_shape *s, int axis, int64_t *outer,
                                        int64_t *len, int64_t *inner) {
  *outer = *inner = 1;
  *len = s->dims[axis];
  for (int i = 0; i < axis; i++)
    *outer *= s->dims[i];
  for (int i = axis + 1; i < s->rank; i++)
    *inner *= s->dims[i];
}

/* Softmax and LogSoftmax: the input as [outer, len, inner] around the axis. */
static inline void gs_launch_softmax_dims(const gs_op_call *c, int64_t *outer, int64_t *len,
                                          int64_t *inner) {
  gs_launch_split_axis(&c->in[0].shape, ((const gs_axis_attrs *)c->attrs)->axis, outer, len,
                       inner);
}

/* LayerNormalization: the rows' length, the dimensions from the axis on. */
static inline int64_t gs_launch_norm_inner(const gs_op_call *c) {
  const gs_norm_attrs *a = c->attrs;
  int64_t inner = 1;
  for (int i = a->axis; i < c->in[0].shape.rank; i++)
    inner *= c->in[0].shape.dims[i];
  return inner;
}

/* MatMul: element offsets of batch `b`'s matrices in a and b. */
static inline void gs_launch_matmul_offsets(const gs_matmul_attrs *m, int64_t b, int64_t *oa,
                                            int64_t *ob) {
  *oa = *ob = 0;
  for (int d = m->batch_rank - 1; d >= 0; d--) {
    int64_t i = b % m->batch_dims[d];
    b /= m->batch_dims[d];
    *oa += i * m->a_batch_strides[d];
    *ob += i * m->b_batch_strides[d];
  }
}

#endif

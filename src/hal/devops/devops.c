/* devops.c - the engine's ops on kernel-compiling devices (OpenCL, CUDA):
 * for each op, which launches its kernel runs and the kernel's arguments
 * from the node's gs_op_call. The kernels are op_kernels.h; a launch's
 * operands are the node's inputs, then its outputs. A launch with a
 * float64 operand takes its kernels from the device's float64 program
 * (gs_devops_needs_f64). What a kernel does not cover (bfloat16 tensors,
 * integer MatMul and Pow, strings; float64 where the device has no fp64)
 * the plan runs on the CPU, per launch. */
#include "hal/devops/devops_internal.h"
#include "hal/devops/op_codes.h"

#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *const gs_devk_names[GS_DK_COUNT] = {
#define GS_DK_NAME(name) #name,
    GS_DEVOPS_KERNELS(GS_DK_NAME)
#undef GS_DK_NAME
};


/* The ops that only move elements, by their size: their kernels are the
 * same in both programs, so float64 data needs no fp64. */
static bool moves_only(const gs_devop *op);

bool gs_devops_needs_f64(const gs_devop *op, const gs_op_call *c) {
  /* The data (input 0) or the result: Cast's and OneHot's float64 is the
   * output; a float64 operand beside other data (Resize's roi, Dropout's
   * ratio) is never read by the kernel. */
  bool f64 = (c->n_in > 0 && c->in[0].dtype == GS_DT_FLOAT64) ||
             (c->n_out > 0 && c->out[0].dtype == GS_DT_FLOAT64);
  return f64 && !moves_only(op);
}

/* op_kernels.h's structures, field for field (longs as int64_t). */
typedef struct dk_pad {
  int64_t rank, out_dims[8], in_dims[8], begin[8], mode;
} dk_pad;
typedef struct dk_reduce {
  int64_t out_rank, out_dims[8], out_strides[8], red_rank, red_dims[8], red_strides[8], count;
} dk_reduce;
typedef struct dk_conv {
  int64_t batch, in_channels, out_channels, group;
  int64_t in[3], out[3], k[3], stride[3], dil[3], pad[3];
} dk_conv;
typedef struct dk_gemm {
  int64_t batch, m, n, k, batch_rank, batch_dims[8], a_batch_strides[8], b_batch_strides[8];
  int64_t a_row, a_col, b_row, b_col;
  float alpha, beta;
  int32_t has_bias, relu;
} dk_gemm;
typedef struct dk_resize {
  int64_t rank, in_dims[8], out_dims[8];
  float scale[8];
  int32_t mode, coord, nearest, unused;
} dk_resize;

/* Any difference from op_kernels.h's layout (LP64: long is 64 bits) shows here. */
_Static_assert(sizeof(dk_walk) == 288 && sizeof(dk_pad) == 208 && sizeof(dk_reduce) == 280 &&
                   sizeof(dk_conv) == 176 && sizeof(dk_gemm) == 280 && sizeof(dk_resize) == 184,
               "the kernels' structures");



/* Merges neighbouring dimensions that every operand walks contiguously
 * and drops dimensions of 1: the kernels divide once per dimension and
 * element, and a plain elementwise op becomes one dimension (no division). */
static void coalesce(dk_walk *w) {
  int out = 0;
  for (int d = 0; d < w->rank; d++) {
    if (w->dims[d] == 1)
      continue;
    bool merge = out > 0;
    for (int k = 0; merge && k < 3; k++)
      merge = w->strides[k][out - 1] == w->strides[k][d] * w->dims[d];
    if (merge) {
      w->dims[out - 1] *= w->dims[d];
      for (int k = 0; k < 3; k++)
        w->strides[k][out - 1] = w->strides[k][d];
      continue;
    }
    w->dims[out] = w->dims[d];
    for (int k = 0; k < 3; k++)
      w->strides[k][out] = w->strides[k][d];
    out++;
  }
  w->rank = out;
}

int gs__devops_copy_walk(const gs_devops_target *t, int x, int y, size_t size, dk_walk *w) {
  coalesce(w);
  uint64_t n = 1;
  for (int d = 0; d < w->rank; d++)
    n *= (uint64_t)w->dims[d];
  return LAUNCH(t, by_size(GS_DK_copy_strided_b8, size), n, BUF(x, size), BUF(y, size), VAL(n),
                VAL(*w));
}

static int relu(const gs_devops_target *t, int y, int64_t n, gs_dtype dt);
static int divide(const gs_devops_target *t, int y, int64_t n, float divisor, gs_dtype dt);

/* devops' own variants of the binary family, never passed to a kernel:
 * Sum and Mean, folded with BINARY_ADD. */
#define BINARY_ADD_ALL 100
#define BINARY_MEAN_ALL 101
static int fill(const gs_devops_target *t, int y, size_t es, uint64_t at, uint64_t n,
                uint64_t bits);

/* y (dense, of shape ys) = x (of shape xs) broadcast to it: Expand, and
 * Gemm's C; elements of `size` bytes. */
static int broadcast_copy(const gs_devops_target *t, int x, const gs_shape *xs, int y,
                          const gs_shape *ys, size_t size) {
  dk_walk w = {.rank = ys->rank};
  for (int d = 0; d < w.rank; d++)
    w.dims[d] = ys->dims[d];
  gs_launch_broadcast_strides(xs, ys, w.strides[0]);
  gs_launch_contiguous_strides(ys, w.strides[1]);
  return gs__devops_copy_walk(t, x, y, size, &w);
}

/* ---- elementwise --------------------------------------------------------------------------- */


/* Float32 and float16; Relu, Neg and Abs also on int64 and int32, and
 * BitwiseNot only there. */
static bool unary_supports(const gs_devop *op, const gs_op_call *c) {
  if (c->n_in != 1 || c->n_out != 1 || c->out[0].dtype != c->in[0].dtype)
    return false;
  if (op->variant == UNARY_BITNOT)
    return is_int(c->in[0].dtype);
  bool int_op = op->variant == UNARY_RELU || op->variant == UNARY_NEG || op->variant == UNARY_ABS;
  return is_float(c->in[0].dtype) || (int_op && is_int(c->in[0].dtype));
}

static int run_unary(const gs_devop *op, const gs_devops_target *t) {
  const gs_op_call *c = t->call;
  const gs_unary_attrs *at = c->attrs;
  int32_t code = op->variant == UNARY_GELU_ERF && at && at->gelu_tanh ? UNARY_GELU_TANH : op->variant;
  float alpha = at ? at->alpha : 0.0f, beta = at ? at->beta : 0.0f;
  gs_dtype dt = c->in[0].dtype;
  if (is_int(dt)) {
    size_t es = gs_launch_element_size(dt);
    uint64_t n = (uint64_t)gs_launch_numel(&c->out[0].shape);
    return LAUNCH(t, dt == GS_DT_INT64 ? GS_DK_unary_i64 : GS_DK_unary_i32, n, BUF(0, es),
                  BUF(1, es), VAL(n), VAL(code));
  }
  bool half = dt == GS_DT_FLOAT16;
  size_t es = gs_launch_element_size(dt);
  uint64_t n = (uint64_t)gs_launch_numel(&c->out[0].shape);
  return LAUNCH(t, half ? GS_DK_unary_f16 : GS_DK_unary_f32, n, BUF(0, es), BUF(1, es), VAL(n),
                VAL(code), VAL(alpha), VAL(beta));
}

static bool clip_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return c->n_out == 1 && is_float(c->in[0].dtype) && all_of(c, c->in[0].dtype);
}

static int run_clip(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  bool half = c->in[0].dtype == GS_DT_FLOAT16;
  size_t es = gs_launch_element_size(c->in[0].dtype);
  int32_t has_lo = present(c, 1), has_hi = present(c, 2);
  uint64_t n = (uint64_t)gs_launch_numel(&c->out[0].shape);
  /* An absent bound's argument is still a buffer: x's, unread. */
  return LAUNCH(t, half ? GS_DK_clip_f16 : GS_DK_clip_f32, n, BUF(0, es),
                BUF(has_lo ? 1 : 0, es), VAL(has_lo), BUF(has_hi ? 2 : 0, es), VAL(has_hi),
                BUF(c->n_in, es), VAL(n));
}

static bool is_compare(int32_t code) { return code >= BINARY_EQ && code <= BINARY_LAST_COMPARE; }
static bool is_bitwise(int32_t code) { return code >= BINARY_AND && code <= BINARY_XOR; }
static bool is_division(int32_t code) {
  return code == BINARY_DIV || code == BINARY_MOD || code == BINARY_FMOD;
}

/* Which element types binary op `code` runs on here: floats but for the
 * bitwise ops; int32 and int64 but for Pow; bool (And, Or, Xor, Equal) and
 * uint8 (the bitwise ops), as onnxruntime, the reference the tests hold
 * them to, implements them. */
static bool binary_type_ok(int32_t code, gs_dtype dt) {
  if (is_float(dt))
    return !is_bitwise(code);
  if (is_int(dt))
    return code != BINARY_POW;
  if (dt == GS_DT_BOOL)
    return is_bitwise(code) || code == BINARY_EQ;
  return dt == GS_DT_UINT8 && is_bitwise(code);
}

/* Two inputs of one type (Min, Max, Sum and Mean: any number), broadcast,
 * rank 8 at most; the output is of that type, or bool for comparisons.
 * Integer division and modulo by zero fail the run through the stream's
 * status. */
static bool binary_supports(const gs_devop *op, const gs_op_call *c) {
  bool variadic = op->variant == BINARY_MIN || op->variant == BINARY_MAX ||
                  op->variant == BINARY_ADD_ALL || op->variant == BINARY_MEAN_ALL;
  if ((variadic ? c->n_in < 1 : c->n_in != 2) || c->n_out != 1 || c->out[0].shape.rank > 8)
    return false;
  gs_dtype dt = c->in[0].dtype;
  for (int i = 1; i < c->n_in; i++)
    if (c->in[i].dtype != dt)
      return false;
  if (c->out[0].dtype != (is_compare(op->variant) ? GS_DT_BOOL : dt))
    return false;
  if (op->variant == BINARY_MEAN_ALL)
    return is_float(dt);
  return binary_type_ok(op->variant == BINARY_ADD_ALL ? BINARY_ADD : op->variant, dt);
}

/* y = a op b, a and b broadcast to y's shape; operands a, b, y. */
static int binary_step(const gs_devops_target *t, int32_t code, int a, const gs_shape *as, int b,
                       const gs_shape *bs) {
  const gs_op_call *c = t->call;
  gs_dtype dt = c->in[0].dtype;
  bool compare = is_compare(code);
  gs_devk k;
  size_t es;
  switch (dt) {
  case GS_DT_FLOAT16: k = compare ? GS_DK_compare_f16 : GS_DK_binary_f16; es = 2; break;
  case GS_DT_FLOAT64: k = compare ? GS_DK_compare_f32 : GS_DK_binary_f32; es = 8; break;
  case GS_DT_INT64: k = compare ? GS_DK_compare_i64 : GS_DK_binary_i64; es = 8; break;
  case GS_DT_INT32: k = compare ? GS_DK_compare_i32 : GS_DK_binary_i32; es = 4; break;
  case GS_DT_BOOL:
  case GS_DT_UINT8: k = compare ? GS_DK_compare_u8 : GS_DK_binary_u8; es = 1; break;
  default: k = compare ? GS_DK_compare_f32 : GS_DK_binary_f32; es = 4; break;
  }
  dk_walk w = {.rank = c->out[0].shape.rank};
  for (int d = 0; d < w.rank; d++)
    w.dims[d] = c->out[0].shape.dims[d];
  gs_launch_broadcast_strides(as, &c->out[0].shape, w.strides[0]);
  gs_launch_broadcast_strides(bs, &c->out[0].shape, w.strides[1]);
  gs_launch_contiguous_strides(&c->out[0].shape, w.strides[2]); /* y's own, for coalescing */
  coalesce(&w);
  uint64_t n = (uint64_t)gs_launch_numel(&c->out[0].shape);
  if (is_division(code) && is_int(dt)) /* can fail: division by zero */
    return LAUNCH(t, dt == GS_DT_INT64 ? GS_DK_divide_i64 : GS_DK_divide_i32, n, BUF(a, es),
                  BUF(b, es), BUF(c->n_in, es), VAL(n), VAL(code), VAL(w), BUF(GS_DK_STATUS, 8));
  return LAUNCH(t, k, n, BUF(a, es), BUF(b, es), BUF(c->n_in, compare ? 1 : es), VAL(n),
                VAL(code), VAL(w));
}

/* Min, Max, Sum and Mean of any number of inputs fold into the output:
 * y = op(x0, x1), then y = op(y, xi) (each item reads its own element
 * before writing it); Mean then divides y by the count. Mod's attribute picks C's or
 * Python's sign. */
static int run_binary(const gs_devop *op, const gs_devops_target *t) {
  const gs_op_call *c = t->call;
  const gs_unary_attrs *at = c->attrs;
  int32_t code = op->variant;
  if (code == BINARY_MOD && at && at->fmod)
    code = BINARY_FMOD;
  bool sum = code == BINARY_ADD_ALL || code == BINARY_MEAN_ALL;
  if (sum)
    code = BINARY_ADD;
  int rc;
  if (c->n_in > 1)
    rc = binary_step(t, code, 0, &c->in[0].shape, 1, &c->in[1].shape);
  else if (!sum) /* one input: op(x, x) is x */
    rc = binary_step(t, code, 0, &c->in[0].shape, 0, &c->in[0].shape);
  else /* its one input is the sum */
    rc = broadcast_copy(t, 0, &c->in[0].shape, c->n_in, &c->out[0].shape,
                        gs_launch_element_size(c->out[0].dtype));
  for (int i = 2; rc == 0 && i < c->n_in; i++)
    rc = binary_step(t, code, c->n_in, &c->out[0].shape, i, &c->in[i].shape);
  if (rc == 0 && op->variant == BINARY_MEAN_ALL && c->n_in > 1)
    rc = divide(t, c->n_in, gs_launch_numel(&c->out[0].shape), (float)c->n_in, c->out[0].dtype);
  return rc;
}

/* IsNaN (variant 0) and IsInf (1): float in, bool out. */
static bool classify_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return c->n_in == 1 && c->n_out == 1 && is_float(c->in[0].dtype) &&
         c->out[0].dtype == GS_DT_BOOL;
}

static int run_classify(const gs_devop *op, const gs_devops_target *t) {
  const gs_op_call *c = t->call;
  const gs_unary_attrs *at = c->attrs;
  int32_t inf = op->variant, pos = at ? at->detect_pos : 1, neg = at ? at->detect_neg : 1;
  int32_t half = c->in[0].dtype == GS_DT_FLOAT16;
  uint64_t n = (uint64_t)gs_launch_numel(&c->out[0].shape);
  return LAUNCH(t, GS_DK_classify_fp, n, BUF(0, gs_launch_element_size(c->in[0].dtype)), BUF(1, 1), VAL(n), VAL(inf),
                VAL(pos), VAL(neg), VAL(half));
}

static bool not_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return c->n_in == 1 && c->n_out == 1 && all_of(c, GS_DT_BOOL);
}

static int run_not(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  uint64_t n = (uint64_t)gs_launch_numel(&t->call->out[0].shape);
  return LAUNCH(t, GS_DK_not_b8, n, BUF(0, 1), BUF(1, 1), VAL(n));
}

static bool where_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return c->n_in == 3 && c->n_out == 1 && c->in[0].dtype == GS_DT_BOOL &&
         c->in[1].dtype == c->out[0].dtype && c->in[2].dtype == c->out[0].dtype &&
         c->out[0].dtype != GS_DT_BYTES && movable_size(gs_launch_element_size(c->out[0].dtype)) &&
         c->out[0].shape.rank <= 8;
}

static int run_where(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  size_t es = gs_launch_element_size(c->out[0].dtype);
  dk_walk w = {.rank = c->out[0].shape.rank};
  for (int d = 0; d < w.rank; d++)
    w.dims[d] = c->out[0].shape.dims[d];
  for (int i = 0; i < 3; i++)
    gs_launch_broadcast_strides(&c->in[i].shape, &c->out[0].shape, w.strides[i]);
  coalesce(&w); /* the output is contiguous: merging what the inputs allow keeps it so */
  uint64_t n = (uint64_t)gs_launch_numel(&c->out[0].shape);
  return LAUNCH(t, by_size(GS_DK_where_b8, es), n, BUF(0, 1), BUF(1, es), BUF(2, es), BUF(3, es),
                VAL(n), VAL(w));
}

/* ---- Cast ------------------------------------------------------------------------------------ */

int gs__devops_type_code(gs_dtype dt) {
  switch (dt) {
  case GS_DT_FLOAT32: return TYPE_F32;
  case GS_DT_FLOAT16: return TYPE_F16;
  case GS_DT_FLOAT64: return TYPE_F64;
  case GS_DT_INT64: return TYPE_I64;
  case GS_DT_INT32: return TYPE_I32;
  case GS_DT_INT16: return TYPE_I16;
  case GS_DT_INT8: return TYPE_I8;
  case GS_DT_UINT8: return TYPE_U8;
  case GS_DT_BOOL: return TYPE_BOOL;
  default: return -1;
  }
}

/* Cast, and CastLike (its second input only names the type). */
static bool cast_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return c->n_out == 1 && gs__devops_type_code(c->in[0].dtype) >= 0 && gs__devops_type_code(c->out[0].dtype) >= 0;
}

static int run_cast(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  gs_dtype from = c->in[0].dtype, to = c->out[0].dtype;
  uint64_t n = (uint64_t)gs_launch_numel(&c->out[0].shape);
  uint64_t from_size = gs_launch_element_size(from), to_size = gs_launch_element_size(to);
  if (n == 0)
    return GS_OK;
  if (from == to)
    return t->copy(t->ctx, 0, 0, c->n_in, 0, (size_t)(n * to_size));
  int32_t f = gs__devops_type_code(from), o = gs__devops_type_code(to);
  return LAUNCH(t, GS_DK_cast_any, n, BUF(0, from_size), VAL(f), BUF(c->n_in, to_size), VAL(o),
                VAL(n), VAL(from_size), VAL(to_size));
}

/* ---- data movement ------------------------------------------------------------------------------ */


/* Identity, Dropout (inference: its mask all true) and the reshapes: the
 * bytes as they are. */
static bool copy_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return moves(c) && (c->n_out == 1 || (c->n_out == 2 && c->out[1].dtype == GS_DT_BOOL));
}

static int run_copy(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  uint64_t n = (uint64_t)gs_launch_numel(&c->out[0].shape);
  size_t bytes = (size_t)n * gs_launch_element_size(c->out[0].dtype);
  int rc = bytes ? t->copy(t->ctx, 0, 0, c->n_in, 0, bytes) : GS_OK;
  if (rc == 0 && c->n_out == 2 && n)
    rc = fill(t, c->n_in + 1, 1, 0, n, 1);
  return rc;
}

/* Transpose and Expand: rank 8 at most. */
static bool walk_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return c->n_out == 1 && moves(c) && c->out[0].shape.rank <= 8 &&
         (c->attrs || strcmp(op->name, "Expand") == 0);
}

static int run_transpose(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  dk_walk w = {.rank = c->out[0].shape.rank};
  for (int d = 0; d < w.rank; d++)
    w.dims[d] = c->out[0].shape.dims[d];
  gs_launch_transpose_strides(c, w.strides[0]);
  gs_launch_contiguous_strides(&c->out[0].shape, w.strides[1]);
  return gs__devops_copy_walk(t, 0, c->n_in, gs_launch_element_size(c->out[0].dtype), &w);
}

static int run_expand(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  return broadcast_copy(t, 0, &c->in[0].shape, c->n_in, &c->out[0].shape,
                        gs_launch_element_size(c->out[0].dtype));
}

static int run_slice(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_slice_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape;
  int64_t in_strides[GS_MAX_DIMS];
  gs_launch_contiguous_strides(xs, in_strides);
  dk_walk w = {.rank = c->out[0].shape.rank};
  for (int d = 0; d < w.rank; d++) {
    w.dims[d] = c->out[0].shape.dims[d];
    w.strides[0][d] = in_strides[d] * a->step[d];
    w.base[0] += a->start[d] * in_strides[d];
  }
  gs_launch_contiguous_strides(&c->out[0].shape, w.strides[1]);
  if (gs_launch_numel(&c->out[0].shape) == 0)
    return GS_OK;
  return gs__devops_copy_walk(t, 0, c->n_in, gs_launch_element_size(c->out[0].dtype), &w);
}

/* Concat: each input into its place along the axis of the output. */
static int run_concat(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  int axis = ((const gs_axis_attrs *)c->attrs)->axis;
  int64_t out_strides[GS_MAX_DIMS], at = 0;
  gs_launch_contiguous_strides(&c->out[0].shape, out_strides);
  size_t es = gs_launch_element_size(c->out[0].dtype);
  for (int j = 0; j < c->n_in; j++) {
    const gs_shape *xs = &c->in[j].shape;
    dk_walk w = {.rank = xs->rank};
    for (int d = 0; d < w.rank; d++) {
      w.dims[d] = xs->dims[d];
      w.strides[1][d] = out_strides[d];
    }
    gs_launch_contiguous_strides(xs, w.strides[0]);
    w.base[1] = at * out_strides[axis];
    at += xs->dims[axis];
    if (gs_launch_numel(xs) == 0)
      continue;
    int rc = gs__devops_copy_walk(t, j, c->n_in, es, &w);
    if (rc < 0)
      return rc;
  }
  return GS_OK;
}

/* Split: each output from its place along the axis of the input. */
static int run_split(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  int axis = ((const gs_axis_attrs *)c->attrs)->axis;
  int64_t in_strides[GS_MAX_DIMS], at = 0;
  gs_launch_contiguous_strides(&c->in[0].shape, in_strides);
  size_t es = gs_launch_element_size(c->in[0].dtype);
  for (int j = 0; j < c->n_out; j++) {
    const gs_shape *ys = &c->out[j].shape;
    dk_walk w = {.rank = ys->rank};
    for (int d = 0; d < w.rank; d++) {
      w.dims[d] = ys->dims[d];
      w.strides[0][d] = in_strides[d];
    }
    gs_launch_contiguous_strides(ys, w.strides[1]);
    w.base[0] = at * in_strides[axis];
    at += ys->dims[axis];
    if (gs_launch_numel(ys) == 0 || c->out[j].dtype == GS_DT_INVALID)
      continue;
    int rc = gs__devops_copy_walk(t, 0, c->n_in + j, es, &w);
    if (rc < 0)
      return rc;
  }
  return GS_OK;
}

static bool split_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return c->attrs && c->in[0].dtype != GS_DT_BYTES &&
         movable_size(gs_launch_element_size(c->in[0].dtype)) && c->in[0].shape.rank <= 8;
}

static bool multi_walk_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return c->attrs && moves(c) && c->out[0].shape.rank <= 8;
}

/* Gather: indices int32 or int64; an index out of range fails the run, as
 * on the CPU, through the stream's status. */
static bool gather_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return c->attrs && c->n_in == 2 && c->n_out == 1 && moves(c) &&
         (c->in[1].dtype == GS_DT_INT64 || c->in[1].dtype == GS_DT_INT32);
}

static int run_gather(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  int axis = ((const gs_axis_attrs *)c->attrs)->axis;
  int64_t outer, len, inner;
  gs_launch_split_axis(&c->in[0].shape, axis, &outer, &len, &inner);
  uint64_t n_idx = (uint64_t)gs_launch_numel(&c->in[1].shape);
  uint64_t n = (uint64_t)outer * n_idx * (uint64_t)inner, in = (uint64_t)inner;
  if (n == 0)
    return GS_OK;
  size_t es = gs_launch_element_size(c->out[0].dtype);
  int32_t idx64 = c->in[1].dtype == GS_DT_INT64;
  return LAUNCH(t, by_size(GS_DK_gather_b8, es), n, BUF(0, es), BUF(1, idx64 ? 8 : 4),
                VAL(idx64), BUF(2, es), VAL(n), VAL(n_idx), VAL(len), VAL(in),
                BUF(GS_DK_STATUS, 8));
}

/* A value of `dt` as the bits a fill kernel stores (false: float16 other
 * than zero, which would need a conversion here). */
static bool fill_bits(gs_dtype dt, double v, uint64_t *bits) {
  switch (dt) {
  case GS_DT_FLOAT32: {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    *bits = u;
    return true;
  }
  case GS_DT_FLOAT64: memcpy(bits, &v, sizeof v); return true;
  case GS_DT_FLOAT16: *bits = 0; return v == 0 && !signbit(v);
  case GS_DT_BOOL: *bits = v != 0; return true;
  case GS_DT_INT64: case GS_DT_INT32: case GS_DT_INT16: case GS_DT_INT8: case GS_DT_UINT8:
    if (v != v || v < -9.2e18 || v > 9.2e18)
      return false;
    *bits = (uint64_t)(int64_t)v;
    return true;
  default: return false;
  }
}

static bool pad_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  const gs_pad_attrs *a = c->attrs;
  uint64_t bits;
  return a && a->mode != GS_PAD_WRAP && c->n_out == 1 && moves(c) && c->out[0].shape.rank <= 8 &&
         (a->mode != GS_PAD_CONSTANT || fill_bits(c->out[0].dtype, a->value, &bits));
}

static int run_pad(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_pad_attrs *a = c->attrs;
  uint64_t bits = 0;
  if (a->mode == GS_PAD_CONSTANT)
    fill_bits(c->out[0].dtype, a->value, &bits);
  dk_pad p = {.rank = c->out[0].shape.rank, .mode = a->mode};
  for (int d = 0; d < p.rank; d++) {
    p.out_dims[d] = c->out[0].shape.dims[d];
    p.in_dims[d] = c->in[0].shape.dims[d];
    p.begin[d] = a->begin[d];
  }
  size_t es = gs_launch_element_size(c->out[0].dtype);
  uint64_t n = (uint64_t)gs_launch_numel(&c->out[0].shape);
  return LAUNCH(t, by_size(GS_DK_pad_b8, es), n, BUF(0, es), BUF(c->n_in, es), VAL(n), VAL(p),
                VAL(bits));
}

/* Fills n elements of operand y from element `at` with `bits`. */
static int fill(const gs_devops_target *t, int y, size_t es, uint64_t at, uint64_t n,
                uint64_t bits) {
  return LAUNCH(t, by_size(GS_DK_fill_b8, es), n, BUF(y, es), VAL(at), VAL(n), VAL(bits));
}

static bool constant_of_shape_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return c->attrs && c->n_out == 1 && moves(c);
}

static int run_constant_of_shape(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_constant_attrs *a = c->attrs;
  size_t es = gs_launch_element_size(c->out[0].dtype);
  uint64_t bits = 0; /* the value's bytes, little-endian as the hosts gpusrv runs on */
  memcpy(&bits, a->value, es);
  return fill(t, c->n_in, es, 0, (uint64_t)gs_launch_numel(&c->out[0].shape), bits);
}

static bool shape_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return c->attrs && c->n_out == 1 && c->out[0].dtype == GS_DT_INT64;
}

/* Shape: the dims are known here; one small fill each (the plan folds
 * Shape wherever the shape is static, so this seldom runs). */
static int run_shape(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_shape_attrs *a = c->attrs;
  for (int i = a->start; i < a->end; i++) {
    int rc = fill(t, c->n_in, 8, (uint64_t)(i - a->start), 1, (uint64_t)c->in[0].shape.dims[i]);
    if (rc < 0)
      return rc;
  }
  return GS_OK;
}

/* ---- reductions ------------------------------------------------------------------------------ */

/* Every Reduce* on floats; on int32 and int64 those without a square root
 * or logarithm. */
static bool reduce_supports(const gs_devop *op, const gs_op_call *c) {
  gs_dtype dt = c->in[0].dtype;
  bool int_op = op->variant != REDUCE_L2 && op->variant != REDUCE_LOGSUM &&
                op->variant != REDUCE_LOGSUMEXP;
  return c->attrs && c->n_out == 1 && (is_float(dt) || (int_op && is_int(dt))) &&
         c->out[0].dtype == dt && c->in[0].shape.rank <= 8;
}

/* Rows this long or longer are reduced by a work-group each (*_rows
 * kernels); shorter ones by an item each, which wastes less of a group. */
#define ROW_GROUP_MIN 64

/* Items for a launch of the *_rows kernels: a group per row, up to as many
 * groups as a CUDA grid holds (they take the other rows in turn). */
static uint64_t groups_for(uint64_t rows) {
  return (rows < 65535 ? rows : 65535) * GS_DK_GROUP;
}

/* Reduces x (operand 0) over the dims flagged into operand y. */
static int reduce_dims(const gs_devops_target *t, const bool *reduced, int y, int32_t op) {
  const gs_shape *xs = &t->call->in[0].shape;
  int64_t strides[GS_MAX_DIMS];
  gs_launch_contiguous_strides(xs, strides);
  dk_reduce g = {.count = 1};
  for (int d = 0; d < xs->rank; d++) {
    if (reduced[d]) {
      g.red_dims[g.red_rank] = xs->dims[d];
      g.red_strides[g.red_rank++] = strides[d];
      g.count *= xs->dims[d];
    } else {
      g.out_dims[g.out_rank] = xs->dims[d];
      g.out_strides[g.out_rank++] = strides[d];
    }
  }
  uint64_t n = 1;
  for (int d = 0; d < g.out_rank; d++)
    n *= (uint64_t)g.out_dims[d];
  gs_dtype dt = t->call->in[0].dtype;
  size_t es = gs_launch_element_size(dt);
  if (is_int(dt))
    return LAUNCH(t, dt == GS_DT_INT64 ? GS_DK_reduce_i64 : GS_DK_reduce_i32, n, BUF(0, es),
                  BUF(y, es), VAL(n), VAL(op), VAL(g));
  int32_t half = dt == GS_DT_FLOAT16;
  /* The reduced dimensions the last ones (rows of `count` contiguous
   * elements), long enough: a work-group per row. */
  bool trailing = g.red_rank > 0;
  for (int d = xs->rank - g.red_rank; trailing && d < xs->rank; d++)
    trailing = reduced[d];
  if (t->row_groups && trailing && g.count >= ROW_GROUP_MIN) {
    uint64_t len = (uint64_t)g.count;
    int rc = LAUNCH(t, GS_DK_reduce_rows_fp, groups_for(n), BUF(0, es), BUF(y, es), VAL(n),
                    VAL(len), VAL(op), VAL(half));
    if (rc != GS_ENOTSUP)
      return rc;
  }
  return LAUNCH(t, GS_DK_reduce_fp, n, BUF(0, es), BUF(y, es), VAL(n), VAL(op), VAL(g), VAL(half));
}

static int run_reduce(const gs_devop *op, const gs_devops_target *t) {
  const gs_reduce_attrs *a = t->call->attrs;
  return reduce_dims(t, a->reduce, t->call->n_in, op->variant);
}

/* ArgMax (variant 0) and ArgMin (1) along the one reduced axis, and TopK
 * along its axis. */
static bool argmax_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  const gs_reduce_attrs *a = c->attrs;
  if (!a || c->n_in != 1 || c->n_out != 1 || !is_float(c->in[0].dtype) ||
      c->out[0].dtype != GS_DT_INT64)
    return false;
  int axes = 0;
  for (int d = 0; d < c->in[0].shape.rank; d++)
    axes += a->reduce[d];
  return axes == 1 && c->in[0].shape.rank > 0;
}

static int run_argmax(const gs_devop *op, const gs_devops_target *t) {
  const gs_op_call *c = t->call;
  const gs_reduce_attrs *a = c->attrs;
  int axis = 0;
  while (!a->reduce[axis])
    axis++;
  int64_t o, l, i;
  gs_launch_split_axis(&c->in[0].shape, axis, &o, &l, &i);
  uint64_t outer = (uint64_t)o, len = (uint64_t)l, inner = (uint64_t)i;
  if (len == 0)
    return GS_OK;
  int32_t smallest = op->variant, last = a->select_last, half = c->in[0].dtype == GS_DT_FLOAT16;
  return LAUNCH(t, GS_DK_argmax_fp, outer * inner, BUF(0, gs_launch_element_size(c->in[0].dtype)), BUF(1, 8), VAL(outer),
                VAL(len), VAL(inner), VAL(smallest), VAL(last), VAL(half));
}

static bool topk_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return c->attrs && is_float(c->in[0].dtype) && c->out[0].dtype == c->in[0].dtype &&
         (c->n_out < 2 || c->out[1].dtype == GS_DT_INT64);
}

static int run_topk(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_topk_attrs *a = c->attrs;
  int64_t o, l, i;
  gs_launch_split_axis(&c->in[0].shape, a->axis, &o, &l, &i);
  uint64_t outer = (uint64_t)o, len = (uint64_t)l, inner = (uint64_t)i, k = (uint64_t)a->k;
  if (k == 0)
    return GS_OK;
  int32_t has_idx = c->n_out > 1, largest = a->largest, half = c->in[0].dtype == GS_DT_FLOAT16;
  size_t es = gs_launch_element_size(c->in[0].dtype);
  int idx = has_idx ? c->n_in + 1 : c->n_in; /* absent: the values' buffer, unwritten */
  return LAUNCH(t, GS_DK_topk_fp, outer * inner, BUF(0, es), BUF(c->n_in, es),
                BUF(idx, has_idx ? 8 : es), VAL(has_idx), VAL(outer), VAL(len), VAL(inner), VAL(k),
                VAL(largest), VAL(half));
}

/* ---- normalisation, Softmax ------------------------------------------------------------------------ */

static bool fp_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return c->attrs && c->n_out == 1 && fp_size(c);
}

static int run_softmax(const gs_devop *op, const gs_devops_target *t) {
  const gs_op_call *c = t->call;
  int64_t outer, len, inner;
  gs_launch_softmax_dims(c, &outer, &len, &inner);
  uint64_t o = (uint64_t)outer, l = (uint64_t)len, i = (uint64_t)inner;
  int32_t log_out = op->variant, half = c->in[0].dtype == GS_DT_FLOAT16;
  size_t es = gs_launch_element_size(c->in[0].dtype);
  if (t->row_groups && i == 1 && l >= ROW_GROUP_MIN) { /* the last axis: a group per row */
    uint64_t n = groups_for(o);
    int rc = LAUNCH(t, GS_DK_softmax_rows_fp, n, BUF(0, es), BUF(1, es), VAL(o), VAL(l),
                    VAL(log_out), VAL(half));
    if (rc != GS_ENOTSUP)
      return rc;
  }
  return LAUNCH(t, GS_DK_softmax_fp, o * i, BUF(0, es), BUF(1, es), VAL(o), VAL(l), VAL(i),
                VAL(log_out), VAL(half));
}

/* One output (the optional mean and inverse deviation stay on the CPU),
 * scale and bias of a row's length. */
static bool layernorm_supports(const gs_devop *op, const gs_op_call *c) {
  if (!fp_supports(op, c))
    return false;
  int64_t inner = gs_launch_norm_inner(c);
  return inner > 0 && gs_launch_numel(&c->in[1].shape) == inner &&
         (!present(c, 2) || gs_launch_numel(&c->in[2].shape) == inner);
}

/* LayerNormalization (variant 0) and RMSNormalization (1). */
static int run_layernorm(const gs_devop *op, const gs_devops_target *t) {
  const gs_op_call *c = t->call;
  const gs_norm_attrs *a = c->attrs;
  int32_t has_bias = present(c, 2);
  uint64_t inner = (uint64_t)gs_launch_norm_inner(c);
  uint64_t rows = (uint64_t)gs_launch_numel(&c->in[0].shape) / inner;
  float eps = a->epsilon;
  int32_t rms = op->variant, half = c->in[0].dtype == GS_DT_FLOAT16;
  size_t es = gs_launch_element_size(c->in[0].dtype);
  if (t->row_groups && inner >= ROW_GROUP_MIN) { /* a work-group per row */
    uint64_t n = groups_for(rows);
    int rc = LAUNCH(t, GS_DK_layernorm_rows_fp, n, BUF(0, es), BUF(1, es),
                    BUF(has_bias ? 2 : 1, es), VAL(has_bias), BUF(c->n_in, es), VAL(rows),
                    VAL(inner), VAL(eps), VAL(rms), VAL(half));
    if (rc != GS_ENOTSUP)
      return rc;
  }
  return LAUNCH(t, GS_DK_layernorm_fp, rows, BUF(0, es), BUF(1, es), BUF(has_bias ? 2 : 1, es),
                VAL(has_bias), BUF(c->n_in, es), VAL(rows), VAL(inner), VAL(eps), VAL(rms),
                VAL(half));
}

static bool batchnorm_supports(const gs_devop *op, const gs_op_call *c) {
  return fp_supports(op, c) && c->n_in == 5 && c->in[0].shape.rank >= 2 &&
         ((const gs_norm_attrs *)c->attrs)->act == GS_ACT_NONE;
}

static int run_batchnorm(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_norm_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape;
  uint64_t n = (uint64_t)gs_launch_numel(xs), channels = (uint64_t)xs->dims[1], inner = 1;
  for (int d = 2; d < xs->rank; d++)
    inner *= (uint64_t)xs->dims[d];
  float eps = a->epsilon;
  int32_t half = c->in[0].dtype == GS_DT_FLOAT16;
  size_t es = gs_launch_element_size(c->in[0].dtype);
  return LAUNCH(t, GS_DK_batchnorm_fp, n, BUF(0, es), BUF(1, es), BUF(2, es), BUF(3, es),
                BUF(4, es), BUF(5, es), VAL(n), VAL(channels), VAL(inner), VAL(eps), VAL(half));
}

/* GroupNormalization and InstanceNormalization (a group per channel): x
 * as [batch, channels, spatial...]; scale and bias per channel or group. */
static bool groupnorm_supports(const gs_devop *op, const gs_op_call *c) {
  const gs_normalize_attrs *a = c->attrs;
  return fp_supports(op, c) && c->n_in == 3 && c->in[0].shape.rank >= 2 && a->groups > 0 &&
         c->in[0].shape.dims[1] % a->groups == 0;
}

static int run_groupnorm(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_normalize_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape;
  uint64_t groups = (uint64_t)a->groups, spatial = 1;
  for (int d = 2; d < xs->rank; d++)
    spatial *= (uint64_t)xs->dims[d];
  uint64_t rows = (uint64_t)xs->dims[0] * groups, per = (uint64_t)xs->dims[1] / groups;
  if (rows * per * spatial == 0)
    return GS_OK;
  int32_t per_channel = a->per_channel, half = c->in[0].dtype == GS_DT_FLOAT16;
  float eps = a->epsilon;
  size_t es = gs_launch_element_size(c->in[0].dtype);
  if (t->row_groups && per * spatial >= ROW_GROUP_MIN) {
    int rc = LAUNCH(t, GS_DK_groupnorm_rows_fp, groups_for(rows), BUF(0, es), BUF(1, es),
                    BUF(2, es), BUF(3, es), VAL(rows), VAL(groups), VAL(per), VAL(spatial),
                    VAL(per_channel), VAL(eps), VAL(half));
    if (rc != GS_ENOTSUP)
      return rc;
  }
  return LAUNCH(t, GS_DK_groupnorm_fp, rows, BUF(0, es), BUF(1, es), BUF(2, es), BUF(3, es),
                VAL(rows), VAL(groups), VAL(per), VAL(spatial), VAL(per_channel), VAL(eps),
                VAL(half));
}

/* LRN: x as [batch, channels, spatial...]. */
static bool lrn_supports(const gs_devop *op, const gs_op_call *c) {
  const gs_normalize_attrs *a = c->attrs;
  return fp_supports(op, c) && c->in[0].shape.rank >= 2 && a->size > 0;
}

static int run_lrn(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_normalize_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape;
  uint64_t n = (uint64_t)gs_launch_numel(xs), channels = (uint64_t)xs->dims[1], spatial = 1;
  if (n == 0)
    return GS_OK;
  for (int d = 2; d < xs->rank; d++)
    spatial *= (uint64_t)xs->dims[d];
  int64_t size = a->size;
  float alpha = a->alpha, beta = a->beta, bias = a->bias;
  int32_t half = c->in[0].dtype == GS_DT_FLOAT16;
  size_t es = gs_launch_element_size(c->in[0].dtype);
  return LAUNCH(t, GS_DK_lrn_fp, n, BUF(0, es), BUF(1, es), VAL(n), VAL(channels), VAL(spatial),
                VAL(size), VAL(alpha), VAL(beta), VAL(bias), VAL(half));
}

/* Hardmax along its axis (gs_index_attrs). */
static int run_hardmax(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_index_attrs *a = c->attrs;
  uint64_t outer, len, inner;
  if (!axis_lanes(c, a->axis, &outer, &len, &inner))
    return GS_OK;
  int32_t half = c->in[0].dtype == GS_DT_FLOAT16;
  size_t es = gs_launch_element_size(c->in[0].dtype);
  return LAUNCH(t, GS_DK_hardmax_fp, outer * inner, BUF(0, es), BUF(1, es), VAL(outer), VAL(len),
                VAL(inner), VAL(half));
}

/* ---- convolution, pooling, Resize ------------------------------------------------------------------ */

/* Spatial dims at the end of three: a 1-D or 2-D op has leading ones. */
static void conv_geometry(const gs_op_call *c, int spatial, const int64_t *kernel,
                          const int64_t *stride, const int64_t *dilation, const int64_t *pad,
                          dk_conv *g) {
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  *g = (dk_conv){.batch = xs->dims[0], .in_channels = xs->dims[1], .out_channels = ys->dims[1],
                 .group = 1};
  for (int i = 0; i < 3; i++) {
    int s = i - (3 - spatial); /* the op's own spatial index, < 0 for a leading one */
    g->in[i] = s < 0 ? 1 : xs->dims[2 + s];
    g->out[i] = s < 0 ? 1 : ys->dims[2 + s];
    g->k[i] = s < 0 ? 1 : kernel[s];
    g->stride[i] = s < 0 ? 1 : stride[s];
    g->dil[i] = s < 0 ? 1 : dilation[s];
    g->pad[i] = s < 0 ? 0 : pad[s];
  }
}

static bool conv_supports(const gs_devop *op, const gs_op_call *c) {
  const gs_conv_attrs *a = c->attrs;
  return fp_supports(op, c) && a->spatial >= 1 && a->spatial <= 3 && a->group > 0 &&
         c->in[0].shape.rank == 2 + a->spatial && a->act <= GS_ACT_RELU && !a->src_blocked &&
         !a->dst_blocked && !a->residual;
}

/* Conv through the backend's BLAS: for as many images at a time as fit the
 * scratch budget, and each group, the windows' columns into the stream's
 * scratch (im2col), one GEMM of the group's weights [M/g, C/g k] by them,
 * and the product into y with the bias and Relu (conv_out). GS_ENOTSUP
 * from the first GEMM (no float16 GEMM there) leaves y untouched. */
#define CONV_SCRATCH_BUDGET ((int64_t)64 << 20) /* bytes, unless one image needs more */

static int conv_as_gemm(const gs_devops_target *t, const dk_conv *g, bool has_bias, bool relu) {
  const gs_op_call *c = t->call;
  gs_dtype dt = c->in[0].dtype;
  size_t es = gs_launch_element_size(dt);
  int32_t fp16 = dt == GS_DT_FLOAT16;
  int64_t cg = g->in_channels / g->group, mg = g->out_channels / g->group;
  int64_t ck = cg * g->k[0] * g->k[1] * g->k[2], os = g->out[0] * g->out[1] * g->out[2];
  int64_t per_image = (ck + mg) * os * (int64_t)es;
  int64_t chunk = per_image > 0 ? CONV_SCRATCH_BUDGET / per_image : g->batch;
  chunk = chunk < 1 ? 1 : chunk > g->batch ? g->batch : chunk;
  /* Never empty: an empty launch still passes the buffer. */
  int rc = t->scratch(t->ctx, per_image > 0 ? (size_t)(chunk * per_image) : sizeof(float));
  int32_t bias_flag = has_bias, relu_flag = relu;
  for (int64_t b0 = 0; rc == 0 && b0 < g->batch; b0 += chunk) {
    int64_t nb = g->batch - b0 < chunk ? g->batch - b0 : chunk;
    uint64_t n_cols = (uint64_t)(ck * nb * os);
    uint64_t col_rows = (uint64_t)(ck * nb * g->out[0] * g->out[1]), out_rows = (uint64_t)(mg * nb);
    for (int64_t grp = 0; rc == 0 && grp < g->group; grp++) {
      int64_t c0 = grp * cg, m0 = grp * mg;
      rc = LAUNCH(t, GS_DK_im2col_fp, col_rows, BUF(0, es), BUF(GS_DK_SCRATCH, es),
                  VAL(col_rows), VAL(*g), VAL(b0), VAL(nb), VAL(c0), VAL(fp16));
      gs_devops_gemm mm = {.half = fp16, .f64 = dt == GS_DT_FLOAT64, .m = mg, .n = nb * os, .k = ck, .batch = 1, .alpha = 1.0f,
                           .a = 1, .b = GS_DK_SCRATCH, .c = GS_DK_SCRATCH,
                           .a_off = m0 * ck, .c_off = (int64_t)n_cols,
                           .lda = ck, .ldb = nb * os, .ldc = nb * os};
      if (rc == 0)
        rc = t->gemm(t->ctx, &mm);
      uint64_t yt_at = n_cols;
      int64_t channels = g->out_channels;
      if (rc == 0)
        rc = LAUNCH(t, GS_DK_conv_out_fp, out_rows, BUF(GS_DK_SCRATCH, es), VAL(yt_at),
                    BUF(has_bias ? 2 : 0, es), VAL(bias_flag), BUF(c->n_in, es), VAL(out_rows),
                    VAL(b0), VAL(nb), VAL(m0), VAL(mg), VAL(channels), VAL(os), VAL(relu_flag),
                    VAL(fp16));
    }
  }
  return rc;
}

static int run_conv(const gs_devop *op, const gs_devops_target *t) {
  const gs_op_call *c = t->call;
  const gs_conv_attrs *a = c->attrs;
  dk_conv g;
  conv_geometry(c, a->spatial, a->kernel, a->stride, a->dilation, a->pad_begin, &g);
  g.group = a->group;
  bool half = c->in[0].dtype == GS_DT_FLOAT16;
  if (!op->variant && t->gemm && t->scratch && gs_launch_numel(&c->out[0].shape) > 0) {
    int rc = conv_as_gemm(t, &g, present(c, 2), a->act == GS_ACT_RELU);
    if (rc != GS_ENOTSUP)
      return rc;
  }
  int32_t has_bias = present(c, 2), relu_flag = a->act == GS_ACT_RELU, fp16 = half;
  uint64_t n = (uint64_t)gs_launch_numel(&c->out[0].shape);
  size_t es = gs_launch_element_size(c->in[0].dtype);
  if (op->variant) /* ConvTranspose */
    return LAUNCH(t, GS_DK_conv_transpose_fp, n, BUF(0, es), BUF(1, es),
                  BUF(has_bias ? 2 : 1, es), VAL(has_bias), BUF(c->n_in, es), VAL(n), VAL(g),
                  VAL(fp16));
  return LAUNCH(t, GS_DK_conv_fp, n, BUF(0, es), BUF(1, es), BUF(has_bias ? 2 : 1, es),
                VAL(has_bias), BUF(c->n_in, es), VAL(n), VAL(g), VAL(relu_flag), VAL(fp16));
}

static bool conv_transpose_supports(const gs_devop *op, const gs_op_call *c) {
  const gs_conv_attrs *a = c ? c->attrs : NULL;
  return conv_supports(op, c) && a->act == GS_ACT_NONE;
}

/* MaxPool (values only), AveragePool and LpPool; the global ones are
 * reductions (GlobalLpPool where p is 1 or 2, the norms ReduceL1/L2 have). */
static bool pool_supports(const gs_devop *op, const gs_op_call *c) {
  const gs_pool_attrs *a = c->attrs;
  return fp_supports(op, c) && a->spatial >= 1 && a->spatial <= 3 &&
         c->in[0].shape.rank == 2 + a->spatial;
}

static int run_pool(const gs_devop *op, const gs_devops_target *t) {
  const gs_op_call *c = t->call;
  const gs_pool_attrs *a = c->attrs;
  if (a->global) {
    bool reduced[GS_MAX_DIMS] = {false};
    for (int d = 2; d < c->in[0].shape.rank; d++)
      reduced[d] = true;
    int32_t how = op->variant == 1 ? REDUCE_MAX : a->lp == 1 ? REDUCE_L1 : a->lp == 2 ? REDUCE_L2 : REDUCE_MEAN;
    return reduce_dims(t, reduced, 1, how);
  }
  dk_conv g;
  conv_geometry(c, a->spatial, a->kernel, a->stride, a->dilation, a->pad_begin, &g);
  int64_t pad_end[3];
  for (int i = 0; i < 3; i++) {
    int s = i - (3 - a->spatial);
    pad_end[i] = s < 0 ? 0 : a->pad_end[s];
  }
  /* Planes: batch x channels, counted in the in_channels field. */
  g.in_channels = g.batch * g.in_channels;
  uint64_t n = (uint64_t)gs_launch_numel(&c->out[0].shape);
  int32_t is_max = op->variant, include_pad = a->count_include_pad, lp = a->lp;
  int32_t half = c->in[0].dtype == GS_DT_FLOAT16;
  size_t es = gs_launch_element_size(c->in[0].dtype);
  return LAUNCH(t, GS_DK_pool_fp, n, BUF(0, es), BUF(1, es), VAL(n), VAL(g), VAL(pad_end[0]),
                VAL(pad_end[1]), VAL(pad_end[2]), VAL(is_max), VAL(include_pad), VAL(lp), VAL(half));
}

static bool global_pool_supports(const gs_devop *op, const gs_op_call *c) {
  const gs_pool_attrs *a = c->attrs;
  return fp_supports(op, c) && c->in[0].shape.rank >= 2 && c->in[0].shape.rank <= 8 && a->lp <= 2 &&
         a->src_block == 0;
}

/* Not float64: the kernel's geometry holds the scales as float32, which
 * would move float64's sample points. */
static bool resize_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return c->attrs && ((const gs_resize_attrs *)c->attrs)->device_ok && c->n_out == 1 &&
         is_float(c->in[0].dtype) && c->in[0].dtype != GS_DT_FLOAT64 &&
         c->out[0].dtype == c->in[0].dtype && c->in[0].shape.rank <= 8;
}

static int run_resize(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_resize_attrs *a = c->attrs;
  dk_resize g = {.rank = c->in[0].shape.rank, .mode = a->mode, .coord = a->coord,
                 .nearest = a->nearest};
  for (int d = 0; d < g.rank; d++) {
    g.in_dims[d] = c->in[0].shape.dims[d];
    g.out_dims[d] = c->out[0].shape.dims[d];
    g.scale[d] = (float)a->scale[d];
  }
  uint64_t n = (uint64_t)gs_launch_numel(&c->out[0].shape);
  int32_t half = c->in[0].dtype == GS_DT_FLOAT16;
  size_t es = gs_launch_element_size(c->in[0].dtype);
  return LAUNCH(t, GS_DK_resize_fp, n, BUF(0, es), BUF(c->n_in, es), VAL(n), VAL(g), VAL(half));
}

/* ---- images ------------------------------------------------------------------------------- */

static bool image_taps_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  const gs_image_taps_attrs *a = c->attrs;
  return a && c->n_in == 2 && c->n_out == 1 && c->in[0].dtype == GS_DT_UINT8 &&
         c->in[1].dtype == GS_DT_UINT8 && c->out[0].dtype == GS_DT_UINT8 && a->images > 0 &&
         a->passes_at % 8 == 0 &&
         a->passes_at + a->images * (int64_t)sizeof(gs_image_taps_pass) <=
             gs_launch_numel(&c->in[1].shape) &&
         a->elements <= gs_launch_numel(&c->out[0].shape);
}

static int run_image_taps(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_image_taps_attrs *a = t->call->attrs;
  uint64_t n = (uint64_t)a->elements;
  return LAUNCH(t, GS_DK_image_taps_u8, n, BUF(0, 1), BUF(1, 1), BUF(2, 1), VAL(n),
                VAL(a->images), VAL(a->passes_at));
}

/* ---- MatMul and Gemm -------------------------------------------------------------- */

/* For float16, and float32 where the backend has no BLAS library. */
static bool matmul_supports(const gs_devop *op, const gs_op_call *c) {
  return fp_supports(op, c) && ((const gs_matmul_attrs *)c->attrs)->act <= GS_ACT_RELU;
}

/* MatMul through the backend's BLAS: y starts as the bias on every row
 * (GEMM adds onto it), batches strided where one stride each says where
 * they are, else one GEMM per batch. GS_ENOTSUP from the first GEMM (no
 * float16 GEMM there): the caller's kernel then writes all of y. */
static int matmul_blas(const gs_devops_target *t) {
  const gs_op_call *c = t->call;
  gs_dtype dt = c->in[0].dtype;
  const gs_matmul_attrs *m = c->attrs;
  int y = c->n_in, rc = 0;
  size_t es = gs_launch_element_size(c->in[0].dtype);
  int64_t rows = m->batch * m->m;
  if (m->has_bias && (rc = broadcast_copy(t, 2, &c->in[2].shape, y, &c->out[0].shape, es)) < 0)
    return rc;
  if (m->k == 0) { /* an empty sum: the bias, or zeros */
    if (!m->has_bias && rows * m->n > 0 && (rc = fill(t, y, es, 0, (uint64_t)(rows * m->n), 0)) < 0)
      return rc;
  } else if (m->m && m->n) {
    gs_devops_gemm g = {.half = dt == GS_DT_FLOAT16, .f64 = dt == GS_DT_FLOAT64, .m = m->m, .n = m->n, .k = m->k, .batch = m->batch, .alpha = 1.0f,
                        .beta = m->has_bias ? 1.0f : 0.0f, .a = 0, .b = 1, .c = y,
                        .lda = m->k, .ldb = m->n, .ldc = m->n, .stride_c = m->m * m->n};
    if (m->batch_rank <= 1) {
      g.stride_a = m->batch_rank ? m->a_batch_strides[0] : 0;
      g.stride_b = m->batch_rank ? m->b_batch_strides[0] : 0;
      rc = t->gemm(t->ctx, &g);
    } else {
      g.batch = 1;
      for (int64_t b = 0; rc == 0 && b < m->batch; b++) {
        gs_launch_matmul_offsets(m, b, &g.a_off, &g.b_off);
        g.c_off = b * m->m * m->n;
        rc = t->gemm(t->ctx, &g);
      }
    }
    if (rc < 0)
      return rc;
  }
  return m->act == GS_ACT_RELU ? relu(t, y, rows * m->n, dt) : GS_OK;
}

static int run_matmul(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_matmul_attrs *m = c->attrs;
  if (t->gemm) {
    int rc = matmul_blas(t);
    if (rc != GS_ENOTSUP)
      return rc;
  }
  dk_gemm g = {.batch = m->batch, .m = m->m, .n = m->n, .k = m->k, .batch_rank = m->batch_rank,
               .a_row = m->k, .a_col = 1, .b_row = m->n, .b_col = 1, .alpha = 1.0f,
               .has_bias = m->has_bias, .relu = m->act == GS_ACT_RELU};
  for (int d = 0; d < m->batch_rank; d++) {
    g.batch_dims[d] = m->batch_dims[d];
    g.a_batch_strides[d] = m->a_batch_strides[d];
    g.b_batch_strides[d] = m->b_batch_strides[d];
  }
  uint64_t total = (uint64_t)(m->batch * m->m * m->n);
  int32_t half = c->in[0].dtype == GS_DT_FLOAT16;
  size_t es = gs_launch_element_size(c->in[0].dtype);
  return LAUNCH(t, GS_DK_matmul_fp, total, BUF(0, es), BUF(1, es), BUF(m->has_bias ? 2 : 0, es),
                BUF(c->n_in, es), VAL(total), VAL(g), VAL(half));
}

static bool gemm_supports(const gs_devop *op, const gs_op_call *c) {
  return fp_supports(op, c) && ((const gs_gemm_attrs *)c->attrs)->act <= GS_ACT_RELU &&
         c->in[0].shape.rank == 2 && c->in[1].shape.rank == 2 &&
         c->out[0].shape.rank == 2 && (!present(c, 2) || c->in[2].shape.rank <= 2);
}

/* y = alpha op(A) op(B) + beta C: C broadcast into y first. A transpose is
 * the strides of rows and columns swapped. */
static int run_gemm(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_gemm_attrs *a = c->attrs;
  int64_t a_cols = c->in[0].shape.dims[1], b_cols = c->in[1].shape.dims[1];
  bool has_c = present(c, 2) && a->beta != 0;
  int32_t half = c->in[0].dtype == GS_DT_FLOAT16;
  size_t es = gs_launch_element_size(c->in[0].dtype);
  int rc = has_c ? broadcast_copy(t, 2, &c->in[2].shape, c->n_in, &c->out[0].shape, es) : 0;
  if (rc < 0)
    return rc;
  if (t->gemm && a->k > 0) { /* through the backend's BLAS (GS_ENOTSUP: y is still C) */
    int64_t total = a->m * a->n;
    if (total) {
      gs_devops_gemm mm = {.half = half, .f64 = c->in[0].dtype == GS_DT_FLOAT64, .trans_a = a->trans_a, .trans_b = a->trans_b, .m = a->m, .n = a->n,
                           .k = a->k, .batch = 1, .alpha = a->alpha,
                           .beta = has_c ? a->beta : 0.0f, .a = 0, .b = 1, .c = c->n_in,
                           .lda = a_cols, .ldb = b_cols, .ldc = a->n};
      rc = t->gemm(t->ctx, &mm);
    }
    if (rc != GS_ENOTSUP)
      return rc == 0 && a->act == GS_ACT_RELU ? relu(t, c->n_in, total, c->in[0].dtype) : rc;
  }
  dk_gemm g = {.batch = 1, .m = a->m, .n = a->n, .k = a->k,
               .a_row = a->trans_a ? 1 : a_cols, .a_col = a->trans_a ? a_cols : 1,
               .b_row = a->trans_b ? 1 : b_cols, .b_col = a->trans_b ? b_cols : 1,
               .alpha = a->alpha, .beta = has_c ? a->beta : 0.0f,
               .relu = a->act == GS_ACT_RELU};
  uint64_t total = (uint64_t)(a->m * a->n);
  return LAUNCH(t, GS_DK_matmul_fp, total, BUF(0, es), BUF(1, es), BUF(0, es), BUF(c->n_in, es),
                VAL(total), VAL(g), VAL(half));
}

/* ---- GEMM's helpers --------------------------------------------------------------------------- */

/* y = op(y) over n elements of operand y. */
static int unary_in_place(const gs_devops_target *t, int y, int64_t n, gs_dtype dt, int32_t code,
                          float alpha) {
  uint64_t count = (uint64_t)n;
  float beta = 0.0f;
  bool half = dt == GS_DT_FLOAT16;
  size_t es = gs_launch_element_size(dt);
  if (count == 0)
    return GS_OK;
  return LAUNCH(t, half ? GS_DK_unary_f16 : GS_DK_unary_f32, count, BUF(y, es), BUF(y, es),
                VAL(count), VAL(code), VAL(alpha), VAL(beta));
}

static int relu(const gs_devops_target *t, int y, int64_t n, gs_dtype dt) {
  return unary_in_place(t, y, n, dt, UNARY_RELU, 0.0f);
}

/* y / divisor: Mean's count, a whole number float32 holds exactly, so that
 * float64's mean is not rounded to float32's 1/n. */
static int divide(const gs_devops_target *t, int y, int64_t n, float divisor, gs_dtype dt) {
  return unary_in_place(t, y, n, dt, UNARY_DIVIDE, divisor);
}

/* ---- failures ------------------------------------------------------------------------------------ */

int gs_devops_status_error(const gs_devops_status *st, const char *node_name) {
  const char *node = node_name && node_name[0] ? node_name : "?";
  switch (st->code) {
  case FAIL_INDEX_RANGE:
    return gs_error(GS_EINVAL, "node %s: index %lld is out of range [%lld, %lld)", node,
                    (long long)st->value, (long long)-st->bound, (long long)st->bound);
  case FAIL_DIVIDE_BY_ZERO:
    return gs_error(GS_EINVAL, "node %s: integer division by zero", node);
  case FAIL_MODULO_BY_ZERO:
    return gs_error(GS_EINVAL, "node %s: integer modulo by zero", node);
  default:
    return gs_error(GS_EDEVICE, "node %s: a kernel reported failure %lld", node,
                    (long long)st->code);
  }
}

uint64_t gs_devops_tag(gs_devops_tags *tags, const gs_op_call *c) {
  uint64_t tag = tags->next++;
  /* "name (op)", as the CPU's kernels name a node in their errors */
  snprintf(tags->node[tag % GS_DEVOPS_TAGS], sizeof tags->node[0], "%s (%s)",
           c && c->node_name ? c->node_name : "", c && c->op_type ? c->op_type : "?");
  tags->armed = true;
  return tag;
}

int gs_devops_tags_error(gs_devops_tags *tags, const gs_devops_status *st) {
  tags->armed = false;
  if (st->code == 0)
    return GS_OK;
  uint64_t tag = (uint64_t)st->tag;
  bool named = tags->next - tag <= GS_DEVOPS_TAGS; /* else overwritten since */
  return gs_devops_status_error(st, named ? tags->node[tag % GS_DEVOPS_TAGS] : "");
}

/* ---- the table ------------------------------------------------------------------------------------ */

static bool moves_only(const gs_devop *op) {
  static int (*const moving[])(const gs_devop *, const gs_devops_target *) = {
      run_where, run_copy, run_transpose, run_expand, run_slice, run_concat, run_split,
      run_gather, run_pad, run_constant_of_shape, run_shape, gs__devops_run_trilu,
      gs__devops_run_tile, gs__devops_run_depth_to_space, gs__devops_run_space_to_depth,
      gs__devops_run_gather_elements, gs__devops_run_gather_nd, gs__devops_run_one_hot};
  for (size_t i = 0; i < sizeof moving / sizeof moving[0]; i++)
    if (op->run == moving[i])
      return true;
  return false;
}

static const gs_devop ops[] = {
    {"Relu", UNARY_RELU, unary_supports, run_unary},
    {"Sigmoid", UNARY_SIGMOID, unary_supports, run_unary},
    {"Tanh", UNARY_TANH, unary_supports, run_unary},
    {"LeakyRelu", UNARY_LEAKY, unary_supports, run_unary},
    {"Gelu", UNARY_GELU_ERF, unary_supports, run_unary},
    {"Erf", UNARY_ERF, unary_supports, run_unary},
    {"Sqrt", UNARY_SQRT, unary_supports, run_unary},
    {"Exp", UNARY_EXP, unary_supports, run_unary},
    {"Log", UNARY_LOG, unary_supports, run_unary},
    {"Neg", UNARY_NEG, unary_supports, run_unary},
    {"Abs", UNARY_ABS, unary_supports, run_unary},
    {"Reciprocal", UNARY_RECIPROCAL, unary_supports, run_unary},
    {"Floor", UNARY_FLOOR, unary_supports, run_unary},
    {"Ceil", UNARY_CEIL, unary_supports, run_unary},
    {"Round", UNARY_ROUND, unary_supports, run_unary},
    {"Sin", UNARY_SIN, unary_supports, run_unary},
    {"Cos", UNARY_COS, unary_supports, run_unary},
    {"Softplus", UNARY_SOFTPLUS, unary_supports, run_unary},
    {"Softsign", UNARY_SOFTSIGN, unary_supports, run_unary},
    {"HardSwish", UNARY_HARDSWISH, unary_supports, run_unary},
    {"HardSigmoid", UNARY_HARDSIGMOID, unary_supports, run_unary},
    {"Elu", UNARY_ELU, unary_supports, run_unary},
    {"Selu", UNARY_SELU, unary_supports, run_unary},
    {"Mish", UNARY_MISH, unary_supports, run_unary},
    {"Sign", UNARY_SIGN, unary_supports, run_unary},
    {"Tan", UNARY_TAN, unary_supports, run_unary},
    {"Asin", UNARY_ASIN, unary_supports, run_unary},
    {"Acos", UNARY_ACOS, unary_supports, run_unary},
    {"Atan", UNARY_ATAN, unary_supports, run_unary},
    {"Sinh", UNARY_SINH, unary_supports, run_unary},
    {"Cosh", UNARY_COSH, unary_supports, run_unary},
    {"Asinh", UNARY_ASINH, unary_supports, run_unary},
    {"Acosh", UNARY_ACOSH, unary_supports, run_unary},
    {"Atanh", UNARY_ATANH, unary_supports, run_unary},
    {"Celu", UNARY_CELU, unary_supports, run_unary},
    {"Swish", UNARY_SWISH, unary_supports, run_unary},
    {"ThresholdedRelu", UNARY_THRESHOLDED, unary_supports, run_unary},
    {"Shrink", UNARY_SHRINK, unary_supports, run_unary},
    {"BitwiseNot", UNARY_BITNOT, unary_supports, run_unary},
    {"IsNaN", 0, classify_supports, run_classify},
    {"IsInf", 1, classify_supports, run_classify},
    {"Clip", 0, clip_supports, run_clip},
    {"Not", 0, not_supports, run_not},
    {"Cast", 0, cast_supports, run_cast},
    {"CastLike", 0, cast_supports, run_cast},
    {"Add", BINARY_ADD, binary_supports, run_binary},
    {"Sub", BINARY_SUB, binary_supports, run_binary},
    {"Mul", BINARY_MUL, binary_supports, run_binary},
    {"Div", BINARY_DIV, binary_supports, run_binary},
    {"Pow", BINARY_POW, binary_supports, run_binary},
    {"Min", BINARY_MIN, binary_supports, run_binary},
    {"Max", BINARY_MAX, binary_supports, run_binary},
    {"Equal", BINARY_EQ, binary_supports, run_binary},
    {"Less", BINARY_LT, binary_supports, run_binary},
    {"Greater", BINARY_GT, binary_supports, run_binary},
    {"LessOrEqual", BINARY_LE, binary_supports, run_binary},
    {"GreaterOrEqual", BINARY_GE, binary_supports, run_binary},
    {"Mod", BINARY_MOD, binary_supports, run_binary},
    {"PRelu", BINARY_PRELU, binary_supports, run_binary},
    {"And", BINARY_AND, binary_supports, run_binary},
    {"Or", BINARY_OR, binary_supports, run_binary},
    {"Xor", BINARY_XOR, binary_supports, run_binary},
    {"BitwiseAnd", BINARY_AND, binary_supports, run_binary},
    {"BitwiseOr", BINARY_OR, binary_supports, run_binary},
    {"BitwiseXor", BINARY_XOR, binary_supports, run_binary},
    {"Sum", BINARY_ADD_ALL, binary_supports, run_binary},
    {"Mean", BINARY_MEAN_ALL, binary_supports, run_binary},
    {"Where", 0, where_supports, run_where},
    {"Identity", 0, copy_supports, run_copy},
    {"Dropout", 0, copy_supports, run_copy},
    {"Reshape", 0, copy_supports, run_copy},
    {"Flatten", 0, copy_supports, run_copy},
    {"Squeeze", 0, copy_supports, run_copy},
    {"Unsqueeze", 0, copy_supports, run_copy},
    {"Transpose", 0, walk_supports, run_transpose},
    {"Expand", 0, walk_supports, run_expand},
    {"Slice", 0, multi_walk_supports, run_slice},
    {"Concat", 0, multi_walk_supports, run_concat},
    {"Split", 0, split_supports, run_split},
    {"Gather", 0, gather_supports, run_gather},
    {"Pad", 0, pad_supports, run_pad},
    {"ConstantOfShape", 0, constant_of_shape_supports, run_constant_of_shape},
    {"Shape", 0, shape_supports, run_shape},
    {"ReduceSum", REDUCE_SUM, reduce_supports, run_reduce},
    {"ReduceMean", REDUCE_MEAN, reduce_supports, run_reduce},
    {"ReduceMax", REDUCE_MAX, reduce_supports, run_reduce},
    {"ReduceMin", REDUCE_MIN, reduce_supports, run_reduce},
    {"ReduceProd", REDUCE_PROD, reduce_supports, run_reduce},
    {"ReduceL1", REDUCE_L1, reduce_supports, run_reduce},
    {"ReduceL2", REDUCE_L2, reduce_supports, run_reduce},
    {"ReduceLogSum", REDUCE_LOGSUM, reduce_supports, run_reduce},
    {"ReduceLogSumExp", REDUCE_LOGSUMEXP, reduce_supports, run_reduce},
    {"ReduceSumSquare", REDUCE_SUMSQUARE, reduce_supports, run_reduce},
    {"ArgMax", 0, argmax_supports, run_argmax},
    {"ArgMin", 1, argmax_supports, run_argmax},
    {"TopK", 0, topk_supports, run_topk},
    {"MatMul", 0, matmul_supports, run_matmul},
    {"Gemm", 0, gemm_supports, run_gemm},
    {"Softmax", 0, fp_supports, run_softmax},
    {"LogSoftmax", 1, fp_supports, run_softmax},
    {"LayerNormalization", 0, layernorm_supports, run_layernorm},
    {"RMSNormalization", 1, layernorm_supports, run_layernorm},
    {"BatchNormalization", 0, batchnorm_supports, run_batchnorm},
    {"GroupNormalization", 0, groupnorm_supports, run_groupnorm},
    {"InstanceNormalization", 0, groupnorm_supports, run_groupnorm},
    {"LRN", 0, lrn_supports, run_lrn},
    {"Hardmax", 0, fp_supports, run_hardmax},
    {"Conv", 0, conv_supports, run_conv},
    {"ConvTranspose", 1, conv_transpose_supports, run_conv},
    {"MaxPool", 1, pool_supports, run_pool},
    {"AveragePool", 0, pool_supports, run_pool},
    {"GlobalAveragePool", 0, global_pool_supports, run_pool},
    {"GlobalMaxPool", 1, global_pool_supports, run_pool},
    {"LpPool", 0, pool_supports, run_pool},
    {"GlobalLpPool", 0, global_pool_supports, run_pool},
    {"Resize", 0, resize_supports, run_resize},
    {"Trilu", 0, gs__devops_trilu_supports, gs__devops_run_trilu},
    {"Range", 0, gs__devops_range_supports, gs__devops_run_range},
    {"CumSum", 0, gs__devops_cumsum_supports, gs__devops_run_cumsum},
    {"Tile", 0, gs__devops_rearrange_supports, gs__devops_run_tile},
    {"DepthToSpace", 0, gs__devops_rearrange_supports, gs__devops_run_depth_to_space},
    {"SpaceToDepth", 0, gs__devops_rearrange_supports, gs__devops_run_space_to_depth},
    {"GatherElements", 0, gs__devops_elements_supports, gs__devops_run_gather_elements},
    {"ScatterElements", 1, gs__devops_elements_supports, gs__devops_run_scatter_elements},
    {"GatherND", 0, gs__devops_nd_supports, gs__devops_run_gather_nd},
    {"ScatterND", 1, gs__devops_nd_supports, gs__devops_run_scatter_nd},
    {"OneHot", 0, gs__devops_one_hot_supports, gs__devops_run_one_hot},
    {"DFT", 0, gs__devops_dft_supports, gs__devops_run_dft},
    {"STFT", 1, gs__devops_dft_supports, gs__devops_run_dft},
    {GS_IMAGE_TAPS_OP, 0, image_taps_supports, run_image_taps},
};

_Static_assert(sizeof ops / sizeof ops[0] <= GS_DEVOPS_MAX, "GS_DEVOPS_MAX is too small");

const gs_devop *gs_devops(size_t *count) {
  *count = sizeof ops / sizeof ops[0];
  return ops;
}

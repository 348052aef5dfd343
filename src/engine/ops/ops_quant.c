/* ops_quant.c - definitions of the quantisation ops: QuantizeLinear and
 * DequantizeLinear (per tensor, per axis, blocked), and QLinearMatMul. */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

#include <string.h>

/* The integer types quantised tensors may have here. */
#define QUANT_TYPES \
  (GS_DTM(GS_DT_INT8) | GS_DTM(GS_DT_UINT8) | GS_DTM(GS_DT_INT16) | GS_DTM(GS_DT_UINT16))

/* Checks that input `s` (a scale or zero point) fits x: one value, one
 * per element of `axis`, or blocks of block_size along it. */
static int check_scale_shape(gs_op_call *c, int s, const gs_quant_attrs *a) {
  const gs_shape *x = &c->in[0].shape, *sc = &c->in[s].shape;
  int64_t n = gs_shape_numel(sc);
  if (a->block_size == 0) {
    if (n == 1 && sc->rank <= 1)
      return GS_OK;
    if (sc->rank == 1 && x->rank > 0 && sc->dims[0] == x->dims[a->axis])
      return GS_OK;
    return gs_op_fail(c, "input %d must hold one value or one per element of axis %d", s,
                      a->axis);
  }
  bool ok = sc->rank == x->rank;
  for (int d = 0; ok && d < x->rank; d++)
    ok = d == a->axis ? sc->dims[d] == (x->dims[d] + a->block_size - 1) / a->block_size
                      : sc->dims[d] == x->dims[d];
  return ok ? GS_OK : gs_op_fail(c, "input %d does not fit blocks of %lld along axis %d", s,
                                  (long long)a->block_size, a->axis);
}

static int quant_axes(gs_op_call *c, const gs_node *n, gs_quant_attrs *a) {
  a->block_size = gs_attr_int(n, "block_size", 0);
  /* The axis matters only where the scale is not one value. */
  bool per_tensor = gs_shape_numel(&c->in[1].shape) == 1 && c->in[1].shape.rank <= 1 &&
                    a->block_size == 0;
  int rank = c->in[0].shape.rank;
  if (!per_tensor && gs_axis_normalize(gs_attr_int(n, "axis", 1), rank, &a->axis) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  if (a->block_size < 0)
    return gs_op_fail(c, "block_size must not be negative");
  int rc = check_scale_shape(c, 1, a);
  if (rc == 0 && c->n_in > 2 && c->in[2].dtype != GS_DT_INVALID) {
    /* onnxruntime's quantiser writes a bias's scale as [1] beside a zero point of []. */
    bool both_one = gs_shape_numel(&c->in[2].shape) == 1 && gs_shape_numel(&c->in[1].shape) == 1;
    if (!both_one && !gs_shape_equal(&c->in[2].shape, &c->in[1].shape))
      return gs_op_fail(c, "the zero point must have the scale's shape");
  }
  return rc;
}

static bool has_zero_point(const gs_op_call *c, int i) {
  return c->n_in > i && c->in[i].dtype != GS_DT_INVALID;
}

/* A type quantisation cannot take here, named as ONNX names it. */
static int refuse_type(gs_op_call *c, int onnx_type) {
  return gs_op_fail(c, "quantisation to %s is not supported (int8, uint8, int16 and uint16 are)",
                    gs_onnx_type_name(onnx_type));
}

static int infer_quantize(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_F32ISH | GS_DTM(GS_DT_INT32));
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, GS_DTM_F32ISH);
  if (rc < 0)
    return rc;
  gs_quant_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  if ((rc = quant_axes(c, n, a)) < 0)
    return rc;
  gs_dtype out = GS_DT_UINT8;
  if (has_zero_point(c, 2)) {
    out = c->in[2].dtype;
  } else if (gs_node_attr(n, "output_dtype")) {
    int t = (int)gs_attr_int(n, "output_dtype", 0);
    out = gs_dtype_from_onnx(t);
    if (out == GS_DT_INVALID || !(QUANT_TYPES & GS_DTM(out)))
      return refuse_type(c, t);
  }
  if (!(QUANT_TYPES & GS_DTM(out)))
    return refuse_type(c, gs_dtype_to_onnx(out));
  c->out[0].dtype = out;
  c->out[0].shape = c->in[0].shape;
  return GS_OK;
}

static int infer_dequantize(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, QUANT_TYPES | GS_DTM(GS_DT_INT32));
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, GS_DTM_F32ISH);
  if (rc < 0)
    return rc;
  if (has_zero_point(c, 2) && c->in[2].dtype != c->in[0].dtype)
    return gs_op_fail(c, "the zero point must have x's type");
  gs_quant_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  if ((rc = quant_axes(c, n, a)) < 0)
    return rc;
  c->out[0].dtype = c->in[1].dtype;
  c->out[0].shape = c->in[0].shape;
  return GS_OK;
}

/* a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point;
 * a's scale per tensor or per row, b's per tensor or per column. */
static int infer_qlinear_matmul(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = 0;
  for (int i = 0; rc == 0 && i < 8; i++) { /* 8-bit only: the integer GEMM's types */
    bool scale = i == 1 || i == 4 || i == 6;
    rc = gs_op_want_dtype(c, i, scale ? GS_DTM_F32ISH : GS_DTM(GS_DT_INT8) | GS_DTM(GS_DT_UINT8));
  }
  if (rc < 0)
    return rc;
  if (c->in[2].dtype != c->in[0].dtype || c->in[5].dtype != c->in[3].dtype)
    return gs_op_fail(c, "each zero point must have its tensor's type");
  gs_quant_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  c->out[0].dtype = c->in[7].dtype;
  if ((rc = gs__matmul_shapes(c, &c->in[0].shape, &c->in[3].shape, &a->matmul,
                              &c->out[0].shape)) < 0)
    return rc;
  int64_t sa = gs_shape_numel(&c->in[1].shape), sb = gs_shape_numel(&c->in[4].shape);
  if ((sa != 1 && sa != a->matmul.m) || (sb != 1 && sb != a->matmul.n) ||
      gs_shape_numel(&c->in[6].shape) != 1 ||
      gs_shape_numel(&c->in[2].shape) != sa || gs_shape_numel(&c->in[5].shape) != sb ||
      gs_shape_numel(&c->in[7].shape) != 1)
    return gs_op_fail(c, "scales and zero points must be per tensor (a: or per row, b: or per "
                         "column)");
  return GS_OK;
}

static const char *const quantize_attrs[] = {"axis", "block_size", "saturate", "output_dtype",
                                             NULL};
static const char *const dequantize_attrs[] = {"axis", "block_size", NULL};
static const char *const no_attrs[] = {NULL};

const gs_op_def gs__ops_quant[] = {
    {.name = "QuantizeLinear", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = quantize_attrs, .infer = infer_quantize},
    {.name = "DequantizeLinear", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = dequantize_attrs, .infer = infer_dequantize},
    {.name = "QLinearMatMul", .min_in = 8, .max_in = 8, .min_out = 1, .max_out = 1,
     .attrs = no_attrs, .infer = infer_qlinear_matmul},
    {.name = NULL},
};

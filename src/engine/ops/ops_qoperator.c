/* ops_qoperator.c - definitions of the integer ops of quantised models in
 * QOperator and dynamic form: ONNX's DynamicQuantizeLinear, MatMulInteger,
 * ConvInteger and QLinearConv, and the com.microsoft ops that
 * onnxruntime's quantiser writes (QGemm, QLinearAdd, QLinearMul,
 * QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, QLinearAveragePool,
 * QLinearGlobalAveragePool, QLinearConcat, MatMulIntegerToFloat,
 * DynamicQuantizeMatMul). Their kernels are in hal/cpu/ops/k_qgemm.c (the
 * products) and k_qlinear.c (the rest). */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

#include <string.h>

#define Q8 (GS_DTM(GS_DT_INT8) | GS_DTM(GS_DT_UINT8))
#define F32 GS_DTM(GS_DT_FLOAT32)

static const char *const MS = "com.microsoft";

/* Input `scale` is one float32, and input `zero` (where given) one value of
 * `type`: per-tensor quantisation. */
static int want_per_tensor(gs_op_call *c, int scale, int zero, gs_dtype type) {
  int rc = gs_op_want_dtype(c, scale, F32);
  if (rc < 0)
    return rc;
  if (gs_shape_numel(&c->in[scale].shape) != 1)
    return gs_op_fail(c, "input %d (a scale) must hold one value", scale);
  if (zero < 0 || !gs_op_given(c, zero))
    return GS_OK;
  if (c->in[zero].dtype != type)
    return gs_op_fail(c, "input %d (a zero point) must have its tensor's type", zero);
  if (gs_shape_numel(&c->in[zero].shape) != 1)
    return gs_op_fail(c, "input %d (a zero point) must hold one value", zero);
  return GS_OK;
}

/* Input `i` holds one value, or `count` values (per row or per column). */
static int want_count(gs_op_call *c, int i, int64_t count, const char *what) {
  int64_t n = gs_shape_numel(&c->in[i].shape);
  if (n == 1 || (n == count && c->in[i].shape.rank <= 2))
    return GS_OK;
  return gs_op_fail(c, "input %d must hold one value or one per %s (%lld), not %lld", i, what,
                    (long long)count, (long long)n);
}

/* ---- DynamicQuantizeLinear ------------------------------------------------------------- */

static int infer_dynamic_quantize(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = gs_op_want_dtype(c, 0, F32);
  if (rc < 0)
    return rc;
  c->out[0] = (gs_tensor_desc){.dtype = GS_DT_UINT8, .shape = c->in[0].shape};
  c->out[1] = (gs_tensor_desc){.dtype = GS_DT_FLOAT32, .shape = {.rank = 0}};
  c->out[2] = (gs_tensor_desc){.dtype = GS_DT_UINT8, .shape = {.rank = 0}};
  return gs_op_attrs(c, sizeof(gs_quant_attrs)) ? GS_OK : GS_ENOMEM;
}

/* ---- the products ---------------------------------------------------------------------- */

/* The shapes of a MatMul of inputs a and b into the attrs, the output's
 * shape into out[0]. */
static gs_quant_attrs *matmul_shapes(gs_op_call *c, int a, int b, int *rc) {
  gs_quant_attrs *q = gs_op_attrs(c, sizeof *q);
  if (!q) {
    *rc = GS_ENOMEM;
    return NULL;
  }
  *rc = gs__matmul_shapes(c, &c->in[a].shape, &c->in[b].shape, &q->matmul, &c->out[0].shape);
  return *rc < 0 ? NULL : q;
}

/* A, B, a_zero_point, b_zero_point: int32 = (A - za) @ (B - zb). */
static int infer_matmul_integer(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = gs_op_want_dtype(c, 0, Q8);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, Q8);
  if (rc < 0)
    return rc;
  gs_quant_attrs *q = matmul_shapes(c, 0, 1, &rc);
  if (!q)
    return rc;
  for (int i = 2; i < 4 && rc == 0; i++)
    if (gs_op_given(c, i)) {
      if (c->in[i].dtype != c->in[i - 2].dtype)
        return gs_op_fail(c, "input %d (a zero point) must have its tensor's type", i);
      rc = want_count(c, i, i == 2 ? q->matmul.m : q->matmul.n, i == 2 ? "row" : "column");
    }
  c->out[0].dtype = GS_DT_INT32;
  return rc;
}

/* B's scale and zero point (`scale`, `zero`: one, or one per column of
 * the n columns) and an optional float32 bias of n values at `bias`; the
 * output is float32. */
static int want_b_params(gs_op_call *c, int64_t n, int scale, int zero, int bias) {
  int rc = want_count(c, scale, n, "column");
  if (rc < 0)
    return rc;
  if (gs_op_given(c, zero)) {
    if (c->in[zero].dtype != c->in[1].dtype)
      return gs_op_fail(c, "b_zero_point must have B's type");
    if ((rc = want_count(c, zero, n, "column")) < 0)
      return rc;
  }
  if (gs_op_given(c, bias) &&
      (c->in[bias].dtype != GS_DT_FLOAT32 || gs_shape_numel(&c->in[bias].shape) != n))
    return gs_op_fail(c, "bias must hold %lld float32 values", (long long)n);
  c->out[0].dtype = GS_DT_FLOAT32;
  return GS_OK;
}

/* A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias: float32. */
static int infer_matmul_integer_to_float(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = gs_op_want_dtype(c, 0, Q8);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, Q8);
  if (rc == 0)
    rc = want_per_tensor(c, 2, 4, c->in[0].dtype);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 3, F32);
  if (rc < 0)
    return rc;
  gs_quant_attrs *q = matmul_shapes(c, 0, 1, &rc);
  return q ? want_b_params(c, q->matmul.n, 3, 5, 6) : rc;
}

/* A (float32), B, b_scale, b_zero_point, bias: A quantised as
 * DynamicQuantizeLinear does, then as MatMulIntegerToFloat. */
static int infer_dynamic_quantize_matmul(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = gs_op_want_dtype(c, 0, F32);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, Q8);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 2, F32);
  if (rc < 0)
    return rc;
  gs_quant_attrs *q = matmul_shapes(c, 0, 1, &rc);
  return q ? want_b_params(c, q->matmul.n, 2, 3, 4) : rc;
}

/* A, a_scale, a_zero_point, B, b_scale, b_zero_point, C (int32), y_scale,
 * y_zero_point: quantised with y's, or float32 without them. */
static int infer_qgemm(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, Q8);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 3, Q8);
  if (rc == 0)
    rc = want_per_tensor(c, 1, 2, c->in[0].dtype);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 4, F32);
  if (rc < 0)
    return rc;
  gs_quant_attrs *q = gs_op_attrs(c, sizeof *q);
  if (!q)
    return GS_ENOMEM;
  q->alpha = gs_attr_float(n, "alpha", 1.0f);
  q->trans_a = gs_attr_int(n, "transA", 0) != 0;
  q->trans_b = gs_attr_int(n, "transB", 0) != 0;
  const gs_shape *a = &c->in[0].shape, *b = &c->in[3].shape;
  if (a->rank != 2 || b->rank != 2)
    return gs_op_fail(c, "A and B must be matrices");
  gs_matmul_attrs *m = &q->matmul;
  m->batch = 1;
  m->m = a->dims[q->trans_a ? 1 : 0];
  m->k = a->dims[q->trans_a ? 0 : 1];
  m->n = b->dims[q->trans_b ? 0 : 1];
  if (b->dims[q->trans_b ? 1 : 0] != m->k)
    return gs_op_fail(c, "A has %lld columns but B has %lld rows", (long long)m->k,
                      (long long)b->dims[q->trans_b ? 1 : 0]);
  if ((rc = want_count(c, 4, m->n, "column")) < 0)
    return rc;
  if (gs_op_given(c, 5)) {
    if (c->in[5].dtype != c->in[3].dtype)
      return gs_op_fail(c, "b_zero_point must have B's type");
    if ((rc = want_count(c, 5, m->n, "column")) < 0)
      return rc;
  }
  gs_shape out = {.rank = 2, .dims = {m->m, m->n}}, bc;
  if (gs_op_given(c, 6)) {
    if (c->in[6].dtype != GS_DT_INT32)
      return gs_op_fail(c, "C must be int32");
    if (gs_shape_broadcast(&c->in[6].shape, &out, &bc) < 0 || !gs_shape_equal(&bc, &out))
      return gs_op_fail(c, "C does not broadcast to [%lld, %lld]", (long long)m->m,
                        (long long)m->n);
  }
  c->out[0].shape = out;
  c->out[0].dtype = GS_DT_FLOAT32;
  if (gs_op_given(c, 7)) {
    if (!gs_op_given(c, 8))
      return gs_op_fail(c, "y_scale needs y_zero_point");
    if ((rc = gs_op_want_dtype(c, 8, Q8)) < 0 || (rc = want_per_tensor(c, 7, 8, c->in[8].dtype)) < 0)
      return rc;
    c->out[0].dtype = c->in[8].dtype;
  }
  return GS_OK;
}

/* ---- the convolutions ------------------------------------------------------------------ */

/* x, w, x_zero_point, w_zero_point: int32. */
static int infer_conv_integer(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, Q8);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, Q8);
  if (rc < 0)
    return rc;
  gs_quant_attrs *q = gs_op_attrs(c, sizeof *q);
  if (!q)
    return GS_ENOMEM;
  if ((rc = gs__conv_shapes(c, n, &c->in[1].shape, false, &q->conv, &c->out[0].shape)) < 0)
    return rc;
  if (gs_op_given(c, 2) && (c->in[2].dtype != c->in[0].dtype ||
                            gs_shape_numel(&c->in[2].shape) != 1))
    return gs_op_fail(c, "x_zero_point must be one value of x's type");
  if (gs_op_given(c, 3)) {
    if (c->in[3].dtype != c->in[1].dtype)
      return gs_op_fail(c, "w_zero_point must have w's type");
    if ((rc = want_count(c, 3, c->out[0].shape.dims[1], "output channel")) < 0)
      return rc;
  }
  c->out[0].dtype = GS_DT_INT32;
  return GS_OK;
}

/* x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
 * y_zero_point, B (int32). */
static int infer_qlinear_conv(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, Q8);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 3, Q8);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 7, Q8);
  if (rc == 0)
    rc = want_per_tensor(c, 1, 2, c->in[0].dtype);
  if (rc == 0)
    rc = want_per_tensor(c, 6, 7, c->in[7].dtype);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 4, F32);
  if (rc < 0)
    return rc;
  gs_quant_attrs *q = gs_op_attrs(c, sizeof *q);
  if (!q)
    return GS_ENOMEM;
  if ((rc = gs__conv_shapes(c, n, &c->in[3].shape, false, &q->conv, &c->out[0].shape)) < 0)
    return rc;
  int64_t oc = c->out[0].shape.dims[1];
  if ((rc = want_count(c, 4, oc, "output channel")) < 0)
    return rc;
  if (c->in[5].dtype != c->in[3].dtype)
    return gs_op_fail(c, "w_zero_point must have w's type");
  if ((rc = want_count(c, 5, oc, "output channel")) < 0)
    return rc;
  if (gs_op_given(c, 8)) {
    if (c->in[8].dtype != GS_DT_INT32 || gs_shape_numel(&c->in[8].shape) != oc)
      return gs_op_fail(c, "B must hold %lld int32 values", (long long)oc);
    q->conv.has_bias = true;
  }
  c->out[0].dtype = c->in[7].dtype;
  return GS_OK;
}

/* ---- element-wise and the rest (com.microsoft) -------------------------------------------- */

/* A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point. */
static int infer_qlinear_binary(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = gs_op_want_dtype(c, 0, Q8);
  if (rc < 0)
    return rc;
  gs_dtype t = c->in[0].dtype;
  if (c->in[3].dtype != t)
    return gs_op_fail(c, "A and B must have one type");
  if ((rc = want_per_tensor(c, 1, 2, t)) < 0 || (rc = want_per_tensor(c, 4, 5, t)) < 0 ||
      (rc = want_per_tensor(c, 6, 7, t)) < 0)
    return rc;
  if (gs_shape_broadcast(&c->in[0].shape, &c->in[3].shape, &c->out[0].shape) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  c->out[0].dtype = t;
  return gs_op_attrs(c, sizeof(gs_quant_attrs)) ? GS_OK : GS_ENOMEM;
}

/* X, X_scale, X_zero_point, Y_scale, Y_zero_point: one value in, one out. */
static int infer_qlinear_unary(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, Q8);
  gs_dtype t = c->in[0].dtype;
  if (rc == 0)
    rc = want_per_tensor(c, 1, 2, t);
  if (rc == 0)
    rc = want_per_tensor(c, 3, 4, t);
  if (rc < 0)
    return rc;
  gs_quant_attrs *q = gs_op_attrs(c, sizeof *q);
  if (!q)
    return GS_ENOMEM;
  q->alpha = gs_attr_float(n, "alpha", 0.01f);
  c->out[0] = (gs_tensor_desc){.dtype = t, .shape = c->in[0].shape};
  return GS_OK;
}

static int infer_qlinear_softmax(gs_op_call *c, const gs_node *n) {
  int rc = infer_qlinear_unary(c, n);
  if (rc < 0)
    return rc;
  gs_quant_attrs *q = c->attrs;
  int64_t opset = gs_attr_int(n, "opset", 0);
  if (opset < 1)
    return gs_op_fail(c, "the opset attribute (that of the Softmax quantised) is required");
  q->softmax_2d = opset < 13;
  if (gs_axis_normalize(gs_attr_int(n, "axis", opset < 13 ? 1 : -1), c->in[0].shape.rank,
                        &q->axis) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  return GS_OK;
}

/* X, x_scale, x_zero_point, y_scale, y_zero_point: the mean of each
 * channel's plane. */
static int infer_qlinear_global_average_pool(gs_op_call *c, const gs_node *n) {
  int rc = infer_qlinear_unary(c, n);
  if (rc < 0)
    return rc;
  gs_quant_attrs *q = c->attrs;
  q->channels_last = gs_attr_int(n, "channels_last", 0) != 0;
  gs_shape *s = &c->out[0].shape;
  if (s->rank < 3)
    return gs_op_fail(c, "X must have rank 3 or more");
  for (int d = 1; d < s->rank; d++)
    if (d != (q->channels_last ? s->rank - 1 : 1))
      s->dims[d] = 1;
  return GS_OK;
}

/* X, x_scale, x_zero_point, y_scale, y_zero_point: AveragePool's window. */
static int infer_qlinear_average_pool(gs_op_call *c, const gs_node *n) {
  int rc = infer_qlinear_unary(c, n);
  if (rc < 0)
    return rc;
  gs_quant_attrs *q = c->attrs;
  if (gs_attr_int(n, "channels_last", 0) != 0)
    return gs_op_fail(c, "channels_last=1 is not supported (NCHW only)");
  return gs__pool_shapes(c, n, &q->pool, &c->out[0].shape);
}

/* Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input. */
static int infer_qlinear_concat(gs_op_call *c, const gs_node *n) {
  if ((c->n_in - 2) % 3 != 0 || c->n_in < 5)
    return gs_op_fail(c, "takes Y's scale and zero point, then triples of tensor, scale and zero "
                         "point");
  int rc = gs_op_want_dtype(c, 1, Q8);
  gs_dtype t = c->in[1].dtype;
  if (rc == 0)
    rc = want_per_tensor(c, 0, 1, t);
  for (int i = 2; rc == 0 && i < c->n_in; i += 3) {
    if (c->in[i].dtype != t)
      return gs_op_fail(c, "input %d must have Y's type", i);
    rc = want_per_tensor(c, i + 1, i + 2, t);
  }
  if (rc < 0)
    return rc;
  gs_quant_attrs *q = gs_op_attrs(c, sizeof *q);
  if (!q)
    return GS_ENOMEM;
  gs_shape s = c->in[2].shape;
  if (gs_axis_normalize(gs_attr_int(n, "axis", 0), s.rank, &q->axis) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  for (int i = 5; i < c->n_in; i += 3) {
    const gs_shape *o = &c->in[i].shape;
    bool ok = o->rank == s.rank;
    for (int d = 0; ok && d < s.rank; d++)
      ok = d == q->axis || o->dims[d] == s.dims[d];
    if (!ok)
      return gs_op_fail(c, "input %d does not fit the others beside axis %d", i, q->axis);
    s.dims[q->axis] += o->dims[q->axis];
  }
  c->out[0] = (gs_tensor_desc){.dtype = t, .shape = s};
  return GS_OK;
}

static const char *const no_attrs[] = {NULL};
static const char *const conv_attrs[] = {"auto_pad", "dilations", "group", "kernel_shape", "pads",
                                         "strides", NULL};
static const char *const qgemm_attrs[] = {"alpha", "transA", "transB", NULL};
static const char *const leaky_attrs[] = {"alpha", NULL};
static const char *const softmax_attrs[] = {"axis", "opset", NULL};
static const char *const pool_attrs[] = {"channels_last", NULL};
static const char *const concat_attrs[] = {"axis", NULL};
static const char *const avgpool_attrs[] = {"auto_pad", "ceil_mode", "channels_last",
                                            "count_include_pad", "kernel_shape", "pads",
                                            "strides", NULL};

static int check_conv_pad(const gs_node *n) {
  const char *ap = gs_attr_string(n, "auto_pad", "NOTSET");
  if (strcmp(ap, "NOTSET") && strcmp(ap, "VALID") && strcmp(ap, "SAME_UPPER") &&
      strcmp(ap, "SAME_LOWER"))
    return gs_error(GS_ENOTSUP, "auto_pad=\"%s\"", ap);
  return GS_OK;
}

const gs_op_def gs__ops_qoperator[] = {
    {.name = "DynamicQuantizeLinear", .min_in = 1, .max_in = 1, .min_out = 3, .max_out = 3,
     .attrs = no_attrs, .infer = infer_dynamic_quantize},
    {.name = "MatMulInteger", .min_in = 2, .max_in = 4, .min_out = 1, .max_out = 1,
     .attrs = no_attrs, .infer = infer_matmul_integer},
    {.name = "ConvInteger", .min_in = 2, .max_in = 4, .min_out = 1, .max_out = 1,
     .attrs = conv_attrs, .check = check_conv_pad, .infer = infer_conv_integer},
    {.name = "QLinearConv", .min_in = 8, .max_in = 9, .min_out = 1, .max_out = 1,
     .attrs = conv_attrs, .check = check_conv_pad, .infer = infer_qlinear_conv},
    {.name = "QGemm", .domain = MS, .min_in = 6, .max_in = 9, .min_out = 1, .max_out = 1,
     .attrs = qgemm_attrs, .infer = infer_qgemm},
    {.name = "MatMulIntegerToFloat", .domain = MS, .min_in = 4, .max_in = 7, .min_out = 1,
     .max_out = 1, .attrs = no_attrs, .infer = infer_matmul_integer_to_float},
    {.name = "DynamicQuantizeMatMul", .domain = MS, .min_in = 3, .max_in = 5, .min_out = 1,
     .max_out = 1, .attrs = no_attrs, .infer = infer_dynamic_quantize_matmul},
    {.name = "QLinearAdd", .domain = MS, .min_in = 7, .max_in = 8, .min_out = 1, .max_out = 1,
     .attrs = no_attrs, .infer = infer_qlinear_binary},
    {.name = "QLinearMul", .domain = MS, .min_in = 7, .max_in = 8, .min_out = 1, .max_out = 1,
     .attrs = no_attrs, .infer = infer_qlinear_binary},
    {.name = "QLinearSigmoid", .domain = MS, .min_in = 4, .max_in = 5, .min_out = 1, .max_out = 1,
     .attrs = no_attrs, .infer = infer_qlinear_unary},
    {.name = "QLinearLeakyRelu", .domain = MS, .min_in = 4, .max_in = 5, .min_out = 1,
     .max_out = 1, .attrs = leaky_attrs, .infer = infer_qlinear_unary},
    {.name = "QLinearSoftmax", .domain = MS, .min_in = 4, .max_in = 5, .min_out = 1, .max_out = 1,
     .attrs = softmax_attrs, .infer = infer_qlinear_softmax},
    {.name = "QLinearGlobalAveragePool", .domain = MS, .min_in = 5, .max_in = 5, .min_out = 1,
     .max_out = 1, .attrs = pool_attrs, .infer = infer_qlinear_global_average_pool},
    {.name = "QLinearAveragePool", .domain = MS, .min_in = 4, .max_in = 5, .min_out = 1,
     .max_out = 1, .attrs = avgpool_attrs, .check = check_conv_pad,
     .infer = infer_qlinear_average_pool},
    {.name = "QLinearConcat", .domain = MS, .min_in = 5, .max_in = GS_OP_MAX_IO - 1,
     .min_out = 1, .max_out = 1, .attrs = concat_attrs, .infer = infer_qlinear_concat},
    {.name = NULL},
};

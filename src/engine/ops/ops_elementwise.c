/* ops_elementwise.c - definitions of the element-wise ops: unary math and
 * activations, Cast, Clip, and the broadcasting binary and variadic ops. */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

#include <string.h>

/* ---- unary ------------------------------------------------------------------- */

static int infer_same(gs_op_call *c, uint32_t mask) {
  int rc = gs_op_want_dtype(c, 0, mask);
  if (rc < 0)
    return rc;
  for (int i = 0; i < c->n_out; i++)
    c->out[i] = c->in[0];
  return gs_op_attrs(c, sizeof(gs_unary_attrs)) ? GS_OK : GS_ENOMEM;
}

static int infer_float_unary(gs_op_call *c, const gs_node *n) {
  (void)n;
  return infer_same(c, GS_DTM_FLOATS);
}

static int infer_signed_unary(gs_op_call *c, const gs_node *n) {
  (void)n;
  return infer_same(c, GS_DTM_FLOATS | GS_DTM(GS_DT_INT8) | GS_DTM(GS_DT_INT16) |
                           GS_DTM(GS_DT_INT32) | GS_DTM(GS_DT_INT64));
}

static int infer_numeric_unary(gs_op_call *c, const gs_node *n) {
  (void)n;
  return infer_same(c, GS_DTM_NUMERIC);
}

static int infer_leaky(gs_op_call *c, const gs_node *n) {
  int rc = infer_same(c, GS_DTM_FLOATS);
  if (rc == 0)
    ((gs_unary_attrs *)c->attrs)->alpha = gs_attr_float(n, "alpha", 0.01f);
  return rc;
}

static int check_gelu(const gs_node *n) {
  const char *a = gs_attr_string(n, "approximate", "none");
  if (strcmp(a, "none") != 0 && strcmp(a, "tanh") != 0)
    return gs_error(GS_ENOTSUP, "approximate=\"%s\" (expected none or tanh)", a);
  return GS_OK;
}

static int infer_gelu(gs_op_call *c, const gs_node *n) {
  int rc = infer_same(c, GS_DTM_FLOATS);
  if (rc == 0)
    ((gs_unary_attrs *)c->attrs)->gelu_tanh = strcmp(gs_attr_string(n, "approximate", "none"), "tanh") == 0;
  return rc;
}

/* The float activations with parameters: each reads its own names into
 * alpha and beta (op_attrs.h). */
static int infer_param_unary(gs_op_call *c, const gs_node *n) {
  int rc = infer_same(c, GS_DTM_FLOATS);
  if (rc < 0)
    return rc;
  gs_unary_attrs *a = c->attrs;
  const char *op = n->op_type;
  if (!strcmp(op, "Elu") || !strcmp(op, "Celu"))
    a->alpha = gs_attr_float(n, "alpha", 1.0f);
  else if (!strcmp(op, "ThresholdedRelu") || !strcmp(op, "Swish"))
    a->alpha = gs_attr_float(n, "alpha", 1.0f);
  else if (!strcmp(op, "HardSigmoid"))
    a->alpha = gs_attr_float(n, "alpha", 0.2f), a->beta = gs_attr_float(n, "beta", 0.5f);
  else if (!strcmp(op, "Selu"))
    a->alpha = gs_attr_float(n, "alpha", 1.67326319217681884765625f),
    a->beta = gs_attr_float(n, "gamma", 1.05070102214813232421875f);
  else if (!strcmp(op, "Shrink"))
    a->alpha = gs_attr_float(n, "lambd", 0.5f), a->beta = gs_attr_float(n, "bias", 0.0f);
  if (!strcmp(op, "Celu") && a->alpha == 0)
    return gs_op_fail(c, "alpha must not be 0");
  return GS_OK;
}

static int infer_shrink(gs_op_call *c, const gs_node *n) {
  if (gs_dtype_is_float(c->in[0].dtype))
    return infer_param_unary(c, n);
  int rc = infer_same(c, GS_DTM_INTS);
  if (rc == 0) {
    gs_unary_attrs *a = c->attrs;
    a->alpha = gs_attr_float(n, "lambd", 0.5f), a->beta = gs_attr_float(n, "bias", 0.0f);
  }
  return rc;
}

/* IsNaN, IsInf: a float in, a bool out. */
static int infer_float_test(gs_op_call *c, const gs_node *n) {
  int rc = infer_same(c, GS_DTM_FLOATS);
  if (rc < 0)
    return rc;
  c->out[0].dtype = GS_DT_BOOL;
  gs_unary_attrs *a = c->attrs;
  a->detect_pos = gs_attr_int(n, "detect_positive", 1) != 0;
  a->detect_neg = gs_attr_int(n, "detect_negative", 1) != 0;
  return GS_OK;
}

static int infer_int_unary(gs_op_call *c, const gs_node *n) {
  (void)n;
  return infer_same(c, GS_DTM_INTS);
}

static int infer_castlike(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = gs_op_want_dtype(c, 0, GS_DTM_ALL);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, GS_DTM_ALL);
  if (rc < 0)
    return rc;
  gs_cast_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  a->to = c->in[1].dtype;
  c->out[0].dtype = a->to;
  c->out[0].shape = c->in[0].shape;
  return GS_OK;
}

/* Size: the element count, known from the shape alone. */
static int infer_size(gs_op_call *c, const gs_node *n) {
  (void)n;
  c->out[0].dtype = GS_DT_INT64;
  c->out[0].shape = (gs_shape){.rank = 0};
  return GS_OK;
}

static int fold_size(const gs_op_call *c, const gs_node *n, void *out) {
  (void)n;
  *(int64_t *)out = gs_shape_numel(&c->in[0].shape);
  return GS_OK;
}

static int infer_not(gs_op_call *c, const gs_node *n) {
  (void)n;
  return infer_same(c, GS_DTM(GS_DT_BOOL));
}

static int infer_identity(gs_op_call *c, const gs_node *n) {
  (void)n;
  return infer_same(c, GS_DTM_MOVABLE);
}

static int infer_dropout(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS);
  if (rc < 0)
    return rc;
  /* Inference: training_mode must be false if given. */
  if (c->n_in > 2 && c->in[2].dtype != GS_DT_INVALID) {
    if ((rc = gs_op_need_values(c, 2)) < 0)
      return rc;
    if (*(const uint8_t *)c->in_data[2])
      return gs_op_fail(c, "training_mode=true is not supported (inference only)");
  }
  c->out[0] = c->in[0];
  if (c->n_out > 1) {
    c->out[1] = c->in[0];
    c->out[1].dtype = GS_DT_BOOL;
  }
  return gs_op_attrs(c, sizeof(gs_unary_attrs)) ? GS_OK : GS_ENOMEM;
}

static int infer_clip(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = infer_same(c, GS_DTM_NUMERIC);
  for (int i = 1; rc == 0 && i < c->n_in; i++) {
    if (c->in[i].dtype == GS_DT_INVALID)
      continue;
    if (c->in[i].dtype != c->in[0].dtype || gs_shape_numel(&c->in[i].shape) != 1)
      rc = gs_op_fail(c, "min and max must be scalars of the input's type");
  }
  return rc;
}

static int infer_cast(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_ALL);
  if (rc < 0)
    return rc;
  gs_dtype to = gs_dtype_from_onnx((int)gs_attr_int(n, "to", 0));
  if (to == GS_DT_INVALID || to == GS_DT_BYTES)
    return gs_op_fail(c, "cannot cast to ONNX type %lld", (long long)gs_attr_int(n, "to", 0));
  gs_cast_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  a->to = to;
  c->out[0].dtype = to;
  c->out[0].shape = c->in[0].shape;
  return GS_OK;
}

static int check_cast_saturate(const gs_node *n) {
  if (gs_attr_int(n, "saturate", 1) != 1)
    return gs_error(GS_ENOTSUP, "saturate=0 (float8 casts) is not supported");
  return GS_OK;
}

static int check_cast(const gs_node *n) {
  if (!gs_node_attr(n, "to"))
    return gs_error(GS_EINVAL, "attribute 'to' is required");
  if (gs_attr_int(n, "saturate", 1) != 1)
    return gs_error(GS_ENOTSUP, "saturate=0 (float8 casts) is not supported");
  return GS_OK;
}

/* ---- binary and variadic ----------------------------------------------------------- */

/* Broadcasts all present inputs from `first`; they share one type from mask. */
static int infer_broadcast(gs_op_call *c, int first, uint32_t mask, gs_dtype out_dtype) {
  gs_shape s = c->in[first].shape;
  for (int i = first; i < c->n_in; i++) {
    int rc = gs_op_want_dtype(c, i, mask);
    if (rc < 0)
      return rc;
    if (c->in[i].dtype != c->in[first].dtype)
      return gs_op_fail(c, "inputs %d and %d have types %s and %s; they must match", first, i,
                        gs_dtype_name(c->in[first].dtype), gs_dtype_name(c->in[i].dtype));
    if ((rc = gs_shape_broadcast(&s, &c->in[i].shape, &s)) < 0)
      return gs_op_fail(c, "%s", gs_error_detail());
  }
  c->out[0].dtype = out_dtype ? out_dtype : c->in[first].dtype;
  c->out[0].shape = s;
  return gs_op_attrs(c, sizeof(gs_unary_attrs)) ? GS_OK : GS_ENOMEM;
}

static int infer_arith(gs_op_call *c, const gs_node *n) {
  (void)n;
  return infer_broadcast(c, 0, GS_DTM_NUMERIC, GS_DT_INVALID);
}

static int infer_compare(gs_op_call *c, const gs_node *n) {
  (void)n;
  return infer_broadcast(c, 0, GS_DTM_NUMERIC | GS_DTM(GS_DT_BOOL), GS_DT_BOOL);
}

static int infer_logical(gs_op_call *c, const gs_node *n) {
  (void)n;
  return infer_broadcast(c, 0, GS_DTM(GS_DT_BOOL), GS_DT_BOOL);
}

static int infer_bitwise(gs_op_call *c, const gs_node *n) {
  (void)n;
  return infer_broadcast(c, 0, GS_DTM_INTS, GS_DT_INVALID);
}

static int infer_mod(gs_op_call *c, const gs_node *n) {
  int rc = infer_broadcast(c, 0, GS_DTM_NUMERIC, GS_DT_INVALID);
  if (rc < 0)
    return rc;
  bool fmod = gs_attr_int(n, "fmod", 0) != 0;
  if (gs_dtype_is_float(c->in[0].dtype) && !fmod)
    return gs_op_fail(c, "fmod must be 1 for floating-point inputs");
  ((gs_unary_attrs *)c->attrs)->fmod = fmod;
  return GS_OK;
}

static int infer_bitshift(gs_op_call *c, const gs_node *n) {
  int rc = infer_broadcast(c, 0, GS_DTM(GS_DT_UINT8) | GS_DTM(GS_DT_UINT16) | GS_DTM(GS_DT_UINT32) |
                                     GS_DTM(GS_DT_UINT64), GS_DT_INVALID);
  if (rc < 0)
    return rc;
  const char *dir = gs_attr_string(n, "direction", "");
  if (strcmp(dir, "LEFT") && strcmp(dir, "RIGHT"))
    return gs_op_fail(c, "direction=\"%s\" (expected LEFT or RIGHT)", dir);
  ((gs_unary_attrs *)c->attrs)->shift_right = !strcmp(dir, "RIGHT");
  return GS_OK;
}

/* PRelu: the slope broadcasts to x (unidirectionally). */
static int infer_prelu(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = infer_broadcast(c, 0, GS_DTM_FLOATS | GS_DTM(GS_DT_INT32) | GS_DTM(GS_DT_INT64),
                           GS_DT_INVALID);
  if (rc == 0 && !gs_shape_equal(&c->out[0].shape, &c->in[0].shape))
    return gs_op_fail(c, "slope must broadcast to the shape of X");
  return rc;
}

/* Sum and Mean: any number of inputs of one type. */
static int infer_mean(gs_op_call *c, const gs_node *n) {
  (void)n;
  return infer_broadcast(c, 0, GS_DTM_FLOATS, GS_DT_INVALID);
}

static int infer_pow(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS | GS_DTM(GS_DT_INT32) | GS_DTM(GS_DT_INT64));
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, GS_DTM_NUMERIC);
  if (rc < 0)
    return rc;
  gs_shape s;
  if (gs_shape_broadcast(&c->in[0].shape, &c->in[1].shape, &s) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = s;
  return gs_op_attrs(c, sizeof(gs_unary_attrs)) ? GS_OK : GS_ENOMEM;
}

static int infer_where(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = gs_op_want_dtype(c, 0, GS_DTM(GS_DT_BOOL));
  if (rc < 0)
    return rc;
  if ((rc = infer_broadcast(c, 1, GS_DTM_ALL, GS_DT_INVALID)) < 0)
    return rc;
  gs_shape s;
  if (gs_shape_broadcast(&c->in[0].shape, &c->out[0].shape, &s) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  c->out[0].shape = s;
  return GS_OK;
}

static const char *const no_attrs[] = {NULL};
static const char *const leaky_attrs[] = {"alpha", NULL};
static const char *const gelu_attrs[] = {"approximate", NULL};
static const char *const dropout_attrs[] = {"seed", NULL};
static const char *const cast_attrs[] = {"to", "saturate", NULL};
static const char *const castlike_attrs[] = {"saturate", NULL};
static const char *const alpha_attrs[] = {"alpha", NULL};
static const char *const hardsigmoid_attrs[] = {"alpha", "beta", NULL};
static const char *const selu_attrs[] = {"alpha", "gamma", NULL};
static const char *const shrink_attrs[] = {"lambd", "bias", NULL};
static const char *const isinf_attrs[] = {"detect_positive", "detect_negative", NULL};
static const char *const mod_attrs[] = {"fmod", NULL};
static const char *const bitshift_attrs[] = {"direction", NULL};

#define UNARY(op, fn) \
  {.name = op, .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .attrs = no_attrs, .infer = fn}
#define UNARY_A(op, fn, attr_names) \
  {.name = op, .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .attrs = attr_names, .infer = fn}
#define VARIADIC(op, fn) \
  {.name = op, .min_in = 1, .max_in = GS_OP_MAX_IO - 1, .min_out = 1, .max_out = 1, \
   .attrs = no_attrs, .infer = fn}
#define BINARY(op, fn) \
  {.name = op, .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1, .attrs = no_attrs, .infer = fn}

const gs_op_def gs__ops_elementwise[] = {
    UNARY("Relu", infer_signed_unary),
    {.name = "LeakyRelu", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = leaky_attrs, .infer = infer_leaky},
    UNARY("Sigmoid", infer_float_unary),
    UNARY("Tanh", infer_float_unary),
    {.name = "Gelu", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .attrs = gelu_attrs,
     .check = check_gelu, .infer = infer_gelu},
    UNARY("Erf", infer_float_unary),
    UNARY("Sqrt", infer_float_unary),
    UNARY("Exp", infer_float_unary),
    UNARY("Log", infer_float_unary),
    UNARY("Neg", infer_signed_unary),
    UNARY("Abs", infer_numeric_unary),
    UNARY("Not", infer_not),
    UNARY("Reciprocal", infer_float_unary),
    UNARY("Floor", infer_float_unary),
    UNARY("Ceil", infer_float_unary),
    UNARY("Round", infer_float_unary),
    UNARY("Sin", infer_float_unary),
    UNARY("Cos", infer_float_unary),
    UNARY("Tan", infer_float_unary),
    UNARY("Asin", infer_float_unary),
    UNARY("Acos", infer_float_unary),
    UNARY("Atan", infer_float_unary),
    UNARY("Sinh", infer_float_unary),
    UNARY("Cosh", infer_float_unary),
    UNARY("Asinh", infer_float_unary),
    UNARY("Acosh", infer_float_unary),
    UNARY("Atanh", infer_float_unary),
    UNARY("Softplus", infer_float_unary),
    UNARY("Softsign", infer_float_unary),
    UNARY("HardSwish", infer_float_unary),
    UNARY("Mish", infer_float_unary),
    UNARY_A("Elu", infer_param_unary, alpha_attrs),
    UNARY_A("Celu", infer_param_unary, alpha_attrs),
    UNARY_A("Swish", infer_param_unary, alpha_attrs), /* opset 24: x sigmoid(alpha x) */
    UNARY_A("ThresholdedRelu", infer_param_unary, alpha_attrs),
    UNARY_A("HardSigmoid", infer_param_unary, hardsigmoid_attrs),
    UNARY_A("Selu", infer_param_unary, selu_attrs),
    UNARY_A("Shrink", infer_shrink, shrink_attrs),
    UNARY("Sign", infer_numeric_unary),
    UNARY("IsNaN", infer_float_test),
    UNARY_A("IsInf", infer_float_test, isinf_attrs),
    UNARY("BitwiseNot", infer_int_unary),
    {.name = "CastLike", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = castlike_attrs, .check = check_cast_saturate, .infer = infer_castlike},
    {.name = "Size", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .attrs = no_attrs,
     .infer = infer_size, .fold = fold_size},
    UNARY("Identity", infer_identity),
    {.name = "Dropout", .min_in = 1, .max_in = 3, .min_out = 1, .max_out = 2,
     .attrs = dropout_attrs, .infer = infer_dropout},
    {.name = "Clip", .min_in = 1, .max_in = 3, .min_out = 1, .max_out = 1, .attrs = no_attrs,
     .infer = infer_clip},
    {.name = "Cast", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .attrs = cast_attrs,
     .check = check_cast, .infer = infer_cast},
    BINARY("Add", infer_arith),
    BINARY("Sub", infer_arith),
    BINARY("Mul", infer_arith),
    BINARY("Div", infer_arith),
    BINARY("Pow", infer_pow),
    BINARY("Equal", infer_compare),
    BINARY("Less", infer_compare),
    BINARY("Greater", infer_compare),
    BINARY("LessOrEqual", infer_compare),
    BINARY("GreaterOrEqual", infer_compare),
    BINARY("And", infer_logical),
    BINARY("Or", infer_logical),
    BINARY("Xor", infer_logical),
    BINARY("BitwiseAnd", infer_bitwise),
    BINARY("BitwiseOr", infer_bitwise),
    BINARY("BitwiseXor", infer_bitwise),
    BINARY("PRelu", infer_prelu),
    {.name = "Mod", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1, .attrs = mod_attrs,
     .infer = infer_mod},
    {.name = "BitShift", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = bitshift_attrs, .infer = infer_bitshift},
    VARIADIC("Sum", infer_arith),
    VARIADIC("Mean", infer_mean),
    {.name = "Min", .min_in = 1, .max_in = GS_OP_MAX_IO - 1, .min_out = 1, .max_out = 1,
     .attrs = no_attrs, .infer = infer_arith},
    {.name = "Max", .min_in = 1, .max_in = GS_OP_MAX_IO - 1, .min_out = 1, .max_out = 1,
     .attrs = no_attrs, .infer = infer_arith},
    {.name = "Where", .min_in = 3, .max_in = 3, .min_out = 1, .max_out = 1, .attrs = no_attrs,
     .infer = infer_where},
    {.name = NULL},
};

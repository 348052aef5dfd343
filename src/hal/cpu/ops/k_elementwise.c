/* k_elementwise.c - CPU kernels of the element-wise ops. float32 has fast
 * loops the compiler vectorises; other types go through double (floats) or
 * int64 (integers) element by element. */
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/parallel.h"
#include "hal/cpu/ops/fastmath.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- broadcasting iterator ------------------------------------------------------ */

void gs_bcast_init(gs_bcast *b, const gs_shape *out, int n_in, const gs_shape *const *in) {
  memset(b, 0, sizeof *b);
  b->n_in = n_in;
  int64_t dims[GS_MAX_DIMS], strides[GS_BCAST_MAX_IN][GS_MAX_DIMS];
  int rank = out->rank;
  for (int d = 0; d < rank; d++)
    dims[d] = out->dims[d];
  for (int k = 0; k < n_in; k++) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
      int id = in[k]->rank - rank + d;
      int64_t dim = id >= 0 ? in[k]->dims[id] : 1;
      strides[k][d] = dim == 1 ? 0 : s;
      s *= dim;
    }
  }
  /* Merge neighbouring dims that every operand walks contiguously (or all
   * broadcast), so that rows are as long as possible. Size-1 dims vanish. */
  int r = 0;
  for (int d = 0; d < rank; d++) {
    if (dims[d] == 1)
      continue;
    bool merge = r > 0;
    for (int k = 0; merge && k < n_in; k++) {
      int64_t prev = b->strides[k][r - 1], cur = strides[k][d];
      merge = (prev == 0 && cur == 0) || (cur != 0 && prev == cur * dims[d]);
    }
    if (merge) {
      b->dims[r - 1] *= dims[d];
      for (int k = 0; k < n_in; k++)
        b->strides[k][r - 1] = strides[k][d];
    } else {
      b->dims[r] = dims[d];
      for (int k = 0; k < n_in; k++)
        b->strides[k][r] = strides[k][d];
      r++;
    }
  }
  if (r == 0) { /* a scalar, or all dims 1 */
    b->dims[0] = gs_shape_numel(out) == 0 ? 0 : 1;
    r = 1;
  }
  for (int d = 0; d < rank; d++)
    if (out->dims[d] == 0)
      b->dims[0] = 0;
  b->rank = r;
  b->row_len = b->dims[r - 1];
  b->rows = 1;
  for (int d = 0; d < r - 1; d++)
    b->rows *= b->dims[d];
  if (b->row_len == 0)
    b->rows = 0;
}

void gs_bcast_row(const gs_bcast *b, int64_t row, int64_t *out_off, int64_t *in_off) {
  *out_off = row * b->row_len;
  for (int k = 0; k < b->n_in; k++)
    in_off[k] = 0;
  for (int d = b->rank - 2; d >= 0; d--) {
    int64_t i = row % b->dims[d];
    row /= b->dims[d];
    for (int k = 0; k < b->n_in; k++)
      in_off[k] += i * b->strides[k][d];
  }
}

/* ---- unary ------------------------------------------------------------------------ */

typedef enum {
  U_RELU, U_LEAKY, U_SIGMOID, U_TANH, U_GELU, U_ERF, U_SQRT, U_EXP, U_LOG, U_NEG, U_ABS, U_NOT,
  U_RECIPROCAL, U_FLOOR, U_CEIL, U_ROUND, U_SIN, U_COS, U_TAN, U_ASIN, U_ACOS, U_ATAN, U_SINH,
  U_COSH, U_ASINH, U_ACOSH, U_ATANH, U_SOFTPLUS, U_SOFTSIGN, U_HARDSWISH, U_MISH, U_ELU, U_CELU,
  U_THRESHOLDED_RELU, U_HARDSIGMOID, U_SELU, U_SHRINK, U_SIGN, U_BITNOT, U_SWISH,
} unary_op;

static inline double softplus(double x) { return x > 30 ? x : log1p(exp(x)); }

static inline float gelu_erf(float x) { return 0.5f * x * (1.0f + gs_fast_erff(x * 0.70710678f)); }
static inline float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + gs_fast_tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

static inline double unary_d(unary_op op, double x, const gs_unary_attrs *a) {
  switch (op) {
  case U_RELU: return x > 0 ? x : 0;
  case U_LEAKY: return x >= 0 ? x : a->alpha * x;
  case U_SIGMOID: return 1.0 / (1.0 + exp(-x));
  case U_TANH: return tanh(x);
  case U_GELU:
    return a->gelu_tanh ? 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
                        : 0.5 * x * (1.0 + erf(x * 0.7071067811865476));
  case U_ERF: return erf(x);
  case U_SQRT: return sqrt(x);
  case U_EXP: return exp(x);
  case U_LOG: return log(x);
  case U_NEG: return -x;
  case U_ABS: return fabs(x);
  case U_NOT: return x == 0;
  case U_RECIPROCAL: return 1.0 / x;
  case U_FLOOR: return floor(x);
  case U_CEIL: return ceil(x);
  case U_ROUND: return nearbyint(x); /* halves to even, as ONNX asks */
  case U_SIN: return sin(x);
  case U_COS: return cos(x);
  case U_TAN: return tan(x);
  case U_ASIN: return asin(x);
  case U_ACOS: return acos(x);
  case U_ATAN: return atan(x);
  case U_SINH: return sinh(x);
  case U_COSH: return cosh(x);
  case U_ASINH: return asinh(x);
  case U_ACOSH: return acosh(x);
  case U_ATANH: return atanh(x);
  case U_SOFTPLUS: return softplus(x);
  case U_SOFTSIGN: return x / (1.0 + fabs(x));
  case U_HARDSWISH: return x * fmax(0.0, fmin(1.0, x / 6.0 + 0.5));
  case U_MISH: return x * tanh(softplus(x));
  case U_ELU: return x >= 0 ? x : a->alpha * (exp(x) - 1.0);
  case U_CELU: return fmax(0.0, x) + fmin(0.0, a->alpha * (exp(x / a->alpha) - 1.0));
  case U_THRESHOLDED_RELU: return x > a->alpha ? x : 0.0;
  case U_SWISH: return x / (1.0 + exp(-a->alpha * x));
  case U_HARDSIGMOID: return fmax(0.0, fmin(1.0, a->alpha * x + a->beta));
  case U_SELU: return a->beta * (x > 0 ? x : a->alpha * (exp(x) - 1.0));
  case U_SHRINK: return x < -a->alpha ? x + a->beta : x > a->alpha ? x - a->beta : 0.0;
  case U_SIGN: return x > 0 ? 1.0 : x < 0 ? -1.0 : x; /* 0 and NaN stay */
  case U_BITNOT: return x;
  }
  return x;
}

/* Elements [lo, hi) of a unary op. */
GS_VECTOR_CLONES static void unary_range(unary_op op, const gs_unary_attrs *a, gs_dtype dt,
                                         const void *x, void *y, int64_t lo, int64_t hi) {
  if (dt == GS_DT_FLOAT32) {
    const float *xf = x;
    float *yf = y;
    switch (op) {
    case U_RELU:
      for (int64_t i = lo; i < hi; i++)
        yf[i] = xf[i] > 0 ? xf[i] : 0;
      return;
    case U_LEAKY: {
      float al = a->alpha;
      for (int64_t i = lo; i < hi; i++)
        yf[i] = xf[i] >= 0 ? xf[i] : al * xf[i];
      return;
    }
    case U_SIGMOID:
      for (int64_t i = lo; i < hi; i++)
        yf[i] = gs_fast_sigmoidf(xf[i]);
      return;
    case U_TANH:
      for (int64_t i = lo; i < hi; i++)
        yf[i] = gs_fast_tanhf(xf[i]);
      return;
    case U_GELU:
      if (a->gelu_tanh)
        for (int64_t i = lo; i < hi; i++)
          yf[i] = gelu_tanh(xf[i]);
      else
        for (int64_t i = lo; i < hi; i++)
          yf[i] = gelu_erf(xf[i]);
      return;
    case U_ERF:
      for (int64_t i = lo; i < hi; i++)
        yf[i] = gs_fast_erff(xf[i]);
      return;
    case U_SQRT:
      for (int64_t i = lo; i < hi; i++)
        yf[i] = sqrtf(xf[i]);
      return;
    case U_EXP:
      for (int64_t i = lo; i < hi; i++)
        yf[i] = expf(xf[i]);
      return;
    case U_LOG:
      for (int64_t i = lo; i < hi; i++)
        yf[i] = logf(xf[i]);
      return;
    case U_NEG:
      for (int64_t i = lo; i < hi; i++)
        yf[i] = -xf[i];
      return;
    case U_ABS:
      for (int64_t i = lo; i < hi; i++)
        yf[i] = fabsf(xf[i]);
      return;
    case U_HARDSWISH:
      for (int64_t i = lo; i < hi; i++) {
        float g = xf[i] * (1.0f / 6.0f) + 0.5f;
        yf[i] = xf[i] * (g < 0.0f ? 0.0f : g > 1.0f ? 1.0f : g);
      }
      return;
    case U_HARDSIGMOID: {
      float al = a->alpha, be = a->beta;
      for (int64_t i = lo; i < hi; i++) {
        float g = al * xf[i] + be;
        yf[i] = g < 0.0f ? 0.0f : g > 1.0f ? 1.0f : g;
      }
      return;
    }
    case U_RECIPROCAL:
      for (int64_t i = lo; i < hi; i++)
        yf[i] = 1.0f / xf[i];
      return;
    default: break; /* the rest through double, below */
    }
  }
  if (gs_is_int(dt)) {
    for (int64_t i = lo; i < hi; i++) {
      int64_t v = gs_ldi(dt, x, i);
      int64_t r = op == U_RELU ? (v > 0 ? v : 0)
                  : op == U_NEG ? (int64_t)(0 - (uint64_t)v)
                  : op == U_ABS ? (v < 0 ? (int64_t)(0 - (uint64_t)v) : v)
                  : op == U_NOT ? v == 0
                  : op == U_SIGN ? (v > 0) - (v < 0)
                  : op == U_BITNOT ? ~v
                  : op == U_SHRINK ? (int64_t)unary_d(op, (double)v, a)
                                : v;
      gs_sti(dt, y, i, r);
    }
    return;
  }
  for (int64_t i = lo; i < hi; i++)
    gs_st(dt, y, i, unary_d(op, gs_ld(dt, x, i), a));
}

static int run_unary(const gs_cpu_kernel_call *k, unary_op op) {
  const gs_op_call *c = gs_kcall(k);
  gs_dtype dt = c->in[0].dtype;
  const void *x = k->ptr[0];
  void *y = k->ptr[1];
  /* Other types go through double, one element at a time: smaller pieces. */
  int64_t grain = dt == GS_DT_FLOAT32 ? GS_PARALLEL_GRAIN : GS_PARALLEL_GRAIN / 8;
  GS_PARALLEL_RANGES(gs_shape_numel(&c->in[0].shape), grain, lo, hi,
                     unary_range(op, c->attrs, dt, x, y, lo, hi));
  return 0;
}

#define UNARY_KERNEL(fn, op) \
  static int fn(const gs_cpu_kernel_call *k) { return run_unary(k, op); }
UNARY_KERNEL(k_relu, U_RELU)
UNARY_KERNEL(k_leaky, U_LEAKY)
UNARY_KERNEL(k_sigmoid, U_SIGMOID)
UNARY_KERNEL(k_tanh, U_TANH)
UNARY_KERNEL(k_gelu, U_GELU)
UNARY_KERNEL(k_erf, U_ERF)
UNARY_KERNEL(k_sqrt, U_SQRT)
UNARY_KERNEL(k_exp, U_EXP)
UNARY_KERNEL(k_log, U_LOG)
UNARY_KERNEL(k_neg, U_NEG)
UNARY_KERNEL(k_abs, U_ABS)
UNARY_KERNEL(k_not, U_NOT)
UNARY_KERNEL(k_reciprocal, U_RECIPROCAL)
UNARY_KERNEL(k_floor, U_FLOOR)
UNARY_KERNEL(k_ceil, U_CEIL)
UNARY_KERNEL(k_round, U_ROUND)
UNARY_KERNEL(k_sin, U_SIN)
UNARY_KERNEL(k_cos, U_COS)
UNARY_KERNEL(k_tan, U_TAN)
UNARY_KERNEL(k_asin, U_ASIN)
UNARY_KERNEL(k_acos, U_ACOS)
UNARY_KERNEL(k_atan, U_ATAN)
UNARY_KERNEL(k_sinh, U_SINH)
UNARY_KERNEL(k_cosh, U_COSH)
UNARY_KERNEL(k_asinh, U_ASINH)
UNARY_KERNEL(k_acosh, U_ACOSH)
UNARY_KERNEL(k_atanh, U_ATANH)
UNARY_KERNEL(k_softplus, U_SOFTPLUS)
UNARY_KERNEL(k_softsign, U_SOFTSIGN)
UNARY_KERNEL(k_hardswish, U_HARDSWISH)
UNARY_KERNEL(k_mish, U_MISH)
UNARY_KERNEL(k_elu, U_ELU)
UNARY_KERNEL(k_celu, U_CELU)
UNARY_KERNEL(k_swish, U_SWISH)
UNARY_KERNEL(k_thresholded_relu, U_THRESHOLDED_RELU)
UNARY_KERNEL(k_hardsigmoid, U_HARDSIGMOID)
UNARY_KERNEL(k_selu, U_SELU)
UNARY_KERNEL(k_shrink, U_SHRINK)
UNARY_KERNEL(k_sign, U_SIGN)
UNARY_KERNEL(k_bitnot, U_BITNOT)

/* IsNaN and IsInf: bool out. */
static int k_float_test(const gs_cpu_kernel_call *k, bool nan) {
  const gs_op_call *c = gs_kcall(k);
  const gs_unary_attrs *a = c->attrs;
  int64_t n = gs_shape_numel(&c->in[0].shape);
  uint8_t *y = k->ptr[1];
  for (int64_t i = 0; i < n; i++) {
    double v = gs_ld(c->in[0].dtype, k->ptr[0], i);
    y[i] = nan ? v != v : (isinf(v) && ((v > 0 && a->detect_pos) || (v < 0 && a->detect_neg)));
  }
  return 0;
}
static int k_isnan(const gs_cpu_kernel_call *k) { return k_float_test(k, true); }
static int k_isinf(const gs_cpu_kernel_call *k) { return k_float_test(k, false); }

/* Casts that C's own conversion does as ONNX asks (to the nearest
 * float), in loops that vectorise: a quantised model's int32 products
 * and 8-bit tensors made float. The rest go through double or int64. */
#define DEFINE_CAST(NAME, FROM, TO)                                                             \
  GS_VECTOR_CLONES                                                                            \
  static void NAME(const void *x, void *y, int64_t lo, int64_t hi) {                           \
    const FROM *in = x;                                                                        \
    TO *out = y;                                                                               \
    for (int64_t i = lo; i < hi; i++)                                                          \
      out[i] = (TO)in[i];                                                                      \
  }
DEFINE_CAST(cast_i32_f32, int32_t, float)
DEFINE_CAST(cast_i64_f32, int64_t, float)
DEFINE_CAST(cast_u64_f32, uint64_t, float)
DEFINE_CAST(cast_u8_f32, uint8_t, float)
DEFINE_CAST(cast_i8_f32, int8_t, float)
DEFINE_CAST(cast_f32_f64, float, double)
DEFINE_CAST(cast_f64_f32, double, float)

typedef void (*cast_fn)(const void *x, void *y, int64_t lo, int64_t hi);

static cast_fn fast_cast(gs_dtype from, gs_dtype to) {
  static const struct { gs_dtype from, to; cast_fn fn; } casts[] = {
      {GS_DT_INT32, GS_DT_FLOAT32, cast_i32_f32}, {GS_DT_INT64, GS_DT_FLOAT32, cast_i64_f32},
      {GS_DT_UINT64, GS_DT_FLOAT32, cast_u64_f32},
      {GS_DT_UINT8, GS_DT_FLOAT32, cast_u8_f32},  {GS_DT_INT8, GS_DT_FLOAT32, cast_i8_f32},
      {GS_DT_FLOAT32, GS_DT_FLOAT64, cast_f32_f64}, {GS_DT_FLOAT64, GS_DT_FLOAT32, cast_f64_f32}};
  for (size_t i = 0; i < sizeof casts / sizeof casts[0]; i++)
    if (casts[i].from == from && casts[i].to == to)
      return casts[i].fn;
  return NULL;
}

/* Cast, and CastLike (whose second input only gives the type). */
static int k_cast(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  gs_dtype from = c->in[0].dtype, to = c->out[0].dtype;
  int64_t n = gs_shape_numel(&c->in[0].shape);
  const void *x = k->ptr[0];
  void *y = k->ptr[c->n_in];
  if (from == to) {
    if (n > 0) /* an empty tensor's pointer may be NULL */
      memcpy(y, x, (size_t)n * gs_dtype_size(to));
    return 0;
  }
  cast_fn fast = fast_cast(from, to);
  if (fast) {
    GS_PARALLEL_RANGES(n, GS_PARALLEL_GRAIN, lo, hi, fast(x, y, lo, hi));
    return 0;
  }
  if (gs_is_int(from) && gs_is_int(to)) {
    for (int64_t i = 0; i < n; i++)
      gs_sti(to, y, i, gs_ldi(from, x, i));
    return 0;
  }
  if (from == GS_DT_FLOAT32 && to == GS_DT_FLOAT16) {
    for (int64_t i = 0; i < n; i++)
      ((uint16_t *)y)[i] = gs_f32_to_f16(((const float *)x)[i]);
    return 0;
  }
  for (int64_t i = 0; i < n; i++)
    gs_st(to, y, i, gs_ld(from, x, i));
  return 0;
}

static int k_clip(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  gs_dtype dt = c->in[0].dtype;
  int64_t n = gs_shape_numel(&c->in[0].shape);
  const void *lo = c->n_in > 1 ? k->ptr[1] : NULL, *hi = c->n_in > 2 ? k->ptr[2] : NULL;
  void *y = k->ptr[c->n_in];
  if (dt == GS_DT_FLOAT32) {
    float l = lo ? *(const float *)lo : -INFINITY, h = hi ? *(const float *)hi : INFINITY;
    const float *x = k->ptr[0];
    float *yf = y;
    for (int64_t i = 0; i < n; i++) {
      float v = x[i] < l ? l : x[i];
      yf[i] = v > h ? h : v;
    }
    return 0;
  }
  if (gs_is_int(dt)) {
    int64_t l = lo ? gs_ldi(dt, lo, 0) : INT64_MIN, h = hi ? gs_ldi(dt, hi, 0) : INT64_MAX;
    for (int64_t i = 0; i < n; i++) {
      int64_t v = gs_ldi(dt, k->ptr[0], i);
      gs_sti(dt, y, i, v < l ? l : v > h ? h : v);
    }
    return 0;
  }
  double l = lo ? gs_ld(dt, lo, 0) : -INFINITY, h = hi ? gs_ld(dt, hi, 0) : INFINITY;
  for (int64_t i = 0; i < n; i++) {
    double v = gs_ld(dt, k->ptr[0], i);
    gs_st(dt, y, i, v < l ? l : v > h ? h : v);
  }
  return 0;
}

/* ---- binary ------------------------------------------------------------------------- */

typedef enum {
  B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MIN, B_MAX, B_PRELU, B_MOD, B_FMOD, B_BAND, B_BOR, B_BXOR,
  B_SHL, B_SHR,
  /* bool out: */
  B_EQ, B_LT, B_GT, B_LE, B_GE, B_AND, B_OR, B_XOR,
} binary_op;

static inline bool binary_is_compare(binary_op op) { return op >= B_EQ; }

static inline double binary_d(binary_op op, double a, double b) {
  switch (op) {
  case B_ADD: return a + b;
  case B_SUB: return a - b;
  case B_MUL: return a * b;
  case B_DIV: return a / b;
  case B_POW: return pow(a, b);
  case B_MIN: return a != a || b != b ? NAN : a < b ? a : b;
  case B_MAX: return a != a || b != b ? NAN : a > b ? a : b;
  case B_PRELU: return a < 0 ? a * b : a;
  case B_MOD:
  case B_FMOD: return fmod(a, b);
  case B_EQ: return a == b;
  case B_LT: return a < b;
  case B_GT: return a > b;
  case B_LE: return a <= b;
  case B_GE: return a >= b;
  case B_AND: return a != 0 && b != 0;
  case B_OR: return a != 0 || b != 0;
  case B_XOR: return (a != 0) != (b != 0);
  default: return 0; /* the bitwise ops take integers only */
  }
}

/* uint64 in int64 bits: the ops where signedness matters. */
static inline int binary_u64(binary_op op, uint64_t a, uint64_t b, int64_t *r) {
  switch (op) {
  case B_DIV:
  case B_MOD:
  case B_FMOD:
    if (b == 0)
      return gs_error(GS_EINVAL, "integer %s by zero", op == B_DIV ? "division" : "modulo");
    *r = (int64_t)(op == B_DIV ? a / b : a % b);
    return 0;
  case B_MIN: *r = (int64_t)(a < b ? a : b); return 0;
  case B_MAX: *r = (int64_t)(a > b ? a : b); return 0;
  case B_LT: *r = a < b; return 0;
  case B_GT: *r = a > b; return 0;
  case B_LE: *r = a <= b; return 0;
  case B_GE: *r = a >= b; return 0;
  default: return 1; /* the same as signed */
  }
}

/* Integer arithmetic wraps, like the hardware, without C's undefined behaviour. */
static inline int binary_i(binary_op op, int64_t a, int64_t b, bool u64, int64_t *r) {
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
  if (u64) {
    int rc = binary_u64(op, ua, ub, r);
    if (rc <= 0)
      return rc;
  }
  switch (op) {
  case B_ADD: *r = (int64_t)(ua + ub); return 0;
  case B_SUB: *r = (int64_t)(ua - ub); return 0;
  case B_MUL: *r = (int64_t)(ua * ub); return 0;
  case B_DIV:
    if (b == 0)
      return gs_error(GS_EINVAL, "integer division by zero");
    *r = (a == INT64_MIN && b == -1) ? INT64_MIN : a / b;
    return 0;
  case B_POW: {
    if (b < 0) {
      *r = a == 1 ? 1 : a == -1 ? (b & 1 ? -1 : 1) : 0;
      return 0;
    }
    uint64_t acc = 1, base = ua;
    for (int64_t e = b; e; e >>= 1, base *= base)
      if (e & 1)
        acc *= base;
    *r = (int64_t)acc;
    return 0;
  }
  case B_MIN: *r = a < b ? a : b; return 0;
  case B_MAX: *r = a > b ? a : b; return 0;
  case B_PRELU: *r = a < 0 ? (int64_t)(ua * ub) : a; return 0;
  case B_MOD:
  case B_FMOD:
    if (b == 0)
      return gs_error(GS_EINVAL, "integer modulo by zero");
    *r = b == -1 ? 0 : a % b;
    if (op == B_MOD && *r != 0 && (*r < 0) != (b < 0)) /* Python's: the divisor's sign */
      *r += b;
    return 0;
  case B_SHL: *r = ub >= 64 ? 0 : (int64_t)(ua << ub); return 0;
  case B_SHR: *r = ub >= 64 ? 0 : (int64_t)(ua >> ub); return 0; /* unsigned types only */
  case B_BAND: *r = a & b; return 0;
  case B_BOR: *r = a | b; return 0;
  case B_BXOR: *r = a ^ b; return 0;
  case B_EQ: *r = a == b; return 0;
  case B_LT: *r = a < b; return 0;
  case B_GT: *r = a > b; return 0;
  case B_LE: *r = a <= b; return 0;
  case B_GE: *r = a >= b; return 0;
  case B_AND: *r = a && b; return 0;
  case B_OR: *r = a || b; return 0;
  case B_XOR: *r = !a != !b; return 0;
  }
  return 0;
}

/* The float32 rows: the cases without broadcasting in a row vectorise. */
#define F32_ROW(EXPR)                                       \
  do {                                                      \
    if (sa == 1 && sb == 1)                                 \
      for (int64_t i = 0; i < len; i++) {                   \
        float x = pa[i], w = pb[i];                         \
        po[i] = (EXPR);                                     \
      }                                                     \
    else if (sa == 1)                                       \
      for (int64_t i = 0; i < len; i++) {                   \
        float x = pa[i], w = pb[0];                         \
        po[i] = (EXPR);                                     \
      }                                                     \
    else if (sb == 1)                                       \
      for (int64_t i = 0; i < len; i++) {                   \
        float x = pa[0], w = pb[i];                         \
        po[i] = (EXPR);                                     \
      }                                                     \
    else                                                    \
      for (int64_t i = 0; i < len; i++) {                   \
        float x = pa[0], w = pb[0];                         \
        po[i] = (EXPR);                                     \
      }                                                     \
  } while (0)

GS_VECTOR_CLONES static void f32_row(binary_op op, const float *pa, int64_t sa, const float *pb, int64_t sb,
                    float *po, int64_t len) {
  switch (op) {
  case B_ADD: F32_ROW(x + w); break;
  case B_SUB: F32_ROW(x - w); break;
  case B_MUL: F32_ROW(x * w); break;
  case B_DIV: F32_ROW(x / w); break;
  case B_POW: F32_ROW(powf(x, w)); break;
  case B_MIN: F32_ROW(x != x || w != w ? NAN : x < w ? x : w); break;
  case B_MAX: F32_ROW(x != x || w != w ? NAN : x > w ? x : w); break;
  case B_PRELU: F32_ROW(x < 0 ? x * w : x); break;
  default: break;
  }
}

/* Elements [lo, hi) of a float32 binary op's output, in row-major order. */
static void f32_range(binary_op op, const gs_bcast *it, const float *a, int64_t sa,
                      const float *b, int64_t sb, float *out, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi;) {
    int64_t row = i / it->row_len, at = i % it->row_len;
    int64_t len = it->row_len - at < hi - i ? it->row_len - at : hi - i;
    int64_t oo, io[2];
    gs_bcast_row(it, row, &oo, io);
    f32_row(op, a + io[0] + at * sa, sa, b + io[1] + at * sb, sb, out + oo + at, len);
    i += len;
  }
}

/* Rows [lo, hi) of x [rows, mid, inner] times v: row r's vector, of
 * `inner` values, is v's (r % v_rows)-th; it scales the row's `mid` runs. */
GS_VECTOR_CLONES static void mul_rows(const float *x, const float *v, int64_t v_rows, float *y,
                                      int64_t mid, int64_t inner, int64_t lo, int64_t hi) {
  for (int64_t r = lo; r < hi; r++) {
    const float *vr = v + (r % v_rows) * inner;
    for (int64_t m = 0; m < mid; m++) {
      const float *xr = x + (r * mid + m) * inner;
      float *yr = y + (r * mid + m) * inner;
      for (int64_t i = 0; i < inner; i++)
        yr[i] = xr[i] * vr[i];
    }
  }
}

/* A float32 Mul of out's shape [d0, d1, d2, d3] by a vector per [d0 or 1,
 * d1] ([., ., 1, d3]): a per-channel scale in a channel-blocked layout,
 * as the plan writes it (plan_layout.c), [N, C/8, H*W, 8] by [N, C/8, 1,
 * 8]. The generic walk would go 8 values at a time. False where the call
 * has another form. */
static bool mul_by_row_vectors(const gs_tensor_desc *da, const void *a, const gs_tensor_desc *db,
                               const void *b, const gs_tensor_desc *dout, void *out) {
  const gs_shape *y = &dout->shape;
  if (y->rank != 4 || da->dtype != GS_DT_FLOAT32 || db->dtype != GS_DT_FLOAT32 ||
      dout->dtype != GS_DT_FLOAT32)
    return false;
  for (int f = 0; f < 2; f++) {
    const gs_shape *full = f ? &db->shape : &da->shape, *vec = f ? &da->shape : &db->shape;
    if (!gs_shape_equal(full, y) || vec->rank != 4 || vec->dims[2] != 1 || vec->dims[1] != y->dims[1] ||
        vec->dims[3] != y->dims[3] || (vec->dims[0] != 1 && vec->dims[0] != y->dims[0]) ||
        y->dims[2] == 1)
      continue;
    const float *x = f ? b : a, *v = f ? a : b;
    int64_t rows = y->dims[0] * y->dims[1], mid = y->dims[2], inner = y->dims[3];
    /* A vector per [image, channel], or per channel shared by the images. */
    int64_t v_rows = vec->dims[0] * vec->dims[1], row_values = mid * inner > 0 ? mid * inner : 1;
    if (rows == 0 || v_rows == 0)
      return true;
    GS_PARALLEL_RANGES(rows, GS_PARALLEL_GRAIN / row_values, lo, hi,
                       mul_rows(x, v, v_rows, out, mid, inner, lo, hi));
    return true;
  }
  return false;
}

/* out = a op b with broadcasting; a, b and out given as pointers and descs. */
static int binary(binary_op op, const gs_tensor_desc *da, const void *a, const gs_tensor_desc *db,
                  const void *b, const gs_tensor_desc *dout, void *out) {
  if (op == B_MUL && mul_by_row_vectors(da, a, db, b, dout, out))
    return 0;
  const gs_shape *shapes[2] = {&da->shape, &db->shape};
  gs_bcast it;
  gs_bcast_init(&it, &dout->shape, 2, shapes);
  gs_dtype dt = da->dtype, ot = dout->dtype;
  bool compare = binary_is_compare(op);
  bool fast = dt == GS_DT_FLOAT32 && db->dtype == GS_DT_FLOAT32 && !compare && op != B_MOD &&
              op != B_FMOD;
  int64_t sa = it.strides[0][it.rank - 1] ? 1 : 0, sb = it.strides[1][it.rank - 1] ? 1 : 0;
  if (fast) {
    GS_PARALLEL_RANGES(it.rows * it.row_len, GS_PARALLEL_GRAIN, lo, hi,
                       f32_range(op, &it, a, sa, b, sb, out, lo, hi));
    return 0;
  }
  for (int64_t row = 0; row < it.rows; row++) {
    int64_t oo, io[2];
    gs_bcast_row(&it, row, &oo, io);
    for (int64_t i = 0; i < it.row_len; i++) {
      int64_t ia = io[0] + i * sa, ib = io[1] + i * sb;
      if (gs_is_int(dt) && gs_is_int(db->dtype)) {
        int64_t r = 0;
        int rc = binary_i(op, gs_ldi(dt, a, ia), gs_ldi(db->dtype, b, ib), gs_is_u64(dt), &r);
        if (rc < 0)
          return rc;
        gs_sti(ot, out, oo + i, r);
      } else {
        double r = binary_d(op, gs_ld(dt, a, ia), gs_ld(db->dtype, b, ib));
        if (compare)
          gs_sti(ot, out, oo + i, (int64_t)r);
        else
          gs_st(ot, out, oo + i, r);
      }
    }
  }
  return 0;
}

static int run_binary(const gs_cpu_kernel_call *k, binary_op op) {
  const gs_op_call *c = gs_kcall(k);
  int rc = binary(op, &c->in[0], k->ptr[0], &c->in[1], k->ptr[1], &c->out[0], k->ptr[2]);
  if (rc < 0) { /* which node, as the device kernels' failures say */
    char prefix[200];
    snprintf(prefix, sizeof prefix, "node %s (%s)", c->node_name, c->op_type);
    return gs_error_prefix(rc, prefix);
  }
  return rc;
}

#define BINARY_KERNEL(fn, op) \
  static int fn(const gs_cpu_kernel_call *k) { return run_binary(k, op); }
BINARY_KERNEL(k_add, B_ADD)
BINARY_KERNEL(k_sub, B_SUB)
BINARY_KERNEL(k_mul, B_MUL)
BINARY_KERNEL(k_div, B_DIV)
BINARY_KERNEL(k_pow, B_POW)
BINARY_KERNEL(k_equal, B_EQ)
BINARY_KERNEL(k_less, B_LT)
BINARY_KERNEL(k_greater, B_GT)
BINARY_KERNEL(k_less_equal, B_LE)
BINARY_KERNEL(k_greater_equal, B_GE)
BINARY_KERNEL(k_and, B_AND)
BINARY_KERNEL(k_or, B_OR)
BINARY_KERNEL(k_xor, B_XOR)
BINARY_KERNEL(k_bitwise_and, B_BAND)
BINARY_KERNEL(k_bitwise_or, B_BOR)
BINARY_KERNEL(k_bitwise_xor, B_BXOR)
BINARY_KERNEL(k_prelu, B_PRELU)

static int k_bitshift(const gs_cpu_kernel_call *k) {
  const gs_unary_attrs *a = gs_kcall(k)->attrs;
  return run_binary(k, a->shift_right ? B_SHR : B_SHL);
}

static int k_mod(const gs_cpu_kernel_call *k) {
  const gs_unary_attrs *a = gs_kcall(k)->attrs;
  return run_binary(k, a->fmod ? B_FMOD : B_MOD);
}

/* Copies `src` broadcast to the shape of `dst` (element size esz). */
static void broadcast_copy(const gs_shape *src_shape, const void *src, const gs_shape *dst_shape,
                           void *dst, size_t esz) {
  const gs_shape *shapes[1] = {src_shape};
  gs_bcast it;
  gs_bcast_init(&it, dst_shape, 1, shapes);
  bool contiguous = it.strides[0][it.rank - 1] != 0;
  for (int64_t row = 0; row < it.rows; row++) {
    int64_t oo, io;
    gs_bcast_row(&it, row, &oo, &io);
    char *o = (char *)dst + (size_t)oo * esz;
    const char *s = (const char *)src + (size_t)io * esz;
    if (contiguous)
      memcpy(o, s, (size_t)it.row_len * esz);
    else
      for (int64_t i = 0; i < it.row_len; i++)
        memcpy(o + (size_t)i * esz, s, esz);
  }
}

void gs__cpu_broadcast_copy(const gs_shape *src_shape, const void *src, const gs_shape *dst_shape,
                            void *dst, size_t esz) {
  broadcast_copy(src_shape, src, dst_shape, dst, esz);
}

/* Min and Max of any number of inputs: the first broadcast into the output,
 * then each other one folded in place. */
static int run_variadic(const gs_cpu_kernel_call *k, binary_op op) {
  const gs_op_call *c = gs_kcall(k);
  void *out = k->ptr[c->n_in];
  broadcast_copy(&c->in[0].shape, k->ptr[0], &c->out[0].shape, out, gs_dtype_size(c->out[0].dtype));
  for (int i = 1; i < c->n_in; i++) {
    int rc = binary(op, &c->out[0], out, &c->in[i], k->ptr[i], &c->out[0], out);
    if (rc < 0)
      return rc;
  }
  return 0;
}

static int k_min(const gs_cpu_kernel_call *k) { return run_variadic(k, B_MIN); }
static int k_max(const gs_cpu_kernel_call *k) { return run_variadic(k, B_MAX); }
static int k_sum(const gs_cpu_kernel_call *k) { return run_variadic(k, B_ADD); }

static int k_mean(const gs_cpu_kernel_call *k) {
  int rc = run_variadic(k, B_ADD);
  const gs_op_call *c = gs_kcall(k);
  void *out = k->ptr[c->n_in];
  int64_t n = gs_shape_numel(&c->out[0].shape);
  for (int64_t i = 0; rc == 0 && i < n; i++)
    gs_st(c->out[0].dtype, out, i, gs_ld(c->out[0].dtype, out, i) / c->n_in);
  return rc;
}

static int k_where(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_shape *shapes[3] = {&c->in[0].shape, &c->in[1].shape, &c->in[2].shape};
  gs_bcast it;
  gs_bcast_init(&it, &c->out[0].shape, 3, shapes);
  size_t esz = gs_dtype_size(c->out[0].dtype);
  int64_t s[3];
  for (int j = 0; j < 3; j++)
    s[j] = it.strides[j][it.rank - 1] ? 1 : 0;
  const uint8_t *cond = k->ptr[0];
  const char *x = k->ptr[1], *y = k->ptr[2];
  char *o = k->ptr[3];
  for (int64_t row = 0; row < it.rows; row++) {
    int64_t oo, io[3];
    gs_bcast_row(&it, row, &oo, io);
    if (esz == 4 && s[0] == 1 && s[1] == 1 && s[2] == 1) {
      const uint32_t *px = (const uint32_t *)x + io[1], *py = (const uint32_t *)y + io[2];
      uint32_t *po = (uint32_t *)o + oo;
      const uint8_t *pc = cond + io[0];
      for (int64_t i = 0; i < it.row_len; i++)
        po[i] = pc[i] ? px[i] : py[i];
      continue;
    }
    for (int64_t i = 0; i < it.row_len; i++) {
      bool t = cond[io[0] + i * s[0]] != 0;
      const char *src = t ? x + (size_t)(io[1] + i * s[1]) * esz : y + (size_t)(io[2] + i * s[2]) * esz;
      memcpy(o + (size_t)(oo + i) * esz, src, esz);
    }
  }
  return 0;
}

/* ---- registration ------------------------------------------------------------------- */

#define KERNEL GS_CPU_KERNEL
static const gs_cpu_kernel_entry kernels[] = {
    KERNEL("Relu", k_relu),       KERNEL("LeakyRelu", k_leaky), KERNEL("Sigmoid", k_sigmoid),
    KERNEL("Tanh", k_tanh),       KERNEL("Gelu", k_gelu),       KERNEL("Erf", k_erf),
    KERNEL("Sqrt", k_sqrt),       KERNEL("Exp", k_exp),         KERNEL("Log", k_log),
    KERNEL("Neg", k_neg),         KERNEL("Abs", k_abs),         KERNEL("Not", k_not),
    KERNEL("Cast", k_cast),       KERNEL("Clip", k_clip),       KERNEL("Add", k_add),
    KERNEL("Sub", k_sub),         KERNEL("Mul", k_mul),         KERNEL("Div", k_div),
    KERNEL("Pow", k_pow),         KERNEL("Equal", k_equal),     KERNEL("Less", k_less),
    KERNEL("Greater", k_greater), KERNEL("Min", k_min),         KERNEL("Max", k_max),
    KERNEL("Where", k_where),
    KERNEL("Reciprocal", k_reciprocal), KERNEL("Floor", k_floor), KERNEL("Ceil", k_ceil),
    KERNEL("Round", k_round), KERNEL("Sin", k_sin), KERNEL("Cos", k_cos), KERNEL("Tan", k_tan),
    KERNEL("Asin", k_asin), KERNEL("Acos", k_acos), KERNEL("Atan", k_atan),
    KERNEL("Sinh", k_sinh), KERNEL("Cosh", k_cosh), KERNEL("Asinh", k_asinh),
    KERNEL("Acosh", k_acosh), KERNEL("Atanh", k_atanh), KERNEL("Softplus", k_softplus),
    KERNEL("Softsign", k_softsign), KERNEL("HardSwish", k_hardswish), KERNEL("Mish", k_mish),
    KERNEL("Elu", k_elu), KERNEL("Celu", k_celu), KERNEL("Swish", k_swish), KERNEL("ThresholdedRelu", k_thresholded_relu),
    KERNEL("HardSigmoid", k_hardsigmoid), KERNEL("Selu", k_selu), KERNEL("Shrink", k_shrink),
    KERNEL("Sign", k_sign), KERNEL("BitwiseNot", k_bitnot), KERNEL("IsNaN", k_isnan),
    KERNEL("IsInf", k_isinf), KERNEL("CastLike", k_cast),
    KERNEL("LessOrEqual", k_less_equal), KERNEL("GreaterOrEqual", k_greater_equal),
    KERNEL("And", k_and), KERNEL("Or", k_or), KERNEL("Xor", k_xor),
    KERNEL("BitwiseAnd", k_bitwise_and), KERNEL("BitwiseOr", k_bitwise_or),
    KERNEL("BitwiseXor", k_bitwise_xor), KERNEL("PRelu", k_prelu), KERNEL("Mod", k_mod),
    KERNEL("Sum", k_sum), KERNEL("Mean", k_mean), KERNEL("BitShift", k_bitshift),
};

int gs__cpu_register_elementwise(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

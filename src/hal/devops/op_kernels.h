/* op_kernels.h - the engine's ops as device kernels, one source for every
 * backend that compiles kernels: OpenCL C (the OpenCL plugin embeds this
 * file after kernels.cl) and CUDA C++ (kernels.cu includes it). The few
 * words the two languages spell differently come from the backend's
 * prelude:
 *   KERNEL         a kernel's return type and qualifiers
 *   GLOBAL         the address space of a buffer argument
 *   DEVFN          a helper function's qualifiers
 *   FOR_EACH(i, n) i over [0, n), striding over the whole launch
 *   half_t, LOAD_F16(p, i), STORE_F16(v, p, i)  float16 in memory; the
 *                  arithmetic is float32 (no fp16-precision extension needed)
 *   ulong, uint, ushort, uchar, and the float math functions' generic names (float and double).
 * Every buffer comes with an offset in elements, so that buffers
 * sub-allocated from one device block need no sub-buffer objects.
 * The numbers that pick an op or a type are op_codes.h's. */

/* The arithmetic type of the float kernels, `real`: float32, or float64
 * where the backend builds this source a second time with GS_REAL_F64
 * defined (its float64 program, for devices that have fp64). REAL_C(x) is
 * a constant of that type, written to double precision. */
#ifdef GS_REAL_F64
typedef double real;
#define REAL_C(x) x
#else
typedef float real;
#define REAL_C(x) x##f
#endif

/* ---- shapes ------------------------------------------------------------------------------ */

/* An output shape and, for up to three operands, the stride in elements of
 * each output dimension (0: broadcast along it) and where the walk starts. */
typedef struct walk {
  long rank;
  long dims[8];
  long strides[3][8];
  long base[3];
} walk;

/* The operands' offsets at output element i. */
DEVFN void walk_at(const walk *w, ulong i, long *o0, long *o1, long *o2) {
  long a = w->base[0], b = w->base[1], c = w->base[2];
  for (int d = (int)w->rank - 1; d >= 0; d--) {
    ulong dim = (ulong)w->dims[d];
    long at;
    if (d == 0) { /* the outermost dimension takes what is left: no division */
      at = (long)i;
    } else if (((i | dim) >> 32) == 0) { /* 32-bit division: 64-bit is emulated on GPUs */
      uint q = (uint)i / (uint)dim;
      at = (long)((uint)i - q * (uint)dim);
      i = q;
    } else {
      at = (long)(i % dim);
      i /= dim;
    }
    a += at * w->strides[0][d];
    b += at * w->strides[1][d];
    c += at * w->strides[2][d];
  }
  *o0 = a;
  *o1 = b;
  *o2 = c;
}

/* ---- failures ------------------------------------------------------------------------------ */

/* A kernel that can fail on its data (an index out of range, an integer
 * division by zero) records it in the stream's status words: what, the
 * value, its bound, and the launch's tag (which node). The first failure
 * claims the words (CLAIM: an atomic compare-and-swap of the code's low 32
 * bits from 0) and only it writes the rest. */

DEVFN void fail(GLOBAL long *status, ulong tag, long code, long value, long limit) {
  if (!CLAIM((GLOBAL int *)status, (int)code))
    return;
  status[1] = value;
  status[2] = limit;
  status[3] = (long)tag;
}

/* ---- elementwise ------------------------------------------------------------------------ */


DEVFN real softplus_f(real v) { return v > 30.0f ? v : log1p(exp(v)); }

DEVFN real unary_apply(int op, real v, float alpha, float beta) {
  switch (op) {
  case UNARY_RELU: return v > 0.0f ? v : 0.0f;
  case UNARY_SIGMOID: return 1.0f / (1.0f + exp(-v));
  case UNARY_TANH: return tanh(v);
  case UNARY_LEAKY: return v >= 0.0f ? v : alpha * v;
  case UNARY_GELU_ERF: return 0.5f * v * (1.0f + erf(v * REAL_C(0.70710678118654752)));
  case UNARY_GELU_TANH:
    return 0.5f * v * (1.0f + tanh(REAL_C(0.79788456080286536) * (v + REAL_C(0.044715) * v * v * v)));
  case UNARY_ERF: return erf(v);
  case UNARY_SQRT: return sqrt(v);
  case UNARY_EXP: return exp(v);
  case UNARY_LOG: return log(v);
  case UNARY_NEG: return -v;
  case UNARY_RECIPROCAL: return 1.0f / v;
  case UNARY_FLOOR: return floor(v);
  case UNARY_CEIL: return ceil(v);
  case UNARY_ROUND: return rint(v); /* halves to even */
  case UNARY_SIN: return sin(v);
  case UNARY_COS: return cos(v);
  case UNARY_SOFTPLUS: return softplus_f(v);
  case UNARY_SOFTSIGN: return v / (1.0f + fabs(v));
  case UNARY_HARDSWISH: return v * fmin((real)1, fmax((real)0, v / 6.0f + 0.5f));
  case UNARY_HARDSIGMOID: return fmin((real)1, fmax((real)0, alpha * v + beta));
  case UNARY_ELU: return v >= 0.0f ? v : alpha * (exp(v) - 1.0f);
  case UNARY_SELU: return beta * (v > 0.0f ? v : alpha * (exp(v) - 1.0f));
  case UNARY_MISH: return v * tanh(softplus_f(v));
  case UNARY_SIGN: return v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : v;
  case UNARY_TAN: return tan(v);
  case UNARY_ASIN: return asin(v);
  case UNARY_ACOS: return acos(v);
  case UNARY_ATAN: return atan(v);
  case UNARY_SINH: return sinh(v);
  case UNARY_COSH: return cosh(v);
  case UNARY_ASINH: return asinh(v);
  case UNARY_ACOSH: return acosh(v);
  case UNARY_ATANH: return atanh(v);
  case UNARY_CELU: return fmax((real)0, v) + fmin((real)0, alpha * (exp(v / alpha) - 1.0f));
  case UNARY_THRESHOLDED: return v > alpha ? v : 0.0f;
  case UNARY_SHRINK: return v < -alpha ? v + beta : v > alpha ? v - beta : 0.0f;
  case UNARY_DIVIDE: return v / alpha;
  case UNARY_SWISH: return v / (1.0f + exp(-alpha * v));
  default: return fabs(v);
  }
}

/* NaN in, NaN out for Min and Max, as the CPU's kernels do. */
DEVFN real binary_apply(int op, real a, real b) {
  switch (op) {
  case BINARY_ADD: return a + b;
  case BINARY_SUB: return a - b;
  case BINARY_MUL: return a * b;
  case BINARY_DIV: return a / b;
  case BINARY_POW: return pow(a, b);
  case BINARY_MIN: return a != a || b != b ? a + b : a < b ? a : b;
  case BINARY_MAX: return a != a || b != b ? a + b : a > b ? a : b;
  case BINARY_EQ: return a == b ? 1.0f : 0.0f;
  case BINARY_LT: return a < b ? 1.0f : 0.0f;
  case BINARY_GT: return a > b ? 1.0f : 0.0f;
  case BINARY_LE: return a <= b ? 1.0f : 0.0f;
  case BINARY_GE: return a >= b ? 1.0f : 0.0f;
  case BINARY_MOD:
  case BINARY_FMOD: return fmod(a, b); /* ONNX asks fmod=1 of floats */
  case BINARY_PRELU: return a < 0.0f ? a * b : a;
  default: return 0.0f; /* the bitwise ops take integers */
  }
}

/* Integers wrap as two's complement (computed unsigned); no division here
 * (divide_*). Bool and uint8 come here as 0/1 and 0..255. */
DEVFN long binary_apply_int(int op, long a, long b) {
  ulong ua = (ulong)a, ub = (ulong)b;
  switch (op) {
  case BINARY_ADD: return (long)(ua + ub);
  case BINARY_SUB: return (long)(ua - ub);
  case BINARY_MUL: return (long)(ua * ub);
  case BINARY_MIN: return a < b ? a : b;
  case BINARY_MAX: return a > b ? a : b;
  case BINARY_EQ: return a == b;
  case BINARY_LT: return a < b;
  case BINARY_GT: return a > b;
  case BINARY_LE: return a <= b;
  case BINARY_GE: return a >= b;
  case BINARY_PRELU: return a < 0 ? (long)(ua * ub) : a;
  case BINARY_AND: return a & b;
  case BINARY_OR: return a | b;
  default: return a ^ b;
  }
}

#define LOAD_F32(p, i) ((p)[i])
#define STORE_F32(v, p, i) ((p)[i] = (v))

/* The kernels below whose names end in _fp take their float type through
 * these: float32, or float16 (fp16 set), with the arithmetic in float32;
 * in the float64 program, float64 (fp16 unused). The branch is the same for
 * every item of a launch. */
DEVFN real ldf(GLOBAL const void *p, ulong i, int fp16) {
#ifdef GS_REAL_F64
  (void)fp16;
  return ((GLOBAL const double *)p)[i];
#else
  return fp16 ? LOAD_F16((GLOBAL const half_t *)p, i) : ((GLOBAL const float *)p)[i];
#endif
}

DEVFN void stf(GLOBAL void *p, ulong i, real v, int fp16) {
#ifdef GS_REAL_F64
  (void)fp16;
  ((GLOBAL double *)p)[i] = v;
#else
  if (fp16)
    STORE_F16(v, (GLOBAL half_t *)p, i);
  else
    ((GLOBAL float *)p)[i] = v;
#endif
}

/* y = a op b, or y (bool) = a compares to b, with a and b broadcast over y
 * (the walk's strides 0 and 1); APPLY computes in real or in long. */
#define DEFINE_BINARY(SUFFIX, T, LOAD, STORE, APPLY)                                             \
  KERNEL binary_##SUFFIX(GLOBAL const T *a, ulong ao, GLOBAL const T *b, ulong bo, GLOBAL T *y,  \
                         ulong yo, ulong n, int op, walk w) {                                    \
    FOR_EACH(i, n) {                                                                             \
      long ia, ib, unused;                                                                       \
      walk_at(&w, i, &ia, &ib, &unused);                                                         \
      STORE(APPLY(op, LOAD(a, ao + ia), LOAD(b, bo + ib)), y, yo + i);                           \
    }                                                                                            \
  }                                                                                              \
  KERNEL compare_##SUFFIX(GLOBAL const T *a, ulong ao, GLOBAL const T *b, ulong bo,              \
                          GLOBAL uchar *y, ulong yo, ulong n, int op, walk w) {                  \
    FOR_EACH(i, n) {                                                                             \
      long ia, ib, unused;                                                                       \
      walk_at(&w, i, &ia, &ib, &unused);                                                         \
      y[yo + i] = APPLY(op, LOAD(a, ao + ia), LOAD(b, bo + ib)) != 0;                            \
    }                                                                                            \
  }

#define DEFINE_FLOAT_ELEMENTWISE(SUFFIX, T, LOAD, STORE)                                        \
  KERNEL unary_##SUFFIX(GLOBAL const T *x, ulong xo, GLOBAL T *y, ulong yo, ulong n, int op,     \
                        float alpha, float beta) {                                               \
    FOR_EACH(i, n) { STORE(unary_apply(op, LOAD(x, xo + i), alpha, beta), y, yo + i); }          \
  }                                                                                              \
  /* Clip: the bounds are one-element tensors (absent: has_lo, has_hi 0); NaN stays NaN. */    \
  KERNEL clip_##SUFFIX(GLOBAL const T *x, ulong xo, GLOBAL const T *lo, ulong loo, int has_lo,   \
                       GLOBAL const T *hi, ulong hio, int has_hi, GLOBAL T *y, ulong yo,         \
                       ulong n) {                                                                \
    real l = has_lo ? LOAD(lo, loo) : -INFINITY, h = has_hi ? LOAD(hi, hio) : INFINITY;         \
    FOR_EACH(i, n) {                                                                             \
      real v = LOAD(x, xo + i);                                                                 \
      v = v < l ? l : v;                                                                         \
      STORE(v > h ? h : v, y, yo + i);                                                           \
    }                                                                                            \
  }                                                                                              \
  DEFINE_BINARY(SUFFIX, T, LOAD, STORE, binary_apply)

/* In the float64 program the _f32 kernels are float64's (real is double). */
DEFINE_FLOAT_ELEMENTWISE(f32, real, LOAD_F32, STORE_F32)
DEFINE_FLOAT_ELEMENTWISE(f16, half_t, LOAD_F16, STORE_F16)

/* Relu, Neg, Abs and BitwiseNot on integers, wrapping as two's complement. */
DEVFN long unary_apply_int(int op, long v) {
  switch (op) {
  case UNARY_RELU: return v > 0 ? v : 0;
  case UNARY_NEG: return (long)(0 - (ulong)v);
  case UNARY_BITNOT: return ~v;
  default: return v < 0 ? (long)(0 - (ulong)v) : v;
  }
}

#define LOAD_INT(p, i) ((long)(p)[i])
#define STORE_INT(v, p, i) ((p)[i] = (v)) /* truncates to T: wraps */

#define DEFINE_INT_ELEMENTWISE(SUFFIX, T)                                                        \
  KERNEL unary_##SUFFIX(GLOBAL const T *x, ulong xo, GLOBAL T *y, ulong yo, ulong n, int op) {   \
    FOR_EACH(i, n) { y[yo + i] = (T)unary_apply_int(op, (long)x[xo + i]); }                      \
  }                                                                                              \
  DEFINE_BINARY(SUFFIX, T, LOAD_INT, STORE_INT, binary_apply_int)

/* Integer u / v (op BINARY_DIV) truncates, as C's; u mod v takes the
 * dividend's sign (BINARY_FMOD, C's %) or the divisor's (BINARY_MOD,
 * Python's). By zero they fail. */
DEVFN long divide_int(int op, long u, long v) {
  if (op == BINARY_DIV)
    return v == -1 ? (long)(0 - (ulong)u) : u / v;
  long r = v == -1 ? 0 : u % v;
  return op == BINARY_MOD && r != 0 && (r < 0) != (v < 0) ? r + v : r;
}

#define DEFINE_INT_DIVIDE(SUFFIX, T)                                                             \
  KERNEL divide_##SUFFIX(GLOBAL const T *a, ulong ao, GLOBAL const T *b, ulong bo, GLOBAL T *y,  \
                         ulong yo, ulong n, int op, walk w, GLOBAL long *status, ulong tag) {    \
    FOR_EACH(i, n) {                                                                             \
      long ia, ib, unused;                                                                       \
      walk_at(&w, i, &ia, &ib, &unused);                                                         \
      long u = (long)a[ao + ia], v = (long)b[bo + ib];                                           \
      if (v == 0) {                                                                              \
        fail(status, tag, op == BINARY_DIV ? FAIL_DIVIDE_BY_ZERO : FAIL_MODULO_BY_ZERO, u, 0); \
        y[yo + i] = 0;                                                                           \
      } else {                                                                                   \
        y[yo + i] = (T)divide_int(op, u, v);                                                     \
      }                                                                                          \
    }                                                                                            \
  }

DEFINE_INT_DIVIDE(i64, long)
DEFINE_INT_DIVIDE(i32, int)

DEFINE_INT_ELEMENTWISE(i64, long)
DEFINE_INT_ELEMENTWISE(i32, int)
/* Bool and uint8: And, Or, Xor (bitwise), and Equal on bool. */
DEFINE_BINARY(u8, uchar, LOAD_INT, STORE_INT, binary_apply_int)

/* IsNaN (inf 0) and IsInf (inf 1, of the signs asked). */
KERNEL classify_fp(GLOBAL const void *x, ulong xo, GLOBAL uchar *y, ulong yo, ulong n, int inf,
                   int pos, int neg, int fp16) {
  FOR_EACH(i, n) {
    real v = ldf(x, xo + i, fp16);
    y[yo + i] = inf ? (pos && v == INFINITY) || (neg && v == -INFINITY) : v != v;
  }
}

KERNEL not_b8(GLOBAL const uchar *x, ulong xo, GLOBAL uchar *y, ulong yo, ulong n) {
  FOR_EACH(i, n) { y[yo + i] = !x[xo + i]; }
}

/* ---- Cast --------------------------------------------------------------------------------- */


DEVFN int type_is_int(int t) { return t >= TYPE_I64 && t <= TYPE_BOOL; }

DEVFN real load_float(GLOBAL const uchar *p, int t, ulong i) {
  switch (t) {
  case TYPE_F32: return ((GLOBAL const float *)p)[i];
  case TYPE_F16: return LOAD_F16((GLOBAL const half_t *)p, i);
#ifdef GS_REAL_F64
  case TYPE_F64: return ((GLOBAL const double *)p)[i];
#endif
  case TYPE_I64: return (real)((GLOBAL const long *)p)[i];
  case TYPE_I32: return (real)((GLOBAL const int *)p)[i];
  case TYPE_I16: return (real)((GLOBAL const short *)p)[i];
  case TYPE_I8: return (real)((GLOBAL const schar *)p)[i];
  default: return (real)p[i];
  }
}

DEVFN long load_int(GLOBAL const uchar *p, int t, ulong i) {
  switch (t) {
  case TYPE_I64: return ((GLOBAL const long *)p)[i];
  case TYPE_I32: return ((GLOBAL const int *)p)[i];
  case TYPE_I16: return ((GLOBAL const short *)p)[i];
  case TYPE_I8: return ((GLOBAL const schar *)p)[i];
  default: return p[i];
  }
}

/* A real to an integer of [lo, hi]: NaN is 0, the rest saturates. */
DEVFN long saturate(real v, real lo, real hi, long ilo, long ihi) {
  if (v != v)
    return 0;
  if (v <= lo)
    return ilo;
  if (v >= hi)
    return ihi;
  return (long)v;
}

DEVFN void store_float(GLOBAL uchar *p, int t, ulong i, real v) {
  switch (t) {
  case TYPE_F32: ((GLOBAL float *)p)[i] = v; break;
  case TYPE_F16: STORE_F16(v, (GLOBAL half_t *)p, i); break;
#ifdef GS_REAL_F64
  case TYPE_F64: ((GLOBAL double *)p)[i] = v; break;
#endif
  case TYPE_I64:
    ((GLOBAL long *)p)[i] = saturate(v, -9.2233720e18f, 9.2233720e18f, (long)(-9223372036854775807L - 1),
                                     9223372036854775807L);
    break;
  case TYPE_I32:
    ((GLOBAL int *)p)[i] = (int)saturate(v, -2147483648.0f, 2147483647.0f, -2147483647L - 1, 2147483647L);
    break;
  case TYPE_I16: ((GLOBAL short *)p)[i] = (short)saturate(v, -32768.0f, 32767.0f, -32768, 32767); break;
  case TYPE_I8: ((GLOBAL schar *)p)[i] = (schar)saturate(v, -128.0f, 127.0f, -128, 127); break;
  case TYPE_U8: p[i] = (uchar)saturate(v, 0.0f, 255.0f, 0, 255); break;
  default: p[i] = v != 0.0f; break;
  }
}

/* Integers to integers wrap (two's complement), as the CPU's Cast does. */
DEVFN void store_int(GLOBAL uchar *p, int t, ulong i, long v) {
  switch (t) {
  case TYPE_I64: ((GLOBAL long *)p)[i] = v; break;
  case TYPE_I32: ((GLOBAL int *)p)[i] = (int)(uint)(ulong)v; break;
  case TYPE_I16: ((GLOBAL short *)p)[i] = (short)(ushort)(ulong)v; break;
  case TYPE_I8: ((GLOBAL schar *)p)[i] = (schar)(uchar)(ulong)v; break;
  case TYPE_U8: p[i] = (uchar)(ulong)v; break;
  default: p[i] = v != 0; break;
  }
}

/* x and y are byte pointers with offsets in elements of their own types. */
KERNEL cast_any(GLOBAL const uchar *x, ulong xo, int from, GLOBAL uchar *y, ulong yo, int to,
                ulong n, ulong from_size, ulong to_size) {
  GLOBAL const uchar *xs = x + xo * from_size;
  GLOBAL uchar *ys = y + yo * to_size;
  FOR_EACH(i, n) {
    if (type_is_int(from) && type_is_int(to))
      store_int(ys, to, i, load_int(xs, from, i));
    else
      store_float(ys, to, i, load_float(xs, from, i));
  }
}

/* ---- data movement, by element size ---------------------------------------------------------- */

/* Pad's geometry: for each output dimension, the input's length and where
 * it starts in the output (negative: cropped). */
typedef struct pad_geom {
  long rank;
  long out_dims[8];
  long in_dims[8];
  long begin[8];
  long mode; /* 0 constant, 1 reflect, 2 edge, as gs_pad_mode */
} pad_geom;

/* The input offset for output element i, or -1 for the constant. */
DEVFN long pad_source(const pad_geom *p, ulong i) {
  long src = 0, stride = 1;
  for (int d = (int)p->rank - 1; d >= 0; d--) {
    long at = (long)(i % (ulong)p->out_dims[d]) - p->begin[d], len = p->in_dims[d];
    i /= (ulong)p->out_dims[d];
    if (at < 0 || at >= len) {
      if (p->mode == 0 || len == 0)
        return -1;
      if (p->mode == 2) {
        at = at < 0 ? 0 : len - 1;
      } else if (len == 1) {
        at = 0;
      } else { /* reflect, without repeating the edge: period 2 (len - 1) */
        long period = 2 * (len - 1), m = at % period;
        if (m < 0)
          m += period;
        at = m < len ? m : period - m;
      }
    }
    src += at * stride;
    stride *= len;
  }
  return src;
}

#define DEFINE_MOVES(SUFFIX, T)                                                                  \
  /* y at the output's walk (strides[1]) from x (strides[0]). */                                \
  KERNEL copy_strided_##SUFFIX(GLOBAL const T *x, ulong xo, GLOBAL T *y, ulong yo, ulong n,      \
                               walk w) {                                                         \
    FOR_EACH(i, n) {                                                                             \
      long ix, iy, unused;                                                                       \
      walk_at(&w, i, &ix, &iy, &unused);                                                         \
      y[(long)yo + iy] = x[(long)xo + ix];                                                       \
    }                                                                                            \
  }                                                                                              \
  KERNEL fill_##SUFFIX(GLOBAL T *y, ulong yo, ulong at, ulong n, ulong bits) {                   \
    FOR_EACH(i, n) { y[yo + at + i] = (T)bits; }                                                 \
  }                                                                                              \
  KERNEL pad_##SUFFIX(GLOBAL const T *x, ulong xo, GLOBAL T *y, ulong yo, ulong n, pad_geom p,   \
                      ulong bits) {                                                              \
    FOR_EACH(i, n) {                                                                             \
      long src = pad_source(&p, i);                                                              \
      y[yo + i] = src < 0 ? (T)bits : x[(long)xo + src];                                         \
    }                                                                                            \
  }                                                                                              \
  /* Trilu: matrices of rows x cols, kept on and above (upper) or on and       \
   * below diagonal k, zero elsewhere. */                                                      \
  KERNEL trilu_##SUFFIX(GLOBAL const T *x, ulong xo, GLOBAL T *y, ulong yo, ulong n, ulong rows, \
                        ulong cols, long k, int upper) {                                         \
    FOR_EACH(i, n) {                                                                             \
      long col = (long)(i % cols), row = (long)((i / cols) % rows);                              \
      bool keep = upper ? col - row >= k : col - row <= k;                                       \
      y[yo + i] = keep ? x[xo + i] : (T)0;                                                       \
    }                                                                                            \
  }                                                                                              \
  /* Where: cond, a and b broadcast (strides 0, 1, 2). */                                       \
  KERNEL where_##SUFFIX(GLOBAL const uchar *cond, ulong co, GLOBAL const T *a, ulong ao,         \
                        GLOBAL const T *b, ulong bo, GLOBAL T *y, ulong yo, ulong n, walk w) {   \
    FOR_EACH(i, n) {                                                                             \
      long ic, ia, ib;                                                                           \
      walk_at(&w, i, &ic, &ia, &ib);                                                             \
      y[yo + i] = cond[(long)co + ic] ? a[(long)ao + ia] : b[(long)bo + ib];                     \
    }                                                                                            \
  }

/* Gather along an axis: x as [outer, dim, inner], indices (int32 or int64,
 * negative from the end) n_idx of them; y as [outer, n_idx, inner]. */
#define DEFINE_GATHER(SUFFIX, T)                                                                 \
  KERNEL gather_##SUFFIX(GLOBAL const T *x, ulong xo, GLOBAL const int *idx, ulong io,           \
                         int idx64, GLOBAL T *y, ulong yo, ulong n, ulong n_idx, long dim,       \
                         ulong inner, GLOBAL long *status, ulong tag) {                          \
    FOR_EACH(i, n) {                                                                             \
      ulong r = i % inner, j = (i / inner) % n_idx, o = i / (inner * n_idx);                     \
      long ix = idx64 ? ((GLOBAL const long *)idx)[io + j] : (long)idx[io + j];                  \
      if (ix < -dim || ix >= dim) {                                                              \
        fail(status, tag, FAIL_INDEX_RANGE, ix, dim);                                            \
        y[yo + i] = 0;                                                                           \
      } else {                                                                                   \
        y[yo + i] = x[xo + (o * (ulong)dim + (ulong)(ix < 0 ? ix + dim : ix)) * inner + r];      \
      }                                                                                          \
    }                                                                                            \
  }

/* GatherElements and ScatterElements: the index tensor's dims, the data's
 * stride along each (0 along the axis), and the axis's stride and length. */
typedef struct elements_geom {
  long rank;
  long dims[8];
  long x_strides[8];
  long axis_stride, axis_len;
} elements_geom;

/* GatherND and ScatterND: index tuples of q values, `batches` x `tuples`
 * of them, each picking a slice of `slice` elements; the indexed dims'
 * lengths and strides; the data's stride between batches. */
typedef struct nd_geom {
  long q, batches, tuples, slice, batch_stride;
  long dims[8];
  long strides[8];
} nd_geom;

/* An index of an int32 or int64 tensor. */
DEVFN long index_at(GLOBAL const int *idx, ulong at, int idx64) {
  return idx64 ? ((GLOBAL const long *)idx)[at] : (long)idx[at];
}

/* The data offset of element i of the index tensor, without the axis. */
DEVFN long elements_base(const elements_geom *g, ulong i) {
  long base = 0;
  for (int d = (int)g->rank - 1; d >= 0; d--) {
    base += (long)(i % (ulong)g->dims[d]) * g->x_strides[d];
    i /= (ulong)g->dims[d];
  }
  return base;
}

/* The data offset of tuple t (batch b), or -1 with the failure recorded. */
DEVFN long nd_offset(const nd_geom *g, GLOBAL const long *idx, ulong io, ulong b, ulong t,
                     GLOBAL long *status, ulong tag) {
  long off = (long)b * g->batch_stride;
  GLOBAL const long *tuple = idx + io + (b * (ulong)g->tuples + t) * (ulong)g->q;
  for (long j = 0; j < g->q; j++) {
    long dim = g->dims[j], ix = tuple[j];
    if (ix < -dim || ix >= dim) {
      fail(status, tag, FAIL_INDEX_RANGE, ix, dim);
      return -1;
    }
    off += (ix < 0 ? ix + dim : ix) * g->strides[j];
  }
  return off;
}

#define DEFINE_INDEX_MOVES(SUFFIX, T)                                                            \
  KERNEL gather_elements_##SUFFIX(GLOBAL const T *x, ulong xo, GLOBAL const int *idx, ulong io,   \
                                  int idx64, GLOBAL T *y, ulong yo, ulong n, elements_geom g,    \
                                  GLOBAL long *status, ulong tag) {                              \
    FOR_EACH(i, n) {                                                                             \
      long ix = index_at(idx, io + i, idx64), len = g.axis_len;                                  \
      if (ix < -len || ix >= len) {                                                              \
        fail(status, tag, FAIL_INDEX_RANGE, ix, len);                                            \
        y[yo + i] = 0;                                                                           \
      } else {                                                                                   \
        y[yo + i] = x[(long)xo + elements_base(&g, i) + (ix < 0 ? ix + len : ix) * g.axis_stride]; \
      }                                                                                          \
    }                                                                                            \
  }                                                                                              \
  /* y as [batches, tuples, slice]. */                                                           \
  KERNEL gather_nd_##SUFFIX(GLOBAL const T *x, ulong xo, GLOBAL const long *idx, ulong io,       \
                            GLOBAL T *y, ulong yo, ulong n, nd_geom g, GLOBAL long *status,      \
                            ulong tag) {                                                         \
    FOR_EACH(i, n) {                                                                             \
      ulong s = i % (ulong)g.slice, rest = i / (ulong)g.slice;                                   \
      long off = nd_offset(&g, idx, io, rest / (ulong)g.tuples, rest % (ulong)g.tuples, status,  \
                           tag);                                                                 \
      y[yo + i] = off < 0 ? (T)0 : x[(long)xo + off + (long)s];                                  \
    }                                                                                            \
  }                                                                                              \
  /* y as [outer, depth, inner]: values[1] where the index (int32 or int64,                    \
   * negative from the end) is the position along depth, else values[0]. */                    \
  KERNEL one_hot_##SUFFIX(GLOBAL const int *idx, ulong io, int idx64, GLOBAL const T *values,    \
                          ulong vo, GLOBAL T *y, ulong yo, ulong n, long depth, ulong inner) {   \
    FOR_EACH(i, n) {                                                                             \
      ulong in = i % inner, rest = i / inner;                                                    \
      long j = (long)(rest % (ulong)depth), o = (long)(rest / (ulong)depth);                     \
      long ix = index_at(idx, io + (ulong)o * inner + in, idx64);                                \
      if (ix < 0)                                                                                \
        ix += depth;                                                                             \
      y[yo + i] = values[vo + (ix == j ? 1 : 0)];                                                \
    }                                                                                            \
  }

DEFINE_INDEX_MOVES(b8, uchar)
DEFINE_INDEX_MOVES(b16, ushort)
DEFINE_INDEX_MOVES(b32, uint)
DEFINE_INDEX_MOVES(b64, ulong)

/* ---- scatters ---------------------------------------------------------------------------- */

/* y[at] = u, or y[at] combined with u by the reduction (gs_scatter_reduction:
 * 1 add, 2 mul, 3 max, 4 min), of element type t (Cast's TYPE_ codes). */
DEVFN void scatter_store(GLOBAL uchar *y, ulong at, GLOBAL const uchar *u, ulong ui, int t,
                         int reduction) {
  if (type_is_int(t)) {
    long o = load_int(y, t, at), v = load_int(u, t, ui);
    long r = reduction == 0   ? v
             : reduction == 1 ? (long)((ulong)o + (ulong)v)
             : reduction == 2 ? (long)((ulong)o * (ulong)v)
             : reduction == 3 ? (o > v ? o : v)
                              : (o < v ? o : v);
    store_int(y, t, at, r);
  } else {
    real o = load_float(y, t, at), v = load_float(u, t, ui);
    real r = reduction == 0   ? v
              : reduction == 1 ? o + v
              : reduction == 2 ? o * v
              : reduction == 3 ? (o > v ? o : v)
                               : (o < v ? o : v);
    store_float(y, t, at, r);
  }
}

/* ScatterElements into y (already a copy of the data): update i goes where
 * index i points along the axis. Without a reduction every update is an
 * item; with one, a single item applies them in order, as the reference
 * does (two updates of one element would race). */
KERNEL scatter_elements_any(GLOBAL const int *idx, ulong io, int idx64, GLOBAL const uchar *u,
                            ulong uo, GLOBAL uchar *y, ulong yo, int t, ulong size, ulong n,
                            int reduction, elements_geom g, GLOBAL long *status, ulong tag) {
  GLOBAL const uchar *us = u + uo * size;
  GLOBAL uchar *ys = y + yo * size;
  ulong items = reduction ? 1 : n;
  FOR_EACH(item, items) {
    for (ulong i = reduction ? 0 : item; i < (reduction ? n : item + 1); i++) {
      long ix = index_at(idx, io + i, idx64), len = g.axis_len;
      if (ix < -len || ix >= len) {
        fail(status, tag, FAIL_INDEX_RANGE, ix, len);
        continue;
      }
      long at = elements_base(&g, i) + (ix < 0 ? ix + len : ix) * g.axis_stride;
      scatter_store(ys, (ulong)at, us, i, t, reduction);
    }
  }
}

/* ScatterND into y (a copy of the data): tuple j's slice of updates to
 * where it points; an item per update element, or one in order with a
 * reduction. */
KERNEL scatter_nd_any(GLOBAL const long *idx, ulong io, GLOBAL const uchar *u, ulong uo,
                      GLOBAL uchar *y, ulong yo, int t, ulong size, ulong n, int reduction,
                      nd_geom g, GLOBAL long *status, ulong tag) {
  GLOBAL const uchar *us = u + uo * size;
  GLOBAL uchar *ys = y + yo * size;
  ulong items = reduction ? 1 : n;
  FOR_EACH(item, items) {
    for (ulong i = reduction ? 0 : item; i < (reduction ? n : item + 1); i++) {
      long off = nd_offset(&g, idx, io, 0, i / (ulong)g.slice, status, tag);
      if (off >= 0)
        scatter_store(ys, (ulong)off + i % (ulong)g.slice, us, i, t, reduction);
    }
  }
}

/* Range in integers: start + i delta, wrapping. */
#define DEFINE_INT_SEQUENCES(SUFFIX, T)                                                          \
  KERNEL range_##SUFFIX(GLOBAL T *y, ulong yo, ulong n, long start, long delta) {                \
    FOR_EACH(i, n) { y[yo + i] = (T)(long)((ulong)start + i * (ulong)delta); }                   \
  }                                                                                              \
  /* CumSum along one axis of x as [outer, len, inner], wrapping. */                             \
  KERNEL cumsum_##SUFFIX(GLOBAL const T *x, ulong xo, GLOBAL T *y, ulong yo, ulong outer,        \
                         ulong len, ulong inner, int exclusive, int reverse) {                   \
    FOR_EACH(id, outer * inner) {                                                                \
      ulong o = id / inner, in = id % inner;                                                     \
      ulong acc = 0;                                                                             \
      for (ulong j = 0; j < len; j++) {                                                          \
        ulong at = (o * len + (reverse ? len - 1 - j : j)) * inner + in;                         \
        ulong v = (ulong)(long)x[xo + at];                                                       \
        if (!exclusive)                                                                          \
          acc += v;                                                                              \
        y[yo + at] = (T)(long)acc;                                                               \
        if (exclusive)                                                                           \
          acc += v;                                                                              \
      }                                                                                          \
    }                                                                                            \
  }

DEFINE_INT_SEQUENCES(i64, long)
DEFINE_INT_SEQUENCES(i32, int)

/* Range in float32, accumulated in order (start, start + delta, ...) as the
 * ONNX reference and the CPU do: one item. */
KERNEL range_f32(GLOBAL float *y, ulong yo, ulong n, float start, float delta) {
  FOR_EACH(item, 1) {
    float v = start;
    for (ulong i = 0; i < n; i++) {
      y[yo + i] = v;
      v += delta;
    }
  }
}

DEFINE_GATHER(b8, uchar)
DEFINE_GATHER(b16, ushort)
DEFINE_GATHER(b32, uint)
DEFINE_GATHER(b64, ulong)

DEFINE_MOVES(b8, uchar)
DEFINE_MOVES(b16, ushort)
DEFINE_MOVES(b32, uint)
DEFINE_MOVES(b64, ulong)

/* ---- reductions --------------------------------------------------------------------------- */


/* The output's dimensions with the input's stride along each, and the
 * reduced dimensions with theirs. */
typedef struct reduce_geom {
  long out_rank;
  long out_dims[8];
  long out_strides[8];
  long red_rank;
  long red_dims[8];
  long red_strides[8];
  long count; /* elements reduced into each output */
} reduce_geom;

/* The Reduce* family as the CPU's k_reduce.c: what an accumulator starts
 * at (an empty reduction's result, after reduce_finish), what each element
 * adds, how two partial accumulators combine, and the result.
 * LogSumExp subtracts the largest element (`shift`) before exp, so that
 * float32 does not overflow where the CPU's double would not. */
DEVFN real reduce_start(int op) {
  return op == REDUCE_MAX ? -INFINITY : op == REDUCE_MIN ? INFINITY : op == REDUCE_PROD ? 1.0f : 0.0f;
}

DEVFN real reduce_step(int op, real acc, real v, real shift) {
  switch (op) {
  case REDUCE_MAX: return v > acc || v != v ? v : acc;
  case REDUCE_MIN: return v < acc || v != v ? v : acc;
  case REDUCE_PROD: return acc * v;
  case REDUCE_L1: return acc + fabs(v);
  case REDUCE_L2:
  case REDUCE_SUMSQUARE: return acc + v * v;
  case REDUCE_LOGSUMEXP: return acc + exp(v - shift);
  default: return acc + v;
  }
}

DEVFN real reduce_combine(int op, real a, real b) {
  switch (op) {
  case REDUCE_MAX: return a != a || b != b ? a + b : fmax(a, b);
  case REDUCE_MIN: return a != a || b != b ? a + b : fmin(a, b);
  case REDUCE_PROD: return a * b;
  default: return a + b;
  }
}

DEVFN real reduce_finish(int op, real acc, long count, real shift) {
  switch (op) {
  case REDUCE_MEAN: return acc / (real)count;
  case REDUCE_L2: return sqrt(acc);
  case REDUCE_LOGSUM: return log(acc);
  case REDUCE_LOGSUMEXP: return log(acc) + shift;
  default: return acc;
  }
}

/* The ops whose accumulator is a sum. */
DEVFN int reduce_adds(int op) {
  return op != REDUCE_MAX && op != REDUCE_MIN && op != REDUCE_PROD;
}

/* acc + term, Neumaier's way: what the addition rounds off goes into *comp,
 * added back at the end. A float32 sum of n terms then errs by about one
 * rounding instead of up to n (the CPU sums in double). */
DEVFN real sum_step(real acc, real term, real *comp) {
  real t = acc + term;
  if (isfinite(t)) /* past an infinity, inf - inf would make the correction NaN */
    *comp += fabs(acc) >= fabs(term) ? (acc - t) + term : (term - t) + acc;
  return t;
}

/* CumSum in the float kernels' type (float16 in float32), each running
 * sum compensated (sum_step). */
KERNEL cumsum_fp(GLOBAL const void *x, ulong xo, GLOBAL void *y, ulong yo, ulong outer,
                 ulong len, ulong inner, int exclusive, int reverse, int fp16) {
  FOR_EACH(id, outer * inner) {
    ulong o = id / inner, in = id % inner;
    real acc = 0.0f, comp = 0.0f;
    for (ulong j = 0; j < len; j++) {
      ulong at = (o * len + (reverse ? len - 1 - j : j)) * inner + in;
      real v = ldf(x, xo + at, fp16);
      if (!exclusive)
        acc = sum_step(acc, v, &comp);
      stf(y, yo + at, isfinite(acc) ? acc + comp : acc, fp16);
      if (exclusive)
        acc = sum_step(acc, v, &comp);
    }
  }
}

/* One element into a reduction's accumulator, compensated where it adds. */
DEVFN real reduce_add(int op, real acc, real v, real shift, real *comp) {
  return reduce_adds(op) ? sum_step(acc, reduce_step(op, 0.0f, v, shift), comp)
                         : reduce_step(op, acc, v, shift);
}

/* LogSumExp's shift from the largest element: 0 where that is infinite
 * (or there is none), which keeps inf - inf out of exp. */
DEVFN real lse_shift(real largest) {
  return largest == largest && largest != INFINITY && largest != -INFINITY ? largest : 0.0f;
}

/* The offset of the r-th reduced element from an output's base. */
DEVFN long reduced_offset(const reduce_geom *g, long r) {
  long off = 0;
  for (int d = (int)g->red_rank - 1; d >= 0; d--) {
    off += (r % g->red_dims[d]) * g->red_strides[d];
    r /= g->red_dims[d];
  }
  return off;
}

KERNEL reduce_fp(GLOBAL const void *x, ulong xo, GLOBAL void *y, ulong yo, ulong n, int op,
                 reduce_geom g, int fp16) {
  FOR_EACH(i, n) {
    ulong rest = i;
    long base = (long)xo;
    for (int d = (int)g.out_rank - 1; d >= 0; d--) {
      base += (long)(rest % (ulong)g.out_dims[d]) * g.out_strides[d];
      rest /= (ulong)g.out_dims[d];
    }
    real shift = 0.0f;
    if (op == REDUCE_LOGSUMEXP) {
      real mx = -INFINITY;
      for (long r = 0; r < g.count; r++)
        mx = reduce_step(REDUCE_MAX, mx, ldf(x, (ulong)(base + reduced_offset(&g, r)), fp16), 0.0f);
      shift = lse_shift(mx);
    }
    real acc = reduce_start(op), comp = 0.0f;
    for (long r = 0; r < g.count; r++)
      acc = reduce_add(op, acc, ldf(x, (ulong)(base + reduced_offset(&g, r)), fp16), shift, &comp);
    if (reduce_adds(op) && isfinite(acc))
      acc += comp;
    stf(y, yo + i, reduce_finish(op, acc, g.count, shift), fp16);
  }
}

/* The integer reductions (Sum, Mean, Max, Min, Prod, L1, SumSquare): sums
 * and products wrap, in 64 bits, before the store to T truncates them, as
 * the CPU's do; a mean divides as C does. */
DEVFN long reduce_start_int(int op) {
  return op == REDUCE_MAX   ? (long)(-9223372036854775807L - 1)
         : op == REDUCE_MIN ? 9223372036854775807L
         : op == REDUCE_PROD ? 1
                             : 0;
}

DEVFN long reduce_step_int(int op, long acc, long v) {
  ulong ua = (ulong)acc, uv = (ulong)v;
  switch (op) {
  case REDUCE_MAX: return v > acc ? v : acc;
  case REDUCE_MIN: return v < acc ? v : acc;
  case REDUCE_PROD: return (long)(ua * uv);
  case REDUCE_L1: return (long)(ua + (v < 0 ? 0 - uv : uv));
  case REDUCE_SUMSQUARE: return (long)(ua + uv * uv);
  default: return (long)(ua + uv);
  }
}

#define DEFINE_INT_REDUCE(SUFFIX, T)                                                             \
  KERNEL reduce_##SUFFIX(GLOBAL const T *x, ulong xo, GLOBAL T *y, ulong yo, ulong n, int op,    \
                         reduce_geom g) {                                                        \
    FOR_EACH(i, n) {                                                                             \
      ulong rest = i;                                                                            \
      long base = (long)xo;                                                                      \
      for (int d = (int)g.out_rank - 1; d >= 0; d--) {                                           \
        base += (long)(rest % (ulong)g.out_dims[d]) * g.out_strides[d];                          \
        rest /= (ulong)g.out_dims[d];                                                            \
      }                                                                                          \
      long acc = reduce_start_int(op);                                                           \
      for (long r = 0; r < g.count; r++)                                                         \
        acc = reduce_step_int(op, acc, (long)x[base + reduced_offset(&g, r)]);                   \
      y[yo + i] = (T)(op == REDUCE_MEAN && g.count ? acc / g.count : acc);                       \
    }                                                                                            \
  }

DEFINE_INT_REDUCE(i64, long)
DEFINE_INT_REDUCE(i32, int)

/* ArgMax (smallest 0) or ArgMin along one axis: x as [outer, len, inner];
 * int64 indices; the first NaN wins. */
KERNEL argmax_fp(GLOBAL const void *x, ulong xo, GLOBAL long *y, ulong yo, ulong outer,
                 ulong len, ulong inner, int smallest, int select_last, int fp16) {
  FOR_EACH(id, outer * inner) {
    ulong o = id / inner, in = id % inner, at = xo + o * len * inner + in;
    real bv = ldf(x, at, fp16);
    long best = 0;
    for (ulong i = 1; i < len; i++) {
      real v = ldf(x, at + i * inner, fp16);
      if ((smallest ? v < bv : v > bv) || (select_last && v == bv) || (v != v && bv == bv)) {
        bv = v;
        best = (long)i;
      }
    }
    y[yo + id] = best;
  }
}

/* TopK along one axis: x as [outer, len, inner], k values (and their int64
 * indices) in order, ties lower index first. Each pick is the best element
 * ranked after the previous pick: O(k len) per row, for the small k of
 * inference. */
/* Whether (v, i) comes before (w, j) in TopK's order: by value, NaN the
 * largest of all (first when largest, last when smallest), ties by index. */
DEVFN bool ranks_before(real v, long i, real w, long j, int largest) {
  bool v_nan = v != v, w_nan = w != w;
  if (v_nan || w_nan)
    return v_nan && w_nan ? i < j : largest ? v_nan : w_nan;
  if (v != w)
    return largest ? v > w : v < w;
  return i < j;
}

KERNEL topk_fp(GLOBAL const void *x, ulong xo, GLOBAL void *vals, ulong vo, GLOBAL long *idx,
               ulong io, int has_idx, ulong outer, ulong len, ulong inner, ulong k, int largest,
               int fp16) {
  FOR_EACH(id, outer * inner) {
    ulong o = id / inner, in = id % inner, at = xo + o * len * inner + in;
    real pv = 0.0f;
    long pi = -1;
    for (ulong j = 0; j < k; j++) {
      long best = -1;
      real bv = 0.0f;
      for (ulong i = 0; i < len; i++) {
        real v = ldf(x, at + i * inner, fp16);
        if (pi >= 0 && !ranks_before(pv, pi, v, (long)i, largest))
          continue; /* not after the previous pick */
        if (best < 0 || ranks_before(v, (long)i, bv, best, largest)) {
          best = (long)i;
          bv = v;
        }
      }
      ulong out = o * k * inner + j * inner + in;
      stf(vals, vo + out, bv, fp16);
      if (has_idx)
        idx[io + out] = best;
      pv = bv;
      pi = best;
    }
  }
}

/* ---- normalisation and Softmax ----------------------------------------------------------------- */

/* Softmax (or LogSoftmax) along one axis: x as [outer, len, inner]. */
KERNEL softmax_fp(GLOBAL const void *x, ulong xo, GLOBAL void *y, ulong yo, ulong outer,
                  ulong len, ulong inner, int log_out, int fp16) {
  FOR_EACH(id, outer * inner) {
    ulong o = id / inner, in = id % inner;
    ulong xs = xo + o * len * inner + in, ys = yo + o * len * inner + in;
    real mx = -INFINITY;
    for (ulong i = 0; i < len; i++)
      mx = fmax(mx, ldf(x, xs + i * inner, fp16));
    real sum = 0.0f;
    for (ulong i = 0; i < len; i++)
      sum += exp(ldf(x, xs + i * inner, fp16) - mx);
    real ls = log(sum), inv = 1.0f / sum;
    for (ulong i = 0; i < len; i++) {
      real v = ldf(x, xs + i * inner, fp16) - mx;
      stf(y, ys + i * inner, log_out ? v - ls : exp(v) * inv, fp16);
    }
  }
}

/* A value from every item of the work-group combined as reduction `op`
 * combines partial results (reduce_combine), for every item; buf: GROUP_SIZE floats of local
 * memory. All items call it. */
DEVFN real group_reduce(LOCAL_PTR real *buf, real v, int op) {
  ulong lid = LOCAL_ID;
  buf[lid] = v;
  BARRIER();
  for (ulong half_n = GROUP_SIZE / 2; half_n > 0; half_n /= 2) {
    if (lid < half_n) {
      real a = buf[lid], b = buf[lid + half_n];
      buf[lid] = reduce_combine(op, a, b);
    }
    BARRIER();
  }
  real r = buf[0];
  BARRIER(); /* everyone has read it before buf is written again */
  return r;
}

/* Softmax (or LogSoftmax) over rows of `len` contiguous elements (the last
 * axis), a work-group per row: on a GPU a row's elements are spread over
 * the group's items instead of one item looping over them. */
KERNEL softmax_rows_fp(GLOBAL const void *x, ulong xo, GLOBAL void *y, ulong yo, ulong rows,
                       ulong len, int log_out, int fp16) {
  LOCAL_MEM real buf[GROUP_SIZE];
  for (ulong r = GROUP_ID; r < rows; r += NUM_GROUPS) {
    ulong xs = xo + r * len, ys = yo + r * len;
    real mx = -INFINITY;
    for (ulong i = LOCAL_ID; i < len; i += GROUP_SIZE)
      mx = fmax(mx, ldf(x, xs + i, fp16));
    mx = group_reduce(buf, mx, REDUCE_MAX);
    real sum = 0.0f;
    for (ulong i = LOCAL_ID; i < len; i += GROUP_SIZE)
      sum += exp(ldf(x, xs + i, fp16) - mx);
    sum = group_reduce(buf, sum, REDUCE_SUM);
    real ls = log(sum), inv = 1.0f / sum;
    for (ulong i = LOCAL_ID; i < len; i += GROUP_SIZE) {
      real v = ldf(x, xs + i, fp16) - mx;
      stf(y, ys + i, log_out ? v - ls : exp(v) * inv, fp16);
    }
  }
}

/* A reduction over the last `len` elements of each row, a work-group per
 * row. */
KERNEL reduce_rows_fp(GLOBAL const void *x, ulong xo, GLOBAL void *y, ulong yo, ulong rows,
                      ulong len, int op, int fp16) {
  LOCAL_MEM real buf[GROUP_SIZE];
  for (ulong r = GROUP_ID; r < rows; r += NUM_GROUPS) {
    real shift = 0.0f;
    if (op == REDUCE_LOGSUMEXP) {
      real mx = -INFINITY;
      for (ulong i = LOCAL_ID; i < len; i += GROUP_SIZE)
        mx = reduce_step(REDUCE_MAX, mx, ldf(x, xo + r * len + i, fp16), 0.0f);
      shift = lse_shift(group_reduce(buf, mx, REDUCE_MAX));
    }
    real acc = reduce_start(op), comp = 0.0f;
    for (ulong i = LOCAL_ID; i < len; i += GROUP_SIZE)
      acc = reduce_add(op, acc, ldf(x, xo + r * len + i, fp16), shift, &comp);
    if (reduce_adds(op) && isfinite(acc))
      acc += comp;
    acc = group_reduce(buf, acc, op); /* then pairwise, across the group */
    if (LOCAL_ID == 0)
      stf(y, yo + r, reduce_finish(op, acc, (long)len, shift), fp16);
  }
}

/* LayerNormalization, a work-group per row (as softmax_rows_fp); with rms
 * set RMSNormalization (no mean taken out). */
KERNEL layernorm_rows_fp(GLOBAL const void *x, ulong xo, GLOBAL const void *scale, ulong so,
                         GLOBAL const void *bias, ulong bo, int has_bias, GLOBAL void *y,
                         ulong yo, ulong rows, ulong inner, float eps, int rms, int fp16) {
  LOCAL_MEM real buf[GROUP_SIZE];
  for (ulong r = GROUP_ID; r < rows; r += NUM_GROUPS) {
    ulong xr = xo + r * inner, yr = yo + r * inner;
    real sum = 0.0f;
    for (ulong i = LOCAL_ID; !rms && i < inner; i += GROUP_SIZE)
      sum += ldf(x, xr + i, fp16);
    real mean = group_reduce(buf, sum, REDUCE_SUM) / (real)inner, sq = 0.0f;
    for (ulong i = LOCAL_ID; i < inner; i += GROUP_SIZE) {
      real d = ldf(x, xr + i, fp16) - mean;
      sq += d * d;
    }
    real inv = 1.0f / sqrt(group_reduce(buf, sq, REDUCE_SUM) / (real)inner + eps);
    for (ulong i = LOCAL_ID; i < inner; i += GROUP_SIZE)
      stf(y, yr + i,
          (ldf(x, xr + i, fp16) - mean) * inv * ldf(scale, so + i, fp16) +
              (has_bias ? ldf(bias, bo + i, fp16) : 0.0f),
          fp16);
  }
}

/* LayerNormalization over the last `inner` elements of each row; with rms
 * set RMSNormalization. */
KERNEL layernorm_fp(GLOBAL const void *x, ulong xo, GLOBAL const void *scale, ulong so,
                    GLOBAL const void *bias, ulong bo, int has_bias, GLOBAL void *y, ulong yo,
                    ulong rows, ulong inner, float eps, int rms, int fp16) {
  FOR_EACH(r, rows) {
    ulong xr = xo + r * inner, yr = yo + r * inner;
    real sum = 0.0f;
    for (ulong i = 0; !rms && i < inner; i++)
      sum += ldf(x, xr + i, fp16);
    real mean = sum / (real)inner, sq = 0.0f;
    for (ulong i = 0; i < inner; i++) {
      real d = ldf(x, xr + i, fp16) - mean;
      sq += d * d;
    }
    real inv = 1.0f / sqrt(sq / (real)inner + eps);
    for (ulong i = 0; i < inner; i++)
      stf(y, yr + i,
          (ldf(x, xr + i, fp16) - mean) * inv * ldf(scale, so + i, fp16) +
              (has_bias ? ldf(bias, bo + i, fp16) : 0.0f),
          fp16);
  }
}

/* GroupNormalization (InstanceNormalization: a group per channel): x as
 * [batch, channels, spatial], rows of `per` channels x spatial; scale and
 * bias per channel (per_channel) or per group. */
DEVFN real groupnorm_affine(GLOBAL const void *p, ulong po, ulong row, ulong i, ulong groups,
                             ulong per, ulong spatial, int per_channel, int fp16) {
  ulong g = row % groups;
  return ldf(p, po + (per_channel ? g * per + i / spatial : g), fp16);
}

KERNEL groupnorm_fp(GLOBAL const void *x, ulong xo, GLOBAL const void *scale, ulong so,
                    GLOBAL const void *bias, ulong bo, GLOBAL void *y, ulong yo, ulong rows,
                    ulong groups, ulong per, ulong spatial, int per_channel, float eps,
                    int fp16) {
  ulong len = per * spatial;
  FOR_EACH(r, rows) {
    ulong at = r * len;
    real sum = 0.0f;
    for (ulong i = 0; i < len; i++)
      sum += ldf(x, xo + at + i, fp16);
    real mean = sum / (real)len, sq = 0.0f;
    for (ulong i = 0; i < len; i++) {
      real d = ldf(x, xo + at + i, fp16) - mean;
      sq += d * d;
    }
    real inv = 1.0f / sqrt(sq / (real)len + eps);
    for (ulong i = 0; i < len; i++) {
      real s = groupnorm_affine(scale, so, r, i, groups, per, spatial, per_channel, fp16);
      real b = groupnorm_affine(bias, bo, r, i, groups, per, spatial, per_channel, fp16);
      stf(y, yo + at + i, (ldf(x, xo + at + i, fp16) - mean) * inv * s + b, fp16);
    }
  }
}

/* The same, a work-group per row. */
KERNEL groupnorm_rows_fp(GLOBAL const void *x, ulong xo, GLOBAL const void *scale, ulong so,
                         GLOBAL const void *bias, ulong bo, GLOBAL void *y, ulong yo, ulong rows,
                         ulong groups, ulong per, ulong spatial, int per_channel, float eps,
                         int fp16) {
  LOCAL_MEM real buf[GROUP_SIZE];
  ulong len = per * spatial;
  for (ulong r = GROUP_ID; r < rows; r += NUM_GROUPS) {
    ulong at = r * len;
    real sum = 0.0f;
    for (ulong i = LOCAL_ID; i < len; i += GROUP_SIZE)
      sum += ldf(x, xo + at + i, fp16);
    real mean = group_reduce(buf, sum, REDUCE_SUM) / (real)len, sq = 0.0f;
    for (ulong i = LOCAL_ID; i < len; i += GROUP_SIZE) {
      real d = ldf(x, xo + at + i, fp16) - mean;
      sq += d * d;
    }
    real inv = 1.0f / sqrt(group_reduce(buf, sq, REDUCE_SUM) / (real)len + eps);
    for (ulong i = LOCAL_ID; i < len; i += GROUP_SIZE) {
      real s = groupnorm_affine(scale, so, r, i, groups, per, spatial, per_channel, fp16);
      real b = groupnorm_affine(bias, bo, r, i, groups, per, spatial, per_channel, fp16);
      stf(y, yo + at + i, (ldf(x, xo + at + i, fp16) - mean) * inv * s + b, fp16);
    }
  }
}

/* LRN across channels: x as [batch, channels, spatial]; the window of
 * `size` channels around each, cut at the edges. */
KERNEL lrn_fp(GLOBAL const void *x, ulong xo, GLOBAL void *y, ulong yo, ulong n, ulong channels,
              ulong spatial, long size, float alpha, float beta, float bias, int fp16) {
  long before = (size - 1) / 2, after = size - 1 - before;
  FOR_EACH(i, n) {
    ulong s = i % spatial, ch = (i / spatial) % channels, b = i / (spatial * channels);
    long lo = (long)ch - before > 0 ? (long)ch - before : 0;
    long hi = (long)ch + after < (long)channels ? (long)ch + after : (long)channels - 1;
    real sum = 0.0f;
    for (long j = lo; j <= hi; j++) {
      real v = ldf(x, xo + (b * channels + (ulong)j) * spatial + s, fp16);
      sum += v * v;
    }
    stf(y, yo + i, ldf(x, xo + i, fp16) / pow(bias + alpha / (real)size * sum, (real)beta), fp16);
  }
}

/* Hardmax along one axis: x as [outer, len, inner]; 1 at the first
 * largest, 0 elsewhere. */
KERNEL hardmax_fp(GLOBAL const void *x, ulong xo, GLOBAL void *y, ulong yo, ulong outer,
                  ulong len, ulong inner, int fp16) {
  FOR_EACH(id, outer * inner) {
    ulong at = (id / inner) * len * inner + id % inner, best = 0;
    real bv = ldf(x, xo + at, fp16);
    for (ulong j = 1; j < len; j++) {
      real v = ldf(x, xo + at + j * inner, fp16);
      if (v > bv) {
        bv = v;
        best = j;
      }
    }
    for (ulong j = 0; j < len; j++)
      stf(y, yo + at + j * inner, j == best ? 1.0f : 0.0f, fp16);
  }
}

/* BatchNormalization (inference): x as [batch, channels, inner]. */
KERNEL batchnorm_fp(GLOBAL const void *x, ulong xo, GLOBAL const void *scale, ulong so,
                    GLOBAL const void *bias, ulong bo, GLOBAL const void *mean, ulong mo,
                    GLOBAL const void *var, ulong vo, GLOBAL void *y, ulong yo, ulong n,
                    ulong channels, ulong inner, float eps, int fp16) {
  FOR_EACH(i, n) {
    ulong c = (i / inner) % channels;
    real s = ldf(scale, so + c, fp16) / sqrt(ldf(var, vo + c, fp16) + eps);
    stf(y, yo + i, ldf(x, xo + i, fp16) * s + (ldf(bias, bo + c, fp16) - ldf(mean, mo + c, fp16) * s),
        fp16);
  }
}


/* ---- convolution and pooling ------------------------------------------------------------------ */

/* Three spatial dimensions always: a 1-D or 2-D op has leading ones. */
typedef struct conv_geom {
  long batch, in_channels, out_channels, group;
  long in[3], out[3], k[3], stride[3], dil[3], pad[3];
} conv_geom;

/* Conv, one output element per item: y[b, m, o...] = sum over the group's
 * channels and the window of x * w, + bias; weights [M, C/group, k...]. */
KERNEL conv_fp(GLOBAL const void *x, ulong xo, GLOBAL const void *w, ulong wo,
               GLOBAL const void *bias, ulong bo, int has_bias, GLOBAL void *y, ulong yo,
               ulong n, conv_geom g, int relu, int fp16) {
  long cg = g.in_channels / g.group, mg = g.out_channels / g.group;
  long ksize = g.k[0] * g.k[1] * g.k[2];
  FOR_EACH(i, n) {
    long r = (long)i;
    long o2 = r % g.out[2]; r /= g.out[2];
    long o1 = r % g.out[1]; r /= g.out[1];
    long o0 = r % g.out[0]; r /= g.out[0];
    long m = r % g.out_channels, b = r / g.out_channels;
    long c0 = (m / mg) * cg;
    real acc = has_bias ? ldf(bias, bo + (ulong)m, fp16) : 0.0f;
    for (long c = 0; c < cg; c++) {
      long xc = (long)xo + ((b * g.in_channels + c0 + c) * g.in[0]) * g.in[1] * g.in[2];
      long wc = (long)wo + (m * cg + c) * ksize;
      for (long k0 = 0; k0 < g.k[0]; k0++) {
        long p0 = o0 * g.stride[0] - g.pad[0] + k0 * g.dil[0];
        if (p0 < 0 || p0 >= g.in[0])
          continue;
        for (long k1 = 0; k1 < g.k[1]; k1++) {
          long p1 = o1 * g.stride[1] - g.pad[1] + k1 * g.dil[1];
          if (p1 < 0 || p1 >= g.in[1])
            continue;
          long xr = xc + (p0 * g.in[1] + p1) * g.in[2];
          long wr = wc + (k0 * g.k[1] + k1) * g.k[2];
          for (long k2 = 0; k2 < g.k[2]; k2++) {
            long p2 = o2 * g.stride[2] - g.pad[2] + k2 * g.dil[2];
            if (p2 >= 0 && p2 < g.in[2])
              acc += ldf(x, (ulong)(xr + p2), fp16) * ldf(w, (ulong)(wr + k2), fp16);
          }
        }
      }
    }
    stf(y, yo + i, relu && acc < 0.0f ? 0.0f : acc, fp16);
  }
}

/* Conv as GEMM (where the backend has a BLAS), for nb images from b0 and
 * the group whose channels start at c0: cols[ck][j os_count + os], ck over
 * (channel, k0, k1, k2) of the group, j over the images, os over the output
 * positions; 0 where the window is in the padding. One item per row of the
 * output's last dimension: the divisions are per row, not per element
 * (64-bit division is slow on CPUs and emulated on GPUs). */
KERNEL im2col_fp(GLOBAL const void *x, ulong xo, GLOBAL void *cols, ulong co, ulong rows,
                 conv_geom g, long b0, long nb, long c0, int fp16) {
  long os_count = g.out[0] * g.out[1] * g.out[2], in_size = g.in[0] * g.in[1] * g.in[2];
  FOR_EACH(r, rows) { /* r over (ck, j, o0, o1) */
    long q = (long)r;
    long o1 = q % g.out[1]; q /= g.out[1];
    long o0 = q % g.out[0]; q /= g.out[0];
    long j = q % nb, ck = q / nb;
    long k2 = ck % g.k[2], k1 = (ck / g.k[2]) % g.k[1], k0 = (ck / (g.k[2] * g.k[1])) % g.k[0];
    long c = ck / (g.k[0] * g.k[1] * g.k[2]);
    long p0 = o0 * g.stride[0] - g.pad[0] + k0 * g.dil[0];
    long p1 = o1 * g.stride[1] - g.pad[1] + k1 * g.dil[1];
    bool row_inside = p0 >= 0 && p0 < g.in[0] && p1 >= 0 && p1 < g.in[1];
    long src = (long)xo + ((b0 + j) * g.in_channels + c0 + c) * in_size + (p0 * g.in[1] + p1) * g.in[2];
    long dst = (long)co + ck * nb * os_count + j * os_count + (o0 * g.out[1] + o1) * g.out[2];
    long p2 = k2 * g.dil[2] - g.pad[2];
    for (long o2 = 0; o2 < g.out[2]; o2++, p2 += g.stride[2])
      stf(cols, (ulong)(dst + o2),
          row_inside && p2 >= 0 && p2 < g.in[2] ? ldf(x, (ulong)(src + p2), fp16) : 0.0f, fp16);
  }
}

/* The GEMM's product yt[m][j os_count + os] (the group's mg channels from
 * m0, nb images from b0) into y[b0 + j][m0 + m][os], with the bias and
 * Relu; one item per (j, m) row. */
KERNEL conv_out_fp(GLOBAL const void *yt, ulong yto, ulong yt_at, GLOBAL const void *bias,
                   ulong bo, int has_bias, GLOBAL void *y, ulong yo, ulong rows, long b0,
                   long nb, long m0, long mg, long out_channels, long os_count, int relu,
                   int fp16) {
  FOR_EACH(r, rows) {
    long m = (long)r % mg, j = (long)r / mg;
    ulong src = yto + yt_at + (ulong)(m * nb * os_count + j * os_count);
    ulong dst = yo + (ulong)(((b0 + j) * out_channels + m0 + m) * os_count);
    real b = has_bias ? ldf(bias, bo + (ulong)(m0 + m), fp16) : 0.0f;
    for (long os = 0; os < os_count; os++) {
      real v = ldf(yt, src + (ulong)os, fp16) + b;
      stf(y, dst + (ulong)os, relu && v < 0.0f ? 0.0f : v, fp16);
    }
  }
}

/* ConvTranspose, one output element per item, gathering the inputs that
 * scatter onto it; weights [C, M/group, k...]. */
KERNEL conv_transpose_fp(GLOBAL const void *x, ulong xo, GLOBAL const void *w, ulong wo,
                         GLOBAL const void *bias, ulong bo, int has_bias, GLOBAL void *y,
                         ulong yo, ulong n, conv_geom g, int fp16) {
  long cg = g.in_channels / g.group, mg = g.out_channels / g.group;
  long ksize = g.k[0] * g.k[1] * g.k[2];
  FOR_EACH(i, n) {
    long r = (long)i, o[3];
    o[2] = r % g.out[2]; r /= g.out[2];
    o[1] = r % g.out[1]; r /= g.out[1];
    o[0] = r % g.out[0]; r /= g.out[0];
    long m = r % g.out_channels, b = r / g.out_channels;
    long grp = m / mg, mm = m % mg;
    real acc = has_bias ? ldf(bias, bo + (ulong)m, fp16) : 0.0f;
    for (long k0 = 0; k0 < g.k[0]; k0++) {
      long t0 = o[0] + g.pad[0] - k0 * g.dil[0];
      if (t0 < 0 || t0 % g.stride[0] || t0 / g.stride[0] >= g.in[0])
        continue;
      for (long k1 = 0; k1 < g.k[1]; k1++) {
        long t1 = o[1] + g.pad[1] - k1 * g.dil[1];
        if (t1 < 0 || t1 % g.stride[1] || t1 / g.stride[1] >= g.in[1])
          continue;
        for (long k2 = 0; k2 < g.k[2]; k2++) {
          long t2 = o[2] + g.pad[2] - k2 * g.dil[2];
          if (t2 < 0 || t2 % g.stride[2] || t2 / g.stride[2] >= g.in[2])
            continue;
          long at = ((t0 / g.stride[0]) * g.in[1] + t1 / g.stride[1]) * g.in[2] + t2 / g.stride[2];
          long kat = (k0 * g.k[1] + k1) * g.k[2] + k2;
          for (long c = 0; c < cg; c++) {
            long ch = grp * cg + c;
            acc += ldf(x, xo + (ulong)((b * g.in_channels + ch) * g.in[0] * g.in[1] * g.in[2] + at), fp16) *
                   ldf(w, wo + (ulong)((ch * mg + mm) * ksize + kat), fp16);
          }
        }
      }
    }
    stf(y, yo + i, acc, fp16);
  }
}

/* MaxPool, AveragePool and LpPool (lp: its p, else 0), one output per item
 * over [batch x channels] planes (in_channels: their count). The divisor
 * with count_include_pad counts taps up to the end padding, as the CPU's
 * pool does. */
KERNEL pool_fp(GLOBAL const void *x, ulong xo, GLOBAL void *y, ulong yo, ulong n,
               conv_geom g, long pad_end0, long pad_end1, long pad_end2, int is_max,
               int count_include_pad, int lp, int fp16) {
  FOR_EACH(i, n) {
    long r = (long)i, o[3];
    o[2] = r % g.out[2]; r /= g.out[2];
    o[1] = r % g.out[1]; r /= g.out[1];
    o[0] = r % g.out[0]; r /= g.out[0];
    long xp = (long)xo + r * g.in[0] * g.in[1] * g.in[2];
    long lim[3] = {g.in[0] + pad_end0, g.in[1] + pad_end1, g.in[2] + pad_end2};
    real best = -INFINITY, sum = 0.0f;
    long taps = 0, padded = 1;
    for (int d = 0; d < 3; d++) { /* taps inside the padded extent, per dim */
      long t = 0;
      for (long k = 0; k < g.k[d]; k++)
        t += o[d] * g.stride[d] - g.pad[d] + k * g.dil[d] < lim[d];
      padded *= t;
    }
    for (long k0 = 0; k0 < g.k[0]; k0++) {
      long p0 = o[0] * g.stride[0] - g.pad[0] + k0 * g.dil[0];
      if (p0 < 0 || p0 >= g.in[0])
        continue;
      for (long k1 = 0; k1 < g.k[1]; k1++) {
        long p1 = o[1] * g.stride[1] - g.pad[1] + k1 * g.dil[1];
        if (p1 < 0 || p1 >= g.in[1])
          continue;
        for (long k2 = 0; k2 < g.k[2]; k2++) {
          long p2 = o[2] * g.stride[2] - g.pad[2] + k2 * g.dil[2];
          if (p2 < 0 || p2 >= g.in[2])
            continue;
          real v = ldf(x, (ulong)(xp + (p0 * g.in[1] + p1) * g.in[2] + p2), fp16);
          best = v > best ? v : best;
          sum += lp == 0 ? v : lp == 1 ? fabs(v) : lp == 2 ? v * v : pow(fabs(v), (real)lp);
          taps++;
        }
      }
    }
    long div = count_include_pad ? padded : taps;
    real out = is_max ? best
                : lp == 1 ? sum
                : lp == 2 ? sqrt(sum)
                : lp      ? pow(sum, 1.0f / (real)lp)
                : div     ? sum / (real)div
                          : 0.0f;
    stf(y, yo + i, out, fp16);
  }
}

/* ---- Resize ------------------------------------------------------------------------------------ */

#define RESIZE_NEAREST 0
#define COORD_HALF_PIXEL 0
#define COORD_ASYMMETRIC 1
#define COORD_ALIGN_CORNERS 2
#define COORD_PYTORCH_HALF_PIXEL 3
#define NEAREST_ROUND_PREFER_FLOOR 0
#define NEAREST_ROUND_PREFER_CEIL 1
#define NEAREST_FLOOR 2
#define NEAREST_CEIL 3

/* Modes numbered as gs_resize_mode, gs_coord_mode and gs_nearest_mode. */
typedef struct resize_geom {
  long rank;
  long in_dims[8];
  long out_dims[8];
  float scale[8]; /* output / input */
  int mode, coord, nearest, unused;
} resize_geom;

DEVFN real resize_source(const resize_geom *g, int d, long o) {
  real s = g->scale[d];
  long in = g->in_dims[d], out = g->out_dims[d];
  switch (g->coord) {
  case COORD_ASYMMETRIC: return (real)o / s;
  case COORD_ALIGN_CORNERS: return out == 1 ? 0.0f : (real)o * (real)(in - 1) / (real)(out - 1);
  case COORD_PYTORCH_HALF_PIXEL: return out > 1 ? ((real)o + 0.5f) / s - 0.5f : 0.0f;
  default: return ((real)o + 0.5f) / s - 0.5f;
  }
}

DEVFN long nearest_index(int mode, real x, long in) {
  long i;
  switch (mode) {
  case NEAREST_FLOOR: i = (long)floor(x); break;
  case NEAREST_CEIL: i = (long)ceil(x); break;
  case NEAREST_ROUND_PREFER_CEIL: i = (long)floor(x + 0.5f); break;
  default: i = x == floor(x) + 0.5f ? (long)floor(x) : (long)floor(x + 0.5f); break;
  }
  return i < 0 ? 0 : i >= in ? in - 1 : i;
}

/* Nearest, or (multi)linear over the dimensions that move. */
KERNEL resize_fp(GLOBAL const void *x, ulong xo, GLOBAL void *y, ulong yo, ulong n,
                 resize_geom g, int fp16) {
  FOR_EACH(i, n) {
    long lo[8], step[8], base = 0, stride = 1;
    real w[8];
    int moving[8], n_moving = 0;
    ulong rest = i;
    for (int d = (int)g.rank - 1; d >= 0; d--) {
      long o = (long)(rest % (ulong)g.out_dims[d]), in = g.in_dims[d];
      rest /= (ulong)g.out_dims[d];
      real src = resize_source(&g, d, o);
      if (g.mode == RESIZE_NEAREST || in == 1) {
        lo[d] = g.mode == RESIZE_NEAREST ? nearest_index(g.nearest, src, in) : 0;
        w[d] = 0.0f;
      } else {
        src = src < 0.0f ? 0.0f : src > (real)(in - 1) ? (real)(in - 1) : src;
        lo[d] = (long)floor(src);
        w[d] = src - (real)lo[d];
      }
      step[d] = lo[d] + 1 < in ? stride : 0;
      base += lo[d] * stride;
      stride *= in;
    }
    for (int d = 0; d < (int)g.rank; d++)
      if (w[d] > 0.0f)
        moving[n_moving++] = d;
    real v = 0.0f;
    for (int corner = 0; corner < (1 << n_moving); corner++) {
      real weight = 1.0f;
      long off = base;
      for (int m = 0; m < n_moving; m++) {
        int d = moving[m];
        int up = (corner >> m) & 1;
        weight *= up ? w[d] : 1.0f - w[d];
        off += up ? step[d] : 0;
      }
      v += weight * ldf(x, xo + (ulong)off, fp16);
    }
    stf(y, yo + i, v, fp16);
  }
}

/* ---- images: a pass of a Pillow resize ----------------------------------------------------- */

/* One pass of the separable resize of a batch's images (engine/
 * image_pack.c; image_resize.c's arithmetic, run on the device), an image
 * per taps_pass. Element e of an image's output, from its `first` element
 * of the launch, is (line r, output o, byte c) with
 * e = (r * n_out + o) * inner + c: the 8-bit value of the fixed-point sum
 * (22 fraction bits, from one half) over o's taps, written at y + y_at + e.
 * The taps at t + taps_at are start[n_out], count[n_out], then ksize
 * weights per output; tap j of o reads x + x_at + r * in_line +
 * (start[o] + j) * in_tap + c. A horizontal pass has inner 3 (a pixel) and
 * in_tap 3; a vertical one has inner and in_tap a row's bytes, one line.
 * Integer sums: the bytes are the CPU's. Offsets are bytes (8-aligned). */
typedef struct taps_pass {
  long first, x_at, y_at, taps_at, n_out, inner, in_tap, in_line, ksize;
} taps_pass;

#define TAPS_FRACTION_BITS 22 /* op_attrs.h's GS_IMAGE_TAPS_FRACTION_BITS */

KERNEL image_taps_u8(GLOBAL const uchar *x, ulong xo, GLOBAL const uchar *t, ulong to,
                     GLOBAL uchar *y, ulong yo, ulong n, long images, long passes_at) {
  GLOBAL const taps_pass *passes = (GLOBAL const taps_pass *)(t + to + passes_at);
  FOR_EACH(i, n) {
    long lo = 0, hi = images - 1; /* the last pass whose first element is at or before i */
    while (lo < hi) {
      long mid = (lo + hi + 1) / 2;
      if (passes[mid].first <= (long)i)
        lo = mid;
      else
        hi = mid - 1;
    }
    GLOBAL const taps_pass *g = passes + lo;
    long e = (long)i - g->first, c, o, r;
    if (((e | g->inner | g->n_out) >> 31) == 0) { /* 32-bit division: 64-bit is emulated on GPUs */
      uint rest = (uint)e / (uint)g->inner;
      c = (long)((uint)e - rest * (uint)g->inner);
      o = (long)(rest % (uint)g->n_out);
      r = (long)(rest / (uint)g->n_out);
    } else {
      c = e % g->inner;
      o = (e / g->inner) % g->n_out;
      r = e / g->inner / g->n_out;
    }
    GLOBAL const int *start = (GLOBAL const int *)(t + to + g->taps_at);
    GLOBAL const int *count = start + g->n_out, *w = count + g->n_out + o * g->ksize;
    GLOBAL const uchar *p = x + xo + g->x_at + r * g->in_line + (long)start[o] * g->in_tap + c;
    int sum = 1 << (TAPS_FRACTION_BITS - 1);
    for (int j = 0; j < count[o]; j++)
      sum += (int)p[j * g->in_tap] * w[j];
    sum = sum < 0 ? 0 : sum > (255 << TAPS_FRACTION_BITS) ? (255 << TAPS_FRACTION_BITS) : sum;
    y[yo + g->y_at + e] = (uchar)(sum >> TAPS_FRACTION_BITS);
  }
}

/* ---- GEMM without a BLAS ------------------------------------------------------------------------ */

/* y[b] = alpha A[b] B[b] (+ beta y[b], + bias on every row), Relu after if
 * asked; any transposes as the strides of rows and columns, batches as
 * MatMul's broadcast strides. One output per item, float32 accumulation:
 * for float16, and float32 where no BLAS library is installed. */
typedef struct gemm_geom {
  long batch, m, n, k;
  long batch_rank;
  long batch_dims[8];
  long a_batch_strides[8], b_batch_strides[8];
  long a_row, a_col, b_row, b_col;
  float alpha, beta;
  int has_bias, relu;
} gemm_geom;

KERNEL matmul_fp(GLOBAL const void *a, ulong ao, GLOBAL const void *b, ulong bo,
                 GLOBAL const void *bias, ulong biaso, GLOBAL void *y, ulong yo, ulong total,
                 gemm_geom g, int fp16) {
  FOR_EACH(i, total) {
    long j = (long)(i % (ulong)g.n), r = (long)(i / (ulong)g.n);
    long row = r % g.m, bt = r / g.m;
    long oa = 0, ob = 0, q = bt;
    for (int d = (int)g.batch_rank - 1; d >= 0; d--) {
      long at = q % g.batch_dims[d];
      q /= g.batch_dims[d];
      oa += at * g.a_batch_strides[d];
      ob += at * g.b_batch_strides[d];
    }
    real acc = 0.0f;
    for (long k = 0; k < g.k; k++)
      acc += ldf(a, ao + (ulong)(oa + row * g.a_row + k * g.a_col), fp16) *
             ldf(b, bo + (ulong)(ob + k * g.b_row + j * g.b_col), fp16);
    real v = g.alpha * acc;
    if (g.beta != 0.0f)
      v += g.beta * ldf(y, yo + i, fp16);
    if (g.has_bias)
      v += ldf(bias, biaso + (ulong)j, fp16);
    stf(y, yo + i, g.relu && v < 0.0f ? 0.0f : v, fp16);
  }
}

/* DFT and STFT around the backend's FFT (gs_devops_target.fft): dft_pack_fp
 * lays each transform's input out as n complex values (real, imaginary) in
 * the scratch buffer, cut or zero-padded to n and multiplied by the window;
 * the FFT transforms them in place; dft_unpack_fp writes the first out_len
 * bins of each, scaled by 1 / n for an inverse, to the output. A line is
 * DFT's (outer, inner) pair or STFT's (batch, frame). */
typedef struct dft_geom {
  long lines, n, out_len, inner, in_len, parts; /* parts: 2 for complex input */
  long take;                                    /* input values per line: min(in_len or window, n) */
  long frames, step;                            /* STFT */
  int stft, has_window, inverse, pad_;
} dft_geom;

/* Over `items` values: lines past g.lines (the FFT's plan may be made for
 * more, see devops_signal.c) are zeros. */
KERNEL dft_pack_fp(GLOBAL const void *x, ulong xo, GLOBAL const void *w, ulong wo,
                   GLOBAL void *s, ulong so, dft_geom g, ulong items) {
  FOR_EACH(id, items) {
    long t = (long)(id / (ulong)g.n), i = (long)(id % (ulong)g.n);
    long take = t < g.lines ? g.take : 0, src = 0;
    if (g.stft) {
      long b = t / g.frames, start = (t % g.frames) * g.step;
      if (take > g.in_len - start)
        take = g.in_len - start; /* the window runs past the signal: zeros */
      src = (b * g.in_len + start + i) * g.parts;
    } else {
      src = ((t / g.inner * g.in_len + i) * g.inner + t % g.inner) * g.parts;
    }
    real re = 0.0f, im = 0.0f;
    if (i < take) {
      re = ldf(x, xo + (ulong)src, 0);
      if (g.parts == 2)
        im = ldf(x, xo + (ulong)src + 1, 0);
      if (g.has_window) {
        real v = ldf(w, wo + (ulong)i, 0);
        re *= v;
        im *= v;
      }
    }
    stf(s, so + 2 * id, re, 0);
    stf(s, so + 2 * id + 1, im, 0);
  }
}

KERNEL dft_unpack_fp(GLOBAL const void *s, ulong so, GLOBAL void *y, ulong yo, dft_geom g) {
  real scale = g.inverse ? REAL_C(1.0) / (real)g.n : REAL_C(1.0);
  FOR_EACH(id, (ulong)(g.lines * g.out_len)) {
    long t = (long)(id / (ulong)g.out_len), k = (long)(id % (ulong)g.out_len);
    long dst = g.stft ? t * g.out_len + k : (t / g.inner * g.out_len + k) * g.inner + t % g.inner;
    ulong at = 2 * (ulong)(t * g.n + k);
    stf(y, yo + 2 * (ulong)dst, ldf(s, so + at, 0) * scale, 0);
    stf(y, yo + 2 * (ulong)dst + 1, ldf(s, so + at + 1, 0) * scale, 0);
  }
}

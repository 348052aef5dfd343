/* k_qlinear.c - CPU kernels of the quantised ops that are not products:
 * DynamicQuantizeLinear, and the com.microsoft QLinearAdd, QLinearMul,
 * QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax,
 * QLinearGlobalAveragePool and QLinearConcat. Each computes in float32
 * between dequantising its inputs and requantising its output, as
 * onnxruntime's kernels do; an op of one 8-bit input goes through a table
 * of its 256 results. */
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/parallel.h"
#include "hal/cpu/ops/qmath.h"
#include "hal/op/op_launch.h"

#include "base/error.h"

#include <stdlib.h>

/* Scale and zero point of a per-tensor quantised input (absent zero point: 0). */
typedef struct qparams {
  float scale;
  int32_t zero;
} qparams;

static qparams params(const gs_op_call *c, const gs_cpu_kernel_call *k, int scale, int zero,
                      gs_dtype t) {
  return (qparams){.scale = *(const float *)k->ptr[scale],
                   .zero = gs_op_given(c, zero) ? gs_q_load(t, k->ptr[zero], 0) : 0};
}

static int32_t quantize(float v, qparams y, gs_dtype t) {
  return gs_q_quantize(v, y.scale, y.zero, t);
}

/* The range of x widened to hold 0; NaN is passed over. Sixteen lanes
 * each keep their own, so that the compiler makes vector min/max of the
 * loop (a single running min is a reduction GCC leaves scalar without
 * -ffast-math). */
GS_VECTOR_CLONES
static void min_max(const float *x, int64_t n, float *lo, float *hi) {
  enum { LANES = 16 };
  float a[LANES] = {0}, b[LANES] = {0};
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) {
      float v = x[i + l];
      a[l] = v < a[l] ? v : a[l];
      b[l] = v > b[l] ? v : b[l];
    }
  for (; i < n; i++) {
    a[0] = x[i] < a[0] ? x[i] : a[0];
    b[0] = x[i] > b[0] ? x[i] : b[0];
  }
  for (int l = 1; l < LANES; l++) {
    a[0] = a[l] < a[0] ? a[l] : a[0];
    b[0] = b[l] > b[0] ? b[l] : b[0];
  }
  *lo = a[0];
  *hi = b[0];
}

GS_VECTOR_CLONES
static void quantize_u8(const float *x, uint8_t *y, float scale, int32_t zero, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = (uint8_t)(gs_q_round(x[i] / scale, -zero, 255 - zero) + zero);
}

GS_VECTOR_CLONES
void gs__q_flip(const uint8_t *x, int8_t *y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = (int8_t)(x[i] ^ 0x80);
}

GS_VECTOR_CLONES
int64_t gs__q_split(gs_dtype t, const void *a, int64_t n, uint8_t *hi, uint8_t *lo) {
  uint8_t flip = t == GS_DT_INT8 ? 0x80 : 0; /* x + 128 for int8, as a byte */
  const uint8_t *bytes = a;
  int64_t sum = 0;
  for (int64_t i = 0; i < n; i++) {
    uint8_t v = bytes[i] ^ flip;
    hi[i] = v >> 7;
    lo[i] = v & 127;
    sum += v;
  }
  return sum;
}

/* min_max over the threads: each piece's range, then theirs. */
static void min_max_parallel(const float *x, int64_t n, float *lo, float *hi) {
  enum { MOST = 256 };
  float los[MOST], his[MOST];
  int64_t pieces = gs_parallel_pieces(n, GS_PARALLEL_GRAIN);
  pieces = pieces < MOST ? pieces : MOST;
  if (pieces <= 1) {
    min_max(x, n, lo, hi);
    return;
  }
  _Pragma("omp parallel for schedule(static)")
  for (int64_t p = 0; p < pieces; p++) {
    int64_t from, to;
    gs_parallel_range(n, pieces, p, &from, &to);
    min_max(x + from, to - from, &los[p], &his[p]);
  }
  *lo = los[0];
  *hi = his[0];
  for (int64_t p = 1; p < pieces; p++) {
    *lo = los[p] < *lo ? los[p] : *lo;
    *hi = his[p] > *hi ? his[p] : *hi;
  }
}

float gs__q_dynamic_quantize(const float *x, int64_t n, uint8_t *y, uint8_t *zero) {
  float lo, hi;
  min_max_parallel(x, n, &lo, &hi);
  float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  *zero = (uint8_t)gs_q_round(0.0f - lo / scale, 0, 255);
  if (n > 0) /* an empty x has no buffer to offset */
    GS_PARALLEL_RANGES(n, GS_PARALLEL_GRAIN, from, to,
                       quantize_u8(x + from, y + from, scale, *zero, to - from));
  return scale;
}

static int k_dynamic_quantize(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  uint8_t zero;
  float scale = gs__q_dynamic_quantize(k->ptr[0], gs_shape_numel(&c->in[0].shape), k->ptr[1],
                                       &zero);
  *(float *)k->ptr[2] = scale;
  *(uint8_t *)k->ptr[3] = zero;
  return 0;
}

/* QLinearAdd and QLinearMul: inputs 0 and 3 broadcast into the output. */
typedef struct qbinary {
  gs_dtype type;
  qparams a, b, y;
  bool mul;
  gs_bcast it;
  int64_t sa, sb; /* 1, or 0 where an input broadcasts along the row */
  const void *pa, *pb;
  void *out;
} qbinary;

/* One output row of QLinearAdd or QLinearMul for 8-bit type T, in
 * onnxruntime's order of operations (so that ties round alike): the
 * scales folded into ratios to y's scale and the zero points into one
 * constant, y = round(rb b + (ra a + k)); or y = round(r (a - za)(b - zb) + zy). */
#define QBINARY_LOOP(T, LO, HI, SA, SB, EXPR)                                                 \
  for (int64_t j = 0; j < n; j++) {                                                            \
    float u = (float)a[j * (SA)], v = (float)b[j * (SB)];                                      \
    y[j] = (T)gs_q_round(EXPR, LO, HI);                                                        \
  }
#define QBINARY_STRIDES(T, LO, HI, EXPR)                                                       \
  if (sa && sb)                                                                                \
    QBINARY_LOOP(T, LO, HI, 1, 1, EXPR)                                                        \
  else if (sa)                                                                                 \
    QBINARY_LOOP(T, LO, HI, 1, 0, EXPR)                                                        \
  else                                                                                         \
    QBINARY_LOOP(T, LO, HI, 0, sb, EXPR)
/* The strides are 1, or 0 for an input broadcast along the row: each
 * case, and Add and Mul, a loop of its own, so that the compiler
 * vectorises it. */
#define DEFINE_QBINARY_ROW(SUFFIX, T, LO, HI)                                                   \
  GS_VECTOR_CLONES                                                                            \
  static void qbinary_row_##SUFFIX(const T *a, int64_t sa, const T *b, int64_t sb, T *y,       \
                                   int64_t n, const qbinary *q) {                             \
    float ra = q->a.scale / q->y.scale, rb = q->b.scale / q->y.scale;                         \
    float r = q->a.scale * q->b.scale / q->y.scale, zy = (float)q->y.zero;                     \
    float za = (float)q->a.zero, zb = (float)q->b.zero, k = zy - ra * za - rb * zb;            \
    if (q->mul) {                                                                              \
      QBINARY_STRIDES(T, LO, HI, r * ((u - za) * (v - zb)) + zy)                               \
    } else {                                                                                   \
      QBINARY_STRIDES(T, LO, HI, rb * v + (ra * u + k))                                        \
    }                                                                                          \
  }
DEFINE_QBINARY_ROW(u8, uint8_t, 0, 255)
DEFINE_QBINARY_ROW(s8, int8_t, -128, 127)

static void qbinary_rows(const qbinary *q, int64_t lo, int64_t hi) {
  for (int64_t row = lo; row < hi; row++) {
    int64_t oo, io[2];
    gs_bcast_row(&q->it, row, &oo, io);
    if (q->type == GS_DT_UINT8)
      qbinary_row_u8((const uint8_t *)q->pa + io[0], q->sa, (const uint8_t *)q->pb + io[1],
                     q->sb, (uint8_t *)q->out + oo, q->it.row_len, q);
    else
      qbinary_row_s8((const int8_t *)q->pa + io[0], q->sa, (const int8_t *)q->pb + io[1], q->sb,
                     (int8_t *)q->out + oo, q->it.row_len, q);
  }
}

static int qlinear_binary(const gs_cpu_kernel_call *k, bool mul) {
  const gs_op_call *c = gs_kcall(k);
  gs_dtype t = c->in[0].dtype;
  qbinary q = {.type = t, .a = params(c, k, 1, 2, t), .b = params(c, k, 4, 5, t),
               .y = params(c, k, 6, 7, t), .mul = mul, .pa = k->ptr[0], .pb = k->ptr[3],
               .out = k->ptr[c->n_in]};
  const gs_shape *shapes[2] = {&c->in[0].shape, &c->in[3].shape};
  gs_bcast_init(&q.it, &c->out[0].shape, 2, shapes);
  q.sa = q.it.strides[0][q.it.rank - 1] ? 1 : 0;
  q.sb = q.it.strides[1][q.it.rank - 1] ? 1 : 0;
  GS_PARALLEL_RANGES(q.it.rows, GS_PARALLEL_GRAIN / (q.it.row_len + 1) + 1, lo, hi,
                     qbinary_rows(&q, lo, hi));
  return 0;
}

static int k_qlinear_add(const gs_cpu_kernel_call *k) { return qlinear_binary(k, false); }
static int k_qlinear_mul(const gs_cpu_kernel_call *k) { return qlinear_binary(k, true); }

static void look_up(const uint8_t *table, const uint8_t *in, uint8_t *out, int64_t lo,
                    int64_t hi) {
  for (int64_t i = lo; i < hi; i++)
    out[i] = table[in[i]];
}

/* y = f(x) through the table of f's 256 results. */
static int qlinear_table(const gs_cpu_kernel_call *k, float (*f)(float v, float alpha)) {
  const gs_op_call *c = gs_kcall(k);
  gs_dtype t = c->in[0].dtype;
  qparams x = params(c, k, 1, 2, t), y = params(c, k, 3, 4, t);
  float alpha = ((const gs_quant_attrs *)c->attrs)->alpha;
  uint8_t table[256];
  for (int v = 0; v < 256; v++) { /* indexed by the byte: int8 -128 is byte 128 */
    int32_t q = t == GS_DT_INT8 ? (int8_t)(uint8_t)v : v;
    table[v] = (uint8_t)quantize(f((float)(q - x.zero) * x.scale, alpha), y, t);
  }
  int64_t n = gs_shape_numel(&c->in[0].shape);
  const uint8_t *in = k->ptr[0];
  uint8_t *out = k->ptr[c->n_in];
  GS_PARALLEL_RANGES(n, GS_PARALLEL_GRAIN, lo, hi, look_up(table, in, out, lo, hi));
  return 0;
}

static float sigmoid(float v, float alpha) {
  (void)alpha;
  return 1.0f / (1.0f + expf(-v));
}
static float leaky_relu(float v, float alpha) { return v >= 0.0f ? v : v * alpha; }
static int k_qlinear_sigmoid(const gs_cpu_kernel_call *k) { return qlinear_table(k, sigmoid); }
static int k_qlinear_leaky_relu(const gs_cpu_kernel_call *k) {
  return qlinear_table(k, leaky_relu);
}

/* Softmax along the axis (inner > 1: a strided row), or over the rows of
 * [..axis) x [axis..) for opset < 13. An 8-bit row's exponentials,
 * exp(x_scale * (x - max)), take 256 values at most: they come from a
 * table of exp(x_scale * -d) for d = max - x in 0..255, made once per run. */
typedef struct qsoftmax {
  gs_dtype type;
  qparams y;
  float table[256];
} qsoftmax;

static int32_t as_int(gs_dtype t, uint8_t byte) { return t == GS_DT_INT8 ? (int8_t)byte : byte; }

static void softmax_row(const qsoftmax *q, const uint8_t *in, uint8_t *out, int64_t len,
                        int64_t step, float *tmp) {
  int32_t hi = INT32_MIN;
  for (int64_t j = 0; j < len; j++) {
    int32_t v = as_int(q->type, in[j * step]);
    hi = v > hi ? v : hi;
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < len; j++)
    sum += tmp[j] = q->table[hi - as_int(q->type, in[j * step])];
  float inv = 1.0f / (sum * q->y.scale);
  int32_t lo = gs_q_lo(q->type) - q->y.zero, top = gs_q_hi(q->type) - q->y.zero;
  for (int64_t j = 0; j < len; j++)
    out[j * step] = (uint8_t)(gs_q_round(tmp[j] * inv, lo, top) + q->y.zero);
}

static int k_qlinear_softmax(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_quant_attrs *a = c->attrs;
  gs_dtype t = c->in[0].dtype;
  qsoftmax q = {.type = t, .y = params(c, k, 3, 4, t)};
  float x_scale = params(c, k, 1, 2, t).scale; /* the zero point cancels in x - max */
  for (int d = 0; d < 256; d++)
    q.table[d] = expf(-x_scale * (float)d);
  if (gs_shape_numel(&c->in[0].shape) == 0)
    return 0;
  int64_t outer, len, inner;
  gs_launch_split_axis(&c->in[0].shape, a->axis, &outer, &len, &inner);
  if (a->softmax_2d) { /* one row of everything from the axis on */
    len *= inner;
    inner = 1;
  }
  float *tmp = malloc((size_t)(len + 1) * sizeof *tmp);
  if (!tmp)
    return gs_error(GS_ENOMEM, "node %s: out of memory for a softmax row", c->node_name);
  const uint8_t *in = k->ptr[0];
  uint8_t *out = k->ptr[c->n_in];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t at = o * len * inner + i;
      softmax_row(&q, in + at, out + at, len, inner, tmp);
    }
  free(tmp);
  return 0;
}

/* The mean of each channel's plane: the integer sum, less the zero point
 * times the count, scaled once. */
static int k_qlinear_global_average_pool(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  bool last = ((const gs_quant_attrs *)c->attrs)->channels_last;
  const gs_shape *s = &c->in[0].shape;
  gs_dtype t = c->in[0].dtype;
  qparams x = params(c, k, 1, 2, t), y = params(c, k, 3, 4, t);
  int64_t chans = s->dims[last ? s->rank - 1 : 1], plane = gs_shape_numel(s) / s->dims[0] / chans;
  float scale = plane ? x.scale / (y.scale * (float)plane) : 0.0f;
  const void *in = k->ptr[0];
  void *out = k->ptr[c->n_in];
  for (int64_t img = 0; img < s->dims[0]; img++)
    for (int64_t ch = 0; ch < chans; ch++) {
      int64_t sum = 0, base = img * chans * plane;
      for (int64_t p = 0; p < plane; p++)
        sum += gs_q_load(t, in, base + (last ? p * chans + ch : ch * plane + p));
      float v = (float)(sum - (int64_t)x.zero * plane) * scale;
      gs_q_store(t, out, img * chans + ch,
                 gs_q_round(v, gs_q_lo(t) - y.zero, gs_q_hi(t) - y.zero) + y.zero);
    }
  return 0;
}

/* QLinearAveragePool (NCHW): each window's mean of the dequantised values,
 * requantised. The window's count includes padding where
 * count_include_pad says so (the padded extent, not what ceil_mode adds
 * past it), as AveragePool's. Spatial dims are taken as three, the op's
 * own last. */
typedef struct qpool {
  int64_t in[3], out[3], kern[3], stride[3], dil[3], pad[3], pad_end[3];
  bool include_pad;
} qpool;

/* The sum over the window at output position o of the dequantised values,
 * in float32 in the window's order as onnxruntime sums them (so that ties
 * round alike), and in *count what the mean divides it by. Padding is a
 * dequantised 0. */
static float qpool_window(const qpool *w, gs_dtype t, const void *x, qparams q, int64_t base,
                          const int64_t *o, int64_t *count) {
  float sum = 0.0f;
  int64_t n = 0, padded = 1;
  int64_t from[3], to[3];
  for (int d = 0; d < 3; d++) {
    int64_t start = o[d] * w->stride[d] - w->pad[d];
    int64_t end = start + (w->kern[d] - 1) * w->dil[d] + 1;
    int64_t lim = w->in[d] + w->pad_end[d];
    padded *= ((end < lim ? end : lim) - start + w->dil[d] - 1) / w->dil[d];
    from[d] = start;
    to[d] = end;
  }
  for (int64_t i0 = from[0]; i0 < to[0]; i0 += w->dil[0])
    for (int64_t i1 = from[1]; i1 < to[1]; i1 += w->dil[1])
      for (int64_t i2 = from[2]; i2 < to[2]; i2 += w->dil[2])
        if (i0 >= 0 && i0 < w->in[0] && i1 >= 0 && i1 < w->in[1] && i2 >= 0 && i2 < w->in[2]) {
          sum += (float)(gs_q_load(t, x, base + (i0 * w->in[1] + i1) * w->in[2] + i2) - q.zero) *
                 q.scale;
          n++;
        }
  *count = w->include_pad ? padded : n;
  return sum;
}

static int k_qlinear_average_pool(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_pool_attrs *a = &((const gs_quant_attrs *)c->attrs)->pool;
  gs_dtype t = c->in[0].dtype;
  qparams x = params(c, k, 1, 2, t), y = params(c, k, 3, 4, t);
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  qpool w = {.in = {1, 1, 1}, .out = {1, 1, 1}, .kern = {1, 1, 1}, .stride = {1, 1, 1},
             .dil = {1, 1, 1}, .include_pad = a->count_include_pad};
  for (int d = 0, at = 3 - a->spatial; d < a->spatial; d++, at++) {
    w.in[at] = xs->dims[2 + d];
    w.out[at] = ys->dims[2 + d];
    w.kern[at] = a->kernel[d];
    w.stride[at] = a->stride[d];
    w.dil[at] = a->dilation[d];
    w.pad[at] = a->pad_begin[d];
    w.pad_end[at] = a->pad_end[d];
  }
  int64_t planes = xs->dims[0] * xs->dims[1], in_plane = w.in[0] * w.in[1] * w.in[2];
  int64_t out_plane = w.out[0] * w.out[1] * w.out[2];
  int32_t lo = gs_q_lo(t) - y.zero, hi = gs_q_hi(t) - y.zero;
  for (int64_t p = 0; p < planes; p++)
    for (int64_t j = 0; j < out_plane; j++) {
      int64_t o[3] = {j / (w.out[1] * w.out[2]), j / w.out[2] % w.out[1], j % w.out[2]}, count;
      float sum = qpool_window(&w, t, k->ptr[0], x, p * in_plane, o, &count);
      float mean = count ? sum / (float)count : 0.0f;
      gs_q_store(t, k->ptr[c->n_in], p * out_plane + j, gs_q_round(mean / y.scale, lo, hi) + y.zero);
    }
  return 0;
}

/* Each input requantised to Y's scale and zero point, copied where they agree. */
static int k_qlinear_concat(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  if (gs_shape_numel(&c->out[0].shape) == 0)
    return 0;
  int axis = ((const gs_quant_attrs *)c->attrs)->axis;
  gs_dtype t = c->in[1].dtype;
  qparams y = params(c, k, 0, 1, t);
  int64_t outer, total, inner;
  gs_launch_split_axis(&c->out[0].shape, axis, &outer, &total, &inner);
  uint8_t *out = k->ptr[c->n_in];
  int64_t at = 0; /* along the axis */
  for (int i = 2; i < c->n_in; i += 3) {
    qparams x = params(c, k, i + 1, i + 2, t);
    int64_t len = c->in[i].shape.dims[axis] * inner;
    const uint8_t *in = k->ptr[i];
    bool same = x.scale == y.scale && x.zero == y.zero;
    for (int64_t o = 0; o < outer; o++) {
      uint8_t *dst = out + o * total * inner + at * inner;
      if (same) {
        if (len)
          memcpy(dst, in + o * len, (size_t)len);
        continue;
      }
      for (int64_t j = 0; j < len; j++)
        gs_q_store(t, dst, j,
                   quantize((float)(gs_q_load(t, in, o * len + j) - x.zero) * x.scale, y, t));
    }
    at += c->in[i].shape.dims[axis];
  }
  return 0;
}

static const gs_cpu_kernel_entry kernels[] = {
    GS_CPU_KERNEL("DynamicQuantizeLinear", k_dynamic_quantize),
    GS_CPU_KERNEL("QLinearAdd", k_qlinear_add),
    GS_CPU_KERNEL("QLinearMul", k_qlinear_mul),
    GS_CPU_KERNEL("QLinearSigmoid", k_qlinear_sigmoid),
    GS_CPU_KERNEL("QLinearLeakyRelu", k_qlinear_leaky_relu),
    GS_CPU_KERNEL("QLinearSoftmax", k_qlinear_softmax),
    GS_CPU_KERNEL("QLinearGlobalAveragePool", k_qlinear_global_average_pool),
    GS_CPU_KERNEL("QLinearConcat", k_qlinear_concat),
    GS_CPU_KERNEL("QLinearAveragePool", k_qlinear_average_pool),
};

int gs__cpu_register_qlinear(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

/* k_quant.c - CPU kernels of QuantizeLinear and DequantizeLinear
 * (engine/ops/ops_quant.c): float32 to and from 8 bits per tensor or per
 * axis in vectorised loops (the quantised models' case), and the rest
 * (blocks, 16-bit types, float16 scales) in double, rounding halves to
 * even and saturating as ONNX asks. The integer ops are in
 * k_qgemm.c and k_qlinear.c. */
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/parallel.h"
#include "hal/cpu/ops/qmath.h"
#include "hal/op/op_launch.h"

/* ---- float32 <-> 8-bit, per tensor or per axis: the models' case ---------------------- */

/* The fast path's shape: float32 values and scales, 8-bit quantised ones,
 * no blocks. x is [outer, len, inner] with one scale per `len` (len 1:
 * per tensor). */
typedef struct qline {
  int64_t outer, len, inner;
  const float *scale; /* per axis; NULL: per tensor, one_scale */
  float one_scale;
  const void *zero; /* NULL: 0 */
  gs_dtype q;       /* int8 or uint8 */
} qline;

static bool fast_line(const gs_op_call *c, const gs_quant_attrs *a, gs_dtype f, gs_dtype q,
                      const gs_cpu_kernel_call *k, qline *l) {
  if (f != GS_DT_FLOAT32 || c->in[1].dtype != GS_DT_FLOAT32 || a->block_size != 0 ||
      (q != GS_DT_INT8 && q != GS_DT_UINT8))
    return false;
  *l = (qline){.scale = k->ptr[1], .zero = c->n_in > 2 && c->in[2].dtype != GS_DT_INVALID
                                               ? k->ptr[2] : NULL, .q = q};
  if (gs_shape_numel(&c->in[1].shape) == 1) {
    l->outer = l->inner = 1;
    l->len = gs_shape_numel(&c->in[0].shape);
    l->one_scale = *l->scale;
    l->scale = NULL;
  } else {
    gs_launch_split_axis(&c->in[0].shape, a->axis, &l->outer, &l->len, &l->inner);
  }
  return true;
}

/* x / scale in float32, rounded half to even, plus the zero point,
 * saturated: onnxruntime's arithmetic. */
GS_VECTOR_CLONES
static void quantize_run(const float *x, void *y, int64_t n, float scale, int32_t zero,
                         gs_dtype q) {
  int32_t lo = gs_q_lo(q) - zero, hi = gs_q_hi(q) - zero;
  if (q == GS_DT_UINT8) {
    uint8_t *out = y;
    for (int64_t i = 0; i < n; i++)
      out[i] = (uint8_t)(gs_q_round(x[i] / scale, lo, hi) + zero);
  } else {
    int8_t *out = y;
    for (int64_t i = 0; i < n; i++)
      out[i] = (int8_t)(gs_q_round(x[i] / scale, lo, hi) + zero);
  }
}

GS_VECTOR_CLONES
void gs__q_dequantize(const void *x, float *y, int64_t n, float scale, int32_t zero, gs_dtype q) {
  if (q == GS_DT_UINT8) {
    const uint8_t *in = x;
    for (int64_t i = 0; i < n; i++)
      y[i] = (float)((int32_t)in[i] - zero) * scale;
  } else {
    const int8_t *in = x;
    for (int64_t i = 0; i < n; i++)
      y[i] = (float)((int32_t)in[i] - zero) * scale;
  }
}

/* Elements [lo, hi) of a per-tensor tensor, or lines [lo, hi) of
 * [outer * len] lines of `inner` elements with a scale each. */
static void tensor_piece(const qline *l, bool quantize, const void *in, void *out, int64_t lo,
                         int64_t hi) {
  int32_t zero = gs_q_load(l->q, l->zero, 0);
  if (quantize)
    quantize_run((const float *)in + lo, (uint8_t *)out + lo, hi - lo, l->one_scale, zero, l->q);
  else
    gs__q_dequantize((const uint8_t *)in + lo, (float *)out + lo, hi - lo, l->one_scale, zero, l->q);
}

static void lines(const qline *l, bool quantize, const void *in, void *out, int64_t lo,
                  int64_t hi) {
  for (int64_t r = lo; r < hi; r++) {
    int64_t s = r % l->len, at = r * l->inner;
    int32_t zero = gs_q_load(l->q, l->zero, s);
    if (quantize)
      quantize_run((const float *)in + at, (uint8_t *)out + at, l->inner, l->scale[s], zero, l->q);
    else
      gs__q_dequantize((const uint8_t *)in + at, (float *)out + at, l->inner, l->scale[s], zero,
                     l->q);
  }
}

static void run_lines(const qline *l, bool quantize, const void *in, void *out) {
  if (l->outer * l->len * l->inner == 0)
    return; /* empty: no buffers to offset */
  if (!l->scale)
    GS_PARALLEL_RANGES(l->len, GS_PARALLEL_GRAIN, lo, hi, tensor_piece(l, quantize, in, out, lo, hi));
  else
    GS_PARALLEL_RANGES(l->outer * l->len, GS_PARALLEL_GRAIN / (l->inner + 1) + 1, lo, hi,
                       lines(l, quantize, in, out, lo, hi));
}

/* The scale (and zero point) index of element i of x. */
static int64_t scale_index(const gs_op_call *c, const gs_quant_attrs *a, int64_t i) {
  int64_t n = gs_shape_numel(&c->in[1].shape);
  if (n == 1)
    return 0;
  int64_t outer, len, inner;
  gs_launch_split_axis(&c->in[0].shape, a->axis, &outer, &len, &inner);
  int64_t along = (i / inner) % len;
  if (a->block_size == 0)
    return along;
  int64_t blocks = (len + a->block_size - 1) / a->block_size;
  return ((i / (inner * len)) * blocks + along / a->block_size) * inner + i % inner;
}

static int k_quantize(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_quant_attrs *a = c->attrs;
  qline l;
  if (fast_line(c, a, c->in[0].dtype, c->out[0].dtype, k, &l)) {
    run_lines(&l, true, k->ptr[0], k->ptr[c->n_in]);
    return 0;
  }
  int64_t n = gs_shape_numel(&c->in[0].shape);
  bool zp = c->n_in > 2 && c->in[2].dtype != GS_DT_INVALID;
  for (int64_t i = 0; i < n; i++) {
    int64_t s = scale_index(c, a, i);
    double v = nearbyint(gs_ld(c->in[0].dtype, k->ptr[0], i) / gs_ld(c->in[1].dtype, k->ptr[1], s));
    if (zp)
      v += (double)gs_ldi(c->in[2].dtype, k->ptr[2], s);
    gs_st(c->out[0].dtype, k->ptr[c->n_in], i, v); /* saturates */
  }
  return 0;
}

static int k_dequantize(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_quant_attrs *a = c->attrs;
  qline l;
  if (fast_line(c, a, c->out[0].dtype, c->in[0].dtype, k, &l)) {
    run_lines(&l, false, k->ptr[0], k->ptr[c->n_in]);
    return 0;
  }
  int64_t n = gs_shape_numel(&c->in[0].shape);
  bool zp = c->n_in > 2 && c->in[2].dtype != GS_DT_INVALID;
  for (int64_t i = 0; i < n; i++) {
    int64_t s = scale_index(c, a, i);
    double v = (double)gs_ldi(c->in[0].dtype, k->ptr[0], i);
    if (zp)
      v -= (double)gs_ldi(c->in[2].dtype, k->ptr[2], s);
    gs_st(c->out[0].dtype, k->ptr[c->n_in], i, v * gs_ld(c->in[1].dtype, k->ptr[1], s));
  }
  return 0;
}

static const gs_cpu_kernel_entry kernels[] = {
    GS_CPU_KERNEL("QuantizeLinear", k_quantize),
    GS_CPU_KERNEL("DequantizeLinear", k_dequantize),
};

int gs__cpu_register_quant(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

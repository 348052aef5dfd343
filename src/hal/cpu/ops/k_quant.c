/* k_quant.c - CPU kernels of QuantizeLinear, DequantizeLinear and
 * QLinearMatMul (engine/ops/ops_quant.c): the reference arithmetic in
 * double, rounding halves to even and saturating as ONNX asks. The fused
 * int8 kernels of quantised models are the int8 issue's. */
#include "hal/cpu/ops/kernels.h"
#include "hal/op/op_launch.h"

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

static int k_qlinear_matmul(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_matmul_attrs *m = &((const gs_quant_attrs *)c->attrs)->matmul;
  gs_dtype ta = c->in[0].dtype, tb = c->in[3].dtype;
  bool row_a = gs_shape_numel(&c->in[1].shape) > 1, col_b = gs_shape_numel(&c->in[4].shape) > 1;
  double ys = gs_ld(c->in[6].dtype, k->ptr[6], 0);
  double yz = (double)gs_ldi(c->in[7].dtype, k->ptr[7], 0);
  for (int64_t b = 0; b < m->batch; b++) {
    int64_t oa, ob;
    gs_launch_matmul_offsets(m, b, &oa, &ob);
    for (int64_t i = 0; i < m->m; i++)
      for (int64_t j = 0; j < m->n; j++) {
        int64_t az = gs_ldi(ta, k->ptr[2], row_a ? i : 0), bz = gs_ldi(tb, k->ptr[5], col_b ? j : 0);
        int64_t acc = 0;
        for (int64_t p = 0; p < m->k; p++)
          acc += (gs_ldi(ta, k->ptr[0], oa + i * m->k + p) - az) *
                 (gs_ldi(tb, k->ptr[3], ob + p * m->n + j) - bz);
        double scale = gs_ld(c->in[1].dtype, k->ptr[1], row_a ? i : 0) *
                       gs_ld(c->in[4].dtype, k->ptr[4], col_b ? j : 0) / ys;
        gs_st(c->out[0].dtype, k->ptr[8], (b * m->m + i) * m->n + j,
              nearbyint((double)acc * scale) + yz);
      }
  }
  return 0;
}

static const gs_cpu_kernel_entry kernels[] = {
    GS_CPU_KERNEL("QuantizeLinear", k_quantize),
    GS_CPU_KERNEL("DequantizeLinear", k_dequantize),
    GS_CPU_KERNEL("QLinearMatMul", k_qlinear_matmul),
};

int gs__cpu_register_quant(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

/* k_quant.c - CPU kernels of QuantizeLinear and DequantizeLinear
 * (engine/ops/ops_quant.c): the reference arithmetic in double, rounding
 * halves to even and saturating as ONNX asks. The integer ops are in
 * k_qgemm.c and k_qlinear.c. */
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

static const gs_cpu_kernel_entry kernels[] = {
    GS_CPU_KERNEL("QuantizeLinear", k_quantize),
    GS_CPU_KERNEL("DequantizeLinear", k_dequantize),
};

int gs__cpu_register_quant(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

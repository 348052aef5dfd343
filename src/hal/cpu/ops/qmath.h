/* qmath.h - the arithmetic the quantised kernels share: rounding a float
 * to an 8-bit integer as ONNX asks (halves to even, saturating), 8-bit
 * loads, and the scale and zero point DynamicQuantizeLinear chooses. */
#ifndef GS_HAL_CPU_OPS_QMATH_H
#define GS_HAL_CPU_OPS_QMATH_H

#include "hal/op/tensor.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* v rounded half to even and clamped to [lo, hi]; NaN gives lo (as
 * x86's conversion does in onnxruntime). The value is clamped first, then
 * rounded by adding and taking away 1.5 * 2^23, which leaves the nearest
 * integer (ties to even) in the default rounding mode for |v| < 2^22: no
 * call into libm, and loops of it vectorise (the comparisons are written
 * so that NaN falls to lo without a test of its own, which would keep GCC
 * from vectorising them). */
static inline int32_t gs_q_round(float v, int32_t lo, int32_t hi) {
  v = v > (float)lo ? v : (float)lo;
  v = v < (float)hi ? v : (float)hi;
  return (int32_t)((v + 12582912.0f) - 12582912.0f);
}

static inline int32_t gs_q_lo(gs_dtype t) { return t == GS_DT_INT8 ? -128 : 0; }
static inline int32_t gs_q_hi(gs_dtype t) { return t == GS_DT_INT8 ? 127 : 255; }

/* Element i of an int8 or uint8 tensor; a missing tensor (an absent zero point) reads 0. */
static inline int32_t gs_q_load(gs_dtype t, const void *p, int64_t i) {
  if (!p)
    return 0;
  return t == GS_DT_INT8 ? ((const int8_t *)p)[i] : ((const uint8_t *)p)[i];
}

static inline void gs_q_store(gs_dtype t, void *p, int64_t i, int32_t v) {
  if (t == GS_DT_INT8)
    ((int8_t *)p)[i] = (int8_t)v;
  else
    ((uint8_t *)p)[i] = (uint8_t)v;
}

/* ONNX's quantisation of v: round(v / scale) + zero, saturated to t. */
static inline int32_t gs_q_quantize(float v, float scale, int32_t zero, gs_dtype t) {
  return gs_q_round(v / scale, gs_q_lo(t) - zero, gs_q_hi(t) - zero) + zero;
}

/* DynamicQuantizeLinear (k_qlinear.c): x[0..n) into y as uint8 over the
 * range of x widened to hold 0, in 255 steps (1 when the range is empty,
 * as onnxruntime does), with the zero point that maps 0 exactly. Returns
 * the scale, the zero point in *zero. */
float gs__q_dynamic_quantize(const float *x, int64_t n, uint8_t *y, uint8_t *zero);

/* n values of an int8 or uint8 tensor made unsigned (+ 128 for int8) and cut
 * in two, v = 128 hi + lo (hi in {0, 1}, lo in [0, 127]), products of which
 * with int8 cannot saturate where x86 sums pairs of them in int16; returns
 * the sum of the unsigned values (k_qlinear.c). */
int64_t gs__q_split(gs_dtype t, const void *a, int64_t n, uint8_t *hi, uint8_t *lo);

/* n uint8 values moved down by 128 into int8 (x - 128: the top bit
 * flipped), as oneDNN takes weights and B (k_qlinear.c). */
void gs__q_flip(const uint8_t *x, int8_t *y, int64_t n);

/* DequantizeLinear of n values of 8-bit type q: (x - zero) * scale, in
 * float32 (k_quant.c); with scale 1, the values less their zero point. */
void gs__q_dequantize(const void *x, float *y, int64_t n, float scale, int32_t zero, gs_dtype q);

#endif

/* dnnl_qmatmul.h - int8 products with a constant B through oneDNN's matmul. */
#ifndef GS_HAL_CPU_OPS_DNNL_QMATMUL_H
#define GS_HAL_CPU_OPS_DNNL_QMATMUL_H

#include "hal/op/op_call.h"

#include <stdint.h>

/* C[m, n] (int32) = (A[m, k] - a_zero) (B - b_zero), A uint8 or int8 (a_signed),
 * B int8 stored [k, n], or [n, k] when trans_b. b_const: B stays the same
 * buffer with the same values between runs (a weight), so that its packed
 * copy is kept. */
typedef struct gs_qmatmul_shape {
  int64_t m, k, n;
  int32_t a_zero, b_zero;
  bool a_signed, trans_b, b_const;
} gs_qmatmul_shape;

/* Sets *done when oneDNN computed `out`; leaves it false where it cannot
 * (the caller computes it another way). Returns a GS_E code only when
 * oneDNN started and failed. The primitive lives in c->state. */
int gs__dnnl_qmatmul(const gs_op_call *c, const gs_qmatmul_shape *q, const void *a,
                     const int8_t *b, int32_t *out, bool *done);

#endif

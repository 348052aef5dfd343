/* sgemm_packed.h - float32 products whose B was packed when the plan was
 * made (hal/op/op_packed.h): the CPU's Gemm and MatMul with constant
 * weights. */
#ifndef GS_HAL_CPU_OPS_SGEMM_PACKED_H
#define GS_HAL_CPU_OPS_SGEMM_PACKED_H

#include <stdint.h>

/* Row-major C [m, n] = alpha A B + beta C, with A [m, k] (lda) and B [k, n]
 * packed. Each value of C is summed over k in one fixed order, whatever
 * the threads. */
void gs__sgemm_packed(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                      const float *packed, float beta, float *c, int64_t ldc);

#endif

/* op_packed.h - the packed layout of a product's constant B, part of the
 * op ABI: a plan stores the weights of a Gemm or MatMul this way, once,
 * on a device whose caps say `packed_products`, and sets the op's
 * `b_packed`; that device's kernel reads B only this way.
 *
 * B [k, n] is cut into panels of GS_PACKED_PANEL columns, the last padded
 * with zeros; a panel's k rows follow each other, so that a product walks
 * each panel front to back, one cache line per row of B: packed
 * [ceil(n / GS_PACKED_PANEL)][k][GS_PACKED_PANEL]. */
#ifndef GS_HAL_OP_OP_PACKED_H
#define GS_HAL_OP_OP_PACKED_H

#include <stdbool.h>
#include <stdint.h>

#define GS_PACKED_PANEL 16
/* Rows of A above which a plan leaves B plain: the CPU's packed kernel
 * was slower than oneDNN's sgemm there (sgemm_packed.c). */
#define GS_PACKED_MAX_ROWS 256

/* Floats that B [k, n] takes packed (panels of a whole GS_PACKED_PANEL). */
static inline int64_t gs_packed_floats(int64_t k, int64_t n) {
  return (n + GS_PACKED_PANEL - 1) / GS_PACKED_PANEL * GS_PACKED_PANEL * k;
}

/* Writes B packed into `packed` (gs_packed_floats(k, n) floats, the
 * caller's): B is [k, n], or [n, k] with trans_b. */
void gs_pack_b(const float *b, bool trans_b, int64_t k, int64_t n, float *packed);

#endif

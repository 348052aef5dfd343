/* transpose_2d.h - the 2-D transpose of four-byte values that NCHW <-> NHWC
 * comes down to (ConvNeXt's permutes around LayerNorm, any channels-last
 * model's edges), tile by tile of 32x32 values so that the lines read and
 * written stay in L1; within a tile, 8x8 blocks in vector registers where
 * the CPU has AVX2, one value at a time otherwise. A row at a time reads one
 * cache line per value from the side that strides. */
#ifndef GS_HAL_CPU_OPS_TRANSPOSE_2D_H
#define GS_HAL_CPU_OPS_TRANSPOSE_2D_H

#include <stdint.h>

/* Rows of the output that one unit of work covers at most: a multiple of 8. */
#define GS_TRANSPOSE_BAND 32

/* Output rows [row_lo, row_hi) of y = x transposed: y[i * n + j] =
 * x[i + j * step] for i < m, j < n (x's rows are `step` values apart, and
 * step >= m). Both pointers are the caller's; nothing is allocated. */
void gs__transpose_2d_4(const uint32_t *x, uint32_t *y, int64_t m, int64_t n, int64_t step,
                        int64_t row_lo, int64_t row_hi);

/* `outer` such transposes, whole, over the calling thread's team: the b-th
 * reads x + b * outer_step and writes y + b * m * n. */
void gs__transpose_batch_4(const uint32_t *x, uint32_t *y, int64_t outer, int64_t m, int64_t n,
                           int64_t step, int64_t outer_step);

#endif

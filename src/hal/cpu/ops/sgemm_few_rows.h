/* sgemm_few_rows.h - float32 products of a few rows (batch 2 to a few) with
 * a large B, such as a layer's weights. oneDNN's sgemm packs B on every
 * call above one row, which there costs more than the product: a batch of
 * two rows through a 2048 x 2048 layer took twice the time of one. Here B
 * is read once, each of its values used for every row. A constant B (a
 * layer's weights) is packed when planned and goes to sgemm_packed.h
 * instead; this is for a B that a run computes. */
#ifndef GS_HAL_CPU_OPS_SGEMM_FEW_ROWS_H
#define GS_HAL_CPU_OPS_SGEMM_FEW_ROWS_H

#include <stdbool.h>
#include <stdint.h>

/* Rows of A up to which gs__sgemm_few_rows is used. */
#define GS_SGEMM_FEW_ROWS 8

/* Whether gs__sgemm_few_rows is the better way for these sizes: 2 to
 * GS_SGEMM_FEW_ROWS rows of A as stored (not transposed; up to 4 where B is
 * [n, k]), and a B large enough for its packing to count. */
bool gs__sgemm_few_rows_fits(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k);

/* Row-major C [m, n] = alpha A op(B) + beta C, with A [m, k] (lda) and B
 * [k, n] or, with trans_b, [n, k] (ldb). Each value of C is summed over k
 * in one fixed order, whatever the threads. */
void gs__sgemm_few_rows(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                        float *c, int64_t ldc);

#endif

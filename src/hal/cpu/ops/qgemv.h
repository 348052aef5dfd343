/* qgemv.h - exact 8-bit products of a few rows (batch 1 to a few) with a
 * constant int8 B, for x86 CPUs with AVX2 but no VNNI. There oneDNN's u8 x
 * s8 kernels saturate (dnnl_conv.h), and its GEMM packs B again on every
 * call, which at one row costs more than the product. Here B is packed
 * once, rows of it in pairs, and each pair of products is summed in int32
 * by vpmaddwd on int16 values, which cannot saturate. */
#ifndef GS_HAL_CPU_OPS_QGEMV_H
#define GS_HAL_CPU_OPS_QGEMV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Rows of A up to which gs__qgemv is the faster way: at 1024 x 2048 on one
 * AMD EPYC core, 0.75x the two oneDNN GEMMs' time at 8 rows, 1.1x at 16. */
#define GS_QGEMV_MAX_ROWS 8

/* Whether this CPU runs gs__qgemv (x86-64 with AVX2). */
bool gs__qgemv_available(void);

/* Bytes of B [k, n] packed. */
size_t gs__qgemv_packed_size(int64_t k, int64_t n);

/* B (int8, [k, n], or [n, k] when trans_b) into `packed`, which has
 * gs__qgemv_packed_size(k, n) bytes (the caller's). */
void gs__qgemv_pack(const int8_t *b, bool trans_b, int64_t k, int64_t n, int8_t *packed);

/* c[m, n] (int32) = A B, exactly: A [m, k] uint8 or int8 (a_signed) as
 * stored, B packed. Zero points are the caller's to take away. False when
 * out of memory (or not available), c then unwritten. */
bool gs__qgemv(const void *a, bool a_signed, int64_t m, int64_t k, int64_t n,
               const int8_t *packed, int32_t *c);

#endif

/* sgemm_few_rows.c - float32 products of a few rows with B read once
 * (sgemm_few_rows.h). The columns of C are cut among the stream's threads.
 *
 * B [k, n]: four rows of B at a time stream past, each vector of them
 * multiplied into the same columns of up to four rows of C, which are read
 * and written once per four rows of B. B [n, k]: tiles of four rows of A by
 * two rows of B, their dot products in registers.
 *
 * Measured on one AMD EPYC core (2048 x 2048, AVX2, against oneDNN 2.7's
 * sgemm): B [k, n] at 2, 4 and 8 rows 0.74, 0.81 and 1.96 ms against 2.28,
 * 2.09 and 3.85; B [n, k] at 2 and 4 rows 0.61 and 1.86 ms against 1.53 and
 * 2.36, and slower than oneDNN from 8 rows. (oneDNN's figures here are
 * for a B 16 bytes off a cache line; on B 64-byte aligned its sgemm took
 * 1.1-1.2, 1.1-1.3 and 2.0-2.4 ms at 2, 4 and 8 rows, bench/RESULTS.md.) */
#include "hal/cpu/ops/sgemm_few_rows.h"

#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/parallel.h"

/* B below this many values: oneDNN's packing is cheap, and its blocking of
 * the product better. */
#define MIN_B_VALUES (256 * 1024)
/* Rows of A up to which B [n, k] is faster this way. */
#define NT_MAX_ROWS 4

/* Eight floats: one AVX register (two SSE ones in the baseline clone). */
typedef float v8 __attribute__((vector_size(32), aligned(4)));

bool gs__sgemm_few_rows_fits(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k) {
  return !trans_a && m >= 2 && m <= (trans_b ? NT_MAX_ROWS : GS_SGEMM_FEW_ROWS) &&
         n * k >= MIN_B_VALUES;
}

/* ---- B [k, n] ---------------------------------------------------------------------- */

/* C[0..ROWS)[lo, hi) += alpha A[0..ROWS)[p .. p+4) B[p .. p+4)[lo, hi).
 * ROWS is a constant where it is inlined, so that its loops unroll. */
static inline __attribute__((always_inline)) void four_rows_of_b(
    const int rows, int64_t lo, int64_t hi, int64_t p, float alpha, const float *a, int64_t lda,
    const float *b, int64_t ldb, float *c, int64_t ldc) {
  float av[4][4];
  for (int i = 0; i < rows; i++)
    for (int q = 0; q < 4; q++)
      av[i][q] = alpha * a[i * lda + p + q];
  const float *b0 = b + p * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
  int64_t j = lo;
  for (; j + 8 <= hi; j += 8) {
    v8 x0 = *(const v8 *)(b0 + j), x1 = *(const v8 *)(b1 + j), x2 = *(const v8 *)(b2 + j),
       x3 = *(const v8 *)(b3 + j);
    for (int i = 0; i < rows; i++) {
      v8 *s = (v8 *)(c + i * ldc + j);
      *s += av[i][0] * x0 + av[i][1] * x1 + av[i][2] * x2 + av[i][3] * x3;
    }
  }
  for (; j < hi; j++)
    for (int i = 0; i < rows; i++)
      c[i * ldc + j] += av[i][0] * b0[j] + av[i][1] * b1[j] + av[i][2] * b2[j] + av[i][3] * b3[j];
}

/* The same for one row of B (the last k % 4). */
static void one_row_of_b(int rows, int64_t lo, int64_t hi, int64_t p, float alpha,
                         const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
                         int64_t ldc) {
  for (int i = 0; i < rows; i++) {
    float av = alpha * a[i * lda + p];
    for (int64_t j = lo; j < hi; j++)
      c[i * ldc + j] += av * b[p * ldb + j];
  }
}

GS_VECTOR_CLONES static void columns_nn(int64_t m, int64_t lo, int64_t hi, int64_t k,
                                        float alpha, const float *a, int64_t lda,
                                        const float *b, int64_t ldb, float beta, float *c,
                                        int64_t ldc) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = lo; j < hi; j++)
      c[i * ldc + j] = beta != 0.0f ? beta * c[i * ldc + j] : 0.0f;
  for (int64_t i0 = 0; i0 < m; i0 += 4) { /* B read once per four rows of A */
    int rows = m - i0 < 4 ? (int)(m - i0) : 4;
    const float *ai = a + i0 * lda;
    float *ci = c + i0 * ldc;
    int64_t p = 0;
    for (; p + 4 <= k; p += 4) {
      switch (rows) {
      case 1: four_rows_of_b(1, lo, hi, p, alpha, ai, lda, b, ldb, ci, ldc); break;
      case 2: four_rows_of_b(2, lo, hi, p, alpha, ai, lda, b, ldb, ci, ldc); break;
      case 3: four_rows_of_b(3, lo, hi, p, alpha, ai, lda, b, ldb, ci, ldc); break;
      default: four_rows_of_b(4, lo, hi, p, alpha, ai, lda, b, ldb, ci, ldc); break;
      }
    }
    for (; p < k; p++)
      one_row_of_b(rows, lo, hi, p, alpha, ai, lda, b, ldb, ci, ldc);
  }
}

/* ---- B [n, k] ---------------------------------------------------------------------- */

/* By address: a vector passed by value changes the ABI between the clones. */
static inline float lanes_sum(const v8 *v) {
  float s = 0.0f;
  for (int l = 0; l < 8; l++)
    s += (*v)[l];
  return s;
}

/* C[0..ROWS)[j .. j+COLS) from A's rows dotted with B's rows j ..; ROWS and
 * COLS are constants where it is inlined. */
static inline __attribute__((always_inline)) void tile_nt(
    const int rows, const int cols, int64_t j, int64_t k, float alpha, const float *a,
    int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  v8 acc[4][2];
  for (int i = 0; i < rows; i++)
    for (int q = 0; q < cols; q++)
      acc[i][q] = (v8){0};
  int64_t p = 0;
  for (; p + 8 <= k; p += 8) {
    v8 bv[2];
    for (int q = 0; q < cols; q++)
      bv[q] = *(const v8 *)(b + (j + q) * ldb + p);
    for (int i = 0; i < rows; i++) {
      v8 av = *(const v8 *)(a + i * lda + p);
      for (int q = 0; q < cols; q++)
        acc[i][q] += av * bv[q];
    }
  }
  for (int i = 0; i < rows; i++)
    for (int q = 0; q < cols; q++) {
      float s = lanes_sum(&acc[i][q]);
      for (int64_t r = p; r < k; r++)
        s += a[i * lda + r] * b[(j + q) * ldb + r];
      float *cij = c + i * ldc + j + q;
      *cij = alpha * s + (beta != 0.0f ? beta * *cij : 0.0f);
    }
}

GS_VECTOR_CLONES static void columns_nt(int64_t m, int64_t lo, int64_t hi, int64_t k,
                                        float alpha, const float *a, int64_t lda,
                                        const float *b, int64_t ldb, float beta, float *c,
                                        int64_t ldc) {
  for (int64_t i0 = 0; i0 < m; i0 += 4) {
    int rows = m - i0 < 4 ? (int)(m - i0) : 4;
    const float *ai = a + i0 * lda;
    float *ci = c + i0 * ldc;
    int64_t j = lo;
    for (; j + 2 <= hi; j += 2) {
      switch (rows) {
      case 1: tile_nt(1, 2, j, k, alpha, ai, lda, b, ldb, beta, ci, ldc); break;
      case 2: tile_nt(2, 2, j, k, alpha, ai, lda, b, ldb, beta, ci, ldc); break;
      case 3: tile_nt(3, 2, j, k, alpha, ai, lda, b, ldb, beta, ci, ldc); break;
      default: tile_nt(4, 2, j, k, alpha, ai, lda, b, ldb, beta, ci, ldc); break;
      }
    }
    for (; j < hi; j++)
      for (int i = 0; i < rows; i++)
        tile_nt(1, 1, j, k, alpha, ai + i * lda, lda, b, ldb, beta, ci + i * ldc, ldc);
  }
}

/* Columns [16 lo, 16 hi) of C, the last piece ending at n. */
static void columns(bool trans_b, int64_t m, int64_t n, int64_t lo, int64_t hi, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float beta, float *c, int64_t ldc) {
  int64_t j0 = lo * 16, j1 = hi * 16 < n ? hi * 16 : n;
  if (trans_b)
    columns_nt(m, j0, j1, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    columns_nn(m, j0, j1, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gs__sgemm_few_rows(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                        float *c, int64_t ldc) {
  /* Pieces of at least 256 columns, cut on 16-column boundaries. */
  GS_PARALLEL_RANGES((n + 15) / 16, 16, lo, hi,
                     columns(trans_b, m, n, lo, hi, k, alpha, a, lda, b, ldb, beta, c, ldc));
}

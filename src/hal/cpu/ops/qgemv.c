/* qgemv.c - exact int8 products of a few rows on AVX2 (qgemv.h).
 *
 * B is packed in blocks of 16 columns; inside a block, rows come in pairs
 * (2p, 2p + 1), and each column's two values lie side by side: 32 bytes
 * per pair of rows. Sign-extended to int16, 16 of those bytes are 8
 * columns' pairs, and vpmaddwd with A's two values broadcast gives each
 * column a0 b0 + a1 b1 in int32. Up to four rows of A share each load of
 * B, their sums kept in registers over the whole of k. */
#include "hal/cpu/ops/qgemv.h"

#include "hal/cpu/ops/parallel.h"

#include <stdlib.h>
#include <string.h>

#define BLOCK 16 /* columns per block */
#define ROWS 4   /* rows of A per pass over a block */

static int64_t pairs_of(int64_t k) { return (k + 1) / 2; }
static int64_t blocks_of(int64_t n) { return (n + BLOCK - 1) / BLOCK; }

size_t gs__qgemv_packed_size(int64_t k, int64_t n) {
  return (size_t)(blocks_of(n) * pairs_of(k) * 2 * BLOCK);
}

void gs__qgemv_pack(const int8_t *b, bool trans_b, int64_t k, int64_t n, int8_t *packed) {
  int64_t kp = pairs_of(k);
  memset(packed, 0, gs__qgemv_packed_size(k, n)); /* the padding: rows past k, columns past n */
  for (int64_t p = 0; p < k; p++)
    for (int64_t j = 0; j < n; j++) {
      int64_t block = j / BLOCK, col = j % BLOCK;
      packed[((block * kp + p / 2) * BLOCK + col) * 2 + p % 2] = b[trans_b ? j * k + p : p * n + j];
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

bool gs__qgemv_available(void) { return __builtin_cpu_supports("avx2"); }

/* Row r's values two by two, as int16 pairs in one int32 each (k odd: the last with 0). */
static void pair_rows(const void *a, bool a_signed, int64_t m, int64_t k, uint32_t *pairs) {
  int64_t kp = pairs_of(k);
  for (int64_t i = 0; i < m; i++)
    for (int64_t q = 0; q < kp; q++) {
      int64_t p = 2 * q;
      int32_t lo = a_signed ? ((const int8_t *)a)[i * k + p] : ((const uint8_t *)a)[i * k + p];
      int32_t hi = p + 1 >= k ? 0
                   : a_signed ? ((const int8_t *)a)[i * k + p + 1]
                              : ((const uint8_t *)a)[i * k + p + 1];
      pairs[i * kp + q] = (uint32_t)(uint16_t)(int16_t)lo | (uint32_t)(uint16_t)(int16_t)hi << 16;
    }
}

/* `rows` rows of A (their pairs, kp each) times one block of B into c
 * (row stride n), `cols` of the block's columns written. */
__attribute__((target("avx2"), always_inline)) static inline void
block_product(const uint32_t *pairs, int rows, int64_t kp, const int8_t *block, int32_t *c,
              int64_t n, int64_t cols) {
  __m256i acc[ROWS][2];
  for (int r = 0; r < rows; r++)
    acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  for (int64_t q = 0; q < kp; q++) {
    const int8_t *at = block + q * 2 * BLOCK;
    __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)at));
    __m256i b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(at + BLOCK)));
    for (int r = 0; r < rows; r++) {
      __m256i av = _mm256_set1_epi32((int32_t)pairs[r * kp + q]);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(b0, av));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(b1, av));
    }
  }
  for (int r = 0; r < rows; r++) {
    int32_t sums[BLOCK];
    _mm256_storeu_si256((__m256i *)sums, acc[r][0]);
    _mm256_storeu_si256((__m256i *)(sums + 8), acc[r][1]);
    memcpy(c + r * n, sums, sizeof *sums * (size_t)cols);
  }
}

/* Blocks [lo, hi) of B for every row of A. The row count is a constant in
 * each call of block_product, so that its sums stay in registers. */
__attribute__((target("avx2"))) static void blocks(const uint32_t *pairs, int64_t m, int64_t kp,
                                                   const int8_t *packed, int32_t *c, int64_t n,
                                                   int64_t lo, int64_t hi) {
  for (int64_t jb = lo; jb < hi; jb++) {
    const int8_t *block = packed + jb * kp * 2 * BLOCK;
    int64_t j = jb * BLOCK, cols = n - j < BLOCK ? n - j : BLOCK;
    for (int64_t i = 0; i < m; i += ROWS) {
      const uint32_t *p = pairs + i * kp;
      int32_t *ci = c + i * n + j;
      switch (m - i < ROWS ? m - i : ROWS) {
      case 1: block_product(p, 1, kp, block, ci, n, cols); break;
      case 2: block_product(p, 2, kp, block, ci, n, cols); break;
      case 3: block_product(p, 3, kp, block, ci, n, cols); break;
      default: block_product(p, ROWS, kp, block, ci, n, cols); break;
      }
    }
  }
}

bool gs__qgemv(const void *a, bool a_signed, int64_t m, int64_t k, int64_t n,
               const int8_t *packed, int32_t *c) {
  int64_t kp = pairs_of(k), nb = blocks_of(n);
  uint32_t *pairs = malloc(sizeof *pairs * (size_t)(m * kp + 1));
  if (!pairs)
    return false;
  pair_rows(a, a_signed, m, k, pairs);
  /* pieces of at least ~1M multiply-adds each */
  int64_t grain = (int64_t)(1 << 20) / (m * kp * 2 * BLOCK + 1) + 1;
  GS_PARALLEL_RANGES(nb, grain, lo, hi, blocks(pairs, m, kp, packed, c, n, lo, hi));
  free(pairs);
  return true;
}

#else

bool gs__qgemv_available(void) { return false; }

bool gs__qgemv(const void *a, bool a_signed, int64_t m, int64_t k, int64_t n,
               const int8_t *packed, int32_t *c) {
  (void)a, (void)a_signed, (void)m, (void)k, (void)n, (void)packed, (void)c;
  return false;
}

#endif

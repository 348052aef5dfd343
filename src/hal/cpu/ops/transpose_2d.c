/* transpose_2d.c - see transpose_2d.h. */
#include "hal/cpu/ops/transpose_2d.h"

#include "hal/cpu/ops/parallel.h"

#include <stdbool.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#endif

/* Columns a tile spans: with GS_TRANSPOSE_BAND rows, the lines read and the
 * lines written stay in L1. */
#define TILE_COLS 32

static void tile_scalar(const uint32_t *x, uint32_t *y, int64_t n, int64_t step, int64_t i0,
                        int64_t i1, int64_t j0, int64_t j1) {
  for (int64_t i = i0; i < i1; i++)
    for (int64_t j = j0; j < j1; j++)
      y[i * n + j] = x[i + j * step];
}

#ifdef HAVE_AVX2_PATH
/* One 8x8 block: eight runs of 8 values, `sx` apart in x, become eight
 * runs `sy` apart in y. The usual unpack / shuffle / lane-swap sequence. */
__attribute__((target("avx2"), always_inline)) static inline void
block8(const uint32_t *x, int64_t sx, uint32_t *y, int64_t sy) {
  const float *xf = (const float *)x;
  float *yf = (float *)y;
  __m256 r[8], t[8], s[8];
  for (int k = 0; k < 8; k++)
    r[k] = _mm256_loadu_ps(xf + k * sx);
  for (int k = 0; k < 4; k++) {
    t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  for (int h = 0; h < 2; h++) { /* rows 0-3 and 4-7 of the source */
    __m256 *a = t + 4 * h, *o = s + 4 * h;
    o[0] = _mm256_shuffle_ps(a[0], a[2], 0x44);
    o[1] = _mm256_shuffle_ps(a[0], a[2], 0xEE);
    o[2] = _mm256_shuffle_ps(a[1], a[3], 0x44);
    o[3] = _mm256_shuffle_ps(a[1], a[3], 0xEE);
  }
  for (int k = 0; k < 4; k++) {
    _mm256_storeu_ps(yf + k * sy, _mm256_permute2f128_ps(s[k], s[k + 4], 0x20));
    _mm256_storeu_ps(yf + (k + 4) * sy, _mm256_permute2f128_ps(s[k], s[k + 4], 0x31));
  }
}

__attribute__((target("avx2"))) static void tile_avx2(const uint32_t *x, uint32_t *y, int64_t n,
                                                      int64_t step, int64_t i0, int64_t i1,
                                                      int64_t j0, int64_t j1) {
  int64_t i = i0;
  for (; i + 8 <= i1; i += 8) {
    int64_t j = j0;
    for (; j + 8 <= j1; j += 8)
      block8(x + i + j * step, step, y + i * n + j, n);
    tile_scalar(x, y, n, step, i, i + 8, j, j1);
  }
  tile_scalar(x, y, n, step, i, i1, j0, j1);
}
#endif

void gs__transpose_2d_4(const uint32_t *x, uint32_t *y, int64_t m, int64_t n, int64_t step,
                        int64_t row_lo, int64_t row_hi) {
  if (row_hi > m)
    row_hi = m;
#ifdef HAVE_AVX2_PATH
  bool avx2 = __builtin_cpu_supports("avx2");
#endif
  for (int64_t i0 = row_lo; i0 < row_hi; i0 += GS_TRANSPOSE_BAND) {
    int64_t i1 = i0 + GS_TRANSPOSE_BAND < row_hi ? i0 + GS_TRANSPOSE_BAND : row_hi;
    for (int64_t j0 = 0; j0 < n; j0 += TILE_COLS) {
      int64_t j1 = j0 + TILE_COLS < n ? j0 + TILE_COLS : n;
#ifdef HAVE_AVX2_PATH
      if (avx2) {
        tile_avx2(x, y, n, step, i0, i1, j0, j1);
        continue;
      }
#endif
      tile_scalar(x, y, n, step, i0, i1, j0, j1);
    }
  }
}

/* Units [lo, hi) of a batch of 2-D transposes, a unit being one band of
 * `band` output rows of one of the `outer` transposes. */
static void transpose_bands(const uint32_t *x, uint32_t *y, int64_t m, int64_t n, int64_t step,
                            int64_t outer_step, int64_t band, int64_t lo, int64_t hi) {
  int64_t bands = (m + band - 1) / band;
  for (int64_t u = lo; u < hi; u++) {
    int64_t b = u / bands, row = u % bands * band;
    gs__transpose_2d_4(x + b * outer_step, y + b * m * n, m, n, step, row, row + band);
  }
}

void gs__transpose_batch_4(const uint32_t *x, uint32_t *y, int64_t outer, int64_t m, int64_t n,
                           int64_t step, int64_t outer_step) {
  /* Narrower bands (down to one block) where wide ones would leave threads
   * without work: NHWC -> NCHW of 96 channels is three bands of 32. */
  int64_t band = GS_TRANSPOSE_BAND, threads = omp_get_max_threads();
  while (band > 8 && outer * ((m + band - 1) / band) < threads)
    band /= 2;
  int64_t units = outer * ((m + band - 1) / band);
  GS_PARALLEL_RANGES(units, GS_PARALLEL_GRAIN / (band * n) + 1, lo, hi,
                     transpose_bands(x, y, m, n, step, outer_step, band, lo, hi));
}

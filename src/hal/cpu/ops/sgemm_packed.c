/* sgemm_packed.c - products with B packed in panels of 16 columns
 * (sgemm_packed.h). A tile of up to six rows of C by one panel sums in
 * twelve 8-float registers over the whole of k (AVX2; with AVX-512, 12
 * rows by two panels, below), reading one row of the panel (one cache
 * line) and one value of each row of A per step; the
 * panels are cut among the stream's threads, rows taken 96 at a time so
 * that they stay in cache while the panels pass. From a few hundred rows
 * oneDNN's sgemm on B plain is faster (1.2x at 1024 rows; a BERT-base
 * layer at 512 rows 1.1-1.4x), with k blocked outermost as well, so the
 * plan packs B only for products of up to GS_PACKED_MAX_ROWS rows.
 *
 * Measured on the project's AMD EPYC VM (AVX2, oneDNN 2.6's sgemm on the
 * same B unpacked; one thread): 2048 x 2048 at 2, 8, 16 and 64 rows 0.67,
 * 1.46, 2.09 and 7.4 ms against 1.25, 2.11, 3.78 and 12.6; 768 x 3072 on
 * two threads, 0.11, 0.27 and 2.38 ms at 2, 8 and 64 rows against 0.33,
 * 0.72 and 4.36. */
#include "hal/cpu/ops/sgemm_packed.h"

#include "hal/cpu/ops/dnnl_conv.h"
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/parallel.h"
#include "hal/op/op_packed.h"

#define TILE_ROWS 6    /* rows of C per tile: 12 accumulators, 2 of B, 1 of A */
#define BLOCK_ROWS 96  /* rows of A that stay in cache while the panels pass */
#define K_BLOCK 256    /* values of k per pass of several rows: 16 KiB of a panel */
/* Floats of a panel read ahead of use, 8 KiB by a tile, 4 KiB by one row:
 * the hardware's prefetcher stops at each 4 KiB page; without this, one
 * row against a 2048 x 2048 B took twice oneDNN's time. */
#define PREFETCH 2048
#define ROW_PREFETCH 1024

/* Eight floats: one AVX register (two SSE ones in the baseline clone). */
typedef float v8 __attribute__((vector_size(32), aligned(4)));

/* *x in all eight lanes (a macro: a function returning a vector would
 * change its ABI with the clone's target). */
#define splat(x) ((v8){*(x), *(x), *(x), *(x), *(x), *(x), *(x), *(x)})

/* C[0..cols) = alpha t + beta C[0..cols): a row of sums stored. */
static inline __attribute__((always_inline)) void store_sums(const float *t, float alpha,
                                                             float beta, float *c, int cols) {
  if (beta == 0.0f)
    for (int j = 0; j < cols; j++)
      c[j] = alpha * t[j];
  else
    for (int j = 0; j < cols; j++)
      c[j] = alpha * t[j] + beta * c[j];
}

/* C[i][0..cols) = alpha sum[i] + beta C[i][0..cols) for a tile's row i. */
static inline __attribute__((always_inline)) void store_row(const v8 *lo, const v8 *hi,
                                                            float alpha, float beta, float *c,
                                                            int cols) {
  float t[GS_PACKED_PANEL];
  *(v8 *)t = *lo; /* by pointer: a vector argument's ABI depends on the clone's target */
  *(v8 *)(t + 8) = *hi;
  store_sums(t, alpha, beta, c, cols);
}

/* A tile of ROWS (1 to 6, a constant where inlined, so that every `if`
 * folds and the accumulators live in registers) by one panel. */
static inline __attribute__((always_inline)) void tile(const int rows, int64_t k, const float *a,
                                                       int64_t lda, const float *panel,
                                                       float alpha, float beta, float *c,
                                                       int64_t ldc, int cols) {
  v8 s0l = {0}, s0h = {0}, s1l = {0}, s1h = {0}, s2l = {0}, s2h = {0}, s3l = {0}, s3h = {0},
     s4l = {0}, s4h = {0}, s5l = {0}, s5h = {0};
  const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda,
              *a5 = a + 5 * lda;
  for (int64_t p = 0; p < k; p++) {
    v8 bl = *(const v8 *)(panel + p * GS_PACKED_PANEL);
    v8 bh = *(const v8 *)(panel + p * GS_PACKED_PANEL + 8);
    __builtin_prefetch(panel + p * GS_PACKED_PANEL + PREFETCH);
#define ROW(i)                 \
  if (rows > i) {              \
    v8 x = splat(a##i + p);    \
    s##i##l += x * bl;         \
    s##i##h += x * bh;         \
  }
    ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
  }
  v8 lo[TILE_ROWS] = {s0l, s1l, s2l, s3l, s4l, s5l}, hi[TILE_ROWS] = {s0h, s1h, s2h, s3h, s4h, s5h};
  for (int i = 0; i < rows; i++)
    store_row(&lo[i], &hi[i], alpha, beta, c + i * ldc, cols);
}

/* One row by one panel, or by two that follow each other (`two`, a
 * constant where inlined): two panels are two streams from memory, which
 * kept one row at oneDNN's speed where one stream fell behind. Even and odd
 * steps of k sum apart, so that a tile of one row does not wait on its
 * sums' latency; a panel's sums come out the same alone or in a pair, so
 * that how the threads cut the panels changes no bit. */
static inline __attribute__((always_inline)) void one_row(const bool two, int64_t k,
                                                          const float *a, const float *panel,
                                                          float alpha, float beta, float *c,
                                                          int cols, int cols_next) {
  v8 e0l = {0}, e0h = {0}, o0l = {0}, o0h = {0}, e1l = {0}, e1h = {0}, o1l = {0}, o1h = {0};
  const float *next = panel + k * GS_PACKED_PANEL;
  int64_t p = 0;
  for (; p + 2 <= k; p += 2) {
    const float *b0 = panel + p * GS_PACKED_PANEL, *b1 = next + p * GS_PACKED_PANEL;
    __builtin_prefetch(b0 + ROW_PREFETCH);
    __builtin_prefetch(b0 + ROW_PREFETCH + GS_PACKED_PANEL);
    if (two) {
      __builtin_prefetch(b1 + ROW_PREFETCH);
      __builtin_prefetch(b1 + ROW_PREFETCH + GS_PACKED_PANEL);
    }
    v8 x = splat(a + p), y = splat(a + p + 1);
    e0l += x * *(const v8 *)b0;
    e0h += x * *(const v8 *)(b0 + 8);
    o0l += y * *(const v8 *)(b0 + 16);
    o0h += y * *(const v8 *)(b0 + 24);
    if (two) {
      e1l += x * *(const v8 *)b1;
      e1h += x * *(const v8 *)(b1 + 8);
      o1l += y * *(const v8 *)(b1 + 16);
      o1h += y * *(const v8 *)(b1 + 24);
    }
  }
  if (p < k) {
    v8 x = splat(a + p);
    e0l += x * *(const v8 *)(panel + p * GS_PACKED_PANEL);
    e0h += x * *(const v8 *)(panel + p * GS_PACKED_PANEL + 8);
    if (two) {
      e1l += x * *(const v8 *)(next + p * GS_PACKED_PANEL);
      e1h += x * *(const v8 *)(next + p * GS_PACKED_PANEL + 8);
    }
  }
  v8 lo = e0l + o0l, hi = e0h + o0h;
  store_row(&lo, &hi, alpha, beta, c, cols);
  if (two) {
    lo = e1l + o1l, hi = e1h + o1h;
    store_row(&lo, &hi, alpha, beta, c + GS_PACKED_PANEL, cols_next);
  }
}

/* Rows [0, rows) of C against one panel, over k values of A and of the panel. */
static inline __attribute__((always_inline)) void panel_rows(int64_t rows, int64_t k,
                                                             const float *a, int64_t lda,
                                                             const float *panel, float alpha,
                                                             float beta, float *c, int64_t ldc,
                                                             int cols) {
  int64_t i = 0;
  for (; i + TILE_ROWS <= rows; i += TILE_ROWS)
    tile(6, k, a + i * lda, lda, panel, alpha, beta, c + i * ldc, ldc, cols);
  const float *ai = a + i * lda;
  float *ci = c + i * ldc;
  switch (rows - i) {
  case 5: tile(5, k, ai, lda, panel, alpha, beta, ci, ldc, cols); break;
  case 4: tile(4, k, ai, lda, panel, alpha, beta, ci, ldc, cols); break;
  case 3: tile(3, k, ai, lda, panel, alpha, beta, ci, ldc, cols); break;
  case 2: tile(2, k, ai, lda, panel, alpha, beta, ci, ldc, cols); break;
  case 1: one_row(false, k, ai, panel, alpha, beta, ci, cols, 0); break;
  default: break;
  }
}

/* Columns of C that panel q covers: all but in the last panel. */
static inline int panel_cols(int64_t n, int64_t q) {
  int64_t left = n - q * GS_PACKED_PANEL;
  return left < GS_PACKED_PANEL ? (int)left : GS_PACKED_PANEL;
}

/* Rows [0, rows) of C against panels [lo, hi). Several rows take k in
 * blocks of K_BLOCK, so that the block of the panel stays in L1 while
 * their tiles pass, and C sums the blocks' products in order. */
GS_VECTOR_CLONES static void panels(int64_t rows, int64_t n, int64_t k, float alpha,
                                    const float *a, int64_t lda, const float *packed, float beta,
                                    float *c, int64_t ldc, int64_t lo, int64_t hi) {
  if (rows == 1) { /* the whole of k, panels in pairs */
    int64_t q = lo;
    for (; q + 2 <= hi; q += 2)
      one_row(true, k, a, packed + q * k * GS_PACKED_PANEL, alpha, beta,
              c + q * GS_PACKED_PANEL, panel_cols(n, q), panel_cols(n, q + 1));
    if (q < hi)
      one_row(false, k, a, packed + q * k * GS_PACKED_PANEL, alpha, beta,
              c + q * GS_PACKED_PANEL, panel_cols(n, q), 0);
    return;
  }
  for (int64_t q = lo; q < hi; q++) {
    const float *panel = packed + q * k * GS_PACKED_PANEL;
    float *cq = c + q * GS_PACKED_PANEL;
    int cols = panel_cols(n, q);
    for (int64_t p = 0; p < k; p += K_BLOCK)
      panel_rows(rows, k - p < K_BLOCK ? k - p : K_BLOCK, a + p, lda, panel + p * GS_PACKED_PANEL,
                 alpha, p ? 1.0f : beta, cq, ldc, cols);
  }
}

#if defined(__GNUC__) && defined(__x86_64__)
/* ---- AVX-512: a panel's 16 columns in one register ----------------------------------
 * The tiles above hold eight floats a register, which is all of AVX2 but
 * half of AVX-512: on a Xeon with two 512-bit FMA units they ran a 128 x
 * 768 x 3072 product at 93 GFLOP/s on one core, onnxruntime's at 161. Here
 * a tile is TILE16_ROWS rows by one panel, a register per row; the values
 * are summed in the same order as above. Written apart (a target
 * attribute, chosen at run time) because the 16-float vectors would spill
 * in the AVX2 and baseline builds of the same source. */
#define AVX512 __attribute__((target("avx512f,avx512vl,fma")))
#define TILE16_ROWS 12 /* 24 accumulators for two panels, their B and A's broadcast: 27 of 32 */

typedef float v16 __attribute__((vector_size(64), aligned(4)));

#define splat16(x)                                                                          \
  ((v16){*(x), *(x), *(x), *(x), *(x), *(x), *(x), *(x), *(x), *(x), *(x), *(x), *(x), *(x), \
         *(x), *(x)})

/* C[0..cols) = alpha sum + beta C[0..cols) for one row of a tile16. */
static inline __attribute__((always_inline)) AVX512 void store_row16(v16 sum, float alpha,
                                                                     float beta, float *c,
                                                                     int cols) {
  if (cols == GS_PACKED_PANEL) { /* all but the last panel: whole registers */
    v16 *row = (v16 *)c;
    *row = beta == 0.0f ? alpha * sum : alpha * sum + beta * *row;
    return;
  }
  float t[GS_PACKED_PANEL];
  *(v16 *)t = sum;
  store_sums(t, alpha, beta, c, cols);
}

/* A tile of ROWS (1 to 12) by one panel, or by two that follow each other
 * (`two`): 24 accumulators share each broadcast of A, which keeps the FMA
 * units ahead of the loads. Both are constants where inlined. */
static inline __attribute__((always_inline)) AVX512 void tile16(const int rows, const bool two,
                                                                int64_t k, const float *a,
                                                                int64_t lda, const float *panel,
                                                                const float *panel2, float alpha,
                                                                float beta, float *c,
                                                                int64_t ldc, int cols,
                                                                int cols2) {
  v16 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, s4 = {0}, s5 = {0}, s6 = {0}, s7 = {0}, s8 = {0},
      s9 = {0}, s10 = {0}, s11 = {0};
  v16 t0 = {0}, t1 = {0}, t2 = {0}, t3 = {0}, t4 = {0}, t5 = {0}, t6 = {0}, t7 = {0}, t8 = {0},
      t9 = {0}, t10 = {0}, t11 = {0};
  for (int64_t p = 0; p < k; p++) {
    v16 b = *(const v16 *)(panel + p * GS_PACKED_PANEL), b2 = {0};
    __builtin_prefetch(panel + p * GS_PACKED_PANEL + PREFETCH);
    if (two) {
      b2 = *(const v16 *)(panel2 + p * GS_PACKED_PANEL);
      __builtin_prefetch(panel2 + p * GS_PACKED_PANEL + PREFETCH);
    }
#define ROW(i)                          \
  if (rows > i) {                       \
    v16 x = splat16(a + i * lda + p);   \
    s##i += x * b;                      \
    if (two)                            \
      t##i += x * b2;                   \
  }
    ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5) ROW(6) ROW(7) ROW(8) ROW(9) ROW(10) ROW(11)
#undef ROW
  }
#define STORE(i)                                                         \
  if (rows > i) {                                                        \
    store_row16(s##i, alpha, beta, c + i * ldc, cols);                   \
    if (two)                                                             \
      store_row16(t##i, alpha, beta, c + i * ldc + GS_PACKED_PANEL, cols2); \
  }
  STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5) STORE(6) STORE(7) STORE(8) STORE(9)
  STORE(10) STORE(11)
#undef STORE
}

#define TILE16(n, two)                                                                     \
  tile16(n, two, k, ai, lda, panel, panel + k_stride, alpha, beta, ci, ldc, cols, cols2)

/* Rows [0, rows) of C against one panel, or two (`two`), over k values. */
static inline __attribute__((always_inline)) AVX512 void panel_rows16(
    const bool two, int64_t rows, int64_t k, int64_t k_stride, const float *a, int64_t lda,
    const float *panel, float alpha, float beta, float *c, int64_t ldc, int cols, int cols2) {
  int64_t i = 0;
  for (; i + TILE16_ROWS <= rows; i += TILE16_ROWS) {
    const float *ai = a + i * lda;
    float *ci = c + i * ldc;
    TILE16(TILE16_ROWS, two);
  }
  const float *ai = a + i * lda;
  float *ci = c + i * ldc;
  switch (rows - i) {
#define REST(n) \
  case n: TILE16(n, two); break;
    REST(11) REST(10) REST(9) REST(8) REST(7) REST(6) REST(5) REST(4) REST(3) REST(2) REST(1)
#undef REST
  default: break;
  }
}
#undef TILE16

/* panels() for several rows: panels in pairs, k in blocks of K_BLOCK. */
static AVX512 void panels16(int64_t rows, int64_t n, int64_t k, float alpha, const float *a,
                            int64_t lda, const float *packed, float beta, float *c, int64_t ldc,
                            int64_t lo, int64_t hi) {
  int64_t stride = k * GS_PACKED_PANEL; /* from a panel to the next */
  for (int64_t q = lo; q < hi; q += 2) {
    const float *panel = packed + q * stride;
    bool two = q + 1 < hi;
    int cols = panel_cols(n, q), cols2 = two ? panel_cols(n, q + 1) : 0;
    for (int64_t p = 0; p < k; p += K_BLOCK) {
      int64_t kb = k - p < K_BLOCK ? k - p : K_BLOCK;
      const float *pp = panel + p * GS_PACKED_PANEL;
      float b = p ? 1.0f : beta, *cq = c + q * GS_PACKED_PANEL;
      if (two)
        panel_rows16(true, rows, kb, stride, a + p, lda, pp, alpha, b, cq, ldc, cols, cols2);
      else
        panel_rows16(false, rows, kb, stride, a + p, lda, pp, alpha, b, cq, ldc, cols, 0);
    }
  }
}

/* Also held to AVX2 with oneDNN, by ONEDNN_MAX_CPU_ISA (dnnl_conv.h). */
static bool have_avx512(void) {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         gs__dnnl_avx512();
}
#else
static bool have_avx512(void) { return false; }
#define panels16 panels
#endif

void gs__sgemm_packed(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                      const float *packed, float beta, float *c, int64_t ldc) {
  int64_t n_panels = (n + GS_PACKED_PANEL - 1) / GS_PACKED_PANEL;
  /* One row reads B once and waits on memory, not on the FMA units: the
   * paired-panel path above serves it on every CPU. */
  bool wide = m > 1 && have_avx512();
  for (int64_t r = 0; r < m; r += BLOCK_ROWS) {
    int64_t rows = m - r < BLOCK_ROWS ? m - r : BLOCK_ROWS;
    if (wide)
      GS_PARALLEL_RANGES(n_panels, 1, lo, hi,
                         panels16(rows, n, k, alpha, a + r * lda, lda, packed, beta, c + r * ldc,
                                  ldc, lo, hi));
    else
      GS_PARALLEL_RANGES(n_panels, 1, lo, hi,
                         panels(rows, n, k, alpha, a + r * lda, lda, packed, beta, c + r * ldc,
                                ldc, lo, hi));
  }
}

/* image_resize.c - resizing as Pillow resizes an RGB image (image.h), so that
 * a torchvision recipe on a PIL image gives the same bytes here.
 *
 * Pillow's method (its Resample.c, read for the arithmetic, not copied):
 * separable convolution, the horizontal pass first into 8-bit rows, then
 * the vertical. Output coordinate x samples around center (x + 0.5) * scale;
 * when shrinking, the filter's support widens by the scale (antialiasing).
 * The weights are normalised to sum to 1, then made fixed-point integers of
 * 22 fraction bits, and each pass rounds and clamps to 8 bits. Nearest is
 * an affine transform instead: x reads source (int)((x + 0.5) * scale),
 * stepped by repeated addition. Only the output window asked for is
 * computed: a centre crop of a resized image costs the crop's pixels. */
#include "engine/image.h"

#include "base/error.h"
#include "hal/cpu/ops/kernels.h" /* GS_VECTOR_CLONES */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PRECISION_BITS GS_RESIZE_FRACTION_BITS
_Static_assert(GS_RESIZE_FRACTION_BITS == 32 - 8 - 2, "Pillow's precision");

typedef struct filter {
  double (*weight)(double x);
  double support;
} filter;

static double triangle(double x) {
  x = fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

/* Keys' cubic with a = -0.5. */
static double cubic(double x) {
  const double a = -0.5;
  x = fabs(x);
  if (x < 1.0)
    return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0)
    return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

void gs_resize_taps_free(gs_resize_taps *c) {
  free(c->start);
  free(c->count);
  free(c->k);
  c->start = c->count = NULL;
  c->k = NULL;
}

/* c's arrays for n outputs of ksize weights each, zeroed. */
static int taps_alloc(int n, int ksize, gs_resize_taps *c) {
  c->n = n;
  c->ksize = ksize;
  c->start = malloc((size_t)n * sizeof *c->start);
  c->count = malloc((size_t)n * sizeof *c->count);
  c->k = calloc((size_t)n * (size_t)ksize, sizeof *c->k);
  if (c->start && c->count && c->k)
    return GS_OK;
  gs_resize_taps_free(c);
  return gs_error(GS_ENOMEM, "out of memory for resize weights");
}

static int coeffs_make(int in_size, int out_size, int from, int n, const filter *f,
                       gs_resize_taps *c) {
  double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
  double support = f->support * filterscale, ss = 1.0 / filterscale;
  int rc = taps_alloc(n, (int)ceil(support) * 2 + 1, c);
  double *w = rc == 0 ? malloc((size_t)c->ksize * sizeof *w) : NULL;
  if (rc < 0)
    return rc;
  if (!w) {
    gs_resize_taps_free(c);
    return gs_error(GS_ENOMEM, "out of memory for resize weights");
  }
  for (int i = 0; i < n; i++) {
    double center = (from + i + 0.5) * scale, total = 0.0;
    int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
    lo = lo < 0 ? 0 : lo;
    hi = hi > in_size ? in_size : hi;
    int count = hi - lo;
    for (int j = 0; j < count; j++)
      total += w[j] = f->weight((j + lo - center + 0.5) * ss);
    for (int j = 0; j < count; j++) {
      double v = total != 0.0 ? w[j] / total : w[j];
      c->k[(size_t)i * c->ksize + j] =
          (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS) : 0.5 + v * (1 << PRECISION_BITS));
    }
    c->start[i] = lo;
    c->count[i] = count;
  }
  free(w);
  return GS_OK;
}

/* The 8-bit value of a fixed-point sum: rounded (the sums start at one
 * half) and clamped, as branch-free selects that vectorise. */
static inline uint8_t clip8(int32_t v) {
  v = v < 0 ? 0 : v;
  v = v > (255 << PRECISION_BITS) ? (255 << PRECISION_BITS) : v;
  return (uint8_t)(v >> PRECISION_BITS);
}

/* One output row of the vertical pass over `n` bytes a row: `in` is the
 * first of the `count` rows it reads from the horizontal pass's output.
 * In blocks of BLOCK bytes whose sums stay in vector registers while every
 * row's taps are added, then the rest one sum at a time; integer sums do
 * not depend on their order. */
GS_VECTOR_CLONES static void pass_vertical(const uint8_t *in, size_t stride, const int32_t *k,
                                           int count, int n, uint8_t *out) {
  enum { BLOCK = 64 };
  int v0 = 0;
  for (; v0 + BLOCK <= n; v0 += BLOCK) {
    int32_t sum[BLOCK];
    for (int v = 0; v < BLOCK; v++)
      sum[v] = 1 << (PRECISION_BITS - 1);
    for (int j = 0; j < count; j++) {
      const uint8_t *row = in + (size_t)j * stride + v0;
      const int32_t kj = k[j];
      for (int v = 0; v < BLOCK; v++)
        sum[v] += row[v] * kj;
    }
    for (int v = 0; v < BLOCK; v++)
      out[v0 + v] = clip8(sum[v]);
  }
  for (; v0 < n; v0++) {
    int32_t sum = 1 << (PRECISION_BITS - 1);
    for (int j = 0; j < count; j++)
      sum += in[(size_t)j * stride + v0] * k[j];
    out[v0] = clip8(sum);
  }
}

/* Pixel (x, y) of the whole image, which src holds. */
static inline const uint8_t *pixel(const gs_image *src, int x, int y) {
  return src->rgb + (size_t)(y - src->y0) * src->stride + (size_t)(x - src->x0) * 3;
}

/* A transpose of 3-byte pixels, in tiles that stay in cache: out's row c
 * (rows x 3 bytes) is in's column c, for rows [r_lo, r_hi) and columns
 * [c_lo, cols). A pixel moves as 4 bytes where the fourth is in's next
 * pixel and out's next (written after): one load and one store instead of
 * three of each. */
static void transpose_tiles(const uint8_t *in, size_t in_stride, int rows, int cols, int r_lo,
                            int r_hi, int c_lo, uint8_t *out) {
  enum { TILE = 16 };
  size_t out_stride = (size_t)rows * 3;
  for (int r0 = r_lo; r0 < r_hi; r0 += TILE)
    for (int c0 = c_lo; c0 < cols; c0 += TILE) {
      int r1 = r0 + TILE < r_hi ? r0 + TILE : r_hi, c1 = c0 + TILE < cols ? c0 + TILE : cols;
      for (int c = c0; c < c1; c++) {
        uint8_t *o = out + (size_t)c * out_stride;
        const uint8_t *i = in + (size_t)c * 3;
        int wide = c + 1 < cols ? (r1 < rows ? r1 : rows - 1) : r0; /* 4 bytes below this r */
        int r = r0;
        for (; r < wide; r++) {
          uint32_t v;
          memcpy(&v, i + (size_t)r * in_stride, 4);
          memcpy(o + (size_t)r * 3, &v, 4);
        }
        for (; r < r1; r++)
          memcpy(o + (size_t)r * 3, i + (size_t)r * in_stride, 3);
      }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_GATHER_TRANSPOSE 1

/* The same with AVX-512: 16 rows of one column gathered as 4-byte pixels
 * at once, their fourth bytes shuffled out, and stored as 48 bytes. Strip
 * by strip of 16 rows, column after column: each gather reads the 16 cache
 * lines the one before read, or the next ones. Returns the rows done (a
 * multiple of 16); every column but the last, whose fourth bytes may lie
 * past the image. */
__attribute__((target("avx512f,avx512bw"))) static int
transpose_gathered(const uint8_t *in, size_t in_stride, int rows, int cols, uint8_t *out) {
  if (cols < 2 || in_stride > INT32_MAX / 16)
    return 0;
  const __m512i offsets = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32((int)in_stride));
  /* Per 16-byte lane: its 4 pixels' 12 bytes first; then the lanes' 12
   * bytes side by side. */
  const __m512i squeeze = _mm512_broadcast_i32x4(
      _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
  const __m512i join = _mm512_setr_epi32(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 15, 15, 15, 15);
  const __mmask64 bytes48 = (1ull << 48) - 1;
  size_t out_stride = (size_t)rows * 3;
  int r0 = 0;
  for (; r0 + 16 <= rows; r0 += 16) {
    const uint8_t *strip = in + (size_t)r0 * in_stride;
    for (int c = 0; c + 1 < cols; c++) {
      __m512i px = _mm512_i32gather_epi32(offsets, strip + (size_t)c * 3, 1);
      px = _mm512_permutexvar_epi32(join, _mm512_shuffle_epi8(px, squeeze));
      _mm512_mask_storeu_epi8(out + (size_t)c * out_stride + (size_t)r0 * 3, bytes48, px);
    }
  }
  return r0;
}
#endif

static void transpose_pixels(const uint8_t *in, size_t in_stride, int rows, int cols,
                             uint8_t *out) {
#ifdef HAVE_GATHER_TRANSPOSE
  if (__builtin_cpu_supports("avx512bw")) {
    int done = transpose_gathered(in, in_stride, rows, cols, out);
    if (done > 0) {
      transpose_tiles(in, in_stride, rows, cols, done, rows, 0, out); /* the rows left */
      transpose_tiles(in, in_stride, rows, cols, 0, done, cols - 1, out); /* the last column */
      return;
    }
  }
#endif
  transpose_tiles(in, in_stride, rows, cols, 0, rows, 0, out);
}

/* The horizontal pass over source rows [row_lo, row_lo + rows) into mid
 * (rows of cx->n pixels): done as a vertical pass on the transposed
 * pixels, whose loops vectorise where the pixel-by-pixel sums do not
 * (three channels, a handful of taps). */
static int horizontal_pass(const gs_image *src, int row_lo, int rows, const gs_resize_taps *cx,
                           uint8_t *mid) {
  int col_lo = cx->start[0], last = cx->n - 1; /* the windows only move right */
  int cols = cx->start[last] + cx->count[last] - col_lo;
  size_t line = (size_t)rows * 3;
  uint8_t *columns = malloc(line * (size_t)cols), *done = malloc(line * (size_t)cx->n);
  if (!columns || !done) {
    free(columns);
    free(done);
    return gs_error(GS_ENOMEM, "out of memory resizing a %d-pixel-wide image", src->width);
  }
  transpose_pixels(pixel(src, col_lo, row_lo), src->stride, rows, cols, columns);
  for (int x = 0; x < cx->n; x++)
    pass_vertical(columns + (size_t)(cx->start[x] - col_lo) * line, line,
                  &cx->k[(size_t)x * cx->ksize], cx->count[x], (int)line, done + (size_t)x * line);
  transpose_pixels(done, line, cx->n, rows, mid);
  free(columns);
  free(done);
  return GS_OK;
}

static void resize_nearest(const gs_image *src, int dw, int dh, int x0, int y0, int ww, int wh,
                           uint8_t *dst) {
  double ax = (double)src->width / dw, ay = (double)src->height / dh;
  double yy = ay * 0.5;
  for (int y = 0; y < y0; y++)
    yy += ay;
  for (int y = 0; y < wh; y++, yy += ay) {
    int sy = (int)yy;
    double xx = ax * 0.5;
    for (int x = 0; x < x0; x++)
      xx += ax;
    for (int x = 0; x < ww; x++, xx += ax) {
      int sx = (int)xx;
      memcpy(dst + ((size_t)y * ww + x) * 3, pixel(src, sx, sy), 3);
    }
  }
}

/* The filter's weights and reach. */
static filter filter_of(gs_image_filter mode) {
  return mode == GS_FILTER_BICUBIC ? (filter){cubic, 2.0} : (filter){triangle, 1.0};
}

/* Along one edge: the inputs that outputs [from, from + n) read, [*lo, *hi). */
static void source_span(int in_size, int out_size, int from, int n, gs_image_filter mode, int *lo,
                        int *hi) {
  double scale = (double)in_size / out_size;
  if (mode == GS_FILTER_NEAREST) { /* one input each; a pixel either way for the stepping */
    *lo = (int)((from + 0.5) * scale) - 1;
    *hi = (int)((from + n - 0.5) * scale) + 2;
  } else {
    double support = filter_of(mode).support * (scale < 1.0 ? 1.0 : scale);
    *lo = (int)((from + 0.5) * scale - support + 0.5);
    *hi = (int)((from + n - 0.5) * scale + support + 0.5);
  }
  *lo = *lo < 0 ? 0 : *lo;
  *hi = *hi > in_size ? in_size : *hi;
}

/* Nearest as taps: one input each, of weight 1, the input resize_nearest
 * reads (the same stepping, so the same rounding). */
static int nearest_taps(int in_size, int out_size, int from, int n, gs_resize_taps *c) {
  int rc = taps_alloc(n, 1, c);
  if (rc < 0)
    return rc;
  double a = (double)in_size / out_size, xx = a * 0.5;
  for (int i = 0; i < from; i++)
    xx += a;
  for (int i = 0; i < n; i++, xx += a) {
    c->start[i] = (int)xx;
    c->count[i] = 1;
    c->k[i] = 1 << PRECISION_BITS;
  }
  return GS_OK;
}

int gs_image_resize_taps(int in_size, int out_size, int from, int n, gs_image_filter mode,
                         gs_resize_taps *t) {
  *t = (gs_resize_taps){0};
  if (in_size <= 0 || out_size <= 0 || from < 0 || n <= 0 || from + n > out_size)
    return gs_error(GS_EINVAL, "resize taps of %d to %d, outputs %d to %d", in_size, out_size,
                    from, from + n);
  if (mode == GS_FILTER_NEAREST)
    return nearest_taps(in_size, out_size, from, n, t);
  if (in_size == out_size) { /* gs_image_resize copies this edge */
    int rc = taps_alloc(n, 1, t);
    for (int i = 0; rc == 0 && i < n; i++) {
      t->start[i] = from + i;
      t->count[i] = 1;
      t->k[i] = 1 << PRECISION_BITS;
    }
    return rc;
  }
  const filter f = filter_of(mode);
  return coeffs_make(in_size, out_size, from, n, &f, t);
}

void gs_image_resize_needs(int sw, int sh, int dw, int dh, gs_image_filter mode, int x0, int y0,
                           int ww, int wh, int box[4]) {
  source_span(sw, dw, x0, ww, mode, &box[0], &box[2]);
  source_span(sh, dh, y0, wh, mode, &box[1], &box[3]);
}

int gs_image_resize(const gs_image *src, int dw, int dh, gs_image_filter mode, int x0, int y0,
                    int ww, int wh, uint8_t *dst) {
  int sw = src->width, sh = src->height;
  if (sw <= 0 || sh <= 0 || dw <= 0 || dh <= 0 || x0 < 0 || y0 < 0 || ww <= 0 || wh <= 0 ||
      x0 + ww > dw || y0 + wh > dh)
    return gs_error(GS_EINVAL, "resize %dx%d to %dx%d, window %dx%d at %d,%d", sw, sh, dw, dh,
                    ww, wh, x0, y0);
  if (mode == GS_FILTER_NEAREST) {
    resize_nearest(src, dw, dh, x0, y0, ww, wh, dst);
    return GS_OK;
  }
  const filter f = filter_of(mode);
  bool horizontal = dw != sw, vertical = dh != sh;
  gs_resize_taps cx = {0}, cy = {0};
  int rc = horizontal ? coeffs_make(sw, dw, x0, ww, &f, &cx) : GS_OK;
  if (rc == 0 && vertical)
    rc = coeffs_make(sh, dh, y0, wh, &f, &cy);
  /* The source rows the window needs, through the horizontal pass. */
  int row_lo = rc == 0 && vertical ? cy.start[0] : y0;
  int row_hi = rc == 0 && vertical ? cy.start[wh - 1] + cy.count[wh - 1] : y0 + wh;
  int rows = row_hi - row_lo;
  size_t stride = (size_t)ww * 3;
  uint8_t *mid = rc == 0 ? malloc(stride * (size_t)rows) : NULL;
  if (rc == 0 && !mid)
    rc = gs_error(GS_ENOMEM, "out of memory resizing a %dx%d image", sw, sh);
  if (rc == 0 && horizontal)
    rc = horizontal_pass(src, row_lo, rows, &cx, mid);
  for (int y = 0; rc == 0 && !horizontal && y < rows; y++)
    memcpy(mid + (size_t)y * stride, pixel(src, x0, row_lo + y), stride);
  for (int y = 0; rc == 0 && y < wh; y++) {
    if (vertical)
      pass_vertical(mid + (size_t)(cy.start[y] - row_lo) * stride, stride,
                    &cy.k[(size_t)y * cy.ksize], cy.count[y], (int)stride,
                    dst + (size_t)y * stride);
    else
      memcpy(dst + (size_t)y * stride, mid + (size_t)y * stride, stride);
  }
  free(mid);
  gs_resize_taps_free(&cx);
  gs_resize_taps_free(&cy);
  return rc;
}

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

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2)

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

/* For output coordinates [from, from + n) of a resize of in_size to
 * out_size: the first input each reads (start[i]), how many (count[i]),
 * and ksize fixed-point weights each (k[i * ksize ...]). */
typedef struct coeffs {
  int n, ksize;
  int *start, *count;
  int32_t *k;
} coeffs;

static void coeffs_free(coeffs *c) {
  free(c->start);
  free(c->count);
  free(c->k);
  c->start = c->count = NULL;
  c->k = NULL;
}

static int coeffs_make(int in_size, int out_size, int from, int n, const filter *f, coeffs *c) {
  double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
  double support = f->support * filterscale, ss = 1.0 / filterscale;
  c->n = n;
  c->ksize = (int)ceil(support) * 2 + 1;
  c->start = malloc((size_t)n * sizeof *c->start);
  c->count = malloc((size_t)n * sizeof *c->count);
  c->k = calloc((size_t)n * (size_t)c->ksize, sizeof *c->k);
  double *w = malloc((size_t)c->ksize * sizeof *w);
  if (!c->start || !c->count || !c->k || !w) {
    free(w);
    coeffs_free(c);
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

static inline uint8_t clip8(int32_t v) {
  if (v >= (255 << PRECISION_BITS))
    return 255;
  if (v <= 0)
    return 0;
  return (uint8_t)(v >> PRECISION_BITS);
}

/* One output row of the horizontal pass: `in` is a source row. */
static void pass_horizontal(const uint8_t *in, const coeffs *c, uint8_t *out) {
  for (int x = 0; x < c->n; x++) {
    const int32_t *k = &c->k[(size_t)x * c->ksize];
    const uint8_t *p = in + (size_t)c->start[x] * 3;
    int32_t r = 1 << (PRECISION_BITS - 1), g = r, b = r;
    for (int j = 0; j < c->count[x]; j++) {
      r += p[3 * j] * k[j];
      g += p[3 * j + 1] * k[j];
      b += p[3 * j + 2] * k[j];
    }
    out[3 * x] = clip8(r);
    out[3 * x + 1] = clip8(g);
    out[3 * x + 2] = clip8(b);
  }
}

/* One output row of the vertical pass over rows of `width` pixels:
 * `in` is the row `start` of the horizontal pass's output. */
static void pass_vertical(const uint8_t *in, size_t stride, const int32_t *k, int count,
                          int width, uint8_t *out) {
  for (int v = 0; v < width * 3; v++) {
    int32_t sum = 1 << (PRECISION_BITS - 1);
    for (int j = 0; j < count; j++)
      sum += in[(size_t)j * stride + v] * k[j];
    out[v] = clip8(sum);
  }
}

static void resize_nearest(const uint8_t *src, int sw, int sh, int dw, int dh, int x0, int y0,
                           int ww, int wh, uint8_t *dst) {
  double ax = (double)sw / dw, ay = (double)sh / dh;
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
      memcpy(dst + ((size_t)y * ww + x) * 3, src + ((size_t)sy * sw + sx) * 3, 3);
    }
  }
}

int gs_image_resize(const uint8_t *src, int sw, int sh, int dw, int dh, gs_image_filter mode,
                    int x0, int y0, int ww, int wh, uint8_t *dst) {
  if (sw <= 0 || sh <= 0 || dw <= 0 || dh <= 0 || x0 < 0 || y0 < 0 || ww <= 0 || wh <= 0 ||
      x0 + ww > dw || y0 + wh > dh)
    return gs_error(GS_EINVAL, "resize %dx%d to %dx%d, window %dx%d at %d,%d", sw, sh, dw, dh,
                    ww, wh, x0, y0);
  if (mode == GS_FILTER_NEAREST) {
    resize_nearest(src, sw, sh, dw, dh, x0, y0, ww, wh, dst);
    return GS_OK;
  }
  const filter f = mode == GS_FILTER_BICUBIC ? (filter){cubic, 2.0} : (filter){triangle, 1.0};
  bool horizontal = dw != sw, vertical = dh != sh;
  coeffs cx = {0}, cy = {0};
  int rc = horizontal ? coeffs_make(sw, dw, x0, ww, &f, &cx) : GS_OK;
  if (rc == 0 && vertical)
    rc = coeffs_make(sh, dh, y0, wh, &f, &cy);
  /* The source rows the window needs, through the horizontal pass. */
  int row_lo = vertical ? cy.start[0] : y0;
  int row_hi = vertical ? cy.start[wh - 1] + cy.count[wh - 1] : y0 + wh;
  size_t stride = (size_t)ww * 3;
  uint8_t *mid = rc == 0 ? malloc(stride * (size_t)(row_hi - row_lo)) : NULL;
  if (rc == 0 && !mid)
    rc = gs_error(GS_ENOMEM, "out of memory resizing a %dx%d image", sw, sh);
  for (int y = row_lo; rc == 0 && y < row_hi; y++) {
    const uint8_t *in = src + (size_t)y * sw * 3;
    if (horizontal)
      pass_horizontal(in, &cx, mid + (size_t)(y - row_lo) * stride);
    else
      memcpy(mid + (size_t)(y - row_lo) * stride, in + (size_t)x0 * 3, stride);
  }
  for (int y = 0; rc == 0 && y < wh; y++) {
    if (vertical)
      pass_vertical(mid + (size_t)(cy.start[y] - row_lo) * stride, stride,
                    &cy.k[(size_t)y * cy.ksize], cy.count[y], ww, dst + (size_t)y * stride);
    else
      memcpy(dst + (size_t)y * stride, mid + (size_t)y * stride, stride);
  }
  free(mid);
  coeffs_free(&cx);
  coeffs_free(&cy);
  return rc;
}

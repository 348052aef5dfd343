/* depthwise_conv.c - 2-D depthwise convolutions on NCHW data
 * (depthwise_conv.h). */
#include "hal/cpu/ops/depthwise_conv.h"

#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/nn_geom.h"
#include "hal/cpu/ops/parallel.h"
#include "hal/op/op_attrs.h"
#include "base/error.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Strides past it are left to oneDNN (a phase's row pointers on the stack). */
#define GS_MAX_STRIDE 4

/* Where this kernel beats oneDNN with its reorders (measured on an AVX-512
 * Xeon, 32 images, 3x3 windows, 2 threads): on planes of 28 x 28 outputs
 * (the bound sits at 24 x 24, between the sizes measured) and more, and
 * above the channels dnnl_conv.c transposes itself (0.67
 * against 0.93 ms for 58 channels of 28 x 28; 2.2 against 5.1 ms for 58
 * of 56 x 56 at stride 2). On smaller planes oneDNN's channels-last
 * kernel, vectorised across channels, wins despite its reorders (0.40
 * against 0.56 ms for 116 channels of 14 x 14; 0.47 against 1.1 ms for
 * 232 of 7 x 7 at stride 2), and at 24 channels the transposes are cheap
 * (0.78 against 0.88 ms, 56 x 56 at stride 2). */
#define GS_DEPTHWISE_MIN_PLANE 576
#define GS_DEPTHWISE_MIN_CHANNELS 32

bool gs__depthwise_conv_fits(const gs_op_call *c) {
  const gs_conv_attrs *a = c->attrs;
  int64_t channels = c->in[0].shape.dims[1];
  return a->spatial == 2 && a->group > 1 && a->group == channels &&
         c->out[0].shape.dims[1] == channels && c->in[1].shape.dims[1] == 1 &&
         !a->src_blocked && !a->dst_blocked && !a->residual && a->stride[0] <= GS_MAX_STRIDE &&
         a->stride[1] <= GS_MAX_STRIDE && channels > GS_DEPTHWISE_MIN_CHANNELS &&
         c->out[0].shape.dims[2] * c->out[0].shape.dims[3] >= GS_DEPTHWISE_MIN_PLANE;
}

/* A plane laid out so that every tap of every output is one contiguous
 * pass: its padded input (zeros written out) cut into sy x sx phases,
 * phase (a, b) holding rows a, a + sy, ... and columns b, b + sx, ...
 * Output (oy, ox) is wide[i] at i = oy cols + ox, and tap (ky, kx), at
 * (ry, rx) = (ky dy, kx dx) in the window, reads phase (ry % sy, rx % sx)
 * at i + (ry / sy) cols + rx / sx: a shift of one flat array. The grid
 * has more columns than there are outputs (the window's reach): those
 * few outputs past each row are computed and dropped, so that the vector
 * loop runs over the whole plane instead of rows of 7 to 56 outputs, most
 * of them in its scalar tail. */
typedef struct layout {
  int64_t sy, sx;
  int64_t rows; /* per phase: the outputs' rows and the window's reach down */
  int64_t cols; /* per phase: the outputs' columns and the window's reach across */
} layout;

static layout layout_of(const geom *g) {
  return (layout){g->s[1], g->s[2], g->out[1] + (g->k[1] - 1) * g->d[1] / g->s[1],
                  g->out[2] + (g->k[2] - 1) * g->d[2] / g->s[2]};
}

/* Floats a layout takes, with the wide grid after it. */
static size_t work_floats(const geom *g, const layout *l) {
  return (size_t)((l->sy * l->sx * l->rows + g->out[1]) * l->cols);
}

/* Padded row `pr` of the plane (sx cols wide) into `row`. */
static void padded_row(const geom *g, const layout *l, const float *x, int64_t pr, float *row) {
  int64_t width = l->sx * l->cols, iy = pr - g->p[1], lo, hi;
  if (iy < 0 || iy >= g->in[1]) {
    memset(row, 0, sizeof(float) * (size_t)width);
    return;
  }
  valid_range(width, 1, -g->p[2], g->in[2], &lo, &hi);
  memset(row, 0, sizeof(float) * (size_t)lo);
  if (hi > lo) /* none where the padding covers the whole row */
    memcpy(row + lo, x + iy * g->in[2] + lo - g->p[2], sizeof(float) * (size_t)(hi - lo));
  memset(row + hi, 0, sizeof(float) * (size_t)(width - hi));
}

/* Columns b, b + sx, ... of `row` into the phases' rows (stride 2, the
 * common one, in one pass the compiler turns into shuffles). */
GS_VECTOR_CLONES static void deinterleave(const float *restrict row, int64_t sx, int64_t cols,
                                          float *const *dst) {
  if (sx == 2) {
    float *restrict even = dst[0], *restrict odd = dst[1];
    for (int64_t c = 0; c < cols; c++) {
      even[c] = row[2 * c];
      odd[c] = row[2 * c + 1];
    }
    return;
  }
  for (int64_t b = 0; b < sx; b++)
    for (int64_t c = 0; c < cols; c++)
      dst[b][c] = row[c * sx + b];
}

static void lay_out(const geom *g, const layout *l, const float *x, float *out, float *row) {
  int64_t plane = l->rows * l->cols;
  for (int64_t a = 0; a < l->sy; a++)
    for (int64_t r = 0; r < l->rows; r++) {
      float *first = out + a * l->sx * plane + r * l->cols; /* phase (a, 0)'s row r */
      if (l->sx == 1) {
        padded_row(g, l, x, r * l->sy + a, first);
        continue;
      }
      float *dst[GS_MAX_STRIDE];
      for (int64_t b = 0; b < l->sx; b++)
        dst[b] = first + b * plane;
      padded_row(g, l, x, r * l->sy + a, row);
      deinterleave(row, l->sx, l->cols, dst);
    }
}

/* Where a tap of a laid-out plane starts reading. */
static const float *tap(const layout *l, const float *in, int64_t ry, int64_t rx) {
  return in + ((ry % l->sy) * l->sx + rx % l->sx) * l->rows * l->cols + ry / l->sy * l->cols +
         rx / l->sx;
}

/* A 3x3 window of stride 1 and no dilation, the commonest: one pass over
 * three rows, nine multiply-adds in registers (faster than flat_3x3's nine
 * pointers: 0.65 against 0.98 ms for 32 x 116 planes of 14 x 14). */
GS_VECTOR_CLONES static void flat_3x3_rows(const float *restrict r0, const float *restrict r1,
                                           const float *restrict r2, int64_t n, const float *w,
                                           float b, float *restrict wide) {
  float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6],
        w7 = w[7], w8 = w[8];
  for (int64_t i = 0; i < n; i++)
    wide[i] = b + w0 * r0[i] + w1 * r0[i + 1] + w2 * r0[i + 2] + w3 * r1[i] + w4 * r1[i + 1] +
              w5 * r1[i + 2] + w6 * r2[i] + w7 * r2[i + 1] + w8 * r2[i + 2];
}

/* Any other 3x3 window: one pass, nine multiply-adds in registers. */
GS_VECTOR_CLONES static void flat_3x3(const float *const *t, int64_t n, const float *w,
                                      float b, float *restrict wide) {
  const float *restrict t0 = t[0], *restrict t1 = t[1], *restrict t2 = t[2],
              *restrict t3 = t[3], *restrict t4 = t[4], *restrict t5 = t[5],
              *restrict t6 = t[6], *restrict t7 = t[7], *restrict t8 = t[8];
  float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6],
        w7 = w[7], w8 = w[8];
  for (int64_t i = 0; i < n; i++)
    wide[i] = b + w0 * t0[i] + w1 * t1[i] + w2 * t2[i] + w3 * t3[i] + w4 * t4[i] + w5 * t5[i] +
              w6 * t6[i] + w7 * t7[i] + w8 * t8[i];
}

/* Any other window: one pass per tap. */
GS_VECTOR_CLONES static void flat_taps(const geom *g, const layout *l, int64_t n,
                                       const float *restrict in, const float *w, float b,
                                       float *restrict wide) {
  for (int64_t i = 0; i < n; i++)
    wide[i] = b;
  for (int64_t ky = 0; ky < g->k[1]; ky++)
    for (int64_t kx = 0; kx < g->k[2]; kx++) {
      const float *src = tap(l, in, ky * g->d[1], kx * g->d[2]);
      float wv = w[ky * g->k[2] + kx];
      for (int64_t i = 0; i < n; i++)
        wide[i] += wv * src[i];
    }
}

/* One channel's plane: laid out, convolved, its rows taken out of the
 * wide grid, then through the activation while it is in cache. `work`
 * holds the layout, then the wide grid; `row` a padded row. */
static void plane(const gs_op_call *c, const geom *g, const layout *l, const float *x,
                  const float *w, float b, float *work, float *row, float *y) {
  const gs_conv_attrs *a = c->attrs;
  float *wide = work + l->sy * l->sx * l->rows * l->cols;
  int64_t n = (g->out[1] - 1) * l->cols + g->out[2]; /* the last row's extra columns unread */
  lay_out(g, l, x, work, row);
  bool unit = l->sy == 1 && l->sx == 1 && g->d[1] == 1 && g->d[2] == 1;
  if (unit && g->k[1] == 3 && g->k[2] == 3) {
    flat_3x3_rows(work, work + l->cols, work + 2 * l->cols, n, w, b, wide);
  } else if (g->k[1] == 3 && g->k[2] == 3) {
    const float *t[9];
    for (int k = 0; k < 9; k++)
      t[k] = tap(l, work, k / 3 * g->d[1], k % 3 * g->d[2]);
    flat_3x3(t, n, w, b, wide);
  } else {
    flat_taps(g, l, n, work, w, b, wide);
  }
  for (int64_t oy = 0; oy < g->out[1]; oy++)
    memcpy(y + oy * g->out[2], wide + oy * l->cols, sizeof(float) * (size_t)g->out[2]);
  gs__cpu_act_range(a->act, a->act_lo, a->act_hi, y, 0, g->out_size);
}

/* Planes [lo, hi) of the batch's N x C, with work space of their own. */
static int planes(const gs_op_call *c, const geom *g, float *const *p, int64_t lo, int64_t hi) {
  const gs_conv_attrs *a = c->attrs;
  int64_t channels = c->in[0].shape.dims[1];
  layout l = layout_of(g);
  float *work = malloc(sizeof(float) * (work_floats(g, &l) + (size_t)(l.sx * l.cols)));
  if (!work)
    return GS_ENOMEM;
  float *row = work + work_floats(g, &l);
  for (int64_t pl = lo; pl < hi; pl++) {
    int64_t ch = pl % channels;
    plane(c, g, &l, p[0] + pl * g->in_size, p[1] + ch * g->k_size,
          a->has_bias ? p[2][ch] : 0.0f, work, row, p[c->n_in] + pl * g->out_size);
  }
  free(work);
  return GS_OK;
}

int gs__depthwise_conv(const gs_op_call *c, float *const *p) {
  const gs_conv_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  geom g;
  make_geom(&g, 2, xs->dims + 2, ys->dims + 2, a->kernel, a->stride, a->dilation, a->pad_begin);
  int64_t n_planes = xs->dims[0] * xs->dims[1];
  if (n_planes == 0 || g.out_size == 0 || g.k_size == 0)
    return GS_OK;
  /* A plane's multiply-adds: enough of them per piece to pay for a thread. */
  int64_t grain = GS_PARALLEL_GRAIN / (g.out_size * g.k_size) + 1;
  atomic_int failed = 0;
  GS_PARALLEL_RANGES(n_planes, grain, lo, hi,
                     if (planes(c, &g, p, lo, hi) < 0) atomic_store(&failed, 1));
  return atomic_load(&failed)
             ? gs_error(GS_ENOMEM, "out of memory for the work space of node %s", c->node_name)
             : GS_OK;
}

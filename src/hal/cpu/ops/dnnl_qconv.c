/* dnnl_qconv.c - QLinearConv and ConvInteger (below) through oneDNN's int8
 * convolution (VNNI where the CPU has it). QLinearConv: 8-bit input and
 * output, int8 weights, an int32 bias,
 * the requantising scale per output channel (x_scale * w_scale / y_scale)
 * and the input's and output's zero points given to the primitive, so
 * that one primitive does the op. The primitive is made once per plan
 * step and kept in the step's kernel state; its scales and zero points
 * are fixed when it is made, so a run whose scales or zero points differ
 * from those (they are inputs, almost always constants) makes it again.
 * The activations are reordered from and to NCHW around each call (oneDNN
 * computes int8 in channels-last), the weights once while they stay the
 * same. oneDNN takes no weight zero points: a QLinearConv with them, or
 * with uint8 weights, stays with the caller's im2col path.
 *
 * Without VNNI (dnnl_conv.h) oneDNN's u8 x s8 kernels add each pair of
 * products in int16, which saturates. There the input is made unsigned and
 * cut in two, x + shift = 128 H + L (H in {0, 1}, L in [0, 127]), whose
 * products cannot saturate; H and L go through the primitive as one batch
 * of twice the images, into int32 without scales or zero points, and the
 * output stage is done here:
 *   acc = 128 conv(H) + conv(L) - (shift + x_zero) window_sum + bias,
 * where window_sum (per output channel and position) sums the weights
 * that meet the input rather than the padding, which oneDNN fills with 0
 * where the op means x_zero.
 *
 * ConvInteger (int32 out, zero points for both operands, which
 * onnxruntime's dynamic quantiser writes with uint8 weights) runs the same
 * primitive into int32 without zero points, so that a zero point chosen
 * anew on every run (DynamicQuantizeLinear) makes no new primitive. uint8
 * weights become int8 (w - 128, their zero point with them), and the zero
 * points are taken away afterwards:
 *   sum (u - zu)(w - zw) = conv(u, w) - zu window_sum - zw box,
 * over the taps inside the input, where u is the input as the primitive
 * took it (x, or x + shift when split) and box (per image, group and
 * output position) sums x - x_zero over the group's channels and taps. */
#include "hal/cpu/ops/dnnl_qconv.h"

#include "base/error.h"
#include "base/log.h"
#include "hal/cpu/ops/dnnl_conv.h"
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/nn_geom.h"
#include "hal/cpu/ops/parallel.h"
#include "hal/cpu/ops/qmath.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>

typedef struct qconv_state {
  dnnl_primitive_t conv, src_reorder, dst_reorder, w_reorder;
  dnnl_memory_t src_plain, src_cl, dst_plain, dst_cl, w_plain, w_blocked, bias;
  dnnl_stream_t stream; /* runs of one plan are serialised, so one stream serves */
  const void *w_cached; /* the weights the reordered copy was made from */
  float *scales;        /* per output channel, as built */
  int64_t n_scales;
  int32_t x_zero, y_zero;
  bool built, failed;
  bool split;          /* no VNNI: the input in two halves (above) */
  geom g;              /* the window's geometry, as built */
  uint8_t *halves;     /* split: H then L, as the input's plain layout */
  int32_t *acc;        /* split: the primitive's int32 result, plain */
  int32_t *window_sum; /* split or integer: [out channels, positions], from w_cached */
  int8_t *w_s8;        /* integer with uint8 weights: w - 128 */
  uint32_t *box;       /* integer: one image's and group's box sums [positions] */
  uint32_t *chan_sum;  /* integer: x - x_zero summed over a group's channels [input plane] */
  int32_t *sources;    /* integer: tap_source of [positions, taps] */
  int32_t *w_zero;     /* integer: this run's weight zero point per output channel, as int8's */
} qconv_state;

/* Which op a step runs, and where it takes its weights (both take x's
 * zero point as input X_ZERO). */
typedef struct qconv_op {
  bool integer; /* ConvInteger: int32 out, zero points taken away here */
  int w, w_zero;
} qconv_op;

#define X_ZERO 2
static const qconv_op qlinear_conv = {.integer = false, .w = 3, .w_zero = 5};
static const qconv_op conv_integer = {.integer = true, .w = 1, .w_zero = 3};

static void release(qconv_state *s) {
  dnnl_primitive_t prims[] = {s->conv, s->src_reorder, s->dst_reorder, s->w_reorder};
  for (size_t i = 0; i < sizeof prims / sizeof prims[0]; i++)
    if (prims[i])
      dnnl_primitive_destroy(prims[i]);
  dnnl_memory_t mems[] = {s->src_plain, s->src_cl,    s->dst_plain, s->dst_cl,
                          s->w_plain,   s->w_blocked, s->bias};
  for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
    if (mems[i])
      dnnl_memory_destroy(mems[i]);
  if (s->stream)
    dnnl_stream_destroy(s->stream);
  free(s->scales);
  free(s->halves);
  free(s->acc);
  free(s->window_sum);
  free(s->w_s8);
  free(s->box);
  free(s->chan_sum);
  free(s->sources);
  free(s->w_zero);
  memset(s, 0, sizeof *s);
}

static void destroy_state(void *p) {
  if (p) {
    release(p);
    free(p);
  }
}

static dnnl_data_type_t q8(gs_dtype t) { return t == GS_DT_INT8 ? dnnl_s8 : dnnl_u8; }

/* The descriptors of the op's tensors: NCHW-style plain ones for the
 * engine's buffers, and the convolution's dims. */
typedef struct qconv_dims {
  int rank, w_rank;
  dnnl_dims_t src, dst, w, bias, strides, dil, pl, pr;
} qconv_dims;

static void dims_of(const gs_op_call *c, const qconv_op *op, qconv_dims *d) {
  const gs_conv_attrs *a = &((const gs_quant_attrs *)c->attrs)->conv;
  const gs_shape *xs = &c->in[0].shape, *ws = &c->in[op->w].shape, *ys = &c->out[0].shape;
  d->rank = xs->rank;
  for (int i = 0; i < d->rank; i++) {
    d->src[i] = xs->dims[i];
    d->dst[i] = ys->dims[i];
  }
  bool grouped = a->group > 1;
  d->w_rank = d->rank + grouped;
  if (grouped) {
    d->w[0] = a->group;
    d->w[1] = ws->dims[0] / a->group;
    for (int i = 1; i < d->rank; i++)
      d->w[i + 1] = ws->dims[i];
  } else {
    for (int i = 0; i < d->rank; i++)
      d->w[i] = ws->dims[i];
  }
  d->bias[0] = ys->dims[1];
  for (int i = 0; i < a->spatial; i++) {
    d->strides[i] = a->stride[i];
    d->dil[i] = a->dilation[i] - 1; /* oneDNN counts the gaps */
    d->pl[i] = a->pad_begin[i];
    d->pr[i] = a->pad_end[i];
  }
}

/* Where tap `tap` of output position `pos` reads the input: its flat
 * index in an input channel's plane, or -1 in the padding. */
static int64_t tap_source(const geom *g, int64_t pos, int64_t tap) {
  int64_t src = 0, stride = 1;
  for (int d = 2; d >= 0; d--) { /* taken apart into the three dims, last first */
    int64_t at = pos % g->out[d], k = tap % g->k[d];
    pos /= g->out[d], tap /= g->k[d];
    int64_t i = at * g->s[d] + k * g->d[d] - g->p[d];
    if (i < 0 || i >= g->in[d])
      return -1;
    src += i * stride;
    stride *= g->in[d];
  }
  return src;
}

/* The buffers of the output stage done here (split or integer). */
static bool make_buffers(qconv_state *s, const gs_op_call *c, const qconv_op *op) {
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  const geom *g = &s->g;
  size_t in = (size_t)gs_shape_numel(xs), out = (size_t)gs_shape_numel(ys);
  size_t oc = (size_t)ys->dims[1], outs = (size_t)g->out_size, taps = (size_t)g->k_size;
  if (s->split && (!(s->halves = malloc(2 * in + 1)) ||
                   !(s->acc = malloc(sizeof *s->acc * (2 * out + 1)))))
    return false;
  if (!(s->window_sum = malloc(sizeof *s->window_sum * (oc * outs + 1))))
    return false;
  if (!op->integer)
    return true;
  if (c->in[op->w].dtype == GS_DT_UINT8 &&
      !(s->w_s8 = malloc((size_t)gs_shape_numel(&c->in[op->w].shape) + 1)))
    return false;
  if (!(s->box = malloc(sizeof *s->box * (outs + 1))) ||
      !(s->chan_sum = malloc(sizeof *s->chan_sum * ((size_t)g->in_size + 1))) ||
      !(s->sources = malloc(sizeof *s->sources * (outs * taps + 1))) ||
      !(s->w_zero = malloc(sizeof *s->w_zero * (oc + 1))))
    return false;
  for (size_t pos = 0; pos < outs; pos++)
    for (size_t tap = 0; tap < taps; tap++)
      s->sources[pos * taps + tap] = (int32_t)tap_source(g, (int64_t)pos, (int64_t)tap);
  return true;
}

static dnnl_status_t build(qconv_state *s, const gs_op_call *c, const qconv_op *op,
                           dnnl_engine_t engine) {
  const gs_conv_attrs *a = &((const gs_quant_attrs *)c->attrs)->conv;
  qconv_dims d;
  dims_of(c, op, &d);
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  make_geom(&s->g, a->spatial, xs->dims + 2, ys->dims + 2, a->kernel, a->stride, a->dilation,
            a->pad_begin);
  if (op->integer && s->g.in_size >= INT32_MAX)
    return dnnl_unimplemented; /* tap sources are int32: the caller's im2col */
  dnnl_data_type_t xt = q8(c->in[0].dtype), yt = q8(c->out[0].dtype);
  bool bias = a->has_bias && !op->integer, ours = s->split || op->integer;
  if (ours) { /* into int32; the output stage is ours */
    yt = dnnl_s32;
    bias = false;
  }
  if (s->split) { /* twice the images, unsigned */
    d.src[0] *= 2;
    d.dst[0] *= 2;
    xt = dnnl_u8;
  }
  dnnl_memory_desc_t src_any, dst_any, w_any, b_md, src_plain, dst_plain, w_plain;
  dnnl_status_t st = dnnl_success;
#define TRY(x) \
  if (st == dnnl_success) \
  st = (x)
  TRY(dnnl_memory_desc_init_by_tag(&src_any, d.rank, d.src, xt, dnnl_format_tag_any));
  TRY(dnnl_memory_desc_init_by_tag(&dst_any, d.rank, d.dst, yt, dnnl_format_tag_any));
  TRY(dnnl_memory_desc_init_by_tag(&w_any, d.w_rank, d.w, dnnl_s8, dnnl_format_tag_any));
  TRY(dnnl_memory_desc_init_by_tag(&b_md, 1, d.bias, dnnl_s32, dnnl_x));
  TRY(dnnl_memory_desc_init_by_tag(&src_plain, d.rank, d.src, xt, gs__dnnl_plain_tag(d.rank)));
  TRY(dnnl_memory_desc_init_by_tag(&dst_plain, d.rank, d.dst, yt, gs__dnnl_plain_tag(d.rank)));
  TRY(dnnl_memory_desc_init_by_tag(&w_plain, d.w_rank, d.w, dnnl_s8,
                                   gs__dnnl_weights_tag(d.rank, a->group > 1)));
  dnnl_convolution_desc_t cd;
  TRY(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                 dnnl_convolution_direct, &src_any, &w_any,
                                                 bias ? &b_md : NULL, &dst_any, d.strides,
                                                 d.dil, d.pl, d.pr));
  dnnl_primitive_attr_t attr = NULL;
  TRY(dnnl_primitive_attr_create(&attr));
  if (!ours) {
    TRY(dnnl_primitive_attr_set_output_scales(attr, s->n_scales, s->n_scales > 1 ? 1 << 1 : 0,
                                              s->scales));
    TRY(dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_SRC, 1, 0, &s->x_zero));
    TRY(dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_DST, 1, 0, &s->y_zero));
  }
  dnnl_primitive_desc_t pd = NULL;
  TRY(dnnl_primitive_desc_create(&pd, &cd, attr, engine, NULL));
  if (attr)
    dnnl_primitive_attr_destroy(attr);
  if (st != dnnl_success)
    return st;
  const dnnl_memory_desc_t *src_md = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  const dnnl_memory_desc_t *dst_md = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  const dnnl_memory_desc_t *w_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  TRY(dnnl_primitive_create(&s->conv, pd));
  TRY(gs__dnnl_reorder_between(&src_plain, src_md, &s->src_reorder));
  TRY(gs__dnnl_reorder_between(dst_md, &dst_plain, &s->dst_reorder));
  TRY(gs__dnnl_reorder_between(&w_plain, w_md, &s->w_reorder));
  TRY(dnnl_memory_create(&s->src_plain, &src_plain, engine, DNNL_MEMORY_NONE));
  TRY(dnnl_memory_create(&s->dst_plain, &dst_plain, engine, DNNL_MEMORY_NONE));
  TRY(dnnl_memory_create(&s->w_plain, &w_plain, engine, DNNL_MEMORY_NONE));
  TRY(dnnl_memory_create(&s->bias, &b_md, engine, DNNL_MEMORY_NONE));
  if (s->src_reorder)
    TRY(dnnl_memory_create(&s->src_cl, src_md, engine, DNNL_MEMORY_ALLOCATE));
  if (s->dst_reorder)
    TRY(dnnl_memory_create(&s->dst_cl, dst_md, engine, DNNL_MEMORY_ALLOCATE));
  if (s->w_reorder)
    TRY(dnnl_memory_create(&s->w_blocked, w_md, engine, DNNL_MEMORY_ALLOCATE));
  TRY(dnnl_stream_create(&s->stream, engine, dnnl_stream_default_flags));
  if (st == dnnl_success && ours && !make_buffers(s, c, op))
    st = dnnl_out_of_memory;
#undef TRY
  dnnl_primitive_desc_destroy(pd);
  return st;
}

/* The requantising scales and the zero points of this run into *want;
 * false where oneDNN cannot take the op (weight zero points, uint8 weights).
 * ConvInteger has none: its zero points are taken away afterwards. */
static bool params_of(const gs_op_call *c, const qconv_op *op, void *const *p,
                      qconv_state *want) {
  if (op->integer)
    return true;
  if (c->in[op->w].dtype != GS_DT_INT8)
    return false;
  int64_t n_w = gs_shape_numel(&c->in[op->w_zero].shape);
  for (int64_t i = 0; i < n_w; i++)
    if (((const int8_t *)p[op->w_zero])[i] != 0)
      return false;
  const float *ws = p[4];
  float xs = *(const float *)p[1], ys = *(const float *)p[6];
  want->n_scales = gs_shape_numel(&c->in[4].shape);
  if (!(want->scales = malloc(sizeof(float) * (size_t)want->n_scales)))
    return false;
  for (int64_t i = 0; i < want->n_scales; i++)
    want->scales[i] = xs * ws[i] / ys;
  want->x_zero = gs_q_load(c->in[0].dtype, p[X_ZERO], 0);
  want->y_zero = gs_q_load(c->out[0].dtype, p[7], 0);
  return true;
}

static bool same_params(const qconv_state *a, const qconv_state *b) {
  return a->n_scales == b->n_scales && a->x_zero == b->x_zero && a->y_zero == b->y_zero &&
         (a->n_scales == 0 || /* ConvInteger's: none, and no memcmp of NULL */
          memcmp(a->scales, b->scales, sizeof(float) * (size_t)a->n_scales) == 0);
}

static dnnl_status_t reorder(dnnl_stream_t stream, dnnl_primitive_t r, dnnl_memory_t from,
                             dnnl_memory_t to) {
  dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  return dnnl_primitive_execute(r, stream, 2, args);
}

/* The weights of output channel o that meet the input, summed per output
 * position: over the taps whose input lies inside (not in the padding),
 * and over the group's input channels. */
static bool sum_windows(const qconv_state *s, const gs_op_call *c, const int8_t *w) {
  const gs_conv_attrs *a = &((const gs_quant_attrs *)c->attrs)->conv;
  int64_t chans = c->in[0].shape.dims[1] / a->group, oc = c->out[0].shape.dims[1];
  int64_t taps = s->g.k_size, outs = s->g.out_size;
  /* Each channel's weights summed over its inputs, a tap at a time; then
   * per position, which taps meet the input is found once for all channels. */
  int32_t *tap_sum = calloc((size_t)(oc * taps + 1), sizeof *tap_sum);
  bool *inside = malloc((size_t)taps + 1);
  if (!tap_sum || !inside) {
    free(tap_sum);
    free(inside);
    return false;
  }
  for (int64_t o = 0; o < oc; o++)
    for (int64_t ci = 0; ci < chans; ci++)
      for (int64_t tap = 0; tap < taps; tap++)
        tap_sum[o * taps + tap] += w[(o * chans + ci) * taps + tap];
  for (int64_t pos = 0; pos < outs; pos++) {
    for (int64_t tap = 0; tap < taps; tap++)
      inside[tap] = tap_source(&s->g, pos, tap) >= 0;
    for (int64_t o = 0; o < oc; o++) {
      int32_t sum = 0;
      for (int64_t tap = 0; tap < taps; tap++)
        sum += inside[tap] ? tap_sum[o * taps + tap] : 0;
      s->window_sum[o * outs + pos] = sum;
    }
  }
  free(tap_sum);
  free(inside);
  return true;
}

/* x - x_zero of image img's group g, summed over the group's channels
 * (into chan_sum, a plane) and then over each output position's taps
 * inside the input (into box); uint32, which wraps where int32 would
 * overflow. */
#define DEFINE_ADD_CHANNEL(SUFFIX, T)                                                           \
  GS_VECTOR_CLONES                                                                            \
  static void add_channel_##SUFFIX(uint32_t *sum, const T *x, int64_t n) {                     \
    for (int64_t i = 0; i < n; i++)                                                            \
      sum[i] += (uint32_t)(int32_t)x[i];                                                       \
  }
DEFINE_ADD_CHANNEL(u8, uint8_t)
DEFINE_ADD_CHANNEL(s8, int8_t)

static void box_sums(const qconv_state *s, const gs_op_call *c, const void *x, int32_t x_zero,
                     int64_t img, int64_t g) {
  const gs_conv_attrs *a = &((const gs_quant_attrs *)c->attrs)->conv;
  const gs_shape *xs = &c->in[0].shape;
  int64_t chans = xs->dims[1] / a->group, plane = s->g.in_size, taps = s->g.k_size;
  int64_t outs = s->g.out_size;
  uint32_t zeros = (uint32_t)chans * (uint32_t)x_zero, *chan_sum = s->chan_sum;
  for (int64_t i = 0; i < plane; i++)
    chan_sum[i] = 0u - zeros;
  for (int64_t ci = 0; ci < chans; ci++) {
    int64_t at = (img * xs->dims[1] + g * chans + ci) * plane;
    if (c->in[0].dtype == GS_DT_UINT8)
      add_channel_u8(chan_sum, (const uint8_t *)x + at, plane);
    else
      add_channel_s8(chan_sum, (const int8_t *)x + at, plane);
  }
  for (int64_t pos = 0; pos < outs; pos++) {
    const int32_t *src = s->sources + pos * taps;
    uint32_t sum = 0;
    for (int64_t tap = 0; tap < taps; tap++)
      sum += src[tap] >= 0 ? chan_sum[src[tap]] : 0;
    s->box[pos] = sum;
  }
}

/* x + shift into H (first half) and L (second), as the split takes them. */
static void split_input(const gs_op_call *c, const void *x, uint8_t *halves) {
  int64_t n = gs_shape_numel(&c->in[0].shape);
  gs__q_split(c->in[0].dtype, x, n, halves, halves + n);
}

/* One output row of the split's output stage, for 8-bit type T: acc as in
 * the comment at the top (wrapping as int32 hardware does), requantised. */
#define DEFINE_FINISH_ROW(SUFFIX, T)                                                            \
  GS_VECTOR_CLONES                                                                            \
  static void finish_row_##SUFFIX(const int32_t *high, const int32_t *low, const int32_t *ws,  \
                                  uint32_t shift, uint32_t bias, float scale, int32_t lo,      \
                                  int32_t hi, int32_t zero, T *y, int64_t n) {                 \
    for (int64_t p = 0; p < n; p++) {                                                          \
      int32_t v = (int32_t)(128u * (uint32_t)high[p] + (uint32_t)low[p] -                      \
                            shift * (uint32_t)ws[p] + bias);                                   \
      y[p] = (T)(gs_q_round((float)v * scale, lo, hi) + zero);                                 \
    }                                                                                          \
  }
DEFINE_FINISH_ROW(u8, uint8_t)
DEFINE_FINISH_ROW(s8, int8_t)

static void finish_split(const qconv_state *s, const gs_op_call *c, const int32_t *bias,
                         void *y) {
  const gs_shape *ys = &c->out[0].shape;
  int64_t images = ys->dims[0], chans = ys->dims[1];
  int64_t outs = chans ? gs_shape_numel(ys) / (images * chans) : 0;
  const int32_t *high = s->acc, *low = s->acc + images * chans * outs;
  uint32_t shift = (uint32_t)((c->in[0].dtype == GS_DT_INT8 ? 128 : 0) + s->x_zero);
  gs_dtype t = c->out[0].dtype;
  int32_t lo = gs_q_lo(t) - s->y_zero, hi = gs_q_hi(t) - s->y_zero;
  for (int64_t n = 0; n < images; n++)
    for (int64_t o = 0; o < chans; o++) {
      int64_t at = (n * chans + o) * outs;
      uint32_t b = bias ? (uint32_t)bias[o] : 0;
      float scale = s->scales[s->n_scales > 1 ? o : 0];
      const int32_t *ws = s->window_sum + o * outs;
      if (t == GS_DT_UINT8)
        finish_row_u8(high + at, low + at, ws, shift, b, scale, lo, hi, s->y_zero,
                      (uint8_t *)y + at, outs);
      else
        finish_row_s8(high + at, low + at, ws, shift, b, scale, lo, hi, s->y_zero,
                      (int8_t *)y + at, outs);
    }
}

/* ConvInteger's output stage for one output channel's row (see the top):
 * y = conv - zu window_sum - zw box, conv being 128 high + low when split
 * and y itself otherwise; in uint32, which wraps as int32 hardware does. */
GS_VECTOR_CLONES
static void integer_row(const int32_t *high, const int32_t *low, const int32_t *ws,
                        const uint32_t *box, uint32_t zu, uint32_t zw, int32_t *y, int64_t n) {
  if (low)
    for (int64_t p = 0; p < n; p++)
      y[p] = (int32_t)(128u * (uint32_t)high[p] + (uint32_t)low[p]);
  for (int64_t p = 0; p < n; p++)
    y[p] = (int32_t)((uint32_t)y[p] - zu * (uint32_t)ws[p]);
  if (zw)
    for (int64_t p = 0; p < n; p++)
      y[p] = (int32_t)((uint32_t)y[p] - zw * box[p]);
}

/* This run's weight zero points per output channel into s->w_zero, as of
 * int8 weights (uint8 ones and their zero points are moved down by 128). */
static void weight_zeros(const qconv_state *s, const gs_op_call *c, const qconv_op *op,
                         void *const *p) {
  gs_dtype t = c->in[op->w].dtype;
  int32_t shift = t == GS_DT_UINT8 ? 128 : 0;
  bool given = gs_op_given(c, op->w_zero);
  int64_t n = given ? gs_shape_numel(&c->in[op->w_zero].shape) : 0;
  for (int64_t o = 0; o < c->out[0].shape.dims[1]; o++)
    s->w_zero[o] = (given ? gs_q_load(t, p[op->w_zero], n > 1 ? o : 0) : 0) - shift;
}

/* Output channels [lo, hi) of image n through integer_row; `at0` is the
 * image's first output. */
static void integer_rows(const qconv_state *s, int32_t *y, const int32_t *low, uint32_t zu,
                         int64_t outs, int64_t at0, int64_t lo, int64_t hi) {
  for (int64_t o = lo; o < hi; o++) {
    int64_t at = at0 + o * outs;
    integer_row(s->split ? s->acc + at : y + at, low ? low + at : NULL, s->window_sum + o * outs,
                s->box, zu, (uint32_t)s->w_zero[o], y + at, outs);
  }
}

static void finish_integer(const qconv_state *s, const gs_op_call *c, void *const *p) {
  const gs_conv_attrs *a = &((const gs_quant_attrs *)c->attrs)->conv;
  const gs_shape *ys = &c->out[0].shape;
  int64_t images = ys->dims[0], chans = ys->dims[1], per_group = chans / a->group;
  int64_t outs = s->g.out_size;
  int32_t x_zero = gs_op_given(c, X_ZERO) ? gs_q_load(c->in[0].dtype, p[X_ZERO], 0) : 0;
  uint32_t zu = (uint32_t)x_zero + (s->split && c->in[0].dtype == GS_DT_INT8 ? 128u : 0u);
  int32_t *y = p[c->n_in];
  const int32_t *low = s->split ? s->acc + images * chans * outs : NULL;
  for (int64_t n = 0; n < images; n++)
    for (int64_t g = 0; g < a->group; g++) {
      int64_t first = g * per_group;
      bool boxed = false; /* box sums only where a weight zero point needs them */
      for (int64_t o = first; !boxed && o < first + per_group; o++)
        boxed = s->w_zero[o] != 0;
      if (boxed)
        box_sums(s, c, p[0], x_zero, n, g);
      GS_PARALLEL_RANGES(per_group, GS_PARALLEL_GRAIN / (outs + 1) + 1, lo, hi,
                         integer_rows(s, y, low, zu, outs, n * chans * outs, first + lo,
                                      first + hi));
    }
}

/* The weights as the primitive takes them: int8, uint8 ones moved down by
 * 128 into the state's copy; kept while they stay the same. */
static dnnl_status_t take_weights(qconv_state *s, const gs_op_call *c, const qconv_op *op,
                                  void *const *p) {
  const void *w = p[op->w];
  if (s->w_s8)
    gs__q_flip(w, s->w_s8, gs_shape_numel(&c->in[op->w].shape));
  const int8_t *w_s8 = s->w_s8 ? s->w_s8 : w;
  dnnl_memory_set_data_handle(s->w_plain, (void *)w_s8);
  dnnl_status_t st = s->w_reorder ? reorder(s->stream, s->w_reorder, s->w_plain, s->w_blocked)
                                  : dnnl_success;
  if (st == dnnl_success && (s->split || op->integer) && !sum_windows(s, c, w_s8))
    st = dnnl_out_of_memory;
  return st;
}

static dnnl_status_t execute(qconv_state *s, const gs_op_call *c, const qconv_op *op,
                             void *const *p) {
  bool has_bias = ((const gs_quant_attrs *)c->attrs)->conv.has_bias && !s->split && !op->integer;
  if (s->split)
    split_input(c, p[0], s->halves);
  dnnl_memory_set_data_handle(s->src_plain, s->split ? s->halves : p[0]);
  dnnl_memory_set_data_handle(s->dst_plain, s->split ? (void *)s->acc : p[c->n_in]);
  if (!s->w_s8)
    dnnl_memory_set_data_handle(s->w_plain, p[op->w]);
  if (has_bias)
    dnnl_memory_set_data_handle(s->bias, p[8]);
  dnnl_status_t st = dnnl_success;
  /* Weights are reordered again where they may have changed. */
  bool weights_const = ((const gs_quant_attrs *)c->attrs)->conv.weights_const;
  if (!weights_const || s->w_cached != p[op->w]) {
    st = take_weights(s, c, op, p);
    s->w_cached = st == dnnl_success ? p[op->w] : NULL; /* what failed is done again */
  }
  if (st == dnnl_success && s->src_reorder)
    st = reorder(s->stream, s->src_reorder, s->src_plain, s->src_cl);
  if (st == dnnl_success) {
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, s->src_reorder ? s->src_cl : s->src_plain},
        {DNNL_ARG_WEIGHTS, s->w_reorder ? s->w_blocked : s->w_plain},
        {DNNL_ARG_DST, s->dst_reorder ? s->dst_cl : s->dst_plain},
        {DNNL_ARG_BIAS, s->bias},
    };
    st = dnnl_primitive_execute(s->conv, s->stream, has_bias ? 4 : 3, args);
  }
  if (st == dnnl_success && s->dst_reorder)
    st = reorder(s->stream, s->dst_reorder, s->dst_cl, s->dst_plain);
  if (st == dnnl_success)
    st = dnnl_stream_wait(s->stream);
  if (st == dnnl_success && op->integer) {
    weight_zeros(s, c, op, p);
    finish_integer(s, c, p);
  }
  else if (st == dnnl_success && s->split)
    finish_split(s, c, ((const gs_quant_attrs *)c->attrs)->conv.has_bias ? p[8] : NULL,
                 p[c->n_in]);
  return st;
}

static int run(const gs_op_call *c, const qconv_op *op, void *const *p, bool *done) {
  *done = false;
  dnnl_engine_t engine = gs__dnnl_engine();
  /* an empty input or weights with a non-empty output (no input channels)
   * is the caller's: oneDNN's result and the sums' pointers need data */
  if (!engine || !c->state || gs_shape_numel(&c->out[0].shape) == 0 ||
      gs_shape_numel(&c->in[0].shape) == 0 || gs_shape_numel(&c->in[op->w].shape) == 0)
    return 0;
  qconv_state *s = c->state->ptr;
  if (!s) {
    if (!(s = calloc(1, sizeof *s)))
      return gs_error(GS_ENOMEM, "out of memory for the oneDNN state of node %s", c->node_name);
    c->state->ptr = s;
    c->state->free = destroy_state;
  }
  if (s->failed)
    return 0;
  qconv_state want = {0};
  if (!params_of(c, op, p, &want)) {
    free(want.scales);
    return 0; /* this run's weights need the im2col path */
  }
  if (!s->built || !same_params(s, &want)) {
    release(s);
    s->scales = want.scales;
    s->n_scales = want.n_scales;
    s->x_zero = want.x_zero;
    s->y_zero = want.y_zero;
    s->built = true;
    s->split = !gs__dnnl_int8_exact();
    if (build(s, c, op, engine) != dnnl_success) {
      GS_LOGD("engine", "node %s: oneDNN cannot run this int8 convolution; using im2col",
              c->node_name);
      s->failed = true;
      return 0;
    }
  } else {
    free(want.scales);
  }
  dnnl_status_t st = execute(s, c, op, p);
  if (st == dnnl_out_of_memory)
    return gs_error(GS_ENOMEM, "node %s: out of memory for an int8 convolution", c->node_name);
  if (st != dnnl_success)
    return gs_error(GS_EDEVICE, "node %s: oneDNN int8 convolution failed (status %d)",
                    c->node_name, (int)st);
  *done = true;
  return 0;
}

int gs__dnnl_qconv(const gs_op_call *c, void *const *p, bool *done) {
  return run(c, &qlinear_conv, p, done);
}

int gs__dnnl_conv_integer(const gs_op_call *c, void *const *p, bool *done) {
  return run(c, &conv_integer, p, done);
}

/* k_shape.c - CPU kernels of the ops that move data: copies (Reshape and
 * its kin), Transpose, Concat, Split, Slice, Gather, Expand, Pad, Resize,
 * Shape and ConstantOfShape. They work on bytes, whatever the type. */
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/parallel.h"
#include "hal/cpu/ops/transpose_2d.h"
#include "hal/op/op_launch.h"

#include "base/error.h"

#include <stdlib.h>

static size_t esize(const gs_tensor_desc *d) { return gs_dtype_size(d->dtype); }

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout: the bytes as they are. */
static int k_copy(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  size_t bytes = (size_t)gs_shape_numel(&c->in[0].shape) * esize(&c->in[0]);
  void *y = k->ptr[c->n_in];
  if (y != k->ptr[0] && bytes)
    memmove(y, k->ptr[0], bytes);
  if (c->n_out > 1 && k->ptr[c->n_in + 1]) /* Dropout's mask: everything kept */
    memset(k->ptr[c->n_in + 1], 1, (size_t)gs_shape_numel(&c->out[1].shape));
  return 0;
}

/* Output rows [lo, hi) of a transpose (a row: the output's last dim). */
static void transpose_rows(const char *x, char *y, size_t es, const gs_shape *ys,
                           const int64_t *src_stride, int64_t lo, int64_t hi) {
  int last = ys->rank - 1;
  int64_t len = last >= 0 ? ys->dims[last] : 1, step = last >= 0 ? src_stride[last] : 0;
  int64_t idx[GS_MAX_DIMS] = {0}, off = 0, rest = lo;
  for (int d = last - 1; d >= 0; d--) { /* where row lo starts */
    idx[d] = rest % ys->dims[d];
    rest /= ys->dims[d];
    off += idx[d] * src_stride[d];
  }
  for (int64_t row = lo; row < hi; row++) {
    int64_t i = row * len;
    if (step == 1) { /* the row lies in one piece in the source too */
      memcpy(y + (size_t)i * es, x + (size_t)off * es, (size_t)len * es);
    } else if (es == 4) {
      const uint32_t *xs4 = (const uint32_t *)x + off;
      uint32_t *y4 = (uint32_t *)y + i;
      for (int64_t j = 0; j < len; j++)
        y4[j] = xs4[j * step];
    } else {
      for (int64_t j = 0; j < len; j++)
        memcpy(y + (size_t)(i + j) * es, x + (size_t)(off + j * step) * es, es);
    }
    for (int d = last - 1; d >= 0; d--) {
      idx[d]++;
      off += src_stride[d];
      if (idx[d] < ys->dims[d])
        break;
      off -= src_stride[d] * idx[d];
      idx[d] = 0;
    }
  }
}

/* Where the merged output is [outer,] m, n with m contiguous in the source
 * (NCHW <-> NHWC and their kin) and the values four bytes wide, a batch of
 * 2-D transposes in blocks; 1 if it ran. */
static int transpose_in_blocks(const char *x, char *y, size_t es, const gs_shape *ym,
                               const int64_t *src_stride) {
  int r = ym->rank;
  if (es != 4 || r < 2 || r > 3 || src_stride[r - 2] != 1)
    return 0;
  int64_t m = ym->dims[r - 2], n = ym->dims[r - 1], step = src_stride[r - 1];
  if (m < 8 || n < 8)
    return 0; /* too thin for a block: the row copy below does as well */
  int64_t outer = r == 3 ? ym->dims[0] : 1, outer_step = r == 3 ? src_stride[0] : 0;
  gs__transpose_batch_4((const uint32_t *)x, (uint32_t *)y, outer, m, n, step, outer_step);
  return 1;
}

static int k_transpose(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_transpose_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  size_t es = esize(&c->in[0]);
  int64_t xst[GS_MAX_DIMS], src_stride[GS_MAX_DIMS];
  gs_launch_contiguous_strides(xs, xst);
  /* The output's dims, with those of size 1 dropped and neighbours that
   * are neighbours in the source too merged: a channel shuffle's rows of
   * H*W floats are copied whole instead of one float at a time. */
  gs_shape ym = {0};
  for (int d = 0; d < ys->rank; d++) {
    int64_t n = ys->dims[d], st = xst[a->perm[d]];
    if (n == 1)
      continue;
    if (ym.rank > 0 && src_stride[ym.rank - 1] == st * n) {
      ym.dims[ym.rank - 1] *= n;
      src_stride[ym.rank - 1] = st;
      continue;
    }
    ym.dims[ym.rank] = n;
    src_stride[ym.rank++] = st;
  }
  int64_t len = ym.rank > 0 ? ym.dims[ym.rank - 1] : 1;
  int64_t rows = len ? gs_shape_numel(ys) / len : 0;
  const char *x = k->ptr[0];
  char *y = k->ptr[1];
  if (transpose_in_blocks(x, y, es, &ym, src_stride))
    return 0;
  GS_PARALLEL_RANGES(rows, GS_PARALLEL_GRAIN / (len ? len : 1), lo, hi,
                     transpose_rows(x, y, es, &ym, src_stride, lo, hi));
  return 0;
}

/* Rows [lo, hi) of a Concat's output: each the inputs' rows in turn. */
static void concat_rows(const gs_cpu_kernel_call *k, int axis, int64_t inner, size_t es,
                        int64_t lo, int64_t hi) {
  const gs_op_call *c = gs_kcall(k);
  size_t out_row = (size_t)(c->out[0].shape.dims[axis] * inner) * es;
  char *y = k->ptr[c->n_in];
  for (int64_t o = lo; o < hi; o++) {
    size_t at = 0;
    for (int j = 0; j < c->n_in; j++) {
      size_t chunk = (size_t)(c->in[j].shape.dims[axis] * inner) * es;
      if (chunk)
        memcpy(y + (size_t)o * out_row + at, (const char *)k->ptr[j] + (size_t)o * chunk, chunk);
      at += chunk;
    }
  }
}

/* Spread over the threads by rows before the axis: a channel shuffle's
 * Concat (plan_shuffle.c) has a row per image and channel. */
static int k_concat(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  int axis = ((const gs_axis_attrs *)c->attrs)->axis;
  const gs_shape *ys = &c->out[0].shape;
  size_t es = esize(&c->out[0]);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++)
    outer *= ys->dims[i];
  for (int i = axis + 1; i < ys->rank; i++)
    inner *= ys->dims[i];
  int64_t row = ys->dims[axis] * inner;
  int64_t grain = row > 0 ? GS_PARALLEL_GRAIN / row + 1 : outer + 1;
  GS_PARALLEL_RANGES(outer, grain, lo, hi, concat_rows(k, axis, inner, es, lo, hi));
  return 0;
}

static int k_split(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  int axis = ((const gs_axis_attrs *)c->attrs)->axis;
  const gs_shape *xs = &c->in[0].shape;
  size_t es = esize(&c->in[0]);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++)
    outer *= xs->dims[i];
  for (int i = axis + 1; i < xs->rank; i++)
    inner *= xs->dims[i];
  const char *x = k->ptr[0];
  size_t in_row = (size_t)(xs->dims[axis] * inner) * es, at = 0;
  for (int j = 0; j < c->n_out; j++) {
    size_t chunk = (size_t)(c->out[j].shape.dims[axis] * inner) * es;
    char *y = k->ptr[c->n_in + j];
    for (int64_t o = 0; y && o < outer && chunk; o++)
      memcpy(y + (size_t)o * chunk, x + (size_t)o * in_row + at, chunk);
    at += chunk;
  }
  return 0;
}

/* Runs [lo, hi) of a Slice's output: run r is the output's index r over
 * the dims before `last`, taking dim `last` (and the whole dims after it,
 * `inner` values each) from the input. */
static void slice_runs(const gs_cpu_kernel_call *k, const int64_t *xst, int last, int64_t inner,
                       int64_t lo, int64_t hi) {
  const gs_op_call *c = gs_kcall(k);
  const gs_slice_attrs *a = c->attrs;
  const gs_shape *ys = &c->out[0].shape;
  size_t es = esize(&c->in[0]), run = (size_t)inner * es;
  int64_t len = ys->dims[last];
  const char *x = k->ptr[0];
  char *y = k->ptr[c->n_in];
  for (int64_t r = lo; r < hi; r++) {
    int64_t off = 0, rest = r;
    for (int d = last - 1; d >= 0; d--) {
      off += (a->start[d] + rest % ys->dims[d] * a->step[d]) * xst[d];
      rest /= ys->dims[d];
    }
    char *out = y + (size_t)(r * len) * run;
    if (a->step[last] == 1) {
      memcpy(out, x + (size_t)(off + a->start[last] * xst[last]) * es, (size_t)len * run);
      continue;
    }
    for (int64_t j = 0; j < len; j++)
      memcpy(out + (size_t)j * run,
             x + (size_t)(off + (a->start[last] + j * a->step[last]) * xst[last]) * es, run);
  }
}

static int k_slice(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_slice_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  int64_t xst[GS_MAX_DIMS];
  gs_launch_contiguous_strides(xs, xst);
  int64_t n = gs_shape_numel(ys);
  if (n == 0)
    return 0;
  if (ys->rank == 0) {
    memcpy(k->ptr[c->n_in], k->ptr[0], esize(&c->in[0]));
    return 0;
  }
  /* Trailing dims taken whole are one run with the dim before them: a
   * channel slice of NCHW copies C*H*W values at a time, not W. */
  int last = ys->rank - 1;
  int64_t inner = 1;
  while (last > 0 && a->start[last] == 0 && a->step[last] == 1 &&
         ys->dims[last] == xs->dims[last])
    inner *= ys->dims[last--];
  int64_t per_run = ys->dims[last] * inner;
  GS_PARALLEL_RANGES(n / per_run, GS_PARALLEL_GRAIN / per_run + 1, lo, hi,
                     slice_runs(k, xst, last, inner, lo, hi));
  return 0;
}

/* Blocks [lo, hi) of a Gather's output (block o * n_idx + j: index j of
 * outer slice o); the indexes were checked. */
static void gather_blocks(const char *x, char *y, gs_dtype idx_dt, const void *idx, int64_t n_idx,
                          int64_t dim, size_t block, int64_t lo, int64_t hi) {
  for (int64_t b = lo; b < hi; b++) {
    int64_t o = b / n_idx, ix = gs_ldi(idx_dt, idx, b % n_idx);
    if (ix < 0)
      ix += dim;
    memcpy(y + (size_t)b * block, x + (size_t)(o * dim + ix) * block, block);
  }
}

static int k_gather(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  int axis = ((const gs_axis_attrs *)c->attrs)->axis;
  const gs_shape *xs = &c->in[0].shape;
  size_t es = esize(&c->in[0]);
  int64_t outer = 1, inner = 1, dim = xs->dims[axis];
  for (int i = 0; i < axis; i++)
    outer *= xs->dims[i];
  for (int i = axis + 1; i < xs->rank; i++)
    inner *= xs->dims[i];
  int64_t n_idx = gs_shape_numel(&c->in[1].shape);
  const char *x = k->ptr[0];
  char *y = k->ptr[2];
  size_t block = (size_t)inner * es;
  for (int64_t j = 0; j < n_idx; j++) { /* every index checked before any copy */
    int64_t ix = gs_ldi(c->in[1].dtype, k->ptr[1], j);
    if (ix < -dim || ix >= dim)
      return gs_error(GS_EINVAL, "node %s (Gather): index %lld is out of range [%lld, %lld)",
                      c->node_name, (long long)ix, (long long)-dim, (long long)dim);
  }
  GS_PARALLEL_RANGES(outer * n_idx, GS_PARALLEL_GRAIN / (inner ? inner : 1), lo, hi,
                     gather_blocks(x, y, c->in[1].dtype, k->ptr[1], n_idx, dim, block, lo, hi));
  return 0;
}

static int k_expand(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  gs__cpu_broadcast_copy(&c->in[0].shape, k->ptr[0], &c->out[0].shape, k->ptr[2],
                         esize(&c->in[0]));
  return 0;
}

static int k_shape(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_shape_attrs *a = c->attrs;
  for (int i = a->start; i < a->end; i++)
    ((int64_t *)k->ptr[1])[i - a->start] = c->in[0].shape.dims[i];
  return 0;
}

static int k_constant_of_shape(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_constant_attrs *a = c->attrs;
  size_t es = esize(&c->out[0]);
  int64_t n = gs_shape_numel(&c->out[0].shape);
  char *y = k->ptr[1];
  for (int64_t i = 0; i < n; i++)
    memcpy(y + (size_t)i * es, a->value, es);
  return 0;
}

static int k_pad(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_pad_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  gs_dtype dt = c->in[0].dtype;
  size_t es = esize(&c->in[0]);
  uint8_t fill[8] = {0};
  gs_st(dt, fill, 0, a->value);
  int64_t xst[GS_MAX_DIMS];
  gs_launch_contiguous_strides(xs, xst);
  int64_t n = gs_shape_numel(ys), idx[GS_MAX_DIMS] = {0};
  const char *x = k->ptr[0];
  char *y = k->ptr[c->n_in];
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    bool outside = false;
    for (int d = 0; d < ys->rank; d++) {
      int64_t s = idx[d] - a->begin[d], len = xs->dims[d];
      if (s < 0 || s >= len) {
        if (a->mode == GS_PAD_CONSTANT) {
          outside = true;
          break;
        }
        if (a->mode == GS_PAD_EDGE)
          s = s < 0 ? 0 : len - 1;
        else if (a->mode == GS_PAD_WRAP)
          s = ((s % len) + len) % len;
        else /* reflect, pads smaller than the axis */
          s = s < 0 ? -s : 2 * (len - 1) - s;
      }
      off += s * xst[d];
    }
    memcpy(y + (size_t)i * es, outside ? (const char *)fill : x + (size_t)off * es, es);
    for (int d = ys->rank - 1; d >= 0; d--) {
      if (++idx[d] < ys->dims[d])
        break;
      idx[d] = 0;
    }
  }
  return 0;
}

/* Input coordinate of output coordinate o along dim d, as ONNX's
 * coordinate_transformation_mode defines it; *outside for the points of
 * tf_crop_and_resize that fall off the input. */
static double resize_source(const gs_resize_attrs *a, int d, int64_t o, int64_t in, int64_t out,
                            bool *outside) {
  double s = a->scale[d], len = a->out_len[d], x = (double)o;
  *outside = false;
  switch (a->coord) {
  case GS_COORD_ASYMMETRIC: return x / s;
  /* These two take the output's length where ONNX's reference takes scale
   * x input (they differ for scales that do not give whole lengths):
   * onnxruntime does so, and models are checked against it. */
  case GS_COORD_ALIGN_CORNERS: return out == 1 ? 0.0 : x * (double)(in - 1) / (double)(out - 1);
  case GS_COORD_PYTORCH_HALF_PIXEL: return out > 1 ? (x + 0.5) / s - 0.5 : 0.0;
  case GS_COORD_HALF_PIXEL_SYMMETRIC: {
    double adjust = (double)(int64_t)floor(len) / len, offset = (double)in / 2 * (1 - adjust);
    return offset + (x + 0.5) / s - 0.5;
  }
  case GS_COORD_TF_CROP_AND_RESIZE: {
    double lo = a->roi_start[d], hi = a->roi_end[d], span = (double)(in - 1);
    double v = len > 1 ? lo * span + x * (hi - lo) * span / (len - 1) : 0.5 * (lo + hi) * span;
    *outside = v < 0 || v > span;
    return v;
  }
  case GS_COORD_HALF_PIXEL: break;
  }
  return (x + 0.5) / s - 0.5;
}

static int64_t nearest_index(gs_nearest_mode m, double x, int64_t in) {
  int64_t i;
  switch (m) {
  case GS_NEAREST_FLOOR: i = (int64_t)floor(x); break;
  case GS_NEAREST_CEIL: i = (int64_t)ceil(x); break;
  case GS_NEAREST_ROUND_PREFER_CEIL: i = (int64_t)floor(x + 0.5); break;
  default: i = x == floor(x) + 0.5 ? (int64_t)floor(x) : (int64_t)floor(x + 0.5); break;
  }
  return i < 0 ? 0 : i >= in ? in - 1 : i;
}

static double cubic_weight(double t, double A) {
  t = fabs(t);
  if (t <= 1)
    return ((A + 2) * t - (A + 3)) * t * t + 1;
  if (t < 2)
    return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A;
  return 0;
}

/* The taps of one dim: for each output coordinate, `count` input indices
 * (clamped to the edge) and their weights; outside[o] where
 * tf_crop_and_resize extrapolates. */
typedef struct resize_taps {
  int count;
  int64_t *index;
  double *weight;
  bool *outside;
} resize_taps;

static int taps_per_point(const gs_resize_attrs *a, int d) {
  double s = a->antialias && a->scale[d] < 1 ? a->scale[d] : 1.0;
  if (a->mode == GS_RESIZE_NEAREST)
    return 1;
  int64_t start = (int64_t)floor((a->mode == GS_RESIZE_CUBIC ? -2.0 : -1.0) / s) + 1;
  return (int)(2 - 2 * start); /* taps start .. 1 - start */
}

static void fill_taps(const gs_resize_attrs *a, int d, int64_t in, int64_t out, resize_taps *t) {
  double s = a->antialias && a->scale[d] < 1 ? a->scale[d] : 1.0;
  bool cubic = a->mode == GS_RESIZE_CUBIC;
  int64_t start = a->mode == GS_RESIZE_NEAREST ? 0 : (int64_t)floor((cubic ? -2.0 : -1.0) / s) + 1;
  for (int64_t o = 0; o < out; o++) {
    double x = resize_source(a, d, o, in, out, &t->outside[o]);
    int64_t *ix = t->index + o * t->count;
    double *w = t->weight + o * t->count, sum = 0;
    if (a->mode == GS_RESIZE_NEAREST) {
      ix[0] = nearest_index(a->nearest, x, in);
      w[0] = 1;
      continue;
    }
    double x0 = floor(x), r = x - x0;
    for (int j = 0; j < t->count; j++) {
      int64_t at = (int64_t)x0 + start + j;
      double dist = ((double)(start + j) - r) * s;
      w[j] = cubic ? cubic_weight(dist, a->cubic_a) : fmax(0.0, 1 - fabs(dist));
      if (cubic && a->exclude_outside && (at < 0 || at >= in))
        w[j] = 0;
      ix[j] = at < 0 ? 0 : at >= in ? in - 1 : at;
      sum += w[j];
    }
    if ((a->antialias || a->exclude_outside || !cubic) && sum != 0)
      for (int j = 0; j < t->count; j++)
        w[j] /= sum;
  }
}

/* Output elements [lo, hi) of a resize, each from its taps. */
static void resize_range(const gs_op_call *c, const resize_taps *t, const int64_t *xst,
                         const void *x, void *y, int64_t lo, int64_t hi) {
  const gs_resize_attrs *a = c->attrs;
  const gs_shape *ys = &c->out[0].shape;
  gs_dtype dt = c->in[0].dtype;
  int r = ys->rank;
  int64_t idx[GS_MAX_DIMS] = {0}, rest = lo;
  for (int d = r - 1; d >= 0; d--) { /* where element lo is */
    idx[d] = rest % ys->dims[d];
    rest /= ys->dims[d];
  }
  for (int64_t i = lo; i < hi; i++) {
    bool outside = false;
    int64_t combos = 1;
    for (int d = 0; d < r; d++) {
      outside = outside || t[d].outside[idx[d]];
      combos *= t[d].count;
    }
    double v = 0;
    for (int64_t k = 0; !outside && k < combos; k++) {
      double weight = 1;
      int64_t off = 0, left = k;
      for (int d = r - 1; d >= 0; d--) {
        int j = (int)(left % t[d].count);
        left /= t[d].count;
        int64_t at = idx[d] * t[d].count + j;
        weight *= t[d].weight[at];
        off += t[d].index[at] * xst[d];
      }
      if (weight != 0)
        v += weight * gs_ld(dt, x, off);
    }
    if (outside)
      v = a->extrapolation;
    else if (gs_is_int(dt) && a->mode != GS_RESIZE_NEAREST)
      v = nearbyint(v);
    gs_st(dt, y, i, v);
    for (int d = r - 1; d >= 0; d--) {
      if (++idx[d] < ys->dims[d])
        break;
      idx[d] = 0;
    }
  }
}

static int resize_with_taps(const gs_op_call *c, const resize_taps *t, const void *x, void *y) {
  int64_t xst[GS_MAX_DIMS];
  gs_launch_contiguous_strides(&c->in[0].shape, xst);
  GS_PARALLEL_RANGES(gs_shape_numel(&c->out[0].shape), GS_PARALLEL_GRAIN / 8, lo, hi,
                     resize_range(c, t, xst, x, y, lo, hi));
  return 0;
}

static int k_resize(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_resize_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  resize_taps t[GS_MAX_DIMS] = {{0}};
  int rc = 0;
  for (int d = 0; rc == 0 && d < xs->rank; d++) {
    bool same = xs->dims[d] == ys->dims[d] && a->scale[d] == 1.0 &&
                a->coord != GS_COORD_TF_CROP_AND_RESIZE;
    t[d].count = same ? 1 : taps_per_point(a, d);
    size_t pts = (size_t)(ys->dims[d] ? ys->dims[d] : 1);
    t[d].index = malloc(sizeof(int64_t) * pts * (size_t)t[d].count);
    t[d].weight = malloc(sizeof(double) * pts * (size_t)t[d].count);
    t[d].outside = calloc(pts, sizeof(bool));
    if (!t[d].index || !t[d].weight || !t[d].outside) {
      rc = gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name);
    } else if (same) {
      for (int64_t o = 0; o < ys->dims[d]; o++)
        t[d].index[o] = o, t[d].weight[o] = 1;
    } else {
      fill_taps(a, d, xs->dims[d], ys->dims[d], &t[d]);
    }
  }
  if (rc == 0)
    rc = resize_with_taps(c, t, k->ptr[0], k->ptr[c->n_in]);
  for (int d = 0; d < xs->rank; d++) {
    free(t[d].index);
    free(t[d].weight);
    free(t[d].outside);
  }
  return rc;
}

/* gpusrv's GS_IMAGE_TAPS_OP (op_attrs.h) on the host: op_kernels.h's
 * image_taps_u8, image by image, the same integer sums. */
static int k_image_taps(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_image_taps_attrs *a = c->attrs;
  const uint8_t *x = k->ptr[0], *t = k->ptr[1];
  uint8_t *y = k->ptr[2];
  const gs_image_taps_pass *passes = (const void *)(t + a->passes_at);
  const int32_t most = 255 << GS_IMAGE_TAPS_FRACTION_BITS;
  for (int64_t b = 0; b < a->images; b++) {
    const gs_image_taps_pass *g = &passes[b];
    int64_t end = b + 1 < a->images ? passes[b + 1].first : a->elements;
    const int32_t *start = (const int32_t *)(t + g->taps_at), *count = start + g->n_out;
    for (int64_t e = 0; e < end - g->first; e++) {
      int64_t ch = e % g->inner, rest = e / g->inner, o = rest % g->n_out, r = rest / g->n_out;
      const uint8_t *p = x + g->x_at + r * g->in_line + start[o] * g->in_tap + ch;
      const int32_t *w = count + g->n_out + o * g->ksize;
      int32_t sum = 1 << (GS_IMAGE_TAPS_FRACTION_BITS - 1);
      for (int j = 0; j < count[o]; j++)
        sum += p[j * g->in_tap] * w[j];
      sum = sum < 0 ? 0 : sum > most ? most : sum;
      y[g->y_at + e] = (uint8_t)(sum >> GS_IMAGE_TAPS_FRACTION_BITS);
    }
  }
  return 0;
}

#define KERNEL GS_CPU_KERNEL
static const gs_cpu_kernel_entry kernels[] = {
    KERNEL("Reshape", k_copy),     KERNEL("Flatten", k_copy),
    KERNEL("Squeeze", k_copy),     KERNEL("Unsqueeze", k_copy),
    KERNEL("Identity", k_copy),    KERNEL("Dropout", k_copy),
    KERNEL("Transpose", k_transpose), KERNEL("Concat", k_concat),
    KERNEL("Split", k_split),      KERNEL("Slice", k_slice),
    KERNEL("Gather", k_gather),    KERNEL("Expand", k_expand),
    KERNEL("Shape", k_shape),      KERNEL("ConstantOfShape", k_constant_of_shape),
    KERNEL("Pad", k_pad),          KERNEL("Resize", k_resize),
    KERNEL(GS_IMAGE_TAPS_OP, k_image_taps),
};

int gs__cpu_register_shape(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

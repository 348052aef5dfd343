/* k_index.c - CPU kernels of the ops that place elements by index or
 * position (engine/ops/ops_index.c): elements move as bytes where the op
 * only moves them, and are computed through double or int64 otherwise. */
#include "hal/cpu/ops/kernels.h"
#include "hal/op/op_launch.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>

static size_t esize(const gs_tensor_desc *d) { return gs_dtype_size(d->dtype); }

/* Advances a row-major index over `s` by one. */
static void next_index(const gs_shape *s, int64_t *idx) {
  for (int d = s->rank - 1; d >= 0; d--) {
    if (++idx[d] < s->dims[d])
      return;
    idx[d] = 0;
  }
}

/* Copies n elements; an empty tensor's pointer may be NULL. */
static void copy_all(void *dst, const void *src, int64_t n, size_t es) {
  if (n > 0)
    memcpy(dst, src, (size_t)n * es);
}

static int index_error(const gs_op_call *c, int64_t ix, int64_t dim) {
  return gs_error(GS_EINVAL, "node %s (%s): index %lld is out of range [%lld, %lld)",
                  c->node_name, c->op_type, (long long)ix, (long long)-dim, (long long)dim);
}

/* An index read from an int32/int64 tensor, negative ones counted from the end. */
static int read_index(const gs_op_call *c, gs_dtype dt, const void *p, int64_t i, int64_t dim,
                      int64_t *out) {
  int64_t ix = gs_ldi(dt, p, i);
  if (ix < -dim || ix >= dim)
    return index_error(c, ix, dim);
  *out = ix < 0 ? ix + dim : ix;
  return GS_OK;
}

static int k_range(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_index_attrs *a = c->attrs;
  int64_t n = c->out[0].shape.dims[0];
  gs_dtype dt = c->out[0].dtype;
  void *y = k->ptr[3];
  if (gs_is_int(dt)) {
    int64_t start = gs_ldi(dt, k->ptr[0], 0), delta = gs_ldi(dt, k->ptr[2], 0);
    for (int64_t i = 0; i < n; i++)
      gs_sti(dt, y, i, start + i * delta);
  } else {
    /* Accumulated as the reference does (start, start+delta, ...), in the type. */
    double v = gs_ld(dt, k->ptr[0], 0), d = gs_ld(dt, k->ptr[2], 0);
    for (int64_t i = 0; i < n; i++) {
      gs_st(dt, y, i, v);
      v = dt == GS_DT_FLOAT32 ? (double)((float)v + (float)d) : v + d;
    }
  }
  (void)a;
  return 0;
}

static int k_trilu(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_index_attrs *a = c->attrs;
  const gs_shape *s = &c->in[0].shape;
  int64_t rows = s->dims[s->rank - 2], cols = s->dims[s->rank - 1];
  int64_t mats = rows != 0 && cols != 0 ? gs_shape_numel(s) / (rows * cols) : 0;
  size_t es = esize(&c->in[0]);
  const char *x = k->ptr[0];
  char *y = k->ptr[c->n_in];
  for (int64_t m = 0; m < mats; m++)
    for (int64_t r = 0; r < rows; r++)
      for (int64_t col = 0; col < cols; col++) {
        size_t off = (size_t)((m * rows + r) * cols + col) * es;
        bool keep = a->upper ? col - r >= a->k : col - r <= a->k;
        if (keep)
          memcpy(y + off, x + off, es);
        else
          memset(y + off, 0, es);
      }
  return 0;
}

static int k_cumsum(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_index_attrs *a = c->attrs;
  int64_t outer = 1, len = c->in[0].shape.dims[a->axis], inner = 1;
  for (int d = 0; d < a->axis; d++)
    outer *= c->in[0].shape.dims[d];
  for (int d = a->axis + 1; d < c->in[0].shape.rank; d++)
    inner *= c->in[0].shape.dims[d];
  gs_dtype dt = c->in[0].dtype;
  bool is_int = gs_is_int(dt);
  void *y = k->ptr[2];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      double acc = 0, comp = 0;
      int64_t iacc = 0;
      for (int64_t j = 0; j < len; j++) {
        int64_t pos = a->reverse ? len - 1 - j : j;
        int64_t i = (o * len + pos) * inner + in;
        if (is_int) {
          int64_t v = gs_ldi(dt, k->ptr[0], i);
          if (!a->exclusive)
            iacc = (int64_t)((uint64_t)iacc + (uint64_t)v);
          gs_sti(dt, y, i, iacc);
          if (a->exclusive)
            iacc = (int64_t)((uint64_t)iacc + (uint64_t)v);
        } else {
          double v = gs_ld(dt, k->ptr[0], i);
          if (!a->exclusive)
            acc = gs_sum_step(acc, v, &comp);
          gs_st(dt, y, i, gs_sum_total(acc, comp));
          if (a->exclusive)
            acc = gs_sum_step(acc, v, &comp);
        }
      }
    }
  return 0;
}

static int k_tile(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  size_t es = esize(&c->in[0]);
  int64_t xst[GS_MAX_DIMS], idx[GS_MAX_DIMS] = {0}, n = gs_shape_numel(ys);
  gs_launch_contiguous_strides(xs, xst);
  const char *x = k->ptr[0];
  char *y = k->ptr[2];
  for (int64_t i = 0; i < n; i++) {
    int64_t src = 0;
    for (int d = 0; d < ys->rank; d++)
      src += (idx[d] % xs->dims[d]) * xst[d];
    memcpy(y + (size_t)i * es, x + (size_t)src * es, es);
    next_index(ys, idx);
  }
  return 0;
}

static int k_gather_elements(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_index_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *is = &c->in[1].shape;
  size_t es = esize(&c->in[0]);
  int64_t xst[GS_MAX_DIMS], idx[GS_MAX_DIMS] = {0}, n = gs_shape_numel(is);
  gs_launch_contiguous_strides(xs, xst);
  const char *x = k->ptr[0];
  char *y = k->ptr[2];
  for (int64_t i = 0; i < n; i++) {
    int64_t at = 0, src = 0;
    int rc = read_index(c, c->in[1].dtype, k->ptr[1], i, xs->dims[a->axis], &at);
    if (rc < 0)
      return rc;
    for (int d = 0; d < is->rank; d++) {
      if (d != a->axis && idx[d] >= xs->dims[d])
        return index_error(c, idx[d], xs->dims[d]);
      src += (d == a->axis ? at : idx[d]) * xst[d];
    }
    memcpy(y + (size_t)i * es, x + (size_t)src * es, es);
    next_index(is, idx);
  }
  return 0;
}

/* One update into out[at] with the reduction. */
static void scatter_one(gs_dtype dt, void *out, int64_t at, const void *up, int64_t i,
                        gs_scatter_reduction r) {
  if (r == GS_SCATTER_NONE) {
    size_t es = gs_dtype_size(dt);
    memcpy((char *)out + (size_t)at * es, (const char *)up + (size_t)i * es, es);
    return;
  }
  if (gs_is_int(dt)) {
    int64_t o = gs_ldi(dt, out, at), u = gs_ldi(dt, up, i);
    int64_t v = r == GS_SCATTER_ADD   ? (int64_t)((uint64_t)o + (uint64_t)u)
                : r == GS_SCATTER_MUL ? (int64_t)((uint64_t)o * (uint64_t)u)
                : r == GS_SCATTER_MAX ? (o > u ? o : u)
                                      : (o < u ? o : u);
    gs_sti(dt, out, at, v);
    return;
  }
  double o = gs_ld(dt, out, at), u = gs_ld(dt, up, i);
  double v = r == GS_SCATTER_ADD   ? o + u
             : r == GS_SCATTER_MUL ? o * u
             : r == GS_SCATTER_MAX ? (o > u ? o : u)
                                   : (o < u ? o : u);
  gs_st(dt, out, at, v);
}

static int k_scatter_elements(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_index_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *is = &c->in[1].shape;
  int64_t xst[GS_MAX_DIMS], idx[GS_MAX_DIMS] = {0}, n = gs_shape_numel(is);
  gs_launch_contiguous_strides(xs, xst);
  void *y = k->ptr[3];
  copy_all(y, k->ptr[0], gs_shape_numel(xs), esize(&c->in[0]));
  for (int64_t i = 0; i < n; i++) {
    int64_t at = 0, dst = 0;
    int rc = read_index(c, c->in[1].dtype, k->ptr[1], i, xs->dims[a->axis], &at);
    if (rc < 0)
      return rc;
    for (int d = 0; d < is->rank; d++) {
      if (d != a->axis && idx[d] >= xs->dims[d])
        return index_error(c, idx[d], xs->dims[d]);
      dst += (d == a->axis ? at : idx[d]) * xst[d];
    }
    scatter_one(c->in[0].dtype, y, dst, k->ptr[2], i, a->reduction);
    next_index(is, idx);
  }
  return 0;
}

/* The element offset in data of index tuple `t` (q values) from dim `from`. */
static int nd_offset(const gs_op_call *c, const gs_shape *xs, const int64_t *xst, int from,
                     const int64_t *t, int64_t q, int64_t *out) {
  int64_t off = 0;
  for (int64_t j = 0; j < q; j++) {
    int64_t dim = xs->dims[from + j], ix = t[j];
    if (ix < -dim || ix >= dim)
      return index_error(c, ix, dim);
    off += (ix < 0 ? ix + dim : ix) * xst[from + j];
  }
  *out = off;
  return GS_OK;
}

static int k_gather_nd(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_index_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *is = &c->in[1].shape;
  int b = a->batch_dims;
  int64_t q = is->dims[is->rank - 1], xst[GS_MAX_DIMS];
  gs_launch_contiguous_strides(xs, xst);
  int64_t batches = 1, tuples = 1, slice = 1;
  for (int d = 0; d < b; d++)
    batches *= xs->dims[d];
  for (int d = b; d < is->rank - 1; d++)
    tuples *= is->dims[d];
  for (int d = b + (int)q; d < xs->rank; d++)
    slice *= xs->dims[d];
  size_t es = esize(&c->in[0]);
  const int64_t *t = k->ptr[1];
  const char *x = k->ptr[0];
  char *y = k->ptr[2];
  int64_t batch_stride = b ? xst[b - 1] : 0;
  for (int64_t bi = 0; bi < batches; bi++)
    for (int64_t ti = 0; ti < tuples; ti++) {
      int64_t off = 0; /* set by nd_offset on success; GCC -O3 cannot see that */
      int rc = nd_offset(c, xs, xst, b, t + (bi * tuples + ti) * q, q, &off);
      if (rc < 0)
        return rc;
      memcpy(y + (size_t)((bi * tuples + ti) * slice) * es,
             x + (size_t)(bi * batch_stride + off) * es, (size_t)slice * es);
    }
  return 0;
}

static int k_scatter_nd(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_index_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *is = &c->in[1].shape;
  int64_t q = is->dims[is->rank - 1], xst[GS_MAX_DIMS];
  gs_launch_contiguous_strides(xs, xst);
  int64_t tuples = gs_shape_numel(is) / (q ? q : 1), slice = 1;
  for (int d = (int)q; d < xs->rank; d++)
    slice *= xs->dims[d];
  gs_dtype dt = c->in[0].dtype;
  void *y = k->ptr[3];
  copy_all(y, k->ptr[0], gs_shape_numel(xs), esize(&c->in[0]));
  const int64_t *t = k->ptr[1];
  for (int64_t ti = 0; ti < tuples; ti++) {
    int64_t off = 0; /* as above */
    int rc = nd_offset(c, xs, xst, 0, t + ti * q, q, &off);
    if (rc < 0)
      return rc;
    for (int64_t j = 0; j < slice; j++)
      scatter_one(dt, y, off + j, k->ptr[2], ti * slice + j, a->reduction);
  }
  return 0;
}

static int k_one_hot(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_index_attrs *a = c->attrs;
  const gs_shape *is = &c->in[0].shape;
  int64_t outer = 1, inner = 1, depth = a->depth;
  for (int d = 0; d < a->axis; d++)
    outer *= is->dims[d];
  for (int d = a->axis; d < is->rank; d++)
    inner *= is->dims[d];
  gs_dtype vt = c->in[2].dtype;
  size_t es = gs_dtype_size(vt);
  const char *values = k->ptr[2];
  char *y = k->ptr[3];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < depth; j++)
      for (int64_t in = 0; in < inner; in++) {
        int64_t ix = (int64_t)gs_ld(c->in[0].dtype, k->ptr[0], o * inner + in);
        if (ix < 0)
          ix += depth;
        memcpy(y + (size_t)((o * depth + j) * inner + in) * es, values + (ix == j ? es : 0), es);
      }
  return 0;
}

/* DepthToSpace (DCR or CRD) and SpaceToDepth, element by element. */
static int run_space_depth(const gs_cpu_kernel_call *k, bool to_space) {
  const gs_op_call *c = gs_kcall(k);
  const gs_index_attrs *a = c->attrs;
  const gs_shape *ys = &c->out[0].shape, *xs = &c->in[0].shape;
  int64_t b = a->blocksize;
  size_t es = esize(&c->in[0]);
  const char *x = k->ptr[0];
  char *y = k->ptr[1];
  int64_t N = ys->dims[0], C = ys->dims[1], H = ys->dims[2], W = ys->dims[3];
  int64_t XC = xs->dims[1], XH = xs->dims[2], XW = xs->dims[3];
  for (int64_t n = 0; n < N; n++)
    for (int64_t ch = 0; ch < C; ch++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t w = 0; w < W; w++) {
          int64_t src;
          if (to_space) { /* output (c, h*b+bh, w*b+bw) from input channel */
            int64_t bh = h % b, bw = w % b, ih = h / b, iw = w / b;
            int64_t ic = a->crd ? ch * b * b + bh * b + bw : (bh * b + bw) * C + ch;
            src = ((n * XC + ic) * XH + ih) * XW + iw;
          } else { /* output channel (bh*b+bw)*XC + ic from input (ic, h*b+bh, w*b+bw) */
            int64_t blk = ch / XC, ic = ch % XC, bh = blk / b, bw = blk % b;
            src = ((n * XC + ic) * XH + h * b + bh) * XW + w * b + bw;
          }
          memcpy(y + (size_t)(((n * C + ch) * H + h) * W + w) * es, x + (size_t)src * es, es);
        }
  return 0;
}

static int k_depth_to_space(const gs_cpu_kernel_call *k) { return run_space_depth(k, true); }
static int k_space_to_depth(const gs_cpu_kernel_call *k) { return run_space_depth(k, false); }

static int k_hardmax(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_index_attrs *a = c->attrs;
  const gs_shape *s = &c->in[0].shape;
  int64_t outer = 1, len = s->dims[a->axis], inner = 1;
  for (int d = 0; d < a->axis; d++)
    outer *= s->dims[d];
  for (int d = a->axis + 1; d < s->rank; d++)
    inner *= s->dims[d];
  gs_dtype dt = c->in[0].dtype;
  void *y = k->ptr[1];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      int64_t best = 0;
      for (int64_t j = 0; j < len; j++) {
        int64_t i = (o * len + j) * inner + in;
        if (gs_ld(dt, k->ptr[0], i) > gs_ld(dt, k->ptr[0], (o * len + best) * inner + in))
          best = j;
      }
      for (int64_t j = 0; j < len; j++)
        gs_st(dt, y, (o * len + j) * inner + in, j == best ? 1.0 : 0.0);
    }
  return 0;
}

static int k_center_crop_pad(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_index_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  size_t es = esize(&c->in[0]);
  int64_t xst[GS_MAX_DIMS], idx[GS_MAX_DIMS] = {0}, n = gs_shape_numel(ys);
  gs_launch_contiguous_strides(xs, xst);
  char *y = k->ptr[2];
  for (int64_t i = 0; i < n; i++) {
    int64_t src = 0;
    bool pad = false;
    for (int d = 0; d < ys->rank; d++) {
      int64_t at = idx[d] + a->offset[d];
      pad = pad || at < 0 || at >= xs->dims[d];
      src += at * xst[d];
    }
    if (pad)
      memset(y + (size_t)i * es, 0, es);
    else
      memcpy(y + (size_t)i * es, (const char *)k->ptr[0] + (size_t)src * es, es);
    next_index(ys, idx);
  }
  return 0;
}

static int k_col2im(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_index_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  gs_dtype dt = c->in[0].dtype;
  int sp = a->spatial;
  int64_t N = ys->dims[0], C = ys->dims[1], kernel = 1, image = 1, L = xs->dims[2];
  for (int i = 0; i < sp; i++)
    kernel *= a->block[i], image *= a->image[i];
  void *y = k->ptr[3];
  for (int64_t i = 0; i < N * C * image; i++)
    gs_st(dt, y, i, 0.0);
  /* Column row (c, kernel offset) and block l: image position per dim. */
  for (int64_t n = 0; n < N; n++)
    for (int64_t row = 0; row < C * kernel; row++) {
      int64_t ch = row / kernel, koff = row % kernel;
      for (int64_t l = 0; l < L; l++) {
        int64_t pos = 0, krest = koff, lrest = l;
        bool inside = true;
        for (int d = sp - 1; d >= 0; d--) {
          int64_t kd = krest % a->block[d], ld = lrest % a->offset[d];
          krest /= a->block[d];
          lrest /= a->offset[d];
          int64_t at = ld * a->stride[d] - a->pad_begin[d] + kd * a->dilation[d];
          inside = inside && at >= 0 && at < a->image[d];
          int64_t mul = 1;
          for (int e = d + 1; e < sp; e++)
            mul *= a->image[e];
          pos += at * mul;
        }
        if (!inside)
          continue;
        int64_t out = (n * C + ch) * image + pos, in = (n * C * kernel + row) * L + l;
        gs_st(dt, y, out, gs_ld(dt, y, out) + gs_ld(dt, k->ptr[0], in));
      }
    }
  return 0;
}

/* The normalised coordinate of point i of n along one dim. */
static double grid_coord(int64_t i, int64_t n, bool align_corners) {
  if (align_corners)
    return n > 1 ? -1.0 + 2.0 * (double)i / (double)(n - 1) : -1.0;
  return -1.0 + (2.0 * (double)i + 1.0) / (double)n;
}

static int k_affine_grid(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_index_attrs *a = c->attrs;
  gs_dtype dt = c->in[0].dtype;
  int sd = a->spatial;
  int64_t N = c->out[0].shape.dims[0], points = 1;
  for (int i = 0; i < sd; i++)
    points *= a->image[i];
  for (int64_t n = 0; n < N; n++)
    for (int64_t p = 0; p < points; p++) {
      /* base = (x, y[, z], 1): x along the last dim, as ONNX orders them. */
      double base[4];
      int64_t rest = p;
      for (int d = sd - 1; d >= 0; d--) {
        base[sd - 1 - d] = grid_coord(rest % a->image[d], a->image[d], a->align_corners);
        rest /= a->image[d];
      }
      base[sd] = 1.0;
      for (int r = 0; r < sd; r++) {
        double v = 0;
        for (int j = 0; j <= sd; j++)
          v += gs_ld(dt, k->ptr[0], (n * sd + r) * (sd + 1) + j) * base[j];
        gs_st(dt, k->ptr[2], (n * points + p) * sd + r, v);
      }
    }
  return 0;
}

#define KERNEL GS_CPU_KERNEL
static const gs_cpu_kernel_entry kernels[] = {
    KERNEL("Range", k_range),
    KERNEL("Trilu", k_trilu),
    KERNEL("CumSum", k_cumsum),
    KERNEL("Tile", k_tile),
    KERNEL("GatherElements", k_gather_elements),
    KERNEL("GatherND", k_gather_nd),
    KERNEL("ScatterElements", k_scatter_elements),
    KERNEL("ScatterND", k_scatter_nd),
    KERNEL("OneHot", k_one_hot),
    KERNEL("DepthToSpace", k_depth_to_space),
    KERNEL("SpaceToDepth", k_space_to_depth),
    KERNEL("Hardmax", k_hardmax),
    KERNEL("CenterCropPad", k_center_crop_pad),
    KERNEL("Col2Im", k_col2im),
    KERNEL("AffineGrid", k_affine_grid),
};

int gs__cpu_register_index(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

/* ops_index.c - definitions of the ops that place elements by index or
 * position: Range, Trilu, CumSum, Tile, GatherElements, GatherND,
 * ScatterElements, ScatterND, OneHot, DepthToSpace, SpaceToDepth,
 * Hardmax, EyeLike, CenterCropPad, Col2Im and AffineGrid. */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

#include <math.h>
#include <string.h>

static gs_index_attrs *index_attrs(gs_op_call *c) { return gs_op_attrs(c, sizeof(gs_index_attrs)); }

static int axis_attr(gs_op_call *c, const gs_node *n, int64_t dflt, int rank, int *out) {
  if (gs_axis_normalize(gs_attr_int(n, "axis", dflt), rank, out) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  return GS_OK;
}

/* Range: [start, limit) by delta, its length known once the bounds are. */
static int infer_range(gs_op_call *c, const gs_node *n) {
  (void)n;
  /* The 16-bit floats too: a reduced-precision plan keeps float constants in 16 bits. */
  uint32_t mask = GS_DTM_FLOATS | GS_DTM(GS_DT_INT16) | GS_DTM(GS_DT_INT32) |
                  GS_DTM(GS_DT_INT64);
  double v[3];
  for (int i = 0; i < 3; i++) {
    int rc = gs_op_want_dtype(c, i, mask);
    if (rc == 0 && c->in[i].dtype != c->in[0].dtype)
      rc = gs_op_fail(c, "start, limit and delta must have one type");
    if (rc == 0)
      rc = gs_op_const_scalar(c, i, &v[i]);
    if (rc < 0)
      return rc;
  }
  if (v[2] == 0 || !isfinite(v[0]) || !isfinite(v[1]) || !isfinite(v[2]))
    return gs_op_fail(c, "delta must be non-zero and the bounds finite");
  double count = ceil((v[1] - v[0]) / v[2]);
  if (count < 0)
    count = 0;
  if (count > 1e12)
    return gs_op_fail(c, "the range would have %.0f elements", count);
  gs_index_attrs *a = index_attrs(c);
  if (!a)
    return GS_ENOMEM;
  a->start = v[0];
  a->delta = v[2];
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = (gs_shape){.rank = 1, .dims = {(int64_t)count}};
  return GS_OK;
}

static int infer_trilu(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_ALL);
  if (rc < 0)
    return rc;
  if (c->in[0].shape.rank < 2)
    return gs_op_fail(c, "the input must have rank 2 or more");
  gs_index_attrs *a = index_attrs(c);
  if (!a)
    return GS_ENOMEM;
  a->upper = gs_attr_int(n, "upper", 1) != 0;
  if (c->n_in > 1 && c->in[1].dtype != GS_DT_INVALID) {
    int64_t k;
    if ((rc = gs_op_const_ints(c, 1, &k, 1)) < 0)
      return rc;
    if (rc != 1)
      return gs_op_fail(c, "k must be one value");
    a->k = k;
  }
  c->out[0] = c->in[0];
  return GS_OK;
}

static int infer_cumsum(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_NUMERIC);
  if (rc < 0)
    return rc;
  int64_t axis;
  if ((rc = gs_op_const_ints(c, 1, &axis, 1)) < 0)
    return rc;
  if (rc != 1)
    return gs_op_fail(c, "axis must be one value");
  gs_index_attrs *a = index_attrs(c);
  if (!a)
    return GS_ENOMEM;
  if (gs_axis_normalize(axis, c->in[0].shape.rank, &a->axis) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  a->exclusive = gs_attr_int(n, "exclusive", 0) != 0;
  a->reverse = gs_attr_int(n, "reverse", 0) != 0;
  c->out[0] = c->in[0];
  return GS_OK;
}

static int infer_tile(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = gs_op_want_dtype(c, 0, GS_DTM_MOVABLE);
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape;
  int64_t rep[GS_MAX_DIMS];
  int k = gs_op_const_ints(c, 1, rep, GS_MAX_DIMS);
  if (k < 0)
    return k;
  if (k != x->rank)
    return gs_op_fail(c, "repeats has %d values for rank %d", k, x->rank);
  gs_shape out = *x;
  for (int i = 0; i < k; i++) {
    if (rep[i] < 0)
      return gs_op_fail(c, "repeats[%d] = %lld is negative", i, (long long)rep[i]);
    if (rep[i] && out.dims[i] > INT64_MAX / 4 / rep[i])
      return gs_op_fail(c, "the output would be too large");
    out.dims[i] *= rep[i];
  }
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = out;
  return index_attrs(c) ? GS_OK : GS_ENOMEM;
}

static int want_indices(gs_op_call *c, int i) {
  return gs_op_want_dtype(c, i, GS_DTM(GS_DT_INT32) | GS_DTM(GS_DT_INT64));
}

static int infer_gather_elements(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_MOVABLE);
  if (rc == 0)
    rc = want_indices(c, 1);
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape, *idx = &c->in[1].shape;
  if (x->rank != idx->rank || x->rank == 0)
    return gs_op_fail(c, "data and indices must have one rank, at least 1");
  gs_index_attrs *a = index_attrs(c);
  if (!a)
    return GS_ENOMEM;
  if ((rc = axis_attr(c, n, 0, x->rank, &a->axis)) < 0)
    return rc;
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = *idx;
  return GS_OK;
}

static int reduction_attr(gs_op_call *c, const gs_node *n, gs_index_attrs *a) {
  const char *r = gs_attr_string(n, "reduction", "none");
  static const char *const names[] = {"none", "add", "mul", "max", "min"};
  for (int i = 0; i < 5; i++)
    if (!strcmp(r, names[i])) {
      a->reduction = (gs_scatter_reduction)i;
      return GS_OK;
    }
  return gs_op_fail(c, "reduction=\"%s\" (expected none, add, mul, max or min)", r);
}

static int infer_scatter_elements(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_ALL);
  if (rc == 0)
    rc = want_indices(c, 1);
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape;
  if (!gs_shape_equal(&c->in[1].shape, &c->in[2].shape) || c->in[1].shape.rank != x->rank ||
      c->in[2].dtype != c->in[0].dtype)
    return gs_op_fail(c, "indices and updates must have one shape, of data's rank, and "
                         "updates data's type");
  gs_index_attrs *a = index_attrs(c);
  if (!a)
    return GS_ENOMEM;
  if ((rc = axis_attr(c, n, 0, x->rank, &a->axis)) < 0 || (rc = reduction_attr(c, n, a)) < 0)
    return rc;
  c->out[0] = c->in[0];
  return GS_OK;
}

static int infer_gather_nd(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_MOVABLE);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, GS_DTM(GS_DT_INT64));
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape, *idx = &c->in[1].shape;
  gs_index_attrs *a = index_attrs(c);
  if (!a)
    return GS_ENOMEM;
  int64_t b = gs_attr_int(n, "batch_dims", 0);
  if (idx->rank < 1 || b < 0 || b >= idx->rank || b >= x->rank)
    return gs_op_fail(c, "batch_dims %lld does not fit ranks %d and %d", (long long)b, x->rank,
                      idx->rank);
  int64_t last = idx->dims[idx->rank - 1];
  if (last < 1 || last > x->rank - b)
    return gs_op_fail(c, "indices' last dimension is %lld (1 to %lld)", (long long)last,
                      (long long)(x->rank - b));
  for (int i = 0; i < b; i++)
    if (x->dims[i] != idx->dims[i])
      return gs_op_fail(c, "batch dimension %d differs (%lld and %lld)", i,
                        (long long)x->dims[i], (long long)idx->dims[i]);
  a->batch_dims = (int)b;
  gs_shape out = {.rank = 0};
  for (int i = 0; i < idx->rank - 1; i++)
    out.dims[out.rank++] = idx->dims[i];
  for (int i = (int)(b + last); i < x->rank; i++) {
    if (out.rank == GS_MAX_DIMS)
      return gs_op_fail(c, "the output would have more than %d dimensions", GS_MAX_DIMS);
    out.dims[out.rank++] = x->dims[i];
  }
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = out;
  return GS_OK;
}

static int infer_scatter_nd(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_ALL);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, GS_DTM(GS_DT_INT64));
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape, *idx = &c->in[1].shape, *up = &c->in[2].shape;
  if (idx->rank < 1 || c->in[2].dtype != c->in[0].dtype)
    return gs_op_fail(c, "indices must have rank 1 or more, and updates data's type");
  int64_t last = idx->dims[idx->rank - 1];
  if (last < 1 || last > x->rank)
    return gs_op_fail(c, "indices' last dimension is %lld (1 to %d)", (long long)last, x->rank);
  /* updates: indices.shape[:-1] + data.shape[last:] */
  bool ok = up->rank == idx->rank - 1 + x->rank - (int)last;
  for (int i = 0; ok && i < idx->rank - 1; i++)
    ok = up->dims[i] == idx->dims[i];
  for (int i = (int)last; ok && i < x->rank; i++)
    ok = up->dims[idx->rank - 1 + i - last] == x->dims[i];
  if (!ok)
    return gs_op_fail(c, "updates' shape does not fit indices and data");
  gs_index_attrs *a = index_attrs(c);
  if (!a)
    return GS_ENOMEM;
  if ((rc = reduction_attr(c, n, a)) < 0)
    return rc;
  c->out[0] = c->in[0];
  return GS_OK;
}

static int infer_one_hot(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_NUMERIC);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 2, GS_DTM_ALL);
  if (rc < 0)
    return rc;
  double depth;
  if ((rc = gs_op_want_dtype(c, 1, GS_DTM_NUMERIC)) < 0 ||
      (rc = gs_op_const_scalar(c, 1, &depth)) < 0)
    return rc;
  if (!(depth >= 1) || depth > 1e9)
    return gs_op_fail(c, "depth %g must be at least 1", depth);
  if (gs_shape_numel(&c->in[2].shape) != 2)
    return gs_op_fail(c, "values must hold two elements [off, on]");
  const gs_shape *x = &c->in[0].shape;
  if (x->rank + 1 > GS_MAX_DIMS)
    return gs_op_fail(c, "the output would have more than %d dimensions", GS_MAX_DIMS);
  gs_index_attrs *a = index_attrs(c);
  if (!a)
    return GS_ENOMEM;
  if ((rc = axis_attr(c, n, -1, x->rank + 1, &a->axis)) < 0)
    return rc;
  a->depth = (int64_t)depth;
  gs_shape out = {.rank = x->rank + 1};
  for (int i = 0, j = 0; i < out.rank; i++)
    out.dims[i] = i == a->axis ? a->depth : x->dims[j++];
  c->out[0].dtype = c->in[2].dtype;
  c->out[0].shape = out;
  return GS_OK;
}

/* DepthToSpace and SpaceToDepth: NCHW, blocks of blocksize x blocksize. */
static int infer_space_depth(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_ALL);
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape;
  gs_index_attrs *a = index_attrs(c);
  if (!a)
    return GS_ENOMEM;
  int64_t b = gs_attr_int(n, "blocksize", 0);
  if (x->rank != 4 || b < 1 || b > 1 << 16)
    return gs_op_fail(c, "needs a rank-4 input and a positive blocksize");
  a->blocksize = b;
  gs_shape out = *x;
  if (!strcmp(c->op_type, "DepthToSpace")) {
    const char *mode = gs_attr_string(n, "mode", "DCR");
    if (strcmp(mode, "DCR") && strcmp(mode, "CRD"))
      return gs_op_fail(c, "mode=\"%s\" (expected DCR or CRD)", mode);
    a->crd = !strcmp(mode, "CRD");
    if (x->dims[1] % (b * b))
      return gs_op_fail(c, "channels %lld are not a multiple of blocksize^2",
                        (long long)x->dims[1]);
    out.dims[1] /= b * b;
    out.dims[2] *= b;
    out.dims[3] *= b;
  } else {
    if (x->dims[2] % b || x->dims[3] % b)
      return gs_op_fail(c, "height and width must be multiples of blocksize");
    out.dims[1] *= b * b;
    out.dims[2] /= b;
    out.dims[3] /= b;
  }
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = out;
  return GS_OK;
}

static int infer_hardmax(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS);
  if (rc < 0)
    return rc;
  gs_index_attrs *a = index_attrs(c);
  if (!a)
    return GS_ENOMEM;
  if ((rc = axis_attr(c, n, -1, c->in[0].shape.rank, &a->axis)) < 0)
    return rc;
  c->out[0] = c->in[0];
  return GS_OK;
}

static int infer_eye_like(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_ALL);
  if (rc < 0)
    return rc;
  if (c->in[0].shape.rank != 2)
    return gs_op_fail(c, "the input must have rank 2");
  gs_index_attrs *a = index_attrs(c);
  if (!a)
    return GS_ENOMEM;
  a->k = gs_attr_int(n, "k", 0);
  c->out[0].shape = c->in[0].shape;
  c->out[0].dtype = c->in[0].dtype;
  if (gs_node_attr(n, "dtype")) {
    gs_dtype dt = gs_dtype_from_onnx((int)gs_attr_int(n, "dtype", 0));
    if (dt == GS_DT_INVALID || dt == GS_DT_BYTES)
      return gs_op_fail(c, "dtype %lld is not supported", (long long)gs_attr_int(n, "dtype", 0));
    c->out[0].dtype = dt;
  }
  return GS_OK;
}

/* EyeLike's output depends on its input's shape alone. */
static int fold_eye_like(const gs_op_call *c, const gs_node *n, void *out) {
  (void)n;
  const gs_index_attrs *a = c->attrs;
  int64_t rows = c->out[0].shape.dims[0], cols = c->out[0].shape.dims[1];
  size_t es = gs_dtype_size(c->out[0].dtype);
  memset(out, 0, (size_t)(rows * cols) * es);
  for (int64_t r = 0; r < rows; r++) {
    int64_t col = r + a->k;
    if (col < 0 || col >= cols)
      continue;
    char *p = (char *)out + (size_t)(r * cols + col) * es;
    switch (c->out[0].dtype) {
    case GS_DT_FLOAT32: *(float *)p = 1.0f; break;
    case GS_DT_FLOAT64: *(double *)p = 1.0; break;
    case GS_DT_FLOAT16: *(uint16_t *)p = 0x3c00; break;
    case GS_DT_BFLOAT16: *(uint16_t *)p = 0x3f80; break;
    case GS_DT_INT64: *(int64_t *)p = 1; break;
    case GS_DT_INT32: *(int32_t *)p = 1; break;
    case GS_DT_INT16: *(int16_t *)p = 1; break;
    default: *(uint8_t *)p = 1; break;
    }
  }
  return GS_OK;
}

/* CenterCropPad: the listed axes take the sizes of input 1, cropped or
 * padded with zeros evenly on both sides (the odd one at the end). */
static int infer_center_crop_pad(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_ALL);
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape;
  int64_t sizes[GS_MAX_DIMS], axes[GS_MAX_DIMS];
  int k = gs_op_const_ints(c, 1, sizes, GS_MAX_DIMS);
  if (k < 0)
    return k;
  int na = gs_attr_ints(n, "axes", axes, GS_MAX_DIMS);
  if (na < 0)
    for (na = 0; na < x->rank; na++)
      axes[na] = na;
  if (na != k)
    return gs_op_fail(c, "%d sizes for %d axes", k, na);
  gs_index_attrs *a = index_attrs(c);
  if (!a)
    return GS_ENOMEM;
  gs_shape out = *x;
  for (int i = 0; i < k; i++) {
    int ax;
    if (gs_axis_normalize(axes[i], x->rank, &ax) < 0)
      return gs_op_fail(c, "%s", gs_error_detail());
    if (sizes[i] < 0)
      return gs_op_fail(c, "size %lld is negative", (long long)sizes[i]);
    out.dims[ax] = sizes[i];
    a->offset[ax] = x->dims[ax] >= sizes[i] ? (x->dims[ax] - sizes[i]) / 2
                                            : -((sizes[i] - x->dims[ax]) / 2);
  }
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = out;
  return GS_OK;
}

/* Col2Im: [N, C * prod(block), L] back to [N, C, image...], summing overlaps. */
static int infer_col2im(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS);
  if (rc < 0)
    return rc;
  gs_index_attrs *a = index_attrs(c);
  if (!a)
    return GS_ENOMEM;
  int k = gs_op_const_ints(c, 1, a->image, GS_MAX_DIMS - 2);
  if (k < 0)
    return k;
  int kb = gs_op_const_ints(c, 2, a->block, GS_MAX_DIMS - 2);
  if (kb < 0)
    return kb;
  const gs_shape *x = &c->in[0].shape;
  if (kb != k || k < 1 || x->rank != 3)
    return gs_op_fail(c, "input must be [N, C*prod(block), L], image and block of one length");
  a->spatial = k;
  int64_t pads[2 * GS_MAX_DIMS];
  int got_d = gs_attr_ints(n, "dilations", a->dilation, GS_MAX_DIMS);
  int got_s = gs_attr_ints(n, "strides", a->stride, GS_MAX_DIMS);
  int got_p = gs_attr_ints(n, "pads", pads, 2 * GS_MAX_DIMS);
  if ((got_d >= 0 && got_d != k) || (got_s >= 0 && got_s != k) || (got_p >= 0 && got_p != 2 * k))
    return gs_op_fail(c, "dilations, strides and pads must fit %d dimensions", k);
  int64_t blocks = 1, blocks_total = 1, kernel = 1;
  for (int i = 0; i < k; i++) {
    if (got_d < 0)
      a->dilation[i] = 1;
    if (got_s < 0)
      a->stride[i] = 1;
    a->pad_begin[i] = got_p < 0 ? 0 : pads[i];
    int64_t end = got_p < 0 ? 0 : pads[k + i];
    if (a->block[i] < 1 || a->dilation[i] < 1 || a->stride[i] < 1 || a->image[i] < 0 ||
        a->block[i] > (1 << 16) || a->dilation[i] > (1 << 16) || a->image[i] > (1 << 24) ||
        a->pad_begin[i] < 0 || end < 0 || a->pad_begin[i] > (1 << 24) || end > (1 << 24))
      return gs_op_fail(c, "block, dilations and strides must be positive, pads not negative, "
                           "and all of them of sane size");
    int64_t span = a->dilation[i] * (a->block[i] - 1) + 1;
    a->offset[i] = (a->image[i] + a->pad_begin[i] + end - span) / a->stride[i] + 1;
    if (a->offset[i] < 1)
      return gs_op_fail(c, "the image is smaller than one block");
    if (__builtin_mul_overflow(blocks, a->offset[i], &blocks) ||
        __builtin_mul_overflow(kernel, a->block[i], &kernel) || kernel > (1ll << 32))
      return gs_op_fail(c, "the blocks are too many");
  }
  blocks_total = blocks;
  if (x->dims[1] % kernel || x->dims[2] != blocks_total)
    return gs_op_fail(c, "input [%lld, %lld, %lld] does not fit the blocks (%lld per column, "
                         "%lld columns)", (long long)x->dims[0], (long long)x->dims[1],
                      (long long)x->dims[2], (long long)kernel, (long long)blocks_total);
  gs_shape out = {.rank = 2 + k, .dims = {x->dims[0], x->dims[1] / kernel}};
  for (int i = 0; i < k; i++)
    out.dims[2 + i] = a->image[i];
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = out;
  return GS_OK;
}

/* AffineGrid: theta [N, 2, 3] or [N, 3, 4] over size [N, C, (D,) H, W]. */
static int infer_affine_grid(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS);
  if (rc < 0)
    return rc;
  int64_t size[5];
  int k = gs_op_const_ints(c, 1, size, 5);
  if (k < 0)
    return k;
  const gs_shape *t = &c->in[0].shape;
  int sd = k - 2;
  if ((k != 4 && k != 5) || t->rank != 3 || t->dims[0] != size[0] || t->dims[1] != sd ||
      t->dims[2] != sd + 1)
    return gs_op_fail(c, "theta must be [N, 2, 3] with a size of 4 values, or [N, 3, 4] with 5");
  gs_index_attrs *a = index_attrs(c);
  if (!a)
    return GS_ENOMEM;
  a->align_corners = gs_attr_int(n, "align_corners", 0) != 0;
  a->spatial = sd;
  gs_shape out = {.rank = sd + 2, .dims = {size[0]}};
  for (int i = 0; i < sd; i++) {
    if (size[2 + i] < 0)
      return gs_op_fail(c, "size %lld is negative", (long long)size[2 + i]);
    out.dims[1 + i] = a->image[i] = size[2 + i];
  }
  out.dims[sd + 1] = sd;
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = out;
  return GS_OK;
}

static const char *const no_attrs[] = {NULL};
static const char *const axis_attrs[] = {"axis", NULL};
static const char *const trilu_attrs[] = {"upper", NULL};
static const char *const cumsum_attrs[] = {"exclusive", "reverse", NULL};
static const char *const scatter_attrs[] = {"axis", "reduction", NULL};
static const char *const scatter_nd_attrs[] = {"reduction", NULL};
static const char *const gather_nd_attrs[] = {"batch_dims", NULL};
static const char *const blocksize_attrs[] = {"blocksize", NULL};
static const char *const depth_to_space_attrs[] = {"blocksize", "mode", NULL};
static const char *const eye_like_attrs[] = {"dtype", "k", NULL};
static const char *const center_crop_pad_attrs[] = {"axes", NULL};
static const char *const col2im_attrs[] = {"dilations", "pads", "strides", NULL};
static const char *const affine_grid_attrs[] = {"align_corners", NULL};

#define OP(op, in_lo, in_hi, attr_names, fn) \
  {.name = op, .min_in = in_lo, .max_in = in_hi, .min_out = 1, .max_out = 1, \
   .attrs = attr_names, .infer = fn}

const gs_op_def gs__ops_index[] = {
    OP("Range", 3, 3, no_attrs, infer_range),
    OP("Trilu", 1, 2, trilu_attrs, infer_trilu),
    OP("CumSum", 2, 2, cumsum_attrs, infer_cumsum),
    OP("Tile", 2, 2, no_attrs, infer_tile),
    OP("GatherElements", 2, 2, axis_attrs, infer_gather_elements),
    OP("GatherND", 2, 2, gather_nd_attrs, infer_gather_nd),
    OP("ScatterElements", 3, 3, scatter_attrs, infer_scatter_elements),
    OP("ScatterND", 3, 3, scatter_nd_attrs, infer_scatter_nd),
    OP("OneHot", 3, 3, axis_attrs, infer_one_hot),
    OP("DepthToSpace", 1, 1, depth_to_space_attrs, infer_space_depth),
    OP("SpaceToDepth", 1, 1, blocksize_attrs, infer_space_depth),
    OP("Hardmax", 1, 1, axis_attrs, infer_hardmax),
    OP("CenterCropPad", 2, 2, center_crop_pad_attrs, infer_center_crop_pad),
    OP("Col2Im", 3, 3, col2im_attrs, infer_col2im),
    OP("AffineGrid", 2, 2, affine_grid_attrs, infer_affine_grid),
    {.name = "EyeLike", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = eye_like_attrs, .infer = infer_eye_like, .fold = fold_eye_like},
    {.name = NULL},
};

/* ops_shape.c - definitions of the ops that move data without arithmetic:
 * reshapes, transposes, joins and splits, slicing and gathering, padding,
 * resizing, and the constants. */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

#include <math.h>
#include <string.h>

/* Output 0 takes input 0's type and `shape`, with a zeroed attrs block. */
static int same_type(gs_op_call *c, const gs_shape *shape, size_t attrs_size) {
  if (gs_shape_numel(shape) < 0)
    return gs_op_fail(c, "the output shape is invalid");
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = *shape;
  return gs_op_attrs(c, attrs_size ? attrs_size : 1) ? GS_OK : GS_ENOMEM;
}

static int infer_reshape(gs_op_call *c, const gs_node *n) {
  int64_t want[GS_MAX_DIMS];
  int k = gs_op_const_ints(c, 1, want, GS_MAX_DIMS);
  if (k < 0)
    return k;
  const gs_shape *x = &c->in[0].shape;
  bool allowzero = gs_attr_int(n, "allowzero", 0) != 0;
  gs_shape out = {.rank = k};
  int infer_at = -1;
  int64_t known = 1;
  for (int i = 0; i < k; i++) {
    int64_t d = want[i];
    if (d == 0 && !allowzero) {
      if (i >= x->rank)
        return gs_op_fail(c, "shape[%d] = 0 copies a dimension the input (rank %d) lacks", i,
                          x->rank);
      d = x->dims[i];
    }
    if (d == -1) {
      if (infer_at >= 0)
        return gs_op_fail(c, "shape has more than one -1");
      infer_at = i;
      continue;
    }
    if (d < 0)
      return gs_op_fail(c, "shape[%d] = %lld is negative", i, (long long)d);
    out.dims[i] = d;
    known *= d;
  }
  int64_t total = gs_shape_numel(x);
  if (infer_at >= 0) {
    if (known == 0 || total % known)
      return gs_op_fail(c, "cannot infer the -1 in the shape: %lld elements do not divide by %lld",
                        (long long)total, (long long)known);
    out.dims[infer_at] = total / known;
  }
  if (gs_shape_numel(&out) != total) {
    char a[128], b[128];
    return gs_op_fail(c, "cannot reshape %s (%lld elements) to %s", gs_shape_str(x, a, sizeof a),
                      (long long)total, gs_shape_str(&out, b, sizeof b));
  }
  return same_type(c, &out, 0);
}

static int infer_flatten(gs_op_call *c, const gs_node *n) {
  const gs_shape *x = &c->in[0].shape;
  int64_t axis = gs_attr_int(n, "axis", 1);
  if (axis < -x->rank || axis > x->rank)
    return gs_op_fail(c, "axis %lld is out of range for rank %d", (long long)axis, x->rank);
  if (axis < 0)
    axis += x->rank;
  gs_shape out = {.rank = 2, .dims = {1, 1}};
  for (int i = 0; i < x->rank; i++)
    out.dims[i < axis ? 0 : 1] *= x->dims[i];
  return same_type(c, &out, 0);
}

static int infer_transpose(gs_op_call *c, const gs_node *n) {
  const gs_shape *x = &c->in[0].shape;
  int64_t perm[GS_MAX_DIMS];
  int k = gs_attr_ints(n, "perm", perm, GS_MAX_DIMS);
  if (k < 0) { /* default: reverse */
    k = x->rank;
    for (int i = 0; i < k; i++)
      perm[i] = k - 1 - i;
  }
  if (k != x->rank)
    return gs_op_fail(c, "perm has %d entries for rank %d", k, x->rank);
  bool seen[GS_MAX_DIMS] = {false};
  gs_shape out = {.rank = k};
  for (int i = 0; i < k; i++) {
    if (perm[i] < 0 || perm[i] >= k || seen[perm[i]])
      return gs_op_fail(c, "perm is not a permutation of 0..%d", k - 1);
    seen[perm[i]] = true;
    out.dims[i] = x->dims[perm[i]];
  }
  int rc = same_type(c, &out, sizeof(gs_transpose_attrs));
  if (rc == 0)
    for (int i = 0; i < k; i++)
      ((gs_transpose_attrs *)c->attrs)->perm[i] = (int)perm[i];
  return rc;
}

static int infer_concat(gs_op_call *c, const gs_node *n) {
  const gs_shape *x = &c->in[0].shape;
  int axis;
  if (gs_axis_normalize(gs_attr_int(n, "axis", 0), x->rank, &axis) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  gs_shape out = *x;
  out.dims[axis] = 0;
  for (int i = 0; i < c->n_in; i++) {
    const gs_shape *s = &c->in[i].shape;
    if (c->in[i].dtype != c->in[0].dtype || s->rank != x->rank)
      return gs_op_fail(c, "input %d has type %s and rank %d, expected %s and %d", i,
                        gs_dtype_name(c->in[i].dtype), s->rank, gs_dtype_name(c->in[0].dtype),
                        x->rank);
    for (int d = 0; d < x->rank; d++)
      if (d != axis && s->dims[d] != x->dims[d])
        return gs_op_fail(c, "input %d has %lld in dimension %d, input 0 has %lld", i,
                          (long long)s->dims[d], d, (long long)x->dims[d]);
    out.dims[axis] += s->dims[axis];
  }
  int rc = same_type(c, &out, sizeof(gs_axis_attrs));
  if (rc == 0)
    ((gs_axis_attrs *)c->attrs)->axis = axis;
  return rc;
}

static int infer_split(gs_op_call *c, const gs_node *n) {
  const gs_shape *x = &c->in[0].shape;
  int axis;
  if (gs_axis_normalize(gs_attr_int(n, "axis", 0), x->rank, &axis) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  int64_t sizes[GS_OP_MAX_IO];
  int k = -1;
  if (c->n_in > 1 && c->in[1].dtype != GS_DT_INVALID) {
    if ((k = gs_op_const_ints(c, 1, sizes, GS_OP_MAX_IO)) < 0)
      return k;
  } else if ((k = gs_attr_ints(n, "split", sizes, GS_OP_MAX_IO)) < 0) {
    /* Equal parts; the last smaller when they do not divide (opset 18). */
    int64_t parts = c->n_out, d = x->dims[axis], each = (d + parts - 1) / parts;
    for (int i = 0; i < parts; i++) {
      sizes[i] = d - each * i < each ? d - each * i : each;
      if (sizes[i] < 0)
        sizes[i] = 0;
    }
    k = c->n_out;
  }
  if (k != c->n_out)
    return gs_op_fail(c, "%d split sizes for %d outputs", k, c->n_out);
  int64_t total = 0;
  for (int i = 0; i < k; i++) {
    if (sizes[i] < 0)
      return gs_op_fail(c, "split size %lld is negative", (long long)sizes[i]);
    total += sizes[i];
  }
  if (total != x->dims[axis])
    return gs_op_fail(c, "split sizes add up to %lld, the axis has %lld", (long long)total,
                      (long long)x->dims[axis]);
  for (int i = 0; i < k; i++) {
    c->out[i].dtype = c->in[0].dtype;
    c->out[i].shape = *x;
    c->out[i].shape.dims[axis] = sizes[i];
  }
  gs_axis_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  a->axis = axis;
  return GS_OK;
}

static int infer_slice(gs_op_call *c, const gs_node *n) {
  (void)n;
  const gs_shape *x = &c->in[0].shape;
  int64_t starts[GS_MAX_DIMS], ends[GS_MAX_DIMS], axes[GS_MAX_DIMS], steps[GS_MAX_DIMS];
  int k = gs_op_const_ints(c, 1, starts, GS_MAX_DIMS), ke;
  if (k < 0)
    return k;
  if ((ke = gs_op_const_ints(c, 2, ends, GS_MAX_DIMS)) < 0)
    return ke;
  if (ke != k)
    return gs_op_fail(c, "%d starts but %d ends", k, ke);
  for (int i = 0; i < k; i++) {
    axes[i] = i;
    steps[i] = 1;
  }
  if (c->n_in > 3 && c->in[3].dtype != GS_DT_INVALID) {
    int ka = gs_op_const_ints(c, 3, axes, GS_MAX_DIMS);
    if (ka < 0)
      return ka;
    if (ka != k)
      return gs_op_fail(c, "%d axes for %d starts", ka, k);
  }
  if (c->n_in > 4 && c->in[4].dtype != GS_DT_INVALID) {
    int ks = gs_op_const_ints(c, 4, steps, GS_MAX_DIMS);
    if (ks < 0)
      return ks;
    if (ks != k)
      return gs_op_fail(c, "%d steps for %d starts", ks, k);
  }
  gs_slice_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  gs_shape out = *x;
  bool seen[GS_MAX_DIMS] = {false};
  for (int d = 0; d < x->rank; d++) {
    a->start[d] = 0;
    a->step[d] = 1;
  }
  for (int i = 0; i < k; i++) {
    int ax;
    if (gs_axis_normalize(axes[i], x->rank, &ax) < 0)
      return gs_op_fail(c, "%s", gs_error_detail());
    if (seen[ax])
      return gs_op_fail(c, "axis %d is sliced twice", ax);
    seen[ax] = true;
    int64_t dim = x->dims[ax], st = starts[i], en = ends[i], step = steps[i];
    if (step == 0)
      return gs_op_fail(c, "step 0 on axis %d", ax);
    /* NumPy's rules: negative from the end, then clamped. */
    if (st < 0)
      st += dim;
    if (en < 0)
      en += dim;
    int64_t count;
    if (step > 0) {
      st = st < 0 ? 0 : st > dim ? dim : st;
      en = en < 0 ? 0 : en > dim ? dim : en;
      count = en > st ? (en - st + step - 1) / step : 0;
    } else {
      st = st < 0 ? -1 : st > dim - 1 ? dim - 1 : st;
      en = en < -1 ? -1 : en > dim - 1 ? dim - 1 : en;
      count = st > en ? (st - en + (-step) - 1) / (-step) : 0;
    }
    a->start[ax] = st;
    a->step[ax] = step;
    out.dims[ax] = count;
  }
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = out;
  return GS_OK;
}

static int infer_gather(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 1, GS_DTM(GS_DT_INT32) | GS_DTM(GS_DT_INT64));
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape, *idx = &c->in[1].shape;
  int axis;
  if (gs_axis_normalize(gs_attr_int(n, "axis", 0), x->rank, &axis) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  if (x->rank - 1 + idx->rank > GS_MAX_DIMS)
    return gs_op_fail(c, "the output would have rank %d (at most %d)", x->rank - 1 + idx->rank,
                      GS_MAX_DIMS);
  gs_shape out = {.rank = 0};
  for (int i = 0; i < axis; i++)
    out.dims[out.rank++] = x->dims[i];
  for (int i = 0; i < idx->rank; i++)
    out.dims[out.rank++] = idx->dims[i];
  for (int i = axis + 1; i < x->rank; i++)
    out.dims[out.rank++] = x->dims[i];
  rc = same_type(c, &out, sizeof(gs_axis_attrs));
  if (rc == 0)
    ((gs_axis_attrs *)c->attrs)->axis = axis;
  return rc;
}

/* Axes from input 1 or, before opset 13, the attribute. */
/* The axes of (Un)Squeeze, from the input (opset 13+) or the attribute:
 * their count, 0 with *given false when there are none, or a GS_E code. */
static int squeeze_axes(gs_op_call *c, const gs_node *n, int64_t *axes, bool *given) {
  *given = true;
  if (c->n_in > 1 && c->in[1].dtype != GS_DT_INVALID)
    return gs_op_const_ints(c, 1, axes, GS_MAX_DIMS);
  int k = gs_attr_ints(n, "axes", axes, GS_MAX_DIMS);
  if (k == -1) {
    *given = false;
    return 0;
  }
  return k > GS_MAX_DIMS ? gs_op_fail(c, "too many axes") : k;
}

static int infer_squeeze(gs_op_call *c, const gs_node *n) {
  const gs_shape *x = &c->in[0].shape;
  int64_t axes[GS_MAX_DIMS];
  bool given;
  int k = squeeze_axes(c, n, axes, &given);
  if (k < 0)
    return k;
  bool drop[GS_MAX_DIMS] = {false};
  if (!given) { /* all size-1 dims */
    for (int i = 0; i < x->rank; i++)
      drop[i] = x->dims[i] == 1;
  }
  for (int i = 0; i < k; i++) {
    int ax;
    if (gs_axis_normalize(axes[i], x->rank, &ax) < 0)
      return gs_op_fail(c, "%s", gs_error_detail());
    if (x->dims[ax] != 1)
      return gs_op_fail(c, "cannot squeeze axis %d of size %lld", ax, (long long)x->dims[ax]);
    drop[ax] = true;
  }
  gs_shape out = {.rank = 0};
  for (int i = 0; i < x->rank; i++)
    if (!drop[i])
      out.dims[out.rank++] = x->dims[i];
  return same_type(c, &out, 0);
}

static int infer_unsqueeze(gs_op_call *c, const gs_node *n) {
  const gs_shape *x = &c->in[0].shape;
  int64_t axes[GS_MAX_DIMS];
  bool given;
  int k = squeeze_axes(c, n, axes, &given);
  if (k < 0)
    return k;
  if (!given)
    return gs_op_fail(c, "axes are required");
  int rank = x->rank + k;
  if (rank > GS_MAX_DIMS)
    return gs_op_fail(c, "the output would have rank %d (at most %d)", rank, GS_MAX_DIMS);
  bool add[GS_MAX_DIMS] = {false};
  for (int i = 0; i < k; i++) {
    int ax;
    if (gs_axis_normalize(axes[i], rank, &ax) < 0)
      return gs_op_fail(c, "%s", gs_error_detail());
    if (add[ax])
      return gs_op_fail(c, "axis %d is given twice", ax);
    add[ax] = true;
  }
  gs_shape out = {.rank = rank};
  for (int i = 0, j = 0; i < rank; i++)
    out.dims[i] = add[i] ? 1 : x->dims[j++];
  return same_type(c, &out, 0);
}

static int infer_expand(gs_op_call *c, const gs_node *n) {
  (void)n;
  int64_t want[GS_MAX_DIMS];
  int k = gs_op_const_ints(c, 1, want, GS_MAX_DIMS);
  if (k < 0)
    return k;
  gs_shape s = {.rank = k}, out;
  for (int i = 0; i < k; i++) {
    if (want[i] < 0)
      return gs_op_fail(c, "shape[%d] = %lld is negative", i, (long long)want[i]);
    s.dims[i] = want[i];
  }
  if (gs_shape_broadcast(&c->in[0].shape, &s, &out) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  return same_type(c, &out, 0);
}

static int infer_shape(gs_op_call *c, const gs_node *n) {
  int rank = c->in[0].shape.rank;
  int64_t start = gs_attr_int(n, "start", 0), end = gs_attr_int(n, "end", rank);
  if (start < 0)
    start += rank;
  if (end < 0)
    end += rank;
  start = start < 0 ? 0 : start > rank ? rank : start;
  end = end < 0 ? 0 : end > rank ? rank : end;
  gs_shape_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  a->start = (int)start;
  a->end = (int)(end > start ? end : start);
  c->out[0].dtype = GS_DT_INT64;
  c->out[0].shape = (gs_shape){.rank = 1, .dims = {a->end - a->start}};
  return GS_OK;
}

static int fold_shape(const gs_op_call *c, const gs_node *n, void *out) {
  (void)n;
  const gs_shape_attrs *a = c->attrs;
  for (int i = a->start; i < a->end; i++)
    ((int64_t *)out)[i - a->start] = c->in[0].shape.dims[i];
  return GS_OK;
}

static int infer_constant_of_shape(gs_op_call *c, const gs_node *n) {
  int64_t want[GS_MAX_DIMS];
  int k = gs_op_const_ints(c, 0, want, GS_MAX_DIMS);
  if (k < 0)
    return k;
  gs_constant_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  gs_shape out = {.rank = k};
  for (int i = 0; i < k; i++) {
    if (want[i] < 0)
      return gs_op_fail(c, "shape[%d] = %lld is negative", i, (long long)want[i]);
    out.dims[i] = want[i];
  }
  gs_dtype dt = GS_DT_FLOAT32;
  const gs_attr *v = gs_node_attr(n, "value");
  if (v && v->type == GS_ATTR_TENSOR) {
    if (gs_shape_numel(&v->t->shape) != 1 || !v->t->data)
      return gs_op_fail(c, "value must hold one element");
    dt = v->t->dtype;
    memcpy(a->value, v->t->data, gs_dtype_size(dt));
  }
  if (gs_shape_numel(&out) < 0)
    return gs_op_fail(c, "the output shape is invalid");
  c->out[0].dtype = dt;
  c->out[0].shape = out;
  return GS_OK;
}

static int check_constant(const gs_node *n) {
  if (n->n_attrs != 1)
    return gs_error(GS_EINVAL, "Constant needs exactly one value attribute");
  const gs_attr *a = &n->attrs[0];
  if (strcmp(a->name, "sparse_value") == 0 || strcmp(a->name, "value_string") == 0 ||
      strcmp(a->name, "value_strings") == 0)
    return gs_error(GS_ENOTSUP, "Constant %s is not supported", a->name);
  return GS_OK;
}

static int infer_constant(gs_op_call *c, const gs_node *n) {
  const gs_attr *a = &n->attrs[0];
  gs_tensor_desc *o = &c->out[0];
  if (a->type == GS_ATTR_TENSOR) {
    o->dtype = a->t->dtype;
    o->shape = a->t->shape;
  } else if (a->type == GS_ATTR_FLOAT || a->type == GS_ATTR_INT) {
    o->dtype = a->type == GS_ATTR_FLOAT ? GS_DT_FLOAT32 : GS_DT_INT64;
    o->shape.rank = 0;
  } else if (a->type == GS_ATTR_FLOATS || a->type == GS_ATTR_INTS) {
    o->dtype = a->type == GS_ATTR_FLOATS ? GS_DT_FLOAT32 : GS_DT_INT64;
    o->shape = (gs_shape){.rank = 1, .dims = {a->n}};
  } else {
    return gs_op_fail(c, "attribute %s has an unsupported type", a->name);
  }
  return gs_op_attrs(c, 1) ? GS_OK : GS_ENOMEM;
}

static int fold_constant(const gs_op_call *c, const gs_node *n, void *out) {
  (void)c;
  const gs_attr *a = &n->attrs[0];
  switch (a->type) {
  case GS_ATTR_TENSOR:
    if (a->t->bytes)
      memcpy(out, a->t->data, a->t->bytes);
    break;
  case GS_ATTR_FLOAT: memcpy(out, &a->f, sizeof a->f); break;
  case GS_ATTR_INT: memcpy(out, &a->i, sizeof a->i); break;
  case GS_ATTR_FLOATS: /* an empty list has no array */
    if (a->n > 0)
      memcpy(out, a->floats, sizeof(float) * (size_t)a->n);
    break;
  case GS_ATTR_INTS:
    if (a->n > 0)
      memcpy(out, a->ints, sizeof(int64_t) * (size_t)a->n);
    break;
  default: break;
  }
  return GS_OK;
}

static int check_pad(const gs_node *n) {
  const char *mode = gs_attr_string(n, "mode", "constant");
  if (strcmp(mode, "constant") && strcmp(mode, "reflect") && strcmp(mode, "edge") &&
      strcmp(mode, "wrap"))
    return gs_error(GS_ENOTSUP, "mode=\"%s\" (expected constant, reflect, edge or wrap)", mode);
  return GS_OK;
}

static int infer_pad(gs_op_call *c, const gs_node *n) {
  const gs_shape *x = &c->in[0].shape;
  int64_t pads[2 * GS_MAX_DIMS], axes[GS_MAX_DIMS];
  int k = gs_op_const_ints(c, 1, pads, 2 * GS_MAX_DIMS);
  if (k < 0)
    return k;
  int na = x->rank;
  for (int i = 0; i < na; i++)
    axes[i] = i;
  if (c->n_in > 3 && c->in[3].dtype != GS_DT_INVALID && (na = gs_op_const_ints(c, 3, axes, GS_MAX_DIMS)) < 0)
    return na;
  if (k != 2 * na)
    return gs_op_fail(c, "%d pads for %d axes", k, na);
  gs_pad_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  const char *mode = gs_attr_string(n, "mode", "constant");
  a->mode = !strcmp(mode, "reflect") ? GS_PAD_REFLECT
            : !strcmp(mode, "edge")  ? GS_PAD_EDGE
            : !strcmp(mode, "wrap")  ? GS_PAD_WRAP
                                     : GS_PAD_CONSTANT;
  gs_shape out = *x;
  for (int i = 0; i < na; i++) {
    int ax;
    if (gs_axis_normalize(axes[i], x->rank, &ax) < 0)
      return gs_op_fail(c, "%s", gs_error_detail());
    a->begin[ax] = pads[i];
    a->end[ax] = pads[na + i];
    out.dims[ax] = x->dims[ax] + pads[i] + pads[na + i];
    if (out.dims[ax] < 0)
      return gs_op_fail(c, "pads crop axis %d below zero", ax);
    if (a->mode == GS_PAD_REFLECT && (pads[i] >= x->dims[ax] || pads[na + i] >= x->dims[ax]))
      return gs_op_fail(c, "reflect pads must be smaller than the axis (%lld)",
                        (long long)x->dims[ax]);
    if ((a->mode == GS_PAD_EDGE || a->mode == GS_PAD_WRAP) && x->dims[ax] == 0 && out.dims[ax] > 0)
      return gs_op_fail(c, "edge or wrap padding of an empty axis");
  }
  if (c->n_in > 2 && c->in[2].dtype != GS_DT_INVALID) {
    int rc = gs_op_need_values(c, 2);
    if (rc < 0)
      return rc;
    if (c->in[2].dtype != c->in[0].dtype)
      return gs_op_fail(c, "constant_value must have the input's type");
    int64_t count = gs_shape_numel(&c->in[2].shape);
    if (count > 1)
      return gs_op_fail(c, "constant_value must be one value, not %lld", (long long)count);
    /* Stored as double: every supported type converts exactly enough for
     * padding. Empty: the default, 0. */
    a->value = 0;
    if (count == 1 && (rc = gs_op_const_scalar(c, 2, &a->value)) < 0)
      return rc;
  }
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = out;
  return GS_OK;
}

static int check_resize(const gs_node *n) {
  const char *mode = gs_attr_string(n, "mode", "nearest");
  if (strcmp(mode, "nearest") && strcmp(mode, "linear") && strcmp(mode, "cubic"))
    return gs_error(GS_ENOTSUP, "mode=\"%s\" (expected nearest, linear or cubic)", mode);
  const char *ct = gs_attr_string(n, "coordinate_transformation_mode", "half_pixel");
  if (strcmp(ct, "half_pixel") && strcmp(ct, "asymmetric") && strcmp(ct, "align_corners") &&
      strcmp(ct, "pytorch_half_pixel") && strcmp(ct, "half_pixel_symmetric") &&
      strcmp(ct, "tf_crop_and_resize"))
    return gs_error(GS_ENOTSUP, "coordinate_transformation_mode=\"%s\"", ct);
  const char *nm = gs_attr_string(n, "nearest_mode", "round_prefer_floor");
  if (strcmp(nm, "round_prefer_floor") && strcmp(nm, "round_prefer_ceil") && strcmp(nm, "floor") &&
      strcmp(nm, "ceil"))
    return gs_error(GS_ENOTSUP, "nearest_mode=\"%s\"", nm);
  const char *kp = gs_attr_string(n, "keep_aspect_ratio_policy", "stretch");
  if (strcmp(kp, "stretch") && strcmp(kp, "not_larger") && strcmp(kp, "not_smaller"))
    return gs_error(GS_ENOTSUP, "keep_aspect_ratio_policy=\"%s\"", kp);
  return GS_OK;
}

/* The axes the scales, sizes and roi speak of: the attribute, or all. */
static int resize_axes(gs_op_call *c, const gs_node *n, int *axes) {
  int rank = c->in[0].shape.rank;
  int64_t raw[GS_MAX_DIMS];
  int k = gs_attr_ints(n, "axes", raw, GS_MAX_DIMS);
  if (k < 0) {
    for (int i = 0; i < rank; i++)
      axes[i] = i;
    return rank;
  }
  if (k > rank)
    return gs_op_fail(c, "%d axes for rank %d", k, rank);
  bool seen[GS_MAX_DIMS] = {false};
  for (int i = 0; i < k; i++) {
    if (gs_axis_normalize(raw[i], rank, &axes[i]) < 0)
      return gs_op_fail(c, "%s", gs_error_detail());
    if (seen[axes[i]])
      return gs_op_fail(c, "axis %d is listed twice", axes[i]);
    seen[axes[i]] = true;
  }
  return k;
}

static void resize_modes(gs_resize_attrs *a, const gs_node *n) {
  const char *mode = gs_attr_string(n, "mode", "nearest");
  a->mode = !strcmp(mode, "linear") ? GS_RESIZE_LINEAR
            : !strcmp(mode, "cubic") ? GS_RESIZE_CUBIC
                                     : GS_RESIZE_NEAREST;
  const char *ct = gs_attr_string(n, "coordinate_transformation_mode", "half_pixel");
  a->coord = !strcmp(ct, "asymmetric")             ? GS_COORD_ASYMMETRIC
             : !strcmp(ct, "align_corners")        ? GS_COORD_ALIGN_CORNERS
             : !strcmp(ct, "pytorch_half_pixel")   ? GS_COORD_PYTORCH_HALF_PIXEL
             : !strcmp(ct, "half_pixel_symmetric") ? GS_COORD_HALF_PIXEL_SYMMETRIC
             : !strcmp(ct, "tf_crop_and_resize")   ? GS_COORD_TF_CROP_AND_RESIZE
                                                   : GS_COORD_HALF_PIXEL;
  const char *nm = gs_attr_string(n, "nearest_mode", "round_prefer_floor");
  a->nearest = !strcmp(nm, "round_prefer_ceil") ? GS_NEAREST_ROUND_PREFER_CEIL
               : !strcmp(nm, "floor")           ? GS_NEAREST_FLOOR
               : !strcmp(nm, "ceil")            ? GS_NEAREST_CEIL
                                                : GS_NEAREST_ROUND_PREFER_FLOOR;
  a->cubic_a = gs_attr_float(n, "cubic_coeff_a", -0.75f);
  a->exclude_outside = gs_attr_int(n, "exclude_outside", 0) != 0;
  a->antialias = gs_attr_int(n, "antialias", 0) != 0 && a->mode != GS_RESIZE_NEAREST;
  a->extrapolation = gs_attr_float(n, "extrapolation_value", 0.0f);
}

/* Output lengths from scales (input 2) over `axes`. */
static int resize_by_scales(gs_op_call *c, gs_resize_attrs *a, const int *axes, int k,
                            gs_shape *out) {
  const gs_shape *x = &c->in[0].shape;
  int rc = gs_op_need_values(c, 2);
  if (rc < 0)
    return rc;
  if (c->in[2].dtype != GS_DT_FLOAT32 || gs_shape_numel(&c->in[2].shape) != k)
    return gs_op_fail(c, "scales must be %d float32 values", k);
  const float *sc = c->in_data[2];
  for (int i = 0; i < k; i++) {
    int d = axes[i];
    if (!(sc[i] > 0) || !isfinite(sc[i]))
      return gs_op_fail(c, "scale %g must be positive", (double)sc[i]);
    a->scale[d] = sc[i];
    a->out_len[d] = (double)x->dims[d] * sc[i];
    out->dims[d] = (int64_t)floor((double)x->dims[d] * sc[i]);
  }
  return GS_OK;
}

/* Output lengths from sizes (input 3), with keep_aspect_ratio_policy. */
static int resize_by_sizes(gs_op_call *c, const gs_node *n, gs_resize_attrs *a, const int *axes,
                           int k, gs_shape *out) {
  const gs_shape *x = &c->in[0].shape;
  int64_t sizes[GS_MAX_DIMS];
  int got = gs_op_const_ints(c, 3, sizes, GS_MAX_DIMS);
  if (got < 0)
    return got;
  if (got != k)
    return gs_op_fail(c, "sizes has %d values for %d axes", got, k);
  const char *kp = gs_attr_string(n, "keep_aspect_ratio_policy", "stretch");
  bool stretch = !strcmp(kp, "stretch"), larger = !strcmp(kp, "not_smaller");
  double common = larger ? 0 : INFINITY;
  for (int i = 0; i < k; i++) {
    if (sizes[i] < 0)
      return gs_op_fail(c, "size %lld is negative", (long long)sizes[i]);
    double s = x->dims[axes[i]] ? (double)sizes[i] / (double)x->dims[axes[i]] : 1.0;
    common = larger ? fmax(common, s) : fmin(common, s);
  }
  for (int i = 0; i < k; i++) {
    int d = axes[i];
    if (stretch) {
      out->dims[d] = sizes[i];
      a->scale[d] = x->dims[d] ? (double)sizes[i] / (double)x->dims[d] : 1.0;
    } else { /* one scale for every axis, the sizes rounded from it */
      a->scale[d] = common;
      out->dims[d] = (int64_t)floor((double)x->dims[d] * common + 0.5);
    }
    a->out_len[d] = stretch ? (double)out->dims[d] : (double)x->dims[d] * common;
  }
  return GS_OK;
}

/* tf_crop_and_resize's roi (input 1): starts then ends, over `axes`. */
static int resize_roi(gs_op_call *c, gs_resize_attrs *a, const int *axes, int k) {
  for (int d = 0; d < c->in[0].shape.rank; d++)
    a->roi_start[d] = 0, a->roi_end[d] = 1;
  if (a->coord != GS_COORD_TF_CROP_AND_RESIZE)
    return GS_OK;
  if (c->n_in < 2 || c->in[1].dtype == GS_DT_INVALID)
    return gs_op_fail(c, "tf_crop_and_resize needs roi");
  int rc = gs_op_need_values(c, 1);
  if (rc < 0)
    return rc;
  if (gs_shape_numel(&c->in[1].shape) != 2 * k ||
      (c->in[1].dtype != GS_DT_FLOAT32 && c->in[1].dtype != GS_DT_FLOAT64))
    return gs_op_fail(c, "roi must be %d float values", 2 * k);
  for (int i = 0; i < k; i++) {
    bool f64 = c->in[1].dtype == GS_DT_FLOAT64;
    const void *r = c->in_data[1];
    a->roi_start[axes[i]] = f64 ? ((const double *)r)[i] : ((const float *)r)[i];
    a->roi_end[axes[i]] = f64 ? ((const double *)r)[k + i] : ((const float *)r)[k + i];
  }
  return GS_OK;
}

static int infer_resize(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS | GS_DTM(GS_DT_UINT8) | GS_DTM(GS_DT_INT8));
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape;
  gs_resize_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  resize_modes(a, n);
  int axes[GS_MAX_DIMS];
  int k = resize_axes(c, n, axes);
  if (k < 0)
    return k;
  gs_shape out = *x;
  for (int d = 0; d < x->rank; d++)
    a->scale[d] = 1.0, a->out_len[d] = (double)x->dims[d];
  bool has_scales = c->n_in > 2 && c->in[2].dtype != GS_DT_INVALID && gs_shape_numel(&c->in[2].shape) > 0;
  bool has_sizes = c->n_in > 3 && c->in[3].dtype != GS_DT_INVALID && gs_shape_numel(&c->in[3].shape) > 0;
  if (has_scales == has_sizes)
    return gs_op_fail(c, "exactly one of scales and sizes must be given");
  rc = has_scales ? resize_by_scales(c, a, axes, k, &out) : resize_by_sizes(c, n, a, axes, k, &out);
  if (rc == 0)
    rc = resize_roi(c, a, axes, k);
  if (rc < 0)
    return rc;
  for (int d = 0; d < x->rank; d++)
    if (x->dims[d] == 0 && out.dims[d] > 0)
      return gs_op_fail(c, "axis %d is empty and cannot be resized to %lld", d,
                        (long long)out.dims[d]);
  a->device_ok = a->mode != GS_RESIZE_CUBIC && !a->antialias &&
                 a->coord != GS_COORD_HALF_PIXEL_SYMMETRIC && a->coord != GS_COORD_TF_CROP_AND_RESIZE;
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = out;
  return GS_OK;
}

static const char *const no_attrs[] = {NULL};
static const char *const reshape_attrs[] = {"allowzero", NULL};
static const char *const axis_attrs[] = {"axis", NULL};
static const char *const perm_attrs[] = {"perm", NULL};
static const char *const split_attrs[] = {"axis", "split", "num_outputs", NULL};
static const char *const axes_attrs[] = {"axes", NULL};
static const char *const shape_attrs[] = {"start", "end", NULL};
static const char *const value_attrs[] = {"value", NULL};
static const char *const constant_attrs[] = {"value", "value_float", "value_floats", "value_int",
                                             "value_ints", "sparse_value", "value_string",
                                             "value_strings", NULL};
static const char *const pad_attrs[] = {"mode", NULL};
static const char *const resize_attrs[] = {"mode", "coordinate_transformation_mode",
                                           "nearest_mode", "cubic_coeff_a", "exclude_outside",
                                           "extrapolation_value", "antialias", "axes",
                                           "keep_aspect_ratio_policy", NULL};

const gs_op_def gs__ops_shape[] = {
    {.name = "Reshape", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = reshape_attrs, .infer = infer_reshape},
    {.name = "Flatten", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .attrs = axis_attrs,
     .infer = infer_flatten},
    {.name = "Transpose", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = perm_attrs, .infer = infer_transpose},
    {.name = "Concat", .min_in = 1, .max_in = GS_OP_MAX_IO - 1, .min_out = 1, .max_out = 1,
     .attrs = axis_attrs, .infer = infer_concat},
    {.name = "Split", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = GS_OP_MAX_IO - 1,
     .attrs = split_attrs, .infer = infer_split},
    {.name = "Slice", .min_in = 3, .max_in = 5, .min_out = 1, .max_out = 1, .attrs = no_attrs,
     .infer = infer_slice},
    {.name = "Gather", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1, .attrs = axis_attrs,
     .infer = infer_gather},
    {.name = "Squeeze", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1, .attrs = axes_attrs,
     .infer = infer_squeeze},
    {.name = "Unsqueeze", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = axes_attrs, .infer = infer_unsqueeze},
    {.name = "Expand", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1, .attrs = no_attrs,
     .infer = infer_expand},
    {.name = "Shape", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .attrs = shape_attrs,
     .infer = infer_shape, .fold = fold_shape},
    {.name = "ConstantOfShape", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = value_attrs, .infer = infer_constant_of_shape},
    {.name = "Constant", .min_in = 0, .max_in = 0, .min_out = 1, .max_out = 1,
     .attrs = constant_attrs, .check = check_constant, .infer = infer_constant,
     .fold = fold_constant},
    {.name = "Pad", .min_in = 2, .max_in = 4, .min_out = 1, .max_out = 1, .attrs = pad_attrs,
     .check = check_pad, .infer = infer_pad},
    {.name = "Resize", .min_in = 1, .max_in = 4, .min_out = 1, .max_out = 1,
     .attrs = resize_attrs, .check = check_resize, .infer = infer_resize},
    {.name = NULL},
};

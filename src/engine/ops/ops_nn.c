/* ops_nn.c - definitions of the neural-network ops: Gemm, MatMul, Conv,
 * ConvTranspose, the normalisations, pooling and Softmax. */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

#include <string.h>

/* ---- Gemm and MatMul ------------------------------------------------------------ */

static int infer_gemm(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, GS_DTM(c->in[0].dtype));
  if (rc < 0)
    return rc;
  const gs_shape *a = &c->in[0].shape, *b = &c->in[1].shape;
  if (a->rank != 2 || b->rank != 2)
    return gs_op_fail(c, "A and B must be matrices, got ranks %d and %d", a->rank, b->rank);
  gs_gemm_attrs *g = gs_op_attrs(c, sizeof *g);
  if (!g)
    return GS_ENOMEM;
  g->alpha = gs_attr_float(n, "alpha", 1.0f);
  g->beta = gs_attr_float(n, "beta", 1.0f);
  g->trans_a = gs_attr_int(n, "transA", 0) != 0;
  g->trans_b = gs_attr_int(n, "transB", 0) != 0;
  g->m = g->trans_a ? a->dims[1] : a->dims[0];
  g->k = g->trans_a ? a->dims[0] : a->dims[1];
  int64_t kb = g->trans_b ? b->dims[1] : b->dims[0];
  g->n = g->trans_b ? b->dims[0] : b->dims[1];
  if (kb != g->k)
    return gs_op_fail(c, "A has %lld columns and B %lld rows (after transposes); they must match",
                      (long long)g->k, (long long)kb);
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = (gs_shape){.rank = 2, .dims = {g->m, g->n}};
  if (c->n_in > 2 && c->in[2].dtype != GS_DT_INVALID) {
    gs_shape s;
    if ((rc = gs_op_want_dtype(c, 2, GS_DTM(c->in[0].dtype))) < 0)
      return rc;
    if (c->in[2].shape.rank > 2 || gs_shape_broadcast(&c->in[2].shape, &c->out[0].shape, &s) < 0 ||
        !gs_shape_equal(&s, &c->out[0].shape))
      return gs_op_fail(c, "C does not broadcast to [%lld, %lld]", (long long)g->m,
                        (long long)g->n);
  }
  return GS_OK;
}

int gs__matmul_shapes(const gs_op_call *c, const gs_shape *a_in, const gs_shape *b_in,
                      gs_matmul_attrs *m, gs_shape *result) {
  gs_shape a = *a_in, b = *b_in;
  if (a.rank < 1 || b.rank < 1)
    return gs_op_fail(c, "inputs must have at least one dimension");
  bool a_vec = a.rank == 1, b_vec = b.rank == 1;
  if (a_vec) { /* [K] -> [1, K] */
    a.dims[1] = a.dims[0];
    a.dims[0] = 1;
    a.rank = 2;
  }
  if (b_vec) { /* [K] -> [K, 1] */
    b.dims[1] = 1;
    b.rank = 2;
  }
  m->m = a.dims[a.rank - 2];
  m->k = a.dims[a.rank - 1];
  m->n = b.dims[b.rank - 1];
  if (b.dims[b.rank - 2] != m->k)
    return gs_op_fail(c, "A has %lld columns but B has %lld rows", (long long)m->k,
                      (long long)b.dims[b.rank - 2]);
  gs_shape ab = {.rank = a.rank - 2}, bb = {.rank = b.rank - 2}, batch;
  memcpy(ab.dims, a.dims, sizeof(int64_t) * (size_t)ab.rank);
  memcpy(bb.dims, b.dims, sizeof(int64_t) * (size_t)bb.rank);
  if (gs_shape_broadcast(&ab, &bb, &batch) < 0)
    return gs_op_fail(c, "batch dimensions: %s", gs_error_detail());
  /* Element strides of each operand's matrices along the output's batch dims. */
  m->batch_rank = batch.rank;
  m->batch = 1;
  int64_t sa = m->m * m->k, sb = m->k * m->n;
  for (int i = batch.rank - 1; i >= 0; i--) {
    int ia = ab.rank - batch.rank + i, ib = bb.rank - batch.rank + i;
    int64_t da = ia >= 0 ? ab.dims[ia] : 1, db = ib >= 0 ? bb.dims[ib] : 1;
    m->batch_dims[i] = batch.dims[i];
    m->a_batch_strides[i] = da == 1 ? 0 : sa;
    m->b_batch_strides[i] = db == 1 ? 0 : sb;
    sa *= da;
    sb *= db;
    m->batch *= batch.dims[i];
  }
  gs_shape out = batch;
  if (!a_vec)
    out.dims[out.rank++] = m->m;
  if (!b_vec)
    out.dims[out.rank++] = m->n;
  *result = out;
  /* B shared by every product and A dense ([batch..., M, K], a Linear
   * layer over a sequence or an image's positions): one product of
   * (batch M) rows, in the same row-major layout, instead of many small. */
  bool b_shared = true, a_dense = true;
  for (int i = 0; i < batch.rank; i++) {
    b_shared = b_shared && m->b_batch_strides[i] == 0;
    a_dense = a_dense && (m->a_batch_strides[i] != 0 || batch.dims[i] == 1);
  }
  if (batch.rank > 0 && b_shared && a_dense) {
    m->m *= m->batch;
    m->batch = 1;
    m->batch_rank = 0;
  }
  return GS_OK;
}

static int infer_matmul(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS | GS_DTM(GS_DT_INT32) | GS_DTM(GS_DT_INT64));
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, GS_DTM(c->in[0].dtype));
  if (rc < 0)
    return rc;
  gs_matmul_attrs *m = gs_op_attrs(c, sizeof *m);
  if (!m)
    return GS_ENOMEM;
  c->out[0].dtype = c->in[0].dtype;
  return gs__matmul_shapes(c, &c->in[0].shape, &c->in[1].shape, m, &c->out[0].shape);
}

/* ---- windows: Conv, ConvTranspose, pooling ---------------------------------------- */

/* Reads kernel_shape, strides, dilations, pads and auto_pad for `spatial`
 * dims of input x, and computes the output's spatial dims. */
static int parse_window(gs_op_call *c, const gs_node *n, int spatial, const int64_t *kernel_in,
                        bool transposed, bool ceil_mode, int64_t *kernel, int64_t *stride,
                        int64_t *dilation, int64_t *pb, int64_t *pe, int64_t *out_dims) {
  const gs_shape *x = &c->in[0].shape;
  int64_t v[6];
  for (int i = 0; i < spatial; i++) {
    kernel[i] = kernel_in ? kernel_in[i] : 0;
    stride[i] = dilation[i] = 1;
    pb[i] = pe[i] = 0;
  }
  int k = gs_attr_ints(n, "kernel_shape", v, 3);
  if (k >= 0) {
    if (k != spatial)
      return gs_op_fail(c, "kernel_shape has %d values for %d spatial dims", k, spatial);
    for (int i = 0; i < spatial; i++) {
      if (kernel_in && v[i] != kernel_in[i])
        return gs_op_fail(c, "kernel_shape disagrees with the weights");
      kernel[i] = v[i];
    }
  } else if (!kernel_in) {
    return gs_op_fail(c, "kernel_shape is required");
  }
  if ((k = gs_attr_ints(n, "strides", v, 3)) >= 0) {
    if (k != spatial)
      return gs_op_fail(c, "strides has %d values for %d spatial dims", k, spatial);
    memcpy(stride, v, sizeof(int64_t) * (size_t)spatial);
  }
  if ((k = gs_attr_ints(n, "dilations", v, 3)) >= 0) {
    if (k != spatial)
      return gs_op_fail(c, "dilations has %d values for %d spatial dims", k, spatial);
    memcpy(dilation, v, sizeof(int64_t) * (size_t)spatial);
  }
  if ((k = gs_attr_ints(n, "pads", v, 6)) >= 0) {
    if (k != 2 * spatial)
      return gs_op_fail(c, "pads has %d values for %d spatial dims", k, spatial);
    memcpy(pb, v, sizeof(int64_t) * (size_t)spatial);
    memcpy(pe, v + spatial, sizeof(int64_t) * (size_t)spatial);
  }
  for (int i = 0; i < spatial; i++)
    if (kernel[i] < 1 || stride[i] < 1 || dilation[i] < 1 || pb[i] < 0 || pe[i] < 0 ||
        kernel[i] > 1 << 20 || stride[i] > 1 << 20 || dilation[i] > 1 << 20)
      return gs_op_fail(c, "kernel, strides and dilations must be positive, pads not negative");
  const char *auto_pad = gs_attr_string(n, "auto_pad", "NOTSET");
  bool same = strcmp(auto_pad, "SAME_UPPER") == 0 || strcmp(auto_pad, "SAME_LOWER") == 0;
  if (!same && strcmp(auto_pad, "NOTSET") != 0 && strcmp(auto_pad, "VALID") != 0)
    return gs_op_fail(c, "auto_pad \"%s\" is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID",
                      auto_pad);
  if (transposed && strcmp(auto_pad, "NOTSET") != 0)
    return gs_op_fail(c, "auto_pad is not supported for ConvTranspose; give pads");
  for (int i = 0; i < spatial; i++) {
    int64_t in = x->dims[2 + i], span = dilation[i] * (kernel[i] - 1) + 1;
    if (strcmp(auto_pad, "VALID") == 0)
      pb[i] = pe[i] = 0;
    if (same) {
      int64_t out = (in + stride[i] - 1) / stride[i];
      int64_t total = (out - 1) * stride[i] + span - in;
      if (total < 0)
        total = 0;
      bool lower = strcmp(auto_pad, "SAME_LOWER") == 0;
      pb[i] = lower ? total - total / 2 : total / 2;
      pe[i] = total - pb[i];
    }
    if (transposed)
      continue; /* ConvTranspose computes its own output size */
    int64_t room = in + pb[i] + pe[i] - span;
    if (room < 0)
      return gs_op_fail(c, "spatial dim %d: input %lld with pads %lld+%lld is smaller than the "
                           "window %lld",
                        i, (long long)in, (long long)pb[i], (long long)pe[i], (long long)span);
    int64_t out = (ceil_mode ? (room + stride[i] - 1) / stride[i] : room / stride[i]) + 1;
    /* With ceil_mode, a last window that starts past the padded input is dropped. */
    if (ceil_mode && (out - 1) * stride[i] >= in + pb[i])
      out--;
    out_dims[i] = out;
  }
  return GS_OK;
}

static int check_conv(const gs_node *n) {
  const char *ap = gs_attr_string(n, "auto_pad", "NOTSET");
  if (strcmp(ap, "NOTSET") && strcmp(ap, "VALID") && strcmp(ap, "SAME_UPPER") &&
      strcmp(ap, "SAME_LOWER"))
    return gs_error(GS_ENOTSUP, "auto_pad=\"%s\"", ap);
  return GS_OK;
}

static int check_conv_transpose(const gs_node *n) {
  if (gs_node_attr(n, "output_shape"))
    return gs_error(GS_ENOTSUP, "output_shape is not supported; give pads and output_padding");
  if (strcmp(gs_attr_string(n, "auto_pad", "NOTSET"), "NOTSET") != 0)
    return gs_error(GS_ENOTSUP, "auto_pad is not supported for ConvTranspose; give pads");
  return GS_OK;
}

int gs__conv_shapes(gs_op_call *c, const gs_node *n, const gs_shape *w, bool transposed,
                    gs_conv_attrs *a, gs_shape *result) {
  const gs_shape *x = &c->in[0].shape;
  int spatial = x->rank - 2;
  if (spatial < 1 || spatial > 3 || w->rank != x->rank)
    return gs_op_fail(c, "expects X of rank 3 to 5 and W of the same rank, got %d and %d", x->rank,
                      w->rank);
  a->spatial = spatial;
  a->group = gs_attr_int(n, "group", 1);
  int64_t chans = x->dims[1];
  if (a->group < 1 || chans % a->group)
    return gs_op_fail(c, "group %lld does not divide the %lld input channels", (long long)a->group,
                      (long long)chans);
  int64_t out_ch;
  if (!transposed) {
    if (w->dims[1] * a->group != chans)
      return gs_op_fail(c, "weights take %lld channels per group, the input has %lld in %lld groups",
                        (long long)w->dims[1], (long long)chans, (long long)a->group);
    out_ch = w->dims[0];
    if (out_ch % a->group)
      return gs_op_fail(c, "group %lld does not divide the %lld output channels",
                        (long long)a->group, (long long)out_ch);
  } else {
    if (w->dims[0] != chans)
      return gs_op_fail(c, "weights are for %lld input channels, the input has %lld",
                        (long long)w->dims[0], (long long)chans);
    out_ch = w->dims[1] * a->group;
  }
  int64_t out_sp[3];
  int rc = parse_window(c, n, spatial, w->dims + 2, transposed, false, a->kernel, a->stride,
                        a->dilation, a->pad_begin, a->pad_end, out_sp);
  if (rc < 0)
    return rc;
  if (transposed) {
    int64_t v[3];
    int k = gs_attr_ints(n, "output_padding", v, 3);
    for (int i = 0; i < spatial; i++) {
      a->output_padding[i] = k == spatial ? v[i] : 0;
      out_sp[i] = a->stride[i] * (x->dims[2 + i] - 1) + a->output_padding[i] +
                  a->dilation[i] * (a->kernel[i] - 1) + 1 - a->pad_begin[i] - a->pad_end[i];
      if (out_sp[i] < 1)
        return gs_op_fail(c, "the output would have spatial size %lld", (long long)out_sp[i]);
    }
  }
  *result = (gs_shape){.rank = x->rank, .dims = {x->dims[0], out_ch}};
  for (int i = 0; i < spatial; i++)
    result->dims[2 + i] = out_sp[i];
  return GS_OK;
}

static int infer_conv_common(gs_op_call *c, const gs_node *n, bool transposed) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, GS_DTM(c->in[0].dtype));
  if (rc < 0)
    return rc;
  gs_conv_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  gs_shape out;
  if ((rc = gs__conv_shapes(c, n, &c->in[1].shape, transposed, a, &out)) < 0)
    return rc;
  int64_t out_ch = out.dims[1];
  if (c->n_in > 2 && c->in[2].dtype != GS_DT_INVALID) {
    if (c->in[2].dtype != c->in[0].dtype || c->in[2].shape.rank != 1 ||
        c->in[2].shape.dims[0] != out_ch)
      return gs_op_fail(c, "bias must be a vector of %lld values of the input's type",
                        (long long)out_ch);
    a->has_bias = true;
  }
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = out;
  return GS_OK;
}

static int infer_conv(gs_op_call *c, const gs_node *n) { return infer_conv_common(c, n, false); }
static int infer_conv_transpose(gs_op_call *c, const gs_node *n) {
  return infer_conv_common(c, n, true);
}

static int check_pool(const gs_node *n) {
  if (gs_attr_int(n, "storage_order", 0) != 0)
    return gs_error(GS_ENOTSUP, "storage_order=1 is not supported");
  return check_conv(n);
}

/* LpPool's p: a whole number of at least 1 (the ONNX default is 2). */
static int pool_norm(gs_op_call *c, const gs_node *n, int *lp) {
  int64_t p = gs_attr_int(n, "p", 2);
  if (p < 1 || p > 64)
    return gs_op_fail(c, "p=%lld is out of range (1 to 64)", (long long)p);
  *lp = (int)p;
  return GS_OK;
}

int gs__pool_shapes(gs_op_call *c, const gs_node *n, gs_pool_attrs *a, gs_shape *out) {
  const gs_shape *x = &c->in[0].shape;
  int spatial = x->rank - 2;
  if (spatial < 1 || spatial > 3)
    return gs_op_fail(c, "expects an input of rank 3 to 5, got %d", x->rank);
  a->spatial = spatial;
  a->count_include_pad = gs_attr_int(n, "count_include_pad", 0) != 0;
  int64_t out_sp[3];
  int rc = parse_window(c, n, spatial, NULL, false, gs_attr_int(n, "ceil_mode", 0) != 0,
                        a->kernel, a->stride, a->dilation, a->pad_begin, a->pad_end, out_sp);
  if (rc < 0)
    return rc;
  *out = *x;
  for (int i = 0; i < spatial; i++)
    out->dims[2 + i] = out_sp[i];
  return GS_OK;
}

static int infer_pool(gs_op_call *c, const gs_node *n, bool is_max) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS | (is_max ? GS_DTM(GS_DT_INT8) | GS_DTM(GS_DT_UINT8) : 0));
  if (rc < 0)
    return rc;
  if (c->n_out > 1)
    return gs_op_fail(c, "the Indices output is not supported");
  gs_pool_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  if (strcmp(n->op_type, "LpPool") == 0 && (rc = pool_norm(c, n, &a->lp)) < 0)
    return rc;
  if ((rc = gs__pool_shapes(c, n, a, &c->out[0].shape)) < 0)
    return rc;
  c->out[0].dtype = c->in[0].dtype;
  return GS_OK;
}

static int infer_maxpool(gs_op_call *c, const gs_node *n) { return infer_pool(c, n, true); }
static int infer_avgpool(gs_op_call *c, const gs_node *n) { return infer_pool(c, n, false); }
static int infer_lppool(gs_op_call *c, const gs_node *n) { return infer_pool(c, n, false); }

/* GlobalAveragePool, GlobalMaxPool and GlobalLpPool. */
static int infer_global_pool(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS);
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape;
  if (x->rank < 3)
    return gs_op_fail(c, "expects an input of rank 3 or more, got %d", x->rank);
  gs_pool_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  a->global = true;
  if (strcmp(n->op_type, "GlobalLpPool") == 0 && (rc = pool_norm(c, n, &a->lp)) < 0)
    return rc;
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = *x;
  for (int i = 2; i < x->rank; i++)
    c->out[0].shape.dims[i] = 1;
  return GS_OK;
}

/* ---- normalisation and softmax -------------------------------------------------------- */

static int check_batchnorm(const gs_node *n) {
  if (gs_attr_int(n, "training_mode", 0) != 0)
    return gs_error(GS_ENOTSUP, "training_mode=1 is not supported (inference only)");
  return GS_OK;
}

static int infer_batchnorm(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS);
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape;
  if (x->rank < 2)
    return gs_op_fail(c, "expects an input of rank 2 or more, got %d", x->rank);
  for (int i = 1; i < 5; i++)
    if (c->in[i].dtype != c->in[0].dtype || c->in[i].shape.rank != 1 ||
        c->in[i].shape.dims[0] != x->dims[1])
      return gs_op_fail(c, "input %d must be a vector of %lld values of the input's type", i,
                        (long long)x->dims[1]);
  if (c->n_out > 1)
    return gs_op_fail(c, "running mean and variance outputs are for training; not supported");
  gs_norm_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  a->epsilon = gs_attr_float(n, "epsilon", 1e-5f);
  c->out[0] = c->in[0];
  return GS_OK;
}

static int infer_layernorm(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS);
  if (rc < 0)
    return rc;
  if (gs_attr_int(n, "stash_type", 1) != 1)
    return gs_op_fail(c, "stash_type other than float32 is not supported");
  gs_norm_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  const gs_shape *x = &c->in[0].shape;
  if ((rc = gs_axis_normalize(gs_attr_int(n, "axis", -1), x->rank, &a->axis)) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  a->epsilon = gs_attr_float(n, "epsilon", 1e-5f);
  int64_t inner = 1;
  for (int i = a->axis; i < x->rank; i++)
    inner *= x->dims[i];
  for (int i = 1; i < c->n_in; i++) {
    if (c->in[i].dtype == GS_DT_INVALID)
      continue;
    gs_shape s;
    if (c->in[i].dtype != c->in[0].dtype || gs_shape_numel(&c->in[i].shape) != inner ||
        gs_shape_broadcast(&c->in[i].shape, x, &s) < 0 || !gs_shape_equal(&s, x))
      return gs_op_fail(c, "input %d must hold the %lld normalised values per row", i,
                        (long long)inner);
  }
  c->out[0] = c->in[0];
  for (int o = 1; o < c->n_out; o++) {
    c->out[o].dtype = GS_DT_FLOAT32;
    c->out[o].shape = *x;
    for (int i = a->axis; i < x->rank; i++)
      c->out[o].shape.dims[i] = 1;
  }
  return GS_OK;
}

static int infer_softmax(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS);
  if (rc < 0)
    return rc;
  gs_axis_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  if ((rc = gs_axis_normalize(gs_attr_int(n, "axis", -1), c->in[0].shape.rank, &a->axis)) < 0)
    return gs_op_fail(c, "%s", gs_error_detail());
  c->out[0] = c->in[0];
  return GS_OK;
}

static const char *const gemm_attrs[] = {"alpha", "beta", "transA", "transB", NULL};
static const char *const no_attrs[] = {NULL};
static const char *const conv_attrs[] = {"auto_pad", "dilations", "group", "kernel_shape",
                                         "pads", "strides", NULL};
static const char *const convt_attrs[] = {"auto_pad", "dilations", "group", "kernel_shape",
                                          "pads", "strides", "output_padding", "output_shape",
                                          NULL};
static const char *const maxpool_attrs[] = {"auto_pad", "ceil_mode", "dilations", "kernel_shape",
                                            "pads", "storage_order", "strides", NULL};
static const char *const avgpool_attrs[] = {"auto_pad", "ceil_mode", "count_include_pad",
                                            "dilations", "kernel_shape", "pads", "strides", NULL};
static const char *const lppool_attrs[] = {"auto_pad", "ceil_mode", "dilations", "kernel_shape",
                                           "p",        "pads",      "strides",   NULL};
static const char *const p_attrs[] = {"p", NULL};
static const char *const bn_attrs[] = {"epsilon", "momentum", "training_mode", NULL};
static const char *const ln_attrs[] = {"axis", "epsilon", "stash_type", NULL};
static const char *const axis_attrs[] = {"axis", NULL};

const gs_op_def gs__ops_nn[] = {
    {.name = "Gemm", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 1, .attrs = gemm_attrs,
     .infer = infer_gemm},
    {.name = "MatMul", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1, .attrs = no_attrs,
     .infer = infer_matmul},
    {.name = "Conv", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 1, .attrs = conv_attrs,
     .check = check_conv, .infer = infer_conv},
    {.name = "ConvTranspose", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = convt_attrs, .check = check_conv_transpose, .infer = infer_conv_transpose},
    {.name = "BatchNormalization", .min_in = 5, .max_in = 5, .min_out = 1, .max_out = 3,
     .attrs = bn_attrs, .check = check_batchnorm, .infer = infer_batchnorm},
    {.name = "LayerNormalization", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 3,
     .attrs = ln_attrs, .infer = infer_layernorm},
    /* opset 23: x / sqrt(mean(x^2) + epsilon) * scale over the dims from axis */
    {.name = "RMSNormalization", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = ln_attrs, .infer = infer_layernorm},
    {.name = "MaxPool", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 2,
     .attrs = maxpool_attrs, .check = check_pool, .infer = infer_maxpool},
    {.name = "AveragePool", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = avgpool_attrs, .check = check_conv, .infer = infer_avgpool},
    {.name = "GlobalAveragePool", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = no_attrs, .infer = infer_global_pool},
    {.name = "GlobalMaxPool", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = no_attrs, .infer = infer_global_pool},
    /* (sum of |x|^p over the window)^(1/p); padding adds nothing */
    {.name = "LpPool", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = lppool_attrs, .check = check_conv, .infer = infer_lppool},
    {.name = "GlobalLpPool", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = p_attrs, .infer = infer_global_pool},
    {.name = "Softmax", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .attrs = axis_attrs,
     .infer = infer_softmax},
    {.name = "LogSoftmax", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = axis_attrs, .infer = infer_softmax},
    {.name = NULL},
};

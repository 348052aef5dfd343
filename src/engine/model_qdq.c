/* model_qdq.c - QDQ models onto the integer ops. onnxruntime's quantiser
 * writes a quantised model, by default, as float ops between
 * DequantizeLinear and QuantizeLinear nodes: DQ(x), DQ(w) -> Conv -> Q.
 * Run as written, every such op computes in float32 and every boundary
 * converts. This rewrite finds the patterns whose arithmetic has an
 * integer op and puts that op in their place, as onnxruntime's own graph
 * optimiser does:
 *   DQ(a), DQ(b) -> MatMul -> Q            QLinearMatMul
 *   DQ(a), DQ(b) -> MatMul                 MatMulIntegerToFloat (float out)
 *   DQ(a), DQ(w)[, DQ(bias)] -> Gemm [-> Q] QGemm (quantised or float out)
 *   DQ(x), DQ(w)[, DQ(bias)] -> Conv -> Q  QLinearConv
 *   DQ(a), DQ(b) -> Add | Mul -> Q         QLinearAdd | QLinearMul
 *   DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul [-> Add]
 *                                          DynamicQuantizeMatMul (the dynamic form's)
 * A pattern is taken only where its scales and zero points are
 * initializers of the types the integer op takes (float32 scales, 8-bit
 * zero points), the scales are per tensor where the op wants them so, and
 * a bias is int32 with the scale the integer op assumes (a's scale times
 * w's). The DequantizeLinear nodes nothing reads any more are dropped. */
#include "engine/model.h"

#include "base/error.h"
#include "engine/op.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* onnx.c */
void gs__node_clear(gs_node *n);

/* Who makes each value and how many read it (graph outputs count as readers). */
typedef struct uses {
  gs_strmap producer; /* value -> node */
  gs_strmap readers;  /* value -> count */
  gs_strmap reader;   /* value -> the last node that reads it */
} uses;

static void uses_free(uses *u) {
  gs_strmap_free(&u->producer);
  gs_strmap_free(&u->readers);
  gs_strmap_free(&u->reader);
}

static int count_uses(const gs_model *m, const bool *dead, uses *u) {
  gs_strmap_init(&u->producer);
  gs_strmap_init(&u->readers);
  gs_strmap_init(&u->reader);
  int rc = 0;
  for (int i = 0; rc == 0 && i < m->n_nodes; i++) {
    if (dead[i])
      continue;
    const gs_node *n = &m->nodes[i];
    for (int k = 0; rc == 0 && k < n->n_out; k++)
      if (n->outputs[k][0])
        rc = gs_strmap_put(&u->producer, n->outputs[k], i);
    for (int k = 0; rc == 0 && k < n->n_in; k++) {
      if (!n->inputs[k][0])
        continue;
      int c = gs_strmap_get(&u->readers, n->inputs[k]);
      rc = gs_strmap_put(&u->readers, n->inputs[k], c < 0 ? 1 : c + 1);
      if (rc == 0)
        rc = gs_strmap_put(&u->reader, n->inputs[k], i);
    }
  }
  for (int i = 0; rc == 0 && i < m->n_outputs; i++) {
    int c = gs_strmap_get(&u->readers, m->outputs[i].name);
    rc = gs_strmap_put(&u->readers, m->outputs[i].name, c < 0 ? 1 : c + 1);
    if (rc == 0)
      rc = gs_strmap_put(&u->reader, m->outputs[i].name, -1);
  }
  if (rc < 0) {
    uses_free(u);
    return gs_error(GS_ENOMEM, "out of memory rewriting the quantised model");
  }
  return 0;
}


static bool is_op(const gs_node *n, const char *op) {
  return strcmp(n->op_type, op) == 0 && (!n->domain[0] || strcmp(n->domain, "ai.onnx") == 0);
}

static const gs_const_tensor *init_of(const gs_model *m, const char *name) {
  int i = gs_strmap_get(&m->init_index, name);
  return i < 0 ? NULL : &m->inits[i];
}

/* A DequantizeLinear of an 8-bit tensor that makes `value`. */
typedef struct dq {
  int node;
  const char *q, *scale, *zero;
  gs_dtype type;
  const gs_const_tensor *q_const; /* the quantised tensor where it is an initializer */
  const float *scales;
  int64_t n_scale;
  int64_t axis; /* as the node says it, not normalised */
} dq;

static bool find_dq(const gs_model *m, const uses *u, const char *value, dq *out) {
  int p = gs_strmap_get(&u->producer, value);
  if (p < 0 || !is_op(&m->nodes[p], "DequantizeLinear") || m->nodes[p].n_in != 3)
    return false;
  const gs_node *n = &m->nodes[p];
  const gs_const_tensor *s = init_of(m, n->inputs[1]), *z = init_of(m, n->inputs[2]);
  if (!s || !z || s->dtype != GS_DT_FLOAT32 || (z->dtype != GS_DT_INT8 && z->dtype != GS_DT_UINT8) ||
      gs_shape_numel(&s->shape) != gs_shape_numel(&z->shape) || gs_attr_int(n, "block_size", 0))
    return false;
  *out = (dq){.node = p, .q = n->inputs[0], .scale = n->inputs[1], .zero = n->inputs[2],
              .type = z->dtype, .q_const = init_of(m, n->inputs[0]), .scales = s->data,
              .n_scale = gs_shape_numel(&s->shape), .axis = gs_attr_int(n, "axis", 1)};
  return out->n_scale >= 1;
}

/* The node reading `value`, where it is the only reader (and not a graph output). */
static int sole_reader(const uses *u, const char *value) {
  return gs_strmap_get(&u->readers, value) == 1 ? gs_strmap_get(&u->reader, value) : -1;
}

/* The one QuantizeLinear (per tensor, 8-bit) that reads `value`, if that
 * is all that reads it. */
static int find_q(const gs_model *m, const uses *u, const char *value) {
  int r = sole_reader(u, value);
  if (r < 0 || !is_op(&m->nodes[r], "QuantizeLinear") || m->nodes[r].n_in != 3)
    return -1;
  const gs_node *n = &m->nodes[r];
  const gs_const_tensor *s = init_of(m, n->inputs[1]), *z = init_of(m, n->inputs[2]);
  if (!s || !z || s->dtype != GS_DT_FLOAT32 || gs_shape_numel(&s->shape) != 1 ||
      (z->dtype != GS_DT_INT8 && z->dtype != GS_DT_UINT8) || gs_shape_numel(&z->shape) != 1 ||
      strcmp(n->inputs[0], value) != 0)
    return -1;
  return r;
}

/* A DequantizeLinear of an int32 bias initializer of `count` values, zero
 * point 0, whose scale is scale_a * scale_b[j] (times alpha), as the
 * integer ops assume. Returns the int32 tensor's name, or NULL. */
static const char *find_bias(const gs_model *m, const uses *u, const char *value, int64_t count,
                             float scale_a, const dq *b, float alpha, int *node) {
  int p = gs_strmap_get(&u->producer, value);
  if (p < 0 || !is_op(&m->nodes[p], "DequantizeLinear"))
    return NULL;
  const gs_node *n = &m->nodes[p];
  const gs_const_tensor *x = init_of(m, n->inputs[0]), *s = init_of(m, n->inputs[1]);
  const gs_const_tensor *z = n->n_in > 2 && n->inputs[2][0] ? init_of(m, n->inputs[2]) : NULL;
  if (!x || !s || x->dtype != GS_DT_INT32 || s->dtype != GS_DT_FLOAT32 ||
      gs_shape_numel(&x->shape) != count || x->shape.rank != 1 ||
      (n->n_in > 2 && n->inputs[2][0] && !z))
    return NULL;
  int64_t ns = gs_shape_numel(&s->shape), axis = gs_attr_int(n, "axis", 1);
  if (ns != 1 && (ns != count || (axis != 0 && axis != -1))) /* per axis: the vector's only one */
    return NULL;
  for (int64_t j = 0; z && j < gs_shape_numel(&z->shape); j++)
    if (z->dtype != GS_DT_INT32 || ((const int32_t *)z->data)[j] != 0)
      return NULL;
  for (int64_t j = 0; j < count; j++) {
    float want = alpha * scale_a * b->scales[b->n_scale > 1 ? j : 0];
    float have = ((const float *)s->data)[ns > 1 ? j : 0];
    if (!(fabsf(have - want) <= 1e-6f * fabsf(want)))
      return NULL;
  }
  *node = p;
  return n->inputs[0];
}

/* ---- the new node ------------------------------------------------------------------------- */

typedef struct new_node {
  const char *op, *domain;
  const char *inputs[9];
  int n_in;
  const char *output;
  gs_attr attrs[8]; /* borrowed: replace_node copies them */
  int n_attrs;
} new_node;

/* A copy of an attribute of the kinds the rewritten ops take (a number,
 * a list of ints, a string) into dst; false when out of memory. */
static bool copy_attr(const gs_attr *src, gs_attr *dst) {
  *dst = (gs_attr){.type = src->type, .f = src->f, .i = src->i,
                   .n = src->type == GS_ATTR_INTS ? src->n : 0};
  if (!(dst->name = strdup(src->name)))
    return false;
  if (src->type == GS_ATTR_INTS) {
    if (!(dst->ints = malloc(sizeof(int64_t) * (size_t)(src->n + 1))))
      return false;
    memcpy(dst->ints, src->ints, sizeof(int64_t) * (size_t)src->n);
  } else if (src->type == GS_ATTR_STRING) {
    return (dst->s = strdup(src->s ? src->s : "")) != NULL;
  }
  return true;
}

/* Replaces node i by `nn` (its name kept, "/int8" added). */
static int replace_node(gs_model *m, int i, const new_node *nn) {
  gs_node fresh = {.opset = m->nodes[i].opset};
  size_t len = strlen(m->nodes[i].name) + 8;
  fresh.name = malloc(len);
  if (fresh.name)
    snprintf(fresh.name, len, "%s/int8", m->nodes[i].name);
  fresh.op_type = strdup(nn->op);
  fresh.domain = strdup(nn->domain ? nn->domain : "");
  fresh.inputs = calloc((size_t)nn->n_in, sizeof(char *));
  fresh.outputs = calloc(1, sizeof(char *));
  fresh.attrs = calloc((size_t)nn->n_attrs + 1, sizeof(gs_attr));
  bool ok = fresh.name && fresh.op_type && fresh.domain && fresh.inputs && fresh.outputs &&
            fresh.attrs;
  for (int k = 0; ok && k < nn->n_in; k++, fresh.n_in++)
    ok = (fresh.inputs[k] = strdup(nn->inputs[k])) != NULL;
  if (ok && (fresh.outputs[0] = strdup(nn->output)))
    fresh.n_out = 1;
  ok = ok && fresh.n_out == 1;
  for (int k = 0; ok && k < nn->n_attrs; k++) {
    ok = copy_attr(&nn->attrs[k], &fresh.attrs[k]);
    fresh.n_attrs++; /* counted either way, so that a partial copy is freed */
  }
  if (!ok) {
    gs__node_clear(&fresh);
    return gs_error(GS_ENOMEM, "out of memory rewriting node %s", m->nodes[i].name);
  }
  gs__node_clear(&m->nodes[i]);
  m->nodes[i] = fresh;
  return 0;
}

static void add_int_attr(new_node *nn, const char *name, int64_t v) {
  nn->attrs[nn->n_attrs++] = (gs_attr){.name = (char *)name, .type = GS_ATTR_INT, .i = v};
}

/* ---- the patterns --------------------------------------------------------------------------- */

/* B's scales fit a product's columns: one, or one per column of a constant [k, n]. */
static bool per_column(const dq *b, int64_t n_axis) {
  if (b->n_scale == 1)
    return true;
  if (!b->q_const || b->q_const->shape.rank != 2)
    return false;
  int64_t axis = b->axis < 0 ? b->axis + 2 : b->axis;
  return axis == n_axis && b->n_scale == b->q_const->shape.dims[n_axis];
}

static int fuse_matmul(gs_model *m, const uses *u, int i, bool *dead) {
  const gs_node *n = &m->nodes[i];
  dq a, b;
  if (!find_dq(m, u, n->inputs[0], &a) || !find_dq(m, u, n->inputs[1], &b) || a.n_scale != 1 ||
      !per_column(&b, 1))
    return 0;
  int q = find_q(m, u, n->outputs[0]);
  new_node nn;
  if (q >= 0) {
    const gs_node *qn = &m->nodes[q];
    nn = (new_node){.op = "QLinearMatMul", .n_in = 8, .output = qn->outputs[0],
                    .inputs = {a.q, a.scale, a.zero, b.q, b.scale, b.zero, qn->inputs[1],
                               qn->inputs[2]}};
    dead[q] = true;
  } else {
    nn = (new_node){.op = "MatMulIntegerToFloat", .domain = "com.microsoft", .n_in = 6,
                    .output = n->outputs[0],
                    .inputs = {a.q, b.q, a.scale, b.scale, a.zero, b.zero}};
  }
  return replace_node(m, i, &nn) < 0 ? GS_ENOMEM : 1;
}

static int fuse_gemm(gs_model *m, const uses *u, int i, bool *dead) {
  const gs_node *n = &m->nodes[i];
  dq a, b;
  float alpha = gs_attr_float(n, "alpha", 1.0f), beta = gs_attr_float(n, "beta", 1.0f);
  int64_t trans_a = gs_attr_int(n, "transA", 0), trans_b = gs_attr_int(n, "transB", 0);
  if (!find_dq(m, u, n->inputs[0], &a) || !find_dq(m, u, n->inputs[1], &b) || a.n_scale != 1 ||
      !per_column(&b, trans_b ? 0 : 1) || (n->n_in > 2 && n->inputs[2][0] && beta != 1.0f))
    return 0;
  const char *bias = "";
  int bias_node = -1;
  if (n->n_in > 2 && n->inputs[2][0]) {
    int64_t cols = b.q_const ? b.q_const->shape.dims[trans_b ? 0 : 1] : -1;
    /* QGemm scales acc + C by alpha: C's scale must carry alpha too. */
    if (cols < 0 || !(bias = find_bias(m, u, n->inputs[2], cols, a.scales[0], &b, alpha,
                                       &bias_node)))
      return 0;
  }
  int q = find_q(m, u, n->outputs[0]);
  new_node nn = {.op = "QGemm", .domain = "com.microsoft", .n_in = 7, .output = n->outputs[0],
                 .inputs = {a.q, a.scale, a.zero, b.q, b.scale, b.zero, bias}};
  if (q >= 0) {
    nn.inputs[7] = m->nodes[q].inputs[1];
    nn.inputs[8] = m->nodes[q].inputs[2];
    nn.n_in = 9;
    nn.output = m->nodes[q].outputs[0];
    dead[q] = true;
  }
  add_int_attr(&nn, "transA", trans_a);
  add_int_attr(&nn, "transB", trans_b);
  nn.attrs[nn.n_attrs++] = (gs_attr){.name = "alpha", .type = GS_ATTR_FLOAT, .f = alpha};
  return replace_node(m, i, &nn) < 0 ? GS_ENOMEM : 1;
}

static const char *const conv_attr_names[] = {"auto_pad", "dilations", "group", "kernel_shape",
                                              "pads", "strides"};

static int fuse_conv(gs_model *m, const uses *u, int i, bool *dead) {
  const gs_node *n = &m->nodes[i];
  dq x, w;
  if (!find_dq(m, u, n->inputs[0], &x) || !find_dq(m, u, n->inputs[1], &w) || x.n_scale != 1 ||
      !w.q_const || w.q_const->shape.rank < 3)
    return 0;
  int64_t oc = w.q_const->shape.dims[0];
  if (w.n_scale != 1 && !(w.axis == 0 && w.n_scale == oc))
    return 0;
  int q = find_q(m, u, n->outputs[0]), bias_node = -1;
  if (q < 0)
    return 0;
  const char *bias = NULL;
  if (n->n_in > 2 && n->inputs[2][0] &&
      !(bias = find_bias(m, u, n->inputs[2], oc, x.scales[0], &w, 1.0f, &bias_node)))
    return 0;
  const gs_node *qn = &m->nodes[q];
  new_node nn = {.op = "QLinearConv", .n_in = bias ? 9 : 8, .output = qn->outputs[0],
                 .inputs = {x.q, x.scale, x.zero, w.q, w.scale, w.zero, qn->inputs[1],
                            qn->inputs[2], bias}};
  for (size_t k = 0; k < sizeof conv_attr_names / sizeof conv_attr_names[0]; k++) {
    const gs_attr *at = gs_node_attr(n, conv_attr_names[k]);
    if (!at)
      continue;
    if (at->type != GS_ATTR_INT && at->type != GS_ATTR_INTS && at->type != GS_ATTR_STRING)
      return 0; /* not a form Conv takes: left for Conv to refuse */
    nn.attrs[nn.n_attrs++] = *at; /* replace_node copies it */
  }
  if (replace_node(m, i, &nn) < 0)
    return GS_ENOMEM;
  dead[q] = true;
  return 1;
}

static int fuse_add_mul(gs_model *m, const uses *u, int i, bool *dead, const char *op) {
  const gs_node *n = &m->nodes[i];
  dq a, b;
  if (!find_dq(m, u, n->inputs[0], &a) || !find_dq(m, u, n->inputs[1], &b) || a.n_scale != 1 ||
      b.n_scale != 1 || a.type != b.type)
    return 0;
  int q = find_q(m, u, n->outputs[0]);
  if (q < 0 || init_of(m, m->nodes[q].inputs[2])->dtype != a.type)
    return 0;
  const gs_node *qn = &m->nodes[q];
  new_node nn = {.op = op, .domain = "com.microsoft", .n_in = 8, .output = qn->outputs[0],
                 .inputs = {a.q, a.scale, a.zero, b.q, b.scale, b.zero, qn->inputs[1],
                            qn->inputs[2]}};
  if (replace_node(m, i, &nn) < 0)
    return GS_ENOMEM;
  dead[q] = true;
  return 1;
}


/* The input of binary node n that is not `value`; NULL where neither is. */
static const char *other_input(const gs_node *n, const char *value) {
  if (n->n_in != 2)
    return NULL;
  return strcmp(n->inputs[0], value) == 0 ? n->inputs[1]
         : strcmp(n->inputs[1], value) == 0 ? n->inputs[0]
                                            : NULL;
}

/* onnxruntime's dynamic quantisation of a MatMul, as quantize_dynamic writes it:
 *   DynamicQuantizeLinear(x) -> xq, xs, xz;  Mul(xs, w_scale) -> s
 *   MatMulInteger(xq, w, xz, w_zero) -> Cast(float) -> Mul(., s) [-> Add(., bias)]
 * becomes DynamicQuantizeMatMul(x, w, w_scale, w_zero[, bias]) (com.microsoft),
 * as onnxruntime's optimiser does, so that the chain is one kernel. */
static int fuse_dynamic_matmul(gs_model *m, const uses *u, int i, bool *dead) {
  const gs_node *n = &m->nodes[i];
  if (n->n_in < 3 || !n->inputs[2][0])
    return 0;
  int d = gs_strmap_get(&u->producer, n->inputs[0]);
  if (d < 0 || !is_op(&m->nodes[d], "DynamicQuantizeLinear"))
    return 0;
  const gs_node *dyn = &m->nodes[d];
  const gs_const_tensor *w = init_of(m, n->inputs[1]);
  const gs_const_tensor *wz = n->n_in > 3 && n->inputs[3][0] ? init_of(m, n->inputs[3]) : NULL;
  if (dyn->n_out != 3 || strcmp(dyn->outputs[2], n->inputs[2]) != 0 || !w || w->shape.rank != 2 ||
      (w->dtype != GS_DT_INT8 && w->dtype != GS_DT_UINT8) ||
      (n->n_in > 3 && n->inputs[3][0] && (!wz || wz->dtype != w->dtype)) ||
      sole_reader(u, dyn->outputs[0]) != i || sole_reader(u, dyn->outputs[2]) != i)
    return 0;
  int scale_mul = sole_reader(u, dyn->outputs[1]), cast = sole_reader(u, n->outputs[0]);
  if (scale_mul < 0 || !is_op(&m->nodes[scale_mul], "Mul") || cast < 0 ||
      !is_op(&m->nodes[cast], "Cast") || gs_attr_int(&m->nodes[cast], "to", 0) != 1 /* FLOAT */)
    return 0;
  const char *w_scale = other_input(&m->nodes[scale_mul], dyn->outputs[1]);
  const gs_const_tensor *ws = w_scale ? init_of(m, w_scale) : NULL;
  int64_t cols = w->shape.dims[1], n_ws = ws ? gs_shape_numel(&ws->shape) : 0;
  if (!ws || ws->dtype != GS_DT_FLOAT32 || (n_ws != 1 && n_ws != cols) ||
      (wz && gs_shape_numel(&wz->shape) != n_ws))
    return 0;
  int out_mul = sole_reader(u, m->nodes[cast].outputs[0]);
  if (out_mul < 0 || !is_op(&m->nodes[out_mul], "Mul") ||
      !other_input(&m->nodes[out_mul], m->nodes[cast].outputs[0]) ||
      strcmp(other_input(&m->nodes[out_mul], m->nodes[cast].outputs[0]),
             m->nodes[scale_mul].outputs[0]) != 0 ||
      sole_reader(u, m->nodes[scale_mul].outputs[0]) != out_mul)
    return 0;
  /* A following Add of a float32 vector of the columns is the op's bias. */
  const char *output = m->nodes[out_mul].outputs[0], *bias = "";
  int add = sole_reader(u, output);
  if (add >= 0 && is_op(&m->nodes[add], "Add")) {
    const char *b = other_input(&m->nodes[add], output);
    const gs_const_tensor *bt = b ? init_of(m, b) : NULL;
    if (bt && bt->dtype == GS_DT_FLOAT32 && bt->shape.rank == 1 && bt->shape.dims[0] == cols) {
      bias = b;
      output = m->nodes[add].outputs[0];
      dead[add] = true;
    }
  }
  new_node nn = {.op = "DynamicQuantizeMatMul", .domain = "com.microsoft", .n_in = 5,
                 .output = output,
                 .inputs = {dyn->inputs[0], n->inputs[1], w_scale, wz ? n->inputs[3] : "", bias}};
  if (replace_node(m, i, &nn) < 0)
    return GS_ENOMEM;
  dead[d] = dead[scale_mul] = dead[cast] = dead[out_mul] = true;
  return 1;
}

/* Drops dead nodes, and DequantizeLinear nodes nothing reads any more. */
static int sweep(gs_model *m, bool *dead) {
  uses u;
  int rc = count_uses(m, dead, &u);
  if (rc < 0)
    return rc;
  for (int i = 0; i < m->n_nodes; i++)
    if (!dead[i] && is_op(&m->nodes[i], "DequantizeLinear") &&
        gs_strmap_get(&u.readers, m->nodes[i].outputs[0]) < 0)
      dead[i] = true;
  uses_free(&u);
  int kept = 0;
  for (int i = 0; i < m->n_nodes; i++) {
    if (dead[i])
      gs__node_clear(&m->nodes[i]);
    else
      m->nodes[kept++] = m->nodes[i];
  }
  m->n_nodes = kept;
  return 0;
}

int gs__model_fuse_qdq(gs_model *m) {
  bool any = false;
  for (int i = 0; i < m->n_nodes && !any; i++)
    any = is_op(&m->nodes[i], "DequantizeLinear") || is_op(&m->nodes[i], "DynamicQuantizeLinear");
  if (!any)
    return 0;
  bool *dead = calloc((size_t)m->n_nodes + 1, 1);
  if (!dead)
    return gs_error(GS_ENOMEM, "out of memory rewriting the quantised model");
  int rc = 0, fused = 0;
  uses u;
  bool counted = false;
  for (int i = 0; rc >= 0 && i < m->n_nodes; i++) {
    if (dead[i])
      continue;
    /* The uses are counted again after each rewrite, which changes them. */
    if (!counted && (rc = count_uses(m, dead, &u)) < 0)
      break;
    counted = true;
    const gs_node *n = &m->nodes[i];
    if (is_op(n, "MatMul"))
      rc = fuse_matmul(m, &u, i, dead);
    else if (is_op(n, "MatMulInteger"))
      rc = fuse_dynamic_matmul(m, &u, i, dead);
    else if (is_op(n, "Gemm"))
      rc = fuse_gemm(m, &u, i, dead);
    else if (is_op(n, "Conv"))
      rc = fuse_conv(m, &u, i, dead);
    else if (is_op(n, "Add"))
      rc = fuse_add_mul(m, &u, i, dead, "QLinearAdd");
    else if (is_op(n, "Mul"))
      rc = fuse_add_mul(m, &u, i, dead, "QLinearMul");
    if (rc > 0) {
      fused++;
      uses_free(&u);
      counted = false;
    }
  }
  if (counted)
    uses_free(&u);
  if (rc >= 0 && fused)
    rc = sweep(m, dead);
  free(dead);
  return rc < 0 ? rc : 0;
}

/* quantize.c - static quantisation of a float model into a QDQ model (see
 * quantize.h). The new file is the old one with its graph rewritten: every
 * field this code does not change is copied as the bytes the file has
 * (the nodes it does not touch, the graph's inputs and outputs, subgraphs,
 * metadata), so that nothing the model says is lost in a round trip
 * through gpusrv's own model structure. */
#include "engine/quantize.h"

#include "base/error.h"
#include "engine/op.h"
#include "base/fileutil.h"
#include "base/strmap.h"
#include "engine/calibrate.h"
#include "engine/pb.h"
#include "engine/pb_write.h"
#include "hal/op/op_call.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tensor names this quantises are at most MAX_NAME bytes; names derived
 * from them fit NAME_CAP. */
#define MAX_NAME 1000
#define NAME_CAP 1100

/* ONNX field numbers (onnx.proto). */
enum { MODEL_GRAPH = 7 };
enum { GRAPH_NODE = 1, GRAPH_INITIALIZER = 5, GRAPH_INPUT = 11 };
enum { NODE_INPUT = 1, NODE_OUTPUT = 2, NODE_NAME = 3, NODE_OP_TYPE = 4, NODE_ATTRIBUTE = 5 };
enum { ATTR_NAME = 1, ATTR_I = 3, ATTR_TYPE = 20, ATTR_TYPE_INT = 2 };
enum { TENSOR_DIMS = 1, TENSOR_DATA_TYPE = 2, TENSOR_NAME = 8, TENSOR_RAW_DATA = 9,
       TENSOR_DATA_LOCATION = 14 };
enum { ONNX_FLOAT = 1, ONNX_UINT8 = 2, ONNX_INT8 = 3, ONNX_INT32 = 6 };

/* A Conv, MatMul or Gemm whose weights this quantises. */
typedef struct target {
  const gs_node *node;
  const gs_const_tensor *w, *b; /* b: NULL when there is none */
  int axis;                     /* of w's output channels: per-channel scales run along it */
  int x, y;                     /* tensors (indices into the list to calibrate); y -1: none */
} target;

typedef struct quantizer {
  const gs_quantize_options *o;
  gs_model *m;
  target *targets;
  int n_targets;
  const char **tensors; /* to calibrate (names owned by m) */
  int *input_of;        /* per tensor: the model input it is, or -1 */
  int n_tensors;
  gs_calib_range *ranges;
  bool *quantised; /* per tensor: measured as float32 and given Q/DQ */
  gs_strmap tensor_index, weight_of; /* name -> tensor; weight or bias name -> target */
  gs_quantize_report *report;
} quantizer;

/* ---- which nodes ------------------------------------------------------------------------- */

static const gs_const_tensor *float_init(const gs_model *m, const char *name, int rank) {
  int i = gs_strmap_get(&m->init_index, name);
  if (i < 0 || m->inits[i].dtype != GS_DT_FLOAT32 || !m->inits[i].data)
    return NULL;
  return rank < 0 || m->inits[i].shape.rank == rank ? &m->inits[i] : NULL;
}

static bool is_init(const gs_model *m, const char *name) {
  return gs_strmap_get(&m->init_index, name) >= 0;
}

/* How many nodes of the graph read `name`. */
static int readers(const gs_model *m, const char *name) {
  int count = 0;
  for (int i = 0; i < m->n_nodes; i++)
    for (int k = 0; k < m->nodes[i].n_in; k++)
      count += strcmp(m->nodes[i].inputs[k], name) == 0;
  return count;
}

static bool is_graph_output(const gs_model *m, const char *name) {
  for (int i = 0; i < m->n_outputs; i++)
    if (strcmp(m->outputs[i].name, name) == 0)
      return true;
  return false;
}

/* Node n as a target, when its weights are float initializers nothing else reads. */
static bool as_target(const gs_model *m, const gs_node *n, target *t) {
  if (n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
    return false;
  bool conv = strcmp(n->op_type, "Conv") == 0, matmul = strcmp(n->op_type, "MatMul") == 0;
  bool gemm = strcmp(n->op_type, "Gemm") == 0;
  if (!(conv || matmul || gemm) || n->n_in < 2 || n->n_out != 1 || is_init(m, n->inputs[0]))
    return false;
  *t = (target){.node = n, .w = float_init(m, n->inputs[1], conv ? -1 : 2)};
  if (!t->w || (conv && t->w->shape.rank < 3) || readers(m, n->inputs[1]) != 1)
    return false;
  if (gemm && (gs_attr_int(n, "transA", 0) || gs_attr_float(n, "alpha", 1) != 1.0f ||
               gs_attr_float(n, "beta", 1) != 1.0f))
    return false;
  t->axis = conv ? 0 : gemm && gs_attr_int(n, "transB", 0) ? 0 : 1;
  if (n->n_in > 2 && n->inputs[2][0] && !matmul) {
    t->b = float_init(m, n->inputs[2], 1);
    if (!t->b || t->b->shape.dims[0] != t->w->shape.dims[t->axis] ||
        readers(m, n->inputs[2]) != 1)
      return false;
  }
  return true;
}

/* The tensor's index in the list to calibrate, added if new. */
static int tensor_of(quantizer *q, const char *name) {
  int i = gs_strmap_get(&q->tensor_index, name);
  if (i >= 0)
    return i;
  if (q->n_tensors >= GS_CALIB_MAX_TENSORS || gs_strmap_put(&q->tensor_index, name, q->n_tensors) < 0)
    return -1;
  q->tensors[q->n_tensors] = name;
  q->input_of[q->n_tensors] = -1;
  for (int k = 0; k < q->m->n_inputs; k++)
    if (strcmp(q->m->inputs[k].name, name) == 0)
      q->input_of[q->n_tensors] = k;
  return q->n_tensors++;
}

static int find_targets(quantizer *q) {
  gs_model *m = q->m;
  q->targets = calloc((size_t)m->n_nodes + 1, sizeof *q->targets);
  q->tensors = calloc(GS_CALIB_MAX_TENSORS, sizeof *q->tensors);
  q->input_of = calloc(GS_CALIB_MAX_TENSORS, sizeof *q->input_of);
  if (!q->targets || !q->tensors || !q->input_of)
    return gs_error(GS_ENOMEM, "out of memory quantising");
  for (int i = 0; i < m->n_nodes; i++) {
    target t;
    if (!as_target(m, &m->nodes[i], &t))
      continue;
    for (int k = 0; k < t.node->n_in; k++)
      if (strlen(t.node->inputs[k]) > MAX_NAME || strlen(t.node->outputs[0]) > MAX_NAME)
        return gs_error(GS_ENOTSUP, "node %s: tensor names over %d bytes are not supported by "
                                    "quantize", t.node->name, MAX_NAME);
    t.x = tensor_of(q, t.node->inputs[0]);
    t.y = is_graph_output(m, t.node->outputs[0]) ? -1 : tensor_of(q, t.node->outputs[0]);
    if (t.x < 0)
      return gs_error(GS_ENOMEM, "out of memory quantising");
    if (gs_strmap_put(&q->weight_of, t.node->inputs[1], q->n_targets) < 0 ||
        (t.b && gs_strmap_put(&q->weight_of, t.node->inputs[2], q->n_targets) < 0))
      return gs_error(GS_ENOMEM, "out of memory quantising");
    q->targets[q->n_targets++] = t;
  }
  if (!q->n_targets)
    return gs_error(GS_EINVAL, "the model has no Conv, MatMul or Gemm with float32 weights "
                               "(initializers) after a computed tensor: nothing to quantise");
  return 0;
}

/* ---- what the new tensors hold ------------------------------------------------------------ */

/* uint8, asymmetric, over the calibrated range (which holds 0). */
static void activation_params(const gs_calib_range *r, float *scale, uint8_t *zero) {
  float span = r->hi - r->lo;
  *scale = span > 0 && isfinite(span) ? span / 255.0f : 1.0f;
  float z = nearbyintf(-r->lo / *scale);
  *zero = (uint8_t)(z < 0 ? 0 : z > 255 ? 255 : z);
}

/* The weight's int8 values (symmetric, [-127, 127]) and its scales: one,
 * or one per index of `axis` when per_channel; no scale below min_scales
 * (where given, one per channel). */
static void quantise_weights(const target *t, bool per_channel, const float *min_scales,
                             int8_t *q, float *scales, int64_t *n_scales) {
  const gs_shape *s = &t->w->shape;
  int64_t n = gs_shape_numel(s), chans = per_channel ? s->dims[t->axis] : 1, inner = 1;
  for (int d = t->axis + 1; per_channel && d < s->rank; d++)
    inner *= s->dims[d];
  const float *w = t->w->data;
  *n_scales = chans;
  for (int64_t c = 0; c < chans; c++)
    scales[c] = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t c = per_channel ? (i / inner) % chans : 0;
    float a = fabsf(w[i]);
    scales[c] = a > scales[c] ? a : scales[c];
  }
  for (int64_t c = 0; c < chans; c++) {
    scales[c] = scales[c] > 0 && scales[c] / 127.0f > 0 ? scales[c] / 127.0f : 1.0f; /* none 0 */
    if (min_scales && scales[c] < min_scales[c])
      scales[c] = min_scales[c];
  }
  for (int64_t i = 0; i < n; i++) {
    float v = nearbyintf(w[i] / scales[per_channel ? (i / inner) % chans : 0]);
    q[i] = (int8_t)(v != v ? 0 : v < -127 ? -127 : v > 127 ? 127 : v); /* NaN: 0 */
  }
}

/* ---- writing -------------------------------------------------------------------------------- */

static void write_tensor(gs_pbw *graph, const char *name, int onnx_type, const int64_t *dims,
                         int rank, const void *data, size_t bytes) {
  gs_pbw t = {0};
  for (int d = 0; d < rank; d++)
    gs_pbw_varint(&t, TENSOR_DIMS, (uint64_t)dims[d]);
  gs_pbw_varint(&t, TENSOR_DATA_TYPE, (uint64_t)onnx_type);
  gs_pbw_string(&t, TENSOR_NAME, name);
  gs_pbw_bytes(&t, TENSOR_RAW_DATA, data, bytes);
  gs_pbw_message(graph, GRAPH_INITIALIZER, &t);
  gs_pbw_free(&t);
}

/* A QuantizeLinear or DequantizeLinear node; axis < 0: per tensor. */
static void write_qdq_node(gs_pbw *nodes, const char *op, const char *in, const char *scale,
                           const char *zero, const char *out, int axis) {
  gs_pbw n = {0};
  gs_pbw_string(&n, NODE_INPUT, in);
  gs_pbw_string(&n, NODE_INPUT, scale);
  gs_pbw_string(&n, NODE_INPUT, zero);
  gs_pbw_string(&n, NODE_OUTPUT, out);
  char name[512];
  snprintf(name, sizeof name, "%s_%s", out, op);
  gs_pbw_string(&n, NODE_NAME, name);
  gs_pbw_string(&n, NODE_OP_TYPE, op);
  if (axis >= 0) {
    gs_pbw a = {0};
    gs_pbw_string(&a, ATTR_NAME, "axis");
    gs_pbw_varint(&a, ATTR_I, (uint64_t)axis);
    gs_pbw_varint(&a, ATTR_TYPE, ATTR_TYPE_INT);
    gs_pbw_message(&n, NODE_ATTRIBUTE, &a);
    gs_pbw_free(&a);
  }
  gs_pbw_message(nodes, GRAPH_NODE, &n);
  gs_pbw_free(&n);
}

/* The names of a quantised tensor's parts, built from the tensor's name
 * and suffixes of gpusrv's own ("/gsq/..."), which ONNX exporters do not
 * write. Every buffer is NAME_CAP bytes; find_targets refuses tensor names
 * too long for it (MAX_NAME, at the top). */
typedef struct qdq_names {
  char scale[NAME_CAP], zero[NAME_CAP], quantized[NAME_CAP], dequantized[NAME_CAP];
} qdq_names;

static void derived(char *out, size_t cap, const char *base, const char *suffix) {
  snprintf(out, cap, "%s/gsq/%s", base, suffix);
}

static void names_of(const char *base, qdq_names *n) {
  derived(n->scale, sizeof n->scale, base, "scale");
  derived(n->zero, sizeof n->zero, base, "zero_point");
  derived(n->quantized, sizeof n->quantized, base, "quantized");
  derived(n->dequantized, sizeof n->dequantized, base, "dequantized");
}

/* Q and DQ of activation tensor i: its consumers read "<name>/gsq/dequantized". */
static void write_activation_qdq(quantizer *q, int i, gs_pbw *nodes, gs_pbw *graph) {
  const char *name = q->tensors[i];
  float scale;
  uint8_t zero;
  activation_params(&q->ranges[i], &scale, &zero);
  qdq_names n;
  names_of(name, &n);
  write_tensor(graph, n.scale, ONNX_FLOAT, NULL, 0, &scale, sizeof scale);
  write_tensor(graph, n.zero, ONNX_UINT8, NULL, 0, &zero, 1);
  write_qdq_node(nodes, "QuantizeLinear", name, n.scale, n.zero, n.quantized, -1);
  write_qdq_node(nodes, "DequantizeLinear", n.quantized, n.scale, n.zero, n.dequantized, -1);
}

/* Target t's bias as int32 at x's scale (xs) times w's (ws, n_scales of
 * them), as the integer ops add it, with its DQ node. */
static int write_bias(const target *t, float xs, const float *ws, int64_t n_scales,
                      gs_pbw *nodes, gs_pbw *graph) {
  int64_t chans = t->w->shape.dims[t->axis];
  int32_t *b = malloc(sizeof *b * (size_t)(chans + 1)), *bz = calloc((size_t)chans + 1, sizeof *bz);
  float *bs = malloc(sizeof *bs * (size_t)(chans + 1));
  if (!b || !bz || !bs) {
    free(b), free(bz), free(bs);
    return gs_error(GS_ENOMEM, "out of memory quantising %s", t->node->inputs[2]);
  }
  const float *bf = t->b->data;
  for (int64_t c = 0; c < chans; c++) {
    bs[c] = xs * ws[n_scales > 1 ? c : 0];
    double v = nearbyint((double)bf[c] / bs[c]);
    b[c] = v != v ? 0 /* NaN */
                  : (int32_t)(v < -2147483647.0 ? -2147483647.0 : v > 2147483647.0 ? 2147483647.0 : v);
  }
  qdq_names n;
  names_of(t->node->inputs[2], &n);
  write_tensor(graph, n.quantized, ONNX_INT32, &chans, 1, b, sizeof *b * (size_t)chans);
  write_tensor(graph, n.scale, ONNX_FLOAT, &chans, 1, bs, sizeof *bs * (size_t)chans);
  write_tensor(graph, n.zero, ONNX_INT32, &chans, 1, bz, sizeof *bz * (size_t)chans);
  write_qdq_node(nodes, "DequantizeLinear", n.quantized, n.scale, n.zero, n.dequantized, 0);
  free(b), free(bz), free(bs);
  return 0;
}

/* The int8 weights of target t, with their DQ node, and its bias. */
static int write_weights(quantizer *q, const target *t, gs_pbw *nodes, gs_pbw *graph) {
  int64_t n = gs_shape_numel(&t->w->shape), chans = t->w->shape.dims[t->axis], n_scales;
  int8_t *w = malloc((size_t)n + 1), *wz = calloc((size_t)chans + 1, 1);
  float *ws = malloc(sizeof(float) * (size_t)(chans + 1));
  float *min_scales = t->b ? calloc((size_t)chans + 1, sizeof *min_scales) : NULL;
  if (!w || !wz || !ws || (t->b && !min_scales)) {
    free(w), free(wz), free(ws), free(min_scales);
    return gs_error(GS_ENOMEM, "out of memory quantising %s", t->node->inputs[1]);
  }
  /* A bias is stored as int32 at x's scale times w's: a channel whose
   * weights are all near 0 (a dead unit) would need a bias past int32.
   * Its weight scale is raised until the bias fits with room to spare. */
  float xs;
  uint8_t xz;
  activation_params(&q->ranges[t->x], &xs, &xz);
  for (int64_t c = 0; t->b && c < chans; c++) {
    float need = fabsf(((const float *)t->b->data)[c]) / (xs * 1073741824.0f);
    int64_t at = q->o->per_channel ? c : 0;
    min_scales[at] = need > min_scales[at] ? need : min_scales[at];
  }
  quantise_weights(t, q->o->per_channel, min_scales, w, ws, &n_scales);
  q->report->float_weight_bytes += (uint64_t)n * 4;
  q->report->int8_weight_bytes += (uint64_t)n;
  qdq_names names;
  names_of(t->node->inputs[1], &names);
  int axis = n_scales > 1 ? t->axis : -1;
  write_tensor(graph, names.quantized, ONNX_INT8, t->w->shape.dims, t->w->shape.rank, w,
               (size_t)n);
  write_tensor(graph, names.scale, ONNX_FLOAT, &n_scales, n_scales > 1, ws,
               sizeof(float) * (size_t)n_scales);
  write_tensor(graph, names.zero, ONNX_INT8, &n_scales, n_scales > 1, wz, (size_t)n_scales);
  write_qdq_node(nodes, "DequantizeLinear", names.quantized, names.scale, names.zero,
                 names.dequantized, axis);
  int rc = t->b ? write_bias(t, xs, ws, n_scales, nodes, graph) : 0;
  free(w), free(wz), free(ws), free(min_scales);
  return rc;
}

/* The name a node of the new graph reads for `name`: the dequantised
 * tensor where one was made, else name itself. */
static const char *reads(const quantizer *q, const char *name, char *buf, size_t cap) {
  int i = gs_strmap_get(&q->tensor_index, name);
  if ((i >= 0 && q->quantised[i]) || gs_strmap_get(&q->weight_of, name) >= 0) {
    derived(buf, cap, name, "dequantized");
    return buf;
  }
  return name;
}

/* Node `raw` (a NodeProto's bytes) copied with its inputs renamed where
 * they were quantised; its outputs collected into outs[] (pointing into
 * raw's bytes, not terminated: lengths in out_len). */
static int copy_node(const quantizer *q, gs_pb raw, gs_pbw *nodes, const uint8_t **outs,
                     size_t *out_len, int *n_outs, int max_outs) {
  gs_pbw n = {0};
  *n_outs = 0;
  uint32_t field;
  int wire, rc;
  for (;;) {
    const uint8_t *start = raw.p;
    if ((rc = gs_pb_next(&raw, &field, &wire)) <= 0)
      break;
    if ((field == NODE_INPUT || field == NODE_OUTPUT) && wire == GS_PB_LEN) {
      gs_pb s;
      if ((rc = gs_pb_sub(&raw, &s)) < 0)
        break;
      size_t len = (size_t)(s.end - s.p);
      char name[MAX_NAME + 1], buf[NAME_CAP];
      bool long_name = len > MAX_NAME; /* never one quantised: copied as it is */
      memcpy(name, s.p, long_name ? 0 : len);
      name[long_name ? 0 : len] = '\0';
      if (field == NODE_OUTPUT) {
        if (*n_outs >= max_outs) {
          rc = gs_error(GS_ENOTSUP, "a node of more than %d outputs", max_outs);
          break;
        }
        outs[*n_outs] = s.p;
        out_len[(*n_outs)++] = len;
      }
      if (long_name)
        gs_pbw_bytes(&n, field, s.p, len);
      else
        gs_pbw_string(&n, field, field == NODE_INPUT ? reads(q, name, buf, sizeof buf) : name);
      continue;
    }
    if ((rc = gs_pb_skip(&raw, wire)) < 0)
      break;
    gs_pbw_raw(&n, start, (size_t)(raw.p - start));
  }
  if (rc == 0)
    gs_pbw_message(nodes, GRAPH_NODE, &n);
  gs_pbw_free(&n);
  return rc;
}

/* The target whose node writes `out` (its first output), or -1. */
static int target_writing(const quantizer *q, const uint8_t *out, size_t len) {
  for (int t = 0; t < q->n_targets; t++) {
    const char *o = q->targets[t].node->outputs[0];
    if (strlen(o) == len && memcmp(o, out, len) == 0)
      return t;
  }
  return -1;
}

/* The name (field `name_field`) of the message in the field whose bytes
 * (tag included) are at [start, start + len); *external: a TensorProto's
 * data_location says EXTERNAL. */
static void message_name(const uint8_t *start, size_t len, uint32_t name_field, char *name,
                         size_t cap, bool *external) {
  gs_pb t = gs_pb_init(start, len), body;
  uint32_t f;
  int w;
  name[0] = '\0';
  *external = false;
  if (gs_pb_next(&t, &f, &w) != 1 || gs_pb_sub(&t, &body) != 0)
    return;
  while (gs_pb_next(&body, &f, &w) == 1) {
    gs_pb s;
    uint64_t v;
    if (f == name_field && w == GS_PB_LEN && gs_pb_sub(&body, &s) == 0) {
      size_t n = (size_t)(s.end - s.p);
      if (n < cap) {
        memcpy(name, s.p, n);
        name[n] = '\0';
      }
    } else if (name_field == TENSOR_NAME && f == TENSOR_DATA_LOCATION && w == GS_PB_VARINT &&
               gs_pb_varint(&body, &v) == 0) {
      *external = v == 1;
    } else if (gs_pb_skip(&body, w) < 0) {
      return;
    }
  }
}

/* The new GraphProto: `raw` with its nodes rewritten and Q/DQ nodes
 * between them, the quantised weights in place of the float ones. */
static int write_graph(quantizer *q, gs_pb raw, gs_pbw *graph) {
  gs_pbw nodes = {0}, inits = {0}, rest = {0};
  uint32_t field;
  int wire, rc;
  for (int i = 0; i < q->n_tensors; i++) /* the model's inputs, before any node reads them */
    if (q->input_of[i] >= 0 && q->quantised[i])
      write_activation_qdq(q, i, &nodes, &inits);
  for (;;) {
    const uint8_t *start = raw.p;
    if ((rc = gs_pb_next(&raw, &field, &wire)) <= 0)
      break;
    if (field == GRAPH_NODE && wire == GS_PB_LEN) {
      gs_pb node;
      if ((rc = gs_pb_sub(&raw, &node)) < 0)
        break;
      /* Which node this is: by its first output, which the loader named alike. */
      const uint8_t *outs[GS_OP_MAX_IO];
      size_t lens[GS_OP_MAX_IO];
      int n_outs;
      gs_pbw copied = {0};
      if ((rc = copy_node(q, node, &copied, outs, lens, &n_outs, GS_OP_MAX_IO)) < 0) {
        gs_pbw_free(&copied);
        break;
      }
      int t = n_outs ? target_writing(q, outs[0], lens[0]) : -1;
      if (t >= 0 && (rc = write_weights(q, &q->targets[t], &nodes, &inits)) < 0) {
        gs_pbw_free(&copied);
        break;
      }
      gs_pbw_raw(&nodes, copied.buf, copied.len);
      gs_pbw_free(&copied);
      for (int k = 0; k < n_outs; k++) {
        char name[MAX_NAME + 1];
        if (lens[k] >= sizeof name)
          continue; /* too long to be one find_targets took */
        memcpy(name, outs[k], lens[k]);
        name[lens[k]] = '\0';
        int i = gs_strmap_get(&q->tensor_index, name);
        if (i >= 0 && q->quantised[i])
          write_activation_qdq(q, i, &nodes, &inits);
      }
      continue;
    }
    if ((rc = gs_pb_skip(&raw, wire)) < 0)
      break;
    /* The float weights that were quantised go, from the initializers and
     * from the inputs where an old exporter listed them there too. */
    if (field == GRAPH_INITIALIZER || field == GRAPH_INPUT) {
      char name[1024];
      bool external = false;
      message_name(start, (size_t)(raw.p - start), field == GRAPH_INITIALIZER ? TENSOR_NAME : 1,
                   name, sizeof name, &external);
      bool quantised = gs_strmap_get(&q->weight_of, name) >= 0;
      if (external) { /* its relative location would not hold beside another output file */
        rc = gs_error(GS_ENOTSUP, "initializers in external data (%s) are not supported by "
                                  "quantize", name);
        break;
      }
      if (quantised)
        continue;
    }
    gs_pbw_raw(&rest, start, (size_t)(raw.p - start));
  }
  if (rc == 0) {
    gs_pbw_raw(graph, nodes.buf, nodes.len);
    gs_pbw_raw(graph, rest.buf, rest.len);
    gs_pbw_raw(graph, inits.buf, inits.len);
    if (nodes.failed || rest.failed || inits.failed || graph->failed)
      rc = gs_error(GS_ENOMEM, "out of memory writing the quantised model");
  }
  gs_pbw_free(&nodes);
  gs_pbw_free(&inits);
  gs_pbw_free(&rest);
  return rc;
}

/* The ModelProto: every field as the file has it but the graph. */
static int write_model(quantizer *q, const void *file, size_t len, gs_pbw *out) {
  gs_pb r = gs_pb_init(file, len);
  uint32_t field;
  int wire, rc;
  bool seen_graph = false;
  for (;;) {
    const uint8_t *start = r.p;
    if ((rc = gs_pb_next(&r, &field, &wire)) <= 0)
      break;
    if (field == MODEL_GRAPH && wire == GS_PB_LEN && !seen_graph) {
      gs_pb g;
      if ((rc = gs_pb_sub(&r, &g)) < 0)
        break;
      gs_pbw graph = {0};
      rc = write_graph(q, g, &graph);
      if (rc == 0)
        gs_pbw_message(out, MODEL_GRAPH, &graph);
      gs_pbw_free(&graph);
      if (rc < 0)
        break;
      seen_graph = true;
      continue;
    }
    if ((rc = gs_pb_skip(&r, wire)) < 0)
      break;
    gs_pbw_raw(out, start, (size_t)(r.p - start));
  }
  if (rc == 0 && out->failed)
    rc = gs_error(GS_ENOMEM, "out of memory writing the quantised model");
  return rc;
}

/* ---- the whole ---------------------------------------------------------------------------- */

/* The calibration data against the model's inputs, and the batch to run. */
static int check_calibration(const quantizer *q, gs_calib_job *job) {
  const gs_model *m = q->m;
  int64_t samples = -1;
  for (int i = 0; i < m->n_inputs; i++) {
    const gs_npy *x = &q->o->calibration[i];
    const gs_value_info *v = &m->inputs[i];
    if (x->dtype != v->dtype)
      return gs_error(GS_EINVAL, "calibration data for input %s: %s, the model takes %s",
                      v->name, gs_dtype_name(x->dtype), gs_dtype_name(v->dtype));
    if (x->shape.rank < 1 || (v->rank >= 0 && x->shape.rank != v->rank))
      return gs_error(GS_EINVAL, "calibration data for input %s has rank %d, the model takes %d "
                                 "(samples along the first dimension)",
                      v->name, x->shape.rank, v->rank);
    if (samples >= 0 && x->shape.dims[0] != samples)
      return gs_error(GS_EINVAL, "the calibration inputs hold different numbers of samples");
    samples = x->shape.dims[0];
    if (v->rank > 0 && v->dims[0] > 0) {
      job->fixed_batch = true;
      job->batch = v->dims[0];
    }
  }
  if (samples < 1 || (job->fixed_batch && samples < job->batch))
    return gs_error(GS_EINVAL, "the calibration data holds %lld samples; the model takes batches "
                               "of %lld", (long long)samples, (long long)(job->batch ? job->batch : 1));
  if (!job->fixed_batch)
    job->batch = samples < 32 ? samples : 32;
  q->report->samples = samples;
  return 0;
}

int gs_model_quantize(const char *path, const char *out_path, const gs_quantize_options *o,
                      gs_quantize_report *report) {
  memset(report, 0, sizeof *report);
  quantizer q = {.o = o, .report = report};
  gs_strmap_init(&q.tensor_index);
  gs_strmap_init(&q.weight_of);
  void *file = NULL;
  size_t len = 0;
  gs_pbw out = {0};
  int rc = gs_read_whole_file(path, &file, &len);
  if (rc == 0)
    rc = gs_model_load(path, &q.m);
  if (rc == 0)
    rc = find_targets(&q);
  gs_calib_job job = {.device = o->device, .threads = o->threads, .method = o->method};
  if (rc == 0)
    rc = check_calibration(&q, &job);
  if (rc == 0) {
    q.ranges = calloc((size_t)q.n_tensors + 1, sizeof *q.ranges);
    q.quantised = calloc((size_t)q.n_tensors + 1, sizeof *q.quantised);
    if (!q.ranges || !q.quantised)
      rc = gs_error(GS_ENOMEM, "out of memory quantising");
  }
  job.tensors = q.tensors;
  job.input_of = q.input_of;
  job.n_tensors = q.n_tensors;
  job.calibration = o->calibration;
  if (rc == 0 && q.n_tensors)
    rc = gs__calibrate(q.m, &job, q.ranges, &report->runs);
  for (int i = 0; rc == 0 && i < q.n_tensors; i++)
    q.quantised[i] = true; /* every tensor calibrated is float32 (a Conv's, a MatMul's, a Gemm's) */
  report->nodes = q.n_targets;
  report->tensors = q.n_tensors;
  if (rc == 0)
    rc = write_model(&q, file, len, &out);
  if (rc == 0) {
    FILE *f = fopen(out_path, "wb");
    if (!f)
      rc = gs_error(GS_EIO, "cannot create %s", out_path);
    else {
      bool written = fwrite(out.buf, 1, out.len, f) == out.len;
      if (fclose(f) != 0 || !written) {
        remove(out_path);
        rc = gs_error(GS_EIO, "cannot write %s", out_path);
      }
    }
  }
  gs_pbw_free(&out);
  free(file);
  free(q.targets);
  free(q.tensors);
  free(q.input_of);
  free(q.ranges);
  free(q.quantised);
  gs_strmap_free(&q.tensor_index);
  gs_strmap_free(&q.weight_of);
  gs_model_free(q.m);
  return rc;
}

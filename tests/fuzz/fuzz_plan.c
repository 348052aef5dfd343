/* fuzz_plan.c - structure-aware libFuzzer target for the loader and the
 * planner. The fuzzer's bytes are read as choices that build a valid ONNX
 * file: graph inputs and initializers of small shapes, then nodes whose op
 * types come from the engine's own registry, with arities anywhere in each
 * op's range, inputs wired to earlier values (or left out), and attributes
 * from each op's own list with values of any attribute type, subgraphs
 * among them (bodies for If, Loop and Scan, which read outer values, two
 * levels deep at most). Each model is
 * loaded, planned on the CPU (with the inputs' values, so that shape inputs
 * are known) and run. Any outcome but a crash, a leak or a sanitizer report
 * is fine: most models are refused with a message, and that is the point.
 * Run by ctest for a bounded time in the sanitizer build, beside fuzz_onnx. */
#include "engine/engine.h"
#include "engine/op.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* ---- the choices --------------------------------------------------------------- */

typedef struct choices {
  const uint8_t *p;
  size_t left;
} choices;

/* The next byte, 0 once the input is used up (so every input builds a model). */
static unsigned pick(choices *c) {
  if (!c->left)
    return 0;
  c->left--;
  return *c->p++;
}

static unsigned pick_below(choices *c, unsigned n) { return n ? pick(c) % n : 0; }

/* ---- a protobuf writer, just enough for ModelProto --------------------------------- */

typedef struct pbuf {
  uint8_t *d;
  size_t len, cap;
  bool failed;
} pbuf;

static void put(pbuf *b, const void *src, size_t n) {
  if (b->failed || n == 0)
    return;
  if (b->len + n > b->cap) {
    size_t cap = (b->cap ? b->cap * 2 : 256) + n;
    uint8_t *d = realloc(b->d, cap);
    if (!d) {
      b->failed = true;
      return;
    }
    b->d = d;
    b->cap = cap;
  }
  memcpy(b->d + b->len, src, n);
  b->len += n;
}

static void varint(pbuf *b, uint64_t v) {
  uint8_t tmp[10];
  int n = 0;
  do {
    tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  put(b, tmp, (size_t)n);
}

static void key(pbuf *b, unsigned field, unsigned wire) { varint(b, (uint64_t)field << 3 | wire); }
static void field_varint(pbuf *b, unsigned f, uint64_t v) { key(b, f, 0), varint(b, v); }
static void field_bytes(pbuf *b, unsigned f, const void *d, size_t n) {
  key(b, f, 2), varint(b, n), put(b, d, n);
}
static void field_str(pbuf *b, unsigned f, const char *s) { field_bytes(b, f, s, strlen(s)); }
static void field_msg(pbuf *b, unsigned f, pbuf *m) {
  field_bytes(b, f, m->d, m->len);
  b->failed |= m->failed;
  free(m->d);
  *m = (pbuf){0};
}
static void field_float(pbuf *b, unsigned f, float v) { key(b, f, 5), put(b, &v, 4); }

/* ---- tensors ---------------------------------------------------------------------------- */

/* ONNX element types and their sizes: the ones gpusrv takes, and two it refuses. */
static const struct {
  int onnx;
  size_t size;
} types[] = {{1, 4}, {7, 8}, {6, 4}, {9, 1}, {10, 2}, {2, 1}, {11, 8}, {3, 1},
             {5, 2}, {12, 4}, {16, 2}, {17, 1}};
#define N_TYPES (sizeof types / sizeof types[0])
#define MAX_RANK 4
#define MAX_VALUES 24

typedef struct tensor_type {
  int type; /* index into types */
  int rank;
  int64_t dims[MAX_RANK];
} tensor_type;

static void pick_type(choices *c, tensor_type *t) {
  /* Mostly float32 and int64, the types shapes and data come in. */
  unsigned r = pick(c);
  t->type = r < 128 ? 0 : r < 200 ? 1 : (int)(r % N_TYPES);
  t->rank = (int)pick_below(c, MAX_RANK + 1);
  for (int i = 0; i < t->rank; i++)
    t->dims[i] = pick_below(c, 16) == 0 ? 0 : 1 + pick_below(c, 4);
}

static int64_t numel(const tensor_type *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++)
    n *= t->dims[i];
  return n;
}

/* Element bytes of small values: integers in [-4, 8], floats in [-2, 2]. */
static void fill_values(choices *c, const tensor_type *t, uint8_t *out, int64_t n) {
  size_t es = types[t->type].size;
  for (int64_t i = 0; i < n; i++) {
    int v = (int)pick_below(c, 13) - 4;
    uint8_t *p = out + (size_t)i * es;
    switch (types[t->type].onnx) {
    case 1: { float f = (float)v / 2; memcpy(p, &f, 4); break; }
    case 11: { double f = (double)v / 2; memcpy(p, &f, 8); break; }
    case 7: { int64_t x = v; memcpy(p, &x, 8); break; }
    case 6: case 12: { int32_t x = v; memcpy(p, &x, 4); break; }
    case 10: { uint16_t h = (uint16_t)(v == 0 ? 0 : 0x3c00 + (v > 0 ? 0 : 0x8000)); memcpy(p, &h, 2); break; }
    default: memset(p, (uint8_t)v, es); break;
    }
  }
}

/* TensorProto with raw data (field numbers from onnx.proto). */
static void write_tensor(choices *c, pbuf *b, const tensor_type *t, const char *name) {
  for (int i = 0; i < t->rank; i++)
    field_varint(b, 1, (uint64_t)t->dims[i]);
  field_varint(b, 2, (uint64_t)types[t->type].onnx);
  int64_t n = numel(t);
  if (n > MAX_VALUES)
    n = MAX_VALUES; /* too few values: the loader must say so */
  uint8_t raw[MAX_VALUES * 8];
  fill_values(c, t, raw, n);
  if (name)
    field_str(b, 8, name);
  field_bytes(b, 9, raw, (size_t)n * types[t->type].size);
}

/* ValueInfoProto: a name and a tensor type with its shape. */
static void write_value_info(pbuf *b, const char *name, const tensor_type *t) {
  pbuf shape = {0}, tt = {0}, type = {0};
  for (int i = 0; i < t->rank; i++) {
    pbuf dim = {0};
    field_varint(&dim, 1, (uint64_t)t->dims[i]);
    field_msg(&shape, 1, &dim);
  }
  field_varint(&tt, 1, (uint64_t)types[t->type].onnx);
  field_msg(&tt, 2, &shape);
  field_msg(&type, 1, &tt);
  field_str(b, 1, name);
  field_msg(b, 2, &type);
}

/* ---- the values a graph can read -------------------------------------------------------- */

#define MAX_VALUES_IN_GRAPH 64
#define MAX_DEPTH 2 /* subgraphs inside subgraphs, no deeper */

typedef struct graph_state {
  char names[MAX_VALUES_IN_GRAPH][16];
  int n;
  int depth; /* 0: the main graph */
} graph_state;

/* A new value's name; each level its own prefix, as ONNX wants names unique
 * across a graph and the subgraphs that see it. */
static const char *new_value(graph_state *g) {
  if (g->n >= MAX_VALUES_IN_GRAPH)
    return NULL;
  static const char *const prefix[MAX_DEPTH + 1] = {"", "a", "b"};
  snprintf(g->names[g->n], sizeof g->names[0], "%sv%d", prefix[g->depth], g->n);
  return g->names[g->n++];
}

/* What a node's attributes can draw on: the ops, and the values in scope
 * (the first `visible` of scope's: those made before the node). */
typedef struct fuzz_ctx {
  const gs_op_def **ops;
  int n_ops;
  const gs_op_def *control[3]; /* If, Loop and Scan, picked more often than the rest */
  const graph_state *scope;
  int visible;
  int body_outputs; /* what the node's op wants of a subgraph's outputs */
} fuzz_ctx;

static void write_graph_body(choices *c, const fuzz_ctx *x, pbuf *graph, graph_state *g);

/* ---- attributes -------------------------------------------------------------------------- */

static const char *const words[] = {
    "constant", "reflect", "edge", "wrap", "linear", "nearest", "cubic", "half_pixel",
    "align_corners", "asymmetric", "pytorch_half_pixel", "tf_crop_and_resize", "none", "sum",
    "mean", "add", "mul", "max", "min", "LEFT", "RIGHT", "DCR", "CRD", "NOTSET", "SAME_UPPER",
    "SAME_LOWER", "VALID", "tanh", "round_prefer_floor", "floor", "ceil", "stretch",
    "not_larger", "", "garbage"};

/* GraphProto of a subgraph: a few inputs of any type (mostly none for an
 * If's branch), nodes that read them and the outer scope's values, and
 * outputs with types but no shapes. */
static void write_subgraph(choices *c, const fuzz_ctx *x, pbuf *b, bool branch) {
  graph_state *sub = malloc(sizeof *sub);
  if (!sub) {
    b->failed = true;
    return;
  }
  *sub = *x->scope; /* the outer values made before the node stay readable */
  sub->n = x->visible;
  sub->depth++;
  int n_in = branch && pick_below(c, 8) ? 0 : (int)pick_below(c, 4);
  for (int i = 0; i < n_in; i++) {
    tensor_type t;
    pick_type(c, &t);
    const char *name = new_value(sub);
    pbuf vi = {0};
    write_value_info(&vi, name ? name : "v0", &t);
    field_msg(b, 11, &vi);
  }
  write_graph_body(c, x, b, sub);
  free(sub);
}

/* The attributes that hold a graph (If's branches, Loop's and Scan's body). */
static bool holds_graph(const char *name) {
  return !strcmp(name, "then_branch") || !strcmp(name, "else_branch") || !strcmp(name, "body");
}

/* AttributeProto of one of the types ONNX has (AttributeType numbers); a
 * graph where the op wants one, mostly, so that bodies get planned. */
static void write_attribute(choices *c, const fuzz_ctx *x, pbuf *b, const char *name) {
  field_str(b, 1, name);
  bool deeper = x->scope->depth < MAX_DEPTH;
  /* (7, not 0, the rare choice: a used-up input reads as zeros) */
  unsigned kind = deeper && holds_graph(name) && pick_below(c, 8) != 7 ? 6 : pick_below(c, deeper ? 7 : 6);
  switch (kind) {
  case 0:
    field_varint(b, 3, (uint64_t)(int64_t)((int)pick_below(c, 12) - 3));
    field_varint(b, 20, 2);
    break;
  case 1:
    field_float(b, 2, (float)((int)pick_below(c, 16) - 4) / 4);
    field_varint(b, 20, 1);
    break;
  case 2: {
    unsigned n = pick_below(c, 9);
    for (unsigned i = 0; i < n; i++)
      field_varint(b, 8, (uint64_t)(int64_t)((int)pick_below(c, 10) - 2));
    field_varint(b, 20, 7);
    break;
  }
  case 3:
    field_str(b, 4, words[pick_below(c, sizeof words / sizeof words[0])]);
    field_varint(b, 20, 3);
    break;
  case 4: {
    unsigned n = pick_below(c, 5);
    for (unsigned i = 0; i < n; i++)
      field_float(b, 7, (float)pick_below(c, 8) / 2);
    field_varint(b, 20, 6);
    break;
  }
  case 5: {
    tensor_type t;
    pick_type(c, &t);
    pbuf tensor = {0};
    write_tensor(c, &tensor, &t, NULL);
    field_msg(b, 5, &tensor);
    field_varint(b, 20, 4);
    break;
  }
  default: {
    pbuf graph = {0};
    write_subgraph(c, x, &graph, strstr(name, "branch") != NULL);
    field_msg(b, 6, &graph);
    field_varint(b, 20, 5);
    break;
  }
  }
}

/* ---- the model ------------------------------------------------------------------------------ */

static void write_node(choices *c, const fuzz_ctx *outer, pbuf *graph, graph_state *g,
                       const gs_op_def *op, int index) {
  pbuf node = {0};
  int span = op->max_in - op->min_in + 1;
  int n_in = op->min_in + (int)pick_below(c, (unsigned)(span < 5 ? span : 5));
  for (int i = 0; i < n_in; i++) {
    bool omit = i >= op->min_in && pick_below(c, 4) == 0; /* an optional input left out */
    field_str(&node, 1, omit || g->n == 0 ? "" : g->names[pick_below(c, (unsigned)g->n)]);
  }
  int out_span = op->max_out - op->min_out + 1;
  int n_out = op->min_out + (int)pick_below(c, (unsigned)(out_span < 3 ? out_span : 3));
  fuzz_ctx x = *outer;
  x.scope = g;
  x.visible = g->n; /* subgraphs see the values before the node's outputs */
  /* An If's branches give the node's outputs; a Loop's body its condition first. */
  x.body_outputs = n_out + (op == outer->control[1]);
  for (int i = 0; i < n_out; i++) {
    const char *name = new_value(g);
    field_str(&node, 2, name ? name : "v0");
  }
  char node_name[32];
  snprintf(node_name, sizeof node_name, "n%d_%d", g->depth, index);
  field_str(&node, 3, node_name);
  field_str(&node, 4, op->name);
  if (op->domain)
    field_str(&node, 7, op->domain);
  for (const char *const *a = op->attrs; a && *a; a++)
    if (holds_graph(*a) ? pick_below(c, 8) != 7 : pick_below(c, 3) == 0) {
      pbuf attr = {0};
      write_attribute(c, &x, &attr, *a);
      field_msg(&node, 5, &attr);
    }
  field_msg(graph, 1, &node);
}

/* Nodes, then the graph's name and outputs: the last value, a second one
 * sometimes, each with a type and no shape. */
static void write_graph_body(choices *c, const fuzz_ctx *x, pbuf *graph, graph_state *g) {
  int n_nodes = 1 + (int)pick_below(c, g->depth ? 3 : 6);
  for (int i = 0; i < n_nodes; i++) {
    const gs_op_def *op = x->ops[pick_below(c, (unsigned)x->n_ops)];
    if (pick_below(c, 8) == 0 && x->control[0] && g->depth < MAX_DEPTH)
      op = x->control[pick_below(c, 3)];
    write_node(c, x, graph, g, op, i);
  }
  field_str(graph, 2, "fuzz");
  int n_out = 1 + (g->n > 1 && pick_below(c, 3) == 0);
  if (g->depth && pick_below(c, 8) != 7)
    n_out = x->body_outputs;
  for (int i = 0; i < n_out && i < g->n; i++) {
    pbuf vi = {0}, tt = {0}, type = {0};
    field_varint(&tt, 1, (uint64_t)types[pick_below(c, g->depth ? 3 : 2)].onnx);
    field_msg(&type, 1, &tt);
    field_str(&vi, 1, g->names[g->n - 1 - i]);
    field_msg(&vi, 2, &type);
    field_msg(graph, 12, &vi);
  }
}

/* Builds ONNX bytes from the choices into out; the inputs' types in in[]. */
static void build_model(choices *c, const gs_op_def **ops, int n_ops, pbuf *out,
                        tensor_type *in, int *n_in) {
  pbuf graph = {0};
  graph_state g = {.n = 0};
  fuzz_ctx x = {.ops = ops, .n_ops = n_ops, .scope = &g};
  for (int i = 0; i < n_ops; i++) {
    const char *name = ops[i]->name;
    int k = !strcmp(name, "If") ? 0 : !strcmp(name, "Loop") ? 1 : !strcmp(name, "Scan") ? 2 : -1;
    if (k >= 0)
      x.control[k] = ops[i];
  }
  if (!x.control[1] || !x.control[2])
    x.control[0] = NULL; /* all three, or the plain pick */
  *n_in = 1 + (int)pick_below(c, 3);
  for (int i = 0; i < *n_in; i++)
    pick_type(c, &in[i]);
  int n_inits = (int)pick_below(c, 4);
  for (int i = 0; i < n_inits; i++) {
    tensor_type t;
    pick_type(c, &t);
    pbuf tensor = {0};
    const char *name = new_value(&g);
    write_tensor(c, &tensor, &t, name);
    field_msg(&graph, 5, &tensor);
  }
  char in_names[3][16];
  for (int i = 0; i < *n_in; i++) {
    snprintf(in_names[i], sizeof in_names[i], "%s", new_value(&g));
    pbuf vi = {0};
    write_value_info(&vi, in_names[i], &in[i]);
    field_msg(&graph, 11, &vi);
  }
  write_graph_body(c, &x, &graph, &g);
  field_varint(out, 1, 8); /* ir_version */
  pbuf opset = {0};
  field_str(&opset, 1, "");
  field_varint(&opset, 2, 13 + pick_below(c, 10));
  field_msg(out, 8, &opset);
  field_msg(out, 7, &graph);
}

/* ---- the target -------------------------------------------------------------------------------- */

static const gs_op_def *all_ops[256];
static int n_all_ops;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setenv("GPUSRV_BACKENDS", "cpu", 1); /* no plugins: the planner and the CPU's kernels */
  if (gs_hal_init() < 0 || gs_engine_init() < 0) {
    fprintf(stderr, "fuzz_plan: no CPU device\n");
    abort();
  }
  n_all_ops = gs_op_list(all_ops, 256);
  if (n_all_ops > 256)
    n_all_ops = 256;
  return 0;
}

static void plan_and_run(gs_model *m, choices *c) {
  gs_shape shapes[3];
  void *inputs[3] = {0}, *outputs[8] = {0};
  if (m->n_inputs > 3 || m->n_outputs > 8)
    return;
  for (int i = 0; i < m->n_inputs; i++) {
    const gs_value_info *v = &m->inputs[i];
    shapes[i] = (gs_shape){.rank = v->rank < 0 ? 0 : v->rank};
    for (int d = 0; d < shapes[i].rank; d++)
      shapes[i].dims[d] = v->dims[d] < 0 ? 1 : v->dims[d];
    int64_t count = gs_shape_numel(&shapes[i]);
    size_t es = gs_dtype_size(v->dtype), bytes = (size_t)count * es;
    if (!(inputs[i] = calloc(1, bytes ? bytes : 1)))
      goto done;
    /* Small values (0 to 4) of the input's type: sizes the model computes
     * from them stay small, as a hostile model's own constants are bounded
     * by the loader. */
    for (int64_t k = 0; k < count; k++) {
      uint8_t *at = (uint8_t *)inputs[i] + (size_t)k * es;
      int small = (int)pick_below(c, 5);
      if (v->dtype == GS_DT_FLOAT32) {
        float f = (float)small;
        memcpy(at, &f, 4);
      } else if (v->dtype == GS_DT_FLOAT64) {
        double d = small;
        memcpy(at, &d, 8);
      } else if (gs_dtype_is_float(v->dtype)) { /* 16-bit floats: 0 or 1 */
        uint16_t h = small ? (v->dtype == GS_DT_FLOAT16 ? 0x3c00 : 0x3f80) : 0;
        memcpy(at, &h, 2);
      } else {
        at[0] = (uint8_t)small; /* little-endian integers and bools */
      }
    }
  }
  /* A Loop whose condition stays true is a valid model that never ends:
   * bounded low here, where its runs are many (and nested). */
  gs_plan_options opt = {.device = gs_hal_device(0), .input_values = (const void *const *)inputs,
                         .loop_limit = 64};
  gs_plan *plan = NULL;
  if (gs_plan_create(m, shapes, &opt, &plan) < 0)
    goto done;
  /* Sized by the run: plans made in stages (NonZero, NonMaxSuppression) run too. */
  gs_plan_value_info info[8]; /* at most 8 outputs: checked above */
  gs_plan_run_alloc(plan, (const void *const *)inputs, outputs, info);
  gs_plan_destroy(plan);
done:
  for (int i = 0; i < 3; i++)
    free(inputs[i]);
  for (int i = 0; i < 8; i++)
    free(outputs[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  choices c = {data, size};
  pbuf model = {0};
  tensor_type in[3];
  int n_in;
  build_model(&c, all_ops, n_all_ops, &model, in, &n_in);
  const char *dump = getenv("FUZZ_PLAN_DUMP"); /* the model as ONNX, to look at a finding */
  FILE *f = dump && !model.failed ? fopen(dump, "wb") : NULL;
  if (f) {
    fwrite(model.d, 1, model.len, f);
    fclose(f);
  }
  gs_model *m = NULL;
  if (!model.failed && gs_model_load_bytes(model.d, model.len, NULL, &m) == 0) {
    plan_and_run(m, &c);
    gs_model_free(m);
  }
  free(model.d);
  return 0;
}

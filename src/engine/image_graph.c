/* image_graph.c - a recipe's last steps as a graph of ONNX ops (image.h),
 * built in memory: what gs_model_free frees, every string and array its
 * own. */
#include "engine/image.h"

#include "base/error.h"
#include "engine/model.h"
#include "engine/model_compose.h"
#include "hal/hal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* onnx.c */
int gs__model_check(gs_model *m, bool check_support);

enum { ONNX_FLOAT = 1, ONNX_UINT8 = 2 };

static char **names(int n, const char *const *list) {
  char **out = calloc((size_t)n + 1, sizeof *out);
  for (int i = 0; out && i < n; i++)
    if (!(out[i] = strdup(list[i]))) {
      for (int j = 0; j < i; j++)
        free(out[j]);
      free(out);
      return NULL;
    }
  return out;
}

/* Node `at` of m: op(inputs) -> output, with one integer attribute or a
 * list of them (name NULL: none). */
static int add_node(gs_model *m, const char *op, int n_in, const char *const *inputs,
                    const char *output, const char *attr, int n_ints, const int64_t *ints) {
  gs_node *n = &m->nodes[m->n_nodes++];
  char name[64];
  snprintf(name, sizeof name, "preprocess_%s", op);
  n->name = strdup(name);
  n->op_type = strdup(op);
  n->domain = strdup("");
  n->inputs = names(n_in, inputs);
  n->outputs = names(1, &output);
  n->n_in = n_in;
  n->n_out = 1;
  n->opset = m->opset;
  if (!n->name || !n->op_type || !n->domain || !n->inputs || !n->outputs)
    return GS_ENOMEM;
  if (!attr)
    return GS_OK;
  if (!(n->attrs = calloc(1, sizeof *n->attrs)))
    return GS_ENOMEM;
  n->n_attrs = 1;
  gs_attr *a = &n->attrs[0];
  if (!(a->name = strdup(attr)))
    return GS_ENOMEM;
  if (n_ints == 1) {
    a->type = GS_ATTR_INT;
    a->i = ints[0];
    return GS_OK;
  }
  a->type = GS_ATTR_INTS;
  a->n = n_ints;
  if (!(a->ints = malloc((size_t)n_ints * sizeof *a->ints)))
    return GS_ENOMEM;
  memcpy(a->ints, ints, (size_t)n_ints * sizeof *a->ints);
  return GS_OK;
}

/* A float32 constant of three values, one a channel. */
static int add_channels(gs_model *m, const char *name, const float v[3], bool nchw) {
  int at = m->n_inits++; /* counted first: gs_model_free frees what was made */
  gs_const_tensor *t = &m->inits[at];
  t->name = strdup(name);
  t->dtype = GS_DT_FLOAT32;
  t->shape = nchw ? (gs_shape){4, {1, 3, 1, 1}} : (gs_shape){1, {3}};
  t->bytes = 3 * sizeof(float);
  t->data = malloc(t->bytes);
  if (!t->name || !t->data)
    return GS_ENOMEM;
  memcpy(t->data, v, t->bytes);
  return gs_strmap_put(&m->init_index, t->name, at) < 0 ? GS_ENOMEM : GS_OK;
}

static int declare(gs_value_info *v, const char *name, gs_dtype dt, int onnx_type,
                   const int64_t dims[4]) {
  v->name = strdup(name);
  v->dtype = dt;
  v->onnx_type = onnx_type;
  v->rank = 4;
  memcpy(v->dims, dims, 4 * sizeof *dims);
  return v->name ? GS_OK : GS_ENOMEM;
}

static int build(const gs_prep *p, int h, int w, bool nchw, int64_t opset, gs_model *m) {
  m->opset = opset;
  m->ir_version = 8;
  m->path = strdup("preprocess");
  m->graph_name = strdup("preprocess");
  m->producer = strdup("gpusrv");
  m->nodes = calloc(4, sizeof *m->nodes);
  m->inits = calloc(2, sizeof *m->inits);
  m->inputs = calloc(1, sizeof *m->inputs);
  m->outputs = calloc(1, sizeof *m->outputs);
  if (!m->path || !m->graph_name || !m->producer || !m->nodes || !m->inits || !m->inputs ||
      !m->outputs)
    return GS_ENOMEM;
  float scale[3], shift[3]; /* v * scale + shift, as gs_prep_image computes on the CPU */
  for (int c = 0; c < 3; c++) {
    double mean = p->mean[p->n_mean == 3 ? c : 0], std = p->std[p->n_std == 3 ? c : 0];
    scale[c] = (float)(p->scale / std);
    shift[c] = (float)(-mean / std);
  }
  const int64_t in_dims[4] = {-1, h, w, 3};
  const int64_t out_dims[4] = {-1, nchw ? 3 : h, nchw ? h : w, nchw ? w : 3};
  const int64_t to_float = ONNX_FLOAT, perm[4] = {0, 3, 1, 2};
  int rc = declare(&m->inputs[0], "pixels", GS_DT_UINT8, ONNX_UINT8, in_dims);
  m->n_inputs = 1;
  if (rc == 0)
    rc = declare(&m->outputs[0], "normalised", GS_DT_FLOAT32, ONNX_FLOAT, out_dims);
  m->n_outputs = 1;
  if (rc == 0)
    rc = add_channels(m, "scale", scale, nchw);
  if (rc == 0)
    rc = add_channels(m, "shift", shift, nchw);
  if (rc == 0)
    rc = add_node(m, "Cast", 1, (const char *[]){"pixels"}, "as_float", "to", 1, &to_float);
  if (rc == 0 && nchw)
    rc = add_node(m, "Transpose", 1, (const char *[]){"as_float"}, "planar", "perm", 4, perm);
  if (rc == 0)
    rc = add_node(m, "Mul", 2, (const char *[]){nchw ? "planar" : "as_float", "scale"}, "scaled",
                  NULL, 0, NULL);
  if (rc == 0)
    rc = add_node(m, "Add", 2, (const char *[]){"scaled", "shift"}, "normalised", NULL, 0, NULL);
  return rc;
}

int gs_prep_graph(const gs_prep *p, int h, int w, bool nchw, int64_t opset, gs_model **out) {
  gs_model *m = calloc(1, sizeof *m);
  if (!m)
    return gs_error(GS_ENOMEM, "out of memory for the preprocessing graph");
  gs_strmap_init(&m->init_index);
  int rc = build(p, h, w, nchw, opset, m);
  if (rc < 0)
    rc = gs_error(GS_ENOMEM, "out of memory for the preprocessing graph");
  else
    rc = gs__model_check(m, true);
  if (rc < 0) {
    gs_model_free(m);
    return rc;
  }
  *out = m;
  return GS_OK;
}

/* The names that wire the composition, copied: they live in the model
 * that gs_model_compose takes apart. */
typedef struct wiring {
  int n;
  char *names[2 * GS_PREP_MAX_VALUES]; /* the model's inputs, then its outputs */
} wiring;

static void wiring_free(wiring *w) {
  for (int i = 0; i < w->n; i++)
    free(w->names[i]);
}

/* The name of the recipe's output inside the whole. */
static const char *const normalised = "gs_normalised";

int gs_prep_can_compose(const gs_model *model) {
  if (model->n_inputs > GS_PREP_MAX_VALUES || model->n_outputs > GS_PREP_MAX_VALUES)
    return gs_error(GS_ENOTSUP, "the recipe joins models of at most %d inputs and outputs; "
                                "this one has %d and %d", GS_PREP_MAX_VALUES, model->n_inputs,
                    model->n_outputs);
  for (int i = 0; i < model->n_nodes; i++)
    for (int a = 0; a < model->nodes[i].n_attrs; a++)
      if (model->nodes[i].attrs[a].type == GS_ATTR_GRAPH)
        return gs_error(GS_ENOTSUP, "the recipe cannot join a model with If, Loop or Scan yet "
                                    "(node %s, %s)", model->nodes[i].name, model->nodes[i].op_type);
  for (int i = 0; i < model->n_inputs + model->n_outputs; i++) {
    const gs_value_info *v = i < model->n_inputs ? &model->inputs[i]
                                                 : &model->outputs[i - model->n_inputs];
    if (strcmp(v->name, normalised) == 0)
      return gs_error(GS_ENOTSUP, "the recipe cannot join a model with a tensor named %s",
                      normalised);
  }
  return GS_OK;
}

static int wiring_of(const gs_model *model, wiring *w) {
  w->n = 0;
  int rc = gs_prep_can_compose(model);
  if (rc < 0)
    return rc;
  for (int i = 0; i < model->n_inputs + model->n_outputs; i++) {
    const gs_value_info *v = i < model->n_inputs ? &model->inputs[i]
                                                 : &model->outputs[i - model->n_inputs];
    if (!(w->names[w->n] = strdup(v->name)))
      return gs_error(GS_ENOMEM, "out of memory composing the preprocessing graph");
    w->n++;
  }
  return GS_OK;
}

int gs_prep_compose(const gs_prep *p, gs_model *model, int input, int h, int w, bool nchw,
                    const char *name, gs_model **out) {
  *out = NULL;
  gs_model *graph = NULL;
  wiring names;
  int rc = wiring_of(model, &names);
  if (rc == 0)
    rc = gs_prep_graph(p, h, w, nchw, model->opset, &graph);
  if (rc < 0) {
    wiring_free(&names);
    gs_model_free(model);
    return rc;
  }
  /* The model's own input becomes the recipe's output; the whole takes
   * pixels under the input's name. */
  const char *prep_from[2] = {"pixels", "normalised"};
  const char *prep_to[2] = {names.names[input], normalised};
  const char *model_to[2 * GS_PREP_MAX_VALUES];
  for (int i = 0; i < names.n; i++)
    model_to[i] = i == input ? normalised : names.names[i];
  int n_in = model->n_inputs, n_out = model->n_outputs;
  gs_compose_step steps[2] = {
      {.model = graph, .name = "preprocess", .n_map = 2, .from = prep_from, .to = prep_to},
      {.model = model, .name = "model", .n_map = names.n, .from = (const char *const *)names.names,
       .to = model_to}};
  rc = gs_model_compose(steps, 2, (const char *const *)names.names, n_in,
                        (const char *const *)names.names + n_in, n_out, name, out);
  wiring_free(&names);
  return rc;
}

bool gs_prep_finishes_on(const gs_prep *p, gs_device_t *const *devices, int n) {
  if (p->finish == GS_FINISH_CPU || n <= 0)
    return false;
  bool own_memory = true, gpus = true;
  for (int i = 0; i < n; i++) {
    own_memory = own_memory && devices[i] &&
                 !gs_device_get_caps(devices[i])->host_visible_device_memory;
    gpus = gpus && devices[i] && gs_device_get_info(devices[i])->type != GS_DEVICE_CPU;
  }
  return own_memory && (p->finish == GS_FINISH_DEVICE || gpus);
}

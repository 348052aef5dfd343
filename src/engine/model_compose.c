/* model_compose.c - an ensemble's steps as one model (model_compose.h). The
 * steps' nodes and weights are moved, not copied: each step was loaded for
 * this, and its shell is freed. */
#include "engine/model_compose.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* onnx.c */
int gs__model_check(gs_model *m, bool check_support);

/* "<step>/<name>", malloc'd; NULL when out of memory. */
static char *prefixed(const gs_compose_step *s, const char *name) {
  size_t n = strlen(s->name) + strlen(name) + 2;
  char *out = malloc(n);
  if (out)
    snprintf(out, n, "%s/%s", s->name, name);
  return out;
}

/* What a step's tensor is called in the whole: the ensemble tensor it is
 * wired to, "" for an omitted optional input, else "<step>/<name>".
 * malloc'd; NULL when out of memory. */
static char *renamed(const gs_compose_step *s, const char *name) {
  for (int i = 0; i < s->n_map; i++)
    if (strcmp(s->from[i], name) == 0)
      return strdup(s->to[i]);
  return name[0] ? prefixed(s, name) : strdup("");
}

/* A node's name in the whole: "<step>/<name>", or "<step>/<op>_<index>"
 * for a node the exporter left unnamed, so that every node names its step
 * (a plan times the steps by these prefixes: engine.h's sections). Never
 * an ensemble tensor's name, which a node may share with a wired input.
 * malloc'd; NULL when out of memory. */
static char *node_name(const gs_compose_step *s, const gs_node *node, int index) {
  char unnamed[96];
  snprintf(unnamed, sizeof unnamed, "%s_%d", node->op_type, index);
  return prefixed(s, node->name && node->name[0] ? node->name : unnamed);
}

static int rename_all(const gs_compose_step *s, char **names, int n) {
  for (int i = 0; i < n; i++) {
    char *to = renamed(s, names[i]);
    if (!to)
      return gs_error(GS_ENOMEM, "out of memory composing an ensemble");
    free(names[i]);
    names[i] = to;
  }
  return GS_OK;
}

static bool is_wired(const gs_compose_step *s, const char *name, const char **to) {
  for (int i = 0; i < s->n_map; i++)
    if (strcmp(s->from[i], name) == 0) {
      *to = s->to[i];
      return true;
    }
  return false;
}

static bool listed(const char *const *names, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0)
      return true;
  return false;
}

/* Checks a step before anything moves: every graph input wired, every map
 * entry naming one of its inputs or outputs, no graph attributes. */
static int check_step(const gs_compose_step *s, int64_t opset) {
  const gs_model *m = s->model;
  if (m->opset != opset)
    return gs_error(GS_ENOTSUP, "ensemble step %s: opset %lld where the first step's is %lld; "
                                "export the steps at one opset", s->name,
                    (long long)m->opset, (long long)opset);
  for (int i = 0; i < m->n_nodes; i++)
    for (int a = 0; a < m->nodes[i].n_attrs; a++)
      if (m->nodes[i].attrs[a].type == GS_ATTR_GRAPH)
        return gs_error(GS_ENOTSUP, "ensemble step %s: node %s (%s) holds a graph; steps with "
                                    "If, Loop or Scan are not supported in ensembles yet",
                        s->name, m->nodes[i].name, m->nodes[i].op_type);
  const char *to;
  for (int i = 0; i < m->n_inputs; i++)
    if (!is_wired(s, m->inputs[i].name, &to))
      return gs_error(GS_EINVAL, "ensemble step %s: input %s is in no input_map", s->name,
                      m->inputs[i].name);
  for (int k = 0; k < s->n_map; k++) {
    bool known = false;
    for (int i = 0; i < m->n_inputs && !known; i++)
      known = strcmp(m->inputs[i].name, s->from[k]) == 0;
    for (int i = 0; i < m->n_outputs && !known; i++)
      known = strcmp(m->outputs[i].name, s->from[k]) == 0;
    if (!known)
      return gs_error(GS_EINVAL, "ensemble step %s: the model has no input or output %s",
                      s->name, s->from[k]);
  }
  return GS_OK;
}

/* No ensemble tensor made twice: by two steps, or by a step and the
 * request. */
static int check_makers(const gs_compose_step *steps, int n, const char *const *inputs,
                        int n_inputs) {
  for (int k = 0; k < n; k++)
    for (int o = 0; o < steps[k].model->n_outputs; o++) {
      const char *to;
      if (!is_wired(&steps[k], steps[k].model->outputs[o].name, &to))
        continue;
      if (listed(inputs, n_inputs, to))
        return gs_error(GS_EINVAL, "ensemble step %s writes %s, an input of the ensemble",
                        steps[k].name, to);
      for (int j = k; j < n; j++)
        for (int q = j == k ? o + 1 : 0; q < steps[j].model->n_outputs; q++) {
          const char *other;
          if (!is_wired(&steps[j], steps[j].model->outputs[q].name, &other) || strcmp(to, other))
            continue;
          return j == k ? gs_error(GS_EINVAL, "ensemble step %s writes %s twice", steps[k].name,
                                   to)
                        : gs_error(GS_EINVAL, "ensemble steps %s and %s both write %s",
                                   steps[k].name, steps[j].name, to);
        }
    }
  return GS_OK;
}

/* Whether every tensor step s reads is an ensemble input or made by a step
 * already placed. */
static bool ready(const gs_compose_step *s, const gs_compose_step *steps, const int *order,
                  int placed, const char *const *inputs, int n_inputs) {
  for (int i = 0; i < s->model->n_inputs; i++) {
    const char *to = NULL;
    is_wired(s, s->model->inputs[i].name, &to);
    bool made = listed(inputs, n_inputs, to);
    for (int p = 0; p < placed && !made; p++) {
      const gs_model *m = steps[order[p]].model;
      for (int o = 0; o < m->n_outputs && !made; o++) {
        const char *out_to;
        made = is_wired(&steps[order[p]], m->outputs[o].name, &out_to) && !strcmp(out_to, to);
      }
    }
    if (!made)
      return false;
  }
  return true;
}

/* The steps in an order where each reads only what earlier ones make. */
static int order_steps(const gs_compose_step *steps, int n, const char *const *inputs,
                       int n_inputs, int *order) {
  bool *done = calloc((size_t)n, sizeof *done);
  if (!done)
    return gs_error(GS_ENOMEM, "out of memory composing an ensemble");
  int placed = 0;
  for (bool progress = true; progress && placed < n;) {
    progress = false;
    for (int k = 0; k < n; k++)
      if (!done[k] && ready(&steps[k], steps, order, placed, inputs, n_inputs)) {
        order[placed++] = k;
        done[k] = progress = true;
      }
  }
  int rc = GS_OK;
  for (int k = 0; k < n && placed < n; k++)
    if (!done[k]) {
      rc = gs_error(GS_EINVAL, "ensemble step %s reads a tensor that no ensemble input and no "
                               "step before it makes (or the steps wait on each other)",
                    steps[k].name);
      break;
    }
  free(done);
  return rc;
}

/* A copy of a step's declared input or output under the ensemble's name. */
static int copy_value_info(const gs_value_info *from, const char *name, gs_value_info *to) {
  *to = *from;
  memset(to->dim_params, 0, sizeof to->dim_params);
  if (!(to->name = strdup(name)))
    return gs_error(GS_ENOMEM, "out of memory composing an ensemble");
  for (int d = 0; d < GS_MAX_DIMS; d++)
    if (from->dim_params[d] && !(to->dim_params[d] = strdup(from->dim_params[d])))
      return gs_error(GS_ENOMEM, "out of memory composing an ensemble");
  return GS_OK;
}

/* The ensemble's inputs and outputs, typed as the steps that read and
 * write them. */
static int declare_io(gs_model *whole, const gs_compose_step *steps, int n,
                      const char *const *inputs, int n_inputs, const char *const *outputs,
                      int n_outputs) {
  whole->inputs = calloc((size_t)n_inputs, sizeof *whole->inputs);
  whole->outputs = calloc((size_t)n_outputs, sizeof *whole->outputs);
  if (!whole->inputs || !whole->outputs)
    return gs_error(GS_ENOMEM, "out of memory composing an ensemble");
  for (int e = 0; e < n_inputs + n_outputs; e++) {
    bool in = e < n_inputs;
    const char *name = in ? inputs[e] : outputs[e - n_inputs];
    const gs_value_info *found = NULL;
    for (int k = 0; k < n && !found; k++) {
      const gs_model *m = steps[k].model;
      const gs_value_info *list = in ? m->inputs : m->outputs;
      for (int i = 0; i < (in ? m->n_inputs : m->n_outputs) && !found; i++) {
        const char *to;
        if (is_wired(&steps[k], list[i].name, &to) && !strcmp(to, name))
          found = &list[i];
      }
    }
    if (!found)
      return gs_error(GS_EINVAL, "ensemble %s %s: no step %s it", in ? "input" : "output", name,
                      in ? "reads" : "writes");
    int rc = copy_value_info(found, name, in ? &whole->inputs[e] : &whole->outputs[e - n_inputs]);
    *(in ? &whole->n_inputs : &whole->n_outputs) += 1;
    if (rc < 0)
      return rc;
  }
  return GS_OK;
}

/* Moves step s's nodes and weights into the whole, renamed. */
static int take_step(gs_model *whole, gs_compose_step *s) {
  gs_model *m = s->model;
  int rc = GS_OK;
  for (int i = 0; rc == 0 && i < m->n_nodes; i++) {
    gs_node *node = &m->nodes[i];
    char *name = node_name(s, node, i);
    if (!name)
      return gs_error(GS_ENOMEM, "out of memory composing an ensemble");
    free(node->name);
    node->name = name;
    if ((rc = rename_all(s, node->inputs, node->n_in)) == 0)
      rc = rename_all(s, node->outputs, node->n_out);
  }
  for (int i = 0; rc == 0 && i < m->n_inits; i++)
    rc = rename_all(s, &m->inits[i].name, 1);
  if (rc < 0)
    return rc;
  /* A step without weights (or nodes) has NULL arrays, as may the whole. */
  if (m->n_nodes > 0)
    memcpy(whole->nodes + whole->n_nodes, m->nodes, (size_t)m->n_nodes * sizeof *m->nodes);
  whole->n_nodes += m->n_nodes;
  if (m->n_inits > 0)
    memcpy(whole->inits + whole->n_inits, m->inits, (size_t)m->n_inits * sizeof *m->inits);
  whole->n_inits += m->n_inits;
  m->n_nodes = m->n_inits = 0; /* moved: the shell frees none of them */
  return GS_OK;
}

static int compose(gs_compose_step *steps, int n, const char *const *inputs, int n_inputs,
                   const char *const *outputs, int n_outputs, gs_model *whole) {
  int rc = GS_OK, nodes = 0, inits = 0;
  for (int k = 0; rc == 0 && k < n; k++) {
    rc = check_step(&steps[k], steps[0].model->opset);
    nodes += steps[k].model->n_nodes;
    inits += steps[k].model->n_inits;
  }
  int *order = rc == 0 ? malloc((size_t)n * sizeof *order) : NULL;
  if (rc == 0 && !order)
    rc = gs_error(GS_ENOMEM, "out of memory composing an ensemble");
  if (rc == 0)
    rc = check_makers(steps, n, inputs, n_inputs);
  if (rc == 0)
    rc = order_steps(steps, n, inputs, n_inputs, order);
  if (rc == 0)
    rc = declare_io(whole, steps, n, inputs, n_inputs, outputs, n_outputs);
  whole->nodes = rc == 0 ? calloc((size_t)nodes + 1, sizeof *whole->nodes) : NULL;
  whole->inits = rc == 0 ? calloc((size_t)inits + 1, sizeof *whole->inits) : NULL;
  if (rc == 0 && (!whole->nodes || !whole->inits))
    rc = gs_error(GS_ENOMEM, "out of memory composing an ensemble");
  for (int p = 0; rc == 0 && p < n; p++)
    rc = take_step(whole, &steps[order[p]]);
  for (int i = 0; rc == 0 && i < whole->n_inits; i++)
    if (gs_strmap_put(&whole->init_index, whole->inits[i].name, i) < 0)
      rc = gs_error(GS_ENOMEM, "out of memory composing an ensemble");
  free(order);
  return rc;
}

int gs_model_compose(gs_compose_step *steps, int n_steps, const char *const *inputs,
                     int n_inputs, const char *const *outputs, int n_outputs, const char *name,
                     gs_model **out) {
  *out = NULL;
  gs_model *whole = calloc(1, sizeof *whole);
  int rc = whole ? GS_OK : gs_error(GS_ENOMEM, "out of memory composing an ensemble");
  if (rc == 0 && n_steps < 1)
    rc = gs_error(GS_EINVAL, "an ensemble of no steps");
  if (rc == 0) {
    gs_strmap_init(&whole->init_index);
    whole->ir_version = steps[0].model->ir_version;
    whole->opset = steps[0].model->opset;
    whole->path = strdup(name);
    whole->graph_name = strdup(name);
    whole->producer = strdup("gpusrv ensemble");
    if (!whole->path || !whole->graph_name || !whole->producer)
      rc = gs_error(GS_ENOMEM, "out of memory composing an ensemble");
  }
  if (rc == 0)
    rc = compose(steps, n_steps, inputs, n_inputs, outputs, n_outputs, whole);
  if (rc == 0)
    rc = gs__model_check(whole, true);
  for (int k = 0; k < n_steps; k++) {
    gs_model_free(steps[k].model);
    steps[k].model = NULL;
  }
  if (rc < 0) {
    gs_model_free(whole);
    return rc;
  }
  *out = whole;
  return GS_OK;
}

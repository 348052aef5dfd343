/* model_check.c - what gs_model_load() checks after reading a file: every
 * op and attribute is supported (else one message naming every unsupported
 * op and its nodes), every input is produced by something, no value is
 * produced twice, and the graph has no cycle. Graph attributes (If's
 * branches) are checked as graphs of their own, after the values they read
 * from around them are declared as their inputs and added to their node's
 * (so that ordering, cutting and planning see those reads). */
#include "engine/model.h"

#include "base/error.h"
#include "engine/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Collects "Op (nodes a, b)" entries into a message buffer. */
typedef struct problems {
  char text[1024];
  size_t len;
  int count;
} problems;

static void add_problem(problems *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_problem(problems *p, const char *fmt, ...) {
  p->count++;
  if (p->len >= sizeof p->text - 1)
    return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(p->text + p->len, sizeof p->text - p->len, fmt, ap);
  va_end(ap);
  if (n > 0)
    p->len += (size_t)n;
  if (p->len >= sizeof p->text)
    p->len = sizeof p->text - 1;
}

/* Appends text that belongs to the current problem (a node's name), not a
 * new problem: the count stays. */
static void add_node_name(problems *p, const char *sep, const char *name) {
  add_problem(p, "%s%s", sep, name);
  p->count--;
}

/* Lists each unsupported op once, with the nodes that use it. */
static int check_ops(const gs_model *m) {
  problems p = {.len = 0};
  bool *done = calloc((size_t)m->n_nodes + 1, 1);
  if (!done)
    return gs_error(GS_ENOMEM, "out of memory checking the model");
  for (int i = 0; i < m->n_nodes; i++) {
    if (done[i])
      continue;
    const gs_node *n = &m->nodes[i];
    bool foreign = n->domain[0] && strcmp(n->domain, "ai.onnx") != 0;
    const gs_op_def *op = gs_op_of(n);
    if (op)
      continue;
    add_problem(&p, "%s%s%s%s (nodes ", p.count ? "; " : "", foreign ? n->domain : "",
                foreign ? ":" : "", n->op_type);
    int listed = 0;
    for (int j = i; j < m->n_nodes; j++) {
      const gs_node *o = &m->nodes[j];
      if (strcmp(o->op_type, n->op_type) != 0 || strcmp(o->domain, n->domain) != 0)
        continue;
      done[j] = true;
      if (listed++ < 5)
        add_node_name(&p, listed > 1 ? ", " : "", o->name);
    }
    if (listed > 5) {
      char more[32];
      snprintf(more, sizeof more, ", and %d more", listed - 5);
      add_node_name(&p, "", more);
    }
    add_node_name(&p, "", ")");
  }
  free(done);
  if (p.count)
    return gs_error(GS_ENOTSUP, "unsupported op%s: %s", p.count > 1 ? "s" : "", p.text);
  return GS_OK;
}

static bool attr_known(const gs_op_def *op, const char *name) {
  for (const char *const *a = op->attrs; a && *a; a++)
    if (strcmp(*a, name) == 0)
      return true;
  return false;
}

/* Arity, attribute names and attribute values of each node. */
static int check_nodes(const gs_model *m) {
  problems p = {.len = 0};
  for (int i = 0; i < m->n_nodes; i++) {
    const gs_node *n = &m->nodes[i];
    const gs_op_def *op = gs_op_of(n);
    if (!op) { /* check_ops said so first; kept so that no path reads a NULL op */
      add_problem(&p, "%snode %s: unsupported op %s", p.count ? "; " : "", n->name, n->op_type);
      continue;
    }
    /* Trailing omitted optional inputs do not count. */
    int n_in = n->n_in;
    while (n_in > 0 && n->inputs[n_in - 1][0] == '\0')
      n_in--;
    if (n_in < op->min_in || n_in > op->max_in || n->n_out < op->min_out ||
        n->n_out > op->max_out) {
      add_problem(&p, "%snode %s (%s) has %d inputs and %d outputs; the op takes %d..%d and "
                      "%d..%d",
                  p.count ? "; " : "", n->name, n->op_type, n_in, n->n_out, op->min_in,
                  op->max_in, op->min_out, op->max_out);
      continue;
    }
    if (n_in + n->n_out > GS_OP_MAX_IO) {
      add_problem(&p, "%snode %s has %d operands (at most %d)", p.count ? "; " : "", n->name,
                  n_in + n->n_out, GS_OP_MAX_IO);
      continue;
    }
    for (int a = 0; a < n->n_attrs; a++) {
      if (!attr_known(op, n->attrs[a].name))
        add_problem(&p, "%snode %s (%s): attribute %s is not supported", p.count ? "; " : "",
                    n->name, n->op_type, n->attrs[a].name);
      else if (n->attrs[a].type == GS_ATTR_UNSUPPORTED)
        add_problem(&p, "%snode %s (%s): attribute %s has an unsupported type (graph, sparse "
                        "tensor or type)",
                    p.count ? "; " : "", n->name, n->op_type, n->attrs[a].name);
    }
    if (op->check && op->check(n) < 0)
      add_problem(&p, "%snode %s (%s): %s", p.count ? "; " : "", n->name, n->op_type,
                  gs_error_detail());
  }
  if (p.count)
    return gs_error(GS_ENOTSUP, "%s", p.text);
  return GS_OK;
}

/* Every input produced, nothing produced twice, no cycle; then the nodes
 * are put in an order that runs (the file's order may not). */
static int check_graph(gs_model *m) {
  gs_strmap produced;
  gs_strmap_init(&produced);
  int rc = GS_OK;
  /* producer index: -1 graph input or initializer, else node index */
  for (int i = 0; rc == 0 && i < m->n_inputs; i++) {
    if (gs_strmap_get(&produced, m->inputs[i].name) >= 0)
      rc = gs_error(GS_EINVAL, "graph input %s is declared twice", m->inputs[i].name);
    else
      rc = gs_strmap_put(&produced, m->inputs[i].name, m->n_nodes);
  }
  for (int i = 0; rc == 0 && i < m->n_inits; i++)
    rc = gs_strmap_put(&produced, m->inits[i].name, m->n_nodes);
  for (int i = 0; rc == 0 && i < m->n_nodes; i++) {
    gs_node *n = &m->nodes[i];
    for (int o = 0; rc == 0 && o < n->n_out; o++) {
      if (!n->outputs[o][0])
        continue;
      if (gs_strmap_get(&produced, n->outputs[o]) >= 0)
        rc = gs_error(GS_EINVAL, "value %s is produced twice (again by node %s)", n->outputs[o],
                      n->name);
      else
        rc = gs_strmap_put(&produced, n->outputs[o], i);
    }
  }
  /* Edges producer -> consumer, grouped by producer (counting sort), for
   * Kahn's algorithm in time linear in the graph's size. */
  int n = m->n_nodes, n_edges = 0;
  int *pending = calloc((size_t)n + 1, sizeof(int)), *order = calloc((size_t)n + 1, sizeof(int));
  int *first = calloc((size_t)n + 2, sizeof(int));
  size_t total_in = 0;
  for (int i = 0; i < n; i++)
    total_in += (size_t)m->nodes[i].n_in;
  int *from = malloc((total_in + 1) * sizeof(int)), *to = malloc((total_in + 1) * sizeof(int));
  int *adj = malloc((total_in + 1) * sizeof(int));
  if (rc == 0 && (!pending || !order || !first || !from || !to || !adj))
    rc = gs_error(GS_ENOMEM, "out of memory checking the graph");
  for (int i = 0; rc == 0 && i < n; i++) {
    gs_node *nd = &m->nodes[i];
    for (int k = 0; rc == 0 && k < nd->n_in; k++) {
      if (!nd->inputs[k][0])
        continue;
      int p = gs_strmap_get(&produced, nd->inputs[k]);
      if (p < 0)
        rc = gs_error(GS_EINVAL, "node %s (%s) reads %s, which no node, input or initializer "
                                 "produces",
                      nd->name, nd->op_type, nd->inputs[k]);
      else if (p < n) {
        from[n_edges] = p;
        to[n_edges++] = i;
        pending[i]++;
        first[p + 1]++;
      }
    }
  }
  if (rc == 0) {
    for (int i = 0; i < n; i++)
      first[i + 1] += first[i];
    int *fill = calloc((size_t)n + 1, sizeof(int));
    if (!fill)
      rc = gs_error(GS_ENOMEM, "out of memory checking the graph");
    for (int e = 0; rc == 0 && e < n_edges; e++)
      adj[first[from[e]] + fill[from[e]]++] = to[e];
    free(fill);
  }
  int taken = 0, head = 0;
  for (int i = 0; rc == 0 && i < n; i++)
    if (pending[i] == 0)
      order[taken++] = i;
  while (rc == 0 && head < taken) {
    int v = order[head++];
    for (int e = first[v]; e < first[v + 1]; e++)
      if (--pending[adj[e]] == 0)
        order[taken++] = adj[e];
  }
  if (rc == 0 && taken < n) {
    int stuck = 0;
    while (pending[stuck] == 0)
      stuck++;
    rc = gs_error(GS_EINVAL, "the graph has a cycle through node %s (%s)", m->nodes[stuck].name,
                  m->nodes[stuck].op_type);
  }
  free(first);
  free(from);
  free(to);
  free(adj);
  for (int i = 0; rc == 0 && i < m->n_outputs; i++)
    if (gs_strmap_get(&produced, m->outputs[i].name) < 0)
      rc = gs_error(GS_EINVAL, "graph output %s is produced by nothing", m->outputs[i].name);
  if (rc == 0 && m->n_outputs == 0)
    rc = gs_error(GS_EINVAL, "the graph has no outputs");
  /* Keep the nodes in an order that runs: plans walk them front to back. */
  if (rc == 0) {
    gs_node *sorted = malloc(sizeof *sorted * ((size_t)m->n_nodes + 1));
    if (!sorted) {
      rc = gs_error(GS_ENOMEM, "out of memory sorting the graph");
    } else {
      for (int i = 0; i < m->n_nodes; i++)
        sorted[i] = m->nodes[order[i]];
      free(m->nodes);
      m->nodes = sorted;
    }
  }
  free(pending);
  free(order);
  gs_strmap_free(&produced);
  return rc;
}

int gs_model_check_support(const gs_model *m) {
  int rc = check_ops((gs_model *)m);
  if (rc == 0)
    rc = check_nodes((gs_model *)m);
  return rc;
}

/* ---- graph attributes ------------------------------------------------------------ */

static int append_name(char ***names, int *n, const char *name) {
  char **grown = realloc(*names, sizeof *grown * ((size_t)*n + 1));
  if (!grown)
    return gs_error(GS_ENOMEM, "out of memory checking the model");
  *names = grown;
  if (!(grown[*n] = strdup(name)))
    return gs_error(GS_ENOMEM, "out of memory checking the model");
  (*n)++;
  return GS_OK;
}

/* Declares as inputs of graph attribute g the values it reads that it does
 * not make: its nodes' inputs and its outputs. */
static int declare_captured(gs_model *g) {
  gs_strmap known;
  gs_strmap_init(&known);
  int rc = 0;
  for (int i = 0; rc == 0 && i < g->n_inputs; i++)
    rc = gs_strmap_put(&known, g->inputs[i].name, 1);
  for (int i = 0; rc == 0 && i < g->n_inits; i++)
    rc = gs_strmap_put(&known, g->inits[i].name, 1);
  for (int i = 0; rc == 0 && i < g->n_nodes; i++)
    for (int o = 0; rc == 0 && o < g->nodes[i].n_out; o++)
      if (g->nodes[i].outputs[o][0])
        rc = gs_strmap_put(&known, g->nodes[i].outputs[o], 1);
  for (int i = 0; rc == 0 && i < g->n_nodes + 1; i++) {
    int n = i < g->n_nodes ? g->nodes[i].n_in : g->n_outputs;
    for (int k = 0; rc == 0 && k < n; k++) {
      const char *name = i < g->n_nodes ? g->nodes[i].inputs[k] : g->outputs[k].name;
      if (!name[0] || gs_strmap_get(&known, name) >= 0)
        continue;
      gs_value_info *grown = realloc(g->inputs, sizeof *grown * ((size_t)g->n_inputs + 1));
      if (!grown) {
        rc = gs_error(GS_ENOMEM, "out of memory checking the model");
        break;
      }
      g->inputs = grown;
      grown[g->n_inputs] = (gs_value_info){.dtype = GS_DT_INVALID, .rank = -1};
      if (!(grown[g->n_inputs].name = strdup(name))) {
        rc = gs_error(GS_ENOMEM, "out of memory checking the model");
        break;
      }
      g->n_inputs++;
      g->n_captured++;
      rc = gs_strmap_put(&known, name, 1);
    }
  }
  gs_strmap_free(&known);
  return rc;
}

static int check_model(gs_model *m, bool check_support, bool is_attribute);

/* Checks each graph attribute of node n, and adds what they capture to
 * n's inputs, once each. */
static int check_attribute_graphs(gs_node *n, bool check_support) {
  int rc = 0;
  for (int a = 0; rc == 0 && a < n->n_attrs; a++) {
    gs_model *g = n->attrs[a].type == GS_ATTR_GRAPH ? n->attrs[a].g : NULL;
    if (!g)
      continue;
    char where[300];
    snprintf(where, sizeof where, "node %s (%s), graph %s", n->name, n->op_type,
             n->attrs[a].name);
    if ((rc = check_model(g, check_support, true)) < 0)
      return gs_error_prefix(rc, where);
    for (int i = g->n_inputs - g->n_captured; rc == 0 && i < g->n_inputs; i++) {
      bool seen = false;
      for (int k = n->n_in - n->n_captured; k < n->n_in && !seen; k++)
        seen = strcmp(n->inputs[k], g->inputs[i].name) == 0;
      if (!seen && (rc = append_name(&n->inputs, &n->n_in, g->inputs[i].name)) == 0)
        n->n_captured++;
    }
  }
  return rc;
}

/* model_rewrite.c */
int gs__model_split_wide_nodes(gs_model *m);
/* model_qdq.c */
int gs__model_fuse_qdq(gs_model *m);

static int check_model(gs_model *m, bool check_support, bool is_attribute) {
  /* Unnamed nodes get names, so that messages can point at them. */
  for (int i = 0; i < m->n_nodes; i++) {
    gs_node *n = &m->nodes[i];
    if (n->name && n->name[0])
      continue;
    char name[96];
    snprintf(name, sizeof name, "%s_%d", n->op_type, i);
    free(n->name);
    if (!(n->name = strdup(name)))
      return gs_error(GS_ENOMEM, "out of memory naming nodes");
  }
  int rc = gs__model_split_wide_nodes(m);
  for (int i = 0; rc == 0 && i < m->n_nodes; i++)
    rc = check_attribute_graphs(&m->nodes[i], check_support);
  if (rc == 0 && is_attribute)
    rc = declare_captured(m);
  if (rc == 0 && check_support)
    rc = gs_model_check_support(m);
  if (rc == 0)
    rc = check_graph(m);
  /* Integer ops where a QDQ model allows them: for running only (inspect
   * shows the graph as the file has it). */
  if (rc == 0 && check_support && !is_attribute)
    rc = gs__model_fuse_qdq(m);
  return rc;
}

int gs__model_check(gs_model *m, bool check_support) { return check_model(m, check_support, false); }

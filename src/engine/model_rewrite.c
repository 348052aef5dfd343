/* model_rewrite.c - rewrites the loader makes so that every node fits an op
 * call (hal/op/op_call.h): a Concat, Sum, Min or Max of more inputs than a
 * call holds (detection models concatenate one tensor per anchor level and
 * class, 90 and more) becomes a tree of nodes of the same op, each over a
 * group of the inputs. The ops are associative, so the result is the same. */
#include "engine/model.h"

#include "base/error.h"
#include "hal/op/op_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROUP 32 /* inputs per node of the tree */

static bool is_associative_variadic(const gs_node *n) {
  static const char *const ops[] = {"Concat", "Sum", "Min", "Max"};
  if (n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
    return false;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (strcmp(n->op_type, ops[i]) == 0)
      return true;
  return false;
}

static char *str_printf(const char *a, const char *b, int k) {
  size_t len = strlen(a) + strlen(b) + 24;
  char *s = malloc(len);
  if (s)
    snprintf(s, len, "%s%s%d", a, b, k);
  return s;
}

/* A node over like's inputs [from, from + count), writing `output`; its
 * attributes copied from `like` (integers only: Concat's axis). */
static int group_node(const gs_node *like, int from, int count, char *output, int k,
                      gs_node *out) {
  memset(out, 0, sizeof *out);
  out->name = str_printf(like->name, "/group", k);
  out->op_type = strdup(like->op_type);
  out->domain = strdup(like->domain);
  out->inputs = calloc((size_t)count, sizeof(char *));
  out->outputs = calloc(1, sizeof(char *));
  out->attrs = calloc((size_t)like->n_attrs + 1, sizeof *out->attrs);
  bool ok = out->name && out->op_type && out->domain && out->inputs && out->outputs && out->attrs;
  for (int i = 0; ok && i < count; i++, out->n_in++)
    ok = (out->inputs[i] = strdup(like->inputs[from + i])) != NULL;
  if (ok) {
    out->outputs[0] = output;
    out->n_out = 1;
  }
  for (int a = 0; ok && a < like->n_attrs; a++, out->n_attrs++) {
    const gs_attr *src = &like->attrs[a];
    if (src->type != GS_ATTR_INT)
      return gs_error(GS_ENOTSUP, "node %s: attribute %s of a %s of %d inputs", like->name,
                      src->name, like->op_type, like->n_in);
    out->attrs[a] = (gs_attr){.type = GS_ATTR_INT, .i = src->i, .name = strdup(src->name)};
    ok = out->attrs[a].name != NULL;
  }
  return ok ? GS_OK : gs_error(GS_ENOMEM, "out of memory rewriting node %s", like->name);
}

/* Replaces node i's inputs by groups made by new nodes appended to m. */
static int split_inputs(gs_model *m, int i) {
  int n_in = m->nodes[i].n_in, groups = (n_in + GROUP - 1) / GROUP;
  gs_node *grown = realloc(m->nodes, sizeof *grown * ((size_t)m->n_nodes + (size_t)groups));
  if (!grown)
    return gs_error(GS_ENOMEM, "out of memory rewriting node %s", m->nodes[i].name);
  m->nodes = grown;
  gs_node *n = &m->nodes[i];
  char **names = calloc((size_t)groups, sizeof *names);
  if (!names)
    return gs_error(GS_ENOMEM, "out of memory rewriting node %s", n->name);
  int rc = 0;
  for (int g = 0; rc == 0 && g < groups; g++) {
    int from = g * GROUP, count = n_in - from < GROUP ? n_in - from : GROUP;
    char *output = str_printf(n->outputs[0], "/group", g);
    if (!output || !(names[g] = strdup(output))) {
      free(output);
      rc = gs_error(GS_ENOMEM, "out of memory rewriting node %s", n->name);
      break;
    }
    gs_node *made = &m->nodes[m->n_nodes];
    rc = group_node(n, from, count, output, g, made);
    if (rc < 0 && made->n_out == 0) /* else the half-made node owns it */
      free(output);
    m->n_nodes++; /* freed with the model also when half made */
  }
  if (rc < 0) {
    for (int g = 0; g < groups; g++)
      free(names[g]);
    free(names);
    return rc;
  }
  for (int k = 0; k < n->n_in; k++)
    free(n->inputs[k]);
  free(n->inputs);
  n->inputs = names;
  n->n_in = groups;
  return GS_OK;
}

int gs__model_split_wide_nodes(gs_model *m) {
  /* A node split still too wide is split again, and so are the groups it
   * made (appended, visited later): a tree of more than one level. */
  for (int i = 0; i < m->n_nodes; i++) {
    const gs_node *n = &m->nodes[i];
    if (n->n_in >= GS_OP_MAX_IO && n->n_out == 1 && is_associative_variadic(n)) {
      int rc = split_inputs(m, i);
      if (rc < 0)
        return rc;
      i--;
    }
  }
  return GS_OK;
}

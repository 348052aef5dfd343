/* model_split.c - cutting a model into parts, one per device (model_split.h).
 *
 * Each value of the graph lives from the node that produces it (-1 for a
 * graph input) to the last node that reads it (n_nodes for a graph output);
 * it crosses cut c (between nodes c-1 and c) when produced before c and
 * read at or after c. Difference arrays give each cut's crossing count and
 * whether a graph input or output crosses it, in time linear in the graph. */
#include "engine/model_split.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct lifetime {
  const char *name;
  int produced, last_read;
} lifetime;

typedef struct split_scan {
  const gs_model *m;
  int n_values;
  lifetime *values;
  int *crossing;      /* [c]: values crossing cut c */
  int *blocked;       /* [c]: graph inputs or outputs crossing cut c */
  int *reach;         /* [c]: the last reader of any value produced before c */
  double *weight;     /* [c]: the cost of nodes before c */
} split_scan;

static void scan_free(split_scan *s) {
  free(s->values);
  free(s->crossing);
  free(s->blocked);
  free(s->reach);
  free(s->weight);
}

static bool is_boundary_value(const lifetime *v, int n_nodes) {
  return v->produced < 0 || v->last_read >= n_nodes;
}

static int scan(const gs_model *m, split_scan *s) {
  int n = m->n_nodes;
  size_t max_values = (size_t)m->n_inputs;
  for (int i = 0; i < n; i++)
    max_values += (size_t)m->nodes[i].n_out;
  s->m = m;
  s->values = calloc(max_values + 1, sizeof *s->values);
  s->crossing = calloc((size_t)n + 2, sizeof(int));
  s->blocked = calloc((size_t)n + 2, sizeof(int));
  s->reach = calloc((size_t)n + 2, sizeof(int));
  s->weight = calloc((size_t)n + 2, sizeof(double));
  gs_strmap index;
  gs_strmap_init(&index);
  int rc = 0;
  if (!s->values || !s->crossing || !s->blocked || !s->reach || !s->weight)
    rc = gs_error(GS_ENOMEM, "out of memory splitting the model");
  for (int i = 0; rc == 0 && i < m->n_inputs; i++) {
    s->values[s->n_values] = (lifetime){m->inputs[i].name, -1, -1};
    rc = gs_strmap_put(&index, m->inputs[i].name, s->n_values++);
  }
  for (int i = 0; rc == 0 && i < n; i++) {
    const gs_node *node = &m->nodes[i];
    double cost = 1; /* a node's own share, which splits a model without weights */
    for (int k = 0; k < node->n_in; k++) {
      if (!node->inputs[k][0])
        continue;
      int init = gs_strmap_get(&m->init_index, node->inputs[k]);
      int v = gs_strmap_get(&index, node->inputs[k]);
      if (init >= 0)
        cost += (double)m->inits[init].bytes;
      else if (v >= 0 && s->values[v].last_read < i)
        s->values[v].last_read = i;
    }
    s->weight[i + 1] = s->weight[i] + cost;
    for (int k = 0; rc == 0 && k < node->n_out; k++)
      if (node->outputs[k][0]) {
        s->values[s->n_values] = (lifetime){node->outputs[k], i, i};
        rc = gs_strmap_put(&index, node->outputs[k], s->n_values++);
      }
  }
  for (int i = 0; rc == 0 && i < m->n_outputs; i++) {
    int v = gs_strmap_get(&index, m->outputs[i].name);
    if (v >= 0)
      s->values[v].last_read = n;
  }
  gs_strmap_free(&index);
  if (rc < 0)
    return rc;
  for (int c = 0; c <= n; c++)
    s->reach[c] = -1;
  for (int v = 0; v < s->n_values; v++) {
    const lifetime *l = &s->values[v];
    int lo = l->produced + 1 > 1 ? l->produced + 1 : 1;
    int hi = l->last_read < n - 1 ? l->last_read : n - 1;
    if (lo > hi)
      continue; /* crosses no cut */
    s->crossing[lo]++;
    s->crossing[hi + 1]--;
    if (is_boundary_value(l, n)) {
      s->blocked[lo]++;
      s->blocked[hi + 1]--;
    } else if (s->reach[l->produced + 1] < l->last_read) {
      s->reach[l->produced + 1] = l->last_read;
    }
  }
  for (int c = 1; c <= n; c++) {
    s->crossing[c] += s->crossing[c - 1];
    s->blocked[c] += s->blocked[c - 1];
    if (s->reach[c] < s->reach[c - 1])
      s->reach[c] = s->reach[c - 1];
  }
  return GS_OK;
}

static double distance(double a, double b) { return a > b ? a - b : b - a; }

/* The cuts, greedily, each among those that only values of the part before
 * cross: within half a share of its share of the weight, the one fewest
 * values cross (the exchange is then one tensor where it can be), nearest
 * its share among those; else the nearest. */
static int place_cuts(const split_scan *s, int parts, int cuts[]) {
  int n = s->m->n_nodes, prev = 0;
  double total = s->weight[n], window = total / parts / 2;
  for (int k = 1; k < parts; k++) {
    double target = total * k / parts;
    int first = prev + 1, best = -1;
    if (prev > 0 && s->reach[prev] + 1 > first)
      first = s->reach[prev] + 1; /* nothing from before the last cut may cross this one */
    for (int c = first; c <= n - (parts - k); c++) {
      if (s->blocked[c] || s->crossing[c] < 1 || s->crossing[c] > GS_SPLIT_MAX_CROSSING)
        continue;
      if (best < 0) {
        best = c;
        continue;
      }
      double off = distance(s->weight[c], target), best_off = distance(s->weight[best], target);
      bool near = off <= window, best_near = best_off <= window;
      if (near != best_near ? near
          : near && s->crossing[c] != s->crossing[best] ? s->crossing[c] < s->crossing[best]
                                                        : off < best_off)
        best = c;
    }
    if (best < 0)
      return gs_error(GS_ENOTSUP,
                      "%s cannot be split into %d parts: after node %d of %d there is no place "
                      "where only values of the part before cross to the next (at most %d, no "
                      "graph input or output among them)",
                      s->m->path ? s->m->path : "the model", parts, prev, n,
                      GS_SPLIT_MAX_CROSSING);
    cuts[k] = prev = best;
  }
  return GS_OK;
}

/* Part `k` of `parts`, nodes [from, to). */
static int make_part(const split_scan *s, int from, int to, bool first, bool last,
                     gs_model **out) {
  const gs_model *m = s->m;
  int n = m->n_nodes;
  gs_model *p = calloc(1, sizeof *p);
  if (!p)
    return gs_error(GS_ENOMEM, "out of memory splitting the model");
  gs_strmap_init(&p->init_index);
  p->path = m->path;
  p->ir_version = m->ir_version;
  p->opset = m->opset;
  p->producer = m->producer;
  p->graph_name = m->graph_name;
  p->nodes = m->nodes + from;
  p->n_nodes = to - from;
  p->inits = calloc((size_t)m->n_inits + 1, sizeof *p->inits);
  p->inputs = calloc((size_t)(first ? m->n_inputs : GS_SPLIT_MAX_CROSSING) + 1,
                     sizeof *p->inputs);
  p->outputs = calloc((size_t)(last ? m->n_outputs : GS_SPLIT_MAX_CROSSING) + 1,
                      sizeof *p->outputs);
  bool *taken = calloc((size_t)m->n_inits + 1, 1);
  int rc = 0;
  if (!p->inits || !p->inputs || !p->outputs || !taken)
    rc = gs_error(GS_ENOMEM, "out of memory splitting the model");
  /* The weights its nodes read, and no others. */
  for (int i = from; rc == 0 && i < to; i++)
    for (int k = 0; k < m->nodes[i].n_in; k++) {
      int init = m->nodes[i].inputs[k][0] ? gs_strmap_get(&m->init_index, m->nodes[i].inputs[k])
                                          : -1;
      if (init >= 0 && !taken[init]) {
        taken[init] = true;
        p->inits[p->n_inits++] = m->inits[init];
      }
    }
  free(taken);
  if (rc == 0 && first) {
    memcpy(p->inputs, m->inputs, sizeof *p->inputs * (size_t)m->n_inputs);
    p->n_inputs = m->n_inputs;
  }
  if (rc == 0 && last) {
    memcpy(p->outputs, m->outputs, sizeof *p->outputs * (size_t)m->n_outputs);
    p->n_outputs = m->n_outputs;
  }
  /* The values crossing its cuts, in the order they are produced. */
  for (int v = 0; rc == 0 && v < s->n_values; v++) {
    const lifetime *l = &s->values[v];
    if (is_boundary_value(l, n))
      continue;
    gs_value_info crossing = {.name = (char *)l->name, .dtype = GS_DT_INVALID, .rank = -1};
    if (!first && l->produced < from && l->last_read >= from)
      p->inputs[p->n_inputs++] = crossing;
    if (!last && l->produced < to && l->last_read >= to)
      p->outputs[p->n_outputs++] = crossing;
  }
  if (rc < 0) {
    gs_model_part_free(p);
    return rc;
  }
  *out = p;
  return GS_OK;
}

int gs_model_split(const gs_model *m, int parts, gs_model *out[]) {
  if (parts < 2 || parts > GS_SPLIT_MAX_PARTS)
    return gs_error(GS_EINVAL, "a model splits into 2 to %d parts, not %d", GS_SPLIT_MAX_PARTS,
                    parts);
  if (m->n_nodes < parts)
    return gs_error(GS_ENOTSUP, "%s has %d nodes: too few for %d parts",
                    m->path ? m->path : "the model", m->n_nodes, parts);
  split_scan s = {0};
  int cuts[GS_SPLIT_MAX_PARTS + 1] = {0};
  int rc = scan(m, &s);
  if (rc == 0)
    rc = place_cuts(&s, parts, cuts);
  cuts[parts] = m->n_nodes;
  for (int k = 0; k < parts; k++)
    out[k] = NULL;
  for (int k = 0; rc == 0 && k < parts; k++)
    rc = make_part(&s, cuts[k], cuts[k + 1], k == 0, k == parts - 1, &out[k]);
  scan_free(&s);
  if (rc < 0)
    for (int k = 0; k < parts; k++) {
      gs_model_part_free(out[k]);
      out[k] = NULL;
    }
  return rc;
}

void gs_model_part_free(gs_model *part) {
  if (!part)
    return;
  free(part->inits);
  free(part->inputs);
  free(part->outputs);
  gs_strmap_free(&part->init_index);
  free(part);
}

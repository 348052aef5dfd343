/* model_split.c - cutting a model into parts, one per device (model_split.h).
 *
 * Each value of the graph lives from the node that produces it (-1 for a
 * graph input) to the last node that reads it (n_nodes for a graph output);
 * it crosses cut c (between nodes c-1 and c) when produced before c and
 * read at or after c. Difference arrays give each cut's crossing count and
 * whether a graph input or output crosses it, in time linear in the graph.
 *
 * Static values (of Constant nodes, and of nodes that read only weights and
 * static values) never cross: the loader's order puts such nodes first, far
 * from their readers, and a plan must know them while planning (a Reshape's
 * shape). A part that reads one gets a copy of the nodes that make it. */
#include "engine/model_split.h"

#include "base/error.h"
#include "engine/op.h"

#include <stdlib.h>
#include <string.h>

typedef struct lifetime {
  const char *name;
  int produced, last_read;
  bool is_static; /* known without any input (see above) */
} lifetime;

typedef struct split_scan {
  const gs_model *m;
  int n_values;
  lifetime *values;
  int *crossing;      /* [c]: values crossing cut c */
  int *blocked;       /* [c]: graph inputs or outputs crossing cut c */
  int *reach;         /* [c]: the last reader of any value produced before c */
  double *weight;     /* [c]: the cost of nodes before c */
  gs_strmap index;    /* value name -> values[] */
} split_scan;

static void scan_free(split_scan *s) {
  gs_strmap_free(&s->index);
  free(s->values);
  free(s->crossing);
  free(s->blocked);
  free(s->reach);
  free(s->weight);
}

static bool is_boundary_value(const lifetime *v, int n_nodes) {
  return v->produced < 0 || v->last_read >= n_nodes;
}

/* A value that crosses from part to part through the exchange. */
static bool is_exchanged(const lifetime *v, int n_nodes) {
  return !v->is_static && !is_boundary_value(v, n_nodes);
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
  gs_strmap_init(&s->index);
  int rc = 0;
  if (!s->values || !s->crossing || !s->blocked || !s->reach || !s->weight)
    rc = gs_error(GS_ENOMEM, "out of memory splitting the model");
  for (int i = 0; rc == 0 && i < m->n_inputs; i++) {
    s->values[s->n_values] = (lifetime){m->inputs[i].name, -1, -1, false};
    rc = gs_strmap_put(&s->index, m->inputs[i].name, s->n_values++);
  }
  for (int i = 0; rc == 0 && i < n; i++) {
    const gs_node *node = &m->nodes[i];
    double cost = 1; /* a node's own share, which splits a model without weights */
    /* A node that runs graphs (If, Loop) is never folded while planning:
     * its outputs cross like computed ones, or a stage copying it would
     * cut around the copy again. */
    const gs_op_def *op = gs_op_of(node);
    bool is_static = !(op && op->runs_graphs);
    for (int k = 0; k < node->n_in; k++) {
      if (!node->inputs[k][0])
        continue;
      int init = gs_strmap_get(&m->init_index, node->inputs[k]);
      int v = gs_strmap_get(&s->index, node->inputs[k]);
      if (init >= 0) {
        cost += (double)m->inits[init].bytes;
      } else if (v >= 0) {
        is_static = is_static && s->values[v].is_static;
        if (s->values[v].last_read < i)
          s->values[v].last_read = i;
      }
    }
    s->weight[i + 1] = s->weight[i] + cost;
    for (int k = 0; rc == 0 && k < node->n_out; k++)
      if (node->outputs[k][0]) {
        s->values[s->n_values] = (lifetime){node->outputs[k], i, i, is_static};
        rc = gs_strmap_put(&s->index, node->outputs[k], s->n_values++);
      }
  }
  for (int i = 0; rc == 0 && i < m->n_outputs; i++) {
    int v = gs_strmap_get(&s->index, m->outputs[i].name);
    if (v >= 0)
      s->values[v].last_read = n;
  }
  if (rc < 0)
    return rc;
  for (int c = 0; c <= n; c++)
    s->reach[c] = -1;
  for (int v = 0; v < s->n_values; v++) {
    const lifetime *l = &s->values[v];
    if (l->is_static)
      continue; /* its readers' parts make it themselves */
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

static bool can_cut(const split_scan *s, int c) {
  return s->blocked[c] == 0 && s->crossing[c] >= 1 && s->crossing[c] <= GS_SPLIT_MAX_CROSSING;
}

/* What cut c costs as cut k of parts: its distance from k/parts of the
 * weight (as a fraction of the whole), and a twentieth for each value
 * beyond the first that crosses it (the exchange is one tensor where it
 * can be). */
static double cut_cost(const split_scan *s, int c, int k, int parts) {
  double total = s->weight[s->m->n_nodes];
  return distance(s->weight[c], total * k / parts) / total + 0.05 * (s->crossing[c] - 1);
}

/* The cuts of least summed cost such that only values of the part before
 * cross each (so nothing from before cut k-1 crosses cut k: reach[] of the
 * cut before is below this one). Dynamic programming over (k, c): reach[]
 * grows with c, so the cuts allowed before c are a prefix, whose best is
 * kept as c grows: time parts x nodes. */
static int place_cuts(const split_scan *s, int parts, int cuts[]) {
  int n = s->m->n_nodes, rc = GS_OK;
  size_t cells = (size_t)parts * ((size_t)n + 1);
  double *best = malloc(sizeof(double) * cells);
  int *from = malloc(sizeof(int) * cells);
  if (!best || !from) {
    free(best);
    free(from);
    return gs_error(GS_ENOMEM, "out of memory splitting the model");
  }
#define AT(k, c) ((size_t)(k) * ((size_t)n + 1) + (size_t)(c))
  for (size_t i = 0; i < cells; i++)
    best[i] = -1; /* no way to cut there */
  for (int c = 1; c < n; c++)
    if (can_cut(s, c))
      best[AT(1, c)] = cut_cost(s, c, 1, parts);
  for (int k = 2; k < parts; k++) {
    int p = 1, arg = -1; /* p: the next earlier cut to consider; arg: the best so far */
    for (int c = 1; c < n; c++) {
      for (; p < c && s->reach[p] < c; p++)
        if (best[AT(k - 1, p)] >= 0 && (arg < 0 || best[AT(k - 1, p)] < best[AT(k - 1, arg)]))
          arg = p;
      if (arg >= 0 && can_cut(s, c)) {
        best[AT(k, c)] = best[AT(k - 1, arg)] + cut_cost(s, c, k, parts);
        from[AT(k, c)] = arg;
      }
    }
  }
  int last = -1;
  for (int c = 1; c < n; c++)
    if (best[AT(parts - 1, c)] >= 0 && (last < 0 || best[AT(parts - 1, c)] < best[AT(parts - 1, last)]))
      last = c;
  if (last < 0)
    rc = gs_error(GS_ENOTSUP,
                  "%s cannot be split into %d parts: there are no %d places between its %d nodes "
                  "where only values of the part before cross to the next (at most %d, no graph "
                  "input or output among them); try fewer devices",
                  s->m->path ? s->m->path : "the model", parts, parts - 1, n,
                  GS_SPLIT_MAX_CROSSING);
  for (int k = parts - 1; rc == 0 && k >= 1; k--) {
    cuts[k] = last;
    last = k > 1 ? from[AT(k, last)] : 0;
  }
#undef AT
  free(best);
  free(from);
  return rc;
}

/* Marks the node before `from` that makes static value `name`, if not yet,
 * and pushes it on `work` for its own inputs. */
static void mark_maker(const split_scan *s, const char *name, int from, bool *needed, int *work,
                       int *n_work) {
  int v = gs_strmap_get(&s->index, name);
  int producer = v >= 0 && s->values[v].is_static ? s->values[v].produced : -1;
  if (producer >= 0 && producer < from && !needed[producer]) {
    needed[producer] = true;
    work[(*n_work)++] = producer;
  }
}

/* Marks the nodes before `from` that make the static value `name`, and
 * those making their static inputs: with a stack of its own (`work`, room
 * for every node, each pushed once), as a chain of constants may be as long
 * as the graph. */
static void need_static(const split_scan *s, const char *name, int from, bool *needed,
                        int *work) {
  int n_work = 0;
  mark_maker(s, name, from, needed, work, &n_work);
  while (n_work > 0) {
    const gs_node *node = &s->m->nodes[work[--n_work]];
    for (int k = 0; k < node->n_in; k++)
      if (node->inputs[k][0])
        mark_maker(s, node->inputs[k], from, needed, work, &n_work);
  }
}

static int take_init(const gs_model *m, gs_model *p, bool *taken, const char *name) {
  int init = name[0] ? gs_strmap_get(&m->init_index, name) : -1;
  if (init < 0 || taken[init])
    return GS_OK;
  taken[init] = true;
  p->inits[p->n_inits] = m->inits[init];
  if (gs_strmap_put(&p->init_index, m->inits[init].name, p->n_inits++) < 0)
    return gs_error(GS_ENOMEM, "out of memory splitting the model");
  return GS_OK;
}

/* A part borrowing from m: its header copied, everything else empty. */
static gs_model *new_part(const gs_model *m, const char *graph_name) {
  gs_model *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  gs_strmap_init(&p->init_index);
  p->path = m->path;
  p->ir_version = m->ir_version;
  p->opset = m->opset;
  p->producer = m->producer;
  p->graph_name = (char *)graph_name;
  return p;
}

/* The part of nodes [from, to): those nodes, after copies of the earlier
 * nodes that make the static values they read. */
static int make_part(const split_scan *s, int from, int to, bool first, bool last,
                     gs_model **out) {
  const gs_model *m = s->m;
  int n = m->n_nodes;
  gs_model *p = new_part(m, m->graph_name);
  if (!p)
    return gs_error(GS_ENOMEM, "out of memory splitting the model");
  bool *needed = calloc((size_t)n + 1, 1), *taken = calloc((size_t)m->n_inits + 1, 1);
  int *work = malloc(sizeof(int) * ((size_t)n + 1));
  p->nodes = malloc(sizeof *p->nodes * ((size_t)n + 1));
  /* Room for values the caller turns into weights (gs_model_part_set_constant). */
  p->inits = calloc((size_t)m->n_inits + GS_SPLIT_MAX_CROSSING + 1, sizeof *p->inits);
  p->inputs = calloc((size_t)(first ? m->n_inputs : GS_SPLIT_MAX_CROSSING) + 1,
                     sizeof *p->inputs);
  p->outputs = calloc((size_t)(last ? m->n_outputs : GS_SPLIT_MAX_CROSSING) + 1,
                      sizeof *p->outputs);
  int rc = 0;
  if (!needed || !taken || !work || !p->nodes || !p->inits || !p->inputs || !p->outputs)
    rc = gs_error(GS_ENOMEM, "out of memory splitting the model");
  for (int i = from; rc == 0 && i < to; i++) {
    needed[i] = true;
    for (int k = 0; k < m->nodes[i].n_in; k++)
      if (m->nodes[i].inputs[k][0])
        need_static(s, m->nodes[i].inputs[k], from, needed, work);
  }
  for (int i = 0; rc == 0 && last && i < m->n_outputs; i++)
    need_static(s, m->outputs[i].name, from, needed, work);
  /* In the model's order, which is topological: the copies come first. */
  for (int i = 0; rc == 0 && i < to; i++)
    if (needed[i])
      p->nodes[p->n_nodes++] = m->nodes[i];
  /* The weights its nodes read (and, in the last part, graph outputs that
   * are weights), and no others. */
  for (int i = 0; rc == 0 && i < p->n_nodes; i++)
    for (int k = 0; rc == 0 && k < p->nodes[i].n_in; k++)
      rc = take_init(m, p, taken, p->nodes[i].inputs[k]);
  for (int i = 0; rc == 0 && last && i < m->n_outputs; i++)
    rc = take_init(m, p, taken, m->outputs[i].name);
  free(needed);
  free(taken);
  free(work);
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
    if (!is_exchanged(l, n))
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

int gs_model_part_set_constant(gs_model *part, int input, const gs_shape *shape,
                               const void *data, size_t bytes) {
  if (input < 0 || input >= part->n_inputs)
    return gs_error(GS_EINVAL, "a part has no input %d", input);
  const gs_value_info *in = &part->inputs[input];
  gs_const_tensor t = {.name = in->name, .dtype = in->dtype, .shape = *shape,
                       .data = (void *)data, .bytes = bytes};
  gs_const_tensor *grown = realloc(part->inits, sizeof *grown * ((size_t)part->n_inits + 2));
  if (!grown)
    return gs_error(GS_ENOMEM, "out of memory splitting the model");
  part->inits = grown;
  part->inits[part->n_inits] = t;
  int rc = gs_strmap_put(&part->init_index, t.name, part->n_inits);
  if (rc < 0)
    return gs_error(GS_ENOMEM, "out of memory splitting the model");
  part->n_inits++;
  memmove(&part->inputs[input], &part->inputs[input + 1],
          sizeof *part->inputs * (size_t)(part->n_inputs - input - 1));
  part->n_inputs--;
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

/* ---- stages around one node ----------------------------------------------------------- */

static const gs_value_info *declared_output(const gs_model *m, const char *name) {
  for (int i = 0; i < m->n_outputs; i++)
    if (strcmp(m->outputs[i].name, name) == 0)
      return &m->outputs[i];
  return NULL;
}

/* What stage [from, to) reads from before it and hands on after it, in
 * the order values are made: counted when the arrays are NULL. */
static void stage_io(const split_scan *s, int from, int to, const bool *read,
                     gs_value_info *inputs, int *n_in, gs_value_info *outputs, int *n_out) {
  const gs_model *m = s->m;
  int n = m->n_nodes;
  *n_in = from == 0 ? m->n_inputs : 0; /* the first stage takes the model's, all of them */
  *n_out = 0;
  if (inputs && from == 0 && m->n_inputs > 0)
    memcpy(inputs, m->inputs, sizeof *inputs * (size_t)m->n_inputs);
  for (int v = 0; v < s->n_values; v++) {
    const lifetime *l = &s->values[v];
    const gs_value_info *as = NULL;
    gs_value_info crossing = {.name = (char *)l->name, .dtype = GS_DT_INVALID, .rank = -1};
    if (l->produced < 0 && from > 0 && read[v]) { /* a graph input: as declared */
      for (int i = 0; i < m->n_inputs && !as; i++)
        if (strcmp(m->inputs[i].name, l->name) == 0)
          as = &m->inputs[i];
      if (inputs && as)
        inputs[*n_in] = *as;
      *n_in += as != NULL;
      continue;
    }
    if (l->is_static || l->produced < 0)
      continue;
    if (l->produced < from && read[v]) {
      if (inputs)
        inputs[*n_in] = crossing;
      ++*n_in;
    }
    if (l->produced >= from && l->produced < to && l->last_read >= to) {
      as = declared_output(m, l->name);
      if (outputs)
        outputs[*n_out] = as ? *as : crossing;
      ++*n_out;
    }
  }
  /* Graph outputs that are static values: made by the last stage. */
  for (int i = 0; to == n && i < m->n_outputs; i++) {
    int v = gs_strmap_get(&s->index, m->outputs[i].name);
    bool is_init = gs_strmap_get(&m->init_index, m->outputs[i].name) >= 0;
    if ((v >= 0 && s->values[v].is_static) || (v < 0 && is_init)) {
      if (outputs)
        outputs[*n_out] = m->outputs[i];
      ++*n_out;
    }
  }
}

/* The stage of nodes [from, to): its nodes after copies of the static
 * values' makers, its weights, what it reads from before and what it
 * hands on. Sized exactly: a model cut at each of ssdlite's 180 NonZero
 * nodes keeps a stage per cut. */
static int make_stage(const split_scan *s, int from, int to, gs_model **out) {
  const gs_model *m = s->m;
  int n = m->n_nodes;
  gs_model *p = new_part(m, m->graph_name);
  bool *needed = calloc((size_t)n + 1, 1), *taken = calloc((size_t)m->n_inits + 1, 1);
  bool *read = calloc((size_t)s->n_values + 1, 1);
  int *work = malloc(sizeof(int) * ((size_t)n + 1));
  int rc = 0;
  if (!p || !needed || !taken || !read || !work)
    rc = gs_error(GS_ENOMEM, "out of memory cutting the model");
  for (int i = from; rc == 0 && i < to; i++) {
    needed[i] = true;
    for (int k = 0; k < m->nodes[i].n_in; k++) {
      const char *in = m->nodes[i].inputs[k];
      int v = in[0] ? gs_strmap_get(&s->index, in) : -1;
      if (v >= 0)
        read[v] = true;
      if (in[0])
        need_static(s, in, from, needed, work);
    }
  }
  for (int i = 0; rc == 0 && to == n && i < m->n_outputs; i++)
    need_static(s, m->outputs[i].name, from, needed, work);
  int n_nodes = 0, n_inits = 0, n_in = 0, n_out = 0;
  for (int i = 0; rc == 0 && i < to; i++) {
    if (!needed[i])
      continue;
    n_nodes++;
    for (int k = 0; k < m->nodes[i].n_in; k++) {
      const char *in = m->nodes[i].inputs[k];
      int init = in[0] ? gs_strmap_get(&m->init_index, in) : -1;
      if (init >= 0 && !taken[init])
        taken[init] = true, n_inits++;
    }
  }
  n_inits += to == n ? m->n_outputs : 0; /* weights handed out as graph outputs, at most */
  if (rc == 0) {
    memset(taken, 0, (size_t)m->n_inits + 1);
    stage_io(s, from, to, read, NULL, &n_in, NULL, &n_out);
    p->nodes = malloc(sizeof *p->nodes * ((size_t)n_nodes + 1));
    p->inits = calloc((size_t)n_inits + 1, sizeof *p->inits);
    p->inputs = calloc((size_t)n_in + 1, sizeof *p->inputs);
    p->outputs = calloc((size_t)n_out + 1, sizeof *p->outputs);
    if (!p->nodes || !p->inits || !p->inputs || !p->outputs)
      rc = gs_error(GS_ENOMEM, "out of memory cutting the model");
  }
  for (int i = 0; rc == 0 && i < to; i++)
    if (needed[i])
      p->nodes[p->n_nodes++] = m->nodes[i];
  for (int i = 0; rc == 0 && i < p->n_nodes; i++)
    for (int k = 0; rc == 0 && k < p->nodes[i].n_in; k++)
      rc = take_init(m, p, taken, p->nodes[i].inputs[k]);
  for (int i = 0; rc == 0 && to == n && i < m->n_outputs; i++)
    rc = take_init(m, p, taken, m->outputs[i].name);
  if (rc == 0)
    stage_io(s, from, to, read, p->inputs, &p->n_inputs, p->outputs, &p->n_outputs);
  free(needed);
  free(taken);
  free(read);
  free(work);
  if (rc < 0) {
    gs_model_part_free(p);
    return rc;
  }
  *out = p;
  return GS_OK;
}

int gs_model_cut_at(const gs_model *m, const int *bounds, int n, gs_model *out[]) {
  for (int k = 0; k < n; k++)
    out[k] = NULL;
  for (int k = 0; k < n; k++)
    if (bounds[k] > bounds[k + 1] || (k == 0 && bounds[0] != 0))
      return gs_error(GS_EINVAL, "stage %d of a cut: nodes %d to %d", k, bounds[k], bounds[k + 1]);
  if (bounds[n] != m->n_nodes)
    return gs_error(GS_EINVAL, "a cut ends at node %d of %d", bounds[n], m->n_nodes);
  split_scan s = {0};
  int rc = scan(m, &s);
  for (int k = 0; rc == 0 && k < n; k++)
    rc = make_stage(&s, bounds[k], bounds[k + 1], &out[k]);
  scan_free(&s);
  if (rc < 0)
    for (int k = 0; k < n; k++) {
      gs_model_part_free(out[k]);
      out[k] = NULL;
    }
  return rc;
}

int gs_model_cut(const gs_model *m, int node, gs_model *out[3]) {
  if (node < 0 || node >= m->n_nodes)
    return gs_error(GS_EINVAL, "no node %d to cut the model at", node);
  int bounds[4] = {0, node, node + 1, m->n_nodes};
  return gs_model_cut_at(m, bounds, 3, out);
}

int gs_model_with_branch(const gs_model *stage, const gs_model *branch, gs_model **out) {
  gs_model *p = new_part(stage, branch->graph_name);
  if (!p)
    return gs_error(GS_ENOMEM, "out of memory planning a branch");
  int copies = stage->n_nodes - 1; /* all but the If node, which comes last */
  p->nodes = malloc(sizeof *p->nodes * ((size_t)copies + (size_t)branch->n_nodes + 1));
  p->inits = malloc(sizeof *p->inits * ((size_t)stage->n_inits + (size_t)branch->n_inits + 1));
  int formal = branch->n_inputs - branch->n_captured;
  p->inputs = malloc(sizeof *p->inputs * ((size_t)formal + (size_t)stage->n_inputs + 1));
  p->outputs = malloc(sizeof *p->outputs * ((size_t)branch->n_outputs + 1));
  int rc = 0;
  if (!p->nodes || !p->inits || !p->inputs || !p->outputs)
    rc = gs_error(GS_ENOMEM, "out of memory planning a branch");
  for (int i = 0; rc == 0 && i < copies; i++)
    p->nodes[p->n_nodes++] = stage->nodes[i];
  for (int i = 0; rc == 0 && i < branch->n_nodes; i++)
    p->nodes[p->n_nodes++] = branch->nodes[i];
  /* Names are unique across a graph and its branches (ONNX's rule); where
   * a file breaks it, the branch's own weight wins. */
  for (int k = 0; rc == 0 && k < 2; k++) {
    const gs_model *from = k ? stage : branch;
    for (int i = 0; rc == 0 && i < from->n_inits; i++) {
      if (gs_strmap_get(&p->init_index, from->inits[i].name) >= 0)
        continue;
      p->inits[p->n_inits] = from->inits[i];
      if (gs_strmap_put(&p->init_index, from->inits[i].name, p->n_inits++) < 0)
        rc = gs_error(GS_ENOMEM, "out of memory planning a branch");
    }
  }
  if (rc == 0) {
    if (formal > 0) /* an If branch has none (and may have no array) */
      memcpy(p->inputs, branch->inputs, sizeof *p->inputs * (size_t)formal);
    /* Loop-carried values may change shape between iterations (torch's
     * list appends grow): the body's declared shapes are not held to. */
    for (int i = 0; i < formal; i++)
      p->inputs[i].rank = -1;
    if (stage->n_inputs > 0)
      memcpy(p->inputs + formal, stage->inputs, sizeof *p->inputs * (size_t)stage->n_inputs);
    p->n_inputs = formal + stage->n_inputs;
    if (branch->n_outputs > 0)
      memcpy(p->outputs, branch->outputs, sizeof *p->outputs * (size_t)branch->n_outputs);
    p->n_outputs = branch->n_outputs;
  }
  if (rc < 0) {
    gs_model_part_free(p);
    return rc;
  }
  *out = p;
  return GS_OK;
}

void gs_model_part_free(gs_model *part) {
  if (!part)
    return;
  free(part->nodes);
  free(part->inits);
  free(part->inputs);
  free(part->outputs);
  gs_strmap_free(&part->init_index);
  free(part);
}

/* plan_stages.c - plans made in stages around a node whose output size
 * depends on computed values (plan_stages.h). */
#include "engine/plan_stages.h"

#include "base/error.h"
#include "base/strmap.h"
#include "engine/model_split.h"
#include "engine/op.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Plans of one stage kept for the shapes and values seen last. */
#define STAGE_PLANS 4

typedef struct kept_plan {
  const gs_model *model; /* the stage, or the If branch, it was made for */
  gs_plan *plan;
  gs_shape *shapes; /* one per input of the stage */
  gs_dtype *dtypes; /* likewise: a branch or an iteration may change them */
} kept_plan;

enum { HEAD, NODE, TAIL };


/* A value of one run, by name: the caller's inputs (borrowed) and what
 * the stages computed (owned until handed to the caller). */
typedef struct slot {
  gs_dtype dtype;
  gs_shape shape;
  size_t bytes;
  void *data;
  bool owned;
} slot;

typedef struct run_values {
  slot *slots;
  int n, cap;
  gs_strmap index;
  /* A Loop body's scope looks here for what it does not hold itself: its
   * own inputs' names never overwrite the graph's around it. */
  struct run_values *parent;
} run_values;

struct gs_plan_stages {
  const gs_model *model;
  const gs_node *node; /* the node cut around */
  gs_model *part[3];
  /* For an If node: its stage with the then and the else branch in its
   * place (gs_model_with_branch), made when first taken. */
  gs_model *branch[2];
  enum { CUT_ONLY, IF_NODE, LOOP_NODE, SCAN_NODE } kind; /* ops_control.c's, or other */
  /* What the node reads that is made of constants (an If's condition in an
   * expanded function, a Loop's trip count): computed once, kept. */
  struct run_values constants;
  gs_plan_options opt; /* input_values set for each planning */
  gs_plan *head;
  kept_plan kept[3][STAGE_PLANS]; /* most recently used first; [HEAD] unused */
};

static void values_free(run_values *rv) {
  for (int i = 0; i < rv->n; i++)
    if (rv->slots[i].owned)
      free(rv->slots[i].data);
  free(rv->slots);
  gs_strmap_free(&rv->index);
}

/* Adds a value; `data` is freed with rv when `owned`, also on failure. */
static int values_put(run_values *rv, const char *name, const gs_plan_value_info *info,
                      void *data, bool owned) {
  if (rv->n == rv->cap) {
    int cap = rv->cap ? 2 * rv->cap : 32;
    slot *grown = realloc(rv->slots, sizeof *grown * (size_t)cap);
    if (!grown) {
      if (owned)
        free(data);
      return gs_error(GS_ENOMEM, "out of memory running a plan in stages");
    }
    rv->slots = grown;
    rv->cap = cap;
  }
  rv->slots[rv->n] = (slot){.dtype = info->dtype, .shape = info->shape, .bytes = info->bytes,
                            .data = data, .owned = owned};
  int rc = gs_strmap_put(&rv->index, name, rv->n);
  if (rc < 0) {
    if (owned)
      free(data);
    return gs_error(GS_ENOMEM, "out of memory running a plan in stages");
  }
  rv->n++;
  return GS_OK;
}

static slot *values_get(run_values *rv, const char *name) {
  int i = gs_strmap_get(&rv->index, name);
  return i >= 0 ? &rv->slots[i] : rv->parent ? values_get(rv->parent, name) : NULL;
}

/* ---- creating ------------------------------------------------------------------------- */

int gs__plan_stages_create(const gs_model *m, int node, const gs_shape *shapes,
                           const gs_plan_options *opt, gs_plan_stages **out) {
  gs_plan_stages *st = calloc(1, sizeof *st);
  if (!st)
    return gs_error(GS_ENOMEM, "out of memory planning in stages");
  st->model = m;
  st->node = &m->nodes[node];
  const gs_op_def *op = gs_op_of(st->node);
  if (op && op->runs_graphs)
    st->kind = strcmp(op->name, "Loop") == 0   ? LOOP_NODE
               : strcmp(op->name, "Scan") == 0 ? SCAN_NODE
                                               : IF_NODE;
  gs_strmap_init(&st->constants.index);
  st->opt = *opt;
  st->opt.input_values = NULL;
  int rc = gs_model_cut(m, node, st->part);
  if (rc == 0)
    rc = gs_plan_create(st->part[HEAD], shapes, opt, &st->head);
  if (rc < 0) {
    gs__plan_stages_destroy(st);
    return rc;
  }
  *out = st;
  return GS_OK;
}

void gs__plan_stages_destroy(gs_plan_stages *st) {
  if (!st)
    return;
  for (int s = NODE; s <= TAIL; s++)
    for (int k = 0; k < STAGE_PLANS; k++) {
      gs_plan_destroy(st->kept[s][k].plan);
      free(st->kept[s][k].shapes);
      free(st->kept[s][k].dtypes);
    }
  gs_plan_destroy(st->head);
  for (int s = 0; s < 3; s++)
    gs_model_part_free(st->part[s]);
  for (int b = 0; b < 2; b++)
    gs_model_part_free(st->branch[b]);
  values_free(&st->constants);
  free(st);
}

gs_plan *gs__plan_stages_head(const gs_plan_stages *st) { return st->head; }

uint64_t gs__plan_stages_device_bytes(const gs_plan_stages *st) {
  uint64_t bytes = gs_plan_device_bytes(st->head);
  for (int s = NODE; s <= TAIL; s++)
    for (int k = 0; k < STAGE_PLANS; k++)
      if (st->kept[s][k].plan)
        bytes += gs_plan_device_bytes(st->kept[s][k].plan);
  return bytes;
}

/* ---- running ----------------------------------------------------------------------------- */

static bool same_inputs(const kept_plan *k, const gs_model *part, const gs_shape *shapes) {
  if (k->model != part)
    return false;
  for (int i = 0; i < part->n_inputs; i++)
    if (!gs_shape_equal(&k->shapes[i], &shapes[i]) || k->dtypes[i] != part->inputs[i].dtype)
      return false;
  return true;
}

/* The plan of `part` (stage s, or an If branch in its place) for these
 * inputs: kept, or made now and kept in place of the least recently used. */
static int stage_plan(gs_plan_stages *st, int s, gs_model *part, const gs_shape *shapes,
                      const void *const *ins, gs_plan **out) {
  if (s == HEAD) {
    *out = st->head;
    return GS_OK;
  }
  int n = part->n_inputs;
  kept_plan *kept = st->kept[s];
  /* A lone node's plan holds copies of its inputs (of any size) and fits
   * only the values it was made for, which change run to run: one is kept. */
  bool single_node = s == NODE && part == st->part[NODE];
  int room = single_node ? 1 : STAGE_PLANS;
  int k = 0;
  while (k < room && kept[k].plan &&
         !(same_inputs(&kept[k], part, shapes) && gs_plan_fits(kept[k].plan, ins)))
    k++;
  kept_plan found;
  if (k < room && kept[k].plan) {
    found = kept[k];
  } else {
    gs_plan_options opt = st->opt;
    opt.input_values = ins;
    found.model = part;
    found.shapes = malloc(sizeof(gs_shape) * (size_t)(n ? n : 1));
    found.dtypes = malloc(sizeof(gs_dtype) * (size_t)(n ? n : 1));
    if (!found.shapes || !found.dtypes) {
      free(found.shapes);
      free(found.dtypes);
      return gs_error(GS_ENOMEM, "out of memory planning in stages");
    }
    memcpy(found.shapes, shapes, sizeof(gs_shape) * (size_t)n);
    for (int i = 0; i < n; i++)
      found.dtypes[i] = part->inputs[i].dtype;
    int rc = single_node ? gs__plan_create_node(part, shapes, &opt, &found.plan)
                         : gs_plan_create(part, shapes, &opt, &found.plan);
    if (rc < 0) {
      free(found.shapes);
      free(found.dtypes);
      return rc;
    }
    k = room - 1;
    gs_plan_destroy(kept[k].plan);
    free(kept[k].shapes);
    free(kept[k].dtypes);
  }
  memmove(&kept[1], &kept[0], sizeof *kept * (size_t)k);
  kept[0] = found;
  *out = found.plan;
  return GS_OK;
}

static int branch_of(const slot *cond, const gs_node *n, int *out) {
  if (gs_shape_numel(&cond->shape) != 1 || cond->dtype == GS_DT_BYTES)
    return gs_error(GS_EINVAL, "node %s (If): the condition must be one value", n->name);
  *out = gs_elem_as_double(cond->dtype, cond->data, 0) != 0 ? 0 : 1;
  return GS_OK;
}

/* The inputs of `part` from the values so far, its crossing inputs'
 * types declared from them. Fills ins[] and shapes[] (room for its inputs). */
static int gather_inputs(gs_model *part, run_values *rv, const void **ins, gs_shape *shapes) {
  for (int i = 0; i < part->n_inputs; i++) {
    slot *v = values_get(rv, part->inputs[i].name);
    if (!v)
      return gs_error(GS_EINVAL, "a plan in stages misses value %s", part->inputs[i].name);
    part->inputs[i].dtype = v->dtype; /* declared now for what an earlier stage made */
    ins[i] = v->data;
    shapes[i] = v->shape;
  }
  return GS_OK;
}

/* A value the cut node reads that is made of constants (an expanded
 * function's condition, a Loop's trip count): the stage's copies of the
 * nodes that make it, planned and run once, and kept with the stages. */
static int make_constant(gs_plan_stages *st, run_values *rv, const char *name) {
  gs_value_info want = {.name = (char *)name, .dtype = GS_DT_INVALID, .rank = -1};
  gs_model only = {.n_outputs = 1, .outputs = &want};
  gs_model *made = NULL;
  gs_plan *plan = NULL;
  void *value = NULL;
  gs_plan_value_info info;
  int rc = gs_model_with_branch(st->part[NODE], &only, &made);
  int n_in = rc == 0 ? made->n_inputs : 0;
  const void **ins = calloc((size_t)n_in + 1, sizeof *ins);
  gs_shape *shapes = calloc((size_t)n_in + 1, sizeof *shapes);
  if (rc == 0 && (!ins || !shapes))
    rc = gs_error(GS_ENOMEM, "out of memory running a plan");
  if (rc == 0)
    rc = gather_inputs(made, rv, ins, shapes);
  gs_plan_options opt = st->opt;
  opt.input_values = ins;
  if (rc == 0)
    rc = gs_plan_create(made, shapes, &opt, &plan);
  if (rc == 0)
    rc = gs_plan_run_alloc(plan, ins, &value, &info);
  if (rc == 0)
    rc = values_put(&st->constants, name, &info, value, true);
  free(ins);
  free(shapes);
  gs_plan_destroy(plan);
  gs_model_part_free(made);
  return rc;
}

/* Input `name` of the cut node: computed before it, or made of constants. */
static slot *node_value(gs_plan_stages *st, run_values *rv, const char *name) {
  slot *v = values_get(rv, name);
  if (!v)
    v = values_get(&st->constants, name);
  if (!v && make_constant(st, rv, name) == 0)
    v = values_get(&st->constants, name);
  return v;
}

/* The If node's stage with the branch its condition chooses in its place. */
static int choose_branch(gs_plan_stages *st, run_values *rv, gs_model **out) {
  const gs_node *n = st->node;
  slot *cond = node_value(st, rv, n->inputs[0]);
  int b = 0, rc = cond ? branch_of(cond, n, &b) : gs_error_code();
  const char *names[2] = {"then_branch", "else_branch"};
  if (rc == 0 && !st->branch[b])
    rc = gs_model_with_branch(st->part[NODE], gs_node_attr(n, names[b])->g, &st->branch[b]);
  *out = rc == 0 ? st->branch[b] : NULL;
  return rc;
}

/* Runs `part` (stage s, or a graph of the cut node in its place) once on
 * the values so far: outs[] and info[] (room for its outputs) receive its
 * outputs, which the caller owns. */
static int run_part(gs_plan_stages *st, int s, gs_model *part, run_values *rv, void **outs,
                    gs_plan_value_info *info) {
  int n_in = part->n_inputs;
  const void **ins = calloc((size_t)n_in + 1, sizeof *ins);
  gs_shape *shapes = calloc((size_t)n_in + 1, sizeof *shapes);
  int rc = ins && shapes ? 0 : gs_error(GS_ENOMEM, "out of memory running a plan");
  if (rc == 0)
    rc = gather_inputs(part, rv, ins, shapes);
  gs_plan *plan = NULL;
  if (rc == 0)
    rc = stage_plan(st, s, part, shapes, ins, &plan);
  if (rc == 0)
    rc = gs_plan_run_alloc(plan, ins, outs, info);
  free(ins);
  free(shapes);
  return rc;
}

/* ---- Loop ---------------------------------------------------------------------------- */

/* A bound on iterations, so that a hostile trip count ends. */
#define LOOP_MAX_ITERATIONS 10000000 /* unless the plan's options say otherwise */

static int64_t loop_limit(const gs_plan_stages *st) {
  return st->opt.loop_limit > 0 ? st->opt.loop_limit : LOOP_MAX_ITERATIONS;
}

/* Sets value `name`, replacing (and freeing, when owned) what it held. */
static int values_set(run_values *rv, const char *name, const gs_plan_value_info *info,
                      void *data, bool owned) {
  int i = gs_strmap_get(&rv->index, name); /* this scope's own, never its parent's */
  if (i < 0)
    return values_put(rv, name, info, data, owned);
  slot *v = &rv->slots[i];
  if (v->owned && v->data != data)
    free(v->data);
  *v = (slot){.dtype = info->dtype, .shape = info->shape, .bytes = info->bytes, .data = data,
              .owned = owned};
  return GS_OK;
}

static int set_scalar(run_values *rv, const char *name, gs_dtype dt, int64_t value) {
  size_t size = gs_dtype_size(dt);
  void *data = malloc(size);
  if (!data)
    return gs_error(GS_ENOMEM, "out of memory running a loop");
  if (dt == GS_DT_INT64)
    memcpy(data, &value, size);
  else
    *(uint8_t *)data = value != 0;
  gs_plan_value_info info = {.dtype = dt, .shape = {.rank = 0}, .bytes = size};
  return values_set(rv, name, &info, data, true);
}

/* One scan output: each iteration's value, stacked. */
typedef struct stacked {
  char *data;
  size_t bytes, cap;
  int64_t count; /* iterations stacked */
  gs_plan_value_info each;
} stacked;

static int stack_append(stacked *sc, const gs_plan_value_info *info, const void *data,
                        const char *node) {
  if (sc->count == 0)
    sc->each = *info;
  else if (!gs_shape_equal(&sc->each.shape, &info->shape) || sc->each.dtype != info->dtype)
    return gs_error(GS_EINVAL, "node %s (Loop): a scan output changes shape between iterations",
                    node);
  if (sc->bytes + info->bytes > sc->cap) {
    size_t cap = (sc->cap ? 2 * sc->cap : 64) + info->bytes;
    char *grown = realloc(sc->data, cap);
    if (!grown)
      return gs_error(GS_ENOMEM, "out of memory stacking a scan output of node %s", node);
    sc->data = grown;
    sc->cap = cap;
  }
  if (info->bytes) /* an empty value may come with no buffer yet */
    memcpy(sc->data + sc->bytes, data, info->bytes);
  sc->bytes += info->bytes;
  sc->count++;
  return GS_OK;
}

/* The loop's trip count (-1: none) and first condition. */
static int loop_bounds(gs_plan_stages *st, run_values *rv, int64_t *trips, bool *go) {
  const gs_node *n = st->node;
  *trips = -1;
  *go = true;
  for (int k = 0; k < 2; k++) {
    if (!n->inputs[k][0])
      continue;
    slot *v = node_value(st, rv, n->inputs[k]);
    if (!v)
      return gs_error_code();
    if (gs_shape_numel(&v->shape) != 1 || v->dtype == GS_DT_BYTES)
      return gs_error(GS_EINVAL, "node %s (Loop): %s must be one value", n->name,
                      k ? "cond" : "M");
    double x = gs_elem_as_double(v->dtype, v->data, 0);
    if (k == 0 && (v->dtype != GS_DT_INT64 || isnan(x)))
      return gs_error(GS_EINVAL, "node %s (Loop): M must be an int64, not %s", n->name,
                      gs_dtype_name(v->dtype));
    if (k == 0)
      *trips = x < 0 ? 0 : x > (double)loop_limit(st) ? loop_limit(st) + 1 : (int64_t)x;
    else
      *go = x != 0;
  }
  return GS_OK;
}

/* One iteration: the body on the current values; its carried outputs
 * become the next iteration's inputs, its scanned ones are stacked. */
static int loop_iteration(gs_plan_stages *st, gs_model *body, run_values *rv, int carried,
                          stacked *scans, bool *go) {
  int n_out = body->n_outputs, rc;
  void **outs = calloc((size_t)n_out + 1, sizeof *outs);
  gs_plan_value_info *info = calloc((size_t)n_out + 1, sizeof *info);
  rc = outs && info ? run_part(st, NODE, body, rv, outs, info)
                    : gs_error(GS_ENOMEM, "out of memory running a loop");
  if (rc == 0) {
    if (gs_shape_numel(&info[0].shape) != 1)
      rc = gs_error(GS_EINVAL, "node %s (Loop): the body's condition must be one value",
                    st->node->name);
    else
      *go = gs_elem_as_double(info[0].dtype, outs[0], 0) != 0;
  }
  for (int j = 0; rc == 0 && j < carried; j++) {
    rc = values_set(rv, body->inputs[2 + j].name, &info[1 + j], outs[1 + j], true);
    outs[1 + j] = NULL;
  }
  for (int k = 0; rc == 0 && k < n_out - 1 - carried; k++)
    rc = stack_append(&scans[k], &info[1 + carried + k], outs[1 + carried + k], st->node->name);
  for (int i = 0; outs && i < n_out; i++)
    free(outs[i]);
  free(outs);
  free(info);
  return rc;
}

/* Hands the loop's results on under the node's output names. */
static int loop_results(gs_plan_stages *st, gs_model *body, run_values *scope, run_values *rv,
                        int carried, stacked *scans, int64_t iterations) {
  const gs_node *n = st->node;
  int rc = 0;
  for (int j = 0; rc == 0 && j < carried; j++) {
    slot *v = values_get(scope, body->inputs[2 + j].name);
    gs_plan_value_info info = {.dtype = v->dtype, .shape = v->shape, .bytes = v->bytes};
    void *data = malloc(v->bytes ? v->bytes : 1);
    if (!data)
      return gs_error(GS_ENOMEM, "out of memory running a loop");
    if (v->bytes)
      memcpy(data, v->data, v->bytes);
    if (n->outputs[j][0])
      rc = values_put(rv, n->outputs[j], &info, data, true);
    else
      free(data);
  }
  for (int k = 0; rc == 0 && k < n->n_out - carried; k++) {
    stacked *sc = &scans[k];
    if (!n->outputs[carried + k][0])
      continue;
    /* Each iteration's value, or with none the body's declaration (its
     * unknown dimensions 0), under a new first axis of the iterations. */
    const gs_value_info *declared = &body->outputs[1 + carried + k];
    gs_shape each = sc->each.shape;
    if (iterations == 0) {
      each.rank = declared->rank > 0 ? declared->rank : 0;
      for (int d = 0; d < each.rank; d++)
        each.dims[d] = declared->dims[d] > 0 ? declared->dims[d] : 0;
    }
    if (each.rank + 1 > GS_MAX_DIMS)
      return gs_error(GS_ENOTSUP, "node %s (Loop): a scan output of rank %d", n->name,
                      each.rank + 1);
    gs_plan_value_info info = {.dtype = iterations ? sc->each.dtype : declared->dtype,
                               .bytes = sc->bytes, .shape = {.rank = each.rank + 1}};
    info.shape.dims[0] = iterations;
    memcpy(&info.shape.dims[1], each.dims, sizeof(int64_t) * (size_t)each.rank);
    if (info.dtype == GS_DT_INVALID)
      return gs_error(GS_ENOTSUP, "node %s (Loop) ran no iteration, and its body does not "
                                  "declare the type of scan output %d", n->name, k);
    void *data = sc->data ? sc->data : malloc(1);
    if (!data)
      return gs_error(GS_ENOMEM, "out of memory running a loop");
    rc = values_put(rv, n->outputs[carried + k], &info, data, true);
    sc->data = NULL;
  }
  return rc;
}

static int run_loop(gs_plan_stages *st, run_values *rv) {
  const gs_node *n = st->node;
  int carried = n->n_in - n->n_captured - 2, scanned = n->n_out - carried;
  int64_t trips;
  bool go;
  int rc = loop_bounds(st, rv, &trips, &go);
  if (rc == 0 && !st->branch[0])
    rc = gs_model_with_branch(st->part[NODE], gs_node_attr(n, "body")->g, &st->branch[0]);
  if (rc < 0)
    return rc;
  gs_model *body = st->branch[0];
  run_values scope = {.parent = rv};
  gs_strmap_init(&scope.index);
  for (int j = 0; rc == 0 && j < carried; j++) {
    slot *v = node_value(st, rv, n->inputs[2 + j]);
    if (!v) {
      rc = gs_error_code();
      break;
    }
    gs_plan_value_info info = {.dtype = v->dtype, .shape = v->shape, .bytes = v->bytes};
    rc = values_set(&scope, body->inputs[2 + j].name, &info, v->data, false);
  }
  stacked *scans = calloc((size_t)scanned + 1, sizeof *scans);
  if (rc == 0 && !scans)
    rc = gs_error(GS_ENOMEM, "out of memory running a loop");
  int64_t it = 0;
  for (; rc == 0 && go && (trips < 0 || it < trips); it++) {
    if (it >= loop_limit(st))
      rc = gs_error(GS_ENOTSUP, "node %s (Loop) runs past %lld iterations", n->name,
                    (long long)loop_limit(st));
    if (rc == 0)
      rc = set_scalar(&scope, body->inputs[0].name, GS_DT_INT64, it);
    if (rc == 0)
      rc = set_scalar(&scope, body->inputs[1].name, GS_DT_BOOL, 1);
    if (rc == 0)
      rc = loop_iteration(st, body, &scope, carried, scans, &go);
  }
  if (rc == 0)
    rc = loop_results(st, body, &scope, rv, carried, scans, it);
  for (int k = 0; scans && k < scanned; k++)
    free(scans[k].data);
  free(scans);
  values_free(&scope);
  return rc;
}

/* ---- Scan ----------------------------------------------------------------------------- */

/* A value seen along one of its axes: `outer` runs of `len` blocks of
 * `inner` bytes. */
typedef struct axis_view {
  int axis;
  size_t outer, inner;
  int64_t len;
} axis_view;

static axis_view view_along(const gs_shape *s, int axis, gs_dtype dt) {
  axis_view v = {.axis = axis, .outer = 1, .inner = gs_dtype_size(dt), .len = s->dims[axis]};
  for (int d = 0; d < axis; d++)
    v.outer *= (size_t)s->dims[d];
  for (int d = axis + 1; d < s->rank; d++)
    v.inner *= (size_t)s->dims[d];
  return v;
}

/* Position p along the view's axis: copied out of `whole` into `part`, or
 * (put) from `part` into `whole`. */
static void copy_position(const axis_view *v, int64_t p, char *whole, char *part, bool put) {
  for (size_t o = 0; o < v->outer; o++) {
    char *w = whole + (o * (size_t)v->len + (size_t)p) * v->inner, *e = part + o * v->inner;
    if (v->inner)
      memcpy(put ? w : e, put ? e : w, v->inner);
  }
}

/* Entry i of the INTS attribute `name` (its length checked at load), or 0
 * when the node has none. */
static int64_t scan_attr(const gs_node *n, const char *name, int i) {
  const gs_attr *a = gs_node_attr(n, name);
  return a ? a->ints[i] : 0;
}

/* Entry i of axis attribute `name`, made non-negative for rank `rank`. */
static int scan_axis(const gs_node *n, const char *name, int i, int rank, int *axis) {
  int64_t a = scan_attr(n, name, i);
  if (a < -rank || a >= rank)
    return gs_error(GS_EINVAL, "node %s (Scan): %s[%d] is %lld, outside rank %d", n->name, name,
                    i, (long long)a, rank);
  *axis = (int)(a < 0 ? a + rank : a);
  return GS_OK;
}

typedef struct scan_run {
  int states, m, k; /* state values, sequences, scan outputs */
  int64_t len;      /* positions along the scan axes */
  slot **seq;       /* the m sequences */
  axis_view *in;    /* each sequence along its scan axis */
  axis_view *out;   /* each scan output along its axis, once the first slice came */
  gs_plan_value_info *out_info;
  char **out_data;
} scan_run;

/* The sequences, each seen along its scan axis; all have one length. */
static int scan_sequences(gs_plan_stages *st, run_values *rv, scan_run *sr) {
  const gs_node *n = st->node;
  for (int j = 0; j < sr->m; j++) {
    slot *v = node_value(st, rv, n->inputs[sr->states + j]);
    if (!v)
      return gs_error_code();
    if (v->shape.rank == 0)
      return gs_error(GS_EINVAL, "node %s (Scan): sequence %d is a scalar", n->name, j);
    int axis = 0, rc = scan_axis(n, "scan_input_axes", j, v->shape.rank, &axis);
    if (rc < 0)
      return rc;
    sr->seq[j] = v;
    sr->in[j] = view_along(&v->shape, axis, v->dtype);
    if (j > 0 && sr->in[j].len != sr->len)
      return gs_error(GS_EINVAL, "node %s (Scan): sequences of %lld and %lld positions",
                      n->name, (long long)sr->len, (long long)sr->in[j].len);
    sr->len = sr->in[j].len;
  }
  return GS_OK;
}

/* Iteration t's slice of each sequence, set as the body's input. */
static int scan_slices(gs_plan_stages *st, gs_model *body, run_values *scope, scan_run *sr,
                       int64_t t) {
  for (int j = 0; j < sr->m; j++) {
    const slot *v = sr->seq[j];
    const axis_view *view = &sr->in[j];
    int64_t p = scan_attr(st->node, "scan_input_directions", j) ? sr->len - 1 - t : t;
    gs_plan_value_info info = {.dtype = v->dtype, .shape = {.rank = v->shape.rank - 1},
                               .bytes = view->outer * view->inner};
    for (int d = 0, k = 0; d < v->shape.rank; d++)
      if (d != view->axis)
        info.shape.dims[k++] = v->shape.dims[d];
    void *part = malloc(info.bytes ? info.bytes : 1);
    if (!part)
      return gs_error(GS_ENOMEM, "out of memory slicing a Scan's sequence");
    copy_position(view, p, v->data, part, false);
    int rc = values_set(scope, body->inputs[sr->states + j].name, &info, part, true);
    if (rc < 0)
      return rc;
  }
  return GS_OK;
}

/* Scan output i's whole value, shaped and allocated from its first slice
 * (or, with no positions, from the body's declaration). */
static int scan_output_start(const gs_node *n, const gs_value_info *declared, scan_run *sr,
                             int i, const gs_plan_value_info *slice) {
  gs_plan_value_info *info = &sr->out_info[i];
  gs_shape each;
  if (slice) {
    each = slice->shape;
    info->dtype = slice->dtype;
  } else {
    each.rank = declared->rank > 0 ? declared->rank : 0;
    for (int d = 0; d < each.rank; d++)
      each.dims[d] = declared->dims[d] > 0 ? declared->dims[d] : 0;
    info->dtype = declared->dtype;
    if (info->dtype == GS_DT_INVALID)
      return gs_error(GS_ENOTSUP, "node %s (Scan) has no positions, and its body does not "
                                  "declare the type of scan output %d", n->name, i);
  }
  if (each.rank + 1 > GS_MAX_DIMS)
    return gs_error(GS_ENOTSUP, "node %s (Scan): a scan output of rank %d", n->name,
                    each.rank + 1);
  int axis = 0, rc = scan_axis(n, "scan_output_axes", i, each.rank + 1, &axis);
  if (rc < 0)
    return rc;
  info->shape.rank = each.rank + 1;
  for (int d = 0, k = 0; d < info->shape.rank; d++)
    info->shape.dims[d] = d == axis ? sr->len : each.dims[k++];
  sr->out[i] = view_along(&info->shape, axis, info->dtype);
  info->bytes = sr->out[i].outer * sr->out[i].inner * (size_t)sr->len;
  if (!(sr->out_data[i] = malloc(info->bytes ? info->bytes : 1)))
    return gs_error(GS_ENOMEM, "out of memory for a Scan's output");
  return GS_OK;
}

/* Places iteration t's slice of scan output i. */
static int scan_output_put(const gs_node *n, const gs_value_info *declared, scan_run *sr, int i,
                           int64_t t, const gs_plan_value_info *slice, void *data) {
  if (!sr->out_data[i]) {
    int rc = scan_output_start(n, declared, sr, i, slice);
    if (rc < 0)
      return rc;
  }
  const axis_view *v = &sr->out[i];
  if (slice->dtype != sr->out_info[i].dtype || slice->bytes != v->outer * v->inner)
    return gs_error(GS_EINVAL, "node %s (Scan): scan output %d changes shape between "
                               "iterations", n->name, i);
  int64_t p = scan_attr(n, "scan_output_directions", i) ? sr->len - 1 - t : t;
  copy_position(v, p, sr->out_data[i], data, true);
  return GS_OK;
}

/* One iteration: the body on the states and this position's slices; its
 * states become the next iteration's, its scan outputs are placed. */
static int scan_iteration(gs_plan_stages *st, gs_model *body, run_values *scope, scan_run *sr,
                          int64_t t) {
  int n_out = body->n_outputs;
  void **outs = calloc((size_t)n_out + 1, sizeof *outs);
  gs_plan_value_info *info = calloc((size_t)n_out + 1, sizeof *info);
  int rc = outs && info ? scan_slices(st, body, scope, sr, t)
                        : gs_error(GS_ENOMEM, "out of memory running a Scan");
  if (rc == 0)
    rc = run_part(st, NODE, body, scope, outs, info);
  for (int j = 0; rc == 0 && j < sr->states; j++) {
    rc = values_set(scope, body->inputs[j].name, &info[j], outs[j], true);
    outs[j] = NULL;
  }
  for (int i = 0; rc == 0 && i < sr->k; i++)
    rc = scan_output_put(st->node, &body->outputs[sr->states + i], sr, i, t,
                         &info[sr->states + i], outs[sr->states + i]);
  for (int i = 0; outs && i < n_out; i++)
    free(outs[i]);
  free(outs);
  free(info);
  return rc;
}

/* Hands the final states and the scan outputs on under the node's names. */
static int scan_results(gs_plan_stages *st, gs_model *body, run_values *scope, run_values *rv,
                        scan_run *sr) {
  const gs_node *n = st->node;
  for (int j = 0; j < sr->states; j++) {
    slot *v = values_get(scope, body->inputs[j].name);
    gs_plan_value_info info = {.dtype = v->dtype, .shape = v->shape, .bytes = v->bytes};
    void *data = n->outputs[j][0] ? malloc(v->bytes ? v->bytes : 1) : NULL;
    if (n->outputs[j][0] && !data)
      return gs_error(GS_ENOMEM, "out of memory running a Scan");
    if (data && v->bytes)
      memcpy(data, v->data, v->bytes);
    int rc = data ? values_put(rv, n->outputs[j], &info, data, true) : 0;
    if (rc < 0)
      return rc;
  }
  for (int i = 0; i < sr->k; i++) {
    int rc = sr->out_data[i] ? 0
                             : scan_output_start(n, &body->outputs[sr->states + i], sr, i, NULL);
    if (rc == 0 && n->outputs[sr->states + i][0])
      rc = values_put(rv, n->outputs[sr->states + i], &sr->out_info[i], sr->out_data[i], true);
    else if (rc == 0)
      free(sr->out_data[i]);
    sr->out_data[i] = NULL;
    if (rc < 0)
      return rc;
  }
  return GS_OK;
}

static int run_scan(gs_plan_stages *st, run_values *rv) {
  const gs_node *n = st->node;
  scan_run sr = {.m = (int)gs_attr_int(n, "num_scan_inputs", 1)};
  sr.states = n->n_in - n->n_captured - sr.m;
  sr.k = n->n_out - sr.states;
  int rc = 0;
  if (!st->branch[0])
    rc = gs_model_with_branch(st->part[NODE], gs_node_attr(n, "body")->g, &st->branch[0]);
  if (rc < 0)
    return rc;
  gs_model *body = st->branch[0];
  sr.seq = calloc((size_t)sr.m, sizeof *sr.seq);
  sr.in = calloc((size_t)sr.m, sizeof *sr.in);
  sr.out = calloc((size_t)sr.k + 1, sizeof *sr.out);
  sr.out_info = calloc((size_t)sr.k + 1, sizeof *sr.out_info);
  sr.out_data = calloc((size_t)sr.k + 1, sizeof *sr.out_data);
  if (!sr.seq || !sr.in || !sr.out || !sr.out_info || !sr.out_data)
    rc = gs_error(GS_ENOMEM, "out of memory running a Scan");
  run_values scope = {.parent = rv};
  gs_strmap_init(&scope.index);
  if (rc == 0)
    rc = scan_sequences(st, rv, &sr);
  for (int j = 0; rc == 0 && j < sr.states; j++) {
    slot *v = node_value(st, rv, n->inputs[j]);
    gs_plan_value_info info = v ? (gs_plan_value_info){.dtype = v->dtype, .shape = v->shape,
                                                        .bytes = v->bytes}
                                : (gs_plan_value_info){0};
    rc = v ? values_set(&scope, body->inputs[j].name, &info, v->data, false) : gs_error_code();
  }
  for (int64_t t = 0; rc == 0 && t < sr.len; t++)
    rc = scan_iteration(st, body, &scope, &sr, t);
  if (rc == 0)
    rc = scan_results(st, body, &scope, rv, &sr);
  for (int i = 0; sr.out_data && i < sr.k; i++)
    free(sr.out_data[i]);
  free(sr.seq);
  free(sr.in);
  free(sr.out);
  free(sr.out_info);
  free(sr.out_data);
  values_free(&scope);
  return rc;
}

/* ---- stages ------------------------------------------------------------------------------- */

/* Runs stage s on the values so far, adding what it hands on. */
static int run_stage(gs_plan_stages *st, int s, run_values *rv) {
  bool graphs = s == NODE && st->kind != CUT_ONLY;
  if (graphs && st->kind == LOOP_NODE)
    return run_loop(st, rv);
  if (graphs && st->kind == SCAN_NODE)
    return run_scan(st, rv);
  gs_model *part = st->part[s];
  int rc = graphs ? choose_branch(st, rv, &part) : 0;
  if (rc < 0)
    return rc;
  int n_out = part->n_outputs;
  void **outs = calloc((size_t)n_out + 1, sizeof *outs);
  gs_plan_value_info *info = calloc((size_t)n_out + 1, sizeof *info);
  if (!outs || !info)
    rc = gs_error(GS_ENOMEM, "out of memory running a plan");
  if (rc == 0)
    rc = run_part(st, s, part, rv, outs, info);
  /* An If's outputs take the node's names; an omitted one is dropped. */
  for (int i = 0; rc == 0 && i < n_out; i++) {
    const char *name = graphs ? st->node->outputs[i] : part->outputs[i].name;
    if (name[0])
      rc = values_put(rv, name, &info[i], outs[i], true);
    else
      free(outs[i]);
    outs[i] = NULL;
  }
  for (int i = 0; outs && i < n_out; i++)
    free(outs[i]);
  free(outs);
  free(info);
  return rc;
}

/* Output i of the model: the computed value itself when it is handed out
 * once, else a copy. */
static int hand_out(run_values *rv, const gs_value_info *declared, void **out,
                    gs_plan_value_info *info) {
  slot *v = values_get(rv, declared->name);
  if (!v)
    return gs_error(GS_EINVAL, "graph output %s is produced by nothing", declared->name);
  *info = (gs_plan_value_info){.name = declared->name, .dtype = v->dtype, .shape = v->shape,
                               .bytes = v->bytes};
  if (v->owned) {
    *out = v->data;
    v->owned = false;
    return GS_OK;
  }
  if (!(*out = malloc(v->bytes ? v->bytes : 1)))
    return gs_error(GS_ENOMEM, "out of memory for output %s", declared->name);
  if (v->bytes)
    memcpy(*out, v->data, v->bytes);
  return GS_OK;
}

static int run_all(gs_plan_stages *st, const void *const *inputs, void **outputs,
                   gs_plan_value_info *info);

/* Stages nest (the stage after a cut is cut again, a branch holds cuts of
 * its own), each a few frames deeper: a bound keeps a hostile model from
 * exhausting the stack. ssdlite's 180 NonZero nodes nest 181 deep. */
#define MAX_NESTED_STAGES 1000
static __thread int nested_stages;

int gs__plan_stages_run(gs_plan_stages *st, const void *const *inputs, void **outputs,
                        gs_plan_value_info *info) {
  if (nested_stages >= MAX_NESTED_STAGES)
    return gs_error(GS_ENOTSUP, "%s is cut into stages more than %d deep",
                    st->model->path ? st->model->path : "the model", MAX_NESTED_STAGES);
  nested_stages++;
  int rc = run_all(st, inputs, outputs, info);
  nested_stages--;
  return rc;
}

static int run_all(gs_plan_stages *st, const void *const *inputs, void **outputs,
                   gs_plan_value_info *info) {
  const gs_model *m = st->model;
  run_values rv = {0};
  gs_strmap_init(&rv.index);
  int rc = 0;
  for (int i = 0; rc == 0 && i < m->n_inputs; i++) {
    gs_plan_value_info in;
    gs_plan_input(st->head, i, &in);
    rc = values_put(&rv, m->inputs[i].name, &in, (void *)inputs[i], false);
  }
  for (int s = HEAD; rc == 0 && s <= TAIL; s++)
    rc = run_stage(st, s, &rv);
  for (int i = 0; i < m->n_outputs; i++)
    outputs[i] = NULL;
  for (int i = 0; rc == 0 && i < m->n_outputs; i++)
    rc = hand_out(&rv, &m->outputs[i], &outputs[i], &info[i]);
  for (int i = 0; rc < 0 && i < m->n_outputs; i++) {
    free(outputs[i]);
    outputs[i] = NULL;
  }
  values_free(&rv);
  return rc;
}

/* plan.c - builds and runs plans. A plan fixes every shape of a model for
 * given input shapes, computes while planning what does not depend on the
 * inputs (constant folding), fuses MatMul+Add, Conv+BatchNormalization and
 * a following Relu, places every intermediate tensor in one arena by
 * liveness, uploads the weights once, and runs as a list of kernel launches
 * on one stream. */
#include "engine/engine.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/plan_internal.h"
#include "engine/plan_chain.h"
#include "engine/plan_stages.h"
#include "engine/weight_set.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ARENA_ALIGN 64

/* ---- values ---------------------------------------------------------------------- */

int gs__plan_add_value(gs_plan *p, const char *name, gs_dtype dt, const gs_shape *shape) {
  if (p->n_values == p->cap_values) {
    int cap = p->cap_values ? 2 * p->cap_values : 64;
    value *grown = realloc(p->values, sizeof *grown * (size_t)cap);
    if (!grown)
      return gs_error(GS_ENOMEM, "out of memory planning");
    p->values = grown;
    p->cap_values = cap;
  }
  int64_t n = gs_shape_numel(shape);
  size_t es = gs_dtype_size(dt);
  if (n < 0 || (es && (uint64_t)n > SIZE_MAX / 4 / es))
    return gs_error(GS_EINVAL, "value %s would have an impossible size", name);
  value *v = &p->values[p->n_values];
  *v = (value){.name = name, .dtype = dt, .shape = *shape, .bytes = (size_t)n * es, .def = -1,
               .last_use = -1, .offset = -1, .alias_of = -1};
  int rc = gs_strmap_put(&p->index, name, p->n_values);
  if (rc < 0)
    return rc;
  return p->n_values++;
}

static int find_value(const gs_plan *p, const char *name) { return gs_strmap_get(&p->index, name); }

/* ---- fp16, bf16 and fp64 ------------------------------------------------------------ */

/* Converts known float32 value v to the plan's float type (a copy it owns). */
static int value_to_float_type(gs_plan *p, int v) {
  value *val = &p->values[v];
  if (val->dtype != GS_DT_FLOAT32 || gs_strmap_get(&p->keep_f32, val->name) >= 0)
    return 0;
  int64_t n = gs_shape_numel(&val->shape);
  size_t es = gs_dtype_size(p->float_type);
  void *out = malloc(es * (size_t)(n ? n : 1));
  if (!out)
    return gs_error(GS_ENOMEM, "out of memory converting %s to %s", val->name,
                    gs_dtype_name(p->float_type));
  const float *f = val->data;
  for (int64_t i = 0; i < n; i++) {
    if (p->float_type == GS_DT_FLOAT64)
      ((double *)out)[i] = f[i];
    else
      ((uint16_t *)out)[i] =
          p->float_type == GS_DT_FLOAT16 ? gs_f32_to_f16(f[i]) : gs_f32_to_bf16(f[i]);
  }
  if (val->owns_data)
    free((void *)val->data);
  val->data = out;
  val->owns_data = true;
  val->dtype = p->float_type;
  val->bytes = (size_t)n * es;
  return 0;
}

/* Adds a Cast step from value `from` to a new value of type `to`, named
 * `name` (the name then refers to the new value). Returns its index. */
static int add_cast(gs_plan *p, int from, gs_dtype to, const char *name) {
  gs_op_call *c = calloc(1, sizeof *c);
  char *owned = strdup(name);
  if (!c || !owned) {
    free(c);
    free(owned);
    return gs_error(GS_ENOMEM, "out of memory planning a cast");
  }
  c->op_type = "Cast";
  c->node_name = owned;
  c->owns_node_name = true;
  c->n_in = c->n_out = 1;
  c->in[0] = (gs_tensor_desc){.dtype = p->values[from].dtype, .shape = p->values[from].shape};
  c->out[0] = (gs_tensor_desc){.dtype = to, .shape = p->values[from].shape};
  gs_cast_attrs *a = gs_op_attrs(c, sizeof *a);
  c->state = calloc(1, sizeof *c->state);
  int v = a && c->state ? gs__plan_add_value(p, owned, to, &c->out[0].shape) : GS_ENOMEM;
  if (v < 0) {
    free(c->state);
    free(c->attrs);
    free(c);
    return v < 0 && v != GS_ENOMEM ? v : gs_error(GS_ENOMEM, "out of memory planning a cast");
  }
  a->to = to;
  p->values[v].from_inputs = p->values[from].from_inputs;
  step *s = &p->steps[p->n_steps++];
  memset(s, 0, sizeof *s);
  s->call = c;
  for (int i = 0; i < GS_OP_MAX_IO; i++)
    s->in[i] = s->out[i] = -1;
  s->in[0] = from;
  s->out[0] = v;
  return v;
}

/* ---- building steps ----------------------------------------------------------------- */

void gs__plan_free_call(gs_op_call *c) {
  if (!c)
    return;
  if (c->owns_node_name)
    free((void *)c->node_name);
  if (c->state && c->state->free)
    c->state->free(c->state->ptr);
  free(c->state);
  free(c->attrs);
  free(c);
}

/* Whether every output of a call is empty: its kernel has nothing to do,
 * and is not run (its operands may have no memory at all). */
static bool call_is_empty(const gs_op_call *c) {
  for (int i = 0; i < c->n_out; i++)
    if (gs_shape_numel(&c->out[i].shape) > 0)
      return false;
  return true;
}

/* Runs a CPU kernel on host data now (constant folding). */
static int run_on_host(const gs_op_call *c, const void *const *in, void *const *out) {
  const gs_host_kernel *k = gs_host_kernel_find(c->op_type);
  if (!k)
    return gs_error(GS_ENOTSUP, "no CPU kernel for %s to fold node %s", c->op_type, c->node_name);
  void *ptrs[GS_OP_MAX_IO * 2];
  for (int i = 0; i < c->n_in; i++)
    ptrs[i] = (void *)in[i];
  for (int i = 0; i < c->n_out; i++)
    ptrs[c->n_in + i] = out[i];
  return gs_host_kernel_run(k, &c, sizeof c, ptrs, c->n_in + c->n_out);
}

/* Folding computes on the host, so the host's memory bounds what it may make. */
static uint64_t host_memory_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : (uint64_t)1 << 32;
}

static int plan_node(gs_plan *p, const gs_node *node) {
  const gs_op_def *op = gs_op_of(node);
  gs_op_call *c = calloc(1, sizeof *c);
  if (!c)
    return gs_error(GS_ENOMEM, "out of memory planning node %s", node->name);
  c->op_type = op->name;
  c->node_name = node->name;
  c->n_in = node->n_in;
  c->n_out = node->n_out;
  int in_idx[GS_OP_MAX_IO], out_idx[GS_OP_MAX_IO];
  bool all_known = true;
  for (int i = 0; i < node->n_in; i++) {
    in_idx[i] = node->inputs[i][0] ? find_value(p, node->inputs[i]) : -1;
    if (in_idx[i] < 0) {
      c->in[i].dtype = GS_DT_INVALID;
      continue;
    }
    const value *v = &p->values[in_idx[i]];
    if (v->dtype == GS_DT_BYTES && !gs_op_moves_bytes(op->name)) {
      gs__plan_free_call(c);
      return gs_error(GS_ENOTSUP, "node %s: %s does not take BYTES (string) tensors such as %s; "
                                  "strings can only be moved (Identity, Reshape, Transpose, "
                                  "Concat, Split, Slice, Gather and the like)",
                      node->name, op->name, v->name);
    }
    c->in[i].dtype = v->dtype;
    c->in[i].shape = v->shape;
    c->in_data[i] = v->data;
    if (!v->data && v->bytes)
      all_known = false;
    if (!v->data && !v->bytes)
      c->in_data[i] = ""; /* an empty tensor is known: it has no values */
  }
  gs_op_wanted_input(); /* clear what an earlier node left */
  int rc = op->infer(c, node);
  if (rc < 0) {
    int w = gs_op_wanted_input();
    if (op->runs_graphs) {
      p->wanting_node = (int)(node - p->model->nodes);
      p->must_cut = true;
    } else if (w >= 0 && w < node->n_in && in_idx[w] >= 0) {
      p->wants |= p->values[in_idx[w]].from_inputs;
      p->wanting_node = (int)(node - p->model->nodes);
      p->wants_computed = !p->values[in_idx[w]].graph_input;
    }
    gs__plan_free_call(c);
    return rc;
  }
  uint64_t from = 0;
  for (int i = 0; i < node->n_in; i++)
    if (in_idx[i] >= 0)
      from |= p->values[in_idx[i]].from_inputs;
  /* fp16, bf16 or fp64: a cast to float32 inside the graph casts to the plan's float type. */
  if (p->float_type && strcmp(op->name, "Cast") == 0 && c->out[0].dtype == GS_DT_FLOAT32) {
    ((gs_cast_attrs *)c->attrs)->to = p->float_type;
    c->out[0].dtype = p->float_type;
  }
  /* Ops computed from shapes alone (Shape, Size) depend on no input's values. */
  if (op->fold)
    from = 0;
  bool folds = op->fold || (all_known && node->n_in > 0);
  for (int i = 0; i < node->n_out; i++) {
    out_idx[i] = -1;
    char *made = NULL; /* an omitted output of a step still needs its memory */
    if (!node->outputs[i][0] && !folds &&
        asprintf(&made, "%s:omitted-output-%d", node->name, i) < 0) {
      gs__plan_free_call(c);
      return gs_error(GS_ENOMEM, "out of memory planning node %s", node->name);
    }
    if (!node->outputs[i][0] && !made)
      continue;
    if ((rc = gs__plan_add_value(p, made ? made : node->outputs[i], c->out[i].dtype,
                        &c->out[i].shape)) < 0) {
      free(made);
      gs__plan_free_call(c);
      return rc;
    }
    out_idx[i] = rc;
    p->values[rc].from_inputs = from;
    p->values[rc].owns_name = made != NULL;
  }
  /* Known outputs: from the op's own fold, or by running its CPU kernel. */
  bool fold = folds;
  if (fold) {
    void *outs[GS_OP_MAX_IO] = {0};
    const void *ins[GS_OP_MAX_IO];
    /* Made of weights alone (a Transpose or Cast of one), it is the same in
     * every plan of the model: shareable, keyed by its first weight. */
    const void *share_key = NULL;
    bool shareable = all_known && node->n_in > 0;
    for (int i = 0; i < node->n_in; i++) {
      ins[i] = in_idx[i] >= 0 ? p->values[in_idx[i]].data : NULL;
      if (in_idx[i] >= 0 && !share_key)
        share_key = p->values[in_idx[i]].share_key;
      if (in_idx[i] >= 0 && !p->values[in_idx[i]].share_key)
        shareable = false;
    }
    rc = 0;
    uint64_t limit = host_memory_bytes();
    for (int i = 0; rc == 0 && i < node->n_out; i++) {
      size_t bytes = out_idx[i] >= 0 ? p->values[out_idx[i]].bytes
                                     : (size_t)gs_shape_numel(&c->out[i].shape) * gs_dtype_size(c->out[i].dtype);
      /* A hostile model can ask for a constant bigger than the machine. */
      if (bytes > limit / 2)
        rc = gs_error(GS_ENOMEM, "node %s would compute a constant of %zu bytes while planning; "
                                 "the host has %llu", node->name, bytes, (unsigned long long)limit);
      else if (!(outs[i] = calloc(1, bytes ? bytes : 1)))
        rc = gs_error(GS_ENOMEM, "out of memory folding node %s", node->name);
    }
    if (rc == 0)
      rc = op->fold             ? op->fold(c, node, outs[0])
           : call_is_empty(c) ? 0 /* nothing to compute */
                              : run_on_host(c, ins, outs);
    for (int i = 0; i < node->n_out; i++) {
      if (rc == 0 && out_idx[i] >= 0) {
        p->values[out_idx[i]].data = outs[i];
        p->values[out_idx[i]].owns_data = true;
        p->values[out_idx[i]].share_key = shareable ? share_key : NULL;
      } else {
        free(outs[i]);
      }
    }
    gs__plan_free_call(c);
    if (rc < 0)
      return rc;
    for (int i = 0; p->float_type && i < node->n_out; i++)
      if (out_idx[i] >= 0 && (rc = value_to_float_type(p, out_idx[i])) < 0)
        return rc;
    p->report.folded++;
    return 0;
  }
  step *s = &p->steps[p->n_steps];
  memset(s, 0, sizeof *s);
  s->node = node;
  s->call = c;
  for (int i = 0; i < GS_OP_MAX_IO; i++)
    s->in[i] = s->out[i] = -1;
  memcpy(s->in, in_idx, sizeof(int) * (size_t)node->n_in);
  memcpy(s->out, out_idx, sizeof(int) * (size_t)node->n_out);
  for (int i = 0; i < node->n_in; i++)
    c->in_data[i] = NULL; /* only meaningful while inferring */
  if (!(c->state = calloc(1, sizeof *c->state)))
    return gs_error(GS_ENOMEM, "out of memory planning node %s", node->name);
  p->n_steps++;
  return 0;
}

/* ---- fusion ----------------------------------------------------------------------------- */


/* ---- memory plan ----------------------------------------------------------------------- */

static int cmp_by_size(const void *a, const void *b, void *ctx) {
  const value *v = ctx;
  size_t x = v[*(const int *)a].bytes, y = v[*(const int *)b].bytes;
  return (x < y) - (x > y);
}

typedef struct interval {
  int64_t start, end;
} interval;

static int cmp_interval(const void *a, const void *b) {
  int64_t x = ((const interval *)a)->start, y = ((const interval *)b)->start;
  return (x > y) - (x < y);
}

/* Arena and weight offsets are multiples of ARENA_ALIGN. */
static size_t align_up(size_t v) { return (v + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }

/* The lowest offset where `need` bytes overlap none of the n places in
 * busy (sorted here by start): the first gap that fits. */
static int64_t first_fit(interval *busy, int n, size_t need) {
  qsort(busy, (size_t)n, sizeof *busy, cmp_interval);
  int64_t at = 0;
  for (int b = 0; b < n && need; b++) {
    if (at + (int64_t)need <= busy[b].start)
      break;
    if (busy[b].end > at)
      at = busy[b].end;
  }
  return at;
}

/* Ops whose output holds its input's bytes unchanged, only with another shape. */
static bool keeps_bytes(const step *st) {
  return gs__step_is(st, "Reshape") || gs__step_is(st, "Flatten") ||
         gs__step_is(st, "Squeeze") || gs__step_is(st, "Unsqueeze") ||
         (gs__step_is(st, "Identity") && st->call->n_out == 1);
}

/* Elementwise ops whose kernels may overwrite an input of the output's
 * shape (gs_device_caps.elementwise_in_place); SqueezeExcite, which only
 * the CPU runs, reads all of x before it writes. */
static bool elementwise(const step *st) {
  static const char *const ops[] = {
      "Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish",
      "Tanh", "Gelu", "Erf", "Exp", "Log", "Sqrt", "Neg", "Abs", "Reciprocal", "Softplus",
      "Elu", "Selu", "Clip", "SqueezeExcite", NULL};
  for (int i = 0; ops[i]; i++)
    if (gs__step_is(st, ops[i]))
      return true;
  return false;
}

/* Whether step s's output may take the place of its input k, which dies
 * there: same bytes, type, shape and layout, neither a graph input nor a
 * graph output (the caller may bind its own buffers to those). */
static bool may_take_place(const gs_plan *p, int s, int k) {
  const step *st = &p->steps[s];
  int in = st->in[k], out = st->out[0];
  if (in < 0 || out < 0)
    return false;
  const value *vi = &p->values[in], *vo = &p->values[out];
  return vi->in_arena && !vi->data && !vi->graph_input && !vo->graph_output &&
         vi->last_use == s && vi->bytes == vo->bytes && vi->dtype == vo->dtype &&
         vi->dtype != GS_DT_BYTES && vi->blocked == vo->blocked;
}

/* The value that owns v's place in the arena (v itself, or the value it
 * shares a place with). */
static int root_of(const gs_plan *p, int v) {
  return p->values[v].alias_of >= 0 ? p->values[v].alias_of : v;
}

/* Value out of step s shares in's place in the arena from now on (at
 * the same bytes, also where in is a view). */
static void share_place(gs_plan *p, int s, int in, int out) {
  value *vo = &p->values[out];
  int root = root_of(p, in);
  value *vr = &p->values[root];
  vo->alias_of = root;
  vo->view_offset = p->values[in].view_offset;
  int until = vo->last_use > s ? vo->last_use : s;
  if (vr->last_use < until)
    vr->last_use = until;
}

/* An elementwise step on a device whose kernels allow it writes over an
 * input that dies there and has the output's shape: one tensor fewer in
 * the arena, and no output lines to bring into the cache. Nothing else in
 * that place may be read later (a Slice's view of it), nor by the step
 * itself (a view read beside it, broadcast, would be read after its
 * bytes were written); the input read twice (Mul(x, x)) is fine: the
 * kernels read element i of every input before writing it. (A step that
 * falls back to the CPU copies its inputs out before its output comes
 * back.) */
static bool overwrite_input(gs_plan *p, int s) {
  const step *st = &p->steps[s];
  const gs_op_call *c = st->call;
  if (st->dead || c->n_out != 1 || !elementwise(st))
    return false;
  for (int k = 0; k < c->n_in; k++) {
    int in = st->in[k];
    if (!may_take_place(p, s, k) || !gs_shape_equal(&c->in[k].shape, &c->out[0].shape) ||
        !gs_shape_equal(&p->values[in].shape, &p->values[st->out[0]].shape) ||
        p->values[root_of(p, in)].last_use != s)
      continue;
    bool alone = true;
    for (int j = 0; j < c->n_in; j++) {
      int o = st->in[j];
      alone = alone && (o < 0 || o == in || root_of(p, o) != root_of(p, in));
    }
    if (!alone)
      continue;
    share_place(p, s, in, st->out[0]);
    p->report.overwritten++;
    return true;
  }
  return false;
}

/* Slice step s whose output is one contiguous run of its input's bytes
 * (outer dims of one, then a range of one dim, then whole dims: a channel
 * split at batch 1), starting at a multiple of ARENA_ALIGN: its offset in
 * bytes, or -1. */
static int64_t contiguous_slice(const gs_plan *p, int s) {
  const step *st = &p->steps[s];
  const gs_op_call *c = st->call;
  if (!gs__step_is(st, "Slice") || st->dead || c->n_out != 1 || st->in[0] < 0 ||
      st->out[0] < 0)
    return -1;
  const gs_slice_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  int r = xs->rank, d = r - 1;
  if (ys->rank != r || r < 1 || gs_shape_numel(ys) <= 0)
    return -1;
  while (d > 0 && ys->dims[d] == xs->dims[d] && a->start[d] == 0 && a->step[d] == 1)
    d--; /* dims after d are whole */
  if (ys->dims[d] > 1 && a->step[d] != 1)
    return -1;
  int64_t offset = 0, stride = (int64_t)gs_dtype_size(c->in[0].dtype);
  for (int k = r - 1; k >= 0; k--) {
    if (k < d && ys->dims[k] != 1)
      return -1;
    offset += a->start[k] * stride;
    stride *= xs->dims[k];
  }
  return offset % ARENA_ALIGN == 0 ? offset : -1;
}

/* A Slice that reads a contiguous part of a value computed in the arena
 * (contiguous_slice) copies nothing: its output is a view of that part,
 * and the value's place lives as long as the view. Never of a graph input
 * or output (the caller's buffers may stand in for their places), of a
 * blocked value, or of strings. */
static bool slice_view(gs_plan *p, int s) {
  step *st = &p->steps[s];
  int64_t offset = contiguous_slice(p, s);
  if (offset < 0)
    return false;
  int in = st->in[0], out = st->out[0];
  const value *vi = &p->values[in], *vo = &p->values[out];
  const value *vr = &p->values[root_of(p, in)];
  if (!vi->in_arena || vi->data || vi->graph_input || vi->blocked || vr->graph_output ||
      vo->graph_output || vo->blocked || vi->dtype == GS_DT_BYTES || vo->dtype != vi->dtype)
    return false;
  share_place(p, s, in, out);
  p->values[out].view_offset = vi->view_offset + offset;
  st->in_place = true;
  p->report.in_place++;
  p->report.slice_views++;
  return true;
}

/* A step that only reshapes a value that dies there writes nothing: its
 * output takes the input's place in the arena, which lives as long as
 * either does (a channel shuffle's Reshape, Transpose, Reshape copies once,
 * not three times). A Slice of a contiguous part is a view of it
 * (slice_view), and an elementwise step may write over its input
 * (overwrite_input). Counts them in the report. */
static void share_places(gs_plan *p, bool overwrite) {
  for (int s = 0; s < p->n_steps; s++) {
    step *st = &p->steps[s];
    if (st->host_section) /* its kernels run on the host, on host copies */
      continue;
    if ((overwrite && overwrite_input(p, s)) || slice_view(p, s))
      continue;
    if (!keeps_bytes(st) || !may_take_place(p, s, 0))
      continue;
    share_place(p, s, st->in[0], st->out[0]);
    st->in_place = true;
    p->report.in_place++;
  }
}

/* A value a host section's step makes for host sections' steps alone (not
 * a graph output): it lives in the host's staging, and needs no place in
 * the arena. */
static bool host_only(const gs_plan *p, int v) {
  const value *val = &p->values[v];
  if (val->def < 0 || val->graph_output || !p->steps[val->def].host_section)
    return false;
  for (int s = 0; s < p->n_steps; s++)
    for (int i = 0; !p->steps[s].host_section && i < p->steps[s].call->n_in; i++)
      if (p->steps[s].in[i] == v)
        return false;
  return true;
}

/* When each value is written and last read, before any shares a place. */
static void find_lifetimes(gs_plan *p) {
  for (int s = 0; s < p->n_steps; s++) {
    step *st = &p->steps[s];
    for (int i = 0; i < st->call->n_in; i++)
      if (st->in[i] >= 0)
        p->values[st->in[i]].last_use = s;
    for (int i = 0; i < st->call->n_out; i++)
      if (st->out[i] >= 0) {
        p->values[st->out[i]].def = s;
        p->values[st->out[i]].in_arena = true;
      }
  }
  for (int i = 0; i < p->n_values; i++)
    if (host_only(p, i))
      p->values[i].in_arena = false;
  for (int i = 0; i < p->model->n_inputs; i++) {
    value *v = &p->values[p->inputs[i]];
    v->in_arena = true;
    v->def = -1;
  }
  for (int i = 0; i < p->model->n_outputs; i++) {
    value *v = &p->values[p->outputs[i]];
    if (!v->data)
      v->last_use = p->n_steps;
  }
}

/* Greedy by size: the biggest tensors are placed first, each at the lowest
 * offset that no tensor alive at the same time overlaps. order and busy
 * have room for every value. */
static void place_arena(gs_plan *p, int *order, interval *busy) {
  int n = 0;
  for (int i = 0; i < p->n_values; i++)
    if (p->values[i].in_arena && !p->values[i].data && p->values[i].alias_of < 0) {
      if (p->values[i].last_use < p->values[i].def)
        p->values[i].last_use = p->values[i].def; /* written, never read */
      order[n++] = i;
    }
  qsort_r(order, (size_t)n, sizeof(int), cmp_by_size, p->values);
  uint64_t peak = 0, naive = 0;
  /* Without reuse: every tensor but a reshape's or a slice's that copies
   * nothing. */
  for (int i = 0; i < p->n_values; i++) {
    const value *v = &p->values[i];
    if (v->in_arena && !v->data && !(v->def >= 0 && p->steps[v->def].in_place))
      naive += align_up(v->bytes);
  }
  for (int a = 0; a < n; a++) {
    value *v = &p->values[order[a]];
    size_t need = align_up(v->bytes);
    /* The placed tensors alive at the same time, by offset; the first gap
     * that fits wins. */
    int n_busy = 0;
    for (int b = 0; b < a; b++) {
      value *w = &p->values[order[b]];
      if (w->bytes && !(w->last_use < v->def || v->last_use < w->def))
        busy[n_busy++] = (interval){w->offset, w->offset + (int64_t)align_up(w->bytes)};
    }
    int64_t at = first_fit(busy, n_busy, need);
    v->offset = at;
    if ((uint64_t)at + need > peak)
      peak = (uint64_t)at + need;
  }
  for (int i = 0; i < p->n_values; i++)
    p->values[i].offset = p->values[root_of(p, i)].offset + p->values[i].view_offset;
  p->report.arena_bytes = peak;
  p->report.naive_bytes = naive;
}

/* Lifetimes and shared places (with or without elementwise steps writing
 * over their inputs), from scratch. */
static void share_values(gs_plan *p, bool overwrite) {
  for (int i = 0; i < p->n_values; i++) {
    p->values[i].alias_of = -1;
    p->values[i].view_offset = 0;
    p->values[i].last_use = -1;
  }
  for (int s = 0; s < p->n_steps; s++)
    p->steps[s].in_place = false;
  p->report.in_place = p->report.overwritten = p->report.slice_views = 0;
  find_lifetimes(p);
  share_places(p, overwrite);
}

/* Elementwise steps writing over their inputs make fewer, longer-lived
 * tensors, which the greedy placement can pack worse: where any step
 * would, the arena is placed both ways and the smaller kept (with them on
 * a tie: their outputs then need no cache lines of their own). */
static int plan_memory(gs_plan *p) {
  int *order = malloc(sizeof(int) * (size_t)(p->n_values + 1));
  interval *busy = malloc(sizeof(interval) * (size_t)(p->n_values + 1));
  if (!order || !busy) {
    free(order);
    free(busy);
    return gs_error(GS_ENOMEM, "out of memory planning memory");
  }
  bool may_overwrite = p->device && gs_device_get_caps(p->device)->elementwise_in_place;
  share_values(p, may_overwrite);
  if (p->report.overwritten > 0) {
    share_values(p, false);
    place_arena(p, order, busy);
    uint64_t without = p->report.arena_bytes;
    share_values(p, true);
    place_arena(p, order, busy);
    if (p->report.arena_bytes > without) { /* rarer: place again as before */
      share_values(p, false);
      place_arena(p, order, busy);
    }
  } else {
    place_arena(p, order, busy);
  }
  free(order);
  free(busy);
  return 0;
}

/* Known values that steps read or the graph outputs go to the weights
 * buffer, or with a weight set, those it can share to the set. */
static int place_weights(gs_plan *p, uint64_t *total) {
  bool *used = calloc((size_t)p->n_values + 1, 1);
  if (!used)
    return gs_error(GS_ENOMEM, "out of memory placing weights");
  for (int s = 0; s < p->n_steps; s++) /* a host section's steps read the host copies */
    for (int i = 0; !p->steps[s].host_section && i < p->steps[s].call->n_in; i++)
      if (p->steps[s].in[i] >= 0)
        used[p->steps[s].in[i]] = true;
  for (int i = 0; i < p->model->n_outputs; i++)
    used[p->outputs[i]] = true;
  uint64_t at = 0;
  for (int i = 0; i < p->n_values; i++) {
    value *v = &p->values[i];
    if (!used[i] || !v->data)
      continue;
    if (p->weight_set && v->share_key && v->bytes) {
      v->in_set = true;
      p->report.shared_weights_bytes += v->bytes;
      continue;
    }
    v->offset = (int64_t)at;
    at += align_up(v->bytes);
  }
  free(used);
  *total = at;
  return 0;
}

/* ---- running on the CPU what the device cannot run ------------------------------------ */


/* The steps of the sections the options place on the host, on a device
 * whose memory is not the host's (where it is, every step runs there). */
static void mark_host_sections(gs_plan *p, const gs_plan_options *opt) {
  if (!opt || opt->n_host_sections <= 0 ||
      gs_device_get_caps(p->device)->host_visible_device_memory)
    return;
  for (int s = 0; s < p->n_steps; s++)
    p->steps[s].host_section = gs__plan_section_of(p->steps[s].call->node_name,
                                                   opt->n_host_sections, opt->host_sections) >= 0;
}

/* Marks a step that runs on the host: the device has no kernel for it, or
 * it is a step of one of the sections the options place there. */
static int plan_fallback(gs_plan *p, step *st) {
  const gs_op_call *c = st->call;
  bool host_section = st->host_section && !st->empty;
  if (!host_section && gs_device_supports_launch(p->device, c->op_type, &c, sizeof c))
    return 0;
  st->cpu_kernel = gs_host_kernel_find(c->op_type);
  if (!st->cpu_kernel)
    return host_section
               ? gs_error(GS_ENOTSUP, "the CPU has no kernel for %s (node %s)", c->op_type,
                          c->node_name)
               : gs_error(GS_ENOTSUP, "%s has no kernel for %s (node %s), and neither has the "
                                      "CPU", gs_device_get_info(p->device)->id, c->op_type,
                          c->node_name);
  if (c->n_in + c->n_out > GS_OP_MAX_IO) /* host[] and stays_on_host hold that many */
    return gs_error(GS_ENOTSUP, "node %s (%s) has %d inputs and outputs: over %d to run on "
                                "the CPU", c->node_name, c->op_type, c->n_in + c->n_out,
                    GS_OP_MAX_IO);
  st->on_cpu = true;
  if (host_section) {
    p->report.host_steps++;
    return 0;
  }
  p->report.cpu_fallback++;
  if (!strstr(p->report.fallback_ops, c->op_type) &&
      strlen(p->report.fallback_ops) + strlen(c->op_type) + 3 < sizeof p->report.fallback_ops) {
    if (p->report.fallback_ops[0])
      strcat(p->report.fallback_ops, ", ");
    strcat(p->report.fallback_ops, c->op_type);
  }
  return 0;
}

/* A step on the host that launches: it writes its outputs' host copies. */
static bool runs_on_host(const step *st) {
  return st->on_cpu && !st->dead && !st->empty && !st->in_place;
}

/* Per value, in one pass over the steps: how many steps on the host read
 * it, and whether a step the device runs reads it, or the caller (a graph
 * output, read from the device). An empty step reads nothing; an in-place
 * step's output is its input's place on the device. */
static void count_readers(const gs_plan *p, int *host_reads, bool *device_reads) {
  for (int v = 0; v < p->n_values; v++) {
    host_reads[v] = 0;
    device_reads[v] = p->values[v].graph_output;
  }
  for (int s = 0; s < p->n_steps; s++) {
    const step *st = &p->steps[s];
    bool host = runs_on_host(st);
    if (st->dead || (!host && st->empty))
      continue;
    for (int i = 0; i < st->call->n_in; i++) {
      int v = st->in[i], j = 0;
      while (j < i && st->in[j] != v) /* a step that reads v twice reads it once */
        j++;
      if (v < 0 || j < i)
        continue;
      if (host)
        host_reads[v]++;
      else
        device_reads[v] = true;
    }
  }
}

/* Whether value v keeps a place of its own in the staging: a host step
 * makes it for another to read, or two host steps or more read it (the
 * first copies it down, the others read that copy). */
static bool keeps_host_copy(const gs_plan *p, const int *host_reads, int v, bool made_on_host) {
  return !p->values[v].data && host_reads[v] > (made_on_host ? 0 : 1);
}

/* A kept value's host steps: the first that writes or reads it, and the last. */
typedef struct host_life {
  int v, from, to;
} host_life;

static int cmp_life_by_size(const void *a, const void *b, void *ctx) {
  const value *v = ctx;
  size_t x = v[((const host_life *)a)->v].bytes, y = v[((const host_life *)b)->v].bytes;
  return (x < y) - (x > y);
}

/* Places the values that keeps_host_copy in the staging as the arena's are
 * placed (place_arena): biggest first, each at the first offset where no
 * value whose host steps overlap its own lies. kept_at[v] gets the offset
 * plus one; *kept the peak, *naive their sum. */
static int place_kept(const gs_plan *p, const int *host_reads, size_t *kept_at, size_t *kept,
                      size_t *naive) {
  int *life_of = malloc(sizeof(int) * ((size_t)p->n_values + 1));
  host_life *life = malloc(sizeof *life * ((size_t)p->n_values + 1));
  interval *busy = malloc(sizeof *busy * ((size_t)p->n_values + 1));
  int n = 0;
  if (!life_of || !life || !busy) {
    free(life_of);
    free(life);
    free(busy);
    return gs_error(GS_ENOMEM, "out of memory planning the host's steps");
  }
  for (int i = 0; i < p->n_values; i++)
    life_of[i] = -1;
  for (int s = 0; s < p->n_steps; s++) {
    const step *st = &p->steps[s];
    for (int i = 0; runs_on_host(st) && i < st->call->n_in + st->call->n_out; i++) {
      bool made = i >= st->call->n_in;
      int v = made ? st->out[i - st->call->n_in] : st->in[i];
      if (v < 0 || p->values[v].data)
        continue;
      if (life_of[v] < 0 && keeps_host_copy(p, host_reads, v, made)) {
        life_of[v] = n;
        life[n++] = (host_life){v, s, s};
      }
      if (life_of[v] >= 0)
        life[life_of[v]].to = s;
    }
  }
  qsort_r(life, (size_t)n, sizeof *life, cmp_life_by_size, p->values);
  *kept = 0;
  for (int a = 0; a < n; a++)
    *naive += align_up(p->values[life[a].v].bytes);
  for (int a = 0; a < n; a++) {
    int n_busy = 0;
    for (int b = 0; b < a; b++)
      if (!(life[b].to < life[a].from || life[a].to < life[b].from))
        busy[n_busy++] = (interval){(int64_t)kept_at[life[b].v] - 1,
                                    (int64_t)(kept_at[life[b].v] - 1 +
                                              align_up(p->values[life[b].v].bytes))};
    size_t need = align_up(p->values[life[a].v].bytes);
    int64_t at = first_fit(busy, n_busy, need);
    kept_at[life[a].v] = (size_t)at + 1;
    if ((size_t)at + need > *kept)
      *kept = (size_t)at + need;
  }
  free(life_of);
  free(life);
  free(busy);
  return GS_OK;
}

/* The staging buffer of the steps on the host: each value that
 * keeps_host_copy keeps a place of its own while host steps use it
 * (place_kept); the other operands are copied into places each step
 * reuses, after the kept ones. A value copies once each way at most: down where a host step first reads it, up
 * where a host step makes it for a step on the device or the caller.
 * Operand places stay in host[] as offsets plus one until the buffer
 * exists (resolve_fallback). Counts the copies a run makes in the report. */
static int lay_out_staging(gs_plan *p, uint64_t *staging_bytes) {
  size_t *kept_at = calloc((size_t)p->n_values + 1, sizeof *kept_at); /* offset + 1; 0: none */
  bool *current = calloc((size_t)p->n_values + 1, 1); /* its kept copy holds it, so far */
  int *host_reads = malloc(sizeof(int) * ((size_t)p->n_values + 1));
  bool *device_reads = malloc((size_t)p->n_values + 1);
  size_t kept = 0, naive = 0, scratch = 0;
  int rc = GS_OK;
  if (!kept_at || !current || !host_reads || !device_reads)
    rc = gs_error(GS_ENOMEM, "out of memory planning the host's steps");
  if (rc == 0) {
    count_readers(p, host_reads, device_reads);
    rc = place_kept(p, host_reads, kept_at, &kept, &naive);
  }
  if (rc < 0) {
    free(kept_at);
    free(current);
    free(host_reads);
    free(device_reads);
    return rc;
  }
  for (int s = 0; s < p->n_steps; s++) {
    step *st = &p->steps[s];
    const gs_op_call *c = st->call;
    if (!st->on_cpu)
      continue;
    size_t at = 0;
    st->stays_on_host = 0;
    for (int i = 0; i < c->n_in + c->n_out; i++) {
      bool input = i < c->n_in;
      int v = input ? st->in[i] : st->out[i - c->n_in];
      st->host[i] = NULL;
      if (v < 0 || (input && p->values[v].data))
        continue; /* omitted, or constant: read from the host copy */
      bool stays = input ? current[v] : !device_reads[v];
      if (stays)
        st->stays_on_host |= 1ull << i;
      else if (runs_on_host(st) && p->values[v].bytes) {
        p->report.host_copies[input]++;
        p->report.host_copy_bytes[input] += p->values[v].bytes;
      }
      if (kept_at[v]) {
        current[v] = current[v] || runs_on_host(st);
        st->host[i] = (void *)(uintptr_t)kept_at[v];
        continue;
      }
      st->host[i] = (void *)(uintptr_t)(kept + at + 1);
      at += align_up(p->values[v].bytes);
    }
    scratch = at > scratch ? at : scratch;
  }
  free(kept_at);
  free(current);
  free(host_reads);
  free(device_reads);
  *staging_bytes = kept + scratch;
  p->report.host_staging_bytes = *staging_bytes;
  p->report.host_staging_naive_bytes = naive + scratch;
  return GS_OK;
}

static void resolve_fallback(gs_plan *p, step *st) {
  if (!st->on_cpu)
    return;
  char *base = gs_buffer_host_ptr(p->staging);
  const gs_op_call *c = st->call;
  for (int i = 0; i < c->n_in + c->n_out; i++) {
    int v = i < c->n_in ? st->in[i] : st->out[i - c->n_in];
    if (v < 0)
      continue;
    if (i < c->n_in && p->values[v].data)
      st->host[i] = (void *)p->values[v].data;
    else
      st->host[i] = base + ((uintptr_t)st->host[i] - 1);
  }
}

/* The host function of a fallback step: the CPU kernel on the staged operands. */
static int run_fallback(void *arg) {
  const step *st = arg;
  const gs_op_call *c = st->call;
  return gs_host_kernel_run(st->cpu_kernel, &c, sizeof c, st->host, c->n_in + c->n_out);
}

/* ---- plan lifecycle -------------------------------------------------------------------- */

void gs_plan_destroy(gs_plan *p) {
  if (!p)
    return;
  gs__plan_stages_destroy(p->stages);
  gs__plan_chain_destroy(p->chain);
  if (p->stream)
    gs_stream_synchronize(p->stream);
  gs_buffer_free(p->arena, p->stream);
  gs_buffer_free(p->weights, p->stream);
  gs_buffer_free(p->staging, p->stream);
  gs_stream_destroy(p->stream);
  for (int s = 0; s < p->n_steps; s++)
    gs__plan_free_call(p->steps[s].call);
  for (int i = 0; i < p->n_values; i++) {
    if (p->values[i].owns_data)
      free((void *)p->values[i].data);
    if (p->values[i].owns_name)
      free((void *)p->values[i].name);
  }
  for (int i = 0; p->baked_values && i < p->model->n_inputs; i++)
    free(p->baked_values[i]);
  free(p->baked_values);
  free(p->baked_bytes);
  free(p->step_ns);
  gs__plan_sections_free(p->sections);
  free(p->values);
  free(p->steps);
  free(p->inputs);
  free(p->outputs);
  gs_strmap_free(&p->index);
  gs_strmap_free(&p->keep_f32);
  pthread_mutex_destroy(&p->run_lock);
  free(p);
}

static int check_input_shape(const gs_value_info *in, const gs_shape *s) {
  char a[160], b[160];
  if (in->rank >= 0 && s->rank != in->rank)
    return gs_error(GS_EINVAL, "input %s: expected rank %d, got shape %s", in->name, in->rank,
                    gs_shape_str(s, b, sizeof b));
  for (int d = 0; d < s->rank; d++) {
    if (s->dims[d] < 0)
      return gs_error(GS_EINVAL, "input %s: dimension %d is negative", in->name, d);
    if (in->rank >= 0 && in->dims[d] >= 0 && in->dims[d] != s->dims[d]) {
      gs_shape want = {.rank = in->rank};
      for (int i = 0; i < in->rank; i++)
        want.dims[i] = in->dims[i];
      snprintf(a, sizeof a, "%s", gs_shape_str(&want, b, sizeof b));
      for (char *q = a; (q = strstr(q, "-1"));)
        q[0] = '?', q[1] = ' ';
      return gs_error(GS_EINVAL, "input %s: expected shape %s, got %s (dimension %d)", in->name, a,
                      gs_shape_str(s, b, sizeof b), d);
    }
  }
  return GS_OK;
}

/* What a value's data points at once its host copy is gone: it is still
 * known (a constant), and on the device. */
static const char known_on_device[1];

/* Host copies the plan made (weights converted to the plan's float type, fused or folded
 * from weights) are not read again once they are on the device, unless a
 * step that runs on the CPU reads them or they are graph outputs (handed
 * back from host memory): the rest are freed, so that a plan does not hold
 * a second copy of its weights in host memory. */
static int release_host_copies(gs_plan *p) {
  bool *keep = calloc((size_t)p->n_values + 1, 1);
  if (!keep)
    return gs_error(GS_ENOMEM, "out of memory finishing a plan");
  for (int s = 0; s < p->n_steps; s++)
    for (int i = 0; p->steps[s].on_cpu && i < p->steps[s].call->n_in; i++)
      if (p->steps[s].in[i] >= 0)
        keep[p->steps[s].in[i]] = true;
  for (int i = 0; i < p->model->n_outputs; i++)
    keep[p->outputs[i]] = true;
  for (int i = 0; i < p->n_values; i++) {
    value *v = &p->values[i];
    if (v->owns_data && v->data && !keep[i]) {
      free((void *)v->data);
      v->data = known_on_device;
      v->owns_data = false;
    }
  }
  free(keep);
  return GS_OK;
}

/* An input planned with its values: known data like a weight, and a copy
 * that runs compare theirs with. */
static int bake_input(gs_plan *p, int i, const void *data) {
  value *v = &p->values[p->inputs[i]];
  if (!p->baked_values && !(p->baked_values = calloc((size_t)p->model->n_inputs, sizeof(void *))))
    return gs_error(GS_ENOMEM, "out of memory creating a plan");
  if (!p->baked_bytes && !(p->baked_bytes = calloc((size_t)p->model->n_inputs, sizeof(size_t))))
    return gs_error(GS_ENOMEM, "out of memory creating a plan");
  p->baked_bytes[i] = v->bytes;
  void *known = malloc(v->bytes ? v->bytes : 1), *copy = malloc(v->bytes ? v->bytes : 1);
  if (!known || !copy) {
    free(known);
    free(copy);
    return gs_error(GS_ENOMEM, "out of memory creating a plan");
  }
  memcpy(known, data, v->bytes);
  memcpy(copy, data, v->bytes);
  v->data = known;
  v->owns_data = true;
  p->baked_values[i] = copy;
  p->baked |= 1ull << i;
  return GS_OK;
}

/* Why a plan could not be made for lack of values (see struct gs_plan). */
typedef struct plan_miss {
  uint64_t wants;
  int node;
  bool computed, must_cut;
} plan_miss;

static int plan_build(const gs_model *m, const gs_shape *input_shapes, const gs_plan_options *opt,
                      uint64_t bake, gs_plan **out, plan_miss *miss) {
  gs_plan *p = calloc(1, sizeof *p);
  if (!p)
    return gs_error(GS_ENOMEM, "out of memory creating a plan");
  p->wanting_node = -1;
  pthread_mutex_init(&p->run_lock, NULL);
  gs_strmap_init(&p->index);
  p->model = m;
  p->device = opt && opt->device ? opt->device : gs_hal_device(0);
  p->weight_set = opt ? opt->weights : NULL;
  p->report.nodes = m->n_nodes;
  int rc = 0;
  if (!p->device)
    rc = gs_error(GS_ENOENT, "no device to plan for");
  else if (p->weight_set && gs_weight_set_device(p->weight_set) != p->device)
    rc = gs_error(GS_EINVAL, "the weight set is of %s, the plan for %s",
                  gs_device_get_info(gs_weight_set_device(p->weight_set))->id,
                  gs_device_get_info(p->device)->id);
  else if (opt && opt->precision == GS_PRECISION_FP64) {
    p->float_type = GS_DT_FLOAT64; /* every device: where it has no fp64, the CPU computes */
  } else if (opt && opt->precision != GS_PRECISION_FP32) {
    if (!gs_device_get_caps(p->device)->half_precision)
      rc = gs_error(GS_ENOTSUP, "%s cannot run %s plans", gs_device_get_info(p->device)->id,
                    gs_precision_name(opt->precision));
    p->float_type = opt->precision == GS_PRECISION_FP16 ? GS_DT_FLOAT16 : GS_DT_BFLOAT16;
  }
  gs_strmap_init(&p->keep_f32);
  /* Resize's roi and scales are float32 whatever the data's type. */
  for (int i = 0; p->float_type && rc == 0 && i < m->n_nodes; i++)
    if (strcmp(m->nodes[i].op_type, "Resize") == 0)
      for (int k = 1; k < m->nodes[i].n_in && k < 3; k++)
        if (m->nodes[i].inputs[k][0])
          rc = gs_strmap_put(&p->keep_f32, m->nodes[i].inputs[k], 1);
  /* Room for the casts a reduced-precision plan adds at inputs and outputs. */
  p->steps = calloc((size_t)(m->n_nodes + m->n_inputs + m->n_outputs) + 1, sizeof *p->steps);
  p->inputs = calloc((size_t)m->n_inputs + 1, sizeof(int));
  p->outputs = calloc((size_t)m->n_outputs + 1, sizeof(int));
  if (rc == 0 && (!p->steps || !p->inputs || !p->outputs))
    rc = gs_error(GS_ENOMEM, "out of memory creating a plan");
  for (int i = 0; rc == 0 && i < m->n_inputs; i++) {
    if ((rc = check_input_shape(&m->inputs[i], &input_shapes[i])) < 0)
      break;
    if ((rc = gs__plan_add_value(p, m->inputs[i].name, m->inputs[i].dtype, &input_shapes[i])) >= 0)
      p->inputs[i] = rc, rc = 0;
    if (rc == 0)
      p->values[p->inputs[i]].graph_input = true;
    if (rc == 0 && i < 64) {
      p->values[p->inputs[i]].from_inputs = 1ull << i;
      if (bake >> i & 1)
        rc = bake_input(p, i, opt->input_values[i]);
    }
    /* fp16, bf16 or fp64: the graph reads a copy of a float32 input in the
     * plan's float type; one planned by value is converted now, like a weight. */
    bool baked = i < 64 && (bake >> i & 1);
    if (rc == 0 && p->float_type && m->inputs[i].dtype == GS_DT_FLOAT32)
      rc = baked ? value_to_float_type(p, p->inputs[i])
                 : add_cast(p, p->inputs[i], p->float_type, m->inputs[i].name);
    if (rc > 0) { /* the copy stands for the input */
      p->values[rc].graph_input = true;
      rc = 0;
    }
  }
  for (int i = 0; rc == 0 && i < m->n_inits; i++) {
    const gs_const_tensor *t = &m->inits[i];
    if ((rc = gs__plan_add_value(p, t->name, t->dtype, &t->shape)) >= 0) {
      int v = rc;
      p->values[v].data = t->data ? t->data : "";
      p->values[v].share_key = t->data;
      rc = p->float_type ? value_to_float_type(p, v) : 0; /* weights converted once, here */
    }
  }
  for (int i = 0; rc == 0 && i < m->n_nodes; i++)
    rc = plan_node(p, &m->nodes[i]);
  for (int i = 0; rc == 0 && i < m->n_outputs; i++) {
    int v = find_value(p, m->outputs[i].name);
    if (v < 0) {
      rc = gs_error(GS_EINVAL, "graph output %s is produced by nothing", m->outputs[i].name);
      break;
    }
    /* Outputs declared float32 are handed back as such. */
    if (p->float_type && p->values[v].dtype == p->float_type &&
        m->outputs[i].dtype == GS_DT_FLOAT32) {
      char name[300];
      snprintf(name, sizeof name, "%s/float32", m->outputs[i].name);
      if ((v = add_cast(p, v, GS_DT_FLOAT32, name)) < 0) {
        rc = v;
        break;
      }
    }
    p->outputs[i] = v;
    p->values[v].graph_output = true;
  }
  if (rc == 0)
    rc = gs__plan_fuse(p);
  if (rc == 0)
    mark_host_sections(p, opt);
  if (rc == 0)
    rc = gs__plan_lay_out_weights(p);
  if (rc == 0)
    rc = plan_memory(p);
  uint64_t wbytes = 0;
  if (rc == 0)
    rc = place_weights(p, &wbytes);
  for (int s = 0; rc == 0 && s < p->n_steps; s++)
    p->steps[s].empty = call_is_empty(p->steps[s].call);
  /* A step whose op has no kernel on the device runs on the CPU instead. */
  uint64_t staging_bytes = 0;
  for (int s = 0; rc == 0 && s < p->n_steps; s++)
    rc = plan_fallback(p, &p->steps[s]);
  if (rc == 0)
    rc = lay_out_staging(p, &staging_bytes);
  /* Kernels may prepare constant weights once (oneDNN's reordered layout). */
  for (int i = 0; rc == 0 && i < p->n_steps; i++) {
    if (gs__step_is(&p->steps[i], "Conv") && p->values[p->steps[i].in[1]].data)
      ((gs_conv_attrs *)p->steps[i].call->attrs)->weights_const = true;
    if (gs__step_is(&p->steps[i], "QLinearConv") && p->values[p->steps[i].in[3]].data)
      ((gs_quant_attrs *)p->steps[i].call->attrs)->conv.weights_const = true;
    if (gs__step_is(&p->steps[i], "ConvInteger") && p->values[p->steps[i].in[1]].data)
      ((gs_quant_attrs *)p->steps[i].call->attrs)->conv.weights_const = true;
    /* The quantised products, by where each op takes B. */
    static const struct { const char *op; int b; } products[] = {
        {"QLinearMatMul", 3}, {"MatMulInteger", 1}, {"MatMulIntegerToFloat", 1},
        {"DynamicQuantizeMatMul", 1}, {"QGemm", 3}};
    for (size_t k = 0; k < sizeof products / sizeof products[0]; k++)
      if (gs__step_is(&p->steps[i], products[k].op) &&
          p->values[p->steps[i].in[products[k].b]].data)
        ((gs_quant_attrs *)p->steps[i].call->attrs)->b_const = true;
  }
  p->report.steps = p->n_steps - p->report.in_place;
  p->report.weights_bytes = wbytes;
  uint64_t capacity = p->device ? gs_device_get_info(p->device)->memory_total_bytes : 0;
  uint64_t weights_all = wbytes + p->report.shared_weights_bytes;
  if (rc == 0 && p->report.arena_bytes + weights_all > capacity)
    rc = gs_error(GS_ENOMEM, "the plan needs %llu bytes of %s memory (arena %llu, weights %llu); "
                             "the device has %llu",
                  (unsigned long long)(p->report.arena_bytes + weights_all),
                  gs_device_get_info(p->device)->id, (unsigned long long)p->report.arena_bytes,
                  (unsigned long long)weights_all, (unsigned long long)capacity);
  if (rc == 0)
    rc = gs_stream_create_ex(p->device, GS_STREAM_INLINE, &p->stream);
  if (rc == 0)
    rc = gs_stream_set_threads(p->stream, !opt ? 0 : opt->deterministic ? 1 : opt->threads);
  gs_pool_t *pool = p->device ? gs_device_pool(p->device, GS_MEM_DEVICE) : NULL;
  if (rc == 0)
    rc = gs_pool_alloc(pool, p->report.arena_bytes, p->stream, &p->arena);
  if (rc == 0)
    rc = gs_pool_alloc(pool, wbytes, p->stream, &p->weights);
  if (rc == 0 && staging_bytes)
    rc = gs_pool_alloc(gs_device_pool(p->device, GS_MEM_PINNED_HOST), staging_bytes, NULL,
                       &p->staging);
  for (int s = 0; rc == 0 && p->staging && s < p->n_steps; s++)
    resolve_fallback(p, &p->steps[s]);
  /* Upload the weights once; the model's host copies stay where they are. */
  for (int i = 0; rc == 0 && i < p->n_values; i++) {
    value *v = &p->values[i];
    uint64_t added = 0;
    if (v->in_set)
      rc = gs__weight_set_get(p->weight_set, v->share_key, v->name, v->dtype, v->data, v->bytes,
                              p->stream, &v->shared, &added);
    else if (v->data && v->offset >= 0 && v->bytes)
      rc = gs_stream_copy_h2d(p->stream, p->weights, (size_t)v->offset, v->data, v->bytes);
    p->report.shared_weights_added += added;
  }
  if (rc == 0)
    rc = gs_stream_synchronize(p->stream);
  if (rc == 0)
    rc = release_host_copies(p);
  if (rc < 0) {
    *miss = (plan_miss){p->wants, p->wanting_node, p->wants_computed, p->must_cut};
    gs_plan_destroy(p);
    return rc;
  }
  GS_LOGD("engine", "plan: %d nodes -> %d steps (%d folded, %d fused), arena %llu bytes (naive %llu)",
          p->report.nodes, p->report.steps, p->report.folded, p->report.fused,
          (unsigned long long)p->report.arena_bytes, (unsigned long long)p->report.naive_bytes);
  *out = p;
  return GS_OK;
}

/* Planning with values: the largest input a plan takes the values of. */
#define BAKE_MAX_BYTES (1u << 20)

/* Why the values of input i cannot be planned with, or GS_OK. Inputs of
 * any size may be taken by a stage of one node, which is planned anew for
 * each run's values anyway. */
static int check_bake(const gs_model *m, const gs_shape *shapes, const gs_plan_options *opt,
                      int i, bool any_size) {
  char why[512];
  snprintf(why, sizeof why, "%s", gs_error_detail());
  if (!opt || !opt->input_values || !opt->input_values[i])
    return gs_error(GS_ENOTSUP, "%s; it depends on the values of model input %s, which this "
                                "caller plans without", why, m->inputs[i].name);
  if (m->inputs[i].dtype == GS_DT_BYTES) /* records that point at one request's strings */
    return gs_error(GS_ENOTSUP, "%s; it depends on the values of string input %s",
                    why, m->inputs[i].name);
  uint64_t bytes = (uint64_t)gs_shape_numel(&shapes[i]) * gs_dtype_size(m->inputs[i].dtype);
  if (bytes > BAKE_MAX_BYTES && !any_size)
    return gs_error(GS_ENOTSUP, "%s; it depends on the values of model input %s, %llu bytes "
                                "(gpusrv plans with the values of inputs up to %u bytes)",
                    why, m->inputs[i].name, (unsigned long long)bytes, BAKE_MAX_BYTES);
  return GS_OK;
}

/* A plan of m with nothing planned yet, for one made of other plans
 * (in stages, or across devices); NULL when out of memory. */
static gs_plan *plan_of_plans(const gs_model *m) {
  gs_plan *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  pthread_mutex_init(&p->run_lock, NULL);
  gs_strmap_init(&p->index);
  gs_strmap_init(&p->keep_f32);
  p->model = m;
  return p;
}

/* A plan made in stages around node `node` (plan_stages.h). */
static int plan_in_stages(const gs_model *m, int node, const gs_shape *shapes,
                          const gs_plan_options *opt, gs_plan **out) {
  gs_plan *p = plan_of_plans(m);
  if (!p)
    return gs_error(GS_ENOMEM, "out of memory creating a plan");
  int rc = gs__plan_stages_create(m, node, shapes, opt, &p->stages);
  if (rc < 0) {
    gs_plan_destroy(p);
    return rc;
  }
  gs_plan *head = gs__plan_stages_head(p->stages);
  p->device = gs_plan_device(head);
  gs_plan_get_report(head, &p->report);
  p->report.nodes = m->n_nodes;
  p->report.staged = true;
  GS_LOGD("engine", "plan in stages: cut at node %s (%s)", m->nodes[node].name,
          m->nodes[node].op_type);
  *out = p;
  return GS_OK;
}

/* Each attempt may find more inputs whose values the plan needs (a
 * Reshape's shape, a Range's limit): plan again with those known. Where a
 * node needs values computed from the inputs, or of an input too large to
 * plan with, the plan is made in stages, when the caller runs from host
 * memory (gives input_values) and `may_cut`. */
static int plan_create(const gs_model *m, const gs_shape *input_shapes, const gs_plan_options *opt,
                       bool may_cut, gs_plan **out) {
  uint64_t bake = 0;
  bool can_cut = may_cut && opt && opt->input_values;
  for (;;) {
    plan_miss miss = {0, -1, false, false};
    int rc = plan_build(m, input_shapes, opt, bake, out, &miss);
    if (rc == 0)
      return rc;
    /* Cut where a node runs graphs, needs computed values, or values of an
     * input the plan cannot take (past the 64th). */
    bool cut = miss.node >= 0 && (miss.must_cut || miss.computed || !(miss.wants & ~bake));
    if (cut)
      return can_cut ? plan_in_stages(m, miss.node, input_shapes, opt, out) : rc;
    if (!(miss.wants & ~bake))
      return rc;
    for (int i = 0; i < 64 && i < m->n_inputs; i++)
      if ((miss.wants & ~bake) >> i & 1 &&
          (rc = check_bake(m, input_shapes, opt, i, !may_cut)) < 0)
        return can_cut && miss.node >= 0 ? plan_in_stages(m, miss.node, input_shapes, opt, out)
                                         : rc;
    bake |= miss.wants;
  }
}

/* A plan across devices (plan_chain.h). */
static int plan_across(const gs_model *m, const gs_shape *shapes, const gs_plan_options *opt,
                       gs_plan **out) {
  gs_plan *p = plan_of_plans(m);
  if (!p)
    return gs_error(GS_ENOMEM, "out of memory creating a plan");
  p->device = opt->device;
  int rc = gs__plan_chain_create(m, shapes, opt, &p->chain, &p->report);
  if (rc < 0) {
    gs_plan_destroy(p);
    return rc;
  }
  *out = p;
  return GS_OK;
}

int gs_plan_create(const gs_model *m, const gs_shape *input_shapes, const gs_plan_options *opt,
                   gs_plan **out) {
  if (gs__plan_chain_needed(m, opt))
    return plan_across(m, input_shapes, opt, out);
  return plan_create(m, input_shapes, opt, true, out);
}

int gs__plan_create_node(const gs_model *m, const gs_shape *shapes, const gs_plan_options *opt,
                         gs_plan **out) {
  return plan_create(m, shapes, opt, false, out);
}

bool gs_plan_fits(const gs_plan *p, const void *const *inputs) {
  if (p->chain)
    return true; /* never planned for values */
  if (p->stages)
    return gs_plan_fits(gs__plan_stages_head(p->stages), inputs);
  for (int i = 0; p->baked && i < p->model->n_inputs; i++)
    if (i < 64 && p->baked >> i & 1 &&
        (!inputs || !inputs[i] ||
         memcmp(inputs[i], p->baked_values[i], p->baked_bytes[i]) != 0))
      return false;
  return true;
}

bool gs_plan_takes_values(const gs_plan *p) {
  return p->stages ? gs_plan_takes_values(gs__plan_stages_head(p->stages)) : p->baked != 0;
}

bool gs_plan_sizes_at_run(const gs_plan *p) { return p->stages != NULL; }

uint64_t gs_plan_device_bytes(const gs_plan *p) {
  if (p->chain)
    return gs__plan_chain_device_bytes(p->chain);
  if (p->stages)
    return gs__plan_stages_device_bytes(p->stages);
  return p->report.arena_bytes + p->report.weights_bytes;
}

/* ---- running ------------------------------------------------------------------------------ */


static void locate(const gs_plan *p, int v, gs_buffer_t **buf, size_t *off) {
  const value *val = &p->values[v];
  if (val->bound) {
    *buf = val->bound;
    *off = 0;
    return;
  }
  *buf = val->in_set ? val->shared : val->data ? p->weights : p->arena;
  *off = (size_t)(!val->in_set && val->offset > 0 ? val->offset : 0);
}

/* Queues a fallback step on the plan's stream: its inputs down to the
 * staging buffer, the CPU kernel as a host function, its outputs back up. */
static int launch_fallback(gs_plan *p, const step *st) {
  const gs_op_call *c = st->call;
  int rc = 0;
  for (int i = 0; rc == 0 && i < c->n_in; i++) {
    int v = st->in[i];
    if (v < 0 || p->values[v].data || !p->values[v].bytes || (st->stays_on_host >> i & 1))
      continue;
    gs_buffer_t *buf;
    size_t off;
    locate(p, v, &buf, &off);
    rc = gs_stream_copy_d2h(p->stream, st->host[i], buf, off, p->values[v].bytes);
  }
  if (rc == 0)
    rc = gs_stream_host_func(p->stream, run_fallback, (void *)st);
  for (int o = 0; rc == 0 && o < c->n_out; o++) {
    int v = st->out[o];
    if (v < 0 || !p->values[v].bytes || (st->stays_on_host >> (c->n_in + o) & 1))
      continue;
    gs_buffer_t *buf;
    size_t off;
    locate(p, v, &buf, &off);
    rc = gs_stream_copy_h2d(p->stream, buf, off, st->host[c->n_in + o], p->values[v].bytes);
  }
  return rc;
}

/* One kernel of a run. */
static int run_step(gs_plan *p, const step *st) {
  const gs_op_call *c = st->call;
  if (st->on_cpu)
    return launch_fallback(p, st);
  gs_kernel_args args = {.buffer_count = c->n_in + c->n_out, .params = &c,
                         .params_size = sizeof c};
  for (int i = 0; i < c->n_in; i++)
    if (st->in[i] >= 0)
      locate(p, st->in[i], &args.buffers[i], &args.offsets[i]);
  for (int i = 0; i < c->n_out; i++)
    if (st->out[i] >= 0)
      locate(p, st->out[i], &args.buffers[c->n_in + i], &args.offsets[c->n_in + i]);
  return gs_stream_launch(p->stream, c->op_type, &args);
}

/* The kernels of one run, between the inputs' arrival and the outputs'
 * departure, each timed when profiling. The run lock is held. */
static int run_steps(gs_plan *p) {
  int rc = 0;
  if (p->sections)
    gs__plan_sections_begin(p);
  for (int s = 0; rc == 0 && s < p->n_steps; s++) {
    const step *st = &p->steps[s];
    if (st->empty || st->in_place)
      continue;
    if (p->sections)
      gs__plan_sections_step(p, s);
    if (!p->step_ns) {
      rc = run_step(p, st);
      continue;
    }
    uint64_t t0 = gs_now_ns();
    rc = run_step(p, st);
    p->step_ns[s] += gs_now_ns() - t0;
  }
  if (rc == 0 && p->step_ns)
    p->profiled_runs++;
  if (p->sections)
    gs__plan_sections_end(p);
  return rc;
}

/* Both take the run lock: a run reads and adds to the profile under it. */
int gs_plan_profile_start(gs_plan *p) {
  if (p->stages || p->chain)
    return gs_error(GS_ENOTSUP, "a plan made in stages or across devices has no profile");
  int rc = GS_OK;
  pthread_mutex_lock(&p->run_lock);
  if (!p->step_ns && !(p->step_ns = calloc((size_t)p->n_steps + 1, sizeof *p->step_ns)))
    rc = gs_error(GS_ENOMEM, "out of memory for a profile");
  pthread_mutex_unlock(&p->run_lock);
  return rc;
}

int gs_plan_profile(gs_plan *p, gs_plan_step_time *out, int max, uint64_t *runs) {
  pthread_mutex_lock(&p->run_lock);
  *runs = p->profiled_runs;
  int n = p->step_ns ? p->n_steps : 0;
  for (int s = 0; s < n && s < max; s++)
    out[s] = (gs_plan_step_time){.op_type = p->steps[s].call->op_type,
                                 .node_name = p->steps[s].call->node_name, .ns = p->step_ns[s]};
  pthread_mutex_unlock(&p->run_lock);
  return n;
}

/* Whether the kernels can use the caller's buffer `b` for value v in place
 * of the arena: device memory of the plan's device, large enough. */
static bool can_bind(const gs_plan *p, const value *v, const gs_buffer_t *b) {
  return b && !v->bound && gs_buffer_pool(b) == gs_device_pool(p->device, GS_MEM_DEVICE) &&
         gs_buffer_size(b) >= v->bytes;
}

/* One run with inputs and outputs in host memory or in device buffers (the
 * other pair NULL): the copies in, the kernels, the copies out. Device
 * buffers the kernels can use stand in for the arena's places of the
 * inputs and of outputs the steps compute: no copies then. */
static int run_with(gs_plan *p, const void *const *host_in, void *const *host_out,
                    gs_buffer_t *const *dev_in, gs_buffer_t *const *dev_out) {
  pthread_mutex_lock(&p->run_lock);
  int rc = 0;
  for (int i = 0; rc == 0 && i < p->model->n_inputs; i++) {
    value *v = &p->values[p->inputs[i]];
    if (i < 64 && p->baked >> i & 1) { /* planned with its values, which must not change */
      if (!host_in)
        rc = gs_error(GS_ENOTSUP, "the plan was made for the values of input %s: run it "
                                  "with the inputs in host memory", v->name);
      else if (memcmp(host_in[i], p->baked_values[i], p->baked_bytes[i]) != 0)
        rc = gs_error(GS_EINVAL, "input %s has other values than the plan was made for "
                                 "(plan again for them)", v->name);
      continue;
    }
    if (!v->bytes || v->last_use < 0)
      continue;
    bool also_output = false; /* the outputs' copies could overwrite it while it is read */
    for (int k = 0; dev_out && k < p->model->n_outputs; k++)
      also_output = also_output || dev_out[k] == dev_in[i];
    if (host_in)
      rc = gs_stream_copy_h2d(p->stream, p->arena, (size_t)v->offset, host_in[i], v->bytes);
    else if (!also_output && can_bind(p, v, dev_in[i]))
      v->bound = dev_in[i];
    else
      rc = gs_stream_copy_d2d(p->stream, p->arena, (size_t)v->offset, dev_in[i], 0, v->bytes);
  }
  for (int i = 0; dev_out && i < p->model->n_outputs; i++) {
    value *v = &p->values[p->outputs[i]];
    bool is_input = false; /* written while the inputs are still read: never in place */
    for (int k = 0; k < p->model->n_inputs; k++)
      is_input = is_input || dev_in[k] == dev_out[i];
    if (v->bytes && !v->data && v->def >= 0 && !is_input && can_bind(p, v, dev_out[i]))
      v->bound = dev_out[i];
  }
  if (rc == 0)
    rc = run_steps(p);
  for (int i = 0; rc == 0 && i < p->model->n_outputs; i++) {
    const value *v = &p->values[p->outputs[i]];
    /* Computed in place, or (an output named twice, or an input handed
     * back) copied from where it is. */
    if (!v->bytes || (dev_out && v->bound == dev_out[i]))
      continue;
    gs_buffer_t *buf;
    size_t off;
    locate(p, p->outputs[i], &buf, &off);
    rc = host_out ? gs_stream_copy_d2h(p->stream, host_out[i], buf, off, v->bytes)
                  : gs_stream_copy_d2d(p->stream, dev_out[i], 0, buf, off, v->bytes);
  }
  int sync = gs_stream_synchronize(p->stream);
  if (rc == 0 && sync == 0 && p->sections)
    gs__plan_sections_add(p);
  for (int i = 0; i < p->model->n_inputs; i++)
    p->values[p->inputs[i]].bound = NULL;
  for (int i = 0; i < p->model->n_outputs; i++)
    p->values[p->outputs[i]].bound = NULL;
  pthread_mutex_unlock(&p->run_lock);
  return rc < 0 ? rc : sync;
}

static int sized_at_run(const gs_plan *p) {
  return gs_error(GS_ENOTSUP, "the sizes of the outputs of %s are known only after a run "
                              "(it is planned in stages): run it with outputs sized by the run",
                  p->model->path ? p->model->path : "the model");
}

/* A run of a plan across devices, under the run lock. */
static int run_chain(gs_plan *p, const void *const *host_in, void *const *host_out,
                     gs_buffer_t *const *dev_in, gs_buffer_t *const *dev_out) {
  pthread_mutex_lock(&p->run_lock);
  int rc = gs__plan_chain_run(p->chain, host_in, host_out, dev_in, dev_out);
  pthread_mutex_unlock(&p->run_lock);
  return rc;
}

int gs_plan_run(gs_plan *p, const void *const *inputs, void *const *outputs) {
  if (p->chain)
    return run_chain(p, inputs, outputs, NULL, NULL);
  return p->stages ? sized_at_run(p) : run_with(p, inputs, outputs, NULL, NULL);
}

int gs_plan_run_buffers(gs_plan *p, gs_buffer_t *const *inputs, gs_buffer_t *const *outputs) {
  if (p->chain)
    return run_chain(p, NULL, NULL, inputs, outputs);
  return p->stages ? sized_at_run(p) : run_with(p, NULL, NULL, inputs, outputs);
}

int gs_plan_run_alloc(gs_plan *p, const void *const *inputs, void **outputs,
                      gs_plan_value_info *info) {
  int n = p->model->n_outputs, rc = 0;
  if (p->stages) {
    pthread_mutex_lock(&p->run_lock);
    rc = gs__plan_stages_run(p->stages, inputs, outputs, info);
    pthread_mutex_unlock(&p->run_lock);
    return rc;
  }
  for (int i = 0; i < n; i++) {
    gs_plan_output(p, i, &info[i]);
    info[i].data = NULL;
    if (!(outputs[i] = malloc(info[i].bytes ? info[i].bytes : 1)) && rc == 0)
      rc = gs_error(GS_ENOMEM, "out of memory for output %s", info[i].name);
  }
  if (rc == 0)
    rc = gs_plan_run(p, inputs, outputs);
  for (int i = 0; rc < 0 && i < n; i++) {
    free(outputs[i]);
    outputs[i] = NULL;
  }
  return rc;
}

/* ---- queries ---------------------------------------------------------------------------------- */

int gs_plan_input_count(const gs_plan *p) { return p->model->n_inputs; }
int gs_plan_output_count(const gs_plan *p) { return p->model->n_outputs; }

static void describe(const gs_plan *p, int v, gs_plan_value_info *out) {
  const value *val = &p->values[v];
  *out = (gs_plan_value_info){.name = val->name, .dtype = val->dtype, .shape = val->shape,
                              .bytes = val->bytes, .data = val->data};
}

/* Named as the model names them, whatever values the plan added between. */
void gs_plan_input(const gs_plan *p, int i, gs_plan_value_info *out) {
  if (p->chain) { /* the first part takes the model's inputs, in order */
    gs__plan_chain_input(p->chain, i, out);
    return;
  }
  if (p->stages) {
    gs_plan_input(gs__plan_stages_head(p->stages), i, out);
    return;
  }
  describe(p, p->inputs[i], out);
  out->name = p->model->inputs[i].name;
  if (i < 64 && p->baked >> i & 1) { /* as the caller gives it, even if kept in another float type */
    out->dtype = p->model->inputs[i].dtype;
    out->bytes = p->baked_bytes[i];
  }
}

void gs_plan_output(const gs_plan *p, int i, gs_plan_value_info *out) {
  if (p->chain) {
    gs__plan_chain_output(p->chain, i, out);
    return;
  }
  if (p->stages) { /* as declared until a run sizes it */
    const gs_value_info *d = &p->model->outputs[i];
    *out = (gs_plan_value_info){.name = d->name, .dtype = d->dtype,
                                .shape = {.rank = d->rank > 0 ? d->rank : 0}};
    for (int k = 0; k < out->shape.rank; k++)
      out->shape.dims[k] = d->dims[k];
    return;
  }
  describe(p, p->outputs[i], out);
  out->name = p->model->outputs[i].name;
}
void gs_plan_get_report(const gs_plan *p, gs_plan_report *out) { *out = p->report; }
gs_device_t *gs_plan_device(const gs_plan *p) { return p->device; }

int gs_plan_other_devices(const gs_plan *p, gs_device_t **devices, uint64_t *bytes, int max) {
  return p->chain ? gs__plan_chain_other_devices(p->chain, devices, bytes, max) : 0;
}

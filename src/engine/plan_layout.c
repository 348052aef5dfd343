/* plan_layout.c - which values of a CPU plan stay in oneDNN's channel-
 * blocked layout (nChw8c, nChw16c): the outputs of convolutions read only
 * by convolutions, by elementwise ops between them (a residual Add, a
 * Relu), whose results are read the same way, and by a squeeze-excitation
 * (its GlobalAveragePool, and the Mul by one value per channel; or the
 * SqueezeExcite step that does both, plan_squeeze.c). Inside
 * such a run no value is reordered; only its edges are (oneDNN's
 * convolutions compute blocked, and reorder NCHW in and out otherwise). */
#include "engine/plan_internal.h"

#include "hal/op/op_attrs.h"

#include <stdlib.h>

/* Ops that read and write whole tensors of one shape, element by element:
 * they compute the same in any layout, blocked included. */
static bool layout_free(const step *s) {
  static const char *const unary[] = {"Relu", "Sigmoid", "Tanh", "LeakyRelu"};
  static const char *const binary[] = {"Add", "Sub", "Mul"};
  int arity = 0;
  for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++)
    arity = gs__step_is(s, unary[i]) ? 1 : arity;
  for (size_t i = 0; i < sizeof binary / sizeof binary[0]; i++)
    arity = gs__step_is(s, binary[i]) ? 2 : arity;
  const gs_op_call *c = s->call;
  if (!arity || c->n_in != arity || c->n_out != 1)
    return false;
  for (int i = 0; i < c->n_in; i++)
    if (s->in[i] < 0 || !gs_shape_equal(&c->in[i].shape, &c->out[0].shape))
      return false;
  return true;
}

/* Mul of a tensor [N, C, spatial...] by one value per channel ([N or 1, C,
 * 1...]): a squeeze-excitation's scaling. Blocked, it is a Mul of the
 * views [N, C/b, spatial, b] and [N or 1, C/b, 1, b], which its call is
 * rewritten to (scale_blocked). The full operand's index in *full. */
static bool channel_scale(const step *s, int *full) {
  const gs_op_call *c = s->call;
  if (!gs__step_is(s, "Mul") || c->n_in != 2 || c->n_out != 1 || s->in[0] < 0 || s->in[1] < 0)
    return false;
  const gs_shape *y = &c->out[0].shape;
  for (int f = 0; f < 2; f++) {
    const gs_shape *x = &c->in[f].shape, *k = &c->in[1 - f].shape;
    if (!gs_shape_equal(x, y) || k->rank != y->rank || y->rank < 3 ||
        (k->dims[0] != 1 && k->dims[0] != y->dims[0]) || k->dims[1] != y->dims[1])
      continue;
    bool ones = true;
    for (int d = 2; d < k->rank; d++)
      ones = ones && k->dims[d] == 1;
    if (ones) {
      *full = f;
      return true;
    }
  }
  return false;
}

/* Whether value v could be blocked, judged alone: float32, 1 to 3 spatial
 * dims, channels a multiple of the device's block (so that it takes the
 * bytes the plan gave it, unpadded), computed by a Conv or a layout-free
 * op, and not handed to or from the caller. */
static bool candidate(const gs_plan *p, int v, int producer, int block) {
  const value *x = &p->values[v];
  if (producer < 0 || x->data || x->graph_input || x->graph_output ||
      x->dtype != GS_DT_FLOAT32 || x->shape.rank < 3 || x->shape.rank > 5 ||
      x->shape.dims[1] % block != 0)
    return false;
  const step *s = &p->steps[producer];
  int full;
  return ((gs__step_is(s, "Conv") || gs__step_is(s, "SqueezeExcite")) && s->out[0] == v) ||
         layout_free(s) || channel_scale(s, &full);
}

/* Whether every input and the output of layout-free step s are blocked. */
static bool all_blocked(const step *s, const bool *blocked) {
  for (int i = 0; i < s->call->n_in; i++)
    if (!blocked[s->in[i]])
      return false;
  return blocked[s->out[0]];
}

/* Whether blocked value v still fits among the others: what made it reads
 * blocked values only (or is a Conv), and everything that reads it is a
 * Conv reading it as its data, or a layout-free op all of whose operands
 * are blocked. */
static bool fits(const gs_plan *p, int v, const int *producer, const bool *blocked) {
  const step *made = &p->steps[producer[v]];
  int full;
  if (layout_free(made) ? !all_blocked(made, blocked)
      : gs__step_is(made, "SqueezeExcite") ? !blocked[made->in[0]]
                                            : channel_scale(made, &full) && !blocked[made->in[full]])
    return false;
  for (int s = 0; s < p->n_steps; s++) {
    const step *st = &p->steps[s];
    for (int i = 0; i < st->call->n_in; i++) {
      if (st->in[i] != v)
        continue;
      bool ok;
      if (gs__step_is(st, "Conv"))
        ok = i == 0;
      else if (layout_free(st))
        ok = all_blocked(st, blocked);
      else if (gs__step_is(st, "GlobalAveragePool"))
        ok = true;
      else if (gs__step_is(st, "SqueezeExcite")) /* x and y in one layout */
        ok = i == 0 && blocked[st->out[0]];
      else
        ok = channel_scale(st, &full) && i == full && blocked[st->out[0]];
      if (!ok)
        return false;
    }
  }
  return true;
}

/* Marks the convolutions and average poolings that read or write blocked
 * values; false, with none marked, where the device cannot run one of them
 * so (device kernels read NCHW only). */
static bool mark_blocked_steps(gs_plan *p, const bool *blocked, int block) {
  bool ok = true;
  for (int s = 0; s < p->n_steps; s++) {
    step *st = &p->steps[s];
    bool marked = false;
    if (gs__step_is(st, "Conv")) {
      gs_conv_attrs *a = st->call->attrs;
      a->src_blocked = blocked[st->in[0]];
      a->dst_blocked = blocked[st->out[0]];
      marked = a->src_blocked || a->dst_blocked;
    } else if (gs__step_is(st, "GlobalAveragePool")) {
      gs_pool_attrs *a = st->call->attrs;
      a->src_block = blocked[st->in[0]] ? block : 0;
      marked = a->src_block != 0;
    } else if (gs__step_is(st, "SqueezeExcite")) {
      gs_squeeze_excite_attrs *a = st->call->attrs;
      a->block = blocked[st->in[0]] ? block : 0;
      marked = a->block != 0;
    }
    const gs_op_call *c = st->call;
    if (marked && !gs_device_supports_launch(p->device, c->op_type, &c, sizeof c))
      ok = false;
  }
  for (int s = 0; !ok && s < p->n_steps; s++)
    if (gs__step_is(&p->steps[s], "Conv")) {
      gs_conv_attrs *a = p->steps[s].call->attrs;
      a->src_blocked = a->dst_blocked = false;
    } else if (gs__step_is(&p->steps[s], "GlobalAveragePool")) {
      ((gs_pool_attrs *)p->steps[s].call->attrs)->src_block = 0;
    } else if (gs__step_is(&p->steps[s], "SqueezeExcite")) {
      ((gs_squeeze_excite_attrs *)p->steps[s].call->attrs)->block = 0;
    }
  return ok;
}

/* A channel scale whose output is blocked reads and writes [N, C/b,
 * spatial, b] by [N or 1, C/b, 1, b]: its call says so, and the CPU's Mul
 * broadcasts that as it would any shapes. */
static void scale_blocked(step *st, int block) {
  int full;
  gs_op_call *c = st->call;
  channel_scale(st, &full);
  const gs_shape *y = &c->out[0].shape;
  int64_t spatial = 1;
  for (int d = 2; d < y->rank; d++)
    spatial *= y->dims[d];
  gs_shape big = {4, {y->dims[0], y->dims[1] / block, spatial, block}};
  gs_shape small = {4, {c->in[1 - full].shape.dims[0], y->dims[1] / block, 1, block}};
  c->in[full].shape = big;
  c->in[1 - full].shape = small;
  c->out[0].shape = big;
}

void gs__plan_keep_blocked(gs_plan *p) {
  int block = p->device ? gs_device_get_caps(p->device)->conv_channel_block : 0;
  if (block <= 0)
    return;
  int *producer = malloc(sizeof(int) * (size_t)(p->n_values + 1));
  bool *blocked = calloc((size_t)p->n_values + 1, sizeof(bool));
  if (!producer || !blocked) { /* an optimisation only: without memory, plain layouts */
    free(producer);
    free(blocked);
    return;
  }
  for (int v = 0; v < p->n_values; v++)
    producer[v] = -1;
  for (int s = 0; s < p->n_steps; s++)
    for (int i = 0; i < p->steps[s].call->n_out; i++)
      if (p->steps[s].out[i] >= 0)
        producer[p->steps[s].out[i]] = s;
  for (int v = 0; v < p->n_values; v++)
    blocked[v] = candidate(p, v, producer[v], block);
  /* Drop what does not fit until the rest does: each pass only removes. */
  for (bool changed = true; changed;) {
    changed = false;
    for (int v = 0; v < p->n_values; v++)
      if (blocked[v] && !fits(p, v, producer, blocked)) {
        blocked[v] = false;
        changed = true;
      }
  }
  if (mark_blocked_steps(p, blocked, block)) {
    for (int v = 0; v < p->n_values; v++) {
      p->values[v].blocked = blocked[v];
      p->report.kept_blocked += blocked[v];
    }
    int full;
    for (int s = 0; s < p->n_steps; s++)
      if (p->steps[s].out[0] >= 0 && blocked[p->steps[s].out[0]] && !layout_free(&p->steps[s]) &&
          channel_scale(&p->steps[s], &full))
        scale_blocked(&p->steps[s], block);
  }
  free(producer);
  free(blocked);
}

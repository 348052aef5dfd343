/* plan_layout.c - which values of a CPU plan stay in oneDNN's channel-
 * blocked layout (nChw8c, nChw16c): the outputs of convolutions read only
 * by convolutions, and by elementwise ops between them (a residual Add, a
 * Relu), whose results are read the same way. Inside such a run no value
 * is reordered; only its edges are (oneDNN's convolutions compute blocked,
 * and reorder NCHW in and out otherwise). */
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
  return (gs__step_is(s, "Conv") && s->out[0] == v) || layout_free(s);
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
  if (layout_free(made) && !all_blocked(made, blocked))
    return false;
  for (int s = 0; s < p->n_steps; s++) {
    const step *st = &p->steps[s];
    for (int i = 0; i < st->call->n_in; i++) {
      if (st->in[i] != v)
        continue;
      bool ok = gs__step_is(st, "Conv") ? i == 0 : layout_free(st) && all_blocked(st, blocked);
      if (!ok)
        return false;
    }
  }
  return true;
}

/* Marks the convolutions that read or write blocked values; false, with
 * none marked, where the device cannot run one of them so (device kernels
 * read NCHW only). */
static bool mark_convolutions(gs_plan *p, const bool *blocked) {
  bool ok = true;
  for (int s = 0; s < p->n_steps; s++) {
    step *st = &p->steps[s];
    if (!gs__step_is(st, "Conv"))
      continue;
    gs_conv_attrs *a = st->call->attrs;
    a->src_blocked = blocked[st->in[0]];
    a->dst_blocked = blocked[st->out[0]];
    const gs_op_call *c = st->call;
    if ((a->src_blocked || a->dst_blocked) &&
        !gs_device_supports_launch(p->device, c->op_type, &c, sizeof c))
      ok = false;
  }
  for (int s = 0; !ok && s < p->n_steps; s++)
    if (gs__step_is(&p->steps[s], "Conv")) {
      gs_conv_attrs *a = p->steps[s].call->attrs;
      a->src_blocked = a->dst_blocked = false;
    }
  return ok;
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
  if (mark_convolutions(p, blocked))
    for (int v = 0; v < p->n_values; v++) {
      p->values[v].blocked = blocked[v];
      p->report.kept_blocked += blocked[v];
    }
  free(producer);
  free(blocked);
}

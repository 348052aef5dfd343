/* plan_squeeze.c - a squeeze-excitation block as exporters write it
 * (EfficientNet, MobileNetV3, RegNetY): GlobalAveragePool of x, a 1x1 Conv
 * to fewer channels with its activation, a 1x1 Conv back, Sigmoid or
 * HardSigmoid, and the Mul of x by that gate, run as one SqueezeExcite
 * step where the device has the kernel (the CPU's, k_squeeze.c). Five
 * launches become one, and the two products, each a convolution of one
 * pixel, become two small GEMMs. */
#include "engine/plan_internal.h"

#include "hal/op/op_attrs.h"

/* The steps found, and the operands of the one that replaces them. */
typedef struct squeeze_match {
  int pool, reduce, expand, gate; /* steps that go; the Mul's stays */
  int x, w1, b1, w2, b2;          /* values; b1, b2 -1: none */
  gs_squeeze_excite_attrs attrs;
} squeeze_match;

/* Step s is a 1x1 Conv of one group, stride and dilation 1, no padding,
 * with known float32 weights and bias, reading v and read only by step
 * `reader`: its output channels, or 0. */
static int64_t pointwise_conv(gs_plan *p, int s, int v, int reader) {
  if (s < 0 || !gs__step_is(&p->steps[s], "Conv") || p->steps[s].in[0] != v ||
      gs__plan_sole_consumer(p, p->steps[s].out[0]) != reader)
    return 0;
  const step *st = &p->steps[s];
  const gs_conv_attrs *a = st->call->attrs;
  if (a->group != 1 || a->residual)
    return 0;
  for (int d = 0; d < a->spatial; d++)
    if (a->kernel[d] != 1 || a->stride[d] != 1 || a->dilation[d] != 1 || a->pad_begin[d] ||
        a->pad_end[d])
      return 0;
  const value *w = &p->values[st->in[1]];
  if (!w->data || w->dtype != GS_DT_FLOAT32 ||
      (a->has_bias && (!p->values[st->in[2]].data ||
                       p->values[st->in[2]].dtype != GS_DT_FLOAT32)))
    return 0;
  return w->shape.dims[0];
}

/* The gate g = Sigmoid(e) or HardSigmoid(e), read only by the Mul: its
 * kind in the match, or false. */
static bool gate_step(gs_plan *p, int g, int mul, squeeze_match *m) {
  if (g < 0 || gs__plan_sole_consumer(p, p->steps[g].out[0]) != mul ||
      p->steps[g].call->n_in != 1)
    return false;
  if (gs__step_is(&p->steps[g], "Sigmoid")) {
    m->attrs.gate = GS_GATE_SIGMOID;
    return true;
  }
  if (gs__step_is(&p->steps[g], "HardSigmoid")) {
    const gs_unary_attrs *u = p->steps[g].call->attrs;
    m->attrs.gate = GS_GATE_HARD_SIGMOID;
    m->attrs.gate_alpha = u->alpha;
    m->attrs.gate_beta = u->beta;
    return true;
  }
  return false;
}

/* From the gate back to the pooling of x, each value read by the next step
 * alone: Mul(x, gate) with gate made from GlobalAveragePool(x). */
static bool match_from_gate(gs_plan *p, int mul, int x, int gate_value, squeeze_match *m) {
  m->gate = gs__plan_producer(p, gate_value);
  if (!gate_step(p, m->gate, mul, m))
    return false;
  int e = p->steps[m->gate].in[0];
  m->expand = gs__plan_producer(p, e);
  if (m->expand < 0)
    return false;
  int h = p->steps[m->expand].in[0];
  m->reduce = gs__plan_producer(p, h);
  if (m->reduce < 0)
    return false;
  int pooled = p->steps[m->reduce].in[0];
  m->pool = gs__plan_producer(p, pooled);
  if (m->pool < 0 || !gs__step_is(&p->steps[m->pool], "GlobalAveragePool") ||
      p->steps[m->pool].in[0] != x || gs__plan_sole_consumer(p, pooled) != m->reduce)
    return false;
  int64_t channels = p->values[x].shape.dims[1];
  int64_t squeezed = pointwise_conv(p, m->reduce, pooled, m->expand);
  if (squeezed <= 0 || pointwise_conv(p, m->expand, h, m->gate) != channels ||
      ((const gs_conv_attrs *)p->steps[m->expand].call->attrs)->act != GS_ACT_NONE)
    return false;
  const step *r = &p->steps[m->reduce], *x2 = &p->steps[m->expand];
  const gs_conv_attrs *ra = r->call->attrs, *xa = x2->call->attrs;
  if (p->values[r->in[1]].shape.dims[1] != channels ||
      p->values[x2->in[1]].shape.dims[1] != squeezed)
    return false;
  m->x = x;
  m->w1 = r->in[1];
  m->b1 = ra->has_bias ? r->in[2] : -1;
  m->w2 = x2->in[1];
  m->b2 = xa->has_bias ? x2->in[2] : -1;
  m->attrs.squeezed = squeezed;
  m->attrs.act = ra->act;
  m->attrs.act_lo = ra->act_lo;
  m->attrs.act_hi = ra->act_hi;
  return true;
}

/* Mul step `mul` of x [N, C, spatial...] (float32) by a gate [N, C, 1...]:
 * the block behind it, if it is all there. */
static bool match_at(gs_plan *p, int mul, squeeze_match *m) {
  const step *st = &p->steps[mul];
  if (st->call->n_in != 2 || st->call->n_out != 1 || st->in[0] < 0 || st->in[1] < 0)
    return false;
  for (int f = 0; f < 2; f++) {
    const value *x = &p->values[st->in[f]], *g = &p->values[st->in[1 - f]];
    if (x->dtype != GS_DT_FLOAT32 || x->shape.rank < 3 || g->shape.rank != x->shape.rank ||
        !gs_shape_equal(&x->shape, &p->values[st->out[0]].shape) ||
        g->shape.dims[0] != x->shape.dims[0] || g->shape.dims[1] != x->shape.dims[1])
      continue;
    bool ones = true;
    for (int d = 2; d < g->shape.rank; d++)
      ones = ones && g->shape.dims[d] == 1;
    *m = (squeeze_match){0};
    if (ones && match_from_gate(p, mul, st->in[f], st->in[1 - f], m))
      return true;
  }
  return false;
}

/* The SqueezeExcite call in place of the Mul's, if the device takes it:
 * 1 fused, 0 not, or a GS_E code. */
static int replace(gs_plan *p, int mul, const squeeze_match *m) {
  int ins[5] = {m->x, m->w1, m->b1, m->w2, m->b2};
  int rc = gs__plan_replace_step(p, mul, "SqueezeExcite", &m->attrs, sizeof m->attrs, ins, 5);
  if (rc <= 0)
    return rc;
  int gone[4] = {m->pool, m->reduce, m->expand, m->gate};
  for (int i = 0; i < 4; i++)
    p->steps[gone[i]].dead = true;
  p->report.fused += 4;
  p->report.squeeze_excite++;
  return 1;
}

int gs__plan_fuse_squeeze_excite(gs_plan *p) {
  for (int s = 0; s < p->n_steps; s++) {
    squeeze_match m;
    if (p->steps[s].dead || !gs__step_is(&p->steps[s], "Mul") || !match_at(p, s, &m))
      continue;
    int rc = replace(p, s, &m);
    if (rc < 0)
      return rc;
  }
  return 0;
}

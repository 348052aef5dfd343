/* plan_attention.c - attention as exporters write it, MatMul(Q, Kᵀ), a
 * scale, an additive mask, Softmax over the keys and MatMul(P, V), run as
 * one Attention step where the device has the kernel (the CPU's,
 * k_attention.c): the scores of a block of query rows stay in cache from
 * the first product to the second, and the [batch, heads, queries, keys]
 * tensor between them is never held. torch.onnx scales Q and Kᵀ by √scale
 * each (Mul) and makes Kᵀ with a Transpose; those steps join it too, so K
 * is read as it was before the Transpose. */
#include "engine/plan_internal.h"

#include "hal/op/op_attrs.h"

/* The pattern found: the steps that go, and the operands of the one that stays. */
typedef struct attention_match {
  int gone[7], n_gone; /* steps that the Attention step replaces */
  int q, k, v, mask;   /* values; mask -1: none */
  bool keys_transposed;
  float scale;
} attention_match;

/* v is made by a plain product (no bias, activation or packing) read only
 * by step `reader`; its step, or -1. */
static int plain_matmul(gs_plan *p, int v, int reader) {
  int s = gs__plan_producer(p, v);
  if (s < 0 || !gs__step_is(&p->steps[s], "MatMul") || gs__plan_sole_consumer(p, v) != reader)
    return -1;
  const gs_matmul_attrs *m = p->steps[s].call->attrs;
  return m->has_bias || m->b_packed || m->act != GS_ACT_NONE ? -1 : s;
}

/* v = Mul(x, c) or Div(x, c) of a known scalar, read only by `reader`:
 * its step, *x and the factor, or -1. `div` allows Div. */
static int scaled(gs_plan *p, int v, int reader, bool div, int *x, float *factor) {
  int s = gs__plan_producer(p, v);
  float c;
  if (s < 0 || p->steps[s].call->n_in != 2 || gs__plan_sole_consumer(p, v) != reader)
    return -1;
  const step *st = &p->steps[s];
  for (int i = 0; i < 2; i++) /* a scalar of higher rank would change the shape */
    if (!gs_shape_equal(&p->values[st->in[i]].shape, &p->values[v].shape) &&
        gs_shape_numel(&p->values[st->in[i]].shape) != 1)
      return -1;
  if (gs__step_is(st, "Mul")) {
    for (int i = 0; i < 2; i++)
      if (gs__plan_known_scalar(p, st->in[1 - i], &c) &&
          gs_shape_equal(&p->values[st->in[i]].shape, &p->values[v].shape)) {
        *x = st->in[i];
        *factor = c;
        return s;
      }
  } else if (div && gs__step_is(st, "Div") && gs__plan_known_scalar(p, st->in[1], &c) &&
             c != 0.0f && gs_shape_equal(&p->values[st->in[0]].shape, &p->values[v].shape)) {
    *x = st->in[0];
    *factor = 1.0f / c;
    return s;
  }
  return -1;
}

/* The scores before Softmax step sm: MatMul, then perhaps a scale, then
 * perhaps an added mask. Fills qk's step into m->gone, and m->mask. */
static int scores_matmul(gs_plan *p, int sm, attention_match *m) {
  int x = p->steps[sm].in[0], reader = sm, s = gs__plan_producer(p, x);
  if (s >= 0 && gs__step_is(&p->steps[s], "Add") && p->steps[s].call->n_in == 2 &&
      gs__plan_sole_consumer(p, x) == sm) {
    for (int i = 0; i < 2; i++) { /* which side the scores come in on */
      int y = p->steps[s].in[i], inner;
      float f;
      if (plain_matmul(p, y, s) >= 0 || scaled(p, y, s, true, &inner, &f) >= 0) {
        m->gone[m->n_gone++] = s;
        m->mask = p->steps[s].in[1 - i];
        x = y;
        reader = s;
        break;
      }
    }
  }
  int inner;
  float f;
  int sc = scaled(p, x, reader, true, &inner, &f);
  if (sc >= 0) {
    m->gone[m->n_gone++] = sc;
    m->scale *= f;
    x = inner;
    reader = sc;
  }
  return plain_matmul(p, x, reader);
}

/* Whether perm swaps the last two of `rank` dims and keeps the rest. */
static bool swaps_last_two(const int *perm, int rank) {
  for (int i = 0; i < rank - 2; i++)
    if (perm[i] != i)
      return false;
  return perm[rank - 2] == rank - 1 && perm[rank - 1] == rank - 2;
}

/* Q's and Kᵀ's own scales, and the Transpose that made Kᵀ, join the step. */
static void fold_operands(gs_plan *p, int qk, attention_match *m) {
  int x, t;
  float f;
  int s = scaled(p, m->q, qk, false, &x, &f);
  if (s >= 0) {
    m->gone[m->n_gone++] = s;
    m->scale *= f;
    m->q = x;
  }
  int reader = qk;
  if ((s = scaled(p, m->k, qk, false, &x, &f)) >= 0) {
    m->gone[m->n_gone++] = s;
    m->scale *= f;
    m->k = x;
    reader = s;
  }
  if ((t = gs__plan_producer(p, m->k)) >= 0 && gs__step_is(&p->steps[t], "Transpose") &&
      gs__plan_sole_consumer(p, m->k) == reader &&
      swaps_last_two(((const gs_transpose_attrs *)p->steps[t].call->attrs)->perm,
                     p->values[m->k].shape.rank)) {
    m->gone[m->n_gone++] = t;
    m->k = p->steps[t].in[0];
    m->keys_transposed = false;
  }
}

/* Whether an operand of the step is made by a step it replaces: one value
 * in two roles (MatMul(y, y) with y a Transpose, Add(s, s), MatMul(P, P)),
 * which the sole-reader checks let through, as a step reading a value
 * twice reads it once. */
static bool made_by_gone_step(const gs_plan *p, const attention_match *m) {
  int operands[4] = {m->q, m->k, m->v, m->mask};
  for (int i = 0; i < 4; i++)
    for (int g = 0; operands[i] >= 0 && g < m->n_gone; g++)
      for (int o = 0; o < p->steps[m->gone[g]].call->n_out; o++)
        if (p->steps[m->gone[g]].out[o] == operands[i])
          return true;
  return false;
}

/* Shapes: Q [.., L, d], Kᵀ [.., d, T], V [.., T, dv], all of one rank (3
 * or 4) and the same leading dims; a mask that broadcasts to the scores
 * with all T keys. Fills the attributes (a 3-D graph is one head). */
static bool shapes_fit(gs_plan *p, const attention_match *m, int kt, gs_attention_attrs *a) {
  const gs_shape *q = &p->values[m->q].shape, *k = &p->values[kt].shape,
                 *v = &p->values[m->v].shape;
  int r = q->rank;
  if ((r != 3 && r != 4) || k->rank != r || v->rank != r)
    return false;
  for (int i = 0; i < r - 2; i++)
    if (k->dims[i] != q->dims[i] || v->dims[i] != q->dims[i])
      return false;
  int64_t L = q->dims[r - 2], d = q->dims[r - 1], T = k->dims[r - 1];
  if (k->dims[r - 2] != d || v->dims[r - 2] != T)
    return false;
  *a = (gs_attention_attrs){.batch = q->dims[0], .q_heads = r == 4 ? q->dims[1] : 1,
                            .q_seq = L, .kv_seq = T, .total = T, .head = d,
                            .v_head = v->dims[r - 1], .scale = m->scale,
                            .keys_transposed = m->keys_transposed};
  a->kv_heads = a->q_heads;
  if (m->mask < 0)
    return true;
  const value *mv = &p->values[m->mask];
  if (mv->dtype != GS_DT_FLOAT32 || mv->shape.rank > r || mv->shape.rank < 1)
    return false;
  int64_t want[4] = {a->batch, a->q_heads, L, T}, md[4] = {1, 1, 1, 1};
  for (int i = 0; i < mv->shape.rank; i++) { /* right-aligned to [b, (heads,) L, T] */
    int at = r - mv->shape.rank + i;
    md[r == 4 ? at : at == 0 ? 0 : at + 1] = mv->shape.dims[i];
  }
  for (int i = 0; i < 4; i++)
    if (md[i] != 1 && md[i] != want[i])
      return false;
  if (md[3] != T) /* a mask shorter than the keys means something else to Attention */
    return false;
  a->has_mask = true;
  for (int i = 0; i < 4; i++)
    a->mask_dims[i] = md[i];
  return true;
}

/* The Attention call for the match, in place of the second MatMul's, if
 * the device takes it: 1 fused, 0 not, or a GS_E code. */
static int replace(gs_plan *p, int pv, const attention_match *m, const gs_attention_attrs *aa) {
  int ins[4] = {m->q, m->k, m->v, m->mask};
  int rc = gs__plan_replace_step(p, pv, "Attention", aa, sizeof *aa, ins, m->mask >= 0 ? 4 : 3);
  if (rc <= 0)
    return rc;
  for (int i = 0; i < m->n_gone; i++)
    p->steps[m->gone[i]].dead = true;
  p->report.fused += m->n_gone;
  p->report.attention++;
  return 1;
}

/* Softmax step sm over the last axis of float32 scores: the pattern
 * around it, replaced where it is all there. */
static int fuse_at(gs_plan *p, int sm) {
  const step *s = &p->steps[sm];
  const gs_shape *xs = &p->values[s->in[0]].shape;
  if (s->call->n_in != 1 || p->values[s->in[0]].dtype != GS_DT_FLOAT32 ||
      ((const gs_axis_attrs *)s->call->attrs)->axis != xs->rank - 1)
    return 0;
  int pv = gs__plan_sole_consumer(p, s->out[0]);
  if (pv < 0 || !gs__step_is(&p->steps[pv], "MatMul") || p->steps[pv].in[0] != s->out[0] ||
      p->steps[pv].call->n_in != 2)
    return 0;
  const gs_matmul_attrs *pm = p->steps[pv].call->attrs;
  if (pm->has_bias || pm->b_packed || pm->act != GS_ACT_NONE)
    return 0;
  attention_match m = {.mask = -1, .scale = 1.0f, .keys_transposed = true};
  m.gone[m.n_gone++] = sm;
  int qk = scores_matmul(p, sm, &m);
  if (qk < 0)
    return 0;
  m.gone[m.n_gone++] = qk;
  m.q = p->steps[qk].in[0];
  m.k = p->steps[qk].in[1];
  m.v = p->steps[pv].in[1];
  int kt = m.k; /* Kᵀ as the product read it, for the shapes */
  fold_operands(p, qk, &m);
  if (made_by_gone_step(p, &m))
    return 0;
  gs_attention_attrs a;
  if (!shapes_fit(p, &m, kt, &a))
    return 0;
  return replace(p, pv, &m, &a);
}

int gs__plan_fuse_attention(gs_plan *p) {
  for (int s = 0; s < p->n_steps; s++) {
    if (p->steps[s].dead || !gs__step_is(&p->steps[s], "Softmax"))
      continue;
    int rc = fuse_at(p, s);
    if (rc < 0)
      return rc;
  }
  return 0;
}

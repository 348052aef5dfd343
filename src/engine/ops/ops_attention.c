/* ops_attention.c - the definitions of the transformer ops of opset 23:
 * Attention (opset 24 adds nonpad_kv_seqlen), scaled dot-product attention
 * over heads, with an optional mask (bool: where to look; float: added to
 * the scores), a causal mask, a key/value cache (past_key, past_value in,
 * present_key, present_value out), grouped-query heads, softcap, and the
 * scores as a 4th output; RotaryEmbedding; and opset 24's TensorScatter,
 * which writes new keys or values into a cache. */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

#include <math.h>
#include <string.h>

enum { IN_Q, IN_K, IN_V, IN_MASK, IN_PAST_K, IN_PAST_V, IN_NONPAD };

/* Heads and sizes from Q, K and V (3-D: the heads attributes split them). */
static int read_heads(gs_op_call *c, const gs_node *n, gs_attention_attrs *a) {
  const gs_shape *q = &c->in[IN_Q].shape, *k = &c->in[IN_K].shape, *v = &c->in[IN_V].shape;
  if (q->rank != k->rank || q->rank != v->rank || (q->rank != 3 && q->rank != 4))
    return gs_op_fail(c, "Q, K and V must all be 3-D or all 4-D");
  a->three_d = q->rank == 3;
  a->batch = q->dims[0];
  if (k->dims[0] != a->batch || v->dims[0] != a->batch)
    return gs_op_fail(c, "Q, K and V must have one batch size");
  if (a->three_d) {
    a->q_heads = gs_attr_int(n, "q_num_heads", 0);
    a->kv_heads = gs_attr_int(n, "kv_num_heads", 0);
    if (a->q_heads < 1 || a->kv_heads < 1 || q->dims[2] % a->q_heads ||
        k->dims[2] % a->kv_heads || v->dims[2] % a->kv_heads)
      return gs_op_fail(c, "3-D inputs need q_num_heads and kv_num_heads that divide their "
                           "hidden sizes");
    a->q_seq = q->dims[1];
    a->kv_seq = k->dims[1];
    a->head = q->dims[2] / a->q_heads;
    a->v_head = v->dims[2] / a->kv_heads;
    if (k->dims[2] / a->kv_heads != a->head || v->dims[1] != a->kv_seq)
      return gs_op_fail(c, "K must match Q's head size and V K's sequence");
  } else {
    a->q_heads = q->dims[1];
    a->kv_heads = k->dims[1];
    a->q_seq = q->dims[2];
    a->kv_seq = k->dims[2];
    a->head = q->dims[3];
    a->v_head = v->dims[3];
    if (v->dims[1] != a->kv_heads || k->dims[3] != a->head || v->dims[2] != a->kv_seq)
      return gs_op_fail(c, "K must match Q's head size, and V K's heads and sequence");
  }
  if (a->kv_heads < 1 || a->q_heads % a->kv_heads)
    return gs_op_fail(c, "the %lld query heads must be a multiple of the %lld key/value heads",
                      (long long)a->q_heads, (long long)a->kv_heads);
  return GS_OK;
}

/* past_key [batch, kv_heads, past, head] and past_value [.., past, v_head]. */
static int read_past(gs_op_call *c, gs_attention_attrs *a) {
  a->has_past = gs_op_given(c, IN_PAST_K) || gs_op_given(c, IN_PAST_V);
  if (!a->has_past)
    return GS_OK;
  if (!gs_op_given(c, IN_PAST_K) || !gs_op_given(c, IN_PAST_V))
    return gs_op_fail(c, "past_key and past_value come together");
  const gs_shape *pk = &c->in[IN_PAST_K].shape, *pv = &c->in[IN_PAST_V].shape;
  if (pk->rank != 4 || pv->rank != 4 || pk->dims[0] != a->batch || pv->dims[0] != a->batch ||
      pk->dims[1] != a->kv_heads || pv->dims[1] != a->kv_heads || pk->dims[3] != a->head ||
      pv->dims[3] != a->v_head || pv->dims[2] != pk->dims[2])
    return gs_op_fail(c, "past_key and past_value must be [batch, kv_heads, past, head size]");
  a->past = pk->dims[2];
  return GS_OK;
}

/* The mask: bool or Q's type, broadcast to [batch, q_heads, q_seq, total];
 * a last dim shorter than total is padded with masked positions. */
static int read_mask(gs_op_call *c, gs_attention_attrs *a) {
  a->has_mask = gs_op_given(c, IN_MASK);
  if (!a->has_mask)
    return GS_OK;
  const gs_tensor_desc *m = &c->in[IN_MASK];
  if (m->dtype != GS_DT_BOOL && m->dtype != c->in[IN_Q].dtype)
    return gs_op_fail(c, "attn_mask must be bool or of Q's type");
  a->mask_bool = m->dtype == GS_DT_BOOL;
  if (m->shape.rank < 1 || m->shape.rank > 4)
    return gs_op_fail(c, "attn_mask must have 1 to 4 dims");
  const int64_t full[4] = {a->batch, a->q_heads, a->q_seq, a->total};
  for (int d = 0; d < 4; d++) {
    int src = d - (4 - m->shape.rank);
    a->mask_dims[d] = src < 0 ? 1 : m->shape.dims[src];
    bool fits = d == 3 ? a->mask_dims[d] <= full[d] : a->mask_dims[d] == 1 || a->mask_dims[d] == full[d];
    if (!fits)
      return gs_op_fail(c, "attn_mask's dim %d (%lld) does not broadcast to %lld", src,
                        (long long)a->mask_dims[d], (long long)full[d]);
  }
  return GS_OK;
}

static int infer_attention(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, IN_Q, GS_DTM_FLOATS);
  if (rc < 0)
    return rc;
  for (int i = IN_K; i <= IN_PAST_V; i++)
    if (i != IN_MASK && gs_op_given(c, i) && c->in[i].dtype != c->in[IN_Q].dtype)
      return gs_op_fail(c, "K, V and the past must be of Q's type");
  gs_attention_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  if ((rc = read_heads(c, n, a)) < 0 || (rc = read_past(c, a)) < 0)
    return rc;
  a->total = a->past + a->kv_seq;
  if ((rc = read_mask(c, a)) < 0)
    return rc;
  a->has_nonpad = gs_op_given(c, IN_NONPAD);
  if (a->has_nonpad && (c->in[IN_NONPAD].dtype != GS_DT_INT64 ||
                        gs_shape_numel(&c->in[IN_NONPAD].shape) != a->batch))
    return gs_op_fail(c, "nonpad_kv_seqlen must be int64 [batch]");
  if (a->has_nonpad && a->has_past)
    return gs_op_fail(c, "nonpad_kv_seqlen does not combine with past_key and past_value");
  a->causal = gs_attr_int(n, "is_causal", 0) != 0;
  a->softcap = gs_attr_float(n, "softcap", 0.0f);
  a->qk_mode = (int)gs_attr_int(n, "qk_matmul_output_mode", 0);
  if (a->qk_mode < 0 || a->qk_mode > 3)
    return gs_op_fail(c, "qk_matmul_output_mode must be 0 to 3");
  a->scale = gs_attr_float(n, "scale", 1.0f / sqrtf((float)(a->head ? a->head : 1)));
  gs_dtype dt = c->in[IN_Q].dtype;
  c->out[0].dtype = dt;
  c->out[0].shape = a->three_d
                        ? (gs_shape){.rank = 3, .dims = {a->batch, a->q_seq, a->q_heads * a->v_head}}
                        : (gs_shape){.rank = 4, .dims = {a->batch, a->q_heads, a->q_seq, a->v_head}};
  const gs_shape present[2] = {{.rank = 4, .dims = {a->batch, a->kv_heads, a->total, a->head}},
                               {.rank = 4, .dims = {a->batch, a->kv_heads, a->total, a->v_head}}};
  for (int o = 1; o < c->n_out; o++) {
    c->out[o].dtype = dt;
    c->out[o].shape = o < 3 ? present[o - 1]
                            : (gs_shape){.rank = 4, .dims = {a->batch, a->q_heads, a->q_seq, a->total}};
  }
  return GS_OK;
}

enum { IN_X, IN_COS, IN_SIN, IN_POSITIONS };

static int infer_rotary(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, IN_X, GS_DTM_FLOATS);
  if (rc < 0)
    return rc;
  gs_rotary_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  const gs_shape *x = &c->in[IN_X].shape;
  if (x->rank != 3 && x->rank != 4)
    return gs_op_fail(c, "X must be 3-D or 4-D");
  a->three_d = x->rank == 3;
  a->batch = x->dims[0];
  a->seq = x->dims[a->three_d ? 1 : 2];
  a->heads = a->three_d ? gs_attr_int(n, "num_heads", 0) : x->dims[1];
  if (a->heads < 1 || (a->three_d && x->dims[2] % a->heads))
    return gs_op_fail(c, "3-D X needs num_heads that divides its hidden size");
  a->head = a->three_d ? x->dims[2] / a->heads : x->dims[3];
  a->rot_dim = gs_attr_int(n, "rotary_embedding_dim", 0);
  if (a->rot_dim == 0)
    a->rot_dim = a->head;
  if (a->rot_dim < 0 || a->rot_dim > a->head || a->rot_dim % 2)
    return gs_op_fail(c, "rotary_embedding_dim must be even and at most the head size %lld",
                      (long long)a->head);
  a->interleaved = gs_attr_int(n, "interleaved", 0) != 0;
  a->has_positions = gs_op_given(c, IN_POSITIONS);
  const gs_shape *cs = &c->in[IN_COS].shape, *ss = &c->in[IN_SIN].shape;
  if (c->in[IN_COS].dtype != c->in[IN_X].dtype || c->in[IN_SIN].dtype != c->in[IN_X].dtype ||
      !gs_shape_equal(cs, ss))
    return gs_op_fail(c, "cos_cache and sin_cache must be of X's type and of one shape");
  int64_t half = a->rot_dim / 2;
  if (a->has_positions) {
    const gs_tensor_desc *p = &c->in[IN_POSITIONS];
    if (p->dtype != GS_DT_INT64 || p->shape.rank != 2 || p->shape.dims[0] != a->batch ||
        p->shape.dims[1] != a->seq)
      return gs_op_fail(c, "position_ids must be int64 [batch, sequence]");
    if (cs->rank != 2 || cs->dims[1] != half)
      return gs_op_fail(c, "with position_ids the caches must be [positions, %lld]",
                        (long long)half);
    a->max_pos = cs->dims[0];
  } else if (cs->rank != 3 || cs->dims[0] != a->batch || cs->dims[1] != a->seq ||
             cs->dims[2] != half) {
    return gs_op_fail(c, "without position_ids the caches must be [batch, sequence, %lld]",
                      (long long)half);
  }
  c->out[0] = c->in[IN_X];
  return GS_OK;
}

static int infer_tensor_scatter(gs_op_call *c, const gs_node *n) {
  const gs_shape *cache = &c->in[0].shape, *upd = &c->in[1].shape;
  if (c->in[1].dtype != c->in[0].dtype || cache->rank != upd->rank || cache->rank < 2)
    return gs_op_fail(c, "update must be of past_cache's type and rank (2 or more)");
  gs_tensor_scatter_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  if (gs_axis_normalize(gs_attr_int(n, "axis", -2), cache->rank, &a->axis) < 0 || a->axis == 0)
    return gs_op_fail(c, "axis must be a dim past the batch");
  const char *mode = gs_attr_string(n, "mode", "linear");
  a->circular = strcmp(mode, "circular") == 0;
  if (!a->circular && strcmp(mode, "linear") != 0)
    return gs_op_fail(c, "mode must be linear or circular, not \"%s\"", mode);
  for (int d = 0; d < cache->rank; d++)
    if (d == a->axis ? upd->dims[d] > cache->dims[d] : upd->dims[d] != cache->dims[d])
      return gs_op_fail(c, "update's dim %d (%lld) does not fit past_cache's (%lld)", d,
                        (long long)upd->dims[d], (long long)cache->dims[d]);
  if (gs_op_given(c, 2) && (c->in[2].dtype != GS_DT_INT64 ||
                      gs_shape_numel(&c->in[2].shape) != cache->dims[0]))
    return gs_op_fail(c, "write_indices must be int64 [batch]");
  c->out[0] = c->in[0];
  return GS_OK;
}

static const char *const tensor_scatter_attrs[] = {"axis", "mode", NULL};
static const char *const rotary_attrs[] = {"interleaved", "num_heads", "rotary_embedding_dim",
                                           NULL};
static const char *const attention_attrs[] = {"is_causal", "kv_num_heads", "q_num_heads",
                                               "qk_matmul_output_mode", "scale", "softcap",
                                               "softmax_precision", NULL};

const gs_op_def gs__ops_attention[] = {
    {.name = "Attention", .min_in = 3, .max_in = 7, .min_out = 1, .max_out = 4,
     .attrs = attention_attrs, .infer = infer_attention},
    {.name = "RotaryEmbedding", .min_in = 3, .max_in = 4, .min_out = 1, .max_out = 1,
     .attrs = rotary_attrs, .infer = infer_rotary},
    {.name = "TensorScatter", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = tensor_scatter_attrs, .infer = infer_tensor_scatter},
    {.name = NULL},
};

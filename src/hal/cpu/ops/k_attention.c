/* k_attention.c - the CPU kernels of Attention, RotaryEmbedding (in
 * float32) and TensorScatter (engine/ops/ops_attention.c). Attention: the key/value cache joined into present_key and
 * present_value, then for each query row the scaled scores against every
 * key, the masks, softcap, softmax and the weighted sum of the values.
 * The order of mask and softcap, and what the 4th output holds, are those
 * of the ONNX reference at opsets 23 and 24. */
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/parallel.h"
#include "hal/cpu/ops/softmax_row.h"

#include "base/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { IN_Q, IN_K, IN_V, IN_MASK, IN_PAST_K, IN_PAST_V, IN_NONPAD };

/* An operand as float32: its own bytes where it is float32, else a copy
 * the caller frees (*owned). */
static const float *as_floats(gs_dtype dt, const void *p, int64_t n, float **owned) {
  *owned = NULL;
  if (dt == GS_DT_FLOAT32)
    return p;
  float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
  if (f)
    for (int64_t i = 0; i < n; i++)
      f[i] = (float)gs_ld(dt, p, i);
  *owned = f;
  return f;
}

/* Writes n floats to an output of type dt. */
static void store_floats(gs_dtype dt, void *out, const float *f, int64_t n) {
  if (dt == GS_DT_FLOAT32)
    memcpy(out, f, (size_t)n * sizeof *f);
  else
    for (int64_t i = 0; i < n; i++)
      gs_st(dt, out, i, f[i]);
}

/* Element (b, h, s, d) of Q, K or V, 4-D [b, heads, seq, size] or 3-D
 * [b, seq, heads x size]. */
static int64_t at(bool three_d, int64_t heads, int64_t seq, int64_t size, int64_t b, int64_t h,
                  int64_t s, int64_t d) {
  return three_d ? (b * seq + s) * heads * size + h * size + d
                 : ((b * heads + h) * seq + s) * size + d;
}

/* present = past then the new keys (or values), [batch, kv_heads, total, size]. */
static void join_cache(const gs_attention_attrs *a, const float *past, const float *fresh,
                       int64_t size, float *present) {
  for (int64_t b = 0; b < a->batch; b++)
    for (int64_t h = 0; h < a->kv_heads; h++) {
      float *row = present + ((b * a->kv_heads + h) * a->total) * size;
      if (past)
        memcpy(row, past + ((b * a->kv_heads + h) * a->past) * size,
               (size_t)(a->past * size) * sizeof *row);
      for (int64_t s = 0; s < a->kv_seq; s++)
        for (int64_t d = 0; d < size; d++)
          row[(a->past + s) * size + d] =
              fresh[at(a->three_d, a->kv_heads, a->kv_seq, size, b, h, s, d)];
    }
}

typedef struct attention_run {
  const gs_attention_attrs *a;
  const float *q, *k, *v; /* k and v: present, 4-D */
  const float *mask;      /* float mask, or NULL */
  const uint8_t *mask_bool;
  const int64_t *nonpad;
  float *y, *qk; /* qk: the 4th output, or NULL */
} attention_run;

/* What the masks add to score (b, h, i, j): 0, a float mask's value, or
 * -inf where a position is masked. */
static float bias_at(const attention_run *r, int64_t b, int64_t h, int64_t i, int64_t j) {
  const gs_attention_attrs *a = r->a;
  float bias = 0.0f;
  if (a->has_mask) {
    const int64_t *md = a->mask_dims;
    if (j >= md[3]) { /* past a short mask: padded as masked */
      bias = -INFINITY;
    } else {
      int64_t m = (((md[0] > 1 ? b : 0) * md[1] + (md[1] > 1 ? h : 0)) * md[2] +
                   (md[2] > 1 ? i : 0)) * md[3] + j;
      bias = r->mask_bool ? (r->mask_bool[m] ? 0.0f : -INFINITY) : r->mask[m];
    }
  }
  if ((a->causal && j > i + a->past) || (a->has_nonpad && j >= r->nonpad[b]))
    bias = -INFINITY;
  return bias;
}

/* Query rows [lo, hi) of [batch, q_heads, q_seq]; w: total floats. */
static void attend_rows(const attention_run *r, int64_t lo, int64_t hi, float *w) {
  const gs_attention_attrs *a = r->a;
  int64_t group = a->q_heads / a->kv_heads, T = a->total;
  for (int64_t row = lo; row < hi; row++) {
    int64_t i = row % a->q_seq, h = (row / a->q_seq) % a->q_heads, b = row / (a->q_seq * a->q_heads);
    int64_t g = h / group; /* each key/value head serves `group` query heads in turn */
    const float *kh = r->k + (b * a->kv_heads + g) * T * a->head;
    const float *vh = r->v + (b * a->kv_heads + g) * T * a->v_head;
    float *qk = r->qk ? r->qk + row * T : NULL;
    float mx = -INFINITY;
    for (int64_t j = 0; j < T; j++) {
      float dot = 0.0f;
      for (int64_t d = 0; d < a->head; d++)
        dot += r->q[at(a->three_d, a->q_heads, a->q_seq, a->head, b, h, i, d)] * kh[j * a->head + d];
      float s = dot * a->scale;
      if (qk && a->qk_mode == 0)
        qk[j] = s;
      s += bias_at(r, b, h, i, j);
      if (qk && a->qk_mode == 1)
        qk[j] = s;
      if (a->softcap > 0)
        s = a->softcap * tanhf(s / a->softcap);
      if (qk && a->qk_mode == 2)
        qk[j] = s;
      w[j] = s;
      mx = s > mx ? s : mx;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < T; j++)
      sum += w[j] = expf(w[j] - mx);
    for (int64_t j = 0; j < T; j++) {
      w[j] /= sum;
      if (qk && a->qk_mode == 3)
        qk[j] = w[j];
    }
    for (int64_t e = 0; e < a->v_head; e++) {
      float acc = 0.0f;
      for (int64_t j = 0; j < T; j++)
        acc += w[j] * vh[j * a->v_head + e];
      r->y[at(a->three_d, a->q_heads, a->q_seq, a->v_head, b, h, i, e)] = acc;
    }
  }
}

static int attend(attention_run *r) {
  const gs_attention_attrs *a = r->a;
  int64_t rows = a->batch * a->q_heads * a->q_seq;
  bool failed = false;
  GS_PARALLEL_RANGES(rows, GS_PARALLEL_GRAIN / (a->total * (a->head + a->v_head) + 1), lo, hi, {
    float *w = malloc((size_t)(a->total ? a->total : 1) * sizeof *w);
    if (w)
      attend_rows(r, lo, hi, w);
    else
      __atomic_store_n(&failed, true, __ATOMIC_RELAXED);
    free(w);
  });
  return failed ? gs_error(GS_ENOMEM, "out of memory for attention scores") : GS_OK;
}

/* ---- float32 without a cache: two GEMMs a block of query rows ------------------
 * The scores of ROW_BLOCK query rows against every key come from one GEMM
 * into a buffer of the thread's, which stays in cache while the masks and
 * the softmax pass along it, and a second GEMM weighs the values; Q, K, V
 * and Y are read and written where they are, and the scores of the whole
 * batch are never held (12 heads of 512 x 512 are 12 MiB an image). */

#define ROW_BLOCK 32

/* An operand's rows for (b, head h): where they start and how far apart
 * they are, in the 4-D layout [b, heads, seq, size] or the 3-D one
 * [b, seq, heads x size]. */
static const float *rows_of(const float *x, bool three_d, int64_t heads, int64_t seq,
                            int64_t size, int64_t b, int64_t h, int64_t *ld) {
  *ld = three_d ? heads * size : size;
  return x + (three_d ? b * seq * heads * size + h * size : (b * heads + h) * seq * size);
}

/* Adds to row i's scores (T floats) what bias_at would, a run at a time:
 * the mask's row up to where the short mask, the causal limit or the keys
 * that are not padding end, -inf from there (in place of the mask's value,
 * as bias_at does, so that a masked +inf or NaN in it is not seen). */
static void add_masks(const attention_run *r, int64_t b, int64_t h, int64_t i, float *w) {
  const gs_attention_attrs *a = r->a;
  int64_t T = a->total, end = T;
  const int64_t *md = a->mask_dims;
  if (a->has_mask && md[3] < end)
    end = md[3];
  if (a->causal && i + a->past + 1 < end)
    end = i + a->past + 1;
  if (a->has_nonpad && r->nonpad[b] < end)
    end = r->nonpad[b] > 0 ? r->nonpad[b] : 0;
  if (a->has_mask) {
    int64_t m0 = (((md[0] > 1 ? b : 0) * md[1] + (md[1] > 1 ? h : 0)) * md[2] +
                  (md[2] > 1 ? i : 0)) * md[3];
    if (r->mask_bool) {
      for (int64_t j = 0; j < end; j++)
        w[j] += r->mask_bool[m0 + j] ? 0.0f : -INFINITY;
    } else {
      for (int64_t j = 0; j < end; j++)
        w[j] += r->mask[m0 + j];
    }
  }
  for (int64_t j = end; j < T; j++)
    w[j] += -INFINITY;
}

/* Row i's scores (T floats) masked, softcapped (attend_rows' order), then
 * made exp(s - max): returns 1 / their sum. */
GS_VECTOR_CLONES static float softmax_scores(const attention_run *r, int64_t b, int64_t h,
                                             int64_t i, float *w) {
  const gs_attention_attrs *a = r->a;
  int64_t T = a->total;
  add_masks(r, b, h, i, w);
  if (a->softcap > 0)
    for (int64_t j = 0; j < T; j++)
      w[j] = a->softcap * tanhf(w[j] / a->softcap);
  return 1.0f / gs_softmax_exp_sum_in_place(w, T, gs_softmax_max(w, T));
}

/* Task t of batch x q_heads x blocks of ROW_BLOCK query rows; w: ROW_BLOCK
 * x total floats. */
static void attend_block(const attention_run *r, int64_t t, float *w) {
  const gs_attention_attrs *a = r->a;
  int64_t blocks = (a->q_seq + ROW_BLOCK - 1) / ROW_BLOCK, T = a->total;
  int64_t i0 = t % blocks * ROW_BLOCK, h = t / blocks % a->q_heads, b = t / blocks / a->q_heads;
  int64_t rows = a->q_seq - i0 < ROW_BLOCK ? a->q_seq - i0 : ROW_BLOCK;
  int64_t g = h / (a->q_heads / a->kv_heads), ldq, ldk, ldv, ldy;
  const float *q = rows_of(r->q, a->three_d, a->q_heads, a->q_seq, a->head, b, h, &ldq);
  const float *v = rows_of(r->v, a->three_d, a->kv_heads, T, a->v_head, b, g, &ldv);
  float *y = (float *)rows_of(r->y, a->three_d, a->q_heads, a->q_seq, a->v_head, b, h, &ldy);
  q += i0 * ldq;
  y += i0 * ldy;
  if (a->keys_transposed) { /* [b, kv_heads, head, T] */
    gs__cpu_sgemm(false, false, rows, T, a->head, a->scale, q, ldq,
                  r->k + (b * a->kv_heads + g) * a->head * T, T, 0.0f, w, T);
  } else {
    const float *k = rows_of(r->k, a->three_d, a->kv_heads, T, a->head, b, g, &ldk);
    gs__cpu_sgemm(false, true, rows, T, a->head, a->scale, q, ldq, k, ldk, 0.0f, w, T);
  }
  float inv[ROW_BLOCK];
  for (int64_t i = 0; i < rows; i++)
    inv[i] = softmax_scores(r, b, h, i0 + i, w + i * T);
  gs__cpu_sgemm(false, false, rows, a->v_head, T, 1.0f, w, T, v, ldv, 0.0f, y, ldy);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t e = 0; e < a->v_head; e++)
      y[i * ldy + e] *= inv[i];
}

static int attend_f32(attention_run *r) {
  const gs_attention_attrs *a = r->a;
  int64_t tasks = a->batch * a->q_heads * ((a->q_seq + ROW_BLOCK - 1) / ROW_BLOCK);
  bool failed = false;
  if (a->total == 0) /* no keys: attend_rows' answer, zeros, without reading K or V */
    return attend(r);
  GS_PARALLEL_RANGES(tasks, 1, lo, hi, {
    float *w = malloc(sizeof *w * (size_t)(ROW_BLOCK * a->total));
    for (int64_t t = lo; w && t < hi; t++)
      attend_block(r, t, w);
    if (!w)
      __atomic_store_n(&failed, true, __ATOMIC_RELAXED);
    free(w);
  });
  return failed ? gs_error(GS_ENOMEM, "out of memory for attention scores") : GS_OK;
}

static int64_t numel(const gs_tensor_desc *t) { return gs_shape_numel(&t->shape); }

/* float32 with no cache and no 4th output: Q, K, V and Y are used where
 * they are, with nothing to convert or join. */
static bool uses_operands_directly(const gs_op_call *c) {
  const gs_attention_attrs *a = c->attrs;
  return c->in[IN_Q].dtype == GS_DT_FLOAT32 && !a->has_past && c->n_out == 1;
}

static int k_attention(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_attention_attrs *a = c->attrs;
  gs_dtype dt = c->in[IN_Q].dtype;
  attention_run r = {.a = a};
  if (uses_operands_directly(c)) {
    r.q = k->ptr[IN_Q];
    r.k = k->ptr[IN_K];
    r.v = k->ptr[IN_V];
    r.mask = a->has_mask && !a->mask_bool ? k->ptr[IN_MASK] : NULL;
    r.mask_bool = a->mask_bool ? k->ptr[IN_MASK] : NULL;
    r.nonpad = a->has_nonpad ? k->ptr[IN_NONPAD] : NULL;
    r.y = k->ptr[c->n_in];
    return attend_f32(&r);
  }
  if (a->keys_transposed) /* the plan fuses float32 without a cache only */
    return gs_error(GS_ENOTSUP, "node %s: transposed keys need float32 attention without a "
                    "cache", c->node_name);
  float *owned[6] = {NULL}, *pk = NULL, *pv = NULL, *y = NULL, *qk = NULL;
  const float *kin = NULL, *vin = NULL, *past_k = NULL, *past_v = NULL;
  int rc = GS_OK;
  r.q = as_floats(dt, k->ptr[IN_Q], numel(&c->in[IN_Q]), &owned[0]);
  kin = as_floats(dt, k->ptr[IN_K], numel(&c->in[IN_K]), &owned[1]);
  vin = as_floats(dt, k->ptr[IN_V], numel(&c->in[IN_V]), &owned[2]);
  if (a->has_mask && !a->mask_bool)
    r.mask = as_floats(dt, k->ptr[IN_MASK], numel(&c->in[IN_MASK]), &owned[3]);
  r.mask_bool = a->mask_bool ? k->ptr[IN_MASK] : NULL;
  if (a->has_past) {
    past_k = as_floats(dt, k->ptr[IN_PAST_K], numel(&c->in[IN_PAST_K]), &owned[4]);
    past_v = as_floats(dt, k->ptr[IN_PAST_V], numel(&c->in[IN_PAST_V]), &owned[5]);
  }
  r.nonpad = a->has_nonpad ? k->ptr[IN_NONPAD] : NULL;
  int64_t nk = a->batch * a->kv_heads * a->total * a->head;
  int64_t nv = a->batch * a->kv_heads * a->total * a->v_head;
  int64_t ny = numel(&c->out[0]), nqk = a->batch * a->q_heads * a->q_seq * a->total;
  pk = malloc((size_t)(nk ? nk : 1) * sizeof *pk);
  pv = malloc((size_t)(nv ? nv : 1) * sizeof *pv);
  y = malloc((size_t)(ny ? ny : 1) * sizeof *y);
  void *qk_out = c->n_out > 3 ? k->ptr[c->n_in + 3] : NULL;
  if (qk_out)
    qk = malloc((size_t)(nqk ? nqk : 1) * sizeof *qk);
  if (!r.q || !kin || !vin || (a->has_mask && !a->mask_bool && !r.mask) ||
      (a->has_past && (!past_k || !past_v)) || !pk || !pv || !y || (qk_out && !qk)) {
    rc = gs_error(GS_ENOMEM, "out of memory running attention node %s", c->node_name);
  } else {
    join_cache(a, past_k, kin, a->head, pk);
    join_cache(a, past_v, vin, a->v_head, pv);
    r.k = pk;
    r.v = pv;
    r.y = y;
    r.qk = qk;
    rc = attend(&r);
  }
  if (rc == GS_OK) {
    store_floats(dt, k->ptr[c->n_in], y, ny);
    if (c->n_out > 1 && k->ptr[c->n_in + 1])
      store_floats(dt, k->ptr[c->n_in + 1], pk, nk);
    if (c->n_out > 2 && k->ptr[c->n_in + 2])
      store_floats(dt, k->ptr[c->n_in + 2], pv, nv);
    if (qk_out)
      store_floats(dt, qk_out, qk, nqk);
  }
  for (int i = 0; i < 6; i++)
    free(owned[i]);
  free(pk);
  free(pv);
  free(y);
  free(qk);
  return rc;
}

/* Each head's first rot_dim values at (b, s) turned by the cache row of
 * that position. */
static int k_rotary(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_rotary_attrs *a = c->attrs;
  gs_dtype dt = c->in[0].dtype;
  const int64_t *positions = a->has_positions ? k->ptr[3] : NULL;
  int64_t half = a->rot_dim / 2;
  for (int64_t b = 0; b < a->batch; b++)
    for (int64_t s = 0; s < a->seq; s++) {
      int64_t row = b * a->seq + s;
      if (positions) {
        row = positions[b * a->seq + s];
        if (row < 0 || row >= a->max_pos)
          return gs_error(GS_EINVAL, "node %s (RotaryEmbedding): position %lld is out of range "
                          "[0, %lld)", c->node_name, (long long)row, (long long)a->max_pos);
      }
      for (int64_t h = 0; h < a->heads; h++) {
        int64_t base = at(a->three_d, a->heads, a->seq, a->head, b, h, s, 0);
        for (int64_t i = 0; i < half; i++) {
          double co = gs_ld(dt, k->ptr[1], row * half + i), si = gs_ld(dt, k->ptr[2], row * half + i);
          int64_t i1 = a->interleaved ? 2 * i : i, i2 = a->interleaved ? 2 * i + 1 : i + half;
          double x1 = gs_ld(dt, k->ptr[0], base + i1), x2 = gs_ld(dt, k->ptr[0], base + i2);
          gs_st(dt, k->ptr[c->n_in], base + i1, co * x1 - si * x2);
          gs_st(dt, k->ptr[c->n_in], base + i2, si * x1 + co * x2);
        }
        for (int64_t d = a->rot_dim; d < a->head; d++)
          gs_st(dt, k->ptr[c->n_in], base + d, gs_ld(dt, k->ptr[0], base + d));
      }
    }
  return GS_OK;
}

/* The cache copied, then each batch's update rows written from its index. */
static int k_tensor_scatter(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_tensor_scatter_attrs *a = c->attrs;
  const gs_shape *cs = &c->in[0].shape, *us = &c->in[1].shape;
  size_t es = gs_dtype_size(c->in[0].dtype);
  const int64_t *write_at = c->n_in > 2 && c->in[2].dtype != GS_DT_INVALID ? k->ptr[2] : NULL;
  int64_t outer = 1, inner = 1, len = cs->dims[a->axis], n = us->dims[a->axis];
  for (int d = 0; d < a->axis; d++)
    outer *= cs->dims[d];
  for (int d = a->axis + 1; d < cs->rank; d++)
    inner *= cs->dims[d];
  if (outer * len * inner == 0) /* an empty batch or cache */
    return GS_OK;
  int64_t per_batch = outer / cs->dims[0];
  char *y = k->ptr[c->n_in];
  if (y != k->ptr[0])
    memcpy(y, k->ptr[0], (size_t)(outer * len * inner) * es);
  for (int64_t o = 0; o < outer; o++) {
    int64_t from = write_at ? write_at[o / per_batch] : 0;
    for (int64_t s = 0; s < n; s++) {
      int64_t to = from + s;
      if (a->circular)
        to = ((to % len) + len) % len;
      if (to < 0 || to >= len)
        return gs_error(GS_EINVAL, "node %s (TensorScatter): write index %lld is out of range "
                        "[0, %lld)", c->node_name, (long long)to, (long long)len);
      memcpy(y + (size_t)((o * len + to) * inner) * es,
             (const char *)k->ptr[1] + (size_t)((o * n + s) * inner) * es, (size_t)inner * es);
    }
  }
  return GS_OK;
}

static const gs_cpu_kernel_entry kernels[] = {GS_CPU_KERNEL("Attention", k_attention),
                                              GS_CPU_KERNEL("RotaryEmbedding", k_rotary),
                                              GS_CPU_KERNEL("TensorScatter", k_tensor_scatter)};

int gs__cpu_register_attention(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

/* plan_weights.c - constant weights stored, once when planned, in the
 * layout their kernel reads fastest.
 *
 * On a device whose caps say `packed_products` (the CPU), the constant B
 * of a float32 Gemm or MatMul is packed in panels (hal/op/op_packed.h), in
 * place of its plain copy: a product of a few rows then reads B front to
 * back, a cache line per row of a panel, where oneDNN's sgemm packed B
 * again on every call (sgemm_packed.c has the figures). Nothing is added
 * to the plan's memory but a panel's padding: only a B that no other step
 * reads is packed. A Gemm's B given transposed (transB=1, as
 * torch.onnx.export writes nn.Linear) is packed the same way.
 *
 * Products of more than GS_PACKED_MAX_ROWS rows keep B plain, for oneDNN.
 * A served model whose plans fall on both sides of that (a transformer of
 * 128 tokens at batch 1 and at batch 4) holds both copies in its weight
 * set: each plan gets its faster kernel, at the price of that memory. */
#include "engine/plan_internal.h"

#include "base/error.h"
#include "hal/op/op_attrs.h"
#include "hal/op/op_packed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values of B (1 MiB) below which oneDNN's sgemm stays: B then sits in
 * the core's L2 cache, and the packing oneDNN does on every call costs
 * little against its kernel, which was faster there (the 256-512-256 MLP
 * of bench/models at 32 rows: 0.7x the throughput with B packed). */
#define MIN_B_VALUES (256 * 1024)

/* The product's sizes where step s can take its B packed, else false. */
static bool packable(gs_plan *p, int s, int64_t *k, int64_t *n, bool *trans_b) {
  const step *st = &p->steps[s];
  const gs_op_call *c = st->call;
  if (gs__step_is(st, "Gemm")) {
    const gs_gemm_attrs *g = c->attrs;
    if (g->trans_a || g->m > GS_PACKED_MAX_ROWS)
      return false;
    *k = g->k, *n = g->n, *trans_b = g->trans_b;
  } else if (gs__step_is(st, "MatMul")) {
    const gs_matmul_attrs *m = c->attrs;
    if (m->batch != 1 || m->m > GS_PACKED_MAX_ROWS)
      return false;
    *k = m->k, *n = m->n, *trans_b = false;
  } else {
    return false;
  }
  if (c->n_in < 2 || st->in[1] < 0 || c->in[0].dtype != GS_DT_FLOAT32 ||
      c->out[0].dtype != GS_DT_FLOAT32)
    return false;
  const value *w = &p->values[st->in[1]];
  return w->data && w->dtype == GS_DT_FLOAT32 && !w->graph_input &&
         gs_shape_numel(&w->shape) == *k * *n && *k * *n >= MIN_B_VALUES &&
         gs__plan_sole_consumer(p, st->in[1]) == s;
}

/* Step s's constant B replaced by a new value holding it packed. */
static int pack_b(gs_plan *p, int s) {
  int64_t k, n;
  bool trans_b;
  if (!packable(p, s, &k, &n, &trans_b))
    return 0;
  step *st = &p->steps[s];
  const value *w = &p->values[st->in[1]];
  int64_t floats = gs_packed_floats(k, n);
  char name[512];
  snprintf(name, sizeof name, "%s/packed", w->name);
  char *own_name = strdup(name);
  float *data = malloc(sizeof(float) * (size_t)floats);
  if (!own_name || !data) {
    free(own_name);
    free(data);
    return gs_error(GS_ENOMEM, "out of memory packing the weights of node %s",
                    st->call->node_name);
  }
  gs_pack_b(w->data, trans_b, k, n, data);
  const void *share_key = w->share_key;
  gs_shape shape = {.rank = 3, .dims = {floats / k / GS_PACKED_PANEL, k, GS_PACKED_PANEL}};
  int v = gs__plan_add_value(p, own_name, GS_DT_FLOAT32, &shape); /* may move p->values */
  if (v < 0) {
    free(own_name);
    free(data);
    return v;
  }
  value *t = &p->values[v];
  t->data = data;
  t->share_key = share_key; /* the weight set tells it apart by its name */
  t->owns_data = t->owns_name = true;
  st->in[1] = v;
  st->call->in[1].shape = shape;
  if (gs__step_is(st, "Gemm"))
    ((gs_gemm_attrs *)st->call->attrs)->b_packed = true;
  else
    ((gs_matmul_attrs *)st->call->attrs)->b_packed = true;
  p->report.packed++;
  return 0;
}

int gs__plan_lay_out_weights(gs_plan *p) {
  if (!p->device || !gs_device_get_caps(p->device)->packed_products)
    return 0;
  for (int s = 0; s < p->n_steps; s++) {
    int rc = pack_b(p, s);
    if (rc < 0)
      return rc;
  }
  return 0;
}

/* dnnl_matmul.c - a MatMul of several products (attention's batched
 * products, broadcast batch dimensions) as one oneDNN matmul primitive:
 * oneDNN spreads the whole batch over the stream's threads, where a loop
 * of small GEMMs would open a parallel region per product. The primitive
 * is made once per plan step, for its fixed shapes, and kept in the step's
 * kernel state; the operands stay in the engine's row-major layout. */
#include "hal/cpu/ops/dnnl_conv.h"

#include "base/error.h"
#include "hal/cpu/ops/parallel.h"
#include "base/log.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>

typedef struct matmul_state {
  dnnl_primitive_t matmul;
  dnnl_memory_t src, weights, bias, dst;
  dnnl_stream_t stream; /* runs of one plan are serialised, so one stream serves */
  bool failed;          /* oneDNN cannot do this one: the caller loops over GEMMs */
} matmul_state;

static void destroy_state(void *p) {
  matmul_state *s = p;
  if (!s)
    return;
  if (s->matmul)
    dnnl_primitive_destroy(s->matmul);
  if (s->stream)
    dnnl_stream_destroy(s->stream);
  dnnl_memory_t mems[] = {s->src, s->weights, s->bias, s->dst};
  for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
    if (mems[i])
      dnnl_memory_destroy(mems[i]);
  free(s);
}

/* A row-major [batch..., rows, cols] operand whose batch strides are
 * `batch_strides` (0: broadcast, a dimension of 1 for oneDNN). */
static dnnl_status_t operand_md(dnnl_memory_desc_t *md, const gs_matmul_attrs *a,
                                const int64_t *batch_strides, int64_t rows, int64_t cols) {
  int nd = a->batch_rank + 2;
  dnnl_dims_t dims, strides;
  for (int d = 0; d < a->batch_rank; d++) {
    bool broadcast = batch_strides && batch_strides[d] == 0;
    dims[d] = broadcast ? 1 : a->batch_dims[d];
    strides[d] = broadcast ? rows * cols : batch_strides ? batch_strides[d] : 0;
  }
  dims[nd - 2] = rows;
  dims[nd - 1] = cols;
  strides[nd - 2] = cols;
  strides[nd - 1] = 1;
  if (!batch_strides) /* dense: the output, and the bias's [1..., 1, n] */
    for (int d = a->batch_rank - 1; d >= 0; d--)
      strides[d] = strides[d + 1] * dims[d + 1];
  return dnnl_memory_desc_init_by_strides(md, nd, dims, dnnl_f32, strides);
}

static dnnl_status_t build(matmul_state *s, const gs_matmul_attrs *a, dnnl_engine_t engine) {
  dnnl_memory_desc_t src, weights, bias, dst;
  gs_matmul_attrs ones = *a; /* the bias broadcasts over every batch dimension and row */
  for (int d = 0; d < ones.batch_rank; d++)
    ones.batch_dims[d] = 1;
  dnnl_status_t st = operand_md(&src, a, a->a_batch_strides, a->m, a->k);
#define TRY(x) \
  if (st == dnnl_success) \
  st = (x)
  TRY(operand_md(&weights, a, a->b_batch_strides, a->k, a->n));
  TRY(operand_md(&dst, a, NULL, a->m, a->n));
  TRY(operand_md(&bias, &ones, NULL, 1, a->n));
  dnnl_matmul_desc_t md;
  TRY(dnnl_matmul_desc_init(&md, &src, &weights, a->has_bias ? &bias : NULL, &dst));
  dnnl_primitive_attr_t attr = NULL;
  TRY(dnnl_primitive_attr_create(&attr));
  TRY(gs__dnnl_set_activation(attr, a->act, a->act_lo, a->act_hi));
  dnnl_primitive_desc_t pd = NULL;
  TRY(dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL));
  if (attr)
    dnnl_primitive_attr_destroy(attr);
  TRY(dnnl_primitive_create(&s->matmul, pd));
  if (pd)
    dnnl_primitive_desc_destroy(pd);
  TRY(dnnl_memory_create(&s->src, &src, engine, DNNL_MEMORY_NONE));
  TRY(dnnl_memory_create(&s->weights, &weights, engine, DNNL_MEMORY_NONE));
  TRY(dnnl_memory_create(&s->bias, &bias, engine, DNNL_MEMORY_NONE));
  TRY(dnnl_memory_create(&s->dst, &dst, engine, DNNL_MEMORY_NONE));
  TRY(dnnl_stream_create(&s->stream, engine, dnnl_stream_default_flags));
#undef TRY
  return st;
}

static int matmul_run(const gs_op_call *c, float *const *p, bool *done);

/* A small product is made and run on one thread (parallel.h). */
int gs__dnnl_matmul(const gs_op_call *c, float *const *p, bool *done) {
  const gs_matmul_attrs *a = c->attrs;
  int saved = gs_parallel_small(2.0 * (double)a->batch * (double)a->m * (double)a->n *
                                (double)a->k);
  int rc = matmul_run(c, p, done);
  gs_parallel_restore(saved);
  return rc;
}

static int matmul_run(const gs_op_call *c, float *const *p, bool *done) {
  *done = false;
  const gs_matmul_attrs *a = c->attrs;
  dnnl_engine_t engine = gs__dnnl_engine();
  if (!engine || !c->state || a->m == 0 || a->n == 0 || a->k == 0 ||
      a->batch_rank + 2 > DNNL_MAX_NDIMS)
    return 0;
  matmul_state *s = c->state->ptr;
  if (!s) {
    if (!(s = calloc(1, sizeof *s)))
      return gs_error(GS_ENOMEM, "out of memory for the oneDNN state of node %s", c->node_name);
    c->state->ptr = s;
    c->state->free = destroy_state;
    if (build(s, a, engine) != dnnl_success) {
      GS_LOGD("engine", "node %s: oneDNN cannot run this MatMul; using a GEMM per product",
              c->node_name);
      s->failed = true;
    }
  }
  if (s->failed)
    return 0;
  dnnl_memory_set_data_handle(s->src, p[0]);
  dnnl_memory_set_data_handle(s->weights, p[1]);
  dnnl_memory_set_data_handle(s->dst, p[c->n_in]);
  if (a->has_bias)
    dnnl_memory_set_data_handle(s->bias, p[2]);
  dnnl_exec_arg_t args[] = {
      {DNNL_ARG_SRC, s->src},
      {DNNL_ARG_WEIGHTS, s->weights},
      {DNNL_ARG_DST, s->dst},
      {DNNL_ARG_BIAS, s->bias},
  };
  dnnl_status_t st = dnnl_primitive_execute(s->matmul, s->stream, a->has_bias ? 4 : 3, args);
  if (st == dnnl_success)
    st = dnnl_stream_wait(s->stream);
  if (st != dnnl_success)
    return gs_error(GS_EDEVICE, "node %s: oneDNN matmul failed (status %d)", c->node_name,
                    (int)st);
  *done = true;
  return 0;
}

/* dnnl_qmatmul.c - the int32 product of the quantised MatMul family
 * (QLinearMatMul, MatMulInteger, MatMulIntegerToFloat,
 * DynamicQuantizeMatMul, QGemm) through oneDNN's int8 matmul primitive,
 * where B is a constant int8 matrix: oneDNN reorders B once into the
 * layout its kernels read (VNNI-blocked where the CPU has it), where the
 * BLAS-like integer GEMM would pack it again on every call, which costs
 * more than the product at small batches. B's zero point goes into the
 * primitive; A's (which DynamicQuantizeLinear chooses anew on every run)
 * is taken away afterwards with B's column sums, kept beside the packed B,
 * so that no run has to make the primitive again. The caller's output
 * stage scales and requantises the int32 result. The primitive is made
 * once per plan step (again if B's zero point changes).
 *
 * Without VNNI (dnnl_conv.h) the primitive's u8 x s8 kernels add each pair
 * of products in int16, which saturates. There A is made unsigned and cut
 * in two, A' = A + shift = 128 H + L (H in {0, 1}, L in [0, 127]), so that
 * no pair passes int16 (2 * 127 * 128 < 32768); both halves go through the
 * same primitive, with B kept as it is, and the results are put together:
 *   C = 128 P(H) + P(L) - b_zero rowsum(A') - (shift + a_zero) col_sums.
 * A few rows (batch 1) go through qgemv.h instead, with B packed once for
 * it: oneDNN's GEMM would pack B on every call. */
#include "hal/cpu/ops/dnnl_qmatmul.h"

#include "base/error.h"
#include "base/log.h"
#include "hal/cpu/ops/dnnl_conv.h"
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/parallel.h"
#include "hal/cpu/ops/qmath.h"
#include "hal/cpu/ops/qgemv.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>

typedef struct qmm_state {
  dnnl_primitive_t matmul, w_reorder;
  dnnl_memory_t src, w_plain, w_packed, dst;
  dnnl_stream_t stream;
  const void *w_cached; /* the B the packed copy and the sums were made from */
  int64_t *col_sums;    /* over k of (B - b_zero), per column */
  gs_qmatmul_shape shape; /* as built */
  bool built, failed;
  bool split; /* no VNNI: A in two halves, b_zero applied here (above) */
  int8_t *gemv_b; /* no VNNI, few rows: B packed for gs__qgemv */
} qmm_state;

static void release(qmm_state *s) {
  free(s->col_sums);
  free(s->gemv_b);
  if (s->matmul)
    dnnl_primitive_destroy(s->matmul);
  if (s->w_reorder)
    dnnl_primitive_destroy(s->w_reorder);
  dnnl_memory_t mems[] = {s->src, s->w_plain, s->w_packed, s->dst};
  for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
    if (mems[i])
      dnnl_memory_destroy(mems[i]);
  if (s->stream)
    dnnl_stream_destroy(s->stream);
  memset(s, 0, sizeof *s);
}

static void destroy_state(void *p) {
  if (p) {
    release(p);
    free(p);
  }
}

/* What the primitive depends on (A's zero point is applied afterwards). */
static bool same_shape(const gs_qmatmul_shape *a, const gs_qmatmul_shape *b) {
  return a->m == b->m && a->k == b->k && a->n == b->n && a->b_zero == b->b_zero &&
         a->a_signed == b->a_signed && a->trans_b == b->trans_b && a->b_const == b->b_const;
}

static void sum_columns(const gs_qmatmul_shape *q, const int8_t *b, int64_t *sums) {
  for (int64_t j = 0; j < q->n; j++)
    sums[j] = -q->k * (int64_t)q->b_zero;
  for (int64_t p = 0; p < q->k; p++)
    for (int64_t j = 0; j < q->n; j++)
      sums[j] += b[q->trans_b ? j * q->k + p : p * q->n + j];
}

static dnnl_status_t build(qmm_state *s, dnnl_engine_t engine) {
  const gs_qmatmul_shape *q = &s->shape;
  dnnl_dims_t a_dims = {q->m, q->k}, b_dims = {q->k, q->n}, c_dims = {q->m, q->n};
  dnnl_memory_desc_t a_md, b_any, b_plain, c_md;
  dnnl_status_t st = dnnl_success;
#define TRY(x) \
  if (st == dnnl_success) \
  st = (x)
  bool a_signed = q->a_signed && !s->split; /* split halves are unsigned */
  TRY(dnnl_memory_desc_init_by_tag(&a_md, 2, a_dims, a_signed ? dnnl_s8 : dnnl_u8, dnnl_ab));
  TRY(dnnl_memory_desc_init_by_tag(&b_any, 2, b_dims, dnnl_s8, dnnl_format_tag_any));
  /* B as stored: [k, n], or [n, k] read transposed (tag ba). */
  TRY(dnnl_memory_desc_init_by_tag(&b_plain, 2, b_dims, dnnl_s8, q->trans_b ? dnnl_ba : dnnl_ab));
  TRY(dnnl_memory_desc_init_by_tag(&c_md, 2, c_dims, dnnl_s32, dnnl_ab));
  dnnl_matmul_desc_t md;
  TRY(dnnl_matmul_desc_init(&md, &a_md, &b_any, NULL, &c_md));
  dnnl_primitive_attr_t attr = NULL;
  TRY(dnnl_primitive_attr_create(&attr));
  if (q->b_zero && !s->split)
    TRY(dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_WEIGHTS, 1, 0, &q->b_zero));
  dnnl_primitive_desc_t pd = NULL;
  TRY(dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL));
  if (attr)
    dnnl_primitive_attr_destroy(attr);
  if (st != dnnl_success)
    return st;
  const dnnl_memory_desc_t *w_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  TRY(dnnl_primitive_create(&s->matmul, pd));
  if (!dnnl_memory_desc_equal(&b_plain, w_md)) {
    dnnl_primitive_desc_t rpd = NULL;
    TRY(dnnl_reorder_primitive_desc_create(&rpd, &b_plain, engine, w_md, engine, NULL));
    TRY(dnnl_primitive_create(&s->w_reorder, rpd));
    if (rpd)
      dnnl_primitive_desc_destroy(rpd);
    TRY(dnnl_memory_create(&s->w_packed, w_md, engine, DNNL_MEMORY_ALLOCATE));
  }
  TRY(dnnl_memory_create(&s->src, &a_md, engine, DNNL_MEMORY_NONE));
  TRY(dnnl_memory_create(&s->w_plain, &b_plain, engine, DNNL_MEMORY_NONE));
  TRY(dnnl_memory_create(&s->dst, &c_md, engine, DNNL_MEMORY_NONE));
  TRY(dnnl_stream_create(&s->stream, engine, dnnl_stream_default_flags));
  if (st == dnnl_success && !(s->col_sums = malloc(sizeof(int64_t) * (size_t)q->n)))
    st = dnnl_out_of_memory;
#undef TRY
  dnnl_primitive_desc_destroy(pd);
  return st;
}

/* One execution of the primitive, src -> dst, with B as kept. */
static dnnl_status_t execute(qmm_state *s, const void *src, int32_t *dst) {
  dnnl_memory_set_data_handle(s->src, (void *)src);
  dnnl_memory_set_data_handle(s->dst, dst);
  dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, s->src},
                            {DNNL_ARG_WEIGHTS, s->w_reorder ? s->w_packed : s->w_plain},
                            {DNNL_ARG_DST, s->dst}};
  dnnl_status_t st = dnnl_primitive_execute(s->matmul, s->stream, 3, args);
  return st == dnnl_success ? dnnl_stream_wait(s->stream) : st;
}

/* B in the primitive's layout and its column sums: once for a constant B. */
static dnnl_status_t keep_weights(qmm_state *s, const gs_qmatmul_shape *q, const int8_t *b) {
  if (s->w_plain) /* none for qgemv.h alone */
    dnnl_memory_set_data_handle(s->w_plain, (void *)b);
  if (q->b_const && s->w_cached == b)
    return dnnl_success;
  dnnl_status_t st = dnnl_success;
  if (s->w_reorder) {
    dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, s->w_plain}, {DNNL_ARG_TO, s->w_packed}};
    st = dnnl_primitive_execute(s->w_reorder, s->stream, 2, args);
  }
  if (s->gemv_b)
    gs__qgemv_pack(b, q->trans_b, q->k, q->n, s->gemv_b);
  sum_columns(q, b, s->col_sums);
  s->w_cached = st == dnnl_success ? b : NULL; /* a failed reorder is done again */
  return st;
}

/* A's row sums, for taking B's zero point away. */
static void sum_rows(const gs_qmatmul_shape *q, const void *a, int64_t *rows) {
  for (int64_t i = 0; i < q->m; i++) {
    int64_t sum = 0;
    for (int64_t p = 0; p < q->k; p++)
      sum += q->a_signed ? ((const int8_t *)a)[i * q->k + p] : ((const uint8_t *)a)[i * q->k + p];
    rows[i] = sum;
  }
}

/* Rows [lo, hi) of out less b_zero rowsum(A)_i and corr_j. */
GS_VECTOR_CLONES
static void take_away_rows(const gs_qmatmul_shape *q, const int64_t *rows, const uint32_t *corr,
                           int32_t *out, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) {
    uint32_t rz = rows ? (uint32_t)(uint64_t)((int64_t)q->b_zero * rows[i]) : 0;
    int32_t *row = out + i * q->n;
    for (int64_t j = 0; j < q->n; j++)
      row[j] = (int32_t)((uint32_t)row[j] - rz - corr[j]);
  }
}

/* out -= b_zero rowsum(A)_i + a_zero col_sums_j, wrapping as int32 does;
 * rows NULL where the primitive took B's zero point. corr has room for n. */
static void take_away_zeros(const gs_qmatmul_shape *q, int64_t a_zero, const int64_t *rows,
                            const int64_t *col_sums, uint32_t *corr, int32_t *out) {
  for (int64_t j = 0; j < q->n; j++)
    corr[j] = (uint32_t)(uint64_t)(a_zero * col_sums[j]);
  GS_PARALLEL_RANGES(q->m, GS_PARALLEL_GRAIN / (q->n + 1) + 1, lo, hi,
                     take_away_rows(q, rows, corr, out, lo, hi));
}

/* A few rows without VNNI: A B exactly through qgemv.h, then the zero points. */
static dnnl_status_t run_gemv(qmm_state *s, const gs_qmatmul_shape *q, const void *a,
                              int32_t *out) {
  int64_t *rows = malloc(sizeof *rows * (size_t)q->m);
  uint32_t *corr = malloc(sizeof *corr * (size_t)q->n);
  dnnl_status_t st = rows && corr && gs__qgemv(a, q->a_signed, q->m, q->k, q->n, s->gemv_b, out)
                         ? dnnl_success : dnnl_out_of_memory;
  if (st == dnnl_success) {
    sum_rows(q, a, rows);
    take_away_zeros(q, q->a_zero, rows, s->col_sums, corr, out);
  }
  free(rows);
  free(corr);
  return st;
}

/* out += 128 high, wrapping as int32 hardware does (in uint32). */
GS_VECTOR_CLONES
static void add_high(const int32_t *high, int32_t *out, int64_t n) {
  for (int64_t x = 0; x < n; x++)
    out[x] = (int32_t)(128u * (uint32_t)high[x] + (uint32_t)out[x]);
}

/* The product without VNNI, in two halves of A (top of the file). */
static dnnl_status_t run_split(qmm_state *s, const gs_qmatmul_shape *q, const void *a,
                               int32_t *out) {
  size_t ak = (size_t)(q->m * q->k);
  uint8_t *halves = malloc(2 * ak);
  int32_t *high = malloc(sizeof *high * (size_t)(q->m * q->n));
  int64_t *rows = malloc(sizeof *rows * (size_t)q->m);
  uint32_t *corr = malloc(sizeof *corr * (size_t)q->n);
  dnnl_status_t st = halves && high && rows && corr ? dnnl_success : dnnl_out_of_memory;
  for (int64_t i = 0; st == dnnl_success && i < q->m; i++) {
    uint8_t *hi = halves + i * q->k, *lo = halves + ak + i * q->k;
    rows[i] = gs__q_split(q->a_signed ? GS_DT_INT8 : GS_DT_UINT8, (const uint8_t *)a + i * q->k,
                         q->k, hi, lo);
  }
  if (st == dnnl_success)
    st = execute(s, halves, high);
  if (st == dnnl_success)
    st = execute(s, halves + ak, out);
  if (st == dnnl_success) {
    add_high(high, out, q->m * q->n);
    take_away_zeros(q, (q->a_signed ? 128 : 0) + (int64_t)q->a_zero, rows, s->col_sums, corr, out);
  }
  free(halves);
  free(high);
  free(rows);
  free(corr);
  return st;
}

/* The product with VNNI: the primitive, with B's zero point, then A's. */
static dnnl_status_t run_direct(qmm_state *s, const gs_qmatmul_shape *q, const void *a,
                                int32_t *out) {
  dnnl_status_t st = execute(s, a, out);
  if (st != dnnl_success || !q->a_zero)
    return st;
  uint32_t *corr = malloc(sizeof *corr * (size_t)q->n);
  if (!corr)
    return dnnl_out_of_memory;
  take_away_zeros(q, q->a_zero, NULL, s->col_sums, corr, out);
  free(corr);
  return dnnl_success;
}

int gs__dnnl_qmatmul(const gs_op_call *c, const gs_qmatmul_shape *q, const void *a,
                     const int8_t *b, int32_t *out, bool *done) {
  *done = false;
  dnnl_engine_t engine = gs__dnnl_engine();
  if (!engine || !c->state || q->m == 0 || q->n == 0 || q->k == 0)
    return 0;
  qmm_state *s = c->state->ptr;
  if (!s) {
    if (!(s = calloc(1, sizeof *s)))
      return gs_error(GS_ENOMEM, "out of memory for the oneDNN state of node %s", c->node_name);
    c->state->ptr = s;
    c->state->free = destroy_state;
  }
  if (s->failed)
    return 0;
  if (!s->built || !same_shape(&s->shape, q)) {
    release(s);
    s->shape = *q;
    s->built = true;
    s->split = !gs__dnnl_int8_exact();
    if (s->split && q->m <= GS_QGEMV_MAX_ROWS && gs__qgemv_available()) {
      /* qgemv.h alone: no primitive, and B kept in its packing only */
      s->gemv_b = malloc(gs__qgemv_packed_size(q->k, q->n));
      s->col_sums = malloc(sizeof *s->col_sums * (size_t)q->n);
      if (!s->gemv_b || !s->col_sums) {
        release(s); /* built again by the next run */
        return gs_error(GS_ENOMEM, "node %s: out of memory packing an int8 weight", c->node_name);
      }
    } else if (build(s, engine) != dnnl_success) {
      GS_LOGD("engine", "node %s: oneDNN cannot run this int8 matmul; using the integer GEMM",
              c->node_name);
      s->failed = true;
      return 0;
    }
  }
  dnnl_status_t st = keep_weights(s, q, b);
  if (st == dnnl_success && s->gemv_b)
    st = run_gemv(s, q, a, out);
  else if (st == dnnl_success && s->split)
    st = run_split(s, q, a, out);
  else if (st == dnnl_success)
    st = run_direct(s, q, a, out);
  if (st == dnnl_out_of_memory)
    return gs_error(GS_ENOMEM, "node %s: out of memory for an int8 product", c->node_name);
  if (st != dnnl_success)
    return gs_error(GS_EDEVICE, "node %s: oneDNN int8 matmul failed (status %d)", c->node_name,
                    (int)st);
  *done = true;
  return 0;
}

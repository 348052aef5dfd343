/* k_qgemm.c - CPU kernels of the quantised products: QLinearMatMul,
 * MatMulInteger, MatMulIntegerToFloat, DynamicQuantizeMatMul, QGemm,
 * ConvInteger and QLinearConv. Each is an int32 product of 8-bit
 * operands, which oneDNN's integer GEMM computes (VNNI where the CPU has
 * it), followed by the op's own output stage (scaling, bias,
 * requantising). A convolution is the product of its weights and the
 * input unrolled into columns (im2col), one group at a time. */
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/dnnl_conv.h"
#include "hal/cpu/ops/dnnl_qconv.h"
#include "hal/cpu/ops/dnnl_qmatmul.h"
#include "hal/cpu/ops/nn_geom.h"
#include "hal/cpu/ops/parallel.h"
#include "hal/cpu/ops/qmath.h"
#include "hal/op/op_launch.h"

#include "base/error.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>

/* One operand of an integer product: int8 or uint8 values, row-major,
 * with zero points: none (NULL), one, or one per row of A or column of B. */
typedef struct qoperand {
  const void *data;
  gs_dtype type;
  const void *zero; /* of `type` */
  int64_t n_zero;
} qoperand;

/* a + b wrapping as int32 hardware does (and onnxruntime's kernels): a
 * bias near the type's end must not be undefined behaviour. */
static inline int32_t wrap_add(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }

static int32_t zero_at(const qoperand *o, int64_t i) {
  return gs_q_load(o->type, o->zero, o->n_zero > 1 ? i : 0);
}

/* Element (i, k) of A ([m, k], or [k, m] when transposed); likewise B. */
static int32_t a_at(const qoperand *a, bool ta, int64_t m, int64_t k, int64_t i, int64_t p) {
  return gs_q_load(a->type, a->data, ta ? p * m + i : i * k + p);
}

/* One row of the split product's result (below): c = 128 g + c + szb r - sa colsum. */
GS_VECTOR_CLONES
static void combine_row(const int32_t *g, int32_t *c, const uint32_t *szb, uint32_t r,
                        uint32_t sa, const uint32_t *colsum, int64_t n) {
  for (int64_t j = 0; j < n; j++)
    c[j] = (int32_t)(128u * (uint32_t)g[j] + (uint32_t)c[j] + szb[j] * r - sa * colsum[j]);
}

/* The product where oneDNN's u8 x s8 kernels would saturate (no VNNI:
 * dnnl_conv.h). A is made unsigned and cut in two, A' = A + sa = 128 H + L
 * (gs__q_split), B signed (B' = B - sb), so that no pair of products passes
 * int16 (2 * 127 * 128 < 32768); two GEMMs without offsets, then every
 * zero point and shift at once with the row sums of A' and the column
 * sums of B':
 *   C = G + (sb - zb_j) rowsum'_i - (sa + za_i) colsum'_j - k (sa + za_i) (sb - zb_j),
 *   G = 128 G(H, B') + G(L, B'). */
static int qgemm_s32_split(const char *node, int64_t m, int64_t n, int64_t k,
                           const qoperand *a, bool ta, const qoperand *b, bool tb, int32_t *c) {
  size_t ak = (size_t)(m * k), bk = (size_t)(k * n);
  uint8_t *halves = malloc(2 * ak);
  int8_t *shifted = b->type == GS_DT_UINT8 ? malloc(bk) : NULL; /* int8 B is B' as it is */
  int32_t *g = malloc(sizeof *g * (size_t)(m * n));
  int64_t *rows = calloc((size_t)m, sizeof *rows);
  /* colsum'_j in uint32: the result wraps as int32 hardware does anyway */
  uint32_t *szb = malloc(sizeof *szb * (size_t)n), *colsum = calloc((size_t)n, sizeof *colsum);
  int rc = 0;
  if (!halves || (b->type == GS_DT_UINT8 && !shifted) || !g || !rows || !szb || !colsum) {
    rc = gs_error(GS_ENOMEM, "node %s: out of memory for an int8 product", node);
    goto done;
  }
  uint8_t *hi = halves, *lo = halves + ak;
  int32_t sa = a->type == GS_DT_INT8 ? 128 : 0, sb = b->type == GS_DT_UINT8 ? 128 : 0;
  if (!ta) {
    for (int64_t i = 0; i < m; i++)
      rows[i] = gs__q_split(a->type, (const uint8_t *)a->data + i * k, k, hi + i * k, lo + i * k);
  } else { /* A stored [k, m] */
    gs__q_split(a->type, a->data, (int64_t)ak, hi, lo);
    for (int64_t p = 0; p < k; p++)
      for (int64_t i = 0; i < m; i++)
        rows[i] += 128 * hi[p * m + i] + lo[p * m + i];
  }
  if (shifted)
    gs__q_flip(b->data, shifted, (int64_t)bk);
  const int8_t *bs = shifted ? shifted : b->data;
  if (!tb) {
    for (int64_t p = 0; p < k; p++)
      for (int64_t j = 0; j < n; j++)
        colsum[j] += (uint32_t)bs[p * n + j];
  } else { /* B stored [n, k] */
    for (int64_t j = 0; j < n; j++)
      for (int64_t p = 0; p < k; p++)
        colsum[j] += (uint32_t)bs[j * k + p];
  }
  int32_t co = 0;
  int saved = gs_parallel_small(4.0 * (double)m * (double)n * (double)k);
  dnnl_status_t st = dnnl_gemm_u8s8s32(ta ? 'T' : 'N', tb ? 'T' : 'N', 'F', m, n, k, 1.0f, hi,
                                       ta ? m : k, 0, bs, tb ? k : n, 0, 0.0f, g, n, &co);
  if (st == dnnl_success)
    st = dnnl_gemm_u8s8s32(ta ? 'T' : 'N', tb ? 'T' : 'N', 'F', m, n, k, 1.0f, lo, ta ? m : k, 0,
                           bs, tb ? k : n, 0, 0.0f, c, n, &co);
  gs_parallel_restore(saved);
  if (st != dnnl_success) {
    rc = gs_error(GS_EDEVICE, "node %s: oneDNN's integer GEMM failed (status %d)", node, (int)st);
    goto done;
  }
  /* In uint32, which wraps as int32 hardware does: C = 128 G(H) + G(L) +
   * szb_j (rowsum'_i - k sza_i) - sza_i colsum'_j, szb = sb - zb, sza = sa + za. */
  for (int64_t j = 0; j < n; j++)
    szb[j] = (uint32_t)(sb - (b->n_zero ? zero_at(b, j) : 0));
  for (int64_t i = 0; i < m; i++) {
    int64_t sza = sa + (a->n_zero ? zero_at(a, i) : 0);
    combine_row(g + i * n, c + i * n, szb, (uint32_t)(uint64_t)(rows[i] - k * sza),
                (uint32_t)sza, colsum, n);
  }
done:
  free(halves);
  free(shifted);
  free(g);
  free(rows);
  free(szb);
  free(colsum);
  return rc;
}

/* c[m, n] = sum over k of (A[i, k] - za) (B[k, j] - zb), in int32, through
 * oneDNN's integer GEMM. oneDNN takes B as int8 only: a uint8 B is
 * shifted by 128, its zero points with it. oneDNN takes one zero point per
 * operand: those per row or per column are corrected afterwards with A's
 * row sums and B's column sums. */
static int qgemm_s32(const char *node, int64_t m, int64_t n, int64_t k, const qoperand *a,
                     bool ta, const qoperand *b, bool tb, int32_t *c) {
  if (m == 0 || n == 0)
    return 0;
  if (k == 0) { /* a sum of nothing; oneDNN refuses leading dimensions of 0 */
    memset(c, 0, sizeof *c * (size_t)(m * n));
    return 0;
  }
  if (!gs__dnnl_int8_exact())
    return qgemm_s32_split(node, m, n, k, a, ta, b, tb, c);
  int8_t *shifted = NULL;
  const int8_t *bdata = b->data;
  int32_t bshift = 0;
  if (b->type == GS_DT_UINT8) {
    if (!(shifted = malloc((size_t)(k * n > 0 ? k * n : 1))))
      return gs_error(GS_ENOMEM, "node %s: out of memory for an int8 product", node);
    gs__q_flip(b->data, shifted, k * n);
    bdata = shifted;
    bshift = 128;
  }
  int32_t ao = a->n_zero == 1 ? zero_at(a, 0) : 0;
  int32_t bo = b->n_zero == 1 ? zero_at(b, 0) - bshift : 0;
  int32_t co = 0;
  dnnl_status_t st;
  int saved = gs_parallel_small(2.0 * (double)m * (double)n * (double)k);
  if (a->type == GS_DT_UINT8)
    st = dnnl_gemm_u8s8s32(ta ? 'T' : 'N', tb ? 'T' : 'N', 'F', m, n, k, 1.0f, a->data,
                           ta ? m : k, (uint8_t)ao, bdata, tb ? k : n, (int8_t)bo, 0.0f, c, n, &co);
  else
    st = dnnl_gemm_s8s8s32(ta ? 'T' : 'N', tb ? 'T' : 'N', 'F', m, n, k, 1.0f, a->data,
                           ta ? m : k, (int8_t)ao, bdata, tb ? k : n, (int8_t)bo, 0.0f, c, n, &co);
  gs_parallel_restore(saved);
  int rc = 0;
  if (st != dnnl_success)
    rc = gs_error(GS_EDEVICE, "node %s: oneDNN's integer GEMM failed (status %d)", node, (int)st);
  if (rc == 0 && (a->n_zero > 1 || b->n_zero > 1)) {
    /* C = P - da_i * colsum_j - db_j * rowsum_i + k * da_i * db_j, where P
     * was computed with the shared offsets and da, db are what is left. */
    int64_t *rows = calloc((size_t)m + 1, sizeof *rows), *cols = calloc((size_t)n + 1, sizeof *cols);
    if (!rows || !cols)
      rc = gs_error(GS_ENOMEM, "node %s: out of memory for an int8 product", node);
    for (int64_t i = 0; rc == 0 && b->n_zero > 1 && i < m; i++)
      for (int64_t p = 0; p < k; p++)
        rows[i] += a_at(a, ta, m, k, i, p) - ao;
    for (int64_t p = 0; rc == 0 && a->n_zero > 1 && p < k; p++)
      for (int64_t j = 0; j < n; j++)
        cols[j] += (int64_t)bdata[tb ? j * k + p : p * n + j] - bo;
    for (int64_t i = 0; rc == 0 && i < m; i++) {
      int64_t da = a->n_zero > 1 ? zero_at(a, i) - ao : 0;
      for (int64_t j = 0; j < n; j++) {
        int64_t db = b->n_zero > 1 ? zero_at(b, j) - bshift - bo : 0;
        c[i * n + j] = (int32_t)(c[i * n + j] - da * cols[j] - db * rows[i] + k * da * db);
      }
    }
    free(rows);
    free(cols);
  }
  free(shifted);
  return rc;
}

/* ---- MatMul's family ------------------------------------------------------------------- */

/* What follows the int32 product: the op's output stage for rows of C. */
typedef struct out_stage {
  gs_dtype type;   /* GS_DT_INT32, GS_DT_FLOAT32, or int8/uint8 (requantised) */
  float a_scale;   /* per tensor */
  const float *b_scale;
  int64_t n_b_scale; /* 1 or n */
  const float *row_scale; /* QLinearMatMul's a_scale per row; else NULL */
  float y_scale;   /* requantised: y = round(acc * scale / y_scale) + y_zero */
  int32_t y_zero;
  const float *bias; /* float32, n values, added after scaling */
} out_stage;

/* One row: float32 out = acc * scale[j] + bias[j]; 8-bit out =
 * round(acc * scale[j]) + y_zero, where scale already holds 1 / y_scale. */
GS_VECTOR_CLONES
static void row_to_float(const int32_t *acc, const float *scale, const float *bias, float *y,
                         int64_t n) {
  for (int64_t j = 0; j < n; j++)
    y[j] = (float)acc[j] * scale[j] + (bias ? bias[j] : 0.0f);
}

#define DEFINE_ROW_TO_Q8(SUFFIX, T, LO, HI)                                                     \
  GS_VECTOR_CLONES                                                                            \
  static void row_to_##SUFFIX(const int32_t *acc, const float *scale, int32_t zero, T *y,      \
                              int64_t n) {                                                     \
    for (int64_t j = 0; j < n; j++)                                                            \
      y[j] = (T)(gs_q_round((float)acc[j] * scale[j], LO - zero, HI - zero) + zero);          \
  }                                                                                            \
  GS_VECTOR_CLONES                                                                            \
  static void all_to_##SUFFIX(const int32_t *acc, float scale, int32_t zero, T *y, int64_t n) { \
    for (int64_t j = 0; j < n; j++)                                                            \
      y[j] = (T)(gs_q_round((float)acc[j] * scale, LO - zero, HI - zero) + zero);             \
  }
DEFINE_ROW_TO_Q8(u8, uint8_t, 0, 255)
DEFINE_ROW_TO_Q8(s8, int8_t, -128, 127)

/* Row i's scales into scale[0, n): a_scale (or row i's) times b's, over
 * y's scale where requantised. */
static void row_scales(const out_stage *o, int64_t i, int64_t n, float *scale) {
  float sa = o->row_scale ? o->row_scale[i] : o->a_scale;
  for (int64_t j = 0; j < n; j++) {
    scale[j] = sa * o->b_scale[o->n_b_scale > 1 ? j : 0];
    if (o->type != GS_DT_FLOAT32)
      scale[j] /= o->y_scale;
  }
}

/* Rows [lo, hi) of C through the output stage with the scales of `scale`
 * (all rows'; NULL: each row's own, into `own`, n floats). */
static void finish_range(const out_stage *o, const int32_t *acc, int64_t lo, int64_t hi, int64_t n,
                         void *out, const float *scale, float *own) {
  for (int64_t i = lo; i < hi; i++) {
    if (!scale)
      row_scales(o, i, n, own);
    const float *s = scale ? scale : own;
    const int32_t *row = acc + i * n;
    if (o->type == GS_DT_FLOAT32)
      row_to_float(row, s, o->bias, (float *)out + i * n, n);
    else if (o->type == GS_DT_UINT8)
      row_to_u8(row, s, o->y_zero, (uint8_t *)out + i * n, n);
    else
      row_to_s8(row, s, o->y_zero, (int8_t *)out + i * n, n);
  }
}

/* Rows of C through the output stage, spread over the threads where the
 * rows share their scales; `scale` has room for n floats. */
static void finish_rows(const out_stage *o, const int32_t *acc, int64_t m, int64_t n, void *out,
                        float *scale) {
  if (o->type == GS_DT_INT32) {
    memcpy(out, acc, sizeof *acc * (size_t)(m * n));
    return;
  }
  if (o->row_scale) { /* each row its own scales, in the one buffer */
    finish_range(o, acc, 0, m, n, out, NULL, scale);
    return;
  }
  if (o->type != GS_DT_FLOAT32 && o->n_b_scale == 1) {
    /* one scale: every row at once, since rows of a few dozen values
     * would spend their time in the vector loop's scalar tail */
    float one = o->a_scale * o->b_scale[0] / o->y_scale;
    if (o->type == GS_DT_UINT8)
      GS_PARALLEL_RANGES(m * n, GS_PARALLEL_GRAIN, lo, hi,
                         all_to_u8(acc + lo, one, o->y_zero, (uint8_t *)out + lo, hi - lo));
    else
      GS_PARALLEL_RANGES(m * n, GS_PARALLEL_GRAIN, lo, hi,
                         all_to_s8(acc + lo, one, o->y_zero, (int8_t *)out + lo, hi - lo));
    return;
  }
  row_scales(o, 0, n, scale);
  GS_PARALLEL_RANGES(m, GS_PARALLEL_GRAIN / (n + 1) + 1, lo, hi,
                     finish_range(o, acc, lo, hi, n, out, scale, NULL));
}

/* The product through oneDNN's matmul with B packed once (dnnl_qmatmul.c):
 * for int8 B and zero points per tensor. Sets *done when it ran. */
static int packed_product(const gs_op_call *c, const qoperand *a, const qoperand *b, bool tb,
                          int64_t m, int64_t k, int64_t n, int32_t *acc, bool *done) {
  *done = false;
  if (b->type != GS_DT_INT8 || a->n_zero > 1 || b->n_zero > 1)
    return 0;
  gs_qmatmul_shape q = {.m = m, .k = k, .n = n, .a_zero = zero_at(a, 0), .b_zero = zero_at(b, 0),
                        .a_signed = a->type == GS_DT_INT8, .trans_b = tb,
                        .b_const = ((const gs_quant_attrs *)c->attrs)->b_const};
  return gs__dnnl_qmatmul(c, &q, a->data, b->data, acc, done);
}

/* Whether every product shares B and A's batches lie one after another,
 * so that the batch is one product of batch * m rows. */
static bool one_product(const gs_matmul_attrs *m) {
  for (int d = 0; d < m->batch_rank; d++)
    if (m->b_batch_strides[d] != 0 || (m->a_batch_strides[d] == 0 && m->batch_dims[d] > 1))
      return false;
  return true;
}

/* A sum of k products of two 8-bit values less their zero points (each at
 * most 255 * 255 in size) is exact in float32 while k * 65025 < 2^24, and
 * so is every partial sum: such a product may run as a float32 GEMM. */
#define GS_Q_FLOAT_EXACT_K 258

#define DEFINE_TO_FLOAT(SUFFIX, T)                                                              \
  GS_VECTOR_CLONES                                                                            \
  static void row_to_float_cols_##SUFFIX(const T *src, const float *zero, float *dst,          \
                                         int64_t n) {                                          \
    for (int64_t j = 0; j < n; j++)                                                            \
      dst[j] = (float)src[j] - zero[j];                                                        \
  }
DEFINE_TO_FLOAT(u8, uint8_t)
DEFINE_TO_FLOAT(s8, int8_t)

GS_VECTOR_CLONES
static void float_to_acc(const float *src, int32_t *dst, int64_t n) {
  for (int64_t j = 0; j < n; j++)
    dst[j] = (int32_t)src[j]; /* exact integers (GS_Q_FLOAT_EXACT_K) */
}

/* Rows of an 8-bit operand less its zero points, as float32: a zero point
 * per row (A's), or per column in `cols` (B's; NULL for A). */
static void operand_to_float(const qoperand *o, const void *data, int64_t rows, int64_t n,
                             const float *cols, float *dst) {
  if (o->n_zero == 1) { /* one zero point: all rows at once (short rows end in scalar tails) */
    gs__q_dequantize(data, dst, rows * n, 1.0f, zero_at(o, 0), o->type);
    return;
  }
  for (int64_t r = 0; r < rows; r++) {
    const void *row = (const uint8_t *)data + r * n;
    if (cols && o->type == GS_DT_UINT8)
      row_to_float_cols_u8(row, cols, dst + r * n, n);
    else if (cols)
      row_to_float_cols_s8(row, cols, dst + r * n, n);
    else
      gs__q_dequantize(row, dst + r * n, n, 1.0f, zero_at(o, r), o->type);
  }
}

/* Products [from, to) of a batch of small ones (scores and weighted values
 * of a quantised attention: both operands activations) as float32 GEMMs,
 * exact for k <= GS_Q_FLOAT_EXACT_K: one call of oneDNN's integer GEMM,
 * with B shifted and its own allocations, costs more than such a product. */
static int float_products(const gs_op_call *c, const qoperand *a, const qoperand *b,
                          const out_stage *o, void *out, int64_t from, int64_t to) {
  const gs_matmul_attrs *m = &((const gs_quant_attrs *)c->attrs)->matmul;
  size_t mk = (size_t)(m->m * m->k), kn = (size_t)(m->k * m->n), mn = (size_t)(m->m * m->n);
  float *buf = malloc(sizeof(float) * (mk + kn + mn + 2 * (size_t)m->n + 1));
  int32_t *acc = malloc(sizeof *acc * (mn + 1));
  if (!buf || !acc) { /* said by the caller: the error text is per thread */
    free(buf);
    free(acc);
    return GS_ENOMEM;
  }
  float *af = buf, *bf = af + mk, *cf = bf + kn, *b_zero = cf + mn, *scale = b_zero + m->n;
  for (int64_t j = 0; j < m->n; j++)
    b_zero[j] = (float)zero_at(b, b->n_zero > 1 ? j : 0);
  size_t elem = gs_dtype_size(o->type);
  int64_t converted_a = -1, converted_b = -1; /* an operand broadcast over the batch: once */
  for (int64_t i = from; i < to; i++) {
    int64_t oa, ob;
    gs_launch_matmul_offsets(m, i, &oa, &ob);
    if (oa != converted_a)
      operand_to_float(a, (const uint8_t *)a->data + oa, m->m, m->k, NULL, af);
    if (ob != converted_b)
      operand_to_float(b, (const uint8_t *)b->data + ob, m->k, m->n, b_zero, bf);
    converted_a = oa;
    converted_b = ob;
    gs__cpu_sgemm(false, false, m->m, m->n, m->k, 1.0f, af, m->k, bf, m->n, 0.0f, cf, m->n);
    float_to_acc(cf, acc, (int64_t)mn);
    finish_rows(o, acc, m->m, m->n, (char *)out + (size_t)i * mn * elem, scale);
  }
  free(buf);
  free(acc);
  return 0;
}

/* The batch's products as float32 GEMMs (float_products), spread over the
 * threads by whole products. */
static int batched_in_float(const gs_op_call *c, const qoperand *a, const qoperand *b,
                            const out_stage *o, void *out) {
  const gs_matmul_attrs *m = &((const gs_quant_attrs *)c->attrs)->matmul;
  int64_t per_product = 2 * m->m * m->n * m->k + 1;
  int64_t grain = (int64_t)(GS_PARALLEL_MIN_FLOPS / (double)per_product) + 1;
  int rc = 0;
  GS_PARALLEL_RANGES(m->batch, grain, lo, hi, {
    int r = float_products(c, a, b, o, out, lo, hi);
    if (r < 0) {
      _Pragma("omp critical(gs_q_float_rc)") rc = r;
    }
  });
  return rc < 0 ? gs_error(rc, "node %s: out of memory for an int8 product", c->node_name) : 0;
}

/* The batched product of a and b, each batch through `o` into out. */
static int batched(const gs_op_call *c, const qoperand *a, const qoperand *b, const out_stage *o,
                   void *out) {
  const gs_matmul_attrs *m = &((const gs_quant_attrs *)c->attrs)->matmul;
  if (m->batch * m->m * m->n == 0)
    return 0; /* nothing to write */
  size_t elem = gs_dtype_size(o->type);
  bool whole = one_product(m) && !o->row_scale;
  if (!whole && m->batch > 1 && m->k > 0 && m->k <= GS_Q_FLOAT_EXACT_K)
    return batched_in_float(c, a, b, o, out); /* with buffers of its own */
  int64_t rows = whole ? m->batch * m->m : m->m; /* of one product */
  int32_t *acc = o->type == GS_DT_INT32 ? NULL : malloc((size_t)(rows * m->n + 1) * sizeof *acc);
  float *scale = malloc((size_t)(m->n + 1) * sizeof *scale);
  int rc = 0;
  if ((o->type != GS_DT_INT32 && !acc) || !scale)
    rc = gs_error(GS_ENOMEM, "node %s: out of memory for an int8 product", c->node_name);
  bool done = false;
  if (rc == 0 && whole) {
    rc = packed_product(c, a, b, false, rows, m->k, m->n, acc ? acc : out, &done);
    if (rc == 0 && done && acc)
      finish_rows(o, acc, rows, m->n, out, scale);
  }
  for (int64_t i = 0; rc == 0 && !done && i < m->batch; i++) {
    int64_t oa, ob;
    gs_launch_matmul_offsets(m, i, &oa, &ob);
    qoperand ai = *a, bi = *b; /* (an empty operand has no buffer: no offset then) */
    ai.data = a->data ? (const uint8_t *)a->data + oa : NULL;
    bi.data = b->data ? (const uint8_t *)b->data + ob : NULL;
    char *dst = out ? (char *)out + (size_t)(i * m->m * m->n) * elem : NULL;
    rc = qgemm_s32(c->node_name, m->m, m->n, m->k, &ai, false, &bi, false,
                   acc ? acc : (int32_t *)dst);
    if (rc == 0 && acc)
      finish_rows(o, acc, m->m, m->n, dst, scale);
  }
  free(acc);
  free(scale);
  return rc;
}

/* Operand `data` with zero points `zero`: per-channel zero points that
 * are all one value (onnxruntime's symmetric weights: all 0) count as one,
 * which spares qgemm_s32 its corrections. */
static qoperand operand(const gs_op_call *c, const gs_cpu_kernel_call *k, int data, int zero) {
  bool has_zero = zero >= 0 && gs_op_given(c, zero);
  qoperand o = {.data = k->ptr[data], .type = c->in[data].dtype,
                .zero = has_zero ? k->ptr[zero] : NULL,
                .n_zero = has_zero ? gs_shape_numel(&c->in[zero].shape) : 1};
  bool same = true;
  for (int64_t i = 1; same && i < o.n_zero; i++)
    same = zero_at(&o, i) == zero_at(&o, 0);
  if (same)
    o.n_zero = 1;
  return o;
}

static int k_matmul_integer(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  qoperand a = operand(c, k, 0, 2), b = operand(c, k, 1, 3);
  out_stage o = {.type = GS_DT_INT32};
  return batched(c, &a, &b, &o, k->ptr[c->n_in]);
}

/* Input i's scales as float32 (QLinearMatMul takes float16 ones too): the
 * input itself, or a copy in *copy that the caller frees. */
static const float *scales_f32(const gs_op_call *c, const gs_cpu_kernel_call *k, int i,
                               float **copy) {
  *copy = NULL;
  if (c->in[i].dtype == GS_DT_FLOAT32)
    return k->ptr[i];
  int64_t n = gs_shape_numel(&c->in[i].shape);
  if (!(*copy = malloc((size_t)(n + 1) * sizeof **copy)))
    return NULL;
  for (int64_t j = 0; j < n; j++)
    (*copy)[j] = (float)gs_ld(c->in[i].dtype, k->ptr[i], j);
  return *copy;
}

static int k_qlinear_matmul(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  qoperand a = operand(c, k, 0, 2), b = operand(c, k, 3, 5);
  float *copies[3];
  const float *sa = scales_f32(c, k, 1, &copies[0]), *sb = scales_f32(c, k, 4, &copies[1]);
  const float *sy = scales_f32(c, k, 6, &copies[2]);
  int rc;
  if (!sa || !sb || !sy) {
    rc = gs_error(GS_ENOMEM, "node %s: out of memory for the scales", c->node_name);
  } else {
    bool per_row = gs_shape_numel(&c->in[1].shape) > 1;
    out_stage o = {.type = c->out[0].dtype, .a_scale = sa[0], .row_scale = per_row ? sa : NULL,
                   .b_scale = sb, .n_b_scale = gs_shape_numel(&c->in[4].shape),
                   .y_scale = sy[0], .y_zero = gs_q_load(c->in[7].dtype, k->ptr[7], 0)};
    rc = batched(c, &a, &b, &o, k->ptr[8]);
  }
  for (int i = 0; i < 3; i++)
    free(copies[i]);
  return rc;
}

static int k_matmul_integer_to_float(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  qoperand a = operand(c, k, 0, 4), b = operand(c, k, 1, 5);
  out_stage o = {.type = GS_DT_FLOAT32, .a_scale = *(const float *)k->ptr[2],
                 .b_scale = k->ptr[3], .n_b_scale = gs_shape_numel(&c->in[3].shape),
                 .bias = gs_op_given(c, 6) ? k->ptr[6] : NULL};
  return batched(c, &a, &b, &o, k->ptr[c->n_in]);
}

/* A is quantised to uint8 over the whole tensor, as DynamicQuantizeLinear does. */
static int k_dynamic_quantize_matmul(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  int64_t n = gs_shape_numel(&c->in[0].shape);
  const float *x = k->ptr[0];
  uint8_t *q = malloc((size_t)n + 1), zero;
  if (!q)
    return gs_error(GS_ENOMEM, "node %s: out of memory quantising A", c->node_name);
  float scale = gs__q_dynamic_quantize(x, n, q, &zero);
  qoperand a = {.data = q, .type = GS_DT_UINT8, .zero = &zero, .n_zero = 1};
  qoperand b = operand(c, k, 1, 3);
  out_stage o = {.type = GS_DT_FLOAT32, .a_scale = scale, .b_scale = k->ptr[2],
                 .n_b_scale = gs_shape_numel(&c->in[2].shape),
                 .bias = gs_op_given(c, 4) ? k->ptr[4] : NULL};
  int rc = batched(c, &a, &b, &o, k->ptr[c->n_in]);
  free(q);
  return rc;
}

/* QGemm: alpha * a_scale * b_scale * ((A - za) (B - zb) + C), in float32
 * or requantised with y's scale and zero point. */
static int k_qgemm(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_quant_attrs *q = c->attrs;
  const gs_matmul_attrs *m = &q->matmul;
  qoperand a = operand(c, k, 0, 2), b = operand(c, k, 3, 5);
  int32_t *acc = malloc((size_t)(m->m * m->n + 1) * sizeof *acc);
  if (!acc)
    return gs_error(GS_ENOMEM, "node %s: out of memory for an int8 product", c->node_name);
  bool done = false;
  int rc = q->trans_a ? 0 : packed_product(c, &a, &b, q->trans_b, m->m, m->k, m->n, acc, &done);
  if (rc == 0 && !done)
    rc = qgemm_s32(c->node_name, m->m, m->n, m->k, &a, q->trans_a, &b, q->trans_b, acc);
  if (rc == 0 && gs_op_given(c, 6)) { /* C broadcasts to [m, n] */
    const gs_shape *s = &c->in[6].shape;
    int64_t rows = s->rank == 2 ? s->dims[0] : 1, cols = s->rank >= 1 ? s->dims[s->rank - 1] : 1;
    const int32_t *cv = k->ptr[6];
    for (int64_t i = 0; i < m->m; i++)
      for (int64_t j = 0; j < m->n; j++)
        acc[i * m->n + j] = wrap_add(acc[i * m->n + j], cv[(rows > 1 ? i * cols : 0) + (cols > 1 ? j : 0)]);
  }
  bool quantised = gs_op_given(c, 7);
  out_stage o = {.type = c->out[0].dtype, .a_scale = *(const float *)k->ptr[1] * q->alpha,
                 .b_scale = k->ptr[4], .n_b_scale = gs_shape_numel(&c->in[4].shape),
                 .y_scale = quantised ? *(const float *)k->ptr[7] : 1.0f,
                 .y_zero = quantised ? gs_q_load(c->in[8].dtype, k->ptr[8], 0) : 0};
  float *scale = rc == 0 ? malloc((size_t)(m->n + 1) * sizeof *scale) : NULL;
  if (rc == 0 && !scale)
    rc = gs_error(GS_ENOMEM, "node %s: out of memory for an int8 product", c->node_name);
  if (rc == 0)
    finish_rows(&o, acc, m->m, m->n, k->ptr[c->n_in], scale);
  free(acc);
  free(scale);
  return rc;
}

/* ---- the convolutions ------------------------------------------------------------------ */

/* Where im2col reads: the window's geometry in three spatial dims, the
 * op's own last (a 2-D convolution is [1, H, W]; nn_geom.h), and the
 * group's first input element. Inputs are bytes: a uint8 one is flipped to
 * int8 by its top bit (x - 128), as qgemm_s32 takes B. */
typedef struct col_source {
  geom g;
  int64_t base;
  uint8_t flip, pad_value;
} col_source;

static col_source col_source_of(const gs_op_call *c, const gs_conv_attrs *a, int32_t x_zero, int64_t img,
                        int64_t g) {
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  col_source w;
  make_geom(&w.g, a->spatial, &xs->dims[2], &ys->dims[2], a->kernel, a->stride, a->dilation,
            a->pad_begin);
  w.base = (img * xs->dims[1] + g * (xs->dims[1] / a->group)) * w.g.in_size;
  w.flip = c->in[0].dtype == GS_DT_UINT8 ? 0x80 : 0;
  w.pad_value = (uint8_t)((uint8_t)x_zero ^ w.flip);
  return w;
}

GS_VECTOR_CLONES
static void copy_flipped(uint8_t *dst, const uint8_t *src, int64_t n, int64_t stride,
                         uint8_t flip) {
  if (stride == 1)
    for (int64_t i = 0; i < n; i++)
      dst[i] = src[i] ^ flip;
  else
    for (int64_t i = 0; i < n; i++)
      dst[i] = src[i * stride] ^ flip;
}

/* Rows [lo, hi) of the columns: row (ci, tap), column output position. */
static void im2col_rows(const col_source *w, const uint8_t *x, uint8_t *col, int64_t lo, int64_t hi) {
  const geom *g = &w->g;
  for (int64_t r = lo; r < hi; r++) {
    int64_t ci = r / g->k_size, tap = r % g->k_size;
    int64_t k[3] = {tap / (g->k[1] * g->k[2]), tap / g->k[2] % g->k[1], tap % g->k[2]};
    int64_t off[3], from[3], to[3];
    for (int d = 0; d < 3; d++) {
      off[d] = k[d] * g->d[d] - g->p[d];
      valid_range(g->out[d], g->s[d], off[d], g->in[d], &from[d], &to[d]);
    }
    uint8_t *row = col + r * g->out_size;
    const uint8_t *src = x + w->base + ci * g->in_size;
    int64_t line = g->out[2];
    for (int64_t o0 = 0; o0 < g->out[0]; o0++)
      for (int64_t o1 = 0; o1 < g->out[1]; o1++) {
        uint8_t *dst = row + (o0 * g->out[1] + o1) * line;
        if (o0 < from[0] || o0 >= to[0] || o1 < from[1] || o1 >= to[1]) {
          memset(dst, w->pad_value, (size_t)line);
          continue;
        }
        int64_t i0 = o0 * g->s[0] + off[0], i1 = o1 * g->s[1] + off[1];
        memset(dst, w->pad_value, (size_t)from[2]);
        copy_flipped(dst + from[2], src + (i0 * g->in[1] + i1) * g->in[2] + from[2] * g->s[2] + off[2],
                     to[2] - from[2], g->s[2], w->flip);
        memset(dst + to[2], w->pad_value, (size_t)(line - to[2]));
      }
  }
}

/* The columns of image `img`'s group `g`, as int8 (uint8 inputs shifted by
 * 128, as qgemm_s32 takes B); padding reads the input's zero point, which
 * contributes nothing to the product. */
static void im2col(const gs_op_call *c, const gs_conv_attrs *a, const void *x, int32_t x_zero,
                   int64_t img, int64_t g, int8_t *col) {
  col_source w = col_source_of(c, a, x_zero, img, g);
  int64_t rows = c->in[0].shape.dims[1] / a->group * w.g.k_size;
  GS_PARALLEL_RANGES(rows, GS_PARALLEL_GRAIN / (w.g.out_size + 1) + 1, lo, hi,
                     im2col_rows(&w, x, (uint8_t *)col, lo, hi));
}

/* Weights [oc, ci/g, k...], input zero point, weight zero points (NULL,
 * one, or per output channel), and the output stage per channel. */
typedef struct conv_io {
  int32_t x_zero;
  const int32_t *bias;
  gs_dtype out_type; /* int32 (ConvInteger) or 8-bit */
  float x_scale, y_scale;
  const float *w_scale;
  int64_t n_w_scale;
  int32_t y_zero;
} conv_io;

static void finish_channel(const conv_io *io, int64_t ch, const int32_t *acc, int64_t outs,
                           void *out, int64_t at) {
  int32_t bias = io->bias ? io->bias[ch] : 0;
  if (io->out_type == GS_DT_INT32) {
    for (int64_t p = 0; p < outs; p++)
      ((int32_t *)out)[at + p] = wrap_add(acc[p], bias);
    return;
  }
  float scale = io->x_scale * io->w_scale[io->n_w_scale > 1 ? ch : 0] / io->y_scale;
  int32_t lo = gs_q_lo(io->out_type) - io->y_zero, hi = gs_q_hi(io->out_type) - io->y_zero;
  for (int64_t p = 0; p < outs; p++)
    gs_q_store(io->out_type, out, at + p,
               gs_q_round((float)wrap_add(acc[p], bias) * scale, lo, hi) + io->y_zero);
}

static int conv_run(const gs_op_call *c, const gs_cpu_kernel_call *k, int w_index, int wz_index,
                    const conv_io *io) {
  const gs_conv_attrs *a = &((const gs_quant_attrs *)c->attrs)->conv;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  if (gs_shape_numel(ys) == 0)
    return 0; /* nothing to write */
  int64_t cg = xs->dims[1] / a->group, ocg = ys->dims[1] / a->group, taps = 1, outs = 1;
  for (int d = 0; d < a->spatial; d++) {
    taps *= a->kernel[d];
    outs *= ys->dims[2 + d];
  }
  int64_t kdim = cg * taps;
  int8_t *col = malloc((size_t)(kdim * outs + 1));
  int32_t *acc = malloc((size_t)(ocg * outs + 1) * sizeof *acc);
  int rc = col && acc ? 0 : gs_error(GS_ENOMEM, "node %s: out of memory for the columns",
                                     c->node_name);
  qoperand w = operand(c, k, w_index, wz_index);
  int8_t col_zero = (int8_t)(io->x_zero + (c->in[0].dtype == GS_DT_UINT8 ? -128 : 0));
  qoperand cols = {.data = col, .type = GS_DT_INT8, .zero = &col_zero, .n_zero = 1};
  size_t w_elem = 1, w_zero_elem = 1;
  for (int64_t img = 0; rc == 0 && img < xs->dims[0]; img++)
    for (int64_t g = 0; rc == 0 && g < a->group; g++) {
      im2col(c, a, k->ptr[0], io->x_zero, img, g, col);
      qoperand wg = w;
      wg.data = w.data ? (const uint8_t *)w.data + (size_t)(g * ocg * kdim) * w_elem : NULL;
      if (w.n_zero > 1) {
        wg.zero = (const uint8_t *)w.zero + (size_t)(g * ocg) * w_zero_elem;
        wg.n_zero = ocg;
      }
      rc = qgemm_s32(c->node_name, ocg, outs, kdim, &wg, false, &cols, false, acc);
      for (int64_t o = 0; rc == 0 && o < ocg; o++) {
        int64_t ch = g * ocg + o;
        finish_channel(io, ch, acc + o * outs, outs, k->ptr[c->n_in],
                       (img * ys->dims[1] + ch) * outs);
      }
    }
  free(col);
  free(acc);
  return rc;
}

static int k_conv_integer(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  bool done;
  int rc = gs__dnnl_conv_integer(c, k->ptr, &done);
  if (rc < 0 || done)
    return rc;
  conv_io io = {.x_zero = gs_op_given(c, 2) ? gs_q_load(c->in[2].dtype, k->ptr[2], 0) : 0,
                .out_type = GS_DT_INT32};
  return conv_run(c, k, 1, 3, &io);
}

static int k_qlinear_conv(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  bool done;
  int rc = gs__dnnl_qconv(c, k->ptr, &done);
  if (rc < 0 || done)
    return rc;
  conv_io io = {.x_zero = gs_q_load(c->in[2].dtype, k->ptr[2], 0),
                .bias = gs_op_given(c, 8) ? k->ptr[8] : NULL,
                .out_type = c->out[0].dtype,
                .x_scale = *(const float *)k->ptr[1],
                .w_scale = k->ptr[4],
                .n_w_scale = gs_shape_numel(&c->in[4].shape),
                .y_scale = *(const float *)k->ptr[6],
                .y_zero = gs_q_load(c->in[7].dtype, k->ptr[7], 0)};
  return conv_run(c, k, 3, 5, &io);
}

static const gs_cpu_kernel_entry kernels[] = {
    GS_CPU_KERNEL("MatMulInteger", k_matmul_integer),
    GS_CPU_KERNEL("QLinearMatMul", k_qlinear_matmul),
    GS_CPU_KERNEL("MatMulIntegerToFloat", k_matmul_integer_to_float),
    GS_CPU_KERNEL("DynamicQuantizeMatMul", k_dynamic_quantize_matmul),
    GS_CPU_KERNEL("QGemm", k_qgemm),
    GS_CPU_KERNEL("ConvInteger", k_conv_integer),
    GS_CPU_KERNEL("QLinearConv", k_qlinear_conv),
};

int gs__cpu_register_qgemm(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

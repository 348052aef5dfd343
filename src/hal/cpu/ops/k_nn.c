/* k_nn.c - CPU kernels of the neural-network ops. Matrix products go to
 * oneDNN's sgemm; Conv goes to oneDNN (dnnl_conv.c), or im2col + sgemm
 * where oneDNN cannot take it; ConvTranspose is sgemm + col2im. float16 and
 * bfloat16 tensors are computed in float32 and converted back; float64 ones
 * by k_nn_f64.c, in double.
 *
 * Pooling, batch and layer normalisation and softmax are written here
 * although oneDNN has primitives for them: oneDNN's fast versions want its
 * blocked layouts, and the engine's tensors are NCHW, so each call would pay
 * two reorders - a full pass over memory each - around an op that is itself
 * one pass. The loops below make that one pass, vectorised. */
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/depthwise_conv.h"
#include "hal/cpu/ops/dnnl_conv.h"
#include "hal/cpu/ops/fastmath.h"
#include "hal/cpu/ops/k_nn_f64.h"
#include "hal/cpu/ops/lane_sum.h"
#include "hal/cpu/ops/nn_geom.h"
#include "hal/cpu/ops/parallel.h"
#include "hal/cpu/ops/sgemm_few_rows.h"
#include "hal/cpu/ops/sgemm_packed.h"
#include "hal/cpu/ops/softmax_row.h"
#include "hal/op/op_launch.h"

#include "base/error.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdatomic.h>
#include <stdlib.h>

/* A float32 implementation sees every float operand as float32. */
typedef int (*f32_impl)(const gs_op_call *c, float *const *ptr);

static bool needs_conversion(gs_dtype dt) {
  return dt == GS_DT_FLOAT16 || dt == GS_DT_BFLOAT16;
}

/* Runs impl directly on float32 operands; float16 and bfloat16 are
 * converted to float32 copies first and the outputs converted back
 * (float64 goes to run_float's impl64 instead). */
static int run_f32(const gs_cpu_kernel_call *k, f32_impl impl) {
  const gs_op_call *c = gs_kcall(k);
  int n = c->n_in + c->n_out;
  float *ptr[GS_OP_MAX_IO] = {0};
  bool temp[GS_OP_MAX_IO] = {false};
  int rc = 0;
  for (int i = 0; i < n; i++) {
    const gs_tensor_desc *d = i < c->n_in ? &c->in[i] : &c->out[i - c->n_in];
    ptr[i] = k->ptr[i];
    if (!k->ptr[i] || !needs_conversion(d->dtype))
      continue;
    int64_t count = gs_shape_numel(&d->shape);
    if (!(ptr[i] = malloc((size_t)(count ? count : 1) * sizeof(float)))) {
      rc = gs_error(GS_ENOMEM, "out of memory converting %lld values to float32", (long long)count);
      break;
    }
    temp[i] = true;
    if (i < c->n_in)
      for (int64_t j = 0; j < count; j++)
        ptr[i][j] = (float)gs_ld(d->dtype, k->ptr[i], j);
  }
  if (rc == 0)
    rc = impl(c, ptr);
  for (int i = 0; i < n; i++) {
    if (!temp[i])
      continue;
    if (rc == 0 && i >= c->n_in) {
      const gs_tensor_desc *d = &c->out[i - c->n_in];
      int64_t count = gs_shape_numel(&d->shape);
      for (int64_t j = 0; j < count; j++)
        gs_st(d->dtype, k->ptr[i], j, ptr[i][j]);
    }
    free(ptr[i]);
  }
  return rc;
}

/* float64 operands go to impl64 (k_nn_f64.c), computed in double; the
 * other float types to impl, through run_f32. */
static int run_float(const gs_cpu_kernel_call *k, f32_impl impl, gs_f64_impl impl64) {
  const gs_op_call *c = gs_kcall(k);
  if (c->in[0].dtype != GS_DT_FLOAT64)
    return run_f32(k, impl);
  double *p[GS_OP_MAX_IO] = {0};
  for (int i = 0; i < c->n_in + c->n_out && i < GS_OP_MAX_IO; i++)
    p[i] = k->ptr[i];
  return impl64(c, p);
}

void gs__cpu_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                   int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) { /* no products: C = beta C (oneDNN refuses a leading dimension of 0) */
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++)
        c[i * ldc + j] = beta != 0 ? beta * c[i * ldc + j] : 0.0f;
    return;
  }
  int saved = gs_parallel_small(2.0 * (double)m * (double)n * (double)k);
  if (gs__sgemm_few_rows_fits(trans_a, trans_b, m, n, k)) {
    gs__sgemm_few_rows(trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    gs_parallel_restore(saved);
    return;
  }
  /* The shapes were checked when planned; oneDNN's own checks cannot fail. */
  dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c,
             ldc);
  gs_parallel_restore(saved);
}

/* The same with B packed (sgemm_packed.h). */
static void sgemm_packed(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                         int64_t lda, const float *packed, float beta, float *c, int64_t ldc) {
  int saved = gs_parallel_small(2.0 * (double)m * (double)n * (double)k);
  gs__sgemm_packed(m, n, k, alpha, a, lda, packed, beta, c, ldc);
  gs_parallel_restore(saved);
}

GS_VECTOR_CLONES void gs__cpu_act_range(gs_activation act, float min, float max, float *y,
                                        int64_t lo, int64_t hi) {
  switch (act) {
  case GS_ACT_NONE: break;
  case GS_ACT_RELU:
    for (int64_t i = lo; i < hi; i++)
      y[i] = y[i] > 0 ? y[i] : 0;
    break;
  case GS_ACT_CLIP:
    for (int64_t i = lo; i < hi; i++)
      y[i] = y[i] < min ? min : y[i] > max ? max : y[i];
    break;
  case GS_ACT_HARDSWISH:
    for (int64_t i = lo; i < hi; i++) {
      float g = y[i] * (1.0f / 6.0f) + 0.5f;
      y[i] *= g < 0.0f ? 0.0f : g > 1.0f ? 1.0f : g;
    }
    break;
  case GS_ACT_SILU:
    for (int64_t i = lo; i < hi; i++)
      y[i] *= gs_fast_sigmoidf(y[i]);
    break;
  case GS_ACT_GELU:
    for (int64_t i = lo; i < hi; i++)
      y[i] = 0.5f * y[i] * (1.0f + gs_fast_erff(y[i] * 0.70710678f));
    break;
  }
}

/* y through the activation fused into its op (plan_fuse.c). */
static void apply_act(gs_activation act, float min, float max, float *y, int64_t n) {
  if (act != GS_ACT_NONE)
    GS_PARALLEL_RANGES(n, GS_PARALLEL_GRAIN, lo, hi, gs__cpu_act_range(act, min, max, y, lo, hi));
}

/* ---- Gemm and MatMul ------------------------------------------------------------- */

static int gemm_f32(const gs_op_call *c, float *const *p) {
  const gs_gemm_attrs *g = c->attrs;
  float *y = p[c->n_in];
  bool has_c = c->n_in > 2 && p[2] && g->beta != 0;
  if (has_c)
    gs__cpu_broadcast_copy(&c->in[2].shape, p[2], &c->out[0].shape, y, sizeof(float));
  if (g->b_packed) /* the plan packs B only for A as stored, [m, k] */
    sgemm_packed(g->m, g->n, g->k, g->alpha, p[0], g->k, p[1], has_c ? g->beta : 0.0f, y, g->n);
  else if (g->m && g->n)
    gs__cpu_sgemm(g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha, p[0], c->in[0].shape.dims[1],
          p[1], c->in[1].shape.dims[1], has_c ? g->beta : 0.0f, y, g->n);
  apply_act(g->act, g->act_lo, g->act_hi, y, g->m * g->n);
  return 0;
}

static int k_gemm(const gs_cpu_kernel_call *k) { return run_float(k, gemm_f32, gs__gemm_f64); }

static int matmul_f32(const gs_op_call *c, float *const *p) {
  const gs_matmul_attrs *m = c->attrs;
  if (m->batch > 1) {
    bool done;
    int rc = gs__dnnl_matmul(c, p, &done);
    if (rc < 0 || done)
      return rc;
  }
  float *y = p[c->n_in];
  const float *bias = m->has_bias ? p[2] : NULL;
  for (int64_t b = 0; b < m->batch; b++) {
    int64_t oa, ob;
    gs_launch_matmul_offsets(m, b, &oa, &ob);
    float *yb = y + b * m->m * m->n;
    if (bias)
      for (int64_t r = 0; r < m->m; r++)
        memcpy(yb + r * m->n, bias, sizeof(float) * (size_t)m->n);
    if (m->m && m->n) {
      if (m->k == 0 && !bias)
        memset(yb, 0, sizeof(float) * (size_t)(m->m * m->n));
      else if (m->k && m->b_packed) /* batch 1: the plan packs B only then */
        sgemm_packed(m->m, m->n, m->k, 1.0f, p[0], m->k, p[1], bias ? 1.0f : 0.0f, yb, m->n);
      else if (m->k)
        gs__cpu_sgemm(false, false, m->m, m->n, m->k, 1.0f, p[0] + oa, m->k, p[1] + ob, m->n,
              bias ? 1.0f : 0.0f, yb, m->n);
    }
  }
  apply_act(m->act, m->act_lo, m->act_hi, y, m->batch * m->m * m->n);
  return 0;
}

static int k_matmul(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  gs_dtype dt = c->in[0].dtype;
  if (!gs_is_int(dt))
    return run_float(k, matmul_f32, gs__matmul_f64);
  const gs_matmul_attrs *m = c->attrs;
  for (int64_t b = 0; b < m->batch; b++) {
    int64_t oa, ob;
    gs_launch_matmul_offsets(m, b, &oa, &ob);
    for (int64_t i = 0; i < m->m; i++)
      for (int64_t j = 0; j < m->n; j++) {
        uint64_t acc = 0; /* wraps like the hardware */
        for (int64_t t = 0; t < m->k; t++)
          acc += (uint64_t)gs_ldi(dt, k->ptr[0], oa + i * m->k + t) *
                 (uint64_t)gs_ldi(dt, k->ptr[1], ob + t * m->n + j);
        gs_sti(dt, k->ptr[2], b * m->m * m->n + i * m->n + j, (int64_t)acc);
      }
  }
  return 0;
}

/* ---- convolution ------------------------------------------------------------------- */

/* cols[(ch * K + kidx) * out_size + o] = x[ch][position of o shifted by kidx]:
 * rows are filled by ranges (zeros, then a copy, then zeros), not element by
 * element with a bounds test. */
static void im2col(const geom *g, const float *x, int64_t channels, float *cols) {
  for (int64_t ch = 0; ch < channels; ch++)
    for (int64_t kd = 0; kd < g->k[0]; kd++)
      for (int64_t kh = 0; kh < g->k[1]; kh++)
        for (int64_t kw = 0; kw < g->k[2]; kw++) {
          float *row = cols + ((ch * g->k[0] + kd) * g->k[1] * g->k[2] + kh * g->k[2] + kw) *
                                  g->out_size;
          const float *xc = x + ch * g->in_size;
          int64_t w_shift = kw * g->d[2] - g->p[2], w_lo, w_hi;
          valid_range(g->out[2], g->s[2], w_shift, g->in[2], &w_lo, &w_hi);
          for (int64_t od = 0; od < g->out[0]; od++) {
            int64_t id = od * g->s[0] - g->p[0] + kd * g->d[0];
            for (int64_t oh = 0; oh < g->out[1]; oh++) {
              int64_t ih = oh * g->s[1] - g->p[1] + kh * g->d[1];
              float *dst = row + (od * g->out[1] + oh) * g->out[2];
              if (id < 0 || id >= g->in[0] || ih < 0 || ih >= g->in[1]) {
                memset(dst, 0, sizeof(float) * (size_t)g->out[2]);
                continue;
              }
              const float *src = xc + (id * g->in[1] + ih) * g->in[2] + w_shift;
              memset(dst, 0, sizeof(float) * (size_t)w_lo);
              if (g->s[2] == 1)
                memcpy(dst + w_lo, src + w_lo, sizeof(float) * (size_t)(w_hi - w_lo));
              else
                for (int64_t ow = w_lo; ow < w_hi; ow++)
                  dst[ow] = src[ow * g->s[2]];
              memset(dst + w_hi, 0, sizeof(float) * (size_t)(g->out[2] - w_hi));
            }
          }
        }
}

static int conv_f32(const gs_op_call *c, float *const *p) {
  if (gs__depthwise_conv_fits(c))
    return gs__depthwise_conv(c, p);
  bool done;
  int rc = gs__dnnl_conv(c, p, &done);
  if (rc < 0 || done)
    return rc;
  const gs_conv_attrs *a = c->attrs;
  if (a->src_blocked || a->dst_blocked) /* the loops below read and write NCHW only */
    return gs_error(GS_ENOTSUP, "node %s: oneDNN cannot run this convolution, and the plan "
                                "keeps its data in oneDNN's blocked layout", c->node_name);
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  geom g;
  make_geom(&g, a->spatial, xs->dims + 2, ys->dims + 2, a->kernel, a->stride, a->dilation,
            a->pad_begin);
  int64_t batch = xs->dims[0], cin = xs->dims[1], cout = ys->dims[1];
  int64_t cin_g = cin / a->group, cout_g = cout / a->group, kk = cin_g * g.k_size;
  bool direct = g.k_size == 1 && g.s[0] == 1 && g.s[1] == 1 && g.s[2] == 1 && g.p[0] == 0 &&
                g.p[1] == 0 && g.p[2] == 0 && g.out_size == g.in_size;
  float *cols = NULL;
  if (!direct && g.out_size && kk &&
      !(cols = malloc(sizeof(float) * (size_t)kk * (size_t)g.out_size)))
    return gs_error(GS_ENOMEM, "out of memory for the im2col buffer of node %s", c->node_name);
  const float *w = p[1], *bias = a->has_bias ? p[2] : NULL;
  float *y = p[c->n_in];
  if (kk == 0 || g.in_size == 0) { /* an empty input: each output is its bias */
    for (int64_t n = 0; n < batch; n++)
      for (int64_t o = 0; o < cout; o++)
        for (int64_t i = 0; i < g.out_size; i++)
          y[(n * cout + o) * g.out_size + i] = bias ? bias[o] : 0.0f;
    apply_act(a->act, a->act_lo, a->act_hi, y, gs_shape_numel(ys));
    free(cols);
    return 0;
  }
  for (int64_t n = 0; n < batch; n++)
    for (int64_t grp = 0; grp < a->group; grp++) {
      const float *xg = p[0] + (n * cin + grp * cin_g) * g.in_size;
      float *yg = y + (n * cout + grp * cout_g) * g.out_size;
      const float *src = xg;
      if (!direct && cols) {
        im2col(&g, xg, cin_g, cols);
        src = cols;
      }
      if (cout_g && g.out_size) {
        if (kk)
          gs__cpu_sgemm(false, false, cout_g, g.out_size, kk, 1.0f, w + grp * cout_g * kk, kk, src,
                g.out_size, 0.0f, yg, g.out_size);
        else
          memset(yg, 0, sizeof(float) * (size_t)(cout_g * g.out_size));
      }
      /* Bias and activation row by row, while the row is in cache. */
      for (int64_t o = 0; o < cout_g; o++) {
        float *row = yg + o * g.out_size;
        float b = bias ? bias[grp * cout_g + o] : 0.0f;
        for (int64_t i = 0; bias && i < g.out_size; i++)
          row[i] += b;
        apply_act(a->act, a->act_lo, a->act_hi, row, g.out_size);
      }
    }
  free(cols);
  return 0;
}

static int k_conv(const gs_cpu_kernel_call *k) { return run_float(k, conv_f32, gs__conv_f64); }

static int conv_transpose_f32(const gs_op_call *c, float *const *p) {
  const gs_conv_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  /* The geometry of the forward convolution whose input is our output. */
  geom g;
  make_geom(&g, a->spatial, ys->dims + 2, xs->dims + 2, a->kernel, a->stride, a->dilation,
            a->pad_begin);
  int64_t batch = xs->dims[0], cin = xs->dims[1], cout = ys->dims[1];
  int64_t cin_g = cin / a->group, cout_g = cout / a->group, rows = cout_g * g.k_size;
  float *cols = NULL;
  if (rows && g.out_size && !(cols = malloc(sizeof(float) * (size_t)rows * (size_t)g.out_size)))
    return gs_error(GS_ENOMEM, "out of memory for the col2im buffer of node %s", c->node_name);
  const float *w = p[1], *bias = a->has_bias ? p[2] : NULL;
  float *y = p[c->n_in];
  memset(y, 0, sizeof(float) * (size_t)gs_shape_numel(ys));
  for (int64_t n = 0; cols && n < batch; n++)
    for (int64_t grp = 0; grp < a->group; grp++) {
      const float *xg = p[0] + (n * cin + grp * cin_g) * g.out_size;
      float *yg = y + (n * cout + grp * cout_g) * g.in_size;
      /* cols (cout_g*K x HWin) = W_g^T (cout_g*K x cin_g) * X_g (cin_g x HWin) */
      if (cin_g)
        gs__cpu_sgemm(true, false, rows, g.out_size, cin_g, 1.0f, w + grp * cin_g * rows, rows, xg,
              g.out_size, 0.0f, cols, g.out_size);
      else
        memset(cols, 0, sizeof(float) * (size_t)(rows * g.out_size));
      /* col2im: scatter-add each column entry to the output position it came from. */
      for (int64_t co = 0; co < cout_g; co++)
        for (int64_t kd = 0; kd < g.k[0]; kd++)
          for (int64_t kh = 0; kh < g.k[1]; kh++)
            for (int64_t kw = 0; kw < g.k[2]; kw++) {
              const float *row =
                  cols + ((co * g.k[0] + kd) * g.k[1] * g.k[2] + kh * g.k[2] + kw) * g.out_size;
              float *yc = yg + co * g.in_size;
              for (int64_t id = 0; id < g.out[0]; id++) {
                int64_t od = id * g.s[0] - g.p[0] + kd * g.d[0];
                if (od < 0 || od >= g.in[0])
                  continue;
                for (int64_t ih = 0; ih < g.out[1]; ih++) {
                  int64_t oh = ih * g.s[1] - g.p[1] + kh * g.d[1];
                  if (oh < 0 || oh >= g.in[1])
                    continue;
                  const float *src = row + (id * g.out[1] + ih) * g.out[2];
                  float *dst = yc + (od * g.in[1] + oh) * g.in[2];
                  for (int64_t iw = 0; iw < g.out[2]; iw++) {
                    int64_t ow = iw * g.s[2] - g.p[2] + kw * g.d[2];
                    if (ow >= 0 && ow < g.in[2])
                      dst[ow] += src[iw];
                  }
                }
              }
            }
      for (int64_t o = 0; bias && o < cout_g; o++) {
        float b = bias[grp * cout_g + o], *row = yg + o * g.in_size;
        for (int64_t i = 0; i < g.in_size; i++)
          row[i] += b;
      }
    }
  free(cols);
  return 0;
}

static int k_conv_transpose(const gs_cpu_kernel_call *k) { return run_float(k, conv_transpose_f32, gs__conv_transpose_f64); }

/* ---- pooling --------------------------------------------------------------------------- */

/* Planes [lo, hi) of a pooling (image by channel). */
GS_VECTOR_CLONES static int pool_planes(const gs_op_call *c, float *const *p, bool is_max,
                                        int64_t lo, int64_t hi) {
  const gs_pool_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  int64_t planes = xs->dims[0] * xs->dims[1];
  float *y = p[1];
  if (a->global) {
    int64_t size = gs_shape_numel(xs) / (planes ? planes : 1);
    if (size == 0) { /* an empty window: no maximum, and 0/0 for the mean */
      for (int64_t pl = lo; pl < hi; pl++)
        y[pl] = is_max ? -INFINITY : a->lp ? 0.0f : NAN;
      return 0;
    }
    if (is_max) {
      for (int64_t pl = lo; pl < hi; pl++) {
        const float *x = p[0] + pl * size;
        float best = x[0];
        for (int64_t i = 1; i < size; i++)
          best = x[i] > best || x[i] != x[i] ? x[i] : best; /* NaN wins, as in ReduceMax */
        y[pl] = best;
      }
      return 0;
    }
    for (int64_t pl = lo; pl < hi; pl++) {
      const float *x = p[0] + pl * size;
      /* Sixteen running sums, so that the adds need not wait on each other
       * and the compiler can keep them in vector registers. */
      float part[16] = {0};
      int64_t i = 0;
      for (; i + 16 <= size; i += 16)
        for (int j = 0; j < 16; j++)
          part[j] += x[i + j];
      float sum = 0;
      for (int j = 0; j < 16; j++)
        sum += part[j];
      for (; i < size; i++)
        sum += x[i];
      y[pl] = a->lp ? sum : sum / (float)size;
    }
    return 0;
  }
  /* The common 2x2, stride-2 max pooling without padding: one pass that the
   * compiler vectorises (pairs of columns, two rows at a time). */
  if (is_max && a->spatial == 2 && a->kernel[0] == 2 && a->kernel[1] == 2 &&
      a->stride[0] == 2 && a->stride[1] == 2 && a->dilation[0] == 1 && a->dilation[1] == 1 &&
      a->pad_begin[0] == 0 && a->pad_begin[1] == 0 && ys->dims[2] * 2 <= xs->dims[2] &&
      ys->dims[3] * 2 <= xs->dims[3]) {
    int64_t ih = xs->dims[2], iw = xs->dims[3], oh_n = ys->dims[2], ow_n = ys->dims[3];
    for (int64_t pl = lo; pl < hi; pl++) {
      const float *x = p[0] + pl * ih * iw;
      float *yp = y + pl * oh_n * ow_n;
      for (int64_t oh = 0; oh < oh_n; oh++) {
        const float *r0 = x + 2 * oh * iw, *r1 = r0 + iw;
        float *yo = yp + oh * ow_n;
        for (int64_t ow = 0; ow < ow_n; ow++) {
          float m0 = r0[2 * ow] > r0[2 * ow + 1] ? r0[2 * ow] : r0[2 * ow + 1];
          float m1 = r1[2 * ow] > r1[2 * ow + 1] ? r1[2 * ow] : r1[2 * ow + 1];
          yo[ow] = m0 > m1 ? m0 : m1;
        }
      }
    }
    return 0;
  }
  geom g;
  make_geom(&g, a->spatial, xs->dims + 2, ys->dims + 2, a->kernel, a->stride, a->dilation,
            a->pad_begin);
  int64_t pe[3] = {0, 0, 0};
  for (int i = 0; i < a->spatial; i++)
    pe[3 - a->spatial + i] = a->pad_end[i];
  /* Each dim's windows, computed once: [lo, hi) taps inside, and padded count. */
  int64_t total = g.out[0] + g.out[1] + g.out[2];
  int64_t *win = malloc(sizeof(int64_t) * 3 * (size_t)(total ? total : 1));
  float *rowbuf = malloc(sizeof(float) * (size_t)(g.in[2] ? g.in[2] : 1));
  if (!win || !rowbuf) {
    free(win);
    free(rowbuf);
    return gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name);
  }
  int64_t *wins[3] = {win, win + 3 * g.out[0], win + 3 * (g.out[0] + g.out[1])};
  for (int dim = 0; dim < 3; dim++)
    for (int64_t o = 0; o < g.out[dim]; o++)
      window(o, g.s[dim], g.p[dim], g.k[dim], g.d[dim], g.in[dim], pe[dim], &wins[dim][3 * o],
             &wins[dim][3 * o + 1], &wins[dim][3 * o + 2]);
  /* The outputs along the width whose windows lie wholly inside the row:
   * the same for every row and plane. */
  int64_t int_lo = 0, int_hi;
  while (int_lo < g.out[2] && (wins[2][3 * int_lo] != 0 || wins[2][3 * int_lo + 1] < g.k[2]))
    int_lo++;
  int_hi = int_lo;
  while (int_hi < g.out[2] && wins[2][3 * int_hi] == 0 && wins[2][3 * int_hi + 1] == g.k[2])
    int_hi++;
  for (int64_t pl = lo; pl < hi; pl++) {
    const float *x = p[0] + pl * g.in_size;
    float *yp = y + pl * g.out_size;
    for (int64_t od = 0; od < g.out[0]; od++) {
      const int64_t *wd = &wins[0][3 * od];
      for (int64_t oh = 0; oh < g.out[1]; oh++) {
        const int64_t *wh = &wins[1][3 * oh];
        /* Outputs whose windows lie wholly inside the row: tap by tap over
         * all of them at once, a loop the compiler vectorises. The rest
         * (borders, 3-D windows) take the general path below. */
        int64_t in_lo = 0, in_hi = 0;
        if (g.k[0] == 1 && wh[1] - wh[0] == g.k[1]) {
          in_lo = int_lo;
          in_hi = int_hi;
          float *yo = yp + (od * g.out[1] + oh) * g.out[2];
          /* First down the window's rows into one row (contiguous, wide
           * vectors), then across it: the strided reads happen once, not
           * once per row of the window. */
          int64_t h0 = oh * g.s[1] - g.p[1], sw = g.s[2];
          const float *plane_d = x + (od * g.s[0] - g.p[0]) * g.in[1] * g.in[2];
          const float *r0 = plane_d + h0 * g.in[2];
          memcpy(rowbuf, r0, sizeof(float) * (size_t)g.in[2]);
          for (int64_t kh = 1; kh < g.k[1]; kh++) {
            const float *r = plane_d + (h0 + kh * g.d[1]) * g.in[2];
            if (is_max)
              for (int64_t i = 0; i < g.in[2]; i++)
                rowbuf[i] = r[i] > rowbuf[i] ? r[i] : rowbuf[i];
            else
              for (int64_t i = 0; i < g.in[2]; i++)
                rowbuf[i] += r[i];
          }
          int64_t rest = in_lo; /* the first output the loop of any window takes */
          if (is_max && g.k[2] == 3 && sw == 2 && g.d[2] == 1) {
            /* ResNet's and ShuffleNet's 3x3, stride-2 max pooling: a
             * fixed window the compiler vectorises (the loop below reads
             * a window of any size one value at a time). */
            for (int64_t ow = in_lo; ow < in_hi; ow++) {
              const float *w = rowbuf + 2 * ow - g.p[2];
              float m = w[1] > w[0] ? w[1] : w[0];
              yo[ow] = w[2] > m ? w[2] : m;
            }
            rest = in_hi;
          }
          for (int64_t ow = rest; ow < in_hi; ow++) {
            const float *w = rowbuf + ow * sw - g.p[2];
            float acc = w[0];
            for (int64_t kw = 1; kw < g.k[2]; kw++) {
              float v = w[kw * g.d[2]];
              acc = is_max ? (v > acc ? v : acc) : acc + v;
            }
            yo[ow] = acc;
          }
          if (!is_max && !a->lp) {
            float inv = 1.0f / (float)(g.k[1] * g.k[2]);
            for (int64_t ow = in_lo; ow < in_hi; ow++)
              yo[ow] *= inv;
          }
        }
        /* The border outputs: [0, in_lo) and [in_hi, out). */
        for (int64_t ow = in_lo == 0 ? in_hi : 0; ow < g.out[2];
             ow = ow + 1 == in_lo ? in_hi : ow + 1) {
          const int64_t *ww = &wins[2][3 * ow];
          int64_t d0 = od * g.s[0] - g.p[0], h0 = oh * g.s[1] - g.p[1], w0 = ow * g.s[2] - g.p[2];
          float best = -INFINITY, sum = 0;
          for (int64_t kd = wd[0]; kd < wd[1]; kd++)
            for (int64_t kh = wh[0]; kh < wh[1]; kh++) {
              const float *row = x + ((d0 + kd * g.d[0]) * g.in[1] + h0 + kh * g.d[1]) * g.in[2] + w0;
              /* Separate loops, and a select that compiles to maxss: a
               * data-dependent branch here mispredicts on every other tap. */
              if (is_max)
                for (int64_t kw = ww[0]; kw < ww[1]; kw++) {
                  float v = row[kw * g.d[2]];
                  best = v > best ? v : best;
                }
              else
                for (int64_t kw = ww[0]; kw < ww[1]; kw++)
                  sum += row[kw * g.d[2]];
            }
          int64_t o = (od * g.out[1] + oh) * g.out[2] + ow;
          if (is_max) {
            yp[o] = best;
          } else if (a->lp) {
            yp[o] = sum;
          } else {
            int64_t div = a->count_include_pad ? wd[2] * wh[2] * ww[2]
                                               : (wd[1] - wd[0]) * (wh[1] - wh[0]) * (ww[1] - ww[0]);
            yp[o] = div ? sum / (float)div : 0.0f;
          }
        }
      }
    }
  }
  free(win);
  free(rowbuf);
  return 0;
}

/* Blocks [lo, hi) of a global average pooling of channel-blocked input:
 * each block's W channels averaged at once, over `size` positions, in four
 * running sums per channel so that the adds need not wait on each other. */
#define BLOCKED_MEAN(W)                                                        \
  for (int64_t b = lo; b < hi; b++) {                                          \
    const float *xb = x + b * size * (W);                                      \
    float acc[4][W] = {{0}};                                                   \
    int64_t i = 0;                                                             \
    for (; i + 4 <= size; i += 4)                                              \
      for (int k = 0; k < 4; k++)                                              \
        for (int l = 0; l < (W); l++)                                          \
          acc[k][l] += xb[(i + k) * (W) + l];                                  \
    for (; i < size; i++)                                                      \
      for (int l = 0; l < (W); l++)                                            \
        acc[0][l] += xb[i * (W) + l];                                          \
    for (int l = 0; l < (W); l++)                                              \
      y[b * (W) + l] = ((acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l])) / (float)size; \
  }

GS_VECTOR_CLONES void gs__cpu_blocked_mean(const float *x, float *y, int width, int64_t size,
                                          int64_t lo, int64_t hi) {
  if (width == 8) {
    BLOCKED_MEAN(8)
  } else {
    BLOCKED_MEAN(16)
  }
}
#undef BLOCKED_MEAN

/* Planes spread over the stream's threads. The only failure is running out
 * of memory, said again here: an error's detail belongs to its thread. */
static int pool_f32(const gs_op_call *c, float *const *p, bool is_max) {
  const gs_shape *xs = &c->in[0].shape;
  int64_t planes = xs->dims[0] * xs->dims[1];
  int64_t plane = planes ? gs_shape_numel(xs) / planes : 0;
  const gs_pool_attrs *a = c->attrs;
  if (a->src_block && plane > 0) { /* set by the plan for GlobalAveragePool only */
    int width = a->src_block;
    if ((width != 8 && width != 16) || xs->dims[1] % width != 0)
      return gs_error(GS_EINVAL, "node %s: no blocked pooling of %lld channels in blocks of %d",
                      c->node_name, (long long)xs->dims[1], width);
    GS_PARALLEL_RANGES(planes / width, GS_PARALLEL_GRAIN / (plane * width), lo, hi,
                       gs__cpu_blocked_mean(p[0], p[1], width, plane, lo, hi));
    return 0;
  }
  atomic_int failed = 0;
  GS_PARALLEL_RANGES(planes, GS_PARALLEL_GRAIN / (plane ? plane : 1), lo, hi,
                     if (pool_planes(c, p, is_max, lo, hi) < 0) failed = 1);
  return failed ? gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name) : 0;
}

static int maxpool_f32(const gs_op_call *c, float *const *p) { return pool_f32(c, p, true); }
static int avgpool_f32(const gs_op_call *c, float *const *p) { return pool_f32(c, p, false); }
static int k_maxpool(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  if (gs_is_int(c->in[0].dtype)) { /* int8/uint8 max pooling, through float */
    int64_t nx = gs_shape_numel(&c->in[0].shape), ny = gs_shape_numel(&c->out[0].shape);
    float *x = malloc(sizeof(float) * (size_t)(nx ? nx : 1)), *y = malloc(sizeof(float) * (size_t)(ny ? ny : 1));
    if (!x || !y) {
      free(x);
      free(y);
      return gs_error(GS_ENOMEM, "out of memory in MaxPool");
    }
    for (int64_t i = 0; i < nx; i++)
      x[i] = (float)gs_ldi(c->in[0].dtype, k->ptr[0], i);
    float *const p[2] = {x, y};
    int rc = pool_f32(c, p, true);
    for (int64_t i = 0; i < ny; i++)
      gs_sti(c->out[0].dtype, k->ptr[1], i, (int64_t)y[i]);
    free(x);
    free(y);
    return rc;
  }
  return run_float(k, maxpool_f32, gs__maxpool_f64);
}
static int k_avgpool(const gs_cpu_kernel_call *k) { return run_float(k, avgpool_f32, gs__avgpool_f64); }

/* LpPool and GlobalLpPool: |x|^p summed by the average pool's loops (which
 * skip their division when the attributes carry a p), then the p-th root. */
static int lppool_f32(const gs_op_call *c, float *const *p) {
  const gs_pool_attrs *a = c->attrs;
  int64_t nx = gs_shape_numel(&c->in[0].shape), ny = gs_shape_numel(&c->out[0].shape);
  float *powered = malloc(sizeof(float) * (size_t)(nx ? nx : 1));
  if (!powered)
    return gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name);
  const float *x = p[0];
  float *y = p[1], pf = (float)a->lp;
  for (int64_t i = 0; i < nx; i++)
    powered[i] = a->lp == 1 ? fabsf(x[i]) : a->lp == 2 ? x[i] * x[i] : powf(fabsf(x[i]), pf);
  float *const pp[2] = {powered, y};
  int rc = pool_f32(c, pp, false);
  free(powered);
  for (int64_t i = 0; rc >= 0 && i < ny; i++)
    y[i] = a->lp == 1 ? y[i] : a->lp == 2 ? sqrtf(y[i]) : powf(y[i], 1.0f / pf);
  return rc;
}
static int k_lppool(const gs_cpu_kernel_call *k) { return run_float(k, lppool_f32, gs__avgpool_f64); }

/* ---- normalisation and softmax ------------------------------------------------------- */

/* Planes [lo, hi) (image by channel) of an inference batch normalisation. */
GS_VECTOR_CLONES static void batchnorm_planes(float *const *p, float epsilon, bool relu,
                                              int64_t ch, int64_t inner, int64_t lo, int64_t hi) {
  const float *x = p[0], *scale = p[1], *bias = p[2], *mean = p[3], *var = p[4];
  float *y = p[5];
  for (int64_t pl = lo; pl < hi; pl++) {
    int64_t cc = pl % ch;
    float s = scale[cc] / sqrtf(var[cc] + epsilon), t = bias[cc] - mean[cc] * s;
    const float *xr = x + pl * inner;
    float *yr = y + pl * inner;
    if (relu)
      for (int64_t i = 0; i < inner; i++) {
        float v = xr[i] * s + t;
        yr[i] = v > 0.0f ? v : 0.0f; /* as the Relu kernel computes it */
      }
    else
      for (int64_t i = 0; i < inner; i++)
        yr[i] = xr[i] * s + t;
  }
}

static int batchnorm_f32(const gs_op_call *c, float *const *p) {
  const gs_norm_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape;
  int64_t n = xs->dims[0], ch = xs->dims[1], inner = 1;
  for (int i = 2; i < xs->rank; i++)
    inner *= xs->dims[i];
  GS_PARALLEL_RANGES(n * ch, GS_PARALLEL_GRAIN / (inner ? inner : 1), lo, hi,
                     batchnorm_planes(p, a->epsilon, a->act == GS_ACT_RELU, ch, inner, lo, hi));
  return 0;
}

static int k_batchnorm(const gs_cpu_kernel_call *k) { return run_float(k, batchnorm_f32, gs__batchnorm_f64); }

/* Rows [lo, hi) of a layer normalisation over rows of `inner` values. */
GS_VECTOR_CLONES static void layernorm_rows(const gs_op_call *c, float *const *p, int64_t inner,
                                            int64_t lo, int64_t hi) {
  const gs_norm_attrs *a = c->attrs;
  const float *x = p[0], *scale = p[1], *bias = c->n_in > 2 ? p[2] : NULL;
  float *y = p[c->n_in];
  float *mean_out = c->n_out > 1 ? p[c->n_in + 1] : NULL;
  float *inv_out = c->n_out > 2 ? p[c->n_in + 2] : NULL;
  for (int64_t r = lo; r < hi; r++) {
    const float *xr = x + r * inner;
    float *yr = y + r * inner;
    float mean = (float)(gs_lane_sum(xr, inner) / (double)inner);
    double sq = gs_lane_sum_sq(xr, inner, mean);
    float inv = 1.0f / sqrtf((float)(sq / (double)inner) + a->epsilon);
    if (bias)
      for (int64_t i = 0; i < inner; i++)
        yr[i] = (xr[i] - mean) * inv * scale[i] + bias[i];
    else
      for (int64_t i = 0; i < inner; i++)
        yr[i] = (xr[i] - mean) * inv * scale[i];
    if (mean_out)
      mean_out[r] = mean;
    if (inv_out)
      inv_out[r] = inv;
  }
}

static int layernorm_f32(const gs_op_call *c, float *const *p) {
  int64_t inner = gs_launch_norm_inner(c);
  int64_t rows = inner ? gs_shape_numel(&c->in[0].shape) / inner : 0;
  GS_PARALLEL_RANGES(rows, GS_PARALLEL_GRAIN / (inner ? inner : 1), lo, hi,
                     layernorm_rows(c, p, inner, lo, hi));
  return 0;
}

static int k_layernorm(const gs_cpu_kernel_call *k) { return run_float(k, layernorm_f32, gs__layernorm_f64); }

/* Rows [lo, hi) of an RMS normalisation: no mean taken out, no bias. */
GS_VECTOR_CLONES static void rmsnorm_rows(const gs_op_call *c, float *const *p, int64_t inner,
                                          int64_t lo, int64_t hi) {
  const gs_norm_attrs *a = c->attrs;
  const float *x = p[0], *scale = p[1];
  float *y = p[c->n_in];
  for (int64_t r = lo; r < hi; r++) {
    const float *xr = x + r * inner;
    float *yr = y + r * inner;
    double sq = gs_lane_sum_sq(xr, inner, 0.0f);
    float inv = 1.0f / sqrtf((float)(sq / (double)inner) + a->epsilon);
    for (int64_t i = 0; i < inner; i++)
      yr[i] = xr[i] * inv * scale[i];
  }
}

static int rmsnorm_f32(const gs_op_call *c, float *const *p) {
  int64_t inner = gs_launch_norm_inner(c);
  int64_t rows = inner ? gs_shape_numel(&c->in[0].shape) / inner : 0;
  GS_PARALLEL_RANGES(rows, GS_PARALLEL_GRAIN / (inner ? inner : 1), lo, hi,
                     rmsnorm_rows(c, p, inner, lo, hi));
  return 0;
}

static int k_rmsnorm(const gs_cpu_kernel_call *k) { return run_float(k, rmsnorm_f32, gs__rmsnorm_f64); }

/* Lanes [lo, hi) of a softmax: lane o * inner + in runs along the axis
 * (len values, `inner` apart). */
GS_VECTOR_CLONES static void softmax_lanes(float *const *p, bool log_out, int64_t len,
                                           int64_t inner, int64_t lo, int64_t hi) {
  for (int64_t lane = lo; lane < hi; lane++) {
    int64_t o = lane / inner, in = lane % inner;
    const float *x = p[0] + o * len * inner + in;
    float *y = p[1] + o * len * inner + in;
    float mx = -INFINITY;
    for (int64_t i = 0; i < len; i++)
      mx = x[i * inner] > mx ? x[i * inner] : mx;
    float sum = 0;
    if (log_out)
      for (int64_t i = 0; i < len; i++)
        sum += gs_fast_expf(x[i * inner] - mx);
    else
      for (int64_t i = 0; i < len; i++) {
        float e = gs_fast_expf(x[i * inner] - mx);
        y[i * inner] = e;
        sum += e;
      }
    if (log_out) {
      float ls = logf((float)sum);
      for (int64_t i = 0; i < len; i++)
        y[i * inner] = x[i * inner] - mx - ls;
    } else {
      float inv = 1.0f / sum;
      for (int64_t i = 0; i < len; i++)
        y[i * inner] *= inv;
    }
  }
}

/* Rows [lo, hi) of a softmax along the last axis (inner 1), in the lanes
 * of softmax_row.h. y must not be x: the exps go to y before LogSoftmax
 * reads x again (the plan never gives a Softmax its input's bytes). */
GS_VECTOR_CLONES static void softmax_rows(float *const *p, bool log_out, int64_t len, int64_t lo,
                                          int64_t hi) {
  for (int64_t row = lo; row < hi; row++) {
    const float *x = p[0] + row * len;
    float *y = p[1] + row * len;
    /* y takes the exps; LogSoftmax writes its own values over them. */
    float mx = gs_softmax_max(x, len), sum = gs_softmax_exp_sum(x, y, len, mx);
    if (log_out) {
      float ls = logf(sum);
      for (int64_t i = 0; i < len; i++)
        y[i] = x[i] - mx - ls;
    } else {
      float inv = 1.0f / sum;
      for (int64_t i = 0; i < len; i++)
        y[i] *= inv;
    }
  }
}

static int softmax_f32(const gs_op_call *c, float *const *p, bool log_out) {
  int64_t outer, len, inner;
  gs_launch_softmax_dims(c, &outer, &len, &inner);
  if (inner == 1) {
    GS_PARALLEL_RANGES(outer, GS_PARALLEL_GRAIN / (len ? len : 1), lo, hi,
                       softmax_rows(p, log_out, len, lo, hi));
    return 0;
  }
  GS_PARALLEL_RANGES(outer * inner, GS_PARALLEL_GRAIN / (len ? len : 1), lo, hi,
                     softmax_lanes(p, log_out, len, inner, lo, hi));
  return 0;
}

static int softmax_impl(const gs_op_call *c, float *const *p) { return softmax_f32(c, p, false); }
static int logsoftmax_impl(const gs_op_call *c, float *const *p) { return softmax_f32(c, p, true); }
static int k_softmax(const gs_cpu_kernel_call *k) { return run_float(k, softmax_impl, gs__softmax_f64); }
static int k_logsoftmax(const gs_cpu_kernel_call *k) { return run_float(k, logsoftmax_impl, gs__logsoftmax_f64); }

/* ---- registration ----------------------------------------------------------------------- */

#define KERNEL GS_CPU_KERNEL
static const gs_cpu_kernel_entry kernels[] = {
    KERNEL("Gemm", k_gemm),
    KERNEL("MatMul", k_matmul),
    KERNEL("Conv", k_conv),
    KERNEL("ConvTranspose", k_conv_transpose),
    KERNEL("MaxPool", k_maxpool),
    KERNEL("AveragePool", k_avgpool),
    KERNEL("GlobalAveragePool", k_avgpool),
    KERNEL("GlobalMaxPool", k_maxpool),
    KERNEL("LpPool", k_lppool),
    KERNEL("GlobalLpPool", k_lppool),
    KERNEL("BatchNormalization", k_batchnorm),
    KERNEL("LayerNormalization", k_layernorm),
    KERNEL("RMSNormalization", k_rmsnorm),
    KERNEL("Softmax", k_softmax),
    KERNEL("LogSoftmax", k_logsoftmax),
};

int gs__cpu_register_nn(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

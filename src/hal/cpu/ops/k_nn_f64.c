/* k_nn_f64.c - the neural-network ops' CPU kernels in float64, for
 * scientific models: Gemm, MatMul, Conv, ConvTranspose, the pools, the
 * normalisations and Softmax, all in double. Products go to OpenBLAS's
 * dgemm (oneDNN has no float64 GEMM on CPUs), one call per block of rows on
 * the stream's threads, with OpenBLAS's own threads off so that a stream
 * never runs more threads than it was given. The rest are plain loops: the
 * float32 kernels' vectorised fast paths (k_nn.c) have no float64 twins. */
#include "hal/cpu/ops/k_nn_f64.h"
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/nn_geom.h"
#include "hal/cpu/ops/parallel.h"
#include "hal/op/op_launch.h"

#include "base/error.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- products -------------------------------------------------------------------------- */

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
/* OpenBLAS's OpenMP build sets the calling thread's team size here: it is
 * put back, so that the stream keeps its threads. */
static void blas_single_threaded(void) {
  int team = omp_get_max_threads();
  openblas_set_num_threads(1);
  omp_set_num_threads(team);
}

void gs__cpu_dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                  const double *a, int64_t lda, const double *b, int64_t ldb, double beta,
                  double *c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) { /* no products: C = beta C */
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++)
        c[i * ldc + j] = beta != 0 ? beta * c[i * ldc + j] : 0.0;
    return;
  }
  pthread_once(&blas_once, blas_single_threaded);
  int64_t grain = (int64_t)(GS_PARALLEL_MIN_FLOPS / (2.0 * (double)n * (double)k)) + 1;
  GS_PARALLEL_RANGES(m, grain, lo, hi,
                     cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                                 trans_b ? CblasTrans : CblasNoTrans, (blasint)(hi - lo),
                                 (blasint)n, (blasint)k, alpha, a + (trans_a ? lo : lo * lda),
                                 (blasint)lda, b, (blasint)ldb, beta, c + lo * ldc, (blasint)ldc));
}

/* The plan fuses activations into float32 ops only (plan_fuse.c): one
 * fused into a float64 op is refused rather than dropped. */
static int no_fused_activation(const gs_op_call *c, gs_activation act) {
  if (act == GS_ACT_NONE)
    return GS_OK;
  return gs_error(GS_ENOTSUP, "node %s: a fused activation in float64 is not supported",
                  c->node_name);
}

int gs__gemm_f64(const gs_op_call *c, double *const *p) {
  const gs_gemm_attrs *g = c->attrs;
  int rc = no_fused_activation(c, g->act);
  if (rc < 0)
    return rc;
  double *y = p[c->n_in];
  bool has_c = c->n_in > 2 && p[2] && g->beta != 0;
  if (has_c)
    gs__cpu_broadcast_copy(&c->in[2].shape, p[2], &c->out[0].shape, y, sizeof(double));
  gs__cpu_dgemm(g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha, p[0], c->in[0].shape.dims[1], p[1],
        c->in[1].shape.dims[1], has_c ? g->beta : 0.0, y, g->n);
  return 0;
}

int gs__matmul_f64(const gs_op_call *c, double *const *p) {
  const gs_matmul_attrs *m = c->attrs;
  int rc = no_fused_activation(c, m->act);
  if (rc < 0)
    return rc;
  double *y = p[c->n_in];
  const double *bias = m->has_bias ? p[2] : NULL;
  for (int64_t b = 0; b < m->batch; b++) {
    int64_t oa, ob;
    gs_launch_matmul_offsets(m, b, &oa, &ob);
    double *yb = y + b * m->m * m->n;
    for (int64_t r = 0; bias && r < m->m; r++)
      memcpy(yb + r * m->n, bias, sizeof(double) * (size_t)m->n);
    gs__cpu_dgemm(false, false, m->m, m->n, m->k, 1.0, p[0] + oa, m->k, p[1] + ob, m->n,
          bias ? 1.0 : 0.0, yb, m->n);
  }
  return 0;
}

/* ---- convolutions ---------------------------------------------------------------------- */

/* Between an image x (channels of g's input) and its columns,
 * cols[(ch * K + tap) * out_size + o]: the input under output o's tap.
 * to_cols fills the columns (0 in the padding: im2col); otherwise each
 * column entry is added back where its tap reads (col2im). */
static void columns(const geom *g, double *x, int64_t channels, double *cols, bool to_cols) {
  int64_t row = 0;
  for (int64_t ch = 0; ch < channels; ch++)
    for (int64_t kd = 0; kd < g->k[0]; kd++)
      for (int64_t kh = 0; kh < g->k[1]; kh++)
        for (int64_t kw = 0; kw < g->k[2]; kw++, row++) {
          double *col = cols + row * g->out_size;
          for (int64_t od = 0; od < g->out[0]; od++) {
            int64_t id = od * g->s[0] - g->p[0] + kd * g->d[0];
            for (int64_t oh = 0; oh < g->out[1]; oh++) {
              int64_t ih = oh * g->s[1] - g->p[1] + kh * g->d[1];
              bool rows_in = id >= 0 && id < g->in[0] && ih >= 0 && ih < g->in[1];
              double *xr =
                  rows_in ? x + ((ch * g->in[0] + id) * g->in[1] + ih) * g->in[2] : NULL;
              for (int64_t ow = 0; ow < g->out[2]; ow++, col++) {
                int64_t iw = ow * g->s[2] - g->p[2] + kw * g->d[2];
                bool in = rows_in && iw >= 0 && iw < g->in[2];
                if (to_cols)
                  *col = in ? xr[iw] : 0.0;
                else if (in)
                  xr[iw] += *col;
              }
            }
          }
        }
}

/* (image, group) pairs [lo, hi) of a convolution: the windows' columns,
 * one dgemm of the group's weights [M/g, C/g K] by them, then the bias. */
static int conv_pairs(const gs_op_call *c, double *const *p, const geom *g, int64_t lo,
                      int64_t hi) {
  const gs_conv_attrs *a = c->attrs;
  int64_t cin = c->in[0].shape.dims[1], cout = c->out[0].shape.dims[1];
  int64_t cin_g = cin / a->group, cout_g = cout / a->group, kk = cin_g * g->k_size;
  size_t col_values = (size_t)(kk * g->out_size);
  double *cols = malloc(sizeof(double) * (col_values ? col_values : 1));
  if (!cols)
    return GS_ENOMEM;
  const double *bias = a->has_bias ? p[2] : NULL;
  for (int64_t pair = lo; pair < hi; pair++) {
    int64_t n = pair / a->group, grp = pair % a->group;
    double *yg = p[c->n_in] + (n * cout + grp * cout_g) * g->out_size;
    columns(g, p[0] + (n * cin + grp * cin_g) * g->in_size, cin_g, cols, true);
    gs__cpu_dgemm(false, false, cout_g, g->out_size, kk, 1.0, p[1] + grp * cout_g * kk, kk, cols,
          g->out_size, 0.0, yg, g->out_size);
    for (int64_t o = 0; bias && o < cout_g; o++)
      for (int64_t i = 0; i < g->out_size; i++)
        yg[o * g->out_size + i] += bias[grp * cout_g + o];
  }
  free(cols);
  return GS_OK;
}

/* The most im2col buffers may hold at once, over all threads. */
#define COLS_BUDGET ((double)(256 << 20))

/* Pairs of (image, group) spread over the threads, each with its own
 * columns (as many at once as COLS_BUDGET allows); a pair big enough alone
 * splits its dgemm's rows instead. */
int gs__conv_f64(const gs_op_call *c, double *const *p) {
  const gs_conv_attrs *a = c->attrs;
  int rc = no_fused_activation(c, a->act);
  if (rc < 0)
    return rc;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  geom g;
  make_geom(&g, a->spatial, xs->dims + 2, ys->dims + 2, a->kernel, a->stride, a->dilation,
            a->pad_begin);
  int64_t pairs = xs->dims[0] * a->group;
  double flops = 2.0 * (double)(ys->dims[1] / a->group) * (double)g.out_size *
                 (double)(xs->dims[1] / a->group * g.k_size);
  double col_bytes = 8.0 * (double)(xs->dims[1] / a->group * g.k_size) * (double)g.out_size;
  int64_t grain = (int64_t)(GS_PARALLEL_MIN_FLOPS / (flops + 1)) + 1;
  int64_t at_once = (int64_t)(COLS_BUDGET / (col_bytes + 1)); /* buffers the budget holds */
  if (at_once < 2)
    grain = pairs; /* one buffer at a time */
  else if (grain < pairs / at_once + 1)
    grain = pairs / at_once + 1;
  atomic_int failed = 0;
  GS_PARALLEL_RANGES(pairs, grain, lo, hi, if (conv_pairs(c, p, &g, lo, hi) < 0) failed = 1);
  if (failed)
    return gs_error(GS_ENOMEM, "out of memory for the im2col buffer of node %s", c->node_name);
  return 0;
}

int gs__conv_transpose_f64(const gs_op_call *c, double *const *p) {
  const gs_conv_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  geom g; /* the forward convolution whose input is our output */
  make_geom(&g, a->spatial, ys->dims + 2, xs->dims + 2, a->kernel, a->stride, a->dilation,
            a->pad_begin);
  int64_t batch = xs->dims[0], cin = xs->dims[1], cout = ys->dims[1];
  int64_t cin_g = cin / a->group, cout_g = cout / a->group, rows = cout_g * g.k_size;
  size_t col_values = (size_t)(rows * g.out_size);
  double *cols = malloc(sizeof(double) * (col_values ? col_values : 1));
  if (!cols)
    return gs_error(GS_ENOMEM, "out of memory for the col2im buffer of node %s", c->node_name);
  const double *bias = a->has_bias ? p[2] : NULL;
  double *y = p[c->n_in];
  memset(y, 0, sizeof(double) * (size_t)gs_shape_numel(ys));
  for (int64_t n = 0; n < batch; n++)
    for (int64_t grp = 0; grp < a->group; grp++) {
      double *yg = y + (n * cout + grp * cout_g) * g.in_size;
      /* cols [cout_g K, HWin] = W_g^T [cout_g K, cin_g] X_g [cin_g, HWin] */
      gs__cpu_dgemm(true, false, rows, g.out_size, cin_g, 1.0, p[1] + grp * cin_g * rows, rows,
            p[0] + (n * cin + grp * cin_g) * g.out_size, g.out_size, 0.0, cols, g.out_size);
      columns(&g, yg, cout_g, cols, false);
      for (int64_t o = 0; bias && o < cout_g; o++)
        for (int64_t i = 0; i < g.in_size; i++)
          yg[o * g.in_size + i] += bias[grp * cout_g + o];
    }
  free(cols);
  return 0;
}

/* ---- pooling ----------------------------------------------------------------------------- */

/* One output of a windowed pool: max, mean (the divisor as count_include_pad
 * says), or the sum of |x|^p and its p-th root. */
static double pool_one(const gs_pool_attrs *a, const geom *g, const int64_t *pad_end,
                       const double *x, const int64_t *o, bool is_max) {
  int64_t lo[3], hi[3], padded[3];
  for (int d = 0; d < 3; d++)
    window(o[d], g->s[d], g->p[d], g->k[d], g->d[d], g->in[d], pad_end[d], &lo[d], &hi[d],
           &padded[d]);
  double best = -INFINITY, sum = 0;
  for (int64_t kd = lo[0]; kd < hi[0]; kd++)
    for (int64_t kh = lo[1]; kh < hi[1]; kh++)
      for (int64_t kw = lo[2]; kw < hi[2]; kw++) {
        int64_t id = o[0] * g->s[0] - g->p[0] + kd * g->d[0];
        int64_t ih = o[1] * g->s[1] - g->p[1] + kh * g->d[1];
        int64_t iw = o[2] * g->s[2] - g->p[2] + kw * g->d[2];
        double v = x[(id * g->in[1] + ih) * g->in[2] + iw];
        best = v > best || v != v ? v : best;
        sum += a->lp == 1 ? fabs(v) : a->lp == 2 ? v * v : a->lp ? pow(fabs(v), a->lp) : v;
      }
  if (is_max)
    return best;
  if (a->lp)
    return a->lp == 1 ? sum : a->lp == 2 ? sqrt(sum) : pow(sum, 1.0 / a->lp);
  int64_t taps = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]);
  int64_t div = a->count_include_pad ? padded[0] * padded[1] * padded[2] : taps;
  return div ? sum / (double)div : a->global ? NAN : 0.0; /* an empty plane's mean is 0/0 */
}

/* Planes [lo, hi) (image by channel); a global pool is one window over the
 * whole plane. */
static void pool_planes(const gs_op_call *c, double *const *p, bool is_max, int64_t lo,
                        int64_t hi) {
  const gs_pool_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  int64_t ones[3] = {1, 1, 1}, zeros[3] = {0, 0, 0}, pad_end[3] = {0, 0, 0};
  geom g;
  if (a->global) {
    int64_t plane[3] = {1, 1, gs_shape_numel(xs) / (xs->dims[0] * xs->dims[1])};
    make_geom(&g, 3, plane, ones, plane, ones, ones, zeros);
  } else {
    make_geom(&g, a->spatial, xs->dims + 2, ys->dims + 2, a->kernel, a->stride, a->dilation,
              a->pad_begin);
    for (int i = 0; i < a->spatial; i++)
      pad_end[3 - a->spatial + i] = a->pad_end[i];
  }
  for (int64_t pl = lo; pl < hi; pl++) {
    const double *x = p[0] + pl * g.in_size;
    double *y = p[1] + pl * g.out_size;
    int64_t o[3];
    for (o[0] = 0; o[0] < g.out[0]; o[0]++)
      for (o[1] = 0; o[1] < g.out[1]; o[1]++)
        for (o[2] = 0; o[2] < g.out[2]; o[2]++)
          *y++ = pool_one(a, &g, pad_end, x, o, is_max);
  }
}

static int pool(const gs_op_call *c, double *const *p, bool is_max) {
  const gs_shape *xs = &c->in[0].shape;
  int64_t planes = xs->dims[0] * xs->dims[1];
  if (planes == 0)
    return 0;
  int64_t plane = gs_shape_numel(xs) / planes;
  GS_PARALLEL_RANGES(planes, GS_PARALLEL_GRAIN / (plane ? plane : 1), lo, hi,
                     pool_planes(c, p, is_max, lo, hi));
  return 0;
}

int gs__maxpool_f64(const gs_op_call *c, double *const *p) { return pool(c, p, true); }
int gs__avgpool_f64(const gs_op_call *c, double *const *p) { return pool(c, p, false); }

/* ---- normalisation and Softmax --------------------------------------------------------------- */

int gs__batchnorm_f64(const gs_op_call *c, double *const *p) {
  const gs_norm_attrs *a = c->attrs;
  int rc = no_fused_activation(c, a->act);
  if (rc != GS_OK)
    return rc;
  const gs_shape *xs = &c->in[0].shape;
  int64_t ch = xs->dims[1], inner = 1;
  for (int i = 2; i < xs->rank; i++)
    inner *= xs->dims[i];
  int64_t planes = xs->dims[0] * ch;
  for (int64_t pl = 0; pl < planes; pl++) {
    int64_t cc = pl % ch;
    double s = p[1][cc] / sqrt(p[4][cc] + a->epsilon), t = p[2][cc] - p[3][cc] * s;
    for (int64_t i = 0; i < inner; i++)
      p[5][pl * inner + i] = p[0][pl * inner + i] * s + t;
  }
  return 0;
}

/* Rows [lo, hi): LayerNormalization (rms false) or RMSNormalization. The
 * optional mean and inverse deviation outputs are float32 (stash_type 1). */
static void norm_rows(const gs_op_call *c, double *const *p, bool rms, int64_t inner, int64_t lo,
                      int64_t hi) {
  const gs_norm_attrs *a = c->attrs;
  float *mean_out = !rms && c->n_out > 1 ? (float *)(void *)p[c->n_in + 1] : NULL;
  float *inv_out = !rms && c->n_out > 2 ? (float *)(void *)p[c->n_in + 2] : NULL;
  const double *scale = p[1], *bias = !rms && c->n_in > 2 ? p[2] : NULL;
  for (int64_t r = lo; r < hi; r++) {
    const double *x = p[0] + r * inner;
    double *y = p[c->n_in] + r * inner, mean = 0, sq = 0;
    for (int64_t i = 0; !rms && i < inner; i++)
      mean += x[i];
    mean /= (double)inner;
    for (int64_t i = 0; i < inner; i++)
      sq += (x[i] - mean) * (x[i] - mean);
    double inv = 1.0 / sqrt(sq / (double)inner + a->epsilon);
    for (int64_t i = 0; i < inner; i++)
      y[i] = (x[i] - mean) * inv * scale[i] + (bias ? bias[i] : 0.0);
    if (mean_out)
      mean_out[r] = (float)mean;
    if (inv_out)
      inv_out[r] = (float)inv;
  }
}

static int normalize(const gs_op_call *c, double *const *p, bool rms) {
  int64_t inner = gs_launch_norm_inner(c);
  int64_t rows = inner ? gs_shape_numel(&c->in[0].shape) / inner : 0;
  GS_PARALLEL_RANGES(rows, GS_PARALLEL_GRAIN / (inner ? inner : 1), lo, hi,
                     norm_rows(c, p, rms, inner, lo, hi));
  return 0;
}

int gs__layernorm_f64(const gs_op_call *c, double *const *p) { return normalize(c, p, false); }
int gs__rmsnorm_f64(const gs_op_call *c, double *const *p) { return normalize(c, p, true); }

/* Lanes [lo, hi): lane o * inner + in runs along the axis. */
static void softmax_lanes(double *const *p, bool log_out, int64_t len, int64_t inner,
                          int64_t lo, int64_t hi) {
  for (int64_t lane = lo; lane < hi; lane++) {
    int64_t at = (lane / inner) * len * inner + lane % inner;
    const double *x = p[0] + at;
    double *y = p[1] + at, mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < len; i++)
      mx = x[i * inner] > mx ? x[i * inner] : mx;
    for (int64_t i = 0; i < len; i++)
      sum += exp(x[i * inner] - mx);
    double ls = log(sum);
    for (int64_t i = 0; i < len; i++)
      y[i * inner] = log_out ? x[i * inner] - mx - ls : exp(x[i * inner] - mx) / sum;
  }
}

static int softmax(const gs_op_call *c, double *const *p, bool log_out) {
  int64_t outer, len, inner;
  gs_launch_softmax_dims(c, &outer, &len, &inner);
  GS_PARALLEL_RANGES(outer * inner, GS_PARALLEL_GRAIN / (len ? len : 1), lo, hi,
                     softmax_lanes(p, log_out, len, inner, lo, hi));
  return 0;
}

int gs__softmax_f64(const gs_op_call *c, double *const *p) { return softmax(c, p, false); }
int gs__logsoftmax_f64(const gs_op_call *c, double *const *p) { return softmax(c, p, true); }

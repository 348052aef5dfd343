/* k_rnn.c - the CPU kernel of RNN, GRU and LSTM (engine/ops/ops_rnn.c), as
 * ONNX writes their equations, step by step in double: a reference-grade
 * loop, not a fast one (the CPU speed issue's to batch into GEMMs). */
#include "hal/cpu/ops/kernels.h"

#include "base/error.h"

#include <stdlib.h>

static double activate(gs_act_fn f, double x, double alpha, double beta) {
  switch (f) {
  case GS_ACT_FN_SIGMOID: return 1.0 / (1.0 + exp(-x));
  case GS_ACT_FN_TANH: return tanh(x);
  case GS_ACT_FN_RELU: return x > 0 ? x : 0;
  case GS_ACT_FN_HARD_SIGMOID: return fmax(0.0, fmin(1.0, alpha * x + beta));
  case GS_ACT_FN_LEAKY_RELU: return x >= 0 ? x : alpha * x;
  case GS_ACT_FN_AFFINE: return alpha * x + beta;
  case GS_ACT_FN_SCALED_TANH: return alpha * tanh(beta * x);
  case GS_ACT_FN_ELU: return x >= 0 ? x : alpha * (exp(x) - 1);
  case GS_ACT_FN_SOFTSIGN: return x / (1 + fabs(x));
  case GS_ACT_FN_SOFTPLUS: return log1p(exp(x));
  case GS_ACT_FN_THRESHOLDED_RELU: return x > alpha ? x : 0;
  }
  return x;
}

/* One direction's tensors, as doubles. */
typedef struct rnn_dir {
  const gs_rnn_attrs *a;
  int d, gates;
  gs_dtype dt;
  const void *w, *r, *b, *p; /* b and p may be NULL */
  double *h, *cell;          /* [batch][hidden] */
} rnn_dir;

static double f_act(const rnn_dir *s, int k, double x) {
  return activate(s->a->act[s->d][k], x, s->a->act_alpha[s->d][k], s->a->act_beta[s->d][k]);
}

static double clip(const gs_rnn_attrs *a, double v) {
  return a->clip > 0 ? fmax(-a->clip, fmin(a->clip, v)) : v;
}

/* Row `row` of matrix m (rows of `len`, from element m_off) times x. */
static double w_dot(const rnn_dir *s, int64_t row, const double *x, int64_t len, const void *m,
                    int64_t m_off) {
  double acc = 0;
  for (int64_t i = 0; i < len; i++)
    acc += gs_ld(s->dt, m, m_off + row * len + i) * x[i];
  return acc;
}

static double bias(const rnn_dir *s, int64_t row, bool recurrent) {
  if (!s->b)
    return 0;
  int64_t span = (int64_t)s->gates * s->a->hidden;
  return gs_ld(s->dt, s->b, (int64_t)s->d * 2 * span + (recurrent ? span : 0) + row);
}

/* One step of one batch entry: x (input) and h (hidden, updated). */
static void step(rnn_dir *s, const double *x, int64_t b, double *gate_buf) {
  const gs_rnn_attrs *a = s->a;
  int64_t H = a->hidden, I = a->input, G = s->gates;
  double *h = s->h + b * H, *cell = s->cell ? s->cell + b * H : NULL;
  int64_t w_off = (int64_t)s->d * G * H * I, r_off = (int64_t)s->d * G * H * H;
  /* gate_buf: x part (with both biases) [G*H], then the recurrent part [G*H]. */
  for (int64_t row = 0; row < G * H; row++) {
    gate_buf[row] = w_dot(s, row, x, I, s->w, w_off) + bias(s, row, false);
    gate_buf[G * H + row] = w_dot(s, row, h, H, s->r, r_off) + bias(s, row, true);
  }
  double *xs = gate_buf, *hs = gate_buf + G * H, *next = gate_buf + 2 * G * H;
  for (int64_t j = 0; j < H; j++) {
    if (a->kind == GS_RNN_PLAIN) {
      next[j] = f_act(s, 0, clip(a, xs[j] + hs[j]));
    } else if (a->kind == GS_RNN_GRU) { /* gates z, r, h */
      double z = f_act(s, 0, clip(a, xs[j] + hs[j]));
      double r = f_act(s, 0, clip(a, xs[H + j] + hs[H + j]));
      double hh;
      if (a->linear_before_reset) {
        hh = xs[2 * H + j] + r * hs[2 * H + j];
      } else { /* (r . h) R_h + Rb_h: the product over the reset hidden state */
        double acc = bias(s, 2 * H + j, true);
        int64_t r_row = ((int64_t)s->d * G * H + 2 * H + j) * H;
        for (int64_t i = 0; i < H; i++) {
          double ri = f_act(s, 0, clip(a, xs[H + i] + hs[H + i]));
          acc += gs_ld(s->dt, s->r, r_row + i) * ri * h[i];
        }
        hh = xs[2 * H + j] + acc;
      }
      hh = f_act(s, 1, clip(a, hh));
      next[j] = (1 - z) * hh + z * h[j];
    } else { /* LSTM: gates i, o, f, c; peepholes i, o, f */
      double pi = s->p ? gs_ld(s->dt, s->p, (int64_t)s->d * 3 * H + j) : 0;
      double po = s->p ? gs_ld(s->dt, s->p, (int64_t)s->d * 3 * H + H + j) : 0;
      double pf = s->p ? gs_ld(s->dt, s->p, (int64_t)s->d * 3 * H + 2 * H + j) : 0;
      double i_g = f_act(s, 0, clip(a, xs[j] + hs[j] + pi * cell[j]));
      double f_g = a->input_forget ? 1 - i_g
                                   : f_act(s, 0, clip(a, xs[2 * H + j] + hs[2 * H + j] + pf * cell[j]));
      double c_g = f_act(s, 1, clip(a, xs[3 * H + j] + hs[3 * H + j]));
      double c_new = f_g * cell[j] + i_g * c_g;
      double o_g = f_act(s, 0, clip(a, xs[H + j] + hs[H + j] + po * c_new));
      next[j] = o_g * f_act(s, 2, c_new);
      next[H + j] = c_new;
    }
  }
  for (int64_t j = 0; j < H; j++) {
    h[j] = next[j];
    if (cell)
      cell[j] = next[H + j];
  }
}

static int k_rnn(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_rnn_attrs *a = c->attrs;
  gs_dtype dt = c->in[0].dtype;
  int G = a->kind == GS_RNN_LSTM ? 4 : a->kind == GS_RNN_GRU ? 3 : 1;
  int64_t S = a->seq, B = a->batch, H = a->hidden, I = a->input, D = a->dirs;
  const void *in[8] = {0};
  for (int i = 0; i < c->n_in && i < 8; i++)
    in[i] = c->in[i].dtype != GS_DT_INVALID ? k->ptr[i] : NULL;
  void *y = c->n_out > 0 ? k->ptr[c->n_in] : NULL, *yh = c->n_out > 1 ? k->ptr[c->n_in + 1] : NULL;
  void *yc = c->n_out > 2 ? k->ptr[c->n_in + 2] : NULL;
  double *h = calloc((size_t)(B * H), sizeof(double)), *cell = calloc((size_t)(B * H), sizeof(double));
  double *x = malloc(sizeof(double) * (size_t)(I ? I : 1));
  double *buf = malloc(sizeof(double) * (size_t)(2 * G * H + 2 * H));
  int rc = h && cell && x && buf ? 0 : gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name);
  if (rc == 0 && y)
    for (int64_t i = 0; i < gs_shape_numel(&c->out[0].shape); i++)
      gs_st(dt, y, i, 0.0); /* steps past a sequence's length stay 0 */
  for (int d = 0; rc == 0 && d < D; d++) {
    bool backward = a->reverse || d == 1;
    rnn_dir s = {.a = a, .d = d, .gates = G, .dt = dt, .w = in[1], .r = in[2], .b = in[3],
                 .p = a->kind == GS_RNN_LSTM ? in[7] : NULL, .h = h,
                 .cell = a->kind == GS_RNN_LSTM ? cell : NULL};
    for (int64_t i = 0; i < B * H; i++) { /* initial_h and initial_c, in the layout's order */
      int64_t b = i / H, j = i % H, at = a->batch_first ? (b * D + d) * H + j : (d * B + b) * H + j;
      h[i] = in[5] ? gs_ld(dt, in[5], at) : 0;
      cell[i] = in[6] ? gs_ld(dt, in[6], at) : 0;
    }
    for (int64_t b = 0; b < B; b++) {
      int64_t len = in[4] ? ((const int32_t *)in[4])[b] : S;
      len = len < 0 ? 0 : len > S ? S : len;
      for (int64_t n = 0; n < len; n++) {
        int64_t t = backward ? len - 1 - n : n;
        for (int64_t i = 0; i < I; i++)
          x[i] = gs_ld(dt, in[0], a->batch_first ? (b * S + t) * I + i : (t * B + b) * I + i);
        step(&s, x, b, buf);
        for (int64_t j = 0; y && j < H; j++)
          gs_st(dt, y, a->batch_first ? ((b * S + t) * D + d) * H + j : ((t * D + d) * B + b) * H + j,
                h[b * H + j]);
      }
    }
    for (int64_t b = 0; b < B; b++)
      for (int64_t j = 0; j < H; j++) {
        int64_t at = a->batch_first ? (b * D + d) * H + j : (d * B + b) * H + j;
        if (yh)
          gs_st(dt, yh, at, h[b * H + j]);
        if (yc)
          gs_st(dt, yc, at, cell[b * H + j]);
      }
  }
  free(h);
  free(cell);
  free(x);
  free(buf);
  return rc;
}

static const gs_cpu_kernel_entry kernels[] = {
    GS_CPU_KERNEL("RNN", k_rnn),
    GS_CPU_KERNEL("GRU", k_rnn),
    GS_CPU_KERNEL("LSTM", k_rnn),
};

int gs__cpu_register_rnn(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

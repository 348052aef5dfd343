/* ops_rnn.c - definitions of the recurrent ops RNN, GRU and LSTM: inputs
 * X, W, R and the optional B, sequence_lens, initial_h (and LSTM's
 * initial_c and P); outputs Y, Y_h (and LSTM's Y_c), in either layout. */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

#include <string.h>

static const struct {
  const char *name;
  gs_act_fn fn;
  float alpha, beta; /* defaults where the function takes them */
} act_names[] = {
    {"Sigmoid", GS_ACT_FN_SIGMOID, 0, 0},         {"Tanh", GS_ACT_FN_TANH, 0, 0},
    {"Relu", GS_ACT_FN_RELU, 0, 0},               {"HardSigmoid", GS_ACT_FN_HARD_SIGMOID, 0.2f, 0.5f},
    {"LeakyRelu", GS_ACT_FN_LEAKY_RELU, 0.01f, 0}, {"Affine", GS_ACT_FN_AFFINE, 1, 0},
    {"ScaledTanh", GS_ACT_FN_SCALED_TANH, 1, 1},  {"Elu", GS_ACT_FN_ELU, 1, 0},
    {"Softsign", GS_ACT_FN_SOFTSIGN, 0, 0},       {"Softplus", GS_ACT_FN_SOFTPLUS, 0, 0},
    {"ThresholdedRelu", GS_ACT_FN_THRESHOLDED_RELU, 1, 0},
};

static bool takes_params(gs_act_fn f) {
  return f == GS_ACT_FN_HARD_SIGMOID || f == GS_ACT_FN_LEAKY_RELU || f == GS_ACT_FN_AFFINE ||
         f == GS_ACT_FN_SCALED_TANH || f == GS_ACT_FN_ELU || f == GS_ACT_FN_THRESHOLDED_RELU;
}

/* The activations attribute (or the op's defaults), per direction, with the
 * alphas and betas taken in order by the functions that have them. */
static int read_activations(gs_op_call *c, const gs_node *n, gs_rnn_attrs *a, int per_dir) {
  static const char *const defaults[3] = {"Sigmoid", "Tanh", "Tanh"};
  const gs_attr *names = gs_node_attr(n, "activations");
  const gs_attr *alphas = gs_node_attr(n, "activation_alpha");
  const gs_attr *betas = gs_node_attr(n, "activation_beta");
  if (names && (names->type != GS_ATTR_STRINGS || names->n != per_dir * a->dirs))
    return gs_op_fail(c, "activations must name %d functions", per_dir * a->dirs);
  int used_alpha = 0, used_beta = 0;
  for (int d = 0; d < a->dirs; d++)
    for (int k = 0; k < per_dir; k++) {
      const char *want = names ? names->strings[d * per_dir + k]
                               : a->kind == GS_RNN_PLAIN ? "Tanh" : defaults[k];
      size_t i = 0;
      while (i < sizeof act_names / sizeof act_names[0] && strcmp(act_names[i].name, want))
        i++;
      if (i == sizeof act_names / sizeof act_names[0])
        return gs_op_fail(c, "activation \"%s\" is not supported", want);
      a->act[d][k] = act_names[i].fn;
      a->act_alpha[d][k] = act_names[i].alpha;
      a->act_beta[d][k] = act_names[i].beta;
      if (takes_params(act_names[i].fn)) {
        if (alphas && alphas->type == GS_ATTR_FLOATS && used_alpha < alphas->n)
          a->act_alpha[d][k] = alphas->floats[used_alpha++];
        if (betas && betas->type == GS_ATTR_FLOATS && used_beta < betas->n)
          a->act_beta[d][k] = betas->floats[used_beta++];
      }
    }
  return GS_OK;
}

/* Whether optional input i is given, and then of `dims` (rank count). */
static int want_shape(gs_op_call *c, int i, int rank, const int64_t *dims, bool *given) {
  *given = c->n_in > i && c->in[i].dtype != GS_DT_INVALID;
  if (!*given)
    return GS_OK;
  const gs_shape *s = &c->in[i].shape;
  bool ok = s->rank == rank;
  for (int d = 0; ok && d < rank; d++)
    ok = s->dims[d] == dims[d];
  if (!ok)
    return gs_op_fail(c, "input %d has the wrong shape", i);
  if (i != 4 && c->in[i].dtype != c->in[0].dtype)
    return gs_op_fail(c, "input %d must have X's type", i);
  return GS_OK;
}

static int infer_rnn(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM(GS_DT_FLOAT32) | GS_DTM(GS_DT_FLOAT64));
  if (rc < 0)
    return rc;
  if (c->in[1].dtype == GS_DT_INVALID || c->in[2].dtype == GS_DT_INVALID)
    return gs_op_fail(c, "W and R are required");
  gs_rnn_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  a->kind = !strcmp(c->op_type, "LSTM") ? GS_RNN_LSTM
            : !strcmp(c->op_type, "GRU") ? GS_RNN_GRU
                                         : GS_RNN_PLAIN;
  int gates = a->kind == GS_RNN_LSTM ? 4 : a->kind == GS_RNN_GRU ? 3 : 1;
  const char *dir = gs_attr_string(n, "direction", "forward");
  if (strcmp(dir, "forward") && strcmp(dir, "reverse") && strcmp(dir, "bidirectional"))
    return gs_op_fail(c, "direction=\"%s\"", dir);
  a->dirs = strcmp(dir, "bidirectional") ? 1 : 2;
  a->reverse = !strcmp(dir, "reverse");
  a->batch_first = gs_attr_int(n, "layout", 0) != 0;
  a->clip = gs_attr_float(n, "clip", 0.0f);
  a->input_forget = gs_attr_int(n, "input_forget", 0) != 0;
  a->linear_before_reset = gs_attr_int(n, "linear_before_reset", 0) != 0;
  a->hidden = gs_attr_int(n, "hidden_size", 0);
  const gs_shape *x = &c->in[0].shape;
  if (x->rank != 3)
    return gs_op_fail(c, "X must have rank 3");
  a->seq = x->dims[a->batch_first ? 1 : 0];
  a->batch = x->dims[a->batch_first ? 0 : 1];
  a->input = x->dims[2];
  if (a->hidden <= 0 && c->in[1].shape.rank == 3)
    a->hidden = c->in[1].shape.dims[1] / gates;
  if (a->hidden <= 0 || a->hidden > (1 << 20))
    return gs_op_fail(c, "hidden_size must be positive");
  int64_t H = a->hidden, D = a->dirs, B = a->batch;
  bool given;
  int64_t w[3] = {D, gates * H, a->input}, r[3] = {D, gates * H, H}, b[2] = {D, 2 * gates * H};
  int64_t lens[1] = {B}, h0[3] = {D, B, H}, p[2] = {D, 3 * H};
  if (a->batch_first) /* layout 1: initial states are [batch, directions, hidden] */
    h0[0] = B, h0[1] = D;
  if ((rc = want_shape(c, 1, 3, w, &given)) < 0 || (rc = want_shape(c, 2, 3, r, &given)) < 0 ||
      (rc = want_shape(c, 3, 2, b, &given)) < 0 || (rc = want_shape(c, 4, 1, lens, &given)) < 0 ||
      (rc = want_shape(c, 5, 3, h0, &given)) < 0 || (rc = want_shape(c, 6, 3, h0, &given)) < 0 ||
      (a->kind == GS_RNN_LSTM && (rc = want_shape(c, 7, 2, p, &given)) < 0))
    return rc;
  if (c->n_in > 4 && c->in[4].dtype != GS_DT_INVALID && c->in[4].dtype != GS_DT_INT32)
    return gs_op_fail(c, "sequence_lens must be int32");
  if ((rc = read_activations(c, n, a, a->kind == GS_RNN_LSTM ? 3 : a->kind == GS_RNN_GRU ? 2 : 1)) < 0)
    return rc;
  gs_dtype dt = c->in[0].dtype;
  c->out[0].dtype = dt;
  c->out[0].shape = a->batch_first ? (gs_shape){.rank = 4, .dims = {B, a->seq, D, H}}
                                   : (gs_shape){.rank = 4, .dims = {a->seq, D, B, H}};
  gs_shape state = a->batch_first ? (gs_shape){.rank = 3, .dims = {B, D, H}}
                                  : (gs_shape){.rank = 3, .dims = {D, B, H}};
  for (int i = 1; i < c->n_out; i++) {
    c->out[i].dtype = dt;
    c->out[i].shape = state;
  }
  return GS_OK;
}

static const char *const rnn_attrs[] = {"activation_alpha", "activation_beta", "activations",
                                        "clip", "direction", "hidden_size", "layout", NULL};
static const char *const gru_attrs[] = {"activation_alpha", "activation_beta", "activations",
                                        "clip", "direction", "hidden_size", "layout",
                                        "linear_before_reset", NULL};
static const char *const lstm_attrs[] = {"activation_alpha", "activation_beta", "activations",
                                         "clip", "direction", "hidden_size", "layout",
                                         "input_forget", NULL};

const gs_op_def gs__ops_rnn[] = {
    {.name = "RNN", .min_in = 3, .max_in = 6, .min_out = 0, .max_out = 2, .attrs = rnn_attrs,
     .infer = infer_rnn},
    {.name = "GRU", .min_in = 3, .max_in = 6, .min_out = 0, .max_out = 2, .attrs = gru_attrs,
     .infer = infer_rnn},
    {.name = "LSTM", .min_in = 3, .max_in = 8, .min_out = 0, .max_out = 3, .attrs = lstm_attrs,
     .infer = infer_rnn},
    {.name = NULL},
};

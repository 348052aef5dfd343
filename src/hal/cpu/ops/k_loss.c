/* k_loss.c - CPU kernels of NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss (engine/ops/ops_loss.c), computed in double. */
#include "hal/cpu/ops/kernels.h"

#include "base/error.h"

#include <stdlib.h>

/* The loss of log-probabilities lp (N, C, D flattened), as ONNX defines
 * NegativeLogLikelihoodLoss; lp is read through gs_ld unless `dense`. */
static int nll(const gs_op_call *c, gs_dtype dt, const void *lp, const double *dense,
               const void *target, const void *weight, void *out) {
  const gs_loss_attrs *a = c->attrs;
  const gs_shape *x = &c->in[0].shape;
  int64_t N = x->dims[0], C = x->dims[1], D = 1;
  for (int i = 2; i < x->rank; i++)
    D *= x->dims[i];
  double total = 0, weights = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t d = 0; d < D; d++) {
      int64_t t = gs_ldi(c->in[1].dtype, target, n * D + d), i = n * D + d;
      double loss = 0, w = 0;
      if (!(a->has_ignore && t == a->ignore_index)) {
        if (t < 0 || t >= C)
          return gs_error(GS_EINVAL, "node %s (%s): target %lld is not a class in [0, %lld)",
                          c->node_name, c->op_type, (long long)t, (long long)C);
        int64_t at = (n * C + t) * D + d;
        w = weight ? gs_ld(dt, weight, t) : 1.0;
        loss = -(dense ? dense[at] : gs_ld(dt, lp, at)) * w;
      }
      if (a->reduction == GS_LOSS_NONE)
        gs_st(dt, out, i, loss);
      total += loss;
      weights += w;
    }
  if (a->reduction == GS_LOSS_SUM)
    gs_st(dt, out, 0, total);
  else if (a->reduction == GS_LOSS_MEAN)
    gs_st(dt, out, 0, total / weights);
  return 0;
}

static const void *weight_of(const gs_cpu_kernel_call *k, const gs_op_call *c) {
  return c->n_in > 2 && c->in[2].dtype != GS_DT_INVALID ? k->ptr[2] : NULL;
}

static int k_nll(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  return nll(c, c->in[0].dtype, k->ptr[0], NULL, k->ptr[1], weight_of(k, c), k->ptr[c->n_in]);
}

/* Log-softmax over the class axis, then the same loss. */
static int k_softmax_cross_entropy(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_shape *x = &c->in[0].shape;
  gs_dtype dt = c->in[0].dtype;
  int64_t N = x->dims[0], C = x->dims[1], D = 1, total = gs_shape_numel(x);
  for (int i = 2; i < x->rank; i++)
    D *= x->dims[i];
  double *lp = malloc(sizeof(double) * (size_t)(total ? total : 1));
  if (!lp)
    return gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name);
  for (int64_t n = 0; n < N; n++)
    for (int64_t d = 0; d < D; d++) {
      double best = -INFINITY, sum = 0;
      for (int64_t j = 0; j < C; j++) {
        double v = gs_ld(dt, k->ptr[0], (n * C + j) * D + d);
        best = v > best ? v : best;
      }
      for (int64_t j = 0; j < C; j++)
        sum += exp(gs_ld(dt, k->ptr[0], (n * C + j) * D + d) - best);
      for (int64_t j = 0; j < C; j++) {
        int64_t at = (n * C + j) * D + d;
        lp[at] = gs_ld(dt, k->ptr[0], at) - best - log(sum);
      }
    }
  int rc = nll(c, dt, NULL, lp, k->ptr[1], weight_of(k, c), k->ptr[c->n_in]);
  if (rc == 0 && c->n_out > 1 && k->ptr[c->n_in + 1])
    for (int64_t i = 0; i < total; i++)
      gs_st(dt, k->ptr[c->n_in + 1], i, lp[i]);
  free(lp);
  return rc;
}

static const gs_cpu_kernel_entry kernels[] = {
    GS_CPU_KERNEL("NegativeLogLikelihoodLoss", k_nll),
    GS_CPU_KERNEL("SoftmaxCrossEntropyLoss", k_softmax_cross_entropy),
};

int gs__cpu_register_loss(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

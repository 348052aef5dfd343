/* k_einsum.c - the CPU kernel of Einsum (engine/ops/ops_einsum.c): every
 * combination of the labels' values once, the product of the inputs'
 * elements added into the output's, in double with Neumaier's
 * compensation (int64 for integers). The plain loop nest is general, not
 * fast: models that lean on Einsum for their heavy products are the CPU
 * speed issue's. */
#include "hal/cpu/ops/kernels.h"

#include "base/error.h"

#include <stdlib.h>

static int k_einsum(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_einsum_attrs *a = c->attrs;
  gs_dtype dt = c->in[0].dtype;
  int64_t n_out = gs_shape_numel(&c->out[0].shape), combos = 1;
  for (int l = 0; l < a->n_labels; l++)
    combos *= a->size[l];
  /* Each label's stride in each input (0 where it broadcasts) and the output. */
  int64_t stride[8][GS_EINSUM_MAX_LABELS] = {{0}}, out_stride[GS_EINSUM_MAX_LABELS] = {0};
  for (int i = 0; i < a->n_in && i < 8; i++) {
    int64_t s = 1;
    for (int d = a->in_rank[i] - 1; d >= 0; d--) {
      if (c->in[i].shape.dims[d] != 1)
        stride[i][a->in_label[i][d]] += s;
      s *= c->in[i].shape.dims[d];
    }
  }
  int64_t s = 1;
  for (int d = a->out_rank - 1; d >= 0; d--) {
    out_stride[a->out_label[d]] = s;
    s *= c->out[0].shape.dims[d];
  }
  bool is_int = gs_is_int(dt);
  double *acc = calloc((size_t)(n_out ? n_out : 1), sizeof(double));
  double *comp = calloc((size_t)(n_out ? n_out : 1), sizeof(double));
  int64_t *iacc = calloc((size_t)(n_out ? n_out : 1), sizeof(int64_t));
  if (!acc || !comp || !iacc) {
    free(acc);
    free(comp);
    free(iacc);
    return gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name);
  }
  int64_t idx[GS_EINSUM_MAX_LABELS] = {0}, off[8] = {0}, o = 0;
  for (int64_t it = 0; it < combos; it++) {
    if (is_int) {
      int64_t v = 1;
      for (int i = 0; i < a->n_in; i++)
        v = (int64_t)((uint64_t)v * (uint64_t)gs_ldi(dt, k->ptr[i], off[i]));
      iacc[o] = (int64_t)((uint64_t)iacc[o] + (uint64_t)v);
    } else {
      double v = 1;
      for (int i = 0; i < a->n_in; i++)
        v *= gs_ld(dt, k->ptr[i], off[i]);
      acc[o] = gs_sum_step(acc[o], v, &comp[o]);
    }
    for (int l = a->n_labels - 1; l >= 0; l--) { /* the odometer, offsets kept with it */
      idx[l]++;
      for (int i = 0; i < a->n_in; i++)
        off[i] += stride[i][l];
      o += out_stride[l];
      if (idx[l] < a->size[l])
        break;
      for (int i = 0; i < a->n_in; i++)
        off[i] -= stride[i][l] * idx[l];
      o -= out_stride[l] * idx[l];
      idx[l] = 0;
    }
  }
  void *y = k->ptr[c->n_in];
  for (int64_t i = 0; i < n_out; i++) {
    if (is_int)
      gs_sti(dt, y, i, iacc[i]);
    else
      gs_st(dt, y, i, gs_sum_total(acc[i], comp[i]));
  }
  free(acc);
  free(comp);
  free(iacc);
  return 0;
}

static const gs_cpu_kernel_entry kernels[] = {GS_CPU_KERNEL("Einsum", k_einsum)};

int gs__cpu_register_einsum(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

/* k_einsum.c - the CPU kernel of Einsum (engine/ops/ops_einsum.c): every
 * combination of the labels' values once, the product of the inputs'
 * elements added into the output's, in double with Neumaier's
 * compensation (int64 for integers). Two float32 (or half) operands whose
 * labels make a batch of matrix products, as attention in MaxViT writes
 * it, go to BLAS's dgemm instead (see products()). */
#include "hal/cpu/ops/kernels.h"
#include "hal/cpu/ops/k_nn_f64.h"
#include "hal/cpu/ops/parallel.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

/* Each label's stride in each input (0 where it broadcasts) and in the output. */
typedef struct strides {
  int64_t in[8][GS_EINSUM_MAX_LABELS], out[GS_EINSUM_MAX_LABELS];
} strides;

static void find_strides(const gs_op_call *c, const gs_einsum_attrs *a, strides *st) {
  memset(st, 0, sizeof *st);
  for (int i = 0; i < a->n_in && i < 8; i++) {
    int64_t s = 1;
    for (int d = a->in_rank[i] - 1; d >= 0; d--) {
      if (c->in[i].shape.dims[d] != 1)
        st->in[i][a->in_label[i][d]] += s;
      s *= c->in[i].shape.dims[d];
    }
  }
  int64_t s = 1;
  for (int d = a->out_rank - 1; d >= 0; d--) {
    st->out[a->out_label[d]] = s;
    s *= c->out[0].shape.dims[d];
  }
}

/* ---- a batch of matrix products --------------------------------------------------
 * Each label of A x B -> Y is a batch label (in all three), a row (A and Y),
 * a column (B and Y) or summed (A and B). A is gathered in double into
 * [batch][rows][sum], B into [batch][sum][cols], dgemm sums each product in
 * double as the loop does, and each value is rounded once into Y: the bound
 * in docs/precision.md holds. float64 keeps the compensated loop, whose
 * bound is 1 ULP. The loop nest took 1.16 s of MaxViT-T's 1.29 s. */

enum { BATCH, ROWS, COLS, SUM, ROLES };

typedef struct roles {
  int n[ROLES], label[ROLES][GS_EINSUM_MAX_LABELS];
  int64_t extent[ROLES];
} roles;

/* The role of each label, or false where some label has none (summed
 * within one operand) or an operand repeats one (a diagonal). */
static bool find_roles(const gs_einsum_attrs *a, roles *r) {
  bool in[3][GS_EINSUM_MAX_LABELS] = {{false}};
  for (int i = 0; i < 2; i++)
    for (int d = 0; d < a->in_rank[i]; d++) {
      if (in[i][a->in_label[i][d]])
        return false;
      in[i][a->in_label[i][d]] = true;
    }
  for (int d = 0; d < a->out_rank; d++) {
    if (in[2][a->out_label[d]])
      return false;
    in[2][a->out_label[d]] = true;
  }
  *r = (roles){.extent = {1, 1, 1, 1}};
  for (int l = 0; l < a->n_labels; l++) {
    int role = in[0][l] && in[1][l] ? (in[2][l] ? BATCH : SUM)
               : in[0][l] && in[2][l] ? ROWS
               : in[1][l] && in[2][l] ? COLS
                                      : -1;
    if (role < 0)
      return false;
    r->label[role][r->n[role]++] = l;
    r->extent[role] *= a->size[l];
  }
  return true;
}

/* off[x] for x < the role's extent: the offset, by `stride`, of the x-th
 * combination of the role's labels (the last fastest). */
static void role_offsets(const gs_einsum_attrs *a, const roles *r, int role,
                         const int64_t *stride, int64_t *off) {
  for (int64_t x = 0; x < r->extent[role]; x++) {
    int64_t rest = x, o = 0;
    for (int j = r->n[role] - 1; j >= 0; j--) {
      int l = r->label[role][j];
      o += rest % a->size[l] * stride[l];
      rest /= a->size[l];
    }
    off[x] = o;
  }
}

/* dst[o][m][i] = src at outer[o] + mid[m] + inner[i], as doubles. */
static void gather(gs_dtype dt, const void *src, const int64_t *outer, int64_t n_outer,
                   const int64_t *mid, int64_t n_mid, const int64_t *inner, int64_t n_inner,
                   double *dst) {
  for (int64_t o = 0; o < n_outer; o++)
    for (int64_t m = 0; m < n_mid; m++)
      for (int64_t i = 0; i < n_inner; i++)
        *dst++ = gs_ld(dt, src, outer[o] + mid[m] + inner[i]);
}

static bool same_offsets(const int64_t *off, int64_t n) {
  for (int64_t i = 1; i < n; i++)
    if (off[i] != off[0])
      return false;
  return true;
}

static int products(const gs_cpu_kernel_call *k, const gs_einsum_attrs *a, const roles *r,
                    const strides *st) {
  const gs_op_call *c = gs_kcall(k);
  gs_dtype dt = c->in[0].dtype;
  int64_t nb = r->extent[BATCH], nm = r->extent[ROWS], nn = r->extent[COLS], nk = r->extent[SUM];
  if (nb * nm * nn == 0) /* an empty output */
    return GS_OK;
  int64_t *off = malloc(sizeof *off * (size_t)(3 * nb + 2 * nm + 2 * nn + 2 * nk));
  if (!off)
    return gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name);
  int64_t *a_b = off, *b_b = a_b + nb, *y_b = b_b + nb, *a_m = y_b + nb, *y_m = a_m + nm,
          *b_n = y_m + nm, *y_n = b_n + nn, *a_k = y_n + nn, *b_k = a_k + nk;
  role_offsets(a, r, BATCH, st->in[0], a_b);
  role_offsets(a, r, BATCH, st->in[1], b_b);
  role_offsets(a, r, BATCH, st->out, y_b);
  role_offsets(a, r, ROWS, st->in[0], a_m);
  role_offsets(a, r, ROWS, st->out, y_m);
  role_offsets(a, r, COLS, st->in[1], b_n);
  role_offsets(a, r, COLS, st->out, y_n);
  role_offsets(a, r, SUM, st->in[0], a_k);
  role_offsets(a, r, SUM, st->in[1], b_k);
  /* An operand the batch broadcasts (its batch offsets all one) is gathered once. */
  int64_t a_step = same_offsets(a_b, nb) ? 0 : nm * nk, b_step = same_offsets(b_b, nb) ? 0 : nk * nn;
  double *ad = malloc(sizeof *ad * (size_t)((a_step ? nb : 1) * nm * nk));
  double *bd = malloc(sizeof *bd * (size_t)((b_step ? nb : 1) * nk * nn));
  double *yd = malloc(sizeof *yd * (size_t)(nb * nm * nn));
  if (!ad || !bd || !yd) {
    free(off);
    free(ad);
    free(bd);
    free(yd);
    return gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name);
  }
  gather(dt, k->ptr[0], a_b, a_step ? nb : 1, a_m, nm, a_k, nk, ad);
  gather(dt, k->ptr[1], b_b, b_step ? nb : 1, b_k, nk, b_n, nn, bd);
  GS_PARALLEL_RANGES(nb, 1, lo, hi, {
    for (int64_t b = lo; b < hi; b++)
      gs__cpu_dgemm(false, false, nm, nn, nk, 1.0, ad + b * a_step, nk, bd + b * b_step, nn, 0.0,
                    yd + b * nm * nn, nn);
  });
  void *y = k->ptr[c->n_in];
  const double *v = yd;
  for (int64_t b = 0; b < nb; b++)
    for (int64_t m = 0; m < nm; m++)
      for (int64_t n = 0; n < nn; n++)
        gs_st(dt, y, y_b[b] + y_m[m] + y_n[n], *v++);
  free(off);
  free(ad);
  free(bd);
  free(yd);
  return GS_OK;
}

static int k_einsum(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_einsum_attrs *a = c->attrs;
  gs_dtype dt = c->in[0].dtype;
  strides st;
  find_strides(c, a, &st);
  roles r;
  if (a->n_in == 2 && gs_dtype_is_float(dt) && dt != GS_DT_FLOAT64 && find_roles(a, &r) &&
      r.extent[SUM] > 0)
    return products(k, a, &r, &st);
  int64_t n_out = gs_shape_numel(&c->out[0].shape), combos = 1;
  for (int l = 0; l < a->n_labels; l++)
    combos *= a->size[l];
  int64_t (*stride)[GS_EINSUM_MAX_LABELS] = st.in, *out_stride = st.out;
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

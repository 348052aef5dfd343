/* ops_einsum.c - the definition of Einsum: the equation parsed into
 * numbered labels, their extents checked against the inputs' shapes.
 * Explicit ("ij,jk->ik") and implicit ("ij,jk") outputs, repeated labels
 * (diagonals), and "..." for the leading dimensions. */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

#include <ctype.h>
#include <string.h>

/* The number of label character ch, adding it if new; -1 when full. */
static int label_of(gs_einsum_attrs *a, char *names, char ch) {
  for (int i = 0; i < a->n_labels; i++)
    if (names[i] == ch)
      return i;
  if (a->n_labels == GS_EINSUM_MAX_LABELS)
    return -1;
  names[a->n_labels] = ch;
  return a->n_labels++;
}

/* Labels of one term into out[]; "..." becomes the digits '0'.. (as many as
 * the ellipsis covers, `ell`), so that they number like other labels. */
static int parse_term(gs_op_call *c, gs_einsum_attrs *a, char *names, const char *t, size_t len,
                      int rank, int8_t *out, int *ell) {
  int n = 0, letters = 0;
  for (size_t i = 0; i < len; i++)
    letters += isalpha((unsigned char)t[i]) != 0;
  for (size_t i = 0; i < len; i++) {
    if (t[i] == ' ')
      continue;
    if (t[i] == '.' && i + 2 < len + 0 && t[i + 1] == '.' && t[i + 2] == '.') {
      int cover = rank - letters;
      if (*ell < 0)
        *ell = cover;
      if (cover < 0 || cover != *ell)
        return gs_op_fail(c, "\"...\" covers different dimensions in the terms");
      for (int k = 0; k < cover; k++) {
        if (n == GS_MAX_DIMS)
          return gs_op_fail(c, "a term has more than %d labels", GS_MAX_DIMS);
        int l = label_of(a, names, (char)('0' + k));
        if (l < 0)
          return gs_op_fail(c, "more than %d labels", GS_EINSUM_MAX_LABELS);
        out[n++] = (int8_t)l;
      }
      i += 2;
      continue;
    }
    if (!isalpha((unsigned char)t[i]))
      return gs_op_fail(c, "'%c' is no label", t[i]);
    if (n == GS_MAX_DIMS)
      return gs_op_fail(c, "a term has more than %d labels", GS_MAX_DIMS);
    int l = label_of(a, names, t[i]);
    if (l < 0)
      return gs_op_fail(c, "more than %d labels", GS_EINSUM_MAX_LABELS);
    out[n++] = (int8_t)l;
  }
  return n;
}

static int infer_einsum(gs_op_call *c, const gs_node *n) {
  const char *eq = gs_attr_string(n, "equation", NULL);
  if (!eq)
    return gs_op_fail(c, "the equation attribute is required");
  gs_einsum_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  char names[GS_EINSUM_MAX_LABELS] = {0};
  const char *arrow = strstr(eq, "->");
  size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
  int ell = -1, rc;
  bool seen[GS_EINSUM_MAX_LABELS] = {false};
  a->n_in = c->n_in;
  const char *t = eq;
  for (int i = 0; i < c->n_in; i++) {
    if ((rc = gs_op_want_dtype(c, i, GS_DTM_NUMERIC)) < 0)
      return rc;
    if (c->in[i].dtype != c->in[0].dtype)
      return gs_op_fail(c, "the inputs must have one type");
    const char *end = memchr(t, ',', lhs_len - (size_t)(t - eq));
    size_t len = end ? (size_t)(end - t) : lhs_len - (size_t)(t - eq);
    if ((end == NULL) != (i == c->n_in - 1))
      return gs_op_fail(c, "the equation has not one term per input");
    int k = parse_term(c, a, names, t, len, c->in[i].shape.rank, a->in_label[i], &ell);
    if (k < 0)
      return k;
    if (k != c->in[i].shape.rank)
      return gs_op_fail(c, "term %d has %d labels for rank %d", i, k, c->in[i].shape.rank);
    a->in_rank[i] = k;
    for (int d = 0; d < k; d++) {
      int l = a->in_label[i][d];
      int64_t dim = c->in[i].shape.dims[d], *sz = &a->size[l];
      if (seen[l] && *sz != dim && dim != 1 && *sz != 1)
        return gs_op_fail(c, "label '%c' is %lld and %lld long", names[l], (long long)*sz,
                          (long long)dim);
      if (!seen[l] || *sz == 1)
        *sz = dim; /* the first extent, or a broadcast from 1 */
      seen[l] = true;
    }
    t = end ? end + 1 : t + len;
  }
  if (arrow) {
    const char *o = arrow + 2;
    int letters = 0, known = a->n_labels;
    for (const char *p = o; *p; p++)
      letters += isalpha((unsigned char)*p) != 0;
    /* An output "..." covers what the inputs' did. */
    int k = parse_term(c, a, names, o, strlen(o), letters + (ell > 0 ? ell : 0), a->out_label,
                       &ell);
    if (k < 0)
      return k;
    if (a->n_labels > known)
      return gs_op_fail(c, "output label '%c' is in no input", names[known]);
    a->out_rank = k;
  } else { /* implicit: the ellipsis, then the labels seen once, alphabetically */
    int count[GS_EINSUM_MAX_LABELS] = {0};
    for (int i = 0; i < c->n_in; i++)
      for (int d = 0; d < a->in_rank[i]; d++)
        count[a->in_label[i][d]]++;
    for (char ch = '0'; ch <= 'z'; ch++)
      for (int l = 0; l < a->n_labels; l++)
        if (names[l] == ch && (isdigit((unsigned char)ch) || count[l] == 1) &&
            a->out_rank < GS_MAX_DIMS)
          a->out_label[a->out_rank++] = (int8_t)l;
  }
  /* The kernel visits every combination of the labels: bound that. */
  double combos = 1;
  for (int l = 0; l < a->n_labels; l++)
    combos *= (double)a->size[l];
  if (combos > 1e11)
    return gs_op_fail(c, "the equation spans %.3g combinations of its labels (at most 1e11)",
                      combos);
  gs_shape out = {.rank = a->out_rank};
  for (int d = 0; d < a->out_rank; d++)
    out.dims[d] = a->size[a->out_label[d]];
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = out;
  return GS_OK;
}

static const char *const einsum_attrs[] = {"equation", NULL};

const gs_op_def gs__ops_einsum[] = {
    {.name = "Einsum", .min_in = 1, .max_in = 8, .min_out = 1, .max_out = 1,
     .attrs = einsum_attrs, .infer = infer_einsum},
    {.name = NULL},
};

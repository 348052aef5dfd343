/* devops_index.c - the engine's index and rearranging ops on kernel-compiling
 * devices: Trilu, Range, CumSum, and Tile, DepthToSpace and SpaceToDepth as
 * strided copies (one walk over the output, the input's strides for each
 * of its dimensions). */
#include "hal/devops/devops_internal.h"
#include "hal/devops/op_codes.h"

#include "base/error.h"

#include <string.h>

/* ---- Trilu, Range, CumSum ------------------------------------------------------------------- */

bool gs__devops_trilu_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  return c->attrs && c->n_out == 1 && moves(c) && c->in[0].shape.rank >= 2;
}

int gs__devops_run_trilu(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_index_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape;
  uint64_t n = (uint64_t)gs_launch_numel(xs);
  if (n == 0)
    return GS_OK;
  uint64_t rows = (uint64_t)xs->dims[xs->rank - 2], cols = (uint64_t)xs->dims[xs->rank - 1];
  int64_t k = a->k;
  int32_t upper = a->upper;
  size_t es = gs_launch_element_size(c->out[0].dtype);
  return LAUNCH(t, by_size(GS_DK_trilu_b8, es), n, BUF(0, es), BUF(c->n_in, es), VAL(n),
                VAL(rows), VAL(cols), VAL(k), VAL(upper));
}

/* float32, int32 and int64 (float16 and int16 stay on the CPU). */
bool gs__devops_range_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  gs_dtype dt = c->n_out == 1 ? c->out[0].dtype : GS_DT_INVALID;
  return c->attrs && (dt == GS_DT_FLOAT32 || is_int(dt));
}

/* The bounds are the plan's (it plans Range once their values are known),
 * so the inputs are not read here. */
int gs__devops_run_range(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_index_attrs *a = c->attrs;
  gs_dtype dt = c->out[0].dtype;
  uint64_t n = (uint64_t)c->out[0].shape.dims[0];
  if (n == 0)
    return GS_OK;
  if (dt == GS_DT_FLOAT32) { /* accumulated in order: one item */
    float start = (float)a->start, delta = (float)a->delta;
    return LAUNCH(t, GS_DK_range_f32, 1, BUF(c->n_in, 4), VAL(n), VAL(start), VAL(delta));
  }
  int64_t start = (int64_t)a->start, delta = (int64_t)a->delta;
  bool i64 = dt == GS_DT_INT64;
  return LAUNCH(t, i64 ? GS_DK_range_i64 : GS_DK_range_i32, n, BUF(c->n_in, i64 ? 8 : 4), VAL(n),
                VAL(start), VAL(delta));
}

bool gs__devops_cumsum_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  gs_dtype dt = c->in[0].dtype;
  return c->attrs && c->n_out == 1 && c->out[0].dtype == dt && (is_float(dt) || is_int(dt));
}

int gs__devops_run_cumsum(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_index_attrs *a = c->attrs;
  int64_t o, l, i;
  gs_launch_split_axis(&c->in[0].shape, a->axis, &o, &l, &i);
  uint64_t outer = (uint64_t)o, len = (uint64_t)l, inner = (uint64_t)i;
  if (outer * len * inner == 0)
    return GS_OK;
  int32_t exclusive = a->exclusive, reverse = a->reverse;
  gs_dtype dt = c->in[0].dtype;
  size_t es = gs_launch_element_size(dt);
  if (is_int(dt))
    return LAUNCH(t, dt == GS_DT_INT64 ? GS_DK_cumsum_i64 : GS_DK_cumsum_i32, outer * inner,
                  BUF(0, es), BUF(c->n_in, es), VAL(outer), VAL(len), VAL(inner), VAL(exclusive),
                  VAL(reverse));
  int32_t half = dt == GS_DT_FLOAT16;
  return LAUNCH(t, GS_DK_cumsum_fp, outer * inner, BUF(0, es), BUF(c->n_in, es), VAL(outer),
                VAL(len), VAL(inner), VAL(exclusive), VAL(reverse), VAL(half));
}

/* ---- Tile, DepthToSpace, SpaceToDepth --------------------------------------------------------- */

/* A walk's dimension: its length, the input's stride and the output's. */
static void walk_dim(dk_walk *w, int64_t len, int64_t in_stride, int64_t out_stride) {
  w->dims[w->rank] = len;
  w->strides[0][w->rank] = in_stride;
  w->strides[1][w->rank] = out_stride;
  w->rank++;
}

/* Each output dimension of Tile that repeats its input splits in two
 * (repeat, position): the walk's rank is the input's plus the dimensions
 * repeated, 8 at most. */
static int tile_rank(const gs_op_call *c) {
  int rank = c->in[0].shape.rank;
  for (int d = 0; d < c->in[0].shape.rank; d++)
    rank += c->out[0].shape.dims[d] > c->in[0].shape.dims[d];
  return rank;
}

bool gs__devops_rearrange_supports(const gs_devop *op, const gs_op_call *c) {
  if (c->n_out != 1 || !moves(c))
    return false;
  if (strcmp(op->name, "Tile") == 0)
    return tile_rank(c) <= 8;
  return c->attrs && c->in[0].shape.rank == 4;
}

int gs__devops_run_tile(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  if (gs_launch_numel(ys) == 0)
    return GS_OK;
  int64_t xst[GS_MAX_DIMS], yst[GS_MAX_DIMS];
  gs_launch_contiguous_strides(xs, xst);
  gs_launch_contiguous_strides(ys, yst);
  dk_walk w = {0};
  for (int d = 0; d < xs->rank; d++) {
    int64_t repeats = ys->dims[d] / xs->dims[d];
    if (repeats > 1)
      walk_dim(&w, repeats, 0, xs->dims[d] * yst[d]);
    walk_dim(&w, xs->dims[d], xst[d], yst[d]);
  }
  return gs__devops_copy_walk(t, 0, c->n_in, gs_launch_element_size(c->out[0].dtype), &w);
}

/* DepthToSpace: y [N, C', H b, W b] walked as [N, C', H, b1, W, b2], from
 * x [N, C, H, W] whose channel is b1 b C' + b2 C' + c (DCR) or
 * c b b + b1 b + b2 (CRD). */
int gs__devops_run_depth_to_space(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_index_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  if (gs_launch_numel(ys) == 0)
    return GS_OK;
  int64_t b = a->blocksize, C = ys->dims[1], H = xs->dims[2], W = xs->dims[3];
  int64_t xst[GS_MAX_DIMS], yst[GS_MAX_DIMS];
  gs_launch_contiguous_strides(xs, xst);
  gs_launch_contiguous_strides(ys, yst);
  int64_t sc = xst[1];
  dk_walk w = {0};
  walk_dim(&w, xs->dims[0], xst[0], yst[0]);
  walk_dim(&w, C, a->crd ? b * b * sc : sc, yst[1]);
  walk_dim(&w, H, xst[2], b * yst[2]);
  walk_dim(&w, b, a->crd ? b * sc : b * C * sc, yst[2]);
  walk_dim(&w, W, 1, b);
  walk_dim(&w, b, a->crd ? sc : C * sc, 1);
  return gs__devops_copy_walk(t, 0, c->n_in, gs_launch_element_size(c->out[0].dtype), &w);
}

/* SpaceToDepth: y [N, b b C, H', W'] walked as [N, b1, b2, C, H', W'] from
 * x [N, C, H' b, W' b] at (c, h' b + b1, w' b + b2). */
int gs__devops_run_space_to_depth(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_index_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  if (gs_launch_numel(ys) == 0)
    return GS_OK;
  int64_t b = a->blocksize, C = xs->dims[1], H = ys->dims[2], W = ys->dims[3];
  int64_t xst[GS_MAX_DIMS], yst[GS_MAX_DIMS];
  gs_launch_contiguous_strides(xs, xst);
  gs_launch_contiguous_strides(ys, yst);
  dk_walk w = {0};
  walk_dim(&w, xs->dims[0], xst[0], yst[0]);
  walk_dim(&w, b, xst[2], b * C * yst[1]);
  walk_dim(&w, b, 1, C * yst[1]);
  walk_dim(&w, C, xst[1], yst[1]);
  walk_dim(&w, H, b * xst[2], yst[2]);
  walk_dim(&w, W, b, 1);
  return gs__devops_copy_walk(t, 0, c->n_in, gs_launch_element_size(c->out[0].dtype), &w);
}

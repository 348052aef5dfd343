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
  uint64_t outer, len, inner;
  if (!axis_lanes(c, a->axis, &outer, &len, &inner))
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

/* The contiguous strides of input 0 and output 0; false when the output is
 * empty (nothing to copy). */
static bool copy_strides(const gs_op_call *c, int64_t *xst, int64_t *yst) {
  if (gs_launch_numel(&c->out[0].shape) == 0)
    return false;
  gs_launch_contiguous_strides(&c->in[0].shape, xst);
  gs_launch_contiguous_strides(&c->out[0].shape, yst);
  return true;
}

/* y (output 0) from x (input 0) along the walk. */
static int copy_out(const gs_devops_target *t, dk_walk *w) {
  const gs_op_call *c = t->call;
  return gs__devops_copy_walk(t, 0, c->n_in, gs_launch_element_size(c->out[0].dtype), w);
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
  int64_t xst[GS_MAX_DIMS], yst[GS_MAX_DIMS];
  if (!copy_strides(c, xst, yst))
    return GS_OK;
  dk_walk w = {0};
  for (int d = 0; d < xs->rank; d++) {
    int64_t repeats = ys->dims[d] / xs->dims[d];
    if (repeats > 1)
      walk_dim(&w, repeats, 0, xs->dims[d] * yst[d]);
    walk_dim(&w, xs->dims[d], xst[d], yst[d]);
  }
  return copy_out(t, &w);
}

/* DepthToSpace: y [N, C', H b, W b] walked as [N, C', H, b1, W, b2], from
 * x [N, C, H, W] whose channel is b1 b C' + b2 C' + c (DCR) or
 * c b b + b1 b + b2 (CRD). */
int gs__devops_run_depth_to_space(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_index_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  int64_t xst[GS_MAX_DIMS], yst[GS_MAX_DIMS];
  if (!copy_strides(c, xst, yst))
    return GS_OK;
  int64_t b = a->blocksize, C = ys->dims[1], H = xs->dims[2], W = xs->dims[3], sc = xst[1];
  dk_walk w = {0};
  walk_dim(&w, xs->dims[0], xst[0], yst[0]);
  walk_dim(&w, C, a->crd ? b * b * sc : sc, yst[1]);
  walk_dim(&w, H, xst[2], b * yst[2]);
  walk_dim(&w, b, a->crd ? b * sc : b * C * sc, yst[2]);
  walk_dim(&w, W, 1, b);
  walk_dim(&w, b, a->crd ? sc : C * sc, 1);
  return copy_out(t, &w);
}

/* SpaceToDepth: y [N, b b C, H', W'] walked as [N, b1, b2, C, H', W'] from
 * x [N, C, H' b, W' b] at (c, h' b + b1, w' b + b2). */
int gs__devops_run_space_to_depth(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_index_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ys = &c->out[0].shape;
  int64_t xst[GS_MAX_DIMS], yst[GS_MAX_DIMS];
  if (!copy_strides(c, xst, yst))
    return GS_OK;
  int64_t b = a->blocksize, C = xs->dims[1], H = ys->dims[2], W = ys->dims[3];
  dk_walk w = {0};
  walk_dim(&w, xs->dims[0], xst[0], yst[0]);
  walk_dim(&w, b, xst[2], b * C * yst[1]);
  walk_dim(&w, b, 1, C * yst[1]);
  walk_dim(&w, C, xst[1], yst[1]);
  walk_dim(&w, H, b * xst[2], yst[2]);
  walk_dim(&w, W, b, 1);
  return copy_out(t, &w);
}

/* ---- GatherElements, ScatterElements, GatherND, ScatterND, OneHot ------------------------------ */

/* op_kernels.h's elements_geom and nd_geom, field for field. */
typedef struct dk_elements {
  int64_t rank, dims[8], x_strides[8], axis_stride, axis_len;
} dk_elements;
typedef struct dk_nd {
  int64_t q, batches, tuples, slice, batch_stride, dims[8], strides[8];
} dk_nd;
_Static_assert(sizeof(dk_elements) == 152 && sizeof(dk_nd) == 168, "the kernels' structures");

static bool is_index_type(gs_dtype dt) { return dt == GS_DT_INT64 || dt == GS_DT_INT32; }

/* What a scatter's typed kernel takes: an element type it knows, and a
 * reduction (none, add, mul, max, min as gs_scatter_reduction numbers
 * them). */
static bool scatter_type_ok(const gs_op_call *c, int updates) {
  const gs_index_attrs *a = c->attrs;
  return gs__devops_type_code(c->in[0].dtype) >= 0 && c->in[updates].dtype == c->in[0].dtype &&
         a->reduction <= GS_SCATTER_MIN;
}

/* Variant 0 GatherElements (x, indices), 1 ScatterElements (x, indices,
 * updates). An index dim past the data's, other than the axis, is the
 * CPU's to report. */
bool gs__devops_elements_supports(const gs_devop *op, const gs_op_call *c) {
  const gs_index_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *is = &c->in[1].shape;
  if (!a || c->n_out != 1 || !moves(c) || !is_index_type(c->in[1].dtype) || is->rank > 8 ||
      is->rank != xs->rank || (op->variant && !scatter_type_ok(c, 2)))
    return false;
  for (int d = 0; d < is->rank; d++)
    if (d != a->axis && is->dims[d] > xs->dims[d])
      return false;
  return true;
}

static dk_elements elements_geometry(const gs_op_call *c) {
  const gs_index_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *is = &c->in[1].shape;
  int64_t xst[GS_MAX_DIMS];
  gs_launch_contiguous_strides(xs, xst);
  dk_elements g = {.rank = is->rank, .axis_stride = xst[a->axis], .axis_len = xs->dims[a->axis]};
  for (int d = 0; d < is->rank; d++) {
    g.dims[d] = is->dims[d];
    g.x_strides[d] = d == a->axis ? 0 : xst[d];
  }
  return g;
}

int gs__devops_run_gather_elements(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  uint64_t n = (uint64_t)gs_launch_numel(&c->in[1].shape);
  if (n == 0)
    return GS_OK;
  dk_elements g = elements_geometry(c);
  int32_t idx64 = c->in[1].dtype == GS_DT_INT64;
  size_t es = gs_launch_element_size(c->out[0].dtype);
  return LAUNCH(t, by_size(GS_DK_gather_elements_b8, es), n, BUF(0, es), BUF(1, idx64 ? 8 : 4),
                VAL(idx64), BUF(c->n_in, es), VAL(n), VAL(g), BUF(GS_DK_STATUS, 8));
}

/* y = x, then the updates (operand 2) into it. */
static int scatter_launch(const gs_devops_target *t, gs_devk k, uint64_t n, const void *geom,
                          size_t geom_size, bool idx64) {
  const gs_op_call *c = t->call;
  const gs_index_attrs *a = c->attrs;
  size_t es = gs_launch_element_size(c->out[0].dtype);
  size_t bytes = (size_t)gs_launch_numel(&c->out[0].shape) * es;
  int rc = bytes ? t->copy(t->ctx, 0, 0, c->n_in, 0, bytes) : GS_OK;
  if (rc < 0 || n == 0)
    return rc;
  int32_t type = gs__devops_type_code(c->out[0].dtype), flag64 = idx64, reduction = a->reduction;
  uint64_t size = es;
  gs_dk_arg g = {.operand = -1, .size = geom_size, .value = geom};
  if (k == GS_DK_scatter_nd_any)
    return LAUNCH(t, k, n, BUF(1, 8), BUF(2, es), BUF(c->n_in, es), VAL(type), VAL(size), VAL(n),
                  VAL(reduction), g, BUF(GS_DK_STATUS, 8));
  return LAUNCH(t, k, n, BUF(1, idx64 ? 8 : 4), VAL(flag64), BUF(2, es), BUF(c->n_in, es),
                VAL(type), VAL(size), VAL(n), VAL(reduction), g, BUF(GS_DK_STATUS, 8));
}

int gs__devops_run_scatter_elements(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  dk_elements g = elements_geometry(c);
  return scatter_launch(t, GS_DK_scatter_elements_any, (uint64_t)gs_launch_numel(&c->in[1].shape),
                        &g, sizeof g, c->in[1].dtype == GS_DT_INT64);
}

/* Variant 0 GatherND (x, indices), 1 ScatterND (x, indices, updates):
 * int64 index tuples of 1 to 8 values. */
bool gs__devops_nd_supports(const gs_devop *op, const gs_op_call *c) {
  const gs_shape *is = &c->in[1].shape;
  if (!c->attrs || c->n_out != 1 || !moves(c) || c->in[1].dtype != GS_DT_INT64 || is->rank < 1)
    return false;
  int64_t q = is->dims[is->rank - 1];
  return q >= 1 && q <= 8 && (!op->variant || scatter_type_ok(c, 2));
}

static dk_nd nd_geometry(const gs_op_call *c, int batch_dims) {
  const gs_shape *xs = &c->in[0].shape, *is = &c->in[1].shape;
  int64_t xst[GS_MAX_DIMS];
  gs_launch_contiguous_strides(xs, xst);
  dk_nd g = {.q = is->dims[is->rank - 1], .batches = 1, .tuples = 1, .slice = 1,
             .batch_stride = batch_dims ? xst[batch_dims - 1] : 0};
  for (int d = 0; d < batch_dims; d++)
    g.batches *= xs->dims[d];
  for (int d = batch_dims; d < is->rank - 1; d++)
    g.tuples *= is->dims[d];
  for (int d = batch_dims + (int)g.q; d < xs->rank; d++)
    g.slice *= xs->dims[d];
  for (int j = 0; j < g.q; j++) {
    g.dims[j] = xs->dims[batch_dims + j];
    g.strides[j] = xst[batch_dims + j];
  }
  return g;
}

int gs__devops_run_gather_nd(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_index_attrs *a = c->attrs;
  dk_nd g = nd_geometry(c, a->batch_dims);
  uint64_t n = (uint64_t)(g.batches * g.tuples * g.slice);
  if (n == 0)
    return GS_OK;
  size_t es = gs_launch_element_size(c->out[0].dtype);
  return LAUNCH(t, by_size(GS_DK_gather_nd_b8, es), n, BUF(0, es), BUF(1, 8), BUF(c->n_in, es),
                VAL(n), VAL(g), BUF(GS_DK_STATUS, 8));
}

int gs__devops_run_scatter_nd(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  dk_nd g = nd_geometry(t->call, 0);
  return scatter_launch(t, GS_DK_scatter_nd_any, (uint64_t)(g.tuples * g.slice), &g, sizeof g,
                        true);
}

/* OneHot with int32 or int64 indices (float ones stay on the CPU). */
bool gs__devops_one_hot_supports(const gs_devop *op, const gs_op_call *c) {
  (void)op;
  const gs_index_attrs *a = c->attrs;
  return a && a->depth > 0 && c->n_in == 3 && c->n_out == 1 && moves(c) &&
         is_index_type(c->in[0].dtype) && c->in[2].dtype == c->out[0].dtype;
}

int gs__devops_run_one_hot(const gs_devop *op, const gs_devops_target *t) {
  (void)op;
  const gs_op_call *c = t->call;
  const gs_index_attrs *a = c->attrs;
  const gs_shape *is = &c->in[0].shape;
  uint64_t n = (uint64_t)gs_launch_numel(&c->out[0].shape), inner = 1;
  if (n == 0)
    return GS_OK;
  for (int d = a->axis; d < is->rank; d++)
    inner *= (uint64_t)is->dims[d];
  int64_t depth = a->depth;
  int32_t idx64 = c->in[0].dtype == GS_DT_INT64;
  size_t es = gs_launch_element_size(c->out[0].dtype);
  return LAUNCH(t, by_size(GS_DK_one_hot_b8, es), n, BUF(0, idx64 ? 8 : 4), VAL(idx64),
                BUF(2, es), BUF(c->n_in, es), VAL(n), VAL(depth), VAL(inner));
}

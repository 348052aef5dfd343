/* devops_internal.h - what the files of devops share: the walk structure
 * the kernels take, how a launch's arguments are written, and the type
 * tests every op's `supports` makes. */
#ifndef GS_HAL_DEVOPS_INTERNAL_H
#define GS_HAL_DEVOPS_INTERNAL_H

#include "hal/devops/devops.h"

/* op_kernels.h's walk, field for field (longs as int64_t). */
typedef struct dk_walk {
  int64_t rank, dims[8], strides[3][8], base[3];
} dk_walk;

/* A launch's arguments: operand i with elements of es bytes, or a value. */
#define BUF(i, es) ((gs_dk_arg){.operand = (i), .size = (es)})
#define VAL(v) ((gs_dk_arg){.operand = -1, .size = sizeof(v), .value = &(v)})
#define LAUNCH(t, k, n, ...)                                                                     \
  ((t)->launch((t)->ctx, (k), (n), (int)(sizeof((gs_dk_arg[]){__VA_ARGS__}) / sizeof(gs_dk_arg)), \
               (gs_dk_arg[]){__VA_ARGS__}))

static inline bool present(const gs_op_call *c, int i) {
  return i < c->n_in && c->in[i].dtype != GS_DT_INVALID;
}

/* The float types the _fp kernels take: float32 and float16 in the device's
 * program, float64 in its float64 program (gs_devops_needs_f64). */
static inline bool is_float(gs_dtype dt) {
  return dt == GS_DT_FLOAT32 || dt == GS_DT_FLOAT16 || dt == GS_DT_FLOAT64;
}
static inline bool is_int(gs_dtype dt) { return dt == GS_DT_INT64 || dt == GS_DT_INT32; }

static inline bool movable_size(size_t size) {
  return size == 1 || size == 2 || size == 4 || size == 8;
}

/* An output of a type whose elements move as 1, 2, 4 or 8 bytes (strings
 * are records pointing into host memory: never on a device). */
static inline bool moves(const gs_op_call *c) {
  return c->n_out >= 1 && c->out[0].dtype != GS_DT_BYTES &&
         movable_size(gs_launch_element_size(c->out[0].dtype));
}

/* Every present operand of this type. */
static inline bool all_of(const gs_op_call *c, gs_dtype dt) {
  for (int i = 0; i < c->n_in; i++)
    if (c->in[i].dtype != dt && c->in[i].dtype != GS_DT_INVALID)
      return false;
  for (int i = 0; i < c->n_out; i++)
    if (c->out[i].dtype != dt)
      return false;
  return true;
}

/* The _fp kernels' element size where every present operand is of one
 * float type (4, 2 or 8), else 0 (not for them). */
static inline size_t fp_size(const gs_op_call *c) {
  gs_dtype dt = c->in[0].dtype;
  if (!is_float(dt) || !all_of(c, dt))
    return 0;
  return gs_launch_element_size(dt);
}

/* The family's kernel for elements of `size` bytes (1, 2, 4 or 8). */
static inline gs_devk by_size(gs_devk b8, size_t size) {
  return (gs_devk)(b8 + (size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : 3));
}

/* x split around `axis` as [outer, len, inner] (c's input 0); false when
 * it is empty (nothing to launch). */
static inline bool axis_lanes(const gs_op_call *c, int axis, uint64_t *outer, uint64_t *len,
                              uint64_t *inner) {
  int64_t o, l, i;
  gs_launch_split_axis(&c->in[0].shape, axis, &o, &l, &i);
  *outer = (uint64_t)o;
  *len = (uint64_t)l;
  *inner = (uint64_t)i;
  return o * l * i != 0;
}

/* Queues y = x along a walk: x by strides[0] from base[0], y by strides[1]
 * from base[1], over the walk's dims; elements of `size` bytes. Merges
 * what dims it can first. */
int gs__devops_copy_walk(const gs_devops_target *t, int x, int y, size_t size, dk_walk *w);

/* The kernels' code for an element type (op_codes.h's TYPE_), or -1. */
int gs__devops_type_code(gs_dtype dt);

/* devops_signal.c: DFT and STFT through the target's FFT. */
bool gs__devops_dft_supports(const gs_devop *op, const gs_op_call *c);
int gs__devops_run_dft(const gs_devop *op, const gs_devops_target *t);

/* devops_index.c: Trilu, Range, CumSum, Tile, DepthToSpace, SpaceToDepth,
 * GatherElements, ScatterElements, GatherND, ScatterND, OneHot. */
bool gs__devops_trilu_supports(const gs_devop *op, const gs_op_call *c);
int gs__devops_run_trilu(const gs_devop *op, const gs_devops_target *t);
bool gs__devops_range_supports(const gs_devop *op, const gs_op_call *c);
int gs__devops_run_range(const gs_devop *op, const gs_devops_target *t);
bool gs__devops_cumsum_supports(const gs_devop *op, const gs_op_call *c);
int gs__devops_run_cumsum(const gs_devop *op, const gs_devops_target *t);
bool gs__devops_rearrange_supports(const gs_devop *op, const gs_op_call *c);
int gs__devops_run_tile(const gs_devop *op, const gs_devops_target *t);
int gs__devops_run_depth_to_space(const gs_devop *op, const gs_devops_target *t);
int gs__devops_run_space_to_depth(const gs_devop *op, const gs_devops_target *t);
bool gs__devops_elements_supports(const gs_devop *op, const gs_op_call *c);
int gs__devops_run_gather_elements(const gs_devop *op, const gs_devops_target *t);
int gs__devops_run_scatter_elements(const gs_devop *op, const gs_devops_target *t);
bool gs__devops_nd_supports(const gs_devop *op, const gs_op_call *c);
int gs__devops_run_gather_nd(const gs_devop *op, const gs_devops_target *t);
int gs__devops_run_scatter_nd(const gs_devop *op, const gs_devops_target *t);
bool gs__devops_one_hot_supports(const gs_devop *op, const gs_op_call *c);
int gs__devops_run_one_hot(const gs_devop *op, const gs_devops_target *t);

#endif

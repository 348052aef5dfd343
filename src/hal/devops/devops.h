/* devops.h - the engine's ops on a device that runs the kernels of
 * op_kernels.h (the OpenCL and CUDA plugins): which launches each op's
 * kernel runs, and how one is queued, written once. A backend registers
 * every gs_devop under its name, creates the kernels named in
 * gs_devk_names for each device, and gives each launch a gs_devops_target:
 * how to queue one of those kernels, how to copy between operands, and,
 * where it has a BLAS library (CLBlast, cuBLAS), its GEMM (float32, and
 * float16 or float64 where it has them), which MatMul, Gemm and Conv then use.
 *
 * The kernels are built twice (gs_devops_needs_f64): the kernels named _f32
 * and _fp compute in float32 in the one build and in float64 in the other.
 *
 * A launch's operands are numbered as the plan passes them: the node's
 * inputs, then its outputs. */
#ifndef GS_HAL_DEVOPS_H
#define GS_HAL_DEVOPS_H

#include "hal/op/op_launch.h"

#define GS_DEVOPS_KERNELS(X)                                                                     \
  X(unary_f32) X(unary_f16) X(clip_f32) X(clip_f16) X(binary_f32) X(binary_f16)                 \
  X(compare_f32) X(compare_f16) X(unary_i64) X(binary_i64) X(compare_i64) X(unary_i32)          \
  X(binary_i32) X(compare_i32) X(reduce_i64) X(reduce_i32) X(divide_i64) X(divide_i32)          \
  X(gather_b8) X(gather_b16) X(gather_b32) X(gather_b64)                                         \
  X(not_b8) X(cast_any)                                                                          \
  X(copy_strided_b8) X(copy_strided_b16) X(copy_strided_b32) X(copy_strided_b64)                 \
  X(fill_b8) X(fill_b16) X(fill_b32) X(fill_b64)                                                 \
  X(pad_b8) X(pad_b16) X(pad_b32) X(pad_b64)                                                     \
  X(where_b8) X(where_b16) X(where_b32) X(where_b64)                                             \
  X(reduce_fp) X(argmax_fp) X(topk_fp) X(softmax_fp) X(layernorm_fp) X(batchnorm_fp)            \
  X(conv_fp) X(conv_transpose_fp) X(pool_fp) X(resize_fp) X(matmul_fp)         \
  X(im2col_fp) X(conv_out_fp) X(softmax_rows_fp) X(layernorm_rows_fp)    \
  X(reduce_rows_fp) X(binary_u8) X(compare_u8) X(classify_fp)                                  \
  X(trilu_b8) X(trilu_b16) X(trilu_b32) X(trilu_b64) X(range_i64) X(range_i32) X(range_f32)     \
  X(cumsum_i64) X(cumsum_i32) X(cumsum_fp) X(groupnorm_fp) X(groupnorm_rows_fp)                 \
  X(gather_elements_b8) X(gather_elements_b16) X(gather_elements_b32) X(gather_elements_b64)     \
  X(gather_nd_b8) X(gather_nd_b16) X(gather_nd_b32) X(gather_nd_b64)                             \
  X(one_hot_b8) X(one_hot_b16) X(one_hot_b32) X(one_hot_b64)                                     \
  X(scatter_elements_any) X(scatter_nd_any) X(lrn_fp) X(hardmax_fp) X(dft_pack_fp) X(dft_unpack_fp) \
  X(image_taps_u8)

typedef enum {
#define GS_DK_ENUM(name) GS_DK_##name,
  GS_DEVOPS_KERNELS(GS_DK_ENUM)
#undef GS_DK_ENUM
  GS_DK_COUNT
} gs_devk;

/* The *_rows kernels run as work-groups of GS_DK_GROUP items (the launch's
 * n is a multiple of it; CUDA's blocks are always that size), each group
 * taking rows in turn. A backend that cannot run groups that large
 * answers GS_ENOTSUP, and devops uses the kernel of an item per row. */
#define GS_DK_GROUP 256
static inline bool gs_devk_grouped(gs_devk k) {
  return k == GS_DK_softmax_rows_fp || k == GS_DK_layernorm_rows_fp || k == GS_DK_reduce_rows_fp ||
         k == GS_DK_groupnorm_rows_fp;
}

/* The kernels' function names, by gs_devk. */
extern const char *const gs_devk_names[GS_DK_COUNT];

/* One argument of a kernel: a value, or an operand (operand >= 0), which
 * the backend passes as two arguments: its buffer, and its offset counted
 * in elements of `size` bytes. GS_DK_STATUS is the stream's status buffer,
 * passed with the launch's tag in place of an offset (see below). */
#define GS_DK_STATUS (-2)
/* The stream's scratch buffer, of the size last asked with `scratch`. */
#define GS_DK_SCRATCH (-3)
typedef struct gs_dk_arg {
  int operand; /* -1: a value */
  size_t size; /* a value's bytes; an operand's element size */
  const void *value;
} gs_dk_arg;

/* Kernels that can fail on their data (Gather's index out of range, an
 * integer division by zero) write the stream's status buffer (four int64:
 * code, value, bound, tag) and carry on. The backend keeps one per stream,
 * zeroed, gives each such launch a tag that names its node, reads the
 * buffer when it next waits for the device, and fails the stream with
 * gs_devops_status_error (then zeroes the buffer). */
typedef struct gs_devops_status {
  int64_t code, value, bound, tag;
} gs_devops_status;
/* node: "name (op)", as the CPU's kernels name a node in their errors. */
int gs_devops_status_error(const gs_devops_status *st, const char *node);

/* Which node each launch that can fail came from, per stream: tags count
 * the launches; the names of the last GS_DEVOPS_TAGS are kept. */
#define GS_DEVOPS_TAGS 64
typedef struct gs_devops_tags {
  bool armed;    /* such a launch was queued since the status was last read */
  uint64_t next; /* the next launch's tag */
  char node[GS_DEVOPS_TAGS][96]; /* "name (op)" */
} gs_devops_tags;

/* The tag of a launch of node `c`; arms the status. */
uint64_t gs_devops_tag(gs_devops_tags *tags, const gs_op_call *c);
/* After reading the status: the failure as a GS_E code naming its node (GS_OK
 * when the status holds none); disarms. */
int gs_devops_tags_error(gs_devops_tags *tags, const gs_devops_status *st);

/* A GEMM for a backend's BLAS (gs_devops_target.gemm): float32, or with
 * half set float16 operands (accumulated in float32); a backend without a
 * float16 GEMM answers GS_ENOTSUP and devops runs its own kernel. */
typedef struct gs_devops_gemm {
  bool half;
  bool f64; /* float64 operands: a backend without a float64 GEMM answers GS_ENOTSUP */
  bool trans_a, trans_b;
  int64_t m, n, k, batch;
  float alpha, beta;
  int a, b, c;                         /* operands */
  int64_t a_off, b_off, c_off;         /* elements */
  int64_t lda, ldb, ldc;
  int64_t stride_a, stride_b, stride_c; /* between batches, elements */
} gs_devops_gemm;

/* A batched FFT for a backend's FFT library (gs_devops_target.fft): `batch`
 * transforms of n complex values each, in place in the stream's scratch
 * buffer from its start, a value as (real, imaginary), float32 or with f64
 * set float64; the forward transform's exponent is negative, neither
 * direction is scaled. */
typedef struct gs_devops_fft {
  int64_t n, batch;
  bool inverse, f64;
} gs_devops_fft;

/* What a backend gives one launch. */
typedef struct gs_devops_target {
  void *ctx;
  const gs_op_call *call;
  /* Queues kernel k over n items (the kernels stride over any count). */
  int (*launch)(void *ctx, gs_devk k, uint64_t n, int nargs, const gs_dk_arg *args);
  /* Copies `bytes` from operand src (at byte src_off) to operand dst, in
   * queue order; nothing when they are the same bytes. */
  int (*copy)(void *ctx, int src, size_t src_off, int dst, size_t dst_off, size_t bytes);
  /* Optional (NULL where the backend has no BLAS library): GEMM in queue
   * order, row-major, `batch` times with the given element strides:
   * c = alpha op(a) op(b) + beta c, with a, b, c operands (or
   * GS_DK_SCRATCH) and offsets in elements from each operand's start. */
  int (*gemm)(void *ctx, const struct gs_devops_gemm *g);
  /* Optional: the FFT, in queue order (see gs_devops_fft). */
  int (*fft)(void *ctx, const struct gs_devops_fft *f);
  /* Optional: makes the stream's scratch buffer at least `bytes` (never 0) long (its
   * contents are reused in stream order by later launches). */
  int (*scratch)(void *ctx, size_t bytes);
  /* Whether long rows (Softmax, LayerNormalization) are reduced by a
   * work-group each (GPUs: the *_rows kernels) rather than an item each
   * (CPU devices, where one item per row is faster). */
  bool row_groups;
} gs_devops_target;


typedef struct gs_devop {
  const char *name; /* the ONNX op */
  int variant;
  /* Whether this launch (types, shapes) runs on the device. */
  bool (*supports)(const struct gs_devop *op, const gs_op_call *c);
  int (*run)(const struct gs_devop *op, const gs_devops_target *t);
} gs_devop;

/* Whether op needs the target's fft (DFT, STFT): a backend without an FFT
 * library does not register it, and the plan runs it on the CPU. */
bool gs_devops_needs_fft(const gs_devop *op);

/* Whether a launch of op's call takes its kernels from the device's float64
 * program (op_kernels.h built with GS_REAL_F64 defined): its data or result
 * is float64 and the op computes on it (ops that only move elements do not).
 * A backend without that program for the device does not run the call (the
 * plan runs it on the CPU). */
bool gs_devops_needs_f64(const gs_devop *op, const gs_op_call *c);

/* How many ops devops may register: a backend keeps an array of this many. */
#define GS_DEVOPS_MAX 192

/* The ops with device kernels, `*count` of them. */
const gs_devop *gs_devops(size_t *count);

#endif

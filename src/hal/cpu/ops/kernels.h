/* kernels.h - what the CPU backend's op kernels share: element loads and
 * stores for every type, the broadcasting iterator, and the registration
 * of each family's kernels in the CPU backend's kernel table. */
#ifndef GS_HAL_CPU_OPS_KERNELS_H
#define GS_HAL_CPU_OPS_KERNELS_H

#include "hal/op/op_call.h"
#include "hal/op/op_attrs.h"
#include "hal/cpu/cpu_kernel.h"
#include "hal/hal_impl.h"

#include <math.h>
#include <string.h>

/* The node's call, as the plan passes it: a pointer in the parameter block. */
static inline const gs_op_call *gs_kcall(const gs_cpu_kernel_call *k) {
  const gs_op_call *c;
  memcpy(&c, k->params, sizeof c);
  return c;
}

/* acc + v, Neumaier's way: what the addition rounds off goes into *comp,
 * which the caller adds back (gs_sum_total). A running double sum of n
 * terms then errs by about one rounding instead of up to n: float64's
 * CumSum and Einsum need it, float32's gain little. */
static inline double gs_sum_step(double acc, double v, double *comp) {
  double t = acc + v;
  if (isfinite(t)) /* past an infinity, inf - inf would make the correction NaN */
    *comp += fabs(acc) >= fabs(v) ? (acc - t) + v : (v - t) + acc;
  return t;
}

static inline double gs_sum_total(double acc, double comp) {
  return isfinite(acc) ? acc + comp : acc;
}

/* ---- element access by type (the slow, general paths) ------------------------- */

static inline double gs_ld(gs_dtype dt, const void *p, int64_t i) {
  return gs_elem_as_double(dt, p, i);
}

static inline int64_t gs_ldi(gs_dtype dt, const void *p, int64_t i) {
  switch (dt) {
  case GS_DT_INT64: return ((const int64_t *)p)[i];
  case GS_DT_INT32: return ((const int32_t *)p)[i];
  case GS_DT_INT16: return ((const int16_t *)p)[i];
  case GS_DT_INT8: return ((const int8_t *)p)[i];
  case GS_DT_UINT8:
  case GS_DT_BOOL: return ((const uint8_t *)p)[i];
  case GS_DT_UINT16: return ((const uint16_t *)p)[i];
  case GS_DT_UINT32: return ((const uint32_t *)p)[i];
  case GS_DT_UINT64: return (int64_t)((const uint64_t *)p)[i]; /* the bits: see gs_is_u64 */
  default: return (int64_t)gs_ld(dt, p, i);
  }
}

/* uint64 travels as int64 bits through the integer paths: wrapping
 * arithmetic is the same, but order, division and the conversion to a
 * float must read it unsigned. */
static inline bool gs_is_u64(gs_dtype dt) { return dt == GS_DT_UINT64; }

/* Converts a double to an integer type without undefined behaviour: NaN is
 * 0, values past the type's range saturate. */
static inline int64_t gs_sat_i64(double v, double lo, double hi) {
  if (v != v)
    return 0;
  if (v <= lo)
    return (int64_t)lo;
  if (v >= hi)
    return v >= 9.2233720368547748e18 ? INT64_MAX : (int64_t)hi;
  return (int64_t)v;
}

static inline void gs_st(gs_dtype dt, void *p, int64_t i, double v) {
  switch (dt) {
  case GS_DT_FLOAT32: ((float *)p)[i] = (float)v; break;
  case GS_DT_FLOAT64: ((double *)p)[i] = v; break;
  case GS_DT_FLOAT16: ((uint16_t *)p)[i] = gs_f32_to_f16((float)v); break;
  case GS_DT_BFLOAT16: ((uint16_t *)p)[i] = gs_f32_to_bf16((float)v); break;
  case GS_DT_INT64: ((int64_t *)p)[i] = gs_sat_i64(v, -9.2233720368547758e18, 9.2233720368547758e18); break;
  case GS_DT_INT32: ((int32_t *)p)[i] = (int32_t)gs_sat_i64(v, -2147483648.0, 2147483647.0); break;
  case GS_DT_INT16: ((int16_t *)p)[i] = (int16_t)gs_sat_i64(v, -32768.0, 32767.0); break;
  case GS_DT_INT8: ((int8_t *)p)[i] = (int8_t)gs_sat_i64(v, -128.0, 127.0); break;
  case GS_DT_UINT8: ((uint8_t *)p)[i] = (uint8_t)gs_sat_i64(v, 0.0, 255.0); break;
  case GS_DT_UINT16: ((uint16_t *)p)[i] = (uint16_t)gs_sat_i64(v, 0.0, 65535.0); break;
  case GS_DT_UINT32: ((uint32_t *)p)[i] = (uint32_t)gs_sat_i64(v, 0.0, 4294967295.0); break;
  case GS_DT_UINT64:
    ((uint64_t *)p)[i] = v != v || v <= 0 ? 0 : v >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)v;
    break;
  case GS_DT_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  default: break;
  }
}

/* Integer stores wrap (two's complement), as integer arithmetic in ONNX runtimes does. */
static inline void gs_sti(gs_dtype dt, void *p, int64_t i, int64_t v) {
  switch (dt) {
  case GS_DT_INT64: ((int64_t *)p)[i] = v; break;
  case GS_DT_INT32: ((int32_t *)p)[i] = (int32_t)(uint32_t)(uint64_t)v; break;
  case GS_DT_INT16: ((int16_t *)p)[i] = (int16_t)(uint16_t)(uint64_t)v; break;
  case GS_DT_INT8: ((int8_t *)p)[i] = (int8_t)(uint8_t)(uint64_t)v; break;
  case GS_DT_UINT8: ((uint8_t *)p)[i] = (uint8_t)(uint64_t)v; break;
  case GS_DT_UINT16: ((uint16_t *)p)[i] = (uint16_t)(uint64_t)v; break;
  case GS_DT_UINT32: ((uint32_t *)p)[i] = (uint32_t)(uint64_t)v; break;
  case GS_DT_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
  case GS_DT_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  default: gs_st(dt, p, i, (double)v); break;
  }
}

static inline bool gs_is_int(gs_dtype dt) { return !gs_dtype_is_float(dt); }

/* The hot float32 loops are compiled for the baseline x86-64 and for the
 * AVX2 and AVX-512 levels; the loader picks the best the CPU has (GNU ifunc).
 * One binary stays portable while wide vectors are used where they exist. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define GS_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GS_VECTOR_CLONES
#endif

/* ---- broadcasting ---------------------------------------------------------------- */

#define GS_BCAST_MAX_IN 3

/* Iterates an output shape in rows of its last (merged) dimension, with the
 * matching element offsets of up to three broadcast inputs. */
typedef struct gs_bcast {
  int n_in, rank;
  int64_t dims[GS_MAX_DIMS];
  int64_t strides[GS_BCAST_MAX_IN][GS_MAX_DIMS]; /* 0 where an input broadcasts */
  int64_t rows, row_len;
} gs_bcast;

void gs_bcast_init(gs_bcast *b, const gs_shape *out, int n_in, const gs_shape *const *in);
/* Offsets of row `row` (0 <= row < rows) of the output and of each input. */
void gs_bcast_row(const gs_bcast *b, int64_t row, int64_t *out_off, int64_t *in_off);

/* A family's kernels, as a table registered in one go. */
typedef struct gs_cpu_kernel_entry {
  const char *name;
  gs_cpu_kernel kernel;
} gs_cpu_kernel_entry;
#define GS_CPU_KERNEL(name, func) {name, {.fn = func}}
int gs__cpu_register_table(gs_backend_t *be, const gs_cpu_kernel_entry *table, size_t count);

/* Row-major C = alpha op(A) op(B) + beta C through oneDNN (k_nn.c), whose
 * GEMM runs on the calling thread's OpenMP team (the stream's threads) as
 * its convolutions do: one thread pool for both. Inside a parallel region
 * it runs on the calling thread alone. */
void gs__cpu_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                   int64_t ldc);

/* Elements [lo, hi) of y through an activation fused into its op
 * (plan_fuse.c; GS_ACT_NONE leaves them), on the calling thread (k_nn.c). */
void gs__cpu_act_range(gs_activation act, float min, float max, float *y, int64_t lo, int64_t hi);

/* Blocks [lo, hi) of x in oneDNN's channel-blocked layout (width 8 or
 * 16), each `size` positions of `width` channels: the channels' means, to
 * y[b * width + l] (k_nn.c; GlobalAveragePool and SqueezeExcite). */
void gs__cpu_blocked_mean(const float *x, float *y, int width, int64_t size, int64_t lo,
                          int64_t hi);

/* dst (dense, of dst_shape) = src (of src_shape) broadcast to it, elements
 * of esz bytes (k_elementwise.c): Expand, and Gemm's C. */
void gs__cpu_broadcast_copy(const gs_shape *src_shape, const void *src, const gs_shape *dst_shape,
                            void *dst, size_t esz);

/* Registration of each family's CPU kernels, and of them all (called when
 * the built-in CPU backend starts). */
int gs__cpu_register_ops(gs_backend_t *be);
int gs__cpu_register_elementwise(gs_backend_t *be);
int gs__cpu_register_nn(gs_backend_t *be);
int gs__cpu_register_reduce(gs_backend_t *be);
int gs__cpu_register_shape(gs_backend_t *be);
int gs__cpu_register_index(gs_backend_t *be);
int gs__cpu_register_loss(gs_backend_t *be);
int gs__cpu_register_normalize(gs_backend_t *be);
int gs__cpu_register_signal(gs_backend_t *be);
int gs__cpu_register_quant(gs_backend_t *be);
int gs__cpu_register_qgemm(gs_backend_t *be);
int gs__cpu_register_qlinear(gs_backend_t *be);
int gs__cpu_register_einsum(gs_backend_t *be);
int gs__cpu_register_linalg(gs_backend_t *be);
int gs__cpu_register_rnn(gs_backend_t *be);
int gs__cpu_register_detect(gs_backend_t *be);
int gs__cpu_register_attention(gs_backend_t *be);
int gs__cpu_register_squeeze(gs_backend_t *be);

#endif

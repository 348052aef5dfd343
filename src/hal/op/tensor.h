/* tensor.h - element types, shapes, and their conversions: the vocabulary
 * shared by the ONNX importer, the ops, the kernels and the API layer. */
#ifndef GS_HAL_OP_TENSOR_H
#define GS_HAL_OP_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum gs_dtype {
  GS_DT_INVALID = 0,
  GS_DT_BOOL,
  GS_DT_UINT8,
  GS_DT_INT8,
  GS_DT_INT16,
  GS_DT_INT32,
  GS_DT_INT64,
  GS_DT_FLOAT16,
  GS_DT_BFLOAT16,
  GS_DT_FLOAT32,
  GS_DT_FLOAT64,
  GS_DT_BYTES, /* variable-length strings, held as gs_bytes_ref records */
  GS_DT_UINT16,
  GS_DT_UINT32,
  GS_DT_UINT64,
  GS_DT_COUNT
} gs_dtype;

/* A BYTES (ONNX string) element inside the engine: where its bytes lie in
 * host memory, and how many. A tensor of strings is an array of these; the
 * bytes themselves stay where the caller put them (a request's body, its
 * decoded JSON) and must outlive the run. Only ops that move elements
 * without looking at them take such tensors (gs_op_moves_bytes), so plans
 * treat a record as 16 opaque bytes on any device. */
typedef struct gs_bytes_ref {
  const char *data;
  uint64_t len;
} gs_bytes_ref;

/* Bytes per element: 0 for INVALID; sizeof(gs_bytes_ref) for BYTES. */
size_t gs_dtype_size(gs_dtype dt);
/* "float32", "int64", ...; "invalid" for anything else. */
const char *gs_dtype_name(gs_dtype dt);
/* By name as gs_dtype_name() writes it; GS_DT_INVALID if unknown. */
gs_dtype gs_dtype_from_name(const char *name);
/* The name ONNX gives TensorProto.DataType `onnx_type` ("FLOAT8E4M3FN",
 * "UINT16"), for messages about types gpusrv lacks; never NULL. */
const char *gs_onnx_type_name(int onnx_type);
/* ONNX TensorProto.DataType numbers; GS_DT_INVALID / 0 when there is none. */
gs_dtype gs_dtype_from_onnx(int onnx_type);
int gs_dtype_to_onnx(gs_dtype dt);
bool gs_dtype_is_float(gs_dtype dt); /* float16, bfloat16, float32, float64 */

/* IEEE half and bfloat16 <-> float, round to nearest even. */
float gs_f16_to_f32(uint16_t h);
uint16_t gs_f32_to_f16(float f);
float gs_bf16_to_f32(uint16_t b);
uint16_t gs_f32_to_bf16(float f);

/* Element i of numeric or BOOL data of type dt, as a double (0 for other
 * types): the general path, for code that reads values of any type. */
static inline double gs_elem_as_double(gs_dtype dt, const void *p, int64_t i) {
  switch (dt) {
  case GS_DT_FLOAT32: return ((const float *)p)[i];
  case GS_DT_FLOAT64: return ((const double *)p)[i];
  case GS_DT_FLOAT16: return gs_f16_to_f32(((const uint16_t *)p)[i]);
  case GS_DT_BFLOAT16: return gs_bf16_to_f32(((const uint16_t *)p)[i]);
  case GS_DT_INT64: return (double)((const int64_t *)p)[i];
  case GS_DT_INT32: return ((const int32_t *)p)[i];
  case GS_DT_INT16: return ((const int16_t *)p)[i];
  case GS_DT_INT8: return ((const int8_t *)p)[i];
  case GS_DT_UINT8:
  case GS_DT_BOOL: return ((const uint8_t *)p)[i];
  case GS_DT_UINT16: return ((const uint16_t *)p)[i];
  case GS_DT_UINT32: return ((const uint32_t *)p)[i];
  case GS_DT_UINT64: return (double)((const uint64_t *)p)[i];
  default: return 0;
  }
}

#define GS_MAX_DIMS 8

typedef struct gs_shape {
  int rank;
  int64_t dims[GS_MAX_DIMS];
} gs_shape;

/* Number of elements (1 for rank 0). Returns -1 if a dim is negative or the
 * product overflows int64 - callers reject such shapes. */
int64_t gs_shape_numel(const gs_shape *s);
bool gs_shape_equal(const gs_shape *a, const gs_shape *b);
/* "[2, 3, 4]" into buf; returns buf. */
const char *gs_shape_str(const gs_shape *s, char *buf, size_t cap);
/* NumPy broadcasting of a and b into out. Returns 0 or GS_EINVAL (detail). */
int gs_shape_broadcast(const gs_shape *a, const gs_shape *b, gs_shape *out);
/* Normalises a possibly negative axis for `rank` (axis in [-rank, rank)). */
int gs_axis_normalize(int64_t axis, int rank, int *out);

#endif

/* tensor.c - element types, shapes and half-precision conversions. */
#include "hal/op/tensor.h"

#include "base/error.h"

#include <stdio.h>
#include <string.h>

static const struct {
  const char *name;
  size_t size;
  int onnx;
} dtypes[GS_DT_COUNT] = {
    [GS_DT_INVALID] = {"invalid", 0, 0},   [GS_DT_BOOL] = {"bool", 1, 9},
    [GS_DT_UINT8] = {"uint8", 1, 2},       [GS_DT_INT8] = {"int8", 1, 3},
    [GS_DT_INT16] = {"int16", 2, 5},       [GS_DT_INT32] = {"int32", 4, 6},
    [GS_DT_INT64] = {"int64", 8, 7},       [GS_DT_FLOAT16] = {"float16", 2, 10},
    [GS_DT_BFLOAT16] = {"bfloat16", 2, 16}, [GS_DT_FLOAT32] = {"float32", 4, 1},
    [GS_DT_FLOAT64] = {"float64", 8, 11},  [GS_DT_BYTES] = {"bytes", sizeof(gs_bytes_ref), 8},
    [GS_DT_UINT16] = {"uint16", 2, 4},     [GS_DT_UINT32] = {"uint32", 4, 12},
    [GS_DT_UINT64] = {"uint64", 8, 13},
};

size_t gs_dtype_size(gs_dtype dt) { return (unsigned)dt < GS_DT_COUNT ? dtypes[dt].size : 0; }

const char *gs_dtype_name(gs_dtype dt) {
  return (unsigned)dt < GS_DT_COUNT ? dtypes[dt].name : "invalid";
}

gs_dtype gs_dtype_from_name(const char *name) {
  for (int i = 1; i < GS_DT_COUNT; i++)
    if (strcmp(dtypes[i].name, name) == 0)
      return (gs_dtype)i;
  return GS_DT_INVALID;
}

gs_dtype gs_dtype_from_onnx(int onnx_type) {
  for (int i = 1; i < GS_DT_COUNT; i++)
    if (dtypes[i].onnx == onnx_type)
      return (gs_dtype)i;
  return GS_DT_INVALID;
}

const char *gs_onnx_type_name(int onnx_type) {
  /* TensorProto.DataType as onnx.proto names it (onnx 1.20). */
  static const char *const names[] = {
      [0] = "UNDEFINED", [1] = "FLOAT", [2] = "UINT8", [3] = "INT8", [4] = "UINT16",
      [5] = "INT16", [6] = "INT32", [7] = "INT64", [8] = "STRING", [9] = "BOOL",
      [10] = "FLOAT16", [11] = "DOUBLE", [12] = "UINT32", [13] = "UINT64",
      [14] = "COMPLEX64", [15] = "COMPLEX128", [16] = "BFLOAT16", [17] = "FLOAT8E4M3FN",
      [18] = "FLOAT8E4M3FNUZ", [19] = "FLOAT8E5M2", [20] = "FLOAT8E5M2FNUZ", [21] = "UINT4",
      [22] = "INT4", [23] = "FLOAT4E2M1", [24] = "FLOAT8E8M0", [25] = "UINT2", [26] = "INT2"};
  if (onnx_type >= 0 && onnx_type < (int)(sizeof names / sizeof names[0]) && names[onnx_type])
    return names[onnx_type];
  return "an unknown type";
}

int gs_dtype_to_onnx(gs_dtype dt) { return (unsigned)dt < GS_DT_COUNT ? dtypes[dt].onnx : 0; }

bool gs_dtype_is_float(gs_dtype dt) {
  return dt == GS_DT_FLOAT16 || dt == GS_DT_BFLOAT16 || dt == GS_DT_FLOAT32 || dt == GS_DT_FLOAT64;
}

/* ---- half precision ---------------------------------------------------------- */

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float gs_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) /* inf or nan */
    return bits_f32(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0)
      return bits_f32(sign);
    /* subnormal: value = mant * 2^-24 */
    float v = (float)mant * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t gs_f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) /* inf or nan (keep nan quiet) */
    return sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0);
  if (abs >= 0x477ff000u) /* rounds past the largest half: inf */
    return sign | 0x7c00;
  if (abs < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
    float a = bits_f32(abs);
    /* Adding 0.5 (2^-1) aligns the subnormal grid with float's: the FPU rounds. */
    uint32_t r = f32_bits(a + 0.5f) - f32_bits(0.5f);
    return sign | (uint16_t)r;
  }
  uint32_t mant_odd = (abs >> 13) & 1;
  abs += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round to even */
  return sign | (uint16_t)(abs >> 13);
}

float gs_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

uint16_t gs_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) /* nan: keep it a (quiet) nan */
    return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

/* ---- shapes ---------------------------------------------------------------------- */

int64_t gs_shape_numel(const gs_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) {
    if (s->dims[i] < 0)
      return -1;
    if (s->dims[i] != 0 && n > INT64_MAX / s->dims[i])
      return -1;
    n *= s->dims[i];
  }
  return n;
}

bool gs_shape_equal(const gs_shape *a, const gs_shape *b) {
  if (a->rank != b->rank)
    return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i])
      return false;
  return true;
}

const char *gs_shape_str(const gs_shape *s, char *buf, size_t cap) {
  size_t n = 0;
  n += (size_t)snprintf(buf + n, cap - n, "[");
  for (int i = 0; i < s->rank && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)s->dims[i]);
  if (n < cap)
    snprintf(buf + n, cap - n, "]");
  return buf;
}

int gs_shape_broadcast(const gs_shape *a, const gs_shape *b, gs_shape *out) {
  gs_shape r = {.rank = a->rank > b->rank ? a->rank : b->rank};
  for (int i = 0; i < r.rank; i++) {
    int ia = a->rank - r.rank + i, ib = b->rank - r.rank + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      char sa[128], sb[128];
      return gs_error(GS_EINVAL, "shapes %s and %s do not broadcast (dimension %d: %lld vs %lld)",
                      gs_shape_str(a, sa, sizeof sa), gs_shape_str(b, sb, sizeof sb), i,
                      (long long)da, (long long)db);
    }
    r.dims[i] = da == 1 ? db : da;
  }
  *out = r;
  return GS_OK;
}

int gs_axis_normalize(int64_t axis, int rank, int *out) {
  if (axis < -rank || axis >= rank || (rank == 0 && axis != 0))
    return gs_error(GS_EINVAL, "axis %lld is out of range for rank %d", (long long)axis, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return GS_OK;
}

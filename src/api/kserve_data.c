/* kserve_data.c - KServe v2 tensor data in the forms both ends of the
 * protocol read and write: datatype names, numbers as JSON, and BYTES
 * elements in the binary extension's form and as JSON strings. Shared by
 * the server (kserve.c) and `gpusrv infer`. */
#include "api/kserve_data.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  gs_dtype dtype;
  const char *name;   /* KServe v2 datatype */
  const char *triton; /* model configuration data_type */
} types[] = {
    {GS_DT_BOOL, "BOOL", "TYPE_BOOL"},     {GS_DT_UINT8, "UINT8", "TYPE_UINT8"},
    {GS_DT_INT8, "INT8", "TYPE_INT8"},     {GS_DT_INT16, "INT16", "TYPE_INT16"},
    {GS_DT_INT32, "INT32", "TYPE_INT32"},  {GS_DT_INT64, "INT64", "TYPE_INT64"},
    {GS_DT_FLOAT16, "FP16", "TYPE_FP16"},  {GS_DT_BFLOAT16, "BF16", "TYPE_BF16"},
    {GS_DT_FLOAT32, "FP32", "TYPE_FP32"},  {GS_DT_FLOAT64, "FP64", "TYPE_FP64"},
    {GS_DT_BYTES, "BYTES", "TYPE_STRING"}, {GS_DT_UINT16, "UINT16", "TYPE_UINT16"},
    {GS_DT_UINT32, "UINT32", "TYPE_UINT32"}, {GS_DT_UINT64, "UINT64", "TYPE_UINT64"},
};

const char *gs_kserve_dtype_name(gs_dtype dt) {
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (types[i].dtype == dt)
      return types[i].name;
  return "INVALID";
}

const char *gs_kserve_triton_name(gs_dtype dt) {
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (types[i].dtype == dt)
      return types[i].triton;
  return "TYPE_INVALID";
}

gs_dtype gs_kserve_dtype_from_name(const char *name) {
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (strcmp(types[i].name, name) == 0)
      return types[i].dtype;
  return GS_DT_INVALID;
}

json_t *gs_kserve_data_json(gs_dtype dt, const void *p, int64_t n) {
  json_t *a = json_array();
  for (int64_t i = 0; a && i < n; i++) {
    json_t *v = NULL;
    double f = 0;
    switch (dt) {
    case GS_DT_FLOAT32: f = ((const float *)p)[i]; break;
    case GS_DT_FLOAT64: f = ((const double *)p)[i]; break;
    case GS_DT_FLOAT16: f = gs_f16_to_f32(((const uint16_t *)p)[i]); break;
    case GS_DT_BFLOAT16: f = gs_bf16_to_f32(((const uint16_t *)p)[i]); break;
    case GS_DT_INT64: v = json_integer(((const int64_t *)p)[i]); break;
    case GS_DT_INT32: v = json_integer(((const int32_t *)p)[i]); break;
    case GS_DT_INT16: v = json_integer(((const int16_t *)p)[i]); break;
    case GS_DT_INT8: v = json_integer(((const int8_t *)p)[i]); break;
    case GS_DT_UINT8: v = json_integer(((const uint8_t *)p)[i]); break;
    case GS_DT_UINT16: v = json_integer(((const uint16_t *)p)[i]); break;
    case GS_DT_UINT32: v = json_integer(((const uint32_t *)p)[i]); break;
    case GS_DT_UINT64: { /* past int64, a JSON number that is no integer of jansson's */
      uint64_t u = ((const uint64_t *)p)[i];
      v = u <= INT64_MAX ? json_integer((json_int_t)u) : json_real((double)u);
      break;
    }
    case GS_DT_BOOL: v = json_boolean(((const uint8_t *)p)[i]); break;
    default: break;
    }
    if (gs_dtype_is_float(dt))
      v = json_real(f); /* NULL for NaN and the infinities, which JSON has no number for */
    if (!v || json_array_append_new(a, v) < 0) {
      json_decref(a);
      return NULL;
    }
  }
  return a;
}

/* Binary BYTES as the binary extension sends them: each element a 4-byte
 * little-endian length and that many bytes, exactly `size` bytes for
 * `count` elements. The records point into `data`, which must outlive
 * them. */
int gs_kserve_strings_from_binary(const char *data, size_t size, int64_t count, void **block,
                                  const char *name, char *why, size_t why_len) {
  if (count < 0 || (uint64_t)count > size / 4) { /* each string has its 4-byte length */
    snprintf(why, why_len, "input '%s': %zu bytes of binary data cannot hold %lld strings", name,
             size, (long long)count);
    return GS_EINVAL;
  }
  gs_bytes_ref *recs = malloc((size_t)count * sizeof *recs + 1);
  if (!recs) {
    snprintf(why, why_len, "out of memory for input '%s'", name);
    return GS_ENOMEM;
  }
  size_t at = 0;
  for (int64_t i = 0; i < count; i++) {
    if (size - at < 4) {
      snprintf(why, why_len, "input '%s': its binary data end before the length of string %lld "
               "of %lld", name, (long long)i, (long long)count);
      free(recs);
      return GS_EINVAL;
    }
    const unsigned char *p = (const unsigned char *)data + at;
    uint32_t len = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    at += 4;
    if (size - at < len) {
      snprintf(why, why_len, "input '%s': string %lld says %u bytes, only %zu are left", name,
               (long long)i, len, size - at);
      free(recs);
      return GS_EINVAL;
    }
    recs[i] = (gs_bytes_ref){.data = data + at, .len = len};
    at += len;
  }
  if (at != size) {
    snprintf(why, why_len, "input '%s': %zu bytes of binary data are left after its %lld strings",
             name, size - at, (long long)count);
    free(recs);
    return GS_EINVAL;
  }
  *block = recs;
  return GS_OK;
}

/* JSON strings; NULL when one is not valid UTF-8 (JSON cannot carry it). */
json_t *gs_kserve_strings_json(const gs_bytes_ref *recs, int64_t n) {
  json_t *a = json_array();
  for (int64_t i = 0; a && i < n; i++) {
    json_t *s = json_stringn(recs[i].len ? recs[i].data : "", recs[i].len);
    if (!s) {
      json_decref(a);
      return NULL;
    }
    json_array_append_new(a, s);
  }
  return a;
}

size_t gs_kserve_strings_binary_size(const gs_bytes_ref *recs, int64_t n) {
  size_t total = 0;
  for (int64_t i = 0; i < n; i++) {
    if (recs[i].len > UINT32_MAX)
      return SIZE_MAX;
    total += 4 + recs[i].len;
  }
  return total;
}

void gs_kserve_strings_to_binary(const gs_bytes_ref *recs, int64_t n, char *out) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t len = (uint32_t)recs[i].len;
    unsigned char le[4] = {(unsigned char)len, (unsigned char)(len >> 8),
                           (unsigned char)(len >> 16), (unsigned char)(len >> 24)};
    memcpy(out, le, 4);
    if (len)
      memcpy(out + 4, recs[i].data, len);
    out += 4 + len;
  }
}

/* kserve_data.h - KServe v2 tensor data in the forms both ends of the
 * protocol read and write; no server state, so `gpusrv infer` uses it too. */
#ifndef GS_API_KSERVE_DATA_H
#define GS_API_KSERVE_DATA_H

#include "hal/op/tensor.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* "FP32" for GS_DT_FLOAT32; "INVALID" for a type KServe has no name for. */
const char *gs_kserve_dtype_name(gs_dtype dt);
/* Triton's model configuration name: "TYPE_FP32". */
const char *gs_kserve_triton_name(gs_dtype dt);
/* "FP32" -> GS_DT_FLOAT32; GS_DT_INVALID if unknown. */
gs_dtype gs_kserve_dtype_from_name(const char *name);
/* `n` numbers of type dt as a JSON array (not BYTES). New reference; NULL
 * when one is NaN or an infinity, which JSON has no number for (never a
 * shorter array). */
json_t *gs_kserve_data_json(gs_dtype dt, const void *data, int64_t n);
/* BYTES elements in the binary extension's form (each a 4-byte
 * little-endian length, then that many bytes; exactly `size` bytes for
 * `count` elements) as gs_bytes_ref records in *block, which the caller
 * frees; the records point into `data`, which must outlive them. GS_EINVAL
 * with the reason in `why`, naming input `name`, when they do not add up. */
int gs_kserve_strings_from_binary(const char *data, size_t size, int64_t count, void **block,
                                  const char *name, char *why, size_t why_len);
/* The bytes the binary form of n records takes; SIZE_MAX when one is longer
 * than its 4-byte length can say. */
size_t gs_kserve_strings_binary_size(const gs_bytes_ref *recs, int64_t n);
/* Writes that form to `out`, which holds gs_kserve_strings_binary_size(). */
void gs_kserve_strings_to_binary(const gs_bytes_ref *recs, int64_t n, char *out);
/* The records as JSON strings (new reference); NULL when one is not valid
 * UTF-8, which JSON cannot carry. */
json_t *gs_kserve_strings_json(const gs_bytes_ref *recs, int64_t n);

#endif

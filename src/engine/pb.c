/* pb.c - a bounds-checked reader of the protobuf wire format. */
#include "engine/pb.h"

#include "base/error.h"

#include <string.h>

gs_pb gs_pb_init(const void *data, size_t len) {
  gs_pb r = {.p = data, .end = (const uint8_t *)data + len, .base = data};
  return r;
}

size_t gs_pb_offset(const gs_pb *r) { return (size_t)(r->p - r->base); }

int gs_pb_varint(gs_pb *r, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (r->p >= r->end)
      return gs_error(GS_EINVAL, "truncated varint at byte %zu", gs_pb_offset(r));
    uint8_t b = *r->p++;
    x |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return gs_error(GS_EINVAL, "varint longer than 10 bytes at byte %zu", gs_pb_offset(r));
}

int gs_pb_next(gs_pb *r, uint32_t *field, int *wire) {
  if (r->p >= r->end)
    return 0;
  uint64_t key;
  int rc = gs_pb_varint(r, &key);
  if (rc < 0)
    return rc;
  *field = (uint32_t)(key >> 3);
  *wire = (int)(key & 7);
  if (*field == 0 || key >> 32)
    return gs_error(GS_EINVAL, "invalid field number %llu at byte %zu",
                    (unsigned long long)(key >> 3), gs_pb_offset(r));
  return 1;
}

int gs_pb_fixed32(gs_pb *r, uint32_t *v) {
  if (r->end - r->p < 4)
    return gs_error(GS_EINVAL, "truncated 32-bit field at byte %zu", gs_pb_offset(r));
  memcpy(v, r->p, 4); /* the wire is little-endian, as is every host gpusrv builds for */
  r->p += 4;
  return 0;
}

int gs_pb_fixed64(gs_pb *r, uint64_t *v) {
  if (r->end - r->p < 8)
    return gs_error(GS_EINVAL, "truncated 64-bit field at byte %zu", gs_pb_offset(r));
  memcpy(v, r->p, 8);
  r->p += 8;
  return 0;
}

int gs_pb_sub(gs_pb *r, gs_pb *sub) {
  uint64_t len;
  int rc = gs_pb_varint(r, &len);
  if (rc < 0)
    return rc;
  if (len > (uint64_t)(r->end - r->p))
    return gs_error(GS_EINVAL, "field of %llu bytes at byte %zu runs past the end (%zu left)",
                    (unsigned long long)len, gs_pb_offset(r), (size_t)(r->end - r->p));
  sub->p = r->p;
  sub->end = r->p + len;
  sub->base = r->base;
  r->p += len;
  return 0;
}

int gs_pb_skip(gs_pb *r, int wire) {
  uint64_t v;
  uint32_t v32;
  gs_pb sub;
  switch (wire) {
  case GS_PB_VARINT: return gs_pb_varint(r, &v);
  case GS_PB_I64: return gs_pb_fixed64(r, &v);
  case GS_PB_LEN: return gs_pb_sub(r, &sub);
  case GS_PB_I32: return gs_pb_fixed32(r, &v32);
  default:
    return gs_error(GS_EINVAL, "unsupported wire type %d at byte %zu", wire, gs_pb_offset(r));
  }
}

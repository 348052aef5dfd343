/* pb_write.h - a writer of the protobuf wire format, the counterpart of
 * pb.h, for the ONNX files gpusrv writes (`gpusrv model quantize`): fields
 * appended to a growing buffer, nested messages written into a buffer of
 * their own and appended as bytes. Written by hand for the reason pb.h is. */
#ifndef GS_ENGINE_PB_WRITE_H
#define GS_ENGINE_PB_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A buffer being written. Zero-initialise it; free it with gs_pbw_free().
 * A failed allocation sets `failed` and makes later writes do nothing, so
 * that a writer checks once, at the end. */
typedef struct gs_pbw {
  uint8_t *buf;
  size_t len, cap;
  bool failed;
} gs_pbw;

void gs_pbw_free(gs_pbw *w);
/* Bytes as they are (a field copied from another message, tag included). */
void gs_pbw_raw(gs_pbw *w, const void *data, size_t len);
void gs_pbw_varint(gs_pbw *w, uint32_t field, uint64_t v);
void gs_pbw_bytes(gs_pbw *w, uint32_t field, const void *data, size_t len);
void gs_pbw_string(gs_pbw *w, uint32_t field, const char *s);
/* A nested message: `sub`'s bytes as field `field` of w. */
void gs_pbw_message(gs_pbw *w, uint32_t field, const gs_pbw *sub);

#endif

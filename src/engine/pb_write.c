/* pb_write.c - the protobuf wire format, written (see pb_write.h). */
#include "engine/pb_write.h"

#include <stdlib.h>
#include <string.h>

void gs_pbw_free(gs_pbw *w) {
  free(w->buf);
  memset(w, 0, sizeof *w);
}

void gs_pbw_raw(gs_pbw *w, const void *data, size_t len) {
  if (w->failed || len == 0)
    return;
  if (w->len + len > w->cap) {
    size_t cap = w->cap ? w->cap : 256;
    while (cap < w->len + len)
      cap *= 2;
    uint8_t *grown = realloc(w->buf, cap);
    if (!grown) {
      w->failed = true;
      return;
    }
    w->buf = grown;
    w->cap = cap;
  }
  memcpy(w->buf + w->len, data, len);
  w->len += len;
}

static void put_varint(gs_pbw *w, uint64_t v) {
  uint8_t b[10];
  size_t n = 0;
  do {
    b[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  gs_pbw_raw(w, b, n);
}

void gs_pbw_varint(gs_pbw *w, uint32_t field, uint64_t v) {
  put_varint(w, (uint64_t)field << 3);
  put_varint(w, v);
}

void gs_pbw_bytes(gs_pbw *w, uint32_t field, const void *data, size_t len) {
  put_varint(w, (uint64_t)field << 3 | 2);
  put_varint(w, len);
  gs_pbw_raw(w, data, len);
}

void gs_pbw_string(gs_pbw *w, uint32_t field, const char *s) {
  gs_pbw_bytes(w, field, s, strlen(s));
}

void gs_pbw_message(gs_pbw *w, uint32_t field, const gs_pbw *sub) {
  if (sub->failed)
    w->failed = true;
  gs_pbw_bytes(w, field, sub->buf, sub->len);
}

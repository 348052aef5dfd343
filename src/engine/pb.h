/* pb.h - a reader of the protobuf wire format, enough for ONNX files.
 * Written by hand because the ONNX importer needs only this much, and
 * bounds-checked on every read so that a hostile file cannot read past its
 * end (the generated code of protobuf-c would pull in its runtime and a
 * schema compiler for some 200 lines of reading). */
#ifndef GS_ENGINE_PB_H
#define GS_ENGINE_PB_H

#include <stddef.h>
#include <stdint.h>

enum { GS_PB_VARINT = 0, GS_PB_I64 = 1, GS_PB_LEN = 2, GS_PB_I32 = 5 };

typedef struct gs_pb {
  const uint8_t *p, *end;
  const uint8_t *base; /* start of the whole file, for offsets in messages */
} gs_pb;

gs_pb gs_pb_init(const void *data, size_t len);
/* Reads the next field's key. Returns 1 and fills field/wire, 0 at the end of
 * the message, or GS_EINVAL (detail with the byte offset) on a bad key. */
int gs_pb_next(gs_pb *r, uint32_t *field, int *wire);
int gs_pb_varint(gs_pb *r, uint64_t *v);
int gs_pb_fixed32(gs_pb *r, uint32_t *v);
int gs_pb_fixed64(gs_pb *r, uint64_t *v);
/* A length-delimited field as a sub-reader over its bytes. */
int gs_pb_sub(gs_pb *r, gs_pb *sub);
/* Skips a field of wire type `wire`. Groups (3, 4) are refused. */
int gs_pb_skip(gs_pb *r, int wire);
/* Byte offset of the reader in the file, for messages. */
size_t gs_pb_offset(const gs_pb *r);

#endif

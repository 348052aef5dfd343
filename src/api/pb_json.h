/* pb_json.h - a protobuf-c message made from JSON in the protobuf JSON
 * mapping with the .proto's own field names: the replies the HTTP side
 * builds for metadata, configuration, statistics and the repository index
 * are the same messages gRPC sends, so gRPC encodes those very JSON values
 * instead of a second builder per reply. */
#ifndef GS_API_PB_JSON_H
#define GS_API_PB_JSON_H

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

/* Makes a message of type `d` from the JSON object `j`. Enums are read by
 * name or number, maps from JSON objects, 64-bit integers from numbers or
 * decimal strings; keys the message has no field for are skipped (gpusrv's
 * own configuration fields that Triton's ModelConfig lacks). Returns the
 * message, which the caller frees with protobuf_c_message_free_unpacked(m,
 * NULL); or NULL with `why` filled (a value of the wrong kind, out of
 * memory). */
ProtobufCMessage *gs_pb_from_json(const ProtobufCMessageDescriptor *d, json_t *j, char *why,
                                  size_t whylen);

#endif

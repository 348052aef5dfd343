/* pb_json.c - protobuf-c messages from JSON, walking the descriptors that
 * protoc-c generates (pb_json.h). protobuf-c has no JSON mapping of its own;
 * this covers the kinds of field the KServe and Triton messages use. */
#include "api/pb_json.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One element's bytes in a message or a repeated field's array. */
static size_t element_size(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_DOUBLE:
    return 8;
  case PROTOBUF_C_TYPE_STRING:
    return sizeof(char *);
  case PROTOBUF_C_TYPE_BYTES:
    return sizeof(ProtobufCBinaryData);
  case PROTOBUF_C_TYPE_MESSAGE:
    return sizeof(ProtobufCMessage *);
  case PROTOBUF_C_TYPE_BOOL:
    return sizeof(protobuf_c_boolean);
  default: /* the 32-bit integers, float, enum */
    return 4;
  }
}

/* An integer from a JSON number or a decimal string (the JSON mapping
 * writes 64-bit integers as strings). */
static bool json_int(json_t *v, bool is_unsigned, long double *out) {
  if (json_is_integer(v)) {
    *out = (long double)json_integer_value(v);
    return true;
  }
  if (json_is_real(v)) {
    double d = json_real_value(v);
    *out = d;
    return d == floor(d);
  }
  if (!json_is_string(v))
    return false;
  const char *s = json_string_value(v);
  char *end;
  errno = 0;
  if (is_unsigned) {
    if (s[0] == '-')
      return false;
    *out = (long double)strtoull(s, &end, 10);
  } else {
    *out = (long double)strtoll(s, &end, 10);
  }
  return errno == 0 && end != s && *end == '\0';
}

static ProtobufCMessage *message_from(const ProtobufCMessageDescriptor *d, json_t *j, char *why,
                                      size_t whylen);

/* One value of field f from v, into dst. */
static bool set_one(const ProtobufCFieldDescriptor *f, json_t *v, void *dst, char *why,
                    size_t whylen) {
  long double n = 0;
  bool ok = true;
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    ok = json_int(v, false, &n) && n >= INT32_MIN && n <= INT32_MAX;
    if (ok)
      *(int32_t *)dst = (int32_t)n;
    break;
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    ok = json_int(v, true, &n) && n >= 0 && n <= UINT32_MAX;
    if (ok)
      *(uint32_t *)dst = (uint32_t)n;
    break;
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    ok = json_int(v, false, &n) && n >= (long double)INT64_MIN && n <= (long double)INT64_MAX;
    if (ok)
      *(int64_t *)dst = (int64_t)n;
    break;
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    ok = json_int(v, true, &n) && n >= 0 && n <= (long double)UINT64_MAX;
    if (ok)
      *(uint64_t *)dst = (uint64_t)n;
    break;
  case PROTOBUF_C_TYPE_FLOAT:
    ok = json_is_number(v);
    if (ok)
      *(float *)dst = (float)json_number_value(v);
    break;
  case PROTOBUF_C_TYPE_DOUBLE:
    ok = json_is_number(v);
    if (ok)
      *(double *)dst = json_number_value(v);
    break;
  case PROTOBUF_C_TYPE_BOOL:
    ok = json_is_boolean(v);
    if (ok)
      *(protobuf_c_boolean *)dst = json_is_true(v);
    break;
  case PROTOBUF_C_TYPE_ENUM: {
    const ProtobufCEnumValue *ev =
        json_is_string(v) ? protobuf_c_enum_descriptor_get_value_by_name(f->descriptor,
                                                                          json_string_value(v))
        : json_is_integer(v) ? protobuf_c_enum_descriptor_get_value(f->descriptor,
                                                                     (int)json_integer_value(v))
                             : NULL;
    ok = ev != NULL;
    if (ok)
      *(int32_t *)dst = ev->value;
    break;
  }
  case PROTOBUF_C_TYPE_STRING: {
    ok = json_is_string(v);
    if (!ok)
      break;
    char *s = strdup(json_string_value(v));
    if (!s) {
      snprintf(why, whylen, "out of memory");
      return false;
    }
    *(char **)dst = s;
    break;
  }
  case PROTOBUF_C_TYPE_BYTES: { /* not base64: these messages carry text in bytes fields */
    ok = json_is_string(v);
    if (!ok)
      break;
    size_t len = json_string_length(v);
    uint8_t *b = malloc(len ? len : 1);
    if (!b) {
      snprintf(why, whylen, "out of memory");
      return false;
    }
    memcpy(b, json_string_value(v), len);
    *(ProtobufCBinaryData *)dst = (ProtobufCBinaryData){.len = len, .data = b};
    break;
  }
  case PROTOBUF_C_TYPE_MESSAGE: {
    ProtobufCMessage *m = message_from(f->descriptor, v, why, whylen);
    if (!m)
      return false;
    *(ProtobufCMessage **)dst = m;
    return true;
  }
  }
  if (!ok)
    snprintf(why, whylen, "field '%s' cannot take the JSON value given", f->name);
  return ok;
}

/* A map field: protoc-c makes it a repeated message of entries (key 1,
 * value 2); JSON writes it as an object. */
static bool set_map(const ProtobufCFieldDescriptor *f, json_t *obj, char *why, size_t whylen,
                    ProtobufCMessage ***array, size_t *count) {
  const ProtobufCMessageDescriptor *entry = f->descriptor;
  *array = calloc(json_object_size(obj) ? json_object_size(obj) : 1, sizeof **array);
  if (!*array) {
    snprintf(why, whylen, "out of memory");
    return false;
  }
  const char *key;
  json_t *value;
  json_object_foreach(obj, key, value) {
    json_t *pair = json_pack("{s:s, s:O}", "key", key, "value", value);
    ProtobufCMessage *m = pair ? message_from(entry, pair, why, whylen) : NULL;
    json_decref(pair);
    if (!m) {
      if (!pair)
        snprintf(why, whylen, "out of memory");
      return false;
    }
    (*array)[(*count)++] = m;
  }
  return true;
}

/* Whether f is a map field: protoc writes map<K, V> as a repeated message
 * named <Field>Entry with fields key and value, and protobuf-c's
 * descriptors keep no map flag, so that shape is what tells it. */
static bool is_map_entry(const ProtobufCFieldDescriptor *f) {
  if (f->type != PROTOBUF_C_TYPE_MESSAGE || f->label != PROTOBUF_C_LABEL_REPEATED)
    return false;
  const ProtobufCMessageDescriptor *d = f->descriptor;
  size_t n = strlen(d->short_name);
  return n > 5 && strcmp(d->short_name + n - 5, "Entry") == 0 && d->n_fields == 2 &&
         strcmp(d->fields[0].name, "key") == 0 && strcmp(d->fields[1].name, "value") == 0;
}

static bool set_repeated(const ProtobufCFieldDescriptor *f, json_t *v, char *msg, char *why,
                         size_t whylen) {
  size_t *count = (size_t *)(msg + f->quantifier_offset);
  void **array = (void **)(msg + f->offset);
  if (is_map_entry(f) && json_is_object(v))
    return set_map(f, v, why, whylen, (ProtobufCMessage ***)array, count);
  if (!json_is_array(v)) {
    snprintf(why, whylen, "field '%s' takes a list", f->name);
    return false;
  }
  size_t n = json_array_size(v), size = element_size(f->type);
  *array = calloc(n ? n : 1, size);
  if (!*array) {
    snprintf(why, whylen, "out of memory");
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    if (!set_one(f, json_array_get(v, i), (char *)*array + i * size, why, whylen))
      return false;
    *count = i + 1; /* what free_unpacked must free on failure */
  }
  return true;
}

static ProtobufCMessage *message_from(const ProtobufCMessageDescriptor *d, json_t *j, char *why,
                                      size_t whylen) {
  if (!json_is_object(j)) {
    snprintf(why, whylen, "%s takes a JSON object", d->short_name);
    return NULL;
  }
  ProtobufCMessage *m = malloc(d->sizeof_message);
  if (!m) {
    snprintf(why, whylen, "out of memory");
    return NULL;
  }
  d->message_init(m);
  char *base = (char *)m;
  const char *key;
  json_t *v;
  json_object_foreach(j, key, v) {
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(d, key);
    if (!f || json_is_null(v))
      continue;
    bool ok;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      ok = set_repeated(f, v, base, why, whylen);
    } else {
      ok = set_one(f, v, base + f->offset, why, whylen);
      if (ok && (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
        *(uint32_t *)(base + f->quantifier_offset) = f->id;
      else if (ok && f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset &&
               f->type != PROTOBUF_C_TYPE_MESSAGE && f->type != PROTOBUF_C_TYPE_STRING)
        *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
    }
    if (!ok) {
      protobuf_c_message_free_unpacked(m, NULL);
      return NULL;
    }
  }
  return m;
}

ProtobufCMessage *gs_pb_from_json(const ProtobufCMessageDescriptor *d, json_t *j, char *why,
                                  size_t whylen) {
  why[0] = '\0';
  return message_from(d, j, why, whylen);
}

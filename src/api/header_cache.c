/* header_cache.c - a thread's last parsed inference headers (header_cache.h). */
#include "api/header_cache.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

/* A few models served side by side by one thread; a header this long is
 * more than perf_analyzer's or tritonclient's for eight inputs. */
enum { KEPT = 4, MAX_HEADER = 1024 };

typedef struct kept_header {
  const gs_served_version *version;
  uint64_t serial; /* 0: an empty entry (serials start at 1) */
  size_t len;
  char header[MAX_HEADER];
  /* What the parse set in the request. */
  char id[sizeof ((gs_infer_request *)0)->id];
  bool has_id;
  int priority;
  uint64_t timeout_us;
  int64_t batch;
  int n_inputs;
  gs_shape shapes[GS_REQ_MAX_IO];
  gs_dtype given[GS_REQ_MAX_IO];
  size_t offset[GS_REQ_MAX_IO]; /* each input's place in the binary data */
  size_t binary_bytes;          /* the binary data the inputs take */
  bool send[GS_REQ_MAX_IO], binary[GS_REQ_MAX_IO];
} kept_header;

static _Thread_local kept_header kept[KEPT];
static _Thread_local int next_slot;
static _Atomic uint64_t hits;

uint64_t gs_header_cache_hits(void) {
  return atomic_load_explicit(&hits, memory_order_relaxed);
}

static kept_header *find(const gs_served_version *v, const char *header, size_t len) {
  for (int i = 0; i < KEPT; i++) {
    kept_header *k = &kept[i];
    if (k->serial == v->serial && k->version == v && k->len == len &&
        memcmp(k->header, header, len) == 0)
      return k;
  }
  return NULL;
}

bool gs_header_cache_take(gs_served_model *m, gs_served_version *v, const char *header,
                          size_t len, const char *binary, size_t binary_len,
                          gs_infer_request *r) {
  if (!v->serial || len > MAX_HEADER)
    return false;
  const kept_header *k = find(v, header, len);
  if (!k || binary_len < k->binary_bytes)
    return false;
  r->model = m;
  r->version = v;
  memcpy(r->id, k->id, sizeof r->id);
  r->has_id = k->has_id;
  r->priority = k->priority;
  r->timeout_us = k->timeout_us;
  r->batch = k->batch;
  for (int i = 0; i < k->n_inputs; i++) {
    r->shapes[i] = k->shapes[i];
    r->given[i] = k->given[i];
    r->inputs[i] = binary + k->offset[i];
  }
  memcpy(r->send, k->send, sizeof r->send);
  memcpy(r->binary, k->binary, sizeof r->binary);
  atomic_fetch_add_explicit(&hits, 1, memory_order_relaxed);
  return true;
}

/* Whether every input of r is read in place from the binary data, as the
 * model's datatype (not an image or strings, which the parse converted). */
static bool all_binary_in_place(const gs_infer_request *r, const char *binary, size_t binary_len) {
  const gs_model *model = r->version->model;
  for (int i = 0; i < model->n_inputs; i++) {
    const char *at = r->inputs[i];
    /* decoded: images the device resizes, their shape no longer the body's */
    if (r->owned[i] || r->decoded[i] || r->given[i] != model->inputs[i].dtype || !at ||
        at < binary || at > binary + binary_len)
      return false;
  }
  return true;
}

void gs_header_cache_keep(const gs_served_version *v, const char *header, size_t len,
                          const char *binary, size_t binary_len, const gs_infer_request *r) {
  if (!v->serial || len > MAX_HEADER || r->version != v || find(v, header, len) ||
      !all_binary_in_place(r, binary, binary_len))
    return;
  kept_header *k = &kept[next_slot];
  next_slot = (next_slot + 1) % KEPT;
  const gs_model *model = v->model;
  *k = (kept_header){.version = v, .serial = v->serial, .len = len, .has_id = r->has_id,
                     .priority = r->priority, .timeout_us = r->timeout_us, .batch = r->batch,
                     .n_inputs = model->n_inputs};
  memcpy(k->header, header, len);
  memcpy(k->id, r->id, sizeof k->id);
  for (int i = 0; i < model->n_inputs; i++) {
    k->shapes[i] = r->shapes[i];
    k->given[i] = r->given[i];
    k->offset[i] = (size_t)((const char *)r->inputs[i] - binary);
    size_t end = k->offset[i] + (size_t)gs_shape_numel(&r->shapes[i]) * gs_dtype_size(r->given[i]);
    if (end > k->binary_bytes)
      k->binary_bytes = end;
  }
  memcpy(k->send, r->send, sizeof k->send);
  memcpy(k->binary, r->binary, sizeof k->binary);
}

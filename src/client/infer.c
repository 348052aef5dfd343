/* infer.c - gs_client_infer: the request goes out as a JSON header and
 * then each input's bytes straight from the caller's memory (Triton's
 * binary tensor extension); the answer's binary outputs are written, as
 * they arrive, into the caller's buffers or ones allocated for them. */
#include "client/client_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TENSORS 64

/* The reply as it streams in: first its JSON header (its length is in the
 * reply's Inference-Header-Content-Length; without one, the whole reply is
 * the header and every output is empty), then each binary output in the
 * header's order, each routed to its destination. */
typedef struct reply_reader {
  client_exchange *x;
  gs_client *c;
  gs_client_tensor *outputs;
  int n_outputs;
  bool by_position;        /* outputs without names: the model's in order */
  bool filled[MAX_TENSORS];
  char *header;            /* collected header */
  size_t header_got, header_cap;
  bool header_done;
  int n_parts;
  struct part {
    char *dst;             /* NULL: discard */
    size_t size, got;
  } parts[MAX_TENSORS];
  int at;                  /* the part being received */
  int error;               /* found while parsing the header */
} reply_reader;

static int64_t integer(json_t *j, const char *key) {
  json_t *v = json_object_get(j, key);
  return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

/* Parses the reply's header: where each binary output goes, and each
 * asked-for output's description. */
static int route_outputs(reply_reader *r) {
  json_t *h = json_loadb(r->header, r->header_got, 0, NULL);
  json_t *outs = h ? json_object_get(h, "outputs") : NULL;
  if (!json_is_array(outs)) {
    json_decref(h);
    return client_fail(r->c, GS_EIO, "the daemon's reply has no outputs");
  }
  size_t i;
  json_t *o;
  int rc = GS_OK;
  json_array_foreach(outs, i, o) {
    if (r->n_parts == MAX_TENSORS) {
      rc = client_fail(r->c, GS_ENOTSUP, "the reply has more than %d outputs", MAX_TENSORS);
      break;
    }
    const char *name = json_string_value(json_object_get(o, "name"));
    int64_t size = integer(json_object_get(o, "parameters"), "binary_data_size");
    if (size < 0) {
      rc = client_fail(r->c, GS_EIO, "output %s came back without binary data", name ? name : "?");
      break;
    }
    struct part *p = &r->parts[r->n_parts++];
    p->size = (size_t)size;
    gs_client_tensor *t = NULL;
    if (r->by_position)
      t = (int)i < r->n_outputs ? &r->outputs[i] : NULL;
    else
      for (int k = 0; k < r->n_outputs && !t; k++)
        if (name && strcmp(r->outputs[k].name, name) == 0)
          t = &r->outputs[k];
    if (!t)
      continue; /* not asked for: its bytes are skipped */
    r->filled[t - r->outputs] = true;
    const char *dt = json_string_value(json_object_get(o, "datatype"));
    snprintf(t->datatype, sizeof t->datatype, "%s", dt ? dt : "");
    json_t *shape = json_object_get(o, "shape");
    t->rank = (int)json_array_size(shape);
    if (t->rank > GS_CLIENT_MAX_DIMS) {
      rc = client_fail(r->c, GS_ENOTSUP, "output %s has %d dimensions (at most %d)", name,
                       t->rank, GS_CLIENT_MAX_DIMS);
      break;
    }
    for (int d = 0; d < t->rank; d++)
      t->shape[d] = (int64_t)json_integer_value(json_array_get(shape, (size_t)d));
    if (t->data) {
      if (t->bytes < p->size) {
        rc = client_fail(r->c, GS_ERANGE, "output %s has %zu bytes, its buffer holds %zu",
                         name ? name : "?", p->size, t->bytes);
        t->bytes = p->size;
        break;
      }
    } else if (!(t->data = malloc(p->size ? p->size : 1))) {
      rc = client_fail(r->c, GS_ENOMEM, "out of memory for output %s (%zu bytes)",
                       name ? name : "?", p->size);
      break;
    }
    t->bytes = p->size;
    p->dst = t->data;
  }
  json_decref(h);
  return rc;
}

/* Appends to the collected header, growing it. */
static bool add_header(reply_reader *r, const char *data, size_t len) {
  if (r->header_got + len + 1 > r->header_cap) {
    size_t cap = (r->header_got + len + 1) * 2;
    if (cap > GS_CLIENT_MAX_HEADER + 1 || !(r->header = realloc(r->header, cap)))
      return false;
    r->header_cap = cap;
  }
  memcpy(r->header + r->header_got, data, len);
  r->header_got += len;
  r->header[r->header_got] = '\0';
  return true;
}

static size_t stop(reply_reader *r, int code) {
  r->error = r->x->sink_error = code;
  return 0;
}

static size_t on_reply(const char *data, size_t len, void *ctx) {
  reply_reader *r = ctx;
  size_t used = 0;
  if (!r->x->has_infer_header_len) { /* JSON alone: collected, read at the end */
    if (!add_header(r, data, len))
      return stop(r, client_fail(r->c, GS_ENOMEM, "infer: the reply is too large"));
    return len;
  }
  if (!r->header_done) {
    size_t want = r->x->reply_header_len - r->header_got;
    size_t take = len < want ? len : want;
    if (!add_header(r, data, take))
      return stop(r, client_fail(r->c, GS_ENOMEM, "infer: out of memory reading the reply"));
    used = take;
    if (r->header_got < r->x->reply_header_len)
      return len;
    r->header_done = true;
    int rc = route_outputs(r);
    if (rc < 0)
      return stop(r, rc); /* its message is recorded */
  }
  while (used < len && r->at < r->n_parts) {
    struct part *p = &r->parts[r->at];
    size_t take = len - used < p->size - p->got ? len - used : p->size - p->got;
    if (p->dst)
      memcpy(p->dst + p->got, data + used, take);
    p->got += take;
    used += take;
    if (p->got == p->size)
      r->at++;
  }
  if (used < len)
    return stop(r, client_fail(r->c, GS_EIO, "infer: the daemon sent more bytes than its "
                                             "outputs hold"));
  return len;
}

/* The request's JSON header: each input with its binary size, the outputs
 * asked for as binary data. */
static char *request_header(const gs_client_tensor *inputs, int n_inputs,
                            const gs_client_tensor *outputs, int n_outputs, bool by_position) {
  json_t *req = json_object(), *ins = json_array();
  for (int i = 0; i < n_inputs; i++) {
    const gs_client_tensor *t = &inputs[i];
    json_t *shape = json_array();
    for (int d = 0; d < t->rank; d++)
      json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
    json_t *in = json_pack("{s:s, s:o, s:s, s:{s:I}}", "name", t->name, "shape", shape,
                           "datatype", t->datatype, "parameters", "binary_data_size",
                           (json_int_t)t->bytes);
    if (!in || json_array_append_new(ins, in) != 0) { /* a name that is not UTF-8 */
      json_decref(req);
      json_decref(ins);
      return NULL;
    }
  }
  json_object_set_new(req, "inputs", ins);
  if (by_position) {
    json_object_set_new(req, "parameters", json_pack("{s:b}", "binary_data_output", 1));
  } else {
    json_t *outs = json_array();
    for (int i = 0; i < n_outputs; i++) {
      json_t *o = json_pack("{s:s, s:{s:b}}", "name", outputs[i].name, "parameters",
                            "binary_data", 1);
      if (!o || json_array_append_new(outs, o) != 0) {
        json_decref(req);
        json_decref(outs);
        return NULL;
      }
    }
    json_object_set_new(req, "outputs", outs);
  }
  char *text = json_dumps(req, JSON_COMPACT);
  json_decref(req);
  return text;
}

int gs_client_infer(gs_client *c, const char *model, const char *version,
                    const gs_client_tensor *inputs, int n_inputs, gs_client_tensor *outputs,
                    int n_outputs) {
  if (!model || n_inputs < 0 || n_outputs < 0 || n_inputs >= MAX_TENSORS ||
      n_outputs >= MAX_TENSORS || (n_inputs && !inputs) || (n_outputs && !outputs))
    return client_fail(c, GS_EINVAL, "infer: a model, and at most %d inputs and outputs",
                       MAX_TENSORS - 1);
  for (int i = 0; i < n_inputs; i++)
    if (!inputs[i].name || !inputs[i].datatype[0] || inputs[i].rank < 0 ||
        inputs[i].rank > GS_CLIENT_MAX_DIMS || (inputs[i].bytes && !inputs[i].data))
      return client_fail(c, GS_EINVAL, "infer: input %d needs a name, a datatype, a shape and "
                                       "its data", i);
  /* Every output named (those are asked for), or none (the model's, in order). */
  int named = 0;
  for (int i = 0; i < n_outputs; i++)
    named += outputs[i].name != NULL;
  if (named && named != n_outputs)
    return client_fail(c, GS_EINVAL, "infer: name every output or none");
  bool by_position = named == 0;
  char *header = request_header(inputs, n_inputs, outputs, n_outputs, by_position);
  if (!header)
    return client_fail(c, GS_EINVAL, "infer: a tensor name is not valid UTF-8 (or memory ran "
                                     "out)");
  client_segment segs[MAX_TENSORS + 1];
  segs[0] = (client_segment){header, strlen(header)};
  for (int i = 0; i < n_inputs; i++)
    segs[i + 1] = (client_segment){inputs[i].data, inputs[i].bytes};
  char name[400], ver[64], path[600];
  client_escape(model, name, sizeof name);
  if (version && *version) {
    client_escape(version, ver, sizeof ver);
    snprintf(path, sizeof path, "/v2/models/%s/versions/%s/infer", name, ver);
  } else {
    snprintf(path, sizeof path, "/v2/models/%s/infer", name);
  }
  /* Which caller buffers the library allocates, to free them on failure. */
  bool ours[MAX_TENSORS] = {0};
  for (int i = 0; i < n_outputs; i++) {
    ours[i] = outputs[i].data == NULL;
    outputs[i].datatype[0] = '\0'; /* filled from the reply */
  }
  client_exchange x = {.method = "POST", .path = path, .segments = segs,
                       .n_segments = n_inputs + 1, .infer_header_len = segs[0].len};
  reply_reader r = {.x = &x, .c = c, .outputs = outputs, .n_outputs = n_outputs,
                    .by_position = by_position};
  x.sink = on_reply;
  x.sink_ctx = &r;
  int rc = client_perform(c, &x);
  if (r.error < 0)
    rc = r.error; /* its message is already the last error */
  else if (rc == GS_OK)
    rc = client_status_error(c, &x, "infer");
  if (rc == GS_OK && !x.has_infer_header_len) {
    /* A reply without binary data: every output in it is empty. */
    r.header_done = true;
    rc = route_outputs(&r);
    for (int i = 0; rc == GS_OK && i < r.n_parts; i++)
      if (r.parts[i].size)
        rc = client_fail(c, GS_EIO, "infer: the daemon's answer lacks its binary data");
    r.at = r.n_parts;
  }
  if (rc == GS_OK && (!r.header_done || r.at < r.n_parts))
    rc = client_fail(c, GS_EIO, "infer: the daemon's answer ended early");
  for (int i = 0; rc == GS_OK && i < n_outputs; i++)
    if (!r.filled[i])
      rc = by_position ? client_fail(c, GS_ENOENT, "infer: the model has fewer than %d outputs",
                                     i + 1)
                       : client_fail(c, GS_ENOENT, "infer: the reply has no output %s",
                                     outputs[i].name);
  if (rc < 0)
    for (int i = 0; i < n_outputs; i++)
      if (ours[i]) {
        free(outputs[i].data);
        outputs[i].data = NULL;
      }
  free(r.header);
  free(x.body);
  free(header);
  return rc;
}

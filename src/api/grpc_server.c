/* grpc_server.c - the gRPC endpoint's transport on gRPC's C core: one
 * completion queue polled by one thread or a few (and worker threads that
 * long inferences are handed to), calls asked for without
 * registering methods (the path picks the handler), unary calls as two
 * batches (receive; then reply, status and close), and bidirectional
 * streams with one receive and one send in flight at a time. */
#include "api/grpc_call.h"

#include "api/http_parse.h"
#include "api/pb_json.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/fileutil.h"
#include "base/log.h"
#include "base/workers.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_THREADS 64
/* Calls asked for ahead of their arrival: a new one is asked for as each
 * arrives, so this many can start at the same moment. */
#define WAITING_CALLS 16
/* Requests of one stream being answered or waiting to be sent: past it the
 * stream is read no further until replies go out (a client that sends and
 * never reads would otherwise pile up requests and replies without end). */
#define STREAM_WINDOW 64

struct gs_grpc_server {
  gs_grpc_settings settings;
  grpc_server *server;
  grpc_completion_queue *cq;
  grpc_resource_quota *quota;
  pthread_t threads[MAX_THREADS];
  int n_threads;
  gs_workers *workers; /* NULL: none */
  atomic_int live_calls; /* accepted and not yet freed */
  /* Request messages are unpacked against a budget (--max-bodies-bytes):
   * protobuf-c's structs can take many times a message's bytes (an int64
   * list of small values, empty entries), and they live until answered. */
  ProtobufCAllocator allocator;
  atomic_llong unpacked_bytes;
  atomic_bool quiescing;
  atomic_bool cancelling; /* gs_grpc_stop cancels every call */
  atomic_bool shut_down; /* the server's shutdown notice arrived */
  gs_grpc_tag on_shutdown;
  /* TLS: the certificate configuration gRPC takes at its next handshake
   * (tls_fetch), read at start and again by gs_grpc_reload_tls. */
  pthread_mutex_t tls_lock;
  grpc_ssl_server_certificate_config *tls_next;
  gs_grpc_watches *watches; /* grpc.health.v1's Watch calls (grpc_watch.c) */
};

/* gRPC's own messages go to the log: its errors as warnings (a client's
 * broken connection is reported as one), the rest at debug level. */
static void grpc_log(gpr_log_func_args *a) {
  if (a->severity == GPR_LOG_SEVERITY_ERROR)
    GS_LOGW("grpc", "%s", a->message);
  else if (gs_log_enabled(GS_LOG_DEBUG))
    GS_LOGD("grpc", "%s", a->message);
}

grpc_status_code gs_grpc_status_of(int http_status) {
  switch (http_status) {
  case 200:
    return GRPC_STATUS_OK;
  case 400:
    return GRPC_STATUS_INVALID_ARGUMENT;
  case 401:
    return GRPC_STATUS_UNAUTHENTICATED;
  case 403:
    return GRPC_STATUS_PERMISSION_DENIED;
  case 404:
    return GRPC_STATUS_NOT_FOUND;
  case 409:
    return GRPC_STATUS_ALREADY_EXISTS;
  case 413:
  case 429:
  case 507:
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  case 501:
    return GRPC_STATUS_UNIMPLEMENTED;
  case 503:
    return GRPC_STATUS_UNAVAILABLE;
  case 504:
    return GRPC_STATUS_DEADLINE_EXCEEDED;
  default:
    return http_status >= 500 ? GRPC_STATUS_INTERNAL : GRPC_STATUS_UNKNOWN;
  }
}

/* ---- request messages, within a budget ---------------------------------------------------- */

#define BLOCK_HEADER 16 /* keeps malloc's alignment */

static _Thread_local bool budget_refused; /* why the last unpack on this thread failed */

static void *budget_alloc(void *data, size_t size) {
  gs_grpc_server *g = data;
  long long total = (long long)(size + BLOCK_HEADER);
  if (atomic_fetch_add(&g->unpacked_bytes, total) + total > g->settings.max_buffered_bytes) {
    atomic_fetch_sub(&g->unpacked_bytes, total);
    budget_refused = true;
    return NULL;
  }
  char *p = malloc((size_t)total);
  if (!p) {
    atomic_fetch_sub(&g->unpacked_bytes, total);
    return NULL;
  }
  memcpy(p, &total, sizeof total);
  return p + BLOCK_HEADER;
}

static void budget_free(void *data, void *ptr) {
  gs_grpc_server *g = data;
  if (!ptr)
    return;
  char *p = (char *)ptr - BLOCK_HEADER;
  long long total;
  memcpy(&total, p, sizeof total);
  atomic_fetch_sub(&g->unpacked_bytes, total);
  free(p);
}

void gs_grpc_free_request(gs_grpc_call *c, ProtobufCMessage *m) {
  protobuf_c_message_free_unpacked(m, &c->server->allocator);
}

/* ---- the life of a call --------------------------------------------------------------------- */

static void ask_for_call(gs_grpc_server *g);
static void on_new(gs_grpc_call *c, bool ok);
static void on_received(gs_grpc_call *c, bool ok);
static void on_sent(gs_grpc_call *c, bool ok);
static void on_status(gs_grpc_call *c, bool ok);
static void on_closed(gs_grpc_call *c, bool ok);
static void receive(gs_grpc_call *c, bool with_initial_metadata);

static void hold_while_busy(gs_serial *s, bool busy); /* below, with gs_grpc_hand_off */

static gs_grpc_call *call_new(gs_grpc_server *g) {
  gs_grpc_call *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->server = g;
  c->settings = &g->settings;
  grpc_call_details_init(&c->details);
  grpc_metadata_array_init(&c->metadata);
  c->on_new = (gs_grpc_tag){c, on_new};
  c->on_received = (gs_grpc_tag){c, on_received};
  c->on_sent = (gs_grpc_tag){c, on_sent};
  c->on_status = (gs_grpc_tag){c, on_status};
  c->on_closed = (gs_grpc_tag){c, on_closed};
  c->status_details = grpc_empty_slice();
  pthread_mutex_init(&c->lock, NULL);
  atomic_init(&c->refs, 1);
  return c;
}

static void call_free(gs_grpc_call *c) {
  gs_grpc_server *g = c->server;
  bool counted = c->counted;
  if (c->call)
    grpc_call_unref(c->call);
  grpc_call_details_destroy(&c->details);
  grpc_metadata_array_destroy(&c->metadata);
  grpc_slice_unref(c->status_details);
  if (c->received)
    grpc_byte_buffer_destroy(c->received);
  if (c->sent)
    grpc_byte_buffer_destroy(c->sent);
  for (gs_grpc_outgoing *o = c->queue, *next; o; o = next) {
    next = o->next;
    grpc_byte_buffer_destroy(o->message);
    free(o);
  }
  pthread_mutex_destroy(&c->lock);
  if (c->method && c->method->streaming)
    gs_serial_destroy(&c->in_order);
  free(c);
  if (counted) /* last: gs_grpc_stop may free the server once this reaches 0 */
    atomic_fetch_sub(&g->live_calls, 1);
}

void gs_grpc_call_hold(gs_grpc_call *c) {
  atomic_fetch_add(&c->refs, 1);
}

void gs_grpc_call_release(gs_grpc_call *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1)
    call_free(c);
}

const gs_principal *gs_grpc_caller(const gs_grpc_call *c) {
  return &c->who;
}

/* Starts a batch that holds the call until its tag comes back. */
static bool start(gs_grpc_call *c, const grpc_op *ops, size_t n, gs_grpc_tag *tag) {
  gs_grpc_call_hold(c);
  grpc_call_error e = grpc_call_start_batch(c->call, ops, n, tag, NULL);
  if (e == GRPC_CALL_OK)
    return true;
  GS_LOGW("grpc", "a call's batch was refused: %s", grpc_call_error_to_string(e));
  gs_grpc_call_release(c);
  return false;
}

/* The end of a call: its status (and a unary call's reply, `message`,
 * taken). Initial metadata goes too where it has not gone yet: a unary
 * call's goes with its reply, so that gRPC writes them together. */
static void finish(gs_grpc_call *c, grpc_status_code code, const char *details,
                   grpc_byte_buffer *message) {
  grpc_slice_unref(c->status_details);
  c->status_details = grpc_slice_from_copied_string(details ? details : "");
  grpc_op ops[4];
  size_t n = 0;
  memset(ops, 0, sizeof ops);
  if (!c->initial_sent)
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  c->initial_sent = true;
  if (message) {
    c->sent = message;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = message;
  }
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = code;
  ops[n++].data.send_status_from_server.status_details = &c->status_details;
  if (!c->close_asked) {
    c->close_asked = true;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
  }
  start(c, ops, n, &c->on_status);
}

static void on_status(gs_grpc_call *c, bool ok) {
  (void)ok; /* sent, or the client is gone: the call is over either way */
  gs_grpc_call_release(c);
}

static void on_closed(gs_grpc_call *c, bool ok) {
  (void)ok;
  pthread_mutex_lock(&c->lock);
  if (c->cancelled)
    c->broken = true;
  pthread_mutex_unlock(&c->lock);
  gs_grpc_call_release(c);
}

/* Asks for the call's close now: a stream at its start, a unary call
 * handed to a worker (which otherwise asks with its reply), so that
 * gs_grpc_call_gone can tell whether the client has left (cancelled, or
 * past its deadline). */
static void ask_for_close(gs_grpc_call *c) {
  c->close_asked = true;
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &c->cancelled;
  start(c, &op, 1, &c->on_closed);
}

static void receive(gs_grpc_call *c, bool with_initial_metadata) {
  grpc_op ops[2];
  size_t n = 0;
  memset(ops, 0, sizeof ops);
  if (with_initial_metadata) {
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->initial_sent = true;
  }
  ops[n].op = GRPC_OP_RECV_MESSAGE;
  ops[n++].data.recv_message.recv_message = &c->received;
  start(c, ops, n, &c->on_received);
}

/* ---- streams: replies in order, one send at a time ------------------------------------------ */

/* With the lock held: reads the stream's next request if the window has
 * room (and it was held back for want of it). */
static void stream_resume(gs_grpc_call *c) {
  if (c->receive_held && !c->broken && !c->finishing &&
      c->pending + c->queued < STREAM_WINDOW) {
    c->receive_held = false;
    receive(c, false);
  }
}

/* With the lock held: the next queued reply goes, or the stream ends when
 * the client has closed its side and every request is answered. */
static void stream_advance(gs_grpc_call *c) {
  if (c->sending || c->finishing || c->broken)
    return;
  if (c->queue) {
    gs_grpc_outgoing *o = c->queue;
    c->queue = o->next;
    if (!c->queue)
      c->queue_tail = NULL;
    c->queued--;
    c->sent = o->message;
    free(o);
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = c->sent;
    c->sending = start(c, &op, 1, &c->on_sent);
    if (!c->sending) { /* the call is gone: nothing more goes out */
      grpc_byte_buffer_destroy(c->sent);
      c->sent = NULL;
      c->broken = true;
    }
    stream_resume(c);
    return;
  }
  if (c->half_closed && c->pending == 0) {
    c->finishing = true;
    finish(c, GRPC_STATUS_OK, "", NULL);
  }
}

static void on_sent(gs_grpc_call *c, bool ok) {
  pthread_mutex_lock(&c->lock);
  grpc_byte_buffer_destroy(c->sent);
  c->sent = NULL;
  c->sending = false;
  if (!ok)
    c->broken = true;
  stream_advance(c);
  pthread_mutex_unlock(&c->lock);
  gs_grpc_call_release(c);
}

/* Queues a reply on the stream: the answer to one of its requests
 * (`answers`), or one more of several for the same request. */
static void stream_queue(gs_grpc_call *c, grpc_byte_buffer *b, bool answers) {
  gs_grpc_outgoing *o = b ? malloc(sizeof *o) : NULL;
  pthread_mutex_lock(&c->lock);
  if (answers)
    c->pending--;
  if (!o) { /* out of memory: the stream cannot go on in order */
    if (b)
      grpc_byte_buffer_destroy(b);
    if (!c->finishing && !c->broken) {
      c->finishing = true;
      finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for a reply", NULL);
    }
  } else {
    *o = (gs_grpc_outgoing){.message = b};
    if (c->queue_tail)
      c->queue_tail->next = o;
    else
      c->queue = o;
    c->queue_tail = o;
    c->queued++;
    stream_advance(c);
  }
  pthread_mutex_unlock(&c->lock);
}

static void stream_reply(gs_grpc_call *c, grpc_byte_buffer *b) { stream_queue(c, b, true); }

void gs_grpc_stream_push(gs_grpc_call *c, grpc_byte_buffer *b) { stream_queue(c, b, false); }

void gs_grpc_stream_end(gs_grpc_call *c) {
  pthread_mutex_lock(&c->lock);
  c->pending--;
  c->half_closed = true; /* the stream ends whether or not the client closed its side */
  stream_advance(c);
  pthread_mutex_unlock(&c->lock);
}

/* Ends the stream with an error status: its request is answered so. */
static void stream_fail(gs_grpc_call *c, int http_status, const char *message) {
  pthread_mutex_lock(&c->lock);
  c->pending--;
  if (!c->finishing && !c->broken) {
    c->finishing = true;
    finish(c, gs_grpc_status_of(http_status), message, NULL);
  }
  pthread_mutex_unlock(&c->lock);
}

bool gs_grpc_call_gone(gs_grpc_call *c) {
  pthread_mutex_lock(&c->lock);
  bool gone = c->broken || c->finishing;
  pthread_mutex_unlock(&c->lock);
  return gone || atomic_load(&c->server->cancelling);
}

gs_grpc_watches *gs_grpc_call_watches(gs_grpc_call *c) { return c->server->watches; }

/* ---- replies, for handlers -------------------------------------------------------------------- */

/* malloc, not grpc_slice_malloc: gRPC's allocator aborts the process when
 * memory runs out, and a large reply should fail, not kill the server. */
grpc_byte_buffer *gs_grpc_pack(const ProtobufCMessage *m) {
  size_t size = protobuf_c_message_get_packed_size(m);
  uint8_t *data = size <= UINT32_MAX ? malloc(size ? size : 1) : NULL;
  if (!data)
    return NULL;
  protobuf_c_message_pack(m, data);
  grpc_slice s = grpc_slice_new(data, size, free);
  grpc_byte_buffer *b = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return b;
}

void gs_grpc_reply_packed(gs_grpc_call *c, grpc_byte_buffer *b) {
  if (c->method->streaming)
    stream_reply(c, b);
  else if (b)
    finish(c, GRPC_STATUS_OK, "", b);
  else
    finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for the reply", NULL);
}

void gs_grpc_reply_message(gs_grpc_call *c, const ProtobufCMessage *m) {
  gs_grpc_reply_packed(c, gs_grpc_pack(m));
}

void gs_grpc_reply_error(gs_grpc_call *c, int http_status, const char *message) {
  if (!c->method->streaming) {
    finish(c, gs_grpc_status_of(http_status), message, NULL);
    return;
  }
  if (!c->method->errors_in_stream) {
    stream_fail(c, http_status, message);
    return;
  }
  Inference__ModelStreamInferResponse r = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
  r.error_message = (char *)message;
  stream_reply(c, gs_grpc_pack(&r.base));
}

void gs_grpc_reply_infer_error(gs_grpc_call *c, int http_status, const char *message,
                               const char *model, const char *id) {
  if (!c->method->streaming) {
    gs_grpc_reply_error(c, http_status, message);
    return;
  }
  Inference__ModelInferResponse res = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  res.model_name = (char *)model;
  res.id = (char *)id;
  Inference__ModelStreamInferResponse r = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
  r.error_message = (char *)message;
  r.infer_response = &res;
  stream_reply(c, gs_grpc_pack(&r.base));
}

void gs_grpc_reply_json(gs_grpc_call *c, const ProtobufCMessageDescriptor *d, json_t *j) {
  char why[300];
  ProtobufCMessage *m = j ? gs_pb_from_json(d, j, why, sizeof why) : NULL;
  json_decref(j);
  if (!m) {
    char msg[400];
    snprintf(msg, sizeof msg, "cannot encode the reply: %s", j ? why : "out of memory");
    gs_grpc_reply_error(c, 500, msg);
    return;
  }
  gs_grpc_reply_message(c, m);
  protobuf_c_message_free_unpacked(m, NULL);
}

/* ---- arrival ------------------------------------------------------------------------------ */

static const gs_grpc_method *find_method(const grpc_slice path) {
  for (const gs_grpc_method *m = gs_grpc_methods; m->path; m++)
    if (grpc_slice_str_cmp(path, m->path) == 0)
      return m;
  return NULL;
}

/* The bearer token of the call's metadata checked as HTTP checks its
 * Authorization header. Returns 0, or the HTTP status of the refusal with
 * `why` filled. */
static int authenticate(gs_grpc_call *c, char *why, size_t whylen) {
  gs_grpc_access access = c->method->access;
  if (access == GS_GRPC_OPEN)
    return 0;
  const char *value = NULL;
  char header[512];
  for (size_t i = 0; i < c->metadata.count; i++) {
    const grpc_metadata *md = &c->metadata.metadata[i];
    if (grpc_slice_str_cmp(md->key, "authorization") != 0)
      continue;
    size_t n = GRPC_SLICE_LENGTH(md->value);
    if (n >= sizeof header) {
      snprintf(why, whylen, "the authorization metadata is too long");
      return 401;
    }
    memcpy(header, GRPC_SLICE_START_PTR(md->value), n);
    header[n] = '\0';
    value = header;
  }
  if (!value) {
    if (access == GS_GRPC_ADMIN || c->settings->reading_needs_token) {
      snprintf(why, whylen, "this method needs a token (metadata authorization: Bearer TOKEN)");
      return 401;
    }
    return 0;
  }
  const char *token = gs_http_bearer_token(value);
  if (!token) {
    snprintf(why, whylen, "the authorization metadata must read 'Bearer TOKEN'");
    return 401;
  }
  if (gs_frontdesk_authenticate(c->settings->frontdesk, token, &c->who) < 0) {
    snprintf(why, whylen, "token refused: %s", gs_error_detail());
    return 401;
  }
  if (access == GS_GRPC_ADMIN && !c->who.admin) {
    snprintf(why, whylen, "loading and unloading models needs an admin token");
    return 403;
  }
  return 0;
}

static void on_new(gs_grpc_call *c, bool ok) {
  gs_grpc_server *g = c->server;
  if (!ok) { /* the server is shutting down: this call never came */
    gs_grpc_call_release(c);
    return;
  }
  atomic_fetch_add(&g->live_calls, 1);
  c->counted = true;
  if (!atomic_load(&g->quiescing))
    ask_for_call(g);
  c->method = find_method(c->details.method);
  if (c->method && c->method->streaming) /* a stream's replies go in order; a unary call has one */
    gs_serial_init(&c->in_order, g->workers, hold_while_busy);
  char why[300];
  if (!c->method) {
    char path[200];
    size_t n = GRPC_SLICE_LENGTH(c->details.method);
    snprintf(path, sizeof path, "%.*s", (int)(n < 150 ? n : 150),
             (const char *)GRPC_SLICE_START_PTR(c->details.method));
    snprintf(why, sizeof why, "gpusrv does not serve %s", path);
    finish(c, GRPC_STATUS_UNIMPLEMENTED, why, NULL);
  } else {
    int denied = authenticate(c, why, sizeof why);
    if (denied) {
      finish(c, gs_grpc_status_of(denied), why, NULL);
    } else {
      if (c->method->streaming) /* its close tells when the client gives up */
        ask_for_close(c);
      receive(c, c->method->streaming); /* a unary call's goes with its reply */
    }
  }
  gs_grpc_call_release(c); /* the arrival's own hold */
}

/* The message that came, unpacked for the handler (which owns it then). */
static ProtobufCMessage *unpack(gs_grpc_call *c) {
  grpc_byte_buffer_reader reader;
  if (!grpc_byte_buffer_reader_init(&reader, c->received))
    return NULL;
  grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
  grpc_byte_buffer_reader_destroy(&reader);
  c->received_bytes = GRPC_SLICE_LENGTH(s);
  budget_refused = false;
  ProtobufCMessage *m =
      protobuf_c_message_unpack(c->method->request, &c->server->allocator, c->received_bytes,
                                GRPC_SLICE_START_PTR(s));
  grpc_slice_unref(s);
  c->unpack_refused = !m && budget_refused;
  return m;
}

static void on_received(gs_grpc_call *c, bool ok) {
  bool streaming = c->method->streaming;
  if (!ok) { /* the client is gone */
    pthread_mutex_lock(&c->lock);
    c->broken = true;
    pthread_mutex_unlock(&c->lock);
    gs_grpc_call_release(c);
    return;
  }
  if (!c->received) { /* the client has closed its side */
    if (streaming) {
      pthread_mutex_lock(&c->lock);
      c->half_closed = true;
      stream_advance(c);
      pthread_mutex_unlock(&c->lock);
    } else {
      finish(c, GRPC_STATUS_INVALID_ARGUMENT, "the call carried no request message", NULL);
    }
    gs_grpc_call_release(c);
    return;
  }
  ProtobufCMessage *m = unpack(c);
  grpc_byte_buffer_destroy(c->received);
  c->received = NULL;
  if (streaming) {
    pthread_mutex_lock(&c->lock);
    c->pending++;
    pthread_mutex_unlock(&c->lock);
  }
  if (!m) {
    char why[300];
    if (c->unpack_refused)
      snprintf(why, sizeof why, "the server holds as many request messages as it may "
               "(--max-bodies-bytes %lld); retry shortly",
               (long long)c->settings->max_buffered_bytes);
    else
      snprintf(why, sizeof why, "the request is not a valid %s message",
               c->method->request->name);
    gs_grpc_reply_error(c, c->unpack_refused ? 429 : 400, why);
    c->unpack_refused = false;
  } else {
    c->method->handle(c, m);
  }
  if (streaming) {
    pthread_mutex_lock(&c->lock);
    c->receive_held = true;
    stream_resume(c);
    pthread_mutex_unlock(&c->lock);
  }
  gs_grpc_call_release(c);
}

/* ---- the server ------------------------------------------------------------------------------ */

static void ask_for_call(gs_grpc_server *g) {
  gs_grpc_call *c = call_new(g);
  if (!c) {
    GS_LOGE("grpc", "out of memory waiting for a call");
    return;
  }
  grpc_call_error e = grpc_server_request_call(g->server, &c->call, &c->details, &c->metadata,
                                               g->cq, g->cq, &c->on_new);
  if (e != GRPC_CALL_OK) {
    GS_LOGE("grpc", "cannot wait for calls: %s", grpc_call_error_to_string(e));
    call_free(c);
  }
}

/* Waits for the queue's next event and hands it to its tag (as failed with
 * force_failed: the server is being torn down); false once the queue has
 * shut down. */
static bool next_event(gs_grpc_server *g, bool force_failed) {
  grpc_event ev = grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
  if (ev.type != GRPC_OP_COMPLETE)
    return ev.type != GRPC_QUEUE_SHUTDOWN;
  gs_grpc_tag *t = ev.tag;
  if (t == &g->on_shutdown)
    atomic_store(&g->shut_down, true);
  else
    t->done(t->call, ev.success != 0 && !force_failed);
  return true;
}

static void *poll_main(void *arg) {
  gs_grpc_server *g = arg;
  while (next_event(g, false))
    ;
  return NULL;
}

/* A PEM file as a string (gRPC takes PEM text). */
static int read_pem(const char *path, char **out) {
  void *data;
  size_t len;
  if (gs_read_whole_file(path, &data, &len) < 0)
    return gs_error_code();
  char *s = realloc(data, len + 1);
  if (!s) {
    free(data);
    return gs_error(GS_ENOMEM, "out of memory reading %s", path);
  }
  s[len] = '\0';
  *out = s;
  return GS_OK;
}

/* The certificate, key and client CA (if any) of the settings as gRPC's
 * configuration (which copies the text); NULL with the error set. */
static grpc_ssl_server_certificate_config *read_tls(const gs_grpc_settings *st) {
  char *pem[3] = {NULL, NULL, NULL}; /* certificate, key, client CA */
  grpc_ssl_server_certificate_config *config = NULL;
  if (read_pem(st->tls_cert, &pem[0]) == 0 && read_pem(st->tls_key, &pem[1]) == 0 &&
      (!st->tls_client_ca || !st->tls_client_ca[0] || read_pem(st->tls_client_ca, &pem[2]) == 0)) {
    grpc_ssl_pem_key_cert_pair pair = {.private_key = pem[1], .cert_chain = pem[0]};
    /* gRPC's reloadable configuration must name client roots even where no
     * client certificate is asked for (it asserts so): then the server's
     * own chain stands there, read by nobody. */
    config = grpc_ssl_server_certificate_config_create(pem[2] ? pem[2] : pem[0], &pair, 1);
  }
  for (int i = 0; i < 3; i++)
    free(pem[i]);
  return config;
}

/* gRPC asks at each new connection's handshake (and once at start) whether
 * the configuration changed; a new one it takes, and frees. */
static grpc_ssl_certificate_config_reload_status tls_fetch(void *arg,
                                                           grpc_ssl_server_certificate_config **config) {
  gs_grpc_server *g = arg;
  pthread_mutex_lock(&g->tls_lock);
  *config = g->tls_next;
  g->tls_next = NULL;
  pthread_mutex_unlock(&g->tls_lock);
  return *config ? GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW : GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
}

int gs_grpc_reload_tls(gs_grpc_server *g) {
  const gs_grpc_settings *st = &g->settings;
  if (!st->tls_cert || !st->tls_cert[0])
    return GS_OK;
  grpc_ssl_server_certificate_config *config = read_tls(st);
  if (!config)
    return gs_error_code();
  pthread_mutex_lock(&g->tls_lock);
  if (g->tls_next) /* a reload no handshake has taken yet */
    grpc_ssl_server_certificate_config_destroy(g->tls_next);
  g->tls_next = config;
  pthread_mutex_unlock(&g->tls_lock);
  return GS_OK;
}

static grpc_server_credentials *credentials(gs_grpc_server *g) {
  const gs_grpc_settings *st = &g->settings;
  if (!st->tls_cert || !st->tls_cert[0])
    return grpc_insecure_server_credentials_create();
  if (!(g->tls_next = read_tls(st)))
    return NULL;
  bool client_ca = st->tls_client_ca && st->tls_client_ca[0];
  grpc_ssl_server_credentials_options *options =
      grpc_ssl_server_credentials_create_options_using_config_fetcher(
          client_ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                    : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
          tls_fetch, g);
  return grpc_ssl_server_credentials_create_with_options(options);
}

static void free_server(gs_grpc_server *g) {
  /* What they run replies to calls through the queue, which is still polled. */
  gs_workers_stop(g->workers);
  /* Nobody polls the queue: the shutdown's notice is waited for here. */
  while (g->server && g->n_threads == 0 && atomic_load(&g->quiescing) &&
         !atomic_load(&g->shut_down) && next_event(g, true))
    ;
  if (g->server)
    grpc_server_destroy(g->server);
  if (g->cq) {
    grpc_completion_queue_shutdown(g->cq);
    for (int i = 0; i < g->n_threads; i++)
      pthread_join(g->threads[i], NULL);
    if (g->n_threads == 0) /* nobody polled it: drain it here, freeing what waited */
      while (next_event(g, true))
        ;
    grpc_completion_queue_destroy(g->cq);
  }
  if (g->quota)
    grpc_resource_quota_unref(g->quota);
  if (g->tls_next)
    grpc_ssl_server_certificate_config_destroy(g->tls_next);
  pthread_mutex_destroy(&g->tls_lock);
  gs_grpc_watches_free(g->watches);
  free(g);
  grpc_shutdown();
}

int gs_grpc_start(const gs_grpc_settings *settings, gs_grpc_server **out) {
  gs_grpc_server *g = calloc(1, sizeof *g);
  if (!g)
    return gs_error(GS_ENOMEM, "out of memory starting gRPC");
  g->settings = *settings;
  g->on_shutdown = (gs_grpc_tag){NULL, NULL}; /* told apart by its address */
  g->allocator = (ProtobufCAllocator){budget_alloc, budget_free, g};
  atomic_init(&g->unpacked_bytes, 0);
  atomic_init(&g->live_calls, 0);
  atomic_init(&g->quiescing, false);
  atomic_init(&g->cancelling, false);
  atomic_init(&g->shut_down, false);
  pthread_mutex_init(&g->tls_lock, NULL);
  g->watches = gs_grpc_watches_open(settings->repo); /* NULL: Watch is refused */
  gpr_set_log_function(grpc_log);
  grpc_init();
  g->quota = grpc_resource_quota_create("gpusrv");
  grpc_resource_quota_resize(g->quota, (size_t)settings->max_buffered_bytes);
  grpc_arg args[3];
  memset(args, 0, sizeof args);
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer =
      settings->max_message_bytes > INT_MAX ? INT_MAX : (int)settings->max_message_bytes;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = -1;
  args[2].type = GRPC_ARG_POINTER;
  args[2].key = (char *)GRPC_ARG_RESOURCE_QUOTA;
  args[2].value.pointer.p = g->quota;
  args[2].value.pointer.vtable = grpc_resource_quota_arg_vtable();
  grpc_channel_args channel_args = {.num_args = 3, .args = args};
  g->server = grpc_server_create(&channel_args, NULL);
  g->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(g->server, g->cq, NULL);
  grpc_server_credentials *creds = credentials(g);
  if (!creds) {
    int rc = gs_error_code();
    free_server(g);
    return rc;
  }
  char address[300];
  snprintf(address, sizeof address, "%s:%d", settings->host, settings->port);
  int bound = grpc_server_add_http2_port(g->server, address, creds);
  grpc_server_credentials_release(creds);
  if (bound == 0) {
    free_server(g);
    return gs_error(GS_EIO, "cannot serve gRPC on %s (port in use?)", address);
  }
  grpc_server_start(g->server);
  int n = settings->pollers < 1 ? 1 : settings->pollers > MAX_THREADS ? MAX_THREADS
                                                                        : settings->pollers;
  for (int i = 0; i < n; i++) {
    if (pthread_create(&g->threads[i], NULL, poll_main, g) != 0)
      break;
    g->n_threads++;
  }
  if (g->n_threads == 0) {
    gs_grpc_quiesce(g);
    free_server(g);
    return gs_error(GS_ENOMEM, "cannot start gRPC's threads");
  }
  if (settings->workers > 0 && !(g->workers = gs_workers_start(settings->workers)))
    GS_LOGW("grpc", "no worker threads (%s): every inference runs on a polling thread",
            gs_error_detail());
  for (int i = 0; i < WAITING_CALLS; i++)
    ask_for_call(g);
  *out = g;
  return GS_OK;
}

/* The call is held while its stream's serial has work. */
static void hold_while_busy(gs_serial *s, bool busy) {
  gs_grpc_call *c = (gs_grpc_call *)((char *)s - offsetof(gs_grpc_call, in_order));
  if (busy)
    gs_grpc_call_hold(c);
  else
    gs_grpc_call_release(c);
}

bool gs_grpc_hand_off(gs_grpc_call *c, gs_work *w, bool may_run_here) {
  gs_workers *ws = c->server->workers;
  if (!ws)
    return false;
  if (c->method->streaming) /* may run here only once every earlier reply is queued */
    return gs_serial_queue(&c->in_order, w, may_run_here);
  if (may_run_here)
    return false;
  ask_for_close(c);
  gs_workers_queue(ws, w);
  return true;
}

void gs_grpc_quiesce(gs_grpc_server *g) {
  if (!g || atomic_exchange(&g->quiescing, true))
    return;
  grpc_server_shutdown_and_notify(g->server, g->cq, &g->on_shutdown);
  gs_grpc_watches_close(g->watches); /* a last NOT_SERVING, and their ends */
}

int gs_grpc_in_flight(gs_grpc_server *g) {
  return g ? atomic_load(&g->live_calls) : 0;
}

void gs_grpc_stop(gs_grpc_server *g) {
  if (!g)
    return;
  gs_grpc_quiesce(g);
  atomic_store(&g->cancelling, true); /* what waits for a worker is not run */
  grpc_server_cancel_all_calls(g->server);
  /* A cancelled call's request may still be in a batcher: its reply finds
   * the call cancelled, and then the call is freed. */
  uint64_t next_note = gs_now_ns() + 5000000000u;
  while (!atomic_load(&g->shut_down) || atomic_load(&g->live_calls) > 0) {
    gs_sleep_ns(5 * 1000 * 1000);
    if (gs_now_ns() > next_note) {
      GS_LOGW("grpc", "waiting for %d call(s) to end", atomic_load(&g->live_calls));
      next_note = gs_now_ns() + 5000000000u;
    }
  }
  free_server(g);
}

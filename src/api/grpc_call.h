/* grpc_call.h - inside the gRPC endpoint: one call and what its method's
 * handler may do with it (grpc_server.c runs calls, grpc_methods.c answers
 * them, grpc_infer.c converts inference messages). */
#ifndef GS_API_GRPC_CALL_H
#define GS_API_GRPC_CALL_H

#include "api/grpc_server.h"
#include "api/infer_request.h"
#include "base/workers.h"
#include "kserve.pb-c.h" /* generated from kserve.proto */

#include <grpc/grpc.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

typedef struct gs_grpc_call gs_grpc_call;

/* Who may call a method. */
typedef enum {
  GS_GRPC_OPEN,    /* health: no token needed */
  GS_GRPC_READING, /* a token where the server's setting asks for one */
  GS_GRPC_ADMIN,   /* an admin token always */
} gs_grpc_access;

/* A method: its path, its request message, and the handler, which answers
 * with one of the gs_grpc_reply_* calls below, now or later from another
 * thread. A streaming method's handler runs once per message received. */
typedef struct gs_grpc_method {
  const char *path; /* "/inference.GRPCInferenceService/ModelInfer" */
  const ProtobufCMessageDescriptor *request;
  void (*handle)(gs_grpc_call *c, ProtobufCMessage *request);
  gs_grpc_access access;
  bool streaming;
  /* A stream whose failed requests are replies in the stream
   * (ModelStreamInfer's error_message), not the end of the call. */
  bool errors_in_stream;
} gs_grpc_method;

/* The method table (grpc_methods.c), ended by a NULL path. */
extern const gs_grpc_method gs_grpc_methods[];

/* A batch of operations on a call in flight, and what to do when it ends. */
typedef struct gs_grpc_tag {
  gs_grpc_call *call;
  void (*done)(gs_grpc_call *c, bool ok);
} gs_grpc_tag;

/* A reply waiting its turn on a stream: one send at a time. */
typedef struct gs_grpc_outgoing {
  grpc_byte_buffer *message;
  struct gs_grpc_outgoing *next;
} gs_grpc_outgoing;

struct gs_grpc_call {
  gs_grpc_server *server;
  const gs_grpc_settings *settings;
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array metadata;
  const gs_grpc_method *method;
  grpc_byte_buffer *received;
  size_t received_bytes; /* the size of the message being handled */
  bool initial_sent;     /* the initial metadata has gone (a stream's with its first read) */
  gs_principal who;      /* behind the bearer token, if one was given */
  int cancelled;         /* from RECV_CLOSE_ON_SERVER */
  bool close_asked;      /* RECV_CLOSE_ON_SERVER is in a batch already */
  bool counted;          /* in the server's live calls */
  grpc_byte_buffer *sent; /* the message of the send in flight */
  gs_grpc_tag on_new, on_received, on_sent, on_status, on_closed;
  grpc_slice status_details;
  /* Owners: each batch in flight and each request a handler holds keep the
   * call alive; the last release frees it. */
  atomic_int refs;
  pthread_mutex_t lock; /* over the stream state below */
  gs_grpc_outgoing *queue, *queue_tail;
  bool sending, half_closed, finishing, broken;
  bool receive_held;   /* the next read waits for room in the stream's window */
  bool unpack_refused; /* the last message did not fit the server's budget */
  int pending;         /* a stream's requests still being answered */
  int queued;          /* its replies waiting to be sent */
  /* A stream's work handed to the worker threads runs one item at a time,
   * in order, so that its replies keep its requests' order (set up only for a
   * stream, once its method is known). */
  gs_serial in_order;
};

/* ---- for handlers ----------------------------------------------------------------------- */

/* A unary call's answer, or one reply of a stream: the message packed as it
 * is (the caller still owns it), a JSON value (taken) as message type d, or
 * an error with the HTTP status the HTTP side would send (mapped to a gRPC
 * status; on a stream, a ModelStreamInferResponse with error_message). */
void gs_grpc_reply_message(gs_grpc_call *c, const ProtobufCMessage *m);
void gs_grpc_reply_json(gs_grpc_call *c, const ProtobufCMessageDescriptor *d, json_t *j);
void gs_grpc_reply_error(gs_grpc_call *c, int http_status, const char *message);
/* A packed message (taken), for replies made elsewhere (grpc_infer.c). */
void gs_grpc_reply_packed(gs_grpc_call *c, grpc_byte_buffer *b);

/* A ModelStreamInfer request's failure, with the request's id so that a
 * client with several in flight knows which one (a unary call: an error). */
void gs_grpc_reply_infer_error(gs_grpc_call *c, int http_status, const char *message,
                               const char *model, const char *id);

/* Frees a request message the handler was given (unpacked against the
 * server's budget for messages held: see grpc_server.c). */
void gs_grpc_free_request(gs_grpc_call *c, ProtobufCMessage *m);

/* A stream that sends several replies to one request (a health watch):
 * each pushed in order, until gs_grpc_stream_end answers the request and
 * ends the stream (with OK once what was pushed has gone, whether or not
 * the client has closed its side). gs_grpc_call_gone: the client has left,
 * or the call is ending. */
void gs_grpc_stream_push(gs_grpc_call *c, grpc_byte_buffer *b);
void gs_grpc_stream_end(gs_grpc_call *c);
bool gs_grpc_call_gone(gs_grpc_call *c);

/* ---- health watches (grpc_watch.c) ------------------------------------------------------- */

typedef struct gs_grpc_watches gs_grpc_watches;
/* The server's watches, with a thread of their own; NULL when out of
 * memory (Watch calls are then refused). Freed by gs_grpc_watches_free. */
gs_grpc_watches *gs_grpc_watches_open(gs_repository *repo);
/* Watches for call c, whose request named a service this server serves
 * (`known`) or not (told SERVICE_UNKNOWN, as the health protocol says, and
 * kept open). Tells its status now and on each change. */
void gs_grpc_watch(gs_grpc_watches *w, gs_grpc_call *c, bool known);
/* Ends every watch with a last NOT_SERVING, and takes no more (the server
 * is stopping). */
void gs_grpc_watches_close(gs_grpc_watches *w);
void gs_grpc_watches_free(gs_grpc_watches *w);
gs_grpc_watches *gs_grpc_call_watches(gs_grpc_call *c);

/* A handler that answers later takes a hold on the call first, and drops it
 * after its reply. */
void gs_grpc_call_hold(gs_grpc_call *c);
void gs_grpc_call_release(gs_grpc_call *c);

/* Hands w to the server's worker threads, for work too long to run on a
 * polling thread (a slow model's inference), unless `may_run_here` and
 * nothing of the call's is with them. False: the caller runs w itself, now
 * (also where the server has no workers). The handler holds the call
 * meanwhile. A stream's items run one at a time, in the order handed, and
 * one it may run itself waits behind those handed before it: its replies
 * keep its requests' order. A handed-off call learns when its client
 * leaves (gs_grpc_call_gone), a unary one too. */
bool gs_grpc_hand_off(gs_grpc_call *c, gs_work *w, bool may_run_here);

/* The principal behind the call's bearer token (checked before the handler
 * ran); `admin` false where no token was given. */
const gs_principal *gs_grpc_caller(const gs_grpc_call *c);

/* The gRPC status for an HTTP one. */
grpc_status_code gs_grpc_status_of(int http_status);

/* ---- inference messages (grpc_infer.c) ---------------------------------------------------- */

/* Fills r (zeroed; model and version set by the caller) from q, whose raw
 * tensors it reads in place: q must outlive r. Returns 0, or an HTTP status
 * (400, 500) with `why` filled. */
int gs_grpc_infer_parse(const Inference__ModelInferRequest *q, size_t message_bytes,
                        gs_infer_request *r, char *why, size_t whylen);
/* The finished request r as a ModelInferResponse, or wrapped in a
 * ModelStreamInferResponse; NULL with `why` filled when memory runs out or
 * an output cannot be sent. */
grpc_byte_buffer *gs_grpc_infer_encode(const gs_infer_request *r, bool stream, char *why,
                                       size_t whylen);

/* Packs any message into a byte buffer (NULL when memory runs out or it is
 * larger than gRPC's 4 GiB message length can say). */
grpc_byte_buffer *gs_grpc_pack(const ProtobufCMessage *m);

#endif

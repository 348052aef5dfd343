/* null_grpc.c - the floor under gpusrv's gRPC side, as null_http.c is under
 * its HTTP side: a server on the same library in the same mode (gRPC's C
 * core, one thread polling one completion queue, gpusrv's default of one
 * poller) that reads each unary call's message whole and answers with a
 * canned reply, computing nothing. bench/serve.py fills the replies with
 * what gpusrv itself answered to the same requests, so both send the same
 * bytes.
 *
 * Usage: gs-bench-null-grpc PORT 'METHOD=FILE'...
 * METHOD is a method of inference.GRPCInferenceService (ModelInfer, ...),
 * FILE the serialized reply. ModelStatistics is answered with counts of the
 * ModelInfer replies sent (perf_analyzer reads them before and after each
 * window and refuses a model whose counts never move); other methods get
 * UNIMPLEMENTED. Streams are not served. */
#include "kserve.pb-c.h"

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUTES 16
#define SERVICE "/inference.GRPCInferenceService/"

typedef struct route {
  char method[160]; /* the full path, SERVICE + name */
  grpc_slice reply;
} route;

static route routes[MAX_ROUTES];
static int n_routes;
static unsigned long long inferred;

/* One call, through three steps, each one completion of the queue. */
typedef enum { ARRIVED, RECEIVED, ANSWERED } step;

typedef struct call {
  step next;
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array metadata;
  grpc_byte_buffer *received, *reply;
  grpc_slice status_details;
  int cancelled;
} call;

static grpc_server *server;
static grpc_completion_queue *cq;

static void wait_for_call(void) {
  call *c = calloc(1, sizeof *c);
  if (!c) {
    fprintf(stderr, "gs-bench-null-grpc: out of memory\n");
    exit(1);
  }
  grpc_call_details_init(&c->details);
  grpc_metadata_array_init(&c->metadata);
  c->status_details = grpc_empty_slice();
  c->next = ARRIVED;
  grpc_server_request_call(server, &c->call, &c->details, &c->metadata, cq, cq, c);
}

static void start(call *c, const grpc_op *ops, size_t n, step next) {
  c->next = next;
  if (grpc_call_start_batch(c->call, ops, n, c, NULL) != GRPC_CALL_OK) {
    fprintf(stderr, "gs-bench-null-grpc: a batch of operations was refused\n");
    exit(1);
  }
}

/* Statistics of the model that counts the ModelInfer replies sent. */
static grpc_slice statistics(void) {
  Inference__StatisticDuration d = INFERENCE__STATISTIC_DURATION__INIT;
  d.count = inferred;
  Inference__InferStatistics s = INFERENCE__INFER_STATISTICS__INIT;
  s.success = s.queue = s.compute_input = s.compute_infer = s.compute_output = &d;
  Inference__ModelStatistics m = INFERENCE__MODEL_STATISTICS__INIT;
  m.name = (char *)"digits";
  m.version = (char *)"1";
  m.inference_count = m.execution_count = inferred;
  m.inference_stats = &s;
  Inference__ModelStatistics *list[] = {&m};
  Inference__ModelStatisticsResponse r = INFERENCE__MODEL_STATISTICS_RESPONSE__INIT;
  r.n_model_stats = 1;
  r.model_stats = list;
  grpc_slice out = grpc_slice_malloc(inference__model_statistics_response__get_packed_size(&r));
  inference__model_statistics_response__pack(&r, GRPC_SLICE_START_PTR(out));
  return out;
}

/* The call's reply (a new reference), or false for a method not served. */
static bool reply_for(call *c, grpc_slice *out) {
  if (grpc_slice_str_cmp(c->details.method, SERVICE "ModelStatistics") == 0) {
    *out = statistics();
    return true;
  }
  for (int i = 0; i < n_routes; i++)
    if (grpc_slice_str_cmp(c->details.method, routes[i].method) == 0) {
      if (strcmp(routes[i].method, SERVICE "ModelInfer") == 0)
        inferred++;
      *out = grpc_slice_ref(routes[i].reply);
      return true;
    }
  return false;
}

/* The reply, its initial metadata and the status go together, as gpusrv
 * sends a unary call's. */
static void answer(call *c) {
  grpc_op ops[4];
  size_t n = 0;
  memset(ops, 0, sizeof ops);
  grpc_slice reply;
  bool served = reply_for(c, &reply);
  ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (served) {
    c->reply = grpc_raw_byte_buffer_create(&reply, 1);
    grpc_slice_unref(reply);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = c->reply;
  }
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = served ? GRPC_STATUS_OK : GRPC_STATUS_UNIMPLEMENTED;
  ops[n++].data.send_status_from_server.status_details = &c->status_details;
  ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
  start(c, ops, n, ANSWERED);
}

static void finish(call *c) {
  if (c->received)
    grpc_byte_buffer_destroy(c->received);
  if (c->reply)
    grpc_byte_buffer_destroy(c->reply);
  if (c->call)
    grpc_call_unref(c->call);
  grpc_call_details_destroy(&c->details);
  grpc_metadata_array_destroy(&c->metadata);
  grpc_slice_unref(c->status_details);
  free(c);
}

static void on_event(call *c, bool ok) {
  switch (c->next) {
  case ARRIVED: {
    if (!ok) { /* the server is shutting down: no more calls */
      finish(c);
      return;
    }
    wait_for_call();
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->received;
    start(c, &op, 1, RECEIVED);
    return;
  }
  case RECEIVED:
    answer(c);
    return;
  case ANSWERED:
    finish(c);
    return;
  }
}

static int add_route(const char *arg) {
  const char *eq = strchr(arg, '=');
  if (!eq || n_routes == MAX_ROUTES)
    return -1;
  route *r = &routes[n_routes];
  snprintf(r->method, sizeof r->method, SERVICE "%.*s", (int)(eq - arg), arg);
  FILE *f = fopen(eq + 1, "rb");
  if (!f)
    return -1;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  r->reply = grpc_slice_malloc(len > 0 ? (size_t)len : 0);
  size_t got = len > 0 ? fread(GRPC_SLICE_START_PTR(r->reply), 1, (size_t)len, f) : 0;
  fclose(f);
  if (len < 0 || got != (size_t)len)
    return -1;
  n_routes++;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: gs-bench-null-grpc PORT 'METHOD=FILE'...\n");
    return 2;
  }
  grpc_init();
  for (int i = 2; i < argc; i++)
    if (add_route(argv[i]) < 0) {
      fprintf(stderr, "gs-bench-null-grpc: cannot serve '%s'\n", argv[i]);
      return 2;
    }
  server = grpc_server_create(NULL, NULL);
  cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(server, cq, NULL);
  char address[64];
  snprintf(address, sizeof address, "127.0.0.1:%s", argv[1]);
  grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
  int bound = grpc_server_add_http2_port(server, address, creds);
  grpc_server_credentials_release(creds);
  if (!bound) {
    fprintf(stderr, "gs-bench-null-grpc: cannot listen on %s\n", address);
    return 1;
  }
  grpc_server_start(server);
  for (int i = 0; i < 16; i++) /* calls waiting to be taken, as gpusrv keeps */
    wait_for_call();
  for (;;) { /* until killed */
    grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    if (ev.type == GRPC_OP_COMPLETE)
      on_event(ev.tag, ev.success);
  }
}

/* grpc_methods.c - the methods of inference.GRPCInferenceService: each
 * answers from the same repository, JSON replies and batchers as the HTTP
 * routes (kserve.c), so the two protocols cannot drift apart. */
#include "api/grpc_call.h"

#include "api/batcher.h"
#include "api/kserve.h"
#include "base/clock.h"
#include "base/error.h"

#include "health.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FREE_REQUEST(m) gs_grpc_free_request(c, (m))

static gs_repository *repo_of(gs_grpc_call *c) {
  return c->settings->repo;
}

/* A call waiting for a model unloaded while idle to load again: its
 * handler runs again, with the same request, once the load has ended. */
typedef struct load_wait {
  gs_load_waiter waiter;
  gs_grpc_call *call;
  ProtobufCMessage *request;
} load_wait;

static void on_model_loaded(gs_load_waiter *w) {
  load_wait *lw = (load_wait *)w; /* the waiter is its first member */
  gs_grpc_call *c = lw->call;
  c->method->handle(c, lw->request);
  free(lw);
  gs_grpc_call_release(c);
}

/* Where m was unloaded while idle (or is loading again after that), loads
 * it for this call: true when the call has been dealt with (the handler runs
 * again with `in` once m has loaded, or the call was answered because the
 * load would outlast m's timeout; either way `in` is taken). */
static bool wait_for_load(gs_grpc_call *c, gs_served_model *m, ProtobufCMessage *in) {
  int st = atomic_load(&m->state);
  if (st != GS_MODEL_UNLOADED_IDLE && !(st == GS_MODEL_LOADING && atomic_load(&m->demand_active)))
    return false;
  load_wait *lw = malloc(sizeof *lw);
  if (!lw)
    return false; /* answered as unloaded */
  *lw = (load_wait){.waiter.loaded = on_model_loaded, .call = c, .request = in};
  int retry_after = 1;
  gs_grpc_call_hold(c);
  gs_wait_outcome o = gs_served_wait_load(repo_of(c), m, &lw->waiter, &retry_after);
  if (o == GS_WAIT_JOINED)
    return true;
  free(lw);
  gs_grpc_call_release(c);
  if (o == GS_WAIT_NONE)
    return false;
  char msg[400];
  snprintf(msg, sizeof msg, "model '%s' is loading again after being idle; its load takes "
           "longer than its default timeout, retry in %d s", m->name, retry_after);
  gs_grpc_reply_error(c, 503, msg);
  FREE_REQUEST(in);
  return true;
}

/* The model and version a request names, with a use share taken (released
 * with gs_served_release); NULL after answering the call with why not, and
 * NULL with *taken set where wait_for_load has taken the request (`load`:
 * a model unloaded while idle is loaded for this call). */
static gs_served_model *use_model(gs_grpc_call *c, ProtobufCMessage *in, bool load,
                                  const char *name, const char *version, gs_served_version **v,
                                  bool *taken) {
  char msg[700];
  *taken = false;
  gs_served_model *m = gs_repository_find(repo_of(c), name);
  if (!m) {
    snprintf(msg, sizeof msg, "unknown model '%s'", name);
    gs_grpc_reply_error(c, 404, msg);
    return NULL;
  }
  if (load && (*taken = wait_for_load(c, m, in)))
    return NULL;
  if (!gs_served_try_use(m)) {
    snprintf(msg, sizeof msg, "model '%s' is loading or unloading; retry shortly", name);
    gs_grpc_reply_error(c, 503, msg);
    return NULL;
  }
  int status;
  *v = gs_kserve_ready_version(m, version, &status, msg, sizeof msg);
  if (!*v) {
    gs_grpc_reply_error(c, status, msg);
    gs_served_release(m);
    return NULL;
  }
  return m;
}

/* ---- health ------------------------------------------------------------------------------- */

static void server_live(gs_grpc_call *c, ProtobufCMessage *in) {
  FREE_REQUEST(in);
  Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
  r.live = 1;
  gs_grpc_reply_message(c, &r.base);
}

static void server_ready(gs_grpc_call *c, ProtobufCMessage *in) {
  FREE_REQUEST(in);
  Inference__ServerReadyResponse r = INFERENCE__SERVER_READY_RESPONSE__INIT;
  r.ready = gs_repository_settled(repo_of(c));
  gs_grpc_reply_message(c, &r.base);
}

static bool serves(const char *service) {
  return !service[0] || strcmp(service, "inference.GRPCInferenceService") == 0;
}

/* grpc.health.v1.Health/Check, for Kubernetes' gRPC probes and the like:
 * the whole server ("") or the inference service is SERVING when it is
 * ready (ServerReady's answer); another service is NOT_FOUND, as the health
 * protocol says. */
static void health_check(gs_grpc_call *c, ProtobufCMessage *in) {
  Grpc__Health__V1__HealthCheckRequest *q = (Grpc__Health__V1__HealthCheckRequest *)in;
  if (!serves(q->service)) {
    char msg[300];
    snprintf(msg, sizeof msg, "unknown service '%.200s'", q->service);
    FREE_REQUEST(in);
    gs_grpc_reply_error(c, 404, msg);
    return;
  }
  FREE_REQUEST(in);
  Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  r.status = gs_repository_settled(repo_of(c))
                 ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                 : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
  gs_grpc_reply_message(c, &r.base);
}

/* Health/Watch: the same status now and at each change (grpc_watch.c). */
static void health_watch(gs_grpc_call *c, ProtobufCMessage *in) {
  bool known = serves(((Grpc__Health__V1__HealthCheckRequest *)in)->service);
  FREE_REQUEST(in);
  gs_grpc_watch(gs_grpc_call_watches(c), c, known);
}

static void model_ready(gs_grpc_call *c, ProtobufCMessage *in) {
  Inference__ModelReadyRequest *q = (Inference__ModelReadyRequest *)in;
  Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
  gs_served_model *m = gs_repository_find(repo_of(c), q->name);
  if (!m) {
    char msg[300];
    snprintf(msg, sizeof msg, "unknown model '%s'", q->name);
    gs_grpc_reply_error(c, 404, msg);
  } else if (!gs_served_try_use(m)) { /* loading or unloading: not ready, and no waiting */
    gs_grpc_reply_message(c, &r.base);
  } else {
    int status;
    char why[700];
    r.ready = gs_kserve_ready_version(m, q->version, &status, why, sizeof why) != NULL;
    gs_served_release(m);
    if (!r.ready && status == 404) /* no such version: an error, as over HTTP */
      gs_grpc_reply_error(c, status, why);
    else
      gs_grpc_reply_message(c, &r.base);
  }
  FREE_REQUEST(in);
}

/* ---- metadata, configuration, statistics ------------------------------------------------------ */

static void server_metadata(gs_grpc_call *c, ProtobufCMessage *in) {
  FREE_REQUEST(in);
  gs_grpc_reply_json(c, &inference__server_metadata_response__descriptor,
                     gs_kserve_server_metadata(c->settings->version));
}

static void model_metadata(gs_grpc_call *c, ProtobufCMessage *in) {
  Inference__ModelMetadataRequest *q = (Inference__ModelMetadataRequest *)in;
  gs_served_version *v;
  bool taken;
  gs_served_model *m = use_model(c, in, true, q->name, q->version, &v, &taken);
  if (taken)
    return;
  if (m) {
    gs_grpc_reply_json(c, &inference__model_metadata_response__descriptor,
                       gs_kserve_model_metadata(m, v));
    gs_served_release(m);
  }
  FREE_REQUEST(in);
}

static void model_config(gs_grpc_call *c, ProtobufCMessage *in) {
  Inference__ModelConfigRequest *q = (Inference__ModelConfigRequest *)in;
  gs_served_version *v;
  bool taken;
  gs_served_model *m = use_model(c, in, true, q->name, q->version, &v, &taken);
  if (taken)
    return;
  if (m) {
    json_t *config = gs_kserve_model_config(m, v);
    gs_grpc_reply_json(c, &inference__model_config_response__descriptor,
                       config ? json_pack("{s:o}", "config", config) : NULL);
    gs_served_release(m);
  }
  FREE_REQUEST(in);
}

static void model_statistics(gs_grpc_call *c, ProtobufCMessage *in) {
  Inference__ModelStatisticsRequest *q = (Inference__ModelStatisticsRequest *)in;
  if (!q->name[0]) {
    gs_grpc_reply_json(c, &inference__model_statistics_response__descriptor,
                       gs_kserve_stats(repo_of(c)));
  } else {
    gs_served_version *v;
    bool taken; /* statistics do not load a model unloaded while idle */
    gs_served_model *m = use_model(c, in, false, q->name, q->version, &v, &taken);
    if (m) {
      gs_grpc_reply_json(c, &inference__model_statistics_response__descriptor,
                         gs_kserve_model_stats(m, v));
      gs_served_release(m);
    }
  }
  FREE_REQUEST(in);
}

/* ---- the repository ------------------------------------------------------------------------ */

static void repository_index(gs_grpc_call *c, ProtobufCMessage *in) {
  Inference__RepositoryIndexRequest *q = (Inference__RepositoryIndexRequest *)in;
  json_t *models = gs_kserve_repository_index(repo_of(c));
  if (models && q->ready) { /* only those ready to serve */
    size_t i = 0;
    while (i < json_array_size(models)) {
      const char *state = json_string_value(json_object_get(json_array_get(models, i), "state"));
      if (state && strcmp(state, gs_model_state_name(GS_MODEL_READY)) == 0)
        i++;
      else
        json_array_remove(models, i);
    }
  }
  gs_grpc_reply_json(c, &inference__repository_index_response__descriptor,
                     models ? json_pack("{s:o}", "models", models) : NULL);
  FREE_REQUEST(in);
}

/* A load or unload, on a thread of its own (gs_repository_admin_async): it
 * can take seconds, and the polling threads serve every other call
 * meanwhile. The call is held until the thread has answered it. */
static void admin_done(gs_grpc_call *c, int status, const char *message,
                       const ProtobufCMessage *reply) {
  if (status == 200)
    gs_grpc_reply_message(c, reply);
  else
    gs_grpc_reply_error(c, status, message);
  gs_grpc_call_release(c);
}

static void load_done(void *arg, int status, const char *message) {
  Inference__RepositoryModelLoadResponse r = INFERENCE__REPOSITORY_MODEL_LOAD_RESPONSE__INIT;
  admin_done(arg, status, message, &r.base);
}

static void unload_done(void *arg, int status, const char *message) {
  Inference__RepositoryModelUnloadResponse r = INFERENCE__REPOSITORY_MODEL_UNLOAD_RESPONSE__INIT;
  admin_done(arg, status, message, &r.base);
}

/* Takes `ov` (NULL: none). */
static void start_admin(gs_grpc_call *c, const char *name, bool load, gs_load_override *ov) {
  if (!name[0]) {
    gs_load_override_free(ov);
    gs_grpc_reply_error(c, 400, "a model name is needed");
    return;
  }
  gs_grpc_call_hold(c);
  if (gs_repository_admin_async(repo_of(c), name, load, ov, load ? load_done : unload_done,
                                c) < 0) {
    gs_grpc_reply_error(c, 500, "out of memory");
    gs_grpc_call_release(c);
  }
}

/* The load's parameters: "config" as string_param, "file:<path>" as
 * bytes_param, as tritonclient sends them. */
static int load_parameters(const Inference__RepositoryModelLoadRequest *q,
                           gs_load_override **out) {
  *out = NULL;
  if (q->n_parameters == 0)
    return GS_OK;
  gs_load_override *ov = gs_load_override_new();
  int rc = ov ? GS_OK : gs_error(GS_ENOMEM, "out of memory reading the load request");
  for (size_t i = 0; rc == 0 && i < q->n_parameters; i++) {
    const char *key = q->parameters[i]->key;
    const Inference__ModelRepositoryParameter *p = q->parameters[i]->value;
    bool is_file = strncmp(key, "file:", 5) == 0;
    if (p && !is_file && p->parameter_choice_case ==
                             INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_STRING_PARAM)
      rc = gs_load_override_add(ov, key, p->string_param, strlen(p->string_param));
    else if (p && is_file && p->parameter_choice_case ==
                                 INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_BYTES_PARAM)
      rc = gs_load_override_add(ov, key, p->bytes_param.data, p->bytes_param.len);
    else
      rc = gs_error(GS_EINVAL, "load parameter '%.200s' must be %s", key,
                    is_file ? "a bytes_param (the file's bytes)"
                            : "a string_param ('config', the configuration as JSON)");
  }
  if (rc == 0)
    rc = gs_load_override_check(ov);
  if (rc < 0) {
    gs_load_override_free(ov);
    return rc;
  }
  *out = ov;
  return GS_OK;
}

static void repository_model_load(gs_grpc_call *c, ProtobufCMessage *in) {
  Inference__RepositoryModelLoadRequest *q = (Inference__RepositoryModelLoadRequest *)in;
  gs_load_override *ov;
  if (load_parameters(q, &ov) < 0)
    gs_grpc_reply_error(c, gs_error_code() == GS_ENOMEM ? 500 : 400, gs_error_detail());
  else
    start_admin(c, q->model_name, true, ov);
  FREE_REQUEST(in);
}

static void repository_model_unload(gs_grpc_call *c, ProtobufCMessage *in) {
  Inference__RepositoryModelUnloadRequest *q = (Inference__RepositoryModelUnloadRequest *)in;
  start_admin(c, q->model_name, false, NULL);
  FREE_REQUEST(in);
}

/* ---- inference -------------------------------------------------------------------------------- */

/* One inference: the call it answers, its message (whose raw tensors the
 * request reads in place) and the request. */
typedef struct infer_op {
  gs_work work; /* where it is handed to a worker thread */
  gs_grpc_call *call;
  Inference__ModelInferRequest *message;
  gs_infer_request request;
} infer_op;

static void infer_reply(infer_op *op) {
  gs_grpc_call *c = op->call;
  gs_infer_request *r = &op->request;
  if (r->status != 200) {
    gs_grpc_reply_infer_error(c, r->status, r->error, op->message->model_name, op->message->id);
  } else {
    char why[300];
    grpc_byte_buffer *b = gs_grpc_infer_encode(r, c->method->streaming, why, sizeof why);
    if (b)
      gs_grpc_reply_packed(c, b);
    else
      gs_grpc_reply_infer_error(c, 500, why, op->message->model_name, op->message->id);
  }
  gs_infer_request_clear(r);
  FREE_REQUEST(&op->message->base);
  free(op);
  gs_grpc_call_release(c);
}

static void on_batched(gs_infer_request *r, void *ctx) {
  (void)r;
  infer_reply(ctx);
}

static void on_inline(gs_infer_request *r, void *ctx) {
  (void)r;
  (void)ctx;
}

/* The reply is made before the model's use ends: it reads the version's
 * outputs. */
static void answer(infer_op *op) {
  gs_served_model *m = op->request.model;
  infer_reply(op);
  gs_served_release(m);
}

/* A model without dynamic batching, run on this thread. */
static void run_inline(infer_op *op) {
  op->request.done = on_inline;
  gs_batcher_run_inline(op->request.model, &op->request);
  answer(op);
}

/* On a worker thread. The model's use, taken on the polling thread, ends
 * here (a read hold of its rwlock: glibc's keeps no owner for readers). A
 * call that ended while it waited (the client left, the server stops) is
 * not run. */
static void run_handed_off(gs_work *w) {
  infer_op *op = (infer_op *)((char *)w - offsetof(infer_op, work));
  if (!gs_grpc_call_gone(op->call)) {
    run_inline(op);
    return;
  }
  op->request.status = 503;
  snprintf(op->request.error, sizeof op->request.error, "the call ended before its turn");
  answer(op);
}

static void model_infer(gs_grpc_call *c, ProtobufCMessage *in) {
  Inference__ModelInferRequest *q = (Inference__ModelInferRequest *)in;
  gs_served_version *v;
  bool taken;
  gs_served_model *m = use_model(c, in, true, q->model_name, q->model_version, &v, &taken);
  if (taken)
    return;
  infer_op *op = m ? calloc(1, sizeof *op) : NULL;
  if (!op) {
    if (m) {
      gs_served_release(m);
      gs_grpc_reply_error(c, 500, "out of memory");
    }
    FREE_REQUEST(in);
    return;
  }
  gs_grpc_call_hold(c);
  *op = (infer_op){.call = c, .message = q};
  gs_infer_request *r = &op->request;
  r->model = m;
  r->version = v;
  char why[600];
  int st = gs_grpc_infer_parse(q, c->received_bytes, r, why, sizeof why);
  if (st) {
    r->status = st;
    snprintf(r->error, sizeof r->error, "%s", why);
  } else if (!m->dynamic_batching) {
    /* Nothing to wait for: a short run goes on here, on the polling thread,
     * with no hand-off; a long one (or one whose length is not known yet)
     * goes to a worker thread, so that it holds up no other call. */
    op->work.run = run_handed_off;
    r->t_arrive = gs_now_ns(); /* a wait for a worker is its queue time */
    if (!gs_grpc_hand_off(c, &op->work, gs_batcher_inline_is_short(m)))
      run_inline(op);
    return;
  } else {
    r->done = on_batched;
    r->ctx = op;
    int rc = gs_batcher_submit(m->batcher, r);
    gs_served_release(m);
    if (rc == 0)
      return; /* op belongs to the batcher now */
    r->status = 503;
    snprintf(r->error, sizeof r->error, "%s", gs_error_detail());
    infer_reply(op);
    return;
  }
  gs_served_release(m);
  infer_reply(op);
}

/* ---- the table ---------------------------------------------------------------------------------- */

/* ModelStreamInfer, the one stream here, answers a failed request in the stream. */
#define METHOD(name, msg, fn, access, streaming)                                                  \
  {"/inference.GRPCInferenceService/" name, &inference__##msg##__descriptor, fn, access,          \
   streaming, streaming}

const gs_grpc_method gs_grpc_methods[] = {
    METHOD("ServerLive", server_live_request, server_live, GS_GRPC_OPEN, false),
    METHOD("ServerReady", server_ready_request, server_ready, GS_GRPC_OPEN, false),
    METHOD("ModelReady", model_ready_request, model_ready, GS_GRPC_READING, false),
    METHOD("ServerMetadata", server_metadata_request, server_metadata, GS_GRPC_READING, false),
    METHOD("ModelMetadata", model_metadata_request, model_metadata, GS_GRPC_READING, false),
    METHOD("ModelConfig", model_config_request, model_config, GS_GRPC_READING, false),
    METHOD("ModelStatistics", model_statistics_request, model_statistics, GS_GRPC_READING, false),
    METHOD("ModelInfer", model_infer_request, model_infer, GS_GRPC_READING, false),
    METHOD("ModelStreamInfer", model_infer_request, model_infer, GS_GRPC_READING, true),
    METHOD("RepositoryIndex", repository_index_request, repository_index, GS_GRPC_READING, false),
    METHOD("RepositoryModelLoad", repository_model_load_request, repository_model_load,
           GS_GRPC_ADMIN, false),
    METHOD("RepositoryModelUnload", repository_model_unload_request, repository_model_unload,
           GS_GRPC_ADMIN, false),
    {"/grpc.health.v1.Health/Check", &grpc__health__v1__health_check_request__descriptor,
     health_check, GS_GRPC_OPEN, false, false},
    {"/grpc.health.v1.Health/Watch", &grpc__health__v1__health_check_request__descriptor,
     health_watch, GS_GRPC_OPEN, true, false},
    {NULL, NULL, NULL, 0, false, false},
};

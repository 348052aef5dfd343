/* server.c - `gpusrv serve`: libmicrohttpd, the routes of the KServe v2
 * protocol, request bodies with a size limit, and a graceful stop on SIGINT
 * or SIGTERM (no new connections; requests in flight finish). */
#include "api/api.h"

#include "api/batcher.h"
#include "api/grpc_server.h"
#include "api/history.h"
#include "api/http_parse.h"
#include "api/jobs_api.h"
#include "api/kserve.h"
#include "api/metrics.h"
#include "api/tls.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/thread.h"
#include "base/units.h"
#include "engine/engine.h"

#include "dashboard_html.h" /* generated: gs_dashboard_html */

#include <arpa/inet.h>
#include <math.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef GS_VERSION
#define GS_VERSION "0.0.0-dev"
#endif

#define OPT(name, type, dflt, min, max, help, field) \
  {name, type, dflt, min, max, help, offsetof(gs_serve_settings, field)}
const gs_config_option gs_serve_options[] = {
    OPT("host", GS_CFG_STRING, "127.0.0.1", 0, 0, "Address to listen on", host),
    OPT("http-port", GS_CFG_INT, "8000", 1, 65535, "HTTP port", http_port),
    OPT("grpc-port", GS_CFG_INT, "8001", 0, 65535,
        "gRPC port (KServe v2's GRPCInferenceService, as Triton serves it); 0: no gRPC",
        grpc_port),
    OPT("model-repository", GS_CFG_STRING, "./models", 0, 0,
        "Directory of models (<name>/config.json, <name>/<version>/model.onnx)", model_repository),
    OPT("state-dir", GS_CFG_STRING, "./state", 0, 0, "Directory for the daemon's state",
        state_dir),
    OPT("max-request-bytes", GS_CFG_BYTES, "64M", 1024, (int64_t)1 << 34,
        "Largest request body (HTTP) or message (gRPC) accepted; larger ones get 413 "
        "(RESOURCE_EXHAUSTED over gRPC)", max_request_bytes),
    OPT("max-bodies-bytes", GS_CFG_BYTES, "256M", 1024, 1e15,
        "Request bodies all connections may hold at once; past it a request gets 503 with "
        "Retry-After (gRPC: the buffers of all calls, gRPC's resource quota)", max_bodies_bytes),
    OPT("max-connections-per-client", GS_CFG_INT, "1024", 1, 1 << 20,
        "Connections one client address may hold open", max_connections_per_client),
    OPT("http-threads", GS_CFG_INT, "4", 1, 256, "Threads serving HTTP connections",
        http_threads),
    OPT("grpc-pollers", GS_CFG_INT, "1", 1, 64,
        "Threads polling gRPC's completion queue (more cost hand-offs between them)",
        grpc_pollers),
    OPT("grpc-threads", GS_CFG_INT, "4", 0, 256,
        "Threads running gRPC inferences of models without dynamic batching whose mean run is "
        "100 us or more, or not yet known (0: all on the polling threads)", grpc_threads),
    OPT("drain-seconds", GS_CFG_INT, "30", 0, 3600,
        "On SIGINT/SIGTERM, how long requests in flight may take to finish", drain_seconds),
    OPT("model-memory-limit", GS_CFG_BYTES, "0", 0, (int64_t)1 << 50,
        "Bytes of each device's memory that model plans may book (0: all of it)",
        model_memory_limit),
    OPT("model-load-timeout", GS_CFG_REAL, "300", 0, 86400,
        "Seconds a model's load may take, warm-up included (checked between its steps); past "
        "it the model is UNAVAILABLE with the reason (0: no limit)", model_load_timeout),
    OPT("history-interval", GS_CFG_REAL, "5", 0.05, 3600,
        "Seconds between the samples of each device's telemetry the dashboard charts",
        history_interval),
    OPT("history-seconds", GS_CFG_REAL, "3600", 1, 7 * 86400,
        "How far back the dashboard's samples go (kept in memory; at most 20000 per device)",
        history_seconds),
    OPT("auth", GS_CFG_STRING, "auto", 0, 0,
        "Tokens for inference and reading: 'auto' (when listening beyond loopback), 'required' "
        "or 'none'; jobs, tenants and model loading always need one", auth),
    OPT("tls-cert", GS_CFG_STRING, "", 0, 0,
        "Certificate chain (PEM) to serve HTTPS with; read again on SIGHUP", tls_cert),
    OPT("tls-key", GS_CFG_STRING, "", 0, 0, "The certificate's private key (PEM)", tls_key),
    OPT("tls-client-ca", GS_CFG_STRING, "", 0, 0,
        "CA bundle (PEM): clients must present a certificate it signed (with --tls-cert)",
        tls_client_ca),
    OPT("insecure-listen", GS_CFG_BOOL, "false", 0, 0,
        "Listen beyond loopback without TLS (tokens and tensors travel in clear text)",
        insecure_listen),
    OPT("job-devices", GS_CFG_STRING, "", 0, 0,
        "Devices jobs may book: every device but the CPUs (empty), 'all', or ids such as "
        "cuda0,cuda1", job_devices),
    OPT("kill-grace-seconds", GS_CFG_INT, "10", 0, 3600,
        "A cancelled or timed-out job gets SIGTERM, then SIGKILL after this long",
        kill_grace_seconds),
    OPT("job-pids-max", GS_CFG_INT, "4096", 0, 1 << 22,
        "Most processes and threads one job may have (its cgroup's pid limit; 0: none)",
        job_pids_max),
    OPT("reset-state", GS_CFG_BOOL, "false", 0, 0,
        "Start even though state.db lost what the state directory shows (emptied, replaced, or "
        "older than its job directories): a new admin token where it has no tenants, new job ids "
        "past the directories on disk", reset_state),
    OPT("job-log-max", GS_CFG_BYTES, "100M", 0, 1e15,
        "Bytes each of a job's logs (stdout, stderr) may hold; the rest of its output is "
        "dropped, and the log says so (0: no limit)", job_log_max),
    OPT("job-retention", GS_CFG_STRING, "7d", 0, 0,
        "How long an ended job's directory (work files and logs; a Slurm job's log files) is "
        "kept, such as 7d or 12h; its record and accounting stay (0: kept for ever)",
        job_retention),
    OPT("job-default-cpus", GS_CFG_REAL, "1", 0.01, 1e6,
        "CPUs a job gets (limited and charged) when it names none; never more than its "
        "tenant's quota", job_default_cpus),
    OPT("job-default-mem", GS_CFG_BYTES, "0", 0, 1e18,
        "Memory a job gets (limited and charged) when it names none; 0: its tenant's quota, or "
        "no limit for a tenant without one", job_default_mem),
    OPT("allowed-images", GS_CFG_STRING, "", 0, 0,
        "Images jobs may run in (gpusrv submit --image): shell patterns, comma-separated, such "
        "as 'localhost/*,docker.io/pytorch/pytorch:*'; each must be in the tenant's user's local "
        "podman images, nothing is pulled ('': no containers)", allowed_images),
    OPT("cdi-spec", GS_CFG_STRING, "/etc/cdi/gpusrv.json", 0, 0,
        "CDI spec (JSON, in a directory podman reads: /etc/cdi or /var/run/cdi) naming the "
        "device nodes of each device; a container job gets those of its booked devices "
        "(gpusrv cdi generate writes one)", cdi_spec),
    OPT("container-host-network", GS_CFG_BOOL, "false", 0, 0,
        "A container job may ask for the host's network (\"network\": \"host\"); otherwise "
        "containers have none", container_host_network),
    OPT("pull-images", GS_CFG_BOOL, "false", 0, 0,
        "A container job's allowed image missing from its user's store is pulled when the job "
        "starts, through podman's own registry settings; otherwise it is refused at submit",
        pull_images),
    OPT("slurm-rest-url", GS_CFG_STRING, "", 0, 0,
        "slurmrestd's address, http://HOST:PORT or unix:/PATH: jobs on several nodes (gpusrv "
        "submit --nodes) are handed to Slurm there ('': none)", slurm_rest_url),
    OPT("slurm-jwt-key", GS_CFG_STRING, "/var/spool/slurmctld/jwt_hs256.key", 0, 0,
        "The cluster's JWT key (slurm.conf's AuthAltParameters=jwt_key=), with which each call "
        "to slurmrestd is signed for the job's Unix user; mode 600", slurm_jwt_key),
    OPT("slurm-accounts", GS_CFG_STRING, "", 0, 0,
        "Slurm accounts of tenants whose account is not named after them: "
        "'tenant=account,...'", slurm_accounts),
    OPT("slurm-create-accounts", GS_CFG_BOOL, "false", 0, 0,
        "Create each tenant's Slurm account, and its user's association in it, with sacctmgr "
        "before the tenant's first job on several nodes; the account's fair-share shares follow "
        "the tenant's weight (100 per unit)", slurm_create_accounts),
    OPT("preemption", GS_CFG_STRING, "off", 0, 0,
        "'requeue': stop lower-priority jobs (SIGTERM, then SIGKILL after kill-grace-seconds) "
        "when the head of the queue needs what they hold, and queue them again; 'off': never",
        preemption),
    {NULL, 0, NULL, 0, 0, NULL, 0},
};

typedef struct server {
  const gs_serve_settings *settings;
  gs_repository repo;
  gs_frontdesk *frontdesk;
  gs_tls *tls; /* NULL: plain HTTP */
  gs_history *history; /* the devices' telemetry over the last hour, for the dashboard */
  gs_grpc_server *grpc; /* NULL: --grpc-port 0 */
  bool reading_needs_token; /* inference and read-only routes, from --auth and --host */
  atomic_int in_flight;
  atomic_int api_workers; /* job-API requests running podman on threads of their own */
  atomic_llong body_bytes; /* what every request's body buffer holds, against max-bodies-bytes */
} server;

/* A request's body, gathered across the handler's calls; for inference, the
 * parsed request while it waits in the batcher, and its reply. */
typedef struct request {
  char *body;
  size_t len, cap;
  bool too_large;
  bool over_budget; /* the server's bodies in flight are at their limit: 503 */
  bool keep_body;   /* a route that reads a body; any other's is read and dropped */
  struct MHD_Connection *conn;
  bool queued;          /* suspended, waiting for the batcher */
  bool counted;         /* still counted in the server's in_flight */
  gs_infer_request infer;
  gs_http_reply reply;  /* filled by the batcher's thread before it resumes us */
  gs_principal who;     /* from the Authorization header, checked before the body */
  int denied;           /* 401 when the token is missing or wrong (the body is not kept) */
  char denied_why[200];
  /* Suspended until a model unloaded while idle has loaded again; routed
   * again once resumed. */
  gs_load_waiter waiter;
  bool awaiting_load;
} request;

/* libmicrohttpd's own messages (a client that hung up, a malformed request
 * line) go to the log at debug level: they are the clients' business. */
__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  if (!gs_log_enabled(GS_LOG_DEBUG))
    return;
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n && msg[n - 1] == '\n')
    msg[--n] = '\0';
  GS_LOGD("http", "%s", msg);
}

static volatile sig_atomic_t stop_requested, reload_requested;
static void on_signal(int sig) {
  if (sig == SIGHUP)
    reload_requested = 1;
  else
    stop_requested = 1;
}

/* ---- replies ------------------------------------------------------------------------- */

static enum MHD_Result send_reply(struct MHD_Connection *c, gs_http_reply *r) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_MUST_FREE);
  if (!resp) {
    gs_http_reply_free(r);
    return MHD_NO;
  }
  r->body = NULL; /* the response owns it now */
  MHD_add_response_header(resp, "Content-Type", r->content_type);
  if (r->header_len) {
    char n[32];
    snprintf(n, sizeof n, "%zu", r->header_len);
    MHD_add_response_header(resp, "Inference-Header-Content-Length", n);
  }
  if (r->retry_after > 0) {
    char n[16];
    snprintf(n, sizeof n, "%d", r->retry_after);
    MHD_add_response_header(resp, "Retry-After", n);
  }
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)r->status, resp);
  MHD_destroy_response(resp);
  return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, int status, const char *msg) {
  gs_http_reply r = {0};
  gs_http_reply_error(&r, status, msg);
  return send_reply(c, &r);
}

/* 503 with Retry-After: the server is busy, not the request wrong. */
static enum MHD_Result send_busy(struct MHD_Connection *c, const char *msg) {
  gs_http_reply r = {0};
  gs_http_reply_error(&r, 503, msg);
  r.retry_after = 1;
  return send_reply(c, &r);
}

/* A reply with no body. */
static void empty_reply(gs_http_reply *r, int status) {
  *r = (gs_http_reply){.status = status, .body = strdup(""), .len = 0};
  snprintf(r->content_type, sizeof r->content_type, "text/plain");
}

/* The dashboard: one page, its script inside, that reads the routes above
 * (src/api/dashboard.html, embedded at build time). */
static enum MHD_Result send_dashboard(struct MHD_Connection *c) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(
      strlen(gs_dashboard_html), (void *)gs_dashboard_html, MHD_RESPMEM_PERSISTENT);
  if (!resp)
    return MHD_NO;
  MHD_add_response_header(resp, "Content-Type", "text/html; charset=utf-8");
  MHD_add_response_header(resp, "Content-Security-Policy",
                          "default-src 'self'; script-src 'unsafe-inline'; "
                          "style-src 'unsafe-inline'");
  enum MHD_Result ret = MHD_queue_response(c, 200, resp);
  MHD_destroy_response(resp);
  return ret;
}

static enum MHD_Result send_empty(struct MHD_Connection *c, int status) {
  gs_http_reply r;
  empty_reply(&r, status);
  return send_reply(c, &r);
}

/* ---- routing --------------------------------------------------------------------------- */

/* From the batcher's thread: the reply is ready; wake the connection. */
static void on_infer_done(gs_infer_request *r, void *ctx) {
  request *req = ctx;
  gs_kserve_encode(r, &req->reply);
  gs_infer_request_clear(r);
  MHD_resume_connection(req->conn);
}

static void on_inline_done(gs_infer_request *r, void *ctx) {
  (void)r;
  (void)ctx;
}

/* A load or unload of the repository, on a thread of its own while the
 * connection is suspended (gs_repository_admin_async): a load can take
 * seconds, and an HTTP thread that waited for it would leave every other
 * connection it serves waiting too. */
static void admin_done(void *arg, int status, const char *message) {
  request *req = arg;
  if (status == 200)
    empty_reply(&req->reply, 200);
  else
    gs_http_reply_error(&req->reply, status, message);
  MHD_resume_connection(req->conn);
}

/* Between a request joining a model's load and its suspension, and its
 * resumption once the load has ended: the load cannot wake a connection that
 * is not suspended yet. */
static pthread_mutex_t load_wait_lock = PTHREAD_MUTEX_INITIALIZER;

/* From the loading thread: the model's load has ended; route it again. */
static void on_model_loaded(gs_load_waiter *w) {
  request *req = (request *)((char *)w - offsetof(request, waiter));
  pthread_mutex_lock(&load_wait_lock);
  MHD_resume_connection(req->conn);
  pthread_mutex_unlock(&load_wait_lock);
}

/* A model unloaded while idle (or loading again after that) is loaded for
 * this request, which waits for it, suspended: true with *ret set then, or
 * when the load would outlast the model's timeout (503 with Retry-After).
 * False where the model is in neither state. */
static bool wait_for_load(server *s, struct MHD_Connection *c, gs_served_model *m, request *req,
                          enum MHD_Result *ret) {
  int st = atomic_load(&m->state);
  if (st != GS_MODEL_UNLOADED_IDLE && !(st == GS_MODEL_LOADING && atomic_load(&m->demand_active)))
    return false;
  int retry_after = 1;
  req->conn = c;
  req->waiter.loaded = on_model_loaded;
  pthread_mutex_lock(&load_wait_lock);
  gs_wait_outcome o = gs_served_wait_load(&s->repo, m, &req->waiter, &retry_after);
  if (o == GS_WAIT_JOINED) {
    req->awaiting_load = true;
    MHD_suspend_connection(c);
  }
  pthread_mutex_unlock(&load_wait_lock);
  if (o == GS_WAIT_NONE)
    return false;
  if (o == GS_WAIT_TOO_SLOW) {
    char msg[400];
    snprintf(msg, sizeof msg, "model '%s' is loading again after being idle; its load takes "
             "longer than its default timeout, retry in %d s", m->name, retry_after);
    gs_http_reply r = {0};
    gs_http_reply_error(&r, 503, msg);
    r.retry_after = retry_after;
    *ret = send_reply(c, &r);
    return true;
  }
  *ret = MHD_YES;
  return true;
}

/* A load may bring its own configuration and files in its body
 * (load_override.h); an unload's body is not read. */
static enum MHD_Result start_admin_op(server *s, struct MHD_Connection *c, request *req,
                                      const char *name, bool load) {
  gs_load_override *ov = NULL;
  if (load && gs_load_override_from_json(req->body, req->len, &ov) < 0)
    return send_error(c, gs_error_code() == GS_ENOMEM ? 500 : 400, gs_error_detail());
  req->conn = c;
  req->queued = true;
  MHD_suspend_connection(c);
  if (gs_repository_admin_async(&s->repo, name, load, ov, admin_done, req) < 0)
    admin_done(req, 500, "out of memory");
  return MHD_YES;
}

/* A job-API request that runs podman (a submit that names an image, the
 * list of images) on a thread of its own while the connection is
 * suspended: podman can take seconds, and a tenant that holds its own
 * podman's lock must not hold the HTTP threads. At most MAX_API_WORKERS at
 * once; past that, 503 with Retry-After. */
#define MAX_API_WORKERS 16

typedef struct api_work {
  server *s;
  request *req;
  struct MHD_Connection *conn;
  gs_principal who;
  char method[8];
  char url[64];
} api_work;

static bool runs_podman(const char *method, const char *url, const request *req) {
  if (strcmp(url, "/api/v1/images") == 0)
    return strcmp(method, "GET") == 0;
  return strcmp(method, "POST") == 0 && strcmp(url, "/api/v1/jobs") == 0 && req->body &&
         memmem(req->body, req->len, "\"image\"", 7) != NULL;
}

static void *api_worker(void *arg) {
  api_work *w = arg;
  server *s = w->s;
  gs_jobs_query q = {0};
  request *req = w->req;
  if (!gs_jobs_api_route(s->frontdesk, &w->who, w->method, w->url, &q, req->body, req->len,
                         &req->reply))
    gs_http_reply_error(&req->reply, 404, "no such route");
  struct MHD_Connection *c = w->conn;
  free(w);
  MHD_resume_connection(c);
  atomic_fetch_sub(&s->api_workers, 1);
  return NULL;
}

static enum MHD_Result start_api_work(server *s, struct MHD_Connection *c, request *req,
                                      const char *method, const char *url,
                                      const gs_principal *who) {
  api_work *w = atomic_fetch_add(&s->api_workers, 1) < MAX_API_WORKERS ? malloc(sizeof *w) : NULL;
  if (!w || strlen(url) >= sizeof w->url || strlen(method) >= sizeof w->method) {
    atomic_fetch_sub(&s->api_workers, 1);
    free(w);
    gs_http_reply r = {0};
    gs_http_reply_error(&r, 503, "the server is busy with container image checks; retry shortly");
    r.retry_after = 1;
    return send_reply(c, &r);
  }
  *w = (api_work){.s = s, .req = req, .conn = c, .who = *who};
  snprintf(w->method, sizeof w->method, "%s", method);
  snprintf(w->url, sizeof w->url, "%s", url);
  req->conn = c;
  req->queued = true;
  MHD_suspend_connection(c);
  if (!gs_run_detached(api_worker, w))
    api_worker(w); /* no thread to spare: here, then */
  return MHD_YES;
}

/* Queues an inference and suspends the connection: no HTTP thread waits. */
static enum MHD_Result start_infer(struct MHD_Connection *c, gs_served_model *m,
                                   gs_served_version *v, request *req) {
  const char *hl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Inference-Header-Content-Length");
  size_t header_len = 0;
  if (hl && !gs_http_header_length(hl, &header_len))
    return send_error(c, 400, "Inference-Header-Content-Length is not a number");
  gs_http_reply err = {0};
  memset(&req->infer, 0, sizeof req->infer);
  const char *body = req->body ? req->body : "";
  int parsed = hl && header_len == 0
                   ? gs_kserve_parse_raw(m, v, body, req->len, &req->infer, &err)
                   : gs_kserve_parse(m, v, body, req->len, header_len, &req->infer, &err);
  if (parsed < 0)
    return send_reply(c, &err);
  if (!m->dynamic_batching) {
    /* Nothing to wait for: run it on this thread and answer at once. */
    req->infer.done = on_inline_done;
    gs_batcher_run_inline(m, &req->infer);
    gs_http_reply reply = {0};
    gs_kserve_encode(&req->infer, &reply);
    gs_infer_request_clear(&req->infer);
    return send_reply(c, &reply);
  }
  req->infer.done = on_infer_done;
  req->infer.ctx = req;
  req->conn = c;
  req->queued = true;
  MHD_suspend_connection(c);
  if (gs_batcher_submit(m->batcher, &req->infer) < 0) {
    gs_http_reply_error(&req->reply, 503, gs_error_detail());
    gs_infer_request_clear(&req->infer);
    MHD_resume_connection(c);
  }
  return MHD_YES;
}

static enum MHD_Result model_route(struct MHD_Connection *c, gs_served_model *m,
                                   const char *version, const char *action, bool get, bool post,
                                   request *req);

static bool loopback(const char *host) {
  return strncmp(host, "127.", 4) == 0;
}

/* Routes that change state or run code need a token whatever the setting;
 * the rest when the server listens beyond loopback (--auth auto: then every
 * client needs one, also a local one, which may be a proxy for others),
 * always (required) or never (none); health never. */
static bool needs_token(const server *s, const char *url) {
  if (strncmp(url, "/v2/health/", 11) == 0 || strcmp(url, "/") == 0) /* the dashboard's page */
    return false;
  if (strncmp(url, "/api/v1/jobs", 12) == 0 || strncmp(url, "/api/v1/tenants", 15) == 0 ||
      strncmp(url, "/api/v1/usage", 13) == 0 || strncmp(url, "/api/v1/images", 14) == 0 ||
      strncmp(url, "/v2/repository/models/", 22) == 0)
    return true;
  return s->reading_needs_token;
}

/* With --tls-client-ca, a client without a certificate that CA signed gets
 * 403 on every route, before its token or body is looked at. */
static void check_client_certificate(server *s, struct MHD_Connection *c, request *req) {
  if (!s->tls)
    return;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  if (!gs_tls_client_allowed(s->tls, ci ? ci->tls_session : NULL, req->denied_why,
                             sizeof req->denied_why))
    req->denied = 403;
}

/* Who is asking, from "Authorization: Bearer TOKEN", as soon as the
 * headers are in (before any body is kept). Sets req->denied when a token is
 * needed and missing, or given and wrong; health routes ignore the header. */
static void authenticate(server *s, struct MHD_Connection *c, const char *url, request *req) {
  memset(&req->who, 0, sizeof req->who);
  if (strncmp(url, "/v2/health/", 11) == 0)
    return;
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
  const char *why = NULL;
  char msg[200];
  if (!h) {
    if (needs_token(s, url))
      why = "this route needs a token (Authorization: Bearer TOKEN)";
  } else if (!gs_http_bearer_token(h)) {
    why = "the Authorization header must read 'Bearer TOKEN'";
  } else if (gs_frontdesk_authenticate(s->frontdesk, gs_http_bearer_token(h), &req->who) < 0) {
    snprintf(msg, sizeof msg, "token refused: %s", gs_error_detail());
    why = msg;
  }
  if (why) {
    req->denied = 401;
    snprintf(req->denied_why, sizeof req->denied_why, "%s", why);
  }
}

static enum MHD_Result route(server *s, struct MHD_Connection *c, const char *method,
                             const char *url, request *req) {
  bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
  gs_http_reply r = {0};
  const gs_principal who = req->who;
  if (req->denied)
    return send_error(c, req->denied, req->denied_why);
  if (strcmp(url, "/") == 0 && get)
    return send_dashboard(c);
  if (strcmp(url, "/api/v1/history") == 0 && get) {
    gs_http_reply_json(&r, 200, gs_history_json(s->history));
    return send_reply(c, &r);
  }
  if (strcmp(url, "/api/v1/events") == 0 && get) {
    gs_http_reply_json(&r, 200, gs_history_events_json(s->history));
    return send_reply(c, &r);
  }
  if (strncmp(url, "/api/v1/", 8) == 0) {
    gs_jobs_query q = {
        .all = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "all"),
        .tenant = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "tenant"),
        .since = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "since"),
        .stream = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "stream"),
        .offset = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "offset")};
    if (runs_podman(method, url, req))
      return start_api_work(s, c, req, method, url, &who);
    if (gs_jobs_api_route(s->frontdesk, &who, method, url, &q, req->body, req->len, &r))
      return send_reply(c, &r);
    return send_error(c, 404, "no such route");
  }
  if (strcmp(url, "/v2/health/live") == 0 && get)
    return send_empty(c, 200);
  if (strcmp(url, "/v2/health/ready") == 0 && get)
    return send_empty(c, gs_repository_settled(&s->repo) && !stop_requested ? 200 : 503);
  if (strncmp(url, "/v2/repository/models/", 22) == 0 && post) {
    char name[128];
    const char *p = url + 22, *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : 0;
    if (!slash || n == 0 || n >= sizeof name ||
        (strcmp(slash, "/load") != 0 && strcmp(slash, "/unload") != 0))
      return send_error(c, 404, "no such route");
    memcpy(name, p, n);
    name[n] = '\0';
    bool load = strcmp(slash, "/load") == 0;
    if (!who.admin)
      return send_error(c, 403, "loading and unloading models needs an admin token");
    return start_admin_op(s, c, req, name, load);
  }
  if (strcmp(url, "/v2") == 0 && get) {
    gs_http_reply_json(&r, 200, gs_kserve_server_metadata(GS_VERSION));
    return send_reply(c, &r);
  }
  if (strcmp(url, "/v2/repository/index") == 0 && post) {
    gs_http_reply_json(&r, 200, gs_kserve_repository_index(&s->repo));
    return send_reply(c, &r);
  }
  if (strcmp(url, "/metrics") == 0 && get) {
    gs_metrics_render(&s->repo, s->frontdesk, &r);
    return send_reply(c, &r);
  }
  if (strcmp(url, "/v2/models/stats") == 0 && get) {
    gs_http_reply_json(&r, 200, gs_kserve_stats(&s->repo));
    return send_reply(c, &r);
  }
  if (strncmp(url, "/v2/models/", 11) == 0) {
    char name[128], version[32], action[32], msg[300];
    if (!gs_http_model_url(url, name, sizeof name, version, sizeof version, action,
                           sizeof action))
      return send_error(c, 404, "no such route");
    gs_served_model *m = gs_repository_find(&s->repo, name);
    if (!m) {
      snprintf(msg, sizeof msg, "unknown model '%s'", name);
      return send_error(c, 404, msg);
    }
    /* A readiness probe or statistics do not load a model unloaded while
     * idle; the other routes do, and wait for it. */
    enum MHD_Result waited;
    bool loads = strcmp(action, "ready") != 0 && strcmp(action, "stats") != 0;
    if (loads && wait_for_load(s, c, m, req, &waited))
      return waited;
    /* Loading and unloading wait while requests use the model's versions;
     * a request never waits for them (an HTTP thread would be stuck). */
    if (!gs_served_try_use(m)) {
      if (strcmp(action, "ready") == 0 && get)
        return send_empty(c, 503);
      snprintf(msg, sizeof msg, "model '%s' is loading or unloading; retry shortly", name);
      return send_busy(c, msg);
    }
    enum MHD_Result ret = model_route(c, m, version, action, get, post, req);
    gs_served_release(m);
    return ret;
  }
  return send_error(c, 404, "no such route");
}

static enum MHD_Result model_route(struct MHD_Connection *c, gs_served_model *m,
                                   const char *version, const char *action, bool get, bool post,
                                   request *req) {
  gs_http_reply r = {0};
  bool ready_check = strcmp(action, "ready") == 0 && get;
  int status;
  char why[700];
  gs_served_version *v = gs_kserve_ready_version(m, version, &status, why, sizeof why);
  if (!v) {
    if (ready_check && status == 503) /* not ready: the answer, not an error */
      return send_empty(c, 503);
    if (status == 503 && atomic_load(&m->state) == GS_MODEL_LOADING)
      return send_busy(c, why);
    return send_error(c, status, why);
  }
  if (ready_check)
    return send_empty(c, 200);
  if (action[0] == '\0' && get)
    gs_http_reply_json(&r, 200, gs_kserve_model_metadata(m, v));
  else if (strcmp(action, "config") == 0 && get)
    gs_http_reply_json(&r, 200, gs_kserve_model_config(m, v));
  else if (strcmp(action, "stats") == 0 && get)
    gs_http_reply_json(&r, 200, gs_kserve_model_stats(m, v));
  else if (strcmp(action, "infer") == 0 && post)
    return start_infer(c, m, v, req);
  else
    return send_error(c, 404, "no such route");
  return send_reply(c, &r);
}

/* libmicrohttpd calls this first with no data, then with each piece of the
 * body, then once more with none: the request is answered on that last call. */
/* Whether a request's route reads its body: the POST routes of inference,
 * the repository and the job API, and the PUT of holds. Others' bodies are
 * read and dropped. */
static bool takes_body(const char *method, const char *url) {
  if (strcmp(method, "PUT") == 0)
    return strncmp(url, "/api/v1/holds/", 14) == 0;
  return strcmp(method, "POST") == 0 &&
         (strncmp(url, "/v2/models/", 11) == 0 || strncmp(url, "/v2/repository/", 15) == 0 ||
          strncmp(url, "/api/v1/", 8) == 0);
}

/* Appends upload bytes to the request's body, growing its buffer within the
 * server's budget for bodies in flight; past it the body is dropped and the
 * request marked for a 503. -1 when memory runs out. */
static int keep_upload(server *s, request *req, const char *data, size_t size) {
  if (req->len + size > req->cap) {
    size_t cap = req->cap ? req->cap : 4096;
    while (cap < req->len + size)
      cap *= 2;
    long long more = (long long)(cap - req->cap);
    if (atomic_fetch_add(&s->body_bytes, more) + more > s->settings->max_bodies_bytes) {
      atomic_fetch_sub(&s->body_bytes, more + (long long)req->cap);
      free(req->body);
      req->body = NULL;
      req->len = req->cap = 0;
      req->over_budget = true;
      return 0;
    }
    char *grown = realloc(req->body, cap);
    if (!grown) {
      atomic_fetch_sub(&s->body_bytes, more);
      return -1;
    }
    req->body = grown;
    req->cap = cap;
  }
  memcpy(req->body + req->len, data, size);
  req->len += size;
  return 0;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_size, void **con_cls) {
  (void)version;
  server *s = cls;
  request *req = *con_cls;
  if (!req) {
    if (!(req = calloc(1, sizeof *req)))
      return MHD_NO;
    *con_cls = req;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > (unsigned long long)s->settings->max_request_bytes)
      req->too_large = true;
    req->keep_body = takes_body(method, url);
    authenticate(s, c, url, req);
    check_client_certificate(s, c, req);
    return MHD_YES;
  }
  if (*upload_size) {
    if (!req->too_large && req->len + *upload_size > (size_t)s->settings->max_request_bytes)
      req->too_large = true;
    /* An unauthenticated body, one no route reads, and one past the limits
     * are read, not kept. */
    if (!req->too_large && !req->denied && req->keep_body && !req->over_budget &&
        keep_upload(s, req, upload_data, *upload_size) < 0)
      return MHD_NO;
    *upload_size = 0;
    return MHD_YES;
  }
  if (req->awaiting_load) { /* resumed once its model loaded: routed again */
    req->awaiting_load = false;
    return route(s, c, method, url, req);
  }
  if (req->queued) /* resumed by the batcher: the reply is ready */
    return send_reply(c, &req->reply);
  if (req->denied) /* who may not send anything learns that first, not its size */
    return send_error(c, req->denied, req->denied_why);
  if (req->over_budget) {
    char msg[200];
    snprintf(msg, sizeof msg, "the server holds as many request bodies as it may "
                              "(--max-bodies-bytes %lld); retry shortly",
             (long long)s->settings->max_bodies_bytes);
    return send_busy(c, msg);
  }
  if (req->too_large) {
    char msg[160];
    snprintf(msg, sizeof msg, "request body is larger than the limit of %lld bytes "
                              "(--max-request-bytes)", (long long)s->settings->max_request_bytes);
    return send_error(c, 413, msg);
  }
  /* In flight from here until its reply has been sent (completed() below),
   * not merely queued: the drain on SIGTERM waits for these, and stopping
   * the daemon with a reply still unsent would drop it. (A client that
   * hangs up mid-upload never gets here, so it cannot hold up the drain.) */
  atomic_fetch_add(&s->in_flight, 1);
  req->counted = true;
  return route(s, c, method, url, req);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
  (void)c;
  (void)toe;
  server *s = cls;
  request *req = *con_cls;
  if (!req)
    return;
  /* Its reply is sent, or its client left: either way it is finished. */
  if (req->counted)
    atomic_fetch_sub(&s->in_flight, 1);
  atomic_fetch_sub(&s->body_bytes, (long long)req->cap);
  free(req->body);
  gs_http_reply_free(&req->reply);
  free(req);
  *con_cls = NULL;
}

/* Everything gs_serve() opened, closed in reverse; safe on a half-open one. */
static void close_all(server *s, gs_ledger *ledger, bool repo_open) {
  gs_history_stop(s->history);
  gs_frontdesk_close(s->frontdesk);
  gs_tls_free(s->tls);
  if (repo_open)
    gs_repository_close(&s->repo);
  gs_ledger_free(ledger);
  gs_hal_shutdown();
}

/* Beyond loopback, HTTP in clear text needs saying so (--insecure-listen);
 * TLS needs both of its files. */
static int check_listen_settings(const gs_serve_settings *st) {
  if (!st->tls_cert[0] != !st->tls_key[0])
    return gs_error(GS_EINVAL, "--tls-cert and --tls-key go together: give both or neither");
  if (st->tls_client_ca[0] && !st->tls_cert[0])
    return gs_error(GS_EINVAL, "--tls-client-ca needs --tls-cert and --tls-key");
  if (loopback(st->host) || st->tls_cert[0])
    return GS_OK;
  if (!st->insecure_listen)
    return gs_error(GS_EPERM, "refusing to listen on %s without TLS: tokens and tensors would "
                              "cross the network in clear text; give --tls-cert and --tls-key, "
                              "or --insecure-listen to accept that", st->host);
  GS_LOGW("api", "listening on %s without TLS (--insecure-listen): tokens and tensors cross "
                 "the network in clear text", st->host);
  fprintf(stderr, "gpusrv: warning: listening on %s without TLS (--insecure-listen)\n", st->host);
  return GS_OK;
}

/* SIGHUP: the certificate, key and client CA are read again; a failure
 * keeps the ones in use. */
static void reload_tls(server *s) {
  if (!s->tls) {
    GS_LOGI("api", "SIGHUP: nothing to reload (no --tls-cert)");
    return;
  }
  /* HTTP's reload checks that the files go together (gRPC's does not): gRPC
   * takes them only once they passed. */
  if (gs_tls_reload(s->tls) < 0)
    GS_LOGE("api", "SIGHUP: TLS files not reloaded, the previous ones stay: %s",
            gs_error_detail());
  else if (s->grpc && gs_grpc_reload_tls(s->grpc) < 0)
    GS_LOGE("api", "SIGHUP: HTTPS serves the new TLS files, but gRPC could not read them again "
                   "and keeps its previous ones: %s", gs_error_detail());
  else
    GS_LOGI("api", "SIGHUP: TLS certificate and key reloaded");
}

/* libmicrohttpd's daemon on the server's address, with TLS where it has it. */
static struct MHD_Daemon *start_http(server *s, struct sockaddr_in *addr) {
  const gs_serve_settings *st = s->settings;
  /* poll(), not epoll: under a burst of a thousand connections, now and
   * then exactly 128 of them sat out the 60 s connection timeout and were
   * closed unanswered (the thousand-connections test). As we read
   * libmicrohttpd 0.9.75's MHD_epoll, a full batch of 128 events makes it
   * wait again, with the whole timeout, before serving them; poll() has no
   * such batch. (On an idle machine both pass 50 bursts in a row: the stalls
   * came under make test's load.) Each pool thread polls its own share. */
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                   MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
  struct MHD_OptionItem opts[16] = {
      {MHD_OPTION_SOCK_ADDR, 0, addr},
      {MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)st->http_threads, NULL},
      {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, s},
      {MHD_OPTION_CONNECTION_TIMEOUT, 60, NULL},
      {MHD_OPTION_CONNECTION_LIMIT, 2000, NULL},
      {MHD_OPTION_PER_IP_CONNECTION_LIMIT, (intptr_t)st->max_connections_per_client, NULL},
      {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mhd_log, NULL},
  };
  int n = 7;
  if (s->tls) {
    flags |= MHD_USE_TLS;
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0,
                                        gs_tls_cert_callback()};
    /* A trust list makes libmicrohttpd ask each client for its certificate;
     * check_client_certificate() decides. */
    if (gs_tls_client_ca_pem(s->tls))
      opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0,
                                          (void *)gs_tls_client_ca_pem(s->tls)};
  }
  opts[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
  return MHD_start_daemon(flags, (uint16_t)st->http_port, NULL, NULL, handle, s,
                          MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
}

/* The gRPC endpoint beside HTTP, on the same host, limits, tokens and TLS
 * files (none with --grpc-port 0). */
static int start_grpc(server *s) {
  const gs_serve_settings *st = s->settings;
  if (st->grpc_port == 0)
    return GS_OK;
  if (st->grpc_port == st->http_port)
    return gs_error(GS_EINVAL, "--grpc-port and --http-port are both %lld",
                    (long long)st->http_port);
  gs_grpc_settings g = {.host = st->host, .port = (int)st->grpc_port,
                        .pollers = (int)st->grpc_pollers,
                        .workers = (int)st->grpc_threads,
                        .max_message_bytes = st->max_request_bytes,
                        .max_buffered_bytes = st->max_bodies_bytes, .repo = &s->repo,
                        .frontdesk = s->frontdesk, .reading_needs_token = s->reading_needs_token,
                        .version = GS_VERSION, .tls_cert = st->tls_cert, .tls_key = st->tls_key,
                        .tls_client_ca = st->tls_client_ca};
  return gs_grpc_start(&g, &s->grpc);
}

int gs_serve(const gs_serve_settings *settings) {
  /* Whatever the daemon creates (state, tokens, job directories before
   * their chmod) is its own unless it says otherwise; jobs get 022 from
   * their supervisor. */
  umask(077);
  server s = {.settings = settings};
  atomic_init(&s.in_flight, 0);
  atomic_init(&s.api_workers, 0);
  atomic_init(&s.body_bytes, 0);
  bool required = strcmp(settings->auth, "required") == 0;
  if (!required && strcmp(settings->auth, "auto") != 0 && strcmp(settings->auth, "none") != 0)
    return gs_error(GS_EINVAL, "--auth is 'auto', 'required' or 'none', not '%s'",
                    settings->auth);
  s.reading_needs_token =
      required || (strcmp(settings->auth, "auto") == 0 && !loopback(settings->host));
  /* SIGHUP's default would kill the daemon: it is ours from the start. */
  struct sigaction hup = {.sa_handler = on_signal};
  sigemptyset(&hup.sa_mask);
  sigaction(SIGHUP, &hup, NULL);
  int rc = check_listen_settings(settings);
  if (rc < 0)
    return rc;
  /* A body's buffer grows by doubling: the largest request must fit the budget alone. */
  long long largest = 4096;
  while (largest < settings->max_request_bytes)
    largest *= 2;
  if (settings->max_bodies_bytes < largest)
    return gs_error(GS_EINVAL, "--max-bodies-bytes %lld cannot hold one request of "
                               "--max-request-bytes %lld (its buffer takes %lld)",
                    (long long)settings->max_bodies_bytes,
                    (long long)settings->max_request_bytes, largest);
  if (strcmp(settings->preemption, "off") != 0 && strcmp(settings->preemption, "requeue") != 0)
    return gs_error(GS_EINVAL, "--preemption is 'off' or 'requeue', not '%s'",
                    settings->preemption);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)settings->http_port)};
  if (inet_pton(AF_INET, settings->host, &addr.sin_addr) != 1)
    return gs_error(GS_EINVAL, "--host %s is not an IPv4 address", settings->host);
  /* The TLS files are read before the devices start: a mistake there is
   * reported at once. */
  if (settings->tls_cert[0] && !MHD_is_feature_supported(MHD_FEATURE_TLS))
    return gs_error(GS_ENOTSUP, "this libmicrohttpd was built without TLS: --tls-cert cannot "
                                "be served");
  if (settings->tls_cert[0] &&
      gs_tls_open(settings->tls_cert, settings->tls_key, settings->tls_client_ca, &s.tls) < 0)
    return gs_error_code();
  if (gs_hal_init() < 0 || gs_engine_init() < 0) {
    gs_tls_free(s.tls);
    return GS_EDEVICE;
  }
  gs_ledger *ledger = NULL;
  rc = gs_ledger_create(&ledger);
  for (int d = 0; rc == 0 && d < gs_hal_device_count(); d++)
    if (settings->model_memory_limit > 0 &&
        (uint64_t)settings->model_memory_limit < gs_ledger_capacity(ledger, gs_hal_device(d)))
      gs_ledger_set_capacity(ledger, gs_hal_device(d), (uint64_t)settings->model_memory_limit);
  gs_frontdesk_settings fs = {.ledger = ledger, .kill_grace_s = (int)settings->kill_grace_seconds,
                              .job_pids_max = settings->job_pids_max,
                              .preemption = strcmp(settings->preemption, "requeue") == 0,
                              .reset_state = settings->reset_state,
                              .job_log_max = (uint64_t)settings->job_log_max,

                              .job_default_cpus = settings->job_default_cpus,
                              .job_default_mem = (uint64_t)settings->job_default_mem};
  snprintf(fs.state_dir, sizeof fs.state_dir, "%s", settings->state_dir);
  if (strcmp(settings->job_retention, "0") != 0 &&
      gs_parse_duration(settings->job_retention, &fs.job_retention_s) < 0)
    rc = gs_error(GS_EINVAL, "--job-retention: '%s' is not a duration (such as 7d, 12h or 0)",
                  settings->job_retention);
  snprintf(fs.job_devices, sizeof fs.job_devices, "%s", settings->job_devices);
  snprintf(fs.allowed_images, sizeof fs.allowed_images, "%s", settings->allowed_images);
  snprintf(fs.cdi_spec, sizeof fs.cdi_spec, "%s", settings->cdi_spec);
  snprintf(fs.slurm_rest_url, sizeof fs.slurm_rest_url, "%s", settings->slurm_rest_url);
  snprintf(fs.slurm_jwt_key, sizeof fs.slurm_jwt_key, "%s", settings->slurm_jwt_key);
  snprintf(fs.slurm_accounts, sizeof fs.slurm_accounts, "%s", settings->slurm_accounts);
  fs.slurm_create_accounts = settings->slurm_create_accounts;
  fs.container_host_network = settings->container_host_network;
  fs.pull_images = settings->pull_images;
  if (rc == 0)
    rc = gs_frontdesk_open(&fs, &s.frontdesk);
  if (rc == 0 && s.reading_needs_token && gs_frontdesk_token_count(s.frontdesk) == 0)
    rc = gs_error(GS_EPERM, "refusing to listen on %s without tokens configured (gpusrv tenant "
                            "add)", settings->host);
  if (rc < 0) {
    close_all(&s, ledger, false);
    return rc;
  }
  if (gs_frontdesk_admin_token_path(s.frontdesk)[0])
    fprintf(stderr, "gpusrv: first start: the admin token is in %s (readable by this user only)\n",
            gs_frontdesk_admin_token_path(s.frontdesk));
  rc = gs_repository_open(&s.repo, settings->model_repository, ledger,
                          settings->model_load_timeout);
  if (rc < 0) {
    close_all(&s, ledger, false);
    return rc;
  }
  double keep = ceil(settings->history_seconds / settings->history_interval);
  rc = gs_history_start(settings->history_interval, keep > 20000 ? 20000 : (int)keep, &s.history);
  if (rc < 0) {
    close_all(&s, ledger, true);
    return rc;
  }
  /* Before the port opens: a SIGTERM sent as soon as it answers (a test, a
   * supervisor) stops the server cleanly instead of killing it. */
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  /* Again: a library the backends load may have put a handler of its own
   * in front of ours, one that sets the others back to their defaults. */
  sigaction(SIGHUP, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  struct MHD_Daemon *d = start_http(&s, &addr);
  if (!d) {
    close_all(&s, ledger, true);
    return gs_error(GS_EIO, "cannot listen on %s:%lld (port in use?)", settings->host,
                    (long long)settings->http_port);
  }
  if (start_grpc(&s) < 0) {
    rc = gs_error_code();
    MHD_stop_daemon(d);
    close_all(&s, ledger, true);
    return rc;
  }
  const char *scheme = s.tls ? "https" : "http";
  char grpc_note[300] = "";
  if (s.grpc)
    snprintf(grpc_note, sizeof grpc_note, " and gRPC%s on %s:%lld", s.tls ? " (TLS)" : "",
             settings->host, (long long)settings->grpc_port);
  GS_LOGI("api", "listening on %s://%s:%lld%s", scheme, settings->host,
          (long long)settings->http_port, grpc_note);
  fprintf(stderr, "gpusrv: serving %d model(s) from %s on %s://%s:%lld%s\n",
          atomic_load(&s.repo.n_models), settings->model_repository, scheme, settings->host,
          (long long)settings->http_port, grpc_note);
  while (!stop_requested) {
    gs_sleep_ns(50 * 1000 * 1000);
    if (reload_requested) {
      reload_requested = 0;
      reload_tls(&s);
    }
  }
  /* Stop accepting, let requests in flight finish, then stop. Jobs keep
   * running; the next start adopts them. */
  MHD_quiesce_daemon(d);
  gs_grpc_quiesce(s.grpc);
  uint64_t deadline = gs_now_ns() + (uint64_t)settings->drain_seconds * 1000000000u;
  while (atomic_load(&s.in_flight) + gs_grpc_in_flight(s.grpc) > 0 && gs_now_ns() < deadline)
    gs_sleep_ns(10 * 1000 * 1000);
  if (atomic_load(&s.in_flight) + gs_grpc_in_flight(s.grpc) > 0)
    GS_LOGW("api", "%d request(s) and %d gRPC call(s) still in flight after %lld s; stopping "
                   "anyway", atomic_load(&s.in_flight), gs_grpc_in_flight(s.grpc),
            (long long)settings->drain_seconds);
  gs_grpc_stop(s.grpc); /* what is left is cancelled */
  gs_repository_admin_wait(&s.repo);
  while (atomic_load(&s.api_workers) > 0) /* podman's own limit ends them */
    gs_sleep_ns(10 * 1000 * 1000);
  MHD_stop_daemon(d);
  close_all(&s, ledger, true);
  fprintf(stderr, "gpusrv: stopped\n");
  return GS_OK;
}

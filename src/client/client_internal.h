/* client_internal.h - what the client library's files share: the handle,
 * one HTTP exchange with the daemon, and the per-thread last error. */
#ifndef GS_CLIENT_INTERNAL_H
#define GS_CLIENT_INTERNAL_H

#include "gpusrv/client.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#define GS_CLIENT_IDLE_MAX 16 /* connections kept open between calls */
/* A reply's JSON header longer than this is refused (a broken reply). */
#define GS_CLIENT_MAX_HEADER ((size_t)64 << 20)
/* Calls other than inference and log streams give up after this long. */
#define GS_CLIENT_CALL_TIMEOUT_MS 60000L

struct gs_client {
  char url[1024]; /* without a trailing slash */
  char auth[1100]; /* "Authorization: Bearer ..." or "" */
  /* For https:// (libcurl): the CA bundle that signed the daemon's
   * certificate, and this client's own certificate and key; "" for none. */
  char ca_file[1024], cert_file[1024], key_file[1024];
  pthread_mutex_t lock;
  /* http:// goes over the plain transport (transport_plain.c): host, port,
   * the URL's path prefix, and idle keep-alive sockets. Other schemes go
   * through libcurl (transport_curl.c), with idle easy handles. */
  bool plain;
  char host[256], port[16], prefix[512];
  int idle_fd[GS_CLIENT_IDLE_MAX];
  int n_idle_fd;
  void *idle[GS_CLIENT_IDLE_MAX]; /* libcurl easy handles, each with its open connection */
  int n_idle;
};

/* A part of a request body, sent from where it lies. */
typedef struct client_segment {
  const char *data;
  size_t len;
} client_segment;

/* One request and its answer. By default the answer's body is collected in
 * body/len (NUL-terminated); with `sink` set, it goes there as it arrives
 * (a 0 return from the sink, other than for len 0, aborts the transfer). */
typedef struct client_exchange {
  const char *method, *path; /* path with its query, "/v2/..." */
  const client_segment *segments;
  int n_segments;
  size_t infer_header_len; /* request's Inference-Header-Content-Length (0: none) */
  size_t (*sink)(const char *data, size_t len, void *ctx);
  void *sink_ctx;
  int sink_error;   /* set by a sink that stops the transfer, its message recorded */
  long timeout_ms;  /* the whole exchange; 0: none */
  /* the answer */
  long status;
  bool has_infer_header_len;
  size_t reply_header_len;
  char *body;
  size_t len;
  bool failed_alloc;
} client_exchange;

/* What both transports do with the answer: a header line (for
 * Inference-Header-Content-Length), and body bytes (to the sink for a 2xx
 * answer, else collected); the latter returns how many it took (fewer:
 * stop the transfer). x->status must be set before the body comes. */
void client_on_header(client_exchange *x, const char *line, size_t len);
size_t client_on_body(client_exchange *x, const char *data, size_t len);
/* The request's total body size. */
size_t client_body_size(const client_exchange *x);

/* The transports: one exchange each (as client_perform), and closing what
 * a client keeps of them. */
int client_perform_plain(gs_client *c, client_exchange *x);
void client_plain_close(gs_client *c);
int client_perform_curl(gs_client *c, client_exchange *x);
void client_curl_close(gs_client *c);

/* Sends the request and waits for the whole answer. GS_OK once an answer
 * came (any status: see client_status_error), GS_EIO if the daemon could
 * not be reached or the transfer broke, GS_ENOMEM. The caller frees
 * x->body. */
int client_perform(gs_client *c, client_exchange *x);
/* For an answer that is not 2xx: the code its status maps to, with the
 * daemon's {"error": ...} message recorded as the last error. GS_OK for 2xx. */
int client_status_error(const gs_client *c, const client_exchange *x, const char *what);
/* Records the calling thread's last error on c and returns code. */
int client_fail(const gs_client *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A path segment with every byte outside [A-Za-z0-9._~-] percent-encoded. */
void client_escape(const char *in, char *out, size_t cap);

#endif

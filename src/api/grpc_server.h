/* grpc_server.h - KServe v2 over gRPC (inference.GRPCInferenceService, the
 * service tritonclient.grpc and perf_analyzer -i grpc speak), on gRPC's C
 * core, beside the HTTP server and over the same repository, batchers,
 * statistics and tokens. */
#ifndef GS_API_GRPC_SERVER_H
#define GS_API_GRPC_SERVER_H

#include "api/repository.h"
#include "sched/sched.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct gs_grpc_server gs_grpc_server;

typedef struct gs_grpc_settings {
  const char *host; /* an IPv4 address */
  int port;
  /* Threads polling the completion queue: each event that passes from one
   * poller to another costs gRPC's core a hand-off, so one is the fastest
   * where it keeps up. */
  int pollers;
  /* Threads running inferences too long to run on a poller in passing
   * (gs_grpc_hand_off); 0: every inference runs on its poller. */
  int workers;
  int64_t max_message_bytes;   /* a larger request gets RESOURCE_EXHAUSTED */
  int64_t max_buffered_bytes;  /* what all calls' buffers may hold (gRPC's resource quota) */
  gs_repository *repo;
  gs_frontdesk *frontdesk;
  bool reading_needs_token;    /* as for HTTP: inference and reading need a bearer token */
  const char *version;         /* the server's, for ServerMetadata */
  /* PEM files; tls_cert "" for plain HTTP/2. */
  const char *tls_cert, *tls_key, *tls_client_ca;
} gs_grpc_settings;

/* Listens and serves on threads of its own. Returns 0 with *out, or an
 * error (port taken, TLS files unreadable). The settings' pointers must
 * outlive the server. */
int gs_grpc_start(const gs_grpc_settings *settings, gs_grpc_server **out);
/* Reads the TLS certificate, key and client CA files again (SIGHUP); new
 * connections get them, open ones keep theirs. Returns 0 (also without
 * TLS), or an error, the files in use staying. */
int gs_grpc_reload_tls(gs_grpc_server *g);
/* Takes no new calls; those in progress go on. */
void gs_grpc_quiesce(gs_grpc_server *g);
/* Calls in progress (streams included). */
int gs_grpc_in_flight(gs_grpc_server *g);
/* Cancels what is left, waits for every call's end and frees the server.
 * NULL is a no-op. */
void gs_grpc_stop(gs_grpc_server *g);

#endif

/* kserve.h - the KServe v2 / Open Inference Protocol: replies for the
 * metadata, configuration and inference routes (server.c routes to them). */
#ifndef GS_API_KSERVE_H
#define GS_API_KSERVE_H

#include "api/infer_request.h"

#include <jansson.h>
#include <stddef.h>

/* A reply: status, body (malloc'd, owned), and for the binary tensor
 * extension the length of the JSON part (0 when all of it is JSON). */
typedef struct gs_http_reply {
  int status;
  char *body;
  size_t len;
  size_t header_len;
  char content_type[64];
  int retry_after; /* seconds, sent as Retry-After when > 0 (a busy server's 503) */
} gs_http_reply;

void gs_http_reply_free(gs_http_reply *r);
/* `j` (a reference the reply takes) as the JSON body, with `status`. */
int gs_http_reply_json(gs_http_reply *r, int status, json_t *j);
/* {"error": message} with `status`. */
int gs_http_reply_error(gs_http_reply *r, int status, const char *message);

/* POST /v2/repository/index: every model with its state (and why not ready). */
int gs_kserve_repository_index(gs_repository *repo, gs_http_reply *r);
int gs_kserve_server_metadata(gs_http_reply *r, const char *version);
int gs_kserve_model_metadata(gs_served_model *m, gs_served_version *v, gs_http_reply *r);
int gs_kserve_model_config(gs_served_model *m, gs_served_version *v, gs_http_reply *r);
/* GET /v2/models/NAME[/versions/V]/stats: Triton's statistics extension
 * (the caller holds the model's use lock). */
int gs_kserve_model_stats(gs_served_model *m, gs_served_version *v, gs_http_reply *r);
/* GET /v2/models/stats: every ready model's. */
int gs_kserve_stats(gs_repository *repo, gs_http_reply *r);

/* POST .../infer, first half: parses the body into r (zeroed by the
 * caller). `header_len` is Inference-Header-Content-Length (0: all JSON).
 * Binary inputs are read in place: the body must outlive r. A client
 * mistake fills err (400, naming the input and what was expected). */
int gs_kserve_parse(gs_served_model *m, gs_served_version *v, const char *body, size_t len,
                    size_t header_len, gs_infer_request *r, gs_http_reply *err);
/* The raw single-input form (Inference-Header-Content-Length: 0): the body
 * is the one input's binary data, its shape the model's (one row when the
 * model batches); every output goes back as binary data. */
int gs_kserve_parse_raw(gs_served_model *m, gs_served_version *v, const char *body, size_t len,
                        gs_infer_request *r, gs_http_reply *err);
/* Second half, once the batcher has finished r: its reply. */
int gs_kserve_encode(const gs_infer_request *r, gs_http_reply *out);

#endif

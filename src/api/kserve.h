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

/* The version `version` ("": the highest) of model m, whose use share the
 * caller holds, when it can serve requests; otherwise NULL, with the HTTP
 * status (503 while it loads, is unloaded or is unavailable; 404 for no
 * such version) and the reason in `why`. */
gs_served_version *gs_kserve_ready_version(gs_served_model *m, const char *version, int *status,
                                           char *why, size_t whylen);

/* The protocol's replies as JSON, for HTTP to send as they are and for
 * gRPC to encode as the messages of the same names (pb_json.h). Each returns
 * a new reference (NULL only when memory runs out). */
/* POST /v2/repository/index: every model with its state (and why not ready):
 * an array of RepositoryIndexResponse.ModelIndex. */
json_t *gs_kserve_repository_index(gs_repository *repo);
json_t *gs_kserve_server_metadata(const char *version);
json_t *gs_kserve_model_metadata(gs_served_model *m, gs_served_version *v);
/* ModelConfig, as Triton writes it. */
json_t *gs_kserve_model_config(gs_served_model *m, gs_served_version *v);
/* GET /v2/models/NAME[/versions/V]/stats: Triton's statistics extension, a
 * ModelStatisticsResponse (the caller holds the model's use share). */
json_t *gs_kserve_model_stats(gs_served_model *m, gs_served_version *v);
/* GET /v2/models/stats: every ready model's. */
json_t *gs_kserve_stats(gs_repository *repo);

/* POST .../infer, first half: parses the body into r (zeroed by the
 * caller). `header_len` is Inference-Header-Content-Length (0: all JSON).
 * Binary inputs are read in place: the body must outlive r. A client
 * mistake fills err (400, naming the input and what was expected). */
int gs_kserve_parse(gs_served_model *m, gs_served_version *v, const char *body, size_t len,
                    size_t header_len, gs_infer_request *r, gs_http_reply *err);
/* One input a client names, checked against the model r is for (r->model
 * and r->version set): its name, datatype and shape (rank dims; a rank of
 * -1 for none given). Returns its index in model order, with r->shapes[]
 * and r->batch set (`first`: the first input of the request); or -1 with
 * `why` filled. `count` receives its number of values, which must not pass
 * max_values (the bytes of the message that carries it). */
int gs_kserve_check_input(gs_infer_request *r, const char *name, const char *datatype,
                          const int64_t *dims, int rank, bool first, size_t max_values,
                          int64_t *count, char *why, size_t whylen);
/* A request parameter gpusrv acts on, "priority" or "timeout" (is_int: the
 * value was an integer), set in r; other keys are ignored. Returns 0, or -1
 * with `why` filled for a value out of range. */
int gs_kserve_apply_parameter(gs_infer_request *r, const char *key, bool is_int, int64_t value,
                              char *why, size_t whylen);
/* The index of output `name` (NULL: none given) of r's model; or -1 with
 * `why` filled. */
int gs_kserve_output_index(const gs_infer_request *r, const char *name, char *why,
                           size_t whylen);
/* The raw single-input form (Inference-Header-Content-Length: 0): the body
 * is the one input's binary data, its shape the model's (one row when the
 * model batches); every output goes back as binary data. */
int gs_kserve_parse_raw(gs_served_model *m, gs_served_version *v, const char *body, size_t len,
                        gs_infer_request *r, gs_http_reply *err);
/* Second half, once the batcher has finished r: its reply. */
int gs_kserve_encode(const gs_infer_request *r, gs_http_reply *out);

#endif

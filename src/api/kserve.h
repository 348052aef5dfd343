/* kserve.h - the KServe v2 / Open Inference Protocol: replies for the
 * metadata, configuration and inference routes (server.c routes to them). */
#ifndef GS_API_KSERVE_H
#define GS_API_KSERVE_H

#include "api/repository.h"

#include <stddef.h>

/* A reply: status, body (malloc'd, owned), and for the binary tensor
 * extension the length of the JSON part (0 when all of it is JSON). */
typedef struct gs_http_reply {
  int status;
  char *body;
  size_t len;
  size_t header_len;
  char content_type[64];
} gs_http_reply;

void gs_http_reply_free(gs_http_reply *r);
/* {"error": message} with `status`. */
int gs_http_reply_error(gs_http_reply *r, int status, const char *message);

const char *gs_kserve_dtype_name(gs_dtype dt);
int gs_kserve_server_metadata(gs_http_reply *r, const char *version);
int gs_kserve_model_metadata(gs_served_model *m, gs_served_version *v, gs_http_reply *r);
int gs_kserve_model_config(gs_served_model *m, gs_served_version *v, gs_http_reply *r);
/* POST .../infer: `header_len` is Inference-Header-Content-Length (0: all
 * JSON). Every client mistake is a 400 naming the input and what was
 * expected; the reply is always filled. */
int gs_kserve_infer(gs_served_model *m, gs_served_version *v, const char *body, size_t len,
                    size_t header_len, gs_http_reply *r);

#endif

/* http.h - the CLI's HTTP requests to a running daemon (libcurl), with the
 * --url/GPUSRV_URL and --token/GPUSRV_TOKEN conventions of DESIGN.md. The
 * C client library (a later issue) will take this over. */
#ifndef GS_CLI_HTTP_H
#define GS_CLI_HTTP_H

#include <jansson.h>
#include <stddef.h>

typedef struct gs_http_response {
  long status;
  char *body; /* NUL-terminated; free() */
  size_t len;
  size_t header_len; /* Inference-Header-Content-Length, 0 if absent */
} gs_http_response;

/* The daemon's URL: the flag, else GPUSRV_URL, else http://127.0.0.1:8000. */
const char *gs_cli_url(const char *flag);
/* One request; body may be NULL (GET). Returns 0 with a response (any HTTP
 * status), or a GS_E code when the daemon cannot be reached (message says). */
int gs_cli_http(const char *method, const char *url, const char *path, const char *token,
                const char *body, size_t body_len, size_t header_len, gs_http_response *out);
/* The server's {"error": "..."} message, or the status line. */
const char *gs_cli_http_error(const gs_http_response *r, char *buf, size_t cap);

/* One JSON request to the daemon (body may be NULL). On success returns 0
 * with the JSON answer in *out when out is not NULL (the caller decrefs
 * it); otherwise prints "gpusrv: WHAT: why" and returns 1 (GS_EXIT_FAILED). */
int gs_cli_call_json(const char *what, const char *url, const char *token, const char *method,
                     const char *path, json_t *body, json_t **out);

#endif

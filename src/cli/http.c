/* http.c - the CLI's HTTP requests, through libcurl. */
#include "cli/http.h"

#include "base/error.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *gs_cli_url(const char *flag) {
  if (flag && *flag)
    return flag;
  const char *env = getenv("GPUSRV_URL");
  return env && *env ? env : "http://127.0.0.1:8000";
}

static size_t on_body(char *data, size_t size, size_t n, void *arg) {
  gs_http_response *r = arg;
  size_t add = size * n;
  char *grown = realloc(r->body, r->len + add + 1);
  if (!grown)
    return 0;
  r->body = grown;
  memcpy(r->body + r->len, data, add);
  r->len += add;
  r->body[r->len] = '\0';
  return add;
}

static size_t on_header(char *line, size_t size, size_t n, void *arg) {
  gs_http_response *r = arg;
  static const char key[] = "Inference-Header-Content-Length:";
  if (size * n > sizeof key && strncasecmp(line, key, sizeof key - 1) == 0)
    r->header_len = strtoull(line + sizeof key - 1, NULL, 10);
  return size * n;
}

int gs_cli_http(const char *method, const char *url, const char *path, const char *token,
                const char *body, size_t body_len, size_t header_len, gs_http_response *out) {
  memset(out, 0, sizeof *out);
  CURL *c = curl_easy_init();
  if (!c)
    return gs_error(GS_ENOMEM, "cannot start libcurl");
  char full[2048], hl[80], auth[600];
  snprintf(full, sizeof full, "%s%s", url, path);
  struct curl_slist *headers = NULL;
  headers = curl_slist_append(headers, "Content-Type: application/json");
  if (header_len) {
    snprintf(hl, sizeof hl, "Inference-Header-Content-Length: %zu", header_len);
    headers = curl_slist_append(headers, hl);
  }
  if (!token)
    token = getenv("GPUSRV_TOKEN");
  if (token && *token) {
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    headers = curl_slist_append(headers, auth);
  }
  curl_easy_setopt(c, CURLOPT_URL, full);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, out);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  if (body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
  }
  CURLcode rc = curl_easy_perform(c);
  if (rc == CURLE_OK)
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(c);
  if (rc != CURLE_OK) {
    free(out->body);
    out->body = NULL;
    return gs_error(GS_EIO, "cannot reach %s: %s (is `gpusrv serve` running?)", url,
                    curl_easy_strerror(rc));
  }
  if (!out->body && !(out->body = calloc(1, 1)))
    return gs_error(GS_ENOMEM, "out of memory");
  return GS_OK;
}

const char *gs_cli_http_error(const gs_http_response *r, char *buf, size_t cap) {
  json_t *j = json_loadb(r->body, r->header_len ? r->header_len : r->len, 0, NULL);
  const char *msg = j ? json_string_value(json_object_get(j, "error")) : NULL;
  if (msg)
    snprintf(buf, cap, "%s (HTTP %ld)", msg, r->status);
  else
    snprintf(buf, cap, "HTTP %ld", r->status);
  json_decref(j);
  return buf;
}

int gs_cli_call_json(const char *what, const char *url, const char *token, const char *method,
                     const char *path, json_t *body, json_t **out) {
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  gs_http_response r;
  int rc = gs_cli_http(method, gs_cli_url(url), path, token, text, text ? strlen(text) : 0, 0, &r);
  free(text);
  if (rc < 0) {
    fprintf(stderr, "gpusrv: %s: %s\n", what, gs_error_detail());
    return 1;
  }
  if (r.status < 200 || r.status >= 300) {
    char why[600];
    fprintf(stderr, "gpusrv: %s: %s\n", what, gs_cli_http_error(&r, why, sizeof why));
    free(r.body);
    return 1;
  }
  if (out && !(*out = json_loadb(r.body, r.len, 0, NULL))) {
    fprintf(stderr, "gpusrv: %s: the daemon's answer is not JSON\n", what);
    free(r.body);
    return 1;
  }
  free(r.body);
  return 0;
}

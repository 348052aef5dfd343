/* client.c - the client handle: where the daemon is, the token, one HTTP
 * exchange over the transport its URL needs (http:// over the plain one,
 * anything else through libcurl), and the per-thread last error. */
#include "client/client_internal.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ---- the last error ------------------------------------------------------------------ */

static _Thread_local const gs_client *error_client;
static _Thread_local char error_text[1024];

int client_fail(const gs_client *c, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error_text, sizeof error_text, fmt, ap);
  va_end(ap);
  error_client = c;
  return code;
}

const char *gs_client_last_error(const gs_client *c) {
  return c == error_client ? error_text : ""; /* NULL: gs_client_open's failure */
}

const char *gs_client_url(const gs_client *c) { return c->url; }

/* ---- opening ------------------------------------------------------------------------- */

/* http://HOST[:PORT][/PREFIX] into the client's parts; false when the
 * URL is not http:// (then libcurl takes it) or does not parse. */
static bool parse_plain_url(gs_client *c) {
  const char *p = c->url;
  if (strncasecmp(p, "http://", 7) != 0 || strchr(p, '@')) /* user:password@ is libcurl's */
    return false;
  p += 7;
  const char *host_end;
  if (*p == '[') { /* [::1]:8000 */
    host_end = strchr(p, ']');
    if (!host_end)
      return false;
    snprintf(c->host, sizeof c->host, "%.*s", (int)(host_end - p - 1), p + 1);
    host_end++;
  } else {
    host_end = p + strcspn(p, ":/");
    snprintf(c->host, sizeof c->host, "%.*s", (int)(host_end - p), p);
  }
  const char *rest = host_end;
  snprintf(c->port, sizeof c->port, "80");
  if (*rest == ':') {
    size_t n = strcspn(rest + 1, "/");
    if (n == 0 || n >= sizeof c->port)
      return false;
    snprintf(c->port, sizeof c->port, "%.*s", (int)n, rest + 1);
    rest += 1 + n;
  }
  snprintf(c->prefix, sizeof c->prefix, "%s", rest);
  return c->host[0] != '\0' && strlen(rest) < sizeof c->prefix;
}

/* The first line of a token file this user can read, or false. */
static bool read_token_file(const char *path, char *out, size_t cap) {
  if (!path || access(path, R_OK) != 0)
    return false;
  FILE *f = fopen(path, "r");
  if (!f)
    return false;
  bool ok = fgets(out, (int)cap, f) != NULL;
  fclose(f);
  if (!ok)
    return false;
  out[strcspn(out, "\r\n")] = '\0';
  return out[0] != '\0';
}

static void copy_env(const char *name, char *to, size_t cap) {
  const char *v = getenv(name);
  snprintf(to, cap, "%s", v ? v : "");
}

int gs_client_open(const char *url, const char *token, gs_client **out) {
  *out = NULL;
  if (!url || !*url)
    url = getenv("GPUSRV_URL");
  if (!url || !*url)
    url = "http://127.0.0.1:8000";
  size_t n = strlen(url);
  while (n > 0 && url[n - 1] == '/')
    n--;
  gs_client *c = calloc(1, sizeof *c);
  if (!c)
    return client_fail(NULL, GS_ENOMEM, "out of memory");
  if (n == 0 || n >= sizeof c->url) {
    free(c);
    return client_fail(NULL, GS_EINVAL, "the daemon's URL is empty or too long");
  }
  memcpy(c->url, url, n);
  c->plain = parse_plain_url(c);
  copy_env("GPUSRV_CA_FILE", c->ca_file, sizeof c->ca_file);
  copy_env("GPUSRV_CLIENT_CERT", c->cert_file, sizeof c->cert_file);
  copy_env("GPUSRV_CLIENT_KEY", c->key_file, sizeof c->key_file);
  char found[600] = "";
  const char *file = getenv("GPUSRV_TOKEN_FILE");
  if (!token || !*token)
    token = getenv("GPUSRV_TOKEN");
  if (token && *token) {
    snprintf(found, sizeof found, "%s", token);
  } else if (file && *file) {
    /* Named, it is the one: never fall back to another (the admin's). */
    if (!read_token_file(file, found, sizeof found)) {
      free(c);
      return client_fail(NULL, GS_EPERM, "cannot read a token from GPUSRV_TOKEN_FILE=%s", file);
    }
  } else {
    read_token_file("/var/lib/gpusrv/admin.token", found, sizeof found);
  }
  if (strpbrk(found, "\r\n")) {
    free(c);
    return client_fail(NULL, GS_EINVAL, "the token holds a line break");
  }
  if (found[0])
    snprintf(c->auth, sizeof c->auth, "Authorization: Bearer %s", found);
  pthread_mutex_init(&c->lock, NULL);
  *out = c;
  return GS_OK;
}

void gs_client_close(gs_client *c) {
  if (!c)
    return;
  client_plain_close(c);
  client_curl_close(c);
  pthread_mutex_destroy(&c->lock);
  if (error_client == c)
    error_client = NULL;
  free(c);
}

/* ---- one exchange ------------------------------------------------------------------------ */

void client_on_header(client_exchange *x, const char *line, size_t len) {
  static const char key[] = "Inference-Header-Content-Length:";
  if (len > sizeof key && strncasecmp(line, key, sizeof key - 1) == 0) {
    const char *v = line + sizeof key - 1;
    while (*v == ' ')
      v++;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    /* Digits only and a sane size; anything else is a broken reply. */
    x->has_infer_header_len = end != v && *v != '-' && n <= GS_CLIENT_MAX_HEADER;
    x->reply_header_len = x->has_infer_header_len ? (size_t)n : 0;
  }
}

static size_t collect(const char *data, size_t len, client_exchange *x) {
  char *grown = realloc(x->body, x->len + len + 1);
  if (!grown) {
    x->failed_alloc = true;
    return 0;
  }
  x->body = grown;
  memcpy(x->body + x->len, data, len);
  x->len += len;
  x->body[x->len] = '\0';
  return len;
}

size_t client_on_body(client_exchange *x, const char *data, size_t len) {
  /* Only a successful answer goes to the sink; an error is collected. */
  if (x->sink && x->status >= 200 && x->status < 300)
    return x->sink(data, len, x->sink_ctx);
  return collect(data, len, x);
}

size_t client_body_size(const client_exchange *x) {
  size_t total = 0;
  for (int i = 0; i < x->n_segments; i++)
    total += x->segments[i].len;
  return total;
}

int client_perform(gs_client *c, client_exchange *x) {
  x->status = 0;
  x->body = NULL;
  x->len = 0;
  x->has_infer_header_len = false;
  x->reply_header_len = 0;
  x->failed_alloc = false;
  x->sink_error = 0;
  return c->plain ? client_perform_plain(c, x) : client_perform_curl(c, x);
}

int client_status_error(const gs_client *c, const client_exchange *x, const char *what) {
  if (x->status >= 200 && x->status < 300)
    return GS_OK;
  int code = x->status == 400   ? GS_EINVAL
             : x->status == 401 || x->status == 403 ? GS_EPERM
             : x->status == 404 ? GS_ENOENT
             : x->status == 409 ? GS_ESTATE
             : x->status == 413 ? GS_ERANGE
             : x->status == 503 ? GS_EBUSY
                                : GS_EIO;
  size_t json_len = x->has_infer_header_len && x->reply_header_len < x->len ? x->reply_header_len
                                                                          : x->len;
  json_t *j = x->body ? json_loadb(x->body, json_len, 0, NULL) : NULL;
  const char *msg = j ? json_string_value(json_object_get(j, "error")) : NULL;
  if (msg)
    client_fail(c, code, "%s: %s (HTTP %ld)", what, msg, x->status);
  else
    client_fail(c, code, "%s: HTTP %ld", what, x->status);
  json_decref(j);
  return code;
}

void client_escape(const char *in, char *out, size_t cap) {
  static const char hex[] = "0123456789ABCDEF";
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)in; *p && o + 4 < cap; p++) {
    if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
        strchr("._~-", *p)) {
      out[o++] = (char)*p;
    } else {
      out[o++] = '%';
      out[o++] = hex[*p >> 4];
      out[o++] = hex[*p & 15];
    }
  }
  out[o] = '\0';
}

int gs_client_request(gs_client *c, const char *method, const char *path, const char *body,
                      char **json) {
  if (json)
    *json = NULL;
  client_segment seg = {body, body ? strlen(body) : 0};
  client_exchange x = {.method = method, .path = path, .segments = &seg, .n_segments = body ? 1 : 0,
                       .timeout_ms = GS_CLIENT_CALL_TIMEOUT_MS};
  int rc = client_perform(c, &x);
  if (rc == GS_OK)
    rc = client_status_error(c, &x, path);
  if (rc == GS_OK && json) {
    *json = x.body ? x.body : strdup("");
    x.body = NULL;
    if (!*json)
      rc = client_fail(c, GS_ENOMEM, "out of memory");
  }
  free(x.body);
  return rc;
}

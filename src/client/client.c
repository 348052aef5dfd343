/* client.c - the client handle: where the daemon is, the token, a pool of
 * libcurl easy handles (each keeps its connection open, and a caller takes
 * one for the length of a call, so threads never share one), one HTTP
 * exchange, and the per-thread last error. */
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

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

/* libcurl's global set-up is not thread-safe in older versions: once. */
static void init_curl(void) { curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT); }

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

int gs_client_open(const char *url, const char *token, gs_client **out) {
  *out = NULL;
  pthread_once(&curl_once, init_curl);
  if (curl_init_result != CURLE_OK)
    return client_fail(NULL, GS_EIO, "cannot start libcurl: %s",
                       curl_easy_strerror(curl_init_result));
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
  for (int i = 0; i < c->n_idle; i++)
    curl_easy_cleanup(c->idle[i]);
  pthread_mutex_destroy(&c->lock);
  if (error_client == c)
    error_client = NULL;
  free(c);
}

/* An easy handle for one call: an idle one (its connection still open),
 * else a new one. */
static CURL *take_handle(gs_client *c) {
  CURL *h = NULL;
  pthread_mutex_lock(&c->lock);
  if (c->n_idle > 0)
    h = c->idle[--c->n_idle];
  pthread_mutex_unlock(&c->lock);
  if (h)
    curl_easy_reset(h); /* options back to defaults; the connection stays */
  else
    h = curl_easy_init();
  return h;
}

static void give_back(gs_client *c, CURL *h) {
  pthread_mutex_lock(&c->lock);
  if (c->n_idle < GS_CLIENT_IDLE_MAX) {
    c->idle[c->n_idle++] = h;
    h = NULL;
  }
  pthread_mutex_unlock(&c->lock);
  if (h)
    curl_easy_cleanup(h);
}

/* ---- one exchange ------------------------------------------------------------------------ */

typedef struct body_reader {
  const client_segment *seg;
  int n, at;
  size_t off;
} body_reader;

/* libcurl rewinds the body to send it again (a reused connection the
 * daemon had closed). */
static int seek_body(void *arg, curl_off_t offset, int origin) {
  body_reader *r = arg;
  if (origin != SEEK_SET || offset < 0)
    return CURL_SEEKFUNC_CANTSEEK;
  r->at = 0;
  r->off = 0;
  size_t left = (size_t)offset;
  while (r->at < r->n && left >= r->seg[r->at].len) {
    left -= r->seg[r->at].len;
    r->at++;
  }
  if (r->at == r->n && left > 0)
    return CURL_SEEKFUNC_FAIL;
  r->off = left;
  return CURL_SEEKFUNC_OK;
}

/* Feeds libcurl the request body from its segments as they lie. */
static size_t read_body(char *buf, size_t size, size_t count, void *arg) {
  body_reader *r = arg;
  size_t room = size * count, put = 0;
  while (put < room && r->at < r->n) {
    const client_segment *s = &r->seg[r->at];
    size_t take = s->len - r->off < room - put ? s->len - r->off : room - put;
    memcpy(buf + put, s->data + r->off, take);
    put += take;
    r->off += take;
    if (r->off == s->len) {
      r->at++;
      r->off = 0;
    }
  }
  return put;
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

static size_t write_body(char *data, size_t size, size_t count, void *arg) {
  client_exchange *x = arg;
  size_t len = size * count;
  long status = 0;
  curl_easy_getinfo(x->handle, CURLINFO_RESPONSE_CODE, &status);
  /* Only a successful answer goes to the sink; an error is collected. */
  if (x->sink && status >= 200 && status < 300)
    return x->sink(data, len, x->sink_ctx);
  return collect(data, len, x);
}

static size_t on_header(char *line, size_t size, size_t count, void *arg) {
  client_exchange *x = arg;
  static const char key[] = "Inference-Header-Content-Length:";
  size_t len = size * count;
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
  return len;
}

int client_perform(gs_client *c, client_exchange *x) {
  x->status = 0;
  x->body = NULL;
  x->len = 0;
  x->has_infer_header_len = false;
  x->reply_header_len = 0;
  x->failed_alloc = false;
  x->sink_error = 0;
  CURL *h = take_handle(c);
  if (!h)
    return client_fail(c, GS_ENOMEM, "cannot start a libcurl handle");
  char url[3072], hl[96];
  snprintf(url, sizeof url, "%s%s", c->url, x->path);
  struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
  headers = curl_slist_append(headers, "Expect:"); /* no 100-continue round trip */
  if (x->infer_header_len) {
    snprintf(hl, sizeof hl, "Inference-Header-Content-Length: %zu", x->infer_header_len);
    headers = curl_slist_append(headers, hl);
  }
  if (c->auth[0])
    headers = curl_slist_append(headers, c->auth);
  size_t total = 0;
  for (int i = 0; i < x->n_segments; i++)
    total += x->segments[i].len;
  body_reader reader = {.seg = x->segments, .n = x->n_segments};
  x->handle = h;
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
  if (x->timeout_ms > 0)
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, x->timeout_ms);
  if (x->n_segments > 0 || strcmp(x->method, "POST") == 0) {
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)total);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, read_body);
    curl_easy_setopt(h, CURLOPT_READDATA, &reader);
    curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, seek_body);
    curl_easy_setopt(h, CURLOPT_SEEKDATA, &reader);
  }
  if (strcmp(x->method, "GET") != 0 && strcmp(x->method, "POST") != 0)
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, x->method);
  CURLcode rc = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x->status);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK) {
    curl_easy_cleanup(h); /* its connection may be half-used: do not keep it */
    if (x->failed_alloc)
      return client_fail(c, GS_ENOMEM, "out of memory reading the daemon's answer");
    if (rc == CURLE_WRITE_ERROR && x->sink_error)
      return x->sink_error; /* the sink said why */
    if (rc == CURLE_OPERATION_TIMEDOUT)
      return client_fail(c, GS_ETIMEDOUT, "the daemon at %s did not answer %s in time", c->url,
                         x->path);
    return client_fail(c, GS_EIO, "cannot reach the daemon at %s: %s", c->url,
                       curl_easy_strerror(rc));
  }
  give_back(c, h);
  return GS_OK;
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

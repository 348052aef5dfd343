/* transport_curl.c - HTTP exchanges through libcurl, for the URLs the plain
 * transport does not take (https://, and any other scheme libcurl knows).
 * libcurl is opened with dlopen on first use, not linked: with the
 * libraries it brings (about thirty on Debian) it takes some 9 ms to load,
 * which a command that only talks to a daemon over http:// should not pay.
 * A pool of easy handles keeps their connections open; a caller takes one
 * for the length of a call, so threads never share one. */
#include "client/client_internal.h"

/* Calls go through pointers, which the type-checking macros cannot wrap. */
#define CURL_DISABLE_TYPECHECK
#include <curl/curl.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The entry points used, each a pointer of the function's own type, looked
 * up by name from one list. */
#define CURL_ENTRY_POINTS(X)                                                               \
  X(curl_global_init) X(curl_easy_init) X(curl_easy_cleanup) X(curl_easy_reset)            \
  X(curl_easy_setopt) X(curl_easy_perform) X(curl_easy_getinfo) X(curl_easy_strerror)      \
  X(curl_slist_append) X(curl_slist_free_all)

static struct {
#define DECLARE(name) __typeof__(name) *name;
  CURL_ENTRY_POINTS(DECLARE)
#undef DECLARE
} cu;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static char curl_missing[300]; /* why libcurl cannot be used, or "" */

static void open_curl(void) {
  void *lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(curl_missing, sizeof curl_missing, "cannot open libcurl (%s), which URLs other "
             "than http:// need", dlerror());
    return;
  }
#define LOOK_UP(name)                                                                        \
  if (!curl_missing[0] && !(cu.name = (__typeof__(name) *)dlsym(lib, #name)))                \
    snprintf(curl_missing, sizeof curl_missing, "libcurl lacks %s", #name);
  CURL_ENTRY_POINTS(LOOK_UP)
#undef LOOK_UP
  CURLcode rc = curl_missing[0] ? CURLE_OK : cu.curl_global_init(CURL_GLOBAL_DEFAULT);
  if (rc != CURLE_OK)
    snprintf(curl_missing, sizeof curl_missing, "cannot start libcurl: %s",
             cu.curl_easy_strerror(rc));
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
    cu.curl_easy_reset(h); /* options back to defaults; the connection stays */
  else
    h = cu.curl_easy_init();
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
    cu.curl_easy_cleanup(h);
}

void client_curl_close(gs_client *c) {
  for (int i = 0; i < c->n_idle; i++)
    cu.curl_easy_cleanup(c->idle[i]);
  c->n_idle = 0;
}

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

typedef struct curl_exchange {
  client_exchange *x;
  CURL *handle;
} curl_exchange;

static size_t write_body(char *data, size_t size, size_t count, void *arg) {
  curl_exchange *cx = arg;
  cu.curl_easy_getinfo(cx->handle, CURLINFO_RESPONSE_CODE, &cx->x->status);
  return client_on_body(cx->x, data, size * count);
}

static size_t on_header(char *line, size_t size, size_t count, void *arg) {
  client_on_header(((curl_exchange *)arg)->x, line, size * count);
  return size * count;
}

int client_perform_curl(gs_client *c, client_exchange *x) {
  pthread_once(&curl_once, open_curl);
  if (curl_missing[0])
    return client_fail(c, GS_EIO, "%s", curl_missing);
  CURL *h = take_handle(c);
  if (!h)
    return client_fail(c, GS_ENOMEM, "cannot start a libcurl handle");
  char url[3072], hl[96];
  snprintf(url, sizeof url, "%s%s", c->url, x->path);
  struct curl_slist *headers = cu.curl_slist_append(NULL, "Content-Type: application/json");
  headers = cu.curl_slist_append(headers, "Expect:"); /* no 100-continue round trip */
  if (x->infer_header_len) {
    snprintf(hl, sizeof hl, "Inference-Header-Content-Length: %zu", x->infer_header_len);
    headers = cu.curl_slist_append(headers, hl);
  }
  if (c->auth[0])
    headers = cu.curl_slist_append(headers, c->auth);
  body_reader reader = {.seg = x->segments, .n = x->n_segments};
  curl_exchange cx = {.x = x, .handle = h};
  cu.curl_easy_setopt(h, CURLOPT_URL, url);
  cu.curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  cu.curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  cu.curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_body);
  cu.curl_easy_setopt(h, CURLOPT_WRITEDATA, &cx);
  cu.curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  cu.curl_easy_setopt(h, CURLOPT_HEADERDATA, &cx);
  cu.curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  cu.curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
  if (x->timeout_ms > 0)
    cu.curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, x->timeout_ms);
  if (c->ca_file[0])
    cu.curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
  if (c->cert_file[0])
    cu.curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert_file);
  if (c->key_file[0])
    cu.curl_easy_setopt(h, CURLOPT_SSLKEY, c->key_file);
  if (x->n_segments > 0 || strcmp(x->method, "POST") == 0) {
    cu.curl_easy_setopt(h, CURLOPT_POST, 1L);
    cu.curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)client_body_size(x));
    cu.curl_easy_setopt(h, CURLOPT_READFUNCTION, read_body);
    cu.curl_easy_setopt(h, CURLOPT_READDATA, &reader);
    cu.curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, seek_body);
    cu.curl_easy_setopt(h, CURLOPT_SEEKDATA, &reader);
  }
  if (strcmp(x->method, "GET") != 0 && strcmp(x->method, "POST") != 0)
    cu.curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, x->method);
  CURLcode rc = cu.curl_easy_perform(h);
  cu.curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x->status);
  cu.curl_slist_free_all(headers);
  if (rc != CURLE_OK) {
    cu.curl_easy_cleanup(h); /* its connection may be half-used: do not keep it */
    if (x->failed_alloc)
      return client_fail(c, GS_ENOMEM, "out of memory reading the daemon's answer");
    if (rc == CURLE_WRITE_ERROR && x->sink_error)
      return x->sink_error; /* the sink said why */
    if (rc == CURLE_OPERATION_TIMEDOUT)
      return client_fail(c, GS_ETIMEDOUT, "the daemon at %s did not answer %s in time", c->url,
                         x->path);
    return client_fail(c, GS_EIO, "cannot reach the daemon at %s: %s", c->url,
                       cu.curl_easy_strerror(rc));
  }
  give_back(c, h);
  return GS_OK;
}

/* null_http.c - the floor under gpusrv's HTTP side: a server on the same
 * library in the same mode (libmicrohttpd, a pool of threads each polling
 * its share, suspend/resume allowed) that reads each request's body whole
 * and answers with canned replies, computing nothing. bench/serve.py fills
 * the replies with what gpusrv itself answered to the same requests, so
 * both send the same bytes.
 *
 * Usage: gs-bench-null-http PORT THREADS 'METHOD PATH=FILE[@N]'...
 * (@N: send Inference-Header-Content-Length: N, the binary tensor reply's)
 * Other paths get 404, but for .../stats: statistics that count the infer
 * replies sent (perf_analyzer reads them before and after each window and
 * refuses a model whose counts never move). */
#include <microhttpd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ROUTES 16

typedef struct route {
  char method[8];
  char path[256];
  char *body;
  size_t len;
  char header_len[24]; /* Inference-Header-Content-Length, or "" */
} route;

static route routes[MAX_ROUTES];
static int n_routes;
static atomic_ullong inferred;

typedef struct upload {
  char *data;
  size_t len, cap;
} upload;

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return b;
}

static enum MHD_Result answer_as(struct MHD_Connection *c, int status, const char *body,
                                 size_t len, enum MHD_ResponseMemoryMode mode,
                                 const char *header_len) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, mode);
  if (header_len && header_len[0]) {
    MHD_add_response_header(r, "Content-Type", "application/octet-stream");
    MHD_add_response_header(r, "Inference-Header-Content-Length", header_len);
  } else {
    MHD_add_response_header(r, "Content-Type", "application/json");
  }
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result answer(struct MHD_Connection *c, int status, const char *body,
                              size_t len) {
  return answer_as(c, status, body, len, MHD_RESPMEM_PERSISTENT, NULL);
}

/* Triton's statistics for the model the path names, counting the replies. */
static enum MHD_Result stats(struct MHD_Connection *c, const char *url) {
  char name[128] = "";
  sscanf(url, "/v2/models/%127[^/]", name);
  unsigned long long n = atomic_load(&inferred);
  char *body = malloc(1024);
  if (!body)
    return MHD_NO;
  int len = snprintf(body, 1024,
      "{\"model_stats\":[{\"name\":\"%s\",\"version\":\"1\",\"last_inference\":0,"
      "\"inference_count\":%llu,\"execution_count\":%llu,\"inference_stats\":{"
      "\"success\":{\"count\":%llu,\"ns\":0},\"fail\":{\"count\":0,\"ns\":0},"
      "\"queue\":{\"count\":%llu,\"ns\":0},\"compute_input\":{\"count\":%llu,\"ns\":0},"
      "\"compute_infer\":{\"count\":%llu,\"ns\":0},\"compute_output\":{\"count\":%llu,"
      "\"ns\":0}},\"batch_stats\":[]}]}", name, n, n, n, n, n, n, n);
  return answer_as(c, 200, body, (size_t)len, MHD_RESPMEM_MUST_FREE, NULL);
}

/* The body is gathered as a server must before it can parse it. */
static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *size, void **con_cls) {
  (void)cls;
  (void)version;
  upload *u = *con_cls;
  if (!u) {
    *con_cls = calloc(1, sizeof(upload));
    return *con_cls ? MHD_YES : MHD_NO;
  }
  if (*size) {
    if (u->len + *size > u->cap) {
      size_t cap = u->cap ? u->cap : 4096;
      while (cap < u->len + *size)
        cap *= 2;
      char *d = realloc(u->data, cap);
      if (!d)
        return MHD_NO;
      u->data = d;
      u->cap = cap;
    }
    memcpy(u->data + u->len, data, *size);
    u->len += *size;
    *size = 0;
    return MHD_YES;
  }
  if (strcmp(url, "/v2/health/ready") == 0 || strcmp(url, "/v2/health/live") == 0)
    return answer(c, 200, "", 0);
  size_t ul = strlen(url);
  if (ul > 6 && strcmp(url + ul - 6, "/stats") == 0)
    return stats(c, url);
  for (int i = 0; i < n_routes; i++)
    if (strcmp(routes[i].method, method) == 0 && strcmp(routes[i].path, url) == 0) {
      if (strcmp(method, "POST") == 0)
        atomic_fetch_add(&inferred, 1);
      return answer_as(c, 200, routes[i].body, routes[i].len, MHD_RESPMEM_PERSISTENT,
                       routes[i].header_len);
    }
  fprintf(stderr, "null server: no route for %s %s\n", method, url);
  return answer(c, 404, "{\"error\":\"no such route\"}", 25);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  upload *u = *con_cls;
  if (u) {
    free(u->data);
    free(u);
  }
  *con_cls = NULL;
}

static volatile sig_atomic_t stop;
static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s PORT THREADS 'METHOD PATH=FILE'...\n", argv[0]);
    return 2;
  }
  for (int i = 3; i < argc && n_routes < MAX_ROUTES; i++) {
    route *r = &routes[n_routes];
    char *eq = strrchr(argv[i], '='), *at = strrchr(argv[i], '@');
    if (at && at > eq) {
      *at = '\0';
      snprintf(r->header_len, sizeof r->header_len, "%s", at + 1);
    }
    if (!eq || sscanf(argv[i], "%7s %255[^=]", r->method, r->path) != 2) {
      fprintf(stderr, "bad route '%s'\n", argv[i]);
      return 2;
    }
    if (!(r->body = read_file(eq + 1, &r->len))) {
      fprintf(stderr, "cannot read %s\n", eq + 1);
      return 1;
    }
    n_routes++;
  }
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                   MHD_ALLOW_SUSPEND_RESUME;
  struct MHD_Daemon *d =
      MHD_start_daemon(flags, (uint16_t)atoi(argv[1]), NULL, NULL, handle, NULL,
                       MHD_OPTION_THREAD_POOL_SIZE, (unsigned)atoi(argv[2]),
                       MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
                       MHD_OPTION_CONNECTION_TIMEOUT, 60u, MHD_OPTION_CONNECTION_LIMIT, 2000u,
                       MHD_OPTION_END);
  if (!d) {
    fprintf(stderr, "cannot listen on port %s\n", argv[1]);
    return 1;
  }
  while (!stop)
    pause();
  MHD_stop_daemon(d);
  return 0;
}

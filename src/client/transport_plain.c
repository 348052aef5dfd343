/* transport_plain.c - HTTP/1.1 exchanges over a plain TCP socket, for
 * http:// URLs (the daemon's own port). Written here rather than through
 * libcurl because the thin `gpusrv` command talks to the daemon once per
 * run, and loading libcurl with the libraries it brings costs about 9 ms on
 * Debian, several times the exchange itself (bench/cli_startup.py); what the
 * daemon's protocol needs is small: a request with a Content-Length body,
 * answers with Content-Length or chunked bodies or none, keep-alive, and a
 * deadline. libcurl still serves every other scheme (transport_curl.c). */
#include "client/client_internal.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CONNECT_TIMEOUT_MS 10000
#define MAX_LINE 8192

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for `events` on fd until the deadline (INT64_MAX: none). */
static int wait_fd(int fd, short events, int64_t deadline) {
  for (;;) {
    int64_t left = deadline == INT64_MAX ? -1 : deadline - now_ms();
    if (deadline != INT64_MAX && left <= 0)
      return GS_ETIMEDOUT;
    struct pollfd p = {.fd = fd, .events = events};
    int n = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
    if (n > 0)
      return GS_OK;
    if (n < 0 && errno != EINTR)
      return GS_EIO;
  }
}

static int connect_to(gs_client *c, int *out) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  int gai = getaddrinfo(c->host, c->port, &hints, &ai);
  if (gai != 0)
    return client_fail(c, GS_EIO, "cannot reach the daemon at %s: %s", c->url,
                       gai_strerror(gai));
  int err = 0, fd = -1;
  for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    socklen_t len = sizeof err;
    if (rc < 0 && errno == EINPROGRESS &&
        wait_fd(fd, POLLOUT, now_ms() + CONNECT_TIMEOUT_MS) == GS_OK &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
      rc = 0;
    else if (rc < 0 && errno != EINPROGRESS)
      err = errno;
    else if (rc < 0 && !err)
      err = ETIMEDOUT;
    if (rc < 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  if (fd < 0)
    return client_fail(c, GS_EIO, "cannot reach the daemon at %s: %s", c->url, strerror(err));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  *out = fd;
  return GS_OK;
}

static int send_all(int fd, const char *p, size_t n, int64_t deadline) {
  while (n > 0) {
    ssize_t put = send(fd, p, n, MSG_NOSIGNAL);
    if (put > 0) {
      p += put;
      n -= (size_t)put;
    } else if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int rc = wait_fd(fd, POLLOUT, deadline);
      if (rc < 0)
        return rc;
    } else if (put < 0 && errno != EINTR) {
      return GS_EIO;
    }
  }
  return GS_OK;
}

static int send_request(gs_client *c, client_exchange *x, int fd, int64_t deadline) {
  char head[4096];
  size_t body = client_body_size(x);
  bool with_body = body > 0 || strcmp(x->method, "POST") == 0;
  int n = snprintf(head, sizeof head, "%s %s%s HTTP/1.1\r\nHost: %s%s%s:%s\r\n"
                   "Content-Type: application/json\r\n", x->method, c->prefix, x->path,
                   strchr(c->host, ':') ? "[" : "", c->host, strchr(c->host, ':') ? "]" : "",
                   c->port);
  if (n > 0 && (size_t)n < sizeof head && x->infer_header_len)
    n += snprintf(head + n, sizeof head - (size_t)n, "Inference-Header-Content-Length: %zu\r\n",
                  x->infer_header_len);
  if (n > 0 && (size_t)n < sizeof head && c->auth[0])
    n += snprintf(head + n, sizeof head - (size_t)n, "%s\r\n", c->auth);
  if (n > 0 && (size_t)n < sizeof head && with_body)
    n += snprintf(head + n, sizeof head - (size_t)n, "Content-Length: %zu\r\n", body);
  if (n > 0 && (size_t)n < sizeof head)
    n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
  if (n <= 0 || (size_t)n >= sizeof head)
    return client_fail(c, GS_EINVAL, "the request for %s is too long", x->path);
  int rc = send_all(fd, head, (size_t)n, deadline);
  for (int i = 0; rc == 0 && i < x->n_segments; i++)
    rc = send_all(fd, x->segments[i].data, x->segments[i].len, deadline);
  return rc;
}

/* ---- reading the answer ------------------------------------------------------------------ */

typedef struct reader {
  int fd;
  int64_t deadline;
  char buf[16384];
  size_t at, len;
  bool got_any; /* a byte of the answer came: it cannot be sent again */
} reader;

/* More bytes into the buffer: GS_OK, GS_EIO (with `eof` at the end of the
 * stream), GS_ETIMEDOUT. */
static int fill(reader *r, bool *eof) {
  if (r->at > 0) {
    memmove(r->buf, r->buf + r->at, r->len - r->at);
    r->len -= r->at;
    r->at = 0;
  }
  for (;;) {
    ssize_t got = recv(r->fd, r->buf + r->len, sizeof r->buf - r->len, 0);
    if (got > 0) {
      r->len += (size_t)got;
      r->got_any = true;
      return GS_OK;
    }
    if (got == 0) {
      *eof = true;
      return GS_EIO;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int rc = wait_fd(r->fd, POLLIN, r->deadline);
      if (rc < 0)
        return rc;
    } else if (errno != EINTR) {
      return GS_EIO;
    }
  }
}

/* One line without its CRLF into `line` (NUL-terminated). */
static int read_line(reader *r, char *line, size_t cap, bool *eof) {
  for (;;) {
    char *nl = memchr(r->buf + r->at, '\n', r->len - r->at);
    if (nl) {
      size_t n = (size_t)(nl - (r->buf + r->at));
      if (n >= cap)
        return GS_EIO;
      memcpy(line, r->buf + r->at, n);
      if (n > 0 && line[n - 1] == '\r')
        n--;
      line[n] = '\0';
      r->at += (size_t)(nl - (r->buf + r->at)) + 1;
      return GS_OK;
    }
    if (r->len - r->at >= MAX_LINE) /* fill() makes room by moving the rest down */
      return GS_EIO;
    int rc = fill(r, eof);
    if (rc < 0)
      return rc;
  }
}

/* `n` bytes of body (SIZE_MAX: until the end of the stream) to the exchange. */
static int read_body(reader *r, client_exchange *x, size_t n, bool *eof) {
  while (n > 0) {
    if (r->at == r->len) {
      int rc = fill(r, eof);
      if (rc < 0)
        return n == SIZE_MAX && *eof ? GS_OK : rc;
    }
    size_t take = r->len - r->at < n ? r->len - r->at : n;
    if (client_on_body(x, r->buf + r->at, take) != take)
      return x->sink_error ? x->sink_error : x->failed_alloc ? GS_ENOMEM : GS_ECANCELED;
    r->at += take;
    if (n != SIZE_MAX)
      n -= take;
  }
  return GS_OK;
}

static int read_chunked(reader *r, client_exchange *x, bool *eof) {
  char line[MAX_LINE];
  for (;;) {
    int rc = read_line(r, line, sizeof line, eof);
    if (rc < 0)
      return rc;
    char *end;
    unsigned long long size = strtoull(line, &end, 16);
    if (end == line || (*end && *end != ';' && *end != ' '))
      return GS_EIO;
    if (size == 0)
      break;
    if ((rc = read_body(r, x, (size_t)size, eof)) < 0 ||
        (rc = read_line(r, line, sizeof line, eof)) < 0)
      return rc;
  }
  for (;;) { /* trailers, up to the empty line */
    int rc = read_line(r, line, sizeof line, eof);
    if (rc < 0 || !line[0])
      return rc;
  }
}

/* The status line and headers, then the body; *keep when the connection
 * can carry the next request. */
static int read_answer(reader *r, client_exchange *x, bool *keep, bool *eof) {
  char line[MAX_LINE];
  long long length = -1;
  bool chunked = false;
  *keep = true;
  do { /* 1xx answers come before the real one */
    int rc = read_line(r, line, sizeof line, eof);
    if (rc < 0)
      return rc;
    int minor;
    if (sscanf(line, "HTTP/1.%d %ld", &minor, &x->status) != 2 || x->status < 100)
      return GS_EIO;
    *keep = minor >= 1;
    for (;;) {
      if ((rc = read_line(r, line, sizeof line, eof)) < 0)
        return rc;
      if (!line[0])
        break;
      client_on_header(x, line, strlen(line));
      const char *v = strchr(line, ':');
      v = v ? v + 1 + strspn(v + 1, " \t") : "";
      if (!strncasecmp(line, "Content-Length:", 15)) {
        char *end;
        length = strtoll(v, &end, 10);
        if (end == v || length < 0)
          return GS_EIO;
      } else if (!strncasecmp(line, "Transfer-Encoding:", 18)) {
        chunked = strcasestr(v, "chunked") != NULL;
      } else if (!strncasecmp(line, "Connection:", 11)) {
        *keep = *keep && strcasestr(v, "close") == NULL;
      }
    }
  } while (x->status < 200);
  if (x->status == 204 || x->status == 304)
    return GS_OK;
  if (chunked)
    return read_chunked(r, x, eof);
  if (length >= 0)
    return read_body(r, x, (size_t)length, eof);
  *keep = false; /* the body ends with the connection */
  return read_body(r, x, SIZE_MAX, eof);
}

/* ---- the exchange ---------------------------------------------------------------------- */

static int take_idle(gs_client *c) {
  int fd = -1;
  pthread_mutex_lock(&c->lock);
  if (c->n_idle_fd > 0)
    fd = c->idle_fd[--c->n_idle_fd];
  pthread_mutex_unlock(&c->lock);
  return fd;
}

static void give_back(gs_client *c, int fd) {
  pthread_mutex_lock(&c->lock);
  if (c->n_idle_fd < GS_CLIENT_IDLE_MAX) {
    c->idle_fd[c->n_idle_fd++] = fd;
    fd = -1;
  }
  pthread_mutex_unlock(&c->lock);
  if (fd >= 0)
    close(fd);
}

void client_plain_close(gs_client *c) {
  for (int i = 0; i < c->n_idle_fd; i++)
    close(c->idle_fd[i]);
  c->n_idle_fd = 0;
}

int client_perform_plain(gs_client *c, client_exchange *x) {
  int64_t deadline = x->timeout_ms > 0 ? now_ms() + x->timeout_ms : INT64_MAX;
  for (int attempt = 0;; attempt++) {
    /* A kept connection the daemon has closed meanwhile fails before any
     * answer: the request is sent again, once, on a new one. */
    int fd = attempt == 0 ? take_idle(c) : -1;
    bool reused = fd >= 0;
    if (!reused) {
      int rc = connect_to(c, &fd);
      if (rc < 0)
        return rc;
    }
    reader r = {.fd = fd, .deadline = deadline};
    bool keep = false, eof = false;
    int rc = send_request(c, x, fd, deadline);
    if (rc == 0)
      rc = read_answer(&r, x, &keep, &eof);
    bool retry = rc == GS_EIO && reused && !r.got_any;
    bool done_cleanly = rc == 0 && r.at == r.len; /* nothing unasked-for is left */
    if (done_cleanly && keep)
      give_back(c, fd);
    else
      close(fd);
    if (retry)
      continue;
    if (rc == GS_OK)
      return GS_OK;
    if (rc == GS_ETIMEDOUT)
      return client_fail(c, GS_ETIMEDOUT, "the daemon at %s did not answer %s in time", c->url,
                         x->path);
    if (x->sink_error && rc == x->sink_error)
      return rc; /* the sink said why */
    if (rc == GS_ENOMEM)
      return client_fail(c, GS_ENOMEM, "out of memory reading the daemon's answer");
    if (rc == GS_EINVAL)
      return rc; /* send_request said why */
    return client_fail(c, GS_EIO, "cannot reach the daemon at %s: %s", c->url,
                       eof ? "it closed the connection mid-answer" : "the answer is not HTTP");
  }
}

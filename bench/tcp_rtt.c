/* tcp_rtt.c - `gs-bench-tcp-rtt [N]`: the p50 round trip of a 64-byte
 * message between two threads over loopback TCP (TCP_NODELAY): the floor
 * under any HTTP request on this machine, measured by bench/serve.py. */
#include "base/clock.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static int listener;
static int rounds = 20000;

static void *echo(void *arg) {
  (void)arg;
  int c = accept(listener, NULL, NULL);
  int one = 1;
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char buf[64];
  for (int i = 0; i < rounds; i++) {
    if (recv(c, buf, sizeof buf, MSG_WAITALL) != (ssize_t)sizeof buf ||
        send(c, buf, sizeof buf, 0) != (ssize_t)sizeof buf)
      break;
  }
  close(c);
  return NULL;
}

static int cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc > 1)
    rounds = atoi(argv[1]);
  if (rounds < 10 || rounds > 10000000)
    return 2;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0 || bind(listener, (struct sockaddr *)&a, sizeof a) || listen(listener, 1) ||
      getsockname(listener, (struct sockaddr *)&a, &len)) {
    perror("gs-bench-tcp-rtt");
    return 1;
  }
  pthread_t t;
  pthread_create(&t, NULL, echo, NULL);
  int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  if (connect(s, (struct sockaddr *)&a, sizeof a)) {
    perror("gs-bench-tcp-rtt: connect");
    return 1;
  }
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  uint64_t *lat = malloc(sizeof *lat * (size_t)rounds);
  char buf[64] = {0};
  for (int i = 0; i < rounds; i++) {
    uint64_t t0 = gs_now_ns();
    if (send(s, buf, sizeof buf, 0) != (ssize_t)sizeof buf ||
        recv(s, buf, sizeof buf, MSG_WAITALL) != (ssize_t)sizeof buf)
      return 1;
    lat[i] = gs_now_ns() - t0;
  }
  qsort(lat, (size_t)rounds, sizeof *lat, cmp);
  printf("{\"p50_us\": %.1f, \"p99_us\": %.1f}\n", (double)lat[rounds / 2] / 1e3,
         (double)lat[(size_t)(rounds * 0.99)] / 1e3);
  close(s);
  pthread_join(t, NULL);
  free(lat);
  return 0;
}

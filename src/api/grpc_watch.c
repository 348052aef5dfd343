/* grpc_watch.c - grpc.health.v1.Health/Watch: each watcher is told the
 * server's serving status at once and again whenever it changes, on a
 * stream that stays open until the client leaves or the server stops
 * (then a last NOT_SERVING). One thread looks at the repository's
 * readiness every WATCH_PERIOD_NS while anyone watches: readiness changes
 * in many places (loads, unloads, idle models), and a tenth of a second is
 * soon enough for a probe. */
#include "api/grpc_call.h"

#include "base/clock.h"
#include "base/log.h"
#include "health.pb-c.h" /* generated from health.proto */

#include <stdlib.h>

#define WATCH_PERIOD_NS (100 * 1000 * 1000)
#define MAX_WATCHERS 1024

typedef struct watcher {
  gs_grpc_call *call; /* held while watched */
  bool known;         /* a service this server serves; else SERVICE_UNKNOWN, once */
  int told;           /* the status last sent */
  struct watcher *next;
} watcher;

struct gs_grpc_watches {
  gs_repository *repo;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  watcher *list;
  int count;
  bool closed;
  bool thread_started;
  pthread_t thread;
};

typedef Grpc__Health__V1__HealthCheckResponse__ServingStatus serving_status;

static serving_status status_now(gs_grpc_watches *w) {
  return !w->closed && gs_repository_settled(w->repo)
             ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
             : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
}

static void tell(watcher *v, serving_status s) {
  Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  r.status = s;
  v->told = (int)s;
  gs_grpc_stream_push(v->call, gs_grpc_pack(&r.base));
}

/* Ends v's stream (its request answered: the stream closes with OK once
 * what was queued has gone) and drops the hold. */
static void end_watch(watcher *v) {
  gs_grpc_stream_end(v->call);
  gs_grpc_call_release(v->call);
  free(v);
}

/* With the lock held: news for each watcher, and the end of those whose
 * client has gone. */
static void look(gs_grpc_watches *w) {
  serving_status now = status_now(w);
  for (watcher **p = &w->list; *p;) {
    watcher *v = *p;
    if (gs_grpc_call_gone(v->call)) {
      *p = v->next;
      w->count--;
      end_watch(v);
      continue;
    }
    if (v->known && v->told != (int)now)
      tell(v, now);
    p = &v->next;
  }
}

static void *watch_main(void *arg) {
  gs_grpc_watches *w = arg;
  pthread_mutex_lock(&w->lock);
  while (!w->closed) {
    if (w->list)
      gs_cond_wait_until(&w->wake, &w->lock, gs_now_ns() + WATCH_PERIOD_NS);
    else
      pthread_cond_wait(&w->wake, &w->lock);
    if (!w->closed)
      look(w);
  }
  pthread_mutex_unlock(&w->lock);
  return NULL;
}

gs_grpc_watches *gs_grpc_watches_open(gs_repository *repo) {
  gs_grpc_watches *w = calloc(1, sizeof *w);
  if (!w)
    return NULL;
  w->repo = repo;
  pthread_mutex_init(&w->lock, NULL);
  gs_cond_init_monotonic(&w->wake);
  w->thread_started = pthread_create(&w->thread, NULL, watch_main, w) == 0;
  if (!w->thread_started)
    GS_LOGW("grpc", "no thread for health watches: Watch calls are refused");
  return w;
}

void gs_grpc_watch(gs_grpc_watches *w, gs_grpc_call *c, bool known) {
  watcher *v = w ? malloc(sizeof *v) : NULL;
  if (w)
    pthread_mutex_lock(&w->lock);
  bool again = false; /* a second request on the same Watch */
  for (watcher *o = w ? w->list : NULL; o && !again; o = o->next)
    again = o->call == c;
  if (!v || w->closed || !w->thread_started || w->count == MAX_WATCHERS || again) {
    const char *why = !v                  ? "out of memory for a health watch"
                      : again             ? "a Watch takes one request"
                      : w->closed         ? "the server is shutting down"
                      : !w->thread_started ? "health watches cannot be served (no thread)"
                                           : "too many health watches are open";
    int status = again ? 400 : w && w->closed ? 503 : 429;
    if (w)
      pthread_mutex_unlock(&w->lock);
    free(v);
    gs_grpc_reply_error(c, status, why);
    return;
  }
  gs_grpc_call_hold(c);
  *v = (watcher){.call = c, .known = known, .told = -1, .next = w->list};
  w->list = v;
  w->count++;
  tell(v, known ? status_now(w)
                : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN);
  pthread_cond_signal(&w->wake); /* its thread may be asleep with nobody to watch */
  pthread_mutex_unlock(&w->lock);
}

void gs_grpc_watches_close(gs_grpc_watches *w) {
  if (!w)
    return;
  pthread_mutex_lock(&w->lock);
  w->closed = true;
  pthread_cond_signal(&w->wake);
  watcher *list = w->list;
  w->list = NULL;
  w->count = 0;
  for (watcher *v = list, *next; v; v = next) {
    next = v->next;
    if (v->known && v->told != GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING)
      tell(v, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
    end_watch(v);
  }
  pthread_mutex_unlock(&w->lock);
  if (w->thread_started)
    pthread_join(w->thread, NULL);
  w->thread_started = false;
}

void gs_grpc_watches_free(gs_grpc_watches *w) {
  if (!w)
    return;
  gs_grpc_watches_close(w);
  pthread_mutex_destroy(&w->lock);
  pthread_cond_destroy(&w->wake);
  free(w);
}

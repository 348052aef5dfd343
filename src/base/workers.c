/* workers.c - the queue and its threads (workers.h). */
#include "base/workers.h"

#include "base/error.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#define MAX_WORKERS 256

struct gs_workers {
  pthread_mutex_t lock;
  pthread_cond_t wake;
  gs_work *head, *tail;
  bool stopping;
  int n_threads;
  pthread_t threads[MAX_WORKERS];
};

static void *worker_main(void *arg) {
  gs_workers *ws = arg;
  pthread_mutex_lock(&ws->lock);
  for (;;) {
    while (!ws->head && !ws->stopping)
      pthread_cond_wait(&ws->wake, &ws->lock);
    gs_work *w = ws->head;
    if (!w) /* stopping, and nothing is left */
      break;
    ws->head = w->next;
    if (!ws->head)
      ws->tail = NULL;
    pthread_mutex_unlock(&ws->lock);
    w->run(w);
    pthread_mutex_lock(&ws->lock);
  }
  pthread_mutex_unlock(&ws->lock);
  return NULL;
}

gs_workers *gs_workers_start(int n) {
  if (n < 1 || n > MAX_WORKERS) {
    gs_error(GS_EINVAL, "%d worker threads: from 1 to %d", n, MAX_WORKERS);
    return NULL;
  }
  gs_workers *ws = calloc(1, sizeof *ws);
  if (!ws) {
    gs_error(GS_ENOMEM, "out of memory starting worker threads");
    return NULL;
  }
  pthread_mutex_init(&ws->lock, NULL);
  pthread_cond_init(&ws->wake, NULL);
  for (int i = 0; i < n && pthread_create(&ws->threads[i], NULL, worker_main, ws) == 0; i++)
    ws->n_threads++;
  if (ws->n_threads == 0) {
    gs_workers_stop(ws);
    gs_error(GS_ENOMEM, "cannot start worker threads");
    return NULL;
  }
  return ws;
}

void gs_workers_queue(gs_workers *ws, gs_work *w) {
  w->next = NULL;
  pthread_mutex_lock(&ws->lock);
  if (ws->tail)
    ws->tail->next = w;
  else
    ws->head = w;
  ws->tail = w;
  pthread_cond_signal(&ws->wake);
  pthread_mutex_unlock(&ws->lock);
}

void gs_workers_stop(gs_workers *ws) {
  if (!ws)
    return;
  pthread_mutex_lock(&ws->lock);
  ws->stopping = true;
  pthread_cond_broadcast(&ws->wake);
  pthread_mutex_unlock(&ws->lock);
  for (int i = 0; i < ws->n_threads; i++)
    pthread_join(ws->threads[i], NULL);
  pthread_cond_destroy(&ws->wake);
  pthread_mutex_destroy(&ws->lock);
  free(ws);
}

/* The serial's turn: its first item, then back in the queue if more wait. */
static void serial_turn(gs_work *turn) {
  gs_serial *s = (gs_serial *)((char *)turn - offsetof(gs_serial, turn));
  pthread_mutex_lock(&s->lock);
  gs_work *w = s->head;
  if (w && !(s->head = w->next))
    s->tail = NULL;
  pthread_mutex_unlock(&s->lock);
  if (w)
    w->run(w);
  pthread_mutex_lock(&s->lock);
  bool more = s->head != NULL;
  s->running = more;
  pthread_mutex_unlock(&s->lock);
  if (more)
    gs_workers_queue(s->workers, &s->turn);
  else
    s->busy(s, false);
}

void gs_serial_init(gs_serial *s, gs_workers *ws, void (*busy)(gs_serial *s, bool busy)) {
  *s = (gs_serial){.turn = {.run = serial_turn}, .workers = ws, .busy = busy};
  pthread_mutex_init(&s->lock, NULL);
}

bool gs_serial_queue(gs_serial *s, gs_work *w, bool unless_idle) {
  w->next = NULL;
  pthread_mutex_lock(&s->lock);
  if (unless_idle && !s->running) {
    pthread_mutex_unlock(&s->lock);
    return false;
  }
  if (s->tail)
    s->tail->next = w;
  else
    s->head = w;
  s->tail = w;
  bool start = !s->running;
  s->running = true;
  pthread_mutex_unlock(&s->lock);
  if (start) {
    s->busy(s, true);
    gs_workers_queue(s->workers, &s->turn);
  }
  return true;
}

void gs_serial_destroy(gs_serial *s) { pthread_mutex_destroy(&s->lock); }

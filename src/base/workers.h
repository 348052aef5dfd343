/* workers.h - a few threads that run work items from one queue, first in,
 * first out: for work that a thread which must stay free (an event loop)
 * hands on. An item is the caller's memory, linked in place, so queueing
 * allocates nothing and cannot fail. (None of the project's libraries has
 * a thread pool for C; OpenMP's team is the kernels'.) */
#ifndef GS_BASE_WORKERS_H
#define GS_BASE_WORKERS_H

#include <pthread.h>
#include <stdbool.h>

typedef struct gs_work {
  void (*run)(struct gs_work *w); /* called once, on a worker thread */
  struct gs_work *next;           /* the queue's */
} gs_work;

typedef struct gs_workers gs_workers;

/* Starts n threads (1 to 256). Returns NULL with the error set where none
 * could start; fewer than n is accepted. Freed by gs_workers_stop. */
gs_workers *gs_workers_start(int n);
/* Queues w; w->run(w) is called later on one of the threads, which then
 * no longer touches w. */
void gs_workers_queue(gs_workers *ws, gs_work *w);
/* Runs what is queued, then ends the threads and frees ws; nothing may be
 * queued from then on. NULL is a no-op. */
void gs_workers_stop(gs_workers *ws);

/* A serial queue on the workers: its items run one at a time, in the order
 * queued, and take turns with other work (one item a turn, then the serial
 * goes to the back of the workers' queue while more wait). The caller's
 * memory, like an item. */
typedef struct gs_serial {
  gs_work turn; /* the serial's own place in the workers' queue */
  gs_workers *workers;
  /* Called with true on the queuing thread when an idle serial takes an
   * item, and with false on a worker when its last item has run. The calls
   * pair up but may overlap (a new item can come while the last one's false
   * call is on its way): count them, as a reference does. The serial is not
   * touched after a false call, which may free it. */
  void (*busy)(struct gs_serial *s, bool busy);
  pthread_mutex_t lock;
  gs_work *head, *tail;
  bool running; /* queued on the workers or running there */
} gs_serial;

void gs_serial_init(gs_serial *s, gs_workers *ws, void (*busy)(gs_serial *s, bool busy));
/* Queues w behind the serial's earlier items and returns true; with
 * unless_idle, returns false instead, queuing nothing, while every earlier
 * item has run (the caller may then run w itself and stay in order). */
bool gs_serial_queue(gs_serial *s, gs_work *w, bool unless_idle);
/* For a serial that is idle (no busy(true) without its busy(false)). */
void gs_serial_destroy(gs_serial *s);

#endif

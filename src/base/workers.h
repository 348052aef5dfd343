/* workers.h - a few threads that run work items from one queue, first in,
 * first out: for work that a thread which must stay free (an event loop)
 * hands on. An item is the caller's memory, linked in place, so queueing
 * allocates nothing and cannot fail. (None of the project's libraries has
 * a thread pool for C; OpenMP's team is the kernels'.) */
#ifndef GS_BASE_WORKERS_H
#define GS_BASE_WORKERS_H

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

#endif

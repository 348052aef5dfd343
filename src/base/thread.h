/* thread.h - starting a thread that nobody joins: work handed off so that
 * the caller's thread (an HTTP thread, say) is free again at once. */
#ifndef GS_BASE_THREAD_H
#define GS_BASE_THREAD_H

#include <pthread.h>
#include <stdbool.h>

/* Runs fn(arg) on a new detached thread; false, with nothing started, when
 * no thread can be made (the caller then runs fn itself or gives up). fn
 * owns arg from the moment this returns true. */
static inline bool gs_run_detached(void *(*fn)(void *), void *arg) {
  pthread_attr_t attr;
  pthread_t t;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  bool ok = pthread_create(&t, &attr, fn, arg) == 0;
  pthread_attr_destroy(&attr);
  return ok;
}

#endif

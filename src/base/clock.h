/* clock.h - monotonic time in nanoseconds, sleeping, and condition
 * variables that wait on the same clock. */
#ifndef GS_BASE_CLOCK_H
#define GS_BASE_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t gs_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The wall clock in Unix seconds: for timestamps people and other programs
 * read (job times, holds, history), never for measuring a span. */
static inline double gs_wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline void gs_sleep_ns(uint64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* A condition variable whose timed waits count in gs_now_ns()'s clock, so
 * that setting the wall clock moves no deadline. */
static inline void gs_cond_init_monotonic(pthread_cond_t *cond) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(cond, &attr);
  pthread_condattr_destroy(&attr);
}

/* Waits on such a condition until woken or gs_now_ns() reaches deadline_ns. */
static inline void gs_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mutex,
                                      uint64_t deadline_ns) {
  struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
                        .tv_nsec = (long)(deadline_ns % 1000000000u)};
  pthread_cond_timedwait(cond, mutex, &ts);
}

#endif

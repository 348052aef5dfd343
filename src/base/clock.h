/* clock.h - monotonic time in nanoseconds, and sleeping. */
#ifndef GS_BASE_CLOCK_H
#define GS_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t gs_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void gs_sleep_ns(uint64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

#endif

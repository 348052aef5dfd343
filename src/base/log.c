/* log.c - leveled logging to stderr. */
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static int threshold = GS_LOG_WARN;
static pthread_once_t threshold_once = PTHREAD_ONCE_INIT;

int gs_log_level_parse(const char *s) {
  for (int i = 0; i < 4; i++)
    if (strcmp(s, level_names[i]) == 0)
      return i;
  return -1;
}

static void read_threshold(void) {
  const char *env = getenv("GPUSRV_LOG");
  if (!env || !*env)
    return;
  int level = gs_log_level_parse(env);
  if (level < 0)
    fprintf(stderr, "gpusrv: ignoring GPUSRV_LOG=%s: expected error, warn, info or debug\n", env);
  else
    threshold = level;
}

int gs_log_enabled(gs_log_level level) {
  pthread_once(&threshold_once, read_threshold);
  return (int)level <= threshold;
}

void gs_log(gs_log_level level, const char *component, const char *fmt, ...) {
  if (!gs_log_enabled(level))
    return;
  char line[1024];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %-5s %s: ", tm.tm_hour, tm.tm_min,
                   tm.tm_sec, ts.tv_nsec / 1000000, level_names[level], component);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof line)
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  /* One fputs per line keeps lines from different threads whole. */
  fprintf(stderr, "%s\n", line);
}

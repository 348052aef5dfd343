/* harness.c - runs each test case in a child process with a time limit. */
#include "harness.h"

#include <stdbool.h>

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void gs__test_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "    %s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stderr);
  _exit(1);
}

static bool selected(const char *name, int argc, char **argv) {
  if (argc <= 1)
    return true;
  for (int i = 1; i < argc; i++)
    if (strstr(name, argv[i]))
      return true;
  return false;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void run_case(const gs_test_suite *suite, const gs_test *t) {
  if (suite->setup)
    suite->setup();
  t->fn();
  if (suite->teardown)
    suite->teardown();
}

int gs_test_run(const gs_test_suite *suite, int argc, char **argv) {
  bool nofork = getenv("GS_TEST_NOFORK") && strcmp(getenv("GS_TEST_NOFORK"), "1") == 0;
  int timeout = suite->timeout_s ? suite->timeout_s : 60;
  int passed = 0, failed = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (const gs_test *t = suite->tests; t->name; t++) {
    if (!selected(t->name, argc, argv))
      continue;
    double t0 = now_ms();
    if (nofork) {
      run_case(suite, t); /* a failure exits the process */
      printf("ok   %s.%s (%.0f ms)\n", suite->name, t->name, now_ms() - t0);
      passed++;
      continue;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      return 1;
    }
    if (pid == 0) {
      alarm((unsigned)timeout); /* SIGALRM ends a hung case */
      run_case(suite, t);
      exit(0); /* exit, not _exit: LeakSanitizer checks at exit */
    }
    /* The child ends itself at the timeout (SIGALRM); should it block that
     * signal, the parent kills it a little later. */
    int status = 0;
    bool timed_out = false;
    double deadline = t0 + (timeout + 5) * 1e3;
    for (;;) {
      pid_t w = waitpid(pid, &status, WNOHANG);
      if (w == pid)
        break;
      if (w < 0 && errno != EINTR) {
        perror("waitpid");
        return 1;
      }
      if (now_ms() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        timed_out = true;
        break;
      }
      struct timespec ts = {.tv_sec = 0, .tv_nsec = 2 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
    double ms = now_ms() - t0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      printf("ok   %s.%s (%.0f ms)\n", suite->name, t->name, ms);
      passed++;
    } else if (timed_out || (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)) {
      printf("FAIL %s.%s: timed out after %d s\n", suite->name, t->name, timeout);
      failed++;
    } else if (WIFSIGNALED(status)) {
      printf("FAIL %s.%s: killed by signal %d (%s)\n", suite->name, t->name, WTERMSIG(status),
             strsignal(WTERMSIG(status)));
      failed++;
    } else {
      printf("FAIL %s.%s (%.0f ms)\n", suite->name, t->name, ms);
      failed++;
    }
  }
  printf("%s: %d passed, %d failed\n", suite->name, passed, failed);
  if (passed + failed == 0) {
    fprintf(stderr, "%s: no test case matched the arguments\n", suite->name);
    return 1;
  }
  return failed ? 1 : 0;
}

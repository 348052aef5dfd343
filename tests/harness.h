/* harness.h - a small test runner: each test case runs in its own process
 * with a time limit, so a crash or a hang fails one case and not the suite. */
#ifndef GS_TEST_HARNESS_H
#define GS_TEST_HARNESS_H

#include "base/error.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct gs_test {
  const char *name;
  void (*fn)(void);
} gs_test;

typedef struct gs_test_suite {
  const char *name;
  const gs_test *tests; /* ends with {NULL, NULL} */
  void (*setup)(void);  /* run in each case's process before the case; may be NULL */
  void (*teardown)(void);
  int timeout_s;        /* per case; 0: 60 */
} gs_test_suite;

/* Runs the cases whose names contain argv[i] (all when none are given),
 * prints a line per case and "N passed, N failed", and returns the exit code:
 * 0 when all passed. GS_TEST_NOFORK=1 runs cases in this process (for gdb). */
int gs_test_run(const gs_test_suite *suite, int argc, char **argv);

void gs__test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

#define CHECK(cond)                                                           \
  do {                                                                        \
    if (!(cond))                                                              \
      gs__test_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond);           \
  } while (0)

#define CHECK_MSG(cond, ...)                                                  \
  do {                                                                        \
    if (!(cond))                                                              \
      gs__test_fail(__FILE__, __LINE__, __VA_ARGS__);                         \
  } while (0)

#define CHECK_EQ(a, b)                                                        \
  do {                                                                        \
    long long a_ = (long long)(a), b_ = (long long)(b);                       \
    if (a_ != b_)                                                             \
      gs__test_fail(__FILE__, __LINE__, "%s == %s failed: %lld vs %lld", #a, #b, a_, b_); \
  } while (0)

#define CHECK_STR(a, b)                                                       \
  do {                                                                        \
    const char *a_ = (a), *b_ = (b);                                          \
    if (strcmp(a_, b_) != 0)                                                  \
      gs__test_fail(__FILE__, __LINE__, "%s == %s failed: \"%s\" vs \"%s\"", #a, #b, a_, b_); \
  } while (0)

/* The call must return 0; otherwise the error's name and detail are shown. */
#define CHECK_OK(expr)                                                        \
  do {                                                                        \
    int rc_ = (expr);                                                         \
    if (rc_ != 0)                                                             \
      gs__test_fail(__FILE__, __LINE__, "%s returned %s: %s", #expr, gs_err_name(rc_), \
                    gs_error_detail());                                       \
  } while (0)

/* The call must fail with `code`. */
#define CHECK_ERR(expr, code)                                                 \
  do {                                                                        \
    int rc_ = (expr);                                                         \
    if (rc_ != (code))                                                        \
      gs__test_fail(__FILE__, __LINE__, "%s returned %s, expected %s", #expr, gs_err_name(rc_), \
                    gs_err_name(code));                                       \
  } while (0)

#endif

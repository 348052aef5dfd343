/* test_run.c - gs_run_capture: what a helper program prints, its exit
 * status or signal, output past the buffer, a missing program, the
 * deadline, and no descriptor of the caller's reaching it. */
#include "harness.h"

#include "base/error.h"
#include "base/run.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int run_sh(const char *script, bool errors_too, double timeout_s, char *out, size_t cap,
                  bool *truncated) {
  char *argv[] = {"sh", "-c", (char *)script, NULL};
  gs_run_options o = {.errors_too = errors_too, .timeout_s = timeout_s};
  return gs_run_capture(argv, &o, out, cap, truncated);
}

static void output_and_exit_status(void) {
  char out[64];
  bool truncated = true;
  CHECK_EQ(run_sh("echo hi; echo oops >&2; exit 3", false, 10, out, sizeof out, &truncated), 3);
  CHECK_STR(out, "hi\n");
  CHECK(!truncated);
  CHECK_EQ(run_sh("echo hi; echo oops >&2", true, 10, out, sizeof out, NULL), 0);
  CHECK_MSG(strstr(out, "hi\n") && strstr(out, "oops\n"), "output: %s", out);
  CHECK_EQ(run_sh("kill -TERM $$", false, 10, out, sizeof out, NULL), 128 + SIGTERM);
  CHECK_EQ(run_sh("true", false, 10, NULL, 0, NULL), 0);
}

static void output_past_the_buffer_is_dropped_and_said(void) {
  char out[16];
  bool truncated = false;
  CHECK_EQ(run_sh("yes | head -c 100000", false, 10, out, sizeof out, &truncated), 0);
  CHECK_EQ(strlen(out), sizeof out - 1);
  CHECK(truncated);
}

/* Whether a process runs: a killed one that nobody has reaped yet (its
 * parent gone, and this machine's init slow to reap) is a zombie. */
static bool running(long pid) {
  char path[64], stat[256] = "";
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return false;
  size_t n = fread(stat, 1, sizeof stat - 1, f);
  fclose(f);
  stat[n] = '\0';
  const char *state = strrchr(stat, ')');
  return state && state[1] == ' ' && state[2] != 'Z' && state[2] != 'X';
}

static void a_missing_program_and_the_deadline(void) {
  char *argv[] = {"/no/such/program", NULL};
  gs_run_options o = {.timeout_s = 10};
  CHECK_ERR(gs_run_capture(argv, &o, NULL, 0, NULL), GS_ENOENT);
  char out[64];
  /* A grandchild keeps the pipe open too: the whole session goes. */
  CHECK_ERR(run_sh("echo started; sleep 30 & sleep 30", false, 0.5, out, sizeof out, NULL),
            GS_ETIMEDOUT);
  CHECK_STR(out, "started\n");
  /* It ends, but what it started holds its output: not a whole answer. */
  char pidfile[] = "/tmp/gs-test-run-XXXXXX";
  int fd = mkstemp(pidfile);
  CHECK(fd >= 0);
  close(fd);
  char script[128];
  snprintf(script, sizeof script, "sleep 30 & echo $! > %s; exit 0", pidfile);
  CHECK_ERR(run_sh(script, false, 0.5, out, sizeof out, NULL), GS_ETIMEDOUT);
  FILE *f = fopen(pidfile, "r");
  long pid = 0;
  CHECK(f && fscanf(f, "%ld", &pid) == 1 && pid > 0);
  fclose(f);
  unlink(pidfile);
  for (int i = 0; i < 100 && running(pid); i++)
    usleep(10000);
  CHECK_MSG(!running(pid), "process %ld outlived the deadline", pid);
}

static void no_descriptor_of_the_callers_reaches_it(void) {
  CHECK(dup2(0, 57) == 57); /* not close-on-exec */
  char out[256];
  CHECK_EQ(run_sh("ls /proc/self/fd", false, 10, out, sizeof out, NULL), 0);
  CHECK_MSG(strstr(out, "57") == NULL, "descriptors: %s", out);
  close(57);
}

static const gs_test tests[] = {
    {"output_and_exit_status", output_and_exit_status},
    {"output_past_the_buffer_is_dropped_and_said", output_past_the_buffer_is_dropped_and_said},
    {"a_missing_program_and_the_deadline", a_missing_program_and_the_deadline},
    {"no_descriptor_of_the_callers_reaches_it", no_descriptor_of_the_callers_reaches_it},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  gs_test_suite suite = {.name = "run", .tests = tests};
  return gs_test_run(&suite, argc, argv);
}

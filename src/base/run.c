/* run.c - see run.h. */
#include "base/run.h"

#include "base/clock.h"
#include "base/error.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Reads what the child writes until it closes its end (true) or the
 * deadline comes, or reading fails (false); *dropped: more came than `out`
 * holds. */
static bool read_output(int fd, char *out, size_t cap, uint64_t deadline, bool *dropped) {
  size_t used = 0;
  char sink[4096];
  *dropped = false;
  if (cap == 0)
    out = NULL;
  if (out)
    out[0] = '\0';
  for (;;) {
    uint64_t now = gs_now_ns();
    if (now >= deadline)
      return false;
    uint64_t ms = (deadline - now) / 1000000 + 1;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int ready = poll(&p, 1, ms > 60000 ? 60000 : (int)ms);
    if (ready < 0 && errno != EINTR)
      return false;
    if (ready <= 0)
      continue;
    bool room = out && used + 1 < cap;
    ssize_t n = read(fd, room ? out + used : sink, room ? cap - 1 - used : sizeof sink);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return false;
    if (n == 0)
      return true;
    if (room) {
      used += (size_t)n;
      out[used] = '\0';
    } else {
      *dropped = true;
    }
  }
}

/* Kills the child's session and reaps it. */
static void kill_and_reap(pid_t pid) {
  kill(-pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
}

static pid_t spawn(char *const argv[], const gs_run_options *o, int out_fd, int *err) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  if (o->errors_too)
    posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
  else
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3); /* none of the daemon's sockets */
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETSID);
  pid_t pid = -1;
  *err = posix_spawnp(&pid, argv[0], &fa, &attr, argv, o->envp ? o->envp : environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  return *err ? -1 : pid;
}

int gs_run_capture(char *const argv[], const gs_run_options *o, char *out, size_t cap,
                   bool *truncated) {
  if (truncated)
    *truncated = false;
  if (out && cap)
    out[0] = '\0';
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0)
    return gs_error(GS_EIO, "cannot run %s: %s", argv[0], strerror(errno));
  int err;
  pid_t pid = spawn(argv, o, pipefd[1], &err);
  close(pipefd[1]);
  if (pid < 0) {
    close(pipefd[0]);
    return gs_error(err == ENOENT ? GS_ENOENT : GS_EIO, "cannot run %s: %s", argv[0],
                    strerror(err));
  }
  /* At most about 11 days; a negative or NaN limit gives it no time. */
  double limit = o->timeout_s > 0 ? (o->timeout_s < 1e6 ? o->timeout_s : 1e6) : 0;
  uint64_t deadline = gs_now_ns() + (uint64_t)(limit * 1e9);
  bool dropped;
  bool whole = read_output(pipefd[0], out, cap, deadline, &dropped);
  close(pipefd[0]);
  if (truncated)
    *truncated = dropped;
  if (!whole) { /* past the deadline (or unreadable): what came may be part of it */
    kill_and_reap(pid);
    return gs_error(GS_ETIMEDOUT, "%s took longer than %.0f s", argv[0], limit);
  }
  int status = 0;
  for (;;) { /* it may close its output and go on */
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid)
      break;
    if (r < 0 && errno != EINTR) {
      int e = errno;
      kill_and_reap(pid);
      return gs_error(GS_EIO, "waiting for %s: %s", argv[0], strerror(e));
    }
    if (gs_now_ns() >= deadline) {
      kill_and_reap(pid);
      return gs_error(GS_ETIMEDOUT, "%s took longer than %.0f s", argv[0], limit);
    }
    gs_sleep_ns(5 * 1000 * 1000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

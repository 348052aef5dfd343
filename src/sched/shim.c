/* shim.c - `gpusrv-job-shim DIR`: the supervisor of one job. The daemon
 * starts it (in its own session) and it outlives the daemon if need be:
 * it makes the job's cgroup, starts the command as the tenant's user with
 * its logs, passes SIGTERM on (and turns SIGUSR1 into SIGKILL of every
 * process of the job), copies the job's output into its logs up to the
 * daemon's limit, and when the command ends kills what it left behind and
 * writes DIR/exit.json, which the daemon (this one or the next) reads. */
#include "sched/shim.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/fileutil.h"
#include "sched/cgroup.h"
#include "sched/container.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char **string_array(json_t *arr) {
  size_t n = json_array_size(arr);
  char **out = calloc(n + 1, sizeof *out);
  for (size_t i = 0; out && i < n; i++)
    out[i] = (char *)json_string_value(json_array_get(arr, i));
  return out;
}

/* A log is the supervisor's (root's, under the daemon): the job writes
 * through a pipe, and must not reach the file and grow it past its limit. */
static int open_log(const char *dir, const char *name) {
  char path[800];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
}

/* One of the job's output streams: the pipe it writes, the log it goes to,
 * and how much more the log may take (the rest is dropped, once said). */
typedef struct log_stream {
  int pipe;  /* read end; -1 once it reached its end */
  int file;
  uint64_t room;
  bool full;
} log_stream;

/* Copies what the pipe holds now into the log; false at its end (or on an
 * error), when it is closed. */
static bool copy_output(log_stream *l, uint64_t max) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(l->pipe, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return true;
    if (n <= 0) {
      close(l->pipe);
      l->pipe = -1;
      return false;
    }
    size_t keep = (uint64_t)n < l->room ? (size_t)n : (size_t)l->room;
    if (keep > 0 && write(l->file, buf, keep) == (ssize_t)keep)
      l->room -= keep;
    if (keep < (size_t)n && !l->full) {
      l->full = true;
      dprintf(l->file, "\n[gpusrv: this log reached its limit of %llu bytes (--job-log-max); "
                       "the rest of the job's output is dropped]\n", (unsigned long long)max);
    }
  }
}

/* A pipe for one stream of the job, its log's room given what it holds. */
static int open_stream(log_stream *l, int file, uint64_t max, int *child_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0)
    return -1;
  struct stat sb;
  uint64_t used = fstat(file, &sb) == 0 ? (uint64_t)sb.st_size : 0; /* a requeued job's */
  *l = (log_stream){.pipe = fds[0], .file = file, .room = used < max ? max - used : 0};
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  *child_end = fds[1];
  return 0;
}

/* In the child, between fork and exec: become the job. Never returns. */
static void become_job(const gs_cgroup *cg, bool have_cg, int out, int err, uid_t uid, gid_t gid,
                       const char *user, const char *cwd, char **argv, char **env) {
  setpgid(0, 0);
  if (have_cg && gs_cgroup_enter(cg) < 0)
    dprintf(err, "gpusrv: cannot enter the job's cgroup: %s\n", gs_error_detail());
  int null = open("/dev/null", O_RDONLY);
  dup2(null, 0);
  if (null > 0)
    close(null);
  dup2(out, 1);
  dup2(err, 2);
  /* Default dispositions and an empty mask, whatever this process had. The
   * raw calls: glibc's own leave its two internal real-time signals alone
   * (posix_spawn left them ignored and blocked), and a threaded job needs
   * them (setuid across threads, cancellation). */
  struct {
    void *handler;
    unsigned long flags;
    void *restorer;
    uint64_t mask;
  } dfl = {SIG_DFL, 0, NULL, 0};
  for (int sig = 1; sig <= 64; sig++)
    if (sig != SIGKILL && sig != SIGSTOP)
      syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask);
  uint64_t none = 0;
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof none);
  if (geteuid() == 0 || getuid() != uid) {
    if (initgroups(user, gid) < 0 || setgid(gid) < 0 || setuid(uid) < 0) {
      fprintf(stderr, "gpusrv: cannot become user '%s' (uid %u): %s\n", user, (unsigned)uid,
              strerror(errno));
      _exit(126);
    }
  }
  if (chdir(cwd) < 0) {
    fprintf(stderr, "gpusrv: cannot enter the working directory %s: %s\n", cwd, strerror(errno));
    _exit(126);
  }
  umask(022); /* the supervisor's own 077 is not the job's */
  /* execvp searches the job's PATH (execvpe would search this process's). */
  environ = env;
  execvp(argv[0], argv);
  fprintf(stderr, "gpusrv: cannot run '%s': %s\n", argv[0], strerror(errno));
  _exit(errno == ENOENT ? 127 : 126);
}

/* A container job's variables, for podman's --env-file: the job's user
 * reads it (podman runs as that user), nobody else. */
static int write_env_file(const char *path, char **env, uid_t uid, gid_t gid) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 || fchown(fd, uid, gid) < 0) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  bool ok = true;
  for (char **e = env; *e; e++)
    ok = dprintf(fd, "%s\n", *e) > 0 && ok;
  return close(fd) == 0 && ok ? 0 : -1;
}

/* For a job in a container: podman's command line and environment in
 * place of the job's (podman, as the job's user, runs the job's command in
 * the image), its variables in DIR/container.env, and the container's name
 * (for its removal should podman be killed). */
static int container_command(const char *dir, json_t *spec, long long id, uid_t uid, gid_t gid,
                             char ***argv, char ***env, char *name, size_t name_cap) {
  const char *user = json_string_value(json_object_get(spec, "user"));
  const char *home = json_string_value(json_object_get(spec, "home"));
  const char *inside = json_string_value(json_object_get(spec, "container_workdir"));
  char env_file[800], work[800];
  snprintf(env_file, sizeof env_file, "%s/container.env", dir);
  snprintf(work, sizeof work, "%s/work", dir);
  snprintf(name, name_cap, "gpusrv-job-%lld-%d", id, (int)getpid());
  if (!home || !inside || write_env_file(env_file, *env, uid, gid) < 0)
    return -1;
  gs_container_user u = {.uid = uid, .gid = gid, .name = user, .home = home};
  char **pargv = gs_container_argv(json_object_get(spec, "container"), name, work, inside,
                                   env_file, json_object_get(spec, "cdi_devices"),
                                   json_object_get(spec, "argv"));
  char **penv = gs_podman_env(&u);
  if (!pargv || !penv) {
    gs_strings_free(pargv);
    gs_strings_free(penv);
    return -1;
  }
  free(*argv);
  free(*env);
  *argv = pargv;
  *env = penv;
  return 0;
}

/* Kills everything the job left: its process group, then its cgroup until
 * it is empty (processes that left the group are still in the cgroup). */
static void kill_all(pid_t pgid, const gs_cgroup *cg, bool have_cg) {
  kill(-pgid, SIGKILL);
  if (have_cg)
    gs_cgroup_kill_all(cg);
}

int gs_job_shim_main(const char *dir) {
  umask(077); /* its reports are root's alone: a job must not forge them */
  char path[800];
  snprintf(path, sizeof path, "%s/spec.json", dir);
  json_error_t jerr;
  json_t *spec = json_load_file(path, 0, &jerr);
  if (!spec) {
    fprintf(stderr, "gpusrv: job supervisor: cannot read %s: %s\n", path, jerr.text);
    return 1;
  }
  long long id = json_integer_value(json_object_get(spec, "id"));
  uid_t uid = (uid_t)json_integer_value(json_object_get(spec, "uid"));
  gid_t gid = (gid_t)json_integer_value(json_object_get(spec, "gid"));
  const char *user = json_string_value(json_object_get(spec, "user"));
  const char *cwd = json_string_value(json_object_get(spec, "cwd"));
  char **argv = string_array(json_object_get(spec, "argv"));
  char **env = string_array(json_object_get(spec, "env"));
  if (!user || !cwd || !argv || !env || !argv[0]) {
    fprintf(stderr, "gpusrv: job supervisor: %s is incomplete\n", path);
    return 1;
  }
  int out = open_log(dir, "stdout.log"), err = open_log(dir, "stderr.log");
  if (out < 0 || err < 0) {
    fprintf(stderr, "gpusrv: job supervisor: cannot open the logs in %s: %s\n", dir,
            strerror(errno));
    return 1;
  }
  /* argv and env are one allocation each (string_array) for a process job,
   * and lists of their own strings for a container job (owned here). */
  bool in_container = json_object_get(spec, "container") != NULL;
  char container_name[96] = "";
  if (in_container && container_command(dir, spec, id, uid, gid, &argv, &env, container_name,
                                        sizeof container_name) < 0) {
    dprintf(err, "gpusrv: cannot prepare the job's container: %s\n", strerror(errno));
    return 1;
  }
  /* Who supervises this job, for a daemon that died while starting it. */
  char pid_path[820], tmp_path[840];
  snprintf(pid_path, sizeof pid_path, "%s/supervisor.pid", dir);
  snprintf(tmp_path, sizeof tmp_path, "%s.tmp", pid_path);
  /* Without it a daemon that died while starting the job could not tell
   * that it started, and would start it again: no pid file, no job. */
  FILE *pf = fopen(tmp_path, "w");
  bool written = false;
  if (pf) {
    char boot[64] = "-";
    if (gs_boot_id(boot, sizeof boot) < 0)
      snprintf(boot, sizeof boot, "-");
    fprintf(pf, "%d %llu %s\n", (int)getpid(),
            (unsigned long long)gs_process_start_ticks((int)getpid()), boot);
    written = fclose(pf) == 0 && rename(tmp_path, pid_path) == 0;
  }
  if (!written) {
    fprintf(stderr, "gpusrv: job supervisor: cannot write %s: %s\n", pid_path, strerror(errno));
    return 1;
  }
  gs_cgroup_limits limits = {
      .memory_bytes = (uint64_t)json_integer_value(json_object_get(spec, "memory")),
      .cpus = json_number_value(json_object_get(spec, "cpus")),
      .pids_max = json_integer_value(json_object_get(spec, "pids"))};
  gs_cgroup cg;
  char name[64];
  gs_cgroup_job_name(id, name, sizeof name);
  bool have_cg = gs_cgroup_create(name, &limits, &cg) == 0;
  if (!have_cg)
    dprintf(err, "gpusrv: job %lld runs without cgroup limits: %s\n", id, gs_error_detail());

  /* Signals arrive here as events (a signalfd, beside the output pipes),
   * never asynchronously. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR1);
  sigprocmask(SIG_BLOCK, &set, NULL);
  json_int_t log_max_json = json_integer_value(json_object_get(spec, "log_max"));
  uint64_t log_max = log_max_json > 0 ? (uint64_t)log_max_json : UINT64_MAX;
  log_stream logs[2];
  int child_out, child_err;
  int sigfd = signalfd(-1, &set, SFD_CLOEXEC);
  if (sigfd < 0 || open_stream(&logs[0], out, log_max, &child_out) < 0 ||
      open_stream(&logs[1], err, log_max, &child_err) < 0) {
    dprintf(err, "gpusrv: cannot start the job: %s\n", strerror(errno));
    return 1;
  }
  pid_t child = fork();
  if (child < 0) {
    dprintf(err, "gpusrv: cannot start the job: %s\n", strerror(errno));
    return 1;
  }
  if (child == 0)
    become_job(&cg, have_cg, child_out, child_err, uid, gid, user, cwd, argv, env);
  setpgid(child, child); /* as the child does: whichever runs first */
  close(child_out);
  close(child_err);

  int status = 0;
  bool term_forwarded = false; /* it was asked to stop (cancel, time limit, preemption) */
  struct rusage ru = {0};
  for (;;) {
    struct pollfd p[3] = {{.fd = sigfd, .events = POLLIN},
                          {.fd = logs[0].pipe, .events = POLLIN},
                          {.fd = logs[1].pipe, .events = POLLIN}};
    if (poll(p, 3, -1) < 0 && errno != EINTR)
      break;
    for (int k = 0; k < 2; k++)
      if (logs[k].pipe >= 0 && (p[k + 1].revents & (POLLIN | POLLHUP | POLLERR)))
        copy_output(&logs[k], log_max);
    if (!(p[0].revents & POLLIN))
      continue;
    struct signalfd_siginfo si;
    if (read(sigfd, &si, sizeof si) != (ssize_t)sizeof si)
      continue;
    int sig = (int)si.ssi_signo;
    if (sig == SIGCHLD) {
      /* Ended? Look without reaping: while the job's first process is a
       * zombie its pid, and so its process group's id, cannot be reused,
       * and the group's leftovers can be killed safely; then reap it. */
      siginfo_t ended = {0};
      if (waitid(P_PID, (id_t)child, &ended, WEXITED | WNOHANG | WNOWAIT) < 0 && errno != EINTR)
        break;
      if (ended.si_pid != child)
        continue;
      kill(-child, SIGKILL);
      while (wait4(child, &status, 0, &ru) < 0 && errno == EINTR) {
      }
      if (have_cg) /* what writes to the pipes is gone, so what they hold is all there is */
        gs_cgroup_kill_all(&cg);
      for (int k = 0; k < 2; k++)
        if (logs[k].pipe >= 0)
          copy_output(&logs[k], log_max);
      break;
    } else if (sig == SIGTERM || sig == SIGINT) {
      term_forwarded = true;
      kill(-child, SIGTERM);
      /* podman passes it to the container's processes; conmon, which
       * records how the container ended, must not get it. */
      if (have_cg && !in_container)
        gs_cgroup_signal(&cg, SIGTERM);
    } else if (sig == SIGUSR1) {
      kill_all(child, &cg, have_cg);
    }
    /* SIGHUP: the daemon's session ended; the job goes on. */
  }
  if (have_cg) /* anything that left the group is still in the cgroup */
    gs_cgroup_kill_all(&cg);

  double end_time = gs_wall_s();
  double cpu = have_cg ? gs_cgroup_cpu_seconds(&cg) : 0;
  if (cpu == 0)
    cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
          ru.ru_stime.tv_usec / 1e6;
  json_t *ex = json_pack(
      "{s:i, s:i, s:I, s:f, s:f, s:b}", "exit_code", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
      "signal", WIFSIGNALED(status) ? WTERMSIG(status) : 0, "oom_kills",
      (json_int_t)(have_cg ? gs_cgroup_oom_kills(&cg) : 0), "cpu_seconds", cpu, "end_time",
      end_time, "term_forwarded", term_forwarded);
  if (have_cg)
    gs_cgroup_remove(&cg);
  /* What a podman that was stopped or killed may have left in the user's
   * store (one that ended by itself removed its container: --rm). */
  if (in_container && (term_forwarded || !WIFEXITED(status))) {
    const char *home = json_string_value(json_object_get(spec, "home"));
    gs_container_user u = {.uid = uid, .gid = gid, .name = user, .home = home};
    const char *rm[] = {"rm", "--force", "--ignore", container_name, NULL};
    char said[1024] = "";
    int removed = gs_podman_run_as(&u, rm, said, sizeof said, true, 30);
    if (removed > 0) /* a killed conmon left no exit record: the first try records one */
      removed = gs_podman_run_as(&u, rm, said, sizeof said, true, 30);
    if (removed != 0)
      dprintf(err, "gpusrv: cannot remove container %s: %s\n", container_name,
              removed < 0 ? gs_error_detail() : said);
  }
  char tmp[820];
  snprintf(path, sizeof path, "%s/exit.json", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int rc = 0;
  if (!ex || json_dump_file(ex, tmp, JSON_COMPACT) != 0 || rename(tmp, path) != 0) {
    fprintf(stderr, "gpusrv: job supervisor: cannot write %s: %s\n", path, strerror(errno));
    rc = 1;
  }
  json_decref(ex);
  if (in_container) {
    gs_strings_free(argv);
    gs_strings_free(env);
  } else {
    free(argv);
    free(env);
  }
  json_decref(spec);
  for (int k = 0; k < 2; k++) {
    if (logs[k].pipe >= 0)
      close(logs[k].pipe);
    close(logs[k].file);
  }
  close(sigfd);
  return rc;
}

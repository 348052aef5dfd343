/* cgroup.c - a job's control group: memory, CPU and pid limits, killing
 * everything in it, and reading what it used (OOM kills, CPU time). cgroup
 * v1 (a hierarchy per controller) where the machine mounts those, else the
 * unified v2 hierarchy. Groups are made under the caller's own group, so the
 * daemon's own limits still bound its jobs. */
#include "sched/cgroup.h"

#include "base/error.h"
#include "base/fileutil.h"

#include <stdbool.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *const v1_controllers[] = {"memory", "cpu", "cpuacct", "pids"};

/* The caller's group in the hierarchy holding `controller` ("" for v2). */
static bool own_group(const char *controller, char *rel, size_t cap) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f)
    return false;
  char line[1024];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2)
      continue;
    *c2 = '\0';
    const char *list = c1 + 1;
    if (controller[0] == '\0') {
      found = list[0] == '\0' && strncmp(line, "0", 1) == 0;
    } else {
      char copy[256];
      snprintf(copy, sizeof copy, "%s", list);
      for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok && !found;
           tok = strtok_r(NULL, ",", &save))
        found = strcmp(tok, controller) == 0;
    }
    if (found)
      snprintf(rel, cap, "%s", strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1);
  }
  fclose(f);
  return found;
}

static int write_text(const char *dir, const char *file, const char *text) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "w");
  if (!f)
    return gs_error(GS_EIO, "cannot open %s: %s", path, strerror(errno));
  bool ok = fputs(text, f) >= 0;
  ok = (fclose(f) == 0) && ok;
  return ok ? GS_OK : gs_error(GS_EIO, "cannot write '%s' to %s: %s", text, path, strerror(errno));
}

/* The group and the one above it readable by all, whatever the umask
 * (the supervisor's is 077): a rootless container's runtime, running as
 * the job's user, looks its group up to mount it inside. */
static void open_to_job(const char *dir) {
  char parent[800];
  snprintf(parent, sizeof parent, "%s", dir);
  char *slash = strrchr(parent, '/');
  if (slash)
    *slash = '\0';
  chmod(parent, 0755);
  chmod(dir, 0755);
}

/* Fills the directories `name` has (or would have) under the caller's own
 * groups, making them when `make`. */
static int locate(const char *name, bool make, gs_cgroup *out) {
  memset(out, 0, sizeof *out);
  struct stat sb;
  char rel[600];
  if (stat("/sys/fs/cgroup/memory", &sb) == 0 && S_ISDIR(sb.st_mode)) {
    out->version = 1;
    for (size_t i = 0; i < sizeof v1_controllers / sizeof v1_controllers[0]; i++) {
      if (!own_group(v1_controllers[i], rel, sizeof rel))
        continue;
      char *dir = out->dirs[out->n_dirs];
      snprintf(dir, sizeof out->dirs[0], "/sys/fs/cgroup/%s%s/%s", v1_controllers[i], rel, name);
      if (make && gs_mkdir_p(dir) < 0) {
        int rc = gs_error(GS_EIO, "cannot create cgroup %s: %s", dir, strerror(errno));
        gs_cgroup_remove(out);
        return rc;
      }
      if (make)
        open_to_job(dir);
      snprintf(out->controller[out->n_dirs], sizeof out->controller[0], "%s", v1_controllers[i]);
      out->n_dirs++;
    }
    if (out->n_dirs == 0)
      return gs_error(GS_ENOTSUP, "no cgroup v1 controllers for this process");
  } else if (stat("/sys/fs/cgroup/cgroup.controllers", &sb) == 0 && own_group("", rel, sizeof rel)) {
    out->version = 2;
    char parent[700];
    snprintf(parent, sizeof parent, "/sys/fs/cgroup%s", rel);
    snprintf(out->dirs[0], sizeof out->dirs[0], "%s/%s", parent, name);
    /* A group may use a controller only when every group above it hands it
     * down: enable them level by level. (The daemon's own group holds the
     * daemon, and v2 lets a group with processes hand nothing down, so the
     * daemon belongs in a delegated subtree, e.g. systemd's Delegate= with
     * DelegateSubgroup=; otherwise the limits fail and the job says so.) */
    char level[800];
    snprintf(level, sizeof level, "%s", parent);
    for (const char *c = name; make && c && *c;) {
      const char *slash = strchr(c, '/');
      size_t n = slash ? (size_t)(slash - c) : strlen(c);
      write_text(level, "cgroup.subtree_control", "+memory +cpu +pids");
      size_t len = strlen(level);
      snprintf(level + len, sizeof level - len, "/%.*s", (int)n, c);
      if (mkdir(level, 0755) < 0 && errno != EEXIST)
        return gs_error(GS_EIO, "cannot create cgroup %s: %s", level, strerror(errno));
      c = slash ? slash + 1 : NULL;
    }
    snprintf(out->controller[0], sizeof out->controller[0], "unified");
    out->n_dirs = 1;
  } else {
    return gs_error(GS_ENOTSUP, "this machine mounts no cgroup hierarchy under /sys/fs/cgroup");
  }
  return GS_OK;
}

int gs_cgroup_open(const char *name, gs_cgroup *out) { return locate(name, false, out); }

static const char *dir_of(const gs_cgroup *cg, const char *controller) {
  for (int i = 0; i < cg->n_dirs; i++)
    if (cg->version == 2 || strcmp(cg->controller[i], controller) == 0)
      return cg->dirs[i];
  return NULL;
}

static int apply_limits(const gs_cgroup *cg, const gs_cgroup_limits *l) {
  char v[64];
  const char *d;
  int rc = GS_OK;
  if (l->memory_bytes && (d = dir_of(cg, "memory"))) {
    snprintf(v, sizeof v, "%llu", (unsigned long long)l->memory_bytes);
    rc = write_text(d, cg->version == 1 ? "memory.limit_in_bytes" : "memory.max", v);
    /* Swap would let a job grow past its limit without an OOM kill. */
    if (rc == 0 && cg->version == 1) {
      char path[1200];
      snprintf(path, sizeof path, "%s/memory.memsw.limit_in_bytes", d);
      if (access(path, F_OK) == 0)
        write_text(d, "memory.memsw.limit_in_bytes", v);
    } else if (rc == 0) {
      write_text(d, "memory.swap.max", "0");
    }
  }
  if (rc == 0 && l->cpus > 0 && (d = dir_of(cg, "cpu"))) {
    long long quota = (long long)(l->cpus * 100000 + 0.5);
    if (quota < 1000)
      quota = 1000;
    if (cg->version == 1) {
      rc = write_text(d, "cpu.cfs_period_us", "100000");
      snprintf(v, sizeof v, "%lld", quota);
      if (rc == 0)
        rc = write_text(d, "cpu.cfs_quota_us", v);
    } else {
      snprintf(v, sizeof v, "%lld 100000", quota);
      rc = write_text(d, "cpu.max", v);
    }
  }
  if (rc == 0 && l->pids_max > 0 && (d = dir_of(cg, "pids"))) {
    snprintf(v, sizeof v, "%lld", (long long)l->pids_max);
    rc = write_text(d, "pids.max", v);
  }
  return rc;
}

int gs_cgroup_create(const char *name, const gs_cgroup_limits *limits, gs_cgroup *out) {
  int rc = locate(name, true, out);
  if (rc == 0 && (rc = apply_limits(out, limits)) < 0)
    gs_cgroup_remove(out); /* no group left behind for a job that runs without it */
  return rc;
}

long long gs_cgroup_job_of_process(int pid) {
  /* The hierarchy jobs are placed in: v1's memory controller, else v2's. */
  struct stat sb;
  bool v1 = stat("/sys/fs/cgroup/memory", &sb) == 0 && S_ISDIR(sb.st_mode);
  char rel[600], prefix[700], path[64], text[4096];
  if (!own_group(v1 ? "memory" : "", rel, sizeof rel))
    return 0;
  snprintf(prefix, sizeof prefix, "%s/gpusrv/job-", rel);
  snprintf(path, sizeof path, "/proc/%d/cgroup", pid);
  if (gs_read_text_file(path, text, sizeof text) <= 0)
    return 0;
  for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2)
      continue;
    *c2 = '\0';
    bool right_line = false;
    if (v1) {
      char list[256];
      snprintf(list, sizeof list, ",%s,", c1 + 1);
      right_line = strstr(list, ",memory,") != NULL;
    } else {
      right_line = c1[1] == '\0' && strncmp(line, "0:", 2) == 0;
    }
    const char *grp = c2 + 1;
    if (!right_line || strncmp(grp, prefix, strlen(prefix)) != 0)
      continue;
    char *end;
    long long id = strtoll(grp + strlen(prefix), &end, 10);
    return id > 0 && (*end == '\0' || *end == '/') ? id : 0;
  }
  return 0;
}

void gs_cgroup_job_name(long long id, char *out, unsigned long cap) {
  snprintf(out, cap, "gpusrv/job-%lld", id);
}

int gs_cgroup_enter(const gs_cgroup *cg) {
  for (int i = 0; i < cg->n_dirs; i++) {
    int rc = write_text(cg->dirs[i], "cgroup.procs", "0");
    if (rc < 0)
      return rc;
  }
  return GS_OK;
}

/* Signals every process listed in one group; returns how many there were. */
static int signal_procs(const char *dir, int sig) {
  char path[1200];
  snprintf(path, sizeof path, "%s/cgroup.procs", dir);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  int n = 0;
  long pid;
  while (fscanf(f, "%ld", &pid) == 1) {
    if (pid > 0 && kill((pid_t)pid, sig) == 0)
      n++;
  }
  fclose(f);
  return n;
}

int gs_cgroup_signal(const gs_cgroup *cg, int sig) {
  /* Every hierarchy holds the same processes; the first is enough. */
  return cg->n_dirs ? signal_procs(cg->dirs[0], sig) : 0;
}

bool gs_cgroup_kill_all(const gs_cgroup *cg) {
  for (int round = 0; round < 200; round++) {
    if (gs_cgroup_signal(cg, SIGKILL) == 0)
      return true;
    struct timespec pause = {0, 10 * 1000 * 1000}; /* 10 ms for the kills to land */
    nanosleep(&pause, NULL);
  }
  return gs_cgroup_signal(cg, SIGKILL) == 0;
}

uint64_t gs_cgroup_oom_kills(const gs_cgroup *cg) {
  const char *d = dir_of(cg, "memory");
  if (!d)
    return 0;
  char path[1200], text[4096];
  snprintf(path, sizeof path, "%s/%s", d, cg->version == 1 ? "memory.oom_control" : "memory.events");
  if (gs_read_text_file(path, text, sizeof text) < 0)
    return 0;
  const char *p = strstr(text, "oom_kill ");
  return p ? strtoull(p + 9, NULL, 10) : 0;
}

double gs_cgroup_cpu_seconds(const gs_cgroup *cg) {
  char path[1200], text[4096];
  uint64_t v;
  if (cg->version == 1) {
    const char *d = dir_of(cg, "cpuacct");
    if (!d)
      return 0;
    snprintf(path, sizeof path, "%s/cpuacct.usage", d);
    return gs_read_u64_file(path, &v) == 0 ? (double)v / 1e9 : 0;
  }
  snprintf(path, sizeof path, "%s/cpu.stat", cg->dirs[0]);
  if (gs_read_text_file(path, text, sizeof text) < 0)
    return 0;
  const char *p = strstr(text, "usage_usec ");
  return p ? (double)strtoull(p + 11, NULL, 10) / 1e6 : 0;
}

void gs_cgroup_remove(const gs_cgroup *cg) {
  for (int i = 0; i < cg->n_dirs; i++)
    rmdir(cg->dirs[i]); /* EBUSY while processes remain; the caller kills them first */
}

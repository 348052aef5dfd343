/* cgroup.h - a job's control group (v1 or v2): limits, membership,
 * signalling everything in it, and what it used. Internal to src/sched. */
#ifndef GS_SCHED_CGROUP_H
#define GS_SCHED_CGROUP_H

#include <stdbool.h>
#include <stdint.h>

typedef struct gs_cgroup_limits {
  uint64_t memory_bytes; /* 0: none */
  double cpus;           /* 0: none */
  int64_t pids_max;      /* 0: none */
} gs_cgroup_limits;

typedef struct gs_cgroup {
  int version;        /* 1 or 2 */
  int n_dirs;         /* v1: one per controller; v2: one */
  char dirs[4][800];
  char controller[4][16];
} gs_cgroup;

/* The job whose group (under this process's own, exactly as the daemon
 * makes them) process `pid` is in; 0 if none. A group of the same name
 * elsewhere (a user's delegated subtree) does not count. */
long long gs_cgroup_job_of_process(int pid);

/* The group of job `id`: "gpusrv/job-<id>". */
void gs_cgroup_job_name(long long id, char *out, unsigned long cap);

/* Creates the group `name` ("gpusrv/job-12") under the caller's own group
 * and applies `limits`. GS_ENOTSUP when the machine has no usable cgroups,
 * GS_EIO when they cannot be written (not root). */
int gs_cgroup_create(const char *name, const gs_cgroup_limits *limits, gs_cgroup *out);
/* The existing group `name` (for one whose supervisor is gone). */
int gs_cgroup_open(const char *name, gs_cgroup *out);
/* Moves the calling process into the group. */
int gs_cgroup_enter(const gs_cgroup *cg);
/* Sends `sig` to every process in the group; returns how many it reached. */
int gs_cgroup_signal(const gs_cgroup *cg, int sig);
/* SIGKILL to the group until it is empty (a process may fork while it is
 * being killed), for up to 2 s; true if it emptied. */
bool gs_cgroup_kill_all(const gs_cgroup *cg);
uint64_t gs_cgroup_oom_kills(const gs_cgroup *cg);
double gs_cgroup_cpu_seconds(const gs_cgroup *cg);
/* Removes the group (it must be empty). */
void gs_cgroup_remove(const gs_cgroup *cg);

#endif
